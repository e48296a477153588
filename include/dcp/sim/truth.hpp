#pragma once
/// \file
/// The truth clock of the simulator (`dcp-sim --truth SPEC`, DESIGN section 8): plans are made
/// on the planner's cost model and executed (`sim/execute.hpp`) on a different, "true" clock.
///
/// Interfaces other code builds on (kept stable):
///   - `truth_spec parse_truth_spec(std::string_view)`: the SPEC grammar below;
///   - `truth<T>`: a deterministic cost model `T` (the true time and memory of a step), per-GPU
///     speed factors (empty = all 1), a log-normal jitter sigma and its seed;
///   - `make_truth(spec, base, seed)`: the `truth<scaled_analytic_cost>` a SPEC describes on top of
///     the planner's analytic model; `make_truth(profiled, spec, seed)` keeps a profile table as
///     the deterministic part and takes only `slow_gpus` and `jitter` from the SPEC;
///   - `truth<T>::deterministic()`: the truth without jitter (what the `oracle` row plans on,
///     with `truth<T>::speeds` as the dcp planner's `speeds`).
///
/// SPEC: `key=value` pairs separated by commas, every key optional and at most once:
///   compute=F attention=F intra_bw=F inter_bw=F overhead=F memory=F  (positive factors, default 1)
///   slow_gpus=R:F+R:F...  (GPU R runs at speed F, 0 < F <= 1; default none)
///   jitter=S              (log-normal sigma of every executed micro-step, 0 <= S <= 1; default 0)
/// An empty SPEC is the planner's own model.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <ostream>
#include <sstream>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <dcp/cost/analytic.hpp>
#include <dcp/cost/cost_concepts.hpp>
#include <dcp/cost/scaled_cost.hpp>
#include <dcp/error.hpp>
#include <dcp/plan/plan_builder.hpp>

namespace dcp::sim {

/// The largest jitter sigma a truth takes.
inline constexpr double max_jitter = 1.0;

/// A parsed truth SPEC.
struct truth_spec {
  cost_scales scales;                          ///< multipliers of the analytic terms
  std::vector<std::pair<int, double>> slow_gpus;  ///< (rank, speed), ascending rank
  double jitter = 0;                           ///< log-normal sigma of every executed step

  /// True when the SPEC changes only what `slow_gpus` and `jitter` describe.
  bool scales_are_identity() const noexcept { return scales == cost_scales{}; }

  /// Per-GPU speed factors for `gpus` GPUs (empty when no GPU is slow); throws
  /// `dcp::error(errc::invalid_argument)` when a slow GPU is not below `gpus`.
  std::vector<double> speeds(int gpus) const {
    if (slow_gpus.empty()) return {};
    std::vector<double> out(static_cast<std::size_t>(std::max(gpus, 0)), 1.0);
    for (const auto& slow : slow_gpus) {
      const int r = slow.first;  // not a structured binding: lambdas capture it (clang < 16)
      check(r < gpus, errc::invalid_argument, [&] {
        return "truth slow_gpus names GPU " + std::to_string(r) + ", but the job has " + std::to_string(gpus) +
               " GPUs (0.." + std::to_string(gpus - 1) + ")";
      });
      out[static_cast<std::size_t>(r)] = slow.second;
    }
    return out;
  }

