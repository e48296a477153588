#pragma once
/// \file
/// The dcp planner's second stage (DESIGN section 3): `build(prepared, attempt)`, one candidate
/// plan of a prepared batch (`plan/dcp_prepare.hpp`). An attempt is a plain value: the cap on any
/// one step, the gang makespan target, the fluid level, whether wider choices narrow to it,
/// whether short steps dissolve under a per-step floor, and the options a critical step was
/// widened to. The result depends on the prepared batch and the attempt alone; a `dcp_build`
/// holds the attempt's choices and estimates while it packs and places (steps 3, 4, 6 and 7 of
/// `dcp_planner.hpp`'s file comment).

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <limits>
#include <optional>
#include <queue>
#include <set>
#include <span>
#include <utility>
#include <vector>

#include <dcp/cost/cost_concepts.hpp>
#include <dcp/error.hpp>
#include <dcp/group/group_concepts.hpp>
#include <dcp/plan/dcp_prepare.hpp>
#include <dcp/plan/plan.hpp>
#include <dcp/plan/plan_builder.hpp>
#include <dcp/plan/sequence_options.hpp>

namespace dcp::detail {

/// One way to build a plan of a prepared batch (this file's comment).
struct dcp_attempt {
  dcp_attempt(double cap_s, bool dissolving, double target_s = 0, std::size_t fluid_level = 0, bool narrow = false)
      : cap(cap_s), target(target_s), fluid(fluid_level), uniform(narrow), dissolve(dissolving) {}
  double cap;          // no single step should outlast it (the fair share, or a makespan target)
  double target;       // gang steps go where they still end within it; 0 = the earliest-free block
  std::size_t fluid;   // index into the legal sizes of the fluid level
  bool uniform;        // wider choices narrow to the fluid level too
  bool dissolve;       // packing dissolves short steps under a per-step floor
  /// (item, option) pairs that replace the cap's choices, in order: critical steps widened.
  std::vector<std::pair<std::size_t, std::size_t>> widened;
};

/// Each item's option under `a`: its most GPU-efficient one, or against the cap the narrowest
/// that does not outlast it (the fastest when none does), so a lone long sequence does not set
/// the makespan; with a fluid level, a narrower choice widens to the level's sp, and `uniform`
/// narrows wider ones to it (every sequence that fits on the level's sp runs there); then the
/// widened choices.
template <class P>
std::vector<std::size_t> choices_of(const P& p, const dcp_attempt& a) {
  const auto& items = p.items();
  std::vector<std::size_t> out(items.size());
  for (std::size_t i = 0; i < items.size(); ++i) {
    const auto& options = items[i].options;
    std::size_t choice = items[i].base;
    if (options[choice].time_s > a.cap) {
      std::size_t pick = choice;
      for (std::size_t o = 0; o < options.size(); ++o) {
        if (options[o].time_s < options[pick].time_s &&
            (options[pick].time_s > a.cap || options[o].sp < options[pick].sp))
          pick = o;
        if (options[pick].time_s <= a.cap) break;
      }
      choice = pick;
    }
    const int level = p.sizes.sps[a.fluid];
    if (options[choice].sp < level || (a.uniform && options[choice].sp > level))
      for (std::size_t o = 0; o < options.size(); ++o)
        if (options[o].sp == level) choice = o;
    out[i] = choice;
  }
  for (auto [i, o] : a.widened) out[i] = o;
  return out;
}

/// First fit over many open steps in O(log n) per sequence: a tree over the steps, in the order
/// they were opened, keeps each range's fewest tokens. A step takes a sequence when their summed
/// tokens stay within a room (memory grows with the tokens alone); floating-point addition is
/// monotone, so a range whose fewest tokens do not take it holds no step that does.
class least_tokens_tree {
 public:
  static constexpr std::size_t none = std::numeric_limits<std::size_t>::max();
  explicit least_tokens_tree(std::size_t capacity) {
    while (size_ < capacity) size_ *= 2;
    least_.assign(2 * size_, std::numeric_limits<double>::infinity());
  }
  /// Step j was opened or grew to `tokens`.
  void update(std::size_t j, double tokens) {
    std::size_t v = size_ + j;
    least_[v] = tokens;
    for (v /= 2; v >= 1; v /= 2) least_[v] = std::min(least_[2 * v], least_[2 * v + 1]);
  }
  /// The first step s >= from with tokens(s) + tokens <= room; `none` when there is none.
  std::size_t first(std::size_t from, double tokens, double room) const { return find(1, 0, size_, from, tokens, room); }

