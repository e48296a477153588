#pragma once
/// \file
/// `dynamic_cp_planner`: Megatron-Core's dynamic (hybrid) context parallelism, the per-sequence
/// baseline of DESIGN section 3 ("Baselines").
///
/// - sp_i = the next power of two of ceil(n_i / x_max): the smallest group that holds the
///   sequence with every block checkpointed (x_max = `max_tokens_per_gpu(cost)`), widened to
///   the next legal size when that one does not divide the heads.
/// - Work estimate w_i = n_i^2 / sp_i; sequences are taken by w_i, descending, and each goes to
///   the aligned group of its sp with the least accumulated work (the busiest member's), packed
///   into that group's open micro-step while the step stays within x_max tokens per GPU.
/// - Every step checkpoints all blocks. The steps are then timed on the true cost model, in the
///   order they were opened, each starting when all its members are free (gang start).
/// The estimate ignores fixed overheads and communication, which is what the real scheduler
/// leaves on the table.

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <ostream>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include <dcp/cost/cost_concepts.hpp>
#include <dcp/error.hpp>
#include <dcp/plan/plan.hpp>
#include <dcp/plan/plan_builder.hpp>
#include <dcp/plan/plan_concepts.hpp>
#include <dcp/plan/sequence_options.hpp>
#include <dcp/plan/tuning.hpp>
#include <dcp/recompute/full_recompute.hpp>
#include <dcp/recompute/recompute_concepts.hpp>
#include <dcp/sequence.hpp>

namespace dcp {

namespace detail {

// Accumulated work of every rank, and for each level l (aligned blocks of 2^l ranks) a min tree
// over the blocks' busiest member, so "the least loaded block of size sp" is O(log N) and adding
// work to a block of size s costs O((s + log N) log N).
class block_work {
 public:
  block_work(int gpus, int levels) {
    for (int l = 0; l < levels; ++l) {
      const int count = gpus >> l;
      level lv;
      lv.count = count;
      while (lv.leaves < static_cast<std::size_t>(std::max(count, 1))) lv.leaves *= 2;
      lv.value.assign(static_cast<std::size_t>(count), 0.0);
      lv.tree.assign(2 * lv.leaves, inf());
      for (int i = 0; i < count; ++i) lv.tree[lv.leaves + static_cast<std::size_t>(i)] = 0.0;
      for (std::size_t x = lv.leaves - 1; x >= 1; --x) lv.tree[x] = std::min(lv.tree[2 * x], lv.tree[2 * x + 1]);
      levels_.push_back(std::move(lv));
    }
  }

  // The block of 2^l ranks whose busiest member has the least work (lowest index on ties).
  int least(int l) const {
    const level& lv = levels_[static_cast<std::size_t>(l)];
    std::size_t x = 1;
    while (x < lv.leaves) x = lv.tree[2 * x] <= lv.tree[2 * x + 1] ? 2 * x : 2 * x + 1;
    return static_cast<int>(x - lv.leaves);
  }

  // Adds `w` to every rank of block `i` of level `l`.
  void add(int l, int i, double w) {
    // Every block inside it, at every level up to l, gains w.
    for (int m = 0; m <= l; ++m) {
      const int span = 1 << (l - m);
      for (int j = i * span; j < (i + 1) * span; ++j) set(m, j, levels_[static_cast<std::size_t>(m)].value[static_cast<std::size_t>(j)] + w);
    }
    // Enclosing blocks: their busiest member may have changed.
    for (int m = l + 1, j = i / 2; m < static_cast<int>(levels_.size()); ++m, j /= 2) {
      const level& below = levels_[static_cast<std::size_t>(m - 1)];
      if (j >= levels_[static_cast<std::size_t>(m)].count) break;
      set(m, j, std::max(below.value[static_cast<std::size_t>(2 * j)], below.value[static_cast<std::size_t>(2 * j + 1)]));
    }
  }

 private:
  struct level {
    int count = 0;
    std::size_t leaves = 1;
    std::vector<double> value;
    std::vector<double> tree;
  };
  static constexpr double inf() { return std::numeric_limits<double>::infinity(); }

  void set(int l, int i, double v) {
    level& lv = levels_[static_cast<std::size_t>(l)];
    lv.value[static_cast<std::size_t>(i)] = v;
    std::size_t x = lv.leaves + static_cast<std::size_t>(i);
    lv.tree[x] = v;
    for (x /= 2; x >= 1; x /= 2) lv.tree[x] = std::min(lv.tree[2 * x], lv.tree[2 * x + 1]);
  }

  std::vector<level> levels_;
};

}  // namespace detail

struct dynamic_cp_planner {
  using policy_concept = planner_tag;

