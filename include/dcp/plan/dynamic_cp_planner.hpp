#pragma once
/// \file
/// `dynamic_cp_planner`: Megatron-Core's dynamic context parallelism (the `default_dynamic_cp`
/// packing scheduler with `--dynamic-context-parallel`), the per-sequence baseline of DESIGN
/// section 3 ("Baselines"), reimplemented from the algorithm's description.
///
/// - A per-rank token limit `max_tokens_per_rank` (Megatron's `--max-seqlen-per-dp-cp-rank`)
///   sets each sequence's smallest CP size: the next power of two of ceil(n / limit), at least
///   `min_cp_size` (`--min-dynamic-context-parallel-size`).
/// - The batch, longest first, is cut into micro-batches that each span every GPU (the DPxCP
///   domain). A micro-batch opens with the longest remaining sequence on its smallest CP group;
///   its workload cap is that sequence's length x the limit x 1.05 (per-rank work is estimated
///   as n^2 / cp). Every other remaining sequence, longest first, goes where the busiest rank of
///   the micro-batch ends least loaded: packed (THD) into an existing group of some CP size
///   >= its smallest while the group's tokens per rank stay within the limit, or on a new group
///   of free ranks; the first such option wins ties (smaller CP, older group, packing before a new
///   group). A sequence whose every option passes the cap waits for the next micro-batch.
/// - Ranks left without a sequence are filled by doubling the smallest (oldest first) group until
///   every rank has work. Megatron falls back to one group over the whole domain when doubling
///   cannot fill it; a CP group here must be a legal Ulysses size (a power of two dividing the
///   heads), so where that fallback would be illegal the remaining ranks sit out the micro-batch.
/// - Micro-batches are consumed in order with no barrier between them: a group's step starts when
///   all its members are free (the CP collectives), and the gradient sync ends the batch. Groups
///   of a micro-batch go on the group manager's blocks, widest first, each on the first block in
///   the manager's order whose ranks are still free (consecutive aligned blocks for
///   `buddy_groups`). Every step checkpoints `recompute_level`'s blocks (Megatron's
///   `--recompute-num-layers`, tuned with the limit); steps are priced on the true cost model.
/// - `pad_sequences` pads every length the scheduler sees to a multiple of 2 x N (the DPxCP
///   domain), as Megatron's THD datasets do under dynamic CP; a step is still priced on its real
///   tokens (a plan carries no pad tokens).
///
/// The limit and the recompute level are tuned as Megatron's users tune them (`dcp::tune`,
/// `<dcp/workload/tuning.hpp>`): at each recompute level, each fraction of x_max in
/// `fill_candidates` (the memory maximum at that level divided by 1, 2, ..., 32) is simulated on
/// the workload and the fastest pair wins. An untuned planner
/// (`max_tokens_per_rank == 0`) is a `dcp::error` naming `dcp::tune`: it never tunes itself.

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

#include <dcp/compiled.hpp>
#include <dcp/cost/cost_concepts.hpp>
#include <dcp/error.hpp>
#include <dcp/plan/feasibility.hpp>
#include <dcp/plan/fixed_sp.hpp>
#include <dcp/plan/plan.hpp>
#include <dcp/plan/plan_builder.hpp>
#include <dcp/plan/plan_concepts.hpp>
#include <dcp/plan/sequence_options.hpp>
#include <dcp/recompute/full_recompute.hpp>
#include <dcp/recompute/recompute_concepts.hpp>
#include <dcp/sequence.hpp>

namespace dcp {

struct dynamic_cp_planner {
  using policy_concept = planner_tag;

  loss_normalization loss = loss_normalization::token_mean;
  infeasible_policy on_infeasible = infeasible_policy::error;
  std::int64_t max_tokens_per_rank = 0;  ///< per-rank token limit; 0 = untuned (`dcp::tune` chooses it)
  int min_cp_size = 1;                   ///< the smallest CP size any sequence gets
  bool pad_sequences = false;            ///< schedule lengths padded to a multiple of 2 x N
  uniform_recompute recompute_level{};         ///< checkpointed blocks of every step (tuned with the limit)

  /// Megatron's workload cap over the opening sequence's length x the limit.
  static constexpr double workload_cap_slack = 0.05;

