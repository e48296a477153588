#pragma once
/// \file
/// Speed factors of a job's units: each node's device speed on a mixed cluster times any
/// straggler factor (`job_speeds`), and the pace of a gang step, its slowest member's
/// (`block_speed`).

#include <cmath>
#include <span>
#include <string>
#include <vector>

#include <dcp/error.hpp>
#include <dcp/layout.hpp>

namespace dcp {

/// Throws `dcp::error(errc::invalid_argument)` unless `speeds` is empty or holds one positive,
/// finite factor per GPU of `gpus`.
inline void validate_speeds(std::span<const double> speeds, int gpus) {
  if (speeds.empty()) return;
  check(speeds.size() == static_cast<std::size_t>(gpus), errc::invalid_argument, [&] {
    return std::to_string(speeds.size()) + " GPU speed factors for " + std::to_string(gpus) +
           " GPUs; give one per GPU, or none (all 1)";
  });
  for (std::size_t r = 0; r < speeds.size(); ++r)
    check(std::isfinite(speeds[r]) && speeds[r] > 0, errc::invalid_argument, [&] {
      return "speed factor " + std::to_string(speeds[r]) + " of GPU " + std::to_string(r) +
             " must be positive and finite (1 = nominal, 0.8 = 20% slow)";
    });
}

/// The speed of every unit of a job: its node's device speed (`parallel_layout::unit_speeds`)
/// times its straggler factor in `stragglers` (empty = all 1). Empty when both are all 1.
inline std::vector<double> job_speeds(const parallel_layout& layout, std::span<const double> stragglers) {
  validate_speeds(stragglers, layout.units());
  std::vector<double> out = layout.unit_speeds();
  if (out.empty()) return {stragglers.begin(), stragglers.end()};
  for (std::size_t u = 0; u < stragglers.size(); ++u) out[u] *= stragglers[u];
  return out;
}

/// The slowest speed factor of `b`'s members (1 without factors): a gang step runs at its pace.
inline double block_speed(std::span<const double> speeds, rank_block b) noexcept {
  if (speeds.empty()) return 1.0;
  double v = speeds[static_cast<std::size_t>(b.first)];
  for (int r = b.first + 1; r < b.end(); ++r) v = std::min(v, speeds[static_cast<std::size_t>(r)]);
  return v;
}

}  // namespace dcp
