#pragma once
// `optimal_plan`: the best plan of a small batch, by exhaustive dynamic programming over subsets
// (benchmark tooling: it tells how far a planner is from the optimum, and how far the lower
// bounds are from it). Same cost model, same plan rules as every planner: steps on aligned
// power-of-two blocks of legal sp, each with the fewest checkpointed blocks that fit
// (selective recompute), no GPU in two steps at once.
//
// Why the recursion is exact. Aligned power-of-two blocks form a tree (a block of sp = s is the
// union of its two halves). Give every step a block; GPU r is then busy for the summed times of
// the steps on the blocks that contain r, so no plan with that assignment ends before the
// largest such sum. Running the steps widest block first reaches it: a block's steps start when
// its ancestors' steps are done, and all members of a block share the same ancestors, so no
// GPU ever waits. Hence the optimum is the least, over assignments, of the largest root-to-leaf
// sum, which splits over the tree:
//   g_s(S) = least summed step time of S cut into steps that fit on s GPUs (a set partition);
//   f_1(S) = g_1(S);  f_s(S) = min over S0 in S of g_s(S0) + min over halves (A, B) of the rest
//   of max(f_{s/2}(A), f_{s/2}(B)).
// The optimum is f_N(batch). Cost: about 10 * 3^n operations for n sequences on N = 8 GPUs.

#include <algorithm>
#include <bit>
#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <vector>

#include <dcp/cost/cost_concepts.hpp>
#include <dcp/error.hpp>
#include <dcp/plan/plan.hpp>
#include <dcp/plan/plan_builder.hpp>
#include <dcp/plan/planning_context.hpp>
#include <dcp/plan/sequence_options.hpp>
#include <dcp/recompute/selective_recompute.hpp>
#include <dcp/sequence.hpp>

namespace dcp::bench {

/// Largest batch `optimal_plan` takes (3^16 is 43M subset pairs per table).
inline constexpr std::size_t optimal_plan_max_sequences = 16;

namespace detail {

template <cost_model C>
class exact_planning {
  using load_t = typename C::load_type;
  static constexpr double inf = std::numeric_limits<double>::infinity();

 public:
  exact_planning(const C& cost, std::span<const sequence> batch) : cost_(cost), seqs_(batch.begin(), batch.end()) {
    check(!seqs_.empty() && seqs_.size() <= optimal_plan_max_sequences, errc::invalid_argument, [&] {
      return "optimal_plan takes 1 to " + std::to_string(optimal_plan_max_sequences) + " sequences, not " +
             std::to_string(seqs_.size()) + "; plan a smaller batch";
    });
    const int n_gpus = cost.gpus();
    check(n_gpus > 0 && std::has_single_bit(static_cast<unsigned>(n_gpus)), errc::invalid_argument, [&] {
      return "optimal_plan needs a power-of-two GPU count, not " + std::to_string(n_gpus);
    });
    std::sort(seqs_.begin(), seqs_.end(), [](const sequence& a, const sequence& b) { return a.id < b.id; });
    n_ = seqs_.size();
    full_ = (std::uint32_t{1} << n_) - 1;
    std::vector<load_t> load(std::size_t{1} << n_);
    for (std::uint32_t m = 1; m <= full_; ++m) {
      const std::uint32_t low = m & (~m + 1);
      load[m] = load[m ^ low] + cost.load_of(seqs_[static_cast<std::size_t>(std::countr_zero(low))]);
    }
    for (int s = 1; s <= n_gpus; s *= 2) {
      level lv;
      lv.sp = s;
      lv.time.assign(std::size_t{1} << n_, inf);
      lv.k.assign(std::size_t{1} << n_, -1);
      if (legal_sp(cost, s)) {
        for (std::uint32_t m = 1; m <= full_; ++m) {
          const std::uint32_t low = m & (~m + 1);
          if ((m ^ low) != 0 && lv.k[m ^ low] < 0) continue;  // memory grows with the load
          if (auto k = selective_recompute{}.choose(cost, load[m], s)) {
            lv.k[m] = static_cast<std::int8_t>(*k);
            lv.time[m] = cost.time(load[m], s, *k);
          }
        }
      }
      lv.g = partitions(lv.time);
      levels_.push_back(std::move(lv));
    }
    // Subtree tables, narrowest first.
    levels_[0].f = levels_[0].g;
    for (std::size_t l = 1; l < levels_.size(); ++l) {
      auto& lv = levels_[l];
      lv.halves.assign(std::size_t{1} << n_, inf);
      const auto& below = levels_[l - 1].f;
      for (std::uint32_t m = 0; m <= full_; ++m) {
        if (m == 0) {
          lv.halves[0] = 0;
          continue;
        }
        const std::uint32_t low = m & (~m + 1), rest = m ^ low;
        double best = inf;
        for (std::uint32_t sub = rest;; sub = (sub - 1) & rest) {  // the half holding the lowest
          best = std::min(best, std::max(below[sub | low], below[m ^ (sub | low)]));
          if (sub == 0) break;
        }
        lv.halves[m] = best;
      }
      lv.f.assign(std::size_t{1} << n_, inf);
      for (std::uint32_t m = 0; m <= full_; ++m) {
        double best = lv.halves[m];  // S0 empty
        for (std::uint32_t sub = m; sub != 0; sub = (sub - 1) & m)
          if (lv.g[sub] < inf) best = std::min(best, lv.g[sub] + lv.halves[m ^ sub]);
        lv.f[m] = best;
      }
    }
  }

