#pragma once
/// \file
/// `dcp_planner`: Data-Centric Parallel planning of one global batch (DESIGN section 3).
///
/// 1. options: for every sequence and legal sp, the fewest checkpointed blocks that fit (once
///    per distinct shape; the lower bounds of the batch are computed once from them);
/// 2. sp: the most GPU-efficient option, widened while it alone outlasts a cap on any one step
///    (the batch's fair share; see candidates);
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
/// 11. rounds under coupled collectives: on a layout whose collectives span groups (zero3,
///    ep > 1; every plan is made lockstep with padding passes, `plan/coupling.hpp`), the batch is
///    also planned in synchronised rounds (`inter = false`, whose rounds are lockstep already)
///    and kept where it ends sooner and holds every sequence the plan holds. Its own plans (with and
///    without dissolving), and the best at the end, are also re-placed as shelves (`shelved`,
///    `plan/shelves.hpp`) and kept where they end sooner.
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
#include <cmath>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <limits>
#include <optional>
#include <ostream>
#include <queue>
#include <set>
#include <span>
#include <sstream>
#include <string>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include <dcp/compiled.hpp>
#include <dcp/cost/cost_concepts.hpp>
#include <dcp/error.hpp>
#include <dcp/group/contiguous_groups.hpp>
#include <dcp/group/group_concepts.hpp>
#include <dcp/plan/bucket_planner.hpp>
#include <dcp/plan/dynamic_cp_planner.hpp>
#include <dcp/plan/feasibility.hpp>
#include <dcp/plan/lower_bounds.hpp>
#include <dcp/plan/packed_planner.hpp>
#include <dcp/plan/plan.hpp>
#include <dcp/plan/plan_builder.hpp>
#include <dcp/plan/plan_concepts.hpp>
#include <dcp/plan/planning_context.hpp>
#include <dcp/plan/retime.hpp>
#include <dcp/plan/sequence_options.hpp>
#include <dcp/plan/shelves.hpp>
#include <dcp/recompute/full_recompute.hpp>
#include <dcp/recompute/recompute_concepts.hpp>
#include <dcp/recompute/selective_recompute.hpp>

namespace dcp {

namespace detail {
template <class G>
inline constexpr bool is_powers_of_two_of = false;
template <class G>
inline constexpr bool is_powers_of_two_of<powers_of_two_of<G>> = true;


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

}  // namespace detail

/// How the dcp planner shapes micro-batches under pipeline stages (pp > 1; DESIGN 4.5). Two
/// forces pull apart: a long micro-batch holds every later stage up as it passes and the bubble
/// is P - 1 micro-batches long (so short, alike micro-batches), while a step's efficiency grows
/// with its tokens per GPU (so not too short). Where the balance lies is the workload's:
/// `dcp::tune` (`<dcp/workload/tuning.hpp>`) simulates an epoch at each candidate and hands the
/// best over; the planner plans each batch at the values it is given.
struct pipeline_knobs {
  /// No micro-batch's path through the P stages (P times its stage time) outlasts `path_cap`
  /// times the batch's mean sequence time (its GPU-seconds over its sequences) where a wider block
  /// avoids it. In these units one value suits a workload at any batch size and stage count (the
  /// mean tracks the sequences' lengths, not their count): 16 was best or within 2.1% of the best
  /// on the four long-tail runs of DESIGN 4.5 (2 to 8 stages), but a batch of equal sequences
  /// wanted 4 (29% faster there), so tune it.
  double path_cap = 16;
  /// Packing leaves each step memory for `room` x pp micro-batches like it in flight (1F1B's
  /// stage 0 holds pp; a deeper warmup more), so micro-batches rarely need recompute in the
  /// pipeline; a sequence too long for that still runs alone in a step of its own.
  int room = 4;

  /// Throws `dcp::error` naming a value that is not a positive finite path cap or a room of at
  /// least 1.
  void validate() const {
    check(std::isfinite(path_cap) && path_cap > 0, errc::invalid_argument, [&] {
      std::ostringstream os;
      os << "pipeline_knobs::path_cap " << path_cap
         << " must be a positive multiple of the mean sequence time (default 16; dcp::tune chooses one)";
      return os.str();
    });
    check(room >= 1, errc::invalid_argument, [&] {
      return "pipeline_knobs::room " + std::to_string(room) +
             " must be at least 1 (micro-batches in flight per stage; default 4; dcp::tune chooses one)";
    });
  }
  friend bool operator==(const pipeline_knobs&, const pipeline_knobs&) = default;
  friend std::ostream& operator<<(std::ostream& os, const pipeline_knobs& k) {
    return os << "{path_cap=" << k.path_cap << ", room=" << k.room << "}";
  }
};

namespace detail {

template <cost_model C, class Recompute, group_manager G>
class dcp_planning {
  using load_t = typename C::load_type;

 public:
  /// `stragglers`: per-unit speed factors beyond the nodes' device speeds (empty = all 1).
  dcp_planning(const planning_context<C, Recompute, G>& ctx, bool inter, bool intra, std::size_t moves,
               std::span<const double> stragglers = {}, pipeline_knobs knobs = {})
      : ctx_(ctx),
        cost_(ctx.cost),
        recompute_(ctx.recompute),
        groups_(ctx.groups),
        inter_(inter),
        intra_(intra),
        moves_(moves),
        stragglers_(stragglers),
        speeds_(job_speeds(cost_.layout(), stragglers)),
        knobs_(knobs) {
    if constexpr (step_floor_cost_model<C>) step_floor_ = cost_.step_floor();
    dissolving_ = step_floor_ > 0 && inter_;
    // Capacity classes, smallest first: one per distinct node capacity on a mixed cluster (each
    // the cost model with every node that device), else the cost model itself.
    if constexpr (mixed_cluster_cost_model<C>) {
      if (capacities_differ(cost_)) {
        std::vector<unit_device> devices = cost_.layout().nodes;
        std::stable_sort(devices.begin(), devices.end(),
                         [](const unit_device& a, const unit_device& b) { return a.capacity < b.capacity; });
        for (const auto& d : devices)
          if (class_raw_.empty() || d.capacity != class_raw_.back()) {
            class_raw_.push_back(d.capacity);
            class_costs_.push_back(cost_.as_uniform(d));
          }
      }
    }
    uniform_ = speeds_.empty() && classes() == 1;
    if constexpr (pipeline_cost_model<C>) static_bytes_ = cost_.static_memory();
  }

