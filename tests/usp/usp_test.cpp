// Ulysses x Ring sequence parallelism (DESIGN section 4.3): the ring term of the analytic cost
// against generated golden values and an independent transcription, legality of u x r splits,
// ring plans through every planner, the plan JSON, the hash and check_plan.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <span>
#include <sstream>
#include <string>
#include <vector>

#include <dcp/cost/analytic.hpp>
#include <dcp/error.hpp>
#include <dcp/model/transformer.hpp>
#include <dcp/plan/bucket_planner.hpp>
#include <dcp/plan/check_plan.hpp>
#include <dcp/plan/dcp_planner.hpp>
#include <dcp/plan/dynamic_cp_planner.hpp>
#include <dcp/plan/packed_planner.hpp>
#include <dcp/plan/sequence_options.hpp>
#include <dcp/random.hpp>
#include <dcp/sim/plan_json.hpp>
#include <dcp/workload/tuning.hpp>

#include <dcp_test/support.hpp>

namespace {

using dcp::analytic_cost;
using dcp::sharding_kind;

analytic_cost make(const std::string& model, int gpus, int tp, int ring) {
  return dcp::make_analytic_cost(dcp::models::preset(model), dcp::devices::h200_analytic(),
                                 {.gpus = gpus, .tp = tp, .ring = ring});
}

// Section 4.3 transcribed from the text, independently of analytic_cost::time (zero1, ep = 1).
double reference_time(const analytic_cost& c, std::span<const dcp::sequence> seqs, int sp, int k) {
  const auto& m = c.model;
  const auto& dv = c.device;
  const double L = m.blocks, h = static_cast<double>(m.hidden), tp = c.parallel.tp;
  const double d = m.head_dim > 0 ? m.head_dim : h / m.heads;
  const int kvh = m.kv_heads > 0 ? m.kv_heads : m.heads;
  const double q = m.heads * d, kv = kvh * d;
  int u = 1;  // the largest divisor of sp that divides heads / tp: gcd(sp, heads / tp)
  for (int v = 1; v <= sp; ++v)
    if (sp % v == 0 && (m.heads / c.parallel.tp) % v == 0) u = v;
  const int r = sp / u;
  double n_tok = 0, a = 0;
  for (const auto& s : seqs) {
    const double n = static_cast<double>(c.tokens_of(s));
    n_tok += n;
    a += L * (m.attention == dcp::attention_kind::causal ? 2 : 4) * q * n * n;
  }
  const double f = L * 2 * m.active_block_parameters() * n_tok + a;
  const double x = n_tok / sp, eff = dv.eff_max * x / (x + dv.x_half);
  auto bw = [&](double gpus) { return gpus <= dv.gpus_per_node ? dv.bw_intra : dv.bw_inter; };
  const double f_v = 2 * static_cast<double>(m.vocab) * h * n_tok;  // the LM head (DESIGN 4.1)
  const double t_comp = ((3 + k / L) * f + 3 * f_v) / (sp * tp * dv.peak * eff);
  const double t_att = (3 + k / L) * a / (sp * tp * dv.peak * eff);
  double t_u = 0;
  if (u > 1) {
    const double w = (2 * q / tp + 2 * (kvh / c.parallel.tp >= u ? kv / tp : d * u)) / 4;
    t_u = 4 * (2 * L + k) * (dv.alpha + 2 * w * x * (u - 1) / u / bw(u * tp));
  }
  double t_ring = 0;
  if (r > 1) {
    const double kv_u = kvh / c.parallel.tp >= u ? kv / (tp * u) : d;
    t_ring = (3 * L + k) * (r - 1) * (dv.alpha + 4 * kv_u * n_tok / r / bw(sp * tp));
  }
  double t_tp = 0;
  if (c.parallel.tp > 1)
    t_tp = (4 * (2 * L + k) + (m.vocab > 0 ? 4 : 0)) * (dv.alpha + 2 * h * x * (tp - 1) / tp / dv.bw_intra);
  return t_comp - t_att + std::max(t_att, t_ring) + t_u + t_tp + dv.tau * (3 * L + k);
}

dcp::analytic_load load_of(const analytic_cost& c, std::span<const dcp::sequence> seqs) {
  dcp::analytic_load l{};
  for (const auto& s : seqs) l = l + c.load_of(s);
  return l;
}

TEST(Usp, SplitsAndLegality) {
  const auto plain = make("llama3-8b", 64, 1, 1), ring = make("llama3-8b", 64, 1, 4);
  EXPECT_EQ(dcp::ring_of(ring, 16), 1);
  EXPECT_EQ(dcp::ring_of(ring, 64), 2);
  EXPECT_TRUE(dcp::legal_sp(ring, 64));
  EXPECT_FALSE(dcp::legal_sp(plain, 64)) << "without rings sp must divide the 32 heads";
  EXPECT_EQ(dcp::step_ring_of(plain, 16), 1);
  // cogvideox-5b: 48 heads, so u <= 16: sp 32 = 16 x 2, sp 64 = 16 x 4 (needs ring 4).
  const auto cog2 = make("cogvideox-5b", 64, 1, 2), cog4 = make("cogvideox-5b", 64, 1, 4);
  EXPECT_TRUE(dcp::legal_sp(cog2, 32));
  EXPECT_FALSE(dcp::legal_sp(cog2, 64));
  EXPECT_TRUE(dcp::legal_sp(cog4, 64));
  EXPECT_EQ(dcp::ring_of(cog4, 64), 4);
  // llama3-70b at tp = 8: 8 heads per TP rank, 16 units: sp 16 = 8 x 2.
  const auto big = make("llama3-70b", 128, 8, 2);
  EXPECT_EQ(dcp::ring_of(big, 16), 2);
  EXPECT_TRUE(dcp::legal_sp(big, 16));
  EXPECT_EQ(dcp::legal_sp_sizes(plain).back(), 32);
  EXPECT_EQ(dcp::legal_sp_sizes(ring).back(), 64);
}

TEST(Usp, BadRingIsNamed) {
  EXPECT_DCP_ERROR(make("llama3-8b", 64, 1, 3), dcp::errc::invalid_argument, "ring = 3");
  EXPECT_DCP_ERROR(make("llama3-8b", 64, 1, 0), dcp::errc::invalid_argument, "ring = 0");
}

// With rings enabled, every sp that divides the heads prices bit-identically to the
// Ulysses-only model, and ring steps match the transcription to 1e-12.
TEST(Usp, RingTermMatchesTranscription) {
  const std::uint64_t seed = 4311;
  std::cout << "[     SEED ] " << seed << "\n";
  dcp::xoshiro256ss g(seed);
  struct job {
    const char* model;
    int gpus, tp, ring;
  };
  const job jobs[] = {{"llama3-8b", 64, 1, 8},
                      {"cogvideox-5b", 64, 1, 4},
                      {"llama3-70b", 128, 8, 4},
                      {"qwen3-30b-a3b", 128, 1, 2},
                      {"llama3-8b", 512, 2, 8}};
  int ring_steps = 0;
  for (const auto& j : jobs) {
    const auto ring = make(j.model, j.gpus, j.tp, j.ring), plain = make(j.model, j.gpus, j.tp, 1);
    for (int trial = 0; trial < 40; ++trial) {
      std::vector<dcp::sequence> seqs;
      const int b = 1 + static_cast<int>(dcp::uniform_below(g, 4));
      for (int i = 0; i < b; ++i)
        seqs.push_back(dcp::make_sequence(i, 1 + static_cast<std::int64_t>(std::exp(dcp::uniform01(g) * std::log(4e6)))));
      const auto l = load_of(ring, seqs);
      const auto sps = dcp::legal_sp_sizes(ring);
      const int sp = sps[dcp::uniform_below(g, sps.size())];
      const int k = static_cast<int>(dcp::uniform_below(g, static_cast<std::uint64_t>(ring.blocks()) + 1));
      const double t = ring.time(l, sp, k), ref = reference_time(ring, seqs, sp, k);
      EXPECT_NEAR(t, ref, 1e-12 * ref) << ring << " sp " << sp << " k " << k;
      if (dcp::ring_of(ring, sp) == 1) {
        EXPECT_EQ(t, plain.time(l, sp, k));
        EXPECT_EQ(ring.work_floor(l, sp, k), plain.work_floor(l, sp, k));
      } else {
        ++ring_steps;
        EXPECT_GE(t, ring.ring_time(l, sp, k));
        if (ring.memory(l, sp, k) <= ring.capacity()) {
          EXPECT_LE(ring.work_floor(l, sp, k), sp * t * (1 + 1e-12)) << "the floor must stay below sp t";
        }
        EXPECT_LE(ring.time(l, sp, k), ring.time(l, sp, std::min(k + 1, ring.blocks())) * (1 + 1e-12));
      }
      EXPECT_EQ(ring.memory(l, sp, k), plain.memory(l, sp, k)) << "in-flight K/V blocks count as workspace";
    }
  }
  EXPECT_GT(ring_steps, 30);  // of 200 draws: cogvideox-5b's 48 heads also allow ringless 3, 6, 12, 24 and 48
}

// tests/data/usp.json: values generated by this implementation (set DCP_USP_GOLDEN_OUT=path to
// rewrite them), matched to 1e-9 relative.
struct golden_case {
  const char* model;
  int gpus, tp, ring;
  std::vector<std::int64_t> tokens;  // per sequence; for a 2D model its spatial tokens S
  int sp, k;
  int r = 0;                // the step's ring; 0 = the smallest its sp allows
  std::int64_t frames = 1;  // T of every sequence of a 2D model
};
std::vector<golden_case> golden_cases() {
  return {{"llama3-8b", 64, 1, 2, {1048576}, 64, 32},
          {"llama3-8b", 64, 1, 2, {131072, 65536}, 64, 0},
          {"llama3-8b", 64, 1, 8, {16384}, 64, 16},
          {"llama3-8b", 512, 1, 16, {4194304}, 512, 32},
          {"cogvideox-5b", 64, 1, 4, {200000}, 32, 21},
          {"cogvideox-5b", 64, 1, 4, {300000, 4000}, 64, 42},
          {"llama3-70b", 128, 8, 2, {1048576}, 16, 80},
          {"llama3-70b", 256, 8, 4, {65536}, 32, 40},
          {"qwen3-30b-a3b", 128, 1, 2, {524288}, 64, 48},
          {"qwen3-30b-a3b", 128, 2, 4, {262144, 8192}, 64, 24},
          // 2D (only the temporal blocks ring), cross-attention (only self-attention rings), and
          // rings wider than the smallest, as the dcp planner chooses them.
          {"stdit3-xl", 64, 1, 4, {8160}, 32, 28, 0, 32},
          {"stdit3-xl", 64, 1, 4, {16320}, 64, 56, 4, 64},
          {"stdit3-xl", 64, 1, 4, {4080, 2040}, 16, 0, 2, 16},
          {"wan2.1-14b", 64, 1, 8, {1048576}, 64, 40},
          {"wan2.1-14b", 128, 2, 4, {300000, 20000}, 16, 20},
          {"wan2.1-14b", 64, 1, 4, {200000}, 8, 0, 2},
          {"llama3-8b", 64, 1, 8, {524288}, 16, 0, 2}};
}

TEST(Usp, GoldenValues) {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& gc : golden_cases()) {
    const auto c = make(gc.model, gc.gpus, gc.tp, gc.ring);
    std::vector<dcp::sequence> seqs;
    for (std::size_t i = 0; i < gc.tokens.size(); ++i)
      seqs.push_back(dcp::make_sequence(static_cast<std::int64_t>(i), gc.frames, gc.tokens[i]));
    ASSERT_TRUE(dcp::legal_sp(c, gc.sp)) << gc.model << " sp " << gc.sp;
    const int r = gc.r > 0 ? gc.r : dcp::ring_of(c, gc.sp);
    ASSERT_TRUE(dcp::legal_ring(c, gc.sp, r)) << gc.model << " sp " << gc.sp << " ring " << r;
    const auto l = load_of(c, seqs);
    out.push_back({{"model", gc.model},
                   {"gpus", gc.gpus},
                   {"tp", gc.tp},
                   {"max_ring", gc.ring},
                   {"tokens", gc.tokens},
                   {"sp", gc.sp},
                   {"ulysses", gc.sp / r},
                   {"ring", r},
                   {"checkpointed_blocks", gc.k},
                   {"time_s", c.time(l, gc.sp, gc.k, r)},
                   {"ring_time_s", c.ring_time(l, gc.sp, gc.k, r)},
                   {"memory_bytes", c.memory(l, gc.sp, gc.k)},
                   {"work_floor_unit_s", c.work_floor(l, gc.sp, gc.k, r)}});
    if (gc.frames > 1) out.back()["frames"] = gc.frames;
  }
  if (const char* path = std::getenv("DCP_USP_GOLDEN_OUT")) {
    nlohmann::json doc = {
        {"about",
         "Generated by analytic_cost (tests/usp/usp_test.cpp, DCP_USP_GOLDEN_OUT) from DESIGN section 4.3 on the h200 "
         "preset, zero1, ep = 1, the presets' vocabularies priced as DESIGN 4.1 (3 F_V in t_comp, c_V in t_tp): "
         "sequences of the given token counts (1D; text tokens added by the model), or, with "
         "frames T, T x S clips of the given spatial tokens S; sp in planner units = ulysses x ring, ring r as given "
         "(without one, the smallest: u the largest power of two dividing sp and heads / tp); time = t_comp - t_att + "
         "max(t_att, t_ring) + t_ulysses(u) + t_tp + t_over with t_att = (3 + k/L) A_ring / (sp tp peak eff(x)) and "
         "t_ring = s (3L + k)(r - 1)(alpha + 4 kv_u N_tok / r / bw(sp tp)); A_ring the self-attention FLOPs (1D, "
         "cross-attention excluded) or the temporal blocks' (2D), s = 1 (1D) or 1/2 (2D); memory and work_floor as "
         "sections 4 and 4.2 with the Ulysses all-to-alls over u. Match to 1e-9 relative."},
        {"cases", out}};
    std::ofstream(path) << doc.dump(1) << "\n";
    GTEST_SKIP() << "wrote " << path;
  }
  std::ifstream in(DCP_TEST_USP_JSON);
  ASSERT_TRUE(in.is_open()) << DCP_TEST_USP_JSON;
  const auto golden = nlohmann::json::parse(in).at("cases");
  ASSERT_EQ(golden.size(), out.size());
  for (std::size_t i = 0; i < out.size(); ++i) {
    EXPECT_EQ(golden[i].at("ring"), out[i].at("ring")) << i;
    for (const char* key : {"time_s", "ring_time_s", "memory_bytes", "work_floor_unit_s"}) {
      const double want = golden[i].at(key), got = out[i].at(key);
      EXPECT_NEAR(got, want, 1e-9 * std::abs(want)) << "case " << i << " " << key;
    }
  }
}

