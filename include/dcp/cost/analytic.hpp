#pragma once
/// \file
/// `analytic_cost`: the embedded default cost model, exactly DESIGN section 4.

#include <cstdint>
#include <ostream>
#include <string>

#include <dcp/cost/cost_concepts.hpp>
#include <dcp/cost/device.hpp>
#include <dcp/error.hpp>
#include <dcp/model/transformer.hpp>
#include <dcp/sequence.hpp>

namespace dcp {

/// Additive summary of a micro-step's sequences for `analytic_cost`.
struct analytic_load {
  double sequences = 0;  ///< b
  double tokens = 0;     ///< N_tok = sum n_j
  double attention = 0;  ///< A: forward attention FLOPs (all blocks)

  friend constexpr analytic_load operator+(analytic_load a, const analytic_load& b) noexcept {
    return {a.sequences + b.sequences, a.tokens + b.tokens, a.attention + b.attention};
  }
  friend constexpr analytic_load operator-(analytic_load a, const analytic_load& b) noexcept {
    return {a.sequences - b.sequences, a.tokens - b.tokens, a.attention - b.attention};
  }
  friend constexpr bool operator==(const analytic_load&, const analytic_load&) = default;
};

/// Time and memory of a micro-step from FLOPs, bytes and a few device constants.
/// A regular value: the model, the device and the GPU count N (memory shards over N).
struct analytic_cost {
  using policy_concept = cost_model_tag;
  using load_type = analytic_load;

  transformer_spec model = models::cogvideox_5b();
  device_spec device = devices::h200();
  int world = 1;  ///< N, the GPUs of the job (optimizer state shards over all of them)

  /// Throws a `dcp::error` unless model, device and N are valid and the static memory fits.
  void validate() const {
    dcp::validate(model);
    dcp::validate(device);
    check(world > 0, errc::invalid_argument,
          [&] { return "gpus = " + std::to_string(world) + " must be positive"; });
    check(world <= device.gpus_per_node || world % device.gpus_per_node == 0, errc::invalid_argument, [&] {
      return "gpus = " + std::to_string(world) + " is not a multiple of gpus_per_node = " +
             std::to_string(device.gpus_per_node) + "; use whole nodes beyond one node";
    });
    check(static_memory() < capacity(), errc::invalid_argument, [&] {
      return "memory capacity " + std::to_string(capacity()) + " B is below the static memory " +
             std::to_string(static_memory()) + " B of model '" + model.name + "' on " + std::to_string(world) +
             " GPUs; use more GPUs or a device with more memory";
    });
  }

  int blocks() const noexcept { return model.blocks; }
  int gpus() const noexcept { return world; }
  int gpus_per_node() const noexcept { return device.gpus_per_node; }
  int heads() const noexcept { return model.heads; }
  double capacity() const noexcept { return device.capacity(); }

  std::int64_t tokens_of(const sequence& s) const noexcept { return model.tokens_of(s.frames, s.spatial); }

  load_type load_of(const sequence& s) const noexcept {
    const double L = model.blocks, h = static_cast<double>(model.hidden);
    const double n = static_cast<double>(tokens_of(s));
    double a = 0;
    switch (model.attention) {
      case attention_kind::full: a = L * 4 * h * n * n; break;
      case attention_kind::causal: a = L * 2 * h * n * n; break;
      case attention_kind::factorized_2d: {
        const double t = static_cast<double>(s.frames), sz = static_cast<double>(s.spatial);
        a = (L / 2) * 4 * h * t * sz * sz + (L / 2) * 4 * h * sz * t * t;
        break;
      }
    }
    return {1, n, a};
  }

  /// M_static = 4 P + 12 P / N.
  double static_memory() const noexcept {
    const double p = model.parameters();
    return 4 * p + 12 * p / world;
  }
  /// F = L 2 P_b N_tok + A.
  double forward_flops(const load_type& l) const noexcept {
    return model.blocks * 2 * model.block_parameters() * l.tokens + l.attention;
  }
  /// eff(x) = eff_max x / (x + x_half).
  double efficiency(double x) const noexcept { return device.eff_max * x / (x + device.x_half); }
  /// All-to-alls per block pass: 4 for 1D Ulysses, 2 for 2D DSP.
  int all_to_alls_per_pass() const noexcept { return model.attention == attention_kind::factorized_2d ? 2 : 4; }
  double bandwidth(int sp) const noexcept { return sp <= device.gpus_per_node ? device.bw_intra : device.bw_inter; }
  /// x_max: the most tokens per GPU any feasible step holds (all blocks checkpointed).
  double max_tokens_per_gpu() const noexcept {
    return (capacity() - static_memory()) / ((2.0 * model.blocks + device.beta) * static_cast<double>(model.hidden));
  }

  double time(const load_type& l, int sp, int k) const noexcept {
    const double L = model.blocks, h = static_cast<double>(model.hidden);
    const double x = l.tokens / sp;
    const double t_comp = (3 + k / L) * forward_flops(l) / (sp * device.peak * efficiency(x));
    double t_comm = 0;
    if (sp > 1) {
      const double v = 2 * h * l.tokens / sp * (sp - 1) / sp;
      const double a = all_to_alls_per_pass() * (2 * L + k);
      t_comm = a * (device.alpha + v / bandwidth(sp));
    }
    const double t_over = device.tau * (3 * L + k);
    return t_comp + t_comm + t_over;
  }

  double memory(const load_type& l, int sp, int k) const noexcept {
    const double L = model.blocks, h = static_cast<double>(model.hidden), beta = device.beta;
    const double x = l.tokens / sp;
    return static_memory() + (L - k) * beta * h * x + k * 2 * h * x + beta * h * x;
  }

  /// GPU-seconds floor of DESIGN section 3: compute at eff(x_max), communication bytes at
  /// full bandwidth, no latency or launch overhead (batching can amortise those away).
  double work_floor(const load_type& l, int sp, int k) const noexcept {
    const double L = model.blocks, h = static_cast<double>(model.hidden);
    double w = (3 + k / L) * forward_flops(l) / (device.peak * efficiency(max_tokens_per_gpu()));
    if (sp > 1) w += all_to_alls_per_pass() * (2 * L + k) * 2 * h * l.tokens * (sp - 1) / sp / bandwidth(sp);
    return w;
  }

  friend bool operator==(const analytic_cost&, const analytic_cost&) = default;
  friend std::ostream& operator<<(std::ostream& os, const analytic_cost& c) {
    return os << "analytic_cost{" << c.model << ", " << c.device << ", N=" << c.world << "}";
  }
};

/// A validated analytic cost model.
inline analytic_cost make_analytic_cost(transformer_spec model, device_spec device, int gpus) {
  analytic_cost c{std::move(model), std::move(device), gpus};
  c.validate();
  return c;
}

static_assert(cost_model<analytic_cost>);

}  // namespace dcp
