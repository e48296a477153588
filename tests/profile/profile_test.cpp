// dcp.profile/v1 round trip and errors, profiled_cost interpolation laws, and the profiler's
// memory prediction against counted peak activation memory of real full-depth steps.
#include <dcp_test/support.hpp>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdio>
#include <functional>
#include <limits>
#include <set>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include <dcp/dcp.hpp>
#include <dcp/cost/profiled_cost.hpp>
#include <dcp/memory_counter.hpp>
#include <dcp/profile/profile_json.hpp>
#include <dcp/profile/profiler.hpp>

#include "../../examples/cpu_train/profile_step.hpp"

namespace {

dcp::transformer_spec small_model() { return {"small", 4, 64, 8, 128, 2, dcp::attention_kind::full, 0}; }

// A table whose time is a power law t = 1e-6 n^1.5 b^0.9 sp^-0.8 (1 + k / 8) and whose memory is
// linear in the step's tokens: s + 100 n b / sp * (4 - k / 2).
dcp::profile_table synthetic_table() {
  dcp::profile_table t;
  t.model = small_model();
  t.device = "dev";
  t.gpus = 4;
  t.gpus_per_node = 4;
  t.memory_capacity_bytes = 1e9;
  t.static_memory_bytes = 1e6;
  for (int n : {64, 256, 1024})
    for (int sp : {1, 2, 4})
      for (int b : {1, 2, 4, 8})
        for (int k = 0; k <= 4; ++k) {
          const double time = 1e-6 * std::pow(n, 1.5) * std::pow(b, 0.9) * std::pow(sp, -0.8) * (1 + k / 8.0);
          const double mem = t.static_memory_bytes + 100.0 * n * b / sp * (4 - k / 2.0);
          t.entries.push_back({0, n, 1, n, sp, b, k, time, mem});
        }
  return t;
}

std::string to_json(const dcp::profile_table& t) {
  std::ostringstream os;
  dcp::write_profile(os, t);
  return os.str();
}

dcp::profile_table from_json(const std::string& s) {
  std::istringstream in(s);
  return dcp::read_profile(in, "test");
}

template <class F>
void expect_error(F&& f, dcp::errc code, const std::string& fragment) {
  EXPECT_TRUE(dcp_test::throws_dcp_error("f()", f, code, {fragment}));
}

TEST(profile_json, round_trip) {
  auto t = synthetic_table();
  t.stats = {10, 1.5, 100, 20.25};
  EXPECT_EQ(from_json(to_json(t)), t);
  EXPECT_NE(to_json(t).find("\"format\": \"dcp.profile/v1\""), std::string::npos);
}

// Every model field survives the file (GQA, head width, cross-attention, MoE), and a file
// written before those fields existed reads them as 0: the model it described.
TEST(profile_json, saves_every_model_field) {
  for (const auto& model : {dcp::models::llama3_70b(), dcp::models::qwen3_30b_a3b(), dcp::models::wan2_1_14b()}) {
    auto t = synthetic_table();
    t.model = model;
    t.model.shared_experts = model.is_moe() ? 2 : 0;
    const auto back = from_json(to_json(t));
    EXPECT_EQ(back, t) << model;
    EXPECT_NO_THROW(dcp::check_profile_matches(back, t.model, t.device, t.gpus)) << model;
  }
  auto t = synthetic_table();
  t.model = dcp::models::qwen3_30b_a3b();
  auto j = nlohmann::json::parse(to_json(t));
  for (const char* f : {"kv_heads", "head_dim", "cross_attention_tokens", "experts", "experts_per_token",
                        "expert_width", "shared_experts"}) {
    const bool set = f != std::string("cross_attention_tokens") && f != std::string("shared_experts");
    ASSERT_EQ(j["model"].contains(f), set) << f;  // written where the model sets it
    j["model"].erase(f);
  }
  const auto old = from_json(j.dump());
  auto dense = t.model;
  dense.kv_heads = 0, dense.head_dim = 0, dense.experts = 0, dense.experts_per_token = 0, dense.expert_width = 0;
  EXPECT_EQ(old.model, dense);
  j["model"]["kv_heads"] = 5;  // does not divide 32 heads
  expect_error([&] { from_json(j.dump()); }, dcp::errc::invalid_argument, "kv_heads");
}

TEST(profile_json, rejects_bad_documents) {
  const auto good = to_json(synthetic_table());
  expect_error([] { from_json("{ not json"); }, dcp::errc::parse_error, "not valid JSON");
  auto other = good;
  other.replace(other.find("dcp.profile/v1"), 14, "dcp.profile/v9");
  expect_error([&] { from_json(other); }, dcp::errc::parse_error, "unknown format");
  auto missing = good;
  missing.replace(missing.find("\"gpus_per_node\""), 15, "\"gpus_per_nodX\"");
  expect_error([&] { from_json(missing); }, dcp::errc::parse_error, "missing or mistyped");
  // Integer fields out of range or not integers (a fuzzer found 1e54 reaching get<int>()).
  for (const char* bad : {"1e54", "4.5", "-99999999999999"}) {
    auto j = nlohmann::json::parse(good);
    j["entries"][0]["sp"] = nlohmann::json::parse(bad);
    expect_error([&] { from_json(j.dump()); }, dcp::errc::parse_error, "field 'sp'");
  }
  auto nan_time = synthetic_table();
  nan_time.entries[3].time_s = std::nan("");
  expect_error([&] { dcp::validate(nan_time); }, dcp::errc::invalid_argument, "entry 3 has time_s");
  auto null_time = good;  // NaN written by other tools arrives as null
  null_time.replace(null_time.find("\"time_s\": ") + 10, 1, "null,\"x\":0");
  expect_error([&] { from_json(null_time); }, dcp::errc::invalid_argument, "time_s");
  auto negative = synthetic_table();
  negative.entries[5].memory_bytes = -1;
  expect_error([&] { std::ostringstream os; dcp::write_profile(os, negative); }, dcp::errc::invalid_argument,
               "entry 5 has memory_bytes");
}

TEST(profiled_cost, rejects_another_model_device_or_world) {
  const auto t = synthetic_table();
  auto other = small_model();
  other.hidden = 128;
  expect_error([&] { (void)dcp::make_profiled_cost(t, other, "dev", 4); }, dcp::errc::mismatch, "it was made for");
  expect_error([&] { (void)dcp::make_profiled_cost(t, small_model(), "h200", 4); }, dcp::errc::mismatch,
               "made on device 'dev'");
  expect_error([&] { (void)dcp::make_profiled_cost(t, small_model(), "dev", 8); }, dcp::errc::mismatch,
               "made for 4 GPUs");
  EXPECT_NO_THROW((void)dcp::make_profiled_cost(t, small_model(), "dev", 4));
}

TEST(profiled_cost, scheduler_plans_with_a_given_profiled_cost) {
  dcp::device_spec d = dcp::devices::h200_analytic();
  d.name = "dev";
  d.gpus_per_node = 4;
  dcp::local_world::run(4, [&](dcp::local_comm& world) {
    dcp::scheduler_options o;
    o.device = d;
    auto cost = dcp::make_profiled_cost(synthetic_table(), small_model(), d.name, world.size());
    dcp::scheduler<dcp::transformer_spec, dcp::local_comm, dcp::policies<dcp::profiled_cost>> s(small_model(), world,
                                                                                               cost, o);
    EXPECT_EQ(s.cost().table().device, "dev");
    std::vector<dcp::sequence> batch;
    for (int i = 0; i < 12; ++i) batch.push_back(dcp::make_sequence(i, 50 + 70 * i));
    const auto p = s.plan(batch);
    EXPECT_TRUE(dcp::plan_violations(p, std::span<const dcp::sequence>(batch), s.cost()).empty());
    EXPECT_FALSE(p.steps.empty());
  });
  // A cost model for another world size is refused.
  dcp::local_world::run(2, [&](dcp::local_comm& world) {
    dcp::scheduler_options o;
    o.device = d;
    auto cost = dcp::make_profiled_cost(synthetic_table(), small_model(), d.name, 4);
    expect_error(
        [&] {
          dcp::scheduler<dcp::transformer_spec, dcp::local_comm, dcp::policies<dcp::profiled_cost>> s(
              small_model(), world, cost, o);
        },
        dcp::errc::mismatch, "the cost model is for 4 GPUs");
  });
}

TEST(profiled_cost, interpolates_power_laws_and_linear_memory_exactly) {
  const auto c = dcp::make_profiled_cost(synthetic_table(), small_model(), "dev", 4);
  // Held-out uniform batches: between profiled lengths and batches.
  for (int n : {100, 300, 700})
    for (int b : {1, 3, 5})
      for (int sp : {1, 2, 4})
        for (int k : {0, 2, 4}) {
          dcp::profiled_load l{};
          for (int i = 0; i < b; ++i) l = l + c.load_of(dcp::make_sequence(i, n));
          const double t = 1e-6 * std::pow(n, 1.5) * std::pow(b, 0.9) * std::pow(sp, -0.8) * (1 + k / 8.0);
          const double m = 1e6 + 100.0 * n * b / sp * (4 - k / 2.0);
          EXPECT_NEAR(c.time(l, sp, k), t, 1e-9 * t) << n << " " << b << " " << sp << " " << k;
          EXPECT_NEAR(c.memory(l, sp, k), m, 1e-9 * m);
          EXPECT_LE(c.work_floor(l, sp, k), sp * c.time(l, sp, k) * (1 + 1e-12));
        }
}

TEST(profiled_cost, laws) {
  const auto c = dcp::make_profiled_cost(synthetic_table(), small_model(), "dev", 4);
  dcp::profiled_load l{};
  for (int i = 0; i < 5; ++i) l = l + c.load_of(dcp::make_sequence(i, 40 + 150 * i));
  double prev_t = 0;
  for (int n = 16; n < 4096; n = n * 3 / 2) {  // time grows with length, inside and outside the table
    const double t = c.time(c.load_of(dcp::make_sequence(0, n)), 1, 0);
    EXPECT_GT(t, prev_t);
    prev_t = t;
  }
  for (int sp : {1, 2, 4})
    for (int k = 0; k < 4; ++k) {
      EXPECT_LE(c.time(l, sp, k), c.time(l, sp, k + 1));
      EXPECT_GE(c.memory(l, sp, k), c.memory(l, sp, k + 1));
    }
  EXPECT_GE(c.memory(l, 1, 0), c.memory(l, 2, 0));
  EXPECT_EQ(c.time(dcp::profiled_load{}, 1, 0), 0.0);
  EXPECT_TRUE(std::isinf(c.time(l, 8, 0)));  // sp 8 was never profiled: infeasible
  EXPECT_TRUE(std::isinf(c.memory(l, 8, 0)));
}

TEST(memory_counter, counts_live_and_peak_bytes_per_thread) {
  dcp::memory_counter c;
  {
    dcp::memory_scope s(c);
    std::vector<double, dcp::counting_allocator<double>> a(100), b(50);
    EXPECT_EQ(c.live_bytes(), 1200);
    a = decltype(a)();  // frees (move assignment; the allocator propagates)
    std::vector<double, dcp::counting_allocator<double>> d(10);
  }
  EXPECT_EQ(c.live_bytes(), 0);
  EXPECT_EQ(c.peak_bytes(), 1200);
  std::vector<double, dcp::counting_allocator<double>> uncounted(1000);
  EXPECT_EQ(c.peak_bytes(), 1200);
}

// The profiler's memory prediction matches the counted peak activation memory of real
// full-depth steps within 5%, on configurations the profile never ran (other lengths, odd and
// mixed batches, other k, uneven shards).
TEST(profiler, memory_prediction_within_5_percent_on_held_out_steps) {
  using namespace cpu_train;
  model_config mc{.vocab = 32, .hidden = 16, .heads = 8, .mlp = 32, .blocks = 4, .max_len = 512};
  synthetic_data data{.vocab = 32, .min_len = 16, .max_len = 256, .seed = 5};
  const auto dataset = data.make(200);
  model_config one = mc, two = mc;
  one.blocks = 1;
  two.blocks = 2;
  const tiny_transformer<double> m1(one), m2(two), full(mc);
  dcp::profiler_options opt;
  opt.warmup = 0;
  opt.repeats = 1;
  opt.max_batch = 4;
  opt.sp = {1, 2};
  const double capacity = 1e9, stat = static_bytes<double>(mc);
  const auto table = dcp::profile_model(
      tiny_spec(mc), "cpu", 2, 8, capacity, stat, dcp::geometric_bucketing{64, 2.0, 1 << 20},
      std::span<const dcp::sequence>(dataset),
      [&](const dcp::profile_point& p) {
        run_point(p.blocks == 1 ? m1 : m2, data, p.tokens, p.batch, p.sp, p.checkpointed_blocks);
      },
      opt);
  EXPECT_GT(table.stats.runs, 0);
  EXPECT_EQ(table.stats.runs % 5, 0);  // five truncated runs per (group, sp, batch)
  const auto cost = dcp::make_profiled_cost(table, tiny_spec(mc), "cpu", 2);
  struct held_out {
    std::vector<std::int64_t> lengths;
    int sp, k;
  };
  const held_out cases[] = {{{100}, 1, 0}, {{100, 100, 100}, 2, 1}, {{37, 200}, 1, 3}, {{150, 90, 61}, 2, 4},
                            {{223}, 2, 2},  {{48, 48, 48, 48, 48}, 1, 2}};
  dcp::host_meter meter;
  for (const auto& h : cases) {
    std::vector<segment> segs;
    std::int64_t total = 0;
    for (auto n : h.lengths) total += n;
    dcp::profiled_load load{};
    for (std::size_t i = 0; i < h.lengths.size(); ++i) {
      segs.push_back({std::int64_t(i), h.lengths[i], 1.0 / double(total)});
      load = load + cost.load_of(dcp::make_sequence(std::int64_t(i), h.lengths[i]));
    }
    const auto m = meter.measure([&] {
      auto body = [&](int rank, auto* comm) {
        const auto shard = make_shard(data, segs, h.sp, rank);
        std::vector<double> g(full.params().size(), 0.0);
        full.forward_backward(shard, comm, h.k, std::span<double>(g));
      };
      if (h.sp == 1) body(0, static_cast<dcp::local_comm*>(nullptr));
      else dcp::local_world::run(h.sp, [&](dcp::local_comm& c) { body(c.rank(), &c); });
    });
    const double predicted = cost.memory(load, h.sp, h.k) - stat;
    const double err = std::abs(predicted / m.memory_bytes - 1);
    EXPECT_LE(err, 0.05) << "tokens " << total << " sp " << h.sp << " k " << h.k << ": predicted " << predicted
                         << " B, counted " << m.memory_bytes << " B";
    std::printf("held-out tokens %4lld sp %d k %d: predicted %.0f B, counted %.0f B (%.2f%%)\n", (long long)total,
                h.sp, h.k, predicted, m.memory_bytes, 100 * err);
  }
}

}  // namespace

