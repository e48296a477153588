#pragma once
/// \file
/// Start times derived from a plan's order, as a training loop runs it (`derive_starts`), a
/// plan made on one clock timed on another (`retimed`: the dcp planner's plan of a mixed cluster
/// seen as its weakest node, timed on the cluster), and a plan's steps re-priced at the fewest
/// checkpointed blocks that fit (`with_fewest_checkpoints`: DCP-intra on a plan made without it).
///
/// The order's rules: under pp = 1 each GPU runs its steps in plan order, rounds are barriers (a
/// step of round r starts only after every step of every earlier round has ended), and a gang
/// step starts when all its members are free; under pp > 1 a step is a micro-batch of the 1F1B
/// schedule (`schedule_pipeline`) and its start is its first forward on stage 0; on a layout
/// whose collectives span groups (zero3, ep > 1) the rounds are each domain's lockstep micro-steps
/// (`derive_coupled_starts`, `plan/coupling.hpp`). The executor
/// (`sim/execute.hpp`) derives a truth's start times by the same function.

#include <algorithm>
#include <cstddef>
#include <numeric>
#include <optional>
#include <span>
#include <vector>

#include <dcp/cost/cost_concepts.hpp>
#include <dcp/error.hpp>
#include <dcp/plan/coupling.hpp>
#include <dcp/plan/pipeline_schedule.hpp>
#include <dcp/plan/plan.hpp>
#include <dcp/plan/speeds.hpp>
#include <dcp/recompute/recompute_concepts.hpp>

namespace dcp {

/// Sets every step's `start_s` of `p` from its steps' `time_s` and its order (the file
/// comment's rules) on `stages` pipeline stages, and `p.makespan_s` to the last end. Under
/// pp > 1 the steps' stage split and transfers are `cost`'s (`pipeline_times`).
template <cost_model C>
void derive_starts(plan& p, const C& cost, int stages) {
  if (stages <= 1 && is_coupled(cost.layout())) return derive_coupled_starts(p, cost);
  double makespan = 0;
  if (stages > 1) {
    if constexpr (pipeline_cost_model<C>) {
      const pipeline_timeline timeline = schedule_pipeline(p, pipeline_times(p, cost), stages);
      for (std::size_t i = 0; i < p.steps.size(); ++i) p.steps[i].start_s = timeline.forward_of(i, 0).start_s;
      makespan = timeline.makespan_s;
    } else {
      throw error(errc::invalid_argument, "the layout has pp = " + std::to_string(stages) +
                                              " but its cost model prices no stage transfer; use a pipeline_cost_model");
    }
  } else {
    std::vector<std::size_t> order(p.steps.size());
    std::iota(order.begin(), order.end(), std::size_t{0});
    std::stable_sort(order.begin(), order.end(),
                     [&](std::size_t a, std::size_t b) { return p.steps[a].round < p.steps[b].round; });
    std::vector<double> free(static_cast<std::size_t>(p.gpus), 0.0);
    double barrier = 0, round_end = 0;
    int round = order.empty() ? 0 : p.steps[order.front()].round;
    for (std::size_t i : order) {
      plan_step& s = p.steps[i];
      if (s.round != round) barrier = std::max(barrier, round_end), round = s.round;
      double start = barrier;
      for (int r = s.ranks.first; r < s.ranks.end(); ++r) start = std::max(start, free[static_cast<std::size_t>(r)]);
      s.start_s = start;
      const double end = s.end_s();
      for (int r = s.ranks.first; r < s.ranks.end(); ++r) free[static_cast<std::size_t>(r)] = end;
      round_end = std::max(round_end, end);
      makespan = std::max(makespan, end);
    }
  }
  p.makespan_s = makespan;
}

/// `p` timed on `cost`: every step lasts `cost`'s time of its sequences (its ring and checkpointed
/// blocks kept) over its slowest member's speed (`job_speeds(cost.layout(), stragglers)`, which
/// the result carries), and its start is derived again (`derive_starts`). Sequences, blocks,
/// rounds, memory and bounds stay as they are: the caller re-checks memory where the clocks'
/// capacities differ.
template <cost_model C>
plan retimed(plan p, const C& cost, std::span<const double> stragglers) {
  p.speeds = job_speeds(cost.layout(), stragglers);
  for (auto& s : p.steps) {
    if (s.sequences.empty()) {  // a padding pass of a coupled plan
      s.time_s = padding_time_of(cost) / block_speed(p.speeds, s.ranks);
      continue;
    }
    typename C::load_type load{};
    for (const auto& q : s.sequences) load = load + cost.load_of(sequence{q.id, q.frames, q.spatial});
    s.time_s = time_with_ring(cost, load, s.sp(), s.checkpointed_blocks, s.ring) / block_speed(p.speeds, s.ranks);
  }
  derive_starts(p, cost, cost.layout().pp);
  return p;
}

/// `p` with every step checkpointing the blocks `recompute` chooses for it on its own block (on a
/// mixed cluster, at the block's capacity) where that is fewer, at its fastest legal ring, and
/// its starts derived again: the same steps on the same blocks in the same order, none longer
/// (time does not fall with k). Under pp > 1 a step's memory is shared with the micro-batches in
/// flight, which its own recompute choice does not see, so `p` is returned as it is.
template <cost_model C, recompute_policy R>
plan with_fewest_checkpoints(plan p, const C& cost, const R& recompute) {
  if (cost.layout().pp > 1) return p;
  for (auto& s : p.steps) {
    if (s.sequences.empty() || s.checkpointed_blocks == 0) continue;
    typename C::load_type load{};
    for (const auto& q : s.sequences) load = load + cost.load_of(sequence{q.id, q.frames, q.spatial});
    std::optional<int> k;
    if constexpr (mixed_cluster_cost_model<C>)
      k = recompute.choose(cost.as_uniform({"block", 1, cost.capacity_of(s.ranks)}), load, s.sp());
    else
      k = recompute.choose(cost, load, s.sp());
    if (!k || *k >= s.checkpointed_blocks) continue;
    const ring_choice r = fastest_ring(cost, load, s.sp(), *k);
    s.checkpointed_blocks = *k, s.ring = r.ring;
    s.time_s = r.time_s / block_speed(p.speeds, s.ranks);
    s.memory_bytes = cost.memory(load, s.sp(), *k);
  }
  derive_starts(p, cost, 1);
  if (!is_coupled(cost.layout()))  // in start order again, as plans are (a coupled plan's is its rounds')
    std::stable_sort(p.steps.begin(), p.steps.end(), [](const plan_step& a, const plan_step& b) {
      if (a.round != b.round) return a.round < b.round;
      return a.start_s != b.start_s ? a.start_s < b.start_s : a.ranks.first < b.ranks.first;
    });
  return p;
}

}  // namespace dcp
