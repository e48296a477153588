#pragma once
/// \file
/// `plan_violations`: the laws every plan keeps (see `plan_concepts.hpp`), checked against the
/// batch and the cost model. Property tests, fuzzers and the simulator use it.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <dcp/cost/cost_concepts.hpp>
#include <dcp/group/group_concepts.hpp>
#include <dcp/plan/coupling.hpp>
#include <dcp/plan/pipeline_plan.hpp>
#include <dcp/plan/pipeline_schedule.hpp>
#include <dcp/plan/plan.hpp>
#include <dcp/plan/plan_builder.hpp>
#include <dcp/sequence.hpp>

namespace dcp {

namespace detail {

/// The laws a plan breaks, as found (the first 32 kept), and the tolerance they are compared to:
/// 1e-9 relative.
struct violations {
  std::vector<std::string> found;
  void fail(std::string s) {
    if (found.size() < 32) found.push_back(std::move(s));
  }
  static bool close(double a, double b) { return std::abs(a - b) <= 1e-9 * std::max({1.0, std::abs(a), std::abs(b)}); }
};

/// Whether a step's ranks are a block inside the job's `units` (`check_step` reports one that is not).
inline bool inside_job(const plan_step& st, int units) noexcept {
  return st.ranks.size > 0 && st.ranks.first >= 0 && st.ranks.end() <= units;
}

/// The plan's job is the cost model's: its units, tp and pp.
template <cost_model C>
void check_job(const plan& p, const C& cost, violations& v) {
  const int n = cost.gpus();
  if (p.gpus != n) v.fail("plan is for " + std::to_string(p.gpus) + " GPUs, cost model for " + std::to_string(n));
  if (p.layout.tp != cost.layout().tp)
    v.fail("plan has tp = " + std::to_string(p.layout.tp) +
           " (GPUs per unit), the cost model tp = " + std::to_string(cost.layout().tp));
  if (p.layout.pp != cost.layout().pp)
    v.fail("plan has pp = " + std::to_string(p.layout.pp) + " stages, the cost model pp = " +
           std::to_string(cost.layout().pp));
}

/// A speed factor per unit where the plan has any, and on nodes of different speeds always: a
/// plan times its steps at them (its straggler factors aside).
template <cost_model C>
void check_speeds(const plan& p, const C& cost, violations& v) {
  const int n = cost.gpus();
  if (p.speeds.size() != 0 && p.speeds.size() != static_cast<std::size_t>(n))
    v.fail(std::to_string(p.speeds.size()) + " speed factors for " + std::to_string(n) + " GPUs");
  if (const auto nodes = cost.layout().unit_speeds(); !nodes.empty() && p.speeds.size() != nodes.size())
    v.fail("the plan has no speed factors for a cluster whose nodes run at different speeds");
}

/// Every sequence exactly once (in a step or skipped), nothing foreign, and loss weights that
/// follow one normalisation over the planned sequences (DESIGN section 3 step 7): token_mean
/// w_i = n_i / sum n, or sample_mean w_i = 1 / B. The sum alone would pass weight moved from one
/// sequence to another.
inline void check_sequences(const plan& p, std::span<const sequence> batch, violations& v) {
  std::map<std::int64_t, int> seen;
  for (const auto& s : batch) seen[s.id] = 0;
  auto visit = [&](std::int64_t id) {
    auto it = seen.find(id);
    if (it == seen.end()) v.fail("sequence " + std::to_string(id) + " is not in the batch");
    else if (++it->second > 1) v.fail("sequence " + std::to_string(id) + " appears more than once");
  };
  double weights = 0, tokens = 0;
  std::size_t planned = 0;
  for (const auto& st : p.steps)
    for (const auto& q : st.sequences) visit(q.id), weights += q.loss_weight, ++planned;
  for (const auto& k : p.skipped) visit(k.id);
  for (const auto& [id, count] : seen)
    if (count == 0) v.fail("sequence " + std::to_string(id) + " is lost: in no step and not skipped");
  if (planned == 0) return;
  if (!violations::close(weights, 1.0)) v.fail("loss weights sum to " + std::to_string(weights) + ", not 1");
  for (const auto& st : p.steps)
    for (const auto& q : st.sequences) tokens += static_cast<double>(q.tokens);
  const double per_sample = 1.0 / static_cast<double>(planned);
  auto near = [](double w, double want) { return std::abs(w - want) <= 1e-9 * std::abs(want); };
  const planned_sequence *token_miss = nullptr, *sample_miss = nullptr;
  for (const auto& st : p.steps)
    for (const auto& q : st.sequences) {
      if (!token_miss && !near(q.loss_weight, static_cast<double>(q.tokens) / tokens)) token_miss = &q;
      if (!sample_miss && !near(q.loss_weight, per_sample)) sample_miss = &q;
    }
  auto num = [](double x) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.10g", x);
    return std::string(buf);
  };
  if (token_miss && sample_miss)
    v.fail("loss weights follow neither normalisation: sequence " + std::to_string(token_miss->id) + " has " +
           num(token_miss->loss_weight) + ", token_mean needs " + std::to_string(token_miss->tokens) + " / " +
           num(tokens) + "; sequence " + std::to_string(sample_miss->id) + " has " + num(sample_miss->loss_weight) +
           ", sample_mean needs 1 / " + std::to_string(planned));
}

/// Step i on its block: legal, inside one node or of whole nodes, priced by the cost model
/// (padding passes too), within its block's memory. False where it is not a block of the job.
template <cost_model C>
bool check_step(const plan& p, std::size_t i, const std::map<std::int64_t, const sequence*>& by_id, const C& cost,
                violations& v) {
  const int n = cost.gpus();
  const auto& st = p.steps[i];
  const std::string where = "step " + std::to_string(i) + " on ranks [" + std::to_string(st.ranks.first) + ", " +
                            std::to_string(st.ranks.end()) + ")";
  const int sp = st.sp();
  if (!legal_sp(cost, sp)) v.fail(where + ": sp " + std::to_string(sp) + " is not legal");
  // The cost model priced the step with its ring; Ulysses ranks u = sp / r then divide the heads.
  if (sp > 0 && !legal_ring(cost, sp, st.ring))
    v.fail(where + ": ring " + std::to_string(st.ring) + " x ulysses " + std::to_string(st.ulysses()) + " for sp " +
           std::to_string(sp) + ", the cost model runs ring " + std::to_string(step_ring_of(cost, sp)) + " to " +
           std::to_string(widest_ring_of(cost, sp)) + " x ulysses " + std::to_string(sp / step_ring_of(cost, sp)) +
           " (ulysses must divide " + std::to_string(cost.heads()) + " heads)");
  if (!inside_job(st, n)) {
    v.fail(where + ": not a block inside [0, " + std::to_string(n) + ")");
    return false;
  }
  // The cost model prices a block no wider than a node at the node's bandwidth, a wider one at
  // the network's: so the first lies inside one node and the second is made of whole nodes.
  if (const int node = cost.gpus_per_node(); node > 0) {
    if (sp <= node && st.ranks.first / node != (st.ranks.end() - 1) / node)
      v.fail(where + ": spans two nodes of " + std::to_string(node) + " though it is no wider than a node");
    if (sp > node && (st.ranks.first % node != 0 || sp % node != 0))
      v.fail(where + ": wider than a node of " + std::to_string(node) + " but not made of whole nodes");
  }
  if (st.sequences.empty()) {  // only a padding pass of a coupled plan has none
    if (!(cost.layout().pp == 1 && is_coupled(cost.layout())))
      v.fail(where + ": has no sequences");
    else if (sp != 1 || st.checkpointed_blocks != 0 || st.ring != 1)
      v.fail(where + ": a padding pass (no sequences) runs on one unit with no checkpointed block and ring 1");
    else if (const double t = padding_time_of(cost) / block_speed(p.speeds, st.ranks); !violations::close(t, st.time_s))
      v.fail(where + ": padding pass time " + std::to_string(st.time_s) + " s, cost model says " + std::to_string(t));
  }
  if (st.checkpointed_blocks < 0 || st.checkpointed_blocks > cost.blocks())
    v.fail(where + ": checkpointed_blocks " + std::to_string(st.checkpointed_blocks) + " out of range");
  typename C::load_type load{};
  bool known = true;
  for (const auto& q : st.sequences) {
    auto it = by_id.find(q.id);
    if (it == by_id.end()) {
      known = false;
      continue;
    }
    load = load + cost.load_of(*it->second);
    if (q.tokens != cost.tokens_of(*it->second)) v.fail(where + ": sequence " + std::to_string(q.id) + " has wrong tokens");
  }
  if (known && !st.sequences.empty()) {
    // A plan made for per-GPU speeds prices a step at its slowest member's pace.
    const double t = time_with_ring(cost, load, sp, st.checkpointed_blocks, st.ring) / block_speed(p.speeds, st.ranks),
                 m = cost.memory(load, sp, st.checkpointed_blocks);
    if (!violations::close(t, st.time_s))
      v.fail(where + ": time " + std::to_string(st.time_s) + " s, cost model says " + std::to_string(t));
    if (!violations::close(m, st.memory_bytes))
      v.fail(where + ": memory " + std::to_string(st.memory_bytes) + " B, cost model says " + std::to_string(m));
    // Each GPU against its own capacity: on a mixed cluster, the block's smallest member's.
    if (const double c = capacity_on(cost, st.ranks); m > c)
      v.fail(where + ": memory " + std::to_string(m) + " B over capacity " + std::to_string(c));
  }
  if (st.start_s < 0) v.fail(where + ": negative start");
  if (st.round < 0) v.fail(where + ": negative round " + std::to_string(st.round));
  return true;
}

/// A pipeline plan (pp > 1): its starts and makespan are its 1F1B schedule's, and every stage-0
/// GPU's memory in flight fits (DESIGN section 4.5). The schedule's makespan (`steps_end` where the
/// cost model prices no stages); none where the plan cannot be scheduled (reported).
template <cost_model C>
std::optional<double> check_pipeline(const plan& p, const C& cost, double steps_end, violations& v) {
  const int stages = cost.layout().pp;
  if constexpr (pipeline_cost_model<C>) {
    for (const auto& st : p.steps)
      if (!inside_job(st, cost.gpus())) return std::nullopt;  // reported
    pipeline_timeline timeline;
    try {
      timeline = schedule_pipeline(p, pipeline_times(p, cost), stages);
    } catch (const error& e) {
      v.fail(e.what());
      return std::nullopt;
    }
    for (std::size_t i = 0; i < p.steps.size(); ++i)
      if (!violations::close(p.steps[i].start_s, timeline.forward_of(i, 0).start_s))
        v.fail("step " + std::to_string(i) + " starts at " + std::to_string(p.steps[i].start_s) +
               " s, its forward on stage 0 at " + std::to_string(timeline.forward_of(i, 0).start_s) + " s");
    std::vector<double> own;
    for (const auto& st : p.steps) own.push_back(st.memory_bytes);
    const auto held = in_flight_memory(p, own, working_memory_of(p, cost), cost.static_memory(), stages);
    for (std::size_t i = 0; i < held.size(); ++i)
      if (held[i] > cost.capacity() * (1 + 1e-12))
        v.fail("step " + std::to_string(i) + ": memory in flight on stage 0 " + std::to_string(held[i]) +
               " B over capacity " + std::to_string(cost.capacity()));
    return timeline.makespan_s;
  } else {
    v.fail("pp = " + std::to_string(stages) + " on a cost model that prices no stage transfer");
    return steps_end;
  }
}

/// Under collectives that span groups each domain runs its rounds in lockstep: counts agree and
/// every start is the lockstep's (`plan/coupling.hpp`). The last round's end; none where the
/// domains disagree (reported).
template <cost_model C>
std::optional<double> check_coupled(const plan& p, const C& cost, violations& v) {
  const std::size_t before = v.found.size();
  for (auto& x : coupling_violations(p, cost.layout())) v.fail(std::move(x));
  if (v.found.size() != before) return std::nullopt;
  plan derived = p;
  derive_coupled_starts(derived, cost);
  for (std::size_t i = 0; i < p.steps.size(); ++i)
    if (!violations::close(p.steps[i].start_s, derived.steps[i].start_s))
      v.fail("step " + std::to_string(i) + " starts at " + std::to_string(p.steps[i].start_s) +
             " s, its domain's lockstep round at " + std::to_string(derived.steps[i].start_s) + " s");
  return derived.makespan_s;
}

/// Rounds are barriers: a step starts after every step of every earlier round has ended.
inline void check_barriers(const plan& p, violations& v) {
  std::map<int, double> round_end;  // round -> latest end of its steps
  for (const auto& st : p.steps) round_end[st.round] = std::max(round_end[st.round], st.end_s());
  for (std::size_t i = 0; i < p.steps.size(); ++i) {
    const auto& st = p.steps[i];
    double barrier = 0;
    for (auto it = round_end.begin(); it != round_end.end() && it->first < st.round; ++it) barrier = std::max(barrier, it->second);
    if (st.start_s < barrier - 1e-9 * std::max(1.0, barrier))
      v.fail("step " + std::to_string(i) + " of round " + std::to_string(st.round) + " starts at " +
             std::to_string(st.start_s) + " s, before its earlier rounds end at " + std::to_string(barrier) + " s");
  }
}

/// No unit runs two steps at once (so a gang step starts only when all members are free); steps
/// that are no block of the job are reported by `check_step`.
inline void check_overlap(const plan& p, int units, violations& v) {
  std::vector<std::vector<std::pair<double, double>>> busy(static_cast<std::size_t>(std::max(units, 0)));
  for (const auto& st : p.steps)
    if (inside_job(st, units))
      for (int r = st.ranks.first; r < st.ranks.end(); ++r) busy[static_cast<std::size_t>(r)].push_back({st.start_s, st.end_s()});
  for (int r = 0; r < units; ++r) {
    auto& b = busy[static_cast<std::size_t>(r)];
    std::sort(b.begin(), b.end());
    for (std::size_t j = 1; j < b.size(); ++j)
      if (b[j].first < b[j - 1].second - 1e-9 * std::max(1.0, b[j - 1].second))
        v.fail("rank " + std::to_string(r) + " runs two steps at once at t = " + std::to_string(b[j].first));
  }
}

}  // namespace detail

