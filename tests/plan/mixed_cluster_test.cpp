// Mixed clusters (`parallel_layout::nodes`): on random clusters of h100, h200 and a100 nodes every
// planner's plans are valid with each step within its own block's capacity and every sequence
// exactly once; dcp uses the large nodes' memory and the fast nodes' speed, and the bounds hold
// its plans; a plan made blind to the cluster runs out of memory on the small nodes when
// executed; layouts, cluster names and cluster files that are wrong are errors naming the value.

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <set>
#include <span>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include <dcp/comm/local.hpp>
#include <dcp/cost/analytic.hpp>
#include <dcp/cost/cluster_json.hpp>
#include <dcp/cost/device.hpp>
#include <dcp/group/contiguous_groups.hpp>
#include <dcp/plan/bucket_planner.hpp>
#include <dcp/plan/check_plan.hpp>
#include <dcp/plan/dcp_planner.hpp>
#include <dcp/plan/dynamic_cp_planner.hpp>
#include <dcp/plan/packed_planner.hpp>
#include <dcp/plan/planning_context.hpp>
#include <dcp/plan/retime.hpp>
#include <dcp/recompute/selective_recompute.hpp>
#include <dcp/scheduler.hpp>
#include <dcp/sim/calibrated.hpp>
#include <dcp/sim/execute.hpp>
#include <dcp/sim/methods.hpp>
#include <dcp/sim/plan_json.hpp>
#include <dcp/sim/truth.hpp>
#include <dcp/workload/embedded.hpp>
#include <dcp/workload/tuning.hpp>

#include <dcp_test/support.hpp>