  std::string name() const { return "dynamic_cp"; }

  /// The tokens the scheduler sees for `tokens` model tokens on `gpus` GPUs.
  std::int64_t scheduled_tokens(std::int64_t tokens, int gpus) const noexcept {
    if (!pad_sequences) return tokens;
    const std::int64_t m = 2 * std::int64_t{gpus};
    return (tokens + m - 1) / m * m;
  }

  /// The smallest CP size of a sequence of `tokens` scheduled tokens under `limit`: the next power
  /// of two of ceil(tokens / limit), at least `min_cp_size`.
  std::int64_t cp_size_of(std::int64_t tokens, std::int64_t limit) const noexcept {
    std::int64_t cp = 1;
    while (cp * limit < tokens) cp *= 2;
    return std::max<std::int64_t>(cp, min_cp_size);
  }

  /// Throws `dcp::error(errc::invalid_argument)` naming the knob unless the knobs suit `cost`
  /// (validated first).
  template <cost_model C>
  void validate(const C& cost) const {
    if constexpr (validated_cost_model<C>) cost.validate();
    recompute_level.validate(cost);
    const int k = recompute_level.of(cost);
    const auto x_max = static_cast<std::int64_t>(max_tokens_per_gpu(cost, k));
    check(max_tokens_per_rank >= 0 && max_tokens_per_rank <= x_max, errc::invalid_argument, [&] {
      return "dynamic_cp max_tokens_per_rank = " + std::to_string(max_tokens_per_rank) + " must be in [1, " +
             std::to_string(x_max) + "] (the tokens per GPU that fit with " + std::to_string(k) + " of " +
             std::to_string(cost.blocks()) + " blocks checkpointed), or tune it with dcp::tune";
    });
    check(legal_sp(cost, min_cp_size) && std::has_single_bit(static_cast<unsigned>(min_cp_size)),
          errc::invalid_argument, [&] {
            const auto top = widest_power_of_two(legal_sp_sizes(cost));
            return "dynamic_cp min_cp_size = " + std::to_string(min_cp_size) + " is not a legal CP size on " +
                   std::to_string(cost.gpus()) + " GPUs with " + std::to_string(cost.heads()) +
                   " heads; use a power of two <= " + std::to_string(top) + " (1 = no minimum)";
          });
  }

  /// True when every sequence of `seqs` gets a CP size the context offers under the limit.
  template <any_planning_context Ctx>
  bool holds_all(const Ctx& ctx, std::span<const sequence> seqs) const {
    const std::int64_t top = widest(ctx);
    return std::all_of(seqs.begin(), seqs.end(), [&](const sequence& s) { return holds(ctx.cost, s, top); });
  }

  /// "max 36583 tokens per rank (x_max / 8), recompute 12/48": the tuned setting, for reports
  /// (x_max at the recompute level).
  template <cost_model C>
  std::string tuned_setting(const C& cost) const {
    const int k = recompute_level.of(cost);
    const double ratio =
        max_tokens_per_gpu(cost, k) / static_cast<double>(std::max<std::int64_t>(1, max_tokens_per_rank));
    std::string out = "max " + std::to_string(max_tokens_per_rank) + " tokens per rank (x_max / " +
                      std::to_string(static_cast<long long>(std::llround(ratio))) + "), recompute " +
                      std::to_string(k) + "/" + std::to_string(cost.blocks());
    if (min_cp_size > 1) out += ", min cp " + std::to_string(min_cp_size);
    if (pad_sequences) out += ", padded to 2N";
    return out;
  }

  /// Plans one global batch on the context's blocks, every step checkpointing `recompute_level`'s blocks
  /// (the context's recompute policy is not used). CP sizes go up to the widest legal size the group manager offers.
  template <any_planning_context Ctx>
  dcp::plan plan(const Ctx& ctx, std::span<const sequence> batch) const {
    return plan(ctx, batch, nullptr);
  }
  /// `plan(ctx, batch)` given the lower bounds of the sequences it plans (a planner that builds
  /// this plan as one of its candidates has them; the plan carries them as they are).
  template <any_planning_context Ctx>
  dcp::plan plan(const Ctx& ctx, std::span<const sequence> batch, const batch_bounds& known) const {
    return plan(ctx, batch, &known);
  }
  /// On `default_groups(cost)`.
  template <cost_model C, recompute_policy Recompute = full_recompute>
  dcp::plan plan(const C& cost, std::span<const sequence> batch, const Recompute& recompute = {}) const {
    return plan_on_default_groups(*this, cost, batch, recompute);
  }

