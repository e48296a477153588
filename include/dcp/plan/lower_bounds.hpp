#pragma once
/// \file
/// The per-batch lower bounds of DESIGN section 3 (simple and joint), on per-GPU speeds and the
/// blocks a group manager offers.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <span>
#include <utility>
#include <vector>

#include <dcp/cost/cost_concepts.hpp>
#include <dcp/group/buddy_groups.hpp>
#include <dcp/group/group_concepts.hpp>
#include <dcp/plan/pipeline_schedule.hpp>
#include <dcp/plan/sequence_options.hpp>
#include <dcp/sequence.hpp>

namespace dcp {

/// The speed of the fastest block of `sp` GPUs that `groups` offers: the largest, over its
/// blocks `groups.block(sp, i)`, of the slowest member's factor; 0 when it offers none.
template <group_manager G>
double fastest_block_speed(std::span<const double> speeds, const G& groups, int sp) noexcept {
  double best = 0;
  for (int i = 0, n = groups.block_count(sp); i < n; ++i) {
    const rank_block b = groups.block(sp, i);
    best = std::max(best, *std::min_element(speeds.begin() + b.first, speeds.begin() + b.end()));
  }
  return best;
}

namespace detail {

/// A sequence's option's recompute range for the memory around a path: its least k and its
/// least work floors (over the legal rings) at k and at L.
struct recompute_ends {
  int k;
  double floor_k, floor_L;
  double below;  // how far the backward may fall below its chord between k and L
};

/// One piece of a sequence's hull: `bytes` more stored in flight for `saved` more seconds.
struct hull_piece {
  double bytes, saved;
};

/// What hiding a sequence's forward behind a path saves (DESIGN 4.5, memory around a path): run
/// on an option at k, its backward, `(1 - forward_share(L, k)) floor(k)`, is what it still costs
/// stage 0 after the path against its floor w, for `tokens stored[k]` bytes in flight. Over the
/// option's kmin..L the bytes are affine in k, and the backward (the least over rings) is at
/// least the chord between its ends less `below`, so the pair (bytes, saving) lies under the
/// segment between the ends with `below` added. Appends the pieces of the upper concave hull of
/// (0, 0) and every option's two ends, in order, where they save more: a fractional knapsack over
/// every sequence's pieces, best per byte first, is at least any choice of options and k.
inline void hidden_forwards(std::span<const recompute_ends> ends, double w, double tokens,
                            std::span<const double> stored, std::vector<hull_piece>& points,
                            std::vector<hull_piece>& out) {
  const int L = static_cast<int>(stored.size()) - 1;
  points.clear();  // as (bytes, saved); the ends at L share their bytes, so the most saved there
  double at_L = -std::numeric_limits<double>::infinity();
  for (const recompute_ends& e : ends) {
    points.push_back(
        {tokens * stored[static_cast<std::size_t>(e.k)], w - (1 - forward_share(L, e.k)) * e.floor_k + e.below});
    at_L = std::max(at_L, w - (1 - forward_share(L, L)) * e.floor_L + e.below);
  }
  points.push_back({tokens * stored[static_cast<std::size_t>(L)], at_L});
  std::sort(points.begin(), points.end(), [](const hull_piece& a, const hull_piece& b) {
    return a.bytes != b.bytes ? a.bytes < b.bytes : a.saved > b.saved;
  });
  std::size_t n = 0;  // points[0, n): the upper hull after (0, 0), rising
  const hull_piece origin{0, 0};
  for (std::size_t j = 0; j < points.size(); ++j) {
    const hull_piece q = points[j];
    if (q.saved <= (n ? points[n - 1] : origin).saved) continue;  // more bytes, no more saved
    while (n >= 1) {  // drop the last point where it is under the chord to q
      const hull_piece& a = n >= 2 ? points[n - 2] : origin;
      const hull_piece& b = points[n - 1];
      if ((b.saved - a.saved) * (q.bytes - a.bytes) > (q.saved - a.saved) * (b.bytes - a.bytes)) break;
      --n;
    }
    points[n++] = q;
  }
  for (std::size_t j = 0; j < n; ++j) {
    const hull_piece& before = j ? points[j - 1] : origin;
    out.push_back({points[j].bytes - before.bytes, points[j].saved - before.saved});
  }
}

}  // namespace detail

/// Both per-batch lower bounds of DESIGN section 3, in seconds.
struct batch_bounds {
  double simple_s = 0;  ///< max( sum_i W_i / N, max_i min_sp t_i(sp, kmin_i(sp)) )
  double joint_s = 0;   ///< the least T with every sequence on an sp it finishes alone within T and those floors in N T
  double busy_s = 0;    ///< the simple bound's busy term, max( sum_i W_i, sum_i share_i ) / N
  double shortest_s = 0;  ///< min_i min_sp t_i(sp, kmin_i(sp)): no step of the batch is shorter
  double longest_s = 0;   ///< max_i min_sp t_i(sp, kmin_i(sp))
  /// Under P > 1 stages (equal unit speeds): max_i of the least, over i's options, of the
  /// pipelined time its micro-batch forces (`pipelined`, DESIGN 4.5); 0 at P = 1
  double around_s = 0;
  /// Under P > 1 stages: the joint bound with every option's time its path through the stages,
  /// P t_i(sp) <= T, and the busiest unit's floors plus the bubble floor within T
  /// (`pipeline_bubble_floor`); 0 at P = 1
  double pipeline_joint_s = 0;
  friend bool operator==(const batch_bounds&, const batch_bounds&) = default;
};

/// What every unit that works waits beyond its busy time in a `stages`-stage 1F1B pipeline, at
/// any warmup depth: its first forward reaches the last stage before that stage starts and its
/// last backward comes back, (P - 1) (f + b) >= (P - 1) 11/12 t_min (a forward is 1/4 to 1/3 of
/// a stage time, a backward the rest), `shortest_s` = t_min the least stage time of any step.
inline double pipeline_bubble_floor(int stages, double shortest_s) noexcept {
  return stages > 1 ? (stages - 1) * 11.0 / 12.0 * shortest_s : 0.0;
}

/// The bounds of a batch run as micro-batches of a `stages`-stage 1F1B pipeline (DESIGN section
/// 4.5), from its bounds on one stage `b`: every unit that works waits the bubble floor
/// (`pipeline_bubble_floor`) on top of its busy time, which is at least the busy or the joint
/// bound; the micro-batch that holds a sequence runs on all P stages in turn, P t_i, and orders
/// its units' other work around that path (`around_s`); and every sequence's option must let its
/// path fit (`pipeline_joint_s`; both computed with the bounds). `b` itself when stages = 1.
inline batch_bounds pipelined(batch_bounds b, int stages) noexcept {
  if (stages <= 1) return b;
  const double P = stages, bubble = pipeline_bubble_floor(stages, b.shortest_s);
  const double through = std::max(P * b.longest_s, b.around_s);
  b.simple_s = std::max(b.busy_s + bubble, through);
  b.joint_s = std::max({b.joint_s + bubble, through, b.simple_s, b.pipeline_joint_s});
  return b;
}

namespace detail {

/// One feasible option of a sequence, as the bounds see it.
struct bound_term {
  double time;   // t_i(sp) over the fastest offered block's speed
  double floor;  // the work floor, or the packed one where tighter
  double share;  // of zero3's per-step floor (`step_floor_share`), 0 without
  int sp;
};
/// A feasible sequence's terms, `terms[first, last)` (twins share them), its least floor w and
/// its least time t.
struct bound_range {
  std::size_t first, last;
  double w, t;
  std::size_t owner;    // the first feasible sequence with these terms, as an index into `ranges`
  double ahead = 0.25;  // phi_i: its forward, on any option at any recompute, is at least phi_i w
};

/// A batch priced for its bounds (`price_bounds`), once: every bound reads it.
struct priced_bounds {
  std::vector<bound_term> terms;    // the options of every sequence that has no twin before it
  std::vector<bound_range> ranges;  // per feasible sequence, in order
  std::vector<double> speed_of_sp;  // by sp: the fastest offered block's speed, 0 where none
  // Memory around a path (`stored_per_token_cost_model`, under pp > 1 with equal speeds): the
  // bytes stored per token at each k, and per entry of `ranges` its sequence's index (a twin:
  // its owner's); empty elsewhere.
  std::vector<double> stored;
  std::vector<std::size_t> seq_of;
  double capacity = 0;  // N units, or the sum of their speeds
  double work = 0, shares = 0, longest = 0;
  double shortest = std::numeric_limits<double>::infinity();
};

/// The cost model's per-model floor terms, computed once (`work_floors_cost_model`), else 0.
template <cost_model C>
auto floors_of(const C& cost) {
  if constexpr (work_floors_cost_model<C>)
    return cost.floors();
  else
    return 0;
}

/// Prices every feasible sequence's options for the bounds: its time alone (in the batch's
/// company where the cost model says a step holding it cannot end sooner, `shared_time_floor`)
/// and its work floors, each the least over the legal rings. Twins (`twin_at(i) < i`) share their
/// owner's terms. A size the manager offers no block of is no option.
template <cost_model C, group_manager G, class Floors, class LoadAt, class OptionsAt, class TwinAt>
priced_bounds price_bounds(const C& cost, const G& groups, [[maybe_unused]] const Floors& floors, std::size_t count,
                           LoadAt&& load_at, OptionsAt&& options_at, TwinAt&& twin_at, std::span<const double> speeds) {
  priced_bounds b;
  const auto sps = legal_sp_sizes(cost);
  b.speed_of_sp.assign(static_cast<std::size_t>(sps.empty() ? 1 : sps.back() + 1), 0.0);
  for (int sp : sps) b.speed_of_sp[static_cast<std::size_t>(sp)] = groups.block_count(sp) > 0 ? 1.0 : 0.0;
  b.capacity = cost.gpus();
  if (!speeds.empty()) {
    for (int sp : sps) b.speed_of_sp[static_cast<std::size_t>(sp)] = fastest_block_speed(speeds, groups, sp);
    b.capacity = 0;
    for (double v : speeds) b.capacity += v;
  }
  if constexpr (stored_per_token_cost_model<C> && work_floors_cost_model<C>)
    if (cost.layout().pp > 1 && speeds.empty())
      for (int k = 0; k <= cost.blocks(); ++k) b.stored.push_back(cost.stored_per_token(k));
  // t_i(sp): no step of the batch's sequences that holds i on sp units ends sooner
  // (`shared_time_floor`).
  [[maybe_unused]] const auto whole = [&] {
    typename C::load_type sum{};
    if constexpr (shared_time_floor_cost_model<C>)
      for (std::size_t i = 0; i < count; ++i) sum = sum + load_at(i);
    return sum;
  }();
  const auto in_company = [&](const auto& load, const sequence_option& o) {
    if constexpr (shared_time_floor_cost_model<C>)
      return cost.shared_time_floor(load, o.sp, o.checkpointed_blocks, o.time_s, whole);
    else
      return o.time_s;
  };
  const int pp = cost.layout().pp;
  std::vector<bound_range> seen(count);
  const auto count_in = [&](const bound_range& p, double share) {
    b.ranges.push_back(p);
    b.shares += share;
    b.work += p.w;
    b.longest = std::max(b.longest, p.t);
    b.shortest = std::min(b.shortest, p.t);
  };
  for (std::size_t i = 0; i < count; ++i) {
    if (const std::size_t j = twin_at(i); j < i) {  // equal load and options: equal terms
      const bound_range p = seen[i] = seen[j];
      if (!std::isfinite(p.t)) continue;  // as below
      if (!b.stored.empty()) b.seq_of.push_back(b.seq_of[p.owner]);
      count_in(p, p.first < p.last ? b.terms[p.first].share : 0.0);
      continue;
    }
    const auto& load = load_at(i);
    const std::size_t start = b.terms.size();
    double w = std::numeric_limits<double>::infinity(), t = std::numeric_limits<double>::infinity();
    double share = 0;
    double forward = std::numeric_limits<double>::infinity();  // its least forward seconds (work floors)
    if constexpr (step_floor_share_cost_model<C>) share = cost.step_floor_share(load);
    for (const sequence_option& o : options_at(i)) {
      const double speed = b.speed_of_sp[static_cast<std::size_t>(o.sp)];
      if (speed == 0) continue;  // no block of this size: no plan runs the option
      // Any legal ring may run the step: the least floor over them (options are timed at the fastest).
      const int sp = o.sp, k = o.checkpointed_blocks;
      if constexpr (work_floors_cost_model<C>) {
        // The same floors, through the cost model's per-model terms computed once (`floors`),
        // each the least over the legal rings as `least_work_floor` takes it: the step's ring,
        // then each wider one.
        auto least_over_rings = [&](int kk) {
          decltype(floors.both(load, sp, kk, 1)) least{std::numeric_limits<double>::infinity(),
                                                       std::numeric_limits<double>::infinity()};
          for_each_legal_ring(cost, sp, [&](int r) {
            const auto [work_r, packed_r] = floors.both(load, sp, kk, r);
            least.work = work_r < least.work ? work_r : least.work;
            least.packed = packed_r < least.packed ? packed_r : least.packed;
          });
          return least;
        };
        const auto [floor, packed] = least_over_rings(k);
        const double fastest = in_company(load, o) / speed;
        b.terms.push_back({fastest, std::max(floor, packed), share, sp});
        w = std::min(w, floor), t = std::min(t, fastest);
        if constexpr (pipeline_cost_model<C>)
          if (pp > 1) {
            // The work floor is affine in k, so its forward share `floor(k) L / (3L + k)` is
            // monotone in k: the least over k..L is at an end (DESIGN 4.5, around a path).
            const int L = cost.blocks();
            double at_L = std::numeric_limits<double>::infinity();  // the work floor alone: no packed one
            for_each_legal_ring(cost, sp, [&](int r) {
              const double x = floors.work(load, sp, L, r);
              at_L = x < at_L ? x : at_L;
            });
            forward = std::min({forward, floor * forward_share(L, k), at_L * forward_share(L, L)});
          }
        continue;
      }
      const double floor = least_work_floor(cost, load, sp, k);
      bound_term x{in_company(load, o) / speed, floor, share, sp};
      // The joint bound takes the tighter packed floor where the cost model has one.
      if constexpr (packed_floor_cost_model<C>) x.floor = std::max(floor, least_packed_floor(cost, load, sp, k));
      b.terms.push_back(x);
      w = std::min(w, floor), t = std::min(t, x.time);
    }
    seen[i] = {start, b.terms.size(), w, t, b.ranges.size()};
    // In [1/4, 1/3] in exact arithmetic; the clamp absorbs rounding.
    if (std::isfinite(forward) && w > 0) seen[i].ahead = std::clamp(forward / w, 0.25, 1.0 / 3);
    if (!std::isfinite(t)) continue;  // infeasible: not part of any plan
    if (!b.stored.empty()) b.seq_of.push_back(i);
    count_in(seen[i], share);
  }
  return b;
}

/// The joint bound at one mix of floor and share (`lambda`; 1: the floors alone): at T every
/// sequence takes its smallest floor among options no slower than T; that sum only falls as T
/// grows, so the sweep goes upwards from the longest alone time over the breakpoints where some
/// sequence gains a cheaper option. `scale`: each option's time times it (P under stages: its
/// path); `wait`: seconds added to the floors' time (the bubble floor under stages).
inline double joint_at(const priced_bounds& b, double lambda, double scale, double wait) {
  const auto& terms = b.terms;
  auto floor_of = [&](const bound_term& x) { return lambda == 1 ? x.floor : lambda * x.floor + (1 - lambda) * x.share; };
  const std::size_t n = b.ranges.size();
  std::vector<double> floor_at(n);
  struct event {
    double time;
    std::size_t seq;
    double floor;
  };
  std::vector<event> later;
  double sum = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const bound_range& r = b.ranges[i];
    double w = std::numeric_limits<double>::infinity();
    if (r.owner < i) {  // a twin: its owner's floor, not yet lowered (the sweep comes after)
      w = floor_at[r.owner];
    } else {
      for (std::size_t o = r.first; o < r.last; ++o)
        if (terms[o].time <= b.longest) w = std::min(w, floor_of(terms[o]));
    }
    for (std::size_t o = r.first; o < r.last; ++o)
      if (terms[o].time > b.longest && floor_of(terms[o]) < w) later.push_back({terms[o].time, i, floor_of(terms[o])});
    floor_at[i] = w;
    sum += w;
  }
  const double capacity = b.capacity;
  double joint = std::max(scale * b.longest, sum / capacity + wait);
  if (sum / capacity + wait > scale * b.longest) {
    std::sort(later.begin(), later.end(), [](const event& x, const event& y) {
      return x.time != y.time ? x.time < y.time : x.seq != y.seq ? x.seq < y.seq : x.floor < y.floor;
    });
    // Below the next breakpoint the sum is constant: T = sum / capacity works if it comes first.
    for (std::size_t e = 0; e < later.size() && sum / capacity + wait > scale * later[e].time;) {
      const double at = later[e].time;
      for (; e < later.size() && later[e].time == at; ++e) {
        const event& x = later[e];
        if (x.floor < floor_at[x.seq]) sum -= floor_at[x.seq] - x.floor, floor_at[x.seq] = x.floor;
      }
      joint = std::max(scale * at, sum / capacity + wait);
    }
  }
  return joint;
}

/// The joint bound (`joint_at`): with zero3 shares a step's unit-seconds cover both its members'
/// floors and their shares, so every mix lambda floor + (1 - lambda) share gives a valid bound
/// and the largest counts.
inline double joint_bound(const priced_bounds& b, double scale, double wait) {
  double joint = joint_at(b, 1, scale, wait);
  if (b.shares > 0)
    for (double lambda : {0.75, 0.5, 0.25, 0.0}) joint = std::max(joint, joint_at(b, lambda, scale, wait));
  return joint;
}

/// The bound around one sequence's path through P pipeline stages (DESIGN 4.5): sequence i's
/// micro-batch on s units lasts t >= t_i(s) per stage and takes P t to pass the stages. Of its
/// units' other work (y per unit, in floors), stage 0 runs the forwards of what is ahead of it
/// (at least phi of its floors: below) before its path and the backwards of what is behind it (at
/// least two thirds) after, at any warmup depth; the last stage runs everything ahead, forward and
/// backward, before it, and the path's backward then returns through P - 1 stages. With a ahead:
/// T >= P t + phi a + 2 (y - a)/3 and T >= t + 2 (P - 1) t / 3 + a + 2 (y - a)/3, whose larger is
/// least at a = min(y, y*), y* = (P - 1) t / (3 (1 - phi)): T >= g(y) = P t + phi y + (2/3 - phi)
/// max(0, y - y*). The other units carry the rest, T >= (R - s y) / (U - s) (equal speeds). R is
/// the other sequences' floors less what fits beside i at no extra time, s t - W'_i(s) (packing
/// more lengthens the path faster than it shortens the rest). The least over y, then over i's
/// options, bounds every plan; the largest over i is `around_s`.
/// phi: a step's forward is `forward_share(L, k)` of its time, 1/4 to 1/3. Where the work floor
/// is affine in k (`work_floors_cost_model`), floor(k) L / (3L + k) is monotone in k, so a
/// sequence's forward on any option at any k >= kmin is at least the least of it at kmin and at L
/// over its options: phi_j of its floor W_j (`bound_range::ahead`). The others' least phi_j holds
/// for every mix ahead of i; elsewhere phi = 1/4.
class path_bound {
 public:
  path_bound(const priced_bounds& b, int stages, double units) : b_(&b), P_(stages), U_(units) {
    if (stages > 1 && !b.ranges.empty()) {  // the two least phi_j, so that i's own is left out of its term
      phi1_ = phi2_ = 1.0 / 3;
      for (std::size_t r = 0; r < b.ranges.size(); ++r) {
        if (b.ranges[r].ahead < phi1_)
          phi2_ = phi1_, phi1_ = b.ranges[r].ahead, least_at_ = r;
        else if (b.ranges[r].ahead < phi2_)
          phi2_ = b.ranges[r].ahead;
      }
    }
  }
  /// The phi of range r's term: the others' least.
  double phi_of(std::size_t r) const noexcept { return r == least_at_ ? phi2_ : phi1_; }
  /// The other sequences' floors beside range `p` on its option `o`, R above.
  double rest_of(const bound_range& p, std::size_t o) const {
    const bound_term& x = b_->terms[o];
    return std::max(0.0, b_->work - p.w - std::max(0.0, x.sp * x.time - x.floor));
  }
  /// The bound for one option (s units, t per stage; `rest` the others' floors) where the work
  /// behind the path runs at most `hidden` seconds a unit of its forwards on stage 0 before the
  /// path's backward (memory around a path; infinite: all of them): g(y) rises with a third
  /// piece from y = y* + 3 hidden.
  double at(double s, double t, double rest, double phi, double hidden) const {
    const double P = P_, U = U_;
    const double knee = (P - 1) * t / (3 * (1 - phi));  // y*: past it the last stage binds
    const double bend = knee + 3 * hidden;              // past it memory binds stage 0
    const double steep = 2.0 / 3.0 + 1 / (3 * (4 - 3 * phi));
    auto g = [&](double y) {
      double x = P * t + phi * y + (2.0 / 3.0 - phi) * std::max(0.0, y - knee);
      if (y > bend) x += (steep - 2.0 / 3.0) * (y - bend);
      return x;
    };
    double bound = g(rest / s);  // every unit holds i: all the rest is around its path
    if (s < U) {
      // g rises and (R - s y) / (U - s) falls in y: they cross on one of g's pieces.
      const double c = s / (U - s), others = rest / (U - s);
      double y = (others - P * t) / (phi + c);
      if (y > knee) y = (others - P * t + (2.0 / 3.0 - phi) * knee) / (2.0 / 3.0 + c);
      if (y > bend) y = (others - g(bend) + steep * bend) / (steep + c);
      y = std::clamp(y, 0.0, rest / s);
      bound = std::max(g(y), others - c * y);
    }
    return bound;
  }
  /// `around_s` with nothing held back by memory: the largest over ranges of the least over
  /// their options of `at` with every forward hidden; per range, into `least_option` where it is
  /// not empty, the option whose term is least (its term with nothing hidden bounds the range's).
  double around(std::vector<std::size_t>& least_option) const {
    double most = 0;
    for (std::size_t r = 0; r < b_->ranges.size(); ++r) {
      const bound_range& p = b_->ranges[r];
      double least = std::numeric_limits<double>::infinity();
      for (std::size_t o = p.first; o < p.last; ++o)
        if (const double x = at(b_->terms[o].sp, b_->terms[o].time, rest_of(p, o), phi_of(r),
                                std::numeric_limits<double>::infinity());
            x < least) {
          least = x;
          if (!least_option.empty()) least_option[r] = o;
        }
      most = std::max(most, least);
    }
    return most;
  }