 private:
  std::size_t find(std::size_t v, std::size_t lo, std::size_t hi, std::size_t from, double tokens, double room) const {
    if (hi <= from || !(least_[v] + tokens <= room)) return none;
    if (hi - lo == 1) return lo;
    const std::size_t mid = lo + (hi - lo) / 2;
    if (const std::size_t s = find(2 * v, lo, mid, from, tokens, room); s != none) return s;
    return find(2 * v + 1, mid, hi, from, tokens, room);
  }
  std::size_t size_ = 1;
  std::vector<double> least_;  // per tree node: the fewest tokens of a step in its range
};

/// One attempt's plan of a prepared batch: its choices and estimates, then packing and placement.
template <cost_model C, class Recompute, group_manager G>
class dcp_build {
  using prepared = dcp_prepared<C, Recompute, G>;
  using load_t = typename C::load_type;
  using item = dcp_item<load_t>;
  static constexpr bool memory_by_tokens = prepared::memory_by_tokens;

 public:
  dcp_build(const prepared& p, const dcp_attempt& a) : p_(p), a_(a), choice_(choices_of(p, a)) {
    // Estimates are a function of the choice and the fluid level: the prepared one where both
    // are the base's, the first item of the shape's where it chose alike (item order: computed).
    const auto& items = p.items();
    estimate_.resize(items.size());
    for (std::size_t i = 0; i < items.size(); ++i) {
      const std::size_t twin = p.batch.twin[i];
      if (choice_[i] == items[i].base && a.fluid == 0)
        estimate_[i] = items[i].estimate;
      else if (twin < i && choice_[twin] == choice_[i])
        estimate_[i] = estimate_[twin];
      else
        estimate_[i] = p.estimate(items[i], choice_[i], a.fluid);
    }
  }

  /// Steps 3, 4, 6 and 7. With a `target` makespan (> 0) each gang step goes to the block that
  /// becomes free latest among those where it still ends within the target (best fit: whole GPUs
  /// stay free for long sp = 1 sequences); otherwise, and when no block qualifies, to the block
  /// free earliest.
  plan run() && {
    const auto& sps = p_.sizes.sps;
    plan_builder<C> b(p_.cost(), p_.job.method, p_.job.stragglers);
    b.order_pipeline(pipeline_order::short_ends);
    std::vector<std::vector<std::size_t>> by_sp(sps.size());
    for (std::size_t i = 0; i < choice_.size(); ++i) by_sp[p_.sp_index(sp_of(i))].push_back(i);

    // Gang: every size but the fluid level's, widest first then longest first. Sizes below the
    // level hold only sequences with no option on it (where a wider block has less memory than
    // a narrower one, on a mixed cluster); they are placed as gang steps too, never dropped.
    std::vector<step_group> gang;
    const std::size_t level = p_.job.inter ? a_.fluid : 0;
    for (std::size_t c = sps.size(); c-- > 0;) {
      if (c == level) continue;
      auto steps = pack(by_sp[c], sps[c], true, p_.sizes.top[c]);
      std::stable_sort(steps.begin(), steps.end(), [](const step_group& x, const step_group& y) { return x.time > y.time; });
      gang.insert(gang.end(), std::make_move_iterator(steps.begin()), std::make_move_iterator(steps.end()));
    }
    std::vector<std::size_t> fluid = sps.empty() ? std::vector<std::size_t>{} : by_sp[level];

    if (!p_.job.inter) {  // synchronised rounds: one step per group per round
      auto singles = pack(fluid, 1, false, p_.sizes.top.empty() ? 0 : p_.sizes.top[0]);
      std::stable_sort(singles.begin(), singles.end(), [](const step_group& x, const step_group& y) { return x.time > y.time; });
      gang.insert(gang.end(), std::make_move_iterator(singles.begin()), std::make_move_iterator(singles.end()));
      place_in_rounds(b, gang);
      return std::move(b).finish(p_.bounds, p_.job.norm);
    }
    for (const auto& g : gang) place_gang(b, g);
    place_fluid(b, sps.empty() ? 1 : sps[level], fluid);
    return std::move(b).finish(p_.bounds, p_.job.norm);
  }

