#pragma once
/// \file
/// `dcp_planner`: Data-Centric Parallel planning of one global batch (DESIGN section 3), in
/// three stages: prepare (`plan/dcp_prepare.hpp`: the batch's options, prices and bounds, once),
/// build (`plan/dcp_build.hpp`: one plan per attempt, a plain value, from the prepared batch
/// alone) and select (this file: the attempts tried, and the restrictions of the planner kept
/// where they end sooner, `keep_if_sooner`). The steps:
///
/// 1. options: for every sequence and legal sp, the fewest checkpointed blocks that fit (once
///    per distinct shape; the lower bounds of the batch are computed once from them);
/// 2. sp: the most GPU-efficient option, widened while it alone outlasts a cap on any one step
///    (the batch's fair share; see `best_attempt`);
/// 3. gang items (wider than the fluid level) of equal sp are merged while they fit without
///    recomputation and stay within the cap, then placed widest first, longest first, on the
///    group manager's block that is free earliest (or, with a makespan target, the latest-free block
///    where the step still ends within it); placing wide before narrow keeps every block's
///    members free at the same instant (no gang gaps);
/// 4. fluid-level sequences (sp = 1 by default) are assigned longest first to the block of the
///    level where they end first (the least loaded, where every GPU has one speed), packed per block
///    first-fit-decreasing into micro-steps that need no recomputation (DCP-inter: every GPU accumulates as many
///    micro-steps as it needs to finish with the others);
/// 5. candidates: sparse batches (under 16 sequences per GPU) also plan with a makespan target
///    T from the joint lower bound up: caps at, below and above T, and wider fluid levels (all
///    sequences on sp >= s, or on sp = s where they fit, so that few short sequences share a
///    step); the shortest plan wins. Under pipeline stages (pp > 1) there is one plan, at the
///    cap and packing room of `pipeline_knobs` (which `dcp::tune` chooses for a workload);
/// 6. improve: move single sequences from the last block to finish to the first while that
///    lowers the makespan, and widen a gang item that is critical, within a deterministic move
///    budget (a wall-clock budget would let ranks compute different plans);
/// 7. recompute (DCP-intra): each micro-step checkpoints the fewest blocks that fit; under a
///    per-step floor (`step_floor_cost_model`, zero3's weight gather) packing also dissolves a
///    block's shortest step into its others, which checkpoint more blocks, while that shortens
///    the block (DESIGN 3.4); the plan planned without that wins where it ends sooner;
/// 8. loss weights: token mean or sample mean, so summed gradients are the full-batch gradient.
/// 9. baselines: the plans of the static systems in `baselines` (their knobs tuned on the
///    workload, `with_baselines`) are built for the batch too, where the plan above does not
///    already end at the joint lower bound (and without straggler `speeds`), and one that ends sooner and holds every sequence the
///    plan holds is kept: such a plan (one sp or one token limit, one recompute level) is a
///    restriction of dcp's, so knowing more never plans worse than a tuned baseline.
/// 10. the cluster as its weakest node: on a cluster whose nodes differ, the batch is also planned
///    as if every node were the weakest (what `dcp-uniform` plans), timed on the cluster
///    (`retimed`), and kept where it ends sooner and holds every sequence the plan holds: a plan
///    told the nodes never ends later than the same planner told less.
/// 11. allowed less: under collectives that span groups the batch is also planned in synchronised
///    rounds (`inter = false`, lockstep already); with `restrictions` (the default), a sparse
///    batch (under 16 sequences per unit) or any batch under such collectives is planned without
///    DCP-intra, without DCP-inter and without both, on the cluster and (step 10) as its weakest
///    node. Each is tried where its joint bound leaves room to end sooner than the best so far,
///    and kept where it ends sooner and holds every sequence the plan holds: with `restrictions` a
///    planner allowed more never plans worse than itself allowed less. Under coupled
///    collectives (zero3, ep > 1; every plan is made lockstep with padding passes,
///    `plan/coupling.hpp`) its own plans (with and without dissolving), and the best at the end,
///    are also re-placed as shelves (`shelved`, `plan/shelves.hpp`) and kept where they end sooner.
/// With `inter = false` steps run in synchronised rounds, one per GPU group; with
/// `intra = false` every block is checkpointed. Both exist to measure what each part earns.
/// With per-GPU `speeds` (straggler-aware planning), or on a cluster whose nodes run at different
/// speeds, a step lasts its cost model time over its slowest member's speed; gang steps go to the
/// block where they end earliest and slow GPUs get fewer sp = 1 sequences. On a cluster whose
/// nodes differ in memory every step fits its own block's capacity (DESIGN section 3.6): options
/// are priced on the largest block of their size, a gang step is re-priced on each block it may
/// take (more recompute, or none where it does not fit), and sp = 1 sequences go only to GPUs
/// that hold them.

