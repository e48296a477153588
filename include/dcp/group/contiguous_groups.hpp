#pragma once
/// \file
/// `contiguous_groups`: rank blocks of every size, as consecutive ranks that stay inside one
/// node or are made of whole nodes. A size s <= G gets floor(G / s) blocks per node, at node
/// offsets 0, s, 2 s, ... (the last G mod s ranks of each node hold no block of s); a size
/// s > G that is a multiple of G gets floor(N / s) blocks of whole nodes, at 0, s, 2 s, ...
/// Lowest rank first. With 40 heads a step may then run on 5 GPUs of a node, with 48 on 3 or
/// 6, and with 6 nodes on all 48 GPUs.
///
/// `sizes = powers_of_two` keeps the power-of-two sizes only: with G a power of two those are
/// exactly `buddy_groups`' blocks (aligned, since s divides G or G divides s), which lets one
/// manager type serve both layouts where the choice is made at run time (`dcp-sim --groups`).
///
/// Communicators: every offered size costs each member one communicator (a rank is in at most
/// one block per size); `group_cache` creates them lazily, for the sizes a plan uses. `only`
/// holds a job to a communicator budget: the sizes between 1 and N it may offer (every rank then
/// needs at most `only.size()` communicators beyond the world's); `dcp::budget_group_sizes`
/// (`<dcp/workload/tuning.hpp>`) chooses them on a workload.

#include <algorithm>
#include <bit>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include <dcp/error.hpp>
#include <dcp/group/group_concepts.hpp>

namespace dcp {

/// Which block sizes `contiguous_groups` offers.
enum class group_sizes {
  any,            ///< every size <= G and every multiple of G
  powers_of_two,  ///< the powers of two among them (`buddy_groups`' blocks)
};

inline const char* to_string(group_sizes s) noexcept { return s == group_sizes::any ? "any" : "powers_of_two"; }

/// The `group_sizes` called `name`: `any`, or `buddy` / `powers_of_two`; a `dcp::error` otherwise.
inline group_sizes group_sizes_of(const std::string& name) {
  if (name == "any") return group_sizes::any;
  if (name == "buddy" || name == "powers_of_two") return group_sizes::powers_of_two;
  throw error(errc::invalid_argument, "unknown group sizes '" + name + "'; use any or buddy (powers of two)");
}

struct contiguous_groups {
  using policy_concept = group_manager_tag;

  int world = 1;      ///< N
  int node_size = 8;  ///< G
  group_sizes sizes = group_sizes::any;
  /// When set, the only sizes s with 1 < s < N it offers (ascending, each one `sizes` allows;
  /// empty: none); sizes 1 and N need no communicator of their own and stay as `sizes` says.
  std::optional<std::vector<int>> only{};

  int gpus() const noexcept { return world; }
  int gpus_per_node() const noexcept { return node_size; }

  /// Throws a `dcp::error` naming the value unless N > 0, G > 0 (a power of two for
  /// `powers_of_two`, so that its blocks stay inside nodes), and N is a multiple of G once it
  /// spans more than one node.
  void validate() const {
    check(world > 0, errc::invalid_argument,
          [&] { return "gpus = " + std::to_string(world) + " must be positive"; });
    check(node_size > 0 && (sizes == group_sizes::any || std::has_single_bit(static_cast<unsigned>(node_size))),
          errc::invalid_argument, [&] {
            return "gpus_per_node = " + std::to_string(node_size) + " must be positive" +
                   (sizes == group_sizes::any ? std::string() : std::string(" and a power of two for power-of-two groups"));
          });
    check(world <= node_size || world % node_size == 0, errc::invalid_argument, [&] {
      return "gpus = " + std::to_string(world) + " is not a multiple of gpus_per_node = " +
             std::to_string(node_size) + "; use whole nodes beyond one node";
    });
    const std::vector<int> listed = only.value_or(std::vector<int>{});
    for (std::size_t i = 0; i < listed.size(); ++i)
      check(listed[i] > 1 && listed[i] < world && offered_by_sizes(listed[i]) && (i == 0 || listed[i - 1] < listed[i]),
            errc::invalid_argument, [&] {
              return "group size " + std::to_string(listed[i]) + " in 'only' is not a size between 1 and " +
                     std::to_string(world) + " that " + to_string(sizes) +
                     " groups offer, in ascending order; list sizes inside a node or of whole nodes";
            });
  }

