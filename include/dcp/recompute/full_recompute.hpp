#pragma once
/// \file
/// `full_recompute`: checkpoint every block, as static systems (bucket, packed) do.

#include <optional>
#include <ostream>

#include <dcp/cost/cost_concepts.hpp>
#include <dcp/recompute/recompute_concepts.hpp>

namespace dcp {

struct full_recompute {
  using policy_concept = recompute_policy_tag;

  template <cost_model C>
  std::optional<int> choose(const C& c, const typename C::load_type& l, int sp) const {
    const int k = c.blocks();
    if (c.memory(l, sp, k) <= c.capacity()) return k;
    return std::nullopt;
  }
  friend bool operator==(full_recompute, full_recompute) = default;
  friend std::ostream& operator<<(std::ostream& os, full_recompute) { return os << "full_recompute{}"; }
};

static_assert(recompute_policy<full_recompute>);

}  // namespace dcp
