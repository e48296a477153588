// A planner that plans only from a cost model (the old `plan(cost, batch, recompute)`) and never
// takes a planning context: the bundle names the requirement it misses, planner_plans, and the
// context it must accept. Twin: the same planner with `plan(ctx, batch)`.
// dcp-expect-error: slot 'planner' needs a model of dcp::planner; first unmet requirement: planner_plans \(plan\(ctx, batch\)
#include <ostream>
#include <span>
#include <string>

#include <dcp/comm/local.hpp>
#include <dcp/scheduler.hpp>

struct cost_only_planner {
  using policy_concept = dcp::planner_tag;
  std::string name() const { return "cost-only"; }
#ifdef DCP_FAIL
  template <dcp::cost_model C, dcp::recompute_policy R>
  dcp::plan plan(const C& cost, std::span<const dcp::sequence> batch, const R& recompute) const {
    return dcp::dcp_planner{}.plan(cost, batch, recompute);
  }
#else
  template <dcp::any_planning_context Ctx>
  dcp::plan plan(const Ctx& ctx, std::span<const dcp::sequence> batch) const {
    return dcp::dcp_planner{}.plan(ctx, batch);
  }
#endif
  friend bool operator==(const cost_only_planner&, const cost_only_planner&) = default;
  friend std::ostream& operator<<(std::ostream& os, const cost_only_planner&) { return os << "cost_only_planner"; }
};

using bundle = dcp::policies<cost_only_planner>;
using sched = dcp::scheduler<dcp::transformer_spec, dcp::local_comm, bundle>;
static_assert(sizeof(sched) > 0);
