// The truth clock: SPEC parsing, the scaled analytic model, the executor's rules over plans of
// every planner, out-of-memory accounting, straggler-aware planning and its lower bound.
// Random inputs come from fixed seeds, printed with every failure.

#include <dcp_test/support.hpp>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <iostream>
#include <limits>
#include <span>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include <dcp/cost/analytic.hpp>
#include <dcp/cost/profiled_cost.hpp>
#include <dcp/cost/scaled_cost.hpp>
#include <dcp/error.hpp>
#include <dcp/plan/check_plan.hpp>
#include <dcp/plan/dcp_planner.hpp>
#include <dcp/plan/lower_bounds.hpp>
#include <dcp/plan/sequence_options.hpp>
#include <dcp/profile/profile_table.hpp>
#include <dcp/random.hpp>
#include <dcp/sim/execute.hpp>
#include <dcp/sim/methods.hpp>
#include <dcp/sim/plan_json.hpp>
#include <dcp/sim/truth.hpp>
#include <dcp/workload/embedded.hpp>
#include <dcp/workload/tuning.hpp>

namespace {

using dcp::sequence;
using dcp::sim::parse_truth_spec;

// --- SPEC -------------------------------------------------------------------------------------

TEST(TruthSpec, ParsesEveryKey) {
  const auto t = parse_truth_spec(" compute=0.8, attention=1.3,intra_bw=0.6,inter_bw=0.5,overhead=3,memory=1.08,"
                                  "slow_gpus=17:0.9+3:0.85,jitter=0.05");
  EXPECT_EQ(t.scales, (dcp::cost_scales{0.8, 1.3, 0.6, 0.5, 3, 1.08}));
  EXPECT_EQ(t.slow_gpus, (std::vector<std::pair<int, double>>{{3, 0.85}, {17, 0.9}}));
  EXPECT_EQ(t.jitter, 0.05);
  const auto speeds = t.speeds(32);
  ASSERT_EQ(speeds.size(), 32u);
  EXPECT_EQ(speeds[3], 0.85);
  EXPECT_EQ(speeds[17], 0.9);
  EXPECT_EQ(speeds[0], 1.0);
  EXPECT_EQ(parse_truth_spec(""), dcp::sim::truth_spec{});
  EXPECT_TRUE(parse_truth_spec("").speeds(8).empty());
}

TEST(TruthSpec, CanonicalFormParsesBack) {
  for (const char* spec : {"", "memory=1.08", "attention=0.7,intra_bw=0.6,jitter=0.05,slow_gpus=3:0.85+17:0.9",
                           "slow_gpus=5:0.75", "compute=0.8,overhead=3"}) {
    const auto t = parse_truth_spec(spec);
    std::ostringstream os;
    os << t;
    EXPECT_EQ(parse_truth_spec(os.str()), t) << spec << " -> " << os.str();
  }
}

TEST(TruthSpec, BadSpecsNameTheEntryAndTheFix) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"speed=2", "key 'speed' is unknown; keys: compute"},
      {"compute", "entry 'compute' is not key=value"},
      {"compute=1,compute=2", "key 'compute' is given twice"},
      {"attention=fast", "attention: 'fast' is not a finite number"},
      {"attention=1.3x", "'1.3x' is not a finite number"},
      {"memory=0", "memory=0 must be a positive factor"},
      {"inter_bw=-1", "inter_bw=-1 must be a positive factor"},
      {"overhead=inf", "'inf' is not a finite number"},
      {"jitter=-0.1", "jitter=-0.1 must be a sigma >= 0"},
      {"slow_gpus=5", "slow_gpus entry '5' is not RANK:SPEED"},
      {"slow_gpus=5:1.5", "speed 1.5 of GPU 5 must be in (0, 1]"},
      {"slow_gpus=5:0", "speed 0 of GPU 5 must be in (0, 1]"},
      {"slow_gpus=-1:0.5", "rank '-1' must be a GPU index >= 0"},
      {"slow_gpus=1.5:0.5", "rank '1.5' must be a GPU index >= 0"},
      {"slow_gpus=5:0.7+5:0.8", "lists GPU 5 twice"},
      {"slow_gpus=", "slow_gpus entry '' is not RANK:SPEED"},
      {"compute=1,,memory=1", "has an empty entry"},
      {"compute=1,", "has an empty entry"},
  };
  for (const auto& c : cases)
    EXPECT_DCP_ERROR((void)parse_truth_spec(c.first), dcp::errc::invalid_argument, c.second) << "SPEC '" << c.first << "'";
  EXPECT_DCP_ERROR((void)parse_truth_spec("slow_gpus=40:0.5").speeds(32), dcp::errc::invalid_argument,
                   "names GPU 40, but the job has 32 GPUs");
}

// --- scaled analytic model --------------------------------------------------------------------

dcp::analytic_cost cost_of(const char* model, int gpus) {
  return dcp::make_analytic_cost(dcp::models::preset(model), dcp::devices::h200_analytic(), gpus);
}

