// analytic_cost and the lower bound against independently computed reference values
// (tests/data/analytic.json, a copy of the shared golden file), to 1e-9 relative.

#include "core_test_support.hpp"

#include <dcp/cost/analytic.hpp>
#include <dcp/plan/lower_bounds.hpp>
#include <dcp/plan/sequence_options.hpp>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

#ifndef DCP_TEST_ANALYTIC_JSON
#error "DCP_TEST_ANALYTIC_JSON must name tests/data/analytic.json"
#endif

namespace {

const nlohmann::json& golden() {
  static const nlohmann::json j = [] {
    std::ifstream in(DCP_TEST_ANALYTIC_JSON);
    if (!in) throw std::runtime_error("cannot open " + std::string(DCP_TEST_ANALYTIC_JSON));
    return nlohmann::json::parse(in);
  }();
  return j;
}

dcp::analytic_cost cost_of(const nlohmann::json& c) {
  // The golden file names section 4's presets by their device ("h200"): the analytic clock.
  auto device = dcp::devices::preset(c.at("device").get<std::string>() + "-analytic");
  if (c.contains("gpus_per_node")) device.gpus_per_node = c.at("gpus_per_node").get<int>();
  return dcp::make_analytic_cost(dcp::models::preset(c.at("model").get<std::string>()), device,
                                 c.at("gpus").get<int>());
}

// 'tokens' includes the model's text tokens; a 1D model sees only the count, a 2D one the shape.
dcp::sequence sequence_of(const dcp::analytic_cost& c, const nlohmann::json& s, std::int64_t id) {
  const auto tokens = s.at("tokens").get<std::int64_t>();
  if (c.model.attention == dcp::attention_kind::factorized_2d) {
    const auto shape = s.at("shape");
    const auto seq = dcp::make_sequence(id, shape.at(0).get<std::int64_t>(), shape.at(1).get<std::int64_t>());
    EXPECT_EQ(c.tokens_of(seq), tokens);
    return seq;
  }
  const auto seq = dcp::make_sequence(id, tokens - c.model.text_tokens);
  EXPECT_EQ(c.tokens_of(seq), tokens);
  return seq;
}

TEST(Golden, FileHasTheExpectedCases) {
  ASSERT_TRUE(golden().contains("step_cases"));
  ASSERT_TRUE(golden().contains("lower_bound_cases"));
  EXPECT_EQ(golden().at("step_cases").size(), 15u);
  EXPECT_EQ(golden().at("lower_bound_cases").size(), 3u);
}

TEST(Golden, StepCasesMatchTimeMemoryAndFit) {
  int index = 0, fits = 0, misfits = 0;
  for (const auto& c : golden().at("step_cases")) {
    SCOPED_TRACE("step case " + std::to_string(index++) + ": " + c.at("model").get<std::string>() + " on " +
                 std::to_string(c.at("gpus").get<int>()) + " " + c.at("device").get<std::string>());
    const auto cost = cost_of(c);
    dcp::analytic_load load{};
    std::int64_t id = 0;
    for (const auto& s : c.at("sequences")) load = load + cost.load_of(sequence_of(cost, s, id++));
    const int sp = c.at("sp").get<int>(), k = c.at("checkpointed_blocks").get<int>();
    DCP_EXPECT_REL(cost.time(load, sp, k), c.at("time_s").get<double>());
    DCP_EXPECT_REL(cost.memory(load, sp, k), c.at("memory_bytes").get<double>());
    const bool fit = c.at("fits").get<bool>();
    EXPECT_EQ(cost.memory(load, sp, k) <= cost.capacity(), fit);
    (fit ? fits : misfits)++;
  }
  EXPECT_EQ(index, 15);
  EXPECT_GT(misfits, 0);  // the file exercises both outcomes
  EXPECT_GT(fits, 0);
}

TEST(Golden, LowerBoundCasesMatchOptionsFloorsAndBound) {
  int index = 0;
  for (const auto& c : golden().at("lower_bound_cases")) {
    SCOPED_TRACE("lower bound case " + std::to_string(index++) + ": " + c.at("model").get<std::string>() + " on " +
                 std::to_string(c.at("gpus").get<int>()) + " " + c.at("device").get<std::string>());
    const auto cost = cost_of(c);
    DCP_EXPECT_REL(cost.max_tokens_per_gpu(), c.at("x_max").get<double>());
    std::vector<dcp::sequence> batch;
    std::int64_t id = 0;
    for (const auto& s : c.at("sequences")) {
      SCOPED_TRACE("sequence " + std::to_string(id) + " of " + std::to_string(s.at("tokens").get<std::int64_t>()) +
                   " tokens");
      const auto seq = sequence_of(cost, s, id++);
      batch.push_back(seq);
      const auto load = cost.load_of(seq);
      const auto options = dcp::options_of(cost, load);
      const auto& want = s.at("options");
      ASSERT_EQ(options.size(), want.size());
      double floor = std::numeric_limits<double>::infinity(), fastest = floor;
      for (std::size_t i = 0; i < options.size(); ++i) {
        EXPECT_EQ(options[i].sp, want[i].at("sp").get<int>());
        EXPECT_EQ(options[i].checkpointed_blocks, want[i].at("checkpointed_blocks").get<int>());
        DCP_EXPECT_REL(options[i].time_s, want[i].at("time_s").get<double>());
        DCP_EXPECT_REL(options[i].memory_bytes, want[i].at("memory_bytes").get<double>());
        floor = std::min(floor, cost.work_floor(load, options[i].sp, options[i].checkpointed_blocks));
        fastest = std::min(fastest, options[i].time_s);
      }
      DCP_EXPECT_REL(floor, s.at("gpu_seconds_floor").get<double>());
      DCP_EXPECT_REL(fastest, s.at("fastest_alone_s").get<double>());
    }
    DCP_EXPECT_REL(dcp::lower_bound(cost, batch), c.at("lower_bound_s").get<double>());
  }
  EXPECT_EQ(index, 3);
}

}  // namespace
