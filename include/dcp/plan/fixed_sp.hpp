#pragma once
/// \file
/// What the static baselines share once their knobs are set (DESIGN section 3, "Baselines"): the
/// uniform recompute level (`uniform_recompute`, dynamic_cp's too), what fits a static step (P
/// micro-batches in flight under pp = P), the sp values and the fewest checkpointed blocks that
/// hold every sequence, the token capacity of a step, synchronised dealing of micro-batches one
/// per data-parallel group per iteration (longest first to the least loaded group under
/// pipelines), and the one `plan` of `bucket_planner` and `packed_planner` (`plan_fixed_sp`).
/// Choosing the knobs on a workload is not here: `<dcp/workload/tuning.hpp>`.

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <numeric>
#include <ostream>
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

/// The recompute setting of a static baseline: one number of checkpointed blocks for every step
/// of the run, as its real counterpart exposes it (DESIGN section 3, "Baselines"): Megatron's
/// `--recompute-granularity full --recompute-method block --recompute-num-layers k`, torchtitan's
/// per-layer activation checkpointing, Open-Sora's `grad_checkpoint` switch (0 or L).
/// `dcp::tune` chooses it with the planner's other knobs unless `tune` is false; -1 stands for
/// every block (the default of a planner set by hand).
struct uniform_recompute {
  int blocks = -1;   ///< checkpointed blocks of every step, 0..L; -1 = all L
  bool tune = true;  ///< `dcp::tune` chooses `blocks` (false: it keeps them)

  /// The checkpointed blocks under `cost` (L for -1).
  template <cost_model C>
  int of(const C& cost) const noexcept {
    return blocks < 0 ? cost.blocks() : blocks;
  }
  /// Throws `dcp::error(errc::invalid_argument)` naming the value unless it is -1 or in [0, L].
  template <cost_model C>
  void validate(const C& cost) const {
    check(blocks >= -1 && blocks <= cost.blocks(), errc::invalid_argument, [&] {
      return "uniform_recompute blocks = " + std::to_string(blocks) + " must be in [0, " +
             std::to_string(cost.blocks()) + "] (the blocks of a stage), or -1 for all of them";
    });
  }
  friend bool operator==(const uniform_recompute&, const uniform_recompute&) = default;
  friend std::ostream& operator<<(std::ostream& os, const uniform_recompute& r) {
    return os << "uniform_recompute{blocks=" << r.blocks << ", tune=" << (r.tune ? "true" : "false") << "}";
  }
};

/// "sp 8, fill 0.25, recompute 12/48": a fixed-sp planner's tuned setting, for reports.
template <cost_model C>
std::string fixed_sp_setting(const C& cost, int sp, double fill, const uniform_recompute& r) {
  char f[32];
  std::snprintf(f, sizeof f, "%g", fill);
  return "sp " + std::to_string(sp) + ", fill " + f + ", recompute " + std::to_string(r.of(cost)) + "/" +
         std::to_string(cost.blocks());
}

/// Micro-batches a static system's stage-0 GPU holds in flight: P under 1F1B with pp = P
/// pipeline stages (Megatron's warmup), 1 without pipelines.
template <cost_model C>
int static_window(const C& cost) noexcept {
  return std::max(1, cost.layout().pp);
}

/// True when load `l` runs on `sp` GPUs with `k` checkpointed blocks as a static system runs it:
/// alone, or under pp = P as P such micro-batches in flight on stage 0 (a static system sizes its
/// micro-batch and recompute level for the full 1F1B window, whatever it holds at a moment).
template <cost_model C>
bool fits_static(const C& cost, const typename C::load_type& l, int sp, int k) {
  return memory_in_flight(cost, l, sp, k, static_window(cost)) <= cost.capacity();
}

/// The most copies of `one` that fit one static step on `sp` GPUs with `k` checkpointed blocks
/// (`fits_static`; 0 when not even one fits).
template <cost_model C>
std::int64_t max_copies(const C& cost, const typename C::load_type& one, int sp, int k) {
  auto fits = [&](std::int64_t b) { return fits_static(cost, repeated_load<C>(one, b), sp, k); };
  if (!fits(1)) return 0;
  std::int64_t lo = 1, hi = 2;
  while (hi < (std::int64_t{1} << 40) && fits(hi)) lo = hi, hi *= 2;
  while (hi - lo > 1) {
    const std::int64_t mid = lo + (hi - lo) / 2;
    (fits(mid) ? lo : hi) = mid;
  }
  return lo;
}