  /// The option item i runs at.
  std::size_t choice(std::size_t i) const { return choice_[i]; }

 private:
  struct step_group {  // sequences that run together, before placement
    std::vector<std::size_t> members;
    load_t load{};
    int sp = 1;
    int k = 0;
    double time = 0;
    int ring = 1;         // the fastest legal ring for its load
    std::size_t cls = 0;  // the capacity class it is priced in
  };
  /// A step's recompute, ring and time on blocks of one capacity class.
  struct pricing {
    int k = 0, ring = 1;
    double time = 0;
  };

  int sp_of(std::size_t i) const { return p_.items()[i].options[choice_[i]].sp; }

  /// `g` priced on blocks of class c: its own pricing in its own class, else re-chosen there.
  std::optional<pricing> priced_in(const step_group& g, std::size_t c) const {
    if (c == g.cls) return pricing{g.k, g.ring, g.time};
    const auto k = p_.choose(g.load, g.sp, c);
    if (!k) return std::nullopt;
    const ring_choice r = fastest_ring(p_.cost(), g.load, g.sp, *k);
    return pricing{*k, r.ring, r.time_s};
  }

  /// Whether some legal ring runs the step within the cap (`fastest_ring(...).time_s <= cap`,
  /// trying the smallest ring first and stopping at the first that fits).
  bool ends_within_cap(const load_t& l, int sp, int k) const {
    const C& cost = p_.cost();
    bool within = cost.time(l, sp, k) <= a_.cap;
    for_each_wider_ring(cost, sp, [&](int r) { within = within || time_with_ring(cost, l, sp, k, r) <= a_.cap; });
    return within;
  }

  void price(step_group& g) const {
    g.k = p_.choose(g.load, g.sp, g.cls).value_or(p_.cost().blocks());
    const ring_choice r = fastest_ring(p_.cost(), g.load, g.sp, g.k);
    g.time = r.time_s, g.ring = r.ring;
  }