// The target: a 1M-token llama3-8b sequence on 64 GPUs of a 32-head model runs on all 64 as
// 32 x 2; without rings it cannot use more than 32.
TEST(Usp, MillionTokensOnSixtyFourGpus) {
  const auto ring = make("llama3-8b", 64, 1, 2), plain = make("llama3-8b", 64, 1, 1);
  const std::vector<dcp::sequence> batch = {dcp::make_sequence(7, 1 << 20)};
  const auto p = dcp::dcp_planner{}.plan(ring, std::span<const dcp::sequence>(batch));
  const auto v = dcp::plan_violations(p, batch, ring);
  EXPECT_TRUE(v.empty()) << (v.empty() ? "" : v.front());
  ASSERT_EQ(p.steps.size(), 1u);
  EXPECT_EQ(p.steps[0].sp(), 64);
  EXPECT_EQ(p.steps[0].ulysses(), 32);
  EXPECT_EQ(p.steps[0].ring, 2);
  const auto q = dcp::dcp_planner{}.plan(plain, std::span<const dcp::sequence>(batch));
  ASSERT_EQ(q.steps.size(), 1u);
  EXPECT_LE(q.steps[0].sp(), 32);
  EXPECT_EQ(q.steps[0].ring, 1);
  EXPECT_LT(p.makespan_s, q.makespan_s);
  std::cout << "1M tokens: u x r = 32 x 2 makespan " << p.makespan_s << " s, Ulysses-only sp " << q.steps[0].sp()
            << " makespan " << q.makespan_s << " s\n";
}

