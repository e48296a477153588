#pragma once
/// \file
/// `probe_plan`: the micro-steps of the start-up probe (DESIGN section 9.2). Before the first plan
/// of a run, a calibrating loop runs a few steps of the first batch (forward and backward, the
/// gradients discarded) and measures them, so that the first plan is made on a model and a memory
/// margin that measurements back, not on the prior alone.
///
/// The probe is itself a plan, run like any other (`steps_for`, the executor): its steps are
/// taken from `first`, the first batch planned on the prior with room to spare
/// (`probe_options::headroom`), keeping their blocks, rings, checkpointed blocks and sequences:
///   1. for each sp `first` uses, its step of the largest memory (the tightest point of that
///      size, where a memory error would first bite; longer time breaking ties), the tightest
///      first;
///   2. then the other steps in order of their time quantiles (median, quartiles, octiles, ...),
///      so that the points span the lengths and sizes;
/// each taken while it ends within `budget` x the first plan's makespan (the first always).
/// Each rank runs its probe steps in selection order; a gang step starts when its members are
/// free. The steps carry no loss weight (nothing they compute is kept).

#include <algorithm>
#include <cstddef>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <dcp/cost/calibration.hpp>
#include <dcp/cost/cost_concepts.hpp>
#include <dcp/plan/plan.hpp>
#include <dcp/plan/plan_builder.hpp>
#include <dcp/plan/plan_concepts.hpp>
#include <dcp/plan/planning_context.hpp>
#include <dcp/sequence.hpp>

namespace dcp {

/// The name probe plans carry in `plan::method`.
inline constexpr std::string_view probe_method = "probe";

/// The probe's steps chosen from `first` (see the file comment), priced and placed on `cost`.
template <cost_model C>
plan probe_plan(const plan& first, const C& cost, const probe_options& o) {
  o.validate();
  const std::vector<plan_step>& all = first.steps;
  std::vector<std::size_t> order;
  std::vector<char> taken(all.size(), 0);
  // 1. The tightest step of each sp.
  std::map<int, std::size_t> tightest;
  for (std::size_t i = 0; i < all.size(); ++i) {
    const auto it = tightest.find(all[i].sp());
    if (it == tightest.end()) {
      tightest.emplace(all[i].sp(), i);
      continue;
    }
    const plan_step& best = all[it->second];
    if (all[i].memory_bytes > best.memory_bytes ||
        (all[i].memory_bytes == best.memory_bytes && all[i].time_s > best.time_s))
      it->second = i;
  }
  for (const auto& [sp, i] : tightest) order.push_back(i), taken[i] = 1;
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    return all[a].memory_bytes / capacity_on(cost, all[a].ranks) >
           all[b].memory_bytes / capacity_on(cost, all[b].ranks);
  });
  // 2. The rest by time quantiles: 1/2, 1/4, 3/4, 1/8, 3/8, ...
  std::vector<std::size_t> by_time;
  for (std::size_t i = 0; i < all.size(); ++i)
    if (!taken[i]) by_time.push_back(i);
  std::stable_sort(by_time.begin(), by_time.end(),
                   [&](std::size_t a, std::size_t b) { return all[a].time_s < all[b].time_s; });
  std::vector<char> used(by_time.size(), 0);
  for (std::size_t level = 2; level / 2 <= by_time.size(); level *= 2)
    for (std::size_t k = 1; k < level; k += 2) {
      const std::size_t at = k * by_time.size() / level;
      if (at < by_time.size() && !used[at]) used[at] = 1, order.push_back(by_time[at]);
    }

  plan_builder<C> builder(cost, std::string(probe_method));
  std::vector<double> free(static_cast<std::size_t>(cost.gpus()), 0.0);
  const double budget = o.budget * first.makespan_s;
  std::vector<sequence> seqs;
  for (std::size_t n = 0; n < order.size(); ++n) {
    const plan_step& s = all[order[n]];
    seqs.clear();
    for (const auto& q : s.sequences) seqs.push_back({q.id, q.frames, q.spatial});
    plan_step st = builder.make_step(seqs, s.ranks, s.checkpointed_blocks, s.ring);
    double start = 0;
    for (int r = s.ranks.first; r < s.ranks.end(); ++r) start = std::max(start, free[std::size_t(r)]);
    if (n > 0 && start + st.time_s > budget) continue;
    for (int r = s.ranks.first; r < s.ranks.end(); ++r) free[std::size_t(r)] = start + st.time_s;
    builder.place(std::move(st));
  }
  plan out = std::move(builder).finish(batch_bounds{}, loss_normalization::token_mean);
  for (auto& st : out.steps)
    for (auto& q : st.sequences) q.loss_weight = 0;
  return out;
}

/// The probe of `batch`, the first global batch, planned by `p` in `ctx` (the prior, and the
/// job's recompute policy and groups): the batch planned to C / (1 + headroom), where a skipping
/// planner leaves out the sequences that fit only closer to capacity (they are not probed), and
/// the probe's steps chosen from that plan and priced on the prior.
template <planner P, recompute_policy R, group_manager G>
plan probe_plan(P p, const planning_context<fitted_cost, R, G>& ctx, std::span<const sequence> batch,
                const probe_options& o) {
  o.validate();
  fitted_cost roomy = ctx.cost;
  roomy.memory_margin = o.headroom;
  if constexpr (skipping_planner<P>) p.on_infeasible = infeasible_policy::skip;
  return probe_plan(p.plan(planning_context{roomy, ctx.recompute, ctx.groups}, batch), ctx.cost, o);
}

}  // namespace dcp
