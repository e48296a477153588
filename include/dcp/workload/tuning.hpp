#pragma once
/// \file
/// Choosing a planner's knobs on a workload: a static baseline's, as a user of the real system
/// does before a run (DESIGN section 3, "Baselines"), and the dcp planner's micro-batch shape under
/// pipeline stages (`pipeline_knobs`, DESIGN 4.5): one epoch of global batches cut from the dataset
/// by the sampler, every candidate setting simulated on it, the fastest kept. It lives beside the
/// workloads, not in the planners: a planner plans the batch it is given, and one whose knob is
/// left untuned (`bucket_planner::sp`, `packed_planner::sp`,
/// `dynamic_cp_planner::max_tokens_per_rank` = 0) is a `dcp::error` naming `dcp::tune` (the dcp
/// planner's pipeline knobs have defaults that tuning improves on).
///
/// \code
/// const auto bucket = dcp::tune(dcp::bucket_planner{}, cost, dataset);  // sp, fill, recompute level
/// const auto plan = bucket.plan(cost, batch);
/// \endcode
///
/// `tune(p, ctx, data, budget, seed)` keeps p's other knobs and tries only sp values the context's
/// group manager offers blocks of; `tune(p, cost, data, ...)` tunes on `default_groups(cost)`.
/// A baseline's recompute level (`uniform_recompute`) is tuned with its other knobs unless its
/// `tune` flag is off. `with_baselines(dcp, ctx, data)` hands the dcp planner the tuned baselines
/// as candidates of every batch.
/// `budget_group_sizes(ctx, data, communicators)` chooses the group sizes a job keeps within a
/// budget of communicators per rank, on the same epoch.

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <span>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include <dcp/cost/cost_concepts.hpp>
#include <dcp/error.hpp>
#include <dcp/group/contiguous_groups.hpp>
#include <dcp/plan/bucket_planner.hpp>
#include <dcp/plan/dcp_planner.hpp>
#include <dcp/plan/dynamic_cp_planner.hpp>
#include <dcp/plan/feasibility.hpp>
#include <dcp/plan/fixed_sp.hpp>
#include <dcp/plan/lower_bounds.hpp>
#include <dcp/plan/packed_planner.hpp>
#include <dcp/plan/planning_context.hpp>
#include <dcp/plan/sequence_options.hpp>
#include <dcp/recompute/full_recompute.hpp>
#include <dcp/recompute/selective_recompute.hpp>
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
std::vector<std::vector<sequence>> tuning_batches(const C& cost, std::span<const sequence> data, std::int64_t budget,
                                                  std::uint64_t seed) {
  dataset by_id(data.begin(), data.end());
  std::sort(by_id.begin(), by_id.end(), [](const sequence& a, const sequence& b) { return a.id < b.id; });
  return epoch_batches(cost, std::move(by_id), budget, seed);
}

/// What tuning simulates once a planner's other knobs are valid.
struct tuning_data {
  std::vector<sequence> feasible;              ///< the sequences of the data that fit some configuration
  std::vector<std::vector<sequence>> batches;  ///< `tuning_batches` of all of the data
};

/// The `tuning_data` of `data`: a sequence that fits no configuration on `sizes` (the context's,
/// `planning_context::sp_sizes`; empty: `default_sp_sizes`) is an error naming it, or left out of
/// `feasible` under `infeasible_policy::skip` (the epoch still holds it, as the batches a run
/// plans will). A dataset none of whose sequences fits is an error: there is nothing to tune on.
template <cost_model C>
tuning_data tuning_data_of(const C& cost, std::span<const sequence> data, infeasible_policy policy, std::int64_t budget,
                           std::uint64_t seed, std::span<const int> sizes = {}) {
  std::vector<skipped_sequence> skipped;  // a tuned planner reports skips when it plans
  tuning_data out;
  out.feasible = feasible_sequences(cost, data, policy, skipped, sizes);
  check(!out.feasible.empty(), errc::infeasible, [&] {
    return "tune: none of the " + std::to_string(data.size()) + " sequences of the dataset fits any configuration on " +
           std::to_string(cost.gpus()) +
           " GPUs, so there is nothing to tune on; tune on data that fits, or set the knob";
  });
  out.batches = tuning_batches(cost, data, budget, seed);
  return out;
}