 private:
  const priced_bounds* b_;
  double P_, U_;
  std::size_t least_at_ = static_cast<std::size_t>(-1);
  double phi1_ = 0.25, phi2_ = 0.25;
};

/// Every range's hull pieces (`hidden_forwards`, a twin sharing its owner's), by saving per byte,
/// most first, with their prefix sums and where each one landed; and the fractional knapsack of
/// every piece but one range's own within a budget of bytes.
class hidden_knapsack {
 public:
  /// `pieces_of(r, corners, hull)` appends the pieces of range r (an owner) to `hull`.
  template <class PiecesOf>
  hidden_knapsack(const priced_bounds& b, PiecesOf&& pieces_of) {
    std::vector<hull_piece> corners;  // scratch
    std::vector<std::pair<std::size_t, std::size_t>> hull_of(b.ranges.size());  // range r's pieces of `hull_`
    first_of_.push_back(0);
    for (std::size_t r = 0; r < b.ranges.size(); ++r) {
      const bound_range& p = b.ranges[r];
      if (p.owner < r) {
        hull_of[r] = hull_of[p.owner];  // a twin: its owner's pieces
      } else {
        hull_of[r].first = hull_.size();
        pieces_of(r, corners, hull_);
        hull_of[r].second = hull_.size();
      }
      for (std::size_t x = hull_of[r].first; x < hull_of[r].second; ++x) at_hull_.push_back(x);
      first_of_.push_back(at_hull_.size());
    }
    order_.resize(at_hull_.size());
    for (std::size_t x = 0; x < order_.size(); ++x) order_[x] = x;
    std::sort(order_.begin(), order_.end(), [&](std::size_t a, std::size_t c) {
      const auto &u = piece(a), &v = piece(c);
      const double left = u.saved * v.bytes, right = v.saved * u.bytes;
      return left != right ? left > right : a < c;
    });
    landed_.resize(order_.size());
    double bytes = 0, saved = 0;
    for (std::size_t j = 0; j < order_.size(); ++j) {
      landed_[order_[j]] = j;
      bytes_to_.push_back(bytes += piece(order_[j]).bytes);
      saved_to_.push_back(saved += piece(order_[j]).saved);
    }
  }

