#pragma once
/// \file
/// `pipeline_plan`: turns a plan placed on one stage's units into a 1F1B pipeline plan (DESIGN
/// section 4.5). Every planner's `plan_builder::finish` calls it when the layout has pp > 1.
///
///  1. Order: `as_placed` keeps the planner's order (the baselines: each unit its micro-batches
///     in the order it was dealt them); `short_ends` (the dcp planner) gives every unit of a round
///     a tent: every other one of its single-unit steps by length (the 1st, 3rd, ... shortest),
///     shortest first, then its shared steps widest first (then by block, then placement), then
///     its other single-unit steps longest first; a unit that shares a step takes q of the first
///     kind, q the same for all of them (the least half, rounded up, of their single-unit steps).
///     The pipeline fills and drains on short micro-batches, neighbours are alike (a micro-batch
///     much longer than the next ones stalls stage 0 while it travels), and on nested blocks
///     every two units reach the steps they share at the same places, so their 1F1B orders agree.
///     Where a round's longest shared step has a path through the stages (P times its time) of
///     at least half the busiest unit's work, the units that share steps take their q longest
///     single-unit steps first instead (shortest of them first): while the long one travels, a
///     micro-batch ahead of it costs stage 0 its forward (the backward comes back meanwhile), one
///     behind it its backward, after the long one's. Where the path dominates (the longest shared
///     step X's block holds every shared step of the round and (P - 1) t_X / 2, the work ahead
///     that evens stage 0 and the last stage, is at least half of any of its units' other work),
///     a second order runs as well (part 4): X last on its units, their shared steps and longest
///     single-unit steps ahead of it up to that work (X at one index on all of them), the rest
///     after it, longest first. Where other shared steps lie on exactly X's block, two more run:
///     the longest of them, and then all of them, right behind X, longest first (ahead of X each
///     long one would stall stage 0 for a round trip of its own; behind it they travel the stages
///     back to back with X, and the work ahead covers all of them). Another, the ramp of r, runs
///     at the depth d with r = d (P - 1), stage 0's warmup forwards: every unit's r shortest
///     single-unit steps first, shortest first (q of them on units that share steps, q the least
///     of r and their single-unit step counts), then its shared steps widest first, then the rest
///     longest first, with no long-path rule:
///     the warmup fills on the shortest micro-batches, so the first backwards come back soon, and
///     after it the micro-batches shrink, so a backward is rarely waited for behind a longer one.
///  2. Memory in flight (DCP-intra with the schedule's count): stage 0 of a unit holds its last
///     min(d (P - 1) + 1, p + 1) micro-batches; where their memory passes the capacity, the
///     micro-batch of the window that frees bytes for the fewest added seconds per byte
///     checkpoints more blocks (the fewest that make the window fit, or all), then the next;
///     where every one checkpoints all its blocks and the window still does not fit, a new round
///     starts at the step (a pipeline flush: nothing is then in flight).
///  3. Time: the schedule (`schedule_pipeline`) on the cost model's clock; where the orders
///     deadlock, a new round starts at the first step that could not run. Each step's start is
///     its forward's on stage 0, and the makespan the last backward's end.
///  4. Warmup (`short_ends` only): parts 2 and 3 at warmup depths 1, 2, ... (`plan::warmup_depth`,
///     up to `deepest_warmup`) while each ends sooner than the one before; the plan keeps the
///     fastest. A deeper warmup lets stage 0 run ahead while a long micro-batch travels the later
///     stages, and holds more micro-batches in flight (so possibly more recompute). The orders
///     around a dominating path (part 1) run each at its own best depth, and the plan keeps the
///     soonest. Then the ramp of the kept depth's warmup count, at that depth; where it is sooner
///     it is kept, and the ramps of the depths above it, then below it, each at its own depth,
///     while each is sooner than the plan kept. The baselines keep 1F1B's depth 1, as Megatron
///     runs them.

#include <algorithm>
#include <cstddef>
#include <limits>
#include <numeric>
#include <span>
#include <utility>
#include <vector>

#include <dcp/cost/cost_concepts.hpp>
#include <dcp/plan/pipeline_schedule.hpp>
#include <dcp/plan/plan.hpp>
#include <dcp/plan/speeds.hpp>
#include <dcp/sequence.hpp>

