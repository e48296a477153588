#pragma once
/// \file
/// The 1F1B pipeline schedule of a plan (DESIGN section 4.5): when every micro-batch runs its
/// forward and its backward on every stage, and how much memory its stage-0 GPUs hold in flight.
///
/// Under pp > 1 a plan step is a micro-batch. It runs its forward through stages 0..P-1 and its
/// backward through P-1..0 on the same units of every stage. Within a round every unit runs its
/// steps, in plan order, as one 1F1B schedule per stage: stage s of a unit with m steps first runs
/// w = min(d (P - 1 - s), m) forwards, then alternates the next forward and the oldest backward,
/// then runs the backwards left. d is the plan's `warmup_depth`: 1 is Megatron's non-interleaved
/// 1F1B; a deeper warmup lets stage 0 run ahead while a long micro-batch travels the later
/// stages, at the memory of more micro-batches in flight. An operation of a gang step starts when
/// every member has reached it in its own order and is free on that stage, and its input has
/// arrived: F(s) after F(s - 1) ended plus the transfer, B(s) after B(s + 1) ended plus
/// the transfer, B(P - 1) after F(P - 1) ended. Rounds stay barriers: nothing of round r + 1
/// starts before every operation of round r has ended. Orders that wait on each other (two
/// members reaching two shared steps in different orders) deadlock; `schedule_pipeline` says so.
///
/// Memory: stage s of a unit holds the micro-batches whose forward has run there and whose
/// backward has not; during the forward of its p-th step, the schedule has run the backwards of
/// all but the last min(d (P - 1 - s) + 1, p + 1) steps, so stage 0 holds the most. Its
/// in-flight memory there is M_static + the window's stored activations, sum of
/// (M_j - M_static - W_j), + the largest working set W_j of the window: a GPU runs one operation
/// at a time, so only one micro-batch's working set is live (`pipeline_cost_model`).

#include <algorithm>
#include <cstddef>
#include <map>
#include <span>
#include <string>
#include <vector>

#include <dcp/error.hpp>
#include <dcp/plan/plan.hpp>

namespace dcp {

/// The forward's share of a micro-batch's stage time with k of its L_s blocks checkpointed:
/// L_s / (3 L_s + k). Section 4 prices a step as (3 + k / L) forwards of compute, (2 L + k) + L
/// block passes of collectives and (3 L + k) of overhead: one L of them the forward's.
inline double forward_share(int blocks, int k) noexcept { return static_cast<double>(blocks) / (3.0 * blocks + k); }

/// One micro-batch's seconds on one stage: forward, backward, and one stage boundary's transfer.
struct pipeline_step_times {
  double forward_s = 0;
  double backward_s = 0;
  double transfer_s = 0;
};

/// When an operation ran.
struct stage_span {
  double start_s = 0;
  double end_s = 0;
  friend bool operator==(const stage_span&, const stage_span&) = default;
};

/// Every step's forward and backward on every stage.
struct pipeline_timeline {
  int stages = 1;
  std::vector<stage_span> forward;   ///< [step * stages + stage]
  std::vector<stage_span> backward;  ///< [step * stages + stage]
  double makespan_s = 0;             ///< end of the last backward

