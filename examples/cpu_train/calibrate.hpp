#pragma once
/// \file
/// `dcp-train-cpu --calibrate`: plans with online calibration (`scheduler_options::calibration`,
/// prior: `dcp::fitted_cost` fitted to this machine's profile), starts with the start-up probe
/// (a few steps of the first batch measured before its plan), measures every micro-step and
/// observes it, and compares four models' predictions on rank 0's micro-steps: the analytic
/// model (the scaled CPU device), the dual-layer profiled model, the fit to the profile, and the
/// online-calibrated model.
///
/// What is measured: each rank's thread CPU time (CLOCK_THREAD_CPUTIME_ID) around its
/// forward+backward, the profile with the same clock (`thread_cpu_meter`). Two ranks share two
/// cores with whatever else runs, so wall-clock time mostly measures the neighbours; CPU time
/// is the rank's own work (compute and the copies of its collectives), not the time it slept
/// in a collective waiting for its peer. The gang's step time is still its slowest member's (the
/// calibrator takes the largest report); what rank 0 measures is its own part, so the calibrated
/// model's prediction for it divides by rank 0's learned speed. Wall-clock time is printed beside
/// it. Peak memory is the
/// static bytes plus the activation peak of the thread's `dcp::memory_counter`.
///
/// Held out: every prediction is made before its step ran (prequential): the calibrated model of
/// global batch i was fitted on the profile and batches 0..i-1, the others never see a training
/// step.

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include <dcp/cost/analytic.hpp>
#include <dcp/cost/fit.hpp>
#include <dcp/cost/fitted_cost.hpp>
#include <dcp/cost/profiled_cost.hpp>
#include <dcp/plan/dcp_planner.hpp>
#include <dcp/policies.hpp>
#include <dcp/scheduler.hpp>

#include "profile_step.hpp"
#include "trainer.hpp"

