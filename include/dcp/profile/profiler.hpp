#pragma once
/// \file
/// The dual-layer profiler of DESIGN section 1: cheap real measurements -> `profile_table`.
///
/// For every length group of the data (a `bucketing` policy; the group's representative is its
/// longest member) and every candidate sp, the batch doubles from 1 while the full-depth model
/// fits memory; for each (group, sp, batch) the user's step function runs the model truncated
/// to 1 and 2 blocks with {0, 1} and {0, 1, 2} blocks checkpointed (five short runs), and the
/// table gets one entry per k = 0..L extrapolated to L blocks:
///   time    t(L, k) = t_1 + (L - 1) (t_2 - t_1) + k (t_2,2 - t_2) / 2
///   memory  M(L, k) = M_2 + (L - 2) a - k (M_2 - M_2,1),  a = M_2 - M_1        (k < L)
///           M(L, L) = M_2,2 + (L - 2) (M_2,2 - M_1,1)                            (all checkpointed)
/// (subscripts: blocks, checkpointed; a is one block's stored activations, M_2 - M_2,1 what
/// checkpointing one block saves). Times are the median of `repeats` runs after `warmup` runs;
/// memory the largest peak seen.
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
#include <utility>
#include <string>
#include <vector>

#include <dcp/bucketing/bucketing_concepts.hpp>
#include <dcp/error.hpp>
#include <dcp/model/transformer.hpp>
#include <dcp/profile/memory_counter.hpp>
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

struct profiler_options {
  int warmup = 1;
  int repeats = 3;
  int max_batch = 64;
  std::vector<int> sp;          ///< candidate sp; empty: powers of two <= N dividing the heads
  std::ostream* progress = nullptr;  ///< one line per (group, sp, batch) when set
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

  auto run = [&](profile_point p) {
    std::vector<double> times;
    double mem = 0;
    for (int r = 0; r < opt.warmup + opt.repeats; ++r) {
      const profile_measurement m = meter.measure([&] { step(std::as_const(p)); });
      ++t.stats.runs;
      mem = std::max(mem, m.memory_bytes);
      if (r >= opt.warmup) times.push_back(m.time_s);
    }
    return profile_measurement{detail::median(times), mem};
  };

  std::size_t gi = 0;
  for (const auto& [g, shape] : reps) {
    ++gi;
    const std::int64_t n = model.tokens_of(shape.frames, shape.spatial);
    for (int sp : sps) {
      for (int batch = 1; batch <= opt.max_batch; batch *= 2) {
        profile_point p{int(g), shape, n, sp, batch, 1, 0};
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
          profile_entry e{int(g), n, shape.frames, shape.spatial, sp, batch, k, d.time(L, k),
                          static_bytes + d.activation_memory(L, k)};
          t.entries.push_back(e);
          t.stats.exhaustive_runs += opt.warmup + opt.repeats;
          t.stats.exhaustive_seconds += e.time_s * (opt.warmup + opt.repeats);
        }
        const bool fits = static_bytes + d.activation_memory(L, L) <= capacity;
        if (opt.progress)
          *opt.progress << "profile: group " << gi << "/" << reps.size() << " (" << n << " tokens) sp " << sp
                        << " batch " << batch << ": " << d.time(L, 0) * 1e3 << " ms, "
                        << (static_bytes + d.activation_memory(L, 0)) / 1e6 << " MB at L=" << L << " ("
                        << t.stats.runs << " runs, "
                        << std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count()
                        << " s)" << (fits ? "" : "; over the memory cap, stop doubling") << std::endl;
        if (!fits) break;  // stop doubling the batch at the memory cap
      }
    }
  }
  t.stats.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  validate(t);
  return t;
}

}  // namespace dcp
