// Baselines (DESIGN section 3, "Baselines"): bucket, packed, dynamic_cp (Megatron-Core's
// dynamic context parallelism: packing-aware group search, tuned per-rank token limit).
// Property tests over random batches (1D and 2D models, GPU counts 1..1024 including 24), plus
// the rules that make each baseline what it claims to be.

#include <dcp_test/support.hpp>
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <map>
#include <set>
#include <span>
#include <string>
#include <vector>

#include <dcp/cost/analytic.hpp>
#include <dcp/error.hpp>
#include <dcp/plan/bucket_planner.hpp>
#include <dcp/plan/check_plan.hpp>
#include <dcp/plan/dynamic_cp_planner.hpp>
#include <dcp/plan/packed_planner.hpp>
#include <dcp/random.hpp>
#include <dcp/workload/embedded.hpp>
#include <dcp/workload/tuning.hpp>

namespace {

using dcp::sequence;

struct scenario {
  dcp::analytic_cost cost;
  std::vector<sequence> batch;
};

int random_gpus(dcp::xoshiro256ss& g) {
  switch (dcp::uniform_below(g, 4)) {
    case 0: return 1 + static_cast<int>(dcp::uniform_below(g, 8));        // one node, any size
    case 1: return 24;                                                      // 3 nodes of 8
    case 2: return 8 * (1 + static_cast<int>(dcp::uniform_below(g, 16)));  // up to 128
    default: return 8 * (1 + static_cast<int>(dcp::uniform_below(g, 128)));  // up to 1024
  }
}

// Lengths log-uniform up to what fits, shapes 2D for the 2D model.
scenario random_scenario(dcp::xoshiro256ss& g) {
  const auto model = dcp::models::preset(dcp::models::preset_names[dcp::uniform_below(g, 3)]);
  auto cost = dcp::make_analytic_cost(model, dcp::devices::h200_analytic(), random_gpus(g));
  const double longest = 0.95 * static_cast<double>(dcp::largest_feasible_tokens(cost) - model.text_tokens);
  const int count = 1 + static_cast<int>(dcp::uniform_below(g, 96));
  scenario s{cost, {}};
  for (int i = 0; i < count; ++i) {
    const double n = std::exp(dcp::uniform01(g) * std::log(std::max(2.0, longest)));
    const auto id = static_cast<std::int64_t>(dcp::uniform_below(g, 1000)) * 1000 + i;  // unique, unordered
    if (model.attention == dcp::attention_kind::factorized_2d && dcp::uniform_below(g, 2) == 0) {
      const std::int64_t t = 1 + static_cast<std::int64_t>(dcp::uniform_below(g, 64));
      s.batch.push_back(dcp::make_sequence(id, t, std::max<std::int64_t>(1, static_cast<std::int64_t>(n) / t)));
    } else {
      s.batch.push_back(dcp::make_sequence(id, std::max<std::int64_t>(1, static_cast<std::int64_t>(n))));
    }
  }
  return s;
}

std::string violations_text(const std::vector<std::string>& v) {
  std::string out;
  for (const auto& s : v) out += s + "\n";
  return out;
}

// Laws every planner keeps, plus determinism: same input, same plan; order of the batch does
// not matter.
template <class P>
dcp::plan check_laws(const P& planner, const scenario& s, const char* what) {
  const dcp::plan p = planner.plan(s.cost, std::span<const sequence>(s.batch));
  const auto v = dcp::plan_violations(p, s.batch, s.cost);
  EXPECT_TRUE(v.empty()) << what << " on " << s.cost << " with " << s.batch.size() << " sequences:\n"
                         << violations_text(v);
  EXPECT_EQ(p.method, planner.name());
  const dcp::plan again = planner.plan(s.cost, std::span<const sequence>(s.batch));
  EXPECT_EQ(p.hash(), again.hash()) << what;
  EXPECT_EQ(p, again) << what;
  auto reversed = s.batch;
  std::reverse(reversed.begin(), reversed.end());
  EXPECT_EQ(p.hash(), planner.plan(s.cost, std::span<const sequence>(reversed)).hash()) << what << ": order matters";
  for (const auto& st : p.steps)
    EXPECT_EQ(st.checkpointed_blocks, planner.recompute_level.of(s.cost)) << what << ": not the planner's uniform recompute level";
  return p;
}

// Steps of a synchronised static plan: every iteration's steps start together, at most one per
// data-parallel group, all on the fixed sp.
void check_synchronised(const dcp::plan& p, int sp, int gpus) {
  std::map<double, std::set<int>> by_start;
  for (const auto& st : p.steps) {
    EXPECT_EQ(st.sp(), sp);
    EXPECT_TRUE(by_start[st.start_s].insert(st.ranks.first).second) << "two steps of one group in one iteration";
  }
  double previous_end = 0;
  for (const auto& [start, groups] : by_start) {
    EXPECT_LE(static_cast<int>(groups.size()), gpus / sp);
    EXPECT_NEAR(start, previous_end, 1e-9 * std::max(1.0, start)) << "an iteration starts before the last one ends";
    double end = start;
    for (const auto& st : p.steps)
      if (st.start_s == start) end = std::max(end, st.end_s());
    previous_end = end;
  }
}

TEST(Baselines, BucketKeepsThePlanLawsOnRandomBatches) {
  dcp::xoshiro256ss g(101);
  for (int i = 0; i < 800; ++i) {
    const scenario s = random_scenario(g);
    dcp::bucket_planner untuned;  // a planner never tunes itself: dcp::tune does
    untuned.seed = i;
    if (i % 100 == 0) {
      EXPECT_DCP_ERROR((void)untuned.plan(s.cost, std::span<const sequence>(s.batch)), dcp::errc::invalid_argument,
                       "bucket planner: sp = 0 is not tuned", "dcp::tune");
    }
    const auto tuned = dcp::tune(untuned, s.cost, s.batch);
    EXPECT_EQ(tuned.seed, untuned.seed) << "tuning keeps the other knobs";
    const dcp::plan q = check_laws(tuned, s, "bucket (tuned)");
    check_synchronised(q, tuned.sp, s.cost.gpus());
  }
}

TEST(Baselines, PackedKeepsThePlanLawsOnRandomBatches) {
  dcp::xoshiro256ss g(202);
  for (int i = 0; i < 1000; ++i) {
    const scenario s = random_scenario(g);
    const auto tuned = dcp::tune(dcp::packed_planner{}, s.cost, s.batch);
    const dcp::plan p = check_laws(tuned, s, "packed");
    check_synchronised(p, tuned.sp, s.cost.gpus());
    const std::int64_t cap = dcp::static_token_capacity(s.cost, tuned.sp, tuned.recompute_level.of(s.cost));
    for (const auto& st : p.steps) {
      std::int64_t tokens = 0;
      for (const auto& q : st.sequences) tokens += q.tokens;
      EXPECT_LE(tokens, cap);
    }
  }
}

// The ranks a step's members last ran on end exactly when it starts: gang start, no barrier.
void check_gang_starts(const dcp::plan& p, const char* what) {
  std::vector<double> free(static_cast<std::size_t>(p.gpus), 0.0);
  std::vector<const dcp::plan_step*> order;
  for (const auto& st : p.steps) order.push_back(&st);
  std::stable_sort(order.begin(), order.end(), [](const auto* a, const auto* b) { return a->start_s < b->start_s; });
  for (const auto* st : order) {
    double ready = 0;
    for (int r = st->ranks.first; r < st->ranks.end(); ++r) ready = std::max(ready, free[static_cast<std::size_t>(r)]);
    EXPECT_NEAR(st->start_s, ready, 1e-9 * std::max(1.0, ready)) << what << ": a step waits past its members";
    for (int r = st->ranks.first; r < st->ranks.end(); ++r) free[static_cast<std::size_t>(r)] = st->end_s();
  }
}

TEST(Baselines, DynamicCpKeepsThePlanLawsOnRandomBatches) {
  const std::uint64_t seed = 303;
  dcp::xoshiro256ss g(seed);
  for (int i = 0; i < 1000; ++i) {
    SCOPED_TRACE("seed " + std::to_string(seed) + ", scenario " + std::to_string(i));
    const scenario s = random_scenario(g);
    dcp::dynamic_cp_planner untuned;  // a planner never tunes itself: dcp::tune does
    auto sps = dcp::legal_sp_sizes(s.cost);
    std::erase_if(sps, [](int sp) { return (sp & (sp - 1)) != 0; });  // Megatron's CP sizes
    untuned.min_cp_size = dcp::uniform_below(g, 3) == 0 ? sps[dcp::uniform_below(g, sps.size())] : 1;
    untuned.pad_sequences = dcp::uniform_below(g, 2) == 0;
    if (i % 100 == 0) {
      EXPECT_DCP_ERROR((void)untuned.plan(s.cost, std::span<const sequence>(s.batch)), dcp::errc::invalid_argument,
                       "dynamic_cp planner: max_tokens_per_rank = 0 is not tuned", "dcp::tune");
    }
    const auto tuned = dcp::tune(untuned, s.cost, s.batch);
    ASSERT_GT(tuned.max_tokens_per_rank, 0);
    EXPECT_EQ(tuned.min_cp_size, untuned.min_cp_size);
    EXPECT_EQ(tuned.pad_sequences, untuned.pad_sequences);
    const dcp::plan q = check_laws(tuned, s, "dynamic_cp (tuned)");
    check_gang_starts(q, "dynamic_cp");
    for (const auto& st : q.steps) {
      EXPECT_EQ(st.round, 0) << "one plan round: no barrier between micro-batches";
      double per_rank = 0;
      for (const auto& r : st.sequences) {
        const auto n = tuned.scheduled_tokens(r.tokens, s.cost.gpus());
        EXPECT_GE(st.sp(), tuned.cp_size_of(n, tuned.max_tokens_per_rank)) << "sequence " << r.id << " below its CP size";
        EXPECT_GE(st.sp(), untuned.min_cp_size);
        if (untuned.pad_sequences) {
          EXPECT_EQ(n % (2 * s.cost.gpus()), 0);
        }
        per_rank += static_cast<double>(n) / st.sp();
      }
      // THD packing stays within the per-rank limit (a lone sequence within it by its CP size).
      EXPECT_LE(per_rank, static_cast<double>(tuned.max_tokens_per_rank) * (1 + 1e-12));
    }
  }
}

TEST(Baselines, DynamicCpFollowsTheMegatronGroupSearch) {
  // 4 GPUs, 1000 tokens per rank. Micro-batch 1 opens with A (2000 tokens) on CP 2, cap 2.1e6;
  // B and C (1000) take one free rank each (packing into A would pass the limit); D (500) finds
  // no room and opens micro-batch 2 alone, where it is doubled until it spans all 4 GPUs.
  const auto cost = dcp::make_analytic_cost(dcp::models::llama3_8b(), dcp::devices::h200_analytic(), 4);
  dcp::dynamic_cp_planner p;
  p.max_tokens_per_rank = 1000;
  const std::vector<sequence> batch{dcp::make_sequence(4, 500), dcp::make_sequence(2, 1000), dcp::make_sequence(1, 2000),
                                    dcp::make_sequence(3, 1000)};
  const dcp::plan plan = p.plan(cost, std::span<const sequence>(batch));
  ASSERT_TRUE(dcp::plan_violations(plan, batch, cost).empty());
  std::map<std::int64_t, dcp::rank_block> where;
  std::map<std::int64_t, double> start;
  for (const auto& st : plan.steps)
    for (const auto& q : st.sequences) where[q.id] = st.ranks, start[q.id] = st.start_s;
  EXPECT_EQ(where.at(1), (dcp::rank_block{0, 2}));
  EXPECT_EQ(where.at(2), (dcp::rank_block{2, 1}));
  EXPECT_EQ(where.at(3), (dcp::rank_block{3, 1}));
  EXPECT_EQ(where.at(4), (dcp::rank_block{0, 4}));
  ASSERT_EQ(plan.steps.size(), 4u);
  EXPECT_EQ(start.at(1), 0.0);
  EXPECT_EQ(start.at(2), 0.0);
  EXPECT_EQ(start.at(4), std::max({plan.steps[0].end_s(), plan.steps[1].end_s(), plan.steps[2].end_s()}));
  // With 1500 tokens per rank D fits beside B (THD packing, 1500 tokens): one micro-batch.
  p.max_tokens_per_rank = 1500;
  const dcp::plan wider = p.plan(cost, std::span<const sequence>(batch));
  ASSERT_EQ(wider.steps.size(), 3u);
  for (const auto& st : wider.steps) {
    EXPECT_EQ(st.start_s, 0.0);
    if (st.sequences.size() == 2) {
      EXPECT_EQ(st.ranks, (dcp::rank_block{2, 1}));
    }
  }
  // min_cp_size lifts every CP size.
  p.min_cp_size = 2;
  for (const auto& st : p.plan(cost, std::span<const sequence>(batch)).steps) EXPECT_GE(st.sp(), 2);
}

TEST(Baselines, DynamicCpPaddingSteersTheScheduleOnly) {
  const auto cost = dcp::make_analytic_cost(dcp::models::llama3_8b(), dcp::devices::h200_analytic(), 2);
  dcp::dynamic_cp_planner p;
  p.max_tokens_per_rank = 998;
  EXPECT_EQ(p.scheduled_tokens(997, 2), 997);
  const std::vector<sequence> batch{dcp::make_sequence(1, 997), dcp::make_sequence(2, 997)};
  auto sp_of = [&](const dcp::plan& plan, std::int64_t id) {
    for (const auto& st : plan.steps)
      for (const auto& q : st.sequences)
        if (q.id == id) return st.sp();
    return 0;
  };
  const dcp::plan plain = p.plan(cost, std::span<const sequence>(batch));  // one GPU each
  p.pad_sequences = true;  // 997 -> 1000 (a multiple of 2 x 2 GPUs), over the limit: CP 2 each
  EXPECT_EQ(p.scheduled_tokens(997, 2), 1000);
  EXPECT_EQ(p.scheduled_tokens(1, 2), 4);
  EXPECT_EQ(p.scheduled_tokens(8, 2), 8);
  const dcp::plan padded = p.plan(cost, std::span<const sequence>(batch));
  EXPECT_TRUE(dcp::plan_violations(padded, batch, cost).empty());
  for (std::int64_t id : {1, 2}) {
    EXPECT_EQ(sp_of(plain, id), 1);
    EXPECT_EQ(sp_of(padded, id), 2) << "the padded length needs twice the CP size";
  }
  EXPECT_EQ(plain.steps.size(), 2u);
  EXPECT_EQ(padded.steps.size(), 2u);  // two micro-batches: 500 + 500 padded tokens per rank pass 998
  for (const auto& st : padded.steps)  // the plan still carries (and is priced on) the real tokens
    for (const auto& q : st.sequences) EXPECT_EQ(q.tokens, 997);
  EXPECT_FALSE(dcp::dynamic_cp_planner{}.pad_sequences) << "padding is off by default";
}

TEST(Baselines, DynamicCpTuningIsDeterministicAndOrderIndependent) {
  const auto cost = dcp::make_analytic_cost(dcp::models::cogvideox_5b(), dcp::devices::h200_analytic(), 16);
  auto data = dcp::workloads::make("cogvideox-zipf10", 5);
  data.resize(2500);
  const auto tuned = dcp::tune(dcp::dynamic_cp_planner{}, cost, data);
  EXPECT_EQ(tuned, dcp::tune(dcp::dynamic_cp_planner{}, cost, data));
  auto shuffled = data;
  dcp::xoshiro256ss g(9);
  dcp::fisher_yates(std::span<sequence>(shuffled), g);
  EXPECT_EQ(tuned.max_tokens_per_rank, dcp::tune(dcp::dynamic_cp_planner{}, cost, shuffled).max_tokens_per_rank);
  const int k = tuned.recompute_level.of(cost);
  const auto candidates = dcp::dynamic_cp_limit_candidates(cost, k);
  ASSERT_EQ(candidates.size(), dcp::fill_candidates.size());
  EXPECT_NE(std::find(candidates.begin(), candidates.end(), tuned.max_tokens_per_rank), candidates.end());
  // The chosen pair is the fastest candidate over the tuning epoch, every block checkpointed
  // among them.
  const auto batches = dcp::tuning_batches(cost, std::span<const sequence>(data), 0, 0);
  auto epoch_seconds = [&](const dcp::dynamic_cp_planner& p) {
    double t = 0;
    for (const auto& b : batches) t += p.plan(cost, std::span<const sequence>(b)).makespan_s;
    return t;
  };
  const double best = epoch_seconds(tuned);
  const auto levels = dcp::recompute_candidates(cost, std::span<const sequence>(data), 16, {});
  ASSERT_EQ(levels.front(), cost.blocks()) << "tuning includes the all-checkpointed setting";
  EXPECT_NE(std::find(levels.begin(), levels.end(), k), levels.end());
  for (int level : levels)
    for (auto limit : dcp::dynamic_cp_limit_candidates(cost, level)) {
      auto p = tuned;
      p.recompute_level.blocks = level;
      p.max_tokens_per_rank = limit;
      if (!p.holds_all(dcp::planning_context{cost, dcp::full_recompute{}, dcp::default_groups(cost)},
                       std::span<const sequence>(data)))
        continue;
      EXPECT_LE(best, epoch_seconds(p) * (1 + 1e-12)) << "limit " << limit << " at " << level << " blocks is faster";
    }
  EXPECT_NE(tuned.tuned_setting(cost).find(std::to_string(tuned.max_tokens_per_rank)), std::string::npos);
  EXPECT_NE(tuned.tuned_setting(cost).find("recompute " + std::to_string(k) + "/"), std::string::npos);
}

TEST(Baselines, DynamicCpRejectsBadKnobs) {
  const auto cost =
      dcp::make_analytic_cost(dcp::models::cogvideox_5b(), dcp::devices::h200_analytic(), 32);  // 48 heads: CP <= 16
  const std::vector<sequence> batch{dcp::make_sequence(1, 4096), dcp::make_sequence(2, 300'000)};
  const auto x_max = static_cast<std::int64_t>(cost.max_tokens_per_gpu());
  auto expect_error = [&](const dcp::dynamic_cp_planner& p, dcp::errc code, const std::string& names) {
    EXPECT_DCP_ERROR((void)p.plan(cost, std::span<const sequence>(batch)), code, names) << p;
  };
  dcp::dynamic_cp_planner p;
  p.max_tokens_per_rank = -5;
  expect_error(p, dcp::errc::invalid_argument, "max_tokens_per_rank = -5");
  p.max_tokens_per_rank = x_max + 1;
  expect_error(p, dcp::errc::invalid_argument, std::to_string(x_max));
  p.max_tokens_per_rank = 0;
  for (int bad : {0, 3, 32, -2}) {
    p.min_cp_size = bad;
    expect_error(p, dcp::errc::invalid_argument, "min_cp_size = " + std::to_string(bad));
  }
  // A limit under which a sequence needs a CP group wider than any legal one: an error naming
  // it, or skipped.
  p.min_cp_size = 1;
  p.max_tokens_per_rank = 10'000;
  expect_error(p, dcp::errc::infeasible, "sequence 2 of 300226 tokens needs CP size 32");
  p.on_infeasible = dcp::infeasible_policy::skip;
  const auto plan = p.plan(cost, std::span<const sequence>(batch));
  ASSERT_EQ(plan.skipped.size(), 1u);
  EXPECT_EQ(plan.skipped.front().id, 2);
  EXPECT_TRUE(dcp::plan_violations(plan, batch, cost).empty());
}

TEST(Baselines, LossWeightsFollowTheNormalisation) {
  dcp::xoshiro256ss g(404);
  const scenario s = random_scenario(g);
  dcp::packed_planner packed;
  packed.loss = dcp::loss_normalization::sample_mean;
  dcp::dynamic_cp_planner dyn;
  dyn.loss = dcp::loss_normalization::sample_mean;
  const std::span<const sequence> batch(s.batch);
  for (const auto& p : {dcp::tune(packed, s.cost, batch).plan(s.cost, batch), dcp::tune(dyn, s.cost, batch).plan(s.cost, batch)})
    for (const auto& st : p.steps)
      for (const auto& q : st.sequences) EXPECT_DOUBLE_EQ(q.loss_weight, 1.0 / static_cast<double>(s.batch.size()));
}

TEST(Baselines, TuningPicksTheFastestFeasibleSp) {
  const auto cost = dcp::make_analytic_cost(dcp::models::cogvideox_5b(), dcp::devices::h200_analytic(), 32);
  auto data = dcp::workloads::make("cogvideox-zipf10", 3);
  data.resize(3000);
  const auto batches = dcp::epoch_batches(cost, data, 0, 0);
  const auto candidates = dcp::fixed_sp_candidates(cost, data);
  ASSERT_FALSE(candidates.empty());

  const auto bucket = dcp::tune(dcp::bucket_planner{}, cost, data);
  const auto packed = dcp::tune(dcp::packed_planner{}, cost, data);
  for (const auto* r : {&bucket.recompute_level, &packed.recompute_level}) EXPECT_TRUE(r->tune) << "tuning keeps the knob";
  for (auto [sp, k] : {std::pair{bucket.sp, bucket.recompute_level.of(cost)}, std::pair{packed.sp, packed.recompute_level.of(cost)}}) {
    EXPECT_NE(std::find(candidates.begin(), candidates.end(), sp), candidates.end());
    for (const auto& s : data) EXPECT_TRUE(dcp::fits_static(cost, s, sp, k));
  }
  // The chosen (sp, k, fill) is the fastest of the candidates over the epoch; the levels tried
  // include every block checkpointed (the old setting) and the least that fits.
  auto epoch_seconds = [&](const auto& planner) {
    double t = 0;
    for (const auto& b : batches) t += planner.plan(cost, std::span<const sequence>(b)).makespan_s;
    return t;
  };
  for (int sp : candidates) {
    const auto levels = dcp::recompute_candidates(cost, std::span<const sequence>(data), sp, {});
    ASSERT_FALSE(levels.empty());
    EXPECT_EQ(levels.front(), cost.blocks());
    EXPECT_EQ(levels.back(), dcp::least_uniform_recompute(cost, std::span<const sequence>(data), sp));
    for (int k : levels)
      for (double fill : dcp::fill_candidates) {
        auto b = bucket;
        b.sp = sp;
        b.fill = fill;
        b.recompute_level.blocks = k;
        b.median_bucket_time_s = b.median_time(cost, data, sp);
        EXPECT_LE(epoch_seconds(bucket), epoch_seconds(b) * (1 + 1e-12))
            << "bucket sp " << sp << " k " << k << " fill " << fill << " is faster";
        auto p = packed;
        p.sp = sp;
        p.fill = fill;
        p.recompute_level.blocks = k;
        EXPECT_LE(epoch_seconds(packed), epoch_seconds(p) * (1 + 1e-12))
            << "packed sp " << sp << " k " << k << " fill " << fill << " is faster";
      }
  }
  EXPECT_EQ(bucket.keys, dcp::bucket_keys::shape);  // video data: one bucket per shape
  EXPECT_GT(bucket.median_bucket_time_s, 0);
}

TEST(Baselines, TuningRespectsTheLongestSequence) {
  // llama3-8b on 32 H200 holds ~231k tokens per GPU: 1M tokens need sp >= 8.
  const auto cost = dcp::make_analytic_cost(dcp::models::llama3_8b(), dcp::devices::h200_analytic(), 32);
  std::vector<sequence> data;
  for (int i = 0; i < 200; ++i) data.push_back(dcp::make_sequence(i, 512 + 97 * i));
  data.push_back(dcp::make_sequence(1000, 1'000'000));
  const auto candidates = dcp::fixed_sp_candidates(cost, data);
  EXPECT_EQ(candidates.front(), 8);
  const auto bucket = dcp::tune(dcp::bucket_planner{}, cost, data);
  const auto packed = dcp::tune(dcp::packed_planner{}, cost, data);
  EXPECT_GE(bucket.sp, 8);
  EXPECT_GE(packed.sp, 8);
  EXPECT_EQ(bucket.keys, dcp::bucket_keys::tokens);  // 1D text: geometric token buckets
  const auto dynamic = dcp::tune(dcp::dynamic_cp_planner{}, cost, data);  // 1M tokens: a CP group of 8 at least
  EXPECT_GE(dynamic.cp_size_of(1'000'000, dynamic.max_tokens_per_rank), 8);
  EXPECT_LE(dynamic.cp_size_of(1'000'000, dynamic.max_tokens_per_rank), 32);
  // A planner whose sp cannot hold the long sequence (tuned on data without it): a clear
  // error, or skipped.
  dcp::packed_planner small;
  small.sp = 2;
  EXPECT_THROW((void)small.plan(cost, std::span<const sequence>(data)), dcp::error);
  small.on_infeasible = dcp::infeasible_policy::skip;
  const auto p = small.plan(cost, std::span<const sequence>(data));
  ASSERT_EQ(p.skipped.size(), 1u);
  EXPECT_EQ(p.skipped.front().id, 1000);
  EXPECT_TRUE(dcp::plan_violations(p, data, cost).empty());
}

TEST(Baselines, BucketMicroBatchesHoldOneShapeWithinTheScaledBatchSize) {
  const auto cost = dcp::make_analytic_cost(dcp::models::stdit3_xl(), dcp::devices::h200_analytic(), 16);
  auto data = dcp::workloads::make("opensora-zipf10", 1);
  data.resize(4000);
  const auto bucket = dcp::tune(dcp::bucket_planner{}, cost, data);
  ASSERT_EQ(bucket.keys, dcp::bucket_keys::shape);
  const auto info = bucket.buckets(cost, data, bucket.sp);
  std::map<std::pair<std::int64_t, std::int64_t>, std::int64_t> scaled;
  for (const auto& b : info) {
    EXPECT_GE(b.max_batch, 1);
    const auto s = dcp::bucket_planner::scaled_batch(b, bucket.median_bucket_time_s);
    EXPECT_GE(s, 1);
    EXPECT_LE(s, b.max_batch);
    if (b.time_s > bucket.median_bucket_time_s && b.max_batch > 1) {
      EXPECT_LE(s, std::max<std::int64_t>(1, static_cast<std::int64_t>(b.max_batch * bucket.median_bucket_time_s / b.time_s)));
    }
    scaled[{b.key_frames, b.key_spatial}] = s;
  }
  const auto batches = dcp::epoch_batches(cost, data, 0, 0);
  const auto p = bucket.plan(cost, std::span<const sequence>(batches.front()));
  for (const auto& st : p.steps) {
    const auto shape = std::make_pair(st.sequences.front().frames, st.sequences.front().spatial);
    for (const auto& q : st.sequences) EXPECT_EQ(std::make_pair(q.frames, q.spatial), shape);
    EXPECT_LE(static_cast<std::int64_t>(st.sequences.size()), scaled.at(shape));
  }
  // Different seeds shuffle the micro-batches differently; the same seed does not.
  auto other = bucket;
  other.seed = 7;
  EXPECT_NE(p.hash(), other.plan(cost, std::span<const sequence>(batches.front())).hash());
}

TEST(Baselines, InfeasibleSequencesAreErrorsOrSkipped) {
  const auto cost = dcp::make_analytic_cost(dcp::models::cogvideox_5b(), dcp::devices::h200_analytic(), 8);
  const std::vector<sequence> batch{dcp::make_sequence(1, 4096), dcp::make_sequence(2, 50'000'000),
                                    dcp::make_sequence(3, 9000)};
  // Tuned on the batch (a tuner meets the data first), and planned with a knob set.
  auto expect_error = [&](const auto& planner) {
    EXPECT_DCP_ERROR((void)dcp::tune(planner, cost, std::span<const sequence>(batch)), dcp::errc::infeasible, "sequence 2 ")
        << planner.name();
    auto set = planner;
    if constexpr (requires { set.sp; }) set.sp = 1;
    else set.max_tokens_per_rank = 1000;
    EXPECT_DCP_ERROR((void)set.plan(cost, std::span<const sequence>(batch)), dcp::errc::infeasible, "sequence 2 ")
        << planner.name();
  };
  expect_error(dcp::bucket_planner{});
  expect_error(dcp::packed_planner{});
  expect_error(dcp::dynamic_cp_planner{});
  auto check_skip = [&](auto planner) {
    planner.on_infeasible = dcp::infeasible_policy::skip;
    const auto p = dcp::tune(planner, cost, std::span<const sequence>(batch)).plan(cost, std::span<const sequence>(batch));
    ASSERT_EQ(p.skipped.size(), 1u) << planner.name();
    EXPECT_EQ(p.skipped.front().id, 2);
    EXPECT_TRUE(dcp::plan_violations(p, batch, cost).empty()) << planner.name();
  };
  check_skip(dcp::bucket_planner{});
  check_skip(dcp::packed_planner{});
  check_skip(dcp::dynamic_cp_planner{});
  // Everything skipped: an empty plan that still accounts for every sequence.
  const std::vector<sequence> hopeless{dcp::make_sequence(5, 60'000'000)};
  dcp::bucket_planner b;
  b.on_infeasible = dcp::infeasible_policy::skip;
  EXPECT_DCP_ERROR((void)dcp::tune(b, cost, std::span<const sequence>(hopeless)), dcp::errc::infeasible,
                   "nothing to tune on");
  b.sp = 1;
  const auto p = b.plan(cost, std::span<const sequence>(hopeless));
  EXPECT_TRUE(p.steps.empty());
  EXPECT_EQ(p.skipped.size(), 1u);
  EXPECT_TRUE(dcp::plan_violations(p, hopeless, cost).empty());
}

TEST(Baselines, BadBatchesAreClearErrors) {
  const auto cost = dcp::make_analytic_cost(dcp::models::cogvideox_5b(), dcp::devices::h200_analytic(), 8);
  const std::vector<sequence> empty;
  const std::vector<sequence> twice{dcp::make_sequence(1, 100), dcp::make_sequence(1, 200)};
  auto expect_invalid = [&](const auto& planner, const std::vector<sequence>& batch) {
    EXPECT_DCP_ERROR((void)planner.plan(cost, std::span<const sequence>(batch)), dcp::errc::invalid_argument)
        << planner.name() << " accepted a bad batch";
  };
  for (const auto* batch : {&empty, &twice}) {  // tuned knobs: the batch, not the knob, is refused
    expect_invalid(dcp::bucket_planner{.sp = 1}, *batch);
    expect_invalid(dcp::packed_planner{.sp = 1}, *batch);
    expect_invalid(dcp::dynamic_cp_planner{.max_tokens_per_rank = 1000}, *batch);
  }
  dcp::packed_planner bad;
  bad.sp = 3;  // not a power of two
  expect_invalid(bad, {dcp::make_sequence(1, 100)});
}

TEST(Baselines, PlannersArePrintableRegularValues) {
  static_assert(dcp::planner<dcp::bucket_planner>);
  static_assert(dcp::planner<dcp::packed_planner>);
  static_assert(dcp::planner<dcp::dynamic_cp_planner>);
  dcp::bucket_planner a, b;
  EXPECT_EQ(a, b);
  b.sp = 4;
  EXPECT_NE(a, b);
  std::ostringstream os;
  os << b << dcp::packed_planner{} << dcp::dynamic_cp_planner{};
  EXPECT_NE(os.str().find("bucket_planner{sp=4"), std::string::npos);
  EXPECT_NE(os.str().find("dynamic_cp_planner{max_tokens_per_rank=0, recompute_level=uniform_recompute{blocks=-1, "
                          "tune=true}, min_cp_size=1, pad_sequences=false"),
            std::string::npos);
  EXPECT_NE(os.str().find("packed_planner{sp=0, fill=1, recompute_level=uniform_recompute{blocks=-1, tune=true}"),
            std::string::npos);
  dcp::dynamic_cp_planner d;
  d.max_tokens_per_rank = 1000;
  EXPECT_NE(d, dcp::dynamic_cp_planner{});
  dcp::packed_planner q;
  q.recompute_level.blocks = 3;
  EXPECT_NE(q, dcp::packed_planner{});
  EXPECT_EQ(dcp::bucket_planner{}.name(), "bucket");
  EXPECT_EQ(dcp::packed_planner{}.name(), "packed");
  EXPECT_EQ(dcp::dynamic_cp_planner{}.name(), "dynamic_cp");
}

}  // namespace
