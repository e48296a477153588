#pragma once
/// \file
/// Private: include <dcp/group/group_concepts.hpp> instead.
///
/// `group_manager_archetype`: exactly what `group_manager` requires, so the `planner` concept is
/// checked against the concept, not against `buddy_groups`. Only declared.

#include <dcp/group/group_concepts.hpp>

namespace dcp::detail {

struct group_manager_archetype {
  using policy_concept = group_manager_tag;

  int gpus() const;
  int gpus_per_node() const;
  int block_count(int sp) const;
  rank_block block(int sp, int i) const;
  rank_block block_of(int rank, int sp) const;
  void validate() const;

  friend bool operator==(const group_manager_archetype&, const group_manager_archetype&) = default;
};

static_assert(group_manager<group_manager_archetype>);

}  // namespace dcp::detail
