#pragma once
/// \file
/// `device_spec`: the constants of the analytic cost model (DESIGN section 4), with the H200,
/// H100 and A100 presets, and `unit_device_of`: a device as a node of a mixed cluster.

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstddef>
#include <ostream>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <dcp/error.hpp>
#include <dcp/layout.hpp>

namespace dcp {

/// Number format of the job's linear layers (DESIGN section 4.6): bf16, or fp8 (Transformer
/// Engine's scaled FP8 GEMMs; attention, norms and the optimizer stay in higher precision).
enum class gemm_precision { bf16, fp8 };

inline std::string to_string(gemm_precision p) { return p == gemm_precision::fp8 ? "fp8" : "bf16"; }

/// The kernel clock of a device (DESIGN section 4.6): how its kernels run where section 4's one
/// efficiency curve does not follow them. `attention_forward = 0` leaves the device on section
/// 4's analytic clock exactly; otherwise attention runs at FlashAttention-class rates per
/// sequence, tensor-parallel collectives hide behind GEMMs but for an exposed share, all-to-alls
/// spanning nodes split their bytes between the two link classes, a framework's memory is held
/// back, and every global batch pays its gradient reduction and optimizer step.
struct kernel_clock {
  double attention_forward = 0;        ///< a_f: forward attention's best fraction of peak (many keys, d = 128)
  double attention_forward_half = 0;   ///< n_f: keys per query at which the forward reaches half of a_f
  double attention_backward = 0;       ///< a_b: the backward's, on its 2.5x the forward's FLOPs
  double attention_backward_half = 0;  ///< n_b: keys per query at which the backward reaches half of a_b
  double attention_causal = 1;         ///< a causal kernel's rate over a full one's at the same keys per query
  double head_width_64 = 1;            ///< the rate at head width 64 over the rate at 128
  double head_width_256 = 1;           ///< the rate at head width 256 over the rate at 128
  double tp_exposed = 1;               ///< share of tensor-parallel collective seconds not hidden by comm overlap
  double hbm_bw = 0;                   ///< bytes/s of HBM: the optimizer step streams its state through it
  double reserved_bytes = 0;           ///< per GPU: CUDA context, NCCL communicators and workspaces
  double fp8_gemm = 0;                 ///< FP8 GEMM throughput over BF16's at the same shapes (0: no FP8)

  /// True when the device prices with this clock (false: section 4's).
  constexpr bool enabled() const noexcept { return attention_forward > 0; }
  /// FlashAttention's backward does 2.5x its forward's matmul FLOPs: it recomputes the scores and
  /// takes the gradients of queries, keys and values (five matmuls against the forward's two).
  static constexpr double backward_flops = 2.5;
  /// psi(d): the rate at head width d over the rate at 128, linear in log2 d between the measured
  /// widths 64, 128 and 256 and constant beyond them.
  double head_width_factor(double d) const noexcept {
    const double z = std::log2(std::max(d, 1.0));
    if (z <= 6) return head_width_64;
    if (z <= 7) return head_width_64 + (z - 6) * (1 - head_width_64);
    if (z <= 8) return 1 + (z - 7) * (head_width_256 - 1);
    return head_width_256;
  }
  /// e = min(1, best * keys / (keys + half) * psi(d) * (attention_causal if causal)): the fraction
  /// of peak an attention kernel reaches on queries that see `keys` keys on average, with heads of
  /// width d (DESIGN section 4.6).
  double efficiency(bool backward, double keys, double d, bool causal) const noexcept {
    const double best = backward ? attention_backward : attention_forward;
    const double half = backward ? attention_backward_half : attention_forward_half;
    return std::min(1.0, best * keys / (keys + half) * head_width_factor(d) * (causal ? attention_causal : 1.0));
  }
  friend bool operator==(const kernel_clock&, const kernel_clock&) = default;
};

/// Throughput, latency, bandwidth and memory of one GPU type and its interconnect.
struct device_spec {
  std::string name = "custom";
  double peak = 0;           ///< FLOP/s (bf16 dense)
  double eff_max = 0;        ///< best achievable fraction of peak
  double x_half = 0;         ///< tokens per GPU at which half of eff_max is reached
  double alpha = 0;          ///< seconds of latency per all-to-all
  double tau = 0;            ///< seconds of fixed overhead per block pass (kernel launches)
  double bw_intra = 0;       ///< bytes/s per GPU inside a node (NVLink)
  double bw_inter = 0;       ///< bytes/s per GPU across nodes (IB)
  int gpus_per_node = 8;     ///< G
  double mem_bytes = 0;      ///< HBM per GPU
  double usable = 0;         ///< fraction of HBM the planner may use
  double beta = 0;           ///< activation bytes per token per hidden unit of a non-checkpointed block
  kernel_clock kernel{};     ///< the kernel clock's constants (DESIGN 4.6); default: section 4's clock
  gemm_precision precision = gemm_precision::bf16;  ///< the job's GEMM format (fp8 needs kernel.fp8_gemm)

