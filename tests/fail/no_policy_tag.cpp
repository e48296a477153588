// A type with the members of a recompute policy but no `policy_concept` tag: the bundle cannot
// tell its slot, and says how to opt in. Twin: the same type with the tag.
// dcp-expect-error: this type is not a dcp policy \(it has no `policy_concept` tag naming a slot\)
#include <optional>
#include <ostream>
#include <type_traits>

#include <dcp/comm/local.hpp>
#include <dcp/scheduler.hpp>

struct never_recompute {
#ifndef DCP_FAIL
  using policy_concept = dcp::recompute_policy_tag;
#endif
  template <dcp::cost_model C>
  std::optional<int> choose(const C& c, const typename C::load_type& l, int sp) const {
    if (c.memory(l, sp, 0) <= c.capacity()) return 0;
    return std::nullopt;
  }
  friend bool operator==(never_recompute, never_recompute) = default;
  friend std::ostream& operator<<(std::ostream& os, never_recompute) { return os << "never_recompute{}"; }
};

using bundle = dcp::policies<never_recompute>;
using sched = dcp::scheduler<dcp::transformer_spec, dcp::local_comm, bundle>;
static_assert(sizeof(sched) > 0);
#ifndef DCP_FAIL
static_assert(std::is_same_v<sched::policies_type::at<dcp::slot::recompute>, never_recompute>);
#endif
