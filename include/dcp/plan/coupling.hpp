#pragma once
/// \file
/// Collectives that span planner groups (DESIGN section 3.7). Under ZeRO-3 every block's weights
/// are all-gathered over the shard domain before its forward and before its backward, and its
/// gradients reduce-scattered; under expert parallelism every MoE block's dispatch and combine
/// all-to-alls span an ep group. A collective needs every member of its domain, the same number
/// of times, in the same order, so a domain's micro-steps run in lockstep:
///   - a step's `round` is its micro-step index in its domain: each unit of a domain runs exactly
///     one step in each of the domain's rounds 0 .. R - 1, and a unit with nothing to run in a
///     round runs a padding pass (a step with no sequences: the collectives at their cost,
///     `padding_time_of`);
///   - round r of a domain starts when every step of its round r - 1 has ended (the first gather
///     waits for the last member), at the latest of its steps' starts;
///   - inside a round the members meet at every block's collectives, so a block takes the
///     slowest member's time for it: a step of time t with k checkpointed blocks spends
///     t_0 / L on each block (t_0 its time with none) and (t - t_0) / k more on each of its first
///     k blocks (the blocks it recomputes), and the round lasts sum_b max_s of that;
///   - a gang step whose units lie in two domains takes part in both.
/// Domains are contiguous blocks of units (`coupling_units`): the whole stage under ZeRO-3
/// (whose shard domain contains the ep groups), else each ep group of consecutive units.
/// pp = 1, zero1 and replicated sharding, and ep = 1 plans are not coupled and unchanged.

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <span>
#include <string>
#include <vector>

#include <dcp/cost/cost_concepts.hpp>
#include <dcp/error.hpp>
#include <dcp/layout.hpp>
#include <dcp/plan/plan.hpp>
#include <dcp/plan/speeds.hpp>
#include <dcp/sequence.hpp>

