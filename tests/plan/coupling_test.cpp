// Collectives that span planner groups (ZeRO-3's gathers, expert all-to-alls): on random coupled
// jobs every planner's plans give each unit of a domain the same number of micro-steps, one per
// round, with padding passes where it has nothing to run, and keep every law; the lockstep clock
// is never sooner than the same steps run as if groups were alone, and matches a block-by-block
// count on hand-made rounds; a plan whose domain members disagree is refused, naming the units
// and their counts; the executor reproduces a coupled plan on its own clock; zero1 and ep = 1
// plans have no padding and no coupling.

#include <algorithm>
#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include <dcp/cost/analytic.hpp>
#include <dcp/cost/device.hpp>
#include <dcp/group/contiguous_groups.hpp>
#include <dcp/plan/bucket_planner.hpp>
#include <dcp/plan/check_plan.hpp>
#include <dcp/plan/coupling.hpp>
#include <dcp/plan/dcp_planner.hpp>
#include <dcp/plan/dynamic_cp_planner.hpp>
#include <dcp/plan/packed_planner.hpp>
#include <dcp/plan/planning_context.hpp>
#include <dcp/recompute/selective_recompute.hpp>
#include <dcp/sim/execute.hpp>
#include <dcp/sim/truth.hpp>
#include <dcp/workload/tuning.hpp>

#include <dcp_test/support.hpp>

