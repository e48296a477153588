// dcp_planner: the plan laws over thousands of random batches (both 1D models and the 2D
// model, both devices, 1..1024 GPUs, inter / intra on and off, both loss normalisations),
// determinism, infeasible sequences, and bad input.

#include <dcp/cost/analytic.hpp>
#include <dcp/plan/bucket_planner.hpp>
#include <dcp/plan/check_plan.hpp>
#include <dcp/plan/dcp_planner.hpp>
#include <dcp/plan/dynamic_cp_planner.hpp>
#include <dcp/plan/lower_bounds.hpp>
#include <dcp/plan/packed_planner.hpp>
#include <dcp/plan/sequence_options.hpp>
#include <dcp/recompute/full_recompute.hpp>
#include <dcp/recompute/no_recompute.hpp>
#include <dcp/workload/tuning.hpp>

#include <dcp_test/support.hpp>
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <iostream>
#include <numeric>
#include <sstream>
#include <string>
#include <vector>

namespace {

static_assert(dcp::planner<dcp::dcp_planner>);

// --- random inputs -----------------------------------------------------------------------------------

using dcp_test::rng;

const dcp::transformer_spec& model_at(std::int64_t i) {
  static const dcp::transformer_spec m[] = {dcp::models::cogvideox_5b(), dcp::models::stdit3_xl(),
                                            dcp::models::llama3_8b()};
  return m[i];
}

// 1..8 GPUs, or whole nodes of 8 up to 1024, with the non-powers-of-two 24, 40, 72 drawn often.
int random_gpus(rng& g) {
  switch (g.between(0, 5)) {
    case 0: return static_cast<int>(g.between(1, 8));
    case 1: return std::array{24, 40, 72}[static_cast<std::size_t>(g.between(0, 2))];
    case 2: return 1 << g.between(4, 10);
    default: return 8 * static_cast<int>(g.log_between(1, 128));
  }
}

dcp::analytic_cost random_cost(rng& g) {
  for (;;) {
    const auto& m = model_at(g.between(0, 2));
    const auto d = g.between(0, 1) ? dcp::devices::h200_analytic() : dcp::devices::h100_analytic();
    const int n = random_gpus(g);
    dcp::analytic_cost c{m, d, n};
    if (c.static_memory() < c.capacity()) return dcp::make_analytic_cost(m, d, n);
  }
}

// A sequence the model sees as `tokens` tokens (a T x S shape for the 2D model).
dcp::sequence sequence_of_tokens(rng& g, const dcp::analytic_cost& c, std::int64_t id, std::int64_t tokens) {
  if (c.model.attention == dcp::attention_kind::factorized_2d) {
    const std::int64_t t = std::min<std::int64_t>(g.log_between(1, 408), tokens);
    return dcp::make_sequence(id, t, std::max<std::int64_t>(1, tokens / t));
  }
  return dcp::make_sequence(id, std::max<std::int64_t>(1, tokens - c.model.text_tokens));
}

// Lengths over orders of magnitude, a few near the longest that fits; ids unique and shuffled.
std::vector<dcp::sequence> random_batch(rng& g, const dcp::analytic_cost& c, std::int64_t count) {
  // Longest that fits, as shape tokens; every shipped model's memory depends on tokens only.
  const std::int64_t limit = dcp::largest_feasible_tokens(c);
  std::vector<dcp::sequence> out;
  std::int64_t id = g.between(0, 1000000);
  for (std::int64_t i = 0; i < count; ++i) {
    std::int64_t tokens = 0;
    switch (g.between(0, 9)) {
      case 0: tokens = std::max<std::int64_t>(1, limit - g.between(0, limit / 20)); break;  // near the limit
      case 1: case 2: tokens = g.log_between(1, std::max<std::int64_t>(1, limit)); break;
      default: tokens = g.log_between(64, std::max<std::int64_t>(64, std::min<std::int64_t>(limit, 1 << 17))); break;
    }
    tokens = std::min(tokens, std::max<std::int64_t>(1, limit));
    id += g.between(1, 1000);
    out.push_back(sequence_of_tokens(g, c, id, tokens));
  }
  std::shuffle(out.begin(), out.end(), g);
  return out;
}

std::string describe(const dcp::dcp_planner& p, const dcp::analytic_cost& c, const std::vector<dcp::sequence>& b) {
  std::ostringstream os;
  os << p << " on " << c << " with " << b.size() << " sequences: ";
  for (std::size_t i = 0; i < b.size() && i < 12; ++i) os << b[i].id << ":" << b[i].frames << "x" << b[i].spatial << " ";
  return os.str();
}

// Checks every law of one plan; returns false (after reporting) on the first broken one.
void check_plan_laws(const dcp::dcp_planner& planner, const dcp::analytic_cost& c,
                     const std::vector<dcp::sequence>& batch, const dcp::plan& p) {
  SCOPED_TRACE(describe(planner, c, batch));
  const auto violations = dcp::plan_violations(p, batch, c);
  for (const auto& v : violations) ADD_FAILURE() << v;
  ASSERT_TRUE(violations.empty());
  EXPECT_EQ(p.method, planner.name());
  EXPECT_TRUE(p.skipped.empty());
  EXPECT_GT(p.lower_bound_s, 0);
  EXPECT_NEAR(p.lower_bound_s, dcp::lower_bound(c, batch), 1e-12 * p.lower_bound_s);  // of the whole batch
  EXPECT_GT(p.efficiency(), 0);
  EXPECT_LE(p.efficiency(), 1 + 1e-12);
  EXPECT_EQ(p.gpus, c.gpus());
  EXPECT_EQ(p.gpus_per_node, c.gpus_per_node());
  EXPECT_EQ(p.memory_capacity_bytes, c.capacity());

  double tokens = 0;
  std::size_t count = 0;
  for (const auto& st : p.steps)
    for (const auto& q : st.sequences) tokens += static_cast<double>(q.tokens), ++count;
  EXPECT_EQ(count, batch.size());
  for (std::size_t i = 0; i < p.steps.size(); ++i) {
    const auto& st = p.steps[i];
    if (i > 0) {  // ordered by (start, first rank)
      const auto& prev = p.steps[i - 1];
      EXPECT_TRUE(prev.start_s < st.start_s || (prev.start_s == st.start_s && prev.ranks.first < st.ranks.first))
          << "steps " << i - 1 << " and " << i << " out of order";
    }
    dcp::analytic_load load{};
    for (const auto& q : st.sequences) {
      const double want = planner.loss == dcp::loss_normalization::token_mean ? static_cast<double>(q.tokens) / tokens
                                                                               : 1.0 / static_cast<double>(count);
      EXPECT_NEAR(q.loss_weight, want, 1e-12 * std::max(1.0, want)) << "sequence " << q.id;
      load = load + dcp::analytic_load{1, static_cast<double>(q.tokens), 0};
    }
    // DCP-intra: the fewest checkpointed blocks that fit; without it, every block.
    if (planner.intra) {
      if (st.checkpointed_blocks > 0) {
        EXPECT_GT(c.memory(load, st.sp(), st.checkpointed_blocks - 1), c.capacity())
            << "step " << i << " checkpoints " << st.checkpointed_blocks << " blocks; one fewer fits";
      }
    } else {
      EXPECT_EQ(st.checkpointed_blocks, c.blocks()) << "step " << i;
    }
  }
}

// --- properties over random batches -------------------------------------------------------------------

TEST(DcpPlanner, RandomBatchesKeepEveryLaw) {
  rng g(4242);
  constexpr int trials = 10000;
  const auto started = std::chrono::steady_clock::now();
  int plans = 0, sequences = 0, by_model[3] = {0, 0, 0};
  for (int trial = 0; trial < trials; ++trial) {
    const auto c = random_cost(g);
    // Mostly small batches (cheap, and edge cases live there); one in eight is a full-size
    // global batch of up to 32 sequences per GPU.
    const std::int64_t most = g.between(0, 7) == 0 ? std::min(32 * c.gpus(), 4096) : 96;
    const auto batch = random_batch(g, c, g.log_between(1, most));
    dcp::dcp_planner planner;
    planner.inter = g.between(0, 3) != 0;
    planner.intra = g.between(0, 3) != 0;
    planner.loss = g.between(0, 1) ? dcp::loss_normalization::token_mean : dcp::loss_normalization::sample_mean;
    if (g.between(0, 9) == 0) planner.improve_moves = static_cast<std::size_t>(g.between(0, 2));  // little or no improving
    dcp::plan p;
    // Must catch: no error is expected here, and a failure has to print the random input it came from.
    try {
      p = planner.plan(c, batch);
    } catch (const dcp::error& e) {
      ADD_FAILURE() << describe(planner, c, batch) << " threw: " << e.what();
      continue;
    }
    check_plan_laws(planner, c, batch, p);
    if (HasFailure()) return;  // one broken input, fully described, beats a thousand
    ++plans;
    sequences += static_cast<int>(batch.size());
    ++by_model[c.model.attention == dcp::attention_kind::full ? 0 : c.model.attention == dcp::attention_kind::causal ? 1 : 2];
  }
  EXPECT_EQ(plans, trials);
  for (int m : by_model) EXPECT_GT(m, trials / 5);
  const auto ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - started).count();
  RecordProperty("plans", plans);
  RecordProperty("sequences", sequences);
  std::cout << "[ planned  ] " << plans << " batches, " << sequences << " sequences in " << ms << " ms\n";
}

