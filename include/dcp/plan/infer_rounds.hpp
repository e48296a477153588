#pragma once
/// \file
/// `infer_rounds`: the barriers of a plan written before `plan_step::round` existed, recovered
/// from its start times (DESIGN section 6). The plan reader calls it for a document whose steps
/// carry no "round".
///
/// A barrier is placed at time T, the start of some step, when
///   - T is a cut: some step starts before T and every step that starts before T has ended by
///     T (no step spans it), so a barrier there delays nothing on the planner's own clock; and
///   - something at T waits for it: a step that starts at T starts later than the previous
///     steps of its own GPUs end (the planners' gang start never waits longer than that, so only
///     a barrier explains the wait), or the plan comes from a lockstep method (`lockstep`:
///     bucket, packed, dcp-no-inter), whose rounds give each GPU at most one step and start every
///     step at its round's start, so that every cut between start times is a round boundary
///     even when all GPUs happened to end the previous round together.
/// Single-round plans (dcp, dcp-no-intra, dynamic_cp) never show such a wait, so they stay one
/// round; lockstep plans get their rounds back exactly.

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>
#include <numeric>
#include <string_view>
#include <vector>

#include <dcp/plan/plan.hpp>

namespace dcp {

/// Whether `method` names a lockstep method (its plan's rounds are its start times).
inline bool lockstep_method(std::string_view method) noexcept {
  return method == "bucket" || method == "packed" || method == "dcp-no-inter" || method == "dcp-no-inter-no-intra";
}

/// Sets every step's round of `p` from its start times (see the file comment) and returns the
/// number of barriers placed. Steps keep their order.
inline int infer_rounds(plan& p, bool lockstep) {
  const std::size_t count = p.steps.size();
  for (auto& s : p.steps) s.round = 0;
  if (count == 0) return 0;
  auto tol = [](double t) { return 1e-9 * std::max(1.0, std::abs(t)); };
  std::vector<std::size_t> order(count);
  std::iota(order.begin(), order.end(), std::size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    const auto &x = p.steps[a], &y = p.steps[b];
    return x.start_s != y.start_s ? x.start_s < y.start_s : x.ranks.first < y.ranks.first;
  });
  // A step that starts after all its GPUs are free is waiting for something else. GPUs are
  // tracked as the segments between step boundaries (GPUs of one segment share every step), so
  // the work is bounded by the steps, not by the file's "gpus" (which a file may make huge).
  std::vector<int> cuts;
  cuts.reserve(2 * count);
  for (const auto& s : p.steps) cuts.push_back(s.ranks.first), cuts.push_back(s.ranks.end());
  std::sort(cuts.begin(), cuts.end());
  cuts.erase(std::unique(cuts.begin(), cuts.end()), cuts.end());
  auto segment = [&](int rank) {
    return static_cast<std::size_t>(std::lower_bound(cuts.begin(), cuts.end(), rank) - cuts.begin());
  };
  std::vector<double> free(cuts.size(), 0.0);
  std::vector<char> waits(count, 0);
  for (std::size_t i : order) {
    const auto& s = p.steps[i];
    const std::size_t lo = segment(s.ranks.first), hi = segment(s.ranks.end());
    double ready = 0;
    for (std::size_t g = lo; g < hi; ++g) ready = std::max(ready, free[g]);
    waits[i] = s.start_s > ready + tol(s.start_s);
    for (std::size_t g = lo; g < hi; ++g) free[g] = std::max(free[g], s.end_s());
  }
  // Walk the distinct start times; `ended` is the latest end of every step started before.
  std::vector<double> barriers;
  double ended = -std::numeric_limits<double>::infinity();
  bool any_before = false;
  for (std::size_t k = 0; k < count;) {
    const double t = p.steps[order[k]].start_s;
    std::size_t m = k;
    bool wait = lockstep;
    for (; m < count && p.steps[order[m]].start_s <= t + tol(t); ++m) wait = wait || waits[order[m]];
    if (any_before && wait && ended <= t + tol(t)) barriers.push_back(t);
    for (; k < m; ++k) ended = std::max(ended, p.steps[order[k]].end_s());
    any_before = true;
  }
  for (auto& s : p.steps)
    s.round = static_cast<int>(std::upper_bound(barriers.begin(), barriers.end(), s.start_s + tol(s.start_s)) -
                               barriers.begin());
  return static_cast<int>(barriers.size());
}

}  // namespace dcp
