// The calibrator on its own: per-GPU speed learned from gang steps alone (whether members report
// their own busy time or the gang's), noise never marking a GPU slow, recent steps outweighing
// old ones when the clock drifts, and the memory margin following measured peaks below and
// above the model.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>
#include <random>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include <dcp/cost/calibration.hpp>

#include "calibration_test_support.hpp"

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

// One global batch on two GPUs: solo steps on either GPU (a different mix on each, as DCP-inter
// plans them) and gang steps on both, each member reporting its own busy time off by seeded
// log-normal noise of `sigma`, GPU 1 at `speed`; then a refit.
void two_gpu_batch(dcp::calibrator& c, const dcp::fitted_cost& truth, double speed, double sigma, rng& g) {
  std::normal_distribution<double> noise(0.0, sigma);
  auto measured = [&](double t, int gpu) { return t / (gpu == 1 ? speed : 1.0) * std::exp(noise(g)); };
  for (int i = 0; i < 6; ++i) {
    const auto o = calib_test::random_step(truth, g);
    const double t = truth.time(o.load, o.sp, o.checkpointed_blocks);
    if (o.sp == 1) {
      const int gpu = int(g.between(0, 1));
      c.add({o.load, {gpu, 1}, o.checkpointed_blocks, {measured(t, gpu)}, {0.0}});
    } else {
      c.add({o.load, {0, 2}, o.checkpointed_blocks, {measured(t, 0), measured(t, 1)}, {0.0, 0.0}});
    }
  }
  c.refit();
}

TEST(calibrator, noise_alone_never_marks_a_gpu_slow) {
  const auto truth = calib_test::prior(2);
  for (const std::uint64_t seed : {43u, 44u, 45u, 46u, 47u}) {
    rng g(seed);
    dcp::calibrator c(truth, {.enabled = true});
    // 8% scatter per step, more than the 3% tolerance: no refit along the way moves a speed.
    for (int b = 0; b < 24; ++b) {
      two_gpu_batch(c, truth, 1.0, 0.08, g);
      EXPECT_TRUE(c.speeds().empty()) << "seed " << seed << ", batch " << b << ": GPU 1 at " << c.speeds()[1];
    }
  }
}

TEST(calibrator, a_slow_gpu_is_found_through_the_noise) {
  const auto truth = calib_test::prior(2);
  rng g(48);
  dcp::calibrator c(truth, {.enabled = true});
  for (int b = 0; b < 12; ++b) two_gpu_batch(c, truth, 0.8, 0.05, g);
  ASSERT_EQ(c.speeds().size(), 2u);
  EXPECT_DOUBLE_EQ(c.speeds()[0], 1.0);
  EXPECT_NEAR(c.speeds()[1], 0.8, 0.04);  // the fit and the noise each move it by about 1-2%
}

TEST(calibrator, recent_steps_outweigh_old_ones_when_the_clock_drifts) {
  const auto p = calib_test::prior(8);
  rng g(49);
  const auto before = calib_test::observe_on(p, 240, g);
  auto after = calib_test::observe_on(p, 240, g);  // the same clock, now 25% slower
  for (auto& o : after) o.seconds *= 1.25;
  auto ratio_after_drift = [&](double half_life) {
    dcp::calibrator c(p, {.enabled = true, .learn_speed = false, .half_life = half_life});
    auto add = [&](const std::vector<dcp::step_observation>& obs, std::size_t from, std::size_t to) {
      for (std::size_t i = from; i < to; ++i) {
        const auto& o = obs[i];
        c.add({o.load, {0, o.sp}, o.checkpointed_blocks, std::vector<double>(std::size_t(o.sp), o.seconds),
               std::vector<double>(std::size_t(o.sp), 0.0)});
      }
      c.refit();
    };
    for (std::size_t b = 0; b < 12; ++b) add(before, 20 * b, 20 * b + 20);  // 12 batches on the old clock
    for (std::size_t b = 0; b < 4; ++b) add(after, 20 * b, 20 * b + 20);    // then 4 on the new one
    double sum = 0;
    for (const auto& o : after)
      sum += std::log(c.model().time(o.load, o.sp, o.checkpointed_blocks) / p.time(o.load, o.sp, o.checkpointed_blocks));
    return std::exp(sum / double(after.size()));
  };
  const double flat = ratio_after_drift(0), recent = ratio_after_drift(2);
  // Every step equal: 4 of 16 batches are on the new clock, the fit is about 1.25^(1/4) = 1.06.
  EXPECT_LT(flat, 1.09);
  // Half-life 2 batches: the new 4 weigh 3/4 of the total, the fit is about 1.25^(3/4) = 1.18.
  EXPECT_GT(recent, 1.15);
  EXPECT_LE(recent, 1.25 + 1e-9);
}

