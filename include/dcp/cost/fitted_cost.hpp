#pragma once
/// \file
/// `fitted_cost`: the analytic model's functional form (DESIGN section 4) with its coefficients
/// fitted to measured micro-steps (DESIGN section 9.1).
///
/// Time of a step of N tokens, attention FLOPs A, on sp GPUs with k of L blocks checkpointed,
/// x = N / sp, e(x) = x / (x + x_half), r = 3 + rho k / L, a = c (2L + k), v = 2 h N / sp (sp-1)/sp:
///
///     t = r (c_lin F_lin + c_att A) / (sp e(x))            linear and attention FLOPs
///       + [1 < sp <= G] a v c_intra + [sp > G] a v c_inter  all-to-all volume
///       + [sp > 1] a c_msg + (3L + k) c_block               messages, per-block overhead
///     M = m_static + h x ((L - k + 1) m_act + k m_ckpt)     static and activation memory
///
/// With c_lin = c_att = 1 / (peak eff_max), c_intra = 1 / bw_intra, c_inter = 1 / bw_inter,
/// c_msg = alpha, c_block = tau, m_static = 4P + 12P/N, m_act = beta, m_ckpt = 2 and rho = 1 it
/// is `analytic_cost` exactly (L, h, G and N are shape). `fit_cost` fits the nine coefficients
/// to observed steps by non-negative least squares on relative residuals, with a ridge toward a
/// prior (the analytic constants or a previous fit), so a handful of steps suffice and no
/// coefficient goes negative; the two nonlinear constants of the form, x_half (how fast
/// efficiency saturates) and rho (a recomputed block's forward in units of a third of its
/// forward+backward), are searched on log grids around the prior's. `write_fit` / `read_fit` store a fit as
/// `dcp.fit/v1` JSON beside `dcp.profile/v1`.

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

#include <nlohmann/json.hpp>

#include <dcp/cost/analytic.hpp>
#include <dcp/cost/cost_concepts.hpp>
#include <dcp/cost/device.hpp>
#include <dcp/error.hpp>
#include <dcp/model/transformer.hpp>
#include <dcp/profile/profile_table.hpp>
#include <dcp/sequence.hpp>