/// Every way `p` breaks a plan law for `batch` under `cost`; empty when the plan is sound.
/// Times and memory are compared to 1e-9 relative.
template <cost_model C>
std::vector<std::string> plan_violations(const plan& p, std::span<const sequence> batch, const C& cost) {
  detail::violations v;
  detail::check_job(p, cost, v);
  detail::check_sequences(p, batch, v);
  std::map<std::int64_t, const sequence*> by_id;
  for (const auto& s : batch) by_id[s.id] = &s;
  double makespan = 0;
  for (std::size_t i = 0; i < p.steps.size(); ++i)
    if (detail::check_step(p, i, by_id, cost, v)) makespan = std::max(makespan, p.steps[i].end_s());
  // The clock that starts the steps: a pipeline's 1F1B schedule (stages interleave micro-batches,
  // so it alone decides overlap), a coupled job's lockstep rounds, else barriers between rounds.
  if (cost.layout().pp > 1) {
    const auto end = detail::check_pipeline(p, cost, makespan, v);
    if (!end) return std::move(v.found);
    makespan = *end;
  } else if (is_coupled(cost.layout())) {
    const auto end = detail::check_coupled(p, cost, v);
    if (!end) return std::move(v.found);
    makespan = *end;
  }
  detail::check_speeds(p, cost, v);
  if (cost.layout().pp == 1) {
    if (!is_coupled(cost.layout())) detail::check_barriers(p, v);
    detail::check_overlap(p, cost.gpus(), v);
  }
  if (!detail::violations::close(makespan, p.makespan_s))
    v.fail("makespan " + std::to_string(p.makespan_s) + " s, steps end at " + std::to_string(makespan));
  if (p.makespan_s < p.lower_bound_s * (1 - 1e-9))
    v.fail("makespan " + std::to_string(p.makespan_s) + " s below the lower bound " + std::to_string(p.lower_bound_s));
  if (p.makespan_s < p.joint_lower_bound_s * (1 - 1e-9))
    v.fail("makespan " + std::to_string(p.makespan_s) + " s below the joint lower bound " +
           std::to_string(p.joint_lower_bound_s));
  return std::move(v.found);
}