  /// The knapsack of every range's pieces but range r's own in `budget` bytes.
  double most_saved(double budget, std::size_t r) const {
    own_.clear();
    for (std::size_t x = first_of_[r]; x < first_of_[r + 1]; ++x) own_.push_back(landed_[x]);
    std::sort(own_.begin(), own_.end());
    // The prefix sums up to position j with r's pieces left out.
    const auto without = [&](std::size_t j, const std::vector<double>& to, bool bytes) {
      double sum = to[j];
      for (std::size_t q : own_)
        if (q <= j) sum -= bytes ? piece(order_[q]).bytes : piece(order_[q]).saved;
      return sum;
    };
    std::size_t lo = 0, hi = order_.size();  // the first j whose sum without r reaches the budget
    while (lo < hi) {
      const std::size_t mid = lo + (hi - lo) / 2;
      if (without(mid, bytes_to_, true) < budget)
        lo = mid + 1;
      else
        hi = mid;
    }
    if (lo == order_.size()) return order_.empty() ? 0.0 : without(order_.size() - 1, saved_to_, false);
    const double before_b = lo == 0 ? 0 : without(lo - 1, bytes_to_, true);
    const double before_v = lo == 0 ? 0 : without(lo - 1, saved_to_, false);
    const auto& x = piece(order_[lo]);
    return before_v + x.saved * ((budget - before_b) / x.bytes);
  }