  /// Whether blocks of `sp` ranks exist: inside one node (sp <= G, or the whole job when it is
  /// one partial node) or of whole nodes, and a power of two when only those are offered.
  bool offers(int sp) const noexcept {
    if (!offered_by_sizes(sp)) return false;
    return !only || sp == 1 || sp == world || std::binary_search(only->begin(), only->end(), sp);
  }
  /// `offers` without `only`.
  bool offered_by_sizes(int sp) const noexcept {
    if (sp < 1 || sp > world) return false;
    if (sizes == group_sizes::powers_of_two && !std::has_single_bit(static_cast<unsigned>(sp))) return false;
    return sp <= node_size || sp % node_size == 0;
  }
  /// Blocks per node of a size inside a node (the job's N when it is less than one node).
  int per_node(int sp) const noexcept { return (world < node_size ? world : node_size) / sp; }

  int block_count(int sp) const noexcept {
    if (!offers(sp)) return 0;
    if (sp > node_size) return world / sp;
    const int nodes = world < node_size ? 1 : world / node_size;
    return nodes * per_node(sp);
  }
  rank_block block(int sp, int i) const noexcept {
    if (sp > node_size) return {i * sp, sp};
    const int q = per_node(sp);
    return {i / q * node_size + i % q * sp, sp};
  }
  /// The block of `sp` holding `rank`; for a rank in none (the tail of a node, or of the job),
  /// the block of sp ranks starting at it, which is never offered.
  rank_block block_of(int rank, int sp) const noexcept {
    if (!offers(sp)) return {rank, sp};
    if (sp > node_size) {
      const int i = rank / sp;
      return i < world / sp ? rank_block{i * sp, sp} : rank_block{rank, sp};
    }
    const int offset = rank % node_size, j = offset / sp;
    return j < per_node(sp) ? rank_block{rank - offset + j * sp, sp} : rank_block{rank, sp};
  }

  friend bool operator==(const contiguous_groups&, const contiguous_groups&) = default;
  friend std::ostream& operator<<(std::ostream& os, const contiguous_groups& g) {
    os << "contiguous_groups{N=" << g.world << ", G=" << g.node_size << ", sizes=" << to_string(g.sizes);
    if (g.only) {
      os << ", only {";
      for (std::size_t i = 0; i < g.only->size(); ++i) os << (i ? " " : "") << (*g.only)[i];
      os << "}";
    }
    return os << "}";
  }
};

static_assert(group_manager<contiguous_groups>);

/// The power-of-two blocks of another manager `G`, the same blocks in the same order; no other
/// size. The dcp planner plans on it as well when `G` offers other sizes (DESIGN section 3.5).
template <group_manager G>
struct powers_of_two_of {
  using policy_concept = group_manager_tag;

  G groups{};

  int gpus() const noexcept { return groups.gpus(); }
  int gpus_per_node() const noexcept { return groups.gpus_per_node(); }
  void validate() const { groups.validate(); }
  int block_count(int sp) const noexcept {
    return sp > 0 && std::has_single_bit(static_cast<unsigned>(sp)) ? groups.block_count(sp) : 0;
  }
  rank_block block(int sp, int i) const noexcept { return groups.block(sp, i); }
  rank_block block_of(int rank, int sp) const noexcept { return groups.block_of(rank, sp); }

  friend bool operator==(const powers_of_two_of&, const powers_of_two_of&) = default;
  friend std::ostream& operator<<(std::ostream& os, const powers_of_two_of& g) {
    return os << "powers_of_two_of{" << g.groups << "}";
  }
};

}  // namespace dcp