/// The most tokens of one static step on `sp` GPUs with `k` checkpointed blocks
/// (`step_token_capacity` over the static window).
template <cost_model C>
std::int64_t static_token_capacity(const C& cost, int sp, int k) {
  return step_token_capacity(cost, sp, k, static_window(cost));
}

/// x_max: the most tokens per GPU any feasible step holds (all blocks checkpointed, alone). The
/// cost model's own value when it is a `token_limited_cost_model`, else measured.
template <cost_model C>
double max_tokens_per_gpu(const C& cost) {
  if constexpr (token_limited_cost_model<C>)
    return cost.max_tokens_per_gpu();
  else
    return static_cast<double>(step_token_capacity(cost, 1, cost.blocks()));
}

/// x_max of a static system at `k` checkpointed blocks: the most tokens per GPU of one static step
/// (`static_token_capacity` on one GPU); `max_tokens_per_gpu(cost)` itself at k = L without
/// pipelines.
template <cost_model C>
double max_tokens_per_gpu(const C& cost, int k) {
  if (k == cost.blocks() && static_window(cost) == 1) return max_tokens_per_gpu(cost);
  return static_cast<double>(static_token_capacity(cost, 1, k));
}

/// True when `s` runs alone on `sp` GPUs with `k` checkpointed blocks as a static step
/// (`fits_static`).
template <cost_model C>
bool fits_static(const C& cost, const sequence& s, int sp, int k) {
  return fits_static(cost, cost.load_of(s), sp, k);
}

/// The sizes of `sizes` (ascending; empty: `default_sp_sizes`, buddy blocks) on which every
/// sequence of `data` runs as a static step with every block checkpointed (`fits_static`): the sp
/// values a user who fixes one sp for the whole run can choose at any recompute level.
template <cost_model C>
std::vector<int> fixed_sp_candidates(const C& cost, std::span<const sequence> data, std::span<const int> sizes = {}) {
  const int k = cost.blocks();
  // Memory grows with a sequence's load; the largest one decides (checked for all, to stay exact).
  std::vector<int> out;
  const std::vector<int> fallback = sizes.empty() ? default_sp_sizes(cost) : std::vector<int>{};
  for (int sp : sizes.empty() ? std::span<const int>(fallback) : sizes) {
    bool all = true;
    for (const auto& s : data)
      if (!fits_static(cost, s, sp, k)) {
        all = false;
        break;
      }
    if (all) out.push_back(sp);
  }
  return out;
}

/// The fewest checkpointed blocks with which every sequence of `data` runs as a static step on
/// `sp` GPUs (`fits_static`; memory never grows with k), or -1 when not even all L hold them:
/// the least setting a Megatron user finds for `--recompute-num-layers`.
template <cost_model C>
int least_uniform_recompute(const C& cost, std::span<const sequence> data, int sp) {
  auto all_fit = [&](int k) {
    return std::all_of(data.begin(), data.end(), [&](const sequence& s) { return fits_static(cost, s, sp, k); });
  };
  int lo = 0, hi = cost.blocks();
  if (!all_fit(hi)) return -1;
  while (lo < hi) {
    const int mid = lo + (hi - lo) / 2;
    if (all_fit(mid))
      hi = mid;
    else
      lo = mid + 1;
  }
  return hi;
}

