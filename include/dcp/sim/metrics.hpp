#pragma once
/// \file
/// Metrics of plans on the cost model's clock (DESIGN section 7): per-GPU busy and idle time,
/// makespan, imbalance, tokens/s, efficiency against the lower bound, peak memory, plan time.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include <dcp/cost/cost_concepts.hpp>
#include <dcp/plan/pipeline_plan.hpp>
#include <dcp/plan/pipeline_schedule.hpp>
#include <dcp/plan/plan.hpp>

namespace dcp::sim {

/// What one plan (one global batch) costs.
struct plan_metrics {
  double makespan_s = 0;         ///< end of the last step
  double lower_bound_s = 0;      ///< DESIGN section 3 simple lower bound of the batch
  double joint_lower_bound_s = 0;  ///< DESIGN section 3 joint lower bound (the plan's `bound_s()`)
  double busy_s = 0;             ///< GPU-seconds of all steps (sum over ranks)
  double imbalance = 0;          ///< mean over ranks of (makespan - busy_r) / makespan
  /// Seconds even the busiest rank waits, makespan - max_r busy_r: under pp > 1 its pipelines'
  /// fill, drain and stalls (the pipeline bubble), under pp = 1 its gang waits and barriers.
  double bubble_s = 0;
  double peak_memory_bytes = 0;  ///< the largest step memory (`peak_memory` where the caller counts it)
  std::int64_t sequences = 0;    ///< planned sequences
  std::int64_t tokens = 0;       ///< planned model tokens
  std::int64_t steps = 0;
  std::int64_t skipped = 0;
  friend bool operator==(const plan_metrics&, const plan_metrics&) = default;
};

/// The metrics of `p`; `busy` (if given) receives each rank's busy seconds.
inline plan_metrics measure(const plan& p, std::vector<double>* busy = nullptr) {
  plan_metrics m;
  m.makespan_s = p.makespan_s;
  m.lower_bound_s = p.lower_bound_s;
  m.joint_lower_bound_s = p.bound_s();
  m.steps = static_cast<std::int64_t>(p.steps.size());
  m.skipped = static_cast<std::int64_t>(p.skipped.size());
  const auto per_rank = p.busy_per_rank();
  for (const auto& s : p.steps) {
    // An infinite memory is a truth's step that ran out with its peak unknown (`sim/execute.hpp`):
    // it counts among the out-of-memory steps; the peak the executor reports covers it.
    if (std::isfinite(s.memory_bytes)) m.peak_memory_bytes = std::max(m.peak_memory_bytes, s.memory_bytes);
    for (const auto& q : s.sequences) ++m.sequences, m.tokens += q.tokens;
  }
  double idle = 0;
  double busiest = 0;
  for (double b : per_rank) m.busy_s += b, idle += p.makespan_s - b, busiest = std::max(busiest, b);
  m.bubble_s = std::max(0.0, p.makespan_s - busiest);
  if (p.makespan_s > 0 && !per_rank.empty()) m.imbalance = idle / static_cast<double>(per_rank.size()) / p.makespan_s;
  if (busy) *busy = per_rank;
  return m;
}

/// The most memory a GPU of `p` holds under `cost`: under pp > 1 the peak in flight on a stage-0
/// GPU (`in_flight_memory` over the plan's own step memories, the count `plan_violations`
/// checks), else the largest step's memory.
template <cost_model C>
double peak_memory(const plan& p, const C& cost) {
  double out = 0;
  for (const auto& s : p.steps) out = std::max(out, s.memory_bytes);
  if constexpr (pipeline_cost_model<C>) {
    const int stages = cost.layout().pp;
    if (stages > 1 && !p.steps.empty()) {
      std::vector<double> own;
      own.reserve(p.steps.size());
      for (const auto& s : p.steps) own.push_back(s.memory_bytes);
      for (double held : in_flight_memory(p, own, working_memory_of(p, cost), cost.static_memory(), stages))
        out = std::max(out, held);
    }
  }
  return out;
}

/// An estimate of the NCCL buffer memory one rank of a communicator of `size` ranks holds once
/// its all-to-alls have reached every peer: a send and a receive buffer of NCCL_BUFFSIZE (4 MiB,
/// NCCL's default) per peer, 2 (size - 1) 4 MiB. NCCL's real allocation depends on its version,
/// channel count and transports; this is the order of magnitude that makes every group shape a
/// cost on every member, which is why the report counts them.
constexpr double nccl_buffer_bytes(int size) noexcept { return 2.0 * (size - 1) * 4194304.0; }

/// What a method costs over a run of batches (an epoch): sums, and the ratios of sums.
struct run_metrics {
  std::string method;
  int gpus = 0;
  std::int64_t batches = 0;
  std::int64_t sequences = 0;   ///< planned sequences
  std::int64_t tokens = 0;      ///< planned model tokens
  std::int64_t skipped = 0;     ///< sequences left out under `infeasible_policy::skip`
  std::int64_t steps = 0;
  std::int64_t oom_steps = 0;   ///< steps over memory on a truth clock (`sim/execute.hpp`); 0 on the model's
  /// Seconds every batch pays once after its plan, whatever the plan (`update_seconds_of` of the
  /// clock: gradient reduction and optimizer step); counted in makespan_s and both bounds.
  double update_s = 0;
  double makespan_s = 0;        ///< summed makespans and updates: the epoch's training time
  double lower_bound_s = 0;     ///< summed simple lower bounds
  double joint_lower_bound_s = 0;  ///< summed joint lower bounds
  double tokens_per_s = 0;      ///< tokens / makespan_s
  double efficiency = 1;        ///< joint_lower_bound_s / makespan_s
  double simple_efficiency = 1; ///< lower_bound_s / makespan_s
  double imbalance = 0;         ///< mean over batches of the plan imbalance
  double bubble_s = 0;          ///< summed plan `bubble_s`: the busiest rank's waits
  double bubble = 0;            ///< bubble_s / makespan_s
  double peak_memory_bytes = 0; ///< the most memory a GPU holds over the run (in flight under pp > 1)
  double plan_seconds = 0;      ///< mean wall-clock seconds to plan one batch
  double plan_seconds_max = 0;  ///< the slowest batch to plan
  double tune_seconds = 0;      ///< wall-clock seconds spent tuning before the run (bucket, packed, dynamic_cp)
  double probe_s = 0;           ///< the start-up probe's seconds on the clock, counted in makespan_s
  std::int64_t probe_steps = 0;  ///< its micro-steps (not counted in `steps`: they train nothing)
  std::string tuned;            ///< the setting tuning chose, for the report ("" = nothing to show)
  std::vector<double> busy_s;   ///< per GPU: seconds in steps over the run
  std::vector<double> idle_s;   ///< per GPU: makespan_s - busy_s
  /// The most sequence-parallel communicators one rank needs for the run: over ranks, the distinct
  /// groups it is in over all steps, counting groups wider than one rank and narrower than the
  /// job (the world's own communicator serves the whole job). A group manager's blocks of one size
  /// are disjoint, so it is the count of distinct sizes such a rank ran with.
  int communicators_per_rank = 0;
  /// Estimated NCCL buffer memory of those communicators on the rank that needs the most: each
  /// group of s ranks counts `nccl_buffer_bytes(s)`.
  double communicator_bytes_per_rank = 0;

