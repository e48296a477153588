// Online calibration in dcp::scheduler on local_comm (threads): every rank plans the identical
// plan whatever order it observed its steps in, including when a rank reports nothing; the model
// learns the truth and a slow rank's speed; bad observations are clear errors; the calibrator
// rejects bad steps.
#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include <dcp/comm/local.hpp>
#include <dcp/cost/calibration.hpp>
#include <dcp/error.hpp>
#include <dcp/scheduler.hpp>

#include "calibration_test_support.hpp"
#include <dcp_test/support.hpp>

namespace {

using calib_test::rng;
constexpr dcp::local_world_options world_options{std::chrono::seconds(60), true};

std::vector<dcp::dataset> batches(int count, std::uint64_t seed) {
  rng g(seed);
  std::vector<dcp::dataset> out;
  // Mostly sp = 1 steps (a gang step cannot tell which member was slow), a few long ones.
  for (int b = 0; b < count; ++b) out.push_back(calib_test::random_batch(g, 48, 1000 * b, 40000));
  return out;
}

struct loop_case {
  int ranks, slow, silent;
};

class calibrated_ranks : public ::testing::TestWithParam<loop_case> {};
INSTANTIATE_TEST_SUITE_P(cases, calibrated_ranks,
                         ::testing::Values(loop_case{1, -1, -1}, loop_case{4, 1, -1}, loop_case{4, 2, 3},
                                           loop_case{8, 5, 0}),
                         [](const auto& i) {
                           return std::to_string(i.param.ranks) + "_slow" + std::to_string(i.param.slow + 1) +
                                  "_silent" + std::to_string(i.param.silent + 1);
                         });

TEST_P(calibrated_ranks, plans_agree_on_every_rank_and_learn_the_truth) {
  const auto [n, slow, silent] = GetParam();
  rng g(31 + std::uint64_t(n));
  const auto truth = calib_test::scaled_truth(calib_test::prior(n), g);
  const auto work = batches(5, 32);
  std::vector<calib_test::loop_result> results(static_cast<std::size_t>(n));
  dcp::local_world::run(
      n, [&](dcp::local_comm& world) { results[std::size_t(world.rank())] = calib_test::calibrated_loop(world, work, truth, slow, silent); },
      world_options);
  for (int r = 1; r < n; ++r) EXPECT_EQ(results[std::size_t(r)].hashes, results[0].hashes) << "rank " << r;
  const auto& c = *results[0].state;
  for (int r = 1; r < n; ++r) EXPECT_EQ(results[std::size_t(r)].state->model(), c.model()) << "rank " << r;
  EXPECT_GT(c.report().time_points, 0u);
  if (silent >= 0) {
    EXPECT_GT(c.report().missing_reports, 0u);
    EXPECT_FALSE(c.report().ignored.empty());
  }
  // The refitted model predicts the truth better than the prior on fresh steps.
  const auto fresh = calib_test::observe_on(truth, 200, g);
  std::vector<dcp::step_observation> fast;
  for (auto o : fresh) fast.push_back(o);
  EXPECT_LT(dcp::residuals_of(c.model(), fast).time_rms, dcp::residuals_of(calib_test::prior(n), fast).time_rms)
      << c.model() << "\ntruth " << truth;
  // A rank slowed to 0.75 is learned as slow, the others as full speed.
  if (slow >= 0 && silent != slow) {
    ASSERT_EQ(c.speeds().size(), std::size_t(n)) << "no speed learned";
    EXPECT_NEAR(c.speeds()[std::size_t(slow)], 0.75, 0.05);
    for (int r = 0; r < n; ++r)
      if (r != slow) {
        EXPECT_GT(c.speeds()[std::size_t(r)], 0.9) << "rank " << r;
      }
  }
}

// The start-up probe through the scheduler: the same probe on every rank, steps of the first
// batch only, each rank observing its own; the first plan learns from them (time points before
// any batch ran, the model refitted to the probe's peaks 9% over the prior), and every rank plans
// it identically. Probing twice, after the first plan, or with calibration off is an error.
TEST(scheduler_calibration, the_start_up_probe_calibrates_the_first_plan) {
  constexpr int n = 4;
  const auto work = batches(2, 41);
  std::vector<std::vector<std::uint64_t>> hashes(n);
  std::vector<double> margins(n);
  dcp::local_world::run(
      n,
      [&](dcp::local_comm& world) {
        dcp::scheduler_options o;
        o.calibration.enabled = true;
        dcp::scheduler<dcp::transformer_spec, dcp::local_comm> sched(dcp::models::cogvideox_5b(), world, o);
        const auto probe = sched.probe(work[0]);
        sched.verify(probe);
        EXPECT_EQ(probe.method, "probe");
        EXPECT_FALSE(probe.steps.empty());
        for (const auto& st : probe.steps)
          for (const auto& q : st.sequences) {
            EXPECT_TRUE(
                std::any_of(work[0].begin(), work[0].end(), [&](const dcp::sequence& s) { return s.id == q.id; }));
            EXPECT_EQ(q.loss_weight, 0.0);
          }
        EXPECT_DCP_ERROR((void)sched.probe(work[0]), dcp::errc::invalid_argument, "probe once");
        for (const auto& s : sched.steps_for(probe))
          sched.observe(s, s.time_s * 1.2, 1.09 * probe.steps[s.index].memory_bytes);
        const auto first = sched.plan(work[0]);
        sched.verify(first);
        EXPECT_GT(sched.calibration()->report().time_points, 0u);
        margins[std::size_t(world.rank())] = sched.calibration()->model().memory_margin;
        hashes[std::size_t(world.rank())] = {probe.hash(), first.hash()};
        EXPECT_DCP_ERROR((void)sched.probe(work[1]), dcp::errc::invalid_argument, "probe once, before the first plan");
      },
      world_options);
  for (int r = 1; r < n; ++r) EXPECT_EQ(hashes[std::size_t(r)], hashes[0]) << "rank " << r;
  for (double m : margins) EXPECT_EQ(m, margins[0]);
  EXPECT_GE(margins[0], 0.01);
  dcp::local_world::run(1, [&](dcp::local_comm& world) {
    dcp::scheduler<dcp::transformer_spec, dcp::local_comm> off(dcp::models::cogvideox_5b(), world,
                                                               dcp::scheduler_options{});
    EXPECT_DCP_ERROR((void)off.probe(work[0]), dcp::errc::invalid_argument, "calibration or its probe is off");
  });
}

// plan(batch, host): the exchange runs over a host communicator of the same ranks (here in
// reverse order, as a world bootstrapped differently would be), which is what an NCCL world
// uses. Plans agree and the model learns as over the world; once the world is aborted, the
// host form still plans (it never touches the world) while the world form fails.
TEST(scheduler_calibration, host_communicator_exchange_plans_identically_without_the_world) {
  constexpr int n = 4;
  rng g(36);
  const auto truth = calib_test::scaled_truth(calib_test::prior(n), g);
  const auto work = batches(3, 37);
  std::vector<calib_test::loop_result> over_host(n), over_world(n);
  std::vector<std::vector<std::uint64_t>> after_abort(n);
  dcp::local_world::run(
      n,
      [&](dcp::local_comm& boot) {
        const int r = boot.rank();
        auto host = boot.split(0, n - 1 - r);  // host rank n-1-r is world rank r
        ASSERT_EQ(host.rank(), n - 1 - r);
        over_host[std::size_t(r)] = calib_test::calibrated_loop(boot, work, truth, 2, 1, &host);
        over_world[std::size_t(r)] = calib_test::calibrated_loop(boot, work, truth, 2, 1);

        auto world = boot.split(0, r);
        dcp::scheduler_options o;
        o.calibration.enabled = true;
        dcp::scheduler<dcp::transformer_spec, dcp::local_comm> sched(dcp::models::cogvideox_5b(), world, o);
        const auto p = sched.plan(work[0], host);
        for (const auto& s : sched.steps_for(p)) sched.observe(s, s.time_s * 1.3, 1e10);
        world.barrier();
        world.abort();  // from here on, any use of the world throws errc::aborted
        const auto q = sched.plan(work[1], host);
        sched.verify(q, host);
        after_abort[std::size_t(r)] = {p.hash(), q.hash(), sched.calibration()->report().time_points};
        EXPECT_DCP_ERROR(sched.plan(work[2]), dcp::errc::aborted);
      },
      world_options);
  for (int r = 0; r < n; ++r) {
    EXPECT_EQ(over_host[std::size_t(r)].hashes, over_world[0].hashes) << "rank " << r;
    EXPECT_EQ(over_host[std::size_t(r)].state->model(), over_world[0].state->model()) << "rank " << r;
    EXPECT_EQ(after_abort[std::size_t(r)], after_abort[0]) << "rank " << r;
  }
  EXPECT_GT(after_abort[0][2], 0u) << "no observation reached the refit";
}

TEST(scheduler_calibration, host_communicator_of_another_size_is_an_error_naming_both) {
  dcp::local_world::run(
      4,
      [&](dcp::local_comm& world) {
        auto half = world.split(world.rank() % 2, world.rank());
        dcp::scheduler_options o;
        o.calibration.enabled = true;
        dcp::scheduler<dcp::transformer_spec, dcp::local_comm> sched(dcp::models::cogvideox_5b(), world, o);
        EXPECT_DCP_ERROR(sched.plan(batches(1, 38)[0], half), dcp::errc::invalid_argument,
                         "host communicator has 2 ranks, the world 4");
      },
      world_options);
}

TEST(scheduler_calibration, bad_observations_are_clear_errors_and_plans_stay_identical) {
  const auto work = batches(2, 33);
  std::vector<std::vector<std::uint64_t>> hashes(4, std::vector<std::uint64_t>{});
  dcp::local_world::run(
      4,
      [&](dcp::local_comm& world) {
        dcp::scheduler_options o;
        o.calibration.enabled = true;
        dcp::scheduler<dcp::transformer_spec, dcp::local_comm> sched(dcp::models::cogvideox_5b(), world, o);
        auto expect_error = [&](auto fn, const std::string& text) {
          EXPECT_DCP_ERROR(fn(), dcp::errc::invalid_argument, text);
        };
        expect_error([&] { sched.observe(std::size_t{0}, 1.0); }, "no plan yet");
        const auto p = sched.plan(work[0]);
        hashes[std::size_t(world.rank())].push_back(p.hash());
        const auto mine = sched.steps_for(p);
        ASSERT_FALSE(mine.empty());
        const auto& s = mine.front();
        expect_error([&] { sched.observe(s, -1.0); }, "seconds");
        expect_error([&] { sched.observe(s, std::nan("")); }, "seconds");
        expect_error([&] { sched.observe(s, 1.0, -5.0); }, "peak_bytes");
        expect_error([&] { sched.observe(s, std::numeric_limits<double>::infinity()); }, "seconds");
        expect_error([&] { sched.observe(p.steps.size() + 3, 1.0); }, "observe a step of the last plan");
        for (std::size_t i = 0; i < p.steps.size(); ++i)
          if (!p.steps[i].ranks.contains(world.rank())) {
            expect_error([&] { sched.observe(i, 1.0); }, "not on this rank");
            break;
          }
        sched.observe(s, s.time_s * 1.2, 1e10);
        expect_error([&] { sched.observe(s, 1.0); }, "already observed");
        const auto q = sched.plan(work[1]);
        sched.verify(q);
        hashes[std::size_t(world.rank())].push_back(q.hash());
        expect_error([&] { sched.observe(s, 1.0); }, "not step");  // a step of the previous plan
      },
      world_options);
  for (int r = 1; r < 4; ++r) EXPECT_EQ(hashes[std::size_t(r)], hashes[0]);
}

TEST(scheduler_calibration, observe_without_calibration_and_bad_options_are_errors) {
  dcp::local_world::run(1, [&](dcp::local_comm& world) {
    dcp::scheduler<dcp::transformer_spec, dcp::local_comm> plain(dcp::models::cogvideox_5b(), world);
    const auto p = plain.plan(batches(1, 34)[0]);
    EXPECT_EQ(plain.calibration(), nullptr);
    EXPECT_DCP_ERROR(plain.observe(std::size_t{0}, 1.0), dcp::errc::invalid_argument, "calibration is off");
    dcp::scheduler_options o;
    o.calibration.enabled = true;
    o.calibration.memory_margin = -0.1;
    EXPECT_THROW((dcp::scheduler<dcp::transformer_spec, dcp::local_comm>(dcp::models::cogvideox_5b(), world, o)),
                 dcp::error);
    // Calibration off: the plan is exactly the planner's on the configured model.
    EXPECT_EQ(p, plain.policies().planner.plan(plain.cost(), batches(1, 34)[0], plain.policies().recompute));
  });
}

TEST(calibrator, rejects_steps_outside_the_job_and_non_finite_measurements) {
  dcp::calibrator c(calib_test::prior(8), {.enabled = true});
  const auto l = c.model().load_of(dcp::make_sequence(1, 4096));
  EXPECT_THROW(c.add({l, {6, 4}, 0, {1, 1, 1, 1}, {0, 0, 0, 0}}), dcp::error);   // not aligned
  EXPECT_THROW(c.add({l, {0, 16}, 0, std::vector<double>(16, 1.0), std::vector<double>(16, 0.0)}), dcp::error);
  EXPECT_THROW(c.add({l, {0, 2}, 0, {1}, {0, 0}}), dcp::error);                   // one time per member
  EXPECT_THROW(c.add({l, {0, 1}, 0, {std::nan("")}, {0}}), dcp::error);
  c.add({l, {0, 1}, 0, {-1}, {-1}});  // nobody reported: kept out of the fit, with a reason
  c.refit();
  EXPECT_EQ(c.report().time_points, 0u);
  EXPECT_EQ(c.report().missing_reports, 1u);
  EXPECT_EQ(c.model().coef, calib_test::prior(8).coef);  // nothing learned from nothing
  EXPECT_DOUBLE_EQ(c.model().memory_margin, 0.05);
}

TEST(calibrator, memory_margin_widens_for_peaks_over_the_fit_and_tightens_to_the_floor) {
  const auto p = calib_test::prior(8);
  rng g(35);
  dcp::calibrator exact(p, {.enabled = true});
  for (const auto& o : calib_test::observe_on(p, 30, g))
    exact.add({o.load, {0, o.sp}, o.checkpointed_blocks, std::vector<double>(std::size_t(o.sp), o.seconds),
               std::vector<double>(std::size_t(o.sp), o.peak_bytes)});
  exact.refit();
  EXPECT_NEAR(exact.model().memory_margin, 0.01, 1e-6);  // the floor: the fit explains every peak
  EXPECT_TRUE(exact.speeds().empty());
  dcp::calibrator noisy(p, {.enabled = true});
  int i = 0;
  for (const auto& o : calib_test::observe_on(p, 30, g)) {
    const double spike = (i++ == 7) ? 1.10 : 1.0;  // one step peaks 10% over the model
    noisy.add({o.load, {0, o.sp}, o.checkpointed_blocks, std::vector<double>(std::size_t(o.sp), o.seconds),
               std::vector<double>(std::size_t(o.sp), o.peak_bytes * spike)});
  }
  noisy.refit();
  EXPECT_GT(noisy.model().memory_margin, 0.05);
  EXPECT_LT(noisy.model().memory_margin, 0.12);
}

}  // namespace