namespace {

// A job whose truth is known: per GPU x = n b / sp tokens; time linear in the batch, memory
// linear in x with 100 B/token per stored block, 10 per checkpointed block and 100 of working
// space (so the dual-layer extrapolation is exact), on a capacity that holds 1500 tokens per GPU
// fully checkpointed and 420 with nothing checkpointed.
struct formula_job {
  static constexpr double static_bytes = 1000, capacity = 1000 + 140.0 * 1500;
  dcp::profile_point last;
  static double tokens_per_gpu(std::int64_t n, int batch, int sp) { return double(n) * batch / sp; }
  static double time(std::int64_t n, int batch, int sp, int blocks, int k) {
    const double x = tokens_per_gpu(n, batch, sp);
    return 1e-4 * x * (blocks + 0.5 * k) + 1e-7 * double(n) * x * blocks;
  }
  static double activation(std::int64_t n, int batch, int sp, int blocks, int k) {
    return tokens_per_gpu(n, batch, sp) * (100.0 * (blocks - k) + 10.0 * k + 100);
  }
};

struct formula_meter {
  const formula_job* job;
  dcp::profile_measurement measure(const std::function<void()>& fn) const {
    fn();
    const auto& p = job->last;
    return {formula_job::time(p.tokens, p.batch, p.sp, p.blocks, p.checkpointed_blocks),
            formula_job::activation(p.tokens, p.batch, p.sp, p.blocks, p.checkpointed_blocks)};
  }
};
static_assert(dcp::profile_meter<formula_meter>);

struct formula_profile {
  dcp::profile_table table;
  dcp::profile_report report;
};

formula_profile profile_formula(double budget_s, int max_batch) {
  const cpu_train::model_config mc{.vocab = 32, .hidden = 16, .heads = 8, .mlp = 32, .blocks = 4, .max_len = 8192};
  std::vector<dcp::sequence> data;
  for (std::int64_t n : {60, 120, 250, 500, 1000, 2000, 4000}) data.push_back(dcp::make_sequence(n, n));
  formula_job job;
  dcp::profiler_options opt;
  opt.warmup = 1;
  opt.repeats = 1;
  opt.max_batch = max_batch;
  opt.budget_s = budget_s;
  formula_profile out;
  opt.report = &out.report;
  out.table = dcp::profile_model(
      cpu_train::tiny_spec(mc), "formula", 4, 4, formula_job::capacity, formula_job::static_bytes,
      dcp::geometric_bucketing{64, 2.0, 1 << 20}, std::span<const dcp::sequence>(data),
      [&](const dcp::profile_point& p) { job.last = p; }, opt, formula_meter{&job});
  return out;
}

}  // namespace

