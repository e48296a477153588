// The `groups` slot with user-written group managers: every planner places every step on a
// block the manager offers, in the manager's order, and the manager's choice shows in the plans.
//   - `node_local_groups` offers no block wider than a node (sequence parallelism inside one
//     node, as the paper's implementation): no plan ever spans two nodes, while buddy plans of
//     the same batches do.
//   - `node_interleaved_groups` offers the buddy blocks but lists them round-robin over the
//     nodes: the static baselines deal each iteration's micro-batches to the first blocks in that
//     order, so a part-filled iteration spreads over the nodes.
// Plans stay valid (`plan_violations` with the manager: exactly once, memory, offered blocks),
// the scheduler runs them end to end on `local_comm`, and a manager that breaks the laws or
// does not fit the job is refused with a `dcp::error` naming the values.
#include <chrono>
#include <cstdint>
#include <ostream>
#include <set>
#include <span>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include <dcp/comm/local.hpp>
#include <dcp/cost/analytic.hpp>
#include <dcp/error.hpp>
#include <dcp/group/check_groups.hpp>
#include <dcp/plan/bucket_planner.hpp>
#include <dcp/plan/check_plan.hpp>
#include <dcp/plan/dcp_planner.hpp>
#include <dcp/plan/dynamic_cp_planner.hpp>
#include <dcp/plan/packed_planner.hpp>
#include <dcp/plan/planning_context.hpp>
#include <dcp/recompute/selective_recompute.hpp>
#include <dcp/scheduler.hpp>
#include <dcp/sim/execute.hpp>

#include <dcp_test/node_local_groups.hpp>
#include <dcp_test/ready.hpp>
#include <dcp_test/support.hpp>

namespace {

using dcp_test::node_local_groups;

// The buddy blocks, blocks no wider than a node listed round-robin over the nodes: block i of
// size sp is block i / nodes of node i % nodes.
struct node_interleaved_groups {
  using policy_concept = dcp::group_manager_tag;
  int world = 1;
  int node_size = 8;

  int gpus() const noexcept { return world; }
  int gpus_per_node() const noexcept { return node_size; }
  void validate() const {
    dcp::buddy_groups{world, node_size}.validate();
    dcp::check(world % node_size == 0, dcp::errc::invalid_argument, [] { return std::string("whole nodes only"); });
  }
  int block_count(int sp) const noexcept { return sp > 0 && sp <= world && (sp & (sp - 1)) == 0 ? world / sp : 0; }
  dcp::rank_block block(int sp, int i) const noexcept {
    if (sp > node_size) return {i * sp, sp};
    const int nodes = world / node_size;
    return {i % nodes * node_size + i / nodes * sp, sp};
  }
  dcp::rank_block block_of(int rank, int sp) const noexcept { return {rank / sp * sp, sp}; }

  friend bool operator==(const node_interleaved_groups&, const node_interleaved_groups&) = default;
  friend std::ostream& operator<<(std::ostream& os, const node_interleaved_groups& g) {
    return os << "node_interleaved_groups{N=" << g.world << ", G=" << g.node_size << "}";
  }
};
static_assert(dcp::group_manager<node_interleaved_groups>);

// Breaks the alignment law: its blocks of 2 start at every rank.
struct sliding_groups {
  using policy_concept = dcp::group_manager_tag;
  int world = 1;
  int node_size = 8;

  int gpus() const noexcept { return world; }
  int gpus_per_node() const noexcept { return node_size; }
  void validate() const {}
  int block_count(int sp) const noexcept { return sp > 0 && sp <= world && (sp & (sp - 1)) == 0 ? world / sp : 0; }
  dcp::rank_block block(int sp, int i) const noexcept {
    return sp == 2 ? dcp::rank_block{i, 2} : dcp::rank_block{i * sp, sp};
  }
  dcp::rank_block block_of(int rank, int sp) const noexcept { return {rank / sp * sp, sp}; }