TEST(calibrator, fits_one_factor_until_it_has_enough_steps_for_the_form) {
  const auto p = calib_test::prior(8);
  rng g(51);
  const auto truth = calib_test::scaled_truth(p, g);
  const auto steps = calib_test::observe_on(truth, 24, g);
  dcp::calibrator c(p, {.enabled = true, .learn_speed = false});
  auto add = [&](std::size_t from, std::size_t to) {
    for (std::size_t i = from; i < to; ++i) {
      const auto& o = steps[i];
      c.add({o.load, {0, o.sp}, o.checkpointed_blocks, std::vector<double>(std::size_t(o.sp), o.seconds),
             std::vector<double>(std::size_t(o.sp), 0.0)});
    }
    c.refit();
  };
  add(0, 10);  // 10 timed steps, less than full_fit_steps (16): the prior's form times one factor
  const auto prior_t = p.coef.time_array(), fit_t = c.model().coef.time_array();
  const double factor = fit_t[0] / prior_t[0];
  EXPECT_NE(factor, 1.0);
  for (std::size_t j = 0; j < prior_t.size(); ++j)
    EXPECT_NEAR(fit_t[j], prior_t[j] * factor, 1e-12 * fit_t[j]) << "term " << j;
  EXPECT_EQ(c.model().shape.device.x_half, p.shape.device.x_half);
  EXPECT_EQ(c.model().recompute_ratio, p.recompute_ratio);
  // The truth scales each term by its own factor in [0.5, 2]: one factor leaves a visible miss.
  EXPECT_GT(c.model().residuals.time_max, 0.05);
  add(10, 24);  // 10 x 2^(-1/2) + 14 = 21 steps' weight (half_life 2): the whole form, fitted
  EXPECT_LT(c.model().residuals.time_max, 0.02);  // the ridge toward the prior keeps about 1%
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

// A member that ran out of memory with its peak unknown reports +infinity: the calibrator takes
// the capacity it filled (a lower bound of the true peak), so the margin widens at least to the
// shape's excess over the fit and the shape no longer fits; a NaN is still refused.
TEST(calibrator, an_out_of_memory_step_with_unknown_peak_widens_the_margin) {
  const auto p = calib_test::prior(8);
  rng g(7);
  const auto steps = calib_test::observe_on(p, 40, g);
  dcp::calibrator c(p, {.enabled = true});
  // The step that runs out: of those the prior thinks fit the device, the largest.
  const double capacity = p.shape.capacity();
  std::size_t out = steps.size();
  double most = 0;
  for (std::size_t i = 0; i < steps.size(); ++i) {
    const auto& o = steps[i];
    const double predicted = p.memory(o.load, o.sp, o.checkpointed_blocks);
    if (predicted < capacity && predicted > most) most = predicted, out = i;
  }
  ASSERT_LT(out, steps.size()) << "no step the prior thinks fits";
  for (std::size_t i = 0; i < steps.size(); ++i) {
    const auto& o = steps[i];
    const double peak = i == out ? std::numeric_limits<double>::infinity() : o.peak_bytes;
    c.add({o.load, {0, o.sp}, o.checkpointed_blocks, std::vector<double>(std::size_t(o.sp), i == out ? 0.0 : o.seconds),
           std::vector<double>(std::size_t(o.sp), peak)});
  }
  c.refit();
  const auto& o = steps[out];
  EXPECT_GE(c.model().memory(o.load, o.sp, o.checkpointed_blocks) * (1 + c.model().memory_margin),
            capacity * (1 - 1e-9))
      << "after the refit the shape that ran out no longer fits the planning capacity";
  EXPECT_THROW(c.add({o.load, {0, o.sp}, o.checkpointed_blocks, std::vector<double>(std::size_t(o.sp), 1.0),
                      std::vector<double>(std::size_t(o.sp), std::nan(""))}),
               dcp::error);
}

// The margin is the worst excess plus its uncertainty: with fewer than two degrees of freedom
// left by the memory fit (one factor below 16 peaks) the initial margin stands on top of the
// worst; from there, two standard errors of the excess; never below the worst excess measured.
TEST(calibrator, memory_margin_is_the_worst_excess_plus_its_uncertainty) {
  const auto p = calib_test::prior(8);
  rng g(77);
  const auto steps = calib_test::observe_on(p, 60, g);
  // The margin after `count` steps, and the formula recomputed here from the refitted model.
  auto margins = [&](std::size_t count, auto peak_of) {
    dcp::calibrator c(p, {.enabled = true, .memory_margin = 0.05});
    std::vector<double> excess;
    for (std::size_t i = 0; i < count; ++i) {
      const auto& o = steps[i];
      c.add({o.load,
             {0, o.sp},
             o.checkpointed_blocks,
             std::vector<double>(std::size_t(o.sp), o.seconds),
             std::vector<double>(std::size_t(o.sp), peak_of(i, o.peak_bytes))});
    }
    c.refit();
    for (std::size_t i = 0; i < count; ++i) {
      const auto& o = steps[i];
      excess.push_back(peak_of(i, o.peak_bytes) / c.model().memory(o.load, o.sp, o.checkpointed_blocks) - 1);
    }
    double worst = -1, mean = 0, var = 0;
    for (double e : excess) worst = std::max(worst, e), mean += e / double(count);
    // p fitted memory terms: one factor below 16 peaks (full_fit_steps), the three from there.
    const std::size_t p_terms = count < 16 ? 1 : 3;
    if (count > p_terms)
      for (double e : excess) var += (e - mean) * (e - mean) / double(count - p_terms);
    const double uncertainty =
        count < p_terms + 2 ? 0.05 : 2 * std::sqrt(var) / std::sqrt(double(count - p_terms));
    return std::pair{c.model().memory_margin, std::max(0.01, worst + uncertainty)};
  };
  auto exact = [](std::size_t, double b) { return b; };
  EXPECT_NEAR(margins(1, exact).first, 0.05, 1e-6);  // one peak: the initial margin on top of it
  EXPECT_NEAR(margins(2, exact).first, 0.05, 1e-6);
  EXPECT_NEAR(margins(3, exact).first, 0.01, 1e-6);  // three that agree with one factor: the floor
  // Five peaks whose activation bytes are 20% over the prior's: the one factor explains them.
  {
    dcp::calibrator c(p, {.enabled = true});
    for (std::size_t i = 0; i < 5; ++i) {
      const auto& o = steps[i];
      const double heavier = p.coef.static_bytes + 1.2 * (o.peak_bytes - p.coef.static_bytes);
      c.add({o.load, {0, o.sp}, o.checkpointed_blocks, std::vector<double>(std::size_t(o.sp), o.seconds),
             std::vector<double>(std::size_t(o.sp), heavier)});
    }
    c.refit();
    EXPECT_NEAR(c.model().coef.activation_bytes, 1.2 * p.coef.activation_bytes, 1e-9 * p.coef.activation_bytes);
    EXPECT_EQ(c.model().coef.static_bytes, p.coef.static_bytes);
    EXPECT_NEAR(c.model().memory_margin, 0.01, 1e-6);
  }
  // Scattered peaks: the worst excess over the fit plus two standard errors of the excess.
  auto scattered = [](std::size_t i, double b) { return b * (1 + 0.04 * double(i % 5) / 4); };
  for (std::size_t count : {5, 12, 60}) {
    const auto [margin, formula] = margins(count, scattered);
    EXPECT_NEAR(margin, formula, 1e-9) << count << " peaks";
    EXPECT_GT(margin, 0.01) << count << " peaks";
  }
}

}  // namespace