// Small-shape analogue of "longer than one Ulysses group can hold": a sequence over the largest
// length sp = heads holds is infeasible without rings and planned on a u x r group with them.
TEST(Usp, LongerThanOneUlyssesGroupHolds) {
  const auto ring = make("llama3-8b", 64, 1, 2), plain = make("llama3-8b", 64, 1, 1);
  const std::int64_t cap = dcp::largest_feasible_tokens(plain), cap_ring = dcp::largest_feasible_tokens(ring);
  EXPECT_GT(cap_ring, cap + cap / 2);
  const std::vector<dcp::sequence> batch = {dcp::make_sequence(1, cap + cap / 4), dcp::make_sequence(2, 5000)};
  EXPECT_DCP_ERROR(dcp::dcp_planner{}.plan(plain, std::span<const dcp::sequence>(batch)), dcp::errc::infeasible, "1");
  const auto p = dcp::dcp_planner{}.plan(ring, std::span<const dcp::sequence>(batch));
  EXPECT_TRUE(dcp::plan_violations(p, batch, ring).empty());
  bool on_ring = false;
  for (const auto& st : p.steps)
    for (const auto& q : st.sequences)
      if (q.id == 1) on_ring = st.ring == 2 && st.sp() == 64;
  EXPECT_TRUE(on_ring);
}