  friend bool operator==(const sliding_groups&, const sliding_groups&) = default;
  friend std::ostream& operator<<(std::ostream& os, const sliding_groups&) { return os << "sliding_groups"; }
};

// 16 GPUs in nodes of 4: long sequences want groups wider than a node.
dcp::analytic_cost job(int gpus, int per_node) {
  dcp::device_spec d = dcp::devices::h200_analytic();
  d.gpus_per_node = per_node;
  return dcp::make_analytic_cost(dcp::models::llama3_8b(), d, gpus);
}

// 2..40 sequences, log-uniform from 256 tokens to the longest that fits `sp` GPUs (default: one
// node) with every block checkpointed (so a node-local plan exists for every batch).
std::vector<dcp::sequence> random_batch(dcp_test::rng& r, const dcp::analytic_cost& c, int sp = 0) {
  const std::int64_t longest = dcp::step_token_capacity(c, sp > 0 ? sp : c.gpus_per_node(), c.blocks());
  std::vector<dcp::sequence> out;
  const std::int64_t count = r.between(2, 40);
  for (std::int64_t i = 0; i < count; ++i) out.push_back(dcp::make_sequence(i, r.log_between(256, longest)));
  return out;
}

// Whether `b` is `groups.block(b.size, i)` for some i (searched, not derived).
template <class G>
bool offered(const G& groups, dcp::rank_block b) {
  for (int i = 0; i < groups.block_count(b.size); ++i)
    if (groups.block(b.size, i) == b) return true;
  return false;
}

bool spans_nodes(dcp::rank_block b, int per_node) { return b.first / per_node != (b.end() - 1) / per_node; }

TEST(group_manager, user_managers_keep_the_laws_and_a_sliding_one_is_named) {
  EXPECT_TRUE(dcp::group_law_violations(node_local_groups{16, 4}).empty());
  EXPECT_TRUE(dcp::group_law_violations(node_interleaved_groups{16, 4}).empty());
  EXPECT_TRUE(dcp::group_law_violations(dcp::buddy_groups{24, 8}).empty());
  const auto v = dcp::group_law_violations(sliding_groups{8, 4});
  ASSERT_FALSE(v.empty());
  EXPECT_NE(v.front().find("block(2, 1) = [1, 3)"), std::string::npos) << v.front();
  EXPECT_DCP_ERROR(dcp::check_group_laws(sliding_groups{8, 4}, "test"), dcp::errc::invalid_argument,
                   "test: the group manager breaks a group_manager law", "block(2, 1) = [1, 3)");
}

// Every planner, over random seeded batches: valid plans on the node-local manager's blocks,
// none across nodes; the same batches planned on buddy blocks do cross nodes.
TEST(group_manager, node_local_manager_keeps_every_planner_inside_a_node) {
  dcp_test::rng r(20261130);
  const auto c = job(16, 4);
  const node_local_groups local{16, 4};
  const dcp::planning_context ctx{c, dcp::selective_recompute{}, local};
  int buddy_cross = 0, batches = 0;
  for (int trial = 0; trial < 30; ++trial) {
    const auto batch = random_batch(r, c);
    SCOPED_TRACE(::testing::Message() << "trial " << trial << " with " << batch.size() << " sequences");
    auto check = [&](const auto& planner) {
      const dcp::plan p = dcp_test::ready_for(planner, ctx, batch).plan(ctx, batch);
      const auto v = dcp::plan_violations(p, batch, c, local);
      EXPECT_TRUE(v.empty()) << planner.name() << ": " << (v.empty() ? "" : v.front());
      for (const auto& s : p.steps) {
        EXPECT_TRUE(offered(local, s.ranks)) << planner.name() << " step on " << s.ranks;
        EXPECT_FALSE(spans_nodes(s.ranks, 4)) << planner.name() << " step on " << s.ranks;
      }
      EXPECT_TRUE(p.skipped.empty()) << planner.name();
    };
    dcp::dcp_planner no_inter;
    no_inter.inter = false;
    check(dcp::dcp_planner{});
    check(no_inter);
    check(dcp::dynamic_cp_planner{});
    check(dcp::packed_planner{});
    check(dcp::bucket_planner{});
    // The buddy plan of the same batch: valid there, and where it crosses nodes, a block the
    // node-local manager does not offer, which plan_violations names.
    const dcp::plan buddy = dcp::dcp_planner{}.plan(c, batch);
    bool crosses = false;
    for (const auto& s : buddy.steps) crosses = crosses || spans_nodes(s.ranks, 4);
    if (crosses) {
      ++buddy_cross;
      const auto v = dcp::plan_violations(buddy, batch, c, local);
      ASSERT_FALSE(v.empty());
      EXPECT_NE(v.front().find("not a block the group manager offers"), std::string::npos) << v.front();
    }
    ++batches;
  }
  EXPECT_GT(buddy_cross, 0) << "no buddy plan of " << batches << " batches crossed a node: the test shows nothing";
}

// With per-GPU speeds the bound on a manager's blocks takes each size's fastest offered block and
// leaves out sizes it offers none of: node-local blocks are a subset of the buddy ones, so their
// bound is never below buddy's (and above it somewhere), and no planner's plan on them, run at
// those speeds, ends before it. The dcp planner records exactly that bound.
TEST(group_manager, speed_aware_bound_takes_the_managers_blocks) {
  dcp_test::rng r(20261201);
  const auto c = job(16, 4);
  const node_local_groups local{16, 4};
  const dcp::buddy_groups buddy{16, 4};
  const dcp::planning_context ctx{c, dcp::selective_recompute{}, local};
  int above = 0;
  for (int trial = 0; trial < 12; ++trial) {
    std::vector<double> speeds(16);
    for (double& v : speeds) v = 0.5 + 0.5 * r.unit();
    const auto batch = random_batch(r, c);
    SCOPED_TRACE(::testing::Message() << "trial " << trial << " with " << batch.size() << " sequences");
    const auto on_local = dcp::lower_bounds(c, local, batch, speeds);
    const auto on_buddy = dcp::lower_bounds(c, buddy, batch, speeds);
    EXPECT_EQ(on_buddy, dcp::lower_bounds(c, batch, speeds));  // buddy is the manager-less bound
    EXPECT_GE(on_local.simple_s, on_buddy.simple_s);
    EXPECT_GE(on_local.joint_s, on_buddy.joint_s);
    above += on_local.joint_s > on_buddy.joint_s * (1 + 1e-9);
    const dcp::sim::truth<dcp::analytic_cost> t{c, speeds, 0.0, 0};
    auto check = [&](const auto& planner) {
      const dcp::plan p = dcp_test::ready_for(planner, ctx, batch).plan(ctx, batch);
      const double makespan = dcp::sim::execute(p, t).executed.makespan_s;
      EXPECT_GE(makespan, on_local.joint_s * (1 - 1e-9)) << planner.name();
    };
    dcp::dcp_planner fast;
    fast.speeds = speeds;
    dcp::dcp_planner no_inter = fast, no_intra = fast;
    no_inter.inter = false;
    no_intra.intra = false;
    check(fast);
    check(no_inter);
    check(no_intra);
    check(dcp::dcp_planner{});
    check(dcp::dynamic_cp_planner{});
    check(dcp::packed_planner{});
    check(dcp::bucket_planner{});
    const dcp::plan p = fast.plan(ctx, batch);
    EXPECT_DOUBLE_EQ(p.joint_lower_bound_s, on_local.joint_s);
    EXPECT_DOUBLE_EQ(p.lower_bound_s, on_local.simple_s);
  }
  EXPECT_GT(above, 0) << "the node-local bound never rose above buddy's: the test shows nothing";
}

// The static baselines deal iteration j's micro-batches to blocks 0, 1, ... in the manager's
// order; the dcp planner's plans on the interleaved order differ from buddy ones and stay valid.
TEST(group_manager, block_order_is_the_planners_order) {
  dcp_test::rng r(7);
  const auto c = job(16, 4);
  const node_interleaved_groups spread{16, 4};
  const dcp::planning_context ctx{c, dcp::selective_recompute{}, spread};
  int differ = 0, spread_rounds = 0;
  for (int trial = 0; trial < 20; ++trial) {
    const auto batch = random_batch(r, c, 1);  // packed runs it at sp = 1
    SCOPED_TRACE(::testing::Message() << "trial " << trial);
    const dcp::plan p = dcp::dcp_planner{}.plan(ctx, batch);
    const auto v = dcp::plan_violations(p, batch, c, spread);
    EXPECT_TRUE(v.empty()) << (v.empty() ? "" : v.front());
    const dcp::plan buddy = dcp::dcp_planner{}.plan(c, batch);
    EXPECT_TRUE(dcp::plan_violations(buddy, batch, c, spread).empty());  // same blocks, other order
    differ += !(p == buddy);

    dcp::packed_planner packed;
    packed.sp = 1;
    const dcp::plan q = packed.plan(ctx, batch);
    EXPECT_TRUE(dcp::plan_violations(q, batch, c, spread).empty());
    std::vector<std::vector<dcp::rank_block>> rounds;
    for (const auto& s : q.steps) {
      if (static_cast<std::size_t>(s.round) >= rounds.size()) rounds.resize(static_cast<std::size_t>(s.round) + 1);
      rounds[static_cast<std::size_t>(s.round)].push_back(s.ranks);
    }
    for (const auto& used : rounds) {
      std::set<int> want, got;
      for (std::size_t j = 0; j < used.size(); ++j) want.insert(spread.block(1, static_cast<int>(j)).first);
      for (const auto& b : used) got.insert(b.first);
      EXPECT_EQ(got, want);
      if (used.size() > 1 && used.size() <= 4) {  // a part-filled iteration: one GPU per node
        ++spread_rounds;
        std::set<int> nodes;
        for (const auto& b : used) nodes.insert(b.first / 4);
        EXPECT_EQ(nodes.size(), used.size());
      }
    }
  }
  EXPECT_GT(differ, 0) << "the interleaved order never changed a dcp plan";
  EXPECT_GT(spread_rounds, 0) << "no part-filled iteration to show the order on";
}

TEST(group_manager, buddy_context_gives_the_plans_of_the_cost_only_call) {
  dcp_test::rng r(11);
  const auto c = job(16, 4);
  for (int trial = 0; trial < 5; ++trial) {
    const auto batch = random_batch(r, c);
    const dcp::planning_context ctx{c, dcp::selective_recompute{}, dcp::buddy_groups{16, 4}};
    EXPECT_EQ(dcp::dcp_planner{}.plan(ctx, batch).hash(), dcp::dcp_planner{}.plan(c, batch).hash());
    EXPECT_EQ(dcp::tune(dcp::dynamic_cp_planner{}, ctx, batch).plan(ctx, batch).hash(), dcp::tune(dcp::dynamic_cp_planner{}, c, batch).plan(c, batch).hash());
  }
}

// With tp > 1 a manager lays out units (TP groups): 16 GPUs at tp = 2 in nodes of 4 are 8 units,
// 2 per node. Buddy blocks of units give the cost-only plans; the node-local manager keeps every
// step inside a node's 2 units; a manager of GPUs instead of units is refused.
TEST(group_manager, managers_lay_out_tp_units) {
  dcp_test::rng r(23);
  dcp::device_spec d = dcp::devices::h200_analytic();
  d.gpus_per_node = 4;
  const auto c = dcp::make_analytic_cost(dcp::models::llama3_8b(), d, {.gpus = 16, .gpus_per_node = 4, .tp = 2});
  ASSERT_EQ(c.gpus(), 8);
  ASSERT_EQ(c.gpus_per_node(), 2);
  const node_local_groups local{8, 2};
  for (int trial = 0; trial < 5; ++trial) {
    const auto batch = random_batch(r, c);
    const dcp::planning_context buddy{c, dcp::selective_recompute{}, dcp::buddy_groups{8, 2}};
    EXPECT_EQ(dcp::dcp_planner{}.plan(buddy, batch), dcp::dcp_planner{}.plan(c, batch));
    const dcp::plan p = dcp::dcp_planner{}.plan(dcp::planning_context{c, dcp::selective_recompute{}, local}, batch);
    const auto v = dcp::plan_violations(p, batch, c, local);
    EXPECT_TRUE(v.empty()) << (v.empty() ? "" : v.front());
    for (const auto& s : p.steps) EXPECT_FALSE(spans_nodes(s.ranks, 2)) << s.ranks;
  }
  const dcp::planning_context gpus{c, dcp::selective_recompute{}, dcp::buddy_groups{16, 4}};
  EXPECT_DCP_ERROR(dcp::dcp_planner{}.plan(gpus, std::vector<dcp::sequence>{dcp::make_sequence(1, 4096)}),
                   dcp::errc::invalid_argument, "lays out 16 units", "plans 8 units", "TP groups when tp > 1");
}

TEST(group_manager, a_manager_for_another_job_is_refused_by_name) {
  const auto c = job(16, 4);
  const std::vector<dcp::sequence> batch{dcp::make_sequence(1, 4096)};
  const dcp::planning_context wrong_n{c, dcp::selective_recompute{}, node_local_groups{8, 4}};
  EXPECT_DCP_ERROR(dcp::dcp_planner{}.plan(wrong_n, batch), dcp::errc::invalid_argument, "lays out 8 units",
                   "cost model plans 16 units");
  const dcp::planning_context wrong_g{c, dcp::selective_recompute{}, dcp::buddy_groups{16, 8}};
  EXPECT_DCP_ERROR(dcp::tune(dcp::packed_planner{}, wrong_g, batch).plan(wrong_g, batch), dcp::errc::invalid_argument, "8 per node", "4 per node");
}

constexpr dcp::local_world_options world_options{std::chrono::seconds(30), true};

// 8 ranks in nodes of 4 with the node-local manager in the bundle: every rank plans the same
// node-local plan, gets a communicator of its step's size for every step, and an all-reduce over
// it counts the step's members.
TEST(group_manager, scheduler_plans_and_runs_on_the_bundles_manager) {
  using bundle = dcp::policies<node_local_groups>;
  using sched_t = dcp::scheduler<dcp::transformer_spec, dcp::local_comm, bundle>;
  std::vector<dcp::sequence> batch;
  const std::int64_t lengths[] = {131072, 98304, 256, 4096, 1024, 32768, 512, 16384, 2048, 8192};
  for (std::int64_t i = 0; i < 10; ++i) batch.push_back(dcp::make_sequence(100 + i, lengths[i]));
  std::vector<std::uint64_t> hashes(8);
  std::vector<int> steps_run(8);
  dcp::local_world::run(
      8,
      [&](dcp::local_comm& world) {
        dcp::scheduler_options opt;
        opt.gpus_per_node = 4;
        bundle b;
        b.groups = node_local_groups{8, 4};
        sched_t sched(dcp::models::llama3_8b(), world, opt, b);
        EXPECT_EQ(sched.policies().groups, (node_local_groups{8, 4}));
        EXPECT_EQ(sched.groups().groups(), (node_local_groups{8, 4}));
        const dcp::plan p = sched.plan(batch);
        sched.verify(p);
        EXPECT_TRUE(dcp::plan_violations(p, batch, sched.cost(), sched.groups().groups()).empty());
        hashes[static_cast<std::size_t>(world.rank())] = p.hash();
        for (auto& step : sched.steps_for(p)) {
          EXPECT_FALSE(spans_nodes(step.ranks, 4)) << step.ranks;
          EXPECT_EQ(step.comm().size(), step.sp());
          int one[1] = {1};
          step.comm().all_reduce(std::span<int>(one), dcp::reduce_op::sum);
          EXPECT_EQ(one[0], step.sp());
          ++steps_run[static_cast<std::size_t>(world.rank())];
        }
      },
      world_options);
  for (int r = 1; r < 8; ++r) EXPECT_EQ(hashes[static_cast<std::size_t>(r)], hashes[0]);
  for (int r = 0; r < 8; ++r) EXPECT_GT(steps_run[static_cast<std::size_t>(r)], 0) << "rank " << r;
  // The default bundle spans both nodes with the 128k sequence on the same job.
  const auto c = job(8, 4);
  bool crosses = false;
  for (const auto& s : dcp::dcp_planner{}.plan(c, batch).steps) crosses = crosses || spans_nodes(s.ranks, 4);
  EXPECT_TRUE(crosses) << "the batch does not need a cross-node group; pick a longer sequence";
}

TEST(group_manager, scheduler_refuses_a_manager_for_another_world_or_one_that_breaks_the_laws) {
  dcp::local_world::run(
      4,
      [&](dcp::local_comm& world) {
        dcp::scheduler_options opt;
        opt.gpus_per_node = 4;
        dcp::policies<node_local_groups> wrong;
        wrong.groups = node_local_groups{8, 4};
        EXPECT_DCP_ERROR((dcp::scheduler(dcp::models::llama3_8b(), world, opt, wrong)), dcp::errc::invalid_argument,
                         "node_local_groups{N=8, G=4}", "laying out 8 units", "world of 4 ranks has 4 units");
        dcp::policies<dcp::buddy_groups> narrow;
        narrow.groups = dcp::buddy_groups{4, 2};  // a user's value is used as given, so it must fit
        EXPECT_DCP_ERROR((dcp::scheduler(dcp::models::llama3_8b(), world, opt, narrow)), dcp::errc::invalid_argument,
                         "2 per node", "4 per node");
        dcp::policies<sliding_groups> broken;
        broken.groups = sliding_groups{4, 4};
        EXPECT_DCP_ERROR((dcp::scheduler(dcp::models::llama3_8b(), world, opt, broken)), dcp::errc::invalid_argument,
                         "breaks a group_manager law", "block(2, 1) = [1, 3)");
      },
      world_options);
}

}  // namespace
