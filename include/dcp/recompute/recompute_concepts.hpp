#pragma once
/// \file
/// The `recompute_policy` axis: how many blocks a micro-step checkpoints (DCP-intra).
///
/// A model of `recompute_policy` opts in with `using policy_concept = dcp::recompute_policy_tag;`
/// and has `r.choose(cost, load, sp) -> std::optional<int>`: the number of checkpointed blocks k in
/// [0, L] for a step of `load` on `sp` GPUs, or `std::nullopt` when the policy has no k that fits
/// `cost.capacity()`. Law: a returned k fits (`cost.memory(load, sp, k) <= cost.capacity()`).
/// `choose` must accept every cost model: the concept checks it against
/// `detail::cost_model_archetype`, which has what `cost_model` requires and nothing more.
/// Shipped: `no_recompute` (k = 0), `full_recompute` (k = L), `selective_recompute`
/// (the fewest blocks that fit).

#include <concepts>
#include <optional>

#include <dcp/concept_diagnosis.hpp>
#include <dcp/cost/detail/cost_model_archetype.hpp>
#include <dcp/policy_concepts.hpp>

namespace dcp {

struct recompute_policy_tag {};

// The named requirements of `recompute_policy`, in the order a diagnostic reports them.

/// Opts in: `using policy_concept = dcp::recompute_policy_tag;`.
template <class R>
concept recompute_policy_opts_in = opts_in_with<R, recompute_policy_tag>;
/// A regular value (copyable, default-constructible, `==`).
template <class R>
concept recompute_policy_regular = std::regular<R>;
/// `r.choose(cost, load, sp) -> std::optional<int>` for any cost model.
template <class R>
concept recompute_policy_chooses = requires(const R& r, const detail::cost_model_archetype& c,
                                            const detail::cost_model_archetype::load_type& l, int sp) {
  { r.choose(c, l, sp) } -> std::same_as<std::optional<int>>;
};

template <class R>
concept recompute_policy = recompute_policy_opts_in<R> && recompute_policy_regular<R> && recompute_policy_chooses<R>;

/// The first requirement of `recompute_policy` that P misses, as one static_assert; true when P
/// models it.
template <class P>
constexpr bool diagnose_recompute_policy() {
  if constexpr (false) {
  }
  DCP_DIAGNOSE_UNMET("dcp::policies: slot 'recompute'", "recompute_policy", recompute_policy_opts_in,
                     "`using policy_concept = dcp::recompute_policy_tag;`")
  DCP_DIAGNOSE_UNMET("dcp::policies: slot 'recompute'", "recompute_policy", recompute_policy_regular,
                     "copyable, default-constructible, ==")
  DCP_DIAGNOSE_UNMET("dcp::policies: slot 'recompute'", "recompute_policy", recompute_policy_chooses,
                     "choose(cost, load, sp) -> std::optional<int> for any cost model")
  DCP_DIAGNOSE_ALL_LISTED("dcp::policies: slot 'recompute'", "recompute_policy", recompute_policy,
                          "dcp/recompute/recompute_concepts.hpp")
  return recompute_policy<P>;
}


}  // namespace dcp