// Every (length group, sp) that can fit gets every recompute level at batch 1, the fully
// checkpointed one included, even where nothing-checkpointed is far over capacity; only those
// predicted over 1.25 x capacity fully checkpointed are skipped, and profiled_cost still says
// exactly which lengths fit (extrapolating the skipped ones). Extrapolated L-block entries match
// the truth.
TEST(profiler, prices_every_recompute_level_where_it_can_fit) {
  const auto [t, rep] = profile_formula(0, 8);
  const int L = t.model.blocks;
  const auto cost = dcp::make_profiled_cost(t, t.model, "formula", 4);
  std::set<std::tuple<int, int, int>> points;
  int needs_recompute = 0, skipped = 0;
  for (std::int64_t n : {60, 120, 250, 500, 1000, 2000, 4000})
    for (int sp : {1, 2, 4}) {
      const double full = formula_job::static_bytes + formula_job::activation(n, 1, sp, L, L);
      const double none = formula_job::static_bytes + formula_job::activation(n, 1, sp, L, 0);
      std::set<int> ks;
      for (const auto& e : t.entries)
        if (e.tokens == n && e.sp == sp && e.batch == 1) ks.insert(e.checkpointed_blocks);
      SCOPED_TRACE("n " + std::to_string(n) + " sp " + std::to_string(sp));
      if (full > 1.25 * formula_job::capacity) {
        EXPECT_TRUE(ks.empty());
        ++skipped;
      } else {
        EXPECT_EQ(ks.size(), std::size_t(L + 1));
        needs_recompute += none > formula_job::capacity && full <= formula_job::capacity;
      }
      const auto load = cost.load_of(dcp::make_sequence(0, n));
      EXPECT_EQ(cost.memory(load, sp, L) <= cost.capacity(), full <= formula_job::capacity);
      EXPECT_EQ(cost.memory(load, sp, 0) <= cost.capacity(), none <= formula_job::capacity);
    }
  EXPECT_GT(needs_recompute, 2);  // the case the profile must price
  EXPECT_GT(skipped, 0);
  EXPECT_EQ(rep.skipped, skipped);
  for (const auto& e : t.entries) {
    points.insert({e.bucket, e.sp, e.batch});
    const double m = formula_job::static_bytes + formula_job::activation(e.tokens, e.batch, e.sp, L, e.checkpointed_blocks);
    const double s = formula_job::time(e.tokens, e.batch, e.sp, L, e.checkpointed_blocks);
    EXPECT_NEAR(e.memory_bytes, m, 1e-9 * m) << e.tokens << " " << e.sp << " " << e.batch << " " << e.checkpointed_blocks;
    EXPECT_NEAR(e.time_s, s, 1e-9 * s);
  }
  EXPECT_EQ(rep.points, std::int64_t(points.size()));
  EXPECT_EQ(t.stats.runs, rep.points * 5 * 2);
  EXPECT_EQ(rep.longest_tokens, 4000);
}