  /// First-fit decreasing (by tokens) of `members` into steps of `sp` GPUs of capacity class c
  /// that fit the preferred recompute level; a sequence too long for that runs alone at its own
  /// level (every member must fit class c alone). Gang steps (`capped`) also stay within the cap.
  std::vector<step_group> pack(std::vector<std::size_t> members, int sp, bool capped, std::size_t c) const {
    const auto& items = p_.items();
    {  // tokens descending, id ascending (a total order), sorted by value
      struct member_key {
        std::int64_t tokens, id;
        std::size_t index;
      };
      std::vector<member_key> keys;
      keys.reserve(members.size());
      for (std::size_t m : members) keys.push_back({items[m].tokens, items[m].seq.id, m});
      std::sort(keys.begin(), keys.end(), [](const member_key& x, const member_key& y) {
        return x.tokens != y.tokens ? x.tokens > y.tokens : x.id < y.id;
      });
      for (std::size_t j = 0; j < keys.size(); ++j) members[j] = keys[j].index;
    }
    std::vector<step_group> steps;
    const auto fits = p_.fits_preferred_on(sp, c);
    const int k = p_.k_pref(c, p_.sp_index(sp));
    // Gang steps also stay within the cap: a merged step must not set the makespan.
    auto within_cap = [&](const step_group& g, const item& it) {
      return !capped || ends_within_cap(g.load + it.load, sp, k);
    };
    auto join = [&](step_group& g, std::size_t m) {
      g.members.push_back(m);
      g.load = g.load + items[m].load;
    };
    // Past the first `direct` open steps, where memory grows with the tokens alone, first fit goes
    // through a tree over the steps (FFD of long sequences opens many; each would scan them all).
    constexpr std::size_t direct = 16;
    std::optional<least_tokens_tree> open;
    double room = 0;
    if constexpr (memory_by_tokens) room = p_.sizes.token_room[c * p_.sizes.sps.size() + p_.sp_index(sp)];
    for (std::size_t m : members) {
      const item& it = items[m];
      auto takes = [&](std::size_t j) { return fits(steps[j].load + it.load) && within_cap(steps[j], it); };
      std::size_t j = steps.size();
      if (fits(it.load)) {
        for (j = 0; j < std::min(steps.size(), direct) && !takes(j);) ++j;
        if (j == direct && open) {
          // The first that fits from there; past one over the cap, step by step (time prunes no range).
          if constexpr (memory_by_tokens) j = std::min(open->first(direct, it.load.tokens, room), steps.size());
          while (j < steps.size() && !takes(j)) ++j;
        } else {
          for (; j < steps.size() && !takes(j);) ++j;
        }
      }
      if (j < steps.size()) {
        join(steps[j], m);
      } else {
        steps.push_back({{m}, it.load, sp, 0, 0, 1, c});
      }
      if constexpr (memory_by_tokens) {
        if (open) {
          open->update(j, steps[j].load.tokens);
        } else if (steps.size() > direct) {
          open.emplace(members.size());
          for (std::size_t s = 0; s < steps.size(); ++s) open->update(s, steps[s].load.tokens);
        }
      }
    }
    for (auto& g : steps) price(g);
    if (a_.dissolve) dissolve_short(steps, sp, capped, c);
    return steps;
  }

  /// Under a per-step floor (`step_floor_cost_model`: zero3's weight gather) a step lasts the
  /// floor however little it holds, so packing at the preferred recompute level can leave more
  /// micro-steps than pay. While the shortest step lasts no longer than the floor and its
  /// sequences can join the other steps (each the one of the `dissolve_targets` shortest whose
  /// time grows least, checkpointing the fewest blocks that fit; gang steps within the cap) for
  /// less than it lasts, it is dissolved into them. Every accepted move lowers the steps' total
  /// time, which is what a block accumulating its own steps (DCP-inter) finishes on; synchronised
  /// rounds and plans without a floor are untouched.
  void dissolve_short(std::vector<step_group>& steps, int sp, bool capped, std::size_t c) const {
    std::vector<std::size_t> near;  // the steps tried as targets
    std::vector<step_group> grown;  // what the trial makes of them: load, time, k, ring, joined members
    while (steps.size() > 1) {
      std::size_t s = 0;
      for (std::size_t j = 1; j < steps.size(); ++j)
        if (steps[j].time <= steps[s].time) s = j;  // ties: the later (fewer tokens under FFD)
      if (steps[s].time > p_.step_floor) return;
      near.clear();
      for (std::size_t j = 0; j < steps.size(); ++j)
        if (j != s) near.push_back(j);
      const std::size_t n = std::min(near.size(), dissolve_targets);
      std::partial_sort(near.begin(), near.begin() + static_cast<std::ptrdiff_t>(n), near.end(),
                        [&](std::size_t a, std::size_t b) {  // shortest first; ties: the later
                          return steps[a].time != steps[b].time ? steps[a].time < steps[b].time : a > b;
                        });
      near.resize(n);
      grown.resize(n);
      for (std::size_t t = 0; t < n; ++t) {
        const step_group& g = steps[near[t]];
        grown[t].members.clear();
        grown[t].load = g.load, grown[t].time = g.time, grown[t].k = g.k, grown[t].ring = g.ring;
      }
      if (!dissolve_into(grown, steps[s], sp, capped, c)) return;
      for (std::size_t t = 0; t < n; ++t) {
        step_group& g = steps[near[t]];
        if (grown[t].members.empty()) continue;
        g.members.insert(g.members.end(), grown[t].members.begin(), grown[t].members.end());
        g.load = grown[t].load, g.k = grown[t].k, g.time = grown[t].time, g.ring = grown[t].ring;
      }
      steps.erase(steps.begin() + static_cast<std::ptrdiff_t>(s));
    }
  }
  /// Each member of `from` joins the step of `grown` whose time grows least; true where all found
  /// one and the growth stays below `from`'s time.
  bool dissolve_into(std::vector<step_group>& grown, const step_group& from, int sp, bool capped, std::size_t c) const {
    const std::size_t n = grown.size();
    double added = 0;
    for (std::size_t m : from.members) {
      std::size_t to = n;
      double least = std::numeric_limits<double>::infinity();
      int to_k = 0;
      ring_choice to_r;
      for (std::size_t t = 0; t < n && least > 0; ++t) {  // nothing grows less than not at all
        const load_t l = grown[t].load + p_.items()[m].load;
        const auto k = p_.choose(l, sp, c);
        if (!k) continue;
        const ring_choice r = fastest_ring(p_.cost(), l, sp, *k);
        if (capped && r.time_s > a_.cap) continue;
        if (r.time_s - grown[t].time < least) least = r.time_s - grown[t].time, to = t, to_k = *k, to_r = r;
      }
      added += least;
      if (to == n || !(added < from.time * (1 - 1e-12))) return false;
      step_group& g = grown[to];
      g.members.push_back(m);
      g.load = g.load + p_.items()[m].load, g.k = to_k, g.time = to_r.time_s, g.ring = to_r.ring;
    }
    return true;
  }
  /// Steps `dissolve_short` offers a sequence: the shortest, where the floor leaves most room.
  static constexpr std::size_t dissolve_targets = 2;

