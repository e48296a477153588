#pragma once
/// \file
/// The dcp planner's first stage (DESIGN section 3): a batch prepared once for every attempt.
/// `dcp_prepared` holds what every candidate plan of the batch shares: its feasible sequences in
/// id order, each shape's options (step 1 of `dcp_planner.hpp`'s file comment), the most
/// GPU-efficient option of each and its estimate (step 2), the capacity classes of a mixed cluster,
/// the per-size packing limits, the fair share of the batch per GPU, and its lower bounds. It is
/// immutable once made: `build` (`plan/dcp_build.hpp`) reads it through a const reference, so
/// attempts cannot see each other.

#include <algorithm>
#include <bit>
#include <cmath>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <ostream>
#include <span>
#include <sstream>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include <dcp/cost/cost_concepts.hpp>
#include <dcp/error.hpp>
#include <dcp/group/group_concepts.hpp>
#include <dcp/plan/feasibility.hpp>
#include <dcp/plan/lower_bounds.hpp>
#include <dcp/plan/plan.hpp>
#include <dcp/plan/planning_context.hpp>
#include <dcp/plan/sequence_options.hpp>
#include <dcp/plan/speeds.hpp>
#include <dcp/recompute/full_recompute.hpp>
#include <dcp/recompute/selective_recompute.hpp>

namespace dcp {

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

/// What the dcp planner is told about a job, beside the batch: the context's policies, the
/// planner's switches and knobs. The context must outlive it.
template <cost_model C, class Recompute, group_manager G>
struct dcp_job {
  const C& cost;
  const Recompute& recompute;
  const G& groups;  // every step goes on one of its blocks
  bool inter = true, intra = true;
  std::size_t moves = 0;                // the rebalancing budget, in evaluated moves
  std::span<const double> stragglers;   // per unit, beyond the nodes' speeds; empty = all 1
  pipeline_knobs knobs;                 // under pp > 1
  loss_normalization norm = loss_normalization::token_mean;
  std::string method;                   // the name the plans carry
};

/// The capacity classes of a cluster, smallest first: one per distinct node capacity on a mixed
/// cluster (each the cost model with every node that device), else the cost model itself alone.
template <cost_model C>
class capacity_classes {
 public:
  explicit capacity_classes(const C& cost) : cost_(&cost) {
    if constexpr (mixed_cluster_cost_model<C>) {
      if (capacities_differ(cost)) {
        std::vector<unit_device> devices = cost.layout().nodes;
        std::stable_sort(devices.begin(), devices.end(),
                         [](const unit_device& a, const unit_device& b) { return a.capacity < b.capacity; });
        for (const auto& d : devices)
          if (raw_.empty() || d.capacity != raw_.back()) {
            raw_.push_back(d.capacity);
            costs_.push_back(cost.as_uniform(d));
          }
      }
    }
  }
  std::size_t count() const noexcept { return costs_.empty() ? 1 : costs_.size(); }
  const C& cost(std::size_t c) const { return costs_.empty() ? *cost_ : costs_[c]; }
  /// The class of a block: that of its smallest member (0 without classes).
  std::size_t of(rank_block b) const {
    if (raw_.empty()) return 0;
    const double raw = cost_->layout().capacity_of(b, 0);
    return static_cast<std::size_t>(std::lower_bound(raw_.begin(), raw_.end(), raw) - raw_.begin());
  }

