#pragma once
/// \file
/// The comparison table of DESIGN section 7, as text and as JSON: per method tokens/s, speedup
/// over the strongest tuned baseline (and, in JSON, over bucket), efficiency vs the joint lower bound (and vs the simple one), imbalance, peak
/// memory, plan time (and skipped).
/// A run executed on a truth clock names it on a second line and adds an `OOM steps` column.

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <ostream>
#include <span>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include <dcp/sim/metrics.hpp>

namespace dcp::sim {

/// What a comparison ran on.
struct comparison_header {
  std::string workload;  ///< workload name or lengths file
  std::string model;
  std::string device;
  int gpus = 0;
  int gpus_per_node = 0;
  std::int64_t sequences = 0;  ///< sequences of the dataset
  std::int64_t tokens = 0;     ///< model tokens of the dataset
  std::int64_t batches = 0;
  std::string truth{};           ///< the truth SPEC (or profile) plans ran on; empty = the cost model's clock
  std::string groups = "buddy";  ///< the group sizes planners could use: any (contiguous_groups) or buddy
  std::uint64_t truth_seed = 0;  ///< the jitter seed of the truth
  std::string model_shape{};     ///< `describe(model)`: what the model is; printed when given
  double model_parameters = 0;   ///< P + P_V: the blocks', the embedding's and the LM head's (0: not given)
  double model_active_parameters = 0;  ///< L P_act + P_V, those a token passes through
  friend bool operator==(const comparison_header&, const comparison_header&) = default;
};

/// tokens/s of `m` over the `bucket` row's, or NaN when there is no bucket row.
inline double speedup_vs_bucket(const run_metrics& m, std::span<const run_metrics> rows) {
  for (const auto& r : rows)
    if (r.method == "bucket" && r.tokens_per_s > 0) return m.tokens_per_s / r.tokens_per_s;
  return std::nan("");
}

/// The baselines a table compares against: the tuned systems, each with its recompute level tuned
/// (the `-ckpt-all` rows are there for continuity, never the strongest baseline).
inline constexpr std::array<std::string_view, 3> tuned_baselines{"bucket", "packed", "dynamic_cp"};

/// The strongest tuned baseline row of `rows` (the most tokens/s), or nullptr when there is none.
inline const run_metrics* strongest_baseline(std::span<const run_metrics> rows) {
  const run_metrics* best = nullptr;
  for (const auto& r : rows)
    if (std::find(tuned_baselines.begin(), tuned_baselines.end(), r.method) != tuned_baselines.end() &&
        r.tokens_per_s > 0 && (best == nullptr || r.tokens_per_s > best->tokens_per_s))
      best = &r;
  return best;
}

/// tokens/s of `m` over the strongest tuned baseline's (`strongest_baseline`), or NaN when there
/// is none.
inline double speedup_vs_best_baseline(const run_metrics& m, std::span<const run_metrics> rows) {
  const run_metrics* best = strongest_baseline(rows);
  return best == nullptr ? std::nan("") : m.tokens_per_s / best->tokens_per_s;
}

namespace detail {
inline std::string format(const char* fmt, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, fmt, v);
  return buf;
}
inline std::string pad(const std::string& s, std::size_t width, bool left = false) {
  if (s.size() >= width) return s;
  return left ? s + std::string(width - s.size(), ' ') : std::string(width - s.size(), ' ') + s;
}
inline std::string with_thousands(double v) {
  std::string digits = format("%.0f", v), out;
  const std::size_t lead = digits.size() % 3;
  for (std::size_t i = 0; i < digits.size(); ++i) {
    if (i != 0 && i >= lead && (i - lead) % 3 == 0 && digits[i - 1] != '-') out += ',';
    out += digits[i];
  }
  return out;
}
inline std::string seconds_text(double s) {
  if (s >= 1) return format("%.2f s", s);
  if (s >= 1e-3) return format("%.1f ms", s * 1e3);
  return format("%.0f us", s * 1e6);
}
}  // namespace detail