/// The sequences of `batch` a fixed-sp planner with group size `sp` and `k` checkpointed blocks
/// can run, sorted by id (a plan must not depend on the order a rank received its batch in). A
/// sequence that fits no configuration at all, or not this one (the knobs were tuned on data
/// without it), is an error naming it, or skipped and listed under `infeasible_policy::skip`.
template <cost_model C>
std::vector<sequence> fixed_sp_sequences(const C& cost, std::span<const sequence> batch, int sp, int k,
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
    if (fits_static(cost, s, sp, k)) {
      out.push_back(s);
      continue;
    }
    const std::string why = "sequence " + std::to_string(s.id) + " of " + std::to_string(cost.tokens_of(s)) +
                            " tokens does not fit the fixed sp = " + std::to_string(sp) + " with " +
                            std::to_string(k) + " of " + std::to_string(cost.blocks()) +
                            " blocks checkpointed" +
                            (static_window(cost) > 1 ? " (" + std::to_string(static_window(cost)) +
                                                           " micro-batches in flight)"
                                                     : std::string()) +
                            "; tune the planner on a dataset that contains it";
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

/// Runs `micro` (micro-batches, in order) as a static data-parallel system does, on D data-parallel
/// groups, the group manager's blocks of sp ranks (D = N / sp for buddy blocks; ranks in no block
/// stay idle). Every step checkpoints `k` blocks.
/// - pp = 1: micro-batch j of an iteration on block j, one micro-batch per group per iteration,
///   every iteration a round of its own that starts when the previous one's slowest group finishes
///   (the gradient all-reduce is a barrier).
/// - pp > 1: each group runs its micro-batches as one 1F1B pipeline with the gradient all-reduce
///   after the last (Megatron's gradient accumulation): one round. A careful user balances the
///   groups: micro-batches go longest first (priced time, ties in the given order) to the group
///   with the least time so far (ties: the lower block), each group running them in that order.
template <cost_model C, group_manager G>
void deal_synchronised(plan_builder<C>& builder, const G& groups, const std::vector<std::vector<sequence>>& micro,
                       int sp, int k) {
  const int d = groups.block_count(sp);
  check(d > 0, errc::invalid_argument,
        [&] { return "the group manager offers no block of sp = " + std::to_string(sp) + "; tune on its blocks"; });
  if (builder.layout().pp == 1) {
    for (std::size_t first = 0; first < micro.size(); first += static_cast<std::size_t>(d)) {
      if (first > 0) builder.barrier();
      for (int g = 0; g < d && first + static_cast<std::size_t>(g) < micro.size(); ++g)
        builder.place(builder.make_step(micro[first + static_cast<std::size_t>(g)], groups.block(sp, g), k));
    }
    return;
  }
  std::vector<double> seconds;  // each micro-batch's time on the first block, to order them
  seconds.reserve(micro.size());
  for (const auto& m : micro) seconds.push_back(builder.make_step(m, groups.block(sp, 0), k).time_s);
  std::vector<std::size_t> order(micro.size());
  std::iota(order.begin(), order.end(), std::size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return seconds[a] > seconds[b]; });
  std::vector<double> busy(static_cast<std::size_t>(d), 0.0);
  for (std::size_t j : order) {
    const auto g = static_cast<std::size_t>(std::min_element(busy.begin(), busy.end()) - busy.begin());
    plan_step st = builder.make_step(micro[j], groups.block(sp, static_cast<int>(g)), k);
    busy[g] += st.time_s;
    builder.place(std::move(st));
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
/// context's blocks of `p.sp` (`deal_synchronised`), every step with `p.recompute_level`'s blocks
/// checkpointed.
/// `known`: the lower bounds of the sequences it plans when the caller has them (nullptr: computed).
template <class Planner, any_planning_context Ctx, class MicroBatches>
plan plan_fixed_sp(const Planner& p, const Ctx& ctx, std::span<const sequence> batch, MicroBatches&& micro_batches_of,
                   const batch_bounds* known = nullptr) {
  require_tuned(p.sp != 0, p.name(), "sp");
  const auto& cost = ctx.cost;
  p.recompute_level.validate(cost);
  const int k = p.recompute_level.of(cost);
  std::vector<skipped_sequence> skipped;
  const auto seqs = fixed_sp_sequences(cost, batch, p.sp, k, p.on_infeasible, skipped);
  plan_builder<typename Ctx::cost_type> builder(cost, p.name());
  builder.skip(std::move(skipped));
  if (!seqs.empty()) {
    const std::vector<std::vector<sequence>> micro = micro_batches_of(std::span<const sequence>(seqs));
    deal_synchronised(builder, ctx.groups, micro, p.sp, k);
  }
  if (known != nullptr) return std::move(builder).finish(*known, p.loss);
  return std::move(builder).finish(ctx.groups, seqs, p.loss);
}

}  // namespace dcp
