#pragma once
/// \file
/// `profile_table`: measured time and memory of micro-steps (DESIGN section 6, `dcp.profile/v1`),
/// what the profiler writes and `profiled_cost` reads.
///
/// One entry per (length group, sp, batch, checkpointed blocks): `batch` copies of a sequence of
/// `tokens` tokens (shape `frames` x `spatial`) on an sp group, `checkpointed_blocks` of the
/// model's L blocks checkpointed; `time_s` seconds per step and `memory_bytes` per GPU (static
/// memory included). The header names the model, the device and the job (N, G, capacity) the
/// table holds for; `validate` rejects NaN, infinite or negative values with a clear error.

#include <cmath>
#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include <dcp/error.hpp>
#include <dcp/model/transformer.hpp>

namespace dcp {

/// One measured (or extrapolated) configuration.
struct profile_entry {
  int bucket = 0;
  std::int64_t tokens = 0;  ///< tokens of one sequence
  std::int64_t frames = 1, spatial = 0;
  int sp = 1;
  int batch = 1;
  int checkpointed_blocks = 0;
  double time_s = 0;
  double memory_bytes = 0;
  friend bool operator==(const profile_entry&, const profile_entry&) = default;
};

/// What profiling cost, and what an exhaustive full-depth profile would have cost.
struct profile_stats {
  std::int64_t runs = 0;               ///< timed and warm-up runs executed
  double seconds = 0;                  ///< wall time spent profiling
  std::int64_t exhaustive_runs = 0;    ///< runs a full-depth profile of every entry would need
  double exhaustive_seconds = 0;       ///< its estimated time (the table's own times)
  friend bool operator==(const profile_stats&, const profile_stats&) = default;
};

struct profile_table {
  transformer_spec model;
  std::string device;            ///< device name (`device_spec::name`)
  int gpus = 1;                  ///< N the table was profiled for (static memory shards over N)
  int gpus_per_node = 8;
  double memory_capacity_bytes = 0;
  double static_memory_bytes = 0;  ///< per GPU, included in every entry's memory_bytes
  int profiled_blocks = 2;         ///< depth of the truncated model that was run
  profile_stats stats;
  std::vector<profile_entry> entries;
  friend bool operator==(const profile_table&, const profile_table&) = default;
};

inline std::ostream& operator<<(std::ostream& os, const profile_table& t) {
  return os << "profile_table{" << t.model.name << " on " << t.device << ", N=" << t.gpus << ", "
            << t.entries.size() << " entries}";
}

/// Throws `dcp::error` (invalid_argument) naming the first bad field or entry.
inline void validate(const profile_table& t) {
  validate(t.model);
  auto bad = [&](const std::string& what) {
    throw error(errc::invalid_argument, "profile for model '" + t.model.name + "' on '" + t.device + "': " + what +
                                            "; re-run the profiler");
  };
  auto finite_nonneg = [](double v) { return std::isfinite(v) && v >= 0; };
  if (t.device.empty()) bad("no device name");
  if (t.gpus < 1 || t.gpus_per_node < 1) bad("gpus and gpus_per_node must be positive");
  if (!finite_nonneg(t.memory_capacity_bytes) || t.memory_capacity_bytes <= 0)
    bad("memory_capacity_bytes = " + std::to_string(t.memory_capacity_bytes) + " must be positive and finite");
  if (!finite_nonneg(t.static_memory_bytes))
    bad("static_memory_bytes = " + std::to_string(t.static_memory_bytes) + " must be finite and not negative");
  if (t.entries.empty()) bad("no entries");
  for (std::size_t i = 0; i < t.entries.size(); ++i) {
    const auto& e = t.entries[i];
    const std::string at = "entry " + std::to_string(i) + " ";
    if (!(std::isfinite(e.time_s) && e.time_s > 0)) bad(at + "has time_s = " + std::to_string(e.time_s) + " (must be positive and finite)");
    if (!finite_nonneg(e.memory_bytes)) bad(at + "has memory_bytes = " + std::to_string(e.memory_bytes) + " (must be finite, not negative)");
    if (e.tokens < 1 || e.batch < 1 || e.sp < 1 || e.frames < 1 || e.spatial < 1)
      bad(at + "has tokens, batch, sp, frames or spatial below 1");
    if (e.checkpointed_blocks < 0 || e.checkpointed_blocks > t.model.blocks)
      bad(at + "has checkpointed_blocks = " + std::to_string(e.checkpointed_blocks) + " outside [0, " +
          std::to_string(t.model.blocks) + "]");
  }
}

}  // namespace dcp