  static double total_time(const std::vector<step_group>& steps) {
    double t = 0;
    for (const auto& g : steps) t += g.time;
    return t;
  }

  /// Step 3: a gang step on a block of its size (this class's `run`). Without speeds or capacity
  /// classes a block's start is its ready time: the blocks of the current width stay ordered by it
  /// (widest first, so a width's blocks are set up once).
  void place_gang(plan_builder<C>& b, const step_group& g) {
    const G& groups = p_.groups();
    if (p_.uniform) {
      if (g.sp != width_) {
        width_ = g.sp;
        by_ready_.clear();
        for (int i = 0; i < groups.block_count(width_); ++i) by_ready_.insert({b.ready(groups.block(width_, i)), i});
      }
      auto pick = by_ready_.begin();
      if (a_.target > 0) {  // the latest ready that still ends within the target, lowest index first
        auto fit = by_ready_.upper_bound({a_.target - g.time, std::numeric_limits<int>::max()});
        if (fit != by_ready_.begin()) pick = by_ready_.lower_bound({std::prev(fit)->first, -1});
      }
      const int i = pick->second;
      by_ready_.erase(pick);
      by_ready_.insert({b.place_new(sequences_of(g), groups.block(width_, i), g.k, g.ring), i});
      return;
    }
    // Each block prices the step in its capacity class (once per class); a block that cannot
    // hold it is passed over. The top class of its size always can.
    std::vector<std::optional<pricing>> in_class(p_.classes.count());
    std::vector<char> priced(p_.classes.count(), 0);
    const int n_blocks = groups.block_count(g.sp);
    rank_block best{0, 0}, fit{0, 0};
    pricing best_p, fit_p;
    double best_ready = std::numeric_limits<double>::infinity(), fit_ready = -1;
    for (int i = 0; i < n_blocks; ++i) {
      const rank_block blk = groups.block(g.sp, i);
      const std::size_t c = p_.classes.of(blk);
      if (!priced[c]) in_class[c] = priced_in(g, c), priced[c] = 1;
      if (!in_class[c]) continue;
      const double ready = b.ready(blk);
      const double length = p_.speeds.empty() ? in_class[c]->time : in_class[c]->time / b.speed_of(blk);
      if (a_.target > 0 && ready + length <= a_.target && ready > fit_ready)
        fit = blk, fit_ready = ready, fit_p = *in_class[c];
      // With speeds, the block where the step ends earliest (a slow block may start sooner).
      const double r = ready + (p_.speeds.empty() ? 0.0 : length);
      if (r < best_ready) best = blk, best_ready = r, best_p = *in_class[c];
    }
    check(best.size > 0, errc::infeasible,
          [&] { return "dcp planner: no block of " + std::to_string(g.sp) + " units holds a step it priced there"; });
    const pricing& at = fit_ready >= 0 ? fit_p : best_p;
    b.place_new(sequences_of(g), fit_ready >= 0 ? fit : best, at.k, at.ring);
  }

