// analytic_cost (DESIGN section 4): hand-computed micro-steps, the H200 / H100 presets,
// validation, and monotonicity properties over random inputs.

#include "core_test_support.hpp"

#include <dcp/cost/analytic.hpp>
#include <dcp/cost/cost_concepts.hpp>
#include <dcp/error.hpp>
#include <dcp/plan/sequence_options.hpp>

#include <gtest/gtest.h>

#include <cstdint>
#include <sstream>
#include <string>
#include <vector>

namespace {

using dcp_test::message_of;

using dcp_test::rng;


// --- device presets ------------------------------------------------------------------------------

TEST(DevicePresets, H200MatchesDesign) {
  const auto d = dcp::devices::h200_analytic();
  EXPECT_EQ(d.name, "h200-analytic");
  EXPECT_EQ(d.peak, 989e12);
  EXPECT_EQ(d.eff_max, 0.55);
  EXPECT_EQ(d.x_half, 1024);
  EXPECT_EQ(d.alpha, 15e-6);
  EXPECT_EQ(d.tau, 15e-6);
  EXPECT_EQ(d.bw_intra, 300e9);
  EXPECT_EQ(d.bw_inter, 40e9);
  EXPECT_EQ(d.gpus_per_node, 8);
  EXPECT_EQ(d.mem_bytes, 141e9);
  EXPECT_EQ(d.usable, 0.9);
  EXPECT_EQ(d.beta, 34);
  DCP_EXPECT_REL(d.capacity(), 126.9e9);
  EXPECT_NO_THROW(dcp::validate(d));
}

TEST(DevicePresets, H100IsH200WithEightyGigabytes) {
  auto d = dcp::devices::h100_analytic();
  EXPECT_EQ(d.name, "h100-analytic");
  EXPECT_EQ(d.mem_bytes, 80e9);
  DCP_EXPECT_REL(d.capacity(), 72e9);
  d.name = "h200-analytic";
  d.mem_bytes = 141e9;
  EXPECT_EQ(d, dcp::devices::h200_analytic());
}

TEST(DevicePresets, ByName) {
  EXPECT_EQ(dcp::devices::preset("h200-analytic"), dcp::devices::h200_analytic());
  EXPECT_EQ(dcp::devices::preset("h100-analytic"), dcp::devices::h100_analytic());
  EXPECT_EQ(dcp::devices::preset("h200"), dcp::devices::h200());
  EXPECT_EQ(dcp::devices::preset("h100"), dcp::devices::h100());
  EXPECT_TRUE(dcp::devices::h200().kernel.enabled());
  EXPECT_FALSE(dcp::devices::h200_analytic().kernel.enabled());
  EXPECT_EQ(dcp::devices::h200().analytic().kernel, dcp::kernel_clock{});
  std::ostringstream os;
  os << dcp::devices::h100_analytic();
  EXPECT_NE(os.str().find("h100"), std::string::npos);
}

TEST(DevicePresets, UnknownNameIsAnErrorNamingIt) {
  EXPECT_DCP_ERROR((void)dcp::devices::preset("v100"), dcp::errc::invalid_argument, "'v100'",
                   "h200, h100, a100, h200-analytic or h100-analytic");
}

TEST(DevicePresets, ValidationNamesTheField) {
  struct bad {
    void (*mutate)(dcp::device_spec&);
    const char* needle;
  };
  const bad cases[] = {
      {[](dcp::device_spec& d) { d.peak = 0; }, "peak"},
      {[](dcp::device_spec& d) { d.eff_max = -1; }, "eff_max"},
      {[](dcp::device_spec& d) { d.eff_max = 1.5; }, "eff_max"},
      {[](dcp::device_spec& d) { d.x_half = 0; }, "x_half"},
      {[](dcp::device_spec& d) { d.bw_intra = 0; }, "bw_intra"},
      {[](dcp::device_spec& d) { d.bw_inter = -3; }, "bw_inter"},
      {[](dcp::device_spec& d) { d.mem_bytes = 0; }, "mem_bytes"},
      {[](dcp::device_spec& d) { d.usable = 0; }, "usable"},
      {[](dcp::device_spec& d) { d.usable = 1.2; }, "usable"},
      {[](dcp::device_spec& d) { d.alpha = -1e-6; }, "alpha"},
      {[](dcp::device_spec& d) { d.tau = -1e-6; }, "tau"},
      {[](dcp::device_spec& d) { d.beta = 2; }, "beta = 2"},
      {[](dcp::device_spec& d) { d.gpus_per_node = 6; }, "gpus_per_node = 6"},
      {[](dcp::device_spec& d) { d.gpus_per_node = 0; }, "gpus_per_node = 0"},
  };
  for (const auto& c : cases) {
    auto d = dcp::devices::h200_analytic();
    c.mutate(d);
    const auto msg = message_of([&] { dcp::validate(d); });
    EXPECT_NE(msg.find(c.needle), std::string::npos) << "expected '" << c.needle << "' in: " << msg;
  }
}

// --- hand-computed micro-steps (DESIGN section 4, written out independently) --------------------

TEST(AnalyticCost, HandComputedFullAttention) {
  // cogvideox-5b on 32 H200: one sequence of 10000 tokens (9774 + 226 text), sp = 2, k = 10.
  const dcp::analytic_cost c{dcp::models::cogvideox_5b(), dcp::devices::h200_analytic(), 32};
  const auto l = c.load_of(dcp::make_sequence(1, 9774));
  EXPECT_EQ(l.tokens, 10000);

  const double L = 42, h = 3072, f = 12288, m = 2, N = 32, n = 10000, sp = 2, k = 10;
  const double Pb = 4 * h * h + m * h * f;
  EXPECT_EQ(Pb, 113246208.0);
  EXPECT_EQ(c.model.block_parameters(), Pb);
  EXPECT_EQ(c.model.parameters(), L * Pb);
  const double P = L * Pb;
  const double F = L * 2 * Pb * n + L * 4 * h * n * n;
  DCP_EXPECT_REL(c.forward_flops(l), F);
  const double x = n / sp;
  const double eff = 0.55 * x / (x + 1024);
  const double t_comp = (3 + k / L) * F / (sp * 989e12 * eff);
  const double v = 2 * h * n / sp * (sp - 1) / sp;
  const double t_comm = 4 * (2 * L + k) * (15e-6 + v / 300e9);
  const double t_over = 15e-6 * (3 * L + k);
  const double mem = 4 * P + 12 * P / N + (L - k) * 34 * h * x + k * 2 * h * x + 34 * h * x;

  DCP_EXPECT_REL(c.time(l, 2, 10), t_comp + t_comm + t_over);
  DCP_EXPECT_REL(c.memory(l, 2, 10), mem);
  // The same numbers evaluated once by hand (Python, double precision).
  DCP_EXPECT_REL(c.time(l, 2, 10), 0.5531344227627981);
  DCP_EXPECT_REL(c.memory(l, 2, 10), 38350110720.0);
}

TEST(AnalyticCost, HandComputedCausalAcrossNodes) {
  // llama3-8b on 32 H200: sequences of 3000 and 5000 tokens together on sp = 16 (two nodes,
  // so the inter-node bandwidth applies), k = 5.
  const dcp::analytic_cost c{dcp::models::llama3_8b(), dcp::devices::h200_analytic(), 32};
  const auto l = c.load_of(dcp::make_sequence(1, 3000)) + c.load_of(dcp::make_sequence(2, 5000));
  EXPECT_EQ(l.sequences, 2);
  EXPECT_EQ(l.tokens, 8000);

  const double L = 32, h = 4096, f = 14336, m = 3, N = 32, sp = 16, k = 5;
  const double Pb = 4 * h * h + m * h * f;
  EXPECT_EQ(Pb, 243269632.0);
  const double P = L * Pb;
  const double n_tok = 3000 + 5000;
  const double F = L * 2 * Pb * n_tok + L * 2 * h * (3000.0 * 3000 + 5000.0 * 5000);
  const double x = n_tok / sp;
  const double eff = 0.55 * x / (x + 1024);
  const double t_comp = (3 + k / L) * F / (sp * 989e12 * eff);
  const double v = 2 * h * n_tok / sp * (sp - 1) / sp;
  const double t_comm = 4 * (2 * L + k) * (15e-6 + v / 40e9);
  const double t_over = 15e-6 * (3 * L + k);
  const double mem = 4 * P + 12 * P / N + (L - k) * 34 * h * x + k * 2 * h * x + 34 * h * x;

  DCP_EXPECT_REL(c.forward_flops(l), F);
  DCP_EXPECT_REL(c.time(l, 16, 5), t_comp + t_comm + t_over);
  DCP_EXPECT_REL(c.memory(l, 16, 5), mem);
  DCP_EXPECT_REL(c.time(l, 16, 5), 0.17968126501688758);
  DCP_EXPECT_REL(c.memory(l, 16, 5), 36027924480.0);
}

TEST(AnalyticCost, HandComputedFactorized2D) {
  // stdit3-xl on 16 H100: shapes 10 x 200 and 3 x 64 together on sp = 4 (DSP: 2 all-to-alls per
  // block pass), k = 8.
  const dcp::analytic_cost c{dcp::models::stdit3_xl(), dcp::devices::h100_analytic(), 16};
  const auto l = c.load_of(dcp::make_sequence(1, 10, 200)) + c.load_of(dcp::make_sequence(2, 3, 64));
  EXPECT_EQ(l.tokens, 2000 + 192);

  const double L = 56, h = 1152, f = 4608, m = 2, N = 16, sp = 4, k = 8;
  const double Pb = 4 * h * h + m * h * f;
  EXPECT_EQ(Pb, 15925248.0);
  const double P = L * Pb;
  const double n_tok = 2192;
  const double spatial = (L / 2) * 4 * h * (10.0 * 200 * 200 + 3.0 * 64 * 64);
  const double temporal = (L / 2) * 4 * h * (200.0 * 10 * 10 + 64.0 * 3 * 3);
  const double F = L * 2 * Pb * n_tok + spatial + temporal;
  const double x = n_tok / sp;
  const double eff = 0.55 * x / (x + 1024);
  const double t_comp = (3 + k / L) * F / (sp * 989e12 * eff);
  const double v = 2 * h * n_tok / sp * (sp - 1) / sp;
  const double t_comm = 2 * (2 * L + k) * (15e-6 + v / 300e9);
  const double t_over = 15e-6 * (3 * L + k);
  const double mem = 4 * P + 12 * P / N + (L - k) * 34 * h * x + k * 2 * h * x + 34 * h * x;

  DCP_EXPECT_REL(c.forward_flops(l), F);
  DCP_EXPECT_REL(c.time(l, 4, 8), t_comp + t_comm + t_over);
  DCP_EXPECT_REL(c.memory(l, 4, 8), mem);
  DCP_EXPECT_REL(c.time(l, 4, 8), 0.02342925107446377);
  DCP_EXPECT_REL(c.memory(l, 4, 8), 5297955840.0);
}

TEST(AnalyticCost, HandComputedSingleGpuHasNoCommunication) {
  // cogvideox-5b on 8 H100: 274 + 226 = 500 tokens on one GPU, nothing checkpointed.
  const dcp::analytic_cost c{dcp::models::cogvideox_5b(), dcp::devices::h100_analytic(), 8};
  const auto l = c.load_of(dcp::make_sequence(1, 274));
  const double L = 42, h = 3072, Pb = 113246208, P = L * Pb, n = 500;
  const double F = L * 2 * Pb * n + L * 4 * h * n * n;
  const double t = 3 * F / (989e12 * 0.55 * n / (n + 1024)) + 15e-6 * 3 * L;
  const double mem = 4 * P + 12 * P / 8 + L * 34 * h * n + 34 * h * n;
  DCP_EXPECT_REL(c.time(l, 1, 0), t);
  DCP_EXPECT_REL(c.memory(l, 1, 0), mem);
  DCP_EXPECT_REL(c.time(l, 1, 0), 0.08401478195787113);
  DCP_EXPECT_REL(c.memory(l, 1, 0), 28405506048.0);
}

TEST(AnalyticCost, StaticMemoryAndMaxTokensPerGpu) {
  const dcp::analytic_cost c{dcp::models::llama3_8b(), dcp::devices::h200_analytic(), 32};
  const double P = 32 * 243269632.0;
  DCP_EXPECT_REL(c.static_memory(), 4 * P + 12 * P / 32);
  DCP_EXPECT_REL(c.max_tokens_per_gpu(), (126.9e9 - (4 * P + 12 * P / 32)) / ((2 * 32 + 34) * 4096.0));
  // x_max is exactly the tokens per GPU at which a fully checkpointed step fills the capacity.
  const dcp::analytic_load at_max{1, c.max_tokens_per_gpu() * 4, 0};
  DCP_EXPECT_REL(c.memory(at_max, 4, c.blocks()), c.capacity());
}

TEST(AnalyticCost, TokensIncludeTextTokensAndShapes) {
  const dcp::analytic_cost cog{dcp::models::cogvideox_5b(), dcp::devices::h200_analytic(), 8};
  EXPECT_EQ(cog.tokens_of(dcp::make_sequence(3, 13, 1350)), 13 * 1350 + 226);
  const dcp::analytic_cost st{dcp::models::stdit3_xl(), dcp::devices::h200_analytic(), 8};
  EXPECT_EQ(st.tokens_of(dcp::make_sequence(3, 13, 1350)), 13 * 1350);
  EXPECT_EQ(st.load_of(dcp::make_sequence(3, 13, 1350)).sequences, 1);
}

TEST(AnalyticCost, LoadIsAdditive) {
  const dcp::analytic_cost c{dcp::models::stdit3_xl(), dcp::devices::h200_analytic(), 8};
  const auto a = c.load_of(dcp::make_sequence(1, 4, 100)), b = c.load_of(dcp::make_sequence(2, 7, 30));
  const auto s = a + b;
  EXPECT_EQ(s.sequences, 2);
  EXPECT_EQ(s.tokens, a.tokens + b.tokens);
  EXPECT_EQ(s.attention, a.attention + b.attention);
  EXPECT_EQ(s - b, a);
  EXPECT_EQ(a + dcp::analytic_load{}, a);
}

// --- validation -----------------------------------------------------------------------------------

TEST(AnalyticCost, ZeroGpusIsAnError) {
  EXPECT_DCP_ERROR((void)dcp::make_analytic_cost(dcp::models::cogvideox_5b(), dcp::devices::h200_analytic(), 0),
                   dcp::errc::invalid_argument, "gpus = 0");
  EXPECT_DCP_ERROR((void)dcp::make_analytic_cost(dcp::models::cogvideox_5b(), dcp::devices::h200_analytic(), -8),
                   dcp::errc::invalid_argument, "gpus = -8");
}

TEST(AnalyticCost, GpusMustBeWholeNodesBeyondOneNode) {
  for (int n : {1, 2, 3, 5, 7, 8, 16, 24, 40, 72}) {
    EXPECT_NO_THROW((void)dcp::make_analytic_cost(dcp::models::stdit3_xl(), dcp::devices::h200_analytic(), n)) << n;
  }
  for (int n : {9, 12, 20, 33, 100}) {
    EXPECT_DCP_ERROR((void)dcp::make_analytic_cost(dcp::models::stdit3_xl(), dcp::devices::h200_analytic(), n),
                     dcp::errc::invalid_argument, "gpus = " + std::to_string(n), "gpus_per_node = 8");
  }
}

TEST(AnalyticCost, CapacityBelowStaticMemoryIsAnError) {
  // llama3-8b: P = 32 * 243269632 = 7.78e9; on one GPU M_static = 16 P = 124.6 GB. An H100 holds
  // 72 GB (does not fit); an H200 126.9 GB (fits, barely).
  const double p = 32 * 243269632.0;
  ASSERT_GT(16 * p, 72e9);
  ASSERT_LT(16 * p, 126.9e9);
  // The capacity, in bytes, is named too.
  EXPECT_DCP_ERROR((void)dcp::make_analytic_cost(dcp::models::llama3_8b(), dcp::devices::h100_analytic(), 1),
                   dcp::errc::invalid_argument, "llama3-8b", "static memory", std::to_string(72e9));
  EXPECT_NO_THROW((void)dcp::make_analytic_cost(dcp::models::llama3_8b(), dcp::devices::h200_analytic(), 1));
  // Two H100s shard the optimizer state: 4 P + 6 P = 77.8 GB, still over; four fit (62.3 GB).
  EXPECT_THROW((void)dcp::make_analytic_cost(dcp::models::llama3_8b(), dcp::devices::h100_analytic(), 2), dcp::error);
  EXPECT_NO_THROW((void)dcp::make_analytic_cost(dcp::models::llama3_8b(), dcp::devices::h100_analytic(), 4));
  // The message names the fix that works: the least GPU count where more GPUs shrink it enough
  // (4 P + 12 P / N <= 72 GB from N = 3)...
  EXPECT_DCP_ERROR((void)dcp::make_analytic_cost(dcp::models::llama3_8b(), dcp::devices::h100_analytic(), 2),
                   dcp::errc::invalid_argument, "(zero1)", "it fits from 3 GPUs", "sharding = zero3");
  // ... and where no count fits under zero1 (llama3-70b holds 4 P = 276 GB on every GPU), the
  // shardings and layouts that divide it.
  EXPECT_DCP_ERROR((void)dcp::make_analytic_cost(dcp::models::llama3_70b(), dcp::devices::h100_analytic(), 1024),
                   dcp::errc::invalid_argument, "no GPU count fits", "use sharding = zero3, tp = 2");
  EXPECT_NO_THROW((void)dcp::make_analytic_cost(
      dcp::models::llama3_70b(), dcp::devices::h100_analytic(),
      dcp::parallel_layout{.gpus = 64, .gpus_per_node = 8, .sharding = dcp::sharding_kind::zero3}));
}

TEST(AnalyticCost, InvalidModelOrDeviceIsAnError) {
  auto m = dcp::models::cogvideox_5b();
  m.heads = 5;  // does not divide 3072
  EXPECT_THROW((void)dcp::make_analytic_cost(m, dcp::devices::h200_analytic(), 8), dcp::error);
  auto d = dcp::devices::h200_analytic();
  d.peak = -1;
  EXPECT_THROW((void)dcp::make_analytic_cost(dcp::models::cogvideox_5b(), d, 8), dcp::error);
}

TEST(AnalyticCost, LegalSpDividesHeadsWithinN) {
  auto m = dcp::models::cogvideox_5b();
  m.heads = 12;  // 3072 / 12 = 256: a valid model whose heads 8 and 16 do not divide
  const dcp::analytic_cost c{m, dcp::devices::h200_analytic(), 64};
  EXPECT_TRUE(dcp::legal_sp(c, 1));
  EXPECT_TRUE(dcp::legal_sp(c, 2));
  EXPECT_TRUE(dcp::legal_sp(c, 4));
  EXPECT_FALSE(dcp::legal_sp(c, 8));   // 12 % 8 != 0
  EXPECT_FALSE(dcp::legal_sp(c, 16));  // 12 % 16 != 0
  EXPECT_TRUE(dcp::legal_sp(c, 3));    // divides 12: legal, though buddy blocks do not offer it
  EXPECT_TRUE(dcp::legal_sp(c, 6));
  EXPECT_TRUE(dcp::legal_sp(c, 12));
  EXPECT_FALSE(dcp::legal_sp(c, 5));   // gcd(5, 12) = 1: a ring of 5, and no rings here
  EXPECT_FALSE(dcp::legal_sp(c, 24));  // a ring of 2
  EXPECT_EQ(dcp::default_sp_sizes(c), (std::vector<int>{1, 2, 4}));
  EXPECT_FALSE(dcp::legal_sp(c, 0));
  EXPECT_FALSE(dcp::legal_sp(c, -2));
  // stdit3-xl has 16 heads: sp 32 is illegal even on 64 GPUs; and sp never exceeds N.
  const dcp::analytic_cost st{dcp::models::stdit3_xl(), dcp::devices::h200_analytic(), 64};
  EXPECT_TRUE(dcp::legal_sp(st, 16));
  EXPECT_FALSE(dcp::legal_sp(st, 32));
  const dcp::analytic_cost small{dcp::models::cogvideox_5b(), dcp::devices::h200_analytic(), 4};
  EXPECT_TRUE(dcp::legal_sp(small, 4));
  EXPECT_FALSE(dcp::legal_sp(small, 8));
}

// --- properties over random inputs ----------------------------------------------------------------

TEST(AnalyticCostProperties, MemoryGrowsWithTokensAndFallsWithSp) {
  rng g(11);
  for (int trial = 0; trial < 3000; ++trial) {
    const auto c = dcp_test::random_cost(g);
    const auto a = c.load_of(dcp_test::random_sequence(g, c.model, 1));
    const auto more = a + c.load_of(dcp_test::random_sequence(g, c.model, 2));
    const int k = static_cast<int>(g.between(0, c.blocks()));
    for (int sp = 1; sp <= c.gpus(); sp *= 2) {
      EXPECT_GT(c.memory(more, sp, k), c.memory(a, sp, k)) << c << " sp=" << sp << " k=" << k;
      if (2 * sp <= c.gpus()) {
        EXPECT_LT(c.memory(a, 2 * sp, k), c.memory(a, sp, k)) << c << " sp=" << sp;
      }
      EXPECT_GT(c.memory(a, sp, k), c.static_memory());
    }
    // Static memory falls with N (the optimizer state shards over all GPUs).
    auto wider = c;
    wider.parallel.gpus = c.parallel.gpus * 2;
    EXPECT_LT(wider.static_memory(), c.static_memory());
  }
}

TEST(AnalyticCostProperties, CheckpointingLowersMemoryAndRaisesTime) {
  rng g(12);
  for (int trial = 0; trial < 3000; ++trial) {
    const auto c = dcp_test::random_cost(g);
    const auto l = c.load_of(dcp_test::random_sequence(g, c.model, 1));
    int sp = 1 << g.between(0, 10);
    while (sp > c.gpus()) sp /= 2;
    const int k = static_cast<int>(g.between(0, c.blocks() - 1));
    const int k2 = static_cast<int>(g.between(k + 1, c.blocks()));
    EXPECT_LT(c.memory(l, sp, k2), c.memory(l, sp, k)) << c << " sp=" << sp << " k=" << k << " k2=" << k2;
    EXPECT_GT(c.time(l, sp, k2), c.time(l, sp, k)) << c << " sp=" << sp << " k=" << k << " k2=" << k2;
  }
}

// Adding a short sequence to a step may lower its time (eff(x) rises with the tokens per GPU
// faster than a long sequence's attention share grows: DESIGN section 4 as written), so the
// law is about one sequence growing longer.
TEST(AnalyticCostProperties, TimeGrowsWithLengthAndWorkFloorIsAFloor) {
  rng g(13);
  for (int trial = 0; trial < 3000; ++trial) {
    const auto c = dcp_test::random_cost(g);
    const auto s = dcp_test::random_sequence(g, c.model, 1);
    auto longer = s;
    longer.spatial += g.between(1, 1000);
    const auto a = c.load_of(s);
    int sp = 1 << g.between(0, 10);
    while (sp > c.gpus()) sp /= 2;
    const int k = static_cast<int>(g.between(0, c.blocks()));
    EXPECT_GT(c.time(c.load_of(longer), sp, k), c.time(a, sp, k)) << c << " sp=" << sp;
    EXPECT_GT(c.time(a, sp, k), 0);
    EXPECT_GT(c.work_floor(a, sp, k), 0);
    // The floor prices compute at eff(x_max): it bounds the GPU-seconds of steps that fit memory
    // (x <= x_max), the only ones a plan holds.
    if (c.memory(a, sp, k) <= c.capacity()) {
      EXPECT_LE(c.work_floor(a, sp, k), sp * c.time(a, sp, k) * (1 + 1e-12)) << c << " sp=" << sp << " k=" << k;
    }
  }
}

}  // namespace