namespace dcp {

/// Whether the layout's micro-steps couple across planner groups (ZeRO-3 or ep > 1, pp = 1).
inline bool is_coupled(const parallel_layout& l) noexcept {
  return l.pp == 1 && (l.sharding == sharding_kind::zero3 || l.ep > 1);
}
/// Units of one coupling domain: the stage under ZeRO-3, else ep (1 when not coupled).
inline int coupling_units(const parallel_layout& l) noexcept {
  if (!is_coupled(l)) return 1;
  return l.sharding == sharding_kind::zero3 ? l.units() : l.ep;
}

/// A padding pass of unit `unit` in round `round`: no sequences, no checkpointed block, timed
/// by `padding_time_of(cost)` over the unit's speed in `speeds` (empty: 1).
template <cost_model C>
plan_step padding_step(const C& cost, int unit, int round, std::span<const double> speeds) {
  plan_step s;
  s.ranks = rank_block{unit, 1};
  s.round = round;
  s.time_s = padding_time_of(cost) / block_speed(speeds, s.ranks);
  s.memory_bytes = cost.memory(typename C::load_type{}, 1, 0);
  return s;
}

namespace detail {

// A step's share of each block of its round: `each` on every block, `extra` more on each of its
// first `k` (the recomputed ones).
struct block_share {
  double each = 0, extra = 0;
  int k = 0;
};

template <cost_model C>
block_share share_of(const plan_step& s, const C& cost, std::span<const double> speeds, int L) {
  if (s.sequences.empty() || s.checkpointed_blocks == 0) return {s.time_s / L, 0, 0};
  typename C::load_type load{};
  for (const auto& q : s.sequences) load = load + cost.load_of(sequence{q.id, q.frames, q.spatial});
  const double speed = block_speed(speeds, s.ranks);
  const double with_k = time_with_ring(cost, load, s.sp(), s.checkpointed_blocks, s.ring) / speed;
  const double none = time_with_ring(cost, load, s.sp(), 0, s.ring) / speed;
  // The step's own time (a truth's jitter, an out-of-memory re-run) split as the clock splits it.
  const double scale = with_k > 0 && std::isfinite(with_k) ? s.time_s / with_k : 1.0;
  const int k = s.checkpointed_blocks;
  return {scale * none / L, scale * std::max(0.0, with_k - none) / k, k};
}

// sum over the L blocks of the slowest share: max(max each, max over steps with k > b of
// each + extra) per block b.
inline double lockstep_seconds(std::vector<block_share>& shares, int L) {
  double each = 0;
  for (const auto& s : shares) each = std::max(each, s.each);
  std::sort(shares.begin(), shares.end(), [](const block_share& a, const block_share& b) { return a.k > b.k; });
  double total = 0, heavier = 0;
  int b = L;  // blocks [b, L) are summed
  for (std::size_t i = 0; i < shares.size() && shares[i].k > 0; ++i) {
    const int k = std::min(shares[i].k, L);
    total += static_cast<double>(b - std::min(b, k)) * std::max(each, heavier);
    b = std::min(b, k);
    heavier = std::max(heavier, shares[i].each + shares[i].extra);
  }
  return total + static_cast<double>(b) * std::max(each, heavier);
}

}  // namespace detail

/// Sets every step's `start_s` of the coupled plan `p` (pp = 1) by the file comment's lockstep
/// rules from its steps' `time_s` and rounds, and `p.makespan_s` to the end of the last round.
template <cost_model C>
void derive_coupled_starts(plan& p, const C& cost) {
  const parallel_layout& layout = cost.layout();
  const int du = coupling_units(layout), domains = std::max(1, layout.units() / du);
  const int L = std::max(1, cost.blocks());
  int rounds = 0;
  for (const auto& s : p.steps) rounds = std::max(rounds, s.round + 1);
  std::vector<std::vector<std::size_t>> by_round(static_cast<std::size_t>(rounds));
  for (std::size_t i = 0; i < p.steps.size(); ++i) by_round[static_cast<std::size_t>(p.steps[i].round)].push_back(i);
  std::vector<double> ends(static_cast<std::size_t>(domains), 0.0);  // each domain's last round's end
  std::vector<double> starts(static_cast<std::size_t>(domains));
  std::vector<std::vector<detail::block_share>> shares(static_cast<std::size_t>(domains));
  double makespan = 0;
  for (const auto& round : by_round) {
    for (auto& s : shares) s.clear();
    std::fill(starts.begin(), starts.end(), 0.0);
    for (std::size_t i : round) {
      plan_step& s = p.steps[i];
      const int first = s.ranks.first / du, last = (s.ranks.end() - 1) / du;
      double start = 0;
      for (int d = first; d <= last; ++d) start = std::max(start, ends[static_cast<std::size_t>(d)]);
      s.start_s = start;
      const detail::block_share share = detail::share_of(s, cost, p.speeds, L);
      for (int d = first; d <= last; ++d) {
        starts[static_cast<std::size_t>(d)] = std::max(starts[static_cast<std::size_t>(d)], start);
        shares[static_cast<std::size_t>(d)].push_back(share);
      }
    }
    for (int d = 0; d < domains; ++d) {
      auto& sh = shares[static_cast<std::size_t>(d)];
      if (sh.empty()) continue;
      ends[static_cast<std::size_t>(d)] = starts[static_cast<std::size_t>(d)] + detail::lockstep_seconds(sh, L);
      makespan = std::max(makespan, ends[static_cast<std::size_t>(d)]);
    }
  }
  p.makespan_s = makespan;
}

namespace detail {

// `p`'s steps as lockstep rounds, taken in `order` (the file comment's rules), padded, with starts
// and makespan derived.
template <cost_model C>
plan lockstep(const plan& p, const C& cost, const std::vector<std::size_t>& order) {
  const parallel_layout& layout = cost.layout();
  const int n = layout.units(), du = coupling_units(layout);
  plan out = p;
  out.steps.clear();
  out.steps.reserve(p.steps.size());
  std::vector<int> next(static_cast<std::size_t>(n), 0);
  for (std::size_t i : order) {
    plan_step s = p.steps[i];
    int round = 0;
    for (int u = s.ranks.first; u < s.ranks.end(); ++u) round = std::max(round, next[static_cast<std::size_t>(u)]);
    for (int u = s.ranks.first; u < s.ranks.end(); ++u) {
      auto& at = next[static_cast<std::size_t>(u)];
      for (; at < round; ++at) out.steps.push_back(padding_step(cost, u, at, p.speeds));
      at = round + 1;
    }
    s.round = round;
    out.steps.push_back(std::move(s));
  }
  for (int d = 0; d * du < n; ++d) {
    const int last = std::min(n, (d + 1) * du);
    const int count = *std::max_element(next.begin() + d * du, next.begin() + last);
    for (int u = d * du; u < last; ++u)
      for (auto& at = next[static_cast<std::size_t>(u)]; at < count; ++at)
        out.steps.push_back(padding_step(cost, u, at, p.speeds));
  }
  std::stable_sort(out.steps.begin(), out.steps.end(), [](const plan_step& a, const plan_step& b) {
    return a.round != b.round ? a.round < b.round : a.ranks.first < b.ranks.first;
  });
  derive_coupled_starts(out, cost);
  return out;
}

}  // namespace detail

/// Makes `p` (pp = 1) runnable on a coupled layout. Its steps are taken in one of two orders,
/// within each of the plan's own rounds: as placed (each unit's steps in start order) and
/// longest first (a domain's k-th micro-steps of like length; a unit's steps may run in any
/// order, their gradients only add up). Each step gets the latest next micro-step index among
/// its members as `round`, a member behind it runs padding passes up to it, every unit is padded
/// to its domain's count, and the starts and makespan are derived (`derive_coupled_starts`); the
/// order that ends sooner is kept (as placed on a tie). Steps are ordered by (round, first rank).
/// Unchanged when the layout is not coupled.
template <cost_model C>
void couple(plan& p, const C& cost) {
  if (!is_coupled(cost.layout())) return;
  std::vector<std::size_t> placed(p.steps.size());
  for (std::size_t i = 0; i < placed.size(); ++i) placed[i] = i;
  std::vector<std::size_t> longest = placed;
  std::stable_sort(placed.begin(), placed.end(), [&](std::size_t a, std::size_t b) {
    const plan_step &x = p.steps[a], &y = p.steps[b];
    if (x.round != y.round) return x.round < y.round;
    return x.start_s != y.start_s ? x.start_s < y.start_s : x.ranks.first < y.ranks.first;
  });
  std::stable_sort(longest.begin(), longest.end(), [&](std::size_t a, std::size_t b) {
    const plan_step &x = p.steps[a], &y = p.steps[b];
    if (x.round != y.round) return x.round < y.round;
    return x.time_s != y.time_s ? x.time_s > y.time_s : x.ranks.first < y.ranks.first;
  });
  plan a = detail::lockstep(p, cost, placed), b = detail::lockstep(p, cost, longest);
  p = b.makespan_s < a.makespan_s ? std::move(b) : std::move(a);
}

/// The ways `p` breaks the lockstep law on a coupled layout: a unit whose rounds are not 0, 1,
/// ... in order, or a domain whose units run different numbers of micro-steps (named with
/// their counts: no engine can run such a plan, its collectives would never all be called).
inline std::vector<std::string> coupling_violations(const plan& p, const parallel_layout& layout) {
  std::vector<std::string> out;
  if (!is_coupled(layout)) return out;
  const int n = layout.units(), du = coupling_units(layout);
  std::vector<int> count(static_cast<std::size_t>(n), 0);
  std::vector<std::vector<int>> rounds(static_cast<std::size_t>(n));
  for (const auto& s : p.steps)
    for (int u = std::max(0, s.ranks.first); u < std::min(n, s.ranks.end()); ++u) rounds[static_cast<std::size_t>(u)].push_back(s.round);
  for (int u = 0; u < n && out.size() < 8; ++u) {
    auto r = rounds[static_cast<std::size_t>(u)];
    std::sort(r.begin(), r.end());
    for (std::size_t j = 0; j < r.size(); ++j)
      if (r[j] != static_cast<int>(j)) {
        out.push_back("unit " + std::to_string(u) + " runs micro-steps of rounds that are not 0, 1, ... once each (round " +
                      std::to_string(r[j]) + " as its micro-step " + std::to_string(j) +
                      "); under collectives that span groups each unit runs one step per round");
        break;
      }
    count[static_cast<std::size_t>(u)] = static_cast<int>(r.size());
  }
  for (int d = 0; d * du < n && out.size() < 16; ++d) {
    const auto from = count.begin() + d * du, to = count.begin() + std::min(n, (d + 1) * du);
    const auto [lo, hi] = std::minmax_element(from, to);
    if (*lo != *hi)
      out.push_back("units " + std::to_string(lo - count.begin()) + " and " + std::to_string(hi - count.begin()) +
                    " of the coupling domain [" + std::to_string(d * du) + ", " +
                    std::to_string(std::min(n, (d + 1) * du)) + ") run " + std::to_string(*lo) + " and " +
                    std::to_string(*hi) + " micro-steps: " +
                    (layout.sharding == sharding_kind::zero3 ? "ZeRO-3's gathers" : "the expert all-to-alls") +
                    " need every unit the same number of times; add padding passes (`couple`)");
  }
  return out;
}

}  // namespace dcp
