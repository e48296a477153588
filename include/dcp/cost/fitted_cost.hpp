#pragma once
/// \file
/// `fitted_cost`: the analytic model's functional form (DESIGN section 4) with its coefficients
/// fitted to measured micro-steps (DESIGN section 9.1).
///
/// Time of a step of N tokens, attention FLOPs A, on sp GPUs with k of L blocks checkpointed,
/// x = N / sp, e(x) = x / (x + x_half), r = 3 + rho k / L, a = c (2L + k), v = 2 w N / sp (sp-1)/sp
/// (w the all-to-all width of section 4.1, h without GQA), F_lin = L 2 P_b N, F_V = 2 V h N:
///
///     t = (r (c_lin F_lin + c_att A) + 3 c_lin F_V) / (sp e(x))  linear, attention and LM-head FLOPs
///       + [1 < sp <= G] a v c_intra + [sp > G] a v c_inter        all-to-all volume
///       + [sp > 1] a c_msg + (3L + k) c_block                     messages, per-block overhead
///     M = m_static + h x ((L - k + 1) m_act + k m_ckpt)           static and activation memory
///       + (beta' - beta_b) h x                                    the loss's logits beyond a block's
///
/// (beta' and beta_b of section 4.1, both beta without a vocabulary or cross-attention; the last
/// term is the model's, not fitted). With c_lin = c_att = 1 / (peak eff_max), c_intra = 1 / bw_intra,
/// c_inter = 1 / bw_inter, c_msg = alpha, c_block = tau, m_static = 4P + 12P/N, m_act = beta_b,
/// m_ckpt = 2 and rho = 1 it
/// is `analytic_cost` exactly (L, h, G, N, the head widths and the vocabulary are shape).
/// `fit_cost` (`<dcp/cost/fit.hpp>`) fits the nine coefficients to observed steps by non-negative
/// least squares on relative residuals, with a ridge toward a prior (the analytic constants or a
/// previous fit), so a handful of steps suffice and no coefficient goes negative; the two
/// nonlinear constants of the form, x_half (how fast efficiency saturates) and rho (a recomputed
/// block's forward in units of a third of its forward+backward), are searched on log grids around
/// the prior's. `write_fit` / `read_fit` (`<dcp/cost/fit_json.hpp>`) store a fit as `dcp.fit/v1`
/// JSON beside `dcp.profile/v1`.

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <ostream>
#include <span>
#include <string>
#include <vector>

#include <dcp/cost/analytic.hpp>
#include <dcp/cost/cost_concepts.hpp>
#include <dcp/cost/device.hpp>
#include <dcp/error.hpp>
#include <dcp/model/transformer.hpp>
#include <dcp/sequence.hpp>

namespace dcp {

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

