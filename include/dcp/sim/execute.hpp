#pragma once
/// \file
/// The executor: runs a plan on a truth clock (`sim/truth.hpp`, DESIGN section 8) and re-derives
/// every start time; the plan's own start times are never used.
///
/// Rules (the same a training loop follows):
///   - each GPU runs its steps in plan order; rounds are barriers: a step of round r starts only
///     after every step of every earlier round has ended on every GPU;
///   - a gang step starts when all its members are free and its round's barrier has passed;
///   - a step lasts t_true(load, sp, k) / (slowest member's speed) * jitter, a member's speed its
///     node's device speed (on a mixed cluster) times the truth's factor for it, the jitter a
///     log-normal factor exp(sigma z - sigma^2 / 2) (mean 1) with z drawn from
///     derive_seed(derive_seed(seed, batch), step index) (dcp's own portable PRNG);
///   - a step whose true memory exceeds the capacity (each GPU's own: on a mixed cluster the
///     smallest member's) is an out-of-memory step: counted, and
///     charged as a third of its time (the forward pass up to where activations peak) plus a
///     re-run with every block checkpointed; it keeps its true memory so the peak shows it;
///   - a truth that cannot tell a step's memory or time (a `dcp.profile/v1` table without the
///     step's (sp, k): infinite) makes it an out-of-memory step whose peak is unknown: its
///     memory stays infinite (the calibrator reads that as "ran out, peak unknown"; the run's
///     peak counts the capacity it filled), an unknown time before the failure is priced as the
///     re-run's; a step the truth cannot time even with every block checkpointed is a
///     `dcp::error` naming its sp and k, never an infinite makespan;
///   - without jitter, a batch that ends below its lower bound on the truth is a `dcp::error`:
///     the truth's clock breaks a law the bound relies on (efficiency above 1 is never reported);
///   - on a layout whose collectives span groups (zero3, ep > 1) a domain's micro-steps run in
///     lockstep (`plan/coupling.hpp`): a round starts when the domain's previous one has ended,
///     its members wait for each other block by block, and a padding pass lasts the truth's
///     `padding_time` (jittered as a step is);
///   - the batch ends when the last GPU finishes.
/// Under pp > 1 (DESIGN section 4.5) a step is a micro-batch: the same true time on every stage,
/// split into forward and backward by `forward_share`, the truth's `stage_transfer` between
/// stages, every start re-derived from the 1F1B schedule's dependencies (`schedule_pipeline`);
/// a step runs out of memory when its stage-0 GPUs' memory in flight (`in_flight_memory`, true
/// memories) exceeds the capacity.
///
/// Interfaces other code builds on (kept stable): `execution execute(plan, truth, batch_index)`,
/// `simulate(cost, planner, batches, truth, options)`.

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <span>
#include <vector>

#include <dcp/cost/cost_concepts.hpp>
#include <dcp/plan/lower_bounds.hpp>
#include <dcp/plan/pipeline_plan.hpp>
#include <dcp/plan/pipeline_schedule.hpp>
#include <dcp/plan/plan.hpp>
#include <dcp/plan/plan_builder.hpp>
#include <dcp/plan/plan_concepts.hpp>
#include <dcp/plan/retime.hpp>
#include <dcp/random.hpp>
#include <dcp/recompute/selective_recompute.hpp>
#include <dcp/sequence.hpp>
#include <dcp/sim/simulator.hpp>
#include <dcp/sim/truth.hpp>