namespace dcp {

/// Non-negative least squares: argmin ||A x - b||_2 subject to x >= 0 (Lawson and Hanson,
/// "Solving Least Squares Problems", 1974, chapter 23). `a` is row-major, `rows` x `cols`.
/// Passive-set subproblems are solved by Householder QR; a column that is (numerically) zero
/// keeps coefficient 0.
inline std::vector<double> nnls(std::span<const double> a, std::span<const double> b, std::size_t rows,
                                std::size_t cols) {
  check(a.size() == rows * cols && b.size() == rows, errc::invalid_argument, [&] {
    return "nnls: a has " + std::to_string(a.size()) + " values and b " + std::to_string(b.size()) + " for a " +
           std::to_string(rows) + " x " + std::to_string(cols) + " system";
  });
  for (double v : a)
    check(std::isfinite(v), errc::invalid_argument, [] { return std::string("nnls: A holds a NaN or infinity"); });
  for (double v : b)
    check(std::isfinite(v), errc::invalid_argument, [] { return std::string("nnls: b holds a NaN or infinity"); });
  std::vector<double> x(cols, 0.0);
  if (rows == 0 || cols == 0) return x;
  double scale = 0;
  for (double v : a) scale = std::max(scale, std::abs(v));
  for (double v : b) scale = std::max(scale, std::abs(v));
  const double tol = 1e-12 * std::max(scale, 1e-300) * double(std::max(rows, cols));

  // Unconstrained least squares on the columns in `set` (Householder QR of the sub-matrix).
  auto solve = [&](const std::vector<std::size_t>& set) {
    const std::size_t n = set.size();
    std::vector<double> q(rows * n), y(b.begin(), b.end());
    for (std::size_t i = 0; i < rows; ++i)
      for (std::size_t j = 0; j < n; ++j) q[i * n + j] = a[i * cols + set[j]];
    std::vector<double> diag(n, 0.0);
    for (std::size_t j = 0; j < n && j < rows; ++j) {
      double norm = 0;
      for (std::size_t i = j; i < rows; ++i) norm += q[i * n + j] * q[i * n + j];
      norm = std::sqrt(norm);
      if (norm <= tol) continue;  // a zero column: its coefficient stays 0
      const double alpha = q[j * n + j] > 0 ? -norm : norm;
      std::vector<double> v(rows - j);
      for (std::size_t i = j; i < rows; ++i) v[i - j] = q[i * n + j];
      v[0] -= alpha;
      double vv = 0;
      for (double e : v) vv += e * e;
      if (vv <= 0) {
        diag[j] = alpha;
        continue;
      }
      for (std::size_t c = j; c < n; ++c) {
        double d = 0;
        for (std::size_t i = j; i < rows; ++i) d += v[i - j] * q[i * n + c];
        d = 2 * d / vv;
        for (std::size_t i = j; i < rows; ++i) q[i * n + c] -= d * v[i - j];
      }
      double d = 0;
      for (std::size_t i = j; i < rows; ++i) d += v[i - j] * y[i];
      d = 2 * d / vv;
      for (std::size_t i = j; i < rows; ++i) y[i] -= d * v[i - j];
      diag[j] = q[j * n + j];
    }
    std::vector<double> s(n, 0.0);
    for (std::size_t j = std::min(n, rows); j-- > 0;) {
      if (std::abs(diag[j]) <= tol) continue;
      double r = y[j];
      for (std::size_t c = j + 1; c < n; ++c) r -= q[j * n + c] * s[c];
      s[j] = r / diag[j];
    }
    return s;
  };
  auto gradient = [&] {  // w = A^T (b - A x)
    std::vector<double> w(cols, 0.0);
    for (std::size_t i = 0; i < rows; ++i) {
      double r = b[i];
      for (std::size_t j = 0; j < cols; ++j) r -= a[i * cols + j] * x[j];
      for (std::size_t j = 0; j < cols; ++j) w[j] += a[i * cols + j] * r;
    }
    return w;
  };

  std::vector<char> passive(cols, 0);
  const double wtol = tol * scale * double(rows);
  for (std::size_t outer = 0; outer < 3 * cols + 3; ++outer) {
    const auto w = gradient();
    std::size_t best = cols;
    for (std::size_t j = 0; j < cols; ++j)
      if (!passive[j] && w[j] > wtol && (best == cols || w[j] > w[best])) best = j;
    if (best == cols) break;
    passive[best] = 1;
    for (std::size_t inner = 0; inner < 3 * cols + 3; ++inner) {
      std::vector<std::size_t> set;
      for (std::size_t j = 0; j < cols; ++j)
        if (passive[j]) set.push_back(j);
      const auto s = solve(set);
      bool feasible = true;
      for (double v : s) feasible = feasible && v > 0;
      if (feasible) {
        for (std::size_t j = 0; j < set.size(); ++j) x[set[j]] = s[j];
        break;
      }
      // Step from x toward s as far as feasibility allows; drop the coefficients that hit 0.
      double step = 1;
      for (std::size_t j = 0; j < set.size(); ++j)
        if (s[j] <= 0) step = std::min(step, x[set[j]] / std::max(x[set[j]] - s[j], 1e-300));
      double xmax = 0;
      for (std::size_t j = 0; j < set.size(); ++j) {
        x[set[j]] += step * (s[j] - x[set[j]]);
        xmax = std::max(xmax, std::abs(x[set[j]]));
      }
      for (std::size_t j = 0; j < set.size(); ++j)
        if (x[set[j]] <= 1e-14 * xmax) x[set[j]] = 0, passive[set[j]] = 0;
      bool any = false;
      for (char p : passive) any = any || p;
      if (!any) break;
    }
  }
  for (double& v : x) v = std::max(v, 0.0);
  return x;
}

/// The nine coefficients of `fitted_cost` (see the file comment), all non-negative.
struct fit_coefficients {
  double linear_flop_s = 0;     ///< c_lin: seconds per linear (non-attention) FLOP at e(x) = 1
  double attention_flop_s = 0;  ///< c_att: seconds per attention FLOP at e(x) = 1
  double intra_byte_s = 0;      ///< c_intra: seconds per all-to-all byte inside a node
  double inter_byte_s = 0;      ///< c_inter: seconds per all-to-all byte across nodes
  double message_s = 0;         ///< c_msg: seconds per all-to-all (latency)
  double block_pass_s = 0;      ///< c_block: seconds per block pass (kernel launches)
  double static_bytes = 0;      ///< m_static: bytes per GPU whatever the step
  double activation_bytes = 0;  ///< m_act: bytes per token per hidden unit of a kept block
  double checkpoint_bytes = 0;  ///< m_ckpt: bytes per token per hidden unit of a checkpointed block

