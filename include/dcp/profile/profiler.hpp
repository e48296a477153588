#pragma once
/// \file
/// The dual-layer profiler of DESIGN section 1: cheap real measurements -> `profile_table`.
///
/// For every length group of the data (a `bucketing` policy; the group's representative is its
/// longest member) and every candidate sp, the user's step function runs `batch` copies of the
/// representative through the model truncated to 1 and 2 blocks with {0, 1} and {0, 1, 2} blocks
/// checkpointed (five short runs per point), and the table gets one entry per k = 0..L
/// extrapolated to L blocks:
///   time    t(L, k) = t_1 + (L - 1) (t_2 - t_1) + k (t_2,2 - t_2) / 2
///   memory  M(L, k) = M_2 + (L - 2) a - k (M_2 - M_2,1),  a = M_2 - M_1        (k < L)
///           M(L, L) = M_2,2 + (L - 2) (M_2,2 - M_1,1)                            (all checkpointed)
/// (subscripts: blocks, checkpointed; a is one block's stored activations, M_2 - M_2,1 what
/// checkpointing one block saves). Every point therefore prices every recompute level, the fully
/// checkpointed one included, which is what lets `profiled_cost` plan sequences that only fit
/// with recomputation. Times are the median of `repeats` runs after `warmup` runs; memory the
/// largest peak seen.
///
/// Which points are run, in two passes:
///   1. batch 1 of every (group, sp), shortest group first. A (group, sp) is skipped when the
///      per-token memory of the same sp's measured points predicts that even the fully
///      checkpointed L-block step needs more than `skip_margin` x capacity (memory is linear in
///      tokens); `profiled_cost` extrapolates it from the shorter lengths (and finds it does not
///      fit). This pass always runs: without it a length would have no price.
///   2. the batch doubles (2, 4, ... `max_batch`) for each (group, sp) whose previous batch fit
///      fully checkpointed, one batch level at a time over all of them, while the measured run
///      time stays within `budget_s`; a point is not started when its predicted cost (twice the
///      previous batch's) would pass the budget. Larger batches are extrapolated by
///      `profiled_cost` (log-log in the batch from the measured ones).
/// `progress` gets one line per point (what was measured, the L-block prices at k = 0 and k = L)
/// and one per skipped or budget-limited (group, sp); `profile_report` says how many.
///
/// Measurement goes through a `profile_meter`: `meter.measure(fn)` runs `fn` once and returns its
/// seconds and peak activation bytes. `host_meter` (steady clock + `memory_counter` on the
/// calling thread) is the CPU one; a CUDA meter (events, allocator statistics) plugs in the same way.
///
/// \code
/// auto table = dcp::profile_model(spec, "cpu", gpus, gpus_per_node, capacity, static_bytes,
///                                 dcp::geometric_bucketing{64}, dataset,
///                                 [&](const dcp::profile_point& p) { run_my_step(p); }, {});
/// \endcode

#include <algorithm>
#include <chrono>
#include <cmath>
#include <concepts>
#include <cstdint>
#include <functional>
#include <map>
#include <ostream>
#include <span>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include <dcp/bucketing/bucketing_concepts.hpp>
#include <dcp/error.hpp>
#include <dcp/model/transformer.hpp>
#include <dcp/memory_counter.hpp>
#include <dcp/profile/profile_table.hpp>
#include <dcp/sequence.hpp>