 private:
  const C* cost_;
  std::vector<double> raw_;  // the classes' capacities
  std::vector<C> costs_;
};

/// A sequence of the prepared batch.
template <class Load>
struct dcp_item {
  sequence seq;
  Load load;
  std::int64_t tokens;
  std::span<const sequence_option> options;  // its shape's, in `dcp_prepared::shape_options`
  std::size_t base = 0;   // the most GPU-efficient option
  double estimate = 0;    // GPU-seconds at `base` on the first fluid level (`dcp_prepared::estimate`)
};

/// The feasible sequences of a batch in id order, their shapes' options, and what was skipped.
template <class Load>
struct dcp_items {
  std::vector<dcp_item<Load>> items;
  std::vector<std::vector<sequence_option>> shape_options;  // one per distinct shape
  std::vector<std::size_t> twin;     // per item: the first item of its shape
  std::vector<sequence> planned;     // the items' sequences, by id
  std::vector<skipped_sequence> skipped;  // by id
};

/// Per legal sp size (ascending) and capacity class: what packing a step may hold.
struct dcp_size_limits {
  std::vector<int> sps;                  // legal and offered by the group manager
  std::vector<std::size_t> top;          // per size: the largest class of a block of it
  std::vector<int> k_pref;               // per class and size: the preferred recompute level
  std::vector<double> token_room;        // per class and size, where memory grows with tokens alone
  std::vector<std::int64_t> level_cap;   // per size: tokens of the largest step at the preferred level
  int in_flight = 1;                     // micro-batches a packed step shares memory with (room x pp)
  double static_bytes = 0;               // the cost model's static memory (under pp > 1)
};

/// The batch prepared for every attempt (this file's comment). Made once by its constructor, then
/// only read; not copyable (items point into `batch.shape_options`).
template <cost_model C, class Recompute, group_manager G>
class dcp_prepared {
 public:
  using load_t = typename C::load_type;
  /// A step's memory grows with its load's token count alone (`token_memory_cost_model`, e.g.
  /// the analytic model: static memory plus activations per token), so first fit can skip every
  /// open step with at least as many tokens as one that cannot take a sequence.
  static constexpr bool memory_by_tokens = token_memory_cost_model<C>;

  dcp_prepared(const planning_context<C, Recompute, G>& ctx, dcp_job<C, Recompute, G> told,
               std::span<const sequence> in, infeasible_policy policy)
      : job(std::move(told)),
        speeds(job_speeds(ctx.cost.layout(), job.stragglers)),
        classes(ctx.cost) {
    if constexpr (step_floor_cost_model<C>) step_floor = ctx.cost.step_floor();
    uniform = speeds.empty() && classes.count() == 1;
    if constexpr (pipeline_cost_model<C>) sizes.static_bytes = ctx.cost.static_memory();
    sizes.sps = ctx.sp_sizes();
    for (int sp : sizes.sps) {
      std::size_t top = 0;
      for (int i = 0, n = groups().block_count(sp); i < n; ++i) top = std::max(top, classes.of(groups().block(sp, i)));
      sizes.top.push_back(top);
    }
    price_items(in, policy);
    for (std::size_t c = 0; c < classes.count(); ++c)
      for (int sp : sizes.sps)
        sizes.k_pref.push_back(choose(cost().load_of(make_sequence(0, 1)), sp, c).value_or(cost().blocks()));
    if constexpr (pipeline_cost_model<C>) sizes.in_flight = cost().layout().pp > 1 ? job.knobs.room * cost().layout().pp : 1;
    if constexpr (memory_by_tokens)
      for (std::size_t c = 0; c < classes.count(); ++c)
        for (std::size_t l = 0; l < sizes.sps.size(); ++l) sizes.token_room.push_back(token_room(l, c));
    // Once: every candidate plan shares them. Under selective recompute the bounds' options are
    // the items' own.
    bounds = bounds_on(groups());
    choose_base();
  }
  dcp_prepared(const dcp_prepared&) = delete;
  dcp_prepared& operator=(const dcp_prepared&) = delete;

  const C& cost() const noexcept { return job.cost; }
  const G& groups() const noexcept { return job.groups; }
  const std::vector<dcp_item<load_t>>& items() const noexcept { return batch.items; }

  /// The lower bounds of the planned sequences on the blocks `groups` offers (a subset of the
  /// context's sizes). Under selective recompute the bounds' options are the items' own, so this
  /// costs a sweep, not a pricing.
  template <group_manager G2>
  batch_bounds bounds_on(const G2& on) const {
    if (job.intra && std::is_same_v<Recompute, selective_recompute>)
      return lower_bounds_of(
          cost(), on, batch.items.size(), [&](std::size_t i) -> const load_t& { return batch.items[i].load; },
          [&](std::size_t i) { return batch.items[i].options; },
          [&](std::size_t i) {
            if constexpr (std::equality_comparable<load_t>)
              if (!(batch.items[batch.twin[i]].load == batch.items[i].load)) return i;
            return batch.twin[i];
          },
          speeds);
    return lower_bounds(cost(), on, batch.planned, speeds);
  }