 private:
  const hull_piece& piece(std::size_t counted) const { return hull_[at_hull_[counted]]; }
  std::vector<hull_piece> hull_;          // every owner's pieces
  std::vector<std::size_t> at_hull_;      // counted index (ranges' order) -> index into `hull_`
  std::vector<std::size_t> first_of_;     // range r's pieces: counted indices first_of_[r] .. first_of_[r + 1]
  std::vector<std::size_t> order_, landed_;  // counted indices by saving per byte; and where each landed
  std::vector<double> bytes_to_, saved_to_;  // prefix sums in that order
  mutable std::vector<std::size_t> own_;     // `most_saved`'s scratch
};

/// Memory around a path (DESIGN 4.5): the forwards that stage 0 runs behind i's micro-batch m
/// before m's backward are the next d (P - 1) of its unit, in flight with m, so their stored bytes
/// fit in the capacity less m's memory, C - memory_i(s, L) on each of m's units. Hiding a
/// sequence's forward saves at most `hidden_forwards`' value against its floor; over m's s units
/// the saving is at most the fractional knapsack of every sequence's hull in s (C - memory_i(s,
/// L)) bytes (`path_bound::at`'s `hidden`, a unit's share), its own pieces left out. Only
/// sequences whose least option's term with nothing hidden (`hidden` 0, the largest it can be)
/// passes `above` (the bound without memory, raised as terms come in) are priced, and the pieces
/// are built and sorted only when one is. Returns `around_s` raised by those terms.
template <cost_model C, class Floors, class LoadAt, class OptionsAt>
  requires stored_per_token_cost_model<C> && work_floors_cost_model<C>
double memory_around(const C& cost, const Floors& floors, const priced_bounds& b, const path_bound& path,
                     const std::vector<std::size_t>& least_option, double above, double around_s, LoadAt&& load_at,
                     OptionsAt&& options_at) {
  // Sequence i's options' ends (`detail::recompute_ends`), into `ends`: each ring's work floor
  // (A + B k) at kmin and at L gives its backward, (A + B k)(2L + k) / (3L + k), which is affine
  // in u = 3L + k plus -A' L / u (A' = A - 3 B L): convex where A' < 0, and then at most
  // -A' L (1/sqrt(u0) - 1/sqrt(u1))^2 below its chord over kmin..L.
  std::vector<recompute_ends> ends;
  const auto ends_at = [&](std::size_t i) {
    ends.clear();
    const auto& load = load_at(i);
    const int L = cost.blocks();
    for (const sequence_option& o : options_at(i)) {
      if (b.speed_of_sp[static_cast<std::size_t>(o.sp)] == 0) continue;  // no block of this size
      const int sp = o.sp, k = o.checkpointed_blocks;
      double least_k = std::numeric_limits<double>::infinity(), least_L = least_k, below = 0;
      for_each_legal_ring(cost, sp, [&](int r) {
        const double at_k = floors.work(load, sp, k, r), at_L = floors.work(load, sp, L, r);
        least_k = std::min(least_k, at_k), least_L = std::min(least_L, at_L);
        if (k >= L) return;
        const double slope = (at_L - at_k) / (L - k), bent = at_k - slope * k - 3 * slope * L;
        if (bent < 0) {
          const double gap = 1 / std::sqrt(3.0 * L + k) - 1 / std::sqrt(4.0 * L);
          below = std::max(below, -bent * L * gap * gap);
        }
      });
      ends.push_back({k, least_k, least_L, below});
    }
  };
  std::optional<hidden_knapsack> pieces;  // built at the first sequence that needs them
  for (std::size_t r = 0; r < b.ranges.size(); ++r) {
    const bound_range& p = b.ranges[r];
    if (p.first == p.last) continue;
    const std::size_t x = least_option[r];
    if (!(path.at(b.terms[x].sp, b.terms[x].time, path.rest_of(p, x), path.phi_of(r), 0) > above)) continue;
    if (!pieces)
      pieces.emplace(b, [&](std::size_t owner, std::vector<hull_piece>& corners, std::vector<hull_piece>& hull) {
        ends_at(b.seq_of[owner]);
        hidden_forwards(ends, b.ranges[owner].w, static_cast<double>(load_at(b.seq_of[owner]).tokens), b.stored,
                        corners, hull);
      });
    const auto& load = load_at(b.seq_of[r]);
    double least = std::numeric_limits<double>::infinity();
    for (std::size_t o = p.first; o < p.last; ++o) {
      const int sp = b.terms[o].sp;
      // C - memory_i(s, L) by the law of `stored_per_token_cost_model`
      const double room = cost.capacity() - cost.static_memory() - cost.working_memory(load, sp) -
                          static_cast<double>(load.tokens) * b.stored.back() / sp;
      least = std::min(least, path.at(sp, b.terms[o].time, path.rest_of(p, o), path.phi_of(r),
                                      pieces->most_saved(sp * std::max(0.0, room), r) / sp));
    }
    around_s = std::max(around_s, least);
    above = std::max(above, least);
  }
  return around_s;
}

}  // namespace detail

