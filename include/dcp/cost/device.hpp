#pragma once
/// \file
/// `device_spec`: the constants of the analytic cost model (DESIGN section 4), with the H200
/// and H100 presets.

#include <bit>
#include <ostream>
#include <string>
#include <string_view>

#include <dcp/error.hpp>

namespace dcp {

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

  /// C = mem_bytes * usable.
  constexpr double capacity() const noexcept { return mem_bytes * usable; }
  friend bool operator==(const device_spec&, const device_spec&) = default;
};

inline std::ostream& operator<<(std::ostream& os, const device_spec& d) {
  return os << "device_spec{" << d.name << ", peak=" << d.peak << ", mem=" << d.mem_bytes << ", G=" << d.gpus_per_node
            << "}";
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
}

namespace devices {
/// H200 + NVLink + 400G IB (DESIGN section 4).
inline device_spec h200() { return {"h200", 989e12, 0.55, 1024, 15e-6, 15e-6, 300e9, 40e9, 8, 141e9, 0.9, 34}; }
/// H100: as H200 with 80 GB.
inline device_spec h100() {
  auto d = h200();
  d.name = "h100";
  d.mem_bytes = 80e9;
  return d;
}
/// The preset called `name` (h200, h100); throws a `dcp::error` otherwise.
inline device_spec preset(std::string_view name) {
  if (name == "h200") return h200();
  if (name == "h100") return h100();
  throw error(errc::invalid_argument, "unknown device preset '" + std::string(name) + "'; use h200 or h100");
}
}  // namespace devices

}  // namespace dcp
