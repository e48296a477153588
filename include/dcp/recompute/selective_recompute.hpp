#pragma once
/// \file
/// `selective_recompute`: the fewest checkpointed blocks that fit (DCP-intra, DESIGN section 3
/// step 6). Short steps recompute nothing; long ones checkpoint just enough.

#include <optional>
#include <ostream>

#include <dcp/cost/cost_concepts.hpp>
#include <dcp/recompute/recompute_concepts.hpp>

namespace dcp {

struct selective_recompute {
  using policy_concept = recompute_policy_tag;

  /// Binary search over k: memory does not grow with k (a `cost_model` law).
  template <cost_model C>
  std::optional<int> choose(const C& c, const typename C::load_type& l, int sp) const {
    // A model that can fix sp once (`analytic_cost::memory_at`) prices its per-model terms once.
    return search(c, [m = memory_of(c, sp), &l](int k) { return m(l, k); });
  }
  friend bool operator==(selective_recompute, selective_recompute) = default;
  friend std::ostream& operator<<(std::ostream& os, selective_recompute) { return os << "selective_recompute{}"; }

 private:
  template <cost_model C, class Memory>
  static std::optional<int> search(const C& c, Memory memory) {
    const double cap = c.capacity();
    int hi = c.blocks();
    if (memory(hi) > cap) return std::nullopt;
    int lo = 0;
    if (memory(lo) <= cap) return 0;
    while (hi - lo > 1) {  // memory(lo) > cap >= memory(hi)
      const int mid = lo + (hi - lo) / 2;
      (memory(mid) <= cap ? hi : lo) = mid;
    }
    return hi;
  }
};

static_assert(recompute_policy<selective_recompute>);

}  // namespace dcp
