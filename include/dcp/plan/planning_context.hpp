#pragma once
/// \file
/// `planning_context<C, R, G>`: what a planner plans with (DESIGN section 2): the cost model that
/// prices steps, the recompute policy that picks each step's checkpointed blocks, and the group
/// manager whose blocks are the only places a step may run. The cost model is held by reference
/// (it may hold a profile table; it must outlive the context), the recompute policy and the group
/// manager by value (small regular values, so a context may be built from temporaries).
///
/// \code
/// const dcp::planning_context ctx{cost, dcp::selective_recompute{}, dcp::buddy_groups{cost.gpus(), 8}};
/// dcp::plan p = dcp::dcp_planner{}.plan(ctx, batch);
/// \endcode
///
/// Every shipped planner also has `plan(cost, batch, recompute)`, which plans on
/// `default_groups(cost)` (`plan_on_default_groups`).

#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include <dcp/cost/cost_concepts.hpp>
#include <dcp/error.hpp>
#include <dcp/group/buddy_groups.hpp>
#include <dcp/group/group_concepts.hpp>
#include <dcp/layout.hpp>
#include <dcp/plan/plan.hpp>
#include <dcp/plan/sequence_options.hpp>
#include <dcp/recompute/recompute_concepts.hpp>
#include <dcp/sequence.hpp>

namespace dcp {

template <cost_model C, recompute_policy R, group_manager G>
struct planning_context {
  using cost_type = C;
  using recompute_type = R;
  using groups_type = G;

  const C& cost;
  R recompute;
  G groups;

  /// Throws `dcp::error(errc::invalid_argument)` for a job no plan can be made for: the cost
  /// model's own `validate()` (a `validated_cost_model`), the manager's `validate()`, and a
  /// manager whose N or G is not the cost model's (both count planner units; DESIGN section 2).
  /// Every planner calls it first.
  void validate() const {
    if constexpr (validated_cost_model<C>) cost.validate();
    groups.validate();
    check(groups.gpus() == cost.gpus() && groups.gpus_per_node() == cost.gpus_per_node(), errc::invalid_argument, [&] {
      return "the group manager lays out " + std::to_string(groups.gpus()) + " units, " +
             std::to_string(groups.gpus_per_node()) + " per node, but the cost model plans " +
             std::to_string(cost.gpus()) + " units, " + std::to_string(cost.gpus_per_node()) +
             " per node (units are TP groups when tp > 1); build both for the same job";
    });
  }

  /// The job's layout, as the cost model prices it (`<dcp/layout.hpp>`): the manager lays out
  /// its units.
  parallel_layout layout() const { return cost.layout(); }

  /// The sp sizes a step may use, ascending: legal for the cost model (`legal_sp_sizes`) and
  /// offered by the manager (at least one block).
  std::vector<int> sp_sizes() const {
    std::vector<int> out = legal_sp_sizes(cost);
    std::erase_if(out, [this](int sp) { return groups.block_count(sp) <= 0; });
    return out;
  }
};

template <class C, class R, class G>
planning_context(const C&, R, G) -> planning_context<C, R, G>;

namespace detail {
template <class T>
inline constexpr bool is_planning_context = false;
template <class C, class R, class G>
inline constexpr bool is_planning_context<planning_context<C, R, G>> = true;
}  // namespace detail

/// Any `planning_context<C, R, G>`: what a planner's `plan(ctx, batch)` accepts.
template <class T>
concept any_planning_context = detail::is_planning_context<std::remove_cvref_t<T>>;

/// The group manager of a planner called without one: every aligned power-of-two block of the
/// cost model's units (`buddy_groups`).
template <cost_model C>
buddy_groups default_groups(const C& cost) {
  return {cost.gpus(), cost.gpus_per_node()};
}

/// `p.plan(planning_context{cost, recompute, default_groups(cost)}, batch)`: the one
/// implementation of every shipped planner's `plan(cost, batch, recompute)`.
template <class P, cost_model C, recompute_policy R>
plan plan_on_default_groups(const P& p, const C& cost, std::span<const sequence> batch, const R& recompute) {
  return p.plan(planning_context{cost, recompute, default_groups(cost)}, batch);
}

}  // namespace dcp