  plan run(std::span<const sequence> batch, loss_normalization norm, infeasible_policy policy,
           const std::string& method) {
    std::vector<skipped_sequence> skipped;
    sps_ = ctx_.sp_sizes();  // legal and offered by the group manager
    const int widest = sps_.empty() ? 0 : sps_.back();
    top_.clear();  // per size: the largest capacity class of a block of it
    for (int sp : sps_) {
      std::size_t top = 0;
      for (int i = 0, n = groups_.block_count(sp); i < n; ++i) top = std::max(top, class_of(groups_.block(sp, i)));
      top_.push_back(top);
    }
    // Feasible where the largest block of some size holds it.
    std::vector<sequence> seqs =
        feasible_sequences(class_cost(classes() - 1), batch, policy, skipped, std::span<const int>(sps_));
    // Canonical order: plans must not depend on the order ranks received the batch in.
    const auto by_id = [](const sequence& a, const sequence& b) { return a.id < b.id; };
    if (!std::is_sorted(seqs.begin(), seqs.end(), by_id)) std::sort(seqs.begin(), seqs.end(), by_id);
    items_.clear();
    items_.reserve(seqs.size());
    shape_options_.clear();
    twin_.clear();
    // Sequences of one shape share their options (batches repeat a few shapes many times):
    // same_as[i] is the first sequence of i's shape, found in a table keyed by shape (open
    // addressing; the answer does not depend on where a shape lands in it).
    std::vector<std::size_t> same_as(seqs.size());
    {
      std::size_t slots = 2;
      while (slots < 2 * seqs.size()) slots *= 2;
      std::vector<std::size_t> first_of(slots, seqs.size());
      for (std::size_t i = 0; i < seqs.size(); ++i) {
        const sequence& s = seqs[i];
        std::uint64_t h = static_cast<std::uint64_t>(s.frames) * 0x9e3779b97f4a7c15ull ^ static_cast<std::uint64_t>(s.spatial);
        h = (h ^ (h >> 31)) * 0xbf58476d1ce4e5b9ull;
        std::size_t slot = static_cast<std::size_t>(h ^ (h >> 29)) & (slots - 1);
        for (; first_of[slot] != seqs.size(); slot = (slot + 1) & (slots - 1))
          if (seqs[first_of[slot]].frames == s.frames && seqs[first_of[slot]].spatial == s.spatial) break;
        if (first_of[slot] == seqs.size()) first_of[slot] = i;
        same_as[i] = first_of[slot];
      }
    }
    std::vector<std::size_t> item_of(seqs.size(), seqs.size());  // sequence -> its item, once priced
    for (std::size_t i = 0; i < seqs.size(); ++i) {
      const sequence& s = seqs[i];
      item it{s, cost_.load_of(s), cost_.tokens_of(s), {}, 0, 0, 0};
      const std::size_t twin = item_of[same_as[i]];
      if (twin < items_.size()) {
        it.options = items_[twin].options;
      } else {
        shape_options_.push_back(options(it.load));  // a moved vector keeps its buffer: spans stay valid
        it.options = shape_options_.back();
      }
      if (it.options.empty()) {  // fits only with blocks the recompute policy will not checkpoint
        if (policy == infeasible_policy::skip) {
          skipped.push_back({s.id, it.tokens, infeasible_error(class_cost(classes() - 1), s, widest).what()});
          continue;
        }
        throw infeasible_error(class_cost(classes() - 1), s, widest);
      }
      if (item_of[same_as[i]] == seqs.size()) item_of[same_as[i]] = items_.size();
      twin_.push_back(item_of[same_as[i]]);
      items_.push_back(std::move(it));
    }
    planned_.clear();
    for (const auto& it : items_) planned_.push_back(it.seq);
    k_pref_.clear();
    for (std::size_t c = 0; c < classes(); ++c)
      for (int sp : sps_) k_pref_.push_back(choose(cost_.load_of(make_sequence(0, 1)), sp, c).value_or(cost_.blocks()));
    if constexpr (pipeline_cost_model<C>) in_flight_ = cost_.layout().pp > 1 ? knobs_.room * cost_.layout().pp : 1;
    pack_in_flight(in_flight_);
    // Once: every candidate plan shares them. Under selective recompute the bounds' options are
    // the items' own.
    bounds_ = bounds_on(groups_);
    plan best = shelves_if_sooner(candidates(method, norm), norm);
    if (dissolving_ && best.makespan_s > bounds_.joint_s) {
      // Dissolving steers the rebalancing and the candidates, which are heuristics: on the rare
      // batch where the plan without it ends sooner, that one is kept, so a floor never costs time
      // (a plan at the joint bound has nothing to fear).
      dissolving_ = false;
      plan plain = shelves_if_sooner(candidates(method, norm), norm);
      dissolving_ = true;
      if (plain.makespan_s < best.makespan_s) best = std::move(plain);
    }
    best.skipped = std::move(skipped);
    std::sort(best.skipped.begin(), best.skipped.end(),  // in id order, like everything else here
              [](const skipped_sequence& a, const skipped_sequence& b) { return a.id < b.id; });
    return best;
  }

  /// Under coupled collectives, `p` or its steps re-placed as shelves (`shelved`), whichever
  /// ends sooner; `p` otherwise.
  plan shelves_if_sooner(plan p, loss_normalization norm) const {
    if (!is_coupled(cost_.layout()) || p.steps.empty() || p.makespan_s <= p.bound_s() * (1 + 1e-12)) return p;
    plan q = shelved(p, cost_, groups_, stragglers_, norm);
    return q.makespan_s < p.makespan_s * (1 - 1e-12) ? q : p;
  }

  /// The lower bounds of the planned sequences on the context's blocks, after `run`.
  const batch_bounds& bounds() const noexcept { return bounds_; }

  /// The lower bounds of the planned sequences on the blocks `groups` offers (a subset of the
  /// context's sizes), after `run`. Under selective recompute the bounds' options are the items'
  /// own, so this costs a sweep, not a pricing.
  template <group_manager G2>
  batch_bounds bounds_on(const G2& groups) const {
    if (intra_ && std::is_same_v<Recompute, selective_recompute>)
      return lower_bounds_of(
          cost_, groups, items_.size(), [&](std::size_t i) -> const load_t& { return items_[i].load; },
          [&](std::size_t i) { return items_[i].options; },
          [&](std::size_t i) {
            if constexpr (std::equality_comparable<load_t>)
              if (!(items_[twin_[i]].load == items_[i].load)) return i;
            return twin_[i];
          },
          speeds_);
    return lower_bounds(cost_, groups, planned_, speeds_);
  }

