#pragma once
/// \file
/// The reference integration of `dcp::scheduler` into a training loop, and the
/// single-process full-batch step it is proven equal to.
///
/// Per global batch (the same on every rank, from the scheduler's sampler):
///   1. `plan = sched.plan(batch)`, no communication;
///   2. `sched.verify(plan)`: one all-reduce, every rank fails before any step if ranks disagree;
///   3. for each of this rank's `sched.steps_for(plan)`: build the rank's token shard of the
///      packed step, run forward/backward with the step's group communicator (or, for a
///      Ulysses x Ring step, its Ulysses and ring communicators), its checkpointed
///      blocks (the cost model's k of L mapped onto the model's blocks) and the sequences' loss
///      weights; gradients accumulate locally, no per-rank averaging;
///   4. one `all_reduce(sum)` of gradients (and the loss) over all ranks;
///   5. the optimizer step (SGD or Adam), identical on every rank.

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <ctime>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include <dcp/comm/local.hpp>
#include <dcp/comm/ring.hpp>
#include <dcp/comm/shard.hpp>
#include <dcp/cost/analytic.hpp>
#include <dcp/cost/device.hpp>
#include <dcp/model/transformer.hpp>
#include <dcp/plan/plan.hpp>
#include <dcp/memory_counter.hpp>
#include <dcp/sequence.hpp>

#include "synthetic_data.hpp"
#include "tiny_transformer.hpp"

namespace cpu_train {

enum class optimizer_kind { sgd, adam };

struct optimizer_config {
  optimizer_kind kind = optimizer_kind::adam;
  double lr = 1e-2;
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8;
};

/// SGD or Adam (with bias correction) on a flat parameter vector.
template <class T>
class optimizer {
 public:
  optimizer(optimizer_config c, std::size_t size) : c_(c), m_(size, T(0)), v_(size, T(0)) {}
  void step(std::span<T> params, std::span<const T> grads) {
    ++t_;
    if (c_.kind == optimizer_kind::sgd) {
      for (std::size_t i = 0; i < params.size(); ++i) params[i] -= T(c_.lr) * grads[i];
      return;
    }
    const T b1 = T(c_.beta1), b2 = T(c_.beta2);
    const T c1 = T(1) - T(std::pow(c_.beta1, t_)), c2 = T(1) - T(std::pow(c_.beta2, t_));
    for (std::size_t i = 0; i < params.size(); ++i) {
      m_[i] = b1 * m_[i] + (T(1) - b1) * grads[i];
      v_[i] = b2 * v_[i] + (T(1) - b2) * grads[i] * grads[i];
      params[i] -= T(c_.lr) * (m_[i] / c1) / (std::sqrt(v_[i] / c2) + T(c_.eps));
    }
  }

