#pragma once
/// \file
/// `parallel_layout`: the job's parallel layout, its one value (DESIGN section 2.1). GPUs and
/// GPUs per node, the tensor-parallel size tp (GPUs of one planner unit, on one node), the
/// expert-parallel size ep, the largest Ulysses x Ring ring, how weights, gradients and
/// optimizer state shard (`sharding_kind`), the pipeline stages pp, and, on a cluster whose nodes
/// are not all alike, each node's device (`unit_device`: its name, its speed and the memory a
/// step may use on it).
///
/// Planners count units of one pipeline stage: unit u is the tp GPUs [u tp, (u + 1) tp) of stage
/// 0, so a block of sp units is the sp tp GPUs from its first unit's (`gpus_of`). The pipeline is
/// outermost (Megatron's rank order): stage s holds the GPUs [s N / pp, (s + 1) N / pp), and every
/// block exists once per stage on the matching GPUs (`gpus_of(units, stage)`). This header is the one place that
/// arithmetic is written; cost models report the layout they price through `c.layout()` (the
/// `cost_model` concept), and the scheduler, the group cache, plans and traces read it there.
///
/// \code
/// const dcp::parallel_layout job{.gpus = 64, .gpus_per_node = 8, .tp = 2, .ring = 2};
/// job.validate();
/// job.units();                       // 32 planner units
/// job.gpus_of(dcp::rank_block{4, 2}); // GPUs [8, 12)
///
/// const dcp::parallel_layout piped{.gpus = 256, .gpus_per_node = 8, .tp = 8, .pp = 4};
/// piped.units();                          // 8 units per stage, 64 GPUs a stage
/// piped.gpus_of(dcp::rank_block{2, 1}, 3); // GPUs [208, 216): unit 2 on the last stage
/// \endcode

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstddef>
#include <ostream>
#include <string>
#include <vector>

#include <dcp/error.hpp>

namespace dcp {

/// A contiguous block of ranks [first, first + size).
struct rank_block {
  int first = 0;
  int size = 1;

  constexpr int end() const noexcept { return first + size; }
  constexpr bool contains(int rank) const noexcept { return rank >= first && rank < first + size; }
  friend constexpr bool operator==(const rank_block&, const rank_block&) = default;
  friend std::ostream& operator<<(std::ostream& os, const rank_block& b) {
    return os << "[" << b.first << ", " << b.end() << ")";
  }
};

/// How weights, gradients and optimizer state are laid out over the data-parallel domain
/// (DESIGN section 4.2).
enum class sharding_kind {
  replicated,  ///< bf16 weights and grads and fp32 master + Adam on every GPU
  zero1,       ///< bf16 weights and grads replicated, fp32 master + Adam sharded (the default)
  zero3,       ///< everything sharded; each block's weights gathered before its forward and backward
};

inline const char* to_string(sharding_kind s) noexcept {
  switch (s) {
    case sharding_kind::replicated: return "replicated";
    case sharding_kind::zero1: return "zero1";
    case sharding_kind::zero3: return "zero3";
  }
  return "?";
}
inline std::ostream& operator<<(std::ostream& os, sharding_kind s) { return os << to_string(s); }

/// The sharding called `name` (replicated, zero1, zero3); throws a `dcp::error` otherwise.
inline sharding_kind sharding_of(const std::string& name) {
  if (name == "replicated") return sharding_kind::replicated;
  if (name == "zero1") return sharding_kind::zero1;
  if (name == "zero3") return sharding_kind::zero3;
  throw error(errc::invalid_argument, "unknown sharding '" + name + "'; use replicated, zero1 or zero3");
}

/// The device of one node's units on a mixed cluster (DESIGN section 2.1).
struct unit_device {
  std::string name;     ///< its preset's name (h100, h200, a100, ...)
  double speed = 1;     ///< step speed relative to the cost model's own device (time / speed)
  double capacity = 0;  ///< bytes per GPU a step may use on it
  friend bool operator==(const unit_device&, const unit_device&) = default;
};

struct parallel_layout {
  int gpus = 1;           ///< N, the GPUs of the job
  int gpus_per_node = 8;  ///< G, the GPUs of one node (its fast-link domain)
  int tp = 1;             ///< tensor-parallel size: GPUs of one planner unit, on one node
  int ep = 1;             ///< expert-parallel size: units of the data-parallel domain the experts shard over
  sharding_kind sharding = sharding_kind::zero1;
  int ring = 1;  ///< largest Ulysses x Ring ring size r a step may use (DESIGN section 4.3); 1 = Ulysses only
  int pp = 1;    ///< pipeline stages: each holds its share of the blocks on N / pp GPUs (DESIGN section 4.5)
  /// One device per node, in rank order, on a cluster whose nodes differ; empty: every node is
  /// the cost model's device (speed 1, its capacity).
  std::vector<unit_device> nodes{};