#include <algorithm>
#include <bit>
#include <cstddef>
#include <ostream>
#include <span>
#include <sstream>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include <dcp/compiled.hpp>
#include <dcp/cost/cost_concepts.hpp>
#include <dcp/error.hpp>
#include <dcp/group/contiguous_groups.hpp>
#include <dcp/group/group_concepts.hpp>
#include <dcp/plan/bucket_planner.hpp>
#include <dcp/plan/dcp_build.hpp>
#include <dcp/plan/dcp_prepare.hpp>
#include <dcp/plan/dynamic_cp_planner.hpp>
#include <dcp/plan/packed_planner.hpp>
#include <dcp/plan/plan.hpp>
#include <dcp/plan/plan_concepts.hpp>
#include <dcp/plan/planning_context.hpp>
#include <dcp/plan/retime.hpp>
#include <dcp/plan/shelves.hpp>
#include <dcp/recompute/recompute_concepts.hpp>
#include <dcp/recompute/selective_recompute.hpp>

namespace dcp {

namespace detail {
template <class G>
inline constexpr bool is_powers_of_two_of = false;
template <class G>
inline constexpr bool is_powers_of_two_of<powers_of_two_of<G>> = true;

/// Whether `p` ends at its lower bound (nothing can end sooner).
inline bool at_bound(const plan& p) { return p.makespan_s <= p.bound_s() * (1 + 1e-12); }

/// Select: `candidate` replaces `best` where it ends sooner and skips no more sequences (so exactly
/// the ones `best` skips: those no configuration holds); it then carries `best`'s name, bounds and
/// skip reasons.
inline void keep_if_sooner(plan& best, plan candidate) {
  if (candidate.skipped.size() != best.skipped.size() || !(candidate.makespan_s < best.makespan_s * (1 - 1e-12)))
    return;
  candidate.lower_bound_s = best.lower_bound_s, candidate.joint_lower_bound_s = best.joint_lower_bound_s;
  candidate.method = best.method;
  candidate.skipped = std::move(best.skipped);
  best = std::move(candidate);
}

/// Step 5's sparse attempts (none for a batch of at least 16 sequences per GPU): for a makespan
/// target T from the joint bound up, caps at T (and a little above) with gang steps stacked on
/// blocks that still end within T (GPUs stay whole for long sp = 1 sequences); caps below T that
/// split long sequences finer so that they pack; and wider fluid levels: every sequence on at least
/// sp = s GPUs, balanced over the blocks of s as sp = 1 sequences are over GPUs, so that few short
/// sequences share steps (a step's efficiency grows with its tokens per GPU).
/// Whether a prepared batch holds under 16 sequences per unit: a few sequences per GPU leave
/// holes, which other attempts and the planner's variants may fill (dense batches leave few).
template <class P>
bool is_sparse(const P& p) {
  return p.items().size() < 16 * static_cast<std::size_t>(p.cost().gpus());
}

template <class P>
std::vector<dcp_attempt> sparse_attempts(const P& p, bool dissolve) {
  if (!is_sparse(p)) return {};
  const double target = std::max(p.share, p.bounds.joint_s);
  std::vector<dcp_attempt> out{{target, dissolve, target}};
  for (double f : {0.5, 0.7}) out.push_back({target * f, dissolve, target});
  for (double f : {1.04, 1.12}) out.push_back({target * f, dissolve, target * f});
  for (std::size_t level = 1; level < p.sizes.sps.size(); ++level) {
    out.push_back({target, dissolve, target, level});
    out.push_back({target, dissolve, target, level, true});
  }
  return out;
}

/// Step 6, gang side: while the last GPU to finish runs only gang steps, the items of its longest
/// gang step take the next wider sp (attempt `from`, widened) where that lowers the makespan.
template <class P>
plan widen_critical(const P& p, plan best, dcp_attempt from) {
  for (int round = 0; round < 8; ++round) {
    int critical = 0;
    for (const auto& s : best.steps)
      if (s.end_s() >= best.makespan_s) critical = s.ranks.first;
    const plan_step* longest = nullptr;
    bool fluid = false;
    for (const auto& s : best.steps) {
      if (!s.ranks.contains(critical)) continue;
      if (s.sp() <= p.sizes.sps[from.fluid]) fluid = true;
      else if (!longest || s.time_s > longest->time_s) longest = &s;
    }
    if (fluid || !longest) return best;
    std::vector<std::size_t> choice = choices_of(p, from);
    dcp_attempt wider = from;
    const auto& planned = p.batch.planned;
    for (const auto& q : longest->sequences) {
      const auto at = std::lower_bound(planned.begin(), planned.end(), q.id,
                                       [](const sequence& s, std::int64_t id) { return s.id < id; });
      const auto i = static_cast<std::size_t>(at - planned.begin());
      const auto& options = p.items()[i].options;
      for (std::size_t o = 0; o < options.size(); ++o)
        if (options[o].sp > options[choice[i]].sp) {
          wider.widened.push_back({i, o});
          choice[i] = o;
          break;
        }
    }
    if (wider.widened.size() == from.widened.size()) return best;
    plan next = build(p, wider);
    if (!(next.makespan_s < best.makespan_s * (1 - 1e-12))) return best;
    best = std::move(next);
    from = std::move(wider);
  }
  return best;
}

/// Steps 2-6: the attempts tried on a prepared batch, the best one improved. Under pipeline stages
/// (pp > 1) one plan at the planner's knobs (`pipeline_knobs`; `dcp::tune` finds a workload's):
/// the cap splits long sequences over wider blocks, so that no micro-batch holds the later stages
/// up for long as it passes them. Otherwise the fair-share cap with earliest-free gang placement,
/// then the sparse attempts while the best is under 0.99 of its bound; the best is widened from
/// its own attempt (`widen_critical`).
template <class P>
plan best_attempt(const P& p, bool dissolve) {
  const int pp = p.cost().layout().pp;
  if (pp > 1 && p.job.inter)
    return build(p, dcp_attempt{p.job.knobs.path_cap * p.mean_seconds / pp, dissolve});
  dcp_attempt chosen{p.share, dissolve};
  plan best = build(p, chosen);
  if (!p.job.inter) return best;
  for (const dcp_attempt& a : sparse_attempts(p, dissolve)) {
    if (best.efficiency() >= 0.99) break;
    plan next = build(p, a);
    if (next.makespan_s < best.makespan_s * (1 - 1e-12)) best = std::move(next), chosen = a;
  }
  return widen_critical(p, std::move(best), std::move(chosen));
}

/// Under coupled collectives, `p` or its steps re-placed as shelves (`shelved`, which keeps the
/// plan's name, bounds and skipped sequences), whichever ends sooner; `p` otherwise.
template <cost_model C, group_manager G>
plan shelves_if_sooner(plan p, const C& cost, const G& groups, std::span<const double> stragglers,
                       loss_normalization norm) {
  if (!is_coupled(cost.layout()) || p.steps.empty() || at_bound(p)) return p;
  plan q = shelved(p, cost, groups, stragglers, norm);
  return q.makespan_s < p.makespan_s * (1 - 1e-12) ? q : p;
}
template <class P>
plan shelves_if_sooner(const P& prepared, plan p) {
  return shelves_if_sooner(std::move(p), prepared.cost(), prepared.groups(), prepared.job.stragglers,
                           prepared.job.norm);
}

/// The prepared batch's plan (steps 2-7): under a per-step floor with DCP-inter, packing
/// dissolves short steps (step 7); dissolving steers the rebalancing and the candidates, which are
/// heuristics, so on the rare batch where the plan without it ends sooner that one is kept, and a
/// floor never costs time (a plan at the joint bound has nothing to fear).
template <class P>
plan plan_prepared(const P& p) {
  const bool dissolve = p.step_floor > 0 && p.job.inter;
  plan best = shelves_if_sooner(p, best_attempt(p, dissolve));
  if (dissolve && best.makespan_s > p.bounds.joint_s) {
    plan plain = shelves_if_sooner(p, best_attempt(p, false));
    if (plain.makespan_s < best.makespan_s) best = std::move(plain);
  }
  best.skipped = p.batch.skipped;
  return best;
}

}  // namespace detail

/// A static system whose plan of a batch the dcp planner also builds (`dcp_planner::baselines`),
/// with its knobs tuned on the workload.
using static_baseline = std::variant<packed_planner, dynamic_cp_planner, bucket_planner>;

/// The DCP planner. A regular value; knobs are data members.
struct dcp_planner {
  using policy_concept = planner_tag;