 private:
  optimizer_config c_;
  std::vector<T> m_, v_;
  int t_ = 0;
};

/// How the trainer picks the checkpointed blocks of a micro-step.
enum class recompute_mode {
  plan,  ///< the plan's k of the cost model's L, mapped proportionally onto the model's blocks
  off,   ///< never recompute
  all,   ///< checkpoint every block
};

/// The model's checkpointed blocks for a plan step that checkpoints `k` of the cost model's
/// `cost_blocks`: ceil(k * L_model / L_cost), so any recompute in the plan recomputes here too.
inline int map_checkpointed(int k, int cost_blocks, int model_blocks) noexcept {
  if (k <= 0 || cost_blocks <= 0) return 0;
  return std::min(model_blocks, int((std::int64_t(k) * model_blocks + cost_blocks - 1) / cost_blocks));
}

/// The `transformer_spec` the planner prices for `c` (same L, h, heads, MLP; no text tokens).
inline dcp::transformer_spec tiny_spec(const model_config& c) {
  return {"cpu-tiny", c.blocks, c.hidden, c.heads, c.mlp, 2,
          c.causal ? dcp::attention_kind::causal : dcp::attention_kind::full, 0};
}

/// A device for the analytic model, scaled to the tiny model on CPUs: a sequence of
/// `fit_tokens` tokens just fits one rank with nothing checkpointed, so longer ones need
/// recompute or sp > 1, and small per-step overheads make packing short sequences pay.
inline dcp::device_spec cpu_device(const dcp::transformer_spec& spec, int world, double fit_tokens) {
  dcp::device_spec d{"cpu-scaled", 2e10, 0.5, 128, 2e-5, 2e-5, 2e9, 1e9, 8, 0, 0.9, 34};
  const double p = spec.parameters();
  const double fixed = 4 * p + 12 * p / world;
  d.mem_bytes = (fixed + (spec.blocks + 1) * d.beta * double(spec.hidden) * fit_tokens) / d.usable;
  return d;
}

/// One sequence of a packed step: its id, length and the loss weight of each of its tokens.
struct segment {
  std::int64_t id = 0;
  std::int64_t tokens = 0;
  double token_weight = 0;
};

/// This rank's shard (`group_rank` of `sp`) of the packed step made of `segments`, in order.
/// With `ring` > 1 (DESIGN section 4.3, u = sp / ring): group rank g is position g % u of
/// Ulysses group g / u, which holds ring chunk g / u of the packed axis (zig-zag half-chunks
/// when `causal`), and the rank takes its Ulysses token shard of that chunk.
inline packed_shard make_shard(const synthetic_data& data, std::span<const segment> segments, int sp, int group_rank,
                               int ring = 1, bool causal = false) {
  dcp::check(ring >= 1 && sp % ring == 0, dcp::errc::invalid_argument, [&] {
    return "make_shard: ring " + std::to_string(ring) + " does not divide sp = " + std::to_string(sp);
  });
  packed_shard s;
  s.seq_begin.push_back(0);
  for (const auto& g : segments) s.seq_begin.push_back(s.seq_begin.back() + g.tokens);
  auto sequence_of = [&](std::int64_t i) {
    return std::int64_t(std::upper_bound(s.seq_begin.begin(), s.seq_begin.end(), i) - s.seq_begin.begin()) - 1;
  };
  std::vector<std::int64_t> mine;  // this rank's packed-axis indices, in order
  if (ring == 1) {
    s.tokens_shard = dcp::shard_of(s.total(), sp, group_rank);
    for (std::int64_t i = s.tokens_shard.begin; i < s.tokens_shard.end(); ++i) mine.push_back(i);
  } else {
    const int u = sp / ring, j = group_rank / u;
    if (causal) {
      s.chunk = dcp::zigzag_tokens(s.total(), ring, j);
    } else {
      const dcp::shard c = dcp::shard_of(s.total(), ring, j);
      for (std::int64_t i = c.begin; i < c.end(); ++i) s.chunk.push_back(i);
    }
    for (const std::int64_t i : s.chunk) s.chunk_sequence.push_back(sequence_of(i));
    s.tokens_shard = dcp::shard_of(std::int64_t(s.chunk.size()), u, group_rank % u);
    for (std::int64_t i = s.tokens_shard.begin; i < s.tokens_shard.end(); ++i) mine.push_back(s.chunk[size_t(i)]);
  }
  std::int64_t cached = -1;
  std::vector<int> toks;
  for (const std::int64_t i : mine) {
    const std::int64_t q = sequence_of(i);
    if (q != cached) toks = data.tokens(segments[size_t(q)].id, segments[size_t(q)].tokens), cached = q;
    const std::int64_t p = i - s.seq_begin[size_t(q)];
    s.tokens.push_back(toks[size_t(p)]);
    s.targets.push_back(toks[size_t(p + 1)]);
    s.positions.push_back(int(p));
    s.weights.push_back(segments[size_t(q)].token_weight);
  }
  return s;
}

/// One micro-step of this rank, measured around its forward+backward from the moment its whole
/// group has arrived: `wall_s` (steady clock; includes waiting for peers within the step and time
/// the OS gave other processes), `cpu_s` (this
/// thread's CPU time, CLOCK_THREAD_CPUTIME_ID: its own compute and copies, not the time it slept
/// in a collective waiting for a peer) and `activation_bytes` (the peak the thread's
/// `dcp::memory_counter` saw: activation buffers, not parameters or optimizer state).
struct timed_step {
  std::size_t index = 0;  ///< in `plan.steps`
  double wall_s = 0, cpu_s = 0, activation_bytes = 0;
  /// The step ran out of memory on some member (`run_micro_steps`' limit) and was re-run with
  /// every block checkpointed; the times and peak are the failed attempt's.
  bool out_of_memory = false;
};

/// Seconds of CPU time the calling thread has used (each local rank is a thread, each MPI rank
/// runs its steps on its main thread).
inline double thread_cpu_seconds() noexcept {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
}

/// What one training step did on this rank.
struct step_summary {
  double loss = 0;
  dcp::plan plan;
  std::size_t micro_steps = 0;        ///< this rank's micro-steps
  std::size_t recovered = 0;          ///< of which ran out of memory and were re-run fully checkpointed
  std::int64_t recomputed_blocks = 0;  ///< model blocks recomputed by this rank, summed over its micro-steps
  /// This rank's micro-steps as measured around forward+backward.
  std::vector<timed_step> timed;
};

/// The memory a rank has: `limit_bytes` per rank (0: no limit), of which `static_bytes` hold the
/// parameters, gradients and optimizer state; a step's peak is those plus its activation peak.
struct memory_limit {
  double limit_bytes = 0, static_bytes = 0;
};

/// Runs this rank's micro-steps of `p` forward and backward, adding the gradients into `g` (the
/// model's parameter count) and returning the summed loss; each step is measured into `out`.
/// Under a memory limit a step whose peak exceeds it on any member has run out of memory (the
/// thread's memory counter sees it; on a device the allocation would fail): every member of the
/// step learns it in one all-reduce over the step's group, drops what the attempt computed and
/// re-runs it with every block checkpointed, so the gradient stays exact (DESIGN 9.2).
/// `units` are the parameters' `Units` (`tiny_transformer::forward_backward`): whole on every
/// rank by default, or ZeRO-3's shards (zero3.hpp), which run without a memory limit (a step re-run
/// on one group would repeat the domain's gathers on its members only).
template <class T, class Scheduler, class Units>
T run_micro_steps(Scheduler& sched, tiny_transformer<T>& model, const synthetic_data& data, const dcp::plan& p,
                  recompute_mode mode, std::span<T> g, step_summary& out, memory_limit memory, Units& units) {
  auto steps = sched.steps_for(p);
  T loss = 0;
  const int L = model.config().blocks, cost_L = sched.cost().blocks();
  for (const auto& st : steps) {
    std::vector<segment> segs;
    for (const auto& q : st.sequences) segs.push_back({q.id, q.tokens, q.loss_weight / double(q.tokens)});
    const packed_shard shard = make_shard(data, segs, st.sp(), st.group_rank, st.ring, model.config().causal);
    const int k = mode == recompute_mode::plan ? map_checkpointed(st.checkpointed_blocks, cost_L, L)
                  : mode == recompute_mode::all ? L
                                                : 0;
    out.recomputed_blocks += k;
    auto* comm = st.ring > 1 ? &st.ulysses_comm() : st.sp() > 1 ? &st.comm() : nullptr;
    auto* ring = st.ring > 1 ? &st.ring_comm() : nullptr;
    dcp::memory_counter counter;
    double cpu0 = 0;
    std::chrono::steady_clock::time_point t0;
    // The clock starts when the whole group is here. A member that arrives early (its previous
    // steps were shorter) would otherwise wait inside the step's first collective, and count
    // that wait as the step's: in wall time always, and in CPU time under MPI, whose waits poll.
    // The first collective would make it wait anyway, so the barrier moves the wait, not adds one.
    if (st.sp() > 1) st.comm().barrier();
    // Under a limit the step's gradient is kept apart until every member ran within memory;
    // without one it accumulates in `g` directly.
    const bool limited = memory.limit_bytes > 0;
    std::vector<T> own(limited ? g.size() : 0, T(0));
    const std::span<T> into = limited ? std::span<T>(own) : g;
    T step_loss = 0;
    {
      dcp::memory_scope scope(counter);
      t0 = std::chrono::steady_clock::now(), cpu0 = thread_cpu_seconds();
      step_loss = model.forward_backward(shard, comm, k, into, ring, units);
    }
    timed_step t{st.index, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(),
                 thread_cpu_seconds() - cpu0, double(counter.peak_bytes())};
    if (limited) {
      double over[1] = {memory.static_bytes + t.activation_bytes > memory.limit_bytes ? 1.0 : 0.0};
      if (st.sp() > 1) st.comm().all_reduce(std::span<double>(over), dcp::reduce_op::max);
      if (over[0] > 0) {
        t.out_of_memory = true;
        ++out.recovered;
        std::fill(own.begin(), own.end(), T(0));
        out.recomputed_blocks += L - k;
        step_loss = model.forward_backward(shard, comm, L, into, ring, units);
      }
      for (std::size_t i = 0; i < g.size(); ++i) g[i] += own[i];
    }
    loss += step_loss;
    out.timed.push_back(t);
  }
  out.micro_steps += steps.size();
  return loss;
}

template <class T, class Scheduler>
T run_micro_steps(Scheduler& sched, tiny_transformer<T>& model, const synthetic_data& data, const dcp::plan& p,
                  recompute_mode mode, std::span<T> g, step_summary& out, memory_limit memory = {}) {
  whole_parameters<T> whole;
  return run_micro_steps(sched, model, data, p, mode, g, out, memory, whole);
}

/// Observes every measured step of `s` (calibration on): its CPU time and peak (the static bytes
/// plus its activation peak); a step that ran out of memory reports its peak and no time (it did
/// not run as planned), which widens the next plan's margin.
template <class Scheduler>
void observe_steps(Scheduler& sched, const step_summary& s, double static_bytes) {
  for (const auto& ts : s.timed)
    sched.observe(ts.index, ts.out_of_memory ? 0.0 : ts.cpu_s, static_bytes + ts.activation_bytes);
}

/// The start-up probe (calibration on, before the first plan; DESIGN 9.2): this rank's probe
/// micro-steps of the first batch run forward and backward, their gradients discarded and no
/// optimizer step. Observe them (`observe_steps`) before the next `sched.plan`, which learns
/// from them.
template <class T, class Scheduler>
step_summary probe_step(Scheduler& sched, tiny_transformer<T>& model, const synthetic_data& data,
                        std::span<const dcp::sequence> batch, memory_limit memory) {
  step_summary out;
  out.plan = sched.probe(batch);
  sched.verify(out.plan);
  std::vector<T> discarded(model.params().size(), T(0));
  (void)run_micro_steps(sched, model, data, out.plan, recompute_mode::plan, std::span<T>(discarded), out, memory);
  return out;
}

/// One training step under the scheduler's plan (collective over `sched.world()`).
/// Under a `memory` limit, a step over it is re-run fully checkpointed (`run_micro_steps`).
template <class T, class Scheduler>
step_summary train_step(Scheduler& sched, tiny_transformer<T>& model, optimizer<T>& opt, const synthetic_data& data,
                        std::span<const dcp::sequence> batch, recompute_mode mode = recompute_mode::plan,
                        memory_limit memory = {}) {
  step_summary out;
  out.plan = sched.plan(batch);
  sched.verify(out.plan);
  const std::size_t n = model.params().size();
  std::vector<T> g(n + 1, T(0));  // gradients, then the loss: one all-reduce
  const T loss = run_micro_steps(sched, model, data, out.plan, mode, std::span<T>(g).first(n), out, memory);
  g[n] = loss;
  sched.world().all_reduce(std::span<T>(g), dcp::reduce_op::sum);
  opt.step(std::span<T>(model.params()), std::span<const T>(g).first(n));
  out.loss = double(g[n]);
  return out;
}

/// The single-process reference: the whole batch as one full batch (one packed step, sp = 1,
/// nothing checkpointed), loss = mean token cross-entropy over the batch. Returns the loss.
template <class T>
double reference_step(tiny_transformer<T>& model, optimizer<T>& opt, const synthetic_data& data,
                      std::span<const dcp::sequence> batch) {
  std::int64_t total = 0;
  for (const auto& s : batch) total += s.shape_tokens();
  std::vector<segment> segs;
  for (const auto& s : batch) segs.push_back({s.id, s.shape_tokens(), 1.0 / double(total)});
  const packed_shard shard = make_shard(data, segs, 1, 0);
  std::vector<T> g(model.params().size(), T(0));
  const T loss = model.forward_backward(shard, static_cast<dcp::local_comm*>(nullptr), 0, std::span<T>(g));
  opt.step(std::span<T>(model.params()), std::span<const T>(g));
  return double(loss);
}

}  // namespace cpu_train
