#pragma once
/// \file
/// `calibrator`: learns the real clock from executed micro-steps (DESIGN section 9.2). It keeps a
/// window of executed steps (what ran, on which ranks, what each member measured), and `refit()`
/// turns them into
///   - a `fitted_cost` (the prior refitted, `fit_cost`), on times corrected for slow GPUs;
///   - per-GPU speed factors: a GPU whose steps run consistently slower than the fit predicts,
///     relative to the median GPU, beyond a tolerance and significantly (`speed_confidence`
///     standard errors), gets speed < 1 (a gang step is charged to the member that set its
///     time, see `learn_speeds`);
///   - a memory margin: the largest relative excess of a measured peak over the fit plus its
///     uncertainty (`margin`), never below `min_memory_margin` (before any peak is measured:
///     `memory_margin`). Below `full_fit_steps` measured peaks the memory fit is one factor, at
///     least 1, on the prior's activation bytes (`scale_activation_bytes`), as the time fit is
///     one factor.
/// Recent steps count more: a step's weight halves every `half_life` refits after it was added.
/// A pure function of the steps in the window, the order they were added and the refits between:
/// ranks that add the same steps in the same order and refit at the same points get bit-identical
/// models (the scheduler adds them in plan order and refits at every plan).
/// On a mixed cluster (the prior's layout names its nodes) a step's measured times are first
/// brought to the reference device's clock, times its block's node speed (`speed_of`): the fit
/// is then one clock for every device, and the learned speeds are what a GPU runs below its own
/// node's speed (the planner multiplies the two, `job_speeds`). The margin is one ratio over the
/// fitted memory, which does not depend on the device; each block keeps its own capacity.
/// The scheduler (`scheduler_options::calibration`) and dcp-sim's `dcp` row on a truth use it.

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <limits>
#include <ostream>
#include <string>
#include <vector>

#include <dcp/cost/fit.hpp>
#include <dcp/cost/fitted_cost.hpp>
#include <dcp/error.hpp>
#include <dcp/layout.hpp>

namespace dcp {

/// The start-up probe (DESIGN section 9.2): before the first plan, a few micro-steps of the first
/// batch are run and measured (forward and backward, gradients discarded), chosen where that plan
/// will be tight, so that the first plan is made on a model and a margin that measurements back.
struct probe_options {
  bool enabled = true;
  /// The probe's steps end within this share of the first batch's predicted time (its tightest
  /// step is measured even beyond it).
  double budget = 0.1;
  /// The probe's steps are taken from the first batch planned to C / (1 + headroom): safe while
  /// the prior underestimates memory by less than that.
  double headroom = 0.25;