  bool inter = true;  ///< balance gradient accumulation across groups (DCP-inter)
  bool intra = true;  ///< per-step selective recompute (DCP-intra); false = every block checkpointed
  std::size_t improve_moves = 4096;  ///< improvement budget, in evaluated moves (deterministic)
  std::vector<double> speeds;        ///< per-GPU speed factors (straggler-aware); empty = all 1
  loss_normalization loss = loss_normalization::token_mean;
  infeasible_policy on_infeasible = infeasible_policy::error;
  pipeline_knobs pipeline;  ///< micro-batch shape under pp > 1; `dcp::tune` chooses a workload's
  /// Step 11 of the file comment: on a sparse batch or under collectives that span groups, also
  /// plan as this planner allowed less (without DCP-intra, DCP-inter, both) and keep a sooner
  /// plan, so that it never plans a batch slower than itself allowed less. Off: only synchronised
  /// rounds, under coupled collectives; it plans faster, and keeps the padding passes and unequal
  /// micro-step counts of small batches (what the trainers' tests of those paths run).
  bool restrictions = true;
  /// Static systems, tuned on the workload, whose plan of each batch is a candidate (step 9 of the
  /// file comment; `with_baselines` in `<dcp/workload/tuning.hpp>` fills it); empty: none.
  std::vector<static_baseline> baselines;

