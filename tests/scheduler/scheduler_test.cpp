// dcp::scheduler<Model, Comm, Policies> end to end on `local_comm` (threads), 1..8 ranks:
// agreement and verification, each rank's micro-steps and their group communicators, loss
// weights, policy overrides, options, and the errors of bad input.
#include <dcp_test/support.hpp>
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <numeric>
#include <set>
#include <sstream>
#include <span>
#include <string>
#include <vector>

#include <dcp/comm/local.hpp>
#include <dcp/error.hpp>
#include <dcp/plan/check_plan.hpp>
#include <dcp/plan/packed_planner.hpp>
#include <dcp/recompute/full_recompute.hpp>
#include <dcp/recompute/no_recompute.hpp>
#include <dcp/scheduler.hpp>
#include <dcp/workload/tuning.hpp>
#include <dcp/workload/embedded.hpp>

namespace {

using sched_t = dcp::scheduler<dcp::transformer_spec, dcp::local_comm>;

constexpr dcp::local_world_options world_options{std::chrono::seconds(30), true};

// 1D lengths from a 256-token clip to a 64k one: short ones batch, long ones want sp > 1 and
// checkpoint blocks; every one fits a single H200 with all blocks checkpointed (x_max ~ 140k).
dcp::dataset mixed_batch() {
  const std::int64_t lengths[] = {65536, 256, 4096, 1024, 32768, 512, 16384, 2048, 256, 8192, 24576, 1536, 768, 49152};
  dcp::dataset out;
  std::int64_t id = 100;
  for (std::int64_t n : lengths) out.push_back(dcp::make_sequence(id++, n));
  return out;
}


class scheduler_ranks : public ::testing::TestWithParam<int> {};
std::string ranks_name(const ::testing::TestParamInfo<int>& ranks) { return std::to_string(ranks.param); }
INSTANTIATE_TEST_SUITE_P(ranks, scheduler_ranks, ::testing::Range(1, 9), ranks_name);

TEST_P(scheduler_ranks, every_rank_plans_the_same_sound_plan_and_verify_passes) {
  const int n = GetParam();
  const dcp::dataset batch = mixed_batch();
  std::vector<std::uint64_t> hashes(static_cast<std::size_t>(n));
  std::vector<dcp::plan> plans(static_cast<std::size_t>(n));
  dcp::local_world::run(
      n,
      [&](dcp::local_comm& world) {
        sched_t sched(dcp::models::cogvideox_5b(), world);
        dcp::plan p = sched.plan(batch);
        sched.verify(p);  // collective; throws on disagreement
        EXPECT_TRUE(dcp::plan_violations(p, batch, sched.cost()).empty());
        hashes[static_cast<std::size_t>(world.rank())] = p.hash();
        plans[static_cast<std::size_t>(world.rank())] = std::move(p);
      },
      world_options);
  for (int r = 1; r < n; ++r) {
    EXPECT_EQ(hashes[static_cast<std::size_t>(r)], hashes[0]) << "rank " << r;
    EXPECT_EQ(plans[static_cast<std::size_t>(r)], plans[0]) << "rank " << r;
  }
  // The scheduler adds nothing to the planner: same plan as the policies called by hand.
  const auto cost = dcp::make_analytic_cost(dcp::models::cogvideox_5b(), dcp::devices::h200(), n);
  EXPECT_EQ(plans[0], dcp::dcp_planner{}.plan(cost, batch, dcp::selective_recompute{}));
  EXPECT_EQ(plans[0].gpus, n);
  EXPECT_EQ(plans[0].method, "dcp");
}

TEST_P(scheduler_ranks, verify_throws_mismatch_on_every_rank_when_one_rank_plans_another_batch) {
  const int n = GetParam();
  if (n == 1) GTEST_SKIP() << "one rank always agrees with itself";
  for (int odd = 0; odd < n; odd += std::max(1, n - 1)) {  // the first rank, then the last
    dcp::local_world::run(
        n,
        [&](dcp::local_comm& world) {
          sched_t sched(dcp::models::cogvideox_5b(), world);
          dcp::dataset batch = mixed_batch();
          if (world.rank() == odd) batch.pop_back();  // this rank read a different batch
          const dcp::plan p = sched.plan(batch);
          // Every rank, not only the odd one, throws the mismatch naming itself and the fix.
          EXPECT_DCP_ERROR(sched.verify(p), dcp::errc::mismatch, "rank " + std::to_string(world.rank()), "same seed")
              << "odd rank " << odd;
        },
        world_options);
  }
}

TEST_P(scheduler_ranks, steps_for_gives_each_rank_its_steps_in_order_with_its_group_communicator) {
  const int n = GetParam();
  const dcp::dataset batch = mixed_batch();
  std::mutex m;
  std::vector<int> appearances;  // per step: how many ranks got it
  dcp::local_world::run(
      n,
      [&](dcp::local_comm& world) {
        sched_t sched(dcp::models::cogvideox_5b(), world);
        const dcp::plan p = sched.plan(batch);
        for (int round = 0; round < 2; ++round) {  // the second round reuses the cached groups
          const auto steps = sched.steps_for(p);
          const std::vector<std::size_t> expected = p.steps_of(world.rank());
          ASSERT_EQ(steps.size(), expected.size());
          double last_start = -1;
          for (std::size_t j = 0; j < steps.size(); ++j) {
            const auto& s = steps[j];
            const dcp::plan_step& ps = p.steps[s.index];
            EXPECT_EQ(s.index, expected[j]);
            EXPECT_TRUE(s.ranks.contains(world.rank()));
            EXPECT_EQ(s.ranks, ps.ranks);
            EXPECT_EQ(s.sp(), ps.sp());
            EXPECT_EQ(s.group_rank, world.rank() - ps.ranks.first);
            EXPECT_EQ(s.checkpointed_blocks, ps.checkpointed_blocks);
            EXPECT_EQ(s.start_s, ps.start_s);
            EXPECT_EQ(s.time_s, ps.time_s);
            EXPECT_GE(s.start_s, last_start) << "steps out of start order";
            last_start = s.start_s;
            ASSERT_EQ(s.sequences.size(), ps.sequences.size());
            EXPECT_TRUE(std::equal(s.sequences.begin(), s.sequences.end(), ps.sequences.begin()));
            ASSERT_NE(s.group, nullptr);
            EXPECT_EQ(s.comm().size(), s.sp());
            EXPECT_EQ(s.comm().rank(), s.group_rank);
          }
          // The communicators really are the groups: a step's members run it together, in order.
          for (const auto& s : steps) {
            std::int64_t one[1] = {world.rank()};
            s.comm().all_reduce(std::span<std::int64_t>(one), dcp::reduce_op::sum);
            const std::int64_t first = s.ranks.first, last = s.ranks.end() - 1;
            EXPECT_EQ(one[0], (first + last) * s.sp() / 2);
          }
          if (round == 0) {
            std::lock_guard lk(m);
            if (appearances.empty()) appearances.assign(p.steps.size(), 0);
            for (const auto& s : steps) ++appearances[s.index];
          }
        }
        // At most one communicator per power-of-two size: log2(N) + 1 groups.
        EXPECT_LE(sched.groups().entries().size(), static_cast<std::size_t>(std::bit_width(unsigned(n))));
      },
      world_options);
  // Every step reaches exactly its sp ranks.
  dcp::plan p = dcp::dcp_planner{}.plan(dcp::make_analytic_cost(dcp::models::cogvideox_5b(), dcp::devices::h200(), n),
                                        batch, dcp::selective_recompute{});
  ASSERT_EQ(appearances.size(), p.steps.size());
  for (std::size_t i = 0; i < p.steps.size(); ++i) EXPECT_EQ(appearances[i], p.steps[i].sp()) << "step " << i;
}

TEST_P(scheduler_ranks, loss_weights_over_all_steps_sum_to_one_and_cover_each_sequence_once) {
  const int n = GetParam();
  const dcp::dataset batch = mixed_batch();
  for (auto loss : {dcp::loss_normalization::token_mean, dcp::loss_normalization::sample_mean}) {
    // Each rank sums the weights of the sequences it leads (group_rank 0) over its own steps;
    // an all-reduce of those sums is the batch total, as a training loop would see it.
    std::vector<double> totals(static_cast<std::size_t>(n));
    dcp::local_world::run(
        n,
        [&](dcp::local_comm& world) {
          dcp::scheduler_options opt;
          opt.loss = loss;
          sched_t sched(dcp::models::cogvideox_5b(), world, opt);
          const dcp::plan p = sched.plan(batch);
          double mine[1] = {0};
          std::set<std::int64_t> ids;
          for (const auto& s : sched.steps_for(p))
            for (const auto& q : s.sequences) {
              EXPECT_GT(q.loss_weight, 0);
              if (loss == dcp::loss_normalization::sample_mean) {
                EXPECT_DOUBLE_EQ(q.loss_weight, 1.0 / double(batch.size()));
              }
              if (s.group_rank == 0) mine[0] += q.loss_weight;
            }
          world.all_reduce(std::span<double>(mine), dcp::reduce_op::sum);
          totals[static_cast<std::size_t>(world.rank())] = mine[0];
          // Across the whole plan every sequence appears once.
          std::size_t count = 0;
          for (const auto& st : p.steps)
            for (const auto& q : st.sequences) ids.insert(q.id), ++count;
          EXPECT_EQ(count, batch.size());
          EXPECT_EQ(ids.size(), batch.size());
        },
        world_options);
    for (double t : totals) EXPECT_NEAR(t, 1.0, 1e-12);
  }
}

// ---- policies -------------------------------------------------------------------------------

std::vector<int> checkpointed_blocks(const dcp::plan& p) {
  std::vector<int> out;
  for (const auto& s : p.steps) out.push_back(s.checkpointed_blocks);
  return out;
}

TEST(scheduler_policies, overriding_the_recompute_policy_changes_the_checkpointed_blocks) {
  dcp::dataset batch = mixed_batch();
  // On 4 H200 about 20.8k CogVideoX tokens per GPU fit with nothing checkpointed, so a
  // 131072-token sequence needs checkpointing whatever sp the planner gives it.
  batch.push_back(dcp::make_sequence(999, 131072));
  dcp::local_world::run(
      4,
      [&](dcp::local_comm& world) {
        const int L = dcp::models::cogvideox_5b().blocks;
        dcp::scheduler<dcp::transformer_spec, dcp::local_comm> selective(dcp::models::cogvideox_5b(), world);
        dcp::scheduler<dcp::transformer_spec, dcp::local_comm, dcp::policies<dcp::full_recompute>> full(
            dcp::models::cogvideox_5b(), world);
        dcp::scheduler_options skip;
        skip.on_infeasible = dcp::infeasible_policy::skip;  // some sequences need checkpointing
        dcp::scheduler<dcp::transformer_spec, dcp::local_comm, dcp::policies<dcp::no_recompute>> none(
            dcp::models::cogvideox_5b(), world, skip);

        const auto ks = checkpointed_blocks(selective.plan(batch));
        const auto kf = checkpointed_blocks(full.plan(batch));
        const dcp::plan pn = none.plan(batch);
        const auto kn = checkpointed_blocks(pn);
        // Selective: short steps recompute nothing, long ones checkpoint some blocks.
        EXPECT_EQ(*std::min_element(ks.begin(), ks.end()), 0);
        EXPECT_GT(*std::max_element(ks.begin(), ks.end()), 0);
        EXPECT_TRUE(std::all_of(kf.begin(), kf.end(), [&](int k) { return k == L; }));
        EXPECT_TRUE(std::all_of(kn.begin(), kn.end(), [](int k) { return k == 0; }));
        EXPECT_NE(ks, kf);
        // Every sequence is planned or reported, never lost.
        std::size_t planned = pn.skipped.size();
        for (const auto& s : pn.steps) planned += s.sequences.size();
        EXPECT_EQ(planned, batch.size());
        // The bundle's values are reachable and printable.
        EXPECT_EQ(full.policies().recompute, dcp::full_recompute{});
        std::ostringstream os;
        os << full;
        EXPECT_NE(os.str().find("full_recompute"), std::string::npos) << os.str();
      },
      world_options);
}

TEST(scheduler_policies, overriding_the_planner_and_its_knobs) {
  const dcp::dataset batch = mixed_batch();
  dcp::local_world::run(
      2,
      [&](dcp::local_comm& world) {
        // A static baseline plans only once tuned (dcp::tune); untuned, plan() says so.
        dcp::policies<dcp::packed_planner> untuned;
        dcp::scheduler<dcp::transformer_spec, dcp::local_comm, dcp::policies<dcp::packed_planner>> raw(
            dcp::models::cogvideox_5b(), world, {}, untuned);
        EXPECT_DCP_ERROR((void)raw.plan(batch), dcp::errc::invalid_argument, "packed planner: sp = 0 is not tuned",
                         "dcp::tune");
        dcp::policies<dcp::packed_planner> tuned;
        tuned.planner = dcp::tune(dcp::packed_planner{}, raw.cost(), std::span<const dcp::sequence>(batch));
        dcp::scheduler<dcp::transformer_spec, dcp::local_comm, dcp::policies<dcp::packed_planner>> packed(
            dcp::models::cogvideox_5b(), world, {}, tuned);
        const dcp::plan pp = packed.plan(batch);
        EXPECT_EQ(pp.method, "packed");
        packed.verify(pp);

        dcp::policies<> knobs;
        knobs.get<dcp::slot::planner>().inter = false;
        sched_t no_inter(dcp::models::cogvideox_5b(), world, {}, knobs);
        EXPECT_EQ(no_inter.plan(batch).method, "dcp-no-inter");
      },
      world_options);
}

// ---- options --------------------------------------------------------------------------------

TEST(scheduler_options, memory_capacity_takes_effect) {
  const dcp::dataset batch = mixed_batch();
  dcp::local_world::run(
      8,
      [&](dcp::local_comm& world) {
        sched_t roomy(dcp::models::cogvideox_5b(), world);
        dcp::scheduler_options tight_opt;
        tight_opt.memory_capacity_bytes = 80e9;
        sched_t tight(dcp::models::cogvideox_5b(), world, tight_opt);
        EXPECT_DOUBLE_EQ(roomy.cost().capacity(), dcp::devices::h200().capacity());  // less the reserved bytes
        EXPECT_DOUBLE_EQ(tight.cost().capacity(), 80e9);
        const dcp::plan pr = roomy.plan(batch), pt = tight.plan(batch);
        EXPECT_DOUBLE_EQ(pt.memory_capacity_bytes, 80e9);
        for (const auto& s : pt.steps) EXPECT_LE(s.memory_bytes, 80e9 * (1 + 1e-12));
        EXPECT_GT(std::ranges::max(pr.steps, {}, &dcp::plan_step::memory_bytes).memory_bytes, 80e9)
            << "the batch should need more than 80 GB somewhere when allowed";
        EXPECT_NE(pr.hash(), pt.hash());
        EXPECT_TRUE(dcp::plan_violations(pt, batch, tight.cost()).empty());
      },
      world_options);
}

// The bundle's cost slot is no dead field: a cost value set there is the one the scheduler plans
// with, and without one the bundle holds the model the scheduler built (printed once).
TEST(scheduler_policies, the_bundle_cost_value_is_the_cost_planned_with) {
  const dcp::dataset batch = mixed_batch();
  dcp::local_world::run(
      8,
      [&](dcp::local_comm& world) {
        sched_t built(dcp::models::cogvideox_5b(), world);
        EXPECT_EQ(built.policies().cost, built.cost());
        dcp::default_policies bundle;
        bundle.cost = dcp::make_analytic_cost(dcp::models::cogvideox_5b(), dcp::devices::h100_analytic(), 8);
        sched_t given(dcp::models::cogvideox_5b(), world, {}, bundle);
        EXPECT_EQ(given.cost(), bundle.cost);
        EXPECT_EQ(given.policies().cost, bundle.cost);
        EXPECT_EQ(given.plan(batch).memory_capacity_bytes, bundle.cost.capacity());
        std::ostringstream os, one;
        os << given;
        one << bundle.cost;
        const std::string printed = os.str(), cost = one.str();
        ASSERT_NE(printed.find(cost), std::string::npos) << printed;
        EXPECT_EQ(printed.find(cost, printed.find(cost) + 1), std::string::npos) << "cost printed twice: " << printed;
        bundle.cost = dcp::make_analytic_cost(dcp::models::cogvideox_5b(), dcp::devices::h100_analytic(), 16);
        EXPECT_DCP_ERROR((void)sched_t(dcp::models::cogvideox_5b(), world, {}, bundle), dcp::errc::mismatch, "16 GPUs");
      },
      world_options);
}

TEST(scheduler_options, gpus_per_node_takes_effect) {
  const dcp::dataset batch = mixed_batch();
  dcp::local_world::run(
      8,
      [&](dcp::local_comm& world) {
        dcp::scheduler_options opt;
        opt.gpus_per_node = 2;
        sched_t sched(dcp::models::cogvideox_5b(), world, opt);
        EXPECT_EQ(sched.cost().gpus_per_node(), 2);
        EXPECT_EQ(sched.groups().groups().gpus_per_node(), 2);
        const dcp::plan p = sched.plan(batch);
        EXPECT_EQ(p.gpus_per_node, 2);
        // A group of 4 now spans two nodes: inter-node bandwidth makes sp = 4 slower.
        const dcp::analytic_load l = sched.cost().load_of(dcp::make_sequence(0, 32768));
        sched_t one_node(dcp::models::cogvideox_5b(), world);
        EXPECT_GT(sched.cost().time(l, 4, 0), one_node.cost().time(l, 4, 0));
        EXPECT_EQ(sched.cost().time(l, 2, 0), one_node.cost().time(l, 2, 0));
        // The cached groups know which blocks lie inside a node of 2.
        (void)sched.steps_for(p);
        for (const auto& e : sched.groups().entries()) EXPECT_EQ(e.intra_node, e.block.size <= 2) << e.block;
      },
      world_options);
}

TEST(scheduler_options, on_infeasible_and_loss_reach_the_planner) {
  dcp::dataset batch = mixed_batch();
  batch.push_back(dcp::make_sequence(7, 50'000'000));  // fits no group of 2 H200
  dcp::local_world::run(
      2,
      [&](dcp::local_comm& world) {
        sched_t strict(dcp::models::cogvideox_5b(), world);
        EXPECT_DCP_ERROR((void)strict.plan(batch), dcp::errc::infeasible, "7");

        dcp::scheduler_options opt;
        opt.on_infeasible = dcp::infeasible_policy::skip;
        opt.loss = dcp::loss_normalization::sample_mean;
        sched_t lenient(dcp::models::cogvideox_5b(), world, opt);
        EXPECT_EQ(lenient.policies().planner.on_infeasible, dcp::infeasible_policy::skip);
        EXPECT_EQ(lenient.policies().planner.loss, dcp::loss_normalization::sample_mean);
        const dcp::plan p = lenient.plan(batch);
        ASSERT_EQ(p.skipped.size(), 1u);
        EXPECT_EQ(p.skipped[0].id, 7);
        EXPECT_FALSE(p.skipped[0].reason.empty());
      },
      world_options);
}

TEST(scheduler_options, unset_options_keep_the_planners_own_knobs) {
  dcp::dataset batch = mixed_batch();
  batch.push_back(dcp::make_sequence(7, 50'000'000));  // fits no group of 2 H200
  dcp::local_world::run(
      2,
      [&](dcp::local_comm& world) {
        dcp::default_policies bundle;
        bundle.planner.on_infeasible = dcp::infeasible_policy::skip;
        bundle.planner.loss = dcp::loss_normalization::sample_mean;
        sched_t s(dcp::models::cogvideox_5b(), world, dcp::scheduler_options{}, bundle);
        EXPECT_EQ(s.policies().planner.on_infeasible, dcp::infeasible_policy::skip);
        EXPECT_EQ(s.policies().planner.loss, dcp::loss_normalization::sample_mean);
        const dcp::plan p = s.plan(batch);
        ASSERT_EQ(p.skipped.size(), 1u);
        EXPECT_EQ(p.skipped[0].id, 7);
      },
      world_options);
}

TEST(scheduler_options, the_sampler_uses_the_budget_and_seed_and_is_the_same_on_every_rank) {
  const dcp::dataset data = dcp::workloads::make("cogvideox-zipf10", 3);
  std::vector<std::vector<std::int64_t>> first_ids(4);
  dcp::local_world::run(
      4,
      [&](dcp::local_comm& world) {
        dcp::scheduler_options opt;
        opt.global_batch_tokens = 400'000;
        opt.seed = 11;
        sched_t sched(dcp::models::cogvideox_5b(), world, opt);
        EXPECT_DCP_ERROR((void)sched.sampler(), dcp::errc::invalid_argument, "set_dataset");

        sched.set_dataset(data);
        EXPECT_EQ(sched.sampler().state().seed, 11u);
        for (int b = 0; b < 3; ++b) {
          const dcp::global_batch batch = sched.sampler().next();
          std::int64_t tokens = 0;
          for (const auto& s : batch.sequences) tokens += sched.cost().tokens_of(s);
          if (batch.sequences.size() > 1) {
            EXPECT_LE(tokens, 400'000);
          }
          const dcp::plan p = sched.plan(batch.sequences);
          sched.verify(p);
          for (const auto& s : batch.sequences) first_ids[std::size_t(world.rank())].push_back(s.id);
        }
      },
      world_options);
  for (int r = 1; r < 4; ++r) EXPECT_EQ(first_ids[std::size_t(r)], first_ids[0]);
}

// ---- bad input ------------------------------------------------------------------------------

TEST(scheduler_errors, bad_options_are_clear_errors) {
  dcp::local_world::run(
      8,
      [&](dcp::local_comm& world) {
        auto make = [&](dcp::scheduler_options opt) { return sched_t(dcp::models::cogvideox_5b(), world, opt); };
        {
          dcp::scheduler_options opt;
          opt.memory_capacity_bytes = 200e9;  // more than the H200's 141 GB
          EXPECT_DCP_ERROR((void)make(opt), dcp::errc::invalid_argument, "memory_capacity_bytes");
        }
        {
          dcp::scheduler_options opt;
          opt.memory_capacity_bytes = 10e9;  // below the model's static memory
          EXPECT_DCP_ERROR((void)make(opt), dcp::errc::invalid_argument, "static memory");
        }
        {
          dcp::scheduler_options opt;
          opt.gpus_per_node = 3;  // 8 ranks are not whole nodes of 3
          EXPECT_DCP_ERROR((void)make(opt), dcp::errc::invalid_argument, "gpus_per_node");
        }
        {
          dcp::transformer_spec bad = dcp::models::cogvideox_5b();
          bad.heads = 7;  // does not divide hidden
          EXPECT_DCP_ERROR((void)sched_t(bad, world), dcp::errc::invalid_argument, "heads");
        }
      },
      world_options);
}

TEST(scheduler_errors, a_null_world_or_a_plan_for_another_world_is_rejected) {
  dcp::local_comm null_comm;
  EXPECT_DCP_ERROR((void)sched_t(dcp::models::cogvideox_5b(), null_comm), dcp::errc::invalid_argument, "null");

  const dcp::dataset batch = mixed_batch();
  dcp::local_world::run(
      2,
      [&](dcp::local_comm& world) {
        sched_t sched(dcp::models::cogvideox_5b(), world);
        const dcp::plan other = dcp::dcp_planner{}.plan(
            dcp::make_analytic_cost(dcp::models::cogvideox_5b(), dcp::devices::h200_analytic(), 4), batch,
            dcp::selective_recompute{});
        EXPECT_DCP_ERROR((void)sched.steps_for(other), dcp::errc::mismatch, "4 GPUs");
      },
      world_options);
}

}  // namespace