  /// Throws `dcp::error` naming the option unless every value is in its domain.
  void validate() const {
    check(std::isfinite(budget) && budget > 0 && budget <= 1, errc::invalid_argument, [&] {
      return "probe_options::budget = " + std::to_string(budget) + " must be in (0, 1] (a share of the first batch)";
    });
    check(std::isfinite(headroom) && headroom >= 0 && headroom < 1, errc::invalid_argument,
          [&] { return "probe_options::headroom = " + std::to_string(headroom) + " must be in [0, 1)"; });
  }
  friend bool operator==(const probe_options&, const probe_options&) = default;
  friend std::ostream& operator<<(std::ostream& os, const probe_options& o) {
    if (!o.enabled) return os << "probe off";
    return os << "probe{budget=" << o.budget << ", headroom=" << o.headroom << "}";
  }
};

/// Calibration settings (a scheduler option; dcp-sim's `dcp` row on a truth clock).
struct calibration_options {
  bool enabled = false;             ///< observe steps and replan with the refitted model
  double memory_margin = 0.05;      ///< planning capacity = C / (1 + margin) until peaks are measured
  double min_memory_margin = 0.01;  ///< the least margin measured peaks may tighten it to
  double prior_weight = 0.001;      ///< `fit_options::prior_weight`
  std::size_t window = 4096;        ///< most recent executed steps the fit uses
  bool learn_speed = true;          ///< learn per-GPU speed factors (the planner's `speeds`)
  double speed_tolerance = 0.03;    ///< a GPU within this fraction of the median runs at speed 1
  /// A GPU is slow only if its excess over the median GPU is this many standard errors above
  /// zero (as well as above the tolerance): noise on a few steps never moves work.
  double speed_confidence = 3;
  /// Refits (global batches) after which a step weighs half as much in the fit and the speeds:
  /// the clock drifts (heat, neighbours), and the latest steps say most about the next. 0: every
  /// step in the window weighs the same.
  double half_life = 2;
  /// Timed steps in the window weigh less than this many full steps (recency counted): only a
  /// common factor on the prior's time is fitted (the form's eight constants need more steps to
  /// be determined); 0: always the form.
  std::size_t full_fit_steps = 16;
  /// The start-up probe: measured steps before the first plan.
  probe_options probe{};

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
    need(std::isfinite(speed_confidence) && speed_confidence >= 0,
         "speed_confidence = " + std::to_string(speed_confidence) + " must be finite and not negative");
    need(std::isfinite(half_life) && half_life >= 0,
         "half_life = " + std::to_string(half_life) + " must be finite and not negative (0: no decay)");
    probe.validate();
  }
  friend bool operator==(const calibration_options&, const calibration_options&) = default;
  friend std::ostream& operator<<(std::ostream& os, const calibration_options& o) {
    os << "calibration_options{";
    if (!o.enabled) return os << "off}";
    return os << "margin=" << o.memory_margin << ", min_margin=" << o.min_memory_margin
              << ", prior_weight=" << o.prior_weight << ", window=" << o.window << ", learn_speed=" << o.learn_speed
              << ", speed_tolerance=" << o.speed_tolerance << ", speed_confidence=" << o.speed_confidence
              << ", half_life=" << o.half_life << ", full_fit_steps=" << o.full_fit_steps << ", " << o.probe << "}";
  }
};

