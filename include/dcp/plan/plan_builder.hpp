#pragma once
/// \file
/// `plan_builder`: the bookkeeping every planner shares. It turns sequence groups placed on
/// rank blocks into priced `plan_step`s, tracks when each rank is free (gang start = the latest
/// member), and finishes the plan (order, makespan, lower bound, loss weights, skipped).
/// With per-GPU speed factors, or on a cluster whose nodes differ in speed (`job_speeds`), a step
/// lasts its cost model time over its slowest member's speed; `barrier()` starts a new round
/// (every later step waits for every earlier one to end). Under pp > 1 `finish` makes the plan a
/// 1F1B pipeline plan (`pipeline_plan`) in the order `order_pipeline` names; on a layout whose
/// collectives span groups (zero3, ep > 1) it makes the plan's rounds lockstep micro-steps with
/// padding passes (`couple`).

#include <algorithm>
#include <cmath>
#include <numeric>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include <dcp/cost/cost_concepts.hpp>
#include <dcp/error.hpp>
#include <dcp/group/group_concepts.hpp>
#include <dcp/plan/coupling.hpp>
#include <dcp/plan/loss_weights.hpp>
#include <dcp/plan/lower_bounds.hpp>
#include <dcp/plan/pipeline_plan.hpp>
#include <dcp/plan/plan.hpp>
#include <dcp/plan/speeds.hpp>
#include <dcp/sequence.hpp>

namespace dcp {

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
    typename C::load_type load{};
    return make_step(seqs, b, k, ring, load);
  }
  /// `make_step` with ring `ring`, then `place`: the builder keeps the step's load, which a
  /// pipeline plan (pp > 1) would otherwise price again from its sequences.
  double place_new(std::span<const sequence> seqs, rank_block b, int k, int ring, double not_before = 0) {
    typename C::load_type load{};
    plan_step st = make_step(seqs, b, k, ring, load);
    if (layout().pp > 1 && loads_.size() == plan_.steps.size()) loads_.push_back(load);  // while every step has one
    return place(std::move(st), not_before);
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

  /// The job's layout (the cost model's).
  const parallel_layout& layout() const noexcept { return plan_.layout; }

  /// How `finish` orders each unit's micro-batches under pp > 1 (`as_placed` unless set).
  void order_pipeline(pipeline_order order) noexcept { order_ = order; }

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
    // Sorted through their indices (the same comparisons, so the same order), the loads with them.
    std::vector<std::size_t> order(plan_.steps.size());
    std::iota(order.begin(), order.end(), std::size_t{0});
    std::sort(order.begin(), order.end(), [&](std::size_t x, std::size_t y) {
      const plan_step &a = plan_.steps[x], &b = plan_.steps[y];
      if (a.round != b.round) return a.round < b.round;
      return a.start_s != b.start_s ? a.start_s < b.start_s : a.ranks.first < b.ranks.first;
    });
    if (loads_.size() != plan_.steps.size()) loads_.clear();  // some step came without its load
    std::vector<plan_step> steps;
    std::vector<typename C::load_type> loads;
    steps.reserve(order.size()), loads.reserve(loads_.size());
    for (std::size_t j : order) {
      steps.push_back(std::move(plan_.steps[j]));
      if (!loads_.empty()) loads.push_back(loads_[j]);
    }
    plan_.steps = std::move(steps), loads_ = std::move(loads);
    std::sort(plan_.skipped.begin(), plan_.skipped.end(),
              [](const skipped_sequence& a, const skipped_sequence& b) { return a.id < b.id; });
    const int stages = cost_.layout().pp;
    plan_.makespan_s = 0;
    if (stages > 1) {
      if constexpr (pipeline_cost_model<C>)
        pipeline_plan(plan_, cost_, order_, loads_);
      else
        throw error(errc::invalid_argument, "the layout has pp = " + std::to_string(stages) +
                                                " pipeline stages, but its cost model prices no stage transfer; "
                                                "plan pipelines on a pipeline_cost_model (analytic_cost)");
    } else if (is_coupled(cost_.layout())) {
      couple(plan_, cost_);  // collectives that span groups: lockstep rounds, padding passes
    } else {
      for (const auto& s : plan_.steps) plan_.makespan_s = std::max(plan_.makespan_s, s.end_s());
    }
    const batch_bounds staged = pipelined(bounds, stages);
    plan_.lower_bound_s = staged.simple_s;
    plan_.joint_lower_bound_s = staged.joint_s;
    assign_loss_weights(plan_, norm);
    return std::move(plan_);
  }

 private:
  const C& cost_;
  std::vector<double> free_;
  int round_ = 0;
  double barrier_s_ = 0;
  pipeline_order order_ = pipeline_order::as_placed;
  plan plan_;
  std::vector<typename C::load_type> loads_;  // of steps 0, 1, ... while each came by `place_new`

  plan_step make_step(std::span<const sequence> seqs, rank_block b, int k, int ring,
                      typename C::load_type& load) const {
    plan_step st;
    st.ranks = b;
    st.checkpointed_blocks = k;
    st.ring = ring;
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
};

}  // namespace dcp