// The batch-doubling pass stays within its budget of measured seconds; pass 1 always runs.
TEST(profiler, batch_doubling_stays_within_the_budget) {
  const auto full = profile_formula(0, 8).report;
  const auto first_pass = profile_formula(0, 1).report;
  ASSERT_LT(first_pass.measured_s, full.measured_s);
  for (double share : {0.0, 0.2, 0.6}) {
    const double budget = first_pass.measured_s + share * (full.measured_s - first_pass.measured_s) + 1e-9;
    const auto [t, rep] = profile_formula(budget, 8);
    SCOPED_TRACE("budget " + std::to_string(budget));
    EXPECT_LE(rep.measured_s, budget);
    EXPECT_GT(rep.budget_limited, 0);
    EXPECT_LT(rep.points, full.points);
    EXPECT_GE(rep.points, first_pass.points);
    EXPECT_EQ(rep.skipped, full.skipped);
  }
  // A tiny budget still prices every length: pass 1 is never cut.
  const auto [t, rep] = profile_formula(1e-12, 8);
  EXPECT_EQ(rep.points, first_pass.points);
  EXPECT_GT(rep.measured_s, 1e-12);
}

TEST(profiler, rejects_a_bad_budget_or_margin) {
  std::vector<dcp::sequence> data{dcp::make_sequence(0, 100)};
  auto profile = [&](double budget, double margin) {
    dcp::profiler_options opt;
    opt.budget_s = budget;
    opt.skip_margin = margin;
    (void)dcp::profile_model(small_model(), "dev", 1, 1, 1e9, 1e6, dcp::geometric_bucketing{64, 2.0, 1 << 20},
                             std::span<const dcp::sequence>(data), [](const dcp::profile_point&) {}, opt);
  };
  expect_error([&] { profile(-1, 1.25); }, dcp::errc::invalid_argument, "budget_s = -1");
  expect_error([&] { profile(std::nan(""), 1.25); }, dcp::errc::invalid_argument, "need a finite budget");
  expect_error([&] { profile(0, 0.5); }, dcp::errc::invalid_argument, "skip_margin >= 1");
}