  std::string name() const {
    if (!inter && !intra) return "dcp-no-inter-no-intra";
    if (!inter) return "dcp-no-inter";
    if (!intra) return "dcp-no-intra";
    return "dcp";
  }

  /// Plans one global batch (the file comment's steps). Defined out of the class so that it is not
  /// inline: the compiled mode (<dcp/compiled.hpp>) declares its common instantiations extern.
  template <any_planning_context Ctx>
  dcp::plan plan(const Ctx& ctx, std::span<const sequence> batch) const;
  /// On `default_groups(cost)`.
  template <cost_model C, recompute_policy Recompute = selective_recompute>
  dcp::plan plan(const C& cost, std::span<const sequence> batch, const Recompute& recompute = {}) const {
    return plan_on_default_groups(*this, cost, batch, recompute);
  }

  /// "path cap 16, room 4" under pipeline stages (its `pipeline` knobs), else "": the tuned
  /// setting, for reports.
  template <cost_model C>
  std::string tuned_setting(const C& cost) const {
    if (cost.layout().pp <= 1) return "";
    std::ostringstream os;
    os << "path cap " << pipeline.path_cap << ", room " << pipeline.room;
    return os.str();
  }

  friend bool operator==(const dcp_planner&, const dcp_planner&) = default;
  friend std::ostream& operator<<(std::ostream& os, const dcp_planner& p) {
    os << "dcp_planner{inter=" << p.inter << ", intra=" << p.intra << ", improve_moves=" << p.improve_moves
       << ", loss=" << p.loss << ", on_infeasible=" << p.on_infeasible << ", speeds=" << p.speeds.size()
       << " factors, pipeline=" << p.pipeline << ", restrictions=" << p.restrictions << ", baselines={";
    for (std::size_t i = 0; i < p.baselines.size(); ++i)
      std::visit([&](const auto& b) { os << (i == 0 ? "" : ", ") << b; }, p.baselines[i]);
    return os << "}}";
  }

 private:
  /// What the planner tells its prepared batches about the job.
  template <any_planning_context Ctx>
  auto job_for(const Ctx& ctx) const {
    return detail::dcp_job<typename Ctx::cost_type, typename Ctx::recompute_type, typename Ctx::groups_type>{
        ctx.cost, ctx.recompute, ctx.groups, inter, intra, improve_moves, speeds, pipeline, loss, name()};
  }