TEST(ScaledCost, UnitScalesAreBitIdenticalToTheAnalyticModel) {
  const std::uint64_t seed = 20261130;
  dcp::xoshiro256ss g(seed);
  struct layout {
    int tp, ep;
    dcp::sharding_kind sharding;
  };
  std::size_t checked = 0;
  for (auto model : dcp::models::preset_names)
    for (const layout& v : {layout{1, 1, dcp::sharding_kind::zero1}, layout{2, 1, dcp::sharding_kind::zero3},
                            layout{1, 4, dcp::sharding_kind::replicated}, layout{4, 2, dcp::sharding_kind::zero1}}) {
      const dcp::analytic_cost base{dcp::models::preset(model),
                                    dcp::devices::h200_analytic(),
                                    {.gpus = 128, .tp = v.tp, .ep = v.ep, .sharding = v.sharding}};
      // A filter, not an expectation: skip a layout this model cannot take (experts on a dense model, ...).
      try {
        base.validate();
    } catch (const dcp::error&) {
      continue;
    }
    ++checked;
    const dcp::scaled_analytic_cost same{base, {}};
    EXPECT_EQ(same.max_tokens_per_gpu(), base.max_tokens_per_gpu());
    for (int i = 0; i < 300; ++i) {
      dcp::analytic_load l{};
      for (int j = 0, n = 1 + static_cast<int>(dcp::uniform_below(g, 6)); j < n; ++j)
        l = l + base.load_of(dcp::make_sequence(j, 1 + static_cast<std::int64_t>(dcp::uniform_below(g, 200000)) / 4,
                                                1 + static_cast<std::int64_t>(dcp::uniform_below(g, 4096))));
      const int sp = 1 << dcp::uniform_below(g, 6), k = static_cast<int>(dcp::uniform_below(g, base.blocks() + 1));
      ASSERT_EQ(same.time(l, sp, k), base.time(l, sp, k)) << "seed " << seed << " " << base << " i " << i;
      ASSERT_EQ(same.memory(l, sp, k), base.memory(l, sp, k)) << "seed " << seed << " i " << i;
      ASSERT_EQ(same.work_floor(l, sp, k), base.work_floor(l, sp, k)) << "seed " << seed << " i " << i;
      ASSERT_EQ(same.packed_work_floor(l, sp, k), base.packed_work_floor(l, sp, k)) << "seed " << seed << " i " << i;
    }
  }
  EXPECT_GE(checked, 12u);
}

TEST(ScaledCost, EachFactorScalesItsOwnTerm) {
  const auto base = cost_of("cogvideox-5b", 32);
  const auto l = base.load_of(dcp::make_sequence(1, 1, 60000)) + base.load_of(dcp::make_sequence(2, 1, 20000));
  auto with = [&](dcp::cost_scales s) { return dcp::scaled_analytic_cost{base, s}; };
  const double L = base.blocks(), h = static_cast<double>(base.model.hidden);
  for (int sp : {1, 4, 16}) {
    const int k = 7;
    const double t = base.time(l, sp, k);
    // compute and attention: the two FLOP shares of t_comp, each scaled alone.
    const double t_lin = with({2, 1, 1, 1, 1, 1}).time(l, sp, k) - t;
    const double t_att = with({1, 2, 1, 1, 1, 1}).time(l, sp, k) - t;
    const double flops_lin = L * 2 * base.model.block_parameters() * l.tokens;
    EXPECT_NEAR(t_lin / t_att, flops_lin / l.attention, 1e-9 * flops_lin / l.attention) << sp;
    EXPECT_NEAR(with({2, 2, 1, 1, 1, 1}).time(l, sp, k) - t, t_lin + t_att, 1e-9 * t) << sp;
    // overhead: tau (3L + k) and alpha c (2L + k).
    const double a = sp > 1 ? base.all_to_alls_per_pass() * (2 * L + k) : 0;
    const double fixed = base.device.tau * (3 * L + k) + a * base.device.alpha;
    EXPECT_NEAR(with({1, 1, 1, 1, 3, 1}).time(l, sp, k) - t, 2 * fixed, 1e-9 * t) << sp;
    // bandwidth: halving the right one doubles v / bw only.
    const double comm_bytes = sp > 1 ? a * 2 * h * l.tokens / sp * (sp - 1) / sp / base.bandwidth(sp) : 0;
    const bool intra = sp <= base.gpus_per_node();
    EXPECT_NEAR(with({1, 1, 0.5, 1, 1, 1}).time(l, sp, k) - t, intra ? comm_bytes : 0, 1e-9 * t) << sp;
    EXPECT_NEAR(with({1, 1, 1, 0.5, 1, 1}).time(l, sp, k) - t, intra ? 0 : comm_bytes, 1e-9 * t) << sp;
    // memory: activations only.
    const double act = base.memory(l, sp, k) - base.static_memory();
    EXPECT_NEAR(with({1, 1, 1, 1, 1, 1.08}).memory(l, sp, k) - base.static_memory(), 1.08 * act, 1e-9 * act) << sp;
    EXPECT_EQ(with({1, 1, 1, 1, 1, 1.08}).time(l, sp, k), t);
  }
}