namespace dcp::sim {

/// A plan as it ran on a truth.
struct execution {
  /// The plan with true start, time and memory per step (same step order), the true makespan,
  /// and the lower bounds of its sequences on the truth's deterministic part and speeds.
  plan executed;
  std::vector<char> oom;       ///< per step: true memory over capacity
  std::int64_t oom_steps = 0;  ///< steps with `oom` set
  double peak_bytes = 0;       ///< the most true memory a GPU holds (in flight on stage 0 under pp > 1)
  friend bool operator==(const execution&, const execution&) = default;
};

/// The sequences a plan step runs, rebuilt from its entries.
inline std::vector<sequence> sequences_of(const plan_step& s) {
  std::vector<sequence> out;
  out.reserve(s.sequences.size());
  for (const auto& q : s.sequences) out.push_back({q.id, q.frames, q.spatial});
  return out;
}

/// The jitter factor of step `index` of batch `batch` (1 when sigma is 0): log-normal, mean 1.
inline double jitter_factor(double sigma, std::uint64_t seed, std::uint64_t batch, std::uint64_t index) {
  if (sigma == 0) return 1.0;
  xoshiro256ss g(derive_seed(derive_seed(seed, batch), index));
  return std::exp(sigma * standard_normal(g) - sigma * sigma / 2);
}

/// Runs `p` on `t` (the executor rules of the file comment). `batch_index` selects the jitter
/// stream, so every method sees independent but reproducible noise per batch.
template <cost_model T>
execution execute(const plan& p, const truth<T>& t, std::uint64_t batch_index = 0) {
  const int n = t.model.gpus();
  check(p.gpus == n, errc::invalid_argument, [&] {
    return "plan for " + std::to_string(p.gpus) + " GPUs cannot run on a truth of " + std::to_string(n) + " GPUs";
  });
  execution out;
  out.executed = p;
  out.oom.assign(p.steps.size(), 0);

  std::vector<sequence> planned;
  const std::vector<double> speeds = job_speeds(t.model.layout(), t.speeds);
  const int L = t.model.blocks();
  const int stages = t.model.layout().pp;
  // True time (before any out-of-memory re-run), memory and load of every step.
  std::vector<double> seconds(p.steps.size()), memory(p.steps.size());
  std::vector<typename T::load_type> loads(p.steps.size());
  for (std::size_t i = 0; i < p.steps.size(); ++i) {
    const plan_step& s = p.steps[i];
    check(s.ranks.first >= 0 && s.ranks.size > 0 && s.ranks.end() <= n, errc::invalid_argument, [&] {
      return "plan step " + std::to_string(i) + " runs on ranks [" + std::to_string(s.ranks.first) + ", " +
             std::to_string(s.ranks.end()) + ") outside the " + std::to_string(n) + " GPUs";
    });
    if (s.sequences.empty()) {  // a padding pass (coupled plans)
      seconds[i] = padding_time_of(t.model);
      memory[i] = t.model.memory(loads[i], 1, 0);
      continue;
    }
    const auto seqs = sequences_of(s);
    planned.insert(planned.end(), seqs.begin(), seqs.end());
    for (const auto& q : seqs) loads[i] = loads[i] + t.model.load_of(q);
    seconds[i] = time_with_ring(t.model, loads[i], s.sp(), s.checkpointed_blocks, s.ring);
    memory[i] = t.model.memory(loads[i], s.sp(), s.checkpointed_blocks);
  }
  // Out of memory: a step's own memory, or under pp its stage-0 GPUs' memory in flight.
  std::vector<double> held = memory;
  if (stages > 1) {
    if constexpr (pipeline_cost_model<T>) {
      std::vector<double> working(p.steps.size());
      for (std::size_t i = 0; i < p.steps.size(); ++i) working[i] = t.model.working_memory(loads[i], p.steps[i].sp());
      held = in_flight_memory(p, memory, working, t.model.static_memory(), stages);
    }
  }
  for (std::size_t i = 0; i < p.steps.size(); ++i) {
    const plan_step& s = p.steps[i];
    const double capacity = capacity_on(t.model, s.ranks);
    out.peak_bytes = std::max(out.peak_bytes, std::isfinite(held[i]) ? held[i] : capacity);
    if (held[i] > capacity) {
      out.oom[i] = 1, ++out.oom_steps;
      const double rerun = time_with_ring(t.model, loads[i], s.sp(), L, s.ring);
      check(std::isfinite(rerun) && rerun > 0, errc::invalid_argument, [&] {
        return "the truth cannot time step " + std::to_string(i) + " of batch " + std::to_string(batch_index) +
               " (sp = " + std::to_string(s.sp()) + ", " + std::to_string(s.checkpointed_blocks) +
               " blocks checkpointed) nor its re-run with all " + std::to_string(L) +
               " checkpointed: its clock has no time for them (a profile without sp = " + std::to_string(s.sp()) +
               "?); profile every sp the plans use, or plan on the sizes the profile holds";
      });
      seconds[i] = (std::isfinite(seconds[i]) ? seconds[i] : rerun) / 3 + rerun;
    }
    check(std::isfinite(seconds[i]) && seconds[i] >= 0, errc::invalid_argument, [&] {
      return "the truth times step " + std::to_string(i) + " of batch " + std::to_string(batch_index) + " (sp = " +
             std::to_string(s.sp()) + ", " + std::to_string(s.checkpointed_blocks) + " blocks checkpointed) at " +
             std::to_string(seconds[i]) + " s within its memory; a clock's times are finite and not negative: "
             "check the truth's profile or factors";
    });
    if (!speeds.empty()) seconds[i] /= block_speed(speeds, s.ranks);
    if (t.jitter != 0) seconds[i] *= jitter_factor(t.jitter, t.seed, batch_index, i);
    plan_step& e = out.executed.steps[i];
    e.time_s = seconds[i], e.memory_bytes = memory[i];
  }
  // Every start re-derived from the plan's order on the true times (1F1B under pp > 1: split and
  // transferred on the truth's clock).
  derive_starts(out.executed, t.model, stages);
  const double makespan = out.executed.makespan_s;
  out.executed.speeds = speeds;
  const batch_bounds bounds = pipelined(lower_bounds(t.model, planned, speeds), stages);
  out.executed.lower_bound_s = bounds.simple_s;
  out.executed.joint_lower_bound_s = bounds.joint_s;
  // Without jitter the truth is the clock its bound is computed on: a batch that ends sooner than
  // its bound shows a clock that breaks a law the bound relies on (time that falls as work grows,
  // e.g. a non-monotone profile), and every efficiency it reported would be wrong.
  check(t.jitter != 0 || makespan >= bounds.joint_s * (1 - 1e-9) || p.steps.empty(), errc::invalid_argument, [&] {
    return "batch " + std::to_string(batch_index) + " ends at " + std::to_string(makespan) +
           " s on the truth, below its lower bound " + std::to_string(bounds.joint_s) +
           " s: the truth's clock breaks a law the bound relies on (a time that falls as work grows, e.g. a "
           "non-monotone profile); check the truth's profile or factors";
  });
  return out;
}

/// What a run on a truth returns: the metrics on the truth, and (with `options::keep_plans`)
/// the plans as made and as executed.
struct truth_run_result {
  run_metrics metrics;       ///< on the truth's clock; efficiency against the truth's lower bound
  std::vector<plan> plans;     ///< as planned, on the planner's cost model
  std::vector<plan> executed;  ///< as executed on the truth
};

/// Plans every batch with `planner` in `ctx` and executes each plan on `t`; batch i uses jitter
/// stream i.
template <any_planning_context Ctx, planner P, cost_model T>
truth_run_result simulate(const Ctx& ctx, const P& planner, std::span<const std::vector<sequence>> batches,
                          const truth<T>& t, const options& opt = {}) {
  const auto& cost = ctx.cost;
  truth_run_result out;
  out.metrics.method = planner.name();
  out.metrics.gpus = cost.gpus();
  out.metrics.busy_s.assign(static_cast<std::size_t>(cost.gpus()), 0.0);
  out.metrics.update_s = update_seconds_of(t.model);
  detail::progress_line progress(opt.progress, opt.progress_after_s, "simulating " + planner.name());
  for (std::size_t i = 0; i < batches.size(); ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    plan p = planner.plan(ctx, std::span<const sequence>(batches[i]));
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    execution e = execute(p, t, i);
    out.metrics.add(e.executed, seconds, e.oom_steps, e.peak_bytes);
    if (opt.keep_plans) out.plans.push_back(std::move(p)), out.executed.push_back(std::move(e.executed));
    progress.update(i + 1, batches.size());
  }
  return out;
}

/// `simulate` on a truth in `planning_context{cost, selective_recompute{}, default_groups(cost)}`.
template <cost_model C, planner P, cost_model T>
truth_run_result simulate(const C& cost, const P& planner, std::span<const std::vector<sequence>> batches,
                          const truth<T>& t, const options& opt = {}) {
  return simulate(planning_context{cost, selective_recompute{}, default_groups(cost)}, planner, batches, t, opt);
}

}  // namespace dcp::sim
