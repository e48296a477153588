#pragma once
/// \file
/// `cost_sum<Trained>`: one training step that also runs frozen networks forward (DESIGN
/// section 9.4). Video DiT training encodes each clip's prompt with a text encoder (T5-XXL) and
/// its pixels with a 3D VAE encoder in the same step as the trained model; both are frozen
/// (forward only, no gradients, no optimizer state).
///
/// For a step of b sequences with S shape tokens (latent tokens without the text) on sp GPUs:
///   - time = trained.time + sum_f [ (b flops_per_sequence_f + S flops_per_token_f) / (sp flop_rate_f)
///                                    + layers_f tau_f ]             (the encoders shard over the group)
///   - memory = max( trained.memory(step),                            (encoder activations are freed
///                   trained.memory(empty step) + max_f workspace_f S / sp )  before the trained forward)
///              + sum_f ( 2 parameters_f + output_bytes_f (b / sp) )  (bf16 weights, kept conditioning)
///   - work_floor = trained.work_floor + sum_f (b flops_per_sequence_f + S flops_per_token_f) / flop_rate_f
/// It models `cost_model` when `Trained` does, so planners and the simulator take it through the
/// `cost` slot unchanged.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include <dcp/cost/analytic.hpp>
#include <dcp/cost/cost_concepts.hpp>
#include <dcp/cost/device.hpp>
#include <dcp/error.hpp>
#include <dcp/sequence.hpp>

namespace dcp {

/// A frozen network run forward on every sequence of a step. A regular value.
struct forward_network {
  std::string name = "custom";
  double parameters = 0;                ///< weights, held in bf16 on every GPU (2 bytes each)
  double flops_per_sequence = 0;        ///< forward FLOPs per sequence whatever its length (a prompt encoder)
  double flops_per_token = 0;           ///< forward FLOPs per latent token (the pixels behind it, for a VAE)
  double workspace_bytes_per_token = 0; ///< transient activations per latent token on a GPU while it runs
  double output_bytes_per_sequence = 0; ///< conditioning it hands the trained model, kept through the step
  int layers = 1;                       ///< kernel-launch overhead: one tau per layer
  double flop_rate = 0;                 ///< achieved FLOP/s
  double tau = 0;                       ///< seconds of overhead per layer

  friend bool operator==(const forward_network&, const forward_network&) = default;
  friend std::ostream& operator<<(std::ostream& os, const forward_network& f) {
    return os << "forward_network{" << f.name << ", P=" << f.parameters << "}";
  }
};

/// Throws `dcp::error` naming the field unless every constant of `f` is in its domain.
inline void validate(const forward_network& f) {
  auto need = [&](bool ok, const std::string& what) {
    check(ok, errc::invalid_argument, [&] { return "forward network '" + f.name + "': " + what; });
  };
  auto nonneg = [](double v) { return std::isfinite(v) && v >= 0; };
  need(nonneg(f.parameters) && nonneg(f.flops_per_sequence) && nonneg(f.flops_per_token) &&
           nonneg(f.workspace_bytes_per_token) && nonneg(f.output_bytes_per_sequence) && nonneg(f.tau),
       "parameters, FLOPs, bytes and tau must be finite and not negative");
  need(f.flops_per_sequence + f.flops_per_token > 0, "it does no work (flops_per_sequence and flops_per_token are 0)");
  need(std::isfinite(f.flop_rate) && f.flop_rate > 0, "flop_rate = " + std::to_string(f.flop_rate) + " must be positive");
  need(f.layers >= 1, "layers = " + std::to_string(f.layers) + " must be at least 1");
}

namespace forward_networks {
/// A T5-XXL-like text encoder (24 layers, d = 4096, gated FFN 10240, about 4.7e9 parameters)
/// over a prompt of `prompt_tokens` tokens, on `device` at its best efficiency.
inline forward_network t5_xxl_encoder(const device_spec& device, double prompt_tokens = 226) {
  const double d = 4096, ff = 10240, layers = 24;
  const double per_layer = 4 * d * d + 3 * d * ff;
  const double params = layers * per_layer + 32128 * d;  // plus the token embedding
  const double flops = layers * (2 * per_layer * prompt_tokens + 4 * d * prompt_tokens * prompt_tokens);
  return {"t5-xxl-encoder", params, flops, 0, 0, 2 * d * prompt_tokens, int(layers), device.peak * device.eff_max,
          device.tau};
}
/// A CogVideoX-like 3D causal VAE encoder (about 2.5e8 parameters, 8x8 spatial and 4x temporal
/// compression, then 2x2 DiT patches: 1024 pixel-frames per latent token at about 2 MFLOPs
/// each), encoding in tiles so its workspace is about 256 KiB per latent token.
inline forward_network vae3d_encoder(const device_spec& device) {
  const double pixels_per_token = 8 * 8 * 2 * 2 * 4;
  return {"vae3d-encoder", 2.5e8, 0, pixels_per_token * 2.0e6, 256.0 * 1024, 0, 40, device.peak * device.eff_max * 0.5,
          device.tau};
}
}  // namespace forward_networks

/// Additive summary of a step for `cost_sum`.
template <class TrainedLoad>
struct cost_sum_load {
  TrainedLoad trained{};
  double sequences = 0;     ///< b
  double shape_tokens = 0;  ///< S: latent tokens, without text
  friend constexpr cost_sum_load operator+(cost_sum_load a, const cost_sum_load& b) noexcept {
    return {a.trained + b.trained, a.sequences + b.sequences, a.shape_tokens + b.shape_tokens};
  }
  friend constexpr cost_sum_load operator-(cost_sum_load a, const cost_sum_load& b) noexcept {
    return {a.trained - b.trained, a.sequences - b.sequences, a.shape_tokens - b.shape_tokens};
  }
  friend constexpr bool operator==(const cost_sum_load&, const cost_sum_load&) = default;
};

/// The trained model's cost plus frozen forward networks (see the file comment).
template <cost_model Trained>
struct cost_sum {
  using policy_concept = cost_model_tag;
  using load_type = cost_sum_load<typename Trained::load_type>;