// Every planner keeps the plan laws with rings; bucket and packed run a fixed (u, r).
TEST(Usp, EveryPlannerKeepsTheLaws) {
  const std::uint64_t seed = 977;
  std::cout << "[     SEED ] " << seed << "\n";
  dcp::xoshiro256ss g(seed);
  const analytic_cost costs[] = {make("llama3-8b", 64, 1, 2), make("cogvideox-5b", 64, 1, 4), make("llama3-70b", 256, 8, 4)};
  int ring_plans = 0;
  for (const auto& cost : costs) {
    const double longest = 0.9 * static_cast<double>(dcp::largest_feasible_tokens(cost));
    for (int trial = 0; trial < 2; ++trial) {
      std::vector<dcp::sequence> batch;
      const int count = 1 + static_cast<int>(dcp::uniform_below(g, 40));
      for (int i = 0; i < count; ++i)
        batch.push_back(dcp::make_sequence(i, std::max<std::int64_t>(1, static_cast<std::int64_t>(std::exp(
                                                                            dcp::uniform01(g) * std::log(longest))))));
      const std::span<const dcp::sequence> b(batch);
      const int widest = dcp::legal_sp_sizes(cost).back();
      dcp::bucket_planner bucket;
      bucket.sp = widest;
      dcp::packed_planner packed;
      packed.sp = widest;
      const dcp::plan ps[] = {dcp::dcp_planner{}.plan(cost, b), bucket.plan(cost, b), packed.plan(cost, b),
                              dcp::tune(dcp::dynamic_cp_planner{}, cost, b).plan(cost, b)};
      for (const auto& p : ps) {
        const auto v = dcp::plan_violations(p, b, cost);
        EXPECT_TRUE(v.empty()) << p.method << " on " << cost << ": " << (v.empty() ? "" : v.front());
        for (const auto& st : p.steps) {
          EXPECT_EQ(st.ring * st.ulysses(), st.sp());
          EXPECT_EQ(cost.heads() % st.ulysses(), 0);
          ring_plans += st.ring > 1;
        }
        if (&p == &ps[1] || &p == &ps[2]) {
          for (const auto& st : p.steps) EXPECT_EQ(st.ring, dcp::ring_of(cost, widest)) << p.method;
        }
      }
    }
  }
  EXPECT_GT(ring_plans, 0);
}

