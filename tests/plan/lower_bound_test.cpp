// The lower bounds of DESIGN section 3: the joint bound is never below the simple one and never
// above the makespan of any plan, for every planner over random batches (sparse and full,
// 1..256 GPUs including non-powers of two); the exact sweep agrees with a bisection on the
// bound's definition; bounds are order independent.

#include <dcp/cost/analytic.hpp>
#include <dcp/plan/bucket_planner.hpp>
#include <dcp/plan/dcp_planner.hpp>
#include <dcp/plan/dynamic_cp_planner.hpp>
#include <dcp/plan/lower_bounds.hpp>
#include <dcp/plan/packed_planner.hpp>
#include <dcp/plan/sequence_options.hpp>

#include <dcp_test/ready.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <iostream>
#include <limits>
#include <random>
#include <span>
#include <string>
#include <vector>

namespace {

struct random_source {
  std::mt19937_64 g;
  std::int64_t between(std::int64_t lo, std::int64_t hi) {
    return lo + static_cast<std::int64_t>(g() % static_cast<std::uint64_t>(hi - lo + 1));
  }
  std::int64_t log_between(std::int64_t lo, std::int64_t hi) {
    const double u = static_cast<double>(g() >> 11) * 0x1.0p-53;
    const double a = std::log(static_cast<double>(lo)), b = std::log(static_cast<double>(hi) + 1);
    return std::clamp(static_cast<std::int64_t>(std::exp(a + (b - a) * u)), lo, hi);
  }
};

dcp::analytic_cost random_cost(random_source& r) {
  static const std::array models{dcp::models::cogvideox_5b(), dcp::models::stdit3_xl(), dcp::models::llama3_8b()};
  static const std::array gpus{1, 2, 4, 8, 16, 24, 32, 40, 64, 72, 128, 256};
  const auto& m = models[static_cast<std::size_t>(r.between(0, 2))];
  const auto d = r.between(0, 1) ? dcp::devices::h200_analytic() : dcp::devices::h100_analytic();
  for (;;) {
    const int n = gpus[static_cast<std::size_t>(r.between(0, gpus.size() - 1))];
    const dcp::analytic_cost c{m, d, n};
    if (c.static_memory() < c.capacity()) return dcp::make_analytic_cost(m, d, n);
  }
}

// Lengths from tiny to the longest that fits, sparse (a few per GPU) or full; ids unique.
std::vector<dcp::sequence> random_batch(random_source& r, const dcp::analytic_cost& c) {
  const std::int64_t limit = dcp::largest_feasible_tokens(c) - c.model.text_tokens;
  const std::int64_t count = r.log_between(1, std::min<std::int64_t>(8 * c.gpus(), 400));
  std::vector<dcp::sequence> out;
  for (std::int64_t i = 0; i < count; ++i) {
    const std::int64_t n = r.between(0, 7) == 0 ? r.log_between(std::max<std::int64_t>(1, limit / 4), limit)
                                                : r.log_between(64, std::min<std::int64_t>(limit, 1 << 16));
    if (c.model.attention == dcp::attention_kind::factorized_2d) {
      const std::int64_t t = std::min<std::int64_t>(r.log_between(1, 120), n);
      out.push_back(dcp::make_sequence(1000 - 3 * i, t, std::max<std::int64_t>(1, n / t)));
    } else {
      out.push_back(dcp::make_sequence(1000 - 3 * i, n));
    }
  }
  return out;
}

// The joint bound by its definition: bisection on T over the predicate "every sequence has an
// sp on which no step of the batch that holds it ends after T, and the smallest packed floors
// among those fit N T".
double joint_by_bisection(const dcp::analytic_cost& c, std::span<const dcp::sequence> batch) {
  std::vector<std::vector<std::pair<double, double>>> opts;  // (time, floor) per sequence
  dcp::analytic_load whole{};
  for (const auto& s : batch) whole = whole + c.load_of(s);
  double hi = 0;
  for (const auto& s : batch) {
    const auto load = c.load_of(s);
    auto& o = opts.emplace_back();
    for (const auto& x : dcp::options_of(c, load)) {
      o.emplace_back(c.shared_time_floor(load, x.sp, x.checkpointed_blocks, x.time_s, whole),
                     std::max(c.work_floor(load, x.sp, x.checkpointed_blocks),
                              c.packed_work_floor(load, x.sp, x.checkpointed_blocks)));
      hi = std::max(hi, x.time_s);
    }
    double w = 0;
    for (const auto& [t, f] : o) w = std::max(w, f);
    hi += w / c.gpus();
  }
  auto fits = [&](double T) {
    double sum = 0;
    for (const auto& o : opts) {
      double w = std::numeric_limits<double>::infinity();
      for (const auto& [t, f] : o)
        if (t <= T) w = std::min(w, f);
      if (!std::isfinite(w)) return false;
      sum += w;
    }
    return sum <= c.gpus() * T;
  };
  double lo = 0;
  for (int i = 0; i < 200; ++i) {
    const double mid = (lo + hi) / 2;
    (fits(mid) ? hi : lo) = mid;
  }
  return hi;
}

TEST(LowerBounds, JointIsBetweenSimpleAndEveryPlannersMakespan) {
  const std::uint64_t seed = 20261130;
  std::cout << "[ seed     ] " << seed << "\n";
  random_source r{std::mt19937_64(seed)};
  int batches = 0, tighter = 0;
  for (int trial = 0; trial < 300; ++trial) {
    const auto c = random_cost(r);
    const auto batch = random_batch(r, c);
    const auto b = dcp::lower_bounds(c, batch);
    SCOPED_TRACE(::testing::Message() << "trial " << trial << " on " << c << " with " << batch.size() << " sequences");
    ASSERT_GE(b.joint_s, b.simple_s);
    ASSERT_GT(b.simple_s, 0);
    tighter += b.joint_s > b.simple_s * (1 + 1e-9);
    auto check = [&](const auto& planner) {
      const dcp::plan p = dcp_test::ready_for(planner, c, batch).plan(c, batch);
      EXPECT_EQ(p.lower_bound_s, b.simple_s) << planner.name();
      EXPECT_EQ(p.joint_lower_bound_s, b.joint_s) << planner.name();
      EXPECT_LE(p.joint_lower_bound_s, p.makespan_s * (1 + 1e-12)) << planner.name();
      EXPECT_LE(p.efficiency(), 1 + 1e-12) << planner.name();
      EXPECT_LE(p.simple_efficiency(), p.efficiency()) << planner.name();
    };
    dcp::dcp_planner no_inter, no_intra;
    no_inter.inter = false;
    no_intra.intra = false;
    check(dcp::dcp_planner{});
    check(no_inter);
    check(no_intra);
    check(dcp::dynamic_cp_planner{});
    // The widest size buddy blocks offer (the planners here plan on them).
    const int widest = dcp::planning_context{c, dcp::selective_recompute{}, dcp::default_groups(c)}.sp_sizes().back();
    for (int sp : {1, widest}) {
      dcp::packed_planner packed;
      packed.sp = sp;
      packed.on_infeasible = dcp::infeasible_policy::skip;
      dcp::bucket_planner bucket;
      bucket.sp = sp;
      bucket.on_infeasible = dcp::infeasible_policy::skip;
      // A skipping planner's bounds cover what it planned; check them against its own plan.
      for (const dcp::plan& p : {packed.plan(c, batch), bucket.plan(c, batch)}) {
        EXPECT_LE(p.joint_lower_bound_s, p.makespan_s * (1 + 1e-12)) << p.method << " sp " << sp;
        EXPECT_GE(p.joint_lower_bound_s, p.lower_bound_s) << p.method << " sp " << sp;
      }
    }
    if (HasFailure()) return;
    ++batches;
  }
  std::cout << "[ bounds   ] " << batches << " batches, joint above simple in " << tighter << "\n";
  EXPECT_GT(tighter, 0);  // the joint bound earns its keep somewhere
}

TEST(LowerBounds, SweepAgreesWithBisectionOnTheDefinition) {
  const std::uint64_t seed = 7;
  random_source r{std::mt19937_64(seed)};
  for (int trial = 0; trial < 200; ++trial) {
    const auto c = random_cost(r);
    const auto batch = random_batch(r, c);
    const double want = joint_by_bisection(c, batch);
    EXPECT_NEAR(dcp::joint_lower_bound(c, batch), want, 1e-9 * want)
        << "seed " << seed << " trial " << trial << " on " << c << " with " << batch.size() << " sequences";
  }
}

// One long sequence that fits only wide and many short ones: the simple bound takes the long
// one's fastest (widest, costliest) option and the short ones' work apart; the joint bound knows
// the long one cannot be both fast and cheap.
TEST(LowerBounds, JointIsTighterWhenTheLongestMustGoWide) {
  const auto c = dcp::make_analytic_cost(dcp::models::llama3_8b(), dcp::devices::h200_analytic(), 16);
  std::vector<dcp::sequence> batch{dcp::make_sequence(0, 200'000)};
  for (std::int64_t i = 1; i <= 40; ++i) batch.push_back(dcp::make_sequence(i, 2048));
  const auto b = dcp::lower_bounds(c, batch);
  EXPECT_GT(b.joint_s, b.simple_s * 1.01) << b.joint_s << " vs " << b.simple_s;
  const auto p = dcp::dcp_planner{}.plan(c, batch);
  EXPECT_LE(b.joint_s, p.makespan_s);
}

TEST(LowerBounds, OrderIndependentAndZeroForNothingFeasible) {
  const auto c = dcp::make_analytic_cost(dcp::models::cogvideox_5b(), dcp::devices::h200_analytic(), 8);
  std::vector<dcp::sequence> batch;
  for (std::int64_t i = 0; i < 30; ++i) batch.push_back(dcp::make_sequence(i, 500 + 3001 * i));
  const auto a = dcp::lower_bounds(c, batch);
  std::reverse(batch.begin(), batch.end());
  EXPECT_EQ(dcp::lower_bounds(c, batch), a);
  const std::vector<dcp::sequence> too_long{dcp::make_sequence(1, 90'000'000)};
  EXPECT_EQ(dcp::lower_bounds(c, too_long), dcp::batch_bounds{});
}

}  // namespace

namespace {

// A step computes at eff(x), which grows with its tokens per GPU, so a sequence whose attention
// dominates can end sooner in company than alone: the time floor the bounds take for it is at
// most every step that holds it with others of its batch (any k at or above its own, any legal
// ring), and the company is faster than alone often enough to matter.
TEST(LowerBounds, SharedTimeFloorHoldsForEveryStepThatHoldsTheSequence) {
  const std::uint64_t seed = 41;
  random_source r{std::mt19937_64(seed)};
  int steps = 0, below_alone = 0, company_beats_alone = 0;
  for (int trial = 0; trial < 3000; ++trial) {
    const auto c = random_cost(r);
    const auto batch = random_batch(r, c);
    dcp::analytic_load whole{};
    for (const auto& s : batch) whole = whole + c.load_of(s);
    const auto& mine = batch[static_cast<std::size_t>(r.between(0, static_cast<std::int64_t>(batch.size()) - 1))];
    const auto l = c.load_of(mine);
    const auto options = dcp::options_of(c, l, std::span<const int>(dcp::legal_sp_sizes(c)));
    if (options.empty()) continue;
    const auto& o = options[static_cast<std::size_t>(r.between(0, static_cast<std::int64_t>(options.size()) - 1))];
    const double floor = c.shared_time_floor(l, o.sp, o.checkpointed_blocks, o.time_s, whole);
    ASSERT_LE(floor, o.time_s);
    below_alone += floor < o.time_s;
    const int k =
        r.between(0, 1) ? o.checkpointed_blocks : static_cast<int>(r.between(o.checkpointed_blocks, c.blocks()));
    // Company up to a random share more tokens (the fastest company is a little, not all).
    const double most = l.tokens * (1 + static_cast<double>(r.log_between(1, 3000)) / 1000);
    dcp::analytic_load step = l;
    for (const auto& s : batch)
      if (const auto other = c.load_of(s); s.id != mine.id && step.tokens + other.tokens <= most &&
                                           c.memory(step + other, o.sp, k) <= c.capacity())
        step = step + other;
    for (int ring = c.step_ring(o.sp); dcp::legal_ring(c, o.sp, ring); ring *= 2) {
      ++steps;
      const double t = c.time(step, o.sp, k, ring);
      company_beats_alone += t < o.time_s;
      EXPECT_GE(t, floor * (1 - 1e-12)) << "seed " << seed << " trial " << trial << " on " << c << ", sp " << o.sp
                                         << ", k " << k << ", ring " << ring;
    }
  }
  std::cout << "[ bounds   ] " << steps << " steps, floor below alone in " << below_alone
            << ", a step in company faster than alone in " << company_beats_alone << "\n";
  EXPECT_GT(steps, 1000);
  EXPECT_GT(company_beats_alone, 0);  // the floor is needed: alone is no floor
}

// The packed floor is a floor: no step that fits memory costs less GPU-seconds than the summed
// packed floors of its sequences at its own k, and it never falls below the simple floor.
TEST(LowerBounds, PackedFloorHoldsForEveryFeasibleStep) {
  const std::uint64_t seed = 31;
  random_source r{std::mt19937_64(seed)};
  int steps = 0;
  for (int trial = 0; trial < 2000; ++trial) {
    const auto c = random_cost(r);
    const auto batch = random_batch(r, c);
    const auto sps = dcp::legal_sp_sizes(c);
    const int sp = sps[static_cast<std::size_t>(r.between(0, static_cast<std::int64_t>(sps.size()) - 1))];
    const int k = static_cast<int>(r.between(0, c.blocks()));
    dcp::analytic_load load{};
    double floors = 0;
    for (const auto& s : batch) {
      const auto l = c.load_of(s);
      if (c.memory(load + l, sp, k) > c.capacity()) break;
      load = load + l;
      floors += c.packed_work_floor(l, sp, k);
      EXPECT_GE(c.packed_work_floor(l, sp, k), c.work_floor(l, sp, k) * (1 - 1e-12));
    }
    if (load.sequences == 0) continue;
    ++steps;
    EXPECT_LE(floors, sp * c.time(load, sp, k) * (1 + 1e-12))
        << "seed " << seed << " trial " << trial << " on " << c << ", sp " << sp << ", k " << k;
  }
  EXPECT_GT(steps, 500);
}

}  // namespace