  /// The fluid-level items by estimate descending, id ascending (ids are unique: a total order).
  /// The keys carry what the assignment reads, so it does not chase items in random order.
  /// `fluid` is in id order and estimates are non-negative, whose bits order as their values: a
  /// stable radix sort on the complemented bits gives exactly that order, in linear time.
  struct fluid_key {
    std::uint64_t order;  // ~bits of the estimate
    std::size_t index;
    double estimate() const noexcept { return std::bit_cast<double>(~order); }
  };
  std::vector<fluid_key> longest_first(const std::vector<std::size_t>& fluid) const {
    std::vector<fluid_key> keys(fluid.size()), spare(fluid.size());
    for (std::size_t j = 0; j < fluid.size(); ++j)
      keys[j] = {~std::bit_cast<std::uint64_t>(estimate_[fluid[j]] + 0.0), fluid[j]};  // + 0.0: no -0
    for (int shift = 0; shift < 64; shift += 11) {
      std::vector<std::size_t> at(2049, 0);
      for (const fluid_key& key : keys) ++at[((key.order >> shift) & 2047) + 1];
      if (std::find(at.begin(), at.end(), keys.size()) != at.end()) continue;  // one digit for all: in order
      for (std::size_t d = 1; d < at.size(); ++d) at[d] += at[d - 1];
      for (const fluid_key& key : keys) spare[at[(key.order >> shift) & 2047]++] = key;
      keys.swap(spare);
    }
    return keys;
  }

  /// Step 4: fluid-level items, longest first, to the block of the level (GPUs at sp = 1) where
  /// they end first, packed per block, then rebalanced (step 6) and placed.
  void place_fluid(plan_builder<C>& b, int sp, const std::vector<std::size_t>& fluid) {
    const G& groups = p_.groups();
    const int n = groups.block_count(sp);
    std::vector<std::vector<std::size_t>> on(static_cast<std::size_t>(n));
    for (auto& members : on) members.reserve(fluid.size() / static_cast<std::size_t>(n) + 4);
    assign_fluid(b, sp, longest_first(fluid), on);
    std::vector<std::vector<step_group>> steps(static_cast<std::size_t>(n));
    std::set<std::pair<double, int>> finish;
    for (int u = 0; u < n; ++u) {
      const rank_block blk = groups.block(sp, u);
      steps[static_cast<std::size_t>(u)] =
          pack(on[static_cast<std::size_t>(u)], sp, false, block_class_[static_cast<std::size_t>(u)]);
      finish.insert({b.ready(blk) + total_time(steps[static_cast<std::size_t>(u)]) / b.speed_of(blk), u});
    }
    rebalance(b, sp, on, steps, finish);
    for (int u = 0; u < n; ++u)
      for (const auto& g : steps[static_cast<std::size_t>(u)])
        b.place_new(sequences_of(g), groups.block(sp, u), g.k, g.ring);
  }

