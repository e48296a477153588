#pragma once
/// \file
/// `bucket_planner`: Open-Sora's bucket parallel, the static baseline of DESIGN section 3
/// ("Baselines"), given the most favourable settings a user of it would pick.
///
/// - One sp and one recompute level for the whole run (`recompute_level`: k checkpointed blocks in
///   every step; Open-Sora's `grad_checkpoint` switch, and the per-layer checkpointing its users
///   add), tuned together on the workload (`dcp::tune`, `<dcp/workload/tuning.hpp>`): among the
///   legal (sp, k) on which the longest sequence fits, the pair whose simulated epoch is the
///   fastest.
/// - Buckets: the distinct shapes (T, S) for video data, geometric token buckets for 1D text.
///   A bucket's batch size bs is the most copies of its representative that fit memory (times a
///   `fill` fraction tuned with sp, as a user sizes the bucket table), then
///   scaled toward the median bucket time: bs' = max(1, floor(bs * t_median / t_bucket)), and
///   never above bs (a larger batch would not fit).
/// - A global batch's micro-batches are shuffled (seeded, dcp's own PRNG) and dealt one per
///   data-parallel group (N / sp groups) per iteration; iterations are synchronised (the
///   gradient all-reduce is a barrier), so an iteration lasts as long as its slowest group.
///
/// ```
/// auto bucket = dcp::tune(dcp::bucket_planner{}, cost, dataset);  // picks sp on the whole dataset
/// dcp::plan p = bucket.plan(cost, batch);
/// ```
/// An untuned planner (`sp == 0`) is a `dcp::error` naming `dcp::tune`: it never tunes itself.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <ostream>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include <dcp/bucketing/geometric_bucketing.hpp>
#include <dcp/compiled.hpp>
#include <dcp/cost/cost_concepts.hpp>
#include <dcp/error.hpp>
#include <dcp/plan/fixed_sp.hpp>
#include <dcp/plan/plan.hpp>
#include <dcp/plan/plan_concepts.hpp>
#include <dcp/plan/sequence_options.hpp>
#include <dcp/random.hpp>
#include <dcp/recompute/full_recompute.hpp>
#include <dcp/recompute/recompute_concepts.hpp>
#include <dcp/sequence.hpp>

namespace dcp {

/// How `bucket_planner` groups sequences into buckets.
enum class bucket_keys {
  automatic,  ///< `shape` when the data holds a video (frames > 1), else `tokens`
  shape,      ///< one bucket per distinct (T, S), as Open-Sora's resolution x frames buckets
  tokens,     ///< geometric token buckets (`bucket_planner::token_buckets`), for 1D text
};

inline const char* to_string(bucket_keys k) noexcept {
  switch (k) {
    case bucket_keys::automatic: return "automatic";
    case bucket_keys::shape: return "shape";
    case bucket_keys::tokens: return "tokens";
  }
  return "?";
}

/// One bucket as `bucket_planner` sizes it on a fixed sp.
struct bucket_info {
  std::int64_t key_frames = 0;   ///< T of a shape bucket; 0 for a token bucket
  std::int64_t key_spatial = 0;  ///< S of a shape bucket; the bucket index of a token bucket
  sequence representative;       ///< the shape that sizes the bucket (its largest member shape)
  std::int64_t members = 0;      ///< sequences of the data in the bucket
  std::int64_t max_batch = 0;    ///< bs: most copies of the representative that fit memory, times `fill`
  double time_s = 0;             ///< t_bucket: time of a micro-batch of bs representatives
  friend bool operator==(const bucket_info&, const bucket_info&) = default;
};

struct bucket_planner {
  using policy_concept = planner_tag;

