// Pipeline stages (DESIGN section 4.5): the 1F1B schedule against its closed form and against an
// independent fixed-point solver of the same rules; every planner's plans on random pp > 1 jobs
// valid (every sequence once, memory in flight within capacity, starts from the schedule, above
// the pipeline bounds); orders that deadlock named and repaired by a flush; the executor on the
// planner's own clock reproducing the plan; the dcp planner's pipeline knobs honoured, tuned and
// checked; stage models and layouts that are wrong named.

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <set>
#include <span>
#include <string>
#include <tuple>
#include <vector>

#include <gtest/gtest.h>

#include <dcp/cost/analytic.hpp>
#include <dcp/cost/device.hpp>
#include <dcp/group/buddy_groups.hpp>
#include <dcp/plan/bucket_planner.hpp>
#include <dcp/plan/check_plan.hpp>
#include <dcp/plan/dcp_planner.hpp>
#include <dcp/plan/dynamic_cp_planner.hpp>
#include <dcp/plan/packed_planner.hpp>
#include <dcp/plan/pipeline_plan.hpp>
#include <dcp/plan/pipeline_schedule.hpp>
#include <dcp/plan/plan_builder.hpp>
#include <dcp/sim/execute.hpp>
#include <dcp/sim/truth.hpp>
#include <dcp/workload/tuning.hpp>

#include <dcp_test/support.hpp>