  double makespan() const { return levels_.back().f[full_]; }

  /// The plan that reaches `makespan()`, built with `plan_builder` (so it carries the bounds).
  plan build(const std::string& method) const {
    check(makespan() < inf, errc::infeasible, [] { return std::string("optimal_plan: some sequence fits no configuration"); });
    std::vector<placed> steps;
    emit(levels_.size() - 1, full_, 0, steps);
    std::stable_sort(steps.begin(), steps.end(), [](const placed& a, const placed& b) { return a.sp > b.sp; });
    plan_builder<C> b(cost_, method);
    for (const auto& st : steps) {
      std::vector<sequence> members;
      for (std::size_t i = 0; i < n_; ++i)
        if (st.members >> i & 1u) members.push_back(seqs_[i]);
      b.place(b.make_step(members, {st.first, st.sp}, st.k));
    }
    return std::move(b).finish(default_groups(cost_), seqs_, loss_normalization::token_mean);
  }

 private:
  struct level {
    int sp = 1;
    std::vector<double> time;   // one step of the subset on sp GPUs (inf: does not fit)
    std::vector<std::int8_t> k;  // its checkpointed blocks (-1: does not fit)
    std::vector<double> g;      // best cut of the subset into steps on one block
    std::vector<double> halves;  // best split of the subset over the two halves
    std::vector<double> f;      // best subtree makespan of the subset
  };
  struct placed {
    int sp, first, k;
    std::uint32_t members;
  };

  std::vector<double> partitions(const std::vector<double>& time) const {
    std::vector<double> g(std::size_t{1} << n_, inf);
    g[0] = 0;
    for (std::uint32_t m = 1; m <= full_; ++m) {
      const std::uint32_t low = m & (~m + 1), rest = m ^ low;
      double best = inf;
      for (std::uint32_t sub = rest;; sub = (sub - 1) & rest) {
        const std::uint32_t step = sub | low;
        if (time[step] < inf) best = std::min(best, time[step] + g[m ^ step]);
        if (sub == 0) break;
      }
      g[m] = best;
    }
    return g;
  }

  // Walks the tables back: the same expressions, so the minimum is found by equality.
  void emit(std::size_t l, std::uint32_t m, int first, std::vector<placed>& out) const {
    if (m == 0) return;
    const level& lv = levels_[l];
    if (l == 0) return emit_steps(lv, m, first, out);
    std::uint32_t s0 = 0;
    if (lv.halves[m] != lv.f[m]) {
      for (std::uint32_t sub = m; sub != 0; sub = (sub - 1) & m)
        if (lv.g[sub] < inf && lv.g[sub] + lv.halves[m ^ sub] == lv.f[m]) {
          s0 = sub;
          break;
        }
    }
    emit_steps(lv, s0, first, out);
    const std::uint32_t rest = m ^ s0;
    if (rest == 0) return;
    const auto& below = levels_[l - 1].f;
    const std::uint32_t low = rest & (~rest + 1), rr = rest ^ low;
    for (std::uint32_t sub = rr;; sub = (sub - 1) & rr) {
      const std::uint32_t a = sub | low;
      if (std::max(below[a], below[rest ^ a]) == lv.halves[rest]) {
        emit(l - 1, a, first, out);
        emit(l - 1, rest ^ a, first + lv.sp / 2, out);
        return;
      }
      if (sub == 0) break;
    }
  }
  void emit_steps(const level& lv, std::uint32_t m, int first, std::vector<placed>& out) const {
    while (m != 0) {
      const std::uint32_t low = m & (~m + 1), rest = m ^ low;
      std::uint32_t found = 0;
      for (std::uint32_t sub = rest;; sub = (sub - 1) & rest) {
        const std::uint32_t step = sub | low;
        if (lv.time[step] < inf && lv.time[step] + lv.g[m ^ step] == lv.g[m]) {
          found = step;
          break;
        }
        if (sub == 0) break;
      }
      if (found == 0) return;  // cannot happen for a finite table entry; the plan check would say so
      out.push_back({lv.sp, first, lv.k[found], found});
      m ^= found;
    }
  }

  const C& cost_;
  std::vector<sequence> seqs_;
  std::size_t n_ = 0;
  std::uint32_t full_ = 0;
  std::vector<level> levels_;
};

}  // namespace detail

/// The best plan of `batch` (at most `optimal_plan_max_sequences` sequences, each of which fits
/// somewhere) on `cost`'s N GPUs (a power of two), under selective recompute.
template <cost_model C>
plan optimal_plan(const C& cost, std::span<const sequence> batch) {
  return detail::exact_planning<C>(cost, batch).build("optimal");
}

}  // namespace dcp::bench