TEST(DcpPlanner, SameBatchInAnyOrderGivesTheSamePlan) {
  rng g(77);
  for (int trial = 0; trial < 1000; ++trial) {
    const auto c = random_cost(g);
    auto batch = random_batch(g, c, g.log_between(1, 64));
    dcp::dcp_planner planner;
    planner.inter = g.between(0, 1);
    planner.intra = g.between(0, 1);
    const auto p = planner.plan(c, batch);
    std::shuffle(batch.begin(), batch.end(), g);
    const auto q = planner.plan(c, batch);
    EXPECT_EQ(p.hash(), q.hash()) << describe(planner, c, batch);
    EXPECT_TRUE(p == q) << describe(planner, c, batch);
    std::reverse(batch.begin(), batch.end());
    EXPECT_EQ(planner.plan(c, batch).hash(), p.hash()) << describe(planner, c, batch);
  }
}

TEST(DcpPlanner, HashTellsDifferentPlansApart) {
  const auto c = dcp::make_analytic_cost(dcp::models::cogvideox_5b(), dcp::devices::h200_analytic(), 16);
  const std::vector<dcp::sequence> batch{dcp::make_sequence(1, 1000), dcp::make_sequence(2, 40000),
                                         dcp::make_sequence(3, 5000)};
  const auto p = dcp::dcp_planner{}.plan(c, batch);
  auto other = batch;
  other[1].id = 4;  // same shapes, another id
  EXPECT_NE(dcp::dcp_planner{}.plan(c, other).hash(), p.hash());
  dcp::dcp_planner sample_mean;
  sample_mean.loss = dcp::loss_normalization::sample_mean;
  EXPECT_NE(sample_mean.plan(c, batch).hash(), p.hash());  // weights decide execution too
  dcp::dcp_planner no_intra;
  no_intra.intra = false;
  EXPECT_NE(no_intra.plan(c, batch).hash(), p.hash());
}

