#pragma once
/// \file
/// The `group_manager` axis: which GPU groups (rank blocks) a plan may use.
///
/// A model of `group_manager` opts in with `using policy_concept = dcp::group_manager_tag;` and has
///   - `g.gpus()` (N), `g.gpus_per_node()` (G), `g.validate()` (throws `dcp::error` on a bad layout);
///   - `g.block_count(sp)`: how many blocks of `sp` ranks exist; `g.block(sp, i)`: the i-th one;
///   - `g.block_of(rank, sp)`: the block of `sp` ranks that holds `rank`.
/// Laws: blocks of one size are disjoint and lie inside [0, N); a block's first rank is divisible
/// by its size; a block of size <= G lies inside one node; `block(sp, i).contains(rank)` iff
/// `block_of(rank, sp) == block(sp, i)`.
/// Shipped: `buddy_groups` (aligned power-of-two blocks). The communicator of each block is
/// created lazily and cached by the communicator layer (`<dcp/group/group_cache.hpp>`).

#include <concepts>
#include <ostream>

namespace dcp {

struct group_manager_tag {};

/// A contiguous block of ranks [first, first + size).
struct rank_block {
  int first = 0;
  int size = 1;

  constexpr int end() const noexcept { return first + size; }
  constexpr bool contains(int rank) const noexcept { return rank >= first && rank < first + size; }
  friend constexpr bool operator==(const rank_block&, const rank_block&) = default;
  friend std::ostream& operator<<(std::ostream& os, const rank_block& b) {
    return os << "[" << b.first << ", " << b.end() << ")";
  }
};

// The named requirements of `group_manager`, in the order a diagnostic reports them.

/// Opts in: `using policy_concept = dcp::group_manager_tag;`.
template <class G>
concept group_manager_opts_in = std::same_as<typename G::policy_concept, group_manager_tag>;
/// A regular value (copyable, default-constructible, `==`).
template <class G>
concept group_manager_regular = std::regular<G>;
/// Lays out blocks: `gpus()`, `gpus_per_node()`, `block_count(sp)`, `block(sp, i)`, `block_of(rank, sp)`.
template <class G>
concept group_manager_lays_out_blocks = requires(const G& g, int sp, int i) {
  { g.gpus() } -> std::convertible_to<int>;
  { g.gpus_per_node() } -> std::convertible_to<int>;
  { g.block_count(sp) } -> std::convertible_to<int>;
  { g.block(sp, i) } -> std::same_as<rank_block>;
  { g.block_of(i, sp) } -> std::same_as<rank_block>;
};
/// Checks itself: `g.validate()` throws `dcp::error` for a layout it cannot make.
template <class G>
concept group_manager_validates = requires(const G& g) { g.validate(); };

template <class G>
concept group_manager = group_manager_opts_in<G> && group_manager_regular<G> && group_manager_lays_out_blocks<G> &&
                        group_manager_validates<G>;

}  // namespace dcp
