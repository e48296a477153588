#pragma once
/// \file
/// `plan`: how N GPUs run one global batch (DESIGN section 6). A list of micro-steps, each a
/// set of sequences on an aligned block of `sp` ranks with `k` checkpointed blocks, placed on the
/// cost model's clock. The steps a rank takes part in, in start order, are its gradient
/// accumulation for the batch.

#include <algorithm>
#include <bit>
#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include <dcp/group/group_concepts.hpp>
#include <dcp/layout.hpp>

namespace dcp {

/// How per-sequence losses are weighted so the summed gradient is the full-batch gradient.
enum class loss_normalization {
  token_mean,   ///< w_i = n_i / sum n (every token counts the same)
  sample_mean,  ///< w_i = 1 / B (every sequence counts the same)
};

/// What a planner does with a sequence that fits no configuration.
enum class infeasible_policy {
  error,  ///< throw `dcp::error` (errc::infeasible) naming the id, length and the largest length that fits
  skip,   ///< leave it out of the plan and list it in `plan::skipped`
};

inline std::ostream& operator<<(std::ostream& os, loss_normalization n) {
  return os << (n == loss_normalization::token_mean ? "token_mean" : "sample_mean");
}
inline std::ostream& operator<<(std::ostream& os, infeasible_policy p) {
  return os << (p == infeasible_policy::error ? "error" : "skip");
}

/// One sequence of a micro-step.
struct planned_sequence {
  std::int64_t id = 0;
  std::int64_t tokens = 0;  ///< tokens the model sees (shape plus text tokens)
  std::int64_t frames = 1;
  std::int64_t spatial = 0;
  double loss_weight = 0;  ///< scale of this sequence's mean token loss (weights of a batch sum to 1)
  friend bool operator==(const planned_sequence&, const planned_sequence&) = default;
};

/// One micro-step: sequences run together on `ranks` (an aligned block of `ranks.size` = sp GPUs).
/// Execution order is explicit, so a plan runs correctly on any clock: each rank runs its steps
/// in plan order, a gang step starts when all its members are free, and a step of round r + 1
/// starts only after every step of round r has ended on every GPU (a global barrier, such as
/// the gradient all-reduce between lockstep iterations). Start times are the planner's
/// prediction on its cost model, never a rule.
struct plan_step {
  rank_block ranks;
  int checkpointed_blocks = 0;
  double start_s = 0;       ///< gang start: all members free and earlier rounds ended
  double time_s = 0;        ///< cost model time of the step (over its slowest member's speed)
  double memory_bytes = 0;  ///< cost model memory per GPU of the step
  std::vector<planned_sequence> sequences;
  int round = 0;  ///< barrier round: waits for every step of earlier rounds
  /// Ulysses x Ring split (DESIGN section 4.3): sp = ulysses() x ring. Ranks
  /// [first + j u, first + (j + 1) u) form Ulysses group j; rank first + j u + i is position j
  /// of ring i. 1 = Ulysses over all sp ranks.
  int ring = 1;

  int sp() const noexcept { return ranks.size; }
  /// Ranks of one Ulysses group (u = sp / ring).
  int ulysses() const noexcept { return ring > 0 ? ranks.size / ring : ranks.size; }
  double end_s() const noexcept { return start_s + time_s; }
  friend bool operator==(const plan_step&, const plan_step&) = default;
};

/// A sequence left out under `infeasible_policy::skip`, with the reason.
struct skipped_sequence {
  std::int64_t id = 0;
  std::int64_t tokens = 0;
  std::string reason;
  friend bool operator==(const skipped_sequence&, const skipped_sequence&) = default;
};

/// The plan of one global batch.
struct plan {
  std::string method;  ///< planner that made it ("dcp", "bucket", ...)
  int gpus = 0;        ///< planner units (TP groups): `layout.units()`
  int gpus_per_node = 0;  ///< units per node: `layout.units_per_node()`
  /// The job's layout it was planned on: unit u is GPUs `layout.gpus_of({u, 1})`, tp of them.
  parallel_layout layout{};
  double memory_capacity_bytes = 0;
  std::vector<plan_step> steps;  ///< ordered by (start_s, first rank)
  double makespan_s = 0;         ///< end of the last step
  double lower_bound_s = 0;      ///< DESIGN section 3 simple lower bound of the batch
  double joint_lower_bound_s = 0;  ///< DESIGN section 3 joint lower bound (>= lower_bound_s)
  std::vector<skipped_sequence> skipped;
  std::vector<double> speeds;    ///< per-GPU speed factors the plan was made for; empty = all 1
  /// Under pp > 1: stage s runs warmup_depth (P - 1 - s) forwards before its first backward (1 is
  /// 1F1B; `pipeline_schedule.hpp`).
  int warmup_depth = 1;