  // Blocks of other sizes do not nest with the powers of two (a block of 5 in a node of 8 overlaps
  // the blocks of 2 and 4 of both halves), so gang placement can fragment a node where aligned
  // blocks would not. Where the manager offers such sizes, the plan is not within 0.1% of the
  // bound, and it does not already end by the power-of-two blocks' own joint bound, the batch is
  // also planned on those blocks alone (skipping, so that a sequence only a wider size holds costs
  // that plan, not an error) and kept where it ends sooner, with the bounds of every size (they are
  // at most the power-of-two ones: more options): groups of any size never cost time (DESIGN 3.5).
  template <any_planning_context Ctx, class P>
  void keep_sooner_aligned(dcp::plan& best, const Ctx& ctx, std::span<const sequence> batch, const P& prepared) const {
    if constexpr (!detail::is_powers_of_two_of<typename Ctx::groups_type>) {
      const auto sizes = ctx.sp_sizes();
      const bool other = std::any_of(sizes.begin(), sizes.end(),
                                     [](int sp) { return !std::has_single_bit(static_cast<unsigned>(sp)); });
      if (!other || best.efficiency() >= 0.999) return;
      const planning_context aligned{ctx.cost, ctx.recompute, powers_of_two_of<typename Ctx::groups_type>{ctx.groups}};
      if (aligned.sp_sizes().empty() || best.makespan_s <= prepared.bounds_on(aligned.groups).joint_s * (1 + 1e-12))
        return;
      const detail::dcp_prepared again(aligned, job_for(aligned), batch, infeasible_policy::skip);
      detail::keep_if_sooner(best, detail::plan_prepared(again));
    }
  }

  // Step 9: each baseline's plan of the batch, made with dcp's loss normalisation and the bounds
  // dcp computed (`bounds`, so that it does not price them again), skipping what it cannot hold so
  // that such a sequence rules the baseline out, not the batch. A plan at its joint bound cannot
  // be beaten, so none is built then; with straggler factors a baseline's steps would be timed
  // without them, so none either.
  template <any_planning_context Ctx>
  void keep_sooner_baseline(dcp::plan& best, const Ctx& ctx, std::span<const sequence> batch,
                            const batch_bounds& bounds) const {
    if (baselines.empty() || !speeds.empty() || detail::at_bound(best)) return;
    for (const auto& b : baselines) {
      try {
        detail::keep_if_sooner(best, std::visit(
                                         [&](auto q) {
                                           q.loss = loss;
                                           q.on_infeasible = infeasible_policy::skip;
                                           return q.plan(ctx, batch, bounds);
                                         },
                                         b));
      } catch (const error&) {
        continue;  // a baseline that cannot plan this batch here (a block its groups need is not offered)
      }
    }
  }

  // Step 11: this planner allowed less: with `restrictions`, without DCP-intra (every block
  // checkpointed, so steps pack more tokens, which pays under a per-step floor), without DCP-inter
  // (synchronised rounds, lockstep already under coupled collectives), and without both; else
  // without DCP-inter alone. Each skips what it cannot hold and leaves the baselines, candidates
  // already, to this planner.
  std::vector<dcp_planner> allowed_less() const {
    std::vector<dcp_planner> out;
    std::vector<std::pair<bool, bool>> kinds{{false, intra}};  // (inter, intra)
    if (restrictions) kinds = {{inter, false}, {false, intra}, {false, false}};
    for (const auto& kind : kinds) {
      const bool in = kind.first, ra = kind.second;
      const bool seen = (in == inter && ra == intra) ||
                        std::any_of(out.begin(), out.end(), [&](const dcp_planner& p) { return p.inter == in && p.intra == ra; });
      if (seen) continue;
      dcp_planner less = *this;
      less.inter = in, less.intra = ra;
      less.baselines.clear();
      less.on_infeasible = infeasible_policy::skip;
      out.push_back(std::move(less));
    }
    return out;
  }