// The CPU model's checkpointing frees what it should: fully checkpointed, a step keeps each
// block's input only, so its peak is far below the nothing-checkpointed one and barely grows
// with depth (what the profile has to see for recomputation to make long sequences fit).
TEST(cpu_model, checkpointing_frees_the_blocks_activations) {
  using namespace cpu_train;
  synthetic_data data{.vocab = 32, .min_len = 8, .max_len = 512, .seed = 1};
  auto peak = [&](int blocks, int k) {
    model_config mc{.vocab = 32, .hidden = 16, .heads = 8, .mlp = 32, .blocks = blocks, .max_len = 512};
    const tiny_transformer<double> m(mc);
    return dcp::host_meter{}.measure([&] { run_point(m, data, 256, 1, 1, k); }).memory_bytes;
  };
  const double none4 = peak(4, 0), full4 = peak(4, 4), full2 = peak(2, 2), none2 = peak(2, 0);
  std::printf("peak activation bytes per token: L=2 k=0 %.0f, k=2 %.0f; L=4 k=0 %.0f, k=4 %.0f\n", none2 / 256,
              full2 / 256, none4 / 256, full4 / 256);
  EXPECT_LT(full4, 0.5 * none4);
  // One more checkpointed block costs its input (hidden values per token) and nothing else.
  EXPECT_NEAR((full4 - full2) / 2, 256.0 * 16 * sizeof(double), 1.0);
  EXPECT_GT((none4 - none2) / 2, 4 * 256.0 * 16 * sizeof(double));
}
