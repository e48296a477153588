#pragma once
/// \file
/// `device_spec`: the constants of the analytic cost model (DESIGN section 4), with the H200,
/// H100 and A100 presets, and `unit_device_of`: a device as a node of a mixed cluster.

#include <algorithm>
#include <array>
#include <bit>
#include <cstddef>
#include <ostream>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <dcp/error.hpp>
#include <dcp/layout.hpp>

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
/// A100 SXM4 80 GB + NVLink 3 + 200G HDR IB (DESIGN section 2.1): 312 TFLOP/s bf16 dense; the
/// H200 preset's link bandwidths scaled by the links' published rates (NVLink 600 of 900 GB/s,
/// HDR 200 of NDR 400 Gb/s per GPU); efficiency, latencies and activation bytes as the H200's.
inline device_spec a100() {
  auto d = h200();
  d.name = "a100";
  d.peak = 312e12;
  d.bw_intra = 200e9;
  d.bw_inter = 20e9;
  d.mem_bytes = 80e9;
  return d;
}
/// The names `preset` knows.
inline constexpr std::array<std::string_view, 3> preset_names{"h200", "h100", "a100"};
/// The preset called `name` (h200, h100, a100); throws a `dcp::error` otherwise.
inline device_spec preset(std::string_view name) {
  if (name == "h200") return h200();
  if (name == "h100") return h100();
  if (name == "a100") return a100();
  throw error(errc::invalid_argument, "unknown device preset '" + std::string(name) + "'; use h200, h100 or a100");
}
}  // namespace devices

/// Device `d` as a node of a cluster priced on `reference` (the cost model's device): its speed
/// is its best tensor throughput relative to the reference's, peak * eff_max over the same of
/// the reference (a step's whole time scales by it, DESIGN section 2.1), and its capacity is
/// `d.capacity()`. Throws a `dcp::error` unless both are valid and have the same G.
inline unit_device unit_device_of(const device_spec& d, const device_spec& reference) {
  validate(d);
  validate(reference);
  check(d.gpus_per_node == reference.gpus_per_node, errc::invalid_argument, [&] {
    return "device '" + d.name + "' has gpus_per_node = " + std::to_string(d.gpus_per_node) + " but '" +
           reference.name + "' has " + std::to_string(reference.gpus_per_node) + "; a cluster's nodes have one G";
  });
  return {d.name, d.peak * d.eff_max / (reference.peak * reference.eff_max), d.capacity()};
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
