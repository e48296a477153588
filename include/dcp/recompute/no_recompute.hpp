#pragma once
/// \file
/// `no_recompute`: never checkpoint; a step that does not fit is infeasible.

#include <optional>
#include <ostream>

#include <dcp/cost/cost_concepts.hpp>
#include <dcp/recompute/recompute_concepts.hpp>

namespace dcp {

struct no_recompute {
  using policy_concept = recompute_policy_tag;

  template <cost_model C>
  std::optional<int> choose(const C& c, const typename C::load_type& l, int sp) const {
    if (c.memory(l, sp, 0) <= c.capacity()) return 0;
    return std::nullopt;
  }
  friend bool operator==(no_recompute, no_recompute) = default;
  friend std::ostream& operator<<(std::ostream& os, no_recompute) { return os << "no_recompute{}"; }
};

static_assert(recompute_policy<no_recompute>);

}  // namespace dcp