 private:
  /// Steps 2-6: the sp choices, the candidate plans and the best one improved.
  plan candidates(const std::string& method, loss_normalization norm) {
    choose_sp();

    // Candidates: the fair-share cap with earliest-free gang placement. Sparse batches (under
    // 16 sequences per GPU, where a few sequences per GPU leave holes) also try, for a makespan
    // target T from the joint bound up: caps at T (and a little above) with gang steps stacked
    // on blocks that still end within T (GPUs stay whole for long sp = 1 sequences); caps below
    // T that split long sequences finer so that they pack; and wider fluid levels: every
    // sequence on at least sp = s GPUs, balanced over the blocks of s as sp = 1 sequences are
    // over GPUs, so that few short sequences share steps (a step's efficiency grows with its
    // tokens per GPU). The best one is improved further; all candidates share the bounds.
    if (cost_.layout().pp > 1 && inter_) {
      // Pipelines: one plan at the planner's knobs (`pipeline_knobs`; `dcp::tune` finds a
      // workload's). The cap splits long sequences over wider blocks, so that no micro-batch
      // holds the later stages up for long as it passes them.
      setup(knobs_.path_cap * mean_seconds_ / cost_.layout().pp, 0, false);
      return build(method, norm, 0);
    }
    setup(share_, 0, false);
    plan best = build(method, norm, 0);
    if (inter_) {
      const double target = std::max(share_, bounds_.joint_s);
      const bool sparse = items_.size() < 16 * static_cast<std::size_t>(cost_.gpus());
      auto attempt = [&](double cap, double at, std::size_t level, bool uniform) {
        if (best.efficiency() >= 0.99) return;
        setup(cap, level, uniform);
        plan next = build(method, norm, at);
        if (next.makespan_s < best.makespan_s * (1 - 1e-12))
          best = std::move(next), best_cap_ = cap, best_target_ = at, best_fluid_ = level, best_uniform_ = uniform;
      };
      if (sparse) {
        attempt(target, target, 0, false);
        for (double f : {0.5, 0.7}) attempt(target * f, target, 0, false);
        for (double f : {1.04, 1.12}) attempt(target * f, target * f, 0, false);
        for (std::size_t level = 1; level < sps_.size(); ++level) {
          attempt(target, target, level, false);
          attempt(target, target, level, true);
        }
      }
      best = widen_critical(std::move(best), method, norm);
    }
    return best;
  }

  struct item {
    sequence seq;
    load_t load;
    std::int64_t tokens;
    std::span<const sequence_option> options;  // its shape's, in shape_options_
    std::size_t choice;  // index into options
    std::size_t base;    // the most GPU-efficient option
    double estimate;     // GPU-seconds when packed with its peers
  };
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

  // A step's memory grows with its load's token count alone (`token_memory_cost_model`, e.g. the
  // analytic model: static memory plus activations per token), so first fit can skip every open
  // step with at least as many tokens as one that cannot take a sequence.
  static constexpr bool memory_by_tokens = token_memory_cost_model<C>;

  std::size_t classes() const noexcept { return class_costs_.empty() ? 1 : class_costs_.size(); }
  const C& class_cost(std::size_t c) const { return class_costs_.empty() ? cost_ : class_costs_[c]; }
  /// The capacity class of a block: that of its smallest member (0 without classes).
  std::size_t class_of(rank_block b) const {
    if (class_raw_.empty()) return 0;
    const double raw = cost_.layout().capacity_of(b, 0);
    return static_cast<std::size_t>(std::lower_bound(class_raw_.begin(), class_raw_.end(), raw) - class_raw_.begin());
  }
  int k_pref(std::size_t c, std::size_t l) const { return k_pref_[c * sps_.size() + l]; }

  /// Packs steps as if `count` like them were in flight (`fits_in_flight`), and the token rooms
  /// with it.
  void pack_in_flight(int count) {
    in_flight_ = count;
    token_room_.clear();
    if constexpr (memory_by_tokens)
      for (std::size_t c = 0; c < classes(); ++c)
        for (std::size_t l = 0; l < sps_.size(); ++l) token_room_.push_back(token_room(l, c));
  }

  /// Whether a step of `memory` bytes packs within `capacity`: under pp > 1 with P - 1 more like it
  /// in flight (1F1B's stage 0), so packed micro-batches run without recomputation in the
  /// pipeline; a sequence too long for that still runs alone in a step of its own.
  bool fits_in_flight(double memory, double capacity) const noexcept {
    if (in_flight_ == 1) return memory <= capacity;
    return static_bytes_ + in_flight_ * (memory - static_bytes_) <= capacity;
  }

  /// With `memory_by_tokens`: the most tokens (a double) with which a step on sps_[l] fits at its
  /// preferred recompute level in class c (-inf when none does), as `fits_in_flight` counts. Memory grows with the
  /// tokens, so for every load `l.tokens <= room` is exactly `memory(l, sp, k) <= capacity`.
  double token_room(std::size_t l, std::size_t c) const {
    const auto memory = cost_.memory_at(sps_[l]);
    const int k = k_pref(c, l);
    const double capacity = class_cost(c).capacity();
    auto fits = [&](std::uint64_t bits) {
      load_t x{};
      x.tokens = std::bit_cast<double>(bits);
      return fits_in_flight(memory(x, k), capacity);
    };
    if (!fits(0)) return -std::numeric_limits<double>::infinity();
    // Non-negative doubles are ordered as their bit patterns: bisect those (+inf never fits).
    std::uint64_t lo = 0, hi = std::bit_cast<std::uint64_t>(std::numeric_limits<double>::infinity());
    while (hi - lo > 1) {
      const std::uint64_t mid = lo + (hi - lo) / 2;
      (fits(mid) ? lo : hi) = mid;
    }
    return std::bit_cast<double>(lo);
  }