/// One micro-step as it ran: its load on `ranks` with `checkpointed_blocks`, and what each member
/// measured (`seconds[i]`, `peak_bytes[i]` of rank `ranks.first + i`; a negative value: that
/// member reported nothing; 0: it did not measure that quantity; a peak of +infinity: it ran out
/// of memory with its peak unknown, kept as the capacity it filled, a lower bound of the true
/// peak, so the margin widens at least to it and later plans avoid the shape).
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
    for (std::size_t i = 0; i < s.seconds.size(); ++i) {
      const bool out_of_memory = s.peak_bytes[i] == std::numeric_limits<double>::infinity();
      check(std::isfinite(s.seconds[i]) && (std::isfinite(s.peak_bytes[i]) || out_of_memory), errc::invalid_argument,
            [&] {
              return "calibrator: rank " + std::to_string(s.ranks.first + int(i)) + " measured seconds = " +
                     std::to_string(s.seconds[i]) + ", peak_bytes = " + std::to_string(s.peak_bytes[i]) +
                     "; measurements must be finite (a peak of +infinity: out of memory, peak unknown)";
            });
      if (out_of_memory) s.peak_bytes[i] = prior_.shape.capacity_of(s.ranks);  // the device's, no margin
    }
    // To the reference clock: a step on a node of speed v ran 1 / v as long as there.
    if (const double node = prior_.layout().speed_of(s.ranks); node != 1.0)
      for (double& t : s.seconds)
        if (t > 0) t *= node;
    steps_.push_back(std::move(s));
    added_at_.push_back(refits_);
    while (steps_.size() > options_.window) steps_.pop_front(), added_at_.pop_front();
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
    // Recency: a step added before the last h refits weighs 2^(-h / half_life).
    std::vector<double> weight(steps_.size(), 1.0);
    if (options_.half_life > 0)
      for (std::size_t i = 0; i < steps_.size(); ++i)
        weight[i] = std::exp2(-double(refits_ - added_at_[i]) / options_.half_life);
    ++refits_;
    // Too little weight of timed steps for the form's eight constants: fit one common factor on
    // the prior's time.
    double timed = 0;
    for (std::size_t i = 0; i < steps_.size(); ++i) timed += measured[i] > 0 ? weight[i] : 0;
    const bool full = timed >= double(options_.full_fit_steps);
    // Fewer measured peaks than that: one common factor on the prior's activation bytes (its
    // three memory terms would pass through a few points and extrapolate anywhere).
    std::size_t peaks = 0;
    for (std::size_t i = 0; i < steps_.size(); ++i) peaks += peak[i] > 0;
    const bool full_memory = peaks >= options_.full_fit_steps;
    const fit_options fo{options_.prior_weight, full, full_memory};
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
        obs.push_back({s.load, s.ranks.size, s.checkpointed_blocks, measured[i] * slowest, peak[i], weight[i]});
      }
      model_ = fit_cost(prior_, obs, fo);
      if (!full) model_ = scale_time(std::move(model_), obs);
      if (!full_memory) model_ = scale_activation_bytes(std::move(model_), obs);
      if (pass + 1 < passes) speed = learn_speeds(measured, weight, score);
    }
    report_.time_points = std::size_t(model_.residuals.time_points);
    report_.memory_points = std::size_t(model_.residuals.memory_points);
    speeds_.clear();
    if (std::any_of(speed.begin(), speed.end(), [](double v) { return v < 1; })) speeds_ = speed;
    model_.memory_margin = margin(obs, full_memory ? fit_coefficients::memory_terms : 1);
    if (model_.coef.static_bytes >= model_.capacity()) model_.memory_margin = options_.min_memory_margin;
  }

  /// The model to plan with (the prior, with the initial margin, before any refit).
  const fitted_cost& model() const noexcept { return model_; }
  /// Per-GPU speed factors in (0, 1]; empty when every GPU runs at full speed.
  const std::vector<double>& speeds() const noexcept { return speeds_; }
  const calibration_report& report() const noexcept { return report_; }
  const calibration_options& options() const noexcept { return options_; }
  std::size_t size() const noexcept { return steps_.size(); }
  /// The executed steps in the window, oldest first.
  const std::deque<executed_step>& window() const noexcept { return steps_; }

 private:
  // `c` with its time coefficients times the weighted geometric mean of measured / predicted,
  // each step weighing its weight times m / (m + m_med) as in the fit.
  static fitted_cost scale_time(fitted_cost c, const std::vector<step_observation>& obs) {
    std::vector<double> m;
    for (const auto& o : obs)
      if (o.seconds > 0 && o.weight > 0) m.push_back(o.seconds);
    if (m.empty()) return c;
    const double typical = detail::typical_step(std::move(m));
    double sw = 0, sum = 0;
    for (const auto& o : obs) {
      const double pred = c.time(o.load, o.sp, o.checkpointed_blocks);
      if (!(o.seconds > 0 && o.weight > 0 && pred > 0)) continue;
      const double w = o.weight * o.seconds / (o.seconds + typical);
      sw += w, sum += w * std::log(o.seconds / pred);
    }
    if (!(sw > 0)) return c;
    auto t = c.coef.time_array();
    for (double& v : t) v *= std::exp(sum / sw);
    c.coef.set_time(t);
    c.residuals = residuals_of(c, obs);
    return c;
  }

  // `c` with its activation and checkpoint bytes times the factor that best explains the measured
  // peaks beyond the static and loss bytes (least squares in relative terms), never below 1: a
  // few peaks may show the prior short, but not that every other shape needs less than it says.
  static fitted_cost scale_activation_bytes(fitted_cost c, const std::vector<step_observation>& obs) {
    double num = 0, den = 0;
    for (const auto& o : obs) {
      if (!(o.peak_bytes > 0)) continue;
      const auto f = c.memory_features(o.load, o.sp, o.checkpointed_blocks);
      const double active = f[1] * c.coef.activation_bytes + f[2] * c.coef.checkpoint_bytes;
      const double rest = f[0] * c.coef.static_bytes + c.loss_excess(o.load, o.sp);
      const double w = 1 / (o.peak_bytes * o.peak_bytes);
      num += w * active * (o.peak_bytes - rest), den += w * active * active;
    }
    if (!(den > 0) || !(num > den)) return c;
    c.coef.activation_bytes *= num / den, c.coef.checkpoint_bytes *= num / den;
    c.residuals = residuals_of(c, obs);
    return c;
  }

  // The planning margin: the worst relative excess of a measured peak over the fit, plus its
  // uncertainty, two standard errors of the excess (2 s / sqrt(n - p) over n peaks, s with the
  // n - p degrees of freedom the fit of p memory terms leaves); with fewer than two of those the
  // initial margin stands on top of the worst. At least the floor; before any peak, the initial
  // margin.
  double margin(const std::vector<step_observation>& obs, std::size_t fitted_terms) const {
    double worst = -std::numeric_limits<double>::infinity(), sum = 0, square_sum = 0;
    std::size_t n = 0;
    for (const auto& o : obs) {
      if (!(o.peak_bytes > 0)) continue;
      const double e = o.peak_bytes / model_.memory(o.load, o.sp, o.checkpointed_blocks) - 1;
      worst = std::max(worst, e), sum += e, square_sum += e * e, ++n;
    }
    if (n == 0) return options_.memory_margin;
    double uncertainty = options_.memory_margin;
    if (n >= fitted_terms + 2) {
      const double dof = double(n - fitted_terms), mean = sum / double(n);
      const double s = std::sqrt(std::max(0.0, (square_sum - double(n) * mean * mean) / dof));
      uncertainty = 2 * s / std::sqrt(dof);
    }
    return std::max(options_.min_memory_margin, worst + uncertainty);
  }

  void note(std::string why) {
    if (report_.ignored.size() < 8) report_.ignored.push_back(std::move(why));
  }

  // Per GPU: the weighted median of log(measured / predicted) over the steps charged to it,
  // relative to the median GPU's; slower than the tolerance and by more than `speed_confidence`
  // standard errors of the difference (a step's scatter, the root mean square pooled over the GPUs,
  // over each median's effective number of steps): speed = exp(-that). A step weighs its recency
  // times m / (m + m_med) (m its measured time, m_med the median's): as in the fit, steps far
  // shorter than a typical one are mostly noise and barely count. A gang step lasts as long as its
  // slowest member, so it is charged to the members that can have set its time: those whose own
  // report is within the tolerance of the largest, and of these the ones whose `score` (the
  // previous pass's weighted mean log ratio over each GPU's charged steps) is within the tolerance
  // of the largest. A solo step charges its GPU. Members that report their own busy time (thread
  // CPU time, their own kernels) name the slow one directly, and members as fast as each other
  // share every gang step. When members report the gang's time (a wall clock that includes
  // waiting), the first pass charges every member, and the next ones charge the GPUs slow in
  // clearly more of their steps: a peer that ran enough fast steps elsewhere is cleared. GPUs that
  // (nearly) only ever ran together cannot be told apart and share the charge. `score` is updated
  // for the next pass.
  std::vector<double> learn_speeds(const std::vector<double>& measured, const std::vector<double>& recency,
                                   std::vector<double>& score) const {
    const int n = prior_.gpus();
    struct charge {
      double log_ratio, weight;
    };
    std::vector<std::vector<charge>> charged(static_cast<std::size_t>(n));
    const double tie = -std::log(1 - options_.speed_tolerance);  // scores this close are equal
    std::vector<double> positive;
    for (double m : measured)
      if (m > 0) positive.push_back(m);
    if (positive.empty()) return std::vector<double>(static_cast<std::size_t>(n), 1.0);
    const double typical = detail::typical_step(std::move(positive));
    for (std::size_t i = 0; i < steps_.size(); ++i) {
      const auto& s = steps_[i];
      if (!(measured[i] > 0) || !(recency[i] > 0)) continue;
      const double pred = model_.time(s.load, s.ranks.size, s.checkpointed_blocks);
      if (!(pred > 0)) continue;
      const charge c{std::log(measured[i] / pred), recency[i] * measured[i] / (measured[i] + typical)};
      const double floor = measured[i] * (1 - options_.speed_tolerance);
      const auto first = std::size_t(s.ranks.first);
      double top = -std::numeric_limits<double>::infinity();
      for (std::size_t m = 0; m < s.seconds.size(); ++m)
        if (s.seconds[m] >= floor) top = std::max(top, score[first + m]);
      for (std::size_t m = 0; m < s.seconds.size(); ++m)
        if (s.seconds[m] >= floor && score[first + m] >= top - tie) charged[first + m].push_back(c);
    }
    // Weighted median of `v` (the smallest value whose cumulative weight reaches half).
    auto weighted_median = [](std::vector<charge> v) {
      std::sort(v.begin(), v.end(), [](const charge& a, const charge& b) { return a.log_ratio < b.log_ratio; });
      double total = 0;
      for (const auto& c : v) total += c.weight;
      double sum = 0;
      for (const auto& c : v)
        if ((sum += c.weight) >= total / 2) return c.log_ratio;
      return v.back().log_ratio;
    };
    std::vector<double> per(static_cast<std::size_t>(n), std::numeric_limits<double>::quiet_NaN());
    std::vector<double> n_eff(static_cast<std::size_t>(n), 0.0);
    std::vector<double> known;
    // How much one step scatters, pooled over the GPUs (the noise is the clock's, not a GPU's):
    // the weighted mean square distance of each charge from its GPU's median, each GPU's sum of
    // weights taken times (1 - 1 / n_eff) for the median it was measured from (GPUs with 2+ steps).
    double square_sum = 0, dof = 0, repeats = 0;
    for (int r = 0; r < n; ++r) {
      const auto& v = charged[std::size_t(r)];
      double sw = 0, sw2 = 0, sum = 0;
      for (const auto& c : v) sw += c.weight, sw2 += c.weight * c.weight, sum += c.weight * c.log_ratio;
      score[std::size_t(r)] = sw > 0 ? sum / sw : 0;
      if (v.empty() || !(sw > 0)) continue;
      const double med = weighted_median(v);
      per[std::size_t(r)] = med;
      n_eff[std::size_t(r)] = sw * sw / sw2;
      known.push_back(med);
      if (v.size() < 2) continue;
      for (const auto& c : v) square_sum += c.weight * (c.log_ratio - med) * (c.log_ratio - med);
      dof += sw * (1 - 1 / n_eff[std::size_t(r)]), repeats += n_eff[std::size_t(r)] - 1;
    }
    std::vector<double> speed(static_cast<std::size_t>(n), 1.0);
    // Fewer than 8 effective repeats (recency and size weights counted): noise cannot be told
    // from speed, and no GPU is slow.
    if (known.empty() || repeats < 8 || !(dof > 0)) return speed;
    // A median of n_eff steps has standard error sqrt(pi / 2) sigma / sqrt(n_eff).
    const double sigma = std::sqrt(square_sum / dof);
    auto error = [&](int r) { return 1.2533 * sigma / std::sqrt(n_eff[std::size_t(r)]); };
    // The median GPU; of an even count the faster middle one, so that with two GPUs a slow one is
    // measured against the other, not against their average (which would halve its slowness).
    std::sort(known.begin(), known.end());
    const double ref = known[(known.size() - 1) / 2];
    double ref_error = std::numeric_limits<double>::infinity();
    for (int r = 0; r < n; ++r)
      if (per[std::size_t(r)] == ref) ref_error = std::min(ref_error, error(r));
    for (int r = 0; r < n; ++r) {
      const double d = per[std::size_t(r)] - ref;
      if (std::isfinite(d) && d > tie && d > options_.speed_confidence * std::hypot(error(r), ref_error))
        speed[std::size_t(r)] = std::max(0.05, std::exp(-d));
    }
    return speed;
  }

  fitted_cost prior_;
  calibration_options options_;
  std::deque<executed_step> steps_;
  std::deque<std::size_t> added_at_;  // refits_ when each step was added (its age in refits)
  std::size_t refits_ = 0;
  fitted_cost model_;
  std::vector<double> speeds_;
  calibration_report report_;
};

}  // namespace dcp
