// ZeRO-3 runs coupled plans exactly (label `collectives`): on local ranks (threads), the CPU
// trainer with every parameter unit sharded over the world (examples/cpu_train/zero3.hpp) trains
// under dcp, bucket and packed plans of a zero3 layout, whose micro-steps run in lockstep with
// padding passes; the parameters after one optimizer step and every step's loss equal
// single-process full-batch training (double, 1e-10 relative). A plan whose units disagree on
// their micro-step counts is refused on every rank before any gather, never a hang.
#include <dcp_test/support.hpp>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <span>
#include <string>
#include <vector>

#include "../../examples/cpu_train/zero3.hpp"
#include "harness.hpp"

namespace {

using namespace equivalence;

constexpr double tolerance = 1e-10;

dcp::analytic_cost zero3_cost(const setup& s, int world) {
  const dcp::device_spec device = s.options(world).device;
  return dcp::make_analytic_cost(s.spec(), device,
                                 dcp::parallel_layout{.gpus = world, .gpus_per_node = device.gpus_per_node,
                                                      .sharding = dcp::sharding_kind::zero3});
}

// What the plans of a ZeRO-3 run held.
struct zero3_coverage {
  std::size_t padding_steps = 0;    // steps without sequences, over the run's plans
  bool mixed_sizes = false;         // a plan with steps of different sp
  bool unequal_work = false;        // a plan whose units hold different numbers of sequences
  std::size_t collectives = 0;      // rank 0's domain collectives
};

struct zero3_result {
  std::vector<double> params_after_first, losses;
  zero3_coverage cov;
};

template <class Policies>
zero3_result run_zero3(int ranks, const setup& s, Policies policies) {
  zero3_result out;
  dcp::local_world::run(ranks, [&](dcp::local_comm& world) {
    dcp::scheduler<dcp::transformer_spec, dcp::local_comm, Policies> sched(s.spec(), world, s.options(world.size()),
                                                                         policies);
    sched.set_dataset(s.dataset());
    tiny_transformer<double> model(s.model);
    zero3_shards<double, dcp::local_comm> shards(model, world);
    optimizer<double> opt(s.opt, shards.params().size());
    zero3_result r;
    for (int i = 0; i < s.steps; ++i) {
      const auto batch = sched.sampler().next();
      const step_summary sum = zero3_train_step(sched, model, shards, opt, s.data, batch.sequences);
      r.losses.push_back(sum.loss);
      if (i == 0) {
        shards.gather_all();
        r.params_after_first = model.params();
        shards.release_all();
      }
      std::vector<std::size_t> held(std::size_t(world.size()), 0);
      int lo = sum.plan.steps.front().sp(), hi = lo;
      for (const auto& st : sum.plan.steps) {
        if (st.sequences.empty()) ++r.cov.padding_steps;
        lo = std::min(lo, st.sp()), hi = std::max(hi, st.sp());
        for (int u = st.ranks.first; u < st.ranks.end(); ++u) held[std::size_t(u)] += st.sequences.size();
      }
      r.cov.mixed_sizes |= lo != hi;
      r.cov.unequal_work |= std::ranges::min(held) != std::ranges::max(held);
    }
    r.cov.collectives = shards.collectives();
    if (world.rank() == 0) out = std::move(r);
  });
  return out;
}

void expect_equal(const zero3_result& got, const run_result<double>& ref, const std::string& what) {
  ASSERT_EQ(got.losses.size(), ref.losses.size()) << what;
  const double dp = relative_difference(got.params_after_first, ref.params_after_first);
  double dl = 0;
  for (std::size_t i = 0; i < ref.losses.size(); ++i)
    dl = std::max(dl, relative_difference(got.losses[i], ref.losses[i]));
  EXPECT_LE(dp, tolerance) << what << ": parameters after one step differ by " << dp;
  EXPECT_LE(dl, tolerance) << what << ": some step's loss differs by " << dl;
  std::printf("%-28s params %.2e  max loss %.2e  padding steps %zu  collectives on rank 0 %zu\n", what.c_str(), dp,
              dl, got.cov.padding_steps, got.cov.collectives);
}

TEST(Zero3Training, DcpPlansWithPaddingPassesMatchFullBatch) {
  for (const int R : {2, 4}) {
    const setup s;
    dcp::default_policies p;
    p.cost = zero3_cost(s, R);
    p.planner.restrictions = false;  // dcp's full plans: these small batches need padding passes
    const zero3_result got = run_zero3(R, s, p);
    expect_equal(got, run_reference<double>(s, R), "dcp zero3 R=" + std::to_string(R));
    // The coupling was exercised: groups of different sizes and units with different work, evened
    // out by padding passes (4 ranks).
    if (R == 4) {
      EXPECT_GT(got.cov.padding_steps, 0u) << "no plan needed a padding pass";
      EXPECT_TRUE(got.cov.mixed_sizes) << "no plan mixed group sizes";
      EXPECT_TRUE(got.cov.unequal_work) << "every unit held the same number of sequences";
    }
    // Every micro-step gathers each unit before forward and each block again before backward,
    // and reduce-scatters each unit: (units + blocks + units) calls; the read of the parameters
    // after the first step gathered each unit once more.
    const std::size_t units = std::size_t(s.model.blocks + 2), per_step = 2 * units + std::size_t(s.model.blocks);
    EXPECT_EQ((got.cov.collectives - units) % per_step, 0u) << got.cov.collectives << " collectives";
  }
}

TEST(Zero3Training, BucketAndPackedPlansMatchFullBatch) {
  const int R = 4;
  const setup s;
  const auto ref = run_reference<double>(s, R);
  const auto data = s.dataset();
  const dcp::analytic_cost cost = zero3_cost(s, R);
  dcp::policies<dcp::bucket_planner> bucket;
  bucket.cost = cost;
  bucket.planner = dcp::tune(dcp::bucket_planner{}, cost, std::span<const dcp::sequence>(data), s.batch_tokens,
                             s.options(R).seed);
  expect_equal(run_zero3(R, s, bucket), ref, "bucket zero3 R=4");
  dcp::policies<dcp::packed_planner> packed;
  packed.cost = cost;
  packed.planner = dcp::tune(dcp::packed_planner{}, cost, std::span<const dcp::sequence>(data), s.batch_tokens,
                             s.options(R).seed);
  expect_equal(run_zero3(R, s, packed), ref, "packed zero3 R=4");
}

TEST(Zero3Training, UnequalCountsAreRefusedOnEveryRankBeforeAnyGather) {
  const int R = 4;
  const setup s;
  dcp::default_policies p;
  p.cost = zero3_cost(s, R);
  p.planner.restrictions = false;  // dcp's full plans, with padding passes to drop
  std::vector<std::string> messages(R);
  std::vector<std::size_t> collectives(R, 99);
  dcp::local_world::run(R, [&](dcp::local_comm& world) {
    dcp::scheduler<dcp::transformer_spec, dcp::local_comm> sched(s.spec(), world, s.options(R), p);
    sched.set_dataset(s.dataset());
    tiny_transformer<double> model(s.model);
    zero3_shards<double, dcp::local_comm> shards(model, world);
    optimizer<double> opt(s.opt, shards.params().size());
    // A batch whose plan needs a padding pass; drop it, so that one unit runs one step fewer.
    for (int i = 0; i < s.steps; ++i) {
      dcp::plan plan = sched.plan(sched.sampler().next().sequences);
      const auto pad = std::ranges::find_if(plan.steps, [](const auto& st) { return st.sequences.empty(); });
      if (pad == plan.steps.end()) continue;
      plan.steps.erase(pad);
      try {
        zero3_run_plan(sched, model, shards, opt, s.data, plan);
      } catch (const dcp::error& e) {
        if (e.code() == dcp::errc::mismatch) messages[std::size_t(world.rank())] = e.what();
      }
      collectives[std::size_t(world.rank())] = shards.collectives();
      return;
    }
  });
  for (int r = 0; r < R; ++r) {
    EXPECT_NE(messages[std::size_t(r)].find("micro-steps"), std::string::npos)
        << "rank " << r << " was not refused with the counts: '" << messages[std::size_t(r)] << "'";
    EXPECT_NE(messages[std::size_t(r)].find("ZeRO-3"), std::string::npos) << messages[std::size_t(r)];
    EXPECT_EQ(collectives[std::size_t(r)], 0u) << "rank " << r << " gathered before the refusal";
  }
}

}  // namespace