  /// The recompute of a step of `l` on sp units of capacity class c (none where it does not fit).
  std::optional<int> choose(const load_t& l, int sp, std::size_t c) const {
    if (intra_) return recompute_.choose(class_cost(c), l, sp);
    return full_recompute{}.choose(class_cost(c), l, sp);
  }
  /// `g` priced on blocks of class c: its own pricing in its own class, else re-chosen there.
  std::optional<pricing> priced_in(const step_group& g, std::size_t c) const {
    if (c == g.cls) return pricing{g.k, g.ring, g.time};
    const auto k = choose(g.load, g.sp, c);
    if (!k) return std::nullopt;
    const ring_choice r = fastest_ring(cost_, g.load, g.sp, *k);
    return pricing{*k, r.ring, r.time_s};
  }
  /// The smallest capacity class whose blocks of `sp` units hold `it` alone.
  std::size_t least_class(const item& it, int sp) const {
    std::size_t c = 0;
    while (c + 1 < classes() && !choose(it.load, sp, c)) ++c;
    return c;
  }
  std::size_t sp_index(int sp) const {
    return static_cast<std::size_t>(std::find(sps_.begin(), sps_.end(), sp) - sps_.begin());
  }
  /// Whether a load fits the sp's preferred recompute level (0 blocks under selective recompute),
  /// as a callable for one sp: the load's tokens against the sp's `token_room_` where
  /// memory grows with them alone, else the memory with the cost model's per-(sp, k) terms
  /// computed once where it offers that (`memory_at`): the same answer either way.
  auto fits_preferred_on(int sp, std::size_t c) const {
    const int k = k_pref(c, sp_index(sp));
    const double capacity = class_cost(c).capacity();
    if constexpr (memory_by_tokens)
      return [room = token_room_[c * sps_.size() + sp_index(sp)]](const load_t& l) { return l.tokens <= room; };
    else
      return [this, memory = memory_of(cost_, sp), k, capacity](const load_t& l) {
        return fits_in_flight(memory(l, k), capacity);
      };
  }
  /// Options on the largest block of each size (the class a block of it has at most).
  std::vector<sequence_option> options(const load_t& l) const {
    std::vector<sequence_option> out;
    for (std::size_t i = 0; i < sps_.size(); ++i)
      if (const int sp = sps_[i]; auto k = choose(l, sp, top_[i])) {
        const ring_choice r = fastest_ring(cost_, l, sp, *k);
        out.push_back({sp, *k, r.time_s, cost_.memory(l, sp, *k), r.ring});
      }
    return out;
  }
  int sp_of(const item& it) const { return it.options[it.choice].sp; }

  /// Step 2: most GPU-efficient option, and the fair share of the batch per GPU.
  void choose_sp() {
    for (std::size_t i = 0; i < items_.size(); ++i) {
      item& it = items_[i];
      if (twin_[i] < i) {  // its shape's options: its shape's pick
        it.choice = it.base = items_[twin_[i]].base;
        continue;
      }
      std::size_t best = 0;
      for (std::size_t o = 1; o < it.options.size(); ++o)
        if (it.options[o].gpu_seconds() < it.options[best].gpu_seconds()) best = o;
      it.choice = it.base = best;
    }
    // Largest step of each level that needs no recomputation: the reference for packed estimates.
    level_cap_.clear();
    for (std::size_t l = 0; l < sps_.size(); ++l)
      level_cap_.push_back(
          std::max<std::int64_t>(1, step_token_capacity(class_cost(top_[l]), sps_[l], k_pref(top_[l], l))));
    fluid_ = 0;
    double total = 0;
    for (std::size_t i = 0; i < items_.size(); ++i) {
      estimate_at(i);
      total += items_[i].estimate;
    }
    double capacity = cost_.gpus();
    if (!speeds_.empty()) {
      capacity = 0;
      for (double v : speeds_) capacity += v;
    }
    share_ = total / capacity;
    mean_seconds_ = items_.empty() ? 0 : total / static_cast<double>(items_.size());
    best_cap_ = share_, best_target_ = 0, best_fluid_ = 0, best_uniform_ = false;
  }
  /// Step 2, against a cap on any one step's time: a sequence whose most GPU-efficient option
  /// outlasts it takes the narrowest option that does not (the fastest when none does), so a
  /// lone long sequence does not set the makespan.
  /// With a fluid level, a narrower choice widens to the level's sp; `uniform` also narrows
  /// wider ones to it (every sequence that fits on the level's sp runs there).
  void setup(double cap, std::size_t fluid, bool uniform) {
    cap_ = cap;
    const bool relevel = fluid != fluid_;
    fluid_ = fluid;
    for (std::size_t i = 0; i < items_.size(); ++i) {
      item& it = items_[i];
      const std::size_t was = it.choice;
      it.choice = it.base;
      if (it.options[it.choice].time_s > cap) {
        std::size_t pick = it.choice;
        for (std::size_t o = 0; o < it.options.size(); ++o) {
          if (it.options[o].time_s < it.options[pick].time_s &&
              (it.options[pick].time_s > cap || it.options[o].sp < it.options[pick].sp))
            pick = o;
          if (it.options[pick].time_s <= cap) break;
        }
        it.choice = pick;
      }
      if (sp_of(it) < sps_[fluid_] || (uniform && sp_of(it) > sps_[fluid_]))
        for (std::size_t o = 0; o < it.options.size(); ++o)
          if (it.options[o].sp == sps_[fluid_]) it.choice = o;
      if (it.choice != was || relevel) estimate_at(i);
    }
  }
  /// `estimate(items_[i])`, copied from the first item of its shape when that runs the same
  /// option (its estimate is current: passes go in item order).
  void estimate_at(std::size_t i) {
    item& it = items_[i];
    if (const item& twin = items_[twin_[i]]; twin_[i] < i && twin.choice == it.choice)
      it.estimate = twin.estimate;
    else
      estimate(it);
  }
  /// GPU-seconds of an item; on the fluid level, as a share of a full step of its copies.
  void estimate(item& it) const {
    const auto& o = it.options[it.choice];
    const std::int64_t step_cap = o.sp == sps_[fluid_] ? level_cap_[fluid_] : 0;
    if (it.tokens < step_cap) {
      const std::int64_t copies = std::max<std::int64_t>(1, step_cap / std::max<std::int64_t>(it.tokens, 1));
      it.estimate = o.sp * fastest_ring(cost_, repeated_load<C>(it.load, copies), o.sp, o.checkpointed_blocks).time_s /
                    static_cast<double>(copies);
    } else {
      it.estimate = o.gpu_seconds();
    }
  }

  /// Whether some legal ring runs the step within the cap (`fastest_ring(...).time_s <= cap_`,
  /// trying the smallest ring first and stopping at the first that fits).
  bool ends_within_cap(const load_t& l, int sp, int k) const {
    const int first = step_ring_of(cost_, sp);
    if (cost_.time(l, sp, k) <= cap_) return true;
    for (int r = 2 * first, last = widest_ring_of(cost_, sp); r <= last && sp % r == 0; r *= 2)
      if (time_with_ring(cost_, l, sp, k, r) <= cap_) return true;
    return false;
  }

  void price(step_group& g) const {
    g.k = choose(g.load, g.sp, g.cls).value_or(cost_.blocks());
    const ring_choice r = fastest_ring(cost_, g.load, g.sp, g.k);
    g.time = r.time_s, g.ring = r.ring;
  }