/// Lower bounds of DESIGN section 3 for a set of (feasible) sequences.
/// Simple: max( sum_i W_i / N, max_i min_sp t_i(sp, kmin_i(sp)) ).
/// Joint: the least T such that every sequence has an sp with t_i(sp, kmin_i(sp)) <= T and the
/// sum over sequences of the smallest floor W'_i(sp) among those sp is at most N T, W'_i(sp) the
/// cost model's `packed_work_floor` at kmin_i(sp) when it has one (else W_i(sp)). It is exact
/// (a sweep over the breakpoints t_i(sp), not a bisection) and never below the simple bound.
/// With per-GPU speed factors s_r (empty = all 1) a step lasts its time over its slowest
/// member's speed: N becomes sum_r s_r and t_i(sp) becomes t_i(sp) / s_best(sp), s_best(sp) the
/// fastest block of sp that the group manager offers (`fastest_block_speed`). A size the manager
/// offers no block of is no option. Without a manager: every aligned block (`buddy_groups`).
/// Where blocks differ in capacity (a mixed cluster) every option and floor is priced at the
/// job's largest capacity, which no plan can beat.
template <cost_model C, group_manager G>
batch_bounds lower_bounds(const C& cost, const G& groups, std::span<const sequence> batch,
                          std::span<const double> speeds = {});
