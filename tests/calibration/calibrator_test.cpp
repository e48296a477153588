// The calibrator on its own: per-GPU speed learned from gang steps alone (whether members report
// their own busy time or the gang's), and the memory margin following measured peaks below and
// above the model.
#include "calibration_test_support.hpp"

#include <gtest/gtest.h>

#include <cstddef>
#include <vector>

#include <dcp/cost/calibration.hpp>

namespace {

using calib_test::rng;

// `count` gang steps (sp >= 2, aligned blocks) on `truth`, GPU `slow` at `speed`. With
// `own_time` each member reports its own busy time (the slow one longer), else every member
// reports the gang's time (its slowest member's).
dcp::calibrator gang_only(const dcp::fitted_cost& truth, int slow, double speed, bool own_time, int count, rng& g) {
  dcp::calibrator c(truth, {.enabled = true});
  for (int i = 0; i < count;) {
    auto o = calib_test::random_step(truth, g);
    if (o.sp < 2) continue;
    ++i;
    const int first = int(g.between(0, truth.gpus() / o.sp - 1)) * o.sp;
    const double t = truth.time(o.load, o.sp, o.checkpointed_blocks);
    const bool has_slow = first <= slow && slow < first + o.sp;
    std::vector<double> seconds(std::size_t(o.sp), own_time || !has_slow ? t : t / speed);
    if (own_time && has_slow) seconds[std::size_t(slow - first)] = t / speed;
    c.add({o.load, {first, o.sp}, o.checkpointed_blocks, seconds, std::vector<double>(std::size_t(o.sp), 0.0)});
  }
  c.refit();
  return c;
}

TEST(calibrator, learns_a_slow_gpu_from_gang_steps_alone) {
  rng g(41);
  const auto truth = calib_test::prior(16);
  for (const bool own_time : {true, false}) {
    const auto c = gang_only(truth, 5, 0.75, own_time, 200, g);
    ASSERT_EQ(c.speeds().size(), 16u) << "own_time " << own_time;
    // GPU 4 shares every gang with GPU 5 (aligned groups of sp >= 2), GPUs 6 and 7 all but their
    // sp = 2 steps, so when members report the gang's time they cannot be told apart from it;
    // GPUs 0-3 and 8-15 ran enough steps without it to be cleared.
    for (int r = 0; r < 16; ++r) {
      if (r == 5 || (r >= 4 && r <= 7 && !own_time)) EXPECT_NEAR(c.speeds()[std::size_t(r)], 0.75, 0.03) << "GPU " << r << ", own_time " << own_time;
      else EXPECT_DOUBLE_EQ(c.speeds()[std::size_t(r)], 1.0) << "GPU " << r << ", own_time " << own_time;
    }
  }
  // Every GPU at full speed: nobody is marked slow.
  EXPECT_TRUE(gang_only(truth, 5, 1.0, false, 100, g).speeds().empty());
}

TEST(calibrator, memory_margin_tightens_below_the_prediction_and_widens_above) {
  const auto p = calib_test::prior(8);
  rng g(42);
  const auto steps = calib_test::observe_on(p, 40, g);
  auto margin_with = [&](auto peak_of) {
    dcp::calibrator c(p, {.enabled = true});
    for (std::size_t i = 0; i < steps.size(); ++i) {
      const auto& o = steps[i];
      c.add({o.load, {0, o.sp}, o.checkpointed_blocks, std::vector<double>(std::size_t(o.sp), o.seconds),
             std::vector<double>(std::size_t(o.sp), peak_of(i, o.peak_bytes))});
    }
    c.refit();
    return c.model().memory_margin;
  };
  // Peaks 8% below the prior's prediction: the fit follows them, the margin drops to its floor.
  EXPECT_NEAR(margin_with([](std::size_t, double b) { return 0.92 * b; }), 0.01, 1e-6);
  // Peaks scattered up to 12% around it: the margin covers the worst excess over the fit.
  const double wide = margin_with([](std::size_t i, double b) { return b * (i % 3 == 0 ? 1.12 : i % 3 == 1 ? 0.97 : 1.0); });
  EXPECT_GT(wide, 0.05);
  EXPECT_LT(wide, 0.15);
}

}  // namespace