  const stage_span& forward_of(std::size_t step, int stage) const { return forward[step * stages + stage]; }
  const stage_span& backward_of(std::size_t step, int stage) const { return backward[step * stages + stage]; }
  friend bool operator==(const pipeline_timeline&, const pipeline_timeline&) = default;
};

namespace detail {
/// Per round, in increasing order, each unit's steps in plan order.
inline std::map<int, std::vector<std::vector<std::size_t>>> unit_lists(const plan& p) {
  std::map<int, std::vector<std::vector<std::size_t>>> out;
  for (std::size_t j = 0; j < p.steps.size(); ++j) {
    const plan_step& s = p.steps[j];
    auto& lists = out[s.round];
    lists.resize(static_cast<std::size_t>(std::max(p.gpus, 0)));
    for (int u = s.ranks.first; u < s.ranks.end(); ++u)
      if (u >= 0 && u < p.gpus) lists[static_cast<std::size_t>(u)].push_back(j);
  }
  return out;
}
}  // namespace detail

/// One operation of a pipeline stage: the forward or the backward of plan step `step`.
struct pipeline_op {
  std::size_t step = 0;
  bool backward = false;
  friend bool operator==(const pipeline_op&, const pipeline_op&) = default;
};

namespace detail {
/// The forwards stage `stage` of `stages` runs before its first backward, of m micro-batches at
/// warmup depth `depth`: d (P - 1 - s), at most m.
inline std::size_t warmup_forwards(std::size_t m, int stage, int stages, int depth) noexcept {
  return std::min(static_cast<std::size_t>(depth) * static_cast<std::size_t>(stages - 1 - stage), m);
}
/// Operation t (of 2 m) of the 1F1B order of `list` with w warmup forwards: the w forwards, then
/// forward w + i and backward i in turn, then the last w backwards.
inline pipeline_op one_f_one_b_at(std::span<const std::size_t> list, std::size_t w, std::size_t t) noexcept {
  const std::size_t m = list.size();
  if (t < w) return {list[t], false};
  const std::size_t i = t - w, steady = 2 * (m - w);
  if (i < steady) return i % 2 == 0 ? pipeline_op{list[w + i / 2], false} : pipeline_op{list[i / 2], true};
  return {list[m - w + (i - steady)], true};
}
}  // namespace detail

/// The 1F1B order of one unit's steps `list` (one round, plan order) on stage `stage` of
/// `stages` with warmup depth `depth`: w = min(depth (P - 1 - s), m) forwards, then the next
/// forward and the oldest backward in turn, then the backwards left.
inline std::vector<pipeline_op> one_f_one_b(std::span<const std::size_t> list, int stage, int stages, int depth = 1) {
  const std::size_t w = detail::warmup_forwards(list.size(), stage, stages, depth);
  std::vector<pipeline_op> seq;
  seq.reserve(2 * list.size());
  for (std::size_t t = 0; t < 2 * list.size(); ++t) seq.push_back(detail::one_f_one_b_at(list, w, t));
  return seq;
}

/// Every operation unit `unit` runs on stage `stage` of `stages` for plan `p`: round by round,
/// its steps' 1F1B order (the order `schedule_pipeline` times and a trainer runs).
inline std::vector<pipeline_op> pipeline_ops(const plan& p, int stages, int unit, int stage) {
  check(stages >= 1 && stage >= 0 && stage < stages && unit >= 0 && unit < p.gpus, errc::invalid_argument, [&] {
    return "pipeline_ops: unit " + std::to_string(unit) + " on stage " + std::to_string(stage) + " of " +
           std::to_string(stages) + " for a plan of " + std::to_string(p.gpus) + " units";
  });
  std::vector<pipeline_op> out;
  for (const auto& [round, lists] : detail::unit_lists(p)) {
    const auto seq = one_f_one_b(lists[static_cast<std::size_t>(unit)], stage, stages, p.warmup_depth);
    out.insert(out.end(), seq.begin(), seq.end());
  }
  return out;
}

/// Where `schedule_pipeline` found the plan's orders deadlocked, when asked to report it instead
/// of throwing: `first_stuck` is the first step (in plan order) with an operation that never runs.
struct pipeline_deadlock {
  std::size_t first_stuck = 0;
};

/// The 1F1B timeline of `p` on `stages` stages (the file comment's rules), step j taking
/// `times[j]`; `stuck` (when given) receives the first step that cannot run if the orders
/// deadlock, and the function then returns the timeline so far with makespan 0. Without `stuck`,
/// a deadlock throws a `dcp::error` naming that step.
inline pipeline_timeline schedule_pipeline(const plan& p, std::span<const pipeline_step_times> times, int stages,
                                           pipeline_deadlock* stuck = nullptr) {
  const std::size_t n = p.steps.size();
  check(times.size() == n && stages >= 1, errc::invalid_argument, [&] {
    return std::to_string(times.size()) + " step times for " + std::to_string(n) + " steps on " +
           std::to_string(stages) + " stages; give one per step, and at least one stage";
  });
  const std::size_t P = static_cast<std::size_t>(stages);
  // Operation o = (step j, stage s, backward d) at index (j P + s) 2 + d, so a step's operations
  // lie together. Until it runs, an operation's span holds when its input arrived (start, -1
  // while it has not) and -1 as its end; `arrived` counts the member units that have reached it.
  auto op = [P](std::size_t j, std::size_t s, int d) { return (j * P + s) * 2 + static_cast<std::size_t>(d); };
  std::vector<stage_span> span(n * P * 2, stage_span{-1, -1});
  std::vector<int> arrived(n * P * 2, 0);
  // What the schedule reads of each step, together and apart from the rest of the plan's steps.
  struct step_data {
    double forward_s, backward_s, transfer_s;
    rank_block ranks;
  };
  std::vector<step_data> step(n);
  for (std::size_t j = 0; j < n; ++j)
    step[j] = {times[j].forward_s, times[j].backward_s, times[j].transfer_s, p.steps[j].ranks};
  // An operation ready to run: its index, step and stage (kept, not divided out of the index).
  struct ready_op {
    std::size_t o, j, s;
  };
  std::vector<ready_op> ready;
  double barrier = 0;
  for (const auto& entry : detail::unit_lists(p)) {
    const int round = entry.first;
    const auto& lists = entry.second;  // a reference the lambdas below may capture (clang 14)
    const std::size_t units = lists.size();
    // Each (stage, unit)'s operations in 1F1B order, op t of (s, u) computed where it is needed.
    std::vector<std::size_t> warm(P * units), at(P * units, 0);
    std::vector<double> free(P * units, barrier);
    for (std::size_t s = 0; s < P; ++s)
      for (std::size_t u = 0; u < units; ++u)
        warm[s * units + u] = detail::warmup_forwards(lists[u].size(), static_cast<int>(s), stages, p.warmup_depth);
    // Unit u's operation t on stage s arrives there.
    auto next_of = [&](std::size_t s, std::size_t u, std::size_t t) {
      const pipeline_op x = detail::one_f_one_b_at(lists[u], warm[s * units + u], t);
      const std::size_t o = op(x.step, s, x.backward ? 1 : 0);
      if (++arrived[o] == step[x.step].ranks.size && span[o].start_s >= 0) ready.push_back({o, x.step, s});
    };
    auto feed = [&](std::size_t j, std::size_t s, int d, double when) {
      const std::size_t o = op(j, s, d);
      span[o].start_s = when;
      if (arrived[o] == step[j].ranks.size) ready.push_back({o, j, s});
    };
    // The round's steps, each once (the first unit of it feeds it): its first forward's input is
    // there at the barrier.
    std::size_t round_steps = 0;
    for (const auto& list : lists)
      for (std::size_t j : list)
        if (span[op(j, 0, 0)].start_s < 0) ++round_steps, feed(j, 0, 0, barrier);
    for (std::size_t s = 0; s < P; ++s)
      for (std::size_t u = 0; u < units; ++u)
        if (!lists[u].empty()) next_of(s, u, 0);
    std::size_t ran = 0;
    const std::size_t expected = 2 * P * round_steps;
    double round_end = barrier;
    while (!ready.empty()) {
      const auto [o, j, s] = ready.back();
      ready.pop_back();
      const int d = static_cast<int>(o % 2);
      const step_data& q = step[j];
      stage_span& x = span[o];
      for (int u = q.ranks.first; u < q.ranks.end(); ++u)
        x.start_s = std::max(x.start_s, free[s * units + static_cast<std::size_t>(u)]);
      x.end_s = x.start_s + (d == 0 ? q.forward_s : q.backward_s);
      const double end = x.end_s;
      ++ran;
      round_end = std::max(round_end, end);
      for (int u = q.ranks.first; u < q.ranks.end(); ++u) {
        const auto uu = static_cast<std::size_t>(u);
        const std::size_t i = s * units + uu;
        free[i] = end;
        if (++at[i] < 2 * lists[uu].size()) next_of(s, uu, at[i]);
      }
      if (d == 0)
        s + 1 < P ? feed(j, s + 1, 0, end + q.transfer_s) : feed(j, s, 1, end);
      else if (s > 0)
        feed(j, s - 1, 1, end + q.transfer_s);
    }
    if (ran != expected) {
      std::size_t first = n;
      for (const auto& list : lists)
        for (std::size_t j : list)
          if (span[op(j, 0, 1)].end_s < 0) first = std::min(first, j);
      if (!stuck)
        throw error(errc::invalid_argument,
                    "the plan's pipeline schedule deadlocks in round " + std::to_string(round) + " at step " +
                        std::to_string(first) +
                        ": two units reach steps they share in different 1F1B orders; order each unit's steps "
                        "alike, or start a new round");
      stuck->first_stuck = first;
      barrier = 0;
      break;
    }
    barrier = round_end;
  }
  pipeline_timeline out;
  out.stages = stages;
  out.forward.reserve(n * P), out.backward.reserve(n * P);
  for (std::size_t o = 0; o < span.size(); o += 2) {  // what never ran (after a deadlock) stays {0, 0}
    out.forward.push_back(span[o].end_s < 0 ? stage_span{} : span[o]);
    out.backward.push_back(span[o + 1].end_s < 0 ? stage_span{} : span[o + 1]);
  }
  out.makespan_s = barrier;
  return out;
}

/// Micro-batches stage 0 of a unit holds in flight at most: d (P - 1) + 1 (P for 1F1B).
inline std::size_t stage0_in_flight(int stages, int depth) noexcept {
  return static_cast<std::size_t>(depth) * static_cast<std::size_t>(stages - 1) + 1;
}

/// Per step, the most memory any of its units' stage-0 GPUs hold while it runs its forward there:
/// `static_bytes`, plus over the unit's window of in-flight steps ending at it (the last
/// min(d (P - 1) + 1, p + 1) of its round's steps) their stored bytes, `memory[j] - static_bytes -
/// working[j]`, plus the largest `working[j]` of the window (the file comment).
inline std::vector<double> in_flight_memory(const plan& p, std::span<const double> memory,
                                            std::span<const double> working, double static_bytes, int stages) {
  check(memory.size() == p.steps.size() && working.size() == p.steps.size() && stages >= 1, errc::invalid_argument,
        [&] {
          return std::to_string(memory.size()) + " memories and " + std::to_string(working.size()) +
                 " working sets for " + std::to_string(p.steps.size()) + " steps on " + std::to_string(stages) +
                 " stages; give one of each per step, and at least one stage";
        });
  std::vector<double> out(p.steps.size(), 0);
  const std::size_t window = stage0_in_flight(stages, p.warmup_depth);
  for (const auto& [round, lists] : detail::unit_lists(p))
    for (const auto& list : lists)
      for (std::size_t i = 0; i < list.size(); ++i) {
        double stored = 0, largest = 0;
        const std::size_t first = i + 1 >= window ? i + 1 - window : 0;
        for (std::size_t q = first; q <= i; ++q) {
          stored += memory[list[q]] - static_bytes - working[list[q]];
          largest = std::max(largest, working[list[q]]);
        }
        out[list[i]] = std::max(out[list[i]], static_bytes + stored + largest);
      }
  return out;
}

}  // namespace dcp
