#pragma once
/// \file
/// `tp_units`: planner ranks as tensor-parallel groups. With tp > 1 the cost model counts units
/// of tp GPUs (DESIGN section 4.2), so plans name units; unit u is the GPUs
/// [u tp, (u + 1) tp), all on one node since tp divides G. A block of sp units is then the sp tp
/// GPUs from its first unit's, inside one node whenever the units' block lies in a node of G / tp.

#include <ostream>
#include <string>

#include <dcp/error.hpp>
#include <dcp/group/group_concepts.hpp>

namespace dcp {

struct tp_units {
  int tp = 1;  ///< GPUs per unit

  /// Throws a `dcp::error` unless tp is a power of two dividing `gpus_per_node`.
  void validate(int gpus_per_node) const {
    check(tp >= 1 && (tp & (tp - 1)) == 0 && gpus_per_node % tp == 0, errc::invalid_argument, [&] {
      return "tp = " + std::to_string(tp) + " must be a power of two dividing gpus_per_node = " +
             std::to_string(gpus_per_node);
    });
  }
  /// The GPU ranks of a block of units.
  constexpr rank_block gpus_of(rank_block units) const noexcept { return {units.first * tp, units.size * tp}; }
  /// The unit of a GPU rank, and the GPU's rank inside its TP group.
  constexpr int unit_of(int gpu) const noexcept { return gpu / tp; }
  constexpr int tp_rank_of(int gpu) const noexcept { return gpu % tp; }
  /// The TP group (as GPU ranks) a GPU belongs to.
  constexpr rank_block tp_group_of(int gpu) const noexcept { return {gpu / tp * tp, tp}; }

  friend bool operator==(const tp_units&, const tp_units&) = default;
  friend std::ostream& operator<<(std::ostream& os, const tp_units& u) { return os << "tp_units{tp=" << u.tp << "}"; }
};

}  // namespace dcp