  /// First-fit decreasing (by tokens) of `members` into steps of `sp` GPUs of capacity class c
  /// that fit the preferred recompute level; a sequence too long for that runs alone at its own
  /// level (every member must fit class c alone). Gang steps (`capped`) also stay within the cap.
  std::vector<step_group> pack(std::vector<std::size_t> members, int sp, bool capped, std::size_t c) const {
    {  // tokens descending, id ascending (a total order), sorted by value
      struct member_key {
        std::int64_t tokens, id;
        std::size_t index;
      };
      std::vector<member_key> keys;
      keys.reserve(members.size());
      for (std::size_t m : members) keys.push_back({items_[m].tokens, items_[m].seq.id, m});
      std::sort(keys.begin(), keys.end(), [](const member_key& x, const member_key& y) {
        return x.tokens != y.tokens ? x.tokens > y.tokens : x.id < y.id;
      });
      for (std::size_t j = 0; j < keys.size(); ++j) members[j] = keys[j].index;
    }
    std::vector<step_group> steps;
    const auto fits = fits_preferred_on(sp, c);
    const int k = k_pref(c, sp_index(sp));
    // Gang steps also stay within the cap: a merged step must not set the makespan.
    auto within_cap = [&](const step_group& g, const item& it) {
      return !capped || ends_within_cap(g.load + it.load, sp, k);
    };
    auto join = [&](step_group& g, std::size_t m) {
      g.members.push_back(m);
      g.load = g.load + items_[m].load;
    };
    // Past the first `direct` open steps, where memory grows with the tokens alone, first fit goes
    // through a tree over the steps (FFD of long sequences opens many; each would scan them all).
    constexpr std::size_t direct = 16;
    std::optional<least_tokens_tree> open;
    double room = 0;
    if constexpr (memory_by_tokens) room = token_room_[c * sps_.size() + sp_index(sp)];
    for (std::size_t m : members) {
      const item& it = items_[m];
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
    if (dissolving_) dissolve_short(steps, sp, capped, c);
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
      if (steps[s].time > step_floor_) return;
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
      double added = 0;
      for (std::size_t m : steps[s].members) {
        std::size_t to = n;
        double least = std::numeric_limits<double>::infinity();
        int to_k = 0;
        ring_choice to_r;
        for (std::size_t t = 0; t < n && least > 0; ++t) {  // nothing grows less than not at all
          const load_t l = grown[t].load + items_[m].load;
          const auto k = choose(l, sp, c);
          if (!k) continue;
          const ring_choice r = fastest_ring(cost_, l, sp, *k);
          if (capped && r.time_s > cap_) continue;
          if (r.time_s - grown[t].time < least) least = r.time_s - grown[t].time, to = t, to_k = *k, to_r = r;
        }
        added += least;
        if (to == n || !(added < steps[s].time * (1 - 1e-12))) return;
        step_group& g = grown[to];
        g.members.push_back(m);
        g.load = g.load + items_[m].load, g.k = to_k, g.time = to_r.time_s, g.ring = to_r.ring;
      }
      for (std::size_t t = 0; t < n; ++t) {
        step_group& g = steps[near[t]];
        if (grown[t].members.empty()) continue;
        g.members.insert(g.members.end(), grown[t].members.begin(), grown[t].members.end());
        g.load = grown[t].load, g.k = grown[t].k, g.time = grown[t].time, g.ring = grown[t].ring;
      }
      steps.erase(steps.begin() + static_cast<std::ptrdiff_t>(s));
    }
  }
  /// Steps `dissolve_short` offers a sequence: the shortest, where the floor leaves most room.
  static constexpr std::size_t dissolve_targets = 2;

  double total_time(const std::vector<step_group>& steps) const {
    double t = 0;
    for (const auto& g : steps) t += g.time;
    return t;
  }