// The scaled model forwards zero3's per-step floor (`step_floor_cost_model`) on its own clock:
// over random scales, loads, sp, k and every legal ring, no step is shorter than it; a short
// step lasts exactly it (the floor is the one `time` takes, not a looser one); 0 under zero1.
TEST(ScaledCost, EveryStepLastsAtLeastTheScaledFloor) {
  const std::uint64_t seed = 20261201;
  std::cout << "[     SEED ] " << seed << '\n';
  dcp::xoshiro256ss g(seed);
  // A factor in [0.5, 2], log-uniform.
  auto factor = [&] { return std::exp2((static_cast<double>(dcp::uniform_below(g, 2001)) - 1000) / 1000); };
  struct job {
    const char* model;
    int gpus;
    dcp::parallel_layout layout;
  };
  const dcp::sharding_kind z3 = dcp::sharding_kind::zero3;
  for (const job& j : {job{"wan2.1-14b", 64, {.sharding = z3}}, job{"llama3-70b", 64, {.tp = 8, .sharding = z3}},
                       job{"cogvideox-5b", 32, {.sharding = z3, .ring = 4}}, job{"qwen3-30b-a3b", 32, {.ep = 8, .sharding = z3}},
                       job{"wan2.1-14b", 64, {.sharding = dcp::sharding_kind::zero1}}}) {
    dcp::parallel_layout layout = j.layout;
    layout.gpus = j.gpus;
    const auto base = dcp::make_analytic_cost(dcp::models::preset(j.model), dcp::devices::h200_analytic(), layout);
    for (int trial = 0; trial < 8; ++trial) {
      const dcp::scaled_analytic_cost c{base, {factor(), factor(), factor(), factor(), factor(), factor()}};
      SCOPED_TRACE(::testing::Message() << "seed " << seed << " " << c);
      if (j.layout.sharding != z3) {
        ASSERT_EQ(c.step_floor(), 0.0);
        continue;
      }
      ASSERT_GT(c.step_floor(), 0.0);
      ASSERT_TRUE(std::isfinite(c.step_floor()));
      double least = std::numeric_limits<double>::infinity();  // a short step: the gathers alone
      for (std::int64_t n : {512, 2048, 8192})
        least = std::min(least, c.time(c.load_of(dcp::make_sequence(0, n)), 1, 0));
      EXPECT_EQ(least, c.step_floor());
      for (int i = 0; i < 100; ++i) {
        dcp::analytic_load l{};
        for (int s = 0, n = 1 + static_cast<int>(dcp::uniform_below(g, 6)); s < n; ++s)
          l = l + c.load_of(dcp::make_sequence(s, 1 + static_cast<std::int64_t>(dcp::uniform_below(g, 8)),
                                               1 + static_cast<std::int64_t>(dcp::uniform_below(g, 30000))));
        const int sp = 1 << dcp::uniform_below(g, 7), k = static_cast<int>(dcp::uniform_below(g, c.blocks() + 1));
        if (!dcp::legal_sp(c, sp)) continue;
        for (int r = 1; r <= sp; r *= 2) {
          if (!dcp::legal_ring(c, sp, r)) continue;
          ASSERT_GE(dcp::time_with_ring(c, l, sp, k, r), c.step_floor()) << "i " << i << " sp " << sp << " k " << k
                                                                          << " r " << r;
        }
      }
    }
  }
}

TEST(ScaledCost, BadScalesAreErrors) {
  const dcp::scaled_analytic_cost c{cost_of("llama3-8b", 8), {1, 1, 1, 1, 1, -2}};
  EXPECT_DCP_ERROR(c.validate(), dcp::errc::invalid_argument, "cost scale memory = -2");
}

// --- executor ---------------------------------------------------------------------------------

// A small job: a slice of an embedded workload as the dataset (static planners tune on it) and
// its global batches.
struct job {
  dcp::analytic_cost cost;
  dcp::dataset data;
  std::vector<std::vector<sequence>> batches;
  dcp::sim::method_settings settings;
};

job make_job(const char* workload, int gpus, std::size_t count, std::int64_t budget, std::uint64_t seed) {
  job j{cost_of(std::string(workload).starts_with("text") ? "llama3-8b" : "cogvideox-5b", gpus), {}, {}, {}};
  auto all = dcp::workloads::make(workload, seed);
  dcp::xoshiro256ss g(seed);
  dcp::fisher_yates(std::span<sequence>(all), g);
  j.data.assign(all.begin(), all.begin() + static_cast<std::ptrdiff_t>(std::min(count, all.size())));
  j.settings.global_batch_tokens = budget;
  j.settings.seed = seed;
  j.batches = dcp::epoch_batches(j.cost, j.data, budget, seed);
  return j;
}

// Every method's plans of every batch of `j`.
std::vector<std::vector<dcp::plan>> plans_of_every_method(const job& j) {
  std::vector<std::vector<dcp::plan>> out;
  for (auto name : dcp::sim::method_names)
    dcp::sim::with_method(name, j.cost, j.data, j.settings, [&](const auto& planner, double) {
      std::vector<dcp::plan> plans;
      for (const auto& b : j.batches) plans.push_back(planner.plan(j.cost, std::span<const sequence>(b)));
      out.push_back(std::move(plans));
      return 0;
    });
  return out;
}