namespace dcp {

/// How `pipeline_plan` orders each unit's micro-batches.
enum class pipeline_order {
  as_placed,   ///< the planner's order
  short_ends,  ///< per round and unit: a tent of its single-unit steps around its shared steps, widest first
};

/// Where `order_short_ends` puts a round's dominating path X (the file comment, part 1).
enum class path_place {
  tent,        ///< where the tent or the long-path rule puts it
  last,        ///< last on its units, their longest work ahead of it up to the balance
  pair_last,   ///< as `last`, with the longest other step of exactly X's block right behind it
  block_last,  ///< as `last`, with the other steps of exactly X's block behind it, longest first
};

/// The load of a plan step's sequences under `cost`.
template <cost_model C>
typename C::load_type load_of_step(const C& cost, const plan_step& s) {
  typename C::load_type load{};
  for (const auto& q : s.sequences) load = load + cost.load_of(sequence{q.id, q.frames, q.spatial});
  return load;
}

/// Every step's working set under `cost` (`pipeline_cost_model::working_memory`), for `in_flight_memory`.
template <pipeline_cost_model C>
std::vector<double> working_memory_of(const plan& p, const C& cost) {
  std::vector<double> out;
  out.reserve(p.steps.size());
  for (const auto& s : p.steps) out.push_back(cost.working_memory(load_of_step(cost, s), s.sp()));
  return out;
}

namespace detail {
/// Forward, backward and transfer seconds of every step of `p`, its transfer given (`transfer[j]`
/// for step j): the stage time split by `forward_share`.
template <pipeline_cost_model C>
std::vector<pipeline_step_times> step_times(const plan& p, const C& cost, std::span<const double> transfer) {
  std::vector<pipeline_step_times> out;
  out.reserve(p.steps.size());
  for (std::size_t j = 0; j < p.steps.size(); ++j) {
    const plan_step& s = p.steps[j];
    const double f = s.time_s * forward_share(cost.blocks(), s.checkpointed_blocks);
    out.push_back({f, s.time_s - f, transfer[j]});
  }
  return out;
}
}  // namespace detail

/// Forward, backward and transfer seconds of every step of `p`: its stage time split by
/// `forward_share`, and the cost model's `stage_transfer`.
template <pipeline_cost_model C>
std::vector<pipeline_step_times> pipeline_times(const plan& p, const C& cost) {
  std::vector<double> transfer;
  transfer.reserve(p.steps.size());
  for (const auto& s : p.steps) transfer.push_back(cost.stage_transfer(load_of_step(cost, s), s.sp()));
  return detail::step_times(p, cost, transfer);
}

namespace detail {
/// The step of a round (steps `shared` of it shared by several units, `work[u]` unit u's seconds)
/// whose path dominates, or `steps.size()` where none does: the longest shared step X, whose
/// block holds every shared step of the round, with the balance (P - 1) t_X / 2 (the work ahead
/// that evens stage 0 and the last stage, DESIGN 4.5) at least half the most work any unit of it
/// has besides X.
inline std::size_t dominating_path(std::span<const plan_step> steps, int stages, std::span<const std::size_t> shared,
                                   std::span<const double> work) {
  if (shared.empty()) return steps.size();
  const std::size_t x = *std::max_element(shared.begin(), shared.end(), [&](std::size_t i, std::size_t j) {
    return steps[i].time_s != steps[j].time_s ? steps[i].time_s < steps[j].time_s : i > j;
  });
  const rank_block block = steps[x].ranks;
  const double t = steps[x].time_s;
  double others = 0;
  for (int u = block.first; u < block.end(); ++u) others = std::max(others, work[static_cast<std::size_t>(u)] - t);
  if ((stages - 1) * t / 2 < 0.5 * others) return steps.size();
  for (std::size_t j : shared)
    if (steps[j].ranks.first < block.first || steps[j].ranks.end() > block.end()) return steps.size();
  return x;
}

/// The other shared steps of a round on exactly the block of its dominating path X
/// (`dominating_path`; `shared` the round's shared steps), longest first. Behind X they travel the
/// stages back to back with it: stage 0 runs their forwards one after another and then waits for
/// X's backward, and the work ahead of X covers all of their round trips at once.
inline std::vector<std::size_t> block_tail(std::span<const plan_step> steps, std::span<const std::size_t> shared,
                                           std::size_t x) {
  std::vector<std::size_t> tail;
  for (std::size_t j : shared)
    if (j != x && steps[j].ranks == steps[x].ranks) tail.push_back(j);
  std::stable_sort(tail.begin(), tail.end(),
                   [&](std::size_t i, std::size_t j) { return steps[i].time_s > steps[j].time_s; });
  return tail;
}

/// A round ordered around its dominating path X (`dominating_path`): X's units run their shared
/// steps and their longest single-unit steps ahead of X, up to the balance (P - 1) t_X / 2, and
/// the rest after it; the steps of `tail` (`block_tail`, or none) go right behind X, in its order.
/// Appends the round's order to `order`, or returns false (order untouched) where X cannot have
/// one index on all its units. `singles[u]` holds unit u's single-unit steps, shortest first,
/// `shared` the round's others, widest first (as `order_short_ends` sorts them).
inline bool order_around_path(std::span<const plan_step> steps, int stages, std::size_t x,
                              std::span<const std::size_t> tail, const std::vector<std::vector<std::size_t>>& singles,
                              std::vector<std::size_t> shared, std::vector<std::size_t>& order) {
  const rank_block block = steps[x].ranks;
  const double balance = (stages - 1) * steps[x].time_s / 2;
  std::erase_if(shared, [&](std::size_t j) { return j == x || std::find(tail.begin(), tail.end(), j) != tail.end(); });
  // Per unit of X: its shared steps, and how many of its longest single-unit steps fit with
  // them in the balance. X's index must be the same on every unit of it (so their orders
  // agree): the least such count, but never fewer than any unit's shared steps.
  std::size_t index = std::numeric_limits<std::size_t>::max(), most_shared = 0, fewest_steps = index;
  std::vector<std::size_t> shares(singles.size(), 0);
  for (int u = block.first; u < block.end(); ++u) {
    const auto uu = static_cast<std::size_t>(u);
    double ahead = 0;
    for (std::size_t j : shared)
      if (steps[j].ranks.contains(u)) ++shares[uu], ahead += steps[j].time_s;
    const auto& list = singles[uu];
    std::size_t fit = 0;
    while (fit < list.size() && ahead + steps[list[list.size() - 1 - fit]].time_s <= balance)
      ahead += steps[list[list.size() - 1 - fit]].time_s, ++fit;
    index = std::min(index, shares[uu] + fit);
    most_shared = std::max(most_shared, shares[uu]);
    fewest_steps = std::min(fewest_steps, shares[uu] + list.size());
  }
  if (most_shared > fewest_steps) return false;  // some unit cannot reach X where the others do
  index = std::max(index, most_shared);
  // Ahead: the least count of ahead single-unit steps of any unit first (the shortest of them),
  // then the shared steps widest first, then the other ahead steps shortest first; X; behind:
  // the rest longest first. Units outside X's block share nothing: every other single-unit step
  // ahead, shortest first, the rest behind, longest first.
  std::size_t first = index;
  for (int u = block.first; u < block.end(); ++u) first = std::min(first, index - shares[static_cast<std::size_t>(u)]);
  std::vector<std::vector<std::size_t>> later(singles.size()), behind(singles.size());
  for (std::size_t u = 0; u < singles.size(); ++u) {
    const auto& list = singles[u];
    if (block.contains(static_cast<int>(u))) {
      const std::size_t ahead = index - shares[u], from = list.size() - ahead;
      for (std::size_t i = 0; i < list.size(); ++i)
        (i < from ? behind[u] : i < from + first ? order : later[u]).push_back(list[i]);
    } else {
      for (std::size_t i = 0; i < list.size(); ++i) (i % 2 == 0 ? order : behind[u]).push_back(list[i]);
    }
  }
  order.insert(order.end(), shared.begin(), shared.end());
  for (const auto& list : later) order.insert(order.end(), list.begin(), list.end());
  order.push_back(x);
  order.insert(order.end(), tail.begin(), tail.end());
  for (const auto& list : behind) order.insert(order.end(), list.rbegin(), list.rend());
  return true;
}
}  // namespace detail

namespace detail {
/// The `pipeline_order::short_ends` order of `p` (the file comment, part 1), round by round, for
/// `stages` stages, as the index in `p` of each step of the new order; `p` is in round order and
/// its steps priced. `ramp` 0 gives the tent (or the long-path order), `ramp` r > 0 the ramp of r
/// (its first part: each unit's r shortest single-unit steps first). Where a round's path
/// dominates, `path` says where it goes (`path_place`). `dominated` is set where some round's path
/// dominates, `tail` to the most other steps any of them has on its block (`block_tail`).
inline std::vector<std::size_t> short_ends_order(std::span<const plan_step> steps, int units, int stages,
                                                 std::size_t ramp, path_place path, bool& dominated,
                                                 std::size_t& tail) {
  dominated = false, tail = 0;
  std::vector<std::size_t> out;
  out.reserve(steps.size());
  for (std::size_t a = 0; a < steps.size();) {
    std::size_t b = a;
    while (b < steps.size() && steps[b].round == steps[a].round) ++b;
    std::vector<std::vector<std::size_t>> singles(static_cast<std::size_t>(units));
    std::vector<char> shares(static_cast<std::size_t>(units), 0);
    std::vector<double> work(static_cast<std::size_t>(units), 0);
    std::vector<std::size_t> shared;
    double longest_shared = 0;
    for (std::size_t j = a; j < b; ++j) {
      const plan_step& s = steps[j];
      for (int u = s.ranks.first; u < s.ranks.end(); ++u) work[static_cast<std::size_t>(u)] += s.time_s;
      if (s.sp() == 1) {
        singles[static_cast<std::size_t>(s.ranks.first)].push_back(j);
      } else {
        shared.push_back(j);
        longest_shared = std::max(longest_shared, s.time_s);
        for (int u = s.ranks.first; u < s.ranks.end(); ++u) shares[static_cast<std::size_t>(u)] = 1;
      }
    }
    // A shared step whose path through the stages is at least half the busiest unit's work: while
    // it travels, a micro-batch ahead of it costs stage 0 only its forward and one behind it its
    // backward, after the long one's, so the units that share steps put their longest single-unit
    // steps ahead (the file comment). A ramp has no such rule.
    const double busiest = work.empty() ? 0.0 : *std::max_element(work.begin(), work.end());
    const bool long_path = ramp == 0 && stages * longest_shared >= 0.5 * busiest;
    // Prefix: the tent's every other single-unit step, shortest first (a[0], a[2], ...), at most
    // half of them, or the ramp's shortest r; q of them, q the same for every unit that shares a
    // step (under a long path the q longest, shortest of them first); suffix: the rest, longest first.
    auto prefix = [&](std::size_t singles_of_unit) {
      return ramp > 0 ? std::min(ramp, singles_of_unit) : (singles_of_unit + 1) / 2;
    };
    std::size_t q = steps.size();
    for (std::size_t u = 0; u < singles.size(); ++u)
      if (shares[u]) q = std::min(q, prefix(singles[u].size()));
    auto shorter = [&](std::size_t x, std::size_t y) {
      return steps[x].time_s != steps[y].time_s ? steps[x].time_s < steps[y].time_s : x < y;
    };
    for (auto& list : singles) std::sort(list.begin(), list.end(), shorter);
    std::stable_sort(shared.begin(), shared.end(), [&](std::size_t x, std::size_t y) {
      const plan_step &s = steps[x], &t = steps[y];
      return s.sp() != t.sp() ? s.sp() > t.sp() : s.ranks.first < t.ranks.first;
    });
    if (const std::size_t x = detail::dominating_path(steps, stages, shared, work); x < steps.size()) {
      dominated = true;
      auto behind = detail::block_tail(steps, shared, x);
      tail = std::max(tail, behind.size());
      if (path == path_place::last) behind.clear();
      if (path == path_place::pair_last && behind.size() > 1) behind.resize(1);
      if (path != path_place::tent && detail::order_around_path(steps, stages, x, behind, singles, shared, out)) {
        a = b;
        continue;
      }
    }
    std::vector<std::vector<std::size_t>> rest(singles.size());
    for (std::size_t u = 0; u < singles.size(); ++u) {
      const auto& list = singles[u];
      const std::size_t take = shares[u] ? q : prefix(list.size());
      const bool longest_ahead = long_path && shares[u];
      for (std::size_t i = 0; i < list.size(); ++i) {
        const bool ahead = longest_ahead ? i + take >= list.size() : ramp > 0 ? i < take : i % 2 == 0 && i / 2 < take;
        (ahead ? out : rest[u]).push_back(list[i]);
      }
    }
    out.insert(out.end(), shared.begin(), shared.end());
    for (const auto& list : rest) out.insert(out.end(), list.rbegin(), list.rend());
    a = b;
  }
  return out;
}
}  // namespace detail

/// Orders every unit's micro-batches as `pipeline_order::short_ends` (the file comment, part 1),
/// round by round, for `stages` stages; `p` is in round order and its steps priced. `ramp` 0
/// gives the tent, r > 0 the ramp of r; `path` says where a round's dominating path goes.
/// Returns whether some round's path dominates.
inline bool order_short_ends(plan& p, int stages, std::size_t ramp = 0, path_place path = path_place::tent) {
  bool dominated = false;
  std::size_t tail = 0;
  const auto order = detail::short_ends_order(p.steps, p.gpus, stages, ramp, path, dominated, tail);
  std::vector<plan_step> steps;
  steps.reserve(order.size());
  for (std::size_t j : order) steps.push_back(std::move(p.steps[j]));
  p.steps = std::move(steps);
  return dominated;
}

namespace detail {
/// Starts a new round at step `at` (plan order): it and the later steps of its round move to the
/// next round, and every later round one on.
inline void split_round(plan& p, std::size_t at) {
  for (std::size_t j = at; j < p.steps.size(); ++j) ++p.steps[j].round;
}

/// What parts 2 and 3 price of the steps of a plan as placed, whatever their order: each one's
/// load, stage transfer and working set (recompute changes none), its memory at any count of
/// checkpointed blocks (a few operations: computed where asked), and its time at each count,
/// computed the first time it is asked for (every order and warmup depth asks for many of the
/// same, and few of the counts).
template <pipeline_cost_model C>
class step_prices {
 public:
  /// `loads`: the steps' loads where the caller has them (else priced from their sequences).
  step_prices(const C& cost, const plan& p, std::span<const typename C::load_type> loads = {})
      : cost_(&cost), columns_(static_cast<std::size_t>(cost.blocks()) + 1) {
    const std::size_t n = p.steps.size();
    loads_.reserve(n), transfer_.reserve(n), working_.reserve(n), speed_.reserve(n), sp_.reserve(n), ring_.reserve(n);
    size_of_.reserve(n);
    for (std::size_t j = 0; j < n; ++j) {
      const plan_step& s = p.steps[j];
      loads_.push_back(loads.size() == n ? loads[j] : load_of_step(cost, s));
      transfer_.push_back(cost.stage_transfer(loads_.back(), s.sp()));
      working_.push_back(cost.working_memory(loads_.back(), s.sp()));
      speed_.push_back(block_speed(p.speeds, s.ranks));
      sp_.push_back(s.sp()), ring_.push_back(s.ring);
      // A plan has few step sizes: one memory function per size, its per-model terms computed once.
      std::size_t f = 0;
      while (f < sizes_.size() && sizes_[f] != s.sp()) ++f;
      if (f == sizes_.size()) sizes_.push_back(s.sp()), memory_on_.push_back(memory_of(cost, s.sp()));
      size_of_.push_back(f);
    }
    time_.assign(n * columns_, -1);
  }
  double transfer(std::size_t j) const { return transfer_[j]; }
  /// Step j's working set (`pipeline_cost_model::working_memory`).
  double working(std::size_t j) const { return working_[j]; }
  /// Step j's stage time with k checkpointed blocks (over its block's slowest speed).
  double time(std::size_t j, int k) {
    double& t = time_[j * columns_ + static_cast<std::size_t>(k)];
    if (t < 0) t = time_with_ring(*cost_, loads_[j], sp_[j], k, ring_[j]) / speed_[j];
    return t;
  }
  /// Step j's memory with k checkpointed blocks (`memory_of`).
  double memory(std::size_t j, int k) const { return memory_on_[size_of_[j]](loads_[j], k); }