  static constexpr std::size_t time_terms = 6, memory_terms = 3;
  std::array<double, time_terms> time_array() const noexcept {
    return {linear_flop_s, attention_flop_s, intra_byte_s, inter_byte_s, message_s, block_pass_s};
  }
  std::array<double, memory_terms> memory_array() const noexcept {
    return {static_bytes, activation_bytes, checkpoint_bytes};
  }
  void set_time(std::span<const double> v) noexcept {
    linear_flop_s = v[0], attention_flop_s = v[1], intra_byte_s = v[2], inter_byte_s = v[3], message_s = v[4],
    block_pass_s = v[5];
  }
  void set_memory(std::span<const double> v) noexcept { static_bytes = v[0], activation_bytes = v[1], checkpoint_bytes = v[2]; }

  /// The analytic constants of `c` (DESIGN section 4).
  static fit_coefficients of(const analytic_cost& c) noexcept {
    const double s = 1 / (c.device.peak * c.device.eff_max);
    return {s, s, 1 / c.device.bw_intra, 1 / c.device.bw_inter, c.device.alpha, c.device.tau, c.static_memory(),
            c.device.beta, 2.0};
  }
  friend bool operator==(const fit_coefficients&, const fit_coefficients&) = default;
  friend std::ostream& operator<<(std::ostream& os, const fit_coefficients& f) {
    return os << "fit_coefficients{lin=" << f.linear_flop_s << ", att=" << f.attention_flop_s
              << ", intra=" << f.intra_byte_s << ", inter=" << f.inter_byte_s << ", msg=" << f.message_s
              << ", block=" << f.block_pass_s << ", static=" << f.static_bytes << ", act=" << f.activation_bytes
              << ", ckpt=" << f.checkpoint_bytes << "}";
  }
};

/// How well a fit explains the steps it was fitted to: relative residuals (fit / measured - 1).
struct fit_residuals {
  std::int64_t time_points = 0, memory_points = 0;
  double time_rms = 0, time_max = 0;  ///< root mean square and largest |relative residual| of time
  double memory_rms = 0, memory_max = 0;
  friend bool operator==(const fit_residuals&, const fit_residuals&) = default;
  friend std::ostream& operator<<(std::ostream& os, const fit_residuals& r) {
    return os << "fit_residuals{time: " << r.time_points << " points, rms " << r.time_rms << ", max " << r.time_max
              << "; memory: " << r.memory_points << " points, rms " << r.memory_rms << ", max " << r.memory_max << "}";
  }
};

/// The analytic form with fitted coefficients. A regular value; models `cost_model`.
struct fitted_cost {
  using policy_concept = cost_model_tag;
  using load_type = analytic_load;