TEST(DcpPlanner, OtherRecomputePoliciesKeepTheLaws) {
  rng g(99);
  for (int trial = 0; trial < 200; ++trial) {
    const auto c = random_cost(g);
    const auto batch = random_batch(g, c, g.log_between(1, 32));
    const dcp::dcp_planner planner;
    const auto p = planner.plan(c, batch, dcp::full_recompute{});
    const auto v = dcp::plan_violations(p, batch, c);
    ASSERT_TRUE(v.empty()) << describe(planner, c, batch) << ": " << v.front();
    for (const auto& st : p.steps) EXPECT_EQ(st.checkpointed_blocks, c.blocks());
  }
}

TEST(DcpPlanner, OneGpuAndOneSequence) {
  const auto c = dcp::make_analytic_cost(dcp::models::llama3_8b(), dcp::devices::h200_analytic(), 1);
  const std::vector<dcp::sequence> batch{dcp::make_sequence(5, 2000)};
  const auto p = dcp::dcp_planner{}.plan(c, batch);
  ASSERT_EQ(p.steps.size(), 1u);
  EXPECT_EQ(p.steps[0].ranks, (dcp::rank_block{0, 1}));
  EXPECT_EQ(p.steps[0].sequences[0].loss_weight, 1.0);
  EXPECT_DOUBLE_EQ(p.makespan_s, p.steps[0].time_s);
  // One sequence on one GPU: the plan is the lower bound.
  EXPECT_NEAR(p.efficiency(), 1.0, 1e-12);
  EXPECT_TRUE(dcp::plan_violations(p, batch, c).empty());
}