  /// One queue of blocks per capacity class and speed: a sequence goes to the block where it ends
  /// first (its load plus the sequence's time there) among the classes that hold it
  /// (`least_class`), so none lands where it does not fit and the longest go to fast GPUs. Within a
  /// queue every block has one speed, so the least loaded is where it ends first.
  void assign_fluid(const plan_builder<C>& b, int sp, const std::vector<fluid_key>& keys,
                    std::vector<std::vector<std::size_t>>& on) {
    const G& groups = p_.groups();
    const auto& items = p_.items();
    const std::size_t classes = p_.classes.count();
    using slot = std::pair<double, int>;
    struct lane {
      std::size_t cls;
      double speed;
      std::priority_queue<slot, std::vector<slot>, std::greater<>> blocks;
    };
    std::vector<lane> lanes;
    const int n = static_cast<int>(on.size());
    block_class_.assign(static_cast<std::size_t>(n), 0);
    for (int u = 0; u < n; ++u) {
      const rank_block blk = groups.block(sp, u);
      const std::size_t c = p_.classes.of(blk);
      const double v = b.speed_of(blk);
      block_class_[static_cast<std::size_t>(u)] = c;
      auto at = std::find_if(lanes.begin(), lanes.end(), [&](const lane& l) { return l.cls == c && l.speed == v; });
      if (at == lanes.end()) at = lanes.insert(lanes.end(), lane{c, v, {}});
      at->blocks.push({b.ready(blk), u});
    }
    // Once per shape: sequences of one shape share their load (`twin`), so their least class.
    const auto& twin = p_.batch.twin;
    fluid_class_.assign(items.size(), classes);
    if (classes == 1) std::fill(fluid_class_.begin(), fluid_class_.end(), 0);
    for (const fluid_key& key : keys) {
      std::size_t& shape = fluid_class_[twin[key.index]];
      if (shape == classes) shape = p_.least_class(items[twin[key.index]], sp);
      fluid_class_[key.index] = shape;
    }
    for (const fluid_key& key : keys) {
      const double work = key.estimate() / sp;
      lane* pick = nullptr;
      double pick_end = 0;
      for (lane& l : lanes) {  // ends first; ties: the less loaded, then the lower block
        if (l.cls < fluid_class_[key.index] || l.blocks.empty()) continue;
        const double end = l.blocks.top().first + work / l.speed;
        if (!pick || end < pick_end || (end == pick_end && l.blocks.top() < pick->blocks.top())) pick = &l, pick_end = end;
      }
      check(pick != nullptr, errc::infeasible, [] { return std::string("dcp planner: no block holds a fluid sequence"); });
      auto [load, u] = pick->blocks.top();
      pick->blocks.pop();
      on[static_cast<std::size_t>(u)].push_back(key.index);
      pick->blocks.push({load + work / pick->speed, u});
    }
  }

  /// Step 6: move one sequence from the fluid block (a GPU at sp = 1) that finishes last to one
  /// that finishes early, while that lowers the later of the two; the job's `moves` bound the
  /// evaluations.
  void rebalance(const plan_builder<C>& b, int sp, std::vector<std::vector<std::size_t>>& on,
                 std::vector<std::vector<step_group>>& steps, std::set<std::pair<double, int>>& finish) const {
    const G& groups = p_.groups();
    std::size_t budget = p_.job.moves;
    while (budget > 0 && finish.size() > 1) {
      const auto [f_hi, hi] = *finish.rbegin();
      auto& from = on[static_cast<std::size_t>(hi)];
      if (from.empty()) return;  // the last GPU runs only gang steps: nothing to move
      bool moved = false;
      // The four earliest finishers, copied: a move rewrites `finish`.
      std::vector<std::pair<double, int>> targets;
      for (auto t = finish.begin(); t != finish.end() && targets.size() < 4 && t->second != hi; ++t) targets.push_back(*t);
      for (const auto& [f_lo, lo] : targets) {
        if (moved || budget == 0) break;
        const double gap = f_hi - f_lo;
        if (gap <= 1e-12 * f_hi) return;
        // Candidates: sequences whose estimate is nearest half the gap.
        std::vector<std::size_t> cand(from.begin(), from.end());
        std::sort(cand.begin(), cand.end(), [&](std::size_t x, std::size_t y) {
          const double dx = std::abs(estimate_[x] - gap / 2), dy = std::abs(estimate_[y] - gap / 2);
          return dx != dy ? dx < dy : p_.items()[x].seq.id < p_.items()[y].seq.id;
        });
        if (cand.size() > 6) cand.resize(6);
        auto& to = on[static_cast<std::size_t>(lo)];
        const std::size_t c_hi = block_class_[static_cast<std::size_t>(hi)],
                          c_lo = block_class_[static_cast<std::size_t>(lo)];
        for (std::size_t m : cand) {
          if (budget == 0) break;
          if (fluid_class_[m] > c_lo) continue;  // the target block cannot hold it
          --budget;
          std::vector<std::size_t> from2 = from, to2 = to;
          from2.erase(std::find(from2.begin(), from2.end(), m));
          to2.push_back(m);
          auto s_from = pack(from2, sp, false, c_hi), s_to = pack(to2, sp, false, c_lo);
          const rank_block b_hi = groups.block(sp, hi), b_lo = groups.block(sp, lo);
          const double nf = b.ready(b_hi) + total_time(s_from) / b.speed_of(b_hi),
                       nt = b.ready(b_lo) + total_time(s_to) / b.speed_of(b_lo);
          if (std::max(nf, nt) < f_hi * (1 - 1e-12)) {
            finish.erase({f_hi, hi});
            finish.erase({f_lo, lo});
            from = std::move(from2), to = std::move(to2);
            steps[static_cast<std::size_t>(hi)] = std::move(s_from);
            steps[static_cast<std::size_t>(lo)] = std::move(s_to);
            finish.insert({nf, hi});
            finish.insert({nt, lo});
            moved = true;
            break;
          }
        }
      }
      if (!moved) return;
    }
  }