template <cost_model C>
batch_bounds lower_bounds(const C& cost, std::span<const sequence> batch, std::span<const double> speeds = {}) {
  return lower_bounds(cost, buddy_groups{cost.gpus(), cost.gpus_per_node()}, batch, speeds);
}

/// `lower_bounds` over sequences already in id order, given as `count` loads (`load_at(i)`) and
/// their feasible options under selective recompute (`options_at(i)`, as `options_of` makes
/// them): a planner that has computed the options passes them instead of pricing them again.
/// `twin_at(i)` is an index j <= i whose load and options equal i's (i itself when none is
/// known); twins are priced once. Options of a size `groups` offers no block of are left out.
template <cost_model C, group_manager G, class LoadAt, class OptionsAt, class TwinAt>
batch_bounds lower_bounds_of(const C& cost, const G& groups, std::size_t count, LoadAt&& load_at,
                             OptionsAt&& options_at, TwinAt&& twin_at, std::span<const double> speeds = {}) {
  // On a cluster whose blocks differ in capacity a step may run on the largest: the floors are
  // priced there (a relaxation, so still a bound), as the options must be.
  if (capacities_differ(cost))
    return lower_bounds_of(at_largest_capacity(cost), groups, count, load_at, options_at, twin_at, speeds);
  const auto floors = detail::floors_of(cost);  // the per-model floor terms, once for every bound
  const detail::priced_bounds b =
      detail::price_bounds(cost, groups, floors, count, load_at, options_at, twin_at, speeds);
  const int pp = cost.layout().pp;
  batch_bounds out;
  out.busy_s = std::max(b.work, b.shares) / b.capacity;
  out.longest_s = b.longest;
  out.shortest_s = std::isfinite(b.shortest) ? b.shortest : 0;
  const detail::path_bound path(b, pp, cost.gpus());
  std::vector<std::size_t> least_option(b.stored.empty() ? 0 : b.ranges.size(), 0);
  if (pp > 1 && speeds.empty()) out.around_s = path.around(least_option);
  // zero3: no step is shorter than its gather floor, and a step holds at most x_max tokens per
  // unit, so the batch needs at least sum_i share_i unit-seconds (DESIGN section 3).
  out.simple_s = std::max({b.work / b.capacity, b.longest, b.shares / b.capacity});
  // The joint is equal to or above the simple bound in exact arithmetic; the max absorbs rounding.
  out.joint_s = std::max(detail::joint_bound(b, 1, 0), out.simple_s);
  // Under P stages the same sweep with each option's time its path, P t, and the bubble floor
  // added to the floors' time.
  if (pp > 1) out.pipeline_joint_s = detail::joint_bound(b, pp, pipeline_bubble_floor(pp, out.shortest_s));
  if constexpr (stored_per_token_cost_model<C> && work_floors_cost_model<C>)
    if (!b.stored.empty())
      out.around_s = detail::memory_around(cost, floors, b, path, least_option, pipelined(out, pp).joint_s,
                                           out.around_s, load_at, options_at);
  return out;
}

