// dcp-sim's dcp-calibrated method on a small run (8 GPUs, 3000 text documents): on truths the
// fitted form can represent, it learns the clock after its first batch: no out-of-memory step
// after it, and the second half of the run within a few percent of the oracle.
#include <gtest/gtest.h>

#include <cctype>
#include <ostream>
#include <span>
#include <string>
#include <vector>

#include <dcp/cost/analytic.hpp>
#include <dcp/group/buddy_groups.hpp>
#include <dcp/plan/planning_context.hpp>
#include <dcp/sim/calibrated.hpp>
#include <dcp/sim/execute.hpp>
#include <dcp/sim/methods.hpp>
#include <dcp/sim/truth.hpp>
#include <dcp/workload/embedded.hpp>
#include <dcp/workload/tuning.hpp>

#include <dcp_test/node_local_groups.hpp>

namespace {

class calibrated_truths : public ::testing::TestWithParam<const char*> {};
INSTANTIATE_TEST_SUITE_P(specs, calibrated_truths,
                         ::testing::Values("memory=1.08", "slow_gpus=5:0.75", "attention=1.3,inter_bw=0.5,jitter=0.05"),
                         [](const auto& i) {
                           std::string s = i.param;
                           for (char& c : s)
                             if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
                           return s;
                         });

TEST_P(calibrated_truths, learn_the_truth_after_the_first_batch) {
  const auto cost = dcp::make_analytic_cost(dcp::models::llama3_8b(), dcp::devices::h200(), 8);
  auto data = dcp::workloads::make("text-longtail", 7);
  data.resize(3000);
  const auto batches = dcp::epoch_batches(cost, data, 1 << 20, 7);
  ASSERT_GE(batches.size(), 8u);
  const auto truth = dcp::sim::make_truth(dcp::sim::parse_truth_spec(GetParam()), cost, 7);
  const dcp::sim::method_settings settings{};
  dcp::sim::options opt;
  opt.keep_plans = true;
  const auto cal = dcp::sim::simulate_calibrated(cost, std::span<const std::vector<dcp::sequence>>(batches), truth,
                                                 settings, {}, opt);
  const auto oracle = dcp::sim::run_method("oracle", cost, std::span<const dcp::sequence>(data), batches, settings, truth, opt);
  const auto dcp = dcp::sim::run_method("dcp", cost, std::span<const dcp::sequence>(data), batches, settings, truth, opt);
  const std::size_t n = batches.size();
  EXPECT_EQ(dcp::sim::oom_steps(std::span<const dcp::plan>(cal.executed), truth.model, 1, n), 0);
  const double ratio = dcp::sim::tokens_per_s(cal.executed, n / 2, n) / dcp::sim::tokens_per_s(oracle.executed, n / 2, n);
  EXPECT_GT(ratio, 0.97) << GetParam();
  EXPECT_GE(cal.metrics.tokens_per_s, dcp.metrics.tokens_per_s * 0.99) << GetParam();
  EXPECT_EQ(cal.metrics.sequences, dcp.metrics.sequences);  // every sequence planned once
}

using dcp_test::node_local_groups;

// The calibrated method plans in the context it is given: with a node-local manager every
// calibrated plan has every step on one of its blocks (none spans two nodes) and every sequence
// of its batch, while the buddy run of the same batches (the cost-only overload) does use groups
// across nodes.
TEST(calibrated_method, plans_only_on_the_blocks_of_the_contexts_group_manager) {
  dcp::device_spec d = dcp::devices::h200();
  d.gpus_per_node = 2;
  const auto cost = dcp::make_analytic_cost(dcp::models::llama3_8b(), d, 8);
  auto data = dcp::workloads::make("text-longtail", 11);
  data.resize(800);
  auto batches = dcp::epoch_batches(cost, data, 1 << 19, 11);
  if (batches.size() > 4) batches.resize(4);
  ASSERT_GE(batches.size(), 2u);
  const auto truth = dcp::sim::make_truth(dcp::sim::parse_truth_spec("slow_gpus=3:0.75"), cost, 11);
  dcp::sim::options opt;
  opt.keep_plans = true;
  const node_local_groups local{8, 2};
  const auto span = std::span<const std::vector<dcp::sequence>>(batches);
  const auto on_local = dcp::sim::simulate_calibrated(dcp::planning_context{cost, dcp::selective_recompute{}, local},
                                                      span, truth, {}, {}, opt);
  const auto on_buddy = dcp::sim::simulate_calibrated(cost, span, truth, {}, {}, opt);
  ASSERT_EQ(on_local.plans.size(), batches.size());
  int buddy_wide = 0;
  for (std::size_t i = 0; i < batches.size(); ++i) {
    SCOPED_TRACE(::testing::Message() << "batch " << i);
    std::size_t planned = 0;
    for (const auto& st : on_local.plans[i].steps) {
      // Searched among the offered blocks, not derived (the plans are priced on the refitted
      // model, so the analytic cost's plan_violations would flag their times).
      bool offered = false;
      for (int b = 0; b < local.block_count(st.sp()); ++b) offered = offered || local.block(st.sp(), b) == st.ranks;
      EXPECT_TRUE(offered) << "step on " << st.ranks;
      planned += st.sequences.size();
    }
    EXPECT_EQ(planned, batches[i].size());
    for (const auto& st : on_buddy.plans[i].steps) buddy_wide += st.sp() > 2;
  }
  EXPECT_EQ(on_local.metrics.sequences, on_buddy.metrics.sequences);
  EXPECT_GT(buddy_wide, 0) << "no buddy calibrated step was wider than a node: the test shows nothing";
}

}  // namespace