  /// The analytic constants of `c` (DESIGN section 4). On a kernel clock (DESIGN 4.6), the form
  /// nearest it: GEMMs at the GEMM peak, attention FLOPs at the kernels' best forward and backward
  /// rates, (1 / a_f + 2.5 / a_b) / 3 per FLOP of a third of a forward+backward.
  static fit_coefficients of(const analytic_cost& c) noexcept {
    const double s = 1 / (c.device.peak * c.device.eff_max);
    const kernel_clock& k = c.device.kernel;
    const double lin = k.enabled() ? 1 / (c.device.gemm_peak() * c.device.eff_max) : s;
    const double att = k.enabled() ? (1 / k.attention_forward + kernel_clock::backward_flops / k.attention_backward) /
                                         (3 * c.device.peak)
                                   : s;
    return {lin,
            att,
            1 / c.device.bw_intra,
            1 / c.device.bw_inter,
            c.device.alpha,
            c.device.tau,
            c.static_memory(),
            c.block_beta(),
            2.0};
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
    check(shape.has_fitted_form(), errc::invalid_argument, [] {
      return std::string(
          "fitted_cost mirrors the dense zero1 model of DESIGN section 4 (tp = ep = 1, zero1, no ring, "
          "self-attention only, dense MLP; GQA and a vocabulary allowed); fit that model, or plan with "
          "analytic_cost");
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
  const parallel_layout& layout() const noexcept { return shape.layout(); }
  int gpus() const noexcept { return shape.gpus(); }
  int gpus_per_node() const noexcept { return shape.gpus_per_node(); }
  int heads() const noexcept { return shape.heads(); }
  double capacity() const noexcept { return shape.capacity() / (1 + memory_margin); }
  /// A block's planning capacity on a mixed cluster: its smallest node's, with the margin.
  double capacity_of(rank_block units) const noexcept { return shape.capacity_of(units) / (1 + memory_margin); }
  fitted_cost as_uniform(const unit_device& d) const {
    fitted_cost out = *this;
    out.shape = shape.as_uniform(d);
    return out;
  }
  std::int64_t tokens_of(const sequence& s) const noexcept { return shape.tokens_of(s); }
  load_type load_of(const sequence& s) const noexcept { return shape.load_of(s); }

  /// Feature vector of the time terms: t = sum_i features[i] * time coefficient i.
  std::array<double, fit_coefficients::time_terms> time_features(const load_type& l, int sp, int k) const noexcept {
    const auto& m = shape.model;
    const double L = m.blocks;
    const double x = l.tokens / sp;
    const double e = x / (x + shape.device.x_half);
    const double r = (3 + recompute_ratio * k / L) / (sp * e);
    std::array<double, fit_coefficients::time_terms> f{};
    f[0] = r * L * 2 * m.block_parameters() * l.tokens + 3 * shape.head_flops(l) / (sp * e);
    f[1] = r * l.attention;
    if (sp > 1) {
      const double a = shape.all_to_alls_per_pass() * (2 * L + k);
      const double v = 2 * shape.all_to_all_width(sp) * l.tokens / sp * (sp - 1) / sp;
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
  /// (beta' - beta) h x: the loss's logits beyond a block's working set, the model's bytes (0
  /// without a vocabulary or where a block's activations are larger); not fitted.
  double loss_excess(const load_type& l, int sp) const noexcept {
    return (shape.working_beta() - shape.block_beta()) * static_cast<double>(shape.model.hidden) * l.tokens / sp;
  }
  double memory(const load_type& l, int sp, int k) const noexcept {
    const auto f = memory_features(l, sp, k);
    const auto c = coef.memory_array();
    return f[0] * c[0] + f[1] * c[1] + f[2] * c[2] + loss_excess(l, sp);
  }
  /// x_max: the most tokens per GPU any step that fits holds (all blocks checkpointed).
  double max_tokens_per_gpu() const noexcept {
    const double per =
        static_cast<double>(shape.model.hidden) * (blocks() * coef.checkpoint_bytes + coef.activation_bytes) +
        (shape.working_beta() - shape.block_beta()) * static_cast<double>(shape.model.hidden);
    return per > 0 ? std::max(0.0, capacity() - coef.static_bytes) / per : std::numeric_limits<double>::infinity();
  }
  /// GPU-seconds floor, as `analytic_cost::work_floor`: compute at e(x_max), all-to-all bytes, no
  /// latency or launch overhead.
  double work_floor(const load_type& l, int sp, int k) const noexcept {
    if (l.tokens <= 0) return 0;
    const auto& m = shape.model;
    const double L = m.blocks;
    const double xm = max_tokens_per_gpu();
    const double e = std::isinf(xm) ? 1.0 : xm / (xm + shape.device.x_half);
    double w = ((3 + recompute_ratio * k / L) * (coef.linear_flop_s * L * 2 * m.block_parameters() * l.tokens +
                                                 coef.attention_flop_s * l.attention) +
                3 * coef.linear_flop_s * shape.head_flops(l)) /
               e;
    if (sp > 1)
      w += shape.all_to_alls_per_pass() * (2 * L + k) * 2 * shape.all_to_all_width(sp) * l.tokens * (sp - 1) / sp *
           (sp <= gpus_per_node() ? coef.intra_byte_s : coef.inter_byte_s);
    return w;
  }

  /// The least seconds of any step on sp GPUs with at least k checkpointed blocks that holds `l`
  /// among sequences of `batch`, as `analytic_cost::shared_time_floor`: the compute terms are
  /// (3 + rho k/L) (a_lin c N + a_att A)(1 + x_half sp / N) / sp with the LM head in
  /// c = 2 L P_b + 3 (2 V h) / (3 + rho k/L), least at N* = sqrt(a_att A x_half sp / (a_lin c))
  /// within [N_l, min(sp x_max, N_batch)]; the other terms only grow with the load, so they are l's own.
  double shared_time_floor(const load_type& l, int sp, int k, double alone_s, const load_type& batch) const noexcept {
    const auto& m = shape.model;
    const double L = m.blocks, b = shape.device.x_half * sp;
    const double per_token =
        L * 2 * m.block_parameters() + 3 * m.head_flops_per_token() / (3 + recompute_ratio * k / L);
    const double lin = coef.linear_flop_s * per_token, att = coef.attention_flop_s * l.attention;
    const double n = std::min({std::sqrt(att * b / lin), sp * max_tokens_per_gpu(), batch.tokens});
    if (!(n > l.tokens)) return alone_s;
    const auto f = time_features(l, sp, k);
    const auto c = coef.time_array();
    double t = (3 + recompute_ratio * k / L) * (att + lin * n) * (1 + b / n) / sp;
    for (std::size_t i = 2; i < f.size(); ++i) t += f[i] * c[i];  // 0 and 1 are the compute, above
    return std::min(alone_s, t);
  }

  friend bool operator==(const fitted_cost&, const fitted_cost&) = default;
  friend std::ostream& operator<<(std::ostream& os, const fitted_cost& c) {
    return os << "fitted_cost{" << c.shape.model.name << " on " << c.shape.device.name << " (x_half " << c.shape.device.x_half << ", rho " << c.recompute_ratio << "), N=" << c.gpus() << ", "
              << c.coef << ", margin=" << c.memory_margin << ", " << c.residuals << "}";
  }
};

static_assert(cost_model<fitted_cost>);
static_assert(mixed_cluster_cost_model<fitted_cost>);
static_assert(shared_time_floor_cost_model<fitted_cost>);

/// The analytic model as a `fitted_cost` (the prior of a first fit), validated.
inline fitted_cost make_fitted_cost(const analytic_cost& analytic, double memory_margin = 0) {
  analytic_cost shape = analytic;
  if (analytic.device.kernel.enabled()) {
    // The form has no kernel clock: its shape is the device's analytic twin with the same
    // capacity (the reserved bytes taken out of `usable`), its coefficients the clock's nearest.
    shape.device = analytic.device.analytic();
    shape.device.usable = analytic.device.capacity() / analytic.device.mem_bytes;
  }
  fitted_cost c{shape, fit_coefficients::of(analytic), memory_margin, {}};
  c.validate();
  return c;
}

}  // namespace dcp
