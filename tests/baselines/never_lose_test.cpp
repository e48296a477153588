// The dcp planner with the tuned baselines among its candidates (`with_baselines`) plans no
// batch slower than any of them, on random workloads with and without pipeline stages: 1000
// batches, every plan (dcp's and the baselines') checked against the plan laws.

#include <dcp_test/support.hpp>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <span>
#include <string>
#include <variant>
#include <vector>

#include <dcp/cost/analytic.hpp>
#include <dcp/plan/check_plan.hpp>
#include <dcp/plan/dcp_planner.hpp>
#include <dcp/random.hpp>
#include <dcp/workload/tuning.hpp>

namespace {

using dcp::sequence;

// A dataset of `count` sequences, lengths log-uniform up to 0.95 of the longest a static system
// holds (under pp = P: P of it in flight on the widest group; 2D shapes for the 2D model half the
// time), ids unique.
std::vector<sequence> random_data(dcp::xoshiro256ss& g, const dcp::analytic_cost& cost, int count) {
  const auto& model = cost.model;
  const int widest = dcp::default_sp_sizes(cost).back();
  const double longest =
      0.95 * static_cast<double>(dcp::static_token_capacity(cost, widest, cost.blocks()) - model.text_tokens);
  std::vector<sequence> out;
  for (int i = 0; i < count; ++i) {
    const double n = std::exp(dcp::uniform01(g) * std::log(std::max(2.0, longest)));
    if (model.attention == dcp::attention_kind::factorized_2d && dcp::uniform_below(g, 2) == 0) {
      const std::int64_t t = 1 + static_cast<std::int64_t>(dcp::uniform_below(g, 32));
      out.push_back(dcp::make_sequence(i, t, std::max<std::int64_t>(1, static_cast<std::int64_t>(n) / t)));
    } else {
      out.push_back(dcp::make_sequence(i, std::max<std::int64_t>(1, static_cast<std::int64_t>(n))));
    }
  }
  return out;
}

dcp::analytic_cost random_cost(dcp::xoshiro256ss& g, bool pipelined) {
  const auto model = dcp::models::preset(dcp::models::preset_names[dcp::uniform_below(g, 3)]);
  if (!pipelined) {
    const int gpus = dcp::uniform_below(g, 2) == 0 ? 1 + static_cast<int>(dcp::uniform_below(g, 8))
                                                   : 8 * (1 + static_cast<int>(dcp::uniform_below(g, 8)));
    return dcp::make_analytic_cost(model, dcp::devices::h200_analytic(), gpus);
  }
  const int pp = dcp::uniform_below(g, 2) == 0 ? 2 : 4;
  const int gpus = pp * 8 * (1 + static_cast<int>(dcp::uniform_below(g, 2)));
  return dcp::make_analytic_cost(model, dcp::devices::h200_analytic(),
                                 dcp::parallel_layout{.gpus = gpus, .gpus_per_node = 8, .tp = 1, .pp = pp});
}

TEST(NeverLose, DcpPlansNoBatchSlowerThanATunedBaseline) {
  dcp::xoshiro256ss g(2026);
  int batches = 0, pipelined_batches = 0, ends_with_a_baseline = 0;
  for (int workload = 0; batches < 1000; ++workload) {
    const bool pipelined = workload % 2 == 1;
    const auto cost = random_cost(g, pipelined);
    const auto data = random_data(g, cost, 40 + static_cast<int>(dcp::uniform_below(g, 160)));
    // Global batches of a few sequences' worth to whole-epoch ones.
    std::int64_t tokens = 0;
    for (const auto& s : data) tokens += cost.tokens_of(s);
    const std::int64_t budget = std::max<std::int64_t>(1, tokens / (1 + static_cast<std::int64_t>(dcp::uniform_below(g, 8))));
    SCOPED_TRACE("workload " + std::to_string(workload) + ": " + std::to_string(data.size()) + " sequences, " +
                 std::to_string(cost.gpus()) + " GPUs, pp " + std::to_string(cost.layout().pp) + ", model " +
                 cost.model.name);
    const auto ctx = dcp::planning_context{cost, dcp::selective_recompute{}, dcp::default_groups(cost)};
    dcp::dcp_planner planner = dcp::with_baselines(dcp::dcp_planner{}, ctx, data, budget);
    ASSERT_EQ(planner.baselines.size(), 3u) << "every baseline holds this data";
    for (const auto& b : dcp::epoch_batches(cost, data, budget, static_cast<std::uint64_t>(workload))) {
      const std::span<const sequence> batch(b);
      const dcp::plan p = planner.plan(ctx, batch);
      const auto bad = dcp::plan_violations(p, b, cost);
      ASSERT_TRUE(bad.empty()) << bad.front();
      EXPECT_EQ(p.method, "dcp");
      bool beaten = false;
      for (const auto& baseline : planner.baselines) {
        const dcp::plan q = std::visit([&](const auto& x) { return x.plan(ctx, batch); }, baseline);
        // A baseline's plan keeps the laws too: under pipelines its memory in flight fits.
        const auto wrong = dcp::plan_violations(q, b, cost);
        EXPECT_TRUE(wrong.empty()) << q.method << ": " << wrong.front();
        EXPECT_LE(p.makespan_s, q.makespan_s * (1 + 1e-12)) << q.method << " plans batch of " << b.size() << " sequences sooner";
        // dcp's bound holds every baseline's plan of the batch.
        EXPECT_GE(q.makespan_s, p.bound_s() * (1 - 1e-9)) << q.method;
        beaten = beaten || std::abs(p.makespan_s - q.makespan_s) <= 1e-12 * q.makespan_s;
      }
      ends_with_a_baseline += beaten;
      ++batches, pipelined_batches += pipelined;
    }
  }
  EXPECT_GE(pipelined_batches, 300) << "pipelines are covered";
  // Not vacuous: on some batches dcp ends exactly when a baseline does (its plan was kept).
  EXPECT_GT(ends_with_a_baseline, 0);
  RecordProperty("batches", batches);
  RecordProperty("ends_with_a_baseline", ends_with_a_baseline);
}

}  // namespace
