#pragma once
/// \file
/// `plan_builder`: the bookkeeping every planner shares. It turns sequence groups placed on
/// rank blocks into priced `plan_step`s, tracks when each rank is free (gang start = the latest
/// member), and finishes the plan (order, makespan, lower bound, loss weights, skipped).
/// With per-GPU speed factors, or on a cluster whose nodes differ in speed (`job_speeds`), a step
/// lasts its cost model time over its slowest member's speed; `barrier()` starts a new round
/// (every later step waits for every earlier one to end).

#include <algorithm>
#include <cmath>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include <dcp/cost/cost_concepts.hpp>
#include <dcp/error.hpp>
#include <dcp/group/group_concepts.hpp>
#include <dcp/plan/loss_weights.hpp>
#include <dcp/plan/lower_bounds.hpp>
#include <dcp/plan/plan.hpp>
#include <dcp/sequence.hpp>

namespace dcp {

/// Throws `dcp::error(errc::invalid_argument)` unless `speeds` is empty or holds one positive,
/// finite factor per GPU of `gpus`.
inline void validate_speeds(std::span<const double> speeds, int gpus) {
  if (speeds.empty()) return;
  check(speeds.size() == static_cast<std::size_t>(gpus), errc::invalid_argument, [&] {
    return std::to_string(speeds.size()) + " GPU speed factors for " + std::to_string(gpus) +
           " GPUs; give one per GPU, or none (all 1)";
  });
  for (std::size_t r = 0; r < speeds.size(); ++r)
    check(std::isfinite(speeds[r]) && speeds[r] > 0, errc::invalid_argument, [&] {
      return "speed factor " + std::to_string(speeds[r]) + " of GPU " + std::to_string(r) +
             " must be positive and finite (1 = nominal, 0.8 = 20% slow)";
    });
}

/// The speed of every unit of a job: its node's device speed (`parallel_layout::unit_speeds`)
/// times its straggler factor in `stragglers` (empty = all 1). Empty when both are all 1.
inline std::vector<double> job_speeds(const parallel_layout& layout, std::span<const double> stragglers) {
  validate_speeds(stragglers, layout.units());
  std::vector<double> out = layout.unit_speeds();
  if (out.empty()) return {stragglers.begin(), stragglers.end()};
  for (std::size_t u = 0; u < stragglers.size(); ++u) out[u] *= stragglers[u];
  return out;
}

/// The slowest speed factor of `b`'s members (1 without factors): a gang step runs at its pace.
inline double block_speed(std::span<const double> speeds, rank_block b) noexcept {
  if (speeds.empty()) return 1.0;
  double v = speeds[static_cast<std::size_t>(b.first)];
  for (int r = b.first + 1; r < b.end(); ++r) v = std::min(v, speeds[static_cast<std::size_t>(r)]);
  return v;
}

template <cost_model C>
class plan_builder {
 public:
  /// `stragglers`: per-unit factors beyond the nodes' device speeds (empty = all 1); the plan
  /// records their product with the layout's (`job_speeds`).
  plan_builder(const C& cost, std::string method, std::span<const double> stragglers = {})
      : cost_(cost), free_(static_cast<std::size_t>(cost.gpus()), 0.0) {
    plan_.speeds = job_speeds(cost.layout(), stragglers);
    plan_.method = std::move(method);
    plan_.gpus = cost.gpus();
    plan_.gpus_per_node = cost.gpus_per_node();
    plan_.layout = cost.layout();
    plan_.memory_capacity_bytes = cost.capacity();
  }

  /// When every member of `b` is free.
  double ready(rank_block b) const noexcept {
    double t = 0;
    for (int r = b.first; r < b.end(); ++r) t = std::max(t, free_[static_cast<std::size_t>(r)]);
    return t;
  }
  /// The speed factor of `b` (its slowest member; 1 without factors).
  double speed_of(rank_block b) const noexcept { return block_speed(plan_.speeds, b); }
  double speed_of(int rank) const noexcept { return speed_of(rank_block{rank, 1}); }

  /// A priced step of `seqs` on `b` with `k` checkpointed blocks, not yet placed in time, run
  /// with the smallest ring its size allows (`step_ring_of`).
  plan_step make_step(std::span<const sequence> seqs, rank_block b, int k) const {
    return make_step(seqs, b, k, step_ring_of(cost_, b.size));
  }
  /// `make_step` run with ring `ring` (a `legal_ring` of b.size).
  plan_step make_step(std::span<const sequence> seqs, rank_block b, int k, int ring) const {
    plan_step st;
    st.ranks = b;
    st.checkpointed_blocks = k;
    st.ring = ring;
    typename C::load_type load{};
    st.sequences.reserve(seqs.size());
    for (const auto& s : seqs) {
      load = load + cost_.load_of(s);
      st.sequences.push_back({s.id, cost_.tokens_of(s), s.frames, s.spatial, 0.0});
    }
    st.time_s = time_with_ring(cost_, load, b.size, k, ring);
    if (!plan_.speeds.empty()) st.time_s /= speed_of(b);
    st.memory_bytes = cost_.memory(load, b.size, k);
    return st;
  }

  /// A global barrier: steps placed from now on belong to the next round and start only after
  /// every step placed so far has ended.
  void barrier() {
    ++round_;
    for (double f : free_) barrier_s_ = std::max(barrier_s_, f);
  }

  /// Places `st` in the current round at the earliest time all its members are free and the
  /// round's barrier has passed, no earlier than `not_before`; returns its end.
  double place(plan_step st, double not_before = 0) {
    st.round = round_;
    st.start_s = std::max({ready(st.ranks), not_before, barrier_s_});
    const double end = st.end_s();
    for (int r = st.ranks.first; r < st.ranks.end(); ++r) free_[static_cast<std::size_t>(r)] = end;
    plan_.steps.push_back(std::move(st));
    return end;
  }

  void skip(std::vector<skipped_sequence> skipped) { plan_.skipped = std::move(skipped); }

  /// Orders steps by (round, start, first rank), sets makespan, lower bounds and loss weights;
  /// the bounds over the sizes `groups` offers (the blocks the plan was placed on), so a plan on
  /// sizes buddy blocks lack is never held to a bound that cannot use them.
  template <group_manager G>
  plan finish(const G& groups, std::span<const sequence> planned, loss_normalization norm) && {
    const batch_bounds bounds = lower_bounds(cost_, groups, planned, plan_.speeds);
    return std::move(*this).finish(bounds, norm);
  }

  /// `finish` with the batch's bounds already known (a planner that builds several candidate
  /// plans of one batch computes them once).
  plan finish(const batch_bounds& bounds, loss_normalization norm) && {
    std::sort(plan_.steps.begin(), plan_.steps.end(), [](const plan_step& a, const plan_step& b) {
      if (a.round != b.round) return a.round < b.round;
      return a.start_s != b.start_s ? a.start_s < b.start_s : a.ranks.first < b.ranks.first;
    });
    std::sort(plan_.skipped.begin(), plan_.skipped.end(),
              [](const skipped_sequence& a, const skipped_sequence& b) { return a.id < b.id; });
    plan_.makespan_s = 0;
    for (const auto& s : plan_.steps) plan_.makespan_s = std::max(plan_.makespan_s, s.end_s());
    plan_.lower_bound_s = bounds.simple_s;
    plan_.joint_lower_bound_s = bounds.joint_s;
    assign_loss_weights(plan_, norm);
    return std::move(plan_);
  }

 private:
  const C& cost_;
  std::vector<double> free_;
  int round_ = 0;
  double barrier_s_ = 0;
  plan plan_;
};

}  // namespace dcp