/// Fractions of the largest micro-batch that fits which a user of a static system tries: a
/// full micro-batch can leave data-parallel groups without work when the global batch holds
/// fewer micro-batches than there are groups, so smaller micro-batches can be faster.
inline constexpr std::array<double, 6> fill_candidates{1.0, 0.5, 0.25, 0.125, 0.0625, 0.03125};

/// The per-rank token limits a user of dynamic CP tries at `k` checkpointed blocks (< 0: all L):
/// x_max at that level (`max_tokens_per_gpu(cost, k)`) times each of `fill_candidates`
/// (x_max / 1 .. / 32); none where not one token per GPU fits at that level.
template <cost_model C>
std::vector<std::int64_t> dynamic_cp_limit_candidates(const C& cost, int k = -1) {
  const double x_max = max_tokens_per_gpu(cost, k < 0 ? cost.blocks() : k);
  std::vector<std::int64_t> out;
  if (x_max < 1) return out;  // not a token per GPU fits at this level: no limit to try
  for (double f : fill_candidates) out.push_back(std::max<std::int64_t>(1, static_cast<std::int64_t>(x_max * f)));
  return out;
}

/// The recompute levels a static baseline's tuning tries on `sp` for `data`: the fewest
/// checkpointed blocks that hold every sequence (`least_uniform_recompute`, the setting a Megatron
/// user finds), and each of 0, L/4, L/2, 3L/4 and L (rounded) above it, descending; only
/// `r.of(cost)` when `r.tune` is false (empty when that does not hold the data).
template <cost_model C>
std::vector<int> recompute_candidates(const C& cost, std::span<const sequence> data, int sp,
                                      const uniform_recompute& r) {
  const int L = cost.blocks();
  if (!r.tune) {
    const int k = r.of(cost);
    const bool all = std::all_of(data.begin(), data.end(), [&](const sequence& s) { return fits_static(cost, s, sp, k); });
    return all ? std::vector<int>{k} : std::vector<int>{};
  }
  const int least = least_uniform_recompute(cost, data, sp);
  if (least < 0) return {};
  std::vector<int> out{least};
  for (int quarter = 0; quarter <= 4; ++quarter) {
    const int k = static_cast<int>(std::lround(L * quarter / 4.0));
    if (k > least) out.push_back(k);
  }
  std::sort(out.begin(), out.end(), std::greater<>());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

/// The outcome of tuning a fixed-sp planner: the sp, recompute level and fill chosen, and the
/// epoch seconds of every candidate.
struct fixed_sp_tuning {
  int sp = 0;
  int recompute_blocks = 0;
  double fill = 1.0;
  /// (sp, checkpointed blocks, fill, summed makespans of the epoch)
  std::vector<std::tuple<int, int, double, double>> seconds;
  friend bool operator==(const fixed_sp_tuning&, const fixed_sp_tuning&) = default;
};

/// Tunes a fixed-sp planner as a user would: every sp the context's group manager offers on which
/// the data fits at some level of `recompute_candidates(cost, data, sp, r)`, every such level, and
/// every fill of `fill_candidates` is simulated on `batches` with the planner
/// `configure(sp, k, fill)` returns (planning in `ctx`), and the triple with the highest
/// throughput (the smallest summed makespan, every candidate running the same tokens) wins; ties
/// go to the smaller sp, then the more checkpointed blocks (the all-checkpointed setting first),
/// then the fuller micro-batch. Throws `dcp::error` when no sp holds every sequence.
template <any_planning_context Ctx, class Configure>
fixed_sp_tuning tune_fixed_sp(const Ctx& ctx, std::span<const sequence> data,
                              const std::vector<std::vector<sequence>>& batches, const uniform_recompute& r,
                              Configure configure) {
  const auto& cost = ctx.cost;
  const auto sizes = ctx.sp_sizes();  // legal and offered
  std::vector<std::pair<int, std::vector<int>>> candidates;  // (sp, its levels)
  for (int sp : sizes)
    if (auto levels = recompute_candidates(cost, data, sp, r); !levels.empty()) candidates.emplace_back(sp, std::move(levels));
  check(!candidates.empty(), errc::infeasible, [&] {
    return "no legal sp the group manager offers holds every sequence of the dataset with " +
           (r.tune ? std::string("all") : std::to_string(r.of(cost))) + " of " + std::to_string(cost.blocks()) +
           " blocks checkpointed on " + std::to_string(cost.gpus()) + " GPUs; use more GPUs or memory";
  });
  fixed_sp_tuning out;
  double best = std::numeric_limits<double>::infinity();
  for (const auto& [sp, levels] : candidates)
    for (int k : levels)
      for (double fill : fill_candidates) {
        const auto planner = configure(sp, k, fill);
        double seconds = 0;
        for (const auto& b : batches) seconds += planner.plan(ctx, std::span<const sequence>(b)).makespan_s;
        out.seconds.emplace_back(sp, k, fill, seconds);
        if (seconds < best) best = seconds, out.sp = sp, out.recompute_blocks = k, out.fill = fill;
      }
  return out;
}

namespace detail {
/// What tuning `bucket` and `packed` share: `p` with the fastest `sp`, recompute level and `fill`
/// (`tune_fixed_sp`)
/// over one epoch of global batches of `budget` tokens (0 = 262144 * N) drawn with
/// `sampler_seed`; `finish(q, feasible)` completes each candidate `q` on the feasible data.
template <class P, any_planning_context Ctx, class Finish>
P tune_sp_and_fill(P p, const Ctx& ctx, std::span<const sequence> data, std::int64_t budget, std::uint64_t sampler_seed,
                   Finish finish) {
  ctx.validate();
  const auto sizes = ctx.sp_sizes();
  const auto on = tuning_data_of(ctx.cost, data, p.on_infeasible, budget, sampler_seed, std::span<const int>(sizes));
  auto configure = [&](int candidate, int k, double fraction) {
    P q = p;
    q.sp = candidate;
    q.recompute_level.blocks = k;
    q.fill = fraction;
    finish(q, std::span<const sequence>(on.feasible));
    return q;
  };
  const auto t = tune_fixed_sp(ctx, on.feasible, on.batches, p.recompute_level, configure);
  return configure(t.sp, t.recompute_blocks, t.fill);
}
}  // namespace detail

/// `p` with `keys` resolved on the whole dataset `data`, `sp` and `fill` the fastest candidates
/// (`tune_fixed_sp`) over one epoch of global batches of `budget` tokens (0 = 262144 * N) drawn
/// with `sampler_seed`, and `median_bucket_time_s` from the dataset's buckets on that sp.
template <any_planning_context Ctx>
bucket_planner tune(bucket_planner p, const Ctx& ctx, std::span<const sequence> data, std::int64_t budget = 0,
                    std::uint64_t sampler_seed = 0) {
  ctx.validate();
  p.token_buckets.validate();
  return detail::tune_sp_and_fill(std::move(p), ctx, data, budget, sampler_seed,
                                  [&](bucket_planner& q, std::span<const sequence> feasible) {
                                    q.keys = q.resolved_keys(feasible);
                                    q.median_bucket_time_s = q.median_time(ctx.cost, feasible, q.sp);
                                  });
}

/// `p` with `sp` and `fill` tuned on the whole dataset `data` (as for `bucket_planner`).
template <any_planning_context Ctx>
packed_planner tune(packed_planner p, const Ctx& ctx, std::span<const sequence> data, std::int64_t budget = 0,
                    std::uint64_t sampler_seed = 0) {
  return detail::tune_sp_and_fill(std::move(p), ctx, data, budget, sampler_seed,
                                  [](packed_planner&, std::span<const sequence>) {});
}

/// `p` with `max_tokens_per_rank` and its recompute level tuned on the whole dataset `data`: at
/// every level of `recompute_candidates` on the widest CP size (p's own when it does not tune
/// them), every limit of `dynamic_cp_limit_candidates` under which every sequence gets a legal CP
/// size is simulated on the id-ordered epoch of global batches of `budget` tokens (0 = the
/// default), and the pair with the smallest summed makespan wins (ties: the more checkpointed
/// blocks, then the larger limit). Order independent.
template <any_planning_context Ctx>
dynamic_cp_planner tune(dynamic_cp_planner p, const Ctx& ctx, std::span<const sequence> data, std::int64_t budget = 0,
                        std::uint64_t sampler_seed = 0) {
  ctx.validate();
  const auto& cost = ctx.cost;
  p.max_tokens_per_rank = 0;  // validates the other knobs
  p.validate(cost);
  const auto on = tuning_data_of(cost, data, p.on_infeasible, budget, sampler_seed);
  dynamic_cp_planner best = p;
  double best_seconds = std::numeric_limits<double>::infinity();
  int widest = 1;
  for (int sp : ctx.sp_sizes())
    if (std::has_single_bit(static_cast<unsigned>(sp))) widest = sp;
  for (int k : recompute_candidates(cost, on.feasible, widest, p.recompute_level))
    for (std::int64_t limit : dynamic_cp_limit_candidates(cost, k)) {
      dynamic_cp_planner q = p;
      q.recompute_level.blocks = k;
      q.max_tokens_per_rank = limit;
      if (!q.holds_all(ctx, on.feasible)) continue;
      double seconds = 0;
      for (const auto& b : on.batches) seconds += q.plan(ctx, std::span<const sequence>(b)).makespan_s;
      if (seconds < best_seconds) best_seconds = seconds, best = q;
    }
  check(best.max_tokens_per_rank > 0, errc::infeasible, [&] {
    return "no dynamic_cp per-rank token limit gives every sequence a legal CP size on " + std::to_string(cost.gpus()) +
           " GPUs; use more GPUs or memory";
  });
  return best;
}

/// The path caps (`pipeline_knobs::path_cap`, in mean sequence times) and rooms (micro-batches in
/// flight per stage) `tune` tries for the dcp planner under pipelines, every pair.
inline constexpr std::array<double, 7> path_cap_candidates{4, 8, 12, 16, 24, 32, 48};
inline constexpr std::array<int, 4> room_candidates{1, 2, 4, 8};

/// `p` with its `pipeline` knobs chosen on the whole dataset `data` where the context has pipeline
/// stages (pp > 1; elsewhere `p` as it is: the knobs do not apply). The id-ordered epoch of global
/// batches of `budget` tokens (0 = the default) drawn with `sampler_seed` is planned with p's own
/// knobs and every pair of `path_cap_candidates` x `room_candidates` (the two interact: a wider
/// cap makes longer micro-batches, which need more room); the smallest summed makespan wins
/// (ties: the pair met first, p's own first). Order independent, like every `tune`.
template <any_planning_context Ctx>
dcp_planner tune(dcp_planner p, const Ctx& ctx, std::span<const sequence> data, std::int64_t budget = 0,
                 std::uint64_t sampler_seed = 0) {
  ctx.validate();
  p.pipeline.validate();
  if (ctx.cost.layout().pp <= 1) return p;
  const auto sizes = ctx.sp_sizes();
  const auto on = tuning_data_of(ctx.cost, data, p.on_infeasible, budget, sampler_seed, std::span<const int>(sizes));
  dcp_planner best = p;
  double best_seconds = std::numeric_limits<double>::infinity();
  std::vector<pipeline_knobs> tried;
  auto attempt = [&](pipeline_knobs knobs) {
    if (std::find(tried.begin(), tried.end(), knobs) != tried.end()) return;
    tried.push_back(knobs);
    dcp_planner q = p;
    q.pipeline = knobs;
    double seconds = 0;
    for (const auto& b : on.batches) seconds += q.plan(ctx, std::span<const sequence>(b)).makespan_s;
    if (seconds < best_seconds) best_seconds = seconds, best = std::move(q);
  };
  attempt(p.pipeline);
  for (double cap : path_cap_candidates)
    for (int room : room_candidates) attempt({cap, room});
  return best;
}

/// `p` with `baselines` set to the static systems tuned in `ctx` on `data` as `tune` tunes each
/// (packed, dynamic_cp, bucket; a system that cannot be tuned in `ctx` on the data, because it
/// cannot hold a sequence or needs blocks the group manager does not offer, is left out): their plan of every batch is then one of p's candidates, so that p never plans a batch
/// slower than a tuned baseline (`dcp_planner`'s step 9). Every system keeps p's loss
/// normalisation and skip policy; bucket's shuffle seed is `sampler_seed`.
template <any_planning_context Ctx>
dcp_planner with_baselines(dcp_planner p, const Ctx& ctx, std::span<const sequence> data, std::int64_t budget = 0,
                           std::uint64_t sampler_seed = 0) {
  p.baselines.clear();
  auto add = [&](auto q) {
    q.loss = p.loss;
    q.on_infeasible = p.on_infeasible;
    try {
      p.baselines.emplace_back(tune(std::move(q), ctx, data, budget, sampler_seed));
    } catch (const error&) {
      // This system cannot run here: a sequence it cannot hold, or group shapes it needs that
      // the context's manager does not offer (a communicator budget). dcp plans without it.
    }
  };
  add(packed_planner{});
  add(dynamic_cp_planner{});
  bucket_planner bucket;
  bucket.seed = sampler_seed;
  add(bucket);
  return p;
}

/// `tune(p, planning_context{cost, selective_recompute{}, default_groups(cost)}, data, budget,
/// seed)`: the dcp planner in the context it plans in by default.
template <cost_model C>
dcp_planner tune(dcp_planner p, const C& cost, std::span<const sequence> data, std::int64_t budget = 0,
                 std::uint64_t sampler_seed = 0) {
  return tune(std::move(p), planning_context{cost, selective_recompute{}, default_groups(cost)}, data, budget,
              sampler_seed);
}

/// The groups of `ctx` held to a budget of `communicators` per rank: `contiguous_groups::only`
/// set to at most that many of the sizes between 1 and N it offers (legal for the model), so no
/// rank of a run needs more communicators than that beyond the world's. Chosen on the epoch the
/// baselines tune on (`tuning_batches`: `budget` tokens per batch, 0 = 262144 * N, drawn with
/// `sampler_seed`): `planner` (skipping what fits nowhere) plans it on every size, then, while too
/// many sizes remain, the size whose steps took the fewest GPU-seconds (ties: the narrower) is
/// dropped and the epoch planned again, passing over a size without which the planner would skip
/// a sequence it held before. Throws a `dcp::error` naming the budget and the sizes when every
/// remaining size is needed.
template <class Recompute, cost_model C, class Planner = dcp_planner>
contiguous_groups budget_group_sizes(const planning_context<C, Recompute, contiguous_groups>& ctx,
                                     std::span<const sequence> data, int communicators, Planner planner = {},
                                     std::int64_t budget = 0, std::uint64_t sampler_seed = 0) {
  ctx.validate();
  check(communicators >= 0, errc::invalid_argument, [&] {
    return "communicator budget " + std::to_string(communicators) + " must not be negative (0: sizes 1 and N only)";
  });
  planner.on_infeasible = infeasible_policy::skip;
  const int n = ctx.cost.gpus();
  contiguous_groups groups = ctx.groups;
  std::vector<int> sizes;
  for (int sp : ctx.sp_sizes())
    if (sp > 1 && sp < n) sizes.push_back(sp);
  groups.only = sizes;
  if (static_cast<int>(sizes.size()) <= communicators) return groups;
  const auto batches = tuning_batches(ctx.cost, data, budget, sampler_seed);
  struct outcome {
    std::size_t skipped = 0;
    std::vector<double> gpu_seconds;  // per size in `only`
  };
  auto run = [&](const contiguous_groups& g) {
    const planning_context on{ctx.cost, ctx.recompute, g};
    outcome out;
    const std::vector<int>& listed = *g.only;
    out.gpu_seconds.assign(listed.size(), 0.0);
    for (const auto& b : batches) {
      const plan p = planner.plan(on, std::span<const sequence>(b));
      out.skipped += p.skipped.size();
      for (const auto& st : p.steps) {
        const auto at = std::lower_bound(listed.begin(), listed.end(), st.sp());
        if (at != listed.end() && *at == st.sp())
          out.gpu_seconds[static_cast<std::size_t>(at - listed.begin())] += st.time_s * st.sp();
      }
    }
    return out;
  };
  outcome now = run(groups);
  const std::size_t held = now.skipped;
  while (static_cast<int>(groups.only->size()) > communicators) {
    std::vector<std::size_t> order(groups.only->size());
    for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::stable_sort(order.begin(), order.end(),
                     [&](std::size_t a, std::size_t b) { return now.gpu_seconds[a] < now.gpu_seconds[b]; });
    bool dropped = false;
    for (std::size_t i : order) {
      contiguous_groups fewer = groups;
      fewer.only->erase(fewer.only->begin() + static_cast<std::ptrdiff_t>(i));
      outcome next = run(fewer);
      if (next.skipped > held) continue;  // some sequence needs this size
      groups = std::move(fewer), now = std::move(next), dropped = true;
      break;
    }
    if (!dropped) {
      std::string needed;
      for (int sp : *groups.only) needed += (needed.empty() ? "" : ", ") + std::to_string(sp);
      throw error(errc::infeasible, "a budget of " + std::to_string(communicators) +
                                        " communicators per rank cannot hold every sequence of the data: sizes " +
                                        needed + " are each needed by one; raise the budget to " +
                                        std::to_string(groups.only->size()));
    }
  }
  return groups;
}

/// A planner whose knobs `dcp::tune` chooses on a dataset under cost model C (the static
/// baselines, and the dcp planner's pipeline knobs). Laws: the result does not depend on the
/// order of the data, and it plans any batch drawn from the data.
template <class P, class C>
concept tunable_planner =
    cost_model<C> &&
    requires(P p, const planning_context<C, full_recompute, buddy_groups>& ctx, std::span<const sequence> data) {
      { tune(std::move(p), ctx, data) } -> std::same_as<P>;
    };

// clang-format 14 runs a requires-clause into the declaration:
// clang-format off
/// `tune(p, planning_context{cost, full_recompute{}, default_groups(cost)}, data, budget, seed)`:
/// the static planners checkpoint every block whatever the recompute policy (the dcp planner's
/// overload above tunes in its own default context).
template <class Planner, cost_model C>
  requires tunable_planner<Planner, C>
Planner tune(Planner p, const C& cost, std::span<const sequence> data, std::int64_t budget = 0,
             std::uint64_t sampler_seed = 0) {
  return tune(std::move(p), planning_context{cost, full_recompute{}, default_groups(cost)}, data, budget, sampler_seed);
}
// clang-format on

}  // namespace dcp
