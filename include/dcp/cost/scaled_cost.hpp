#pragma once
/// \file
/// `scaled_analytic_cost`: the analytic model of DESIGN section 4 with each of its terms
/// multiplied by a factor (`cost_scales`), the deterministic part of the simulator's truth clock
/// (`dcp-sim --truth`). All factors 1 reproduce `analytic_cost` bit for bit.
///
///   t_comp = (3 + k/L) * (compute * L 2 P_b N_tok + attention * A) / (sp * peak * eff(x))
///   t_comm = c (2L + k) * (overhead * alpha + v / (bw * bw_factor(sp)))
///   t_over = overhead * tau * (3L + k)
///   M      = M_static + memory * ((L - k) beta h x + k 2 h x + beta h x)
///
/// bw_factor is `intra_bw` within a node and `inter_bw` across nodes.
///
/// ```
/// dcp::scaled_analytic_cost truth{dcp::make_analytic_cost(model, device, 32), {.attention = 1.3}};
/// double t = truth.time(truth.load_of(s), 4, 0);
/// ```

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <ostream>
#include <string>

#include <dcp/cost/analytic.hpp>
#include <dcp/cost/cost_concepts.hpp>
#include <dcp/error.hpp>
#include <dcp/sequence.hpp>

namespace dcp {

/// Multipliers of the analytic model's terms; 1 = as modelled.
struct cost_scales {
  double compute = 1;    ///< time of the linear (non-attention) FLOPs
  double attention = 1;  ///< time of the attention FLOPs
  double intra_bw = 1;   ///< bandwidth within a node
  double inter_bw = 1;   ///< bandwidth across nodes
  double overhead = 1;   ///< per-block overhead tau and all-to-all latency alpha
  double memory = 1;     ///< activation memory (static memory unchanged)

  /// Throws `dcp::error(errc::invalid_argument)` naming the factor unless all are positive and finite.
  void validate() const {
    auto one = [](const char* name, double v) {
      check(std::isfinite(v) && v > 0, errc::invalid_argument, [&] {
        return std::string("cost scale ") + name + " = " + std::to_string(v) +
               " must be positive and finite (1 = as modelled)";
      });
    };
    one("compute", compute), one("attention", attention), one("intra_bw", intra_bw);
    one("inter_bw", inter_bw), one("overhead", overhead), one("memory", memory);
  }
  friend bool operator==(const cost_scales&, const cost_scales&) = default;
  friend std::ostream& operator<<(std::ostream& os, const cost_scales& s) {
    return os << "cost_scales{compute=" << s.compute << ", attention=" << s.attention << ", intra_bw=" << s.intra_bw
              << ", inter_bw=" << s.inter_bw << ", overhead=" << s.overhead << ", memory=" << s.memory << "}";
  }
};

/// `analytic_cost` with its terms scaled. A regular value; models `cost_model`.
struct scaled_analytic_cost {
  using policy_concept = cost_model_tag;
  using load_type = analytic_load;

  analytic_cost base;
  cost_scales scales;

  /// Throws a `dcp::error` unless the base model and the scales are valid.
  void validate() const {
    base.validate();
    check(base.is_classic(), errc::invalid_argument, [&] {
      return std::string("scaled_analytic_cost mirrors the dense zero1 model of DESIGN section 4; ") + to_string(base.sharding) +
             " with tp = " + std::to_string(base.tp) + ", ep = " + std::to_string(base.ep) +
             " or a GQA/MoE/cross-attention model is not mirrored";
    });
    scales.validate();
  }

  int blocks() const noexcept { return base.blocks(); }
  int gpus() const noexcept { return base.gpus(); }
  int gpus_per_node() const noexcept { return base.gpus_per_node(); }
  int heads() const noexcept { return base.heads(); }
  double capacity() const noexcept { return base.capacity(); }
  std::int64_t tokens_of(const sequence& s) const noexcept { return base.tokens_of(s); }
  load_type load_of(const sequence& s) const noexcept { return base.load_of(s); }
  double static_memory() const noexcept { return base.static_memory(); }