  /// Steps 3-6 for the current sp choices. With a `target` makespan (> 0) each gang step goes to
  /// the block that becomes free latest among those where it still ends within the target
  /// (best fit: whole GPUs stay free for long sp = 1 sequences); otherwise, and when no block
  /// qualifies, to the block free earliest.
  plan build(const std::string& method, loss_normalization norm, double target) {
    const G& groups = groups_;
    plan_builder<C> b(cost_, method, stragglers_);
    b.order_pipeline(pipeline_order::short_ends);
    std::vector<std::vector<std::size_t>> by_sp(sps_.size());
    for (std::size_t i = 0; i < items_.size(); ++i) by_sp[sp_index(sp_of(items_[i]))].push_back(i);

    // Gang: every size but the fluid level's, widest first then longest first. Sizes below the
    // level hold only sequences with no option on it (where a wider block has less memory than
    // a narrower one, on a mixed cluster); they are placed as gang steps too, never dropped.
    std::vector<step_group> gang;
    const std::size_t level = inter_ ? fluid_ : 0;
    for (std::size_t c = sps_.size(); c-- > 0;) {
      if (c == level) continue;
      auto steps = pack(by_sp[c], sps_[c], true, top_[c]);
      std::stable_sort(steps.begin(), steps.end(), [](const step_group& x, const step_group& y) { return x.time > y.time; });
      gang.insert(gang.end(), std::make_move_iterator(steps.begin()), std::make_move_iterator(steps.end()));
    }
    std::vector<std::size_t> fluid = sps_.empty() ? std::vector<std::size_t>{} : by_sp[level];

    if (!inter_) {  // synchronised rounds: one step per group per round
      auto singles = pack(fluid, 1, false, top_.empty() ? 0 : top_[0]);
      std::stable_sort(singles.begin(), singles.end(), [](const step_group& x, const step_group& y) { return x.time > y.time; });
      gang.insert(gang.end(), std::make_move_iterator(singles.begin()), std::make_move_iterator(singles.end()));
      place_in_rounds(b, groups, gang);
      return std::move(b).finish(bounds_, norm);
    }

    // Without speeds or capacity classes a block's start is its ready time: keep the blocks of
    // the current width ordered by it (widest first, so a width's blocks are set up once).
    std::set<std::pair<double, int>> by_ready;
    int width = 0;
    for (const auto& g : gang) {  // widest first keeps each block's members in step
      if (uniform_) {
        if (g.sp != width) {
          width = g.sp;
          by_ready.clear();
          for (int i = 0; i < groups.block_count(width); ++i) by_ready.insert({b.ready(groups.block(width, i)), i});
        }
        auto pick = by_ready.begin();
        if (target > 0) {  // the latest ready that still ends within the target, lowest index first
          auto fit = by_ready.upper_bound({target - g.time, std::numeric_limits<int>::max()});
          if (fit != by_ready.begin()) pick = by_ready.lower_bound({std::prev(fit)->first, -1});
        }
        const int i = pick->second;
        by_ready.erase(pick);
        by_ready.insert({b.place_new(sequences_of(g), groups.block(width, i), g.k, g.ring), i});
        continue;
      }
      // Each block prices the step in its capacity class (once per class); a block that cannot
      // hold it is passed over. The top class of its size always can.
      std::vector<std::optional<pricing>> in_class(classes());
      std::vector<char> priced(classes(), 0);
      const int n_blocks = groups.block_count(g.sp);
      rank_block best{0, 0}, fit{0, 0};
      pricing best_p, fit_p;
      double best_ready = std::numeric_limits<double>::infinity(), fit_ready = -1;
      for (int i = 0; i < n_blocks; ++i) {
        const rank_block blk = groups.block(g.sp, i);
        const std::size_t c = class_of(blk);
        if (!priced[c]) in_class[c] = priced_in(g, c), priced[c] = 1;
        if (!in_class[c]) continue;
        const double ready = b.ready(blk);
        const double length = speeds_.empty() ? in_class[c]->time : in_class[c]->time / b.speed_of(blk);
        if (target > 0 && ready + length <= target && ready > fit_ready)
          fit = blk, fit_ready = ready, fit_p = *in_class[c];
        // With speeds, the block where the step ends earliest (a slow block may start sooner).
        const double r = ready + (speeds_.empty() ? 0.0 : length);
        if (r < best_ready) best = blk, best_ready = r, best_p = *in_class[c];
      }
      check(best.size > 0, errc::infeasible,
            [&] { return "dcp planner: no block of " + std::to_string(g.sp) + " units holds a step it priced there"; });
      const pricing& at = fit_ready >= 0 ? fit_p : best_p;
      b.place_new(sequences_of(g), fit_ready >= 0 ? fit : best, at.k, at.ring);
    }

    // Fluid: longest first to the block of the fluid level (GPUs at sp = 1) where it ends first.
    const int sp = sps_.empty() ? 1 : sps_[level];
    const int n = groups.block_count(sp);
    std::vector<std::vector<std::size_t>> on(static_cast<std::size_t>(n));
    for (auto& members : on) members.reserve(fluid.size() / static_cast<std::size_t>(n) + 4);
    // Estimate descending, id ascending (ids are unique: a total order). The keys carry what the
    // assignment reads, so it does not chase items_ in random order. `fluid` is in id order and
    // estimates are non-negative, whose bits order as their values: a stable radix sort on the
    // complemented bits gives exactly that order, in linear time.
    struct fluid_key {
      std::uint64_t order;  // ~bits of the estimate
      std::size_t index;
      double estimate() const noexcept { return std::bit_cast<double>(~order); }
    };
    std::vector<fluid_key> keys(fluid.size()), spare(fluid.size());
    for (std::size_t j = 0; j < fluid.size(); ++j)
      keys[j] = {~std::bit_cast<std::uint64_t>(items_[fluid[j]].estimate + 0.0), fluid[j]};  // + 0.0: no -0
    for (int shift = 0; shift < 64; shift += 11) {
      std::vector<std::size_t> at(2049, 0);
      for (const fluid_key& key : keys) ++at[((key.order >> shift) & 2047) + 1];
      if (std::find(at.begin(), at.end(), keys.size()) != at.end()) continue;  // one digit for all: in order
      for (std::size_t d = 1; d < at.size(); ++d) at[d] += at[d - 1];
      for (const fluid_key& key : keys) spare[at[(key.order >> shift) & 2047]++] = key;
      keys.swap(spare);
    }
    // One queue of blocks per capacity class and speed: a sequence goes to the block where it
    // ends first (its load plus the sequence's time there) among the classes that hold it
    // (`least_class`), so none lands where it does not fit and the longest go to fast GPUs.
    // Within a queue every block has one speed, so the least loaded is where it ends first.
    using slot = std::pair<double, int>;
    struct lane {
      std::size_t cls;
      double speed;
      std::priority_queue<slot, std::vector<slot>, std::greater<>> blocks;
    };
    std::vector<lane> lanes;
    block_class_.assign(static_cast<std::size_t>(n), 0);
    for (int u = 0; u < n; ++u) {
      const rank_block blk = groups.block(sp, u);
      const std::size_t c = class_of(blk);
      const double v = b.speed_of(blk);
      block_class_[static_cast<std::size_t>(u)] = c;
      auto at = std::find_if(lanes.begin(), lanes.end(), [&](const lane& l) { return l.cls == c && l.speed == v; });
      if (at == lanes.end()) at = lanes.insert(lanes.end(), lane{c, v, {}});
      at->blocks.push({b.ready(blk), u});
    }
    // Once per shape: sequences of one shape share their load (`twin_`), so their least class.
    fluid_class_.assign(items_.size(), classes());
    if (classes() == 1) std::fill(fluid_class_.begin(), fluid_class_.end(), 0);
    for (const fluid_key& key : keys) {
      std::size_t& shape = fluid_class_[twin_[key.index]];
      if (shape == classes()) shape = least_class(items_[twin_[key.index]], sp);
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
    std::vector<std::vector<step_group>> steps(static_cast<std::size_t>(n));
    std::set<slot> finish;
    for (int u = 0; u < n; ++u) {
      const rank_block blk = groups.block(sp, u);
      steps[static_cast<std::size_t>(u)] =
          pack(on[static_cast<std::size_t>(u)], sp, false, block_class_[static_cast<std::size_t>(u)]);
      finish.insert({b.ready(blk) + total_time(steps[static_cast<std::size_t>(u)]) / b.speed_of(blk), u});
    }
    rebalance(b, groups, sp, on, steps, finish);
    for (int u = 0; u < n; ++u)
      for (const auto& g : steps[static_cast<std::size_t>(u)])
        b.place_new(sequences_of(g), groups.block(sp, u), g.k, g.ring);
    return std::move(b).finish(bounds_, norm);
  }

  /// Step 5: move one sequence from the fluid block (a GPU at sp = 1) that finishes last to one
  /// that finishes early, while that lowers the later of the two; `moves_` bounds the evaluations.
  void rebalance(const plan_builder<C>& b, const G& groups, int sp, std::vector<std::vector<std::size_t>>& on,
                 std::vector<std::vector<step_group>>& steps, std::set<std::pair<double, int>>& finish) const {
    std::size_t budget = moves_;
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
          const double dx = std::abs(items_[x].estimate - gap / 2), dy = std::abs(items_[y].estimate - gap / 2);
          return dx != dy ? dx < dy : items_[x].seq.id < items_[y].seq.id;
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
  void place_in_rounds(plan_builder<C>& b, const G& groups, std::vector<step_group>& pending) const {
    const int n = cost_.gpus();
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
          const auto at = priced_in(g, class_of(blk));  // a block too small for it waits for another
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

  /// Step 5, gang side: while the last GPU to finish runs only gang steps, give its longest
  /// gang item the next wider sp and keep the plan if the makespan falls.
  plan widen_critical(plan best, const std::string& method, loss_normalization norm) {
    for (int attempt = 0; attempt < 8; ++attempt) {
      int critical = 0;
      for (const auto& s : best.steps)
        if (s.end_s() >= best.makespan_s) critical = s.ranks.first;
      const plan_step* longest = nullptr;
      bool fluid = false;
      for (const auto& s : best.steps) {
        if (!s.ranks.contains(critical)) continue;
        if (s.sp() <= sps_[fluid_]) fluid = true;
        else if (!longest || s.time_s > longest->time_s) longest = &s;
      }
      if (fluid || !longest) return best;
      // Widen every item of that step to the next legal sp that has an option.
      std::vector<std::pair<std::size_t, std::size_t>> undo;
      for (const auto& q : longest->sequences) {
        auto it = std::lower_bound(planned_.begin(), planned_.end(), q.id,
                                   [](const sequence& s, std::int64_t id) { return s.id < id; });
        item& x = items_[static_cast<std::size_t>(it - planned_.begin())];
        for (std::size_t o = 0; o < x.options.size(); ++o) {
          if (x.options[o].sp > x.options[x.choice].sp) {
            undo.push_back({static_cast<std::size_t>(&x - items_.data()), x.choice});
            x.choice = o;
            estimate(x);
            break;
          }
        }
      }
      if (undo.empty()) return best;
      plan next = build(method, norm, best_target_);
      if (next.makespan_s < best.makespan_s * (1 - 1e-12)) {
        best = std::move(next);
        continue;
      }
      for (auto [i, c] : undo) items_[i].choice = c, estimate(items_[i]);
      return best;
    }
    return best;
  }

  /// The sequences of `g`, in a buffer the next call reuses (`make_step` copies what it needs).
  std::span<const sequence> sequences_of(const step_group& g) const {
    scratch_.clear();
    for (std::size_t m : g.members) scratch_.push_back(items_[m].seq);
    return scratch_;
  }

  const planning_context<C, Recompute, G>& ctx_;
  const C& cost_;
  const Recompute& recompute_;
  const G& groups_;  // every step goes on one of its blocks
  bool inter_, intra_;
  std::size_t moves_;
  std::span<const double> stragglers_;  // per unit, beyond the nodes' speeds; empty = all 1
  std::vector<double> speeds_;          // per unit: node speed times straggler (`job_speeds`); empty = all 1
  bool uniform_ = true;                 // no speeds and one capacity class
  pipeline_knobs knobs_;                // under pp > 1
  // Capacity classes (smallest first) on a mixed cluster: the nodes' distinct capacities and the
  // cost model with every node of each; none elsewhere (the one class is `cost_`).
  std::vector<double> class_raw_;
  std::vector<C> class_costs_;
  std::vector<std::size_t> top_;          // per legal sp: the largest class of a block of it
  std::vector<std::size_t> block_class_;  // per fluid block, in `build`
  std::vector<std::size_t> fluid_class_;  // per item on the fluid level, in `build`: `least_class`
  double step_floor_ = 0;           // seconds every step lasts at least (`step_floor_cost_model`)
  bool dissolving_ = false;         // `pack` dissolves short steps (a floor, and DCP-inter)
  std::vector<item> items_;
  std::vector<std::vector<sequence_option>> shape_options_;  // one per distinct shape
  std::vector<std::size_t> twin_;  // per item: the first item of its shape
  std::vector<sequence> planned_;  // items' sequences, sorted by id
  mutable std::vector<sequence> scratch_;  // `sequences_of`
  std::vector<int> sps_;
  std::vector<int> k_pref_;              // per class and legal sp: `k_pref`
  std::vector<double> token_room_;       // per class and legal sp, with memory_by_tokens: `token_room`
  int in_flight_ = 1;                    // micro-batches a packed step shares memory with (room x pp)
  double static_bytes_ = 0;              // the cost model's static memory (under pp > 1)
  std::vector<std::int64_t> level_cap_;  // per legal sp: tokens of the largest step at the preferred recompute level
  std::size_t fluid_ = 0;                 // index into sps_ of the fluid level
  std::size_t best_fluid_ = 0;            // and the best candidate's
  bool best_uniform_ = false;             // whether the best candidate narrowed wide choices to its level
  double share_ = 0;     // GPU-seconds of the batch per GPU
  double mean_seconds_ = 0;  // GPU-seconds of the batch per sequence
  double cap_ = 0;       // no single step should outlast it (the share, or a makespan target)
  double best_cap_ = 0;     // the cap of the best candidate plan
  double best_target_ = 0;  // and its gang target (0 = earliest free block)
  batch_bounds bounds_;
};

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
       << " factors, pipeline=" << p.pipeline << ", baselines={";
    for (std::size_t i = 0; i < p.baselines.size(); ++i)
      std::visit([&](const auto& b) { os << (i == 0 ? "" : ", ") << b; }, p.baselines[i]);
    return os << "}}";
  }

 private:
  // Step 9: each baseline's plan of the batch replaces `best` where it ends sooner and skips no
  // more sequences (so exactly the ones dcp skips: those no configuration holds); it is named as
  // dcp's and carries dcp's bounds of those sequences (`bounds`, handed to the baseline so it
  // does not price them again) and skip reasons. A plan at its joint bound cannot be beaten, so
  // none is built then. The baseline plans with dcp's loss normalisation, skipping what it cannot
  // hold, so that a sequence it does not hold rules it out, not the batch.
  template <any_planning_context Ctx>
  void keep_sooner_baseline(dcp::plan& best, const Ctx& ctx, std::span<const sequence> batch,
                            const batch_bounds& bounds) const {
    // With straggler factors a baseline's steps would be timed without them: not comparable.
    if (baselines.empty() || !speeds.empty() || best.makespan_s <= best.bound_s() * (1 + 1e-12)) return;
    for (const auto& b : baselines) {
      dcp::plan p;
      try {
        p = std::visit(
            [&](auto q) {
              q.loss = loss;
              q.on_infeasible = infeasible_policy::skip;
              return q.plan(ctx, batch, bounds);
            },
            b);
      } catch (const error&) {
        continue;  // a baseline that cannot plan this batch here (a block its groups need is not offered)
      }
      if (p.skipped.size() != best.skipped.size() || !(p.makespan_s < best.makespan_s * (1 - 1e-12))) continue;
      p.method = best.method;
      p.skipped = std::move(best.skipped);
      best = std::move(p);
    }
  }

  // Step 11: under coupled collectives the batch planned in synchronised rounds replaces `best`
  // where it ends sooner and skips no more sequences; it carries dcp's bounds, name and skip
  // reasons.
  template <any_planning_context Ctx>
  void keep_sooner_rounds(dcp::plan& best, const Ctx& ctx, std::span<const sequence> batch) const {
    if (!inter || !is_coupled(ctx.cost.layout()) || best.makespan_s <= best.bound_s() * (1 + 1e-12)) return;
    dcp_planner rounds = *this;
    rounds.inter = false;
    rounds.baselines.clear();
    rounds.on_infeasible = infeasible_policy::skip;
    dcp::plan p = rounds.plan(ctx, batch);
    if (p.skipped.size() != best.skipped.size() || !(p.makespan_s < best.makespan_s * (1 - 1e-12))) return;
    p.lower_bound_s = best.lower_bound_s, p.joint_lower_bound_s = best.joint_lower_bound_s;
    p.method = best.method;
    p.skipped = std::move(best.skipped);
    best = std::move(p);
  }

  // Step 11, shelves, on the final plan (`shelved`, `plan/shelves.hpp`); `best` keeps its bounds.
  template <any_planning_context Ctx>
  void keep_sooner_shelves(dcp::plan& best, const Ctx& ctx) const {
    if (!is_coupled(ctx.cost.layout()) || best.makespan_s <= best.bound_s() * (1 + 1e-12)) return;
    if (dcp::plan p = shelved(best, ctx.cost, ctx.groups, speeds, loss); p.makespan_s < best.makespan_s * (1 - 1e-12))
      best = std::move(p);
  }

  // Step 10: the batch planned on the cluster seen as its weakest node, timed on the cluster,
  // replaces `best` where it ends sooner and skips no more sequences; it carries dcp's bounds and
  // skip reasons. Its steps fit the weakest node's capacity, so every block's.
  template <any_planning_context Ctx>
  void keep_sooner_uniform(dcp::plan& best, const Ctx& ctx, std::span<const sequence> batch) const {
    using C = typename Ctx::cost_type;
    if constexpr (mixed_cluster_cost_model<C>) {
      const auto& nodes = ctx.cost.layout().nodes;
      const bool mixed = std::any_of(nodes.begin(), nodes.end(), [&](const unit_device& d) {
        return d.speed != nodes.front().speed || d.capacity != nodes.front().capacity;
      });
      if (!mixed || best.makespan_s <= best.bound_s() * (1 + 1e-12)) return;
      const C weakest = ctx.cost.as_uniform(ctx.cost.layout().as_weakest().nodes.front());
      // What `dcp-uniform` plans: this planner without its baselines (they were candidates on the
      // cluster already), skipping what the weakest node cannot hold. The blind cost is uniform,
      // so this step does not recur.
      dcp_planner blind = *this;
      blind.baselines.clear();
      blind.on_infeasible = infeasible_policy::skip;
      dcp::plan p = retimed(blind.plan(planning_context{weakest, ctx.recompute, ctx.groups}, batch), ctx.cost, speeds);
      if (p.skipped.size() != best.skipped.size() || !(p.makespan_s < best.makespan_s * (1 - 1e-12))) return;
      p.lower_bound_s = best.lower_bound_s, p.joint_lower_bound_s = best.joint_lower_bound_s;
      p.method = best.method;
      p.skipped = std::move(best.skipped);
      best = std::move(p);
    }
  }
};

static_assert(planner<dcp_planner>);

template <any_planning_context Ctx>
dcp::plan dcp_planner::plan(const Ctx& ctx, std::span<const sequence> batch) const {
  ctx.validate();
  pipeline.validate();
  detail::dcp_planning planning(ctx, inter, intra, improve_moves, speeds, pipeline);
  dcp::plan best = planning.run(batch, loss, on_infeasible, name());
  // Blocks of other sizes do not nest with the powers of two (a block of 5 in a node of 8
  // overlaps the blocks of 2 and 4 of both halves), so gang placement can fragment a node where
  // aligned blocks would not. Where the manager offers such sizes, the plan is not within 0.1%
  // of the bound, and it does not already end by the power-of-two blocks' own joint bound, the
  // batch is also planned on those blocks alone and the plan that ends sooner is kept, with the
  // bounds of every size (they are at most the power-of-two ones: more options): groups of any
  // size never cost time (DESIGN 3.5).
  if constexpr (!detail::is_powers_of_two_of<typename Ctx::groups_type>) {
    const auto sizes = ctx.sp_sizes();
    const bool other = std::any_of(sizes.begin(), sizes.end(),
                                   [](int sp) { return !std::has_single_bit(static_cast<unsigned>(sp)); });
    if (other && best.efficiency() < 0.999) {
      const planning_context aligned{ctx.cost, ctx.recompute, powers_of_two_of<typename Ctx::groups_type>{ctx.groups}};
      const bool may_beat_it = !aligned.sp_sizes().empty() &&
                          best.makespan_s > planning.bounds_on(aligned.groups).joint_s * (1 + 1e-12);
      if (may_beat_it) {
        // Skipping, so that a sequence only a wider size holds costs this plan, not an error.
        detail::dcp_planning again(aligned, inter, intra, improve_moves, speeds, pipeline);
        dcp::plan p = again.run(batch, loss, infeasible_policy::skip, name());
        if (p.skipped.size() == best.skipped.size() && p.makespan_s < best.makespan_s * (1 - 1e-12)) {
          p.lower_bound_s = best.lower_bound_s, p.joint_lower_bound_s = best.joint_lower_bound_s;
          p.skipped = std::move(best.skipped);
          best = std::move(p);
        }
      }
    }
  }
  keep_sooner_baseline(best, ctx, batch, planning.bounds());
  keep_sooner_uniform(best, ctx, batch);
  keep_sooner_rounds(best, ctx, batch);
  keep_sooner_shelves(best, ctx);
  return best;
}

}  // namespace dcp

#if DCP_HAS_COMPILED()
// The compiled mode: the common contexts' instantiations are in dcp::compiled.
#define DCP_DETAIL_EXTERN_DCP_PLANNER(C, R, G) DCP_DCP_PLANNER_ON(extern, C, R, G)
DCP_COMPILED_CONTEXTS(DCP_DETAIL_EXTERN_DCP_PLANNER)
#undef DCP_DETAIL_EXTERN_DCP_PLANNER
#endif
