#pragma once
// A user-written group manager for tests: the aligned blocks of buddy_groups, but none wider than
// one node, so a plan made with it never spans two nodes (the planners must ask the manager).

#include <ostream>

#include <dcp/group/buddy_groups.hpp>
#include <dcp/group/group_concepts.hpp>

namespace dcp_test {

struct node_local_groups {
  using policy_concept = dcp::group_manager_tag;
  int world = 1;
  int node_size = 8;

  int gpus() const noexcept { return world; }
  int gpus_per_node() const noexcept { return node_size; }
  void validate() const { dcp::buddy_groups{world, node_size}.validate(); }
  int block_count(int sp) const noexcept {
    return sp > 0 && sp <= node_size && sp <= world && (sp & (sp - 1)) == 0 ? world / sp : 0;
  }
  dcp::rank_block block(int sp, int i) const noexcept { return {i * sp, sp}; }
  dcp::rank_block block_of(int rank, int sp) const noexcept { return {rank / sp * sp, sp}; }

  friend bool operator==(const node_local_groups&, const node_local_groups&) = default;
  friend std::ostream& operator<<(std::ostream& os, const node_local_groups& g) {
    return os << "node_local_groups{N=" << g.world << ", G=" << g.node_size << "}";
  }
};
static_assert(dcp::group_manager<node_local_groups>);

}  // namespace dcp_test