/// `lower_bounds_of` with every block a `buddy_groups` offers.
template <cost_model C, class LoadAt, class OptionsAt, class TwinAt>
batch_bounds lower_bounds_of(const C& cost, std::size_t count, LoadAt&& load_at, OptionsAt&& options_at,
                             TwinAt&& twin_at, std::span<const double> speeds = {}) {
  return lower_bounds_of(cost, buddy_groups{cost.gpus(), cost.gpus_per_node()}, count,
                         std::forward<LoadAt>(load_at), std::forward<OptionsAt>(options_at),
                         std::forward<TwinAt>(twin_at), speeds);
}

template <cost_model C, group_manager G>
batch_bounds lower_bounds(const C& cost, const G& groups, std::span<const sequence> batch,
                          std::span<const double> speeds) {
  if (capacities_differ(cost)) return lower_bounds(at_largest_capacity(cost), groups, batch, speeds);
  // In id order: the bounds must not depend on the order a rank received the batch in.
  std::vector<const sequence*> by_id;
  by_id.reserve(batch.size());
  for (const auto& s : batch) by_id.push_back(&s);
  std::sort(by_id.begin(), by_id.end(), [](const sequence* a, const sequence* b) { return a->id < b->id; });
  std::vector<typename C::load_type> loads;
  std::vector<std::vector<sequence_option>> options;
  loads.reserve(by_id.size());
  options.reserve(by_id.size());
  std::vector<int> offered = legal_sp_sizes(cost);  // the sizes with a block: no other option counts
  std::erase_if(offered, [&](int sp) { return groups.block_count(sp) <= 0; });
  for (const sequence* q : by_id) {
    loads.push_back(cost.load_of(*q));
    options.push_back(options_of(cost, loads.back(), std::span<const int>(offered)));
  }
  return lower_bounds_of(
      cost, groups, loads.size(), [&](std::size_t i) -> const auto& { return loads[i]; },
      [&](std::size_t i) -> const auto& { return options[i]; }, [](std::size_t i) { return i; }, speeds);
}

/// The simple lower bound of DESIGN section 3 (`lower_bounds(...).simple_s`).
template <cost_model C>
double lower_bound(const C& cost, std::span<const sequence> batch, std::span<const double> speeds = {}) {
  return lower_bounds(cost, batch, speeds).simple_s;
}

/// The joint lower bound of DESIGN section 3 (`lower_bounds(...).joint_s`).
template <cost_model C>
double joint_lower_bound(const C& cost, std::span<const sequence> batch, std::span<const double> speeds = {}) {
  return lower_bounds(cost, batch, speeds).joint_s;
}

}  // namespace dcp