  /// Forward FLOPs weighted by their time factors: compute * L 2 P_b N_tok + attention * A.
  double scaled_flops(const load_type& l) const noexcept {
    const auto& m = base.model;
    return scales.compute * (m.blocks * 2 * m.block_parameters() * l.tokens) + scales.attention * l.attention;
  }
  double bandwidth(int sp) const noexcept {
    return base.bandwidth(sp) * (sp <= base.device.gpus_per_node ? scales.intra_bw : scales.inter_bw);
  }
  /// x_max under the scaled activation memory.
  double max_tokens_per_gpu() const noexcept {
    return (capacity() - static_memory()) /
           ((2.0 * base.model.blocks + base.device.beta) * static_cast<double>(base.model.hidden) * scales.memory);
  }

  // The expressions mirror analytic_cost term by term, so that unit scales are exact.
  double time(const load_type& l, int sp, int k) const noexcept {
    const double L = base.model.blocks, h = static_cast<double>(base.model.hidden);
    const double x = l.tokens / sp;
    const double t_comp = (3 + k / L) * scaled_flops(l) / (sp * base.device.peak * base.efficiency(x));
    double t_comm = 0;
    if (sp > 1) {
      const double v = 2 * h * l.tokens / sp * (sp - 1) / sp;
      const double a = base.all_to_alls_per_pass() * (2 * L + k);
      t_comm = a * (scales.overhead * base.device.alpha + v / bandwidth(sp));
    }
    const double t_over = scales.overhead * base.device.tau * (3 * L + k);
    return t_comp + t_comm + t_over;
  }

  double memory(const load_type& l, int sp, int k) const noexcept {
    const double L = base.model.blocks, h = static_cast<double>(base.model.hidden), beta = base.device.beta;
    const double x = l.tokens / sp, m = scales.memory;
    return static_memory() + m * ((L - k) * beta * h * x) + m * (k * 2 * h * x) + m * (beta * h * x);
  }

  /// The GPU-seconds floor of `analytic_cost::work_floor` with the same scales.
  double work_floor(const load_type& l, int sp, int k) const noexcept {
    const double L = base.model.blocks, h = static_cast<double>(base.model.hidden);
    double w = (3 + k / L) * scaled_flops(l) / (base.device.peak * base.efficiency(max_tokens_per_gpu()));
    if (sp > 1) w += base.all_to_alls_per_pass() * (2 * L + k) * 2 * h * l.tokens * (sp - 1) / sp / bandwidth(sp);
    return w;
  }

  /// The packed floor of `analytic_cost::packed_work_floor` with the same scales: memory caps
  /// the tokens per GPU at x_cap(k') = (C - M_static) / (memory ((L - k') beta + 2 k' + beta) h).
  double packed_work_floor(const load_type& l, int sp, int k) const noexcept {
    const double L = base.model.blocks, h = static_cast<double>(base.model.hidden), beta = base.device.beta;
    const double room = (capacity() - static_memory()) / h;
    auto g = [&](double kk) {
      return (3 + kk / L) * (1 + base.device.x_half * (scales.memory * ((L - kk) * beta + 2 * kk + beta)) / room);
    };
    double w = std::min(g(k), g(L)) * scaled_flops(l) / (base.device.peak * base.device.eff_max);
    if (sp > 1) w += base.all_to_alls_per_pass() * (2 * L + k) * 2 * h * l.tokens * (sp - 1) / sp / bandwidth(sp);
    return w;
  }

  friend bool operator==(const scaled_analytic_cost&, const scaled_analytic_cost&) = default;
  friend std::ostream& operator<<(std::ostream& os, const scaled_analytic_cost& c) {
    return os << "scaled_analytic_cost{" << c.base << ", " << c.scales << "}";
  }
};

static_assert(cost_model<scaled_analytic_cost>);

}  // namespace dcp