  analytic_cost shape;       ///< model, N, G, x_half and capacity; the device's other constants are unused
  fit_coefficients coef = fit_coefficients::of(shape);
  double memory_margin = 0;  ///< planning capacity = capacity / (1 + margin): room for memory the fit misses
  fit_residuals residuals;   ///< of the fit that produced `coef` (zero for a prior)
  /// rho: the time of recomputing a checkpointed block, in units of a third of its forward+backward
  /// (1: the forward is a third, as in DESIGN section 4; this machine's CPU steps fit about 1.4).
  double recompute_ratio = 1;

  /// Throws `dcp::error` unless the shape is valid, every coefficient is finite and not negative,
  /// memory does not grow with k (m_ckpt <= m_act) and the static memory fits.
  void validate() const {
    shape.validate();
    check(shape.is_classic(), errc::invalid_argument, [] {
      return std::string("fitted_cost mirrors the dense zero1 model of DESIGN section 4 (tp = ep = 1, zero1, plain "
                         "multi-head self-attention, dense MLP); fit that model, or plan with analytic_cost");
    });
    const auto t = coef.time_array();
    const auto m = coef.memory_array();
    const char* names[] = {"linear_flop_s",  "attention_flop_s", "intra_byte_s",     "inter_byte_s",    "message_s",
                           "block_pass_s",   "static_bytes",     "activation_bytes", "checkpoint_bytes"};
    for (std::size_t i = 0; i < 9; ++i) {
      const double v = i < 6 ? t[i] : m[i - 6];
      check(std::isfinite(v) && v >= 0, errc::invalid_argument, [&] {
        return std::string("fitted_cost: coefficient ") + names[i] + " = " + std::to_string(v) +
               " must be finite and not negative; refit or fix the fit file";
      });
    }
    check(coef.linear_flop_s + coef.attention_flop_s > 0 && coef.activation_bytes > 0, errc::invalid_argument, [] {
      return std::string("fitted_cost: compute and activation coefficients are all zero; fit on steps that measured "
                         "time and memory");
    });
    check(coef.checkpoint_bytes <= coef.activation_bytes, errc::invalid_argument, [&] {
      return "fitted_cost: checkpoint_bytes = " + std::to_string(coef.checkpoint_bytes) + " exceeds activation_bytes = " +
             std::to_string(coef.activation_bytes) + " (checkpointing would cost memory); refit";
    });
    check(std::isfinite(recompute_ratio) && recompute_ratio > 0 && std::isfinite(shape.device.x_half) &&
              shape.device.x_half >= 0,
          errc::invalid_argument, [&] {
            return "fitted_cost: recompute_ratio = " + std::to_string(recompute_ratio) + " and x_half = " +
                   std::to_string(shape.device.x_half) + " must be finite, recompute_ratio positive";
          });
    check(std::isfinite(memory_margin) && memory_margin >= 0, errc::invalid_argument, [&] {
      return "fitted_cost: memory_margin = " + std::to_string(memory_margin) + " must be finite and not negative";
    });
    check(coef.static_bytes < capacity(), errc::invalid_argument, [&] {
      return "fitted_cost: static memory " + std::to_string(coef.static_bytes) + " B does not fit the planning capacity " +
             std::to_string(capacity()) + " B; use more GPUs or a smaller memory margin";
    });
  }

  int blocks() const noexcept { return shape.blocks(); }
  int gpus() const noexcept { return shape.gpus(); }
  int gpus_per_node() const noexcept { return shape.gpus_per_node(); }
  int heads() const noexcept { return shape.heads(); }
  double capacity() const noexcept { return shape.capacity() / (1 + memory_margin); }
  std::int64_t tokens_of(const sequence& s) const noexcept { return shape.tokens_of(s); }
  load_type load_of(const sequence& s) const noexcept { return shape.load_of(s); }

