#pragma once
/// \file
/// `scaled_analytic_cost`: the analytic model of DESIGN section 4 with its terms multiplied by
/// factors (`cost_scales`), the deterministic part of the simulator's truth clock
/// (`dcp-sim --truth`, DESIGN section 8). All factors 1 price exactly as `analytic_cost`.
///
///   t_comp = (3 + k/L) (compute * linear FLOPs + attention * A) / (sp tp peak eff(x))
///   every collective's alpha and tau   x overhead
///   bw_intra, bw_inter                 x intra_bw, inter_bw
///   M = M_static + memory * (activation memory)
///
/// It delegates to an `analytic_cost` whose device constants carry the factors (peak / compute,
/// alpha and tau x overhead, bandwidths x their factors) and whose loads carry attention FLOPs x
/// attention / compute, so it follows every term of the analytic model (tensor and expert
/// parallelism, ZeRO-3 gathers) without restating it. Memory is scaled on the activations alone.
/// On a memory-scaled truth the work floors keep the unscaled memory cap: still floors (a
/// smaller cap only lowers a step's efficiency), only looser.
///
/// ```
/// dcp::scaled_analytic_cost truth(dcp::make_analytic_cost(model, device, 32), {.attention = 1.3});
/// double t = truth.time(truth.load_of(s), 4, 0);
/// ```

#include <cmath>
#include <cstdint>
#include <ostream>
#include <string>
#include <utility>

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
  double overhead = 1;   ///< per-block overhead tau and collective latency alpha
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
class scaled_analytic_cost {
 public:
  using policy_concept = cost_model_tag;
  using load_type = analytic_load;

  scaled_analytic_cost() : scaled_analytic_cost(analytic_cost{}, cost_scales{}) {}
  scaled_analytic_cost(analytic_cost base, cost_scales scales)
      : base_(std::move(base)), scales_(scales), scaled_(base_), attention_ratio_(scales.attention / scales.compute) {
    scaled_.device.peak = base_.device.peak / scales_.compute;
    scaled_.device.alpha = base_.device.alpha * scales_.overhead;
    scaled_.device.tau = base_.device.tau * scales_.overhead;
    scaled_.device.bw_intra = base_.device.bw_intra * scales_.intra_bw;
    scaled_.device.bw_inter = base_.device.bw_inter * scales_.inter_bw;
  }

  const analytic_cost& base() const noexcept { return base_; }
  const cost_scales& scales() const noexcept { return scales_; }
  /// The analytic model with the time factors in its device constants.
  const analytic_cost& scaled_model() const noexcept { return scaled_; }

  /// Throws a `dcp::error` unless the base model and the scales are valid.
  void validate() const {
    base_.validate();
    scales_.validate();
  }

  int blocks() const noexcept { return base_.blocks(); }
  const parallel_layout& layout() const noexcept { return base_.layout(); }
  int gpus() const noexcept { return base_.gpus(); }
  int gpus_per_node() const noexcept { return base_.gpus_per_node(); }
  int heads() const noexcept { return base_.heads(); }
  /// The base model's largest Ulysses x Ring ring (DESIGN section 4.3).
  int max_ring() const noexcept { return base_.max_ring(); }
  double capacity() const noexcept { return base_.capacity(); }
  double capacity_of(rank_block units) const noexcept { return base_.capacity_of(units); }
  scaled_analytic_cost as_uniform(const unit_device& d) const { return {base_.as_uniform(d), scales_}; }
  std::int64_t tokens_of(const sequence& s) const noexcept { return base_.tokens_of(s); }
  load_type load_of(const sequence& s) const noexcept { return base_.load_of(s); }
  double static_memory() const noexcept { return base_.static_memory(); }
  /// A stage boundary's transfer on the scaled links and latency (`pipeline_cost_model`).
  double stage_transfer(const load_type& l, int sp) const noexcept { return scaled_.stage_transfer(l, sp); }
  /// The base model's working set under the scaled activation memory, as `memory` scales it.
  double working_memory(const load_type& l, int sp) const noexcept {
    return scales_.memory * base_.working_memory(l, sp);
  }
  /// x_max under the scaled activation memory.
  double max_tokens_per_gpu() const noexcept { return base_.max_tokens_per_gpu() / scales_.memory; }

  double time(const load_type& l, int sp, int k) const noexcept { return scaled_.time(timed(l), sp, k); }
  double time(const load_type& l, int sp, int k, int r) const noexcept { return scaled_.time(timed(l), sp, k, r); }
  double memory(const load_type& l, int sp, int k) const noexcept {
    const double m = base_.memory(l, sp, k);
    if (scales_.memory == 1) return m;
    return base_.static_memory() + scales_.memory * (m - base_.static_memory());
  }
  /// zero3's per-step floor on this clock: the scaled device's (alpha x overhead, bandwidths x
  /// their factors), the floor `time` takes its maximum with since it prices through
  /// `scaled_model()`; so the law holds as for `analytic_cost`. 0 unless zero3.
  double step_floor() const noexcept { return scaled_.step_floor(); }
  /// A padding pass on the scaled device (`padding_cost_model`).
  double padding_time() const noexcept { return scaled_.padding_time(); }
  /// The per-batch update on the scaled links (`update_cost_model`); 0 on section 4's clock.
  double update_seconds() const noexcept { return scaled_.update_seconds(); }
  double work_floor(const load_type& l, int sp, int k) const noexcept { return scaled_.work_floor(timed(l), sp, k); }
  double work_floor(const load_type& l, int sp, int k, int r) const noexcept {
    return scaled_.work_floor(timed(l), sp, k, r);
  }
  double packed_work_floor(const load_type& l, int sp, int k) const noexcept {
    return scaled_.packed_work_floor(timed(l), sp, k);
  }

  /// `analytic_cost::shared_time_floor` on this clock (through `scaled_model()`, as `time`).
  double shared_time_floor(const load_type& l, int sp, int k, double alone_s, const load_type& batch) const noexcept {
    return scaled_.shared_time_floor(timed(l), sp, k, alone_s, timed(batch));
  }

  friend bool operator==(const scaled_analytic_cost& a, const scaled_analytic_cost& b) {
    return a.base_ == b.base_ && a.scales_ == b.scales_;
  }
  friend std::ostream& operator<<(std::ostream& os, const scaled_analytic_cost& c) {
    return os << "scaled_analytic_cost{" << c.base_ << ", " << c.scales_ << "}";
  }

 private:
  // With peak / compute in the device, attention FLOPs x attention / compute time as attention.
  load_type timed(load_type l) const noexcept {
    l.attention *= attention_ratio_;
    l.ring_attention *= attention_ratio_;
    l.attention_forward_work *= attention_ratio_;
    l.attention_backward_work *= attention_ratio_;
    return l;
  }

  analytic_cost base_;
  cost_scales scales_;
  analytic_cost scaled_;
  double attention_ratio_ = 1;
};

static_assert(cost_model<scaled_analytic_cost>);
static_assert(mixed_cluster_cost_model<scaled_analytic_cost>);
static_assert(step_floor_cost_model<scaled_analytic_cost>);
static_assert(shared_time_floor_cost_model<scaled_analytic_cost>);
static_assert(pipeline_cost_model<scaled_analytic_cost>);
static_assert(update_cost_model<scaled_analytic_cost>);

}  // namespace dcp