namespace dcp {

/// One measurement.
struct profile_measurement {
  double time_s = 0;
  double memory_bytes = 0;  ///< peak activation bytes per GPU
};

/// What the step function must run: `batch` copies of `shape` on `sp` ranks, through a model
/// truncated to `blocks` blocks of which the first `checkpointed_blocks` are checkpointed.
struct profile_point {
  int bucket = 0;
  sequence shape;
  std::int64_t tokens = 0;  ///< tokens of one sequence (as the model sees them)
  int sp = 1;
  int batch = 1;
  int blocks = 2;
  int checkpointed_blocks = 0;
};

/// Measures one run of a callable.
template <class M>
concept profile_meter = requires(M& m, std::function<void()> fn) {
  { m.measure(fn) } -> std::same_as<profile_measurement>;
};

/// Steady clock and the calling thread's counted allocations (`counting_allocator`).
struct host_meter {
  profile_measurement measure(const std::function<void()>& fn) const {
    memory_counter counter;
    memory_scope scope(counter);
    const auto t0 = std::chrono::steady_clock::now();
    fn();
    const auto t1 = std::chrono::steady_clock::now();
    return {std::chrono::duration<double>(t1 - t0).count(), double(counter.peak_bytes())};
  }
};
static_assert(profile_meter<host_meter>);

/// What one profiling run measured and what it left to extrapolation (the table itself only
/// holds the L-block entries).
struct profile_report {
  std::int64_t points = 0;            ///< (group, sp, batch) points run at 1 and 2 blocks
  std::int64_t skipped = 0;           ///< (group, sp) not run: predicted over capacity fully checkpointed
  std::int64_t budget_limited = 0;    ///< (group, sp) whose batch doubling the budget stopped
  std::int64_t memory_limited = 0;    ///< (group, sp) whose batch doubling stopped at the memory cap
  double measured_s = 0;              ///< seconds of measured runs (what the budget counts)
  std::int64_t longest_tokens = 0;    ///< longest profiled length; longer ones are extrapolated
};

struct profiler_options {
  int warmup = 1;
  int repeats = 3;
  int max_batch = 64;
  /// Seconds of measured runs (pass 1's included) past which no batch-doubling point starts;
  /// pass 1 always runs in full. 0: no limit.
  double budget_s = 0;
  /// Skip a (group, sp) predicted to need more than this times the capacity fully checkpointed.
  double skip_margin = 1.25;
  std::vector<int> sp;          ///< candidate sp; empty: powers of two <= N dividing the heads
  std::ostream* progress = nullptr;  ///< one line per point and per skipped or cut (group, sp) when set
  profile_report* report = nullptr;      ///< filled when set
};

namespace detail {
inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}
}  // namespace detail

/// Extrapolates the five truncated runs of one (group, sp, batch) to L blocks (see the file comment).
struct dual_layer_runs {
  profile_measurement b1k0, b1k1, b2k0, b2k1, b2k2;

  double time(int L, int k) const {
    const double per_block = std::max(0.0, b2k0.time_s - b1k0.time_s);
    const double recompute = std::max(0.0, (b2k2.time_s - b2k0.time_s) / 2);
    return std::max(b1k0.time_s, b1k0.time_s + (L - 1) * per_block + k * recompute);
  }
  double activation_memory(int L, int k) const {
    const double a = b2k0.memory_bytes - b1k0.memory_bytes;
    if (k >= L) return std::max(0.0, b2k2.memory_bytes + (L - 2) * (b2k2.memory_bytes - b1k1.memory_bytes));
    const double saved = b2k0.memory_bytes - b2k1.memory_bytes;
    return std::max(0.0, b2k0.memory_bytes + (L - 2) * a - k * saved);
  }
};

/// Profiles `model` on the data's length groups through `step` (see the file comment).
/// `capacity` and `static_bytes` are per GPU; the table is for `gpus` GPUs on device `device`.
template <bucketing B, class Step, profile_meter Meter = host_meter>
  requires std::invocable<Step&, const profile_point&>