  /// The recompute of a step of `l` on sp units of capacity class c (none where it does not fit).
  std::optional<int> choose(const load_t& l, int sp, std::size_t c) const {
    if (job.intra) return job.recompute.choose(classes.cost(c), l, sp);
    return full_recompute{}.choose(classes.cost(c), l, sp);
  }
  int k_pref(std::size_t c, std::size_t l) const { return sizes.k_pref[c * sizes.sps.size() + l]; }
  std::size_t sp_index(int sp) const {
    return static_cast<std::size_t>(std::find(sizes.sps.begin(), sizes.sps.end(), sp) - sizes.sps.begin());
  }
  /// The smallest capacity class whose blocks of `sp` units hold `it` alone.
  std::size_t least_class(const dcp_item<load_t>& it, int sp) const {
    std::size_t c = 0;
    while (c + 1 < classes.count() && !choose(it.load, sp, c)) ++c;
    return c;
  }

  /// Whether a step of `memory` bytes packs within `capacity`: under pp > 1 with P - 1 more like it
  /// in flight (1F1B's stage 0), so packed micro-batches run without recomputation in the
  /// pipeline; a sequence too long for that still runs alone in a step of its own.
  bool fits_in_flight(double memory, double capacity) const noexcept {
    if (sizes.in_flight == 1) return memory <= capacity;
    return sizes.static_bytes + sizes.in_flight * (memory - sizes.static_bytes) <= capacity;
  }
  /// Whether a load fits the sp's preferred recompute level (0 blocks under selective recompute),
  /// as a callable for one sp: the load's tokens against the sp's token room where memory grows
  /// with them alone, else the memory with the cost model's per-(sp, k) terms computed once where
  /// it offers that (`memory_at`): the same answer either way.
  auto fits_preferred_on(int sp, std::size_t c) const {
    const int k = k_pref(c, sp_index(sp));
    const double capacity = classes.cost(c).capacity();
    if constexpr (memory_by_tokens)
      return [room = sizes.token_room[c * sizes.sps.size() + sp_index(sp)]](const load_t& l) { return l.tokens <= room; };
    else
      return [this, memory = memory_of(cost(), sp), k, capacity](const load_t& l) {
        return fits_in_flight(memory(l, k), capacity);
      };
  }

  /// GPU-seconds of `it` at option `choice` with fluid level `fluid`; on the fluid level, as a
  /// share of a full step of its copies.
  double estimate(const dcp_item<load_t>& it, std::size_t choice, std::size_t fluid) const {
    const auto& o = it.options[choice];
    const std::int64_t step_cap = o.sp == sizes.sps[fluid] ? sizes.level_cap[fluid] : 0;
    if (it.tokens < step_cap) {
      const std::int64_t copies = std::max<std::int64_t>(1, step_cap / std::max<std::int64_t>(it.tokens, 1));
      return o.sp * fastest_ring(cost(), repeated_load<C>(it.load, copies), o.sp, o.checkpointed_blocks).time_s /
             static_cast<double>(copies);
    }
    return o.gpu_seconds();
  }

  dcp_job<C, Recompute, G> job;
  std::vector<double> speeds;    // per unit: node speed times straggler (`job_speeds`); empty = all 1
  capacity_classes<C> classes;
  bool uniform = true;           // no speeds and one capacity class
  double step_floor = 0;         // seconds every step lasts at least (`step_floor_cost_model`)
  dcp_size_limits sizes;
  dcp_items<load_t> batch;
  double share = 0;         // GPU-seconds of the batch per GPU
  double mean_seconds = 0;  // GPU-seconds of the batch per sequence
  batch_bounds bounds;