  /// C = mem_bytes * usable, less what the framework reserves on a kernel clock.
  constexpr double capacity() const noexcept { return mem_bytes * usable - kernel.reserved_bytes; }
  /// FLOP/s of the linear layers' GEMMs at full efficiency: peak, or under fp8 peak x fp8_gemm.
  constexpr double gemm_peak() const noexcept {
    return precision == gemm_precision::fp8 ? peak * kernel.fp8_gemm : peak;
  }
  /// This device on section 4's analytic clock: its constants without the kernel clock.
  device_spec analytic() const {
    device_spec d = *this;
    d.kernel = {};
    d.precision = gemm_precision::bf16;
    return d;
  }
  friend bool operator==(const device_spec&, const device_spec&) = default;
};

inline std::ostream& operator<<(std::ostream& os, const device_spec& d) {
  os << "device_spec{" << d.name << ", peak=" << d.peak << ", mem=" << d.mem_bytes << ", G=" << d.gpus_per_node;
  if (d.kernel.enabled()) os << ", kernel clock";
  if (d.precision != gemm_precision::bf16) os << ", " << to_string(d.precision);
  return os << "}";
}

/// Throws a `dcp::error` naming the field unless every constant is in its domain.
inline void validate(const device_spec& d) {
  auto positive = [&](double v, const char* field) {
    check(v > 0, errc::invalid_argument, [&] {
      return "device '" + d.name + "': " + field + " = " + std::to_string(v) + " must be positive";
    });
  };
  positive(d.peak, "peak");
  positive(d.eff_max, "eff_max");
  positive(d.x_half, "x_half");
  positive(d.bw_intra, "bw_intra");
  positive(d.bw_inter, "bw_inter");
  positive(d.mem_bytes, "mem_bytes");
  positive(d.usable, "usable");
  check(d.alpha >= 0 && d.tau >= 0, errc::invalid_argument,
        [&] { return "device '" + d.name + "': alpha and tau must not be negative"; });
  check(d.eff_max <= 1 && d.usable <= 1, errc::invalid_argument,
        [&] { return "device '" + d.name + "': eff_max and usable are fractions in (0, 1]"; });
  check(d.beta > 2, errc::invalid_argument, [&] {
    return "device '" + d.name + "': beta = " + std::to_string(d.beta) +
           " must exceed 2 (a checkpointed block keeps 2 h bytes per token)";
  });
  check(d.gpus_per_node > 0 && std::has_single_bit(static_cast<unsigned>(d.gpus_per_node)), errc::invalid_argument,
        [&] {
          return "gpus_per_node = " + std::to_string(d.gpus_per_node) +
                 " must be a positive power of two (aligned sp groups must not straddle nodes)";
        });
  const kernel_clock& k = d.kernel;
  if (k.enabled()) {
    positive(k.attention_backward, "kernel.attention_backward");
    positive(k.attention_forward_half, "kernel.attention_forward_half");
    positive(k.attention_backward_half, "kernel.attention_backward_half");
    positive(k.attention_causal, "kernel.attention_causal");
    positive(k.head_width_64, "kernel.head_width_64");
    positive(k.head_width_256, "kernel.head_width_256");
    positive(k.hbm_bw, "kernel.hbm_bw");
    check(k.attention_forward <= 1 && k.attention_backward <= 1 && k.tp_exposed >= 0 && k.tp_exposed <= 1 &&
              k.reserved_bytes >= 0 && k.fp8_gemm >= 0,
          errc::invalid_argument, [&] {
            return "device '" + d.name +
                   "': kernel.attention_forward, attention_backward and tp_exposed are fractions in [0, 1], "
                   "reserved_bytes and fp8_gemm not negative";
          });
  } else {
    check(k == kernel_clock{}, errc::invalid_argument, [&] {
      return "device '" + d.name +
             "': kernel clock constants need kernel.attention_forward > 0 (0 prices on section 4's clock); "
             "set it or leave the others at their defaults";
    });
  }
  check(d.capacity() > 0, errc::invalid_argument, [&] {
    return "device '" + d.name + "': kernel.reserved_bytes = " + std::to_string(k.reserved_bytes) +
           " leaves no memory of mem_bytes * usable = " + std::to_string(d.mem_bytes * d.usable);
  });
  check(d.precision == gemm_precision::bf16 || k.fp8_gemm > 0, errc::invalid_argument, [&] {
    return "device '" + d.name +
           "' has no FP8 GEMM rate (kernel.fp8_gemm = 0); use precision bf16 or a kernel-clock preset (h200, h100)";
  });
}

namespace devices {
/// H200 + NVLink + 400G IB on section 4's analytic clock (DESIGN section 4): the constants the
/// golden file pins.
inline device_spec h200_analytic() {
  return {"h200-analytic", 989e12, 0.55, 1024, 15e-6, 15e-6, 300e9, 40e9, 8, 141e9, 0.9, 34};
}
/// H100 on section 4's analytic clock: as H200 with 80 GB.
inline device_spec h100_analytic() {
  auto d = h200_analytic();
  d.name = "h100-analytic";
  d.mem_bytes = 80e9;
  return d;
}
/// H100 SXM on the kernel clock (DESIGN section 4.6): FlashAttention-2's measured attention
/// rates, measured GEMM, NCCL and memory figures; each constant's source is listed there.
inline device_spec h100() {
  device_spec d = h100_analytic();
  d.name = "h100";
  d.eff_max = 0.808;
  d.x_half = 85;
  d.alpha = 26e-6;
  d.bw_intra = 370e9;
  d.bw_inter = 48e9;
  d.kernel = {.attention_forward = 0.3765,
              .attention_forward_half = 105,
              .attention_backward = 0.3310,
              .attention_backward_half = 271,
              .attention_causal = 0.905,
              .head_width_64 = 0.876,
              .head_width_256 = 0.805,
              .tp_exposed = 1,
              .hbm_bw = 3.35e12,
              .reserved_bytes = 2.2e9,
              .fp8_gemm = 1.554};
  return d;
}
/// H200 SXM on the kernel clock: the H100's compute and links (the same GH100 die and NVLink 4),
/// 141 GB of HBM3e at 4.8 TB/s.
inline device_spec h200() {
  device_spec d = h100();
  d.name = "h200";
  d.mem_bytes = 141e9;
  d.kernel.hbm_bw = 4.8e12;
  return d;
}
/// A100 SXM4 80 GB + NVLink 3 + 200G HDR IB on the analytic clock (DESIGN section 2.1): 312
/// TFLOP/s bf16 dense; the H200 preset's link bandwidths scaled by the links' published rates
/// (NVLink 600 of 900 GB/s, HDR 200 of NDR 400 Gb/s per GPU); efficiency, latencies and
/// activation bytes as section 4's H200.
inline device_spec a100() {
  auto d = h200_analytic();
  d.name = "a100";
  d.peak = 312e12;
  d.bw_intra = 200e9;
  d.bw_inter = 20e9;
  d.mem_bytes = 80e9;
  return d;
}
/// The names `preset` knows.
inline constexpr std::array<std::string_view, 5> preset_names{"h200", "h100", "a100", "h200-analytic", "h100-analytic"};
/// The preset called `name` (one of `preset_names`); throws a `dcp::error` otherwise.
inline device_spec preset(std::string_view name) {
  if (name == "h200") return h200();
  if (name == "h100") return h100();
  if (name == "a100") return a100();
  if (name == "h200-analytic") return h200_analytic();
  if (name == "h100-analytic") return h100_analytic();
  throw error(errc::invalid_argument, "unknown device preset '" + std::string(name) +
                                          "'; use h200, h100, a100, h200-analytic or h100-analytic");
}
}  // namespace devices

/// Device `d` as a node of a cluster priced on `reference` (the cost model's device): its speed
/// is its best tensor throughput relative to the reference's, gemm_peak * eff_max over the same of
/// the reference (a step's whole time scales by it, DESIGN section 2.1), and its capacity is
/// `d.capacity()`. Throws a `dcp::error` unless both are valid and have the same G.
inline unit_device unit_device_of(const device_spec& d, const device_spec& reference) {
  validate(d);
  validate(reference);
  check(d.gpus_per_node == reference.gpus_per_node, errc::invalid_argument, [&] {
    return "device '" + d.name + "' has gpus_per_node = " + std::to_string(d.gpus_per_node) + " but '" +
           reference.name + "' has " + std::to_string(reference.gpus_per_node) + "; a cluster's nodes have one G";
  });
  // Section 4's eff_max and the kernel clock's measured GEMM curve do not compare: across the
  // two clocks a node's speed is its GEMM peak's ratio alone.
  const bool same_clock = d.kernel.enabled() == reference.kernel.enabled();
  const double speed = same_clock ? d.gemm_peak() * d.eff_max / (reference.gemm_peak() * reference.eff_max)
                                  : d.gemm_peak() / reference.gemm_peak();
  return {d.name, speed, d.capacity()};
}

/// The node devices of a layout (`parallel_layout::nodes`) whose nodes are `per_node`, in rank
/// order, priced on `reference`.
inline std::vector<unit_device> node_devices(std::span<const device_spec> per_node, const device_spec& reference) {
  std::vector<unit_device> out;
  out.reserve(per_node.size());
  for (const auto& d : per_node) out.push_back(unit_device_of(d, reference));
  return out;
}

namespace devices {
/// The nodes of a cluster named as presets with node counts in rank order, comma-separated:
/// "h100x2,h200x2" is two H100 nodes then two H200 nodes ("a100" alone is one node). Throws a
/// `dcp::error` naming the entry unless each is a preset with a positive count.
inline std::vector<device_spec> cluster(std::string_view spec) {
  std::vector<device_spec> out;
  std::size_t from = 0;
  while (from <= spec.size()) {
    const std::size_t comma = std::min(spec.find(',', from), spec.size());
    const std::string entry(spec.substr(from, comma - from));
    from = comma + 1;
    const std::size_t x = entry.rfind('x');
    std::string name = entry;
    long count = 1;
    if (x != std::string::npos && x + 1 < entry.size() &&
        entry.find_first_not_of("0123456789", x + 1) == std::string::npos) {
      name = entry.substr(0, x);
      count = entry.size() - x - 1 > 6 ? 0 : std::stol(entry.substr(x + 1));
    }
    check(!name.empty() && count > 0, errc::invalid_argument,
          [&] { return "cluster entry '" + entry + "' must be PRESETxNODES with NODES >= 1 (e.g. h100x2,h200x2)"; });
    const device_spec d = preset(name);
    out.insert(out.end(), static_cast<std::size_t>(count), d);
  }
  return out;
}
}  // namespace devices

}  // namespace dcp
