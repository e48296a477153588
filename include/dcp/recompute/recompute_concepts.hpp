#pragma once
/// \file
/// The `recompute_policy` axis: how many blocks a micro-step checkpoints (DCP-intra).
///
/// A model of `recompute_policy` opts in with `using policy_concept = dcp::recompute_policy_tag;`
/// and has `r.choose(cost, load, sp) -> std::optional<int>`: the number of checkpointed blocks k in
/// [0, L] for a step of `load` on `sp` GPUs, or `std::nullopt` when the policy has no k that fits
/// `cost.capacity()`. Law: a returned k fits (`cost.memory(load, sp, k) <= cost.capacity()`).
/// Shipped: `no_recompute` (k = 0), `full_recompute` (k = L), `selective_recompute`
/// (the fewest blocks that fit).

#include <concepts>
#include <optional>

#include <dcp/cost/analytic.hpp>

namespace dcp {

struct recompute_policy_tag {};

template <class R>
concept recompute_policy = std::same_as<typename R::policy_concept, recompute_policy_tag> &&  //
                           std::regular<R> &&                                                 //
                           requires(const R& r, const analytic_cost& c, const analytic_load& l, int sp) {
                             { r.choose(c, l, sp) } -> std::same_as<std::optional<int>>;
                           };

}  // namespace dcp
