#pragma once
/// \file
/// `dcp-train-cpu --calibrate`: plans with online calibration (`scheduler_options::calibration`,
/// prior: `dcp::fitted_cost` fitted to this machine's profile), measures every micro-step with
/// the host clock (steady_clock around forward+backward, so a gang step includes waiting for its
/// peers), observes it, and compares four models' predictions on rank 0's micro-steps: the
/// analytic model (the scaled CPU device), the dual-layer profiled model, the fit to the profile,
/// and the online-calibrated model. Every prediction is made before its step ran (a plan's
/// calibrated model saw only earlier steps; the others never see training steps), so every
/// step is held out.

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include <dcp/cost/analytic.hpp>
#include <dcp/cost/fitted_cost.hpp>
#include <dcp/cost/profiled_cost.hpp>
#include <dcp/plan/dcp_planner.hpp>
#include <dcp/policies.hpp>
#include <dcp/scheduler.hpp>

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
/// line per micro-step and the median absolute error per model.
template <class T, class Comm, class Data>
void train_calibrated(Comm& world, const model_config& mc, const Data& data, int sequences, int steps,
                      std::int64_t batch_tokens, optimizer_config oc, const dcp::analytic_cost& analytic,
                      const dcp::profiled_cost& profiled, const dcp::fitted_cost& fitted) {
  using policies = dcp::policies<dcp::fitted_cost, dcp::dcp_planner>;
  dcp::scheduler_options o;
  o.device = analytic.device;
  o.global_batch_tokens = batch_tokens;
  o.calibration.enabled = true;
  dcp::scheduler<dcp::transformer_spec, Comm, policies> sched(tiny_spec(mc), world, fitted, o);
  sched.set_dataset(data.make(sequences));
  tiny_transformer<T> model(mc);
  optimizer<T> opt(oc, model.params().size());
  const bool root = world.rank() == 0;
  if (root)
    std::printf("dcp-train-cpu --calibrate: %d ranks; host wall-clock (steady_clock) of each micro-step's "
                "forward+backward on rank 0, and each model's prediction (ms)\n"
                "%-9s %3s %3s %7s %11s %11s %11s %11s %11s\n",
                world.size(), "step", "sp", "k", "tokens", "measured", "analytic", "profiled", "fitted", "calibrated");
  std::vector<prediction_row> rows;
  for (int i = 0; i < steps; ++i) {
    const auto batch = sched.sampler().next();
    const auto s = train_step(sched, model, opt, data, batch.sequences);
    const auto& cal = *sched.calibration();  // the model this step's plan was made with
    for (const auto& [index, seconds] : s.timed) {
      const auto& st = s.plan.steps[index];
      dcp::analytic_load l{};
      dcp::profiled_load pl{};
      std::int64_t tokens = 0;
      for (const auto& q : st.sequences) {
        const dcp::sequence seq{q.id, q.frames, q.spatial};
        l = l + analytic.load_of(seq), pl = pl + profiled.load_of(seq), tokens += q.tokens;
      }
      const int sp = st.sp(), k = st.checkpointed_blocks;
      double speed = 1;
      if (!cal.speeds().empty())
        for (int r = st.ranks.first; r < st.ranks.end(); ++r) speed = std::min(speed, cal.speeds()[std::size_t(r)]);
      const prediction_row row{i, seconds, analytic.time(l, sp, k), profiled.time(pl, sp, k), fitted.time(l, sp, k),
                               cal.model().time(l, sp, k) / speed};
      if (root) {
        rows.push_back(row);
        std::printf("%4d.%-4zu %3d %3d %7lld %11.3f %11.3f %11.3f %11.3f %11.3f\n", i, index, sp, k, (long long)tokens,
                    1e3 * row.measured, 1e3 * row.analytic, 1e3 * row.profiled, 1e3 * row.fitted, 1e3 * row.calibrated);
      }
      sched.observe(index, seconds);
    }
    if (root) std::printf("step %3d  loss %.5f\n", i, s.loss);
  }
  if (!root) return;
  const int half = steps / 2;
  std::printf("median absolute error of predicted micro-step time (ms) over rank 0's %zu micro-steps (all held out):\n"
              "  %-11s %10s %14s\n",
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