  /// Throws a `dcp::error` (errc::invalid_argument) naming the value and the fix unless the
  /// layout can be laid out: N > 0 in whole nodes beyond one node, tp a power of two dividing G
  /// and N (a TP group lives on one node), ep >= 1 dividing the units, ring a power of two, pp
  /// >= 1 with N / pp GPUs per stage a multiple of tp and in whole nodes beyond one node, and no
  /// named node devices under pp > 1. What the model must also divide (heads, experts, blocks)
  /// its cost model checks.
  void validate() const {
    check(gpus > 0, errc::invalid_argument, [&] { return "gpus = " + std::to_string(gpus) + " must be positive"; });
    check(gpus_per_node > 0, errc::invalid_argument,
          [&] { return "gpus_per_node = " + std::to_string(gpus_per_node) + " must be positive"; });
    check(gpus <= gpus_per_node || gpus % gpus_per_node == 0, errc::invalid_argument, [&] {
      return "gpus = " + std::to_string(gpus) +
             " is not a multiple of gpus_per_node = " + std::to_string(gpus_per_node) +
             "; use whole nodes beyond one node";
    });
    check(tp >= 1 && std::has_single_bit(static_cast<unsigned>(tp)) && gpus_per_node % tp == 0 && gpus % tp == 0,
          errc::invalid_argument, [&] {
            return "tp = " + std::to_string(tp) +
                   " must be a power of two dividing gpus_per_node = " + std::to_string(gpus_per_node) +
                   " and gpus = " + std::to_string(gpus) + " (a TP group lives on one node)";
          });
    check(pp >= 1 && gpus % pp == 0 && (gpus / pp) % tp == 0 &&
              (gpus / pp <= gpus_per_node || (gpus / pp) % gpus_per_node == 0),
          errc::invalid_argument, [&] {
            return "pp = " + std::to_string(pp) + " must be >= 1 and divide gpus = " + std::to_string(gpus) +
                   " into stages of a multiple of tp = " + std::to_string(tp) + " GPUs, in whole nodes of " +
                   std::to_string(gpus_per_node) + " beyond one node";
          });
    check(pp == 1 || nodes.empty(), errc::invalid_argument, [&] {
      return "pp = " + std::to_string(pp) + " with named node devices (" + cluster_name() +
             "): pipeline stages on a mixed cluster are not planned; use pp = 1 or one device";
    });
    check(ep >= 1 && units() % ep == 0, errc::invalid_argument, [&] {
      return "ep = " + std::to_string(ep) +
             " must be >= 1 and divide the data-parallel domain of a stage, gpus / (tp x pp) = " +
             std::to_string(gpus) + " / (" + std::to_string(tp) + " x " + std::to_string(pp) + ") = " +
             std::to_string(units()) + " units";
    });
    check(ring >= 1 && std::has_single_bit(static_cast<unsigned>(ring)), errc::invalid_argument,
          [&] { return "ring = " + std::to_string(ring) + " must be a power of two >= 1 (1 = Ulysses only)"; });
    check(nodes.empty() || static_cast<int>(nodes.size()) == node_count(), errc::invalid_argument, [&] {
      return std::to_string(nodes.size()) + " node devices for " + std::to_string(node_count()) +
             " nodes of gpus = " + std::to_string(gpus) + " (gpus_per_node = " + std::to_string(gpus_per_node) +
             "); name one device per node";
    });
    for (std::size_t i = 0; i < nodes.size(); ++i)
      check(std::isfinite(nodes[i].speed) && nodes[i].speed > 0 && std::isfinite(nodes[i].capacity) &&
                nodes[i].capacity > 0,
            errc::invalid_argument, [&] {
              return "node " + std::to_string(i) + " ('" + nodes[i].name +
                     "'): speed = " + std::to_string(nodes[i].speed) +
                     " and capacity = " + std::to_string(nodes[i].capacity) + " B must be positive and finite";
            });
  }

