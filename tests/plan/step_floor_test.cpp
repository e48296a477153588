// dcp_planner under a per-step floor (ZeRO-3's weight gather): over random zero3 batches every
// plan keeps the laws, and dissolving short steps into others that recompute more never makes a
// plan slower than planning without it (the same analytic model with the floor refinement
// hidden from the planner; its steps still last at least the floor). Without a floor nothing
// changes: zero1 plans are bit-identical either way.

#include <dcp/cost/analytic.hpp>
#include <dcp/plan/check_plan.hpp>
#include <dcp/plan/dcp_planner.hpp>
#include <dcp/plan/sequence_options.hpp>
#include <dcp/workload/embedded.hpp>

#include <dcp_test/support.hpp>
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

namespace {

using dcp_test::rng;

// The analytic model, its floor unseen by the planner: `time` still takes the max with t_z3.
struct floor_hidden : dcp::analytic_cost {
  void step_floor() const = delete;
};

static_assert(dcp::step_floor_cost_model<dcp::analytic_cost>);
static_assert(!dcp::step_floor_cost_model<floor_hidden>);
static_assert(dcp::cost_model<floor_hidden> && dcp::token_memory_cost_model<floor_hidden>);

// A zero3 (or, with `zero1`, the default) job that fits: one of four models, 8..128 GPUs, tp 8
// for llama3-70b.
dcp::analytic_cost random_cost(rng& g, dcp::sharding_kind sharding) {
  static const std::array<dcp::transformer_spec, 4> models{dcp::models::wan2_1_14b(), dcp::models::cogvideox_5b(),
                                                           dcp::models::llama3_8b(), dcp::models::llama3_70b()};
  for (;;) {
    const std::size_t m = static_cast<std::size_t>(g.between(0, 3));
    const dcp::parallel_layout layout{.gpus = 8 << g.between(0, 4), .tp = m == 3 ? 8 : 1, .sharding = sharding};
    const dcp::analytic_cost c{models[m],
                               g.between(0, 1) ? dcp::devices::h200_analytic() : dcp::devices::h100_analytic(), layout};
    if (c.static_memory() < c.capacity()) return dcp::make_analytic_cost(c.model, c.device, layout);
  }
}

// Up to 24 sequences per unit (a quarter of the batches under one per unit): half drawn from an
// embedded workload (video for video models, text otherwise), half log-uniform lengths up to the
// longest that fits; ids unique.
std::vector<dcp::sequence> random_batch(rng& g, const dcp::analytic_cost& c) {
  const std::int64_t count = g.between(0, 3) == 0 ? g.log_between(1, c.gpus()) : g.between(c.gpus(), 24 * c.gpus());
  const std::int64_t limit = dcp::largest_feasible_tokens(c);
  std::vector<dcp::sequence> out;
  if (g.between(0, 1) == 0) {
    const bool text = c.model.attention == dcp::attention_kind::causal;
    const char* name = text ? "text-longtail" : g.between(0, 1) ? "cogvideox-zipf10" : "opensora-zipf1";
    const auto all = dcp::workloads::make(name, static_cast<std::uint64_t>(g.between(0, 1000)));
    for (const auto& s : all) {
      if (static_cast<std::int64_t>(out.size()) == count) break;
      if (c.tokens_of(s) <= limit) out.push_back(s);
    }
  } else {
    for (std::int64_t i = 0; i < count; ++i)
      out.push_back(dcp::make_sequence(i, std::max<std::int64_t>(1, g.log_between(64, limit) - c.model.text_tokens)));
  }
  return out;
}

std::string describe(const dcp::analytic_cost& c, const std::vector<dcp::sequence>& b) {
  std::ostringstream os;
  os << c << " with " << b.size() << " sequences";
  return os.str();
}

TEST(StepFloor, Zero3PlansKeepTheLawsAndAreNeverSlower) {
  rng g(3003);
  int trials = 0, faster = 0;
  double saved = 0;
  for (; trials < 200; ++trials) {
    const auto c = random_cost(g, dcp::sharding_kind::zero3);
    const auto batch = random_batch(g, c);
    SCOPED_TRACE(describe(c, batch));
    ASSERT_GT(c.step_floor(), 0);
    dcp::dcp_planner planner;
    const auto p = planner.plan(c, batch);
    const auto q = planner.plan(floor_hidden{c}, batch);
    const auto violations = dcp::plan_violations(p, batch, c);
    for (const auto& v : violations) ADD_FAILURE() << v;
    ASSERT_TRUE(violations.empty());
    for (const auto& st : p.steps) {  // DCP-intra still checkpoints the fewest blocks that fit
      dcp::analytic_load load{};
      for (const auto& s : st.sequences) load = load + dcp::analytic_load{1, static_cast<double>(s.tokens), 0};
      if (st.checkpointed_blocks > 0) {
        EXPECT_GT(c.memory(load, st.sp(), st.checkpointed_blocks - 1), c.capacity());
      }
    }
    ASSERT_LE(p.makespan_s, q.makespan_s * (1 + 1e-12)) << "dissolving short steps made the plan slower";
    if (p.makespan_s < q.makespan_s * (1 - 1e-9)) ++faster, saved += 1 - p.makespan_s / q.makespan_s;
  }
  std::cout << "[ zero3    ] " << faster << " of " << trials << " plans faster, by "
            << (faster ? saved / faster : 0) * 100 << "% on average\n";
  // The pass pays off on many batches, not on a lucky one, beside the variants of the planner
  // allowed less (without DCP-intra steps pack more tokens too): 14 of 200 at this seed.
  EXPECT_GE(faster, trials / 20);
}

TEST(StepFloor, WithoutAFloorPlansAreUnchanged) {
  rng g(3004);
  for (int trial = 0; trial < 10; ++trial) {
    const auto c = random_cost(g, dcp::sharding_kind::zero1);
    const auto batch = random_batch(g, c);
    ASSERT_EQ(c.step_floor(), 0);
    const dcp::dcp_planner planner;
    EXPECT_EQ(planner.plan(c, batch).hash(), planner.plan(floor_hidden{c}, batch).hash()) << describe(c, batch);
  }
}

}  // namespace