 private:
  /// Step 1: the feasible sequences in id order, each shape's options priced once.
  void price_items(std::span<const sequence> in, infeasible_policy policy) {
    const int widest = sizes.sps.empty() ? 0 : sizes.sps.back();
    const C& largest = classes.cost(classes.count() - 1);
    // Feasible where the largest block of some size holds it.
    std::vector<sequence> seqs = feasible_sequences(largest, in, policy, batch.skipped, std::span<const int>(sizes.sps));
    // Canonical order: plans must not depend on the order ranks received the batch in.
    const auto by_id = [](const sequence& a, const sequence& b) { return a.id < b.id; };
    if (!std::is_sorted(seqs.begin(), seqs.end(), by_id)) std::sort(seqs.begin(), seqs.end(), by_id);
    batch.items.reserve(seqs.size());
    const std::vector<std::size_t> same_as = first_of_shape(seqs);
    std::vector<std::size_t> item_of(seqs.size(), seqs.size());  // sequence -> its item, once priced
    for (std::size_t i = 0; i < seqs.size(); ++i) {
      const sequence& s = seqs[i];
      dcp_item<load_t> it{s, cost().load_of(s), cost().tokens_of(s), {}};
      const std::size_t twin = item_of[same_as[i]];
      if (twin < batch.items.size()) {
        it.options = batch.items[twin].options;
      } else {
        batch.shape_options.push_back(options(it.load));  // a moved vector keeps its buffer: spans stay valid
        it.options = batch.shape_options.back();
      }
      if (it.options.empty()) {  // fits only with blocks the recompute policy will not checkpoint
        if (policy == infeasible_policy::skip) {
          batch.skipped.push_back({s.id, it.tokens, infeasible_error(largest, s, widest).what()});
          continue;
        }
        throw infeasible_error(largest, s, widest);
      }
      if (item_of[same_as[i]] == seqs.size()) item_of[same_as[i]] = batch.items.size();
      batch.twin.push_back(item_of[same_as[i]]);
      batch.items.push_back(std::move(it));
    }
    for (const auto& it : batch.items) batch.planned.push_back(it.seq);
    std::sort(batch.skipped.begin(), batch.skipped.end(),  // in id order, like everything else here
              [](const skipped_sequence& a, const skipped_sequence& b) { return a.id < b.id; });
  }

  /// Sequences of one shape share their options (batches repeat a few shapes many times): entry
  /// i is the first sequence of i's shape, found in a table keyed by shape (open addressing; the
  /// answer does not depend on where a shape lands in it).
  static std::vector<std::size_t> first_of_shape(const std::vector<sequence>& seqs) {
    std::vector<std::size_t> same_as(seqs.size());
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
    return same_as;
  }

  /// Options on the largest block of each size (the class a block of it has at most).
  std::vector<sequence_option> options(const load_t& l) const {
    std::vector<sequence_option> out;
    for (std::size_t i = 0; i < sizes.sps.size(); ++i)
      if (const int sp = sizes.sps[i]; auto k = choose(l, sp, sizes.top[i])) {
        const ring_choice r = fastest_ring(cost(), l, sp, *k);
        out.push_back({sp, *k, r.time_s, cost().memory(l, sp, *k), r.ring});
      }
    return out;
  }

  /// With `memory_by_tokens`: the most tokens (a double) with which a step on sps[l] fits at its
  /// preferred recompute level in class c (-inf when none does), as `fits_in_flight` counts.
  /// Memory grows with the tokens, so for every load `l.tokens <= room` is exactly
  /// `memory(l, sp, k) <= capacity`.
  double token_room(std::size_t l, std::size_t c) const {
    const auto memory = cost().memory_at(sizes.sps[l]);
    const int k = k_pref(c, l);
    const double capacity = classes.cost(c).capacity();
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

  /// Step 2: each item's most GPU-efficient option (a shape's pick for all of it) and its
  /// estimate on the first fluid level, and the fair share of the batch per GPU.
  void choose_base() {
    auto& items = batch.items;
    for (std::size_t i = 0; i < items.size(); ++i) {
      auto& it = items[i];
      if (batch.twin[i] < i) {
        it.base = items[batch.twin[i]].base;
        continue;
      }
      for (std::size_t o = 1; o < it.options.size(); ++o)
        if (it.options[o].gpu_seconds() < it.options[it.base].gpu_seconds()) it.base = o;
    }
    // Largest step of each level that needs no recomputation: the reference for packed estimates.
    for (std::size_t l = 0; l < sizes.sps.size(); ++l)
      sizes.level_cap.push_back(std::max<std::int64_t>(
          1, step_token_capacity(classes.cost(sizes.top[l]), sizes.sps[l], k_pref(sizes.top[l], l))));
    double total = 0;
    for (std::size_t i = 0; i < items.size(); ++i) {
      const auto& twin = items[batch.twin[i]];
      items[i].estimate = batch.twin[i] < i ? twin.estimate : estimate(items[i], items[i].base, 0);
      total += items[i].estimate;
    }
    double capacity = cost().gpus();
    if (!speeds.empty()) {
      capacity = 0;
      for (double v : speeds) capacity += v;
    }
    share = total / capacity;
    mean_seconds = items.empty() ? 0 : total / static_cast<double>(items.size());
  }
};

}  // namespace detail
}  // namespace dcp
