// dcp-sim's dcp-calibrated method on a small run (8 GPUs, 3000 text documents): on truths the
// fitted form can represent, it learns the clock after its first batch: no out-of-memory step
// after it, and the second half of the run within a few percent of the oracle.
#include <gtest/gtest.h>

#include <cctype>
#include <span>
#include <string>
#include <vector>

#include <dcp/cost/analytic.hpp>
#include <dcp/plan/tuning.hpp>
#include <dcp/sim/calibrated.hpp>
#include <dcp/sim/execute.hpp>
#include <dcp/sim/methods.hpp>
#include <dcp/sim/truth.hpp>
#include <dcp/workload/embedded.hpp>

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
  EXPECT_EQ(dcp::sim::oom_steps(std::span<const dcp::plan>(cal.executed), truth.model.capacity(), 1, n), 0);
  const double ratio = dcp::sim::tokens_per_s(cal.executed, n / 2, n) / dcp::sim::tokens_per_s(oracle.executed, n / 2, n);
  EXPECT_GT(ratio, 0.97) << GetParam();
  EXPECT_GE(cal.metrics.tokens_per_s, dcp.metrics.tokens_per_s * 0.99) << GetParam();
  EXPECT_EQ(cal.metrics.sequences, dcp.metrics.sequences);  // every sequence planned once
}

}  // namespace
