// Groups of any size (`contiguous_groups`): its blocks keep the group_manager laws for every
// size on random layouts and are buddy_groups' blocks when only powers of two are asked for;
// legal sizes follow the heads; every planner's plans on it are valid over random seeded
// batches, use sizes that are not powers of two, and dcp's are never slower than on buddy blocks;
// dynamic_cp keeps Megatron's powers of two; the scheduler runs a 6-rank job's groups of 3 and 6.

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include <dcp/comm/local.hpp>
#include <dcp/cost/analytic.hpp>
#include <dcp/group/buddy_groups.hpp>
#include <dcp/group/check_groups.hpp>
#include <dcp/group/contiguous_groups.hpp>
#include <dcp/plan/bucket_planner.hpp>
#include <dcp/plan/check_plan.hpp>
#include <dcp/plan/dcp_planner.hpp>
#include <dcp/plan/dynamic_cp_planner.hpp>
#include <dcp/plan/packed_planner.hpp>
#include <dcp/plan/planning_context.hpp>
#include <dcp/recompute/selective_recompute.hpp>
#include <dcp/scheduler.hpp>
#include <dcp/sim/metrics.hpp>
#include <dcp/workload/tuning.hpp>

#include <dcp_test/support.hpp>

namespace {

bool power_of_two(int x) { return x > 0 && (x & (x - 1)) == 0; }

dcp::analytic_cost job(const dcp::transformer_spec& model, int gpus, int per_node = 8) {
  dcp::device_spec d = dcp::devices::h200_analytic();
  d.gpus_per_node = per_node;
  return dcp::make_analytic_cost(model, d, gpus);
}

// 2..60 sequences, log-uniform from 512 tokens to the longest that the widest offered group
// holds with every block checkpointed.
std::vector<dcp::sequence> random_batch(dcp_test::rng& r, const dcp::analytic_cost& c, int widest) {
  const std::int64_t longest = dcp::step_token_capacity(c, widest, c.blocks()) - c.model.text_tokens;
  std::vector<dcp::sequence> out;
  const std::int64_t count = r.between(2, 60);
  for (std::int64_t i = 0; i < count; ++i) out.push_back(dcp::make_sequence(i, r.log_between(512, longest)));
  return out;
}

TEST(contiguous_groups, keeps_the_laws_for_every_size_on_random_layouts) {
  dcp_test::rng r(2201);
  for (int trial = 0; trial < 60; ++trial) {
    const int node = static_cast<int>(r.pick(std::vector<std::int64_t>{2, 4, 6, 8}));
    const int n = r.between(0, 3) == 0 ? static_cast<int>(r.between(1, node)) : node * static_cast<int>(r.between(1, 9));
    const dcp::contiguous_groups g{n, node};
    const auto v = dcp::group_law_violations(g);
    EXPECT_TRUE(v.empty()) << g << ": " << (v.empty() ? "" : v.front());
    for (int sp = 1; sp <= n; ++sp) {
      const int count = g.block_count(sp);
      // Every size inside a node, and every multiple of a node, has blocks; no other.
      const bool expected = sp <= node || sp % node == 0;
      EXPECT_EQ(count > 0, expected) << g << " sp " << sp;
      if (sp <= node) {
        EXPECT_EQ(count, (n < node ? 1 : n / node) * (std::min(n, node) / sp)) << g << " sp " << sp;
      } else if (expected) {
        EXPECT_EQ(count, n / sp) << g << " sp " << sp;
      }
    }
  }
}

TEST(contiguous_groups, powers_of_two_are_buddy_blocks) {
  for (int node : {1, 2, 4, 8})
    for (int n : {1, 2, 3, 4, 8, 16, 24, 48, 64}) {
      if (n > node && n % node != 0) continue;
      const dcp::contiguous_groups g{n, node, dcp::group_sizes::powers_of_two};
      const dcp::buddy_groups b{n, node};
      for (int sp = 1; sp <= n; ++sp) {
        ASSERT_EQ(g.block_count(sp), b.block_count(sp)) << g << " sp " << sp;
        for (int i = 0; i < g.block_count(sp); ++i) {
          EXPECT_EQ(g.block(sp, i), b.block(sp, i)) << g << " sp " << sp;
        }
        if (b.block_count(sp) > 0) {
          for (int rank = 0; rank < sp * b.block_count(sp); ++rank) {
            EXPECT_EQ(g.block_of(rank, sp), b.block_of(rank, sp));
          }
        }
      }
      // The any-size manager offers the same blocks for those sizes.
      const dcp::contiguous_groups any{n, node};
      for (int sp = 1; sp <= n; sp *= 2) {
        ASSERT_EQ(any.block_count(sp), b.block_count(sp)) << any << " sp " << sp;
        for (int i = 0; i < any.block_count(sp); ++i) EXPECT_EQ(any.block(sp, i), b.block(sp, i));
      }
    }
}

TEST(contiguous_groups, refuses_bad_layouts_by_name) {
  EXPECT_DCP_ERROR(dcp::contiguous_groups({0, 8}).validate(), dcp::errc::invalid_argument, "gpus = 0");
  EXPECT_DCP_ERROR(dcp::contiguous_groups({20, 8}).validate(), dcp::errc::invalid_argument, "gpus = 20",
                   "whole nodes");
  EXPECT_DCP_ERROR(dcp::contiguous_groups({12, 6, dcp::group_sizes::powers_of_two}).validate(),
                   dcp::errc::invalid_argument, "gpus_per_node = 6", "power of two");
  EXPECT_DCP_ERROR(dcp::group_sizes_of("odd"), dcp::errc::invalid_argument, "'odd'", "any or buddy");
}

// The ring of a power-of-two sp is the old one (sp over the largest power of two dividing sp and
// the heads); sizes follow the heads.
TEST(contiguous_groups, legal_sizes_follow_the_heads) {
  const auto wan = job(dcp::models::wan2_1_14b(), 64);
  const auto legal = dcp::legal_sp_sizes(wan);
  EXPECT_EQ(legal, (std::vector<int>{1, 2, 4, 5, 8, 10, 20, 40}));
  const auto cog = job(dcp::models::cogvideox_5b(), 48);
  EXPECT_EQ(dcp::legal_sp_sizes(cog), (std::vector<int>{1, 2, 3, 4, 6, 8, 12, 16, 24, 48}));
  const dcp::planning_context ctx{cog, dcp::selective_recompute{}, dcp::contiguous_groups{48, 8}};
  EXPECT_EQ(ctx.sp_sizes(), (std::vector<int>{1, 2, 3, 4, 6, 8, 16, 24, 48}));  // 12 is not whole nodes
  const dcp::planning_context buddy{cog, dcp::selective_recompute{}, dcp::buddy_groups{48, 8}};
  EXPECT_EQ(buddy.sp_sizes(), (std::vector<int>{1, 2, 4, 8, 16}));
  for (int heads : {8, 24, 40, 48, 64})
    for (int sp = 1; sp <= 64; sp *= 2) {
      auto model = dcp::models::llama3_8b();
      model.heads = heads;
      model.hidden = 128 * heads;
      const auto c = job(model, 64);
      int u = 1;
      while (u < sp && sp % (2 * u) == 0 && heads % (2 * u) == 0) u *= 2;
      EXPECT_EQ(dcp::ring_of(c, sp), sp / u) << heads << " heads, sp " << sp;
    }
}

// Every planner, over random seeded batches, on cogvideox-5b x 48 and wan2.1-14b x 64: valid
// plans on the manager's blocks, dcp never slower than on buddy blocks, and sizes that are not
// powers of two present; dynamic_cp uses powers of two only and plans as on buddy blocks.
TEST(contiguous_groups, every_planner_plans_valid_plans_and_dcp_is_never_slower_than_on_buddy) {
  dcp_test::rng r(2202);
  struct case_t {
    dcp::transformer_spec model;
    int gpus;
  };
  const std::vector<case_t> cases{{dcp::models::cogvideox_5b(), 48}, {dcp::models::wan2_1_14b(), 64}};
  int other_sizes = 0, batches = 0;
  for (const auto& k : cases) {
    const auto c = job(k.model, k.gpus);
    const dcp::contiguous_groups any{k.gpus, 8};
    const dcp::buddy_groups buddy{k.gpus, 8};
    const dcp::planning_context on_any{c, dcp::selective_recompute{}, any};
    const dcp::planning_context on_buddy{c, dcp::selective_recompute{}, buddy};
    for (int trial = 0; trial < 12; ++trial, ++batches) {
      // Lengths that buddy's widest group holds, so both managers can plan every batch.
      const auto batch = random_batch(r, c, on_buddy.sp_sizes().back());
      const dcp::plan p = dcp::dcp_planner{}.plan(on_any, batch);
      const auto v = dcp::plan_violations(p, batch, c, any);
      EXPECT_TRUE(v.empty()) << k.model.name << " trial " << trial << ": " << v.front();
      const dcp::plan q = dcp::dcp_planner{}.plan(on_buddy, batch);
      // Never slower, unless already within 0.1% of the bound (where the planner stops looking).
      if (p.efficiency() < 0.999) {
        EXPECT_LE(p.makespan_s, q.makespan_s * (1 + 1e-12)) << k.model.name << " trial " << trial;
      }
      EXPECT_LE(p.joint_lower_bound_s, q.joint_lower_bound_s * (1 + 1e-12));  // more options, lower bound
      dcp::dcp_planner without_inter;
      without_inter.inter = false;
      for (const auto& s : without_inter.plan(on_any, batch).steps) other_sizes += !power_of_two(s.sp());
      const dcp::plan d = dcp::tune(dcp::dynamic_cp_planner{}, on_any, batch).plan(on_any, batch);
      EXPECT_TRUE(dcp::plan_violations(d, batch, c, any).empty());
      for (const auto& s : d.steps) EXPECT_TRUE(power_of_two(s.sp())) << "dynamic_cp sp " << s.sp();
      EXPECT_EQ(d.hash(), dcp::tune(dcp::dynamic_cp_planner{}, on_buddy, batch).plan(on_buddy, batch).hash());
    }
    // Fixed sizes that are not powers of two: bucket and packed on groups of 5 or 6.
    const int odd = k.model.heads == 40 ? 5 : 6;
    const auto batch = random_batch(r, c, odd);
    for (const dcp::plan& p : {dcp::bucket_planner{.sp = odd}.plan(on_any, batch),
                               dcp::packed_planner{.sp = odd}.plan(on_any, batch)}) {
      const auto v = dcp::plan_violations(p, batch, c, any);
      EXPECT_TRUE(v.empty()) << p.method << " sp " << odd << ": " << v.front();
      for (const auto& s : p.steps) EXPECT_EQ(s.sp(), odd);
    }
  }
  EXPECT_GT(other_sizes, 0) << "no plan over " << batches << " batches used a size that is not a power of two";
}

// wan2.1-14b (40 heads) on 64 GPUs: a sequence too long for 8 GPUs runs on 40 of them (5 whole
// nodes); on buddy blocks it fits nowhere and the error names the largest length that fits.
TEST(contiguous_groups, a_sequence_too_long_for_eight_gpus_runs_on_forty) {
  const auto c = job(dcp::models::wan2_1_14b(), 64);
  const std::int64_t at8 = dcp::step_token_capacity(c, 8, c.blocks()) - c.model.text_tokens;
  const std::vector<dcp::sequence> batch{dcp::make_sequence(1, at8 * 3), dcp::make_sequence(2, 4096)};
  const dcp::planning_context on_any{c, dcp::selective_recompute{}, dcp::contiguous_groups{64, 8}};
  const dcp::plan p = dcp::dcp_planner{}.plan(on_any, batch);
  EXPECT_TRUE(dcp::plan_violations(p, batch, c, on_any.groups).empty());
  bool on_forty = false;
  for (const auto& s : p.steps)
    for (const auto& q : s.sequences) on_forty = on_forty || (q.id == 1 && s.sp() == 40 && s.ranks.first == 0);
  EXPECT_TRUE(on_forty);
  const dcp::planning_context on_buddy{c, dcp::selective_recompute{}, dcp::buddy_groups{64, 8}};
  EXPECT_DCP_ERROR(dcp::dcp_planner{}.plan(on_buddy, batch), dcp::errc::infeasible, "sequence 1",
                   "largest length that fits is " + std::to_string(at8 + c.model.text_tokens));
}

// A communicator budget (`budget_group_sizes`, `contiguous_groups::only`): for budgets 0..3 on
// random workloads the chosen sizes are at most the budget, every plan on them is valid and keeps
// every sequence, and no rank needs more communicators than the budget over the run; a budget
// that leaves a sequence on no size is an error naming it.
TEST(contiguous_groups, a_communicator_budget_holds_every_rank_to_it) {
  dcp_test::rng r(2203);
  const auto c = job(dcp::models::cogvideox_5b(), 48);
  const dcp::planning_context all{c, dcp::selective_recompute{}, dcp::contiguous_groups{48, 8}};
  const std::int64_t longest = dcp::step_token_capacity(c, 48, c.blocks()) - c.model.text_tokens;
  for (int budget = 0; budget <= 3; ++budget) {
    std::vector<dcp::sequence> data;
    for (std::int64_t i = 0, n = r.between(200, 600); i < n; ++i)
      data.push_back(dcp::make_sequence(i, r.log_between(256, longest / 2)));
    const dcp::contiguous_groups g = dcp::budget_group_sizes(all, data, budget);
    ASSERT_TRUE(g.only.has_value()) << g;
    EXPECT_LE(static_cast<int>(g.only->size()), budget) << g;
    EXPECT_NO_THROW(g.validate()) << g;
    const dcp::planning_context on{c, dcp::selective_recompute{}, g};
    dcp::sim::run_metrics m;
    for (const auto& batch : dcp::epoch_batches(c, data)) {
      const dcp::plan p = dcp::dcp_planner{}.plan(on, batch);
      const auto v = dcp::plan_violations(p, batch, c, g);
      EXPECT_TRUE(v.empty()) << g << ": " << v.front();
      m.add(p, 0);
    }
    EXPECT_LE(m.communicators_per_rank, budget) << g;
  }
  // wan2.1-14b on 64 GPUs: a sequence too long for 8 GPUs needs 40; with no communicator at all
  // only single GPUs remain (64 is no legal Ulysses size for 40 heads).
  const auto w = job(dcp::models::wan2_1_14b(), 64);
  const std::int64_t at8 = dcp::step_token_capacity(w, 8, w.blocks()) - w.model.text_tokens;
  const std::vector<dcp::sequence> data{dcp::make_sequence(1, at8 * 3), dcp::make_sequence(2, 4096)};
  const dcp::planning_context wan{w, dcp::selective_recompute{}, dcp::contiguous_groups{64, 8}};
  EXPECT_EQ(dcp::budget_group_sizes(wan, data, 1).only, std::optional<std::vector<int>>(std::vector<int>{40}));
  EXPECT_DCP_ERROR(dcp::budget_group_sizes(wan, data, 0), dcp::errc::infeasible,
                   "a budget of 0 communicators per rank cannot hold every sequence");
  EXPECT_DCP_ERROR((dcp::contiguous_groups{64, 8, dcp::group_sizes::any, std::vector<int>{12}}.validate()), dcp::errc::invalid_argument,
                   "group size 12 in 'only'");
}

// The scheduler on 6 local ranks with contiguous_groups in its bundle: every rank plans the same
// plan, and each step's communicator holds its group (3 or 6 ranks among them).
TEST(contiguous_groups, scheduler_runs_groups_of_three_and_six) {
  using bundle = dcp::policies<dcp::contiguous_groups>;
  using sched_t = dcp::scheduler<dcp::transformer_spec, dcp::local_comm, bundle>;
  std::vector<dcp::sequence> batch;
  const std::int64_t lengths[] = {300000, 160000, 120000, 9000, 40000, 2000, 70000, 5000};
  for (std::int64_t i = 0; i < 8; ++i) batch.push_back(dcp::make_sequence(10 + i, lengths[i]));
  std::vector<std::uint64_t> hashes(6);
  std::vector<std::vector<int>> sizes(6);
  dcp::local_world::run(
      6,
      [&](dcp::local_comm& world) {
        sched_t sched(dcp::models::cogvideox_5b(), world, dcp::scheduler_options{}, bundle{});
        EXPECT_EQ(sched.groups().groups(), (dcp::contiguous_groups{6, 8}));
        const dcp::plan p = sched.plan(batch);
        sched.verify(p);
        EXPECT_TRUE(dcp::plan_violations(p, batch, sched.cost(), sched.groups().groups()).empty());
        hashes[static_cast<std::size_t>(world.rank())] = p.hash();
        for (auto& step : sched.steps_for(p)) {
          EXPECT_EQ(step.comm().size(), step.sp());
          int one[1] = {1};
          step.comm().all_reduce(std::span<int>(one), dcp::reduce_op::sum);
          EXPECT_EQ(one[0], step.sp());
          sizes[static_cast<std::size_t>(world.rank())].push_back(step.sp());
        }
      },
      dcp::local_world_options{std::chrono::seconds(60), true});
  for (int r = 1; r < 6; ++r) EXPECT_EQ(hashes[static_cast<std::size_t>(r)], hashes[0]);
  bool odd = false;
  for (const auto& s : sizes) odd = odd || std::any_of(s.begin(), s.end(), [](int sp) { return sp == 3 || sp == 6; });
  EXPECT_TRUE(odd) << "the batch ran no group of 3 or 6 ranks; pick other lengths";
}

}  // namespace
