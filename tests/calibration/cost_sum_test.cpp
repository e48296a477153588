// cost_sum: the trained model plus frozen forward networks prices each term as documented, is
// the trained model when no network is added, and plans soundly through the cost slot.
#include "calibration_test_support.hpp"

#include <dcp_test/support.hpp>
#include <gtest/gtest.h>

#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

#include <dcp/cost/analytic.hpp>
#include <dcp/cost/cost_sum.hpp>
#include <dcp/cost/scaled_cost.hpp>
#include <dcp/error.hpp>
#include <dcp/plan/check_plan.hpp>
#include <dcp/plan/dcp_planner.hpp>
#include <dcp/policies.hpp>
#include <dcp/scheduler.hpp>
#include <dcp/comm/local.hpp>

namespace {

using calib_test::rng;

dcp::analytic_cost trained(int gpus) {
  return dcp::make_analytic_cost(dcp::models::cogvideox_5b(), dcp::devices::h200_analytic(), gpus);
}

TEST(cost_sum, without_networks_is_the_trained_model) {
  rng g(21);
  const auto c = dcp::make_cost_sum(trained(8), {});
  const auto a = trained(8);
  for (int i = 0; i < 100; ++i) {
    const auto s = dcp::make_sequence(i, std::int64_t(g.log_between(1, 200000)));
    for (int sp : {1, 2, 8})
      for (int k : {0, 20, 42}) {
        EXPECT_EQ(c.time(c.load_of(s), sp, k), a.time(a.load_of(s), sp, k));
        EXPECT_EQ(c.memory(c.load_of(s), sp, k), a.memory(a.load_of(s), sp, k));
        EXPECT_EQ(c.work_floor(c.load_of(s), sp, k), a.work_floor(a.load_of(s), sp, k));
      }
  }
}

TEST(cost_sum, adds_each_forward_network_as_documented) {
  const auto d = dcp::devices::h200_analytic();
  const auto t5 = dcp::forward_networks::t5_xxl_encoder(d), vae = dcp::forward_networks::vae3d_encoder(d);
  EXPECT_NEAR(t5.parameters, 4.7e9, 0.2e9);  // T5-XXL's encoder
  const auto c = dcp::make_cost_sum(trained(8), {t5, vae});
  const auto a = trained(8);
  const auto s1 = dcp::make_sequence(1, 13, 1350), s2 = dcp::make_sequence(2, 1, 3600);
  const auto l = c.load_of(s1) + c.load_of(s2);
  const double shape = 13 * 1350 + 3600;
  for (int sp : {1, 4}) {
    const double encoders = (2 * t5.flops_per_sequence) / (sp * t5.flop_rate) + t5.layers * t5.tau +
                            shape * vae.flops_per_token / (sp * vae.flop_rate) + vae.layers * vae.tau;
    EXPECT_NEAR(c.time(l, sp, 0), a.time(l.trained, sp, 0) + encoders, 1e-12 * c.time(l, sp, 0));
    const double held = 2 * (t5.parameters + vae.parameters) + t5.output_bytes_per_sequence * 2 / sp;
    const double mem = std::max(a.memory(l.trained, sp, 0), a.static_memory() + vae.workspace_bytes_per_token * shape / sp);
    EXPECT_NEAR(c.memory(l, sp, 0), mem + held, 1e-6 * mem);
    EXPECT_GT(c.work_floor(l, sp, 0), a.work_floor(l.trained, sp, 0));
  }
  std::ostringstream os;
  os << c;
  EXPECT_NE(os.str().find("t5-xxl-encoder"), std::string::npos);
}

TEST(cost_sum, plans_soundly_in_the_cost_slot) {
  rng g(22);
  const auto d = dcp::devices::h200_analytic();
  using sum_t = dcp::cost_sum<dcp::analytic_cost>;
  const auto c = dcp::make_cost_sum(trained(8), {dcp::forward_networks::t5_xxl_encoder(d), dcp::forward_networks::vae3d_encoder(d)});
  dcp::dataset batch;
  for (int i = 0; i < 40; ++i) batch.push_back(dcp::make_sequence(i, g.between(1, 13), g.between(100, 3600)));
  const auto p = dcp::dcp_planner{}.plan(c, batch);
  EXPECT_TRUE(dcp::plan_violations(p, batch, c).empty());
  // The encoders cost time: the same batch takes longer than the trained model alone.
  EXPECT_GT(p.makespan_s, dcp::dcp_planner{}.plan(trained(8), batch).makespan_s);
  // Through the scheduler's cost slot, given by the caller.
  dcp::local_world::run(2, [&](dcp::local_comm& world) {
    dcp::scheduler<dcp::transformer_spec, dcp::local_comm, dcp::policies<sum_t>> sched(
        dcp::models::cogvideox_5b(), world,
        dcp::make_cost_sum(trained(2), {dcp::forward_networks::t5_xxl_encoder(d)}));
    const auto q = sched.plan(batch);
    sched.verify(q);
    EXPECT_TRUE(dcp::plan_violations(q, batch, sched.cost()).empty());
  });
}

// The floor is forwarded only where the trained model has one.
static_assert(dcp::step_floor_cost_model<dcp::cost_sum<dcp::analytic_cost>>);
static_assert(dcp::step_floor_cost_model<dcp::cost_sum<dcp::scaled_analytic_cost>>);
static_assert(!dcp::step_floor_cost_model<dcp::fitted_cost> &&
              !dcp::step_floor_cost_model<dcp::cost_sum<dcp::fitted_cost>>);

// Over random zero3 jobs (on the planner's clock and on a scaled truth's), frozen networks and
// steps of every legal sp and k, no step is shorter than the forwarded floor, which is the
// trained model's; a zero1 sum has none.
TEST(cost_sum, every_step_lasts_at_least_the_trained_models_floor) {
  rng g(23);
  const auto d = dcp::devices::h200_analytic();
  const std::vector<dcp::forward_network> nets{dcp::forward_networks::t5_xxl_encoder(d),
                                               dcp::forward_networks::vae3d_encoder(d)};
  auto check = [&](const auto& c, const std::string& what) {
    SCOPED_TRACE(what);
    ASSERT_EQ(c.step_floor(), c.trained.step_floor());
    for (int i = 0; i < 150; ++i) {
      typename std::decay_t<decltype(c)>::load_type l{};
      for (int s = 0, n = int(g.between(1, 6)); s < n; ++s)
        l = l + c.load_of(dcp::make_sequence(s, g.between(1, 13), g.between(1, 3600)));
      const int sp = 1 << g.between(0, 6), k = int(g.between(0, c.blocks()));
      if (!dcp::legal_sp(c, sp)) continue;  // a sum prices Ulysses steps (no rings)
      ASSERT_GE(c.time(l, sp, k), c.step_floor()) << "i " << i << " sp " << sp << " k " << k;
    }
  };
  for (const char* model : {"wan2.1-14b", "cogvideox-5b"})
    for (auto sharding : {dcp::sharding_kind::zero3, dcp::sharding_kind::zero1}) {
      const auto a = dcp::make_analytic_cost(dcp::models::preset(model), d, {.gpus = 64, .gpus_per_node = d.gpus_per_node, .sharding = sharding});
      const std::size_t pick = std::size_t(g.between(1, 3));  // t5, vae or both
      std::vector<dcp::forward_network> some;
      for (std::size_t f = 0; f < nets.size(); ++f)
        if (pick >> f & 1) some.push_back(nets[f]);
      const auto sum = dcp::make_cost_sum(a, some);
      const dcp::cost_scales scales{g.log_between(0.5, 2), g.log_between(0.5, 2), g.log_between(0.5, 2),
                                    g.log_between(0.5, 2), g.log_between(0.5, 2), 1};
      const auto truth = dcp::make_cost_sum(dcp::scaled_analytic_cost{a, scales}, some);
      std::ostringstream what;
      what << sum << " on " << scales;
      if (sharding == dcp::sharding_kind::zero3) {
        ASSERT_GT(sum.step_floor(), 0.0) << what.str();
      } else {
        ASSERT_EQ(sum.step_floor(), 0.0) << what.str();
        ASSERT_EQ(truth.step_floor(), 0.0) << what.str();
      }
      check(sum, what.str());
      check(truth, what.str() + " (truth)");
    }
}

TEST(cost_sum, bad_networks_are_rejected_by_name) {
  auto f = dcp::forward_networks::t5_xxl_encoder(dcp::devices::h200_analytic());
  f.flop_rate = 0;
  EXPECT_DCP_ERROR((void)dcp::make_cost_sum(trained(8), {f}), dcp::errc::invalid_argument, "t5-xxl-encoder",
                   "flop_rate");
  auto huge = dcp::forward_networks::t5_xxl_encoder(dcp::devices::h200_analytic());
  huge.parameters = 1e12;
  EXPECT_THROW((void)dcp::make_cost_sum(trained(8), {huge}), dcp::error);
}

}  // namespace