/// One line describing what ran, then the table, one row per method, then what tuning chose.
inline void print_table(std::ostream& os, const comparison_header& h, std::span<const run_metrics> rows) {
  os << h.workload << ": " << h.sequences << " sequences, " << detail::format("%.1f", static_cast<double>(h.tokens) / 1e6)
     << "M tokens in " << h.batches << " global batches; " << h.model << " on " << h.gpus << " x " << h.device << " ("
     << h.gpus_per_node << " per node), groups " << h.groups << "\n";
  if (!h.model_shape.empty()) os << "model: " << h.model_shape << "\n";
  const bool on_truth = !h.truth.empty();
  if (on_truth)
    os << "executed on truth " << h.truth << " (jitter seed " << h.truth_seed
       << "); efficiency against the truth's lower bound\n";
  bool any_skipped = false;
  for (const auto& r : rows) any_skipped = any_skipped || r.skipped > 0;
  os << detail::pad("method", 22, true) << detail::pad("tokens/s", 12) << detail::pad("vs baseline", 12)
     << detail::pad("efficiency", 12) << detail::pad("vs simple", 11) << detail::pad("imbalance", 11) << detail::pad("peak memory", 13)
     << detail::pad("plan time", 11) << (any_skipped ? detail::pad("skipped", 9) : "")
     << (on_truth ? detail::pad("OOM steps", 11) : "") << "\n";
  for (const auto& r : rows) {
    const double speedup = speedup_vs_best_baseline(r, rows);
    os << detail::pad(r.method, 22, true) << detail::pad(detail::with_thousands(r.tokens_per_s), 12)
       << detail::pad(std::isnan(speedup) ? "-" : detail::format("%.2fx", speedup), 12)
       << detail::pad(detail::format("%.3f", r.efficiency), 12)
       << detail::pad(detail::format("%.3f", r.simple_efficiency), 11)
       << detail::pad(detail::format("%.1f%%", 100 * r.imbalance), 11)
       << detail::pad(detail::format("%.1f GB", r.peak_memory_bytes / 1e9), 13)
       << detail::pad(detail::seconds_text(r.plan_seconds), 11)
       << (any_skipped ? detail::pad(std::to_string(r.skipped), 9) : "")
       << (on_truth ? detail::pad(std::to_string(r.oom_steps), 11) : "") << "\n";
  }
  if (const run_metrics* best = strongest_baseline(rows))
    os << "vs baseline: tokens/s over the strongest tuned baseline, " << best->method << "\n";
  for (const auto& r : rows)
    if (!r.tuned.empty()) os << "  " << r.method << " tuned on the workload: " << r.tuned << "\n";
  os << "communicators per rank (sequence-parallel groups; est. NCCL buffers at 2 (s - 1) x 4 MiB each):";
  for (std::size_t i = 0; i < rows.size(); ++i)
    os << (i == 0 ? " " : ", ") << rows[i].method << " " << rows[i].communicators_per_rank << " ("
       << detail::format("%.0f MiB", rows[i].communicator_bytes_per_rank / 1048576.0) << ")";
  os << "\n";
  if (!rows.empty() && rows.front().update_s > 0)
    os << "every batch also pays its gradient reduction and optimizer step once, "
       << detail::seconds_text(rows.front().update_s) << " (in tokens/s and both bounds; DESIGN 4.6)\n";
}

/// The table as one JSON object: {"workload", "model", "device", "gpus", "sequences", "tokens",
/// "methods": [{"method", "tokens_per_s", "speedup_vs_best_baseline" (`speedup_vs_best_baseline`;
/// null without a tuned baseline row), "speedup_vs_bucket" (null without a bucket row),
/// "efficiency" (vs the joint bound), "simple_efficiency" (vs the simple bound), "imbalance", "bubble",
/// "peak_memory_bytes", "plan_seconds", "skipped", "oom_steps", "communicators_per_rank", "communicator_bytes_per_rank",
/// "update_s" (`run_metrics`), "tuned" (where tuning chose a setting)}], "groups"}; a run on a truth adds "truth" (the SPEC) and "truth_seed"; a header with the model's
/// parameters adds "model_parameters" and "model_active_parameters".
inline nlohmann::ordered_json table_json(const comparison_header& h, std::span<const run_metrics> rows) {
  nlohmann::ordered_json methods = nlohmann::ordered_json::array();
  for (const auto& r : rows) {
    const double speedup = speedup_vs_bucket(r, rows);
    const double lead = speedup_vs_best_baseline(r, rows);
    methods.push_back(
        {{"method", r.method},
         {"tokens_per_s", r.tokens_per_s},
         {"speedup_vs_best_baseline", std::isnan(lead) ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(lead)},
         {"speedup_vs_bucket", std::isnan(speedup) ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(speedup)},
         {"efficiency", r.efficiency},
         {"simple_efficiency", r.simple_efficiency},
         {"imbalance", r.imbalance},
         {"bubble", r.bubble},
         {"peak_memory_bytes", r.peak_memory_bytes},
         {"plan_seconds", r.plan_seconds},
         {"skipped", r.skipped},
         {"oom_steps", r.oom_steps},
         {"communicators_per_rank", r.communicators_per_rank},
         {"communicator_bytes_per_rank", r.communicator_bytes_per_rank},
         {"update_s", r.update_s}});
    if (!r.tuned.empty()) methods.back()["tuned"] = r.tuned;
  }
  nlohmann::ordered_json out = {{"workload", h.workload}, {"model", h.model},   {"device", h.device},
                                {"gpus", h.gpus},         {"sequences", h.sequences}, {"tokens", h.tokens},
                                {"groups", h.groups}};
  if (!h.truth.empty()) out["truth"] = h.truth, out["truth_seed"] = h.truth_seed;
  if (h.model_parameters > 0)
    out["model_parameters"] = h.model_parameters, out["model_active_parameters"] = h.model_active_parameters;
  out["methods"] = std::move(methods);
  return out;
}

}  // namespace dcp::sim
