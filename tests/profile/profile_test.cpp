// dcp.profile/v1 round trip and errors, profiled_cost interpolation laws, and the profiler's
// memory prediction against counted peak activation memory of real full-depth steps.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <cmath>
#include <limits>
#include <sstream>
#include <string>

#include <dcp/dcp.hpp>
#include <dcp/cost/profiled_cost.hpp>
#include <dcp/profile/memory_counter.hpp>
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
  try {
    f();
    ADD_FAILURE() << "no error; expected one mentioning '" << fragment << "'";
  } catch (const dcp::error& e) {
    EXPECT_EQ(e.code(), dcp::make_error_code(code)) << e.what();
    EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
  }
}

TEST(profile_json, round_trip) {
  auto t = synthetic_table();
  t.stats = {10, 1.5, 100, 20.25};
  EXPECT_EQ(from_json(to_json(t)), t);
  EXPECT_NE(to_json(t).find("\"format\": \"dcp.profile/v1\""), std::string::npos);
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
  dcp::device_spec d = dcp::devices::h200();
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
