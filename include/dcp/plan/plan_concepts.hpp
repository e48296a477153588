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
/// Shipped: `dcp_planner` (this library), baselines `bucket_planner`, `packed_planner`,
/// `dynamic_cp_planner`.

#include <concepts>
#include <span>
#include <string>

#include <dcp/cost/analytic.hpp>
#include <dcp/plan/plan.hpp>
#include <dcp/recompute/selective_recompute.hpp>
#include <dcp/sequence.hpp>

namespace dcp {

struct planner_tag {};

template <class P>
concept planner = std::same_as<typename P::policy_concept, planner_tag> &&  //
                  std::regular<P> &&                                         //
                  requires(const P& p, const analytic_cost& c, std::span<const sequence> batch) {
                    { p.name() } -> std::convertible_to<std::string>;
                    { p.plan(c, batch, selective_recompute{}) } -> std::same_as<plan>;
                  };

}  // namespace dcp