std::vector<job> jobs() {
  return {make_job("cogvideox-zipf10", 16, 1500, 16 * 40000, 7), make_job("text-longtail", 16, 300, 16 * 60000, 11)};
}

TEST(Execute, IdentityTruthReproducesEveryPlannerExactly) {
  for (const auto& j : jobs()) {
    const auto truth = dcp::sim::make_truth({}, j.cost, 1);
    const auto all = plans_of_every_method(j);
    for (const auto& plans : all)
      for (std::size_t b = 0; b < plans.size(); ++b) {
        const auto e = dcp::sim::execute(plans[b], truth, b);
        ASSERT_EQ(e.executed.makespan_s, plans[b].makespan_s) << plans[b].method << " batch " << b;
        EXPECT_EQ(e.oom_steps, 0);
        for (std::size_t i = 0; i < plans[b].steps.size(); ++i) {
          ASSERT_EQ(e.executed.steps[i].start_s, plans[b].steps[i].start_s) << plans[b].method << " step " << i;
          ASSERT_EQ(e.executed.steps[i].time_s, plans[b].steps[i].time_s);
        }
        EXPECT_EQ(e.executed.lower_bound_s, plans[b].lower_bound_s);
      }
  }
}

TEST(Execute, RoundsAreBarriersOnlyWhereMethodsSynchronise) {
  const auto all = plans_of_every_method(jobs().front());
  std::size_t m = 0;
  for (auto name : dcp::sim::method_names) {
    int most = 0;
    for (const auto& p : all[m++])
      for (const auto& s : p.steps) most = std::max(most, s.round);
    // dcp-no-inter-no-intra may fit a batch in one round (every block checkpointed packs more).
    if (name == "dcp-no-inter-no-intra") continue;
    const bool lockstep = name.starts_with("bucket") || name.starts_with("packed") || name == "dcp-no-inter";
    if (lockstep) {
      EXPECT_GT(most, 0) << name << " plans have no barrier";
    } else {
      EXPECT_EQ(most, 0) << name << " plans have a barrier";
    }
  }
}

// Recomputes the executor's timeline from the rules, rank by rank, and checks it.
void expect_rules_hold(const dcp::plan& p, const dcp::sim::execution& e,
                       const dcp::sim::truth<dcp::scaled_analytic_cost>& t, std::uint64_t batch, const std::string& what) {
  const auto& x = e.executed;
  ASSERT_EQ(x.steps.size(), p.steps.size()) << what;
  const int n = p.gpus;
  // Round barrier: every step starts after every step of an earlier round ended.
  for (const auto& a : x.steps)
    for (const auto& b : x.steps)
      if (b.round < a.round) {
        ASSERT_GE(a.start_s, b.end_s()) << what;
      }
  // Per GPU: plan order (by round, then index) kept, no overlap, and no wait beyond the rules:
  // each step starts exactly at max(its round's barrier, its members' previous ends).
  std::vector<std::size_t> order(p.steps.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return p.steps[a].round < p.steps[b].round; });
  std::vector<double> last_end(static_cast<std::size_t>(n), 0.0);
  double makespan = 0;
  for (std::size_t i : order) {
    const auto& s = x.steps[i];
    double barrier = 0;
    for (const auto& b : x.steps)
      if (b.round < s.round) barrier = std::max(barrier, b.end_s());
    double ready = barrier;
    for (int r = s.ranks.first; r < s.ranks.end(); ++r) {
      ASSERT_GE(s.start_s, last_end[static_cast<std::size_t>(r)]) << what << ": rank " << r << " overlaps";
      ready = std::max(ready, last_end[static_cast<std::size_t>(r)]);
    }
    ASSERT_EQ(s.start_s, ready) << what << ": step " << i << " waits beyond its gang and round";
    for (int r = s.ranks.first; r < s.ranks.end(); ++r) last_end[static_cast<std::size_t>(r)] = s.end_s();
    // True time: the truth's, over the slowest member, times the step's jitter.
    dcp::analytic_load l{};
    for (const auto& q : dcp::sim::sequences_of(p.steps[i])) l = l + t.model.load_of(q);
    ASSERT_FALSE(e.oom[i]) << what;
    const double expected = t.model.time(l, s.sp(), s.checkpointed_blocks) / dcp::block_speed(t.speeds, s.ranks) *
                            dcp::sim::jitter_factor(t.jitter, t.seed, batch, i);
    ASSERT_NEAR(s.time_s, expected, 1e-12 * expected) << what;
    makespan = std::max(makespan, s.end_s());
  }
  EXPECT_EQ(x.makespan_s, makespan) << what;
}

TEST(Execute, RulesHoldOnAPerturbedTruthForEveryPlanner) {
  for (const auto& j : jobs()) {
    const auto truth = dcp::sim::make_truth(parse_truth_spec("attention=0.7,intra_bw=0.6,inter_bw=0.5,overhead=2,"
                                                             "jitter=0.05,slow_gpus=3:0.85+9:0.6"),
                                            j.cost, 42);
    const auto all = plans_of_every_method(j);
    for (const auto& plans : all)
      for (std::size_t b = 0; b < plans.size(); ++b)
        expect_rules_hold(plans[b], dcp::sim::execute(plans[b], truth, b), truth, b,
                          plans[b].method + " batch " + std::to_string(b) + " (seed 42)");
  }
}

