#pragma once
/// \file
/// `plan_builder`: the bookkeeping every planner shares. It turns sequence groups placed on
/// rank blocks into priced `plan_step`s, tracks when each rank is free (gang start = the latest
/// member), and finishes the plan (order, makespan, lower bound, loss weights, skipped).

#include <algorithm>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include <dcp/cost/cost_concepts.hpp>
#include <dcp/plan/plan.hpp>
#include <dcp/plan/sequence_options.hpp>
#include <dcp/sequence.hpp>

namespace dcp {

template <cost_model C>
class plan_builder {
 public:
  plan_builder(const C& cost, std::string method) : cost_(cost), free_(static_cast<std::size_t>(cost.gpus()), 0.0) {
    plan_.method = std::move(method);
    plan_.gpus = cost.gpus();
    plan_.gpus_per_node = cost.gpus_per_node();
    plan_.memory_capacity_bytes = cost.capacity();
  }

  /// When every member of `b` is free.
  double ready(rank_block b) const noexcept {
    double t = 0;
    for (int r = b.first; r < b.end(); ++r) t = std::max(t, free_[static_cast<std::size_t>(r)]);
    return t;
  }
  double free_at(int rank) const noexcept { return free_[static_cast<std::size_t>(rank)]; }

  /// A priced step of `seqs` on `b` with `k` checkpointed blocks, not yet placed in time.
  plan_step make_step(std::span<const sequence> seqs, rank_block b, int k) const {
    plan_step st;
    st.ranks = b;
    st.checkpointed_blocks = k;
    typename C::load_type load{};
    st.sequences.reserve(seqs.size());
    for (const auto& s : seqs) {
      load = load + cost_.load_of(s);
      st.sequences.push_back({s.id, cost_.tokens_of(s), s.frames, s.spatial, 0.0});
    }
    st.time_s = cost_.time(load, b.size, k);
    st.memory_bytes = cost_.memory(load, b.size, k);
    return st;
  }

  /// Places `st` at the earliest time all its members are free, no earlier than `not_before`;
  /// returns its end.
  double place(plan_step st, double not_before = 0) {
    st.start_s = std::max(ready(st.ranks), not_before);
    const double end = st.end_s();
    for (int r = st.ranks.first; r < st.ranks.end(); ++r) free_[static_cast<std::size_t>(r)] = end;
    plan_.steps.push_back(std::move(st));
    return end;
  }

  void skip(std::vector<skipped_sequence> skipped) { plan_.skipped = std::move(skipped); }

  /// Orders steps by (start, first rank), sets makespan, lower bound and loss weights.
  plan finish(std::span<const sequence> planned, loss_normalization norm) && {
    std::sort(plan_.steps.begin(), plan_.steps.end(), [](const plan_step& a, const plan_step& b) {
      return a.start_s != b.start_s ? a.start_s < b.start_s : a.ranks.first < b.ranks.first;
    });
    std::sort(plan_.skipped.begin(), plan_.skipped.end(),
              [](const skipped_sequence& a, const skipped_sequence& b) { return a.id < b.id; });
    plan_.makespan_s = 0;
    for (const auto& s : plan_.steps) plan_.makespan_s = std::max(plan_.makespan_s, s.end_s());
    plan_.lower_bound_s = lower_bound(cost_, planned);
    assign_loss_weights(plan_, norm);
    return std::move(plan_);
  }

 private:
  const C& cost_;
  std::vector<double> free_;
  plan plan_;
};

}  // namespace dcp
