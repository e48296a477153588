#pragma once
/// \file
/// dcp as a calibrating training loop runs it, on the simulator's truth clock (DESIGN section
/// 9.3): the `dcp` row of a comparison on a truth. Before the first batch, the start-up probe
/// (`plan/probe.hpp`) runs a few steps of that batch on the truth, charged to the run; every
/// batch is then planned by the dcp planner on the model a `calibrator` refitted from every step
/// run so far (the probe's included), with the per-GPU speeds and the memory margin it learned.
/// What a training loop with `scheduler_options::calibration` does.
///
/// An out-of-memory step reports its true peak but no time (it did not run as planned), so it
/// widens the margin without skewing the time fit.

#include <chrono>
#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <vector>

#include <dcp/cost/analytic.hpp>
#include <dcp/cost/calibration.hpp>
#include <dcp/cost/cost_concepts.hpp>
#include <dcp/cost/fit.hpp>
#include <dcp/cost/fitted_cost.hpp>
#include <dcp/group/group_concepts.hpp>
#include <dcp/plan/dcp_planner.hpp>
#include <dcp/plan/plan.hpp>
#include <dcp/plan/planning_context.hpp>
#include <dcp/plan/probe.hpp>
#include <dcp/recompute/recompute_concepts.hpp>
#include <dcp/recompute/selective_recompute.hpp>
#include <dcp/sequence.hpp>
#include <dcp/sim/execute.hpp>
#include <dcp/sim/metrics.hpp>
#include <dcp/sim/simulator.hpp>
#include <dcp/sim/truth.hpp>

namespace dcp::sim {

/// The jitter stream of the start-up probe (batches use streams 0, 1, ...).
inline constexpr std::uint64_t probe_stream = std::numeric_limits<std::uint64_t>::max();

namespace detail {
// Adds every step of `e` to `cal` as each member measured it: its true time (none for an
// out-of-memory step) and its true peak.
inline void observe_execution(calibrator& cal, const execution& e) {
  for (std::size_t j = 0; j < e.executed.steps.size(); ++j) {
    const auto& st = e.executed.steps[j];
    executed_step x{{}, st.ranks, st.checkpointed_blocks, {}, {}};
    for (const auto& q : st.sequences) x.load = x.load + cal.model().load_of({q.id, q.frames, q.spatial});
    const double measured = e.oom[j] ? 0.0 : st.time_s;
    x.seconds.assign(static_cast<std::size_t>(st.sp()), measured);
    x.peak_bytes.assign(static_cast<std::size_t>(st.sp()), st.memory_bytes);
    cal.add(std::move(x));
  }
}
}  // namespace detail

/// Runs the probe (when `copt.probe.enabled`), then plans every batch on the calibrated model,
/// executes it on `t`, and feeds the executed steps back (see the file comment). Plan time
/// includes the refit (and, for the first batch, the probe's planning). The prior is `ctx.cost`;
/// every plan uses `ctx`'s recompute policy and group manager (the refitted models keep the
/// job's layout, so the manager fits them). The row is named `dcp`.
template <recompute_policy R, group_manager G, cost_model T>
truth_run_result simulate_calibrated(const planning_context<analytic_cost, R, G>& ctx,
                                     std::span<const std::vector<sequence>> batches, const truth<T>& t,
                                     const method_settings& s, calibration_options copt = {}, const options& opt = {}) {
  const analytic_cost& cost = ctx.cost;
  copt.enabled = true;
  calibrator cal(make_fitted_cost(cost), copt);
  dcp_planner planner;
  planner.loss = s.loss;
  planner.on_infeasible = s.on_infeasible;
  truth_run_result out;
  out.metrics.method = "dcp";
  out.metrics.gpus = cost.gpus();
  out.metrics.busy_s.assign(static_cast<std::size_t>(cost.gpus()), 0.0);
  out.metrics.update_s = update_seconds_of(t.model);
  detail::progress_line progress(opt.progress, opt.progress_after_s, "simulating dcp (calibrated)");
  for (std::size_t i = 0; i < batches.size(); ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    if (i == 0 && copt.probe.enabled) {
      const plan p = probe_plan(planner, planning_context{cal.model(), ctx.recompute, ctx.groups},
                                std::span<const sequence>(batches[i]), copt.probe);
      const execution e = execute(p, t, probe_stream);
      detail::observe_execution(cal, e);
      out.metrics.add_probe(e.executed, e.oom_steps);
    }
    if (i > 0 || copt.probe.enabled) cal.refit();
    planner.speeds = cal.speeds();
    plan p = planner.plan(planning_context{cal.model(), ctx.recompute, ctx.groups},
                          std::span<const sequence>(batches[i]));
    p.method = "dcp";
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    execution e = execute(p, t, i);
    detail::observe_execution(cal, e);
    out.metrics.add(e.executed, seconds, e.oom_steps, e.peak_bytes);
    if (opt.keep_plans) out.plans.push_back(std::move(p)), out.executed.push_back(std::move(e.executed));
    progress.update(i + 1, batches.size());
  }
  return out;
}

/// `simulate_calibrated` in `planning_context{cost, selective_recompute{}, default_groups(cost)}`.
template <cost_model T>
truth_run_result simulate_calibrated(const analytic_cost& cost, std::span<const std::vector<sequence>> batches,
                                     const truth<T>& t, const method_settings& s, calibration_options copt = {},
                                     const options& opt = {}) {
  return simulate_calibrated(planning_context{cost, selective_recompute{}, default_groups(cost)}, batches, t, s, copt,
                             opt);
}

/// Tokens per second over batches [first, last) of executed plans.
inline double tokens_per_s(std::span<const plan> executed, std::size_t first, std::size_t last) {
  double tokens = 0, seconds = 0;
  for (std::size_t i = first; i < last && i < executed.size(); ++i) {
    seconds += executed[i].makespan_s;
    for (const auto& st : executed[i].steps)
      for (const auto& q : st.sequences) tokens += static_cast<double>(q.tokens);
  }
  return seconds > 0 ? tokens / seconds : 0;
}

/// Out-of-memory steps in batches [first, last) of executed plans: steps whose true memory exceeds
/// their block's capacity on `cost` (`capacity_on`: each GPU's own on a mixed cluster).
template <cost_model C>
std::int64_t oom_steps(std::span<const plan> executed, const C& cost, std::size_t first, std::size_t last) {
  std::int64_t n = 0;
  for (std::size_t i = first; i < last && i < executed.size(); ++i)
    for (const auto& st : executed[i].steps) n += st.memory_bytes > capacity_on(cost, st.ranks);
  return n;
}

}  // namespace dcp::sim
