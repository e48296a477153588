#pragma once
/// \file
/// What the fixed-sp baselines (`bucket_planner`, `packed_planner`) share once their knobs are
/// set (DESIGN section 3, "Baselines"): the sp values that hold every sequence with all blocks
/// checkpointed, the token capacity of a step, synchronised dealing of micro-batches one per
/// data-parallel group per iteration, and the one `plan` of both (`plan_fixed_sp`). Choosing the
/// knobs on a workload is not here: `<dcp/workload/tuning.hpp>`.

#include <algorithm>
#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include <dcp/cost/cost_concepts.hpp>
#include <dcp/error.hpp>
#include <dcp/plan/feasibility.hpp>
#include <dcp/plan/plan.hpp>
#include <dcp/plan/plan_builder.hpp>
#include <dcp/plan/planning_context.hpp>
#include <dcp/plan/sequence_options.hpp>
#include <dcp/sequence.hpp>

namespace dcp {

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
    if (policy == infeasible_policy::skip)
      skipped.push_back({s.id, cost.tokens_of(s), why});
    else
      throw error(errc::infeasible, why);
  }
  std::sort(out.begin(), out.end(), [](const sequence& a, const sequence& b) { return a.id < b.id; });
  return out;
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
/// (the gradient all-reduce is a barrier). Under pp > 1 a group runs its micro-batches as one 1F1B
/// pipeline with the gradient all-reduce after the last (Megatron's gradient accumulation over a
/// fixed micro-batch count): one round. Every step checkpoints `k` blocks.
template <cost_model C, group_manager G>
void deal_synchronised(plan_builder<C>& builder, const G& groups, const std::vector<std::vector<sequence>>& micro,
                       int sp, int k) {
  const int d = groups.block_count(sp);
  check(d > 0, errc::invalid_argument,
        [&] { return "the group manager offers no block of sp = " + std::to_string(sp) + "; tune on its blocks"; });
  for (std::size_t first = 0; first < micro.size(); first += static_cast<std::size_t>(d)) {
    if (first > 0 && builder.layout().pp == 1) builder.barrier();
    for (int g = 0; g < d && first + static_cast<std::size_t>(g) < micro.size(); ++g)
      builder.place(builder.make_step(micro[first + static_cast<std::size_t>(g)], groups.block(sp, g), k));
  }
}

/// Throws `dcp::error(errc::invalid_argument)` naming the tuner when a baseline's knob `knob` (of
/// planner `name`) was left at 0: a planner plans the batch it is given and never tunes itself.
inline void require_tuned(bool tuned, const std::string& name, const char* knob) {
  check(tuned, errc::invalid_argument, [&] {
    return name + " planner: " + knob +
           " = 0 is not tuned; choose it on the workload with dcp::tune(planner, ctx, data) "
           "(<dcp/workload/tuning.hpp>), or set it";
  });
}

/// The one `plan(ctx, batch)` of the fixed-sp planners (`bucket_planner`, `packed_planner`) once
/// their knobs are valid: an untuned planner (`p.sp == 0`) is an error (`require_tuned`);
/// otherwise the sequences that run on `p.sp` (`fixed_sp_sequences`, by id), when there are any, are cut by
/// `micro_batches_of(seqs)` into micro-batches in dealing order and dealt synchronised on the
/// context's blocks of `p.sp` (`deal_synchronised`), every block checkpointed.
template <class Planner, any_planning_context Ctx, class MicroBatches>
plan plan_fixed_sp(const Planner& p, const Ctx& ctx, std::span<const sequence> batch, MicroBatches&& micro_batches_of) {
  require_tuned(p.sp != 0, p.name(), "sp");
  const auto& cost = ctx.cost;
  std::vector<skipped_sequence> skipped;
  const auto seqs = fixed_sp_sequences(cost, batch, p.sp, p.on_infeasible, skipped);
  plan_builder<typename Ctx::cost_type> builder(cost, p.name());
  builder.skip(std::move(skipped));
  if (!seqs.empty()) {
    const std::vector<std::vector<sequence>> micro = micro_batches_of(std::span<const sequence>(seqs));
    deal_synchronised(builder, ctx.groups, micro, p.sp, cost.blocks());
  }
  return std::move(builder).finish(ctx.groups, seqs, p.loss);
}

}  // namespace dcp
