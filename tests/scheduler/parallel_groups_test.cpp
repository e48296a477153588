// The scheduler's TP, EP and data-parallel communicators and its steps' Ulysses and ring groups
// over TP units, on local ranks (threads), for random layouts (N, G, tp, ep) from a fixed seed.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cstdint>
#include <iostream>
#include <mutex>
#include <random>
#include <string>
#include <vector>

#include <dcp/comm/local.hpp>

#include "parallel_groups_check.hpp"

namespace {

TEST(parallel_groups, partition_the_world_as_designed_on_random_layouts) {
  constexpr std::uint64_t seed = 20261130;
  std::mt19937_64 rng(seed);
  std::vector<dcp_test::layout_case> cases = {{8, 8, 2, 2}, {16, 4, 4, 2}, {4, 8, 1, 4}};
  auto pick = [&](int hi) { return 1 << std::uniform_int_distribution<int>(0, hi)(rng); };
  while (cases.size() < 10) {
    dcp_test::layout_case c;
    c.gpus_per_node = pick(3);  // 1..8
    c.gpus = pick(4);           // 1..16
    if (c.gpus > c.gpus_per_node && c.gpus % c.gpus_per_node != 0) continue;
    // Powers of two: tp up to min(G, N) divides both, ep up to the units divides them.
    c.tp = pick(std::countr_zero(unsigned(std::min(c.gpus, c.gpus_per_node))));
    c.ep = pick(std::countr_zero(unsigned(c.gpus / c.tp)));
    cases.push_back(c);
  }
  for (std::size_t i = 0; i < cases.size(); ++i) {
    const auto& c = cases[i];
    SCOPED_TRACE(::testing::Message() << "case " << i << ": " << c << ", seed " << seed);
    std::cout << "case " << i << ": " << c << ", seed " << seed << "\n";
    std::mutex m;
    std::vector<std::string> bad;
    dcp::local_world::run(
        c.gpus,
        [&](dcp::local_comm& world) {
          const auto mine = dcp_test::check_parallel_groups(world, c, seed + i);
          const std::lock_guard lock(m);
          bad.insert(bad.end(), mine.begin(), mine.end());
        },
        dcp::local_world_options{std::chrono::seconds(30), true});
    for (const auto& b : bad) ADD_FAILURE() << b;
  }
}

// A real plan of a tp = 2 job on 8 local ranks: the scheduler plans 4 units, every rank agrees,
// and every GPU of a step's units runs it with a communicator of all its sp tp GPUs.
TEST(parallel_groups, a_tp_plan_runs_on_every_gpu_of_its_units) {
  std::vector<int> steps_run(8, 0);
  std::vector<std::size_t> expected(8, 0);
  dcp::local_world::run(8, [&](dcp::local_comm& world) {
    dcp::device_spec dev = dcp::devices::h200_analytic();
    dcp::scheduler_options opt;
    opt.device = dev;
    const auto model = dcp_test::tiny_moe();
    dcp::scheduler<dcp::transformer_spec, dcp::local_comm> sched(
        model, world, dcp::make_analytic_cost(model, dev, {.gpus = 8, .gpus_per_node = dev.gpus_per_node, .tp = 2, .ep = 2}), opt);
    std::vector<dcp::sequence> batch;
    for (int i = 0; i < 12; ++i) batch.push_back(dcp::make_sequence(i, 1000 + 7000 * (i % 5)));
    const auto p = sched.plan(batch);
    sched.verify(p);
    EXPECT_EQ(p.layout.tp, 2);
    EXPECT_EQ(p.gpus, 4);
    const auto steps = sched.steps_for(p);
    expected[static_cast<std::size_t>(world.rank())] = p.steps_of(world.rank() / 2).size();
    for (const auto& s : steps) {
      EXPECT_EQ(s.comm().size(), s.sp() * 2);
      EXPECT_EQ(s.comm().rank(), world.rank() - s.gpus().first);
      EXPECT_EQ(s.ulysses_comm().size(), s.ulysses());
      ++steps_run[static_cast<std::size_t>(world.rank())];
    }
  });
  for (std::size_t g = 0; g < 8; ++g) {
    EXPECT_GT(steps_run[g], 0) << "GPU " << g;
    EXPECT_EQ(static_cast<std::size_t>(steps_run[g]), expected[g]) << "GPU " << g;
    EXPECT_EQ(steps_run[g], steps_run[g ^ 1]) << "the two GPUs of unit " << g / 2 << " run the same steps";
  }
}

TEST(parallel_groups, ep_is_fixed_for_the_run_and_a_plan_of_another_tp_is_refused) {
  dcp::local_world::run(4, [](dcp::local_comm& world) {
    dcp::device_spec dev = dcp::devices::h200_analytic();
    dev.gpus_per_node = 4;
    dcp::scheduler_options opt;
    opt.device = dev;
    const auto model = dcp_test::tiny_moe();
    dcp::scheduler<dcp::transformer_spec, dcp::local_comm> sched(
        model, world, dcp::make_analytic_cost(model, dev, {.gpus = 4, .gpus_per_node = dev.gpus_per_node, .tp = 2}), opt);
    EXPECT_EQ(sched.tp(), 2);
    EXPECT_EQ(sched.tp_group().size(), 2);
    dcp::plan p;
    p.gpus = 4, p.layout.tp = 1;  // a tp = 1 plan of 4 GPUs
    try {
      (void)sched.steps_for(p);
      ADD_FAILURE() << "a plan of another tp ran";
    } catch (const dcp::error& e) {
      EXPECT_EQ(e.code(), dcp::errc::mismatch);
      EXPECT_NE(std::string(e.what()).find("with tp = 2"), std::string::npos) << e.what();
    }
    // A cost model of the wrong size names units.
    try {
      dcp::scheduler<dcp::transformer_spec, dcp::local_comm> wrong(
          model, world, dcp::make_analytic_cost(model, dev, {.gpus = 8, .gpus_per_node = dev.gpus_per_node, .tp = 2}), opt);
      ADD_FAILURE() << "a cost model of 8 GPUs ran on 4";
    } catch (const dcp::error& e) {
      EXPECT_NE(std::string(e.what()).find("4 units of tp = 2 GPUs"), std::string::npos) << e.what();
    }
  });
}

}  // namespace