  loss_normalization loss = loss_normalization::token_mean;
  infeasible_policy on_infeasible = infeasible_policy::error;

  std::string name() const { return "dynamic_cp"; }

  /// sp of a sequence of `tokens` model tokens: the next power of two of ceil(tokens / x_max),
  /// then the next legal size that holds it with all blocks checkpointed (0 when none does).
  template <cost_model C>
  static int sp_of(const C& cost, const sequence& s) {
    const double x_max = max_tokens_per_gpu(cost);
    const double need = std::ceil(static_cast<double>(cost.tokens_of(s)) / x_max);
    int sp = need <= 1 ? 1 : static_cast<int>(std::bit_ceil(static_cast<std::uint64_t>(need)));
    for (; sp > 0 && sp <= cost.gpus(); sp *= 2)
      if (legal_sp(cost, sp) && fits_checkpointed(cost, s, sp)) return sp;
    return 0;
  }

  /// Plans one global batch (all blocks checkpointed; the recompute policy is not used).
  template <cost_model C, class Recompute = full_recompute>
    requires recompute_policy<Recompute>
  dcp::plan plan(const C& cost, std::span<const sequence> batch, const Recompute& = {}) const {
    std::vector<skipped_sequence> skipped;
    std::vector<sequence> all = feasible_sequences(cost, batch, on_infeasible, skipped), seqs;
    struct item {
      sequence seq;
      int sp;
      std::int64_t tokens;
      double work;
    };
    std::vector<item> items;
    items.reserve(all.size());
    int widest = 1;
    for (const auto& s : all) {
      const int sp = sp_of(cost, s);
      if (sp == 0) {  // fits some legal sp, but not with the power-of-two rule (cannot happen with
                      // the analytic model); reported like any infeasible sequence
        if (on_infeasible == infeasible_policy::skip) {
          skipped.push_back({s.id, cost.tokens_of(s), infeasible_error(cost, s).what()});
          continue;
        }
        throw infeasible_error(cost, s);
      }
      const double n = static_cast<double>(cost.tokens_of(s));
      items.push_back({s, sp, cost.tokens_of(s), n * n / sp});
      seqs.push_back(s);
      widest = std::max(widest, sp);
    }
    std::sort(items.begin(), items.end(), [](const item& a, const item& b) {
      return a.work != b.work ? a.work > b.work : a.seq.id < b.seq.id;
    });

    const int L = cost.blocks();
    const double x_max = max_tokens_per_gpu(cost);
    detail::block_work work(cost.gpus(), std::countr_zero(static_cast<unsigned>(widest)) + 1);
    struct open_step {
      rank_block ranks;
      std::vector<sequence> seqs;
      typename C::load_type load{};
      std::int64_t tokens = 0;
    };
    std::vector<open_step> steps;
    // The open micro-step of every block: index into `steps` per (level, block), or -1.
    std::vector<std::vector<std::ptrdiff_t>> open(static_cast<std::size_t>(std::countr_zero(static_cast<unsigned>(widest)) + 1));
    for (std::size_t l = 0; l < open.size(); ++l) open[l].assign(static_cast<std::size_t>(cost.gpus() >> l), -1);

    for (const auto& it : items) {
      const int l = std::countr_zero(static_cast<unsigned>(it.sp));
      const int b = work.least(l);
      work.add(l, b, it.work);
      auto& slot = open[static_cast<std::size_t>(l)][static_cast<std::size_t>(b)];
      const auto load = cost.load_of(it.seq);
      if (slot >= 0) {
        open_step& st = steps[static_cast<std::size_t>(slot)];
        const auto next = st.load + load;
        if (static_cast<double>(st.tokens + it.tokens) / it.sp <= x_max && cost.memory(next, it.sp, L) <= cost.capacity()) {
          st.seqs.push_back(it.seq);
          st.load = next;
          st.tokens += it.tokens;
          continue;
        }
      }
      slot = static_cast<std::ptrdiff_t>(steps.size());
      steps.push_back({rank_block{b * it.sp, it.sp}, {it.seq}, load, it.tokens});
    }

    plan_builder<C> builder(cost, name());
    for (const auto& st : steps) builder.place(builder.make_step(st.seqs, st.ranks, L));
    builder.skip(std::move(skipped));
    return std::move(builder).finish(seqs, loss);
  }

  friend bool operator==(const dynamic_cp_planner&, const dynamic_cp_planner&) = default;
  friend std::ostream& operator<<(std::ostream& os, const dynamic_cp_planner& p) {
    return os << "dynamic_cp_planner{loss=" << p.loss << ", on_infeasible=" << p.on_infeasible << "}";
  }
};

static_assert(planner<dynamic_cp_planner>);

}  // namespace dcp