namespace cpu_train {

/// One micro-step of rank 0: what it measured and what each model predicted (seconds).
struct prediction_row {
  int step = 0;
  double measured = 0, analytic = 0, profiled = 0, fitted = 0, calibrated = 0;
};

/// Median of |prediction - measured| over rows of steps >= `from_step` (NaN when there are none).
inline double median_abs_error(const std::vector<prediction_row>& rows, double prediction_row::*model, int from_step) {
  std::vector<double> e;
  for (const auto& r : rows)
    if (r.step >= from_step) e.push_back(std::abs(r.*model - r.measured));
  if (e.empty()) return std::nan("");
  std::sort(e.begin(), e.end());
  return e.size() % 2 ? e[e.size() / 2] : (e[e.size() / 2 - 1] + e[e.size() / 2]) / 2;
}

/// Trains `steps` global batches with calibration on (see the file comment); rank 0 prints one
/// line per micro-step and the median absolute error per model, and writes every one of its
/// micro-steps (the fit's features, what it measured, what each model predicted) to `csv` when set.
template <class T, class Comm, class Data>
void train_calibrated(Comm& world, const model_config& mc, const Data& data, int sequences, int steps,
                      std::int64_t batch_tokens, optimizer_config oc, const dcp::analytic_cost& analytic,
                      const dcp::profiled_cost& profiled, const dcp::fitted_cost& fitted, const std::string& csv = {}) {
  // Each rank holds the profile's capacity: a step over it is re-run fully checkpointed.
  using policies = dcp::policies<dcp::fitted_cost, dcp::dcp_planner>;
  dcp::scheduler_options o;
  o.device = analytic.device;
  o.global_batch_tokens = batch_tokens;
  o.calibration.enabled = true;
  dcp::scheduler<dcp::transformer_spec, Comm, policies> sched(tiny_spec(mc), world, fitted, o);
  sched.set_dataset(data.make(sequences));
  tiny_transformer<T> model(mc);
  optimizer<T> opt(oc, model.params().size());
  const double fixed_bytes = static_bytes<T>(mc);
  const memory_limit memory{fitted.shape.capacity(), fixed_bytes};
  const bool root = world.rank() == 0;
  std::FILE* out = nullptr;
  if (root && !csv.empty()) {
    out = std::fopen(csv.c_str(), "w");
    dcp::check(out != nullptr, dcp::errc::invalid_argument, [&] { return "--calibrate-csv: cannot write " + csv; });
    std::fprintf(out, "step,index,sp,k,tokens,attention,f_linear,f_attention,f_intra,f_inter,f_message,f_block,wall_s,"
                      "cpu_s,peak_bytes,analytic_s,profiled_s,fitted_s,calibrated_s,calibrated_bytes,margin\n");
  }
  if (root)
    std::printf("dcp-train-cpu --calibrate: %d ranks; rank 0's thread CPU time of each micro-step's forward+backward "
                "(wall clock beside it), each model's prediction (ms), measured and calibrated peak memory (MB)\n"
                "%-9s %3s %3s %7s %9s %10s %10s %10s %10s %10s %7s %7s\n",
                world.size(), "step", "sp", "k", "tokens", "wall", "measured", "analytic", "profiled", "fitted",
                "calibrated", "peak", "pred");
  std::vector<prediction_row> rows;
  for (int i = 0; i < steps; ++i) {
    const auto batch = sched.sampler().next();
    if (i == 0) {  // the start-up probe: a few steps of the first batch, measured before its plan
      const auto p = probe_step(sched, model, data, batch.sequences, memory);
      observe_steps(sched, p, fixed_bytes);
      if (root)
        std::printf(
            "start-up probe: %zu micro-steps of the first batch (%zu on rank 0), %.3f ms of CPU time on rank 0\n",
            p.plan.steps.size(), p.timed.size(), [&] {
              double ms = 0;
              for (const auto& ts : p.timed) ms += 1e3 * ts.cpu_s;
              return ms;
            }());
    }
    const auto s = train_step(sched, model, opt, data, batch.sequences, recompute_mode::plan, memory);
    const auto& cal = *sched.calibration();  // the model this step's plan was made with
    for (const auto& ts : s.timed) {
      const auto& st = s.plan.steps[ts.index];
      dcp::analytic_load l{};
      dcp::profiled_load pl{};
      std::int64_t tokens = 0;
      for (const auto& q : st.sequences) {
        const dcp::sequence seq{q.id, q.frames, q.spatial};
        l = l + analytic.load_of(seq), pl = pl + profiled.load_of(seq), tokens += q.tokens;
      }
      const int sp = st.sp(), k = st.checkpointed_blocks;
      // Each rank measures its own CPU time, so the calibrated model predicts this rank's part:
      // the fitted time (a full-speed GPU's) over this rank's learned speed. (A gang's time, what
      // the calibrator fits, is its slowest member's; that is another rank's measurement.)
      const double speed = cal.speeds().empty() ? 1.0 : cal.speeds()[std::size_t(world.rank())];
      const double peak = fixed_bytes + ts.activation_bytes;
      const prediction_row row{i, ts.cpu_s, analytic.time(l, sp, k), profiled.time(pl, sp, k), fitted.time(l, sp, k),
                               cal.model().time(l, sp, k) / speed};
      if (root) {
        rows.push_back(row);
        const double pred_bytes = cal.model().memory(l, sp, k);
        std::printf("%4d.%-4zu %3d %3d %7lld %9.3f %10.3f %10.3f %10.3f %10.3f %10.3f %7.3f %7.3f\n", i, ts.index, sp, k,
                    (long long)tokens, 1e3 * ts.wall_s, 1e3 * row.measured, 1e3 * row.analytic, 1e3 * row.profiled,
                    1e3 * row.fitted, 1e3 * row.calibrated, peak / 1e6, pred_bytes / 1e6);
        if (out) {
          const auto f = fitted.time_features(l, sp, k);
          std::fprintf(out, "%d,%zu,%d,%d,%lld,%.9g,%.9g,%.9g,%.9g,%.9g,%.9g,%.9g,%.9g,%.9g,%.9g,%.9g,%.9g,%.9g,%.9g,%.9g,%.9g\n",
                       i, ts.index, sp, k, (long long)tokens, l.attention, f[0], f[1], f[2], f[3], f[4], f[5], ts.wall_s,
                       ts.cpu_s, peak, row.analytic, row.profiled, row.fitted, row.calibrated, pred_bytes,
                       cal.model().memory_margin);
        }
      }
    }
    observe_steps(sched, s, fixed_bytes);
    if (root) {
      std::printf("step %3d  loss %.5f  planned with memory margin %.4f, %zu micro-steps out of memory re-run, speeds",
                  i, s.loss, cal.model().memory_margin, s.recovered);
      for (double v : cal.speeds()) std::printf(" %.3f", v);
      std::printf("%s\n", cal.speeds().empty() ? " all 1" : "");
    }
  }
  if (out) {
    const bool written = std::ferror(out) == 0;
    const bool closed = std::fclose(out) == 0;  // flushes: a full disk fails here
    dcp::check(written && closed, dcp::errc::io_error,
               [&] { return "--calibrate-csv: writing " + csv + " failed (its disk must have room)"; });
  }
  if (!root) return;
  const int half = steps / 2;
  std::printf("median absolute error of predicted micro-step time (ms) over rank 0's %zu micro-steps (each predicted "
              "before it ran):\n  %-11s %10s %14s\n",
              rows.size(), "model", "all steps", "second half");
  const std::pair<const char*, double prediction_row::*> models[] = {{"analytic", &prediction_row::analytic},
                                                                     {"profiled", &prediction_row::profiled},
                                                                     {"fitted", &prediction_row::fitted},
                                                                     {"calibrated", &prediction_row::calibrated}};
  for (const auto& [name, field] : models)
    std::printf("  %-11s %10.3f %14.3f\n", name, 1e3 * median_abs_error(rows, field, 0),
                1e3 * median_abs_error(rows, field, half));
  std::ostringstream os;
  os << sched.calibration()->model() << ", speeds:";
  for (double v : sched.calibration()->speeds()) os << " " << v;
  if (sched.calibration()->speeds().empty()) os << " all 1";
  std::printf("calibrated model: %s\n", os.str().c_str());
}

}  // namespace cpu_train
