#pragma once
/// \file
/// `calibrator`: learns the real clock from executed micro-steps (DESIGN section 9.2). It keeps a
/// window of executed steps (what ran, on which ranks, what each member measured), and `refit()`
/// turns them into
///   - a `fitted_cost` (the prior refitted, `fit_cost`), on times corrected for slow GPUs;
///   - per-GPU speed factors: a GPU whose steps run consistently slower than the fit predicts,
///     relative to the median GPU, gets speed < 1 (a gang step is charged to the member that
///     set its time, see `learn_speeds`);
///   - a memory margin: the largest relative excess of a measured peak over the fit, never below
///     `min_memory_margin` (before any peak is measured: `memory_margin`).
/// A pure function of the steps in the window, in the order they were added: ranks that add the
/// same steps in the same order get bit-identical models (the scheduler adds them in plan order).
/// The scheduler (`scheduler_options::calibration`) and `dcp-sim --calibrate` use it.

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <limits>
#include <ostream>
#include <string>
#include <vector>

#include <dcp/cost/fitted_cost.hpp>
#include <dcp/error.hpp>
#include <dcp/group/group_concepts.hpp>

namespace dcp {

/// Calibration settings (a scheduler option, and `dcp-sim --calibrate`).
struct calibration_options {
  bool enabled = false;             ///< observe steps and replan with the refitted model
  double memory_margin = 0.05;      ///< planning capacity = C / (1 + margin) until peaks are measured
  double min_memory_margin = 0.01;  ///< the least margin measured peaks may tighten it to
  double prior_weight = 0.001;      ///< `fit_options::prior_weight`
  std::size_t window = 4096;        ///< most recent executed steps the fit uses
  bool learn_speed = true;          ///< learn per-GPU speed factors (the planner's `speeds`)
  double speed_tolerance = 0.03;    ///< a GPU within this fraction of the median runs at speed 1

  /// Throws `dcp::error` naming the option unless every value is in its domain.
  void validate() const {
    auto need = [](bool ok, const std::string& what) {
      check(ok, errc::invalid_argument, [&] { return "calibration_options::" + what; });
    };
    need(std::isfinite(memory_margin) && memory_margin >= 0 && memory_margin < 1,
         "memory_margin = " + std::to_string(memory_margin) + " must be in [0, 1)");
    need(std::isfinite(min_memory_margin) && min_memory_margin >= 0 && min_memory_margin <= memory_margin,
         "min_memory_margin = " + std::to_string(min_memory_margin) + " must be in [0, memory_margin]");
    need(std::isfinite(prior_weight) && prior_weight >= 0,
         "prior_weight = " + std::to_string(prior_weight) + " must be finite and not negative");
    need(window > 0, "window must be positive");
    need(std::isfinite(speed_tolerance) && speed_tolerance >= 0 && speed_tolerance < 1,
         "speed_tolerance = " + std::to_string(speed_tolerance) + " must be in [0, 1)");
  }
  friend bool operator==(const calibration_options&, const calibration_options&) = default;
  friend std::ostream& operator<<(std::ostream& os, const calibration_options& o) {
    os << "calibration_options{";
    if (!o.enabled) return os << "off}";
    return os << "margin=" << o.memory_margin << ", min_margin=" << o.min_memory_margin
              << ", prior_weight=" << o.prior_weight << ", window=" << o.window << ", learn_speed=" << o.learn_speed
              << ", speed_tolerance=" << o.speed_tolerance << "}";
  }
};

/// One micro-step as it ran: its load on `ranks` with `checkpointed_blocks`, and what each member
/// measured (`seconds[i]`, `peak_bytes[i]` of rank `ranks.first + i`; a negative value: that
/// member reported nothing; 0: it did not measure that quantity).
struct executed_step {
  analytic_load load;
  rank_block ranks;
  int checkpointed_blocks = 0;
  std::vector<double> seconds, peak_bytes;
  friend bool operator==(const executed_step&, const executed_step&) = default;
};

/// What the last `refit` used and ignored.
struct calibration_report {
  std::size_t steps = 0;        ///< executed steps in the window
  std::size_t time_points = 0;  ///< of which had a measured time
  std::size_t memory_points = 0;
  std::size_t missing_reports = 0;  ///< member reports that never came (a rank that sent none)
  std::vector<std::string> ignored;  ///< why steps were left out (first few)
  friend bool operator==(const calibration_report&, const calibration_report&) = default;
};

class calibrator {
 public:
  /// `prior`: the model before any measurement (its margin is replaced by the options').
  explicit calibrator(fitted_cost prior, calibration_options options = {})
      : prior_(std::move(prior)), options_(options) {
    options_.validate();
    prior_.memory_margin = options_.memory_margin;
    prior_.residuals = {};
    prior_.validate();
    model_ = prior_;
  }

