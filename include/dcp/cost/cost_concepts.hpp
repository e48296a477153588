#pragma once
/// \file
/// The `cost_model` axis: time and per-GPU memory of one micro-step.
///
/// A micro-step is a set of sequences run together on an aligned group of `sp` GPUs with `k`
/// of the model's blocks checkpointed. A cost model summarises the sequences of a step in an
/// additive `load_type` (so planners can grow and shrink steps in O(1)) and prices it.
///
/// A model of `cost_model` opts in with `using policy_concept = dcp::cost_model_tag;` and has
///   - `typename C::load_type`: regular, value-initialised to the empty step, with `a + b` and `a - b`;
///   - `c.load_of(seq)`: the load of one sequence; `c.tokens_of(seq)`: the tokens the model sees;
///   - `c.time(load, sp, k)`, `c.memory(load, sp, k)`: seconds and bytes per GPU of the step;
///   - `c.work_floor(load, sp, k)`: GPU-seconds the load costs at least, however it is batched
///     (used by the lower bound of DESIGN section 3);
///   - `c.capacity()` (bytes per GPU), `c.blocks()` (L), `c.gpus()` (N), `c.gpus_per_node()` (G),
///     `c.heads()` (sp must divide it).
/// Laws: time and memory are positive for a non-empty load; memory does not grow with k and
/// does not grow with sp; time does not fall with k; `work_floor(l, sp, k) <= sp * time(l, sp, k)` for every step that fits.
/// Shipped: `analytic_cost` (DESIGN section 4), `profiled_cost` (a measured table).

#include <concepts>
#include <cstdint>

#include <dcp/sequence.hpp>

namespace dcp {

struct cost_model_tag {};

template <class C>
concept cost_model =
    std::same_as<typename C::policy_concept, cost_model_tag> && std::regular<typename C::load_type> &&
    requires(const C& c, const sequence& s, const typename C::load_type& l, int sp, int k) {
      { c.load_of(s) } -> std::same_as<typename C::load_type>;
      { l + l } -> std::same_as<typename C::load_type>;
      { l - l } -> std::same_as<typename C::load_type>;
      { c.tokens_of(s) } -> std::convertible_to<std::int64_t>;
      { c.time(l, sp, k) } -> std::convertible_to<double>;
      { c.memory(l, sp, k) } -> std::convertible_to<double>;
      { c.work_floor(l, sp, k) } -> std::convertible_to<double>;
      { c.capacity() } -> std::convertible_to<double>;
      { c.blocks() } -> std::convertible_to<int>;
      { c.gpus() } -> std::convertible_to<int>;
      { c.gpus_per_node() } -> std::convertible_to<int>;
      { c.heads() } -> std::convertible_to<int>;
    };

/// True when `sp` is a legal sequence-parallel size for `c`: a power of two, at most N,
/// dividing the head count (Ulysses shards heads).
template <cost_model C>
constexpr bool legal_sp(const C& c, int sp) noexcept {
  return sp >= 1 && (sp & (sp - 1)) == 0 && sp <= c.gpus() && c.heads() % sp == 0;
}

}  // namespace dcp
