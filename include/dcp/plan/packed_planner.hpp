#pragma once
/// \file
/// `packed_planner`: sequence packing on a fixed sp, the second static baseline of DESIGN
/// section 3 ("Baselines").
///
/// - One sp, one recompute level (`recompute_level`: k checkpointed blocks in every step) and a packing
///   length (`fill` of the most tokens that fit) for the whole run, tuned together on the
///   workload exactly as `bucket_planner`'s (`dcp::tune`).
/// - Each global batch is packed first-fit-decreasing (by tokens) into micro-batches holding up
///   to that length (under pp = P: P micro-batches of it fit in flight at 1F1B).
/// - Micro-batches are dealt one per data-parallel group (N / sp groups) per iteration, in
///   packing order (consecutive bins hold similar sequences, which keeps iterations balanced);
///   iterations are synchronised, so an iteration lasts as long as its slowest group. Under pp > 1
///   each group runs its share as one 1F1B pipeline, longest first to the least loaded group.
///
/// An untuned planner (`sp == 0`) is a `dcp::error` naming `dcp::tune`: it never tunes itself.

#include <algorithm>
#include <cstdint>
#include <ostream>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include <dcp/compiled.hpp>
#include <dcp/cost/cost_concepts.hpp>
#include <dcp/error.hpp>
#include <dcp/plan/fixed_sp.hpp>
#include <dcp/plan/plan.hpp>
#include <dcp/plan/plan_concepts.hpp>
#include <dcp/plan/sequence_options.hpp>
#include <dcp/recompute/full_recompute.hpp>
#include <dcp/recompute/recompute_concepts.hpp>
#include <dcp/sequence.hpp>

namespace dcp {

namespace detail {

// First fit in O(log bins): a max tree over the room left in every bin (unopened bins are
// empty), so the leftmost bin with room for an item is one descent.
class first_fit_bins {
 public:
  first_fit_bins(std::size_t max_bins, std::int64_t capacity) {
    while (leaves_ < std::max<std::size_t>(max_bins, 1)) leaves_ *= 2;
    room_.assign(2 * leaves_, capacity);
  }
  // Index of the leftmost bin with at least `size` room (`size <= capacity`), and takes the room.
  std::size_t put(std::int64_t size) {
    std::size_t node = 1;
    while (node < leaves_) node = room_[2 * node] >= size ? 2 * node : 2 * node + 1;
    room_[node] -= size;
    for (std::size_t n = node / 2; n >= 1; n /= 2) room_[n] = std::max(room_[2 * n], room_[2 * n + 1]);
    return node - leaves_;
  }

 private:
  std::size_t leaves_ = 1;
  std::vector<std::int64_t> room_;
};

}  // namespace detail

struct packed_planner {
  using policy_concept = planner_tag;

  int sp = 0;         ///< the fixed sp; 0 = untuned (`dcp::tune` chooses it)
  double fill = 1.0;  ///< micro-batches hold up to this fraction of the most tokens that fit (tuned)
  uniform_recompute recompute_level{};  ///< checkpointed blocks of every step (tuned)
  loss_normalization loss = loss_normalization::token_mean;
  infeasible_policy on_infeasible = infeasible_policy::error;

  std::string name() const { return "packed"; }

  /// "sp 8, fill 0.25, recompute 12/48": the tuned setting, for reports.
  template <cost_model C>
  std::string tuned_setting(const C& cost) const {
    return fixed_sp_setting(cost, sp, fill, recompute_level);
  }

  /// Plans one global batch on the context's blocks of `sp`, every step checkpointing
  /// `recompute_level`'s blocks (the context's recompute policy is not used).
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

  /// The micro-batches of `seqs` (each fits alone on `sp`): first-fit decreasing by tokens into
  /// bins of `fill` times `static_token_capacity(cost, sp, k)` tokens; a bin whose memory the cost
  /// model prices over that (never for the analytic model) is re-cut next-fit.
  template <cost_model C>
  std::vector<std::vector<sequence>> micro_batches(const C& cost, std::span<const sequence> seqs) const {
    const int k = recompute_level.of(cost);
    std::vector<std::pair<std::int64_t, std::size_t>> order;  // (tokens, index), decreasing
    order.reserve(seqs.size());
    for (std::size_t i = 0; i < seqs.size(); ++i) order.emplace_back(cost.tokens_of(seqs[i]), i);
    std::sort(order.begin(), order.end(), [&](const auto& a, const auto& b) {
      return a.first != b.first ? a.first > b.first : seqs[a.second].id < seqs[b.second].id;
    });
    const auto most = static_cast<double>(static_token_capacity(cost, sp, k));
    const std::int64_t cap = std::max(static_cast<std::int64_t>(most * fill), order.empty() ? 1 : order.front().first);
    detail::first_fit_bins bins(seqs.size(), cap);
    std::vector<std::vector<sequence>> packed;
    for (const auto& [tokens, i] : order) {
      const std::size_t b = bins.put(tokens);
      if (b >= packed.size()) packed.resize(b + 1);
      packed[b].push_back(seqs[i]);
    }
    std::vector<std::vector<sequence>> out;
    out.reserve(packed.size());
    for (auto& bin : packed) {
      typename C::load_type load{};
      for (const auto& s : bin) load = load + cost.load_of(s);
      if (fits_static(cost, load, sp, k)) {
        out.push_back(std::move(bin));
        continue;
      }
      std::vector<sequence> current;
      load = {};
      for (const auto& s : bin) {
        const auto next = load + cost.load_of(s);
        if (!current.empty() && !fits_static(cost, next, sp, k)) {
          out.push_back(std::move(current));
          current.clear();
          load = cost.load_of(s);
        } else {
          load = next;
        }
        current.push_back(s);
      }
      out.push_back(std::move(current));
    }
    return out;
  }

  friend bool operator==(const packed_planner&, const packed_planner&) = default;
  friend std::ostream& operator<<(std::ostream& os, const packed_planner& p) {
    return os << "packed_planner{sp=" << p.sp << ", fill=" << p.fill << ", recompute_level=" << p.recompute_level
              << ", loss=" << p.loss << ", on_infeasible=" << p.on_infeasible << "}";
  }

 private:
  // Out of the class, so that it is not inline: the compiled mode (<dcp/compiled.hpp>) declares
  // its common instantiations extern.
  template <any_planning_context Ctx>
  dcp::plan plan(const Ctx& ctx, std::span<const sequence> batch, const batch_bounds* known) const;
};

static_assert(planner<packed_planner>);

template <any_planning_context Ctx>
dcp::plan packed_planner::plan(const Ctx& ctx, std::span<const sequence> batch, const batch_bounds* known) const {
  ctx.validate();
  return plan_fixed_sp(
      *this, ctx, batch, [&](std::span<const sequence> seqs) { return micro_batches(ctx.cost, seqs); }, known);
}

}  // namespace dcp

#if DCP_HAS_COMPILED()
// The compiled mode: the common contexts' instantiations are in dcp::compiled.
#define DCP_DETAIL_EXTERN_PACKED_PLANNER(C, R, G) DCP_PACKED_PLANNER_ON(extern, C, R, G)
DCP_COMPILED_CONTEXTS(DCP_DETAIL_EXTERN_PACKED_PLANNER)
#undef DCP_DETAIL_EXTERN_PACKED_PLANNER
#endif