  /// `inter = false`: rounds in which every group runs at most one step; a round ends when
  /// its slowest step does, and the next starts then (gradient accumulation is not balanced).
  void place_in_rounds(plan_builder<C>& b, std::vector<step_group>& pending) const {
    const G& groups = p_.groups();
    const int n = p_.cost().gpus();
    double round_start = 0;
    std::vector<char> busy(static_cast<std::size_t>(n));
    while (!pending.empty()) {
      if (round_start > 0) b.barrier();
      std::fill(busy.begin(), busy.end(), 0);
      double round_end = round_start;
      std::vector<step_group> later;
      for (auto& g : pending) {
        bool placed = false;
        for (int i = 0; i < groups.block_count(g.sp) && !placed; ++i) {
          const rank_block blk = groups.block(g.sp, i);
          if (std::any_of(busy.begin() + blk.first, busy.begin() + blk.end(), [](char c) { return c != 0; })) continue;
          const auto at = priced_in(g, p_.classes.of(blk));  // a block too small for it waits for another
          if (!at) continue;
          std::fill(busy.begin() + blk.first, busy.begin() + blk.end(), 1);
          round_end = std::max(round_end, b.place_new(sequences_of(g), blk, at->k, at->ring, round_start));
          placed = true;
        }
        if (!placed) later.push_back(std::move(g));
      }
      // Every block is free when a round starts, so a round that places nothing never will.
      check(later.size() < pending.size(), errc::infeasible,
            [] { return std::string("dcp planner: a step fits none of its size's blocks"); });
      pending = std::move(later);
      round_start = round_end;
    }
  }

  /// The sequences of `g`, in a buffer the next call reuses (`make_step` copies what it needs).
  std::span<const sequence> sequences_of(const step_group& g) const {
    scratch_.clear();
    for (std::size_t m : g.members) scratch_.push_back(p_.items()[m].seq);
    return scratch_;
  }

  const prepared& p_;
  const dcp_attempt& a_;
  std::vector<std::size_t> choice_;       // per item: its option under the attempt
  std::vector<double> estimate_;          // per item: GPU-seconds when packed with its peers
  std::set<std::pair<double, int>> by_ready_;  // `place_gang`: the current width's blocks by ready time
  int width_ = 0;                         // and that width
  std::vector<std::size_t> block_class_;  // per fluid block: its capacity class
  std::vector<std::size_t> fluid_class_;  // per fluid item: `least_class`
  mutable std::vector<sequence> scratch_;  // `sequences_of`
};

/// The plan of `p` under attempt `a` (this file's comment).
template <cost_model C, class Recompute, group_manager G>
plan build(const dcp_prepared<C, Recompute, G>& p, const dcp_attempt& a) {
  return dcp_build<C, Recompute, G>(p, a).run();
}

}  // namespace dcp::detail