  /// The tightest lower bound the plan carries: the joint one (the simple one for a plan
  /// made without it).
  double bound_s() const noexcept { return std::max(lower_bound_s, joint_lower_bound_s); }
  /// bound_s() / makespan, in (0, 1] (1 for an empty plan).
  double efficiency() const noexcept { return makespan_s > 0 ? bound_s() / makespan_s : 1.0; }
  /// lower_bound_s / makespan: efficiency against the simple bound.
  double simple_efficiency() const noexcept { return makespan_s > 0 ? lower_bound_s / makespan_s : 1.0; }

  /// Indices into `steps` of the steps `rank` takes part in, in start order.
  std::vector<std::size_t> steps_of(int rank) const {
    std::vector<std::size_t> out;
    for (std::size_t i = 0; i < steps.size(); ++i)
      if (steps[i].ranks.contains(rank)) out.push_back(i);
    return out;
  }

  /// Busy seconds of every rank.
  std::vector<double> busy_per_rank() const {
    std::vector<double> busy(static_cast<std::size_t>(std::max(gpus, 0)), 0.0);
    for (const auto& s : steps)
      for (int r = s.ranks.first; r < s.ranks.end() && r < gpus; ++r) busy[static_cast<std::size_t>(r)] += s.time_s;
    return busy;
  }

  /// 64-bit FNV-1a over everything that decides execution (placement, sequences, weights,
  /// recompute), stable across platforms; ranks compare it to check they agree.
  std::uint64_t hash() const noexcept {
    std::uint64_t h = 0xcbf29ce484222325ull;
    auto mix = [&h](std::uint64_t v) {
      for (int i = 0; i < 8; ++i) {
        h ^= (v >> (8 * i)) & 0xffu;
        h *= 0x100000001b3ull;
      }
    };
    auto mix_double = [&mix](double d) { mix(std::bit_cast<std::uint64_t>(d)); };
    for (char c : method) mix(static_cast<unsigned char>(c));
    mix(static_cast<std::uint64_t>(gpus));
    if (layout.tp != 1) mix(0x7470ull ^ static_cast<std::uint64_t>(layout.tp));  // tp = 1 plans hash as before
    if (layout.pp != 1) mix(0x7070ull ^ static_cast<std::uint64_t>(layout.pp));  // pp = 1 plans hash as before
    if (warmup_depth != 1) mix(0x77647468ull ^ static_cast<std::uint64_t>(warmup_depth));
    mix(static_cast<std::uint64_t>(steps.size()));
    for (const auto& s : steps) {
      mix(static_cast<std::uint64_t>(s.ranks.first));
      mix(static_cast<std::uint64_t>(s.ranks.size));
      mix(static_cast<std::uint64_t>(s.checkpointed_blocks));
      mix(static_cast<std::uint64_t>(s.round));
      if (s.ring != 1) mix(0x72696e67ull ^ static_cast<std::uint64_t>(s.ring));  // Ulysses-only plans hash as before
      mix_double(s.start_s);
      mix(static_cast<std::uint64_t>(s.sequences.size()));
      for (const auto& q : s.sequences) {
        mix(static_cast<std::uint64_t>(q.id));
        mix(static_cast<std::uint64_t>(q.tokens));
        mix_double(q.loss_weight);
      }
    }
    for (const auto& k : skipped) mix(static_cast<std::uint64_t>(k.id));
    for (double v : speeds) mix_double(v);
    return h;
  }

  friend bool operator==(const plan&, const plan&) = default;
};

inline std::ostream& operator<<(std::ostream& os, const plan& p) {
  return os << "plan{" << p.method << ", " << p.steps.size() << " steps on " << p.gpus
            << " GPUs, makespan=" << p.makespan_s << " s, lower_bound=" << p.lower_bound_s
            << " s, joint_lower_bound=" << p.joint_lower_bound_s << " s}";
}

}  // namespace dcp