  int sp = 0;                         ///< the fixed sp; 0 = untuned (`dcp::tune` chooses it)
  double fill = 1.0;                  ///< bs = this fraction of the most copies that fit (tuned)
  uniform_recompute recompute_level{};      ///< checkpointed blocks of every step (tuned)
  double median_bucket_time_s = 0;    ///< t_median over the dataset's buckets; 0 = from the batch
  bucket_keys keys = bucket_keys::automatic;
  geometric_bucketing token_buckets{};  ///< edges of the 1D token buckets
  std::uint64_t seed = 0;               ///< shuffles the micro-batches of each batch
  loss_normalization loss = loss_normalization::token_mean;
  infeasible_policy on_infeasible = infeasible_policy::error;

  std::string name() const { return "bucket"; }

  /// `keys` with `automatic` resolved for `data`.
  bucket_keys resolved_keys(std::span<const sequence> data) const noexcept {
    if (keys != bucket_keys::automatic) return keys;
    for (const auto& s : data)
      if (s.frames > 1) return bucket_keys::shape;
    return bucket_keys::tokens;
  }

  /// The bucket key of `s` under resolved keys `k`: (T, S), or (0, token bucket index).
  std::pair<std::int64_t, std::int64_t> key_of(const sequence& s, bucket_keys k) const noexcept {
    if (k == bucket_keys::shape) return {s.frames, s.spatial};
    return {0, static_cast<std::int64_t>(token_buckets.bucket_of(s.shape_tokens()))};
  }

  /// The buckets of `data` sized on group size `on_sp` (ascending key). A shape bucket is sized on
  /// its shape; a token bucket on its upper edge, or on its longest member when the edge itself
  /// does not fit.
  template <cost_model C>
  std::vector<bucket_info> buckets(const C& cost, std::span<const sequence> data, int on_sp) const {
    const bucket_keys k = resolved_keys(data);
    std::map<std::pair<std::int64_t, std::int64_t>, bucket_info> by_key;
    for (const auto& s : data) {
      const auto key = key_of(s, k);
      auto [it, fresh] = by_key.try_emplace(key);
      bucket_info& b = it->second;
      if (fresh) {
        b.key_frames = key.first, b.key_spatial = key.second;
        b.representative = s;
      } else if (cost.tokens_of(s) > cost.tokens_of(b.representative)) {
        b.representative = s;  // longest member, the fallback representative of a token bucket
      }
      ++b.members;
    }
    std::vector<bucket_info> out;
    out.reserve(by_key.size());
    const int k_ckpt = recompute_level.of(cost);
    for (auto& [key, b] : by_key) {
      if (k == bucket_keys::tokens) {
        const sequence edge = make_sequence(0, token_buckets.representative(static_cast<std::size_t>(key.second)));
        if (edge.shape_tokens() >= b.representative.shape_tokens() && fits_static(cost, edge, on_sp, k_ckpt))
          b.representative = edge;
      }
      b.representative.id = 0;
      const auto one = cost.load_of(b.representative);
      const std::int64_t most = max_copies(cost, one, on_sp, k_ckpt);
      b.max_batch = most <= 1 ? most : std::max<std::int64_t>(1, static_cast<std::int64_t>(static_cast<double>(most) * fill));
      b.time_s = cost.time(repeated_load<C>(one, std::max<std::int64_t>(b.max_batch, 1)), on_sp, k_ckpt);
      out.push_back(b);
    }
    return out;
  }

  /// t_median: the median bucket time of `data` on `on_sp` (the upper median for an even count).
  template <cost_model C>
  double median_time(const C& cost, std::span<const sequence> data, int on_sp) const {
    auto bs = buckets(cost, data, on_sp);
    if (bs.empty()) return 0;
    std::vector<double> t;
    t.reserve(bs.size());
    for (const auto& b : bs) t.push_back(b.time_s);
    std::sort(t.begin(), t.end());
    return t[t.size() / 2];
  }

  /// The scaled batch size of a bucket: bs' = max(1, floor(bs * t_median / t_bucket)), <= bs.
  static std::int64_t scaled_batch(const bucket_info& b, double t_median) noexcept {
    if (b.max_batch <= 1) return 1;
    const double scaled = std::floor(static_cast<double>(b.max_batch) * t_median / b.time_s);
    return std::clamp<std::int64_t>(static_cast<std::int64_t>(std::min(scaled, 1e15)), 1, b.max_batch);
  }