  friend bool operator==(const truth_spec&, const truth_spec&) = default;
  /// Prints the canonical SPEC (every key, fixed order), which parses back to the same value.
  friend std::ostream& operator<<(std::ostream& os, const truth_spec& t) {
    const auto& s = t.scales;
    os << "compute=" << s.compute << ",attention=" << s.attention << ",intra_bw=" << s.intra_bw
       << ",inter_bw=" << s.inter_bw << ",overhead=" << s.overhead << ",memory=" << s.memory;
    if (!t.slow_gpus.empty()) {
      os << ",slow_gpus=";
      for (std::size_t i = 0; i < t.slow_gpus.size(); ++i)
        os << (i ? "+" : "") << t.slow_gpus[i].first << ":" << t.slow_gpus[i].second;
    }
    return os << ",jitter=" << t.jitter;
  }
};

namespace detail {

inline std::string_view trim(std::string_view s) noexcept {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

// A whole-string double; `what` names it in the error.
inline double parse_number(std::string_view text, const std::string& what) {
  const std::string s(trim(text));
  char* end = nullptr;
  const double v = s.empty() ? 0.0 : std::strtod(s.c_str(), &end);
  check(!s.empty() && end == s.c_str() + s.size() && std::isfinite(v), errc::invalid_argument,
        [&] { return what + ": '" + s + "' is not a finite number"; });
  return v;
}

}  // namespace detail

/// Parses a truth SPEC (grammar in the file comment). Throws `dcp::error(errc::invalid_argument)`
/// naming the offending pair and the fix for an unknown or repeated key, a missing '=', a value
/// that is not a number, a factor that is not positive, a speed outside (0, 1], a negative
/// jitter, or a GPU listed twice.
inline truth_spec parse_truth_spec(std::string_view spec) {
  truth_spec out;
  const std::string keys = "compute, attention, intra_bw, inter_bw, overhead, memory, slow_gpus, jitter";
  std::vector<std::string> seen;
  std::size_t pos = 0;
  while (pos <= spec.size()) {
    const std::size_t comma = std::min(spec.find(',', pos), spec.size());
    const std::string_view pair = detail::trim(spec.substr(pos, comma - pos));
    pos = comma + 1;
    if (pair.empty()) {
      check(spec.find_first_not_of(" \t") == std::string_view::npos, errc::invalid_argument, [&] {
        return "truth SPEC '" + std::string(spec) + "' has an empty entry; separate key=value pairs by single commas";
      });
      continue;
    }
    const std::size_t eq = pair.find('=');
    check(eq != std::string_view::npos, errc::invalid_argument, [&] {
      return "truth SPEC entry '" + std::string(pair) + "' is not key=value; keys: " + keys;
    });
    const std::string key(detail::trim(pair.substr(0, eq)));
    const std::string_view value = detail::trim(pair.substr(eq + 1));
    check(std::find(seen.begin(), seen.end(), key) == seen.end(), errc::invalid_argument,
          [&] { return "truth SPEC key '" + key + "' is given twice; give each key at most once"; });
    seen.push_back(key);
    auto factor = [&](double& slot) {
      slot = detail::parse_number(value, "truth SPEC " + key);
      check(slot > 0, errc::invalid_argument, [&] {
        return "truth SPEC " + key + "=" + std::string(value) + " must be a positive factor (1 = as modelled)";
      });
    };
    if (key == "compute") factor(out.scales.compute);
    else if (key == "attention") factor(out.scales.attention);
    else if (key == "intra_bw") factor(out.scales.intra_bw);
    else if (key == "inter_bw") factor(out.scales.inter_bw);
    else if (key == "overhead") factor(out.scales.overhead);
    else if (key == "memory") factor(out.scales.memory);
    else if (key == "jitter") {
      out.jitter = detail::parse_number(value, "truth SPEC jitter");
      // A sigma past 1 scales steps by factors of e and more: a typo, not a machine (and its fast
      // draws would end batches far below any bound).
      check(out.jitter >= 0 && out.jitter <= max_jitter, errc::invalid_argument, [&] {
        return "truth SPEC jitter=" + std::string(value) +
               " must be a sigma >= 0 and <= 1 (0 = no jitter, 0.05 = about 5%)";
      });
    } else if (key == "slow_gpus") {
      std::size_t p = 0;
      while (p <= value.size()) {
        const std::size_t plus = std::min(value.find('+', p), value.size());
        const std::string_view item = detail::trim(value.substr(p, plus - p));
        p = plus + 1;
        const std::size_t colon = item.find(':');
        check(colon != std::string_view::npos, errc::invalid_argument, [&] {
          return "truth SPEC slow_gpus entry '" + std::string(item) + "' is not RANK:SPEED (e.g. slow_gpus=5:0.75+9:0.9)";
        });
        const double r = detail::parse_number(item.substr(0, colon), "truth SPEC slow_gpus rank");
        const double f = detail::parse_number(item.substr(colon + 1), "truth SPEC slow_gpus speed");
        check(r >= 0 && r == std::floor(r) && r < 1e9, errc::invalid_argument, [&] {
          return "truth SPEC slow_gpus rank '" + std::string(detail::trim(item.substr(0, colon))) +
                 "' must be a GPU index >= 0";
        });
        check(f > 0 && f <= 1, errc::invalid_argument, [&] {
          return "truth SPEC slow_gpus speed " + std::string(detail::trim(item.substr(colon + 1))) + " of GPU " +
                 std::to_string(static_cast<int>(r)) + " must be in (0, 1] (0.75 = 25% slow)";
        });
        const int rank = static_cast<int>(r);
        for (const auto& [q, g] : out.slow_gpus)
          check(q != rank, errc::invalid_argument,
                [&] { return "truth SPEC slow_gpus lists GPU " + std::to_string(rank) + " twice; list it once"; });
        out.slow_gpus.emplace_back(rank, f);
      }
      std::sort(out.slow_gpus.begin(), out.slow_gpus.end());
    } else {
      throw error(errc::invalid_argument, "truth SPEC key '" + key + "' is unknown; keys: " + keys);
    }
  }
  return out;
}

/// The true clock plans are executed on: a deterministic cost model, per-GPU speeds, jitter.
template <cost_model T>
struct truth {
  T model;                     ///< true time and memory of a step at full speed
  std::vector<double> speeds;  ///< per GPU (empty = all 1): a step runs at its slowest member's
  double jitter = 0;           ///< log-normal sigma of every executed step (0 = none)
  std::uint64_t seed = 0;      ///< seeds the jitter

