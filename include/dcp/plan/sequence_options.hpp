#pragma once
/// \file
/// Per-sequence options (DESIGN section 3 step 1): the legal sp sizes, for each the fewest
/// checkpointed blocks with which a sequence fits alone, and the token capacity of a step.

#include <algorithm>
#include <cstdint>
#include <span>
#include <vector>

#include <dcp/cost/cost_concepts.hpp>
#include <dcp/group/buddy_groups.hpp>
#include <dcp/recompute/selective_recompute.hpp>
#include <dcp/sequence.hpp>

namespace dcp {

/// One feasible way to run a sequence alone: sp GPUs, k checkpointed blocks, and the fastest
/// legal ring for that step (`fastest_ring`; 1 without Ulysses x Ring).
struct sequence_option {
  int sp = 1;
  int checkpointed_blocks = 0;
  double time_s = 0;
  double memory_bytes = 0;
  int ring = 1;
  double gpu_seconds() const noexcept { return sp * time_s; }
  friend bool operator==(const sequence_option&, const sequence_option&) = default;
};

/// The legal sp sizes of a cost model (`legal_sp`), ascending: every size <= N whose Ulysses part
/// divides the heads and whose ring is allowed, powers of two or not. A planner uses those of them
/// its group manager offers (`planning_context::sp_sizes`).
template <cost_model C>
std::vector<int> legal_sp_sizes(const C& cost) {
  std::vector<int> out;
  for (int sp = 1; sp <= cost.gpus() && sp > 0; ++sp)
    if (legal_sp(cost, sp)) out.push_back(sp);
  return out;
}

/// The sizes of `default_groups(cost)` (buddy blocks): the legal powers of two, ascending. The
/// helpers below that take no sizes (`options_of(cost, load)`, `largest_feasible_tokens(cost)`,
/// `feasible_sequences` without sizes) use them, as `planner.plan(cost, batch)` does.
template <cost_model C>
std::vector<int> default_sp_sizes(const C& cost) {
  std::vector<int> out;
  for (int sp = 1; sp <= cost.gpus() && sp > 0; sp *= 2)
    if (legal_sp(cost, sp)) out.push_back(sp);
  return out;
}

/// For each sp of `sps` (legal sizes, ascending), the fewest checkpointed blocks with which
/// `load` fits alone (if any), run with its fastest ring (memory does not depend on the ring).
template <cost_model C>
std::vector<sequence_option> options_of(const C& cost, const typename C::load_type& load, std::span<const int> sps) {
  std::vector<sequence_option> out;
  for (int sp : sps) {
    if (auto k = selective_recompute{}.choose(cost, load, sp)) {
      const ring_choice r = fastest_ring(cost, load, sp, *k);
      out.push_back({sp, *k, r.time_s, cost.memory(load, sp, *k), r.ring});
    }
  }
  return out;
}
/// `options_of` over the sizes of `default_groups(cost)` (`default_sp_sizes`).
template <cost_model C>
std::vector<sequence_option> options_of(const C& cost, const typename C::load_type& load) {
  const auto sps = default_sp_sizes(cost);
  return options_of(cost, load, std::span<const int>(sps));
}

/// The load of `count` copies of `one` (double-and-add: a `load_type` only adds).
template <cost_model C>
typename C::load_type repeated_load(const typename C::load_type& one, std::int64_t count) {
  typename C::load_type out{}, power = one;
  for (; count > 0; count >>= 1) {
    if (count & 1) out = out + power;
    power = power + power;
  }
  return out;
}

/// The memory per GPU of `window` micro-batches of load `l` each (sp GPUs, k checkpointed blocks)
/// in flight together on a pipeline's stage 0 (DESIGN 4.5): the static bytes, every micro-batch's
/// stored activations and one working set, as `in_flight_memory` counts a plan. `cost.memory`
/// itself for a window of one, or on a cost model that prices no pipeline stages.
template <cost_model C>
double memory_in_flight(const C& cost, const typename C::load_type& l, int sp, int k, int window) {
  const double one = cost.memory(l, sp, k);
  if constexpr (pipeline_cost_model<C>) {
    if (window > 1) return one + (window - 1) * (one - cost.static_memory() - cost.working_memory(l, sp));
  }
  return one;
}

/// The largest token total (as `cost.tokens_of` counts it) of one step on `sp` GPUs with `k`
/// checkpointed blocks, `window` such steps in flight together (`memory_in_flight`; 1: the step
/// alone), found on a single 1D sequence (memory depends on tokens, not on how they split into
/// sequences, in every shipped model). 0 when nothing fits.
template <cost_model C>
std::int64_t step_token_capacity(const C& cost, int sp, int k, int window = 1) {
  auto fits = [&](std::int64_t n) {
    return memory_in_flight(cost, cost.load_of(make_sequence(0, n)), sp, k, window) <= cost.capacity();
  };
  if (!fits(1)) return 0;
  std::int64_t lo = 1, hi = 2;
  while (hi < max_shape_tokens && fits(hi)) lo = hi, hi *= 2;
  while (hi - lo > 1) {
    const std::int64_t mid = lo + (hi - lo) / 2;
    (fits(mid) ? lo : hi) = mid;
  }
  return cost.tokens_of(make_sequence(0, lo));
}

/// The longest 1D sequence (tokens the model sees) that fits alone on `widest` units with every
/// block checkpointed; by default on the widest group of `default_groups(cost)`.
template <cost_model C>
std::int64_t largest_feasible_tokens(const C& cost, int widest = 0) {
  if (widest == 0) {
    const auto sps = default_sp_sizes(cost);
    widest = sps.empty() ? 0 : sps.back();
  }
  return widest == 0 ? 0 : step_token_capacity(cost, widest, cost.blocks());
}

}  // namespace dcp