TEST(Execute, JitterIsSeededWithMeanOne) {
  const auto j = jobs().front();
  const auto p = dcp::dcp_planner{}.plan(j.cost, std::span<const sequence>(j.batches.front()));
  const auto a = dcp::sim::make_truth(parse_truth_spec("jitter=0.1"), j.cost, 5);
  const auto b = dcp::sim::make_truth(parse_truth_spec("jitter=0.1"), j.cost, 6);
  EXPECT_EQ(dcp::sim::execute(p, a, 0), dcp::sim::execute(p, a, 0));
  EXPECT_NE(dcp::sim::execute(p, a, 0).executed.makespan_s, dcp::sim::execute(p, b, 0).executed.makespan_s);
  EXPECT_NE(dcp::sim::execute(p, a, 0).executed.makespan_s, dcp::sim::execute(p, a, 1).executed.makespan_s);
  double sum = 0, sum_log = 0;
  const int n = 20000;
  for (int i = 0; i < n; ++i) {
    const double f = dcp::sim::jitter_factor(0.1, 5, 0, static_cast<std::uint64_t>(i));
    sum += f, sum_log += std::log(f);
  }
  EXPECT_NEAR(sum / n, 1.0, 0.005);
  EXPECT_NEAR(sum_log / n, -0.005, 0.005);  // log-normal with mu = -sigma^2 / 2
}

TEST(Execute, OutOfMemoryStepsAreCountedAndChargedARecheckpointedRerun) {
  const auto j = jobs().front();
  const auto truth = dcp::sim::make_truth(parse_truth_spec("memory=1.3"), j.cost, 0);
  std::int64_t total = 0;
  for (std::size_t b = 0; b < j.batches.size(); ++b) {
    const auto p = dcp::dcp_planner{}.plan(j.cost, std::span<const sequence>(j.batches[b]));
    const auto e = dcp::sim::execute(p, truth, b);
    std::int64_t over = 0;
    for (std::size_t i = 0; i < p.steps.size(); ++i) {
      const auto& s = p.steps[i];
      dcp::analytic_load l{};
      for (const auto& q : dcp::sim::sequences_of(s)) l = l + truth.model.load_of(q);
      const double mem = truth.model.memory(l, s.sp(), s.checkpointed_blocks);
      ASSERT_EQ(e.oom[i] != 0, mem > truth.model.capacity()) << "batch " << b << " step " << i;
      EXPECT_EQ(e.executed.steps[i].memory_bytes, mem);
      const double t = truth.model.time(l, s.sp(), s.checkpointed_blocks);
      const double charged = e.oom[i] ? t / 3 + truth.model.time(l, s.sp(), truth.model.blocks()) : t;
      EXPECT_EQ(e.executed.steps[i].time_s, charged);
      over += e.oom[i];
    }
    EXPECT_EQ(e.oom_steps, over);
    total += over;
  }
  EXPECT_GT(total, 0) << "dcp packs memory to the model's capacity; 30% more activation memory must overflow";

  // The run's metrics count them; the oracle plans on the true memory and never overflows.
  const auto dcp_run = dcp::sim::run_method("dcp-open-loop", j.cost, j.data, j.batches, j.settings, truth);
  const auto oracle = dcp::sim::run_method("oracle", j.cost, j.data, j.batches, j.settings, truth);
  EXPECT_EQ(dcp_run.metrics.oom_steps, total);
  EXPECT_EQ(oracle.metrics.oom_steps, 0);
  // Calibrated dcp (the dcp row on a truth) learns the memory from its probe: no overflow at all.
  const auto calibrated = dcp::sim::run_method("dcp", j.cost, j.data, j.batches, j.settings, truth);
  EXPECT_EQ(calibrated.metrics.oom_steps, 0);
  EXPECT_GT(calibrated.metrics.probe_steps, 0);
}

TEST(Execute, RejectsAPlanForAnotherJob) {
  const auto j = jobs().front();
  const auto p = dcp::dcp_planner{}.plan(j.cost, std::span<const sequence>(j.batches.front()));
  const auto truth = dcp::sim::make_truth({}, cost_of("cogvideox-5b", 8), 0);
  EXPECT_THROW((void)dcp::sim::execute(p, truth, 0), dcp::error);
  EXPECT_THROW((void)dcp::sim::make_truth(parse_truth_spec("slow_gpus=20:0.5"), cost_of("cogvideox-5b", 8), 0),
               dcp::error);
}

// --- a profile as the truth --------------------------------------------------------------------