 private:
  const C* cost_;
  std::size_t columns_;
  std::vector<typename C::load_type> loads_;
  std::vector<double> transfer_, working_, speed_;
  std::vector<int> sp_, ring_;
  std::vector<int> sizes_;                                                   // the plan's step sizes, each once
  std::vector<decltype(memory_of(std::declval<const C&>(), 1))> memory_on_;  // memory_of each of them
  std::vector<std::size_t> size_of_;                                         // step j's index in sizes_
  std::vector<double> time_;                                                 // by j (L + 1) + k; -1: not yet
};

/// Parts 2 and 3 of `pipeline_plan` at `p.warmup_depth`: the recompute and flushes memory in
/// flight needs, then the schedule's times, with a flush wherever the orders deadlock. Step j of
/// `p` is step `origin[j]` of `prices`; `transfer[j]` is its stage transfer.
template <pipeline_cost_model C>
void fit_and_time(plan& p, const C& cost, step_prices<C>& prices, std::span<const std::size_t> origin,
                  std::span<const double> transfer) {
  const int P = cost.layout().pp;
  // 2. Memory in flight on stage 0, step by step in plan order.
  const double stat = cost.static_memory(), cap = cost.capacity();
  const int L = cost.blocks();
  const std::size_t before = stage0_in_flight(P, p.warmup_depth) - 1;  // steps in flight before a step's forward
  // Each unit's steps of the round so far: its window is the last `before` of them.
  std::vector<std::vector<std::size_t>> placed(static_cast<std::size_t>(p.gpus));
  auto window = [&](int u) {
    const auto& list = placed[static_cast<std::size_t>(u)];
    return std::span<const std::size_t>(list).last(std::min(before, list.size()));
  };
  // Each step's working set and stored bytes (its memory less the static and the working set), in
  // plan order, the latter kept as recompute changes the memory: the window sums them often.
  std::vector<double> working(p.steps.size()), stored(p.steps.size());
  for (std::size_t q = 0; q < p.steps.size(); ++q) {
    working[q] = prices.working(origin[q]);
    stored[q] = p.steps[q].memory_bytes - stat - working[q];
  }
  int round = p.steps.front().round;
  for (std::size_t j = 0; j < p.steps.size(); ++j) {
    if (p.steps[j].round != round) {
      round = p.steps[j].round;
      for (auto& list : placed) list.clear();
    }
    for (bool fits = false; !fits;) {
      fits = true;
      for (int u = p.steps[j].ranks.first; u < p.steps[j].ranks.end() && fits; ++u) {
        const auto w = window(u);
        // The window's stored bytes and the largest of its working sets (one operation runs at a time).
        auto held = [&] {
          double sum = 0, largest = 0;
          for (std::size_t q : w) sum += stored[q], largest = std::max(largest, working[q]);
          sum += stored[j], largest = std::max(largest, working[j]);
          return stat + sum + largest;
        };
        double total = held();
        for (; total > cap; total = held()) {
          // Of the window's micro-batches that can checkpoint more, the one that frees bytes for
          // the fewest added seconds per byte, each at the fewest blocks that make the window fit
          // (all of them where no count does): long sequences recompute attention at a higher
          // price per byte, so the short micro-batches around a long one recompute first.
          std::size_t pick = j;
          int pick_k = -1;
          double cheapest = std::numeric_limits<double>::infinity();
          auto consider = [&](std::size_t q) {
            const plan_step& s = p.steps[q];
            if (s.checkpointed_blocks >= L) return;
            const double others = total - s.memory_bytes;
            // Memory does not grow with k (the cost model's law): the fewest k that fits, by halves.
            const std::size_t o = origin[q];
            int lo = s.checkpointed_blocks + 1, hi = L;
            while (lo < hi) {
              const int mid = lo + (hi - lo) / 2;
              others + prices.memory(o, mid) > cap ? lo = mid + 1 : hi = mid;
            }
            const int k = lo;
            const double freed = s.memory_bytes - prices.memory(o, k);
            if (!(freed > 0)) return;
            const double added = prices.time(o, k) - s.time_s;
            const double price = std::max(added, 0.0) / freed;
            if (price < cheapest) cheapest = price, pick = q, pick_k = k;
          };
          for (std::size_t q : w) consider(q);
          consider(j);
          if (pick_k < 0) break;
          plan_step& c = p.steps[pick];
          c.checkpointed_blocks = pick_k;
          c.time_s = prices.time(origin[pick], pick_k);
          c.memory_bytes = prices.memory(origin[pick], pick_k);
          stored[pick] = c.memory_bytes - stat - working[pick];
        }
        if (total > cap && !w.empty()) {
          // Nothing left to checkpoint: flush the pipeline before this step (alone it fits).
          split_round(p, j);
          round = p.steps[j].round;
          for (auto& list : placed) list.clear();
          fits = false;
        }
      }
    }
    for (int u = p.steps[j].ranks.first; u < p.steps[j].ranks.end(); ++u)
      placed[static_cast<std::size_t>(u)].push_back(j);
  }

  // 3. Time, with a flush wherever the orders deadlock.
  pipeline_timeline timeline;
  for (;;) {
    pipeline_deadlock stuck{p.steps.size()};
    timeline = schedule_pipeline(p, step_times(p, cost, transfer), P, &stuck);
    if (stuck.first_stuck == p.steps.size()) break;
    // A round's first step is never the cause; split after it, so every split shrinks a round.
    std::size_t at = stuck.first_stuck;
    if (at == 0 || p.steps[at - 1].round != p.steps[at].round) ++at;
    split_round(p, at);
  }
  for (std::size_t j = 0; j < p.steps.size(); ++j) p.steps[j].start_s = timeline.forward_of(j, 0).start_s;
  p.makespan_s = timeline.makespan_s;
}

/// What parts 2 and 3 change of a step.
struct step_state {
  int round = 0, checkpointed_blocks = 0;
  double time_s = 0, memory_bytes = 0, start_s = 0;
};
inline std::vector<step_state> states_of(const plan& p) {
  std::vector<step_state> out;
  out.reserve(p.steps.size());
  for (const auto& s : p.steps) out.push_back({s.round, s.checkpointed_blocks, s.time_s, s.memory_bytes, s.start_s});
  return out;
}
inline void restore(plan& p, const std::vector<step_state>& states) {
  for (std::size_t j = 0; j < p.steps.size(); ++j) {
    const step_state& x = states[j];
    plan_step& s = p.steps[j];
    s.round = x.round, s.checkpointed_blocks = x.checkpointed_blocks;
    s.time_s = x.time_s, s.memory_bytes = x.memory_bytes, s.start_s = x.start_s;
  }
}
}  // namespace detail

/// The deepest warmup `pipeline_order::short_ends` tries: stage 0 then holds up to 6 (P - 1) + 1
/// micro-batches.
inline constexpr int deepest_warmup = 6;

namespace detail {
/// Parts 2-4 of `pipeline_plan` for `p` in its final order (step j of it step `origin[j]` of
/// `prices`): the warmup depths `first`, `first + 1`, ... up to `last` while each ends sooner than
/// the one before; the plan keeps the fastest.
template <pipeline_cost_model C>
void fit_at_depth(plan& p, const C& cost, step_prices<C>& prices, std::span<const std::size_t> origin, int first,
                  int last) {
  std::vector<double> transfer;
  transfer.reserve(origin.size());
  for (std::size_t o : origin) transfer.push_back(prices.transfer(o));
  p.warmup_depth = first;
  const auto ordered = first < last ? states_of(p) : std::vector<step_state>{};
  fit_and_time(p, cost, prices, origin, transfer);
  // Parts 2 and 3 change only what `step_state` keeps, so each depth starts from the ordered steps'.
  for (int d = first + 1; d <= last; ++d) {
    auto best = states_of(p);
    const double best_makespan = p.makespan_s;
    restore(p, ordered);
    p.warmup_depth = d;
    fit_and_time(p, cost, prices, origin, transfer);
    if (!(p.makespan_s < best_makespan)) {
      restore(p, best);
      p.warmup_depth = d - 1, p.makespan_s = best_makespan;
      break;
    }
  }
}
}  // namespace detail

/// The pipeline plan of `p` (the file comment's parts); `p` is sorted by (round, start, first
/// unit) and its steps priced on `cost` and fitting its capacity alone. `loads`, where given (one
/// per step), are the steps' loads, so they are not priced again from their sequences.
template <pipeline_cost_model C>
void pipeline_plan(plan& p, const C& cost, pipeline_order order, std::span<const typename C::load_type> loads = {}) {
  const int P = cost.layout().pp;
  if (P <= 1 || p.steps.empty()) return;
  detail::step_prices<C> prices(cost, p, loads);
  if (order == pipeline_order::short_ends) {
    // The orders are tried on the steps without their sequences (copied with every candidate, and
    // unchanged by parts 2-4); the sequences go back to the kept one's steps.
    plan shell = std::move(p);
    std::vector<plan_step> placed = std::move(shell.steps);
    shell.steps.clear();
    std::vector<std::vector<planned_sequence>> sequences(placed.size());
    for (std::size_t j = 0; j < placed.size(); ++j) sequences[j] = std::move(placed[j].sequences);
    struct candidate {
      plan p;
      std::vector<std::size_t> origin;  // step j of p is placed step origin[j]
    };
    // One order of the placed steps, fitted and timed at the depths [first, last]; `dominated`
    // says whether some round's path dominates, `tail` the most other steps one has on its block.
    auto fitted = [&](std::size_t ramp, path_place path, int first, int last, bool& dominated, std::size_t& tail) {
      candidate c{shell, detail::short_ends_order(placed, shell.gpus, P, ramp, path, dominated, tail)};
      c.p.steps.reserve(c.origin.size());
      for (std::size_t j : c.origin) c.p.steps.push_back(placed[j]);
      detail::fit_at_depth(c.p, cost, prices, c.origin, first, last);
      return c;
    };
    bool dominated = false, ignored = false;
    std::size_t tail = 0, ignored_tail = 0;
    candidate best = fitted(0, path_place::tent, 1, deepest_warmup, dominated, tail);
    // Where a round's path dominates, the orders around it, each at its own best depth and each
    // where it differs from the one before: the path alone last; with the longest other step of
    // its block right behind it; with all of them behind it.
    const std::pair<path_place, std::size_t> arounds[] = {
        {path_place::last, 0}, {path_place::pair_last, 1}, {path_place::block_last, 2}};
    for (const auto& [path, least_tail] : arounds)
      if (dominated && tail >= least_tail)
        if (candidate around = fitted(0, path, 1, deepest_warmup, ignored, ignored_tail);
            around.p.makespan_s < best.p.makespan_s)
          best = std::move(around);
    // The ramp of the depth's warmup count at the best depth so far; where it is sooner, the
    // ramps of the depths above and below it as well, each way while each is sooner.
    auto ramp_at = [&](int d) {
      return fitted(static_cast<std::size_t>(d) * static_cast<std::size_t>(P - 1), path_place::tent, d, d, ignored,
                    ignored_tail);
    };
    if (candidate ramp = ramp_at(best.p.warmup_depth); ramp.p.makespan_s < best.p.makespan_s) {
      const int middle = ramp.p.warmup_depth;
      best = std::move(ramp);
      for (int step : {1, -1})
        for (int d = middle + step; d >= 1 && d <= deepest_warmup; d += step) {
          candidate next = ramp_at(d);
          if (!(next.p.makespan_s < best.p.makespan_s)) break;
          best = std::move(next);
        }
    }
    p = std::move(best.p);
    for (std::size_t j = 0; j < p.steps.size(); ++j) p.steps[j].sequences = std::move(sequences[best.origin[j]]);
  } else {
    std::vector<std::size_t> origin(p.steps.size());
    std::iota(origin.begin(), origin.end(), std::size_t{0});
    detail::fit_at_depth(p, cost, prices, origin, 1, 1);
  }
  std::stable_sort(p.steps.begin(), p.steps.end(), [](const plan_step& a, const plan_step& b) {
    if (a.round != b.round) return a.round < b.round;
    return a.start_s != b.start_s ? a.start_s < b.start_s : a.ranks.first < b.ranks.first;
  });
}

}  // namespace dcp
