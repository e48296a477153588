#pragma once
/// \file
/// The CPU example profiles itself: the step function `dcp::profile_model` calls (a real step
/// of the tiny transformer truncated to the point's depth, on the point's sp ranks as local
/// threads), the example's memory capacity, and the profiling report (profiling cost vs an
/// exhaustive profile; 2-block extrapolation vs full-depth measurements).

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <iostream>
#include <map>
#include <span>
#include <sstream>
#include <string>
#include <vector>

#include <dcp/bucketing/geometric_bucketing.hpp>
#include <dcp/comm/local.hpp>
#include <dcp/cost/profiled_cost.hpp>
#include <dcp/plan/sequence_options.hpp>
#include <dcp/profile/profile_table.hpp>
#include <dcp/profile/profiler.hpp>

#include "synthetic_data.hpp"
#include "tiny_transformer.hpp"
#include "trainer.hpp"

namespace cpu_train {

/// Static bytes per rank: parameters, gradients and Adam's two moments (not sharded here).
template <class T>
double static_bytes(const model_config& c) {
  return 4.0 * double(param_layout(c).size) * sizeof(T);
}

/// A capacity for the real CPU model with the same meaning as `cpu_device`'s: a sequence of
/// `fit_tokens` tokens about fits one rank with nothing checkpointed.
template <class T>
double cpu_capacity(const model_config& c, double fit_tokens) {
  const double per_token_block = (9.0 * c.hidden + 2.0 * c.mlp) * sizeof(T);
  return static_bytes<T>(c) + (c.blocks + 1) * per_token_block * fit_tokens;
}

/// Runs `p`: `batch` sequences of `tokens` tokens through `model` (its depth is the point's) on
/// `sp` local ranks; rank 0 runs on the calling thread, so the caller's meter counts its memory.
template <class T>
void run_point(const tiny_transformer<T>& model, const synthetic_data& data, std::int64_t tokens, int batch, int sp,
               int checkpointed) {
  std::vector<segment> segs;
  for (int i = 0; i < batch; ++i) segs.push_back({1000000 + i, tokens, 1.0 / double(tokens * batch)});
  auto body = [&](int rank, auto* comm) {
    const packed_shard shard = make_shard(data, segs, sp, rank);
    std::vector<T> grads(model.params().size(), T(0));
    model.forward_backward(shard, comm, checkpointed, std::span<T>(grads));
  };
  if (sp == 1) {
    body(0, static_cast<dcp::local_comm*>(nullptr));
    return;
  }
  dcp::local_world::run(sp, [&](dcp::local_comm& c) { body(c.rank(), &c); });
}

/// `host_meter` with the calling thread's CPU time (CLOCK_THREAD_CPUTIME_ID) instead of the
/// steady clock: rank 0's own compute, not the time it slept waiting for a peer or lost to other
/// processes on shared cores. `dcp-train-cpu --calibrate` profiles and measures its steps with it.
struct thread_cpu_meter {
  dcp::profile_measurement measure(const std::function<void()>& fn) const {
    dcp::memory_counter counter;
    dcp::memory_scope scope(counter);
    const double t0 = thread_cpu_seconds();
    fn();
    return {thread_cpu_seconds() - t0, double(counter.peak_bytes())};
  }
};
static_assert(dcp::profile_meter<thread_cpu_meter>);

/// Profiles the model on the data's length groups (geometric, x2 from 32 tokens) for `world`
/// ranks and `capacity` bytes per rank; the batch-doubling pass stops after `budget_s` seconds of
/// runs (0: no limit). `report` (when set) gets what was measured and what left to extrapolation.
template <class T, dcp::profile_meter Meter = dcp::host_meter>
dcp::profile_table profile_cpu_model(const model_config& c, const synthetic_data& data, int world, double capacity,
                                     bool progress, int sequences = 2000, int max_batch = 8, double budget_s = 0,
                                     dcp::profile_report* report = nullptr, Meter meter = {}) {
  model_config one = c, two = c;
  one.blocks = 1;
  two.blocks = 2;
  const tiny_transformer<T> m1(one), m2(two);
  const auto spec = tiny_spec(c);
  dcp::profiler_options opt;
  opt.warmup = 1;
  opt.repeats = 2;
  opt.max_batch = max_batch;
  opt.budget_s = budget_s;
  opt.progress = progress ? &std::cout : nullptr;
  opt.report = report;
  const auto dataset = data.make(sequences);
  return dcp::profile_model(
      spec, "cpu-scaled", world, 8, capacity, static_bytes<T>(c), dcp::geometric_bucketing{64, 2.0, 1 << 20},
      std::span<const dcp::sequence>(dataset),
      [&](const dcp::profile_point& p) {
        run_point(p.blocks == 1 ? m1 : m2, data, p.tokens, p.batch, p.sp, p.checkpointed_blocks);
      },
      opt, meter);
}

/// Measures full-depth steps of `c` and compares them with the table's extrapolation.
struct extrapolation_check {
  std::int64_t tokens;
  int sp, batch, k;
  double predicted_s, measured_s, predicted_bytes, measured_bytes;
};

template <class T, dcp::profile_meter Meter = dcp::host_meter>
std::vector<extrapolation_check> check_extrapolation(const model_config& c, const synthetic_data& data,
                                                     const dcp::profile_table& t, std::size_t count = 4,
                                                     Meter meter = {}) {
  const tiny_transformer<T> full(c);
  std::vector<extrapolation_check> out;
  // A few points spread over the table (different lengths, sp, batch), each at another
  // recompute level in turn: fully checkpointed, none, half.
  std::vector<const dcp::profile_entry*> points;
  for (const auto& e : t.entries)
    if (e.checkpointed_blocks == 0) points.push_back(&e);
  const int levels[3] = {c.blocks, 0, c.blocks / 2};
  std::vector<const dcp::profile_entry*> picks;
  const std::size_t stride = std::max<std::size_t>(1, points.size() / count);
  for (std::size_t i = stride / 2; i < points.size() && picks.size() < count; i += stride) {
    const int k = levels[picks.size() % 3];
    for (const auto& e : t.entries)
      if (e.bucket == points[i]->bucket && e.sp == points[i]->sp && e.batch == points[i]->batch &&
          e.checkpointed_blocks == k)
        picks.push_back(&e);
  }
  for (const dcp::profile_entry* pick : picks) {
    const auto& e = *pick;
    std::vector<double> times;
    double mem = 0;
    for (int r = 0; r < 4; ++r) {
      const auto m = meter.measure([&] { run_point(full, data, e.tokens, e.batch, e.sp, e.checkpointed_blocks); });
      if (r > 0) times.push_back(m.time_s);
      mem = std::max(mem, m.memory_bytes);
    }
    std::sort(times.begin(), times.end());
    out.push_back({e.tokens, e.sp, e.batch, e.checkpointed_blocks, e.time_s, times[times.size() / 2],
                   e.memory_bytes - t.static_memory_bytes, mem});
  }
  return out;
}

/// Says how the profile covers the data: per sp, the longest length it measured and how many of
/// the data's sequences are longer (priced by extrapolation), and which sequences the `reference`
/// cost model fits (widest group, every block checkpointed) but the profile does not; those are
/// refused by the planner, so they are listed here rather than discovered mid-run.
template <dcp::cost_model Reference>
void report_profile_coverage(const Reference& reference, const dcp::profiled_cost& profiled,
                             const dcp::dataset& data) {
  std::map<int, std::int64_t> longest;  // sp -> longest measured length
  for (const auto& e : profiled.table().entries) longest[e.sp] = std::max(longest[e.sp], e.tokens);
  std::ostringstream os;
  os << "profile coverage:";
  for (const auto& entry : longest) {
    const std::int64_t n = entry.second;  // a named copy: clang before 16 cannot capture a structured binding
    const auto beyond = std::count_if(data.begin(), data.end(),
                                      [&](const dcp::sequence& s) { return profiled.tokens_of(s) > n; });
    os << " sp " << entry.first << " measured up to " << n << " tokens (" << beyond << " longer, extrapolated);";
  }
  const auto ref_sps = dcp::legal_sp_sizes(reference), sps = dcp::legal_sp_sizes(profiled);
  std::vector<std::int64_t> refused;
  for (const auto& s : data) {
    const bool ref_fits = !ref_sps.empty() && reference.memory(reference.load_of(s), ref_sps.back(),
                                                               reference.blocks()) <= reference.capacity();
    const bool fits = !sps.empty() && profiled.memory(profiled.load_of(s), sps.back(), profiled.blocks()) <=
                                          profiled.capacity();
    if (ref_fits && !fits) refused.push_back(profiled.tokens_of(s));
  }
  os << " " << refused.size() << " sequences fit the analytic model but not the profile";
  if (!refused.empty()) {
    std::sort(refused.begin(), refused.end());
    os << " (" << refused.front() << " to " << refused.back() << " tokens; the planner refuses them)";
  }
  std::printf("%s\n", os.str().c_str());
}

/// Prints the profiling report: profiling cost vs exhaustive, and the extrapolation error.
inline void print_profile_report(const dcp::profile_table& t, const std::vector<extrapolation_check>& checks) {
  std::printf("profile: %zu entries from %lld runs in %.2f s; an exhaustive full-depth profile of the same entries "
              "would take %lld runs, ~%.2f s (%.1fx the runs, %.1fx the time)\n",
              t.entries.size(), (long long)t.stats.runs, t.stats.seconds, (long long)t.stats.exhaustive_runs,
              t.stats.exhaustive_seconds, double(t.stats.exhaustive_runs) / double(std::max<std::int64_t>(1, t.stats.runs)),
              t.stats.exhaustive_seconds / std::max(1e-9, t.stats.seconds));
  std::printf("2-block extrapolation vs full-depth (L=%d) measurement:\n", t.model.blocks);
  for (const auto& c : checks)
    std::printf("  tokens %5lld sp %d batch %2d k %d: time %.2f ms vs %.2f ms (%+.1f%%), activation memory %.3f MB "
                "vs %.3f MB (%+.2f%%)\n",
                (long long)c.tokens, c.sp, c.batch, c.k, c.predicted_s * 1e3, c.measured_s * 1e3,
                100 * (c.predicted_s / c.measured_s - 1), c.predicted_bytes / 1e6, c.measured_bytes / 1e6,
                100 * (c.predicted_bytes / c.measured_bytes - 1));
}

}  // namespace cpu_train