// plan_violations checks each loss weight, not only their sum: moving weight between two
// sequences of different lengths keeps the sum at 1 and must still be reported.
TEST(PlanViolations, EveryLossWeightFollowsTheNormalisation) {
  const auto c = dcp::make_analytic_cost(dcp::models::llama3_8b(), dcp::devices::h200_analytic(), 8);
  const std::vector<dcp::sequence> batch{dcp::make_sequence(1, 1000), dcp::make_sequence(2, 9000),
                                         dcp::make_sequence(3, 30000)};
  for (auto norm : {dcp::loss_normalization::token_mean, dcp::loss_normalization::sample_mean}) {
    dcp::dcp_planner planner;
    planner.loss = norm;
    const auto p = planner.plan(c, batch);
    ASSERT_TRUE(dcp::plan_violations(p, batch, c).empty()) << norm;
    std::vector<double*> w;
    auto q = p;
    for (auto& st : q.steps)
      for (auto& s : st.sequences) w.push_back(&s.loss_weight);
    ASSERT_EQ(w.size(), 3u);
    // token_mean: swap two unequal weights; sample_mean: move a third of one weight to another.
    if (norm == dcp::loss_normalization::token_mean) std::swap(*w[0], *w[2]);
    else *w[0] -= 1.0 / 9, *w[1] += 1.0 / 9;
    const auto v = dcp::plan_violations(q, batch, c);
    ASSERT_FALSE(v.empty()) << norm << ": a sum-preserving weight error passed";
    EXPECT_NE(v.front().find("neither normalisation"), std::string::npos) << v.front();
  }
}

// --- infeasible sequences -------------------------------------------------------------------------------

// llama3-8b on 8 H200: sp <= 8, so a sequence of 10M tokens fits nowhere.
TEST(DcpPlanner, InfeasibleSequenceIsAnErrorNamingIdAndLargestLength) {
  const auto c = dcp::make_analytic_cost(dcp::models::llama3_8b(), dcp::devices::h200_analytic(), 8);
  const std::vector<dcp::sequence> batch{dcp::make_sequence(1, 4096), dcp::make_sequence(31337, 10'000'000),
                                         dcp::make_sequence(3, 100)};
  EXPECT_DCP_ERROR((void)dcp::dcp_planner{}.plan(c, batch), dcp::errc::infeasible, "sequence 31337",
                   "10000000 tokens", "largest length", std::to_string(dcp::largest_feasible_tokens(c)));
}