  /// Feature vector of the time terms: t = sum_i features[i] * time coefficient i.
  std::array<double, fit_coefficients::time_terms> time_features(const load_type& l, int sp, int k) const noexcept {
    const auto& m = shape.model;
    const double L = m.blocks, h = static_cast<double>(m.hidden);
    const double x = l.tokens / sp;
    const double e = x / (x + shape.device.x_half);
    const double r = (3 + recompute_ratio * k / L) / (sp * e);
    std::array<double, fit_coefficients::time_terms> f{};
    f[0] = r * L * 2 * m.block_parameters() * l.tokens;
    f[1] = r * l.attention;
    if (sp > 1) {
      const double a = shape.all_to_alls_per_pass() * (2 * L + k);
      const double v = 2 * h * l.tokens / sp * (sp - 1) / sp;
      (sp <= gpus_per_node() ? f[2] : f[3]) = a * v;
      f[4] = a;
    }
    f[5] = 3 * L + k;
    return f;
  }
  /// Feature vector of the memory terms.
  std::array<double, fit_coefficients::memory_terms> memory_features(const load_type& l, int sp, int k) const noexcept {
    const double L = shape.model.blocks, hx = static_cast<double>(shape.model.hidden) * l.tokens / sp;
    return {1.0, hx * (L - k + 1), hx * k};
  }

  double time(const load_type& l, int sp, int k) const noexcept {
    if (l.tokens <= 0) return 0;
    const auto f = time_features(l, sp, k);
    const auto c = coef.time_array();
    double t = 0;
    for (std::size_t i = 0; i < f.size(); ++i) t += f[i] * c[i];
    return t;
  }
  double memory(const load_type& l, int sp, int k) const noexcept {
    const auto f = memory_features(l, sp, k);
    const auto c = coef.memory_array();
    return f[0] * c[0] + f[1] * c[1] + f[2] * c[2];
  }
  /// x_max: the most tokens per GPU any step that fits holds (all blocks checkpointed).
  double max_tokens_per_gpu() const noexcept {
    const double per = static_cast<double>(shape.model.hidden) * (blocks() * coef.checkpoint_bytes + coef.activation_bytes);
    return per > 0 ? std::max(0.0, capacity() - coef.static_bytes) / per : std::numeric_limits<double>::infinity();
  }
  /// GPU-seconds floor, as `analytic_cost::work_floor`: compute at e(x_max), all-to-all bytes, no
  /// latency or launch overhead.
  double work_floor(const load_type& l, int sp, int k) const noexcept {
    if (l.tokens <= 0) return 0;
    const auto& m = shape.model;
    const double L = m.blocks, h = static_cast<double>(m.hidden);
    const double xm = max_tokens_per_gpu();
    const double e = std::isinf(xm) ? 1.0 : xm / (xm + shape.device.x_half);
    double w = (3 + recompute_ratio * k / L) * (coef.linear_flop_s * L * 2 * m.block_parameters() * l.tokens + coef.attention_flop_s * l.attention) / e;
    if (sp > 1)
      w += shape.all_to_alls_per_pass() * (2 * L + k) * 2 * h * l.tokens * (sp - 1) / sp *
           (sp <= gpus_per_node() ? coef.intra_byte_s : coef.inter_byte_s);
    return w;
  }

