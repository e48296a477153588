// fitted_cost and nnls: the fit recovers known coefficients from synthetic steps, the ridge keeps
// a few steps sane, NNLS is the true constrained optimum, dcp.fit/v1 round-trips and rejects bad
// documents, and a profile table fits.
#include "calibration_test_support.hpp"

#include <dcp_test/support.hpp>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include <dcp/cost/fit.hpp>
#include <dcp/cost/fit_json.hpp>
#include <dcp/cost/fitted_cost.hpp>
#include <dcp/cost/nnls.hpp>
#include <dcp/error.hpp>
#include <dcp/plan/check_plan.hpp>
#include <dcp/plan/dcp_planner.hpp>
#include <dcp/profile/profile_table.hpp>

namespace {

using calib_test::rng;


double objective(const std::vector<double>& a, const std::vector<double>& b, const std::vector<double>& x, std::size_t n) {
  double s = 0;
  for (std::size_t i = 0; i < b.size(); ++i) {
    double r = -b[i];
    for (std::size_t j = 0; j < n; ++j) r += a[i * n + j] * x[j];
    s += r * r;
  }
  return s;
}

// The time error fit_cost minimises (besides the ridge): sum of ((t_fit - y) / (y + median y))^2.
double weighted_time_error(const dcp::fitted_cost& c, const std::vector<dcp::step_observation>& obs) {
  std::vector<double> ys;
  for (const auto& o : obs) ys.push_back(o.seconds);
  std::sort(ys.begin(), ys.end());
  const double med = ys[ys.size() / 2];
  double s = 0;
  for (const auto& o : obs) {
    const double r = (c.time(o.load, o.sp, o.checkpointed_blocks) - o.seconds) / (o.seconds + med);
    s += r * r;
  }
  return s;
}

TEST(nnls, matches_the_best_of_every_active_set_on_random_problems) {
  rng g(11);
  for (int trial = 0; trial < 200; ++trial) {
    const std::size_t n = std::size_t(g.between(1, 5)), m = std::size_t(g.between(std::int64_t(n), 30));
    std::vector<double> a(m * n), b(m);
    for (double& v : a) v = g.unit() * 2 - 0.5;
    for (double& v : b) v = g.unit() * 4 - 2;
    const auto x = dcp::nnls(a, b, m, n);
    for (double v : x) ASSERT_GE(v, 0);
    // Brute force: for every subset, the unconstrained fit (tiny normal equations by elimination);
    // the best feasible one is the constrained optimum.
    double best = objective(a, b, std::vector<double>(n, 0.0), n);
    for (unsigned mask = 1; mask < (1u << n); ++mask) {
      std::vector<std::size_t> cols;
      for (std::size_t j = 0; j < n; ++j)
        if (mask & (1u << j)) cols.push_back(j);
      const std::size_t k = cols.size();
      std::vector<double> ata(k * (k + 1), 0.0);
      for (std::size_t r = 0; r < k; ++r) {
        for (std::size_t c = 0; c < k; ++c)
          for (std::size_t i = 0; i < m; ++i) ata[r * (k + 1) + c] += a[i * n + cols[r]] * a[i * n + cols[c]];
        for (std::size_t i = 0; i < m; ++i) ata[r * (k + 1) + k] += a[i * n + cols[r]] * b[i];
      }
      bool singular = false;
      for (std::size_t p = 0; p < k && !singular; ++p) {
        if (std::abs(ata[p * (k + 1) + p]) < 1e-12) singular = true;
        for (std::size_t r = 0; r < k && !singular; ++r) {
          if (r == p) continue;
          const double f = ata[r * (k + 1) + p] / ata[p * (k + 1) + p];
          for (std::size_t c = 0; c <= k; ++c) ata[r * (k + 1) + c] -= f * ata[p * (k + 1) + c];
        }
      }
      if (singular) continue;
      std::vector<double> x2(n, 0.0);
      bool feasible = true;
      for (std::size_t r = 0; r < k; ++r) {
        x2[cols[r]] = ata[r * (k + 1) + k] / ata[r * (k + 1) + r];
        feasible = feasible && x2[cols[r]] >= 0;
      }
      if (feasible) best = std::min(best, objective(a, b, x2, n));
    }
    EXPECT_LE(objective(a, b, x, n), best * (1 + 1e-9) + 1e-12) << "trial " << trial;
  }
}

TEST(nnls, rejects_bad_input) {
  const std::vector<double> a{1, 2, 3}, b{1};
  EXPECT_DCP_ERROR((void)dcp::nnls(a, b, 1, 2), dcp::errc::invalid_argument);
  const std::vector<double> nan_a{std::nan(""), 1};
  EXPECT_DCP_ERROR((void)dcp::nnls(nan_a, b, 1, 2), dcp::errc::invalid_argument, "NaN");
}

TEST(fitted_cost, prior_is_the_analytic_model_exactly) {
  rng g(12);
  for (int gpus : {1, 8, 32}) {
    const auto a = dcp::make_analytic_cost(dcp::models::llama3_8b(), dcp::devices::h200_analytic(), gpus);
    const auto f = dcp::make_fitted_cost(a);
    for (int i = 0; i < 200; ++i) {
      const auto o = calib_test::random_step(f, g);
      EXPECT_NEAR(f.time(o.load, o.sp, o.checkpointed_blocks) / a.time(o.load, o.sp, o.checkpointed_blocks), 1, 1e-12);
      EXPECT_NEAR(f.memory(o.load, o.sp, o.checkpointed_blocks) / a.memory(o.load, o.sp, o.checkpointed_blocks), 1, 1e-12);
      EXPECT_NEAR(f.work_floor(o.load, o.sp, o.checkpointed_blocks) / a.work_floor(o.load, o.sp, o.checkpointed_blocks), 1,
                  1e-9);
    }
    EXPECT_EQ(f.capacity(), a.capacity());
  }
}

// Llama-3.1-8B as published: 8 key/value heads and a 128256-token vocabulary, untied, full loss
// (its logits outweigh a block's working set) or chunked.
dcp::transformer_spec published_llama(dcp::loss_kind loss) {
  auto m = dcp::models::llama3_8b();
  m.kv_heads = 8, m.vocab = 128256, m.loss = loss;
  return m;
}

TEST(fitted_cost, prior_is_the_analytic_model_exactly_with_gqa_and_a_vocabulary) {
  rng g(14);
  for (const auto loss : {dcp::loss_kind::full, dcp::loss_kind::chunked})
    for (int gpus : {2, 8, 32}) {  // 8B with its vocabulary does not fit one GPU under zero1
      const auto a = dcp::make_analytic_cost(published_llama(loss), dcp::devices::h200_analytic(), gpus);
      EXPECT_FALSE(a.is_classic());
      EXPECT_TRUE(a.has_fitted_form());
      const auto f = dcp::make_fitted_cost(a);
      for (int i = 0; i < 200; ++i) {
        const auto o = calib_test::random_step(f, g);
        const int sp = o.sp, k = o.checkpointed_blocks;
        EXPECT_NEAR(f.time(o.load, sp, k) / a.time(o.load, sp, k), 1, 1e-12);
        EXPECT_NEAR(f.memory(o.load, sp, k) / a.memory(o.load, sp, k), 1, 1e-12);
        EXPECT_NEAR(f.work_floor(o.load, sp, k) / a.work_floor(o.load, sp, k), 1, 1e-9);
      }
      EXPECT_NEAR(f.max_tokens_per_gpu() / a.max_tokens_per_gpu(), 1, 1e-12);
    }
  // Layouts outside the form are refused by name.
  const auto tp2 = dcp::make_analytic_cost(published_llama(dcp::loss_kind::full), dcp::devices::h200_analytic(),
                                           {.gpus = 16, .tp = 2});
  EXPECT_DCP_ERROR((void)dcp::make_fitted_cost(tp2), dcp::errc::invalid_argument, "tp = ep = 1");
}

TEST(fitted_cost, fit_recovers_known_coefficients_with_the_logits_fixed) {
  rng g(15);
  for (int trial = 0; trial < 8; ++trial) {
    const auto p = calib_test::prior(16, published_llama(dcp::loss_kind::full));
    const auto truth = calib_test::scaled_truth(p, g);
    const auto obs = calib_test::observe_on(truth, 60, g);
    const auto fit = dcp::fit_cost(p, obs, {0.0, true, true});
    const auto wm = truth.coef.memory_array(), gm = fit.coef.memory_array();
    for (std::size_t j = 0; j < wm.size(); ++j) EXPECT_NEAR(gm[j] / wm[j], 1, 1e-6) << "memory term " << j;
    const auto want = truth.coef.time_array(), got = fit.coef.time_array();
    for (std::size_t j = 0; j < want.size(); ++j) {
      if (want[j] > 0) {
        EXPECT_NEAR(got[j] / want[j], 1, 1e-6) << "time term " << j;
      }
    }
    EXPECT_LT(fit.residuals.memory_max, 1e-8);
    EXPECT_LT(fit.residuals.time_max, 1e-8);
  }
}

TEST(fitted_cost, fit_recovers_known_coefficients_from_synthetic_steps) {
  rng g(13);
  for (int trial = 0; trial < 20; ++trial) {
    const auto p = calib_test::prior(32);
    const auto truth = calib_test::scaled_truth(p, g);
    const auto obs = calib_test::observe_on(truth, 60, g);
    const auto fit = dcp::fit_cost(p, obs, {0.0, true, true});  // no ridge: the data alone
    const auto want = truth.coef.time_array(), got = fit.coef.time_array();
    for (std::size_t j = 0; j < want.size(); ++j) EXPECT_NEAR(got[j] / want[j], 1, 1e-6) << "time term " << j;
    const auto wm = truth.coef.memory_array(), gm = fit.coef.memory_array();
    for (std::size_t j = 0; j < wm.size(); ++j) EXPECT_NEAR(gm[j] / wm[j], 1, 1e-6) << "memory term " << j;
    EXPECT_LT(fit.residuals.time_max, 1e-8);
    EXPECT_LT(fit.residuals.memory_max, 1e-8);
    EXPECT_EQ(fit.residuals.time_points, 60);
    // The default ridge costs little with 60 steps: predictions within 2%.
    const auto ridged = dcp::fit_cost(p, obs);
    EXPECT_LT(ridged.residuals.time_rms, 0.02) << ridged;
  }
}

TEST(fitted_cost, fit_recovers_the_saturation_and_the_recompute_ratio) {
  rng g(19);
  for (int trial = 0; trial < 6; ++trial) {
    const auto p = calib_test::prior(16);
    auto truth = calib_test::scaled_truth(p, g);
    // A device whose efficiency saturates 16x later (so that it shows in these steps) and whose
    // recompute costs 2^(3/4) x the form's forward (both on the search grids, so the fit can land
    // on them exactly).
    truth.shape.device.x_half = p.shape.device.x_half * 16;
    truth.recompute_ratio = std::pow(2.0, 0.75);
    const auto obs = calib_test::observe_on(truth, 80, g);
    const auto fit = dcp::fit_cost(p, obs, {0.0, true, true});
    EXPECT_NEAR(fit.shape.device.x_half / truth.shape.device.x_half, 1, 1e-9) << fit;
    EXPECT_NEAR(fit.recompute_ratio / truth.recompute_ratio, 1, 1e-9) << fit;
    const auto held_out = calib_test::observe_on(truth, 100, g);
    EXPECT_LT(dcp::residuals_of(fit, held_out).time_max, 1e-6) << fit;
    // The nine linear coefficients alone cannot follow it.
    const auto linear_only = dcp::fit_cost(p, obs, {0.0, true, true, false, false});
    EXPECT_GT(dcp::residuals_of(linear_only, held_out).time_rms, 100 * dcp::residuals_of(fit, held_out).time_rms);
  }
  // On the prior's own clock the search keeps the prior's constants.
  const auto p = calib_test::prior(8);
  const auto fit = dcp::fit_cost(p, calib_test::observe_on(p, 30, g));
  EXPECT_EQ(fit.shape.device.x_half, p.shape.device.x_half);
  EXPECT_EQ(fit.recompute_ratio, 1.0);
}

TEST(fitted_cost, a_handful_of_steps_improve_on_the_prior_and_no_coefficient_goes_negative) {
  rng g(14);
  for (int trial = 0; trial < 40; ++trial) {
    const auto p = calib_test::prior(16);
    const auto truth = calib_test::scaled_truth(p, g);
    const auto obs = calib_test::observe_on(truth, 4, g);
    const auto held_out = calib_test::observe_on(truth, 100, g);
    const auto fit = dcp::fit_cost(p, obs);
    for (double v : fit.coef.time_array()) EXPECT_GE(v, 0);
    for (double v : fit.coef.memory_array()) EXPECT_GE(v, 0);
    EXPECT_NO_THROW(fit.validate());
    EXPECT_LE(weighted_time_error(fit, obs), weighted_time_error(p, obs) * (1 + 1e-12));
    EXPECT_LE(dcp::residuals_of(fit, held_out).memory_rms, dcp::residuals_of(p, held_out).memory_rms + 1e-12);
  }
  // Measurements that would drive a coefficient below zero stop it at zero.
  const auto p = calib_test::prior(8);
  auto obs = calib_test::observe_on(p, 30, g);
  for (auto& o : obs) o.seconds = 0.2 * p.time_features(o.load, o.sp, o.checkpointed_blocks)[5] * p.coef.block_pass_s;
  const auto fit = dcp::fit_cost(p, obs, {0.0, true, false});
  EXPECT_EQ(fit.coef.linear_flop_s + fit.coef.attention_flop_s > 0, true);
  for (double v : fit.coef.time_array()) EXPECT_GE(v, 0);
}

TEST(fitted_cost, bad_observations_are_rejected_by_name) {
  const auto p = calib_test::prior(8);
  rng g(15);
  auto o = calib_test::observe_on(p, 1, g);
  auto with = [&](auto change) {
    auto v = o;
    change(v[0]);
    return v;
  };
  const auto bad = dcp::errc::invalid_argument;
  EXPECT_DCP_ERROR((void)dcp::fit_cost(p, with([](auto& x) { x.seconds = -1; })), bad, "seconds");
  EXPECT_DCP_ERROR((void)dcp::fit_cost(p, with([](auto& x) { x.seconds = std::nan(""); })), bad, "seconds");
  EXPECT_DCP_ERROR(
      (void)dcp::fit_cost(p, with([](auto& x) { x.peak_bytes = std::numeric_limits<double>::infinity(); })), bad,
      "peak_bytes");
  EXPECT_DCP_ERROR((void)dcp::fit_cost(p, with([](auto& x) { x.sp = 7; })), bad, "sp = 7");
  EXPECT_DCP_ERROR((void)dcp::fit_cost(p, with([](auto& x) { x.checkpointed_blocks = 99; })), bad,
                   "checkpointed_blocks");
  EXPECT_DCP_ERROR((void)dcp::fit_cost(p, o, {-1, true, true}), bad, "prior_weight");
  EXPECT_DCP_ERROR((void)dcp::fit_cost(p, with([](auto& x) { x.weight = -1; })), bad, "weight = -1");
  EXPECT_DCP_ERROR((void)dcp::fit_cost(p, with([](auto& x) { x.weight = std::nan(""); })), bad, "weight");
}

TEST(fitted_cost, a_step_of_weight_zero_counts_for_nothing) {
  const auto p = calib_test::prior(8);
  rng g(17);
  auto obs = calib_test::observe_on(calib_test::scaled_truth(p, g), 30, g);
  const std::vector<dcp::step_observation> kept(obs.begin(), obs.begin() + 20);
  // The other ten, three times slower and larger, weigh nothing: the fit is the first twenty's.
  for (std::size_t i = 20; i < obs.size(); ++i) obs[i].weight = 0, obs[i].seconds *= 3, obs[i].peak_bytes *= 3;
  const auto a = dcp::fit_cost(p, kept), b = dcp::fit_cost(p, obs);
  EXPECT_EQ(a.coef, b.coef);
  EXPECT_EQ(a.recompute_ratio, b.recompute_ratio);
  EXPECT_EQ(a.shape.device.x_half, b.shape.device.x_half);
}

TEST(fitted_cost, plans_like_any_cost_model) {
  rng g(16);
  const auto p = calib_test::prior(16);
  const auto truth = calib_test::scaled_truth(p, g);
  const auto fit = dcp::fit_cost(p, calib_test::observe_on(truth, 40, g));
  const auto batch = calib_test::random_batch(g, 60, 1);
  const auto plan = dcp::dcp_planner{}.plan(fit, batch);
  EXPECT_TRUE(dcp::plan_violations(plan, batch, fit).empty());
}

TEST(fit_json, round_trips_exactly) {
  rng g(17);
  const auto p = calib_test::prior(32);
  auto fit = dcp::fit_cost(p, calib_test::observe_on(calib_test::scaled_truth(p, g), 20, g));
  fit.memory_margin = 0.037;
  std::stringstream s;
  dcp::write_fit(s, fit);
  EXPECT_NE(s.str().find("\"dcp.fit/v1\""), std::string::npos);
  const auto back = dcp::read_fit(s, "round trip");
  EXPECT_EQ(back, fit);
  // A file written before recompute_ratio was fitted reads as 1.
  std::string text = s.str();
  const auto at = text.find("\"recompute_ratio\"");
  ASSERT_NE(at, std::string::npos);
  text.erase(at, text.find('\n', at) + 1 - at);
  std::istringstream old(text);
  EXPECT_EQ(dcp::read_fit(old, "old").recompute_ratio, 1.0);
}

// A fit holds the dense self-attention model (GQA and a vocabulary in its form); a file whose
// model sets a field the fit does not price (a cross-attention here) is refused, never read as
// the model it is not.
TEST(fit_json, a_model_field_it_cannot_price_is_refused) {
  std::stringstream s;
  dcp::write_fit(s, calib_test::prior(8));
  auto j = nlohmann::json::parse(s.str());
  j["model"]["cross_attention_tokens"] = 512;
  std::istringstream in(j.dump());
  try {
    (void)dcp::read_fit(in, "cross.json");
    ADD_FAILURE() << "a fit with cross_attention_tokens was read";
  } catch (const dcp::error& e) {
    EXPECT_EQ(e.code(), dcp::errc::invalid_argument);
    EXPECT_NE(std::string(e.what()).find("self-attention only"), std::string::npos) << e.what();
  }
}

TEST(fit_json, bad_documents_are_clear_errors) {
  std::stringstream good;
  dcp::write_fit(good, calib_test::prior(8));
  const std::string text = good.str();
  auto read = [](const std::string& t) {
    std::istringstream in(t);
    (void)dcp::read_fit(in, "bad.json");
  };
  auto replaced = [&](const std::string& from, const std::string& to) {
    std::string t = text;
    const auto at = t.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    return t.replace(at, from.size(), to);
  };
  const auto parse = dcp::errc::parse_error;
  EXPECT_DCP_ERROR(read(text.substr(0, text.size() / 2)), parse, "bad.json");
  EXPECT_DCP_ERROR(read(replaced("dcp.fit/v1", "dcp.profile/v1")), parse, "expected \"dcp.fit/v1\"");
  EXPECT_DCP_ERROR(read(replaced("\"gpus\": 8", "\"gpus\": 1e60")), parse, "gpus");
  EXPECT_DCP_ERROR(read(replaced("\"activation_bytes\"", "\"activation_bytez\"")), parse, "missing");
  EXPECT_DCP_ERROR(read(replaced("\"message_s\": ", "\"message_s\": -")), dcp::errc::invalid_argument, "message_s");
  EXPECT_DCP_ERROR(read(replaced("\"block_pass_s\": ", "\"block_pass_s\": null, \"x\": ")), parse, "block_pass_s");
  EXPECT_DCP_ERROR(read(replaced("\"attention\": \"full\"", "\"attention\": \"sparse\"")), parse, "sparse");
}

TEST(fitted_cost, fits_a_profile_table) {
  rng g(18);
  const auto p = calib_test::prior(8);
  const auto truth = calib_test::scaled_truth(p, g);
  dcp::profile_table t;
  t.model = p.shape.model;
  t.device = "h200";
  t.gpus = 8;
  t.memory_capacity_bytes = p.capacity();
  t.static_memory_bytes = truth.coef.static_bytes;
  for (int sp : {1, 2, 8})
    for (std::int64_t n : {2048, 16384, 65536})
      for (int k : {0, 42}) {
        const auto l = p.load_of(dcp::make_sequence(0, n));
        t.entries.push_back({0, p.tokens_of(dcp::make_sequence(0, n)), 1, n, sp, 1, k, truth.time(l, sp, k),
                             truth.memory(l, sp, k)});
      }
  const auto fit = dcp::fit_profile(t, p);
  EXPECT_LT(fit.residuals.time_rms, 0.02) << fit;
  EXPECT_LT(fit.residuals.memory_max, 0.01) << fit;
  t.gpus = 16;
  EXPECT_DCP_ERROR((void)dcp::fit_profile(t, p), dcp::errc::mismatch);
}

}  // namespace
