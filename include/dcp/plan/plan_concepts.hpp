#pragma once
/// \file
/// The `planner` axis: global batch -> plan.
///
/// A model of `planner` opts in with `using policy_concept = dcp::planner_tag;`, is a regular
/// value, has a `name()`, and plans in a planning context (`<dcp/plan/planning_context.hpp>`):
///   `p.plan(ctx, batch) -> dcp::plan` with `ctx` a `planning_context<C, R, G>` (cost model,
///   recompute policy, group manager) and `batch` a `std::span<const sequence>`.
/// Laws (checked by `dcp::plan_violations`, used by the property tests): every sequence of the
/// batch appears in exactly one step or in `skipped`; every step fits memory; every step runs on
/// a block `ctx.groups` offers (`groups.block(sp, i)` for some i; the planner obtains blocks from
/// the manager and never computes rank ranges itself); steps never overlap in time on a GPU; a
/// step starts no earlier than its members are free; loss weights follow the normalisation;
/// `makespan_s >= lower_bound_s`; the same input gives the same plan (`hash()`).
/// `plan` must accept every cost model, recompute policy and group manager: the concept checks it
/// against the archetypes of those concepts (`detail::cost_model_archetype`,
/// `detail::recompute_policy_archetype`, `detail::group_manager_archetype`). Every shipped planner
/// also offers `p.plan(cost, batch, recompute = {})` on `default_groups(cost)` (buddy blocks),
/// implemented once by `plan_on_default_groups`.
///
/// Optional members, each a named refinement (the scheduler and the simulator use them when
/// present):
///   - `loss_weighting_planner`: a `loss` knob (`loss_normalization`); the scheduler sets it from
///     `scheduler_options::loss` when that is set. Law: every plan's weights follow it.
///   - `skipping_planner`: an `on_infeasible` knob (`infeasible_policy`); set likewise. Law: under
///     `skip` an infeasible sequence is listed in `plan::skipped`, never lost; under `error` it throws.
///   - `straggler_aware_planner`: a `speeds` knob (per-GPU speed factors); a calibrating scheduler
///     sets it from the speeds it learned. Law: a step lasts its time over its slowest member's.
/// Customisation point with a default: `tuned_setting_of(p, cost)`, the knobs a planner was tuned
/// to, for reports (`p.tuned_setting(cost)` where it has one; "" otherwise).
/// A planner plans the batch it is given: choosing a baseline's knobs on a workload is
/// `dcp::tune` (`<dcp/workload/tuning.hpp>`), never the planner's own sampler run.
/// Shipped: `dcp_planner` (this library), baselines `bucket_planner`, `packed_planner`,
/// `dynamic_cp_planner`.

#include <concepts>
#include <span>
#include <string>
#include <vector>

#include <dcp/concept_diagnosis.hpp>
#include <dcp/cost/detail/cost_model_archetype.hpp>
#include <dcp/group/detail/group_manager_archetype.hpp>
#include <dcp/plan/plan.hpp>
#include <dcp/plan/planning_context.hpp>
#include <dcp/policy_concepts.hpp>
#include <dcp/recompute/detail/recompute_policy_archetype.hpp>
#include <dcp/sequence.hpp>

namespace dcp {

struct planner_tag {};

// The named requirements of `planner`, in the order a diagnostic reports them.

/// Opts in: `using policy_concept = dcp::planner_tag;`.
template <class P>
concept planner_opts_in = opts_in_with<P, planner_tag>;
/// A regular value (copyable, default-constructible, `==`).
template <class P>
concept planner_regular = std::regular<P>;
/// Named: `p.name()`, convertible to std::string.
template <class P>
concept planner_named = requires(const P& p) {
  { p.name() } -> std::convertible_to<std::string>;
};
namespace detail {
/// The planning context the concepts check planners against: every axis its archetype.
template <class C = cost_model_archetype>
using planning_context_archetype = planning_context<C, recompute_policy_archetype, group_manager_archetype>;
}  // namespace detail

/// Plans: `p.plan(ctx, batch) -> dcp::plan` for a planning context of any cost model, recompute
/// policy and group manager.
template <class P>
concept planner_plans = requires(const P& p, const detail::planning_context_archetype<>& ctx,
                                 std::span<const sequence> batch) {
  { p.plan(ctx, batch) } -> std::same_as<plan>;
};

template <class P>
concept planner = planner_opts_in<P> && planner_regular<P> && planner_named<P> && planner_plans<P>;

/// The first requirement of `planner` that P misses, as one static_assert; true when P models it.
template <class P>
constexpr bool diagnose_planner() {
  if constexpr (false) {
  }
  DCP_DIAGNOSE_UNMET("dcp::policies: slot 'planner'", "planner", planner_opts_in,
                     "`using policy_concept = dcp::planner_tag;`")
  DCP_DIAGNOSE_UNMET("dcp::policies: slot 'planner'", "planner", planner_regular, "copyable, default-constructible, ==")
  DCP_DIAGNOSE_UNMET("dcp::policies: slot 'planner'", "planner", planner_named, "name() -> std::string")
  DCP_DIAGNOSE_UNMET("dcp::policies: slot 'planner'", "planner", planner_plans,
                     "plan(ctx, batch) -> dcp::plan for a dcp::planning_context of any cost model, recompute policy "
                     "and group manager")
  DCP_DIAGNOSE_ALL_LISTED("dcp::policies: slot 'planner'", "planner", dcp::planner, "dcp/plan/plan_concepts.hpp")
  return dcp::planner<P>;
}


/// A planner with a loss normalisation knob (see the file comment).
template <class P>
concept loss_weighting_planner = planner<P> && requires(P& p) {
  { p.loss } -> std::convertible_to<loss_normalization>;
  p.loss = loss_normalization::token_mean;
};

/// A planner with per-GPU speed factors (see the file comment).
template <class P>
concept straggler_aware_planner = planner<P> && requires(P& p, const std::vector<double>& s) { p.speeds = s; };

/// The knobs `p` was tuned to, for reports: `p.tuned_setting(cost)` where it has one, else "".
template <class P, class C>
std::string tuned_setting_of(const P& p, const C& cost) {
  if constexpr (requires { { p.tuned_setting(cost) } -> std::convertible_to<std::string>; })
    return p.tuned_setting(cost);
  else
    return {};
}

/// A planner with an infeasible-sequence knob (see the file comment).
template <class P>
concept skipping_planner = planner<P> && requires(P& p) {
  { p.on_infeasible } -> std::convertible_to<infeasible_policy>;
  p.on_infeasible = infeasible_policy::skip;
};

}  // namespace dcp
