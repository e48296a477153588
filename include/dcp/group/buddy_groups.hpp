#pragma once
/// \file
/// `buddy_groups`: aligned power-of-two rank blocks, as a buddy allocator hands them out.
/// With G a power of two, every block of size <= G lies inside one node, so sp groups stay on
/// NVLink whenever they can; larger blocks span whole nodes.

#include <bit>
#include <ostream>
#include <string>

#include <dcp/error.hpp>
#include <dcp/group/group_concepts.hpp>

namespace dcp {

struct buddy_groups {
  using policy_concept = group_manager_tag;

  int world = 1;          ///< N
  int node_size = 8;      ///< G

  int gpus() const noexcept { return world; }
  int gpus_per_node() const noexcept { return node_size; }

  /// Throws a `dcp::error` naming the value unless N > 0, G is a power of two, and N is a
  /// multiple of G once it spans more than one node.
  void validate() const {
    check(world > 0, errc::invalid_argument,
          [&] { return "gpus = " + std::to_string(world) + " must be positive"; });
    check(node_size > 0 && std::has_single_bit(static_cast<unsigned>(node_size)), errc::invalid_argument,
          [&] { return "gpus_per_node = " + std::to_string(node_size) + " must be a positive power of two"; });
    check(world <= node_size || world % node_size == 0, errc::invalid_argument, [&] {
      return "gpus = " + std::to_string(world) + " is not a multiple of gpus_per_node = " +
             std::to_string(node_size) + "; use whole nodes beyond one node";
    });
  }

  /// Blocks of `sp` ranks: N / sp of them for a power of two sp (a trailing partial block is never
  /// used), none of any other size.
  int block_count(int sp) const noexcept {
    return sp > 0 && sp <= world && std::has_single_bit(static_cast<unsigned>(sp)) ? world / sp : 0;
  }
  rank_block block(int sp, int i) const noexcept { return {i * sp, sp}; }
  rank_block block_of(int rank, int sp) const noexcept { return {rank / sp * sp, sp}; }

  friend bool operator==(const buddy_groups&, const buddy_groups&) = default;
  friend std::ostream& operator<<(std::ostream& os, const buddy_groups& g) {
    return os << "buddy_groups{N=" << g.world << ", G=" << g.node_size << "}";
  }
};

static_assert(group_manager<buddy_groups>);

}  // namespace dcp