// A dcp.profile/v1 table of the analytic model itself: lengths 512..256k, every sp, batches
// doubling while they fit, k in {0, L/2, L}.
dcp::profile_table profile_of(const dcp::analytic_cost& c) {
  dcp::profile_table t;
  t.model = c.model, t.device = c.device.name, t.gpus = c.gpus(), t.gpus_per_node = c.gpus_per_node();
  t.memory_capacity_bytes = c.capacity(), t.static_memory_bytes = c.static_memory();
  int bucket = 0;
  for (std::int64_t n = 512; n <= 262144; n *= 2, ++bucket)
    for (int sp : dcp::legal_sp_sizes(c))
      for (int k : {0, c.blocks() / 2, c.blocks()})
        for (int b = 1; b <= 64; b *= 2) {
          const auto one = c.load_of(dcp::make_sequence(0, n - c.model.text_tokens));
          const auto l = dcp::repeated_load<dcp::analytic_cost>(one, b);
          if (c.memory(l, sp, k) > c.capacity()) break;
          t.entries.push_back({bucket, c.tokens_of(dcp::make_sequence(0, n - c.model.text_tokens)), 1,
                               n - c.model.text_tokens, sp, b, k, c.time(l, sp, k), c.memory(l, sp, k)});
        }
  return t;
}

TEST(ProfileTruth, ExecutesEveryMethodAndTheOracleOnTheTable) {
  const auto j = jobs().back();
  auto profiled = dcp::make_profiled_cost(profile_of(j.cost), j.cost.model, j.cost.device.name, j.cost.gpus());
  const auto truth = dcp::sim::make_truth(profiled, parse_truth_spec("slow_gpus=2:0.8,jitter=0.02"), 4);
  ASSERT_EQ(truth.speeds.size(), 16u);
  const auto model_dcp = dcp::sim::run_method("dcp", j.cost, j.data, j.batches, j.settings).metrics;
  for (const char* name : {"dcp", "bucket", "dynamic_cp", "oracle"}) {
    const auto r = dcp::sim::run_method(name, j.cost, j.data, j.batches, j.settings, truth);
    EXPECT_EQ(r.metrics.tokens, model_dcp.tokens) << name;
    EXPECT_GT(r.metrics.makespan_s, 0) << name;
    EXPECT_LE(r.metrics.lower_bound_s, r.metrics.makespan_s * (1 + 1e-9)) << name;
    if (std::string_view(name) == "dcp") {
      // The table interpolates the very model dcp planned on: the run lands near the model's time,
      // slowed by the slow GPU.
      EXPECT_GT(r.metrics.makespan_s, 0.8 * model_dcp.makespan_s);
      EXPECT_LT(r.metrics.makespan_s, 1.6 * model_dcp.makespan_s);
    }
  }
  // A profile truth takes only slow GPUs and jitter.
  EXPECT_DCP_ERROR((void)dcp::sim::make_truth(profiled, parse_truth_spec("attention=1.3"), 0),
                   dcp::errc::invalid_argument, "a profile truth takes only slow_gpus and jitter");
}

// A profile prices every k of an sp it holds (interpolated, the ends extended) and none of an sp it
// lacks. Every block checkpointed alone for sp >= 2 still runs to finite numbers, the calibrated
// dcp row included; without sp >= 2 at all a step there cannot be timed, and the truth names it
// instead of reporting 0 tokens/s and an infinite makespan.
TEST(ProfileTruth, AnSpTheProfileLacksIsNamedNeverAnInfiniteRun) {
  const auto j = jobs().front();
  const dcp::profile_table full = profile_of(j.cost);
  const int L = j.cost.blocks();
  dcp::profile_table partial = full;
  std::erase_if(partial.entries, [&](const auto& e) { return e.sp >= 2 && e.checkpointed_blocks != L; });
  const auto truth = dcp::sim::make_truth(
      dcp::make_profiled_cost(partial, j.cost.model, j.cost.device.name, j.cost.gpus()), parse_truth_spec(""), 3);
  for (const char* name : {"dcp-open-loop", "dcp"}) {
    const auto r = dcp::sim::run_method(name, j.cost, j.data, j.batches, j.settings, truth);
    EXPECT_TRUE(std::isfinite(r.metrics.makespan_s) && r.metrics.makespan_s > 0) << name;
    EXPECT_TRUE(std::isfinite(r.metrics.peak_memory_bytes)) << name;
    EXPECT_GT(r.metrics.tokens_per_s, 0) << name;
    EXPECT_LE(r.metrics.efficiency, 1 + 1e-9) << name;
  }
  dcp::profile_table narrow = full;
  std::erase_if(narrow.entries, [](const auto& e) { return e.sp >= 2; });
  const auto blind = dcp::sim::make_truth(
      dcp::make_profiled_cost(narrow, j.cost.model, j.cost.device.name, j.cost.gpus()), parse_truth_spec(""), 3);
  EXPECT_DCP_ERROR((void)dcp::sim::run_method("dcp-open-loop", j.cost, j.data, j.batches, j.settings, blind),
                   dcp::errc::invalid_argument, "the truth cannot time step", "profile every sp the plans use");
}

// --- identity truth reproduces today's numbers --------------------------------------------------