profile_table profile_model(const transformer_spec& model, const std::string& device, int gpus, int gpus_per_node,
                            double capacity, double static_bytes, const B& groups, std::span<const sequence> data,
                            Step&& step, const profiler_options& opt = {}, Meter meter = {}) {
  validate(model);
  check(gpus > 0 && capacity > static_bytes && opt.repeats > 0 && opt.warmup >= 0 && opt.max_batch > 0,
        errc::invalid_argument, [&] {
          return "profile_model: need gpus > 0, capacity (" + std::to_string(capacity) + ") above static memory (" +
                 std::to_string(static_bytes) + "), repeats > 0, warmup >= 0, max_batch > 0";
        });
  check(std::isfinite(opt.budget_s) && opt.budget_s >= 0 && opt.skip_margin >= 1, errc::invalid_argument, [&] {
    return "profile_model: budget_s = " + std::to_string(opt.budget_s) + " and skip_margin = " +
           std::to_string(opt.skip_margin) + "; need a finite budget >= 0 (0: no limit) and skip_margin >= 1";
  });
  check(!data.empty(), errc::invalid_argument, [] { return std::string("profile_model: no sequences to profile"); });
  const auto start = std::chrono::steady_clock::now();
  profile_table t;
  t.model = model;
  t.device = device;
  t.gpus = gpus;
  t.gpus_per_node = gpus_per_node;
  t.memory_capacity_bytes = capacity;
  t.static_memory_bytes = static_bytes;
  t.profiled_blocks = 2;
  const int L = model.blocks;

  // Length groups present in the data: longest member (clipped to the group's edge) as representative.
  std::map<std::size_t, sequence> reps;
  for (const auto& s : data) {
    const std::int64_t n = model.tokens_of(s.frames, s.spatial);
    const std::size_t g = groups.bucket_of(n);
    auto [it, fresh] = reps.try_emplace(g, s);
    if (!fresh && n > model.tokens_of(it->second.frames, it->second.spatial)) it->second = s;
  }
  std::vector<int> sps = opt.sp;
  if (sps.empty())
    for (int sp = 1; sp <= gpus; sp *= 2)
      if (model.heads % sp == 0) sps.push_back(sp);

  profile_report rep;
  auto run = [&](profile_point p) {
    std::vector<double> times;
    double mem = 0;
    for (int r = 0; r < opt.warmup + opt.repeats; ++r) {
      const profile_measurement m = meter.measure([&] { step(std::as_const(p)); });
      ++t.stats.runs;
      rep.measured_s += m.time_s;
      mem = std::max(mem, m.memory_bytes);
      if (r >= opt.warmup) times.push_back(m.time_s);
    }
    return profile_measurement{detail::median(times), mem};
  };
  auto elapsed = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(); };

  // One (group, sp): its representative and how far its batch doubling got.
  struct lane {
    std::size_t group_number = 0;
    int bucket = 0;
    sequence shape;
    std::int64_t tokens = 0;
    int sp = 1;
    int batch = 0;            // last measured batch
    double point_s = 0;       // measured seconds its last point cost
    bool open = false;        // its batch may still double
  };
  // Runs the five truncated configurations of one point and adds its L-block entries; returns
  // whether the point fits fully checkpointed.
  auto measure_point = [&](lane& ln, int batch) {
    const double before = rep.measured_s;
    profile_point p{ln.bucket, ln.shape, ln.tokens, ln.sp, batch, 1, 0};
    dual_layer_runs d;
    d.b1k0 = run(p);
    p.checkpointed_blocks = 1;
    d.b1k1 = run(p);
    p.blocks = 2;
    d.b2k1 = run(p);
    p.checkpointed_blocks = 0;
    d.b2k0 = run(p);
    p.checkpointed_blocks = 2;
    d.b2k2 = run(p);
    for (int k = 0; k <= L; ++k) {
      profile_entry e{ln.bucket, ln.tokens, ln.shape.frames, ln.shape.spatial, ln.sp, batch, k, d.time(L, k),
                      static_bytes + d.activation_memory(L, k)};
      t.entries.push_back(e);
      t.stats.exhaustive_runs += opt.warmup + opt.repeats;
      t.stats.exhaustive_seconds += e.time_s * (opt.warmup + opt.repeats);
    }
    ++rep.points;
    rep.longest_tokens = std::max(rep.longest_tokens, ln.tokens);
    ln.batch = batch;
    ln.point_s = rep.measured_s - before;
    const double m0 = static_bytes + d.activation_memory(L, 0), mL = static_bytes + d.activation_memory(L, L);
    const bool fits = mL <= capacity;
    if (opt.progress) {
      *opt.progress << "profile: group " << ln.group_number << "/" << reps.size() << " (" << ln.tokens
                    << " tokens) sp " << ln.sp << " batch " << batch << ": measured at 1-2 blocks, k 0-2; L=" << L
                    << " extrapolated: k 0 " << d.time(L, 0) * 1e3 << " ms " << m0 / 1e6 << " MB, k " << L << " "
                    << d.time(L, L) * 1e3 << " ms " << mL / 1e6 << " MB (" << t.stats.runs << " runs, " << elapsed()
                    << " s)";
      if (!fits) *opt.progress << "; over the memory cap even fully checkpointed, stop doubling";
      else if (m0 > capacity) *opt.progress << "; fits only with recomputation";
      *opt.progress << std::endl;
    }
    return fits;
  };

  // Pass 1: batch 1 of every (group, sp), shortest first, so that every length has a price at
  // every recompute level; a (group, sp) the same sp's per-token memory puts far over capacity
  // fully checkpointed is skipped.
  std::vector<lane> lanes;
  std::map<int, double> rate;  // sp -> lowest measured activation bytes per step token, fully checkpointed
  std::size_t gi = 0;
  for (const auto& [g, shape] : reps) {
    ++gi;
    const std::int64_t n = model.tokens_of(shape.frames, shape.spatial);
    for (int sp : sps) {
      lane ln{gi, int(g), shape, n, sp};
      if (const auto r = rate.find(sp); r != rate.end()) {
        const double predicted = static_bytes + r->second * double(n);
        if (predicted > opt.skip_margin * capacity) {
          ++rep.skipped;
          if (opt.progress)
            *opt.progress << "profile: group " << gi << "/" << reps.size() << " (" << n << " tokens) sp " << sp
                          << ": not run, predicted " << predicted / 1e6 << " MB fully checkpointed > "
                          << opt.skip_margin << " x capacity " << capacity / 1e6
                          << " MB; extrapolated from shorter lengths" << std::endl;
          continue;
        }
      }
      ln.open = measure_point(ln, 1);
      const auto& full = t.entries.back();  // k = L of the point just measured
      const double per_token = (full.memory_bytes - static_bytes) / double(n);
      auto [r, fresh] = rate.try_emplace(sp, per_token);
      if (!fresh) r->second = std::min(r->second, per_token);
      if (!ln.open) ++rep.memory_limited;
      lanes.push_back(ln);
    }
  }
  // Pass 2: double the batch, one level at a time over every open (group, sp), within the budget.
  for (int batch = 2; batch <= opt.max_batch; batch *= 2) {
    for (auto& ln : lanes) {
      if (!ln.open) continue;
      if (opt.budget_s > 0 && rep.measured_s + 2 * ln.point_s > opt.budget_s) {
        ln.open = false;
        ++rep.budget_limited;
        if (opt.progress)
          *opt.progress << "profile: group " << ln.group_number << "/" << reps.size() << " (" << ln.tokens
                        << " tokens) sp " << ln.sp << ": batches above " << ln.batch
                        << " not run (the next would pass the budget of " << opt.budget_s << " s of runs; "
                        << rep.measured_s << " s spent); extrapolated in the batch" << std::endl;
        continue;
      }
      ln.open = measure_point(ln, batch);
      if (!ln.open) ++rep.memory_limited;
    }
  }
  std::sort(t.entries.begin(), t.entries.end(), [](const profile_entry& a, const profile_entry& b) {
    return std::tie(a.bucket, a.sp, a.batch, a.checkpointed_blocks) <
           std::tie(b.bucket, b.sp, b.batch, b.checkpointed_blocks);
  });
  if (opt.report) *opt.report = rep;
  if (opt.progress) {
    auto& os = *opt.progress;
    os << "profile: " << rep.points << " points measured at 1-2 blocks (" << t.stats.runs << " runs, "
       << rep.measured_s << " s of runs; batch-doubling budget ";
    if (opt.budget_s > 0) os << opt.budget_s << " s";
    else os << "unlimited";
    os << "); " << t.entries.size() << " L-block entries, every k 0-" << L << "; " << rep.skipped
       << " (group, sp) skipped as over capacity, " << rep.budget_limited << " cut by the budget, "
       << rep.memory_limited << " stopped at the memory cap; lengths above " << rep.longest_tokens
       << " tokens are extrapolated" << std::endl;
  }
  t.stats.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  validate(t);
  return t;
}

}  // namespace dcp
