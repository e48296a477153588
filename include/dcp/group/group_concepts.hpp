#pragma once
/// \file
/// The `group_manager` axis: which GPU groups (rank blocks) a plan may use, and in which order a
/// planner considers them.
///
/// A model of `group_manager` opts in with `using policy_concept = dcp::group_manager_tag;` and has
///   - `g.gpus()` (N), `g.gpus_per_node()` (G), `g.validate()` (throws `dcp::error` on a bad layout);
///   - `g.block_count(sp)`: how many blocks of `sp` ranks it offers (0: none of that size);
///     `g.block(sp, i)`, i in [0, block_count(sp)): the i-th one, in the manager's order of
///     preference;
///   - `g.block_of(rank, sp)`: the offered block of `sp` ranks that holds `rank`.
/// Laws (`dcp::group_law_violations` checks them; the scheduler and `group_cache` refuse a
/// manager that breaks one): blocks of one size are disjoint and lie inside [0, N); a block of
/// size <= G lies inside one node, a wider one is made of whole nodes (its first rank and its size
/// are multiples of G); `block(sp, i).contains(rank)` iff `block_of(rank, sp) == block(sp, i)`
/// (so a rank is in at most one block per size). Sizes need not be powers of two, and blocks of
/// different sizes need not nest. Which blocks exist and their order are the manager's choice:
/// planners place every step on `block(sp, i)` and break ties between equally good blocks by the
/// lower i, and offer a sequence only the sizes with at least one block.
///
/// Units: a manager lays out the planner's ranks, the cost model's units (`cost.gpus()`,
/// `cost.gpus_per_node()`). With tp = 1 they are GPUs; with tp > 1 a unit is a TP group of tp
/// GPUs on one node (`<dcp/layout.hpp>`), so a block of sp units is the GPUs
/// `parallel_layout::gpus_of(block)`: the manager never sees TP ranks, and one manager serves every tp.
/// A planning context (`<dcp/plan/planning_context.hpp>`) requires the manager's N and G to equal
/// the cost model's.
/// `rank_block` (a block of ranks) is defined with the layout it indexes (`<dcp/layout.hpp>`).
/// Shipped: `buddy_groups` (every aligned power-of-two block, lowest rank first) and
/// `contiguous_groups` (blocks of every size inside a node or of whole nodes). The
/// communicator of each block is created lazily and cached by `<dcp/group_cache.hpp>`.

#include <concepts>

#include <dcp/concept_diagnosis.hpp>
#include <dcp/layout.hpp>
#include <dcp/policy_concepts.hpp>

namespace dcp {

struct group_manager_tag {};

// The named requirements of `group_manager`, in the order a diagnostic reports them.

/// Opts in: `using policy_concept = dcp::group_manager_tag;`.
template <class G>
concept group_manager_opts_in = opts_in_with<G, group_manager_tag>;
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

/// The first requirement of `group_manager` that P misses, as one static_assert; true when P
/// models it.
template <class P>
constexpr bool diagnose_group_manager() {
  if constexpr (false) {
  }
  DCP_DIAGNOSE_UNMET("dcp::policies: slot 'groups'", "group_manager", group_manager_opts_in,
                     "`using policy_concept = dcp::group_manager_tag;`")
  DCP_DIAGNOSE_UNMET("dcp::policies: slot 'groups'", "group_manager", group_manager_regular,
                     "copyable, default-constructible, ==")
  DCP_DIAGNOSE_UNMET("dcp::policies: slot 'groups'", "group_manager", group_manager_lays_out_blocks,
                     "gpus, gpus_per_node, block_count, block, block_of")
  DCP_DIAGNOSE_UNMET("dcp::policies: slot 'groups'", "group_manager", group_manager_validates, "validate()")
  DCP_DIAGNOSE_ALL_LISTED("dcp::policies: slot 'groups'", "group_manager", group_manager,
                          "dcp/group/group_concepts.hpp")
  return group_manager<P>;
}


}  // namespace dcp