TEST(Simulate, IdentityTruthReproducesTheModelsNumbers) {
  const auto j = jobs().back();
  const auto truth = dcp::sim::make_truth({}, j.cost, 3);
  for (auto name : dcp::sim::method_names) {
    const auto model = dcp::sim::run_method(name, j.cost, j.data, j.batches, j.settings).metrics;
    // On a truth `dcp` calibrates; the planner alone is `dcp-open-loop`.
    const auto on_truth = name == "dcp" ? dcp::sim::open_loop_method : name;
    const auto real = dcp::sim::run_method(on_truth, j.cost, j.data, j.batches, j.settings, truth).metrics;
    EXPECT_EQ(real.makespan_s, model.makespan_s) << name;
    EXPECT_EQ(real.tokens_per_s, model.tokens_per_s) << name;
    EXPECT_EQ(real.lower_bound_s, model.lower_bound_s) << name;
    EXPECT_EQ(real.efficiency, model.efficiency) << name;
    EXPECT_EQ(real.imbalance, model.imbalance) << name;
    EXPECT_EQ(real.peak_memory_bytes, model.peak_memory_bytes) << name;
    EXPECT_EQ(real.busy_s, model.busy_s) << name;
    EXPECT_EQ(real.oom_steps, 0) << name;
  }
  // The oracle on the model itself is dcp.
  const auto dcp_run = dcp::sim::run_method("dcp", j.cost, j.data, j.batches, j.settings).metrics;
  const auto oracle = dcp::sim::run_method("oracle", j.cost, j.data, j.batches, j.settings, truth).metrics;
  EXPECT_EQ(oracle.makespan_s, dcp_run.makespan_s);
  EXPECT_THROW(dcp::sim::validate_method("oracle"), dcp::error);
  EXPECT_THROW(dcp::sim::validate_method("dcp-open-loop"), dcp::error);
  // Calibrated dcp on the model itself: the probe's cost and a margin of at least 1% over the
  // open-loop planner's, every token planned, nothing over memory.
  const auto calibrated = dcp::sim::run_method("dcp", j.cost, j.data, j.batches, j.settings, truth).metrics;
  EXPECT_EQ(calibrated.tokens, dcp_run.tokens);
  EXPECT_EQ(calibrated.oom_steps, 0);
  EXPECT_GT(calibrated.probe_s, 0.0);
  EXPECT_LT(calibrated.makespan_s - calibrated.probe_s, 1.03 * dcp_run.makespan_s) << calibrated.probe_s;
}

// --- straggler-aware planning -----------------------------------------------------------------

std::vector<double> random_speeds(dcp::xoshiro256ss& g, int n) {
  std::vector<double> s(static_cast<std::size_t>(n), 1.0);
  for (int i = 0, slow = 1 + static_cast<int>(dcp::uniform_below(g, 3)); i < slow; ++i)
    s[dcp::uniform_below(g, static_cast<std::uint64_t>(n))] = 0.5 + 0.5 * dcp::uniform01(g);
  return s;
}

TEST(SpeedAware, PlansKeepTheLawsAndTheBoundHolds) {
  const std::uint64_t seed = 99;
  dcp::xoshiro256ss g(seed);
  for (const auto& j : jobs()) {
    for (std::size_t b = 0; b < j.batches.size(); ++b) {
      const std::span<const sequence> batch(j.batches[b]);
      const auto speeds = random_speeds(g, j.cost.gpus());
      for (bool inter : {true, false}) {
        dcp::dcp_planner planner;
        planner.inter = inter;
        planner.speeds = speeds;
        const auto p = planner.plan(j.cost, batch);
        const auto bad = dcp::plan_violations(p, batch, j.cost);
        EXPECT_TRUE(bad.empty()) << "seed " << seed << " batch " << b << ": " << bad.front();
        EXPECT_EQ(p.speeds, speeds);
        EXPECT_LE(p.lower_bound_s, p.makespan_s * (1 + 1e-12)) << "seed " << seed << " batch " << b;
        EXPECT_EQ(p.lower_bound_s, dcp::lower_bound(j.cost, batch, speeds));
        // The truth with exactly these speeds is the planner's own clock.
        dcp::sim::truth<dcp::scaled_analytic_cost> t{{j.cost, {}}, speeds, 0, 0};
        EXPECT_EQ(dcp::sim::execute(p, t, b).executed.makespan_s, p.makespan_s) << "seed " << seed << " batch " << b;
      }
      // Slow GPUs only raise the bound; all-ones speeds leave it exactly as it was.
      EXPECT_GE(dcp::lower_bound(j.cost, batch, speeds), dcp::lower_bound(j.cost, batch));
      const std::vector<double> ones(static_cast<std::size_t>(j.cost.gpus()), 1.0);
      EXPECT_EQ(dcp::lower_bound(j.cost, batch, ones), dcp::lower_bound(j.cost, batch));
    }
  }
}

TEST(SpeedAware, BeatsASpeedBlindPlanOnASlowGpu) {
  const auto j = jobs().front();
  const auto truth = dcp::sim::make_truth(parse_truth_spec("slow_gpus=5:0.5"), j.cost, 0);
  dcp::dcp_planner aware;
  aware.speeds = truth.speeds;
  double blind_s = 0, aware_s = 0;
  for (std::size_t b = 0; b < j.batches.size(); ++b) {
    const std::span<const sequence> batch(j.batches[b]);
    blind_s += dcp::sim::execute(dcp::dcp_planner{}.plan(j.cost, batch), truth, b).executed.makespan_s;
    aware_s += dcp::sim::execute(aware.plan(j.cost, batch), truth, b).executed.makespan_s;
  }
  EXPECT_LT(aware_s, blind_s);
}

