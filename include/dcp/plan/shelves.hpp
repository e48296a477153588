#pragma once
/// \file
/// `shelved`: a plan's steps re-placed as shelves, for layouts whose collectives span groups
/// (zero3, ep > 1; DESIGN section 3.7), where a domain's micro-steps run in lockstep and a round
/// lasts its slowest step. First-fit decreasing height: the steps longest first, each to the
/// first round (shelf) with a free block of its size that the group manager offers and whose
/// capacity holds it, so that a round's steps are of like length. Each step keeps its sequences,
/// checkpointed blocks and ring, is priced again on its block (its speed), and the plan is made
/// lockstep by `plan_builder::finish`. The dcp planner keeps it where it ends sooner.

#include <algorithm>
#include <cstddef>
#include <span>
#include <utility>
#include <vector>

#include <dcp/cost/cost_concepts.hpp>
#include <dcp/group/group_concepts.hpp>
#include <dcp/plan/plan.hpp>
#include <dcp/plan/plan_builder.hpp>
#include <dcp/sequence.hpp>

namespace dcp {

/// `p`'s steps (its padding passes dropped) re-placed as shelves on `groups` under `cost` (the
/// file comment), with straggler factors `stragglers` and loss normalisation `norm`; it carries
/// `p`'s method, skipped sequences and bounds. `p` itself where some step has no block in a fresh
/// shelf.
template <cost_model C, group_manager G>
plan shelved(const plan& p, const C& cost, const G& groups, std::span<const double> stragglers,
             loss_normalization norm) {
  std::vector<const plan_step*> steps;
  for (const auto& s : p.steps)
    if (!s.sequences.empty()) steps.push_back(&s);
  std::stable_sort(steps.begin(), steps.end(), [](const plan_step* a, const plan_step* b) { return a->time_s > b->time_s; });
  const int n = cost.layout().units();
  std::vector<std::vector<char>> used;  // per shelf, per unit
  std::vector<std::vector<std::pair<const plan_step*, rank_block>>> shelves;
  auto place_in = [&](std::size_t r, const plan_step* s) {
    for (int i = 0, count = groups.block_count(s->sp()); i < count; ++i) {
      const rank_block b = groups.block(s->sp(), i);
      if (b.size != s->sp() || b.first < 0 || b.end() > n || capacity_on(cost, b) < s->memory_bytes) continue;
      bool free = true;
      for (int u = b.first; u < b.end() && free; ++u) free = !used[r][static_cast<std::size_t>(u)];
      if (!free) continue;
      for (int u = b.first; u < b.end(); ++u) used[r][static_cast<std::size_t>(u)] = 1;
      shelves[r].push_back({s, b});
      return true;
    }
    return false;
  };
  for (const plan_step* s : steps) {
    std::size_t r = 0;
    while (r < shelves.size() && !place_in(r, s)) ++r;
    if (r < shelves.size()) continue;
    shelves.emplace_back(), used.emplace_back(static_cast<std::size_t>(n), 0);
    if (!place_in(r, s)) return p;  // no offered block holds it
  }
  plan_builder<C> b(cost, p.method, stragglers);
  for (std::size_t r = 0; r < shelves.size(); ++r) {
    if (r > 0) b.barrier();
    for (const auto& [s, block] : shelves[r]) {
      std::vector<sequence> seqs;
      seqs.reserve(s->sequences.size());
      for (const auto& q : s->sequences) seqs.push_back(sequence{q.id, q.frames, q.spatial});
      b.place(b.make_step(seqs, block, s->checkpointed_blocks, s->ring));
    }
  }
  b.skip(p.skipped);
  plan out = std::move(b).finish(batch_bounds{}, norm);
  out.lower_bound_s = p.lower_bound_s, out.joint_lower_bound_s = p.joint_lower_bound_s;
  return out;
}

}  // namespace dcp
