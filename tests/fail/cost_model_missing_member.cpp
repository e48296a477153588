// A cost model that opts in but lacks `work_floor` (the lower bound needs it): the bundle names
// the slot, the first requirement it misses and the fix. Twin: the same model with the member, plugged into
// a scheduler through `dcp::cost_factory`.
// dcp-expect-error: slot 'cost' needs a model of dcp::cost_model; first unmet requirement: cost_model_prices_steps \(time, memory, work_floor
#include <cstdint>
#include <ostream>
#include <type_traits>

#include <dcp/comm/local.hpp>
#include <dcp/scheduler.hpp>

// The analytic model under another name, as a user's own cost model would wrap a measured one.
struct wrapped_cost {
  using policy_concept = dcp::cost_model_tag;
  using load_type = dcp::analytic_load;

  dcp::analytic_cost inner;

  load_type load_of(const dcp::sequence& s) const noexcept { return inner.load_of(s); }
  std::int64_t tokens_of(const dcp::sequence& s) const noexcept { return inner.tokens_of(s); }
  double time(const load_type& l, int sp, int k) const noexcept { return inner.time(l, sp, k); }
  double memory(const load_type& l, int sp, int k) const noexcept { return inner.memory(l, sp, k); }
#ifndef DCP_FAIL
  double work_floor(const load_type& l, int sp, int k) const noexcept { return inner.work_floor(l, sp, k); }
#endif
  double capacity() const noexcept { return inner.capacity(); }
  int blocks() const noexcept { return inner.blocks(); }
  const dcp::parallel_layout& layout() const noexcept { return inner.layout(); }
  int gpus() const noexcept { return inner.gpus(); }
  int gpus_per_node() const noexcept { return inner.gpus_per_node(); }
  int heads() const noexcept { return inner.heads(); }

  friend bool operator==(const wrapped_cost&, const wrapped_cost&) = default;
  friend std::ostream& operator<<(std::ostream& os, const wrapped_cost& c) { return os << "wrapped_" << c.inner; }
};

template <>
struct dcp::cost_factory<wrapped_cost> {
  template <class Model>
  static wrapped_cost make(const Model& model, const dcp::device_spec& device, int gpus) {
    return {dcp::make_analytic_cost(dcp::transformer_spec(model), device, gpus)};
  }
};

using bundle = dcp::policies<wrapped_cost>;
using sched = dcp::scheduler<dcp::transformer_spec, dcp::local_comm, bundle>;
static_assert(sizeof(sched) > 0);
#ifndef DCP_FAIL
static_assert(std::is_same_v<sched::cost_type, wrapped_cost>);
#endif