  /// Adds one executed step (the oldest leaves once the window is full). Throws `dcp::error`
  /// naming the value for a step outside the job or a NaN / infinite measurement.
  void add(executed_step s) {
    const int n = prior_.gpus();
    check(s.ranks.size >= 1 && s.ranks.first >= 0 && s.ranks.end() <= n && legal_sp(prior_, s.ranks.size),
          errc::invalid_argument, [&] {
            return "calibrator: step on ranks [" + std::to_string(s.ranks.first) + ", " + std::to_string(s.ranks.end()) +
                   ") is not an aligned group of this " + std::to_string(n) + "-GPU job";
          });
    check(s.seconds.size() == std::size_t(s.ranks.size) && s.peak_bytes.size() == std::size_t(s.ranks.size),
          errc::invalid_argument, [&] {
            return "calibrator: a step on " + std::to_string(s.ranks.size) + " ranks needs one time and one peak per member, got " +
                   std::to_string(s.seconds.size()) + " and " + std::to_string(s.peak_bytes.size());
          });
    for (std::size_t i = 0; i < s.seconds.size(); ++i)
      check(std::isfinite(s.seconds[i]) && std::isfinite(s.peak_bytes[i]), errc::invalid_argument, [&] {
        return "calibrator: rank " + std::to_string(s.ranks.first + int(i)) + " measured seconds = " +
               std::to_string(s.seconds[i]) + ", peak_bytes = " + std::to_string(s.peak_bytes[i]) +
               "; measurements must be finite";
      });
    steps_.push_back(std::move(s));
    while (steps_.size() > options_.window) steps_.pop_front();
  }

  /// Refits the model, the speeds and the margin from the window (see the file comment).
  void refit() {
    report_ = {};
    report_.steps = steps_.size();
    const int n = prior_.gpus();
    std::vector<double> speed(static_cast<std::size_t>(n), 1.0);
    // Per step: the gang's time (its slowest reporting member) and peak; members that never reported.
    std::vector<double> measured(steps_.size(), 0), peak(steps_.size(), 0);
    for (std::size_t i = 0; i < steps_.size(); ++i) {
      const auto& s = steps_[i];
      bool any = false;
      for (std::size_t m = 0; m < s.seconds.size(); ++m) {
        if (s.seconds[m] < 0) {
          ++report_.missing_reports;
          note("step " + std::to_string(i) + ": rank " + std::to_string(s.ranks.first + int(m)) + " reported nothing");
          continue;
        }
        any = true;
        measured[i] = std::max(measured[i], s.seconds[m]);
        peak[i] = std::max(peak[i], s.peak_bytes[m]);
      }
      if (!any) note("step " + std::to_string(i) + ": no member reported; left out");
    }
    const fit_options fo{options_.prior_weight, true, true};
    std::vector<double> score(static_cast<std::size_t>(n), 0.0);  // learn_speeds' charging order
    std::vector<step_observation> obs;
    // Fit, learn speeds, refit on the corrected times, three times; then a last fit on the final
    // speeds, so the model is the one they correct for (model time / speed is a GPU's time).
    const int passes = options_.learn_speed ? 4 : 1;
    for (int pass = 0; pass < passes; ++pass) {
      obs.clear();
      for (std::size_t i = 0; i < steps_.size(); ++i) {
        const auto& s = steps_[i];
        double slowest = 1;
        for (int r = s.ranks.first; r < s.ranks.end(); ++r) slowest = std::min(slowest, speed[std::size_t(r)]);
        obs.push_back({s.load, s.ranks.size, s.checkpointed_blocks, measured[i] * slowest, peak[i]});
      }
      model_ = fit_cost(prior_, obs, fo);
      if (pass + 1 < passes) speed = learn_speeds(measured, score);
    }
    report_.time_points = std::size_t(model_.residuals.time_points);
    report_.memory_points = std::size_t(model_.residuals.memory_points);
    speeds_.clear();
    if (std::any_of(speed.begin(), speed.end(), [](double v) { return v < 1; })) speeds_ = speed;
    // Margin: what the measured peaks exceed the fit by, at least the floor.
    double excess = -1;
    for (const auto& o : obs)
      if (o.peak_bytes > 0)
        excess = std::max(excess, o.peak_bytes / model_.memory(o.load, o.sp, o.checkpointed_blocks) - 1);
    model_.memory_margin = excess < 0 && report_.memory_points == 0 ? options_.memory_margin
                                                                    : std::max(options_.min_memory_margin, excess);
    if (model_.coef.static_bytes >= model_.capacity()) model_.memory_margin = options_.min_memory_margin;
  }