  /// "sp 8, fill 0.25, recompute 12/48": the tuned setting, for reports.
  template <cost_model C>
  std::string tuned_setting(const C& cost) const {
    return fixed_sp_setting(cost, sp, fill, recompute_level);
  }

  /// Plans one global batch on the context's blocks of `sp`. Every step checkpoints
  /// `recompute_level`'s blocks, as the real system does; the context's recompute policy is not used.
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

  /// The micro-batches of `seqs` (each sequence fits alone on `sp`), bucket by bucket in key
  /// order, each bucket cut into runs of its scaled batch size in the given order (cut earlier
  /// if a run of a token bucket would not fit memory).
  template <cost_model C>
  std::vector<std::vector<sequence>> micro_batches(const C& cost, std::span<const sequence> seqs) const {
    const bucket_keys k = resolved_keys(seqs);
    const auto info = buckets(cost, seqs, sp);
    const double t_median = median_bucket_time_s > 0 ? median_bucket_time_s : median_time(cost, seqs, sp);
    std::map<std::pair<std::int64_t, std::int64_t>, std::vector<sequence>> members;
    for (const auto& s : seqs) members[key_of(s, k)].push_back(s);
    std::vector<std::vector<sequence>> out;
    std::size_t b = 0;
    for (auto& [key, list] : members) {
      const std::int64_t size = scaled_batch(info[b++], t_median);
      std::vector<sequence> current;
      typename C::load_type load{};
      for (const auto& s : list) {
        const auto next = load + cost.load_of(s);
        if (!current.empty() && (static_cast<std::int64_t>(current.size()) >= size ||
                                 !fits_static(cost, next, sp, recompute_level.of(cost)))) {
          out.push_back(std::move(current));
          current.clear();
          load = cost.load_of(s);
        } else {
          load = next;
        }
        current.push_back(s);
      }
      if (!current.empty()) out.push_back(std::move(current));
    }
    return out;
  }

  friend bool operator==(const bucket_planner&, const bucket_planner&) = default;
  friend std::ostream& operator<<(std::ostream& os, const bucket_planner& p) {
    return os << "bucket_planner{sp=" << p.sp << ", fill=" << p.fill << ", recompute_level=" << p.recompute_level
              << ", median_bucket_time_s=" << p.median_bucket_time_s
              << ", keys=" << to_string(p.keys) << ", " << p.token_buckets << ", seed=" << p.seed
              << ", loss=" << p.loss << ", on_infeasible=" << p.on_infeasible << "}";
  }

 private:
  // Out of the class, so that it is not inline: the compiled mode (<dcp/compiled.hpp>) declares
  // its common instantiations extern.
  template <any_planning_context Ctx>
  dcp::plan plan(const Ctx& ctx, std::span<const sequence> batch, const batch_bounds* known) const;
};

static_assert(planner<bucket_planner>);

template <any_planning_context Ctx>
dcp::plan bucket_planner::plan(const Ctx& ctx, std::span<const sequence> batch, const batch_bounds* known) const {
  ctx.validate();
  token_buckets.validate();
  return plan_fixed_sp(
      *this, ctx, batch,
      [&](std::span<const sequence> seqs) {
        auto micro = micro_batches(ctx.cost, seqs);
        xoshiro256ss g(derive_seed(seed, batch_digest(seqs)));
        fisher_yates(std::span<std::vector<sequence>>(micro), g);
        return micro;
      },
      known);
}

}  // namespace dcp

#if DCP_HAS_COMPILED()
// The compiled mode: the common contexts' instantiations are in dcp::compiled.
#define DCP_DETAIL_EXTERN_BUCKET_PLANNER(C, R, G) DCP_BUCKET_PLANNER_ON(extern, C, R, G)
DCP_COMPILED_CONTEXTS(DCP_DETAIL_EXTERN_BUCKET_PLANNER)
#undef DCP_DETAIL_EXTERN_BUCKET_PLANNER
#endif