  friend bool operator==(const fitted_cost&, const fitted_cost&) = default;
  friend std::ostream& operator<<(std::ostream& os, const fitted_cost& c) {
    return os << "fitted_cost{" << c.shape.model.name << " on " << c.shape.device.name << " (x_half " << c.shape.device.x_half << ", rho " << c.recompute_ratio << "), N=" << c.gpus() << ", "
              << c.coef << ", margin=" << c.memory_margin << ", " << c.residuals << "}";
  }
};

static_assert(cost_model<fitted_cost>);

/// The analytic model as a `fitted_cost` (the prior of a first fit), validated.
inline fitted_cost make_fitted_cost(const analytic_cost& analytic, double memory_margin = 0) {
  fitted_cost c{analytic, fit_coefficients::of(analytic), memory_margin, {}};
  c.validate();
  return c;
}

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

template <std::size_t K, class Features>
term_fit<K> fit_terms(const std::array<double, K>& prior, std::span<const step_observation> obs, Features&& features,
                      double (*measured)(const step_observation&), double weight) {
  std::vector<std::array<double, K>> rows;
  std::vector<double> ys, ws;
  for (const auto& o : obs) {
    const double y = measured(o);
    if (!(y > 0) || !(o.weight > 0)) continue;
    rows.push_back(features(o));
    ys.push_back(y);
    ws.push_back(o.weight);
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
    double fixed = 0;  // inactive terms at their prior
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
        &detail::measured_bytes, opt.prior_weight).coef;
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

// --- dcp.fit/v1 ------------------------------------------------------------------------------------

inline constexpr std::string_view fit_format = "dcp.fit/v1";

/// Writes `c` as `dcp.fit/v1` JSON (validated first):
/// \code
/// { "format": "dcp.fit/v1", "gpus": 32, "memory_margin": 0.02, "recompute_ratio": 1,
///   "model": {...as dcp.profile/v1...}, "device": {"name": "h200", "peak": 9.89e14, ...every device_spec field},
///   "coefficients": {"linear_flop_s": 1.8e-15, ..., "checkpoint_bytes": 2},
///   "residuals": {"time_points": 40, "time_rms": 0.01, "time_max": 0.03, "memory_points": 40, ...} }
/// \endcode
inline void write_fit(std::ostream& out, const fitted_cost& c) {
  c.validate();
  const auto& m = c.shape.model;
  const auto& d = c.shape.device;
  nlohmann::json j;
  j["format"] = fit_format;
  j["gpus"] = c.gpus();
  j["memory_margin"] = c.memory_margin;
  j["recompute_ratio"] = c.recompute_ratio;
  j["model"] = {{"name", m.name},           {"blocks", m.blocks},
                {"hidden", m.hidden},       {"heads", m.heads},
                {"mlp_width", m.mlp_width}, {"mlp_matrices", m.mlp_matrices},
                {"attention", to_string(m.attention)}, {"text_tokens", m.text_tokens}};
  j["device"] = {{"name", d.name},         {"peak", d.peak},         {"eff_max", d.eff_max},
                 {"x_half", d.x_half},     {"alpha", d.alpha},       {"tau", d.tau},
                 {"bw_intra", d.bw_intra}, {"bw_inter", d.bw_inter}, {"gpus_per_node", d.gpus_per_node},
                 {"mem_bytes", d.mem_bytes}, {"usable", d.usable},   {"beta", d.beta}};
  j["coefficients"] = {{"linear_flop_s", c.coef.linear_flop_s}, {"attention_flop_s", c.coef.attention_flop_s},
                       {"intra_byte_s", c.coef.intra_byte_s},   {"inter_byte_s", c.coef.inter_byte_s},
                       {"message_s", c.coef.message_s},         {"block_pass_s", c.coef.block_pass_s},
                       {"static_bytes", c.coef.static_bytes},   {"activation_bytes", c.coef.activation_bytes},
                       {"checkpoint_bytes", c.coef.checkpoint_bytes}};
  j["residuals"] = {{"time_points", c.residuals.time_points},     {"time_rms", c.residuals.time_rms},
                    {"time_max", c.residuals.time_max},           {"memory_points", c.residuals.memory_points},
                    {"memory_rms", c.residuals.memory_rms},       {"memory_max", c.residuals.memory_max}};
  out << j.dump(1) << '\n';
}

/// Reads a `dcp.fit/v1` document; `source` names it in errors. Malformed JSON, another format, a
/// missing or mistyped field is a `dcp::error` (parse_error); a negative or non-finite
/// coefficient, an invalid model or device one with invalid_argument.
inline fitted_cost read_fit(std::istream& in, std::string_view source = "fit") {
  const std::string src(source);
  auto fail = [&](const std::string& what) -> void {
    throw error(errc::parse_error, std::string(fit_format) + " '" + src + "': " + what);
  };
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    fail(std::string("not valid JSON (") + e.what() + ")");
  }
  auto integer = [&](const nlohmann::json& v, const char* field) -> std::int64_t {
    const bool ok = (v.is_number_integer() && v.get<std::int64_t>() >= 0 && v.get<std::int64_t>() <= (std::int64_t{1} << 40)) ||
                    (v.is_number_unsigned() && v.get<std::uint64_t>() <= (std::uint64_t{1} << 40));
    if (!ok) fail(std::string("field '") + field + "' = " + v.dump() + " is not a non-negative integer in range");
    return v.get<std::int64_t>();
  };
  auto number = [&](const nlohmann::json& o, const char* field) -> double {
    const auto& v = o.at(field);
    if (!v.is_number()) fail(std::string("field '") + field + "' = " + v.dump() + " is not a number");
    return v.get<double>();
  };
  fitted_cost c;
  try {
    if (!j.is_object() || j.value("format", std::string()) != fit_format)
      fail("unknown format '" + (j.is_object() ? j.value("format", std::string()) : std::string()) +
           "'; expected \"dcp.fit/v1\"");
    c.shape.world = static_cast<int>(integer(j.at("gpus"), "gpus"));
    c.memory_margin = number(j, "memory_margin");
    if (j.contains("recompute_ratio")) c.recompute_ratio = number(j, "recompute_ratio");  // 1 before it was fitted
    const auto& m = j.at("model");
    c.shape.model.name = m.at("name").get<std::string>();
    c.shape.model.blocks = static_cast<int>(integer(m.at("blocks"), "model.blocks"));
    c.shape.model.hidden = integer(m.at("hidden"), "model.hidden");
    c.shape.model.heads = static_cast<int>(integer(m.at("heads"), "model.heads"));
    c.shape.model.mlp_width = integer(m.at("mlp_width"), "model.mlp_width");
    c.shape.model.mlp_matrices = static_cast<int>(integer(m.at("mlp_matrices"), "model.mlp_matrices"));
    const auto att = m.at("attention").get<std::string>();
    if (att == "full") c.shape.model.attention = attention_kind::full;
    else if (att == "causal") c.shape.model.attention = attention_kind::causal;
    else if (att == "factorized_2d") c.shape.model.attention = attention_kind::factorized_2d;
    else fail("model.attention = '" + att + "'; use full, causal or factorized_2d");
    c.shape.model.text_tokens = integer(m.at("text_tokens"), "model.text_tokens");
    const auto& d = j.at("device");
    auto& dv = c.shape.device;
    dv.name = d.at("name").get<std::string>();
    dv.peak = number(d, "peak"), dv.eff_max = number(d, "eff_max"), dv.x_half = number(d, "x_half");
    dv.alpha = number(d, "alpha"), dv.tau = number(d, "tau");
    dv.bw_intra = number(d, "bw_intra"), dv.bw_inter = number(d, "bw_inter");
    dv.gpus_per_node = static_cast<int>(integer(d.at("gpus_per_node"), "device.gpus_per_node"));
    dv.mem_bytes = number(d, "mem_bytes"), dv.usable = number(d, "usable"), dv.beta = number(d, "beta");
    const auto& k = j.at("coefficients");
    c.coef = {number(k, "linear_flop_s"), number(k, "attention_flop_s"), number(k, "intra_byte_s"),
              number(k, "inter_byte_s"),  number(k, "message_s"),        number(k, "block_pass_s"),
              number(k, "static_bytes"),  number(k, "activation_bytes"), number(k, "checkpoint_bytes")};
    if (j.contains("residuals")) {
      const auto& r = j["residuals"];
      c.residuals = {integer(r.at("time_points"), "residuals.time_points"),
                     integer(r.at("memory_points"), "residuals.memory_points"),
                     number(r, "time_rms"), number(r, "time_max"), number(r, "memory_rms"), number(r, "memory_max")};
    }
  } catch (const nlohmann::json::exception& e) {
    fail(std::string("missing or mistyped field (") + e.what() + ")");
  }
  c.validate();
  return c;
}

}  // namespace dcp