  // Steps 1-8 and the power-of-two blocks, on a prepared batch; `least` (a variant without
  // DCP-intra of a planner with it): each step then checkpoints the fewest blocks that fit, as
  // DCP-intra chooses them (`with_fewest_checkpoints`): the variant's packing with the owner's
  // recompute.
  template <any_planning_context Ctx, class P>
  dcp::plan plan_prepared(const Ctx& ctx, std::span<const sequence> batch, const P& prepared, bool least) const {
    dcp::plan best = detail::plan_prepared(prepared);
    keep_sooner_aligned(best, ctx, batch, prepared);
    return least ? with_fewest_checkpoints(std::move(best), ctx.cost, ctx.recompute) : best;
  }

  // Step 10: the batch planned on the cluster seen as its weakest node (what `dcp-uniform` plans),
  // timed on the cluster. Its steps fit the weakest node's capacity, so every block's.
  template <any_planning_context Ctx>
  void keep_sooner_uniform(dcp::plan& best, const Ctx& ctx, std::span<const sequence> batch, bool least) const {
    using C = typename Ctx::cost_type;
    if constexpr (mixed_cluster_cost_model<C>) {
      const auto& nodes = ctx.cost.layout().nodes;
      const bool mixed = std::any_of(nodes.begin(), nodes.end(), [&](const unit_device& d) {
        return d.speed != nodes.front().speed || d.capacity != nodes.front().capacity;
      });
      if (!mixed || detail::at_bound(best)) return;
      const C weakest = ctx.cost.as_uniform(ctx.cost.layout().as_weakest().nodes.front());
      // This planner without its baselines (they were candidates on the cluster already),
      // skipping what the weakest node cannot hold; `plan` tries each variant of it so.
      dcp_planner blind = *this;
      blind.baselines.clear();
      blind.on_infeasible = infeasible_policy::skip;
      const planning_context on_weakest{weakest, ctx.recompute, ctx.groups};
      const detail::dcp_prepared prepared(on_weakest, blind.job_for(on_weakest), batch, blind.on_infeasible);
      detail::keep_if_sooner(best, retimed(blind.plan_prepared(on_weakest, batch, prepared, least), ctx.cost, speeds));
    }
  }
};

static_assert(planner<dcp_planner>);

template <any_planning_context Ctx>
dcp::plan dcp_planner::plan(const Ctx& ctx, std::span<const sequence> batch) const {
  ctx.validate();
  pipeline.validate();
  const detail::dcp_prepared prepared(ctx, job_for(ctx), batch, on_infeasible);
  dcp::plan best = plan_prepared(ctx, batch, prepared, false);
  keep_sooner_baseline(best, ctx, batch, prepared.bounds);
  keep_sooner_uniform(best, ctx, batch, false);
  // Each variant allowed less, where collectives span groups and (with `restrictions`) on a sparse
  // batch (a dense batch leaves another packing little: on the embedded workloads none won, at
  // 1.2x to 3.4x the planning time), where its joint bound leaves it room to end sooner (a plan
  // never ends below its bound): at most three more preparations, and the plans of those not
  // ruled out.
  const bool try_less = is_coupled(ctx.cost.layout()) || (restrictions && detail::is_sparse(prepared));
  for (const dcp_planner& less : try_less ? allowed_less() : std::vector<dcp_planner>{}) {
    if (detail::at_bound(best)) break;
    const detail::dcp_prepared restricted(ctx, less.job_for(ctx), batch, less.on_infeasible);
    if (restricted.bounds.joint_s * (1 - 1e-9) >= best.makespan_s) continue;
    const bool least = intra && !less.intra;
    detail::keep_if_sooner(best, less.plan_prepared(ctx, batch, restricted, least));
    less.keep_sooner_uniform(best, ctx, batch, least);
  }
  return detail::shelves_if_sooner(std::move(best), ctx.cost, ctx.groups, speeds, loss);  // step 11, shelves
}

}  // namespace dcp

#if DCP_HAS_COMPILED()
// The compiled mode: the common contexts' instantiations are in dcp::compiled.
#define DCP_DETAIL_EXTERN_DCP_PLANNER(C, R, G) DCP_DCP_PLANNER_ON(extern, C, R, G)
DCP_COMPILED_CONTEXTS(DCP_DETAIL_EXTERN_DCP_PLANNER)
#undef DCP_DETAIL_EXTERN_DCP_PLANNER
#endif
