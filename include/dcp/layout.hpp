#pragma once
/// \file
/// `parallel_layout`: the job's parallel layout, its one value (DESIGN section 2.1). GPUs and
/// GPUs per node, the tensor-parallel size tp (GPUs of one planner unit, on one node), the
/// expert-parallel size ep, the largest Ulysses x Ring ring, and how weights, gradients and
/// optimizer state shard (`sharding_kind`).
///
/// Planners count units: unit u is the tp GPUs [u tp, (u + 1) tp), so a block of sp units is
/// the sp tp GPUs from its first unit's (`gpus_of`). This header is the one place that
/// arithmetic is written; cost models report the layout they price through `c.layout()` (the
/// `cost_model` concept), and the scheduler, the group cache, plans and traces read it there.
///
/// \code
/// const dcp::parallel_layout job{.gpus = 64, .gpus_per_node = 8, .tp = 2, .ring = 2};
/// job.validate();
/// job.units();                       // 32 planner units
/// job.gpus_of(dcp::rank_block{4, 2}); // GPUs [8, 12)
/// \endcode

#include <algorithm>
#include <bit>
#include <ostream>
#include <string>

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

struct parallel_layout {
  int gpus = 1;           ///< N, the GPUs of the job
  int gpus_per_node = 8;  ///< G, the GPUs of one node (its fast-link domain)
  int tp = 1;             ///< tensor-parallel size: GPUs of one planner unit, on one node
  int ep = 1;             ///< expert-parallel size: units of the data-parallel domain the experts shard over
  sharding_kind sharding = sharding_kind::zero1;
  int ring = 1;  ///< largest Ulysses x Ring ring size r a step may use (DESIGN section 4.3); 1 = Ulysses only

  /// Throws a `dcp::error` (errc::invalid_argument) naming the value and the fix unless the
  /// layout can be laid out: N > 0 in whole nodes beyond one node, tp a power of two dividing G
  /// and N (a TP group lives on one node), ep >= 1 dividing the units, ring a power of two.
  /// What the model must also divide (heads, experts) its cost model checks.
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
    check(ep >= 1 && units() % ep == 0, errc::invalid_argument, [&] {
      return "ep = " + std::to_string(ep) +
             " must be >= 1 and divide the data-parallel domain gpus / tp = " + std::to_string(units());
    });
    check(ring >= 1 && std::has_single_bit(static_cast<unsigned>(ring)), errc::invalid_argument,
          [&] { return "ring = " + std::to_string(ring) + " must be a power of two >= 1 (1 = Ulysses only)"; });
  }

  /// Planner units: TP groups (GPUs when tp = 1), N / tp.
  constexpr int units() const noexcept { return gpus / tp; }
  /// Units of one node, G / tp (at least 1).
  constexpr int units_per_node() const noexcept { return std::max(1, gpus_per_node / tp); }
  /// True when `g` GPUs lie inside one node's fast links.
  constexpr bool within_node(int g) const noexcept { return g <= gpus_per_node; }

  /// The GPU ranks of a block of units.
  constexpr rank_block gpus_of(rank_block units) const noexcept { return {units.first * tp, units.size * tp}; }
  /// The unit of a GPU rank, and the GPU's rank inside its TP group.
  constexpr int unit_of(int gpu) const noexcept { return gpu / tp; }
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
    return os << "}";
  }
};

}  // namespace dcp