  /// Throws `dcp::error` unless speeds (one per GPU, positive) and jitter (>= 0) are valid.
  void validate() const {
    if constexpr (validated_cost_model<T>) model.validate();
    validate_speeds(speeds, model.gpus());
    check(std::isfinite(jitter) && jitter >= 0 && jitter <= max_jitter, errc::invalid_argument,
          [&] { return "truth jitter " + std::to_string(jitter) + " must be a sigma >= 0 and <= 1"; });
  }
  /// This truth without jitter: the part a planner could know.
  truth deterministic() const {
    truth t = *this;
    t.jitter = 0;
    return t;
  }
  friend bool operator==(const truth&, const truth&) = default;
  friend std::ostream& operator<<(std::ostream& os, const truth& t) {
    return os << "truth{" << t.model << ", " << t.speeds.size() << " speed factors, jitter=" << t.jitter
              << ", seed=" << t.seed << "}";
  }
};

/// The truth `spec` describes on top of the analytic model `base` (the planner's model).
inline truth<scaled_analytic_cost> make_truth(const truth_spec& spec, const analytic_cost& base, std::uint64_t seed) {
  truth<scaled_analytic_cost> t{{base, spec.scales}, spec.speeds(base.gpus()), spec.jitter, seed};
  t.validate();
  return t;
}

/// A measured model (a profile table) as the truth; `spec` may only add slow GPUs and jitter.
template <cost_model T>
truth<T> make_truth(T model, const truth_spec& spec, std::uint64_t seed) {
  check(spec.scales_are_identity(), errc::invalid_argument, [] {
    return std::string("a profile truth takes only slow_gpus and jitter from --truth; scale the terms of an "
                       "analytic truth, or measure another profile");
  });
  const int gpus = model.gpus();
  truth<T> t{std::move(model), spec.speeds(gpus), spec.jitter, seed};
  t.validate();
  return t;
}

}  // namespace dcp::sim
