#pragma once
/// \file
/// Private: include <dcp/cost/cost_concepts.hpp> instead.
///
/// `cost_model_archetype`: exactly what `cost_model` requires and nothing more, so concepts of
/// other axes that take a cost model (`recompute_policy`, `planner`) are checked against the
/// concept, not against one shipped model. Only declared: it exists in unevaluated operands.

#include <cstdint>

#include <dcp/cost/cost_concepts.hpp>
#include <dcp/sequence.hpp>

namespace dcp::detail {

struct cost_model_archetype_load {
  friend cost_model_archetype_load operator+(const cost_model_archetype_load&, const cost_model_archetype_load&);
  friend cost_model_archetype_load operator-(const cost_model_archetype_load&, const cost_model_archetype_load&);
  friend bool operator==(const cost_model_archetype_load&, const cost_model_archetype_load&) = default;
};

struct cost_model_archetype {
  using policy_concept = cost_model_tag;
  using load_type = cost_model_archetype_load;

  load_type load_of(const sequence&) const;
  std::int64_t tokens_of(const sequence&) const;
  double time(const load_type&, int sp, int k) const;
  double memory(const load_type&, int sp, int k) const;
  double work_floor(const load_type&, int sp, int k) const;
  double capacity() const;
  int blocks() const;
  parallel_layout layout() const;
  int gpus() const;
  int gpus_per_node() const;
  int heads() const;

  friend bool operator==(const cost_model_archetype&, const cost_model_archetype&) = default;
};

static_assert(cost_model<cost_model_archetype>);
static_assert(!validated_cost_model<cost_model_archetype> && !token_limited_cost_model<cost_model_archetype>);

}  // namespace dcp::detail