namespace {

dcp::analytic_cost on_cluster(const dcp::transformer_spec& model, const std::vector<dcp::device_spec>& nodes) {
  const dcp::device_spec reference = dcp::devices::h200_analytic();
  dcp::parallel_layout l{.gpus = static_cast<int>(nodes.size()) * 8, .gpus_per_node = 8};
  l.nodes = dcp::node_devices(nodes, reference);
  return dcp::make_analytic_cost(model, reference, l);
}

std::vector<dcp::device_spec> random_cluster(dcp_test::rng& r) {
  const std::vector<dcp::device_spec> kinds{dcp::devices::h100_analytic(), dcp::devices::h200_analytic(),
                                            dcp::devices::a100()};
  std::vector<dcp::device_spec> out;
  const int count = static_cast<int>(r.between(2, 6));
  for (int i = 0; i < count; ++i) out.push_back(kinds[static_cast<std::size_t>(r.between(0, 2))]);
  return out;
}

// The longest sequence (model tokens) some block of `groups` holds alone with every block
// checkpointed, each block at its own capacity: the cost model at that capacity everywhere.
std::int64_t longest_held(const dcp::analytic_cost& c, const dcp::contiguous_groups& groups) {
  std::int64_t best = 0;
  for (int sp = 1; sp <= c.gpus(); ++sp)
    for (int i = 0; i < groups.block_count(sp); ++i) {
      const auto at = c.as_uniform({"block", 1, c.capacity_of(groups.block(sp, i))});
      if (dcp::legal_sp(c, sp)) best = std::max(best, dcp::step_token_capacity(at, sp, c.blocks()));
    }
  return best;
}

// 2..80 sequences, log-uniform from 256 tokens to the longest some block holds.
std::vector<dcp::sequence> random_batch(dcp_test::rng& r, const dcp::analytic_cost& c,
                                        const dcp::contiguous_groups& groups) {
  const std::int64_t longest = longest_held(c, groups) - c.model.text_tokens;
  std::vector<dcp::sequence> out;
  const std::int64_t count = r.between(2, 80);
  for (std::int64_t i = 0; i < count; ++i) out.push_back(dcp::make_sequence(i, r.log_between(256, longest)));
  return out;
}

// Each step's memory within its own block's capacity (plan_violations checks it with
// capacity_on), and stated here once more so the law cannot be lost from the checker.
void expect_within_own_capacity(const dcp::plan& p, const dcp::analytic_cost& c, const std::string& where) {
  for (const auto& s : p.steps) EXPECT_LE(s.memory_bytes, c.capacity_of(s.ranks)) << where << ": step on " << s.ranks;
}

TEST(mixed_cluster, every_planner_plans_within_each_blocks_own_capacity) {
  dcp_test::rng r(2301);
  int on_large_beyond_small = 0;
  for (int trial = 0; trial < 40; ++trial) {
    const auto nodes = random_cluster(r);
    const auto c = on_cluster(trial % 2 ? dcp::models::llama3_8b() : dcp::models::cogvideox_5b(), nodes);
    const dcp::contiguous_groups groups{c.gpus(), c.gpus_per_node()};
    const dcp::planning_context ctx{c, dcp::selective_recompute{}, groups};
    const auto batch = random_batch(r, c, groups);
    const std::string where = c.layout().cluster_name() + " trial " + std::to_string(trial);
    dcp::dcp_planner planner;
    planner.on_infeasible = dcp::infeasible_policy::skip;
    const dcp::plan p = planner.plan(ctx, batch);
    const auto v = dcp::plan_violations(p, batch, c, groups);
    EXPECT_TRUE(v.empty()) << where << ": " << v.front();
    expect_within_own_capacity(p, c, where);
    // A sequence is skipped only when no block of any size holds it (the largest blocks can).
    EXPECT_TRUE(p.skipped.empty()) << where;
    for (const auto& s : p.steps) on_large_beyond_small += s.memory_bytes > c.capacity();
    // Speeds come from the layout: the plan records them, and steps last time / slowest speed.
    EXPECT_EQ(p.speeds, c.layout().unit_speeds()) << where;
    EXPECT_LE(p.joint_lower_bound_s, p.makespan_s * (1 + 1e-12)) << where;
    // The ablations: synchronised rounds, and every block checkpointed.
    for (const bool inter : {false, true}) {
      dcp::dcp_planner ablation = planner;
      ablation.inter = inter, ablation.intra = !inter;
      const dcp::plan a = ablation.plan(ctx, batch);
      const auto w = dcp::plan_violations(a, batch, c, groups);
      EXPECT_TRUE(w.empty()) << where << " " << a.method << ": " << w.front();
      expect_within_own_capacity(a, c, where + " " + a.method);
    }
    // Baselines plan on one capacity, the smallest, and their plans are valid on every block.
    // What the smallest nodes' widest power-of-two group holds (dynamic_cp rounds to those).
    std::vector<dcp::sequence> small;
    int widest = 1;
    for (int sp : ctx.sp_sizes())
      if ((sp & (sp - 1)) == 0) widest = sp;
    for (const auto& s : batch)
      if (c.memory(c.load_of(s), widest, c.blocks()) <= c.capacity()) small.push_back(s);
    if (small.empty()) continue;
    for (const dcp::plan& q : {dcp::tune(dcp::bucket_planner{}, ctx, small).plan(ctx, small),
                               dcp::tune(dcp::packed_planner{}, ctx, small).plan(ctx, small),
                               dcp::tune(dcp::dynamic_cp_planner{}, ctx, small).plan(ctx, small)}) {
      const auto w = dcp::plan_violations(q, small, c, groups);
      EXPECT_TRUE(w.empty()) << where << " " << q.method << ": " << w.front();
      for (const auto& s : q.steps) EXPECT_LE(s.memory_bytes, c.capacity()) << where << " " << q.method;
    }
  }
  EXPECT_GT(on_large_beyond_small, 0) << "no dcp step used memory beyond the smallest node's";
}

// Two H100 nodes then two H200 nodes: dcp plans within each GPU's memory and is never slower
// than planning as if every node were an H100 (the blind plan is valid there, at one speed).
TEST(mixed_cluster, knowing_the_memory_is_never_slower_than_the_weakest_node) {
  dcp_test::rng r(2302);
  const auto c = on_cluster(dcp::models::cogvideox_5b(), dcp::devices::cluster("h100-analyticx2,h200-analyticx2"));
  const auto blind = c.as_uniform(c.layout().as_weakest().nodes.front());
  const dcp::contiguous_groups groups{c.gpus(), c.gpus_per_node()};
  const dcp::planning_context ctx{c, dcp::selective_recompute{}, groups};
  const dcp::planning_context blind_ctx{blind, dcp::selective_recompute{}, groups};
  for (int trial = 0; trial < 10; ++trial) {
    std::vector<dcp::sequence> batch;
    for (std::int64_t i = 0, n = r.between(20, 400); i < n; ++i)
      batch.push_back(dcp::make_sequence(i, r.log_between(256, 200000)));
    const dcp::plan p = dcp::dcp_planner{}.plan(ctx, batch);
    const dcp::plan q = dcp::dcp_planner{}.plan(blind_ctx, batch);
    EXPECT_TRUE(dcp::plan_violations(p, batch, c, groups).empty()) << trial;
    EXPECT_TRUE(dcp::plan_violations(q, batch, c, groups).empty()) << trial;  // H100 memory fits everywhere
    // Both price on one clock here (H100 and H200 run at one speed); more memory, more options.
    EXPECT_LE(p.joint_lower_bound_s, q.joint_lower_bound_s * (1 + 1e-12)) << trial;
  }
}

// A planner told the nodes never ends a batch later than itself told only the weakest node: the
// plan made blind and timed on the cluster (`retimed`) is one of its candidates. Timing a plan on
// its own clock changes nothing.
TEST(mixed_cluster, knowing_the_cluster_never_ends_later_than_planning_for_its_weakest_node) {
  dcp_test::rng r(3407);
  int sooner = 0;
  for (int trial = 0; trial < 12; ++trial) {
    const auto c = on_cluster(dcp::models::cogvideox_5b(), random_cluster(r));
    const auto blind = c.as_uniform(c.layout().as_weakest().nodes.front());
    const dcp::contiguous_groups groups{c.gpus(), c.gpus_per_node()};
    std::vector<dcp::sequence> batch;
    for (std::int64_t i = 0, n = r.between(20, 300); i < n; ++i)
      batch.push_back(dcp::make_sequence(i, r.log_between(256, 120000)));
    const dcp::plan p = dcp::dcp_planner{}.plan(dcp::planning_context{c, dcp::selective_recompute{}, groups}, batch);
    const dcp::plan q = dcp::retimed(
        dcp::dcp_planner{}.plan(dcp::planning_context{blind, dcp::selective_recompute{}, groups}, batch), c, {});
    const auto v = dcp::plan_violations(p, batch, c, groups);
    EXPECT_TRUE(v.empty()) << trial << ": " << v.front();
    const auto w = dcp::plan_violations(q, batch, c, groups);
    EXPECT_TRUE(w.empty()) << trial << ": " << w.front();
    EXPECT_LE(p.makespan_s, q.makespan_s * (1 + 1e-12)) << trial;
    sooner += p.makespan_s < q.makespan_s * (1 - 1e-9);
    const dcp::plan same = dcp::retimed(p, c, {});
    EXPECT_EQ(same.makespan_s, p.makespan_s) << trial;
    for (std::size_t i = 0; i < p.steps.size(); ++i) ASSERT_EQ(same.steps[i].start_s, p.steps[i].start_s) << trial;
  }
  EXPECT_GT(sooner, 0) << "knowing the nodes should usually beat the blind plan outright";
}

// A100 and H200 nodes: the A100's steps last time / (312 / 989); dcp puts fewer sequences there.
TEST(mixed_cluster, slow_nodes_get_less_work) {
  const auto c = on_cluster(dcp::models::llama3_8b(), dcp::devices::cluster("a100x1,h200-analyticx1"));
  EXPECT_NEAR(c.layout().speed_of({0, 1}), 312.0 / 989.0, 1e-12);
  EXPECT_EQ(c.layout().speed_of({0, 16}), c.layout().speed_of({0, 1}));  // a gang step: its slowest member
  EXPECT_EQ(c.layout().speed_of({8, 8}), 1.0);
  std::vector<dcp::sequence> batch;
  for (std::int64_t i = 0; i < 400; ++i) batch.push_back(dcp::make_sequence(i, 2048 + 97 * (i % 13)));
  const dcp::planning_context ctx{c, dcp::selective_recompute{}, dcp::contiguous_groups{16, 8}};
  const dcp::plan p = dcp::dcp_planner{}.plan(ctx, batch);
  EXPECT_TRUE(dcp::plan_violations(p, batch, c, ctx.groups).empty());
  std::int64_t on_a100 = 0, on_h200 = 0;
  for (const auto& s : p.steps)
    (s.ranks.first < 8 ? on_a100 : on_h200) += static_cast<std::int64_t>(s.sequences.size());
  EXPECT_GT(on_h200, 2 * on_a100) << on_a100 << " on the A100 node, " << on_h200 << " on the H200 node";
  EXPECT_GT(p.efficiency(), 0.9);
}

// The longest single-GPU sequences go where they end first: with every GPU idle, that is an H200
// (an A100 would take 989 / 312 as long), so they never set the makespan from an A100.
TEST(mixed_cluster, the_longest_single_gpu_sequences_run_where_they_end_first) {
  dcp_test::rng r(2305);
  const auto c = on_cluster(dcp::models::llama3_8b(), dcp::devices::cluster("a100x1,h200-analyticx1"));
  const dcp::planning_context ctx{c, dcp::selective_recompute{}, dcp::contiguous_groups{16, 8}};
  for (int trial = 0; trial < 6; ++trial) {
    std::vector<dcp::sequence> batch;
    const std::int64_t longest = r.between(8, 16), n = longest + r.between(100, 400);
    for (std::int64_t i = 0; i < n; ++i)
      batch.push_back(dcp::make_sequence(i, i < longest ? r.between(6000, 9000) : r.log_between(256, 2048)));
    const dcp::plan p = dcp::dcp_planner{}.plan(ctx, batch);
    ASSERT_TRUE(dcp::plan_violations(p, batch, c, ctx.groups).empty()) << trial;
    for (const auto& s : p.steps) {
      if (s.sp() != 1 || s.ranks.first >= 8) continue;
      for (const auto& q : s.sequences) {
        EXPECT_GE(q.id, longest) << "trial " << trial << ": a long sequence on an A100, rank " << s.ranks.first;
      }
    }
    EXPECT_GT(p.efficiency(), 0.85) << trial;
  }
}

// The executor charges every GPU against its own capacity: a plan made as if every node were an
// H200 runs out of memory on the H100 nodes, and only there.
TEST(mixed_cluster, the_executor_charges_each_gpu_against_its_own_capacity) {
  const auto c = on_cluster(dcp::models::cogvideox_5b(), dcp::devices::cluster("h100-analyticx1,h200-analyticx1"));
  const auto as_h200 = c.as_uniform(c.layout().nodes.back());
  std::vector<dcp::sequence> batch;
  for (std::int64_t i = 0; i < 64; ++i) batch.push_back(dcp::make_sequence(i, 30000 + 1000 * i));
  const dcp::planning_context ctx{as_h200, dcp::selective_recompute{}, dcp::contiguous_groups{16, 8}};
  const dcp::plan p = dcp::dcp_planner{}.plan(ctx, batch);
  const dcp::sim::truth<dcp::analytic_cost> cluster{c, {}, 0.0, 0};
  const auto e = dcp::sim::execute(p, cluster);
  EXPECT_GT(e.oom_steps, 0);
  for (std::size_t i = 0; i < p.steps.size(); ++i) {
    const bool over = p.steps[i].memory_bytes > c.capacity_of(p.steps[i].ranks);
    EXPECT_EQ(e.oom[i] != 0, over) << "step " << i << " on " << p.steps[i].ranks;
    if (e.oom[i]) {
      EXPECT_LT(p.steps[i].ranks.first, 8) << "an H200 GPU was charged an H100's capacity";
    }
  }
  // The same plan checked against the cluster names a step over its block's capacity.
  const auto v = dcp::plan_violations(p, batch, c);
  ASSERT_FALSE(v.empty());
  EXPECT_NE(v.front().find("over capacity"), std::string::npos) << v.front();
}

// Plan JSON keeps the nodes, and a plan read back replays on the same cluster's layout.
TEST(mixed_cluster, plan_json_records_the_nodes) {
  const auto c = on_cluster(dcp::models::llama3_8b(), dcp::devices::cluster("a100x1,h100-analyticx1,h200-analyticx1"));
  std::vector<dcp::sequence> batch;
  for (std::int64_t i = 0; i < 40; ++i) batch.push_back(dcp::make_sequence(i, 1000 + 3000 * i));
  const dcp::plan p = dcp::dcp_planner{}.plan(
      dcp::planning_context{c, dcp::selective_recompute{}, dcp::contiguous_groups{24, 8}}, batch);
  std::stringstream json;
  json << dcp::sim::plan_json(c, std::span<const dcp::plan>(&p, 1)).dump();
  const auto doc = dcp::sim::read_plan_json(json, "mixed");
  EXPECT_EQ(doc.layout, c.layout());
  ASSERT_EQ(doc.plans.size(), 1u);
  EXPECT_EQ(doc.plans.front().speeds, p.speeds);
  EXPECT_EQ(doc.plans.front().hash(), p.hash());
}

// The scheduler built from scheduler_options::cluster on 16 local ranks (an A100 node, an H200
// node): every rank plans the same plan, timed at the nodes' speeds and within each GPU's memory.
TEST(mixed_cluster, the_scheduler_plans_on_the_options_cluster) {
  std::vector<dcp::sequence> batch;
  for (std::int64_t i = 0; i < 48; ++i) batch.push_back(dcp::make_sequence(i, 4000 + 9000 * (i % 7)));
  std::vector<std::uint64_t> hashes(16);
  dcp::scheduler_options options;
  options.cluster = dcp::devices::cluster("a100x1,h200-analyticx1");
  dcp::local_world::run(
      16,
      [&](dcp::local_comm& world) {
        dcp::scheduler sched(dcp::models::llama3_8b(), world, options);
        const auto& cost = sched.cost();
        EXPECT_EQ(cost.layout().cluster_name(), "a100x1,h200-analyticx1");
        const dcp::plan p = sched.plan(batch);
        sched.verify(p);
        EXPECT_TRUE(dcp::plan_violations(p, batch, cost).empty());
        EXPECT_EQ(p.speeds, cost.layout().unit_speeds());
        hashes[static_cast<std::size_t>(world.rank())] = p.hash();
      },
      dcp::local_world_options{std::chrono::seconds(60), true});
  for (int r = 1; r < 16; ++r) EXPECT_EQ(hashes[static_cast<std::size_t>(r)], hashes[0]);
}

// Calibration on an A100 node and an H200 node whose true clock runs 20% slower than the model:
// measured times are brought to the reference clock by the nodes' speeds, so no GPU is taken for
// a straggler (every plan's speeds stay the nodes'), no step runs out of its GPUs' memory, and
// the calibrated plans reach the oracle's throughput over the second half.
TEST(mixed_cluster, calibration_fits_one_clock_and_takes_no_node_for_a_straggler) {
  const auto c = on_cluster(dcp::models::llama3_8b(), dcp::devices::cluster("a100x1,h200-analyticx1"));
  auto data = dcp::workloads::make("text-longtail", 7);
  data.resize(3000);
  const auto batches = dcp::epoch_batches(c, data, 1 << 21, 7);
  ASSERT_GE(batches.size(), 6u);
  const auto truth = dcp::sim::make_truth(dcp::sim::parse_truth_spec("compute=1.2"), c, 7);
  dcp::sim::options opt;
  opt.keep_plans = true;
  const std::span<const std::vector<dcp::sequence>> all(batches);
  const auto cal = dcp::sim::simulate_calibrated(c, all, truth, {}, {}, opt);
  const auto oracle = dcp::sim::run_method("oracle", c, std::span<const dcp::sequence>(data), all, {}, truth, opt);
  const std::size_t n = batches.size();
  for (std::size_t i = 0; i < n; ++i) EXPECT_EQ(cal.plans[i].speeds, c.layout().unit_speeds()) << "batch " << i;
  EXPECT_EQ(dcp::sim::oom_steps(std::span<const dcp::plan>(cal.executed), truth.model, 0, n), 0);
  const double ratio = dcp::sim::tokens_per_s(cal.executed, n / 2, n) / dcp::sim::tokens_per_s(oracle.executed, n / 2, n);
  EXPECT_GT(ratio, 0.97);
}

// Across section 4's clock and the kernel clock a node's speed is its GEMM peak's ratio; on one
// clock its best GEMM throughput's.
TEST(mixed_cluster, node_speeds_compare_like_with_like) {
  EXPECT_NEAR(dcp::unit_device_of(dcp::devices::a100(), dcp::devices::h200()).speed, 312.0 / 989.0, 1e-12);
  EXPECT_NEAR(dcp::unit_device_of(dcp::devices::a100(), dcp::devices::h200_analytic()).speed, 312.0 / 989.0, 1e-12);
  EXPECT_EQ(dcp::unit_device_of(dcp::devices::h100(), dcp::devices::h200()).speed, 1.0);
  EXPECT_EQ(dcp::unit_device_of(dcp::devices::h100(), dcp::devices::h200()).capacity, dcp::devices::h100().capacity());
}

TEST(mixed_cluster, bad_layouts_names_and_files_are_errors_naming_the_value) {
  dcp::parallel_layout l{.gpus = 16, .gpus_per_node = 8};
  l.nodes = {{"h100", 1, 72e9}};
  EXPECT_DCP_ERROR(l.validate(), dcp::errc::invalid_argument, "1 node devices for 2 nodes");
  l.nodes = {{"h100", 1, 72e9}, {"h200", 0, 126e9}};
  EXPECT_DCP_ERROR(l.validate(), dcp::errc::invalid_argument, "node 1 ('h200'): speed = 0");
  EXPECT_DCP_ERROR(dcp::devices::cluster("h100x0"), dcp::errc::invalid_argument, "cluster entry 'h100x0'");
  EXPECT_DCP_ERROR(dcp::devices::cluster("h100x2,v100x2"), dcp::errc::invalid_argument, "unknown device preset 'v100'");
  EXPECT_EQ(dcp::devices::cluster("h100x2,h200").size(), 3u);
  std::stringstream unknown(R"({"format": "dcp.cluster/v1", "nodes": [{"device": "h100", "count": 2, "hbm": 1}]})");
  EXPECT_DCP_ERROR(dcp::read_cluster_json(unknown), dcp::errc::parse_error, "unknown key \"hbm\"");
  std::stringstream degraded(
      R"({"format": "dcp.cluster/v1", "nodes": [{"device": "h200-analytic", "count": 1, "mem_bytes": 1.0e11}, {"device": "h200-analytic"}]})");
  const auto nodes = dcp::read_cluster_json(degraded);
  ASSERT_EQ(nodes.size(), 2u);
  EXPECT_EQ(nodes[0].mem_bytes, 1.0e11);
  EXPECT_EQ(nodes[1], dcp::devices::h200_analytic());
  const auto c = on_cluster(dcp::models::llama3_8b(), nodes);
  EXPECT_EQ(c.capacity(), 1.0e11 * 0.9);
  EXPECT_EQ(c.capacity_of({8, 8}), dcp::devices::h200_analytic().capacity());
  EXPECT_EQ(c.layout().cluster_name(), "h200-analyticx1,h200-analyticx1");
}

}  // namespace