TEST(DcpPlanner, InfeasibleSequenceIsSkippedOnRequestAndTheRestPlanned) {
  rng g(5);
  for (int trial = 0; trial < 100; ++trial) {
    const auto c = random_cost(g);
    auto batch = random_batch(g, c, g.log_between(1, 40));
    const std::int64_t too_long = dcp::largest_feasible_tokens(c) * 2 + 1000;
    const std::int64_t bad_id = -1 - trial;
    batch.insert(batch.begin() + static_cast<std::ptrdiff_t>(g.between(0, static_cast<std::int64_t>(batch.size()))),
                 dcp::make_sequence(bad_id, 1, too_long));
    dcp::dcp_planner planner;
    EXPECT_THROW((void)planner.plan(c, batch), dcp::error);
    planner.on_infeasible = dcp::infeasible_policy::skip;
    planner.inter = g.between(0, 1);
    const auto p = planner.plan(c, batch);
    ASSERT_EQ(p.skipped.size(), 1u) << describe(planner, c, batch);
    EXPECT_EQ(p.skipped[0].id, bad_id);
    EXPECT_EQ(p.skipped[0].tokens, c.tokens_of(dcp::make_sequence(bad_id, 1, too_long)));
    EXPECT_NE(p.skipped[0].reason.find("largest length"), std::string::npos) << p.skipped[0].reason;
    const auto v = dcp::plan_violations(p, batch, c);  // the rest exactly once, weights sum to 1
    ASSERT_TRUE(v.empty()) << describe(planner, c, batch) << ": " << v.front();
    std::size_t planned = 0;
    for (const auto& st : p.steps) planned += st.sequences.size();
    EXPECT_EQ(planned, batch.size() - 1);
  }
}

TEST(DcpPlanner, OnlyInfeasibleSequencesUnderSkipGiveAnEmptyPlan) {
  const auto c = dcp::make_analytic_cost(dcp::models::llama3_8b(), dcp::devices::h200_analytic(), 8);
  const std::vector<dcp::sequence> batch{dcp::make_sequence(7, 50'000'000)};
  dcp::dcp_planner planner;
  planner.on_infeasible = dcp::infeasible_policy::skip;
  const auto p = planner.plan(c, batch);
  EXPECT_TRUE(p.steps.empty());
  ASSERT_EQ(p.skipped.size(), 1u);
  EXPECT_EQ(p.skipped[0].id, 7);
  EXPECT_TRUE(dcp::plan_violations(p, batch, c).empty());
}

// The reported largest length is in the units of the message: tokens the model sees (text
// tokens included), as largest_feasible_tokens documents. A sequence of exactly that many
// tokens fits; one token more does not.
TEST(DcpPlanner, LargestFeasibleLengthIsExact) {
  for (const auto& m : {dcp::models::cogvideox_5b(), dcp::models::stdit3_xl(), dcp::models::llama3_8b()}) {
    for (int n : {8, 16, 24, 64}) {
      const auto c = dcp::make_analytic_cost(m, dcp::devices::h200_analytic(), n);
      const std::int64_t largest = dcp::largest_feasible_tokens(c);
      ASSERT_GT(largest, m.text_tokens) << c;
      const auto fits = dcp::make_sequence(1, largest - m.text_tokens);
      const auto over = dcp::make_sequence(1, largest + 1 - m.text_tokens);
      ASSERT_EQ(c.tokens_of(fits), largest);
      const std::vector<dcp::sequence> ok{fits}, bad{over};
      EXPECT_NO_THROW((void)dcp::dcp_planner{}.plan(c, ok)) << c;
      EXPECT_DCP_ERROR((void)dcp::dcp_planner{}.plan(c, bad), dcp::errc::infeasible)
          << c << ": a sequence of " << largest + 1 << " tokens, one more than the reported largest length";
    }
  }
}

// --- bad input -------------------------------------------------------------------------------------------

TEST(DcpPlanner, EmptyBatchIsAnError) {
  const auto c = dcp::make_analytic_cost(dcp::models::cogvideox_5b(), dcp::devices::h200_analytic(), 8);
  EXPECT_DCP_ERROR((void)dcp::dcp_planner{}.plan(c, std::vector<dcp::sequence>{}), dcp::errc::invalid_argument,
                   "empty batch");
}

TEST(DcpPlanner, DuplicateIdsAreAnErrorNamingTheId) {
  const auto c = dcp::make_analytic_cost(dcp::models::cogvideox_5b(), dcp::devices::h200_analytic(), 8);
  const std::vector<dcp::sequence> batch{dcp::make_sequence(4, 100), dcp::make_sequence(9, 200),
                                         dcp::make_sequence(4, 300)};
  for (auto policy : {dcp::infeasible_policy::error, dcp::infeasible_policy::skip}) {
    dcp::dcp_planner planner;
    planner.on_infeasible = policy;
    EXPECT_DCP_ERROR((void)planner.plan(c, batch), dcp::errc::invalid_argument, "sequence id 4 appears twice");
  }
}