namespace {

struct coupled_job {
  dcp::transformer_spec model;
  dcp::parallel_layout layout;
};

coupled_job random_job(dcp_test::rng& r) {
  const bool moe = r.between(0, 1) == 1;
  coupled_job j{moe ? dcp::models::qwen3_30b_a3b() : dcp::models::llama3_8b(), {}};
  j.layout.gpus = 8 << r.between(0, 2);
  j.layout.gpus_per_node = 8;
  j.layout.tp = r.between(0, 2) == 0 ? 2 : 1;
  const int units = j.layout.gpus / j.layout.tp;
  if (moe) {
    j.layout.ep = static_cast<int>(std::min<std::int64_t>(units, 1 << r.between(1, 3)));
    if (r.between(0, 2) == 0) j.layout.sharding = dcp::sharding_kind::zero3;
  } else {
    j.layout.sharding = dcp::sharding_kind::zero3;
  }
  return j;
}

std::vector<dcp::sequence> random_batch(dcp_test::rng& r, const dcp::analytic_cost& c) {
  const std::int64_t longest = dcp::step_token_capacity(c, c.gpus(), c.blocks());
  std::vector<dcp::sequence> out;
  const std::int64_t count = r.between(2, 60);
  for (std::int64_t i = 0; i < count; ++i)
    out.push_back(dcp::make_sequence(i, r.log_between(128, std::max<std::int64_t>(256, longest / 2))));
  return out;
}

// Micro-steps per unit.
std::vector<int> counts(const dcp::plan& p, int units) {
  std::vector<int> out(static_cast<std::size_t>(units), 0);
  for (const auto& s : p.steps)
    for (int u = s.ranks.first; u < s.ranks.end(); ++u) ++out[static_cast<std::size_t>(u)];
  return out;
}

// The same steps with no coupling: each unit runs its own steps back to back, padding removed.
double alone_makespan(const dcp::plan& p) {
  std::map<int, double> free;
  double end = 0;
  for (const auto& s : p.steps) {
    if (s.sequences.empty()) continue;
    double start = 0;
    for (int u = s.ranks.first; u < s.ranks.end(); ++u) start = std::max(start, free[u]);
    for (int u = s.ranks.first; u < s.ranks.end(); ++u) free[u] = start + s.time_s;
    end = std::max(end, start + s.time_s);
  }
  return end;
}

TEST(coupling, every_planner_gives_every_unit_of_a_domain_the_same_micro_steps) {
  dcp_test::rng r(5501);
  int padded = 0, plans = 0;
  for (int trial = 0; trial < 24; ++trial) {
    const coupled_job job = random_job(r);
    const auto c = dcp::make_analytic_cost(job.model, dcp::devices::h200_analytic(), job.layout);
    ASSERT_TRUE(dcp::is_coupled(c.layout()));
    const dcp::contiguous_groups groups{c.gpus(), c.gpus_per_node()};
    const dcp::planning_context ctx{c, dcp::selective_recompute{}, groups};
    const auto batch = random_batch(r, c);
    const std::string where = job.model.name + " on " + std::to_string(job.layout.gpus) + " GPUs, tp " +
                              std::to_string(job.layout.tp) + ", ep " + std::to_string(job.layout.ep) + ", " +
                              dcp::to_string(job.layout.sharding) + ", trial " + std::to_string(trial);
    dcp::dcp_planner dcp;
    dcp.on_infeasible = dcp::infeasible_policy::skip;
    dcp::dcp_planner rounds = dcp;
    rounds.inter = false;
    auto skipping = [](auto q) {
      q.on_infeasible = dcp::infeasible_policy::skip;
      return q;
    };
    const auto bucket = dcp::tune(skipping(dcp::bucket_planner{}), ctx, batch);
    const auto packed = dcp::tune(skipping(dcp::packed_planner{}), ctx, batch);
    const auto dynamic = dcp::tune(skipping(dcp::dynamic_cp_planner{}), ctx, batch);
    for (const dcp::plan& p : {dcp.plan(ctx, batch), rounds.plan(ctx, batch), bucket.plan(ctx, batch),
                               packed.plan(ctx, batch), dynamic.plan(ctx, batch)}) {
      ++plans;
      const auto v = dcp::plan_violations(p, batch, c, groups);
      EXPECT_TRUE(v.empty()) << where << " " << p.method << ": " << v.front();
      const int du = dcp::coupling_units(c.layout());
      const auto n = counts(p, c.gpus());
      for (int u = 0; u < c.gpus(); ++u)
        EXPECT_EQ(n[static_cast<std::size_t>(u)], n[static_cast<std::size_t>(u / du * du)]) << where << " " << p.method << " unit " << u;
      for (const auto& s : p.steps) padded += s.sequences.empty();
      // Lockstep is never sooner than the same steps run as if each group were alone.
      EXPECT_GE(p.makespan_s, alone_makespan(p) * (1 - 1e-12)) << where << " " << p.method;
      EXPECT_LE(p.joint_lower_bound_s, p.makespan_s * (1 + 1e-12)) << where << " " << p.method;
    }
  }
  EXPECT_GT(padded, 0) << "no plan of " << plans << " needed a padding pass";
}

TEST(coupling, a_domain_whose_units_disagree_on_their_micro_steps_is_refused_naming_them) {
  const auto c = dcp::make_analytic_cost(dcp::models::llama3_8b(), dcp::devices::h200_analytic(),
                                         {.gpus = 8, .gpus_per_node = 8, .sharding = dcp::sharding_kind::zero3});
  std::vector<dcp::sequence> batch;
  for (int i = 0; i < 11; ++i) batch.push_back(dcp::make_sequence(i, 2048 + 512 * i));
  dcp::packed_planner packed;
  packed.sp = 1;
  dcp::plan p = packed.plan(c, batch);
  ASSERT_TRUE(dcp::plan_violations(p, batch, c).empty());
  const auto pad = std::find_if(p.steps.begin(), p.steps.end(), [](const dcp::plan_step& s) { return s.sequences.empty(); });
  ASSERT_NE(pad, p.steps.end()) << "11 sequences on 8 GPUs need padding";
  const int unit = pad->ranks.first;
  p.steps.erase(pad);
  const auto v = dcp::plan_violations(p, batch, c);
  ASSERT_FALSE(v.empty());
  const bool named = std::any_of(v.begin(), v.end(), [&](const std::string& m) {
    return m.find("unit") != std::string::npos && m.find(std::to_string(unit)) != std::string::npos &&
           m.find("micro-steps") != std::string::npos && m.find("ZeRO-3") != std::string::npos;
  });
  EXPECT_TRUE(named) << v.front();
}

TEST(coupling, a_round_lasts_the_slowest_member_block_by_block) {
  // L = 4. Step a: 8 s, nothing recomputed (2 s a block). Step b: 4 s with none, 8 s with its
  // first 2 blocks recomputed (1 s a block, 2 s more on blocks 0 and 1). Blocks: 3, 3, 2, 2.
  std::vector<dcp::detail::block_share> shares{{2, 0, 0}, {1, 2, 2}};
  EXPECT_DOUBLE_EQ(dcp::detail::lockstep_seconds(shares, 4), 10.0);
  // Equal shapes: the round is the slowest step.
  std::vector<dcp::detail::block_share> same{{2, 0, 0}, {1.5, 0, 0}, {1, 0, 0}};
  EXPECT_DOUBLE_EQ(dcp::detail::lockstep_seconds(same, 4), 8.0);
  // Three recompute depths: blocks 0: max(1, 1+3, 0.5+1, 2+1)=4; 1: 4; 2: max(1, 4, 1.5)=4; 3: 1.
  std::vector<dcp::detail::block_share> deep{{1, 3, 3}, {0.5, 1, 1}, {2, 1, 2}};
  EXPECT_DOUBLE_EQ(dcp::detail::lockstep_seconds(deep, 4), 4 + 4 + 4 + 2);
}

TEST(coupling, the_executor_runs_a_coupled_plan_on_its_own_clock_as_planned) {
  for (const bool zero3 : {true, false}) {
    dcp::parallel_layout l{.gpus = 16, .gpus_per_node = 8, .ep = 8};
    if (zero3) l.sharding = dcp::sharding_kind::zero3;
    const auto c = dcp::make_analytic_cost(dcp::models::qwen3_30b_a3b(), dcp::devices::h200_analytic(), l);
    dcp_test::rng r(77 + zero3);
    const auto batch = random_batch(r, c);
    dcp::dcp_planner planner;
    planner.on_infeasible = dcp::infeasible_policy::skip;
    const dcp::plan p = planner.plan(c, batch);
    ASSERT_TRUE(dcp::plan_violations(p, batch, c).empty());
    const dcp::sim::truth<dcp::analytic_cost> t{c, {}, 0, 0};
    const auto e = dcp::sim::execute(p, t);
    EXPECT_NEAR(e.executed.makespan_s, p.makespan_s, 1e-9 * p.makespan_s) << (zero3 ? "zero3" : "ep 8");
    EXPECT_EQ(e.oom_steps, 0);
  }
}

TEST(coupling, zero1_and_dense_plans_have_no_padding_and_no_coupling) {
  const auto c = dcp::make_analytic_cost(dcp::models::llama3_8b(), dcp::devices::h200_analytic(),
                                         {.gpus = 16, .gpus_per_node = 8});
  EXPECT_FALSE(dcp::is_coupled(c.layout()));
  dcp_test::rng r(3);
  const auto batch = random_batch(r, c);
  dcp::packed_planner packed;
  packed.sp = 1;
  packed.on_infeasible = dcp::infeasible_policy::skip;
  const dcp::plan p = packed.plan(c, batch);
  for (const auto& s : p.steps) EXPECT_FALSE(s.sequences.empty());
  EXPECT_TRUE(dcp::coupling_violations(p, c.layout()).empty());
  // Pipelines keep their own schedule.
  EXPECT_FALSE(dcp::is_coupled({.gpus = 16, .gpus_per_node = 8, .sharding = dcp::sharding_kind::zero3, .pp = 2}));
}

TEST(coupling, a_padding_pass_costs_its_collectives) {
  const auto z3 = dcp::make_analytic_cost(dcp::models::llama3_8b(), dcp::devices::h200_analytic(),
                                          {.gpus = 16, .gpus_per_node = 8, .sharding = dcp::sharding_kind::zero3});
  EXPECT_DOUBLE_EQ(z3.padding_time(), z3.step_floor());  // the gathers at full volume
  const auto ep = dcp::make_analytic_cost(dcp::models::qwen3_30b_a3b(), dcp::devices::h200_analytic(),
                                          {.gpus = 16, .gpus_per_node = 8, .ep = 8});
  EXPECT_GT(ep.padding_time(), 0);
  // Never more than the shortest real step: a pass with no tokens skips every GEMM.
  EXPECT_LT(ep.padding_time(), ep.time(ep.load_of(dcp::make_sequence(0, 128)), 1, 0));
}

}  // namespace