/// `plan_violations(p, batch, cost)`, and every step on a block `groups` offers: its ranks are
/// `groups.block(sp, i)` for some i (a planner given a group manager places only there).
template <cost_model C, group_manager G>
std::vector<std::string> plan_violations(const plan& p, std::span<const sequence> batch, const C& cost,
                                         const G& groups) {
  std::vector<std::string> out = plan_violations(p, batch, cost);
  std::map<int, std::vector<char>> offered;  // size -> whether the block of that size at each first rank is offered
  const int n = groups.gpus();
  for (std::size_t i = 0; i < p.steps.size() && out.size() < 32; ++i) {
    const rank_block b = p.steps[i].ranks;
    if (b.size <= 0 || b.first < 0 || b.end() > n) continue;  // reported above
    if (p.steps[i].sequences.empty()) continue;                // a padding pass: one unit, no group
    auto [it, fresh] = offered.try_emplace(b.size);
    if (fresh) {
      it->second.assign(static_cast<std::size_t>(n), 0);
      for (int j = 0, count = groups.block_count(b.size); j < count; ++j) {
        const rank_block o = groups.block(b.size, j);
        if (o.size == b.size && o.first >= 0 && o.end() <= n) it->second[static_cast<std::size_t>(o.first)] = 1;
      }
    }
    if (!it->second[static_cast<std::size_t>(b.first)])
      out.push_back("step " + std::to_string(i) + " on ranks [" + std::to_string(b.first) + ", " +
                    std::to_string(b.end()) + "): not a block the group manager offers (none of its " +
                    std::to_string(groups.block_count(b.size)) + " blocks of " + std::to_string(b.size) + ")");
  }
  return out;
}

}  // namespace dcp