TEST(SpeedAware, BadSpeedsAreErrors) {
  const auto j = jobs().front();
  dcp::dcp_planner p;
  p.speeds = {1.0, 0.5};
  EXPECT_THROW((void)p.plan(j.cost, std::span<const sequence>(j.batches.front())), dcp::error);
  p.speeds.assign(static_cast<std::size_t>(j.cost.gpus()), 1.0);
  p.speeds[3] = 0;
  EXPECT_DCP_ERROR((void)p.plan(j.cost, std::span<const sequence>(j.batches.front())), dcp::errc::invalid_argument,
                   "of GPU 3 must be positive");
}

// --- plan JSON ----------------------------------------------------------------------------------

TEST(PlanJson, RoundTripKeepsRoundsAndSpeeds) {
  const auto j = jobs().front();
  const auto all = plans_of_every_method(j);
  for (const auto& plans : all) {
    std::stringstream io;
    dcp::sim::write_plan_json(io, j.cost, std::span<const dcp::plan>(plans));
    const auto doc = dcp::sim::read_plan_json(io, "round trip");
    EXPECT_EQ(doc.gpus, j.cost.gpus());
    EXPECT_EQ(doc.model, "cogvideox-5b");
    ASSERT_EQ(doc.plans.size(), plans.size());
    for (std::size_t b = 0; b < plans.size(); ++b) EXPECT_EQ(doc.plans[b], plans[b]) << plans[b].method << " batch " << b;
  }
  dcp::dcp_planner aware;
  aware.speeds.assign(static_cast<std::size_t>(j.cost.gpus()), 1.0);
  aware.speeds[2] = 0.7;
  const std::vector<dcp::plan> plans{aware.plan(j.cost, std::span<const sequence>(j.batches.front()))};
  std::stringstream io;
  dcp::sim::write_plan_json(io, j.cost, std::span<const dcp::plan>(plans));
  EXPECT_EQ(dcp::sim::read_plan_json(io).plans.front(), plans.front());
}

// Files written before rounds existed: a bucket plan's barriers come back from its start times.
TEST(PlanJson, FilesWithoutRoundsGetTheirBarriersInferred) {
  const auto j = jobs().front();
  std::vector<dcp::plan> plans;
  dcp::sim::with_method("bucket", j.cost, j.data, j.settings, [&](const auto& planner, double) {
    for (const auto& b : j.batches) plans.push_back(planner.plan(j.cost, std::span<const sequence>(b)));
    return 0;
  });
  auto doc = dcp::sim::plan_json(j.cost, std::span<const dcp::plan>(plans));
  for (auto& b : doc["batches"])
    for (auto& s : b["steps"]) s.erase("round");
  std::stringstream io(doc.dump());
  const auto read = dcp::sim::read_plan_json(io, "old file");
  int rounds = 0;
  for (std::size_t b = 0; b < plans.size(); ++b) {
    for (const auto& s : plans[b].steps) rounds = std::max(rounds, s.round);
    EXPECT_EQ(read.plans[b], plans[b]) << "batch " << b;
  }
  EXPECT_GT(rounds, 0) << "bucket plans should have had barriers to lose";
  ASSERT_EQ(read.warnings.size(), 1u);
  EXPECT_NE(read.warnings[0].find("barriers inferred from the start times"), std::string::npos) << read.warnings[0];
}

TEST(PlanJson, MalformedFilesNameTheField) {
  const auto j = jobs().front();
  const std::vector<dcp::plan> plans{dcp::dcp_planner{}.plan(j.cost, std::span<const sequence>(j.batches.front()))};
  const auto good = dcp::sim::plan_json(j.cost, std::span<const dcp::plan>(plans));
  auto expect_error = [](const nlohmann::ordered_json& d, const std::string& expected) {
    std::stringstream io(d.dump());
    EXPECT_DCP_ERROR((void)dcp::sim::read_plan_json(io, "bad.json"), dcp::errc::parse_error, expected);
  };
  auto d = good;
  d["format"] = "dcp.plan/v0";
  expect_error(d, "unknown format 'dcp.plan/v0'");
  d = good;
  d["batches"][0]["steps"][0]["round"] = -1;
  expect_error(d, "batch 0 step 0 round' = -1 is not an integer");
  d = good;
  d["batches"][0]["steps"][0]["round"] = 1e54;
  expect_error(d, "round' = 1e+54 is not an integer");
  d = good;
  d["batches"][0]["steps"][0]["sp"] = 3;
  expect_error(d, "\"ranks\" must list sp = 3 GPUs");
  d = good;
  d["batches"][0]["steps"][0].erase("time_s");
  expect_error(d, "batch 0 step 0 has no \"time_s\"");
  d = good;
  d["batches"][0]["speeds"] = {1.0, 2.0};
  expect_error(d, "\"speeds\" must list one factor per GPU (16)");
  std::stringstream junk("{\"format\": ");
  EXPECT_THROW((void)dcp::sim::read_plan_json(junk), dcp::error);
  EXPECT_THROW((void)dcp::sim::read_plan_json(std::filesystem::path("/no/such/plan.json")), dcp::error);
}

}  // namespace