TEST(Usp, PlanJsonHashAndCheck) {
  const auto cost = make("llama3-8b", 64, 1, 2);
  const std::vector<dcp::sequence> batch = {dcp::make_sequence(3, 1 << 20), dcp::make_sequence(4, 3000)};
  const auto p = dcp::dcp_planner{}.plan(cost, std::span<const dcp::sequence>(batch));
  std::stringstream ss;
  dcp::sim::write_plan_json(ss, cost, std::span<const dcp::plan>(&p, 1));
  EXPECT_NE(ss.str().find("\"ring\":2"), std::string::npos);
  const auto doc = dcp::sim::read_plan_json(ss, "usp");
  ASSERT_EQ(doc.plans.size(), 1u);
  EXPECT_EQ(doc.plans[0].steps, p.steps);
  EXPECT_EQ(doc.plans[0].hash(), p.hash());
  // A plan that says Ulysses over all 64 ranks of a 32-head model is refused, and hashes apart.
  auto bad = p;
  for (auto& st : bad.steps)
    if (st.ring == 2) st.ring = 1;
  EXPECT_NE(bad.hash(), p.hash());
  const auto v = dcp::plan_violations(bad, batch, cost);
  ASSERT_FALSE(v.empty());
  EXPECT_NE(v.front().find("ring 1 x ulysses 64"), std::string::npos) << v.front();
  // A file whose ring does not divide sp names it.
  std::string text = ss.str();
  text.replace(text.find("\"ring\":2"), 8, "\"ring\":3");
  std::stringstream in(text);
  EXPECT_DCP_ERROR(dcp::sim::read_plan_json(in, "usp"), dcp::errc::parse_error, "ring");
}

}  // namespace
