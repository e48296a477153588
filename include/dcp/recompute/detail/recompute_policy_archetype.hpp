#pragma once
/// \file
/// Private: include <dcp/recompute/recompute_concepts.hpp> instead.
///
/// `recompute_policy_archetype`: exactly what `recompute_policy` requires, so the `planner`
/// concept is checked against the concept, not against one shipped policy. Only declared.

#include <optional>

#include <dcp/cost/cost_concepts.hpp>
#include <dcp/recompute/recompute_concepts.hpp>

namespace dcp::detail {

struct recompute_policy_archetype {
  using policy_concept = recompute_policy_tag;

  template <cost_model C>
  std::optional<int> choose(const C&, const typename C::load_type&, int sp) const;

  friend bool operator==(const recompute_policy_archetype&, const recompute_policy_archetype&) = default;
};

static_assert(recompute_policy<recompute_policy_archetype>);

}  // namespace dcp::detail