  /// Adds one batch's plan, planned in `seconds` of wall-clock time, `oom` of its steps over memory,
  /// holding `peak_bytes` at most on a GPU (`peak_memory`; < 0: its largest step's memory).
  void add(const plan& p, double seconds, std::int64_t oom = 0, double peak_bytes = -1) {
    const plan_metrics m = add_busy(p);
    peak_memory_bytes = std::max(peak_memory_bytes, peak_bytes);
    if (method.empty()) method = p.method;
    ++batches;
    sequences += m.sequences, tokens += m.tokens, skipped += m.skipped, steps += m.steps, oom_steps += oom;
    makespan_s += m.makespan_s + update_s, lower_bound_s += m.lower_bound_s + update_s;
    joint_lower_bound_s += m.joint_lower_bound_s + update_s;
    imbalance_sum_ += m.imbalance;
    bubble_s += m.bubble_s;
    plan_seconds_sum_ += seconds;
    plan_seconds_max = std::max(plan_seconds_max, seconds);
    if (groups_of_.size() < static_cast<std::size_t>(p.gpus)) groups_of_.resize(static_cast<std::size_t>(p.gpus));
    for (const auto& st : p.steps) {
      if (st.sp() <= 1 || st.sp() >= p.gpus || st.ranks.first < 0 || st.ranks.end() > p.gpus) continue;
      for (int r = st.ranks.first; r < st.ranks.end(); ++r) {
        auto& g = groups_of_[static_cast<std::size_t>(r)];
        if (std::find(g.begin(), g.end(), st.ranks) != g.end()) continue;
        g.push_back(st.ranks);
        communicators_per_rank = std::max(communicators_per_rank, static_cast<int>(g.size()));
        double bytes = 0;
        for (const rank_block& b : g) bytes += nccl_buffer_bytes(b.size);
        communicator_bytes_per_rank = std::max(communicator_bytes_per_rank, bytes);
      }
    }
    finish();
  }

