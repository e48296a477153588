#pragma once
/// \file
/// What the fixed-sp baselines (`bucket_planner`, `packed_planner`) share (DESIGN section 3,
/// "Baselines"): the epoch of global batches a user tunes on, the sp values that hold every
/// sequence with all blocks checkpointed, the token capacity of a step, synchronised dealing of
/// micro-batches one per data-parallel group per iteration, and `tune_fixed_sp`, which simulates
/// every candidate sp on the workload and keeps the fastest, as a user tuning a static system
/// would. The prologues of the static planners' `tune` (`tuning_data_of`, `dynamic_cp_planner`
/// too) and of the fixed-sp planners' `plan` (`plan_fixed_sp`) are written once here.

#include <algorithm>
#include <array>
#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include <dcp/cost/cost_concepts.hpp>
#include <dcp/error.hpp>
#include <dcp/plan/plan.hpp>
#include <dcp/plan/plan_builder.hpp>
#include <dcp/plan/planning_context.hpp>
#include <dcp/plan/sequence_options.hpp>
#include <dcp/recompute/full_recompute.hpp>
#include <dcp/sample/token_budget_sampler.hpp>
#include <dcp/sequence.hpp>

namespace dcp {

/// One epoch of `data` cut into global batches of at most `budget` model tokens
/// (`cost.tokens_of`; 0 = the default 262144 * N) by `token_budget_sampler` with `seed`.
/// Every method of a comparison plans exactly these batches.
template <cost_model C>
std::vector<std::vector<sequence>> epoch_batches(const C& cost, dataset data, std::int64_t budget = 0,
                                                 std::uint64_t seed = 0) {
  if (budget == 0) budget = default_global_batch_tokens(cost.gpus());
  token_budget_sampler s(std::move(data), budget, seed, [&cost](const sequence& q) { return cost.tokens_of(q); });
  const std::int64_t count = s.batches_in_epoch(0);
  std::vector<std::vector<sequence>> out;
  out.reserve(static_cast<std::size_t>(count));
  for (std::int64_t i = 0; i < count; ++i) out.push_back(s.next().sequences);
  return out;
}

/// The epoch a static planner tunes on: `epoch_batches` of `data` taken in id order, so that
/// tuning does not depend on the order the data came in.
template <cost_model C>
std::vector<std::vector<sequence>> tuning_batches(const C& cost, std::span<const sequence> data,
                                                  std::int64_t budget, std::uint64_t seed) {
  dataset by_id(data.begin(), data.end());
  std::sort(by_id.begin(), by_id.end(), [](const sequence& a, const sequence& b) { return a.id < b.id; });
  return epoch_batches(cost, std::move(by_id), budget, seed);
}

/// What a static planner's `tune(ctx, data, budget, seed)` simulates once its knobs are valid.
struct tuning_data {
  std::vector<sequence> feasible;              ///< the sequences of the data that fit some configuration
  std::vector<std::vector<sequence>> batches;  ///< `tuning_batches` of all of the data
};

/// The `tuning_data` of `data`: a sequence that fits no configuration on `sizes` (the context's,
/// `planning_context::sp_sizes`; empty: `default_sp_sizes`) is an error naming it, or left out of
/// `feasible` under `infeasible_policy::skip` (the epoch still holds it, as the batches a run
/// plans will).
template <cost_model C>
tuning_data tuning_data_of(const C& cost, std::span<const sequence> data, infeasible_policy policy, std::int64_t budget,
                           std::uint64_t seed, std::span<const int> sizes = {}) {
  std::vector<skipped_sequence> skipped;  // a tuned planner reports skips when it plans
  tuning_data out;
  out.feasible = feasible_sequences(cost, data, policy, skipped, sizes);
  out.batches = tuning_batches(cost, data, budget, seed);
  return out;
}

/// The most copies of `one` that fit one step on `sp` GPUs with `k` checkpointed blocks
/// (0 when not even one fits).
template <cost_model C>
std::int64_t max_copies(const C& cost, const typename C::load_type& one, int sp, int k) {
  auto fits = [&](std::int64_t b) { return cost.memory(repeated_load<C>(one, b), sp, k) <= cost.capacity(); };
  if (!fits(1)) return 0;
  std::int64_t lo = 1, hi = 2;
  while (hi < (std::int64_t{1} << 40) && fits(hi)) lo = hi, hi *= 2;
  while (hi - lo > 1) {
    const std::int64_t mid = lo + (hi - lo) / 2;
    (fits(mid) ? lo : hi) = mid;
  }
  return lo;
}

/// x_max: the most tokens per GPU any feasible step holds (all blocks checkpointed). The cost
/// model's own value when it is a `token_limited_cost_model`, else measured.
template <cost_model C>
double max_tokens_per_gpu(const C& cost) {
  if constexpr (token_limited_cost_model<C>)
    return cost.max_tokens_per_gpu();
  else
    return static_cast<double>(step_token_capacity(cost, 1, cost.blocks()));
}

/// True when `s` runs alone on `sp` GPUs with every block checkpointed.
template <cost_model C>
bool fits_checkpointed(const C& cost, const sequence& s, int sp) {
  return cost.memory(cost.load_of(s), sp, cost.blocks()) <= cost.capacity();
}

/// The sizes of `sizes` (ascending; empty: `default_sp_sizes`, buddy blocks) on which every
/// sequence of `data` fits alone with all blocks checkpointed: the choices of a user who fixes
/// one sp for the whole run.
template <cost_model C>
std::vector<int> fixed_sp_candidates(const C& cost, std::span<const sequence> data, std::span<const int> sizes = {}) {
  // Memory grows with a sequence's load; the largest one decides (checked for all, to stay exact).
  std::vector<int> out;
  const std::vector<int> fallback = sizes.empty() ? default_sp_sizes(cost) : std::vector<int>{};
  for (int sp : sizes.empty() ? std::span<const int>(fallback) : sizes) {
    bool all = true;
    for (const auto& s : data)
      if (!fits_checkpointed(cost, s, sp)) {
        all = false;
        break;
      }
    if (all) out.push_back(sp);
  }
  return out;
}

/// The sequences of `batch` a fixed-sp planner with group size `sp` can run, sorted by id (a
/// plan must not depend on the order a rank received its batch in). A sequence that fits no
/// configuration at all, or none at this sp (the sp was tuned on data without it), is an error
/// naming it, or skipped and listed under `infeasible_policy::skip`.
template <cost_model C>
std::vector<sequence> fixed_sp_sequences(const C& cost, std::span<const sequence> batch, int sp,
                                         infeasible_policy policy, std::vector<skipped_sequence>& skipped) {
  check(legal_sp(cost, sp), errc::invalid_argument, [&] {
    return "sp = " + std::to_string(sp) + " is not legal on " + std::to_string(cost.gpus()) + " GPUs with " +
           std::to_string(cost.heads()) + " heads (at most N, its Ulysses part dividing the heads)";
  });
  // Feasible on some legal size (the fixed sp may be one buddy blocks do not offer).
  const auto legal = legal_sp_sizes(cost);
  std::vector<sequence> all = feasible_sequences(cost, batch, policy, skipped, std::span<const int>(legal)), out;
  out.reserve(all.size());
  for (const auto& s : all) {
    if (fits_checkpointed(cost, s, sp)) {
      out.push_back(s);
      continue;
    }
    const std::string why = "sequence " + std::to_string(s.id) + " of " + std::to_string(cost.tokens_of(s)) +
                            " tokens does not fit the fixed sp = " + std::to_string(sp) +
                            " with every block checkpointed; tune the planner on a dataset that contains it";
    if (policy == infeasible_policy::skip) skipped.push_back({s.id, cost.tokens_of(s), why});
    else throw error(errc::infeasible, why);
  }
  std::sort(out.begin(), out.end(), [](const sequence& a, const sequence& b) { return a.id < b.id; });
  return out;
}

/// What a static planner whose knob is left at 0 does: it tunes itself on the batch and plans it
/// (`p.tune(ctx, batch).plan(ctx, batch)`); a batch with no feasible sequence gives an empty plan
/// that lists the skipped ones (or `on_infeasible = error` has thrown already).
template <class Planner, any_planning_context Ctx>
plan plan_tuned_on_batch(const Planner& p, const Ctx& ctx, std::span<const sequence> batch) {
  std::vector<skipped_sequence> skipped;
  const auto sizes = ctx.sp_sizes();
  const auto feasible = feasible_sequences(ctx.cost, batch, p.on_infeasible, skipped, std::span<const int>(sizes));
  if (!feasible.empty()) return p.tune(ctx, batch).plan(ctx, batch);
  plan_builder<typename Ctx::cost_type> builder(ctx.cost, p.name());
  builder.skip(std::move(skipped));
  return std::move(builder).finish(feasible, p.loss);
}

/// A 64-bit digest of a batch's ids (in the given order), to seed per-batch randomness so that
/// the same batch gets the same plan on every rank.
inline std::uint64_t batch_digest(std::span<const sequence> batch) noexcept {
  std::uint64_t h = 0xcbf29ce484222325ull;
  for (const auto& s : batch) {
    h ^= static_cast<std::uint64_t>(s.id);
    h *= 0x100000001b3ull;
    h ^= h >> 29;
  }
  return h;
}

/// Runs `micro` (micro-batches, in order) as a static data-parallel system does: D data-parallel
/// groups, the group manager's blocks of sp ranks (D = N / sp for buddy blocks; ranks in no block
/// stay idle), micro-batch j of an iteration on block j, one micro-batch per group per iteration,
/// every iteration a round of its own that starts when the previous one's slowest group finishes
/// (the gradient all-reduce is a barrier). Every step checkpoints `k` blocks.
template <cost_model C, group_manager G>
void deal_synchronised(plan_builder<C>& builder, const G& groups, const std::vector<std::vector<sequence>>& micro,
                       int sp, int k) {
  const int d = groups.block_count(sp);
  check(d > 0, errc::invalid_argument, [&] {
    return "the group manager offers no block of sp = " + std::to_string(sp) + "; tune on its blocks";
  });
  for (std::size_t first = 0; first < micro.size(); first += static_cast<std::size_t>(d)) {
    if (first > 0) builder.barrier();
    for (int g = 0; g < d && first + static_cast<std::size_t>(g) < micro.size(); ++g)
      builder.place(builder.make_step(micro[first + static_cast<std::size_t>(g)], groups.block(sp, g), k));
  }
}

/// The one `plan(ctx, batch)` of the fixed-sp planners (`bucket_planner`, `packed_planner`) once
/// their knobs are valid: an untuned planner (`p.sp == 0`) tunes itself on the batch; otherwise
/// the sequences that run on `p.sp` (`fixed_sp_sequences`, by id), when there are any, are cut by
/// `micro_batches_of(seqs)` into micro-batches in dealing order and dealt synchronised on the
/// context's blocks of `p.sp` (`deal_synchronised`), every block checkpointed.
template <class Planner, any_planning_context Ctx, class MicroBatches>
plan plan_fixed_sp(const Planner& p, const Ctx& ctx, std::span<const sequence> batch, MicroBatches&& micro_batches_of) {
  if (p.sp == 0) return plan_tuned_on_batch(p, ctx, batch);
  const auto& cost = ctx.cost;
  std::vector<skipped_sequence> skipped;
  const auto seqs = fixed_sp_sequences(cost, batch, p.sp, p.on_infeasible, skipped);
  plan_builder<typename Ctx::cost_type> builder(cost, p.name());
  builder.skip(std::move(skipped));
  if (!seqs.empty()) {
    const std::vector<std::vector<sequence>> micro = micro_batches_of(std::span<const sequence>(seqs));
    deal_synchronised(builder, ctx.groups, micro, p.sp, cost.blocks());
  }
  return std::move(builder).finish(seqs, p.loss);
}

/// Fractions of the largest micro-batch that fits which a user of a static system tries: a
/// full micro-batch can leave data-parallel groups without work when the global batch holds
/// fewer micro-batches than there are groups, so smaller micro-batches can be faster.
inline constexpr std::array<double, 6> fill_candidates{1.0, 0.5, 0.25, 0.125, 0.0625, 0.03125};

/// The outcome of tuning a static planner: the sp and fill chosen and the epoch seconds of every
/// candidate.
struct fixed_sp_tuning {
  int sp = 0;
  double fill = 1.0;
  std::vector<std::tuple<int, double, double>> seconds;  ///< (sp, fill, summed makespans of the epoch)
  friend bool operator==(const fixed_sp_tuning&, const fixed_sp_tuning&) = default;
};

/// Tunes a static planner as a user would: every sp of `fixed_sp_candidates(cost, data, sizes)` that
/// the context's group manager offers blocks of and every fill of `fill_candidates` is simulated
/// on `batches` with the planner `configure(sp, fill)` returns (planning in `ctx`), and the pair
/// with the highest throughput (the smallest summed makespan, every candidate running the same
/// tokens) wins; ties go to the smaller sp, then the fuller micro-batch. Throws `dcp::error` when
/// no such sp holds every sequence.
template <any_planning_context Ctx, class Configure>
fixed_sp_tuning tune_fixed_sp(const Ctx& ctx, std::span<const sequence> data,
                              const std::vector<std::vector<sequence>>& batches, Configure configure) {
  const auto& cost = ctx.cost;
  const auto sizes = ctx.sp_sizes();  // legal and offered
  auto candidates = fixed_sp_candidates(cost, data, std::span<const int>(sizes));
  check(!candidates.empty(), errc::infeasible, [&] {
    return "no legal sp the group manager offers holds every sequence of the dataset with all blocks checkpointed on " +
           std::to_string(cost.gpus()) + " GPUs; use more GPUs or memory";
  });
  fixed_sp_tuning out;
  double best = std::numeric_limits<double>::infinity();
  for (int sp : candidates) {
    for (double fill : fill_candidates) {
      const auto planner = configure(sp, fill);
      double seconds = 0;
      for (const auto& b : batches) seconds += planner.plan(ctx, std::span<const sequence>(b)).makespan_s;
      out.seconds.emplace_back(sp, fill, seconds);
      if (seconds < best) best = seconds, out.sp = sp, out.fill = fill;
    }
  }
  return out;
}

/// `p.tune(planning_context{cost, full_recompute{}, default_groups(cost)}, data, budget, seed)`:
/// the one implementation of the static planners' `tune(cost, data, ...)` (they checkpoint every
/// block whatever the recompute policy).
template <class Planner, cost_model C>
Planner tune_on_default_groups(const Planner& p, const C& cost, std::span<const sequence> data, std::int64_t budget,
                               std::uint64_t sampler_seed) {
  return p.tune(planning_context{cost, full_recompute{}, default_groups(cost)}, data, budget, sampler_seed);
}

}  // namespace dcp