namespace {

// A plan of `units` units whose steps are the given blocks in order, all in round 0.
dcp::plan plan_of(int units, const std::vector<dcp::rank_block>& blocks) {
  dcp::plan p;
  p.gpus = units;
  for (const auto& b : blocks) {
    dcp::plan_step s;
    s.ranks = b;
    p.steps.push_back(s);
  }
  return p;
}

// The same rules as `schedule_pipeline`, solved independently: each unit's 1F1B order written out
// per stage, then every start raised to the latest of its predecessors until nothing moves (the
// longest path of an acyclic graph; a cycle never settles within the bound and fails the test).
std::vector<double> fixed_point_ends(const dcp::plan& p, std::span<const dcp::pipeline_step_times> t, int P) {
  const std::size_t d = static_cast<std::size_t>(p.warmup_depth);
  const std::size_t n = p.steps.size();
  // op index: (j * P + s) * 2 + back
  std::vector<std::vector<std::size_t>> before(n * P * 2);  // same-GPU predecessors
  for (int u = 0; u < p.gpus; ++u) {
    std::vector<std::size_t> list;
    for (std::size_t j = 0; j < n; ++j)
      if (p.steps[j].ranks.contains(u)) list.push_back(j);
    const std::size_t m = list.size();
    for (int s = 0; s < P; ++s) {
      std::vector<std::size_t> seq;
      const std::size_t w = std::min<std::size_t>(d * static_cast<std::size_t>(P - 1 - s), m);
      std::size_t f = 0, b = 0;
      while (f < w) seq.push_back((list[f++] * P + s) * 2);
      while (f < m) seq.push_back((list[f++] * P + s) * 2), seq.push_back((list[b++] * P + s) * 2 + 1);
      while (b < m) seq.push_back((list[b++] * P + s) * 2 + 1);
      for (std::size_t i = 1; i < seq.size(); ++i) before[seq[i]].push_back(seq[i - 1]);
    }
  }
  std::vector<double> end(n * P * 2, 0);
  for (std::size_t pass = 0; pass <= n * P * 2 + 1; ++pass) {
    bool moved = false;
    for (std::size_t j = 0; j < n; ++j)
      for (int s = 0; s < P; ++s)
        for (int back = 0; back < 2; ++back) {
          const std::size_t o = (j * P + s) * 2 + back;
          double start = 0;
          for (std::size_t q : before[o]) start = std::max(start, end[q]);
          if (back == 0 && s > 0) start = std::max(start, end[(j * P + s - 1) * 2] + t[j].transfer_s);
          if (back == 1 && s == P - 1) start = std::max(start, end[(j * P + s) * 2]);
          if (back == 1 && s < P - 1) start = std::max(start, end[(j * P + s + 1) * 2 + 1] + t[j].transfer_s);
          const double e = start + (back == 0 ? t[j].forward_s : t[j].backward_s);
          if (e != end[o]) end[o] = e, moved = true;
        }
    if (!moved) return end;
  }
  ADD_FAILURE() << "the fixed point did not settle: the orders form a cycle";
  return end;
}

TEST(PipelineSchedule, EqualMicroBatchesTakeTheClosedForm) {
  // One unit, m equal micro-batches, no transfer: 1F1B lasts (m + P - 1)(f + b), at every warmup
  // depth (a deeper warmup cannot shorten a pipeline of equal micro-batches).
  for (int d : {1, 2, 3})
    for (int P : {1, 2, 4, 8})
      for (int m : {1, 2, 3, 7, 16}) {
        dcp::plan p = plan_of(1, std::vector<dcp::rank_block>(static_cast<std::size_t>(m), {0, 1}));
        p.warmup_depth = d;
        const std::vector<dcp::pipeline_step_times> t(static_cast<std::size_t>(m), {1.0, 2.0, 0.0});
        const auto timeline = dcp::schedule_pipeline(p, t, P);
        EXPECT_DOUBLE_EQ(timeline.makespan_s, (m + P - 1) * 3.0) << "d = " << d << ", P = " << P << ", m = " << m;
      }
}

TEST(PipelineSchedule, ADeeperWarmupRunsAheadOfALongMicroBatch) {
  // One unit of 4 stages: short micro-batches around one 10x longer. At depth 1 stage 0 stops
  // after P - 1 forwards past it; at depth 2 it runs 2 (P - 1) and the pipeline ends sooner.
  dcp::plan p = plan_of(1, std::vector<dcp::rank_block>(12, {0, 1}));
  std::vector<dcp::pipeline_step_times> t(12, {1.0, 2.0, 0.0});
  t[4] = {10.0, 20.0, 0.0};
  const double one = dcp::schedule_pipeline(p, t, 4).makespan_s;
  p.warmup_depth = 2;
  const double two = dcp::schedule_pipeline(p, t, 4).makespan_s;
  EXPECT_LT(two, one);
  // Never below the long micro-batch's own path: forward through 4 stages and back.
  EXPECT_GE(two, 4 * 30.0);
  // Stage 0 holds d (P - 1) + 1 micro-batches at most: the in-flight memory counts that window's
  // stored bytes (each 2 - 1 static - its working set) and its largest working set, micro-batch 4's
  // 0.75 while it is in the window, else 0.25.
  std::vector<double> memory(12, 2.0), working(12, 0.25);
  working[4] = 0.75;
  for (int d : {1, 2, 3}) {
    p.warmup_depth = d;
    const auto held = dcp::in_flight_memory(p, memory, working, 1.0, 4);
    for (std::size_t i = 0; i < held.size(); ++i) {
      const std::size_t count = std::min<std::size_t>(i + 1, 3 * static_cast<std::size_t>(d) + 1);
      const bool long_one = i >= 4 && i + 1 - count <= 4;
      const double expected =
          1.0 + static_cast<double>(count) * 0.75 - (long_one ? 0.5 : 0.0) + (long_one ? 0.75 : 0.25);
      EXPECT_DOUBLE_EQ(held[i], expected) << d << " " << i;
    }
  }
}

TEST(PipelineSchedule, MatchesAFixedPointSolverOnRandomNestedPlans) {
  dcp_test::rng r(0x9e11);
  for (int trial = 0; trial < 60; ++trial) {
    const int units = 1 << r.between(0, 3), P = static_cast<int>(r.between(2, 6));
    // Widest first on aligned blocks: the orders agree, so the schedule never deadlocks.
    std::vector<dcp::rank_block> blocks;
    for (int size = units; size >= 1; size /= 2)
      for (int first = 0; first < units; first += size)
        for (int c = static_cast<int>(r.between(0, 2)); c-- > 0;) blocks.push_back({first, size});
    if (blocks.empty()) blocks.push_back({0, units});
    dcp::plan p = plan_of(units, blocks);
    p.warmup_depth = static_cast<int>(r.between(1, 3));
    std::vector<dcp::pipeline_step_times> t;
    for (std::size_t j = 0; j < blocks.size(); ++j) t.push_back({0.1 + r.unit(), 0.2 + 2 * r.unit(), 0.05 * r.unit()});
    const auto timeline = dcp::schedule_pipeline(p, t, P);
    const auto ends = fixed_point_ends(p, t, P);
    double last = 0;
    for (std::size_t j = 0; j < blocks.size(); ++j)
      for (int s = 0; s < P; ++s) {
        EXPECT_NEAR(timeline.forward_of(j, s).end_s, ends[(j * P + s) * 2], 1e-12);
        EXPECT_NEAR(timeline.backward_of(j, s).end_s, ends[(j * P + s) * 2 + 1], 1e-12);
        last = std::max(last, ends[(j * P + s) * 2 + 1]);
      }
    EXPECT_NEAR(timeline.makespan_s, last, 1e-12);
  }
}

TEST(PipelineSchedule, OrdersThatWaitOnEachOtherAreNamedAndFlushed) {
  // Unit 0 runs X, A, Y and unit 1 runs X, Y: on stage 0 of two, unit 0 runs B(X) before F(Y) and
  // unit 1 F(Y) before B(X).
  dcp::plan p = plan_of(2, {{0, 2}, {0, 1}, {0, 2}});
  const std::vector<dcp::pipeline_step_times> t(3, {1.0, 2.0, 0.0});
  EXPECT_TRUE(dcp_test::throws_dcp_error("schedule", [&] { (void)dcp::schedule_pipeline(p, t, 2); },
                                         dcp::errc::invalid_argument, {"deadlocks", "step"}));
  dcp::pipeline_deadlock stuck{99};
  (void)dcp::schedule_pipeline(p, t, 2, &stuck);
  EXPECT_EQ(stuck.first_stuck, 0u);
  // With a new round at Y it runs.
  p.steps[2].round = 1;
  EXPECT_GT(dcp::schedule_pipeline(p, t, 2).makespan_s, 0);
}

dcp::analytic_cost piped(const dcp::transformer_spec& model, int gpus, int tp, int pp) {
  return dcp::make_analytic_cost(model, dcp::devices::h200_analytic(),
                                 dcp::parallel_layout{.gpus = gpus, .gpus_per_node = 8, .tp = tp, .pp = pp});
}

std::vector<dcp::sequence> text_batch(dcp_test::rng& r, std::int64_t count, std::int64_t longest) {
  std::vector<dcp::sequence> out;
  for (std::int64_t i = 0; i < count; ++i) out.push_back({i, 1, r.log_between(256, longest)});
  return out;
}

// The blocks of a random round on `units` units (a power of two): 0 to 6 single-unit steps per
// unit, then `least` to 3 steps on aligned blocks of 2 or more (nested or disjoint).
std::vector<dcp::rank_block> random_round(dcp_test::rng& r, int units, std::int64_t least) {
  std::vector<dcp::rank_block> blocks;
  for (int u = 0; u < units; ++u)
    for (std::int64_t k = r.between(0, 6); k > 0; --k) blocks.push_back({u, 1});
  for (std::int64_t k = r.between(least, 3); k > 0; --k) {
    const int size = 1 << r.between(1, std::countr_zero(static_cast<unsigned>(units)));
    blocks.push_back({size * static_cast<int>(r.between(0, units / size - 1)), size});
  }
  return blocks;
}

TEST(PipelineOrder, ShortEndsOrAheadOfALongPathOrARamp) {
  // `order_short_ends` on random rounds of single-unit steps and aligned shared blocks: every unit
  // runs its single-unit steps around its shared steps (widest first), a unit that shares takes the
  // same count q ahead as every other such unit, and the ones ahead are, for the tent, its 1st,
  // 3rd, ... shortest, or, where the longest shared step's path P t is at least half the busiest
  // unit's work, its q longest; for a ramp of r, its r shortest (q at most r); ahead shortest
  // first, behind longest first.
  dcp_test::rng r(0x10e5);
  int long_paths = 0, tents = 0, ramps = 0;
  for (int trial = 0; trial < 200; ++trial) {
    const int units = static_cast<int>(r.pick(std::vector<std::int64_t>{2, 4, 8}));
    const int P = static_cast<int>(r.pick(std::vector<std::int64_t>{2, 4, 8}));
    dcp::plan before = plan_of(units, random_round(r, units, 0));
    const double scale = r.pick(std::vector<double>{0.1, 1.0, 10.0});
    const auto ramp = static_cast<std::size_t>(r.between(1, 8));
    if (before.steps.empty()) continue;
    for (std::size_t j = 0; j < before.steps.size(); ++j) {
      before.steps[j].start_s = static_cast<double>(j);  // identifies the step after the order
      before.steps[j].time_s = (before.steps[j].sp() > 1 ? scale : 1.0) * (1 + r.unit());
    }
    std::vector<double> work(static_cast<std::size_t>(units), 0);
    double longest_shared = 0;
    for (const auto& s : before.steps) {
      for (int u = s.ranks.first; u < s.ranks.end(); ++u) work[static_cast<std::size_t>(u)] += s.time_s;
      if (s.sp() > 1) longest_shared = std::max(longest_shared, s.time_s);
    }
    for (const std::size_t r_of : {std::size_t{0}, ramp}) {
      dcp::plan p = before;
      dcp::order_short_ends(p, P, r_of);
      SCOPED_TRACE("trial " + std::to_string(trial) + ": " + std::to_string(units) +
                   " units, P = " + std::to_string(P) + (r_of > 0 ? ", ramp " + std::to_string(r_of) : ", tent"));
      ASSERT_EQ(p.steps.size(), before.steps.size());
      std::vector<int> seen(p.steps.size(), 0);
      for (const auto& s : p.steps) ++seen[static_cast<std::size_t>(s.start_s)];
      EXPECT_TRUE(std::all_of(seen.begin(), seen.end(), [](int c) { return c == 1; })) << "a step lost or doubled";

      const bool long_path = r_of == 0 && P * longest_shared >= 0.5 * *std::max_element(work.begin(), work.end());
      auto prefix = [&](std::size_t singles) { return r_of > 0 ? std::min(r_of, singles) : (singles + 1) / 2; };
      std::size_t q = p.steps.size();
      for (int u = 0; u < units; ++u) {
        std::size_t singles = 0;
        bool shares = false;
        for (const auto& s : before.steps)
          singles += s.ranks == dcp::rank_block{u, 1}, shares |= s.sp() > 1 && s.ranks.contains(u);
        if (shares) q = std::min(q, prefix(singles));
      }
      for (int u = 0; u < units; ++u) {
        std::vector<const dcp::plan_step*> list;  // the unit's steps in order
        std::vector<double> all;                  // its single-unit steps' times, ascending
        std::size_t shared = 0;
        for (const auto& s : p.steps) {
          if (!s.ranks.contains(u)) continue;
          list.push_back(&s);
          if (s.sp() > 1)
            ++shared;
          else
            all.push_back(s.time_s);
        }
        std::sort(all.begin(), all.end());
        const std::size_t take = shared > 0 ? q : prefix(all.size());
        std::vector<double> ahead, behind;
        for (std::size_t i = 0; i < list.size(); ++i) {
          if (i >= take && i < take + shared) {
            EXPECT_GT(list[i]->sp(), 1) << "unit " << u << ": a single-unit step among its shared steps at " << i;
            if (i > take) {
              EXPECT_GE(list[i - 1]->sp(), list[i]->sp()) << "unit " << u << ": shared steps not widest first";
            }
          } else {
            EXPECT_EQ(list[i]->sp(), 1) << "unit " << u << ": a shared step outside the middle at " << i;
            (i < take ? ahead : behind).push_back(list[i]->time_s);
          }
        }
        EXPECT_TRUE(std::is_sorted(ahead.begin(), ahead.end())) << "unit " << u;
        EXPECT_TRUE(std::is_sorted(behind.rbegin(), behind.rend())) << "unit " << u;
        std::vector<double> expected;
        if (shared > 0 && long_path) {
          expected.assign(all.end() - static_cast<std::ptrdiff_t>(q), all.end());
        } else if (r_of > 0) {
          expected.assign(all.begin(), all.begin() + static_cast<std::ptrdiff_t>(take));
        } else {
          for (std::size_t i = 0; i < all.size() && i / 2 < take; i += 2) expected.push_back(all[i]);
        }
        EXPECT_EQ(ahead, expected) << "unit " << u << (long_path ? " under a long path" : "");
        if (shared > 0) (r_of > 0 ? ramps : long_path ? long_paths : tents) += 1;
      }
    }
  }
  EXPECT_GT(ramps, 0) << "no unit shared a step under a ramp";
  EXPECT_GT(long_paths, 0) << "no unit shared a step under a long path: the test tests nothing";
  EXPECT_GT(tents, 0) << "every unit that shared a step was under a long path";
}

// A random round for the dominating-path tests: `units` and P each 2, 4 or 8, the blocks of
// `random_round` (at least `least` shared), every step's start its index (which identifies it after
// an order) and its time 1-2 s, a shared step's scaled by 1, 4 or 16.
struct timed_round {
  int units, P;
  dcp::plan p;
};
timed_round random_timed_round(dcp_test::rng& r, std::int64_t least) {
  const int units = static_cast<int>(r.pick(std::vector<std::int64_t>{2, 4, 8}));
  const int P = static_cast<int>(r.pick(std::vector<std::int64_t>{2, 4, 8}));
  dcp::plan p = plan_of(units, random_round(r, units, least));
  const double scale = r.pick(std::vector<double>{1.0, 4.0, 16.0});
  for (std::size_t j = 0; j < p.steps.size(); ++j) {
    p.steps[j].start_s = static_cast<double>(j);
    p.steps[j].time_s = (p.steps[j].sp() > 1 ? scale : 1.0) * (1 + r.unit());
  }
  return {units, P, std::move(p)};
}

// The steps of an ordered `random_timed_round`, as their indices before the order.
std::vector<double> ids_of(const dcp::plan& q) {
  std::vector<double> out;
  for (const auto& s : q.steps) out.push_back(s.start_s);
  return out;
}

// An ordered `random_timed_round` of `n` steps holds every step once, and its units' orders never
// wait on each other (the schedule runs every operation) at warmup depths 1 to 3.
void expect_whole_and_runnable(dcp::plan q, std::size_t n, int P) {
  std::vector<int> seen(n, 0);
  for (const auto& s : q.steps) ++seen[static_cast<std::size_t>(s.start_s)];
  EXPECT_TRUE(std::all_of(seen.begin(), seen.end(), [](int c) { return c == 1; })) << "a step lost or doubled";
  const std::vector<dcp::pipeline_step_times> times(q.steps.size(), {1.0, 2.0, 0.0});
  for (int depth = 1; depth <= 3; ++depth) {
    q.warmup_depth = depth;
    dcp::pipeline_deadlock stuck{q.steps.size()};
    (void)dcp::schedule_pipeline(q, times, P, &stuck);
    EXPECT_EQ(stuck.first_stuck, q.steps.size()) << "the units' orders wait on each other at depth " << depth;
  }
}

TEST(PipelineOrder, ADominatingPathGoesLastWithTheLongestAheadOfIt) {
  // `order_short_ends(p, P, true)` on random rounds with nested shared blocks: where every shared
  // step lies in the block of the longest, X, and (P - 1) t_X / 2 is at least half of any of its
  // units' other work, X's units run their shared steps and longest single-unit steps ahead of X
  // (X at one index on all of them), the rest after it longest first; the orders agree (the
  // schedule never deadlocks) and every step is there once. Without the flag the order is the
  // tent (the test above), and the result says whether a path dominated.
  dcp_test::rng r(0xd0a7);
  int dominated = 0, not_dominated = 0;
  for (int trial = 0; trial < 300; ++trial) {
    timed_round round = random_timed_round(r, 1);
    const int units = round.units, P = round.P;
    dcp::plan& p = round.p;
    SCOPED_TRACE("trial " + std::to_string(trial) + ": " + std::to_string(units) + " units, P = " + std::to_string(P));
    // Expected: X and whether it dominates, from the definition.
    std::size_t x = 0;
    for (std::size_t j = 0; j < p.steps.size(); ++j)
      if (p.steps[j].sp() > 1 && (p.steps[x].sp() == 1 || p.steps[j].time_s > p.steps[x].time_s)) x = j;
    const dcp::rank_block block = p.steps[x].ranks;
    double others = 0;
    for (int u = block.first; u < block.end(); ++u) {
      double w = 0;
      for (const auto& s : p.steps) w += s.ranks.contains(u) ? s.time_s : 0;
      others = std::max(others, w - p.steps[x].time_s);
    }
    bool expect = (P - 1) * p.steps[x].time_s / 2 >= 0.5 * others;
    for (const auto& s : p.steps)
      expect &= s.sp() == 1 || (s.ranks.first >= block.first && s.ranks.end() <= block.end());

    dcp::plan tent = p, around = p;
    EXPECT_EQ(dcp::order_short_ends(tent, P), expect);
    EXPECT_EQ(dcp::order_short_ends(around, P, 0, dcp::path_place::last), expect);
    // X can have one index on all its units unless one has fewer steps besides X than another
    // has shared steps besides X; then the tent stays.
    // X's index: the fewest steps any unit has ahead when it takes its shared steps and then its
    // longest single-unit steps while they fit in (P - 1) t_X / 2, never below a unit's shared.
    std::size_t most_shared = 0, fewest = p.steps.size(), index = p.steps.size();
    for (int u = block.first; u < block.end(); ++u) {
      std::size_t shared = 0, all = 0;
      double ahead = 0;
      std::vector<double> singles;
      for (std::size_t j = 0; j < p.steps.size(); ++j) {
        if (j == x || !p.steps[j].ranks.contains(u)) continue;
        ++all;
        if (p.steps[j].sp() > 1)
          ++shared, ahead += p.steps[j].time_s;
        else
          singles.push_back(p.steps[j].time_s);
      }
      std::sort(singles.rbegin(), singles.rend());
      std::size_t fit = 0;
      while (fit < singles.size() && ahead + singles[fit] <= (P - 1) * p.steps[x].time_s / 2) ahead += singles[fit++];
      most_shared = std::max(most_shared, shared), fewest = std::min(fewest, all);
      index = std::min(index, shared + fit);
    }
    index = std::max(index, most_shared);
    if (!expect || most_shared > fewest) {
      ++not_dominated;
      EXPECT_EQ(ids_of(around), ids_of(tent)) << "the tent where no path dominates or X cannot have one index";
      continue;
    }
    ++dominated;
    expect_whole_and_runnable(around, p.steps.size(), P);
    std::set<std::size_t> at;  // X's index on each of its units
    for (int u = block.first; u < block.end(); ++u) {
      std::vector<const dcp::plan_step*> list;
      for (const auto& s : around.steps)
        if (s.ranks.contains(u)) list.push_back(&s);
      const auto it = std::find_if(list.begin(), list.end(),
                                   [&](const dcp::plan_step* s) { return s->start_s == static_cast<double>(x); });
      ASSERT_NE(it, list.end());
      at.insert(static_cast<std::size_t>(it - list.begin()));
      double least_ahead = std::numeric_limits<double>::infinity(), longest_behind = 0;
      for (auto i = list.begin(); i != list.end(); ++i) {
        if (i < it && (*i)->sp() == 1) least_ahead = std::min(least_ahead, (*i)->time_s);
        if (i > it) {
          EXPECT_EQ((*i)->sp(), 1) << "unit " << u << ": a shared step behind X";
          longest_behind = std::max(longest_behind, (*i)->time_s);
          if (i > it + 1) {
            EXPECT_LE((*i)->time_s, (*(i - 1))->time_s) << "unit " << u << ": behind X not longest first";
          }
        }
      }
      EXPECT_LE(longest_behind, least_ahead) << "unit " << u << ": a single-unit step behind X outlasts one ahead";
    }
    EXPECT_EQ(at, std::set<std::size_t>{index}) << "X not at the expected index on every unit";
  }
  EXPECT_GT(dominated, 10) << "few rounds with a dominating path: the test tests little";
  EXPECT_GT(not_dominated, 10);
}

TEST(PipelineOrder, ADominatingPathsBlockFollowsItLongestFirst) {
  // `order_short_ends` with `block_last` (and `pair_last`) on random rounds with nested shared
  // blocks: where a path X dominates and other shared steps lie on exactly its block, every unit of
  // X runs all of them (the longest of them) right behind X, longest first, and behind those only
  // single-unit steps, longest first; the rest of X's block runs ahead of X; X has one index on all
  // its units, every step is there once, and the units' orders never wait on each other. Where no
  // path dominates, or X has its block to itself, the order is `last`'s; where X cannot have one
  // index, the tent's.
  dcp_test::rng r(0x7a11);
  int tailed = 0, untailed = 0, paired_apart = 0;
  for (int trial = 0; trial < 400; ++trial) {
    timed_round round = random_timed_round(r, 2);
    const int units = round.units, P = round.P;
    dcp::plan& p = round.p;
    SCOPED_TRACE("trial " + std::to_string(trial) + ": " + std::to_string(units) + " units, P = " + std::to_string(P));
    dcp::plan tent = p, last = p;
    (void)dcp::order_short_ends(tent, P);
    const bool dominated = dcp::order_short_ends(last, P, 0, dcp::path_place::last);
    // X: the longest shared step (the first of equals); its tail: the other steps on its block.
    std::size_t x = p.steps.size();
    for (std::size_t j = 0; j < p.steps.size(); ++j)
      if (p.steps[j].sp() > 1 && (x == p.steps.size() || p.steps[j].time_s > p.steps[x].time_s)) x = j;
    ASSERT_LT(x, p.steps.size());
    const dcp::rank_block xb = p.steps[x].ranks;
    std::vector<std::size_t> tail;
    for (std::size_t j = 0; j < p.steps.size(); ++j)
      if (j != x && p.steps[j].ranks == xb) tail.push_back(j);
    std::stable_sort(tail.begin(), tail.end(),
                     [&](std::size_t i, std::size_t j) { return p.steps[i].time_s > p.steps[j].time_s; });
    for (const auto place : {dcp::path_place::pair_last, dcp::path_place::block_last}) {
      dcp::plan q = p;
      EXPECT_EQ(dcp::order_short_ends(q, P, 0, place), dominated);
      const std::size_t behind =
          place == dcp::path_place::pair_last ? std::min<std::size_t>(tail.size(), 1) : tail.size();
      if (!dominated || tail.empty()) {
        ++untailed;
        EXPECT_EQ(ids_of(q), ids_of(last)) << "not `last`'s order where no path dominates or X's block is its own";
        continue;
      }
      // X's index can agree unless a unit has fewer other steps than another has shared ones
      // (X and the steps behind it left out of both).
      auto follows = [&](std::size_t j) {
        return std::find(tail.begin(), tail.begin() + behind, j) != tail.begin() + behind;
      };
      std::size_t most_shared = 0, fewest = p.steps.size();
      for (int u = xb.first; u < xb.end(); ++u) {
        std::size_t shared = 0, all = 0;
        for (std::size_t j = 0; j < p.steps.size(); ++j) {
          if (j == x || follows(j) || !p.steps[j].ranks.contains(u)) continue;
          ++all, shared += p.steps[j].sp() > 1;
        }
        most_shared = std::max(most_shared, shared), fewest = std::min(fewest, all);
      }
      if (most_shared > fewest) {
        ++untailed;
        EXPECT_EQ(ids_of(q), ids_of(tent)) << "not the tent where X cannot have one index";
        continue;
      }
      ++tailed;
      paired_apart += behind < tail.size();
      expect_whole_and_runnable(q, p.steps.size(), P);
      std::set<std::size_t> at;  // X's index on each of its units
      for (int u = xb.first; u < xb.end(); ++u) {
        std::vector<const dcp::plan_step*> list;
        for (const auto& s : q.steps)
          if (s.ranks.contains(u)) list.push_back(&s);
        const auto it = std::find_if(list.begin(), list.end(),
                                     [&](const dcp::plan_step* s) { return s->start_s == static_cast<double>(x); });
        ASSERT_NE(it, list.end());
        at.insert(static_cast<std::size_t>(it - list.begin()));
        for (auto i = it + 1; i != list.end(); ++i) {
          const auto k = static_cast<std::size_t>(i - it);  // 1, 2, ...: the steps behind X, then single-unit ones
          if (k <= behind) {
            EXPECT_EQ((*i)->start_s, static_cast<double>(tail[k - 1])) << "unit " << u << ": step " << k << " behind X";
          } else {
            EXPECT_EQ((*i)->sp(), 1) << "unit " << u << ": a shared step behind X's tail";
          }
          if (k != behind + 1) {  // the tail longest first (X is the longest), then the single-unit steps
            EXPECT_LE((*i)->time_s, (*(i - 1))->time_s) << "unit " << u << ": not longest first";
          }
        }
      }
      EXPECT_EQ(at.size(), 1U) << "X at different indices on its units";
    }
  }
  EXPECT_GT(tailed, 40) << "few dominating paths with steps on their block: the test tests little";
  EXPECT_GT(paired_apart, 5) << "no pair order left part of X's block ahead of X";
  EXPECT_GT(untailed, 40);
}

// `p` with its steps shuffled within each round, one order for all units (at a warmup depth
// above 1, units that share steps may still reach them in different 1F1B orders, which
// `schedule_pipeline` refuses).
dcp::plan shuffled_in_rounds(dcp::plan q, dcp_test::rng& r) {
  for (std::size_t a = 0; a < q.steps.size();) {
    std::size_t b = a;
    while (b < q.steps.size() && q.steps[b].round == q.steps[a].round) ++b;
    for (std::size_t i = b - 1; i > a; --i)  // Fisher-Yates within the round
      std::swap(q.steps[i], q.steps[a + static_cast<std::size_t>(r.between(0, static_cast<std::int64_t>(i - a)))]);
    a = b;
  }
  return q;
}

// Whether every step's memory in flight on stage 0 (`in_flight_memory`, at the plan's warmup
// depth) is within the capacity: `plan_violations`' memory check.
bool fits_in_flight(const dcp::plan& q, const dcp::analytic_cost& cost, int pp) {
  std::vector<double> own;
  for (const auto& st : q.steps) own.push_back(st.memory_bytes);
  const auto held = dcp::in_flight_memory(q, own, dcp::working_memory_of(q, cost), cost.static_memory(), pp);
  return std::all_of(held.begin(), held.end(), [&](double m) { return m <= cost.capacity() * (1 + 1e-12); });
}

// The plans of dcp and of every baseline (tuned on the batch) for `batch` on `cost`.
std::vector<dcp::plan> every_planner(const dcp::analytic_cost& cost, std::span<const dcp::sequence> batch) {
  std::vector<dcp::plan> plans;
  plans.push_back(dcp::dcp_planner{}.plan(cost, batch));
  plans.push_back(dcp::tune(dcp::bucket_planner{}, cost, batch).plan(cost, batch));
  plans.push_back(dcp::tune(dcp::packed_planner{}, cost, batch).plan(cost, batch));
  plans.push_back(dcp::tune(dcp::dynamic_cp_planner{}, cost, batch).plan(cost, batch));
  return plans;
}

TEST(PipelinePlans, EveryPlannerIsValidOnRandomJobs) {
  dcp_test::rng r(0x5747);
  for (int trial = 0; trial < 8; ++trial) {
    const int pp = static_cast<int>(r.pick(std::vector<std::int64_t>{2, 4}));
    const int tp = static_cast<int>(r.pick(std::vector<std::int64_t>{1, 2}));
    const int gpus = 8 * pp * static_cast<int>(r.between(1, 2));
    const auto cost = piped(dcp::models::llama3_8b(), gpus, tp, pp);
    const auto batch = text_batch(r, r.between(8, 96), 65536);
    SCOPED_TRACE("trial " + std::to_string(trial) + ": pp = " + std::to_string(pp) + ", tp = " + std::to_string(tp) +
                 ", gpus = " + std::to_string(gpus) + ", " + std::to_string(batch.size()) + " sequences");
    const auto plans = every_planner(cost, batch);
    for (const auto& p : plans) {
      EXPECT_EQ(p.layout.pp, pp);
      const auto bad = dcp::plan_violations(p, batch, cost);
      EXPECT_TRUE(bad.empty()) << p.method << ": " << (bad.empty() ? "" : bad.front());
      EXPECT_GE(p.makespan_s, p.joint_lower_bound_s * (1 - 1e-12)) << p.method;
      // On its own clock, with nothing random, the executor reproduces the plan.
      const auto e = dcp::sim::execute(p, dcp::sim::truth<dcp::analytic_cost>{cost, {}, 0.0, 0});
      EXPECT_EQ(e.oom_steps, 0) << p.method;
      EXPECT_NEAR(e.executed.makespan_s, p.makespan_s, 1e-9 * p.makespan_s) << p.method;
      for (std::size_t i = 0; i < p.steps.size(); ++i)
        EXPECT_NEAR(e.executed.steps[i].start_s, p.steps[i].start_s, 1e-9 * p.makespan_s) << p.method << " step " << i;
    }
  }
}

TEST(PipelinePlans, ASequenceOnEveryUnitOrdersTheRestAroundItsPath) {
  // A sequence too long for any block narrower than the stage runs on every unit, so its
  // micro-batch passes all P stages while every unit's other work runs around it (on stage 0
  // before or after it, on the last stage before it arrives): the bound takes P t plus at least a
  // quarter of the rest per unit (`around_s`), and no planner's plan beats it.
  dcp_test::rng r(0x5a4e);
  int raised = 0;  // trials where the term raises the bound
  for (int trial = 0; trial < 6; ++trial) {
    const int pp = static_cast<int>(r.pick(std::vector<std::int64_t>{2, 4}));
    const int gpus = 8 * pp;
    const auto cost = piped(dcp::models::llama3_8b(), gpus, 1, pp);
    const int units = cost.gpus(), L = cost.blocks();
    // The shortest length that no block of half the stage holds even with every block checkpointed.
    std::int64_t lo = 1024, hi = std::int64_t{1} << 24;
    auto fits_half = [&](std::int64_t n) {
      return cost.memory(cost.load_of(dcp::sequence{0, 1, n}), units / 2, L) <= cost.capacity();
    };
    while (lo + 1 < hi) (fits_half((lo + hi) / 2) ? lo : hi) = (lo + hi) / 2;
    const std::int64_t longest = hi + r.between(0, 2048);
    ASSERT_LE(cost.memory(cost.load_of(dcp::sequence{0, 1, longest}), units, L), cost.capacity());
    std::vector<dcp::sequence> batch = text_batch(r, r.between(8, 64), 32768);
    batch.push_back({static_cast<std::int64_t>(batch.size()), 1, longest});
    SCOPED_TRACE("trial " + std::to_string(trial) + ": pp = " + std::to_string(pp) + ", a sequence of " +
                 std::to_string(longest) + " tokens among " + std::to_string(batch.size()));
    const auto one = dcp::lower_bounds(cost, batch);
    // Its only blocks are the whole stage: the bound has P t plus every other floor around it.
    double alone = std::numeric_limits<double>::infinity();
    for (int k = 0; k <= L; ++k)
      if (cost.memory(cost.load_of(dcp::sequence{0, 1, longest}), units, k) <= cost.capacity())
        alone = std::min(alone, cost.time(cost.load_of(dcp::sequence{0, 1, longest}), units, k));
    EXPECT_GE(one.around_s, pp * alone * (1 - 1e-12));
    const auto staged = dcp::pipelined(one, pp);
    EXPECT_GE(staged.joint_s, one.around_s);
    auto without = one;
    without.around_s = 0;
    raised += staged.joint_s > dcp::pipelined(without, pp).joint_s;
    const auto plans = every_planner(cost, batch);
    for (const auto& p : plans) {
      const auto bad = dcp::plan_violations(p, batch, cost);
      EXPECT_TRUE(bad.empty()) << p.method << ": " << (bad.empty() ? "" : bad.front());
      EXPECT_GE(p.makespan_s, staged.joint_s * (1 - 1e-12)) << p.method;
    }
  }
  EXPECT_GT(raised, 0) << "the bound never rose above P t_max and the bubble floor: the test tests nothing";
}

TEST(PipelinePlans, NoOrderOrWarmupDepthBeatsTheBoundAroundALongPath) {
  // The bound around a long micro-batch's path (`around_s`) trades the work ahead of it (whose
  // forwards precede the path on stage 0, and which the last stage finishes before the path
  // arrives) against the work behind it (whose backwards follow the path back on stage 0). Every
  // planner's plan, its steps shuffled within each round (one order for all units, so shared
  // steps cannot deadlock at 1F1B; a deeper warmup that deadlocks is skipped: nothing runs it) and
  // timed at warmup depths 1 to 4, stays above it: orders the planners never choose, with any
  // share of the work ahead.
  dcp_test::rng r(0x0a7e);
  int raised = 0;  // trials where the term is above the long path and the busy floor
  for (int trial = 0; trial < 6; ++trial) {
    const int pp = static_cast<int>(r.pick(std::vector<std::int64_t>{2, 4}));
    const int gpus = 8 * pp;
    const auto cost = piped(dcp::models::llama3_8b(), gpus, 1, pp);
    std::vector<dcp::sequence> batch = text_batch(r, r.between(8, 48), 16384);
    // One sequence long against the rest: its path dominates and its units' work splits around it.
    batch.push_back({static_cast<std::int64_t>(batch.size()), 1, r.between(98304, 196608)});
    SCOPED_TRACE("trial " + std::to_string(trial) + ": pp = " + std::to_string(pp) + ", " +
                 std::to_string(batch.size()) + " sequences, the longest " + std::to_string(batch.back().spatial));
    const auto one = dcp::lower_bounds(cost, batch);
    const double floors = one.busy_s + dcp::pipeline_bubble_floor(pp, one.shortest_s);
    raised += one.around_s > std::max(pp * one.longest_s, floors) * (1 + 1e-9);
    for (const auto& p : every_planner(cost, batch))
      for (int shuffle = 0; shuffle < 8; ++shuffle) {
        dcp::plan q = shuffled_in_rounds(p, r);
        const auto times = dcp::pipeline_times(q, cost);
        for (int depth = 1; depth <= 4; ++depth) {
          q.warmup_depth = depth;
          if (!fits_in_flight(q, cost, pp)) continue;  // no plan runs it: the bound counts memory
          dcp::pipeline_deadlock stuck{q.steps.size()};
          const double makespan = dcp::schedule_pipeline(q, times, pp, &stuck).makespan_s;
          if (stuck.first_stuck != q.steps.size()) continue;  // deeper than 1F1B a shuffle can deadlock: no plan runs it
          EXPECT_GE(makespan, one.around_s * (1 - 1e-12)) << p.method << ", shuffle " << shuffle << ", depth " << depth;
        }
      }
  }
  EXPECT_GT(raised, 0) << "the term never rose above the long path and the busy floor: the test tests nothing";
}

// Llama-3.1-405B as published (its config.json: 126 blocks, hidden 16384, 128 heads and 8
// key/value heads of 128, MLP 53248, a 128256-token vocabulary).
dcp::transformer_spec llama31_405b() {
  auto m = dcp::transformer_spec{"llama3.1-405b", 126, 16384, 128, 53248, 3, dcp::attention_kind::causal, 0};
  m.kv_heads = 8;
  m.vocab = 128256;
  return m;
}

// The analytic model without `stored_per_token`: its bounds are those that count no memory in flight.
struct without_stored_bytes : dcp::analytic_cost {
  double stored_per_token(int) const = delete;
};
static_assert(!dcp::stored_per_token_cost_model<without_stored_bytes>);

TEST(PipelineBounds, MemoryInFlightLimitsTheForwardsBehindAPath) {
  // Stage 0 runs the forwards behind a micro-batch m while m travels the stages only as far as
  // their stored bytes fit beside m's memory (they are in flight with it), so the bound around a
  // path counts what hiding them can save within those bytes. Llama-3.1-405B on the kernel clock,
  // TP8 and 8 units a stage, 128-320 short sequences and 1-3 of 48-128K tokens: the bound with
  // memory is at least the one without and rises above it in some trials; no planner's plan, nor
  // the plans with their steps shuffled within each round and timed at warmup depths 1 to 4
  // wherever their memory in flight fits, beats it.
  dcp_test::rng r(0x3e3f);
  int raised = 0, timed = 0;
  for (int trial = 0; trial < 8; ++trial) {
    const int pp = static_cast<int>(r.pick(std::vector<std::int64_t>{4, 8}));
    const auto cost =
        dcp::make_analytic_cost(llama31_405b(), dcp::devices::h200(),
                                dcp::parallel_layout{.gpus = 64 * pp, .gpus_per_node = 8, .tp = 8, .pp = pp});
    std::vector<dcp::sequence> batch;
    for (std::int64_t i = 0, n = r.between(128, 320); i < n; ++i) batch.push_back({i, 1, r.log_between(1024, 16384)});
    for (std::int64_t i = 0, n = r.between(1, 3); i < n; ++i)
      batch.push_back({static_cast<std::int64_t>(batch.size()), 1, r.log_between(49152, 131072)});
    SCOPED_TRACE("trial " + std::to_string(trial) + ": pp = " + std::to_string(pp) + ", " +
                 std::to_string(batch.size()) + " sequences");
    const auto staged = dcp::pipelined(dcp::lower_bounds(cost, batch), pp);
    const auto without = dcp::pipelined(dcp::lower_bounds(without_stored_bytes{cost}, batch), pp);
    EXPECT_GE(staged.joint_s, without.joint_s);
    raised += staged.joint_s > without.joint_s * (1 + 1e-9);
    for (const auto& p : every_planner(cost, batch)) {
      EXPECT_TRUE(dcp::plan_violations(p, batch, cost).empty()) << p.method;
      EXPECT_GE(p.makespan_s, staged.joint_s * (1 - 1e-12)) << p.method;
      for (int shuffle = 0; shuffle < 8; ++shuffle) {
        dcp::plan q = shuffled_in_rounds(p, r);
        const auto times = dcp::pipeline_times(q, cost);
        for (int depth = 1; depth <= 4; ++depth) {
          q.warmup_depth = depth;
          if (!fits_in_flight(q, cost, pp)) continue;
          double makespan = 0;
          try {
            makespan = dcp::schedule_pipeline(q, times, pp).makespan_s;
          } catch (const dcp::error&) {
            continue;  // shared steps met in different 1F1B orders: no plan runs this order
          }
          ++timed;
          EXPECT_GE(makespan, staged.joint_s * (1 - 1e-12))
              << p.method << ", shuffle " << shuffle << ", depth " << depth;
        }
      }
    }
  }
  EXPECT_GT(raised, 0) << "memory never raised the bound: the test tests nothing";
  EXPECT_GT(timed, 0) << "no shuffled plan fit in memory: nothing was timed";
}

TEST(PipelineBounds, TheWorkFloorIsAffineInRecomputeSoItsForwardIsLeastAtAnEnd) {
  // The bound around a path takes a sequence's least forward, floor(k) L / (3L + k), at the two
  // ends of its recompute range: right only while the work floor is affine in k
  // (`work_floors_cost_model`'s law); the memory around a path takes the stored bytes per token
  // at the ends too (`stored_per_token_cost_model`'s law). Random loads, every legal size and
  // ring, on the section 4 clock and the kernel clock, dense, MoE and windowed stages, with tp and ep.
  dcp_test::rng r(0xaff1);
  int tested = 0;
  for (const auto& device : {dcp::devices::h200_analytic(), dcp::devices::h200()}) {
    for (const auto& [model, tp, ep] :
         {std::tuple{dcp::models::llama3_70b(), 8, 1}, std::tuple{dcp::models::qwen3_30b_a3b(), 2, 4},
          std::tuple{dcp::models::wan2_1_14b(), 1, 1}}) {
      const dcp::parallel_layout layout{.gpus = 64, .gpus_per_node = 8, .tp = tp, .ep = ep, .pp = 4};
      const auto cost = dcp::make_analytic_cost(model, device, layout);
      const auto floors = cost.floors();
      const int L = cost.blocks();
      for (int trial = 0; trial < 12; ++trial) {
        const auto load = cost.load_of({trial, 1, r.log_between(256, 262144)});
        for (int sp : dcp::legal_sp_sizes(cost)) {
          for (int ring = dcp::step_ring_of(cost, sp); ring <= dcp::widest_ring_of(cost, sp) && sp % ring == 0;
               ring *= 2) {
            const double at0 = floors.both(load, sp, 0, ring).work, atL = floors.both(load, sp, L, ring).work;
            for (int k = 0; k <= L; ++k) {
              const double at = floors.both(load, sp, k, ring).work;
              EXPECT_NEAR(at, at0 + (atL - at0) * k / L, 1e-9 * atL) << model.name << " sp " << sp << " k " << k;
              EXPECT_GE(at * dcp::forward_share(L, k),
                        std::min(at0 * dcp::forward_share(L, 0), atL * dcp::forward_share(L, L)) * (1 - 1e-12));
            }
            ++tested;
          }
          // Stored bytes per token (`stored_per_token_cost_model`'s law): the rest of the memory,
          // affine and non-increasing in k.
          for (int k = 0; k <= L; ++k) {
            EXPECT_NEAR(cost.memory(load, sp, k),
                        cost.static_memory() + cost.working_memory(load, sp) +
                            static_cast<double>(load.tokens) * cost.stored_per_token(k) / sp,
                        1e-12 * cost.memory(load, sp, k));
            if (k > 0) {
              EXPECT_LE(cost.stored_per_token(k), cost.stored_per_token(k - 1));
            }
            if (k > 0 && k < L) {
              EXPECT_NEAR(cost.stored_per_token(k - 1) + cost.stored_per_token(k + 1), 2 * cost.stored_per_token(k),
                          1e-12 * cost.stored_per_token(0));
            }
          }
        }
      }
    }
  }
  EXPECT_GT(tested, 100);
}

TEST(PipelinePlans, EveryPathFitsInTheBoundAndNoPlanBeatsIt) {
  // A micro-batch's path through the stages is P times its stage time, so at a makespan T every
  // sequence runs on an option with P t_i(sp) <= T, and the busiest unit's floors plus the bubble
  // floor fit in T (`pipeline_joint_s`): at least the one-stage joint plus the bubble floor and
  // P max t_i, and no planner's plan beats it.
  dcp_test::rng r(0x9a71);
  int raised = 0;  // trials where the path's constraint raises the bound above the other terms
  for (int trial = 0; trial < 8; ++trial) {
    const int pp = static_cast<int>(r.pick(std::vector<std::int64_t>{2, 4}));
    const int gpus = 8 * pp * static_cast<int>(r.between(1, 2));
    const auto cost = piped(dcp::models::llama3_8b(), gpus, 1, pp);
    const auto batch = text_batch(r, r.between(8, 96), 131072);
    SCOPED_TRACE("trial " + std::to_string(trial) + ": pp = " + std::to_string(pp) +
                 ", gpus = " + std::to_string(gpus) + ", " + std::to_string(batch.size()) + " sequences");
    const auto one = dcp::lower_bounds(cost, batch);
    const double bubble = dcp::pipeline_bubble_floor(pp, one.shortest_s);
    EXPECT_GE(one.pipeline_joint_s, (one.joint_s + bubble) * (1 - 1e-12));
    EXPECT_GE(one.pipeline_joint_s, pp * one.longest_s * (1 - 1e-12));
    EXPECT_EQ(dcp::lower_bounds(piped(dcp::models::llama3_8b(), gpus / pp, 1, 1), batch).pipeline_joint_s, 0);
    const auto staged = dcp::pipelined(one, pp);
    EXPECT_GE(staged.joint_s, one.pipeline_joint_s);
    auto without = one;
    without.pipeline_joint_s = 0;
    raised += staged.joint_s > dcp::pipelined(without, pp).joint_s * (1 + 1e-9);
    for (const auto& p : every_planner(cost, batch)) {
      EXPECT_TRUE(dcp::plan_violations(p, batch, cost).empty()) << p.method;
      EXPECT_GE(p.makespan_s, staged.joint_s * (1 - 1e-12)) << p.method;
    }
  }
  EXPECT_GT(raised, 0) << "the paths never raised the bound: the test tests nothing";
}

TEST(PipelinePlans, RecomputeFollowsTheMicroBatchesInFlight) {
  // Steps that each fit alone without recomputation, up to four in flight on stage 0 of a
  // 4-stage pipeline: finishing the plan checkpoints blocks where the window passes the
  // capacity, and the plan is then valid.
  dcp_test::rng r(0x11f1);
  const auto cost = piped(dcp::models::llama3_8b(), 16, 1, 4);
  dcp::plan_builder<dcp::analytic_cost> b(cost, "test");
  std::vector<dcp::sequence> batch;
  std::int64_t alone_fits = 0;  // the most tokens one step holds with no block checkpointed
  while (cost.memory(dcp::analytic_load{1, static_cast<double>(alone_fits + 1024), 0, 0}, 1, 0) <= cost.capacity())
    alone_fits += 1024;
  for (std::int64_t i = 0; i < 12; ++i) {
    batch.push_back({i, 1, alone_fits - r.between(0, 4096)});
    b.place(b.make_step(std::span<const dcp::sequence>(&batch.back(), 1), {static_cast<int>(i % 4), 1}, 0));
  }
  const dcp::plan p = std::move(b).finish(dcp::buddy_groups{cost.gpus(), cost.gpus_per_node()}, batch,
                                          dcp::loss_normalization::token_mean);
  const auto bad = dcp::plan_violations(p, batch, cost);
  EXPECT_TRUE(bad.empty()) << bad.front();
  int raised = 0;
  for (const auto& s : p.steps) raised += s.checkpointed_blocks > 0;
  EXPECT_GT(raised, 0) << "no step checkpoints a block, though four such steps exceed the memory together";
  // Executed on its own clock, none runs out of memory.
  EXPECT_EQ(dcp::sim::execute(p, dcp::sim::truth<dcp::analytic_cost>{cost, {}, 0.0, 0}).oom_steps, 0);
}

TEST(PipelineKnobs, RoomAndPathCapShapeTheMicroBatches) {
  // Random jobs at random knobs: every plan valid and above its bound; every step that packs
  // sequences together leaves memory for room x P like it in flight; and a smaller path cap never
  // leaves the batch's longest sequence on a narrower block (at least once a wider one).
  dcp_test::rng r(0x9a7c);
  int widened = 0;
  for (int trial = 0; trial < 8; ++trial) {
    const int pp = static_cast<int>(r.pick(std::vector<std::int64_t>{2, 4}));
    const auto cost = piped(dcp::models::llama3_8b(), 16 * pp, 1, pp);
    const auto batch = text_batch(r, r.between(16, 96), 131072);
    const auto longest = std::max_element(batch.begin(), batch.end(),
                                          [](const auto& a, const auto& b) { return a.spatial < b.spatial; });
    std::vector<int> longest_sp;
    for (double cap : {64.0, 4.0, 0.5}) {
      dcp::dcp_planner planner;
      planner.restrictions = false;  // the knobs shape this planner's own plans (its restrictions ignore them)
      planner.pipeline = {cap, static_cast<int>(r.pick(std::vector<std::int64_t>{1, 2, 4, 8}))};
      SCOPED_TRACE("trial " + std::to_string(trial) + ": pp = " + std::to_string(pp) + ", path cap " +
                   std::to_string(cap) + ", room " + std::to_string(planner.pipeline.room));
      const auto p = planner.plan(cost, batch);
      const auto bad = dcp::plan_violations(p, batch, cost);
      EXPECT_TRUE(bad.empty()) << (bad.empty() ? "" : bad.front());
      EXPECT_GE(p.makespan_s, p.joint_lower_bound_s * (1 - 1e-12));
      const double held = cost.static_memory(), in_flight = planner.pipeline.room * pp;
      for (const auto& st : p.steps) {
        if (st.sequences.size() < 2) continue;
        EXPECT_LE(held + in_flight * (st.memory_bytes - held), cost.capacity() * (1 + 1e-12))
            << st.sequences.size() << " sequences packed into a step with no room for " << in_flight << " in flight";
      }
      for (const auto& st : p.steps)
        for (const auto& q : st.sequences)
          if (q.id == longest->id) longest_sp.push_back(st.sp());
    }
    ASSERT_EQ(longest_sp.size(), 3u) << "the longest sequence is planned once per cap";
    EXPECT_LE(longest_sp[0], longest_sp[1]);
    EXPECT_LE(longest_sp[1], longest_sp[2]);
    widened += longest_sp[2] > longest_sp[0];
  }
  EXPECT_GT(widened, 0) << "no path cap ever widened the longest sequence: the cap does nothing";
}

TEST(PipelineKnobs, TuningKeepsTheFastestPairAndIgnoresTheDataOrder) {
  dcp_test::rng r(0x70e5);
  const auto cost = piped(dcp::models::llama3_8b(), 32, 1, 4);
  std::vector<dcp::sequence> data = text_batch(r, 600, 65536);
  const std::int64_t budget = 1 << 21;
  const auto tuned = dcp::tune(dcp::dcp_planner{}, cost, data, budget);
  auto shuffled = data;
  std::reverse(shuffled.begin(), shuffled.end());
  EXPECT_EQ(dcp::tune(dcp::dcp_planner{}, cost, shuffled, budget), tuned);
  // A pair of the grid (or the planner's own), no slower on the tuning epoch than the defaults.
  const bool on_grid = std::find(dcp::path_cap_candidates.begin(), dcp::path_cap_candidates.end(),
                                 tuned.pipeline.path_cap) != dcp::path_cap_candidates.end() &&
                       std::find(dcp::room_candidates.begin(), dcp::room_candidates.end(), tuned.pipeline.room) !=
                           dcp::room_candidates.end();
  EXPECT_TRUE(on_grid || tuned.pipeline == dcp::pipeline_knobs{}) << tuned;
  const auto epoch = dcp::tuning_batches(cost, std::span<const dcp::sequence>(data), budget, 0);
  ASSERT_GT(epoch.size(), 1u);
  auto seconds = [&](const dcp::dcp_planner& p) {
    double sum = 0;
    for (const auto& b : epoch) sum += p.plan(cost, b).makespan_s;
    return sum;
  };
  EXPECT_LE(seconds(tuned), seconds(dcp::dcp_planner{}));
  EXPECT_EQ(tuned.tuned_setting(cost), "path cap " + std::to_string(static_cast<int>(tuned.pipeline.path_cap)) +
                                           ", room " + std::to_string(tuned.pipeline.room));
  // Without stages the knobs do not apply: nothing to tune, nothing to report.
  const auto flat = piped(dcp::models::llama3_8b(), 8, 1, 1);
  dcp::dcp_planner mine;
  mine.pipeline = {3, 5};
  EXPECT_EQ(dcp::tune(mine, flat, data, budget), mine);
  EXPECT_EQ(mine.tuned_setting(flat), "");
}

TEST(PipelineKnobs, KnobsOutOfRangeAreNamed) {
  const auto cost = piped(dcp::models::llama3_8b(), 16, 1, 2);
  const std::vector<dcp::sequence> batch{{0, 1, 4096}, {1, 1, 8192}};
  for (double cap : {0.0, -1.0, std::numeric_limits<double>::quiet_NaN(), std::numeric_limits<double>::infinity()}) {
    dcp::dcp_planner p;
    p.pipeline.path_cap = cap;
    EXPECT_DCP_ERROR((void)p.plan(cost, batch), dcp::errc::invalid_argument, "pipeline_knobs::path_cap", "default 16");
    EXPECT_DCP_ERROR((void)dcp::tune(p, cost, batch), dcp::errc::invalid_argument, "pipeline_knobs::path_cap");
  }
  dcp::dcp_planner p;
  p.pipeline.room = 0;
  EXPECT_DCP_ERROR((void)p.plan(cost, batch), dcp::errc::invalid_argument, "pipeline_knobs::room 0", "at least 1");
}

TEST(PipelineModel, OneWorkingSetIsLiveAtATime) {
  // The law of `pipeline_cost_model::working_memory` on random loads, sizes and k, dense,
  // windowed, vocabulary and video stages, analytic and scaled: the working set does not depend on k, it is
  // part of the micro-batch's own memory (what is left, its stored bytes, is never negative), and
  // alone in flight a micro-batch holds exactly its memory.
  dcp_test::rng r(0x3a11);
  auto windowed = dcp::models::llama3_8b(), vocabulary = dcp::models::llama3_8b();
  windowed.window = 4096;
  vocabulary.vocab = 128256;  // the loss's logits are the larger working set
  const std::vector<dcp::transformer_spec> models{dcp::models::llama3_8b(), windowed, vocabulary,
                                                  dcp::models::cogvideox_5b()};
  for (int trial = 0; trial < 200; ++trial) {
    const auto& m = models[static_cast<std::size_t>(r.between(0, static_cast<std::int64_t>(models.size()) - 1))];
    const int pp = static_cast<int>(r.pick(std::vector<std::int64_t>{2, 4}));
    const auto cost = piped(m, 16 * pp, 1, pp);
    const dcp::scaled_analytic_cost scaled{cost, {.memory = 1.0 + 0.5 * r.unit()}};
    const dcp::analytic_load l{1, static_cast<double>(r.between(1, 1 << 17)), 0, 0};
    const int sp = static_cast<int>(r.pick(std::vector<std::int64_t>{1, 2, 4, 8, 16}));
    const double w = cost.working_memory(l, sp), ws = scaled.working_memory(l, sp);
    EXPECT_GT(w, 0);
    for (int k = 0; k <= cost.blocks(); ++k) {
      EXPECT_GE(cost.memory(l, sp, k) - cost.static_memory() - w, 0) << "k " << k;
      EXPECT_GE(scaled.memory(l, sp, k) - scaled.static_memory() - ws, -1e-6 * ws) << "k " << k;
    }
    // One micro-batch in flight: its memory, to the rounding of the two sums.
    dcp::plan p = plan_of(1, {{0, 1}});
    const double own = cost.memory(l, sp, cost.blocks());
    const auto held =
        dcp::in_flight_memory(p, std::vector<double>{own}, std::vector<double>{w}, cost.static_memory(), pp);
    EXPECT_NEAR(held[0], own, 1e-9 * own);
  }
  // One working set short: named, not read past the end.
  const dcp::plan two = plan_of(1, {{0, 1}, {0, 1}});
  EXPECT_TRUE(dcp_test::throws_dcp_error(
      "working sets",
      [&] {
        (void)dcp::in_flight_memory(two, std::vector<double>{2, 2}, std::vector<double>{1}, 1, 2);
      },
      dcp::errc::invalid_argument, {"1 working sets for 2 steps", "one of each per step"}));
}

TEST(PipelineModel, StagesSplitTheBlocksAndTheLayoutIsChecked) {
  const auto whole = dcp::models::llama3_8b();
  const auto stage = dcp::pipeline_stage(whole, 3);
  EXPECT_EQ(stage.blocks, (whole.blocks + 2) / 3);
  EXPECT_EQ(stage.pipeline_stages, 3);
  EXPECT_EQ(dcp::pipeline_stage(whole, 1), whole);
  EXPECT_TRUE(dcp_test::throws_dcp_error("too many stages", [&] { (void)dcp::pipeline_stage(whole, whole.blocks + 1); },
                                         dcp::errc::invalid_argument, {"pp = 33", "use 1 <= pp <= 32"}));
  // Factorized 2D attention splits by (spatial, temporal) pairs: 28 pairs of stdit3-xl over 3
  // stages are 10, 9 and 9, the heaviest 20 blocks, a valid model (it was 19, an odd count).
  const auto video = dcp::models::stdit3_xl();
  const auto pairs = dcp::pipeline_stage(video, 3);
  EXPECT_EQ(pairs.blocks, 20);
  EXPECT_NO_THROW(dcp::validate(pairs));
  EXPECT_TRUE(dcp_test::throws_dcp_error("too many stages for the pairs",
                                         [&] { (void)dcp::pipeline_stage(video, video.blocks / 2 + 1); },
                                         dcp::errc::invalid_argument,
                                         {"pp = 29 stages for the 28 spatial-temporal block pairs", "use 1 <= pp <= 28"}));
  // A whole model on a pipelined layout prices the wrong thing: refused.
  EXPECT_TRUE(dcp_test::throws_dcp_error("whole model",
                                         [&] {
                                           dcp::analytic_cost c{
                                               whole, dcp::devices::h200_analytic(),
                                               dcp::parallel_layout{.gpus = 16, .gpus_per_node = 8, .pp = 2}};
                                           c.validate();
                                         },
                                         dcp::errc::invalid_argument, {"pp = 2", "pipeline_stage"}));
  EXPECT_TRUE(dcp_test::throws_dcp_error(
      "uneven stages", [&] { dcp::parallel_layout{.gpus = 24, .gpus_per_node = 8, .pp = 2}.validate(); },
      dcp::errc::invalid_argument, {"pp = 2", "whole nodes"}));
  const dcp::parallel_layout l{.gpus = 256, .gpus_per_node = 8, .tp = 8, .pp = 4};
  EXPECT_EQ(l.units(), 8);
  EXPECT_EQ(l.gpus_of({2, 1}, 3), (dcp::rank_block{208, 8}));
  EXPECT_EQ(l.stage_of(208), 3);
  EXPECT_EQ(l.unit_of(208), 2);
  // Weights shard by stage: a stage of 4 holds about a quarter of the static memory.
  const auto one = piped(whole, 64, 1, 1), four = piped(whole, 64, 1, 4);
  EXPECT_LT(four.static_memory(), 0.3 * one.static_memory());
  EXPECT_GT(four.stage_transfer(dcp::analytic_load{1, 8192, 0, 0}, 2), 0);
  EXPECT_EQ(one.stage_transfer(dcp::analytic_load{1, 8192, 0, 0}, 2), 0);
}

}  // namespace