TEST(DcpPlanner, BadShapesAreAnErrorEvenUnderSkip) {
  const auto c = dcp::make_analytic_cost(dcp::models::stdit3_xl(), dcp::devices::h200_analytic(), 8);
  const std::vector<dcp::sequence> batch{dcp::make_sequence(1, 10, 100), dcp::make_sequence(2, 0, 100)};
  dcp::dcp_planner planner;
  planner.on_infeasible = dcp::infeasible_policy::skip;  // skipping is for sequences too long, not malformed
  EXPECT_DCP_ERROR((void)planner.plan(c, batch), dcp::errc::invalid_argument, "sequence 2");
}

// A cost model built without make_analytic_cost is not validated; planning on it must still
// reject zero GPUs and partial nodes as invalid arguments naming the value, not as
// "sequence fits no configuration on 0 GPUs".
TEST(DcpPlanner, InvalidGpuCountsAreInvalidArguments) {
  const std::vector<dcp::sequence> batch{dcp::make_sequence(1, 1000), dcp::make_sequence(2, 5000)};
  for (int n : {0, -8, 12}) {
    const dcp::analytic_cost c{dcp::models::cogvideox_5b(), dcp::devices::h200_analytic(), n};
    EXPECT_DCP_ERROR((void)dcp::dcp_planner{}.plan(c, batch), dcp::errc::invalid_argument,
                     "gpus = " + std::to_string(n));
  }
}

// --- the planner value ------------------------------------------------------------------------------------

TEST(DcpPlanner, RegularValueWithNamesForTheAblations) {
  dcp::dcp_planner a, b;
  EXPECT_EQ(a, b);
  b.inter = false;
  EXPECT_NE(a, b);
  EXPECT_EQ(a.name(), "dcp");
  EXPECT_EQ(b.name(), "dcp-no-inter");
  b.inter = true;
  b.intra = false;
  EXPECT_EQ(b.name(), "dcp-no-intra");
  std::ostringstream os;
  os << a;
  EXPECT_NE(os.str().find("inter=1"), std::string::npos) << os.str();
  EXPECT_NE(os.str().find("token_mean"), std::string::npos) << os.str();
}

}  // namespace

// Skipped sequences and the lower bound must not depend on the order a rank received the batch
// in, for every planner: ranks compare plan hashes.
TEST(Planners, SkippedSequencesAndBoundsAreOrderIndependent) {
  const auto c = dcp::make_analytic_cost(dcp::models::cogvideox_5b(), dcp::devices::h200_analytic(), 8);
  std::vector<dcp::sequence> batch;
  for (std::int64_t i = 0; i < 40; ++i)
    batch.push_back(i % 7 == 3 ? dcp::make_sequence(i, 90'000'000) : dcp::make_sequence(i, 300 + 977 * i));
  std::vector<dcp::sequence> reversed(batch.rbegin(), batch.rend());
  const auto skip = dcp::infeasible_policy::skip;
  auto same = [&](const auto& planner) {
    const dcp::plan a = planner.plan(c, batch), b = planner.plan(c, reversed);
    EXPECT_EQ(a.hash(), b.hash()) << planner.name();
    EXPECT_EQ(a.lower_bound_s, b.lower_bound_s) << planner.name();
    EXPECT_EQ(a.skipped, b.skipped) << planner.name();
    EXPECT_EQ(a.skipped.size(), 6u) << planner.name();
  };
  dcp::dcp_planner dcp_skip;
  dcp_skip.on_infeasible = skip;
  same(dcp_skip);
  same(dcp::tune(dcp::dynamic_cp_planner{.on_infeasible = skip}, c, batch));
  dcp::packed_planner packed;
  packed.sp = 8;
  packed.on_infeasible = skip;
  same(packed);
  dcp::bucket_planner bucket;
  bucket.sp = 8;
  bucket.on_infeasible = skip;
  same(bucket);
}