  friend bool operator==(const dynamic_cp_planner&, const dynamic_cp_planner&) = default;
  friend std::ostream& operator<<(std::ostream& os, const dynamic_cp_planner& p) {
    return os << "dynamic_cp_planner{max_tokens_per_rank=" << p.max_tokens_per_rank << ", recompute_level=" << p.recompute_level
              << ", min_cp_size=" << p.min_cp_size
              << ", pad_sequences=" << (p.pad_sequences ? "true" : "false") << ", loss=" << p.loss
              << ", on_infeasible=" << p.on_infeasible << "}";
  }

 private:
  // Out of the class, so that it is not inline: the compiled mode (<dcp/compiled.hpp>) declares
  // its common instantiations extern.
  template <any_planning_context Ctx>
  dcp::plan plan(const Ctx& ctx, std::span<const sequence> batch, const batch_bounds* known) const;

  // One CP group of a micro-batch: its size, the estimated work and tokens of each member, and
  // its sequences (indices into the sorted batch).
  template <class Load>
  struct cp_group_of {
    std::int64_t size = 1;
    double work = 0;
    double tokens_per_rank = 0;
    std::vector<std::size_t> members;
    Load load{};
  };

  // The widest CP size: Megatron-Core rounds CP sizes to powers of two, so only those of the
  // sizes the context offers count (every smaller power of two is then offered too: it is legal,
  // and a manager offering a power of two offers its halves, as buddy and contiguous blocks do).
  template <any_planning_context Ctx>
  static std::int64_t widest(const Ctx& ctx) {
    return widest_power_of_two(ctx.sp_sizes());
  }
  // The widest power of two of ascending `sizes` (1 when there is none).
  static int widest_power_of_two(const std::vector<int>& sizes) {
    int top = 1;
    for (int sp : sizes)
      if (std::has_single_bit(static_cast<unsigned>(sp))) top = sp;
    return top;
  }

  // True when `s` gets a CP size of at most `top` (the widest legal one) under the current limit.
  template <cost_model C>
  bool holds(const C& cost, const sequence& s, std::int64_t top) const {
    return cp_size_of(scheduled_tokens(cost.tokens_of(s), cost.gpus()), max_tokens_per_rank) <= top;
  }

  // Cuts `seqs` into micro-batches (the packing-aware group search) and places their steps in
  // order, each group's step as soon as all its members are free.
  template <cost_model C, any_planning_context Ctx>
  void place(plan_builder<C>& builder, const Ctx& ctx, std::span<const sequence> seqs) const {
    using cp_group = cp_group_of<typename C::load_type>;
    const C& cost = ctx.cost;
    const std::int64_t top = widest(ctx);
    const int k = recompute_level.of(cost);
    std::vector<std::int64_t> len(seqs.size());
    std::vector<typename C::load_type> load(seqs.size());
    std::vector<std::size_t> remaining(seqs.size());
    for (std::size_t i = 0; i < seqs.size(); ++i) {
      len[i] = scheduled_tokens(cost.tokens_of(seqs[i]), cost.gpus());
      load[i] = cost.load_of(seqs[i]);
      remaining[i] = i;
    }
    // Longest first; ids break ties so the plan does not depend on the batch's order.
    std::sort(remaining.begin(), remaining.end(), [&](std::size_t a, std::size_t b) {
      return len[a] != len[b] ? len[a] > len[b] : seqs[a].id < seqs[b].id;
    });
    std::vector<sequence> members;
    std::vector<char> taken;  // ranks of this micro-batch
    std::vector<int> cursor(static_cast<std::size_t>(std::countr_zero(static_cast<std::uint64_t>(top))) + 1);  // log2
    while (!remaining.empty()) {
      std::vector<cp_group> groups = micro_batch(cost, top, len, load, remaining);
      std::stable_sort(groups.begin(), groups.end(), [](const cp_group& a, const cp_group& b) { return a.size > b.size; });
      // Widest first, each on the manager's first block whose ranks this micro-batch has not
      // used (on buddy blocks: consecutive aligned blocks). Taken ranks only grow, so a cursor
      // per size skips blocks already found taken.
      taken.assign(static_cast<std::size_t>(cost.gpus()), 0);
      cursor.assign(cursor.size(), 0);
      for (const auto& g : groups) {
        members.clear();
        for (std::size_t i : g.members) members.push_back(seqs[i]);
        const int size = static_cast<int>(g.size);
        int& i = cursor[static_cast<std::size_t>(std::countr_zero(static_cast<unsigned>(size)))];
        const int count = ctx.groups.block_count(size);
        auto is_free = [&](rank_block b) {
          return std::none_of(taken.begin() + b.first, taken.begin() + b.end(), [](char c) { return c != 0; });
        };
        while (i < count && !is_free(ctx.groups.block(size, i))) ++i;
        check(i < count, errc::invalid_argument, [&] {
          return "dynamic_cp: the group manager has no free block of " + std::to_string(size) +
                 " ranks left for a micro-batch; its blocks must tile the ranks as aligned blocks do";
        });
        const rank_block ranks = ctx.groups.block(size, i);
        std::fill(taken.begin() + ranks.first, taken.begin() + ranks.end(), 1);
        builder.place(builder.make_step(members, ranks, k));
      }
    }
  }