  /// The model to plan with (the prior, with the initial margin, before any refit).
  const fitted_cost& model() const noexcept { return model_; }
  /// Per-GPU speed factors in (0, 1]; empty when every GPU runs at full speed.
  const std::vector<double>& speeds() const noexcept { return speeds_; }
  const calibration_report& report() const noexcept { return report_; }
  const calibration_options& options() const noexcept { return options_; }
  std::size_t size() const noexcept { return steps_.size(); }

 private:
  void note(std::string why) {
    if (report_.ignored.size() < 8) report_.ignored.push_back(std::move(why));
  }

  // Per GPU: the median of log(measured / predicted) over the steps charged to it, relative to
  // the median GPU; slower than tolerance: speed = exp(-that). A gang step lasts as long as its
  // slowest member, so it is charged to the members that can have set its time: those whose own
  // report is within the tolerance of the largest, and of these the ones whose `score` (the
  // previous pass's mean log ratio over each GPU's charged steps) is within the tolerance of the
  // largest. A solo step charges its GPU. Members that report their own busy time (thread CPU
  // time, their own kernels) name the slow one directly, and members as fast as each other
  // share every gang step. When members report the gang's time (a wall clock that includes
  // waiting), the first pass charges every member, and the next ones charge the GPUs slow in
  // clearly more of their steps: a peer that ran enough fast steps elsewhere is cleared. GPUs
  // that (nearly) only ever ran together cannot be told apart and share the charge. `score` is
  // updated for the next pass.
  std::vector<double> learn_speeds(const std::vector<double>& measured, std::vector<double>& score) const {
    const int n = prior_.gpus();
    std::vector<std::vector<double>> charged(static_cast<std::size_t>(n));
    const double tie = -std::log(1 - options_.speed_tolerance);  // scores this close are equal
    for (std::size_t i = 0; i < steps_.size(); ++i) {
      const auto& s = steps_[i];
      if (!(measured[i] > 0)) continue;
      const double pred = model_.time(s.load, s.ranks.size, s.checkpointed_blocks);
      if (!(pred > 0)) continue;
      const double lr = std::log(measured[i] / pred);
      const double floor = measured[i] * (1 - options_.speed_tolerance);
      const auto first = std::size_t(s.ranks.first);
      double top = -std::numeric_limits<double>::infinity();
      for (std::size_t m = 0; m < s.seconds.size(); ++m)
        if (s.seconds[m] >= floor) top = std::max(top, score[first + m]);
      for (std::size_t m = 0; m < s.seconds.size(); ++m)
        if (s.seconds[m] >= floor && score[first + m] >= top - tie) charged[first + m].push_back(lr);
    }
    for (int r = 0; r < n; ++r) {
      const auto& v = charged[std::size_t(r)];
      double sum = 0;
      for (double x : v) sum += x;
      score[std::size_t(r)] = v.empty() ? 0 : sum / double(v.size());
    }
    auto median = [](std::vector<double> v) {
      std::sort(v.begin(), v.end());
      const std::size_t m = v.size() / 2;
      return v.size() % 2 ? v[m] : (v[m - 1] + v[m]) / 2;
    };
    std::vector<double> per(static_cast<std::size_t>(n), std::numeric_limits<double>::quiet_NaN());
    std::vector<double> known;
    for (int r = 0; r < n; ++r) {
      const auto& v = charged[std::size_t(r)];
      if (v.empty()) continue;
      per[std::size_t(r)] = median(v);
      known.push_back(per[std::size_t(r)]);
    }
    std::vector<double> speed(static_cast<std::size_t>(n), 1.0);
    if (known.empty()) return speed;
    const double ref = median(known);
    for (int r = 0; r < n; ++r) {
      const double d = per[std::size_t(r)] - ref;
      if (std::isfinite(d) && d > -std::log(1 - options_.speed_tolerance)) speed[std::size_t(r)] = std::max(0.05, std::exp(-d));
    }
    return speed;
  }

  fitted_cost prior_;
  calibration_options options_;
  std::deque<executed_step> steps_;
  fitted_cost model_;
  std::vector<double> speeds_;
  calibration_report report_;
};

}  // namespace dcp
