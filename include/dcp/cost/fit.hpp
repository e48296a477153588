#pragma once
/// \file
/// `fit_cost`: fits a `fitted_cost`'s coefficients to measured steps (`step_observation`) by
/// ridge-to-prior non-negative least squares on relative residuals, with x_half and rho searched
/// on log grids (DESIGN section 9.1); `fit_profile` fits a profiler table.

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <istream>
#include <limits>
#include <ostream>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <dcp/cost/analytic.hpp>
#include <dcp/cost/fitted_cost.hpp>
#include <dcp/cost/nnls.hpp>
#include <dcp/error.hpp>
#include <dcp/profile/profile_table.hpp>
#include <dcp/sequence.hpp>

namespace dcp {

/// One measured micro-step: what ran (load, sp, k) and what it cost.
struct step_observation {
  analytic_load load;
  int sp = 1;
  int checkpointed_blocks = 0;
  double seconds = 0;     ///< measured time of the step; 0: time not measured
  double peak_bytes = 0;  ///< measured peak memory per GPU; 0: memory not measured
  double weight = 1;      ///< how much the step counts in the fit (the calibrator favours recent steps)
  friend bool operator==(const step_observation&, const step_observation&) = default;
};

/// How `fit_cost` weighs the prior against the data.
struct fit_options {
  /// Ridge weight toward the prior, per coefficient, in squared relative residuals: 0.001 costs
  /// as much as moving one step's prediction by about 3%, so data wins where it says anything and
  /// the prior fills in the directions a few steps leave undetermined.
  double prior_weight = 0.001;
  bool fit_time = true, fit_memory = true;
  /// Also fit x_half, the one nonlinear constant of the time form (e(x) = x / (x + x_half): how
  /// fast per-GPU efficiency saturates with tokens per GPU), by a search on a log grid with the
  /// same ridge toward the prior's value in log space. A device whose small steps are cheaper or
  /// dearer than the prior's saturation says cannot be fitted by the linear coefficients alone.
  bool fit_saturation = true;
  /// Also fit `fitted_cost::recompute_ratio` (rho) the same way, when some step recomputed.
  bool fit_recompute = true;
  friend bool operator==(const fit_options&, const fit_options&) = default;
  friend std::ostream& operator<<(std::ostream& os, const fit_options& o) {
    return os << "fit_options{prior_weight=" << o.prior_weight << ", fit_time=" << o.fit_time
              << ", fit_memory=" << o.fit_memory << ", fit_saturation=" << o.fit_saturation
              << ", fit_recompute=" << o.fit_recompute << "}";
  }
};

namespace detail {

// m_med, the typical step the fit (and the calibrator) weighs each step against: the median of
// `values`, the upper middle one of an even count; 0 when there is none.
inline double typical_step(std::vector<double> values) {
  if (values.empty()) return 0;
  const auto mid = values.begin() + static_cast<std::ptrdiff_t>(values.size() / 2);
  std::nth_element(values.begin(), mid, values.end());
  return *mid;
}

// Ridge-to-prior NNLS in relative units: coefficient j = prior_j * u_j, residual of step i
// sqrt(v_i) (sum_j f_ij prior_j u_j - y_i) / (y_i + y_med), v_i the step's weight, penalty
// w (u_j - 1)^2, y_med the median measurement: relative error for long steps, absolute error
// (in units of a typical step) for short ones, so steps a thousand times shorter than the rest,
// whose time is mostly noise, cannot outvote the steps that make up the makespan. Terms whose
// prior is 0 or whose feature never appears keep the prior.
template <std::size_t K>
struct term_fit {
  std::array<double, K> coef{};
  double objective = 0;  ///< the minimised sum of squares, ridge included
};

// `known(o)`: the part of step o's measurement the form fixes (not fitted), subtracted as the
// inactive terms are.
template <std::size_t K, class Features, class Known>
term_fit<K> fit_terms(const std::array<double, K>& prior, std::span<const step_observation> obs, Features&& features,
                      double (*measured)(const step_observation&), double weight, Known&& known) {
  std::vector<std::array<double, K>> rows;
  std::vector<double> ys, ws, knowns;
  for (const auto& o : obs) {
    const double y = measured(o);
    if (!(y > 0) || !(o.weight > 0)) continue;
    rows.push_back(features(o));
    ys.push_back(y);
    ws.push_back(o.weight);
    knowns.push_back(known(o));
  }
  if (rows.empty()) return {prior, 0};
  std::array<bool, K> active{};
  std::size_t n = 0;
  for (std::size_t j = 0; j < K; ++j) {
    for (const auto& f : rows) active[j] = active[j] || (f[j] > 0 && prior[j] > 0);
    n += active[j];
  }
  if (n == 0) return {prior, 0};
  const double y_med = typical_step(ys);
  std::vector<std::size_t> cols;
  for (std::size_t j = 0; j < K; ++j)
    if (active[j]) cols.push_back(j);
  const std::size_t m = rows.size() + (weight > 0 ? n : 0);
  std::vector<double> a(m * n, 0.0), b(m, 0.0);
  for (std::size_t i = 0; i < rows.size(); ++i) {
    double fixed = knowns[i];  // the form's fixed part and the inactive terms at their prior
    for (std::size_t j = 0; j < K; ++j)
      if (!active[j]) fixed += rows[i][j] * prior[j];
    const double scale = (ys[i] + y_med) / std::sqrt(ws[i]);
    for (std::size_t c = 0; c < n; ++c) a[i * n + c] = rows[i][cols[c]] * prior[cols[c]] / scale;
    b[i] = (ys[i] - fixed) / scale;
  }
  if (weight > 0) {
    const double w = std::sqrt(weight);
    for (std::size_t c = 0; c < n; ++c) {
      a[(rows.size() + c) * n + c] = w;
      b[rows.size() + c] = w;
    }
  }
  const auto u = nnls(a, b, m, n);
  term_fit<K> out{prior, 0};
  for (std::size_t c = 0; c < n; ++c) out.coef[cols[c]] = prior[cols[c]] * u[c];
  for (std::size_t i = 0; i < m; ++i) {
    double r = -b[i];
    for (std::size_t c = 0; c < n; ++c) r += a[i * n + c] * u[c];
    out.objective += r * r;
  }
  return out;
}

template <std::size_t K, class Features>
term_fit<K> fit_terms(const std::array<double, K>& prior, std::span<const step_observation> obs, Features&& features,
                      double (*measured)(const step_observation&), double weight) {
  return fit_terms(prior, obs, features, measured, weight, [](const step_observation&) { return 0.0; });
}

inline double measured_seconds(const step_observation& o) { return o.seconds; }
inline double measured_bytes(const step_observation& o) { return o.peak_bytes; }

}  // namespace detail

/// Relative residuals of `c` on `obs` (steps without a time or memory measurement are skipped).
inline fit_residuals residuals_of(const fitted_cost& c, std::span<const step_observation> obs) {
  fit_residuals r;
  double st = 0, sm = 0;
  for (const auto& o : obs) {
    if (o.seconds > 0) {
      const double e = std::abs(c.time(o.load, o.sp, o.checkpointed_blocks) / o.seconds - 1);
      ++r.time_points, st += e * e, r.time_max = std::max(r.time_max, e);
    }
    if (o.peak_bytes > 0) {
      const double e = std::abs(c.memory(o.load, o.sp, o.checkpointed_blocks) / o.peak_bytes - 1);
      ++r.memory_points, sm += e * e, r.memory_max = std::max(r.memory_max, e);
    }
  }
  if (r.time_points) r.time_rms = std::sqrt(st / double(r.time_points));
  if (r.memory_points) r.memory_rms = std::sqrt(sm / double(r.memory_points));
  return r;
}

/// Throws `dcp::error` naming the step unless `o` is a step `c` can price with finite, non-negative
/// measurements.
inline void validate(const step_observation& o, const fitted_cost& c, std::size_t index = 0) {
  auto bad = [&](const std::string& what) {
    throw error(errc::invalid_argument, "observation " + std::to_string(index) + ": " + what +
                                            "; pass the seconds and peak bytes the step measured (0 = not measured)");
  };
  if (!(std::isfinite(o.seconds) && o.seconds >= 0)) bad("seconds = " + std::to_string(o.seconds) + " is negative or not finite");
  if (!(std::isfinite(o.peak_bytes) && o.peak_bytes >= 0))
    bad("peak_bytes = " + std::to_string(o.peak_bytes) + " is negative or not finite");
  if (!(std::isfinite(o.weight) && o.weight >= 0)) bad("weight = " + std::to_string(o.weight) + " is negative or not finite");
  if (!legal_sp(c, o.sp)) bad("sp = " + std::to_string(o.sp) + " is not a legal sp of this job");
  if (o.checkpointed_blocks < 0 || o.checkpointed_blocks > c.blocks())
    bad("checkpointed_blocks = " + std::to_string(o.checkpointed_blocks) + " is outside [0, " + std::to_string(c.blocks()) + "]");
  if (!(std::isfinite(o.load.tokens) && o.load.tokens > 0 && std::isfinite(o.load.attention) && o.load.attention >= 0))
    bad("the step has no tokens");
}

/// Fits `prior`'s coefficients to `obs` (see the file comment). The prior keeps its shape and
/// margin; a term no observation exercises (no inter-node step, say) keeps its prior value.
inline fitted_cost fit_cost(const fitted_cost& prior, std::span<const step_observation> obs, const fit_options& opt = {}) {
  check(std::isfinite(opt.prior_weight) && opt.prior_weight >= 0, errc::invalid_argument, [&] {
    return "fit_options::prior_weight = " + std::to_string(opt.prior_weight) + " must be finite and not negative";
  });
  for (std::size_t i = 0; i < obs.size(); ++i) validate(obs[i], prior, i);
  fitted_cost out = prior;
  if (opt.fit_time) {
    // The linear coefficients at given (x_half, rho); the objective adds the ridge in log space.
    const double x0 = prior.shape.device.x_half, rho0 = prior.recompute_ratio;
    auto fit_at = [&](double x_half, double rho) {
      fitted_cost s = prior;
      s.shape.device.x_half = x_half, s.recompute_ratio = rho;
      auto f = detail::fit_terms<fit_coefficients::time_terms>(
          prior.coef.time_array(), obs,
          [&](const step_observation& o) { return s.time_features(o.load, o.sp, o.checkpointed_blocks); },
          &detail::measured_seconds, opt.prior_weight);
      if (x_half != x0) f.objective += opt.prior_weight * std::pow(std::log(x_half / x0), 2);
      if (rho != rho0) f.objective += opt.prior_weight * std::pow(std::log(rho / rho0), 2);
      return f;
    };
    double best_x = x0, best_rho = rho0;
    auto best = fit_at(x0, rho0);
    auto consider = [&](double x, double rho) {  // ties keep the earlier value (the prior's first)
      if (x == best_x && rho == best_rho) return;
      const auto f = fit_at(x, rho);
      if (f.objective < best.objective) best = f, best_x = x, best_rho = rho;
    };
    // Coordinate search on log grids: x_half over x0 4^j, j in [-6, 2] (x0 / 4096 saturates at a
    // handful of tokens), rho over rho0 2^(j/2), j in [-2, 4]; each coarse pass twice (a wrong rho
    // can pull x_half far off), then halving steps around the best of each.
    const bool timed = std::any_of(obs.begin(), obs.end(), [](const auto& o) { return o.seconds > 0; });
    const bool search_x = opt.fit_saturation && timed && x0 > 0;
    const bool search_rho = opt.fit_recompute && std::any_of(obs.begin(), obs.end(), [](const auto& o) {
      return o.seconds > 0 && o.checkpointed_blocks > 0;
    });
    auto coarse_x = [&] {
      const double r = best_rho;
      for (int j = -6; j <= 2; ++j) consider(x0 * std::pow(4.0, j), r);
    };
    auto coarse_rho = [&] {
      const double x = best_x;
      for (int j = -2; j <= 4; ++j) consider(x, rho0 * std::pow(2.0, j / 2.0));
    };
    for (int round = 0; round < 2; ++round) {
      if (search_x) coarse_x();
      if (search_rho) coarse_rho();
    }
    for (const double f : {2.0, std::sqrt(2.0)}) {
      const double x = best_x;
      if (search_x) consider(x / f, best_rho), consider(x * f, best_rho);
    }
    if (search_rho) {
      const double r = best_rho;
      consider(best_x, r / std::pow(2.0, 0.25)), consider(best_x, r * std::pow(2.0, 0.25));
    }
    out.shape.device.x_half = best_x, out.recompute_ratio = best_rho;
    out.coef.set_time(best.coef);
  }
  if (opt.fit_memory) {
    auto m = detail::fit_terms<fit_coefficients::memory_terms>(
                 prior.coef.memory_array(), obs,
                 [&](const step_observation& o) { return prior.memory_features(o.load, o.sp, o.checkpointed_blocks); },
                 &detail::measured_bytes, opt.prior_weight,
                 [&](const step_observation& o) { return prior.loss_excess(o.load, o.sp); })
                 .coef;
    m[2] = std::min(m[2], m[1]);  // checkpointing never costs memory (a cost_model law)
    if (!(m[1] > 0)) m = prior.coef.memory_array();
    out.coef.set_memory(m);
  }
  if (!(out.coef.linear_flop_s + out.coef.attention_flop_s > 0))
    out.coef.set_time(prior.coef.time_array()), out.shape.device.x_half = prior.shape.device.x_half,
        out.recompute_ratio = prior.recompute_ratio;
  out.residuals = residuals_of(out, obs);
  return out;
}

/// The steps of a `dcp.profile/v1` table as observations: `batch` copies of one sequence per entry.
inline std::vector<step_observation> observations_of(const profile_table& t, const fitted_cost& c) {
  std::vector<step_observation> out;
  out.reserve(t.entries.size());
  for (const auto& e : t.entries) {
    const auto one = c.load_of(make_sequence(0, e.frames, e.spatial));
    analytic_load l{};
    for (int i = 0; i < e.batch; ++i) l = l + one;
    out.push_back({l, e.sp, e.checkpointed_blocks, e.time_s, e.memory_bytes});
  }
  return out;
}

/// Fits `prior` to a profile table (a few points suffice) and takes the table's memory capacity;
/// the table must be for the prior's model and N.
inline fitted_cost fit_profile(const profile_table& t, const fitted_cost& prior, const fit_options& opt = {}) {
  validate(t);
  check(t.model == prior.shape.model && t.gpus == prior.gpus(), errc::mismatch, [&] {
    return "fit_profile: the profile is for model '" + t.model.name + "' on " + std::to_string(t.gpus) +
           " GPUs, the prior for '" + prior.shape.model.name + "' on " + std::to_string(prior.gpus()) +
           "; fit the profile of this job";
  });
  // The job's capacity is the profile's (its static memory is fitted with the rest).
  fitted_cost shaped = prior;
  shaped.shape.device.mem_bytes = t.memory_capacity_bytes / shaped.shape.device.usable;
  const auto obs = observations_of(t, shaped);
  return fit_cost(shaped, obs, opt);
}

}  // namespace dcp