  /// Adds the start-up probe as it ran (`plan/probe.hpp`): its makespan is run time every later
  /// rate pays for, its steps are busy time, its `oom` steps count; it trains no token.
  void add_probe(const plan& p, std::int64_t oom = 0) {
    const plan_metrics m = add_busy(p);
    probe_s += m.makespan_s, makespan_s += m.makespan_s, probe_steps += m.steps, oom_steps += oom;
    finish();
  }

  friend bool operator==(const run_metrics&, const run_metrics&) = default;

 private:
  // `p`'s metrics, its GPUs' busy seconds and its peak memory added to the run's.
  plan_metrics add_busy(const plan& p) {
    std::vector<double> busy;
    const plan_metrics m = measure(p, &busy);
    gpus = std::max(gpus, p.gpus);
    if (busy_s.size() < busy.size()) busy_s.resize(busy.size(), 0.0);
    for (std::size_t r = 0; r < busy.size(); ++r) busy_s[r] += busy[r];
    peak_memory_bytes = std::max(peak_memory_bytes, m.peak_memory_bytes);
    return m;
  }
  void finish() {
    tokens_per_s = makespan_s > 0 ? static_cast<double>(tokens) / makespan_s : 0;
    // A run that trained no token (every sequence skipped) did no useful work: efficiency 0.
    efficiency = makespan_s > 0 && tokens > 0 ? joint_lower_bound_s / makespan_s : tokens > 0 ? 1 : 0;
    simple_efficiency = makespan_s > 0 && tokens > 0 ? lower_bound_s / makespan_s : tokens > 0 ? 1 : 0;
    imbalance = batches > 0 ? imbalance_sum_ / static_cast<double>(batches) : 0;
    bubble = makespan_s > 0 ? bubble_s / makespan_s : 0;
    plan_seconds = batches > 0 ? plan_seconds_sum_ / static_cast<double>(batches) : 0;
    idle_s.resize(busy_s.size());
    for (std::size_t r = 0; r < busy_s.size(); ++r) idle_s[r] = makespan_s - busy_s[r];
  }
  double imbalance_sum_ = 0;
  double plan_seconds_sum_ = 0;
  std::vector<std::vector<rank_block>> groups_of_;  // per rank: the groups (1 < size < N) it ran in
};

inline std::ostream& operator<<(std::ostream& os, const run_metrics& m) {
  return os << "run_metrics{" << m.method << ", " << m.batches << " batches, " << m.tokens_per_s
            << " tokens/s, efficiency=" << m.efficiency << ", imbalance=" << m.imbalance << "}";
}

}  // namespace dcp::sim
