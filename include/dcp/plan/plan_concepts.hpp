#pragma once
/// \file
/// The `planner` axis: global batch -> plan.
///
/// A model of `planner` opts in with `using policy_concept = dcp::planner_tag;`, is a regular
/// value, has a `name()`, and for every cost model C has
///   `p.plan(cost, batch, recompute) -> dcp::plan` with `batch` a `std::span<const sequence>`.
/// Laws (checked by `dcp::check_plan`, used by the property tests): every sequence of the batch
/// appears in exactly one step or in `skipped`; every step fits memory; every step runs on an
/// aligned block (first rank divisible by sp, inside [0, N)); steps never overlap in time on a
/// GPU; a step starts no earlier than its members are free; loss weights of a batch sum to 1;
/// `makespan_s >= lower_bound_s`; the same input gives the same plan (`hash()`).
/// `plan` must accept every cost model and recompute policy: the concept checks it against the
/// archetypes of those concepts (`detail::cost_model_archetype`, `detail::recompute_policy_archetype`).
///
/// Optional members, each a named refinement (the scheduler and the simulator use them when
/// present):
///   - `loss_weighting_planner`: a `loss` knob (`loss_normalization`); the scheduler sets it from
///     `scheduler_options::loss` when that is set. Law: every plan's weights follow it.
///   - `skipping_planner`: an `on_infeasible` knob (`infeasible_policy`); set likewise. Law: under
///     `skip` an infeasible sequence is listed in `plan::skipped`, never lost; under `error` it throws.
///   - `bucketing_planner<P, B>`: plans by length buckets (`token_buckets`, of bucketing type B)
///     at a fixed `sp` (0: not tuned yet); the scheduler hands an untuned one the bundle's bucketing.
///   - `tunable_planner<P, C>`: `p.tune(cost, data) -> P`, a copy whose knobs are fitted to the
///     whole dataset once. Laws: the result does not depend on the order of `data`; it plans any
///     batch drawn from `data` without tuning again.
/// Shipped: `dcp_planner` (this library), baselines `bucket_planner`, `packed_planner`,
/// `dynamic_cp_planner`.

#include <concepts>
#include <span>
#include <string>

#include <dcp/cost/detail/cost_model_archetype.hpp>
#include <dcp/plan/plan.hpp>
#include <dcp/recompute/detail/recompute_policy_archetype.hpp>
#include <dcp/sequence.hpp>

namespace dcp {

struct planner_tag {};

// The named requirements of `planner`, in the order a diagnostic reports them.

/// Opts in: `using policy_concept = dcp::planner_tag;`.
template <class P>
concept planner_opts_in = std::same_as<typename P::policy_concept, planner_tag>;
/// A regular value (copyable, default-constructible, `==`).
template <class P>
concept planner_regular = std::regular<P>;
/// Named: `p.name()`, convertible to std::string.
template <class P>
concept planner_named = requires(const P& p) {
  { p.name() } -> std::convertible_to<std::string>;
};
/// Plans: `p.plan(cost, batch, recompute) -> dcp::plan` for any cost model and recompute policy.
template <class P>
concept planner_plans = requires(const P& p, const detail::cost_model_archetype& c, std::span<const sequence> batch,
                                 const detail::recompute_policy_archetype& r) {
  { p.plan(c, batch, r) } -> std::same_as<plan>;
};

template <class P>
concept planner = planner_opts_in<P> && planner_regular<P> && planner_named<P> && planner_plans<P>;

/// A planner with a loss normalisation knob (see the file comment).
template <class P>
concept loss_weighting_planner = planner<P> && requires(P& p) {
  { p.loss } -> std::convertible_to<loss_normalization>;
  p.loss = loss_normalization::token_mean;
};

/// A planner with an infeasible-sequence knob (see the file comment).
template <class P>
concept skipping_planner = planner<P> && requires(P& p) {
  { p.on_infeasible } -> std::convertible_to<infeasible_policy>;
  p.on_infeasible = infeasible_policy::skip;
};

/// A planner that plans by length buckets of type B at a fixed sp (see the file comment).
template <class P, class B>
concept bucketing_planner = planner<P> && requires(P& p, const B& b) {
  p.token_buckets = b;
  { p.sp } -> std::convertible_to<int>;
};

/// A planner whose knobs are tuned on a whole dataset under cost model C (see the file comment).
template <class P, class C>
concept tunable_planner = planner<P> && requires(const P& p, const C& c, std::span<const sequence> data) {
  { p.tune(c, data) } -> std::same_as<P>;
};

}  // namespace dcp