  /// Planner units: the TP groups of one pipeline stage (GPUs when tp = pp = 1), N / (tp pp).
  constexpr int units() const noexcept { return gpus / (tp * pp); }
  /// GPUs of one pipeline stage, N / pp (its data x sequence parallel domain times tp).
  constexpr int stage_gpus() const noexcept { return gpus / pp; }
  /// The pipeline stage of a GPU rank.
  constexpr int stage_of(int gpu) const noexcept { return gpu / stage_gpus(); }
  /// Units of one node, G / tp (at least 1).
  constexpr int units_per_node() const noexcept { return std::max(1, gpus_per_node / tp); }
  /// Nodes of the job (one partial node below G GPUs).
  constexpr int node_count() const noexcept { return (gpus + gpus_per_node - 1) / gpus_per_node; }
  /// True when nodes are named: every node's speed and capacity come from `nodes`.
  bool has_node_devices() const noexcept { return !nodes.empty(); }
  /// The node of unit `u`, and its device (`nodes` must be named).
  constexpr int node_of_unit(int u) const noexcept { return u * tp / gpus_per_node; }
  const unit_device& device_of_unit(int u) const { return nodes[static_cast<std::size_t>(node_of_unit(u))]; }
  /// The slowest and the smallest device of a block of units: a gang step runs at its slowest
  /// member's pace and must fit its smallest member's memory. With no named nodes: 1 and
  /// `uniform_capacity`.
  double speed_of(rank_block units) const noexcept {
    if (nodes.empty()) return 1.0;
    double v = device_of_unit(units.first).speed;
    for (int n = node_of_unit(units.first) + 1; n <= node_of_unit(units.end() - 1); ++n)
      v = std::min(v, nodes[static_cast<std::size_t>(n)].speed);
    return v;
  }
  double capacity_of(rank_block units, double uniform_capacity) const noexcept {
    if (nodes.empty()) return uniform_capacity;
    double c = device_of_unit(units.first).capacity;
    for (int n = node_of_unit(units.first) + 1; n <= node_of_unit(units.end() - 1); ++n)
      c = std::min(c, nodes[static_cast<std::size_t>(n)].capacity);
    return c;
  }
  /// The smallest per-GPU capacity of the job (`uniform_capacity` without nodes).
  double smallest_capacity(double uniform_capacity) const noexcept {
    return capacity_of({0, units()}, uniform_capacity);
  }
  /// Per unit, its node's speed; empty when no node is named or every node runs at speed 1.
  std::vector<double> unit_speeds() const {
    std::vector<double> out;
    if (std::all_of(nodes.begin(), nodes.end(), [](const unit_device& d) { return d.speed == 1.0; })) return out;
    out.reserve(static_cast<std::size_t>(units()));
    for (int u = 0; u < units(); ++u) out.push_back(device_of_unit(u).speed);
    return out;
  }
  /// This layout with every node its weakest device (the slowest speed, the smallest capacity):
  /// the cluster as a planner that does not know it sees it.
  parallel_layout as_weakest() const {
    parallel_layout out = *this;
    if (nodes.empty()) return out;
    unit_device weakest{"weakest", nodes.front().speed, nodes.front().capacity};
    for (const auto& d : nodes) weakest.speed = std::min(weakest.speed, d.speed);
    weakest.capacity = smallest_capacity(0);
    out.nodes.assign(nodes.size(), weakest);
    return out;
  }
  /// The node devices in rank order, runs of one name folded: "h100x2,h200x2" ("" without nodes).
  std::string cluster_name() const {
    std::string out;
    for (std::size_t i = 0; i < nodes.size();) {
      std::size_t j = i;
      while (j < nodes.size() && nodes[j] == nodes[i]) ++j;
      out += (out.empty() ? "" : ",") + nodes[i].name + "x" + std::to_string(j - i);
      i = j;
    }
    return out;
  }
  /// True when `g` GPUs lie inside one node's fast links.
  constexpr bool within_node(int g) const noexcept { return g <= gpus_per_node; }

  /// The GPU ranks of a block of units (on stage 0), and on stage `stage`.
  constexpr rank_block gpus_of(rank_block units) const noexcept { return {units.first * tp, units.size * tp}; }
  constexpr rank_block gpus_of(rank_block units, int stage) const noexcept {
    return {stage * stage_gpus() + units.first * tp, units.size * tp};
  }
  /// The unit of a GPU rank (within its stage), and the GPU's rank inside its TP group.
  constexpr int unit_of(int gpu) const noexcept { return gpu % stage_gpus() / tp; }
  constexpr int tp_rank_of(int gpu) const noexcept { return gpu % tp; }
  /// The TP group (as GPU ranks) a GPU belongs to.
  constexpr rank_block tp_group_of(int gpu) const noexcept { return {gpu / tp * tp, tp}; }

  friend bool operator==(const parallel_layout&, const parallel_layout&) = default;
  friend std::ostream& operator<<(std::ostream& os, const parallel_layout& p) {
    os << "parallel_layout{N=" << p.gpus << ", G=" << p.gpus_per_node;
    if (p.tp > 1) os << ", tp=" << p.tp;
    if (p.ep > 1) os << ", ep=" << p.ep;
    if (p.sharding != sharding_kind::zero1) os << ", " << p.sharding;
    if (p.ring > 1) os << ", ring<=" << p.ring;
    if (p.pp > 1) os << ", pp=" << p.pp;
    if (!p.nodes.empty()) os << ", nodes " << p.cluster_name();
    return os << "}";
  }
};

}  // namespace dcp