  Trained trained{};
  std::vector<forward_network> forward;

  void validate() const {
    for (const auto& f : forward) dcp::validate(f);
    check(memory(load_type{}, 1, blocks()) < capacity(), errc::invalid_argument, [&] {
      return "cost_sum: the trained model's static memory and the frozen networks' weights (" +
             std::to_string(memory(load_type{}, 1, blocks())) + " B) do not fit the capacity " +
             std::to_string(capacity()) + " B; use more memory or fewer frozen networks";
    });
  }

  int blocks() const noexcept { return trained.blocks(); }
  decltype(auto) layout() const noexcept { return trained.layout(); }
  int gpus() const noexcept { return trained.gpus(); }
  int gpus_per_node() const noexcept { return trained.gpus_per_node(); }
  int heads() const noexcept { return trained.heads(); }
  double capacity() const noexcept { return trained.capacity(); }
  // clang-format off (clang-format 14 runs a requires-clause into the declaration)
  /// On a mixed cluster: the trained model's block capacity, and the sum with it uniform.
  double capacity_of(rank_block units) const
    requires mixed_cluster_cost_model<Trained>
  {
    return trained.capacity_of(units);
  }
  cost_sum as_uniform(const unit_device& d) const
    requires mixed_cluster_cost_model<Trained>
  {
    return {trained.as_uniform(d), forward};
  }
  /// The trained model's `shared_time_floor` plus the frozen networks' seconds of the load
  /// (which only grow with a step's load), so the law holds as for the trained model.
  double shared_time_floor(const load_type& l, int sp, int k, double alone_s, const load_type& batch) const
    requires shared_time_floor_cost_model<Trained>
  {
    const double trained_alone = trained.time(l.trained, sp, k);
    const double f = trained.shared_time_floor(l.trained, sp, k, trained_alone, batch.trained);
    return f < trained_alone ? std::min(alone_s, alone_s - trained_alone + f) : alone_s;
  }
  // clang-format on
  std::int64_t tokens_of(const sequence& s) const noexcept { return trained.tokens_of(s); }
  load_type load_of(const sequence& s) const noexcept {
    return {trained.load_of(s), 1.0, static_cast<double>(s.shape_tokens())};
  }

  /// FLOPs of the frozen networks on the step.
  double forward_flops(const load_type& l, const forward_network& f) const noexcept {
    return l.sequences * f.flops_per_sequence + l.shape_tokens * f.flops_per_token;
  }
  double time(const load_type& l, int sp, int k) const {
    double t = trained.time(l.trained, sp, k);
    if (l.sequences <= 0) return t;
    for (const auto& f : forward) t += forward_flops(l, f) / (sp * f.flop_rate) + f.layers * f.tau;
    return t;
  }
  /// The trained model's per-step floor (zero3's weight gather): `time` adds the frozen networks'
  /// seconds, never negative, to the trained model's time of the step, so every non-empty step
  /// still lasts at least it. (Their per-layer overhead is not counted in: under zero1 it would
  /// make a floor where the trained model has none.)
  double step_floor() const
    requires step_floor_cost_model<Trained>
  {
    return trained.step_floor();
  }
  /// The trained model's padding pass: a pass with no sequences runs no frozen network.
  double padding_time() const
    requires padding_cost_model<Trained>
  {
    return trained.padding_time();
  }
  double memory(const load_type& l, int sp, int k) const {
    double workspace = 0, held = 0;
    for (const auto& f : forward) {
      workspace = std::max(workspace, f.workspace_bytes_per_token * l.shape_tokens / sp);
      held += 2 * f.parameters + f.output_bytes_per_sequence * l.sequences / sp;
    }
    const double encoding = trained.memory(typename Trained::load_type{}, sp, k) + workspace;
    return std::max(static_cast<double>(trained.memory(l.trained, sp, k)), encoding) + held;
  }
  double work_floor(const load_type& l, int sp, int k) const {
    double w = trained.work_floor(l.trained, sp, k);
    for (const auto& f : forward) w += forward_flops(l, f) / f.flop_rate;
    return w;
  }

  friend bool operator==(const cost_sum&, const cost_sum&) = default;
  friend std::ostream& operator<<(std::ostream& os, const cost_sum& c) {
    os << "cost_sum{" << c.trained;
    for (const auto& f : c.forward) os << " + " << f;
    return os << "}";
  }
};

/// A validated `cost_sum` of `trained` and the frozen `forward` networks.
template <cost_model Trained>
cost_sum<Trained> make_cost_sum(Trained trained, std::vector<forward_network> forward) {
  cost_sum<Trained> c{std::move(trained), std::move(forward)};
  c.validate();
  return c;
}

static_assert(cost_model<cost_sum<analytic_cost>>);
static_assert(mixed_cluster_cost_model<cost_sum<analytic_cost>>);
static_assert(step_floor_cost_model<cost_sum<analytic_cost>>);
static_assert(shared_time_floor_cost_model<cost_sum<analytic_cost>>);

}  // namespace dcp