  // One micro-batch over the whole domain from `remaining` (sorted longest first); what does not
  // fit stays in `remaining`, in order.
  template <cost_model C>
  std::vector<cp_group_of<typename C::load_type>> micro_batch(const C& cost, std::int64_t top,
                                    const std::vector<std::int64_t>& len,
                                    const std::vector<typename C::load_type>& load,
                                    std::vector<std::size_t>& remaining) const {
    using cp_group = cp_group_of<typename C::load_type>;
    const int k_ckpt = recompute_level.of(cost);
    const std::int64_t gpus = cost.gpus();
    const auto limit = static_cast<double>(max_tokens_per_rank);
    auto fits = [&](const typename C::load_type& l, std::int64_t cp) {
      return fits_static(cost, l, static_cast<int>(cp), k_ckpt);
    };
    std::vector<cp_group> groups;
    // Groups of each CP size (by log2), oldest first.
    std::vector<std::vector<std::size_t>> of_size(static_cast<std::size_t>(std::countr_zero(static_cast<std::uint64_t>(top))) + 1);
    auto open = [&](std::size_t i, std::int64_t cp) {
      const auto n = static_cast<double>(len[i]);
      of_size[static_cast<std::size_t>(std::countr_zero(static_cast<std::uint64_t>(cp)))].push_back(groups.size());
      groups.push_back({cp, n * n / static_cast<double>(cp), n / static_cast<double>(cp), {i}, load[i]});
    };

    // The longest remaining sequence opens the micro-batch and sets its workload cap.
    const std::size_t head = remaining.front();
    std::int64_t cp0 = cp_size_of(len[head], max_tokens_per_rank);
    while (cp0 < top && !fits(load[head], cp0)) cp0 *= 2;  // only for cost models whose memory is not per token
    open(head, cp0);
    std::int64_t used = cp0;
    double busiest = groups.front().work;
    const double tall = static_cast<double>(len[head]);
    const double cap = tall * limit * (1 + workload_cap_slack);

    std::vector<std::size_t> leftovers;
    constexpr std::size_t none = std::numeric_limits<std::size_t>::max();
    std::size_t failed = none;  // the last sequence that found no room: an equal one finds none either
    for (std::size_t k = 1; k < remaining.size(); ++k) {
      const std::size_t i = remaining[k];
      if (failed != none && len[i] == len[failed] && load[i] == load[failed]) {
        leftovers.push_back(i);
        continue;
      }
      const auto n = static_cast<double>(len[i]);
      double best = std::numeric_limits<double>::infinity();
      std::size_t best_group = groups.size();
      std::int64_t best_cp = 0;
      for (std::int64_t cp = cp_size_of(len[i], max_tokens_per_rank); cp <= top; cp *= 2) {
        const double share = n * n / static_cast<double>(cp);
        for (std::size_t g : of_size[static_cast<std::size_t>(std::countr_zero(static_cast<std::uint64_t>(cp)))]) {
          const cp_group& grp = groups[g];
          if (grp.tokens_per_rank + n / static_cast<double>(cp) > limit) continue;
          const double projected = std::max(busiest, grp.work + share);
          if (projected <= cap && projected < best && fits(grp.load + load[i], cp))
            best = projected, best_group = g, best_cp = cp;
        }
        if (gpus - used >= cp) {
          const double projected = std::max(busiest, share);
          if (projected <= cap && projected < best && fits(load[i], cp))
            best = projected, best_group = groups.size(), best_cp = cp;
        }
      }
      if (best_cp == 0) {
        leftovers.push_back(i);
        failed = i;
        continue;
      }
      if (best_group < groups.size()) {
        cp_group& grp = groups[best_group];
        grp.work += n * n / static_cast<double>(best_cp);
        grp.tokens_per_rank += n / static_cast<double>(best_cp);
        grp.members.push_back(i);
        grp.load = grp.load + load[i];
        busiest = std::max(busiest, grp.work);
      } else {
        open(i, best_cp);
        used += best_cp;
        busiest = std::max(busiest, groups.back().work);
      }
    }

    // Every rank gets work: double the smallest group (the oldest of them) while one fits.
    while (used < gpus) {
      std::size_t smallest = 0;
      for (std::size_t g = 1; g < groups.size(); ++g)
        if (groups[g].size < groups[smallest].size) smallest = g;
      const std::int64_t m = groups[smallest].size;
      if (2 * m > top || used + m > gpus) break;  // Megatron's whole-domain group would be illegal
      groups[smallest].size = 2 * m;
      used += m;
    }
    remaining = std::move(leftovers);
    return groups;
  }
};

static_assert(planner<dynamic_cp_planner>);

template <any_planning_context Ctx>
dcp::plan dynamic_cp_planner::plan(const Ctx& ctx, std::span<const sequence> batch,
                                   const batch_bounds* known) const {
  ctx.validate();
  const auto& cost = ctx.cost;
  validate(cost);
  require_tuned(max_tokens_per_rank != 0, name(), "max_tokens_per_rank");
  std::vector<skipped_sequence> skipped;
  std::vector<sequence> seqs;
  const std::int64_t top = widest(ctx);
  for (const auto& s : feasible_sequences(cost, batch, on_infeasible, skipped)) {
    if (holds(cost, s, top)) {
      seqs.push_back(s);
      continue;
    }
    const std::string why =
        "sequence " + std::to_string(s.id) + " of " + std::to_string(cost.tokens_of(s)) + " tokens needs CP size " +
        std::to_string(cp_size_of(scheduled_tokens(cost.tokens_of(s), cost.gpus()), max_tokens_per_rank)) +
        " under dynamic_cp max_tokens_per_rank = " + std::to_string(max_tokens_per_rank) +
        ", over the widest legal group " + std::to_string(top) +
        "; raise max_tokens_per_rank, or tune it with dcp::tune";
    if (on_infeasible == infeasible_policy::skip) skipped.push_back({s.id, cost.tokens_of(s), why});
    else throw error(errc::infeasible, why);
  }
  plan_builder<typename Ctx::cost_type> builder(cost, name());
  builder.skip(std::move(skipped));
  if (!seqs.empty()) place(builder, ctx, seqs);
  if (known != nullptr) return std::move(builder).finish(*known, loss);
  return std::move(builder).finish(ctx.groups, seqs, loss);
}

}  // namespace dcp

#if DCP_HAS_COMPILED()
// The compiled mode: the common contexts' instantiations are in dcp::compiled.
#define DCP_DETAIL_EXTERN_DYNAMIC_CP_PLANNER(C, R, G) DCP_DYNAMIC_CP_PLANNER_ON(extern, C, R, G)
DCP_COMPILED_CONTEXTS(DCP_DETAIL_EXTERN_DYNAMIC_CP_PLANNER)
#undef DCP_DETAIL_EXTERN_DYNAMIC_CP_PLANNER
#endif
