// Models beyond the paper's (DESIGN sections 4.1 and 4.2): the new presets' dimensions, an
// independent transcription of the extended formulas, golden values (tests/data/models.json),
// today's presets unchanged, config.json parsing and its errors, layout validation, and the plan
// laws of every planner over random batches on TP units, zero3 and expert parallelism.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <span>
#include <sstream>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <dcp/cost/analytic.hpp>
#include <dcp/error.hpp>
#include <dcp/model/config.hpp>
#include <dcp/model/optional_fields.hpp>
#include <dcp/model/spec_json.hpp>
#include <dcp/model/transformer.hpp>
#include <dcp/plan/bucket_planner.hpp>
#include <dcp/plan/check_plan.hpp>
#include <dcp/plan/dcp_planner.hpp>
#include <dcp/plan/dynamic_cp_planner.hpp>
#include <dcp/plan/lower_bounds.hpp>
#include <dcp/plan/packed_planner.hpp>
#include <dcp/plan/sequence_options.hpp>
#include <dcp/random.hpp>
#include <dcp/workload/tuning.hpp>

#include <dcp_test/support.hpp>

#ifndef DCP_TEST_CONFIGS
#error "DCP_TEST_CONFIGS must name tests/data/configs"
#endif
#ifndef DCP_TEST_MODELS_JSON
#error "DCP_TEST_MODELS_JSON must name tests/data/models.json"
#endif

namespace {

using dcp::sharding_kind;

bool rel_close(double a, double b, double tol) {
  return std::abs(a - b) <= tol * std::max({1.0, std::abs(a), std::abs(b)});
}

// ---- An independent transcription of DESIGN 4.1/4.2, written from the text, for 1D models. ----
struct reference {
  const dcp::transformer_spec& m;
  const dcp::device_spec& d;
  int N, tp, ep;
  sharding_kind sh;

  double hq() const { return m.head_dim ? double(m.heads) * double(m.head_dim) : double(m.hidden); }
  double dh() const { return m.head_dim ? double(m.head_dim) : double(m.hidden) / m.heads; }
  double dv() const { return m.value_dim ? double(m.value_dim) : dh(); }
  double ho() const { return m.heads * dv(); }
  double kvh() const { return m.kv_heads ? m.kv_heads : m.heads; }
  double hkv() const { return kvh() * dh(); }
  double hkvv() const { return kvh() * dv(); }
  // Self-attention: Q (low-rank with r_q), K and V (from the r_kv latent and the shared rope key
  // with MLA), O.
  double pself() const {
    const double h = double(m.hidden), rq = double(m.q_rank), rkv = double(m.kv_rank), dr = double(m.rope_dim);
    const double q = m.q_rank ? h * rq + rq * hq() : h * hq();
    const double kv = m.kv_rank ? h * (rkv + dr) + rkv * m.heads * (dh() - dr + dv()) : h * (hkv() + hkvv());
    return q + kv + h * ho();
  }
  double patt() const { return m.cross_attention_tokens ? 2 * pself() : pself(); }
  double pb() const {  // a MoE block's in a MoE stack
    const double h = double(m.hidden);
    const double mlp =
        m.experts ? (m.experts + m.shared_experts) * m.mlp_matrices * h * double(m.expert_width) + h * m.experts
                  : m.mlp_matrices * h * double(m.mlp_width);
    return patt() + mlp;
  }
  double pb_dense() const { return patt() + m.mlp_matrices * double(m.hidden) * double(m.mlp_width); }
  double Ld() const { return m.dense_blocks; }
  double Le() const { return m.experts ? m.blocks - m.dense_blocks : 0; }
  double P() const { return m.experts ? Ld() * pb_dense() + Le() * pb() : m.blocks * pb(); }
  double pbe() const { return m.experts ? m.experts * m.mlp_matrices * double(m.hidden) * double(m.expert_width) : 0; }
  double PE() const { return Le() * pbe(); }
  double pact() const {  // a MoE block's, or a dense model's block
    const double h = double(m.hidden);
    double p = patt() - (m.cross_attention_tokens ? h * (hkv() + hkvv()) : 0);
    p += m.experts
             ? (m.experts_per_token + m.shared_experts) * m.mlp_matrices * h * double(m.expert_width) + h * m.experts
             : m.mlp_matrices * h * double(m.mlp_width);
    return p;
  }
  double Pact() const {
    const double dense_act = pb_dense() - (m.cross_attention_tokens ? double(m.hidden) * (hkv() + hkvv()) : 0);
    return m.experts ? Ld() * dense_act + Le() * pact() : m.blocks * pact();
  }
  double attention(double n) const {
    const double L = m.blocks, c = double(m.cross_attention_tokens), pair = 2 * (hq() + ho());
    double a = 0;
    if (m.attention == dcp::attention_kind::causal) {
      const double Lw = m.window ? (m.windowed_blocks ? m.windowed_blocks : L) : 0, w = double(m.window);
      a = (L - Lw) * pair * n * n / 2 + Lw * pair * (n <= w ? n * n / 2 : w * n - w * w / 2);
    } else {
      a = L * pair * n * n;
    }
    return a + L * (pair * n * c + 2 * double(m.hidden) * (hkv() + hkvv()) * c);
  }
  // The vocabulary: n_V matrices of V x h, the loss's lambda.
  double nv() const { return m.vocab == 0 ? 0 : m.tied_embeddings ? 1 : 2; }
  double pv() const { return nv() * double(m.vocab) * double(m.hidden); }
  double lambda() const {
    if (m.vocab == 0) return 0;
    return m.loss == dcp::loss_kind::full ? 6 : 4 / std::ceil(double(m.vocab) / double(m.hidden));
  }
  double static_memory() const {
    const double Pgb = (P() - PE()) / tp + PE() / (tp * ep);
    const double Pall = P() + pv(), Pg = Pgb + pv() / tp;
    const double largest =
        m.dense_blocks ? std::max(pb_dense() / tp, (pb() - pbe()) / tp + pbe() / (tp * ep)) : Pgb / m.blocks;
    if (sh == sharding_kind::replicated) return 16 * Pg;
    if (sh == sharding_kind::zero3)
      return 16 * Pall / N + 6 * std::max(largest, double(m.vocab) * double(m.hidden) / tp);
    return 4 * Pg + 12 * Pall / N;
  }
  // beta_b: a block with a cross-attention also keeps its query projection's input, its queries and
  // its output (bf16) and its log-sum-exp per head (fp32), per token.
  double beta_b() const {
    const double h = double(m.hidden);
    return m.cross_attention_tokens ? d.beta + (2 * (h + hq() + ho()) + 4.0 * m.heads) / h : d.beta;
  }
  double memory(double tokens, int sp, int k) const {
    const double L = m.blocks, x = tokens / (sp * tp), h = double(m.hidden);
    const double beta_prime = std::max(beta_b(), lambda() * double(m.vocab) / h);
    return static_memory() + ((L - k) * beta_b() + 2 * k + beta_prime) * h * x;
  }
  double time(std::span<const double> ns, int sp, int k) const {
    const double L = m.blocks, h = double(m.hidden);
    double tok = 0, A = 0;
    for (double n : ns) tok += n, A += attention(n);
    const double x = tok / sp, F = 2 * Pact() * tok + A, FV = 2 * double(m.vocab) * h * tok;
    const double G = d.gpus_per_node;
    double t = ((3 + k / L) * F + 3 * FV) / (sp * tp * d.peak * d.eff_max * x / (x + d.x_half)) + d.tau * (3 * L + k);
    if (sp > 1) {
      const bool whole = kvh() / tp >= sp;
      const double key = whole ? hkv() / tp : dh() * sp, value = whole ? hkvv() / tp : dv() * sp;
      const double w = ((hq() + ho()) / tp + key + value) / 4;
      t += 4 * (2 * L + k) * (d.alpha + 2 * w * x * (sp - 1) / sp / (sp * tp <= G ? d.bw_intra : d.bw_inter));
    }
    if (tp > 1)
      t += ((m.cross_attention_tokens ? 6 : 4) * (2 * L + k) + (m.vocab ? 4 : 0)) *
           (d.alpha + 2 * h * x * (tp - 1) / tp / d.bw_intra);
    if (ep > 1)
      t += 2 * (2 * Le() + k * Le() / L) *
           (d.alpha + 2 * h * m.experts_per_token * x / tp * (ep - 1) / ep / (ep * tp <= G ? d.bw_intra : d.bw_inter));
    if (sh == sharding_kind::zero3) {
      const double D = double(N) / tp, De = D / ep;
      const double V = 2 * ((pb() - pbe()) / tp * (D - 1) / D + pbe() / (tp * ep) * (De - 1) / De);
      const double Vd = 2 * pb_dense() / tp * (D - 1) / D;
      const double VV = 2 * double(m.vocab) * h / tp * (D - 1) / D, bw = N <= G ? d.bw_intra : d.bw_inter;
      const double moe_or_all = m.experts ? Le() : L;
      t = std::max(
          t, 3 * moe_or_all * (d.alpha + V / bw) + 3 * Ld() * (d.alpha + Vd / bw) + 3 * nv() * (d.alpha + VV / bw));
    }
    return t;
  }

  // ---- The kernel clock (DESIGN 4.6), written from the text ----
  double attention_eff(bool backward, double keys, bool causal) const {
    const dcp::kernel_clock& kc = d.kernel;
    const double z = std::log2(dh());
    const double psi = z <= 6   ? kc.head_width_64
                       : z <= 7 ? kc.head_width_64 + (z - 6) * (1 - kc.head_width_64)
                       : z <= 8 ? 1 + (z - 7) * (kc.head_width_256 - 1)
                                : kc.head_width_256;
    const double best = backward ? kc.attention_backward : kc.attention_forward;
    const double half = backward ? kc.attention_backward_half : kc.attention_forward_half;
    return std::min(1.0, best * keys / (keys + half) * psi * (causal ? kc.attention_causal : 1.0));
  }
  double gemm_eff(double x) const { return d.eff_max * x / (x + d.x_half); }
  // W_f and W_b of one sequence of n tokens.
  std::pair<double, double> attention_work(double n) const {
    const double L = m.blocks, c = double(m.cross_attention_tokens), pair = 2 * (hq() + ho());
    double wf = 0, wb = 0;
    auto add = [&](double flops, double keys, bool causal) {
      if (flops == 0) return;
      wf += flops / attention_eff(false, keys, causal), wb += 2.5 * flops / attention_eff(true, keys, causal);
    };
    if (m.attention == dcp::attention_kind::causal) {
      const double Lw = m.window ? (m.windowed_blocks ? m.windowed_blocks : L) : 0, w = double(m.window);
      const double pairs = n <= w ? n * n / 2 : w * n - w * w / 2;
      add((L - Lw) * pair * n * n / 2, n / 2, true);
      if (Lw > 0) add(Lw * pair * pairs, pairs / n, true);
    } else {
      add(L * pair * n * n, n, false);
    }
    if (c > 0) {
      add(L * pair * n * c, c, false);
      const double proj = L * 2 * double(m.hidden) * (hkv() + hkvv()) * c;
      wf += proj / gemm_eff(c), wb += 2 * proj / gemm_eff(c);
    }
    return {wf, wb};
  }
  double a2a_seconds(double bytes, double g) const {
    const double G = d.gpus_per_node;
    if (g <= G) return bytes / d.bw_intra;
    return bytes * std::max((G - 1) / (g - 1) / d.bw_intra, (g - G) / (g - 1) / d.bw_inter);
  }
  double kernel_time(std::span<const double> ns, int sp, int k) const {
    const double L = m.blocks, h = double(m.hidden);
    double tok = 0, wf = 0, wb = 0;
    for (double n : ns) {
      const auto [f, b] = attention_work(n);
      tok += n, wf += f, wb += b;
    }
    const double x = tok / sp, FV = 2 * double(m.vocab) * h * tok;
    const double gemm_peak = d.precision == dcp::gemm_precision::fp8 ? d.peak * d.kernel.fp8_gemm : d.peak;
    double t = ((3 + k / L) * 2 * Pact() * tok + 3 * FV) / (sp * tp * gemm_peak * gemm_eff(x)) +
               ((1 + k / L) * wf + wb) / (sp * tp * d.peak) + d.tau * (3 * L + k);
    if (sp > 1) {
      const bool whole = kvh() / tp >= sp;
      const double key = whole ? hkv() / tp : dh() * sp, value = whole ? hkvv() / tp : dv() * sp;
      const double w = ((hq() + ho()) / tp + key + value) / 4;
      t += 4 * (2 * L + k) * (d.alpha + a2a_seconds(2 * w * x * (sp - 1) / sp, sp * tp));
    }
    if (tp > 1)
      t += d.kernel.tp_exposed * ((m.cross_attention_tokens ? 6 : 4) * (2 * L + k) + (m.vocab ? 4 : 0)) *
           (d.alpha + 2 * h * x * (tp - 1) / tp / d.bw_intra);
    if (ep > 1)
      t += 2 * (2 * Le() + k * Le() / L) *
           (d.alpha + a2a_seconds(2 * h * m.experts_per_token * x / tp * (ep - 1) / ep, ep * tp));
    if (sh == sharding_kind::zero3) {
      const double D = double(N) / tp, De = D / ep, G = d.gpus_per_node;
      const double V = 2 * ((pb() - pbe()) / tp * (D - 1) / D + pbe() / (tp * ep) * (De - 1) / De);
      const double Vd = 2 * pb_dense() / tp * (D - 1) / D;
      const double VV = 2 * double(m.vocab) * h / tp * (D - 1) / D, bw = N <= G ? d.bw_intra : d.bw_inter;
      const double moe_or_all = m.experts ? Le() : L;
      t = std::max(
          t, 3 * moe_or_all * (d.alpha + V / bw) + 3 * Ld() * (d.alpha + Vd / bw) + 3 * nv() * (d.alpha + VV / bw));
    }
    return t;
  }
  double update() const {
    const double D = double(N) / tp, De = D / ep, G = d.gpus_per_node;
    const double experts = PE() / (tp * ep), dense = (P() - PE()) / tp + pv() / tp;
    double t = 0;
    if (sh != sharding_kind::zero3 && D > 1)
      t = 2 * (d.alpha + 2 * (dense * (D - 1) / D + experts * (De - 1) / De) / (N <= G ? d.bw_intra : d.bw_inter));
    const double owned = sh == sharding_kind::replicated ? dense + experts : (P() + pv()) / N;
    return t + 30 * owned / d.kernel.hbm_bw;
  }
};

// 1-4 sequences of 1-200000 tokens (log-uniform): their lengths and their summed load on `cost`.
std::pair<std::vector<double>, dcp::analytic_load> random_sequences(dcp::xoshiro256ss& g,
                                                                    const dcp::analytic_cost& cost) {
  std::vector<double> ns;
  dcp::analytic_load load{};
  const int b = 1 + static_cast<int>(dcp::uniform_below(g, 4));
  for (int i = 0; i < b; ++i) {
    const auto n = 1 + static_cast<std::int64_t>(std::exp(dcp::uniform01(g) * std::log(200000.0)));
    load = load + cost.load_of(dcp::make_sequence(i, n));
    ns.push_back(static_cast<double>(n));
  }
  return {ns, load};
}

dcp::analytic_cost make(const dcp::transformer_spec& m, int N, int tp, int ep, sharding_kind sh) {
  return dcp::make_analytic_cost(m, dcp::devices::h200_analytic(), {.gpus = N, .tp = tp, .ep = ep, .sharding = sh});
}

// ---- Presets ----

TEST(ModelPresets, NewPresetsHaveTheirRealDimensions) {
  const auto l = dcp::models::llama3_70b();
  EXPECT_EQ(l.blocks, 80);
  EXPECT_EQ(l.hidden, 8192);
  EXPECT_EQ(l.key_value_heads(), 8);
  EXPECT_EQ(l.block_parameters(), 2.0 * 8192 * 8192 + 2.0 * 8192 * 1024 + 3.0 * 8192 * 28672);
  EXPECT_NEAR(l.parameters() / 1e9, 68.45, 0.01);        // in the blocks
  EXPECT_NEAR(l.total_parameters() / 1e9, 70.55, 0.01);  // the card's 70.6B with the embedding and the head
  const auto q = dcp::models::qwen3_30b_a3b();
  EXPECT_EQ(q.query_width(), 4096.0);  // head_dim 128 x 32 heads, wider than h = 2048
  EXPECT_EQ(q.key_value_width(), 512.0);
  EXPECT_NEAR(q.parameters() / 1e9, 29.9, 0.05);                          // in the blocks
  EXPECT_NEAR(q.total_parameters() / 1e9, 30.5, 0.05);                    // the card's 30.5B
  EXPECT_NEAR(q.blocks * q.active_block_parameters() / 1e9, 2.73, 0.01);  // "A3B": 3.3B with embeddings
  const auto w = dcp::models::wan2_1_14b();
  EXPECT_EQ(w.cross_attention_tokens, 512);
  EXPECT_NEAR(w.parameters() / 1e9, 14.0, 0.1);  // 14.05B in the blocks
  for (auto name : {"llama3-70b", "qwen3-30b-a3b", "wan2.1-14b"}) {
    EXPECT_NO_THROW(dcp::validate(dcp::models::preset(name))) << name;
    EXPECT_EQ(dcp::models::preset(name).name, name);
  }
}

// Today's presets and configurations price bit-identically through the extended code paths.
TEST(ModelPresets, ClassicModelsAreUnchangedByTheExtensions) {
  for (auto name : {"cogvideox-5b", "stdit3-xl", "llama3-8b"}) {
    const auto m = dcp::models::preset(name);
    const auto plain = dcp::make_analytic_cost(m, dcp::devices::h200_analytic(), 32);
    const auto layout = make(m, 32, 1, 1, sharding_kind::zero1);
    EXPECT_TRUE(plain.is_classic());
    auto explicit_defaults = m;  // GQA fields spelled out at their defaults
    explicit_defaults.kv_heads = m.heads;
    explicit_defaults.head_dim = m.hidden / m.heads;
    const auto spelled = dcp::make_analytic_cost(explicit_defaults, dcp::devices::h200_analytic(), 32);
    EXPECT_EQ(plain.static_memory(), spelled.static_memory()) << name;
    for (int sp : {1, 2, 4, 8, 16}) {
      const auto l = plain.load_of(dcp::make_sequence(1, 2, 9000)) + plain.load_of(dcp::make_sequence(2, 3, 7000));
      for (int k : {0, 5, m.blocks}) {
        EXPECT_EQ(plain.time(l, sp, k), layout.time(l, sp, k)) << name;
        EXPECT_EQ(plain.memory(l, sp, k), layout.memory(l, sp, k)) << name;
        EXPECT_EQ(plain.time(l, sp, k), spelled.time(spelled.load_of(dcp::make_sequence(1, 2, 9000)) +
                                                         spelled.load_of(dcp::make_sequence(2, 3, 7000)),
                                                     sp, k))
            << name;
      }
    }
  }
}

// ---- The formulas, recomputed independently over random configurations ----

struct config_case {
  dcp::transformer_spec model;
  int N, tp, ep;
  sharding_kind sh;
};

std::vector<config_case> configurations() {
  using dcp::models::preset;
  return {{preset("llama3-70b"), 128, 8, 1, sharding_kind::zero3},
          {preset("llama3-70b"), 64, 4, 1, sharding_kind::zero1},
          {preset("llama3-70b"), 256, 8, 1, sharding_kind::zero1},
          {preset("qwen3-30b-a3b"), 64, 1, 8, sharding_kind::zero1},
          {preset("qwen3-30b-a3b"), 64, 2, 4, sharding_kind::zero3},
          {preset("qwen3-30b-a3b"), 64, 1, 8, sharding_kind::replicated},
          {preset("wan2.1-14b"), 64, 1, 1, sharding_kind::zero3},
          {preset("wan2.1-14b"), 16, 2, 1, sharding_kind::zero1},
          {preset("llama3-8b"), 16, 2, 1, sharding_kind::replicated},
          {preset("llama3-8b"), 8, 1, 1, sharding_kind::zero3}};
}

// Language models with their vocabularies (DESIGN 4.1): untied and tied, full and chunked loss,
// every sharding, tp and ep.
dcp::transformer_spec with_vocabulary(dcp::transformer_spec m, std::int64_t vocab, bool tied, dcp::loss_kind loss) {
  m.vocab = vocab, m.tied_embeddings = tied, m.loss = loss;
  return m;
}

std::vector<config_case> vocabulary_configurations() {
  using dcp::loss_kind;
  using dcp::models::preset;
  auto llama31 = preset("llama3-8b");  // Llama-3.1-8B: 8 key/value heads, 128256 tokens, untied
  llama31.kv_heads = 8;
  const auto full = with_vocabulary(llama31, 128256, false, loss_kind::full);
  const auto chunked = with_vocabulary(llama31, 128256, false, loss_kind::chunked);
  const auto tied = with_vocabulary(preset("llama3-8b"), 256000, true, loss_kind::full);
  return {{full, 8, 1, 1, sharding_kind::zero1},
          {chunked, 16, 2, 1, sharding_kind::zero1},
          {full, 16, 2, 1, sharding_kind::zero3},
          {tied, 16, 1, 1, sharding_kind::zero1},
          {with_vocabulary(preset("llama3-70b"), 128256, false, loss_kind::full), 128, 8, 1, sharding_kind::zero3},
          {with_vocabulary(preset("qwen3-30b-a3b"), 151936, false, loss_kind::chunked), 64, 2, 4, sharding_kind::zero3},
          {with_vocabulary(preset("qwen3-30b-a3b"), 151936, false, loss_kind::full), 64, 1, 8, sharding_kind::zero1}};
}

// Attention and MLP shapes as published models have them (DESIGN 4.1): sliding windows in some or
// all blocks, decoupled value heads with few key/value heads, latent attention (with and without a
// low-rank query), dense blocks in a MoE stack; every sharding, tp and ep.
std::vector<config_case> shape_configurations() {
  using dcp::loss_kind;
  using dcp::models::preset;
  auto gemma = dcp::transformer_spec{"gemma-2-9b", 42, 3584, 16, 14336, 3, dcp::attention_kind::causal, 0};
  gemma.kv_heads = 8, gemma.head_dim = 256, gemma.window = 4096, gemma.windowed_blocks = 21;
  gemma = with_vocabulary(gemma, 256000, true, loss_kind::chunked);
  auto phi = dcp::transformer_spec{"phi-3-mini", 32, 3072, 32, 8192, 3, dcp::attention_kind::causal, 0};
  phi.window = 2047;
  phi = with_vocabulary(phi, 32064, false, loss_kind::full);
  auto deepseek = dcp::transformer_spec{"deepseek-v3", 61, 7168, 128, 18432, 3, dcp::attention_kind::causal, 0};
  deepseek.head_dim = 192, deepseek.value_dim = 128, deepseek.q_rank = 1536, deepseek.kv_rank = 512;
  deepseek.rope_dim = 64, deepseek.experts = 256, deepseek.experts_per_token = 8, deepseek.expert_width = 2048;
  deepseek.shared_experts = 1, deepseek.dense_blocks = 3;
  deepseek = with_vocabulary(deepseek, 129280, false, loss_kind::chunked);
  auto latent = dcp::transformer_spec{"dense-mla", 27, 2048, 16, 10944, 3, dcp::attention_kind::causal, 0};
  latent.head_dim = 192, latent.value_dim = 128, latent.kv_rank = 512, latent.rope_dim = 64;
  latent = with_vocabulary(latent, 102400, false, loss_kind::full);
  auto narrow = dcp::transformer_spec{"value-heads", 24, 2048, 16, 8192, 3, dcp::attention_kind::causal, 0};
  narrow.kv_heads = 2, narrow.head_dim = 128, narrow.value_dim = 64, narrow.window = 1024, narrow.windowed_blocks = 20;
  auto qwen = preset("qwen3-30b-a3b");
  qwen.dense_blocks = 6;  // mlp_only_layers of six blocks
  return {{gemma, 16, 1, 1, sharding_kind::zero1},     {phi, 8, 2, 1, sharding_kind::zero3},
          {deepseek, 256, 1, 8, sharding_kind::zero3}, {deepseek, 256, 2, 16, sharding_kind::zero3},
          {latent, 8, 1, 1, sharding_kind::zero1},     {latent, 16, 2, 1, sharding_kind::replicated},
          {narrow, 16, 1, 1, sharding_kind::zero1},    {qwen, 64, 2, 4, sharding_kind::zero3},
          {qwen, 128, 1, 8, sharding_kind::zero1}};
}

TEST(ModelFormulas, MatchAnIndependentTranscriptionOfDesign) {
  const std::uint64_t seed = 4101;
  std::cout << "[     SEED ] " << seed << "\n";
  dcp::xoshiro256ss g(seed);
  int checked = 0;
  auto all = configurations();
  for (const auto& c : vocabulary_configurations()) all.push_back(c);
  for (const auto& c : shape_configurations()) all.push_back(c);
  for (const auto& c : all) {
    const auto cost = make(c.model, c.N, c.tp, c.ep, c.sh);
    const reference ref{cost.model, cost.device, c.N, c.tp, c.ep, c.sh};
    EXPECT_TRUE(rel_close(cost.static_memory(), ref.static_memory(), 1e-12)) << cost;
    for (int trial = 0; trial < 40; ++trial) {
      const auto [ns, load] = random_sequences(g, cost);
      const int sp = 1 << dcp::uniform_below(g, 4);
      if (!dcp::legal_sp(cost, sp)) continue;
      const int k = static_cast<int>(dcp::uniform_below(g, static_cast<std::uint64_t>(cost.blocks() + 1)));
      EXPECT_TRUE(rel_close(cost.time(load, sp, k), ref.time(ns, sp, k), 1e-12)) << cost << " sp=" << sp << " k=" << k;
      double tok = 0;
      for (double n : ns) tok += n;
      EXPECT_TRUE(rel_close(cost.memory(load, sp, k), ref.memory(tok, sp, k), 1e-12)) << cost;
      // The laws the planners and the lower bound rely on.
      if (cost.memory(load, sp, k) <= cost.capacity()) {
        EXPECT_LE(cost.work_floor(load, sp, k), sp * cost.time(load, sp, k) * (1 + 1e-12)) << cost;
        EXPECT_LE(cost.packed_work_floor(load, sp, k), sp * cost.time(load, sp, k) * (1 + 1e-12)) << cost;
      }
      EXPECT_GE(cost.packed_work_floor(load, sp, k), cost.work_floor(load, sp, k) * (1 - 1e-12)) << cost;
      if (k < cost.blocks()) {
        EXPECT_LE(cost.time(load, sp, k), cost.time(load, sp, k + 1)) << cost;
        EXPECT_GE(cost.memory(load, sp, k), cost.memory(load, sp, k + 1)) << cost;
      }
      ++checked;
    }
  }
  EXPECT_GT(checked, 600);
}

// The kernel clock (DESIGN 4.6) on the same configurations, in bf16 and fp8: the time and the
// per-batch update against the transcription above, and the laws the planners and bounds rely on.
TEST(ModelFormulas, TheKernelClockMatchesAnIndependentTranscription) {
  const std::uint64_t seed = 4111;
  std::cout << "[     SEED ] " << seed << "\n";
  dcp::xoshiro256ss g(seed);
  int checked = 0;
  auto all = configurations();
  for (const auto& c : vocabulary_configurations()) all.push_back(c);
  for (const auto& c : shape_configurations()) all.push_back(c);
  for (const auto precision : {dcp::gemm_precision::bf16, dcp::gemm_precision::fp8}) {
    for (const auto& c : all) {
      auto device = dcp::devices::h200();
      device.precision = precision;
      const auto cost =
          dcp::make_analytic_cost(c.model, device, {.gpus = c.N, .tp = c.tp, .ep = c.ep, .sharding = c.sh});
      const reference ref{cost.model, cost.device, c.N, c.tp, c.ep, c.sh};
      EXPECT_TRUE(rel_close(cost.update_seconds(), ref.update(), 1e-12)) << cost;
      EXPECT_GT(cost.update_seconds(), 0) << cost;
      for (int trial = 0; trial < 20; ++trial) {
        const auto [ns, load] = random_sequences(g, cost);
        const int sp = 1 << dcp::uniform_below(g, 6);
        if (!dcp::legal_sp(cost, sp)) continue;
        const int k = static_cast<int>(dcp::uniform_below(g, static_cast<std::uint64_t>(cost.blocks() + 1)));
        EXPECT_TRUE(rel_close(cost.time(load, sp, k), ref.kernel_time(ns, sp, k), 1e-12))
            << cost << " sp=" << sp << " k=" << k;
        if (cost.memory(load, sp, k) <= cost.capacity()) {
          EXPECT_LE(cost.work_floor(load, sp, k), sp * cost.time(load, sp, k) * (1 + 1e-12)) << cost;
          EXPECT_LE(cost.packed_work_floor(load, sp, k), sp * cost.time(load, sp, k) * (1 + 1e-12)) << cost;
        }
        EXPECT_GE(cost.packed_work_floor(load, sp, k), cost.work_floor(load, sp, k) * (1 - 1e-12)) << cost;
        const double alone = cost.time(load, sp, k);
        EXPECT_EQ(cost.shared_time_floor(load, sp, k, alone, load + load), alone) << cost;
        if (k < cost.blocks()) {
          EXPECT_LE(cost.time(load, sp, k), cost.time(load, sp, k + 1)) << cost;
        }
        ++checked;
      }
    }
  }
  EXPECT_GT(checked, 500);
}

// The kernel clock's shape: attention slower per FLOP on short sequences and narrow heads, its
// backward at 2.5x the forward's FLOPs; the framework's memory off the capacity; fp8 GEMMs faster.
TEST(ModelFormulas, TheKernelClockHasTheKernelsShape) {
  const auto device = dcp::devices::h200();
  const dcp::kernel_clock& kc = device.kernel;
  EXPECT_LT(kc.efficiency(false, 512, 128, false), kc.efficiency(false, 8192, 128, false));
  EXPECT_LT(kc.efficiency(false, 8192, 64, false), kc.efficiency(false, 8192, 128, false));
  EXPECT_LT(kc.efficiency(false, 8192, 128, true), kc.efficiency(false, 8192, 128, false));
  EXPECT_LT(kc.efficiency(true, 8192, 128, false), kc.efficiency(false, 8192, 128, false));
  // The FlashAttention-2 rates it follows (H100 SXM5, head width 128, TFLOP/s) within 3%.
  EXPECT_NEAR(kc.efficiency(false, 512, 128, false) * 989, 309, 309 * 0.03);
  EXPECT_NEAR(kc.efficiency(false, 2048, 128, false) * 989, 362, 362 * 0.03);
  EXPECT_NEAR(kc.efficiency(false, 16384, 128, false) * 989, 370, 370 * 0.03);
  EXPECT_NEAR(kc.efficiency(true, 2048, 128, false) * 989, 291, 291 * 0.03);
  EXPECT_NEAR(kc.efficiency(true, 16384, 128, false) * 989, 322, 322 * 0.03);
  EXPECT_LE(kc.efficiency(false, 1e9, 1e6, false), 1.0);
  EXPECT_DOUBLE_EQ(device.capacity(), device.mem_bytes * device.usable - kc.reserved_bytes);
  const auto llama = dcp::models::llama3_8b();
  const auto bf16 = dcp::make_analytic_cost(llama, device, 8);
  auto fp8_device = device;
  fp8_device.precision = dcp::gemm_precision::fp8;
  const auto fp8 = dcp::make_analytic_cost(llama, fp8_device, 8);
  const auto l = bf16.load_of(dcp::make_sequence(1, 8192));
  EXPECT_LT(fp8.time(l, 1, 0), bf16.time(l, 1, 0));
  EXPECT_GT(l.attention_forward_work, l.attention / kc.attention_forward);  // never above its best rate
  EXPECT_GT(l.attention_backward_work, 2.5 * l.attention / kc.attention_backward * 0.99);
  // Section 4's clock: no kernel work in the loads, no per-batch update.
  const auto analytic = dcp::make_analytic_cost(llama, dcp::devices::h200_analytic(), 8);
  EXPECT_EQ(analytic.load_of(dcp::make_sequence(1, 8192)).attention_forward_work, 0);
  EXPECT_EQ(analytic.update_seconds(), 0);
  EXPECT_FALSE(bf16.is_classic());
  // A device may not carry kernel constants without the clock, nor fp8 without its rate.
  auto half = dcp::devices::h200_analytic();
  half.kernel.tp_exposed = 0.5;
  EXPECT_DCP_ERROR(dcp::validate(half), dcp::errc::invalid_argument, "kernel.attention_forward > 0");
  auto no_fp8 = dcp::devices::h200_analytic();
  no_fp8.precision = dcp::gemm_precision::fp8;
  EXPECT_DCP_ERROR(dcp::validate(no_fp8), dcp::errc::invalid_argument, "no FP8 GEMM rate");
}

TEST(ModelFormulas, TheVocabularyCostsWhatDesignSays) {
  auto llama31 = dcp::models::llama3_8b();
  llama31.kv_heads = 8;
  const auto m = with_vocabulary(llama31, 128256, false, dcp::loss_kind::full);
  // Llama-3.1-8B: 8.03B with the embedding and the head (the model card's count).
  EXPECT_NEAR(m.total_parameters() / 1e9, 8.03, 0.005);
  EXPECT_EQ(m.vocabulary_parameters(), 2.0 * 128256 * 4096);
  auto tied = m;
  tied.tied_embeddings = true;
  EXPECT_EQ(tied.vocabulary_parameters(), 128256.0 * 4096);
  const auto full = make(m, 8, 1, 1, sharding_kind::zero1);
  auto chunked_model = m;
  chunked_model.loss = dcp::loss_kind::chunked;
  const auto chunked = make(chunked_model, 8, 1, 1, sharding_kind::zero1);
  // full: 6 V bytes per token dwarf a block's 34 h; chunked: 4 V / ceil(V / h) = 4 V / 32.
  EXPECT_EQ(full.working_beta(), 6.0 * 128256 / 4096);
  EXPECT_EQ(chunked.working_beta(), full.device.beta);  // 4 V / 32 / h < beta: a block's working set is larger
  const auto l = full.load_of(dcp::make_sequence(1, 32768));
  EXPECT_NEAR(full.memory(l, 1, 32) - chunked.memory(l, 1, 32), (6.0 * 128256 - 34.0 * 4096) * 32768, 1.0);
  EXPECT_LT(full.max_tokens_per_gpu(), chunked.max_tokens_per_gpu());
  // The head's FLOPs are never recomputed: k adds only the blocks' forward.
  const auto plain = make(llama31, 8, 1, 1, sharding_kind::zero1);
  EXPECT_GT(full.time(l, 1, 0), plain.time(l, 1, 0));
  const double head = full.time(l, 1, 0) - plain.time(l, 1, 0), head_k = full.time(l, 1, 32) - plain.time(l, 1, 32);
  EXPECT_TRUE(rel_close(head, head_k, 1e-9)) << head << " " << head_k;
  // The time floor of the lower bounds holds the head too.
  EXPECT_LE(full.work_floor(l, 1, 0), full.time(l, 1, 0));
  EXPECT_GT(full.work_floor(l, 1, 0), plain.work_floor(l, 1, 0));
  // A tied or chunked model without a vocabulary is a contradiction, named.
  auto bad = llama31;
  bad.tied_embeddings = true;
  EXPECT_DCP_ERROR(dcp::validate(bad), dcp::errc::invalid_argument, "need a vocabulary");
  bad = llama31;
  bad.vocab = -5;
  EXPECT_DCP_ERROR(dcp::validate(bad), dcp::errc::invalid_argument, "vocab = -5");
}

TEST(ModelFormulas, LayoutsTradeMemoryForCommunication) {
  const auto m = dcp::models::llama3_70b();
  const auto z1 = make(m, 128, 8, 1, sharding_kind::zero1), z3 = make(m, 128, 8, 1, sharding_kind::zero3);
  EXPECT_LT(z3.static_memory(), z1.static_memory());
  EXPECT_GT(z3.max_tokens_per_gpu(), z1.max_tokens_per_gpu());
  EXPECT_THROW((void)make(m, 128, 1, 1, sharding_kind::zero1), dcp::error);  // 70B zero1 without TP does not fit
  // zero3: a step takes at least its gathers and scatters; a big one hides them.
  const auto small = z3.load_of(dcp::make_sequence(1, 512)), big = z3.load_of(dcp::make_sequence(2, 200000));
  EXPECT_EQ(z3.time(small, 1, 0), z3.step_floor());
  EXPECT_GT(z3.time(big, 1, 80), z3.step_floor());
  EXPECT_EQ(z1.step_floor(), 0.0);
  // TP: the unit count and the per-rank heads.
  EXPECT_EQ(z1.gpus(), 16);
  EXPECT_EQ(z1.gpus_per_node(), 1);
  EXPECT_EQ(z1.heads(), 8);
  // EP: expert weights shard, the all-to-alls cost time.
  const auto q = dcp::models::qwen3_30b_a3b();
  const auto ep1 = make(q, 128, 1, 1, sharding_kind::zero1), ep8 = make(q, 128, 1, 8, sharding_kind::zero1);
  EXPECT_LT(ep8.static_memory(), ep1.static_memory());
  const auto l = ep1.load_of(dcp::make_sequence(1, 8192));
  EXPECT_GT(ep8.time(l, 1, 0), ep1.time(l, 1, 0));
}

// A cross-attention's memory per token is priced (beta_b above beta), and a text whose keys and
// values of one sequence cannot fit the job at all is refused up front (2^31 - 1 text tokens
// "fitted" when nothing of it was priced); so is a block count no model has.
TEST(ModelFormulas, CrossAttentionMemoryIsPricedAndCountsBeyondAnyModelAreRefused) {
  constexpr auto invalid = dcp::errc::invalid_argument;
  auto wan = dcp::models::wan2_1_14b();
  const auto cost = make(wan, 16, 1, 1, sharding_kind::zero1);
  auto no_cross = wan;
  no_cross.cross_attention_tokens = 0;
  const auto without = make(no_cross, 16, 1, 1, sharding_kind::zero1);
  EXPECT_GT(cost.block_beta(), cost.device.beta + 6);  // 2 (h + h + h) / h plus the log-sum-exp
  EXPECT_EQ(without.block_beta(), without.device.beta);
  const auto load = cost.load_of(dcp::make_sequence(0, 32768));
  EXPECT_GT(cost.memory(load, 2, 0) - cost.static_memory(), without.memory(load, 2, 0) - without.static_memory());
  wan.cross_attention_tokens = 2147483647;
  EXPECT_DCP_ERROR((void)make(wan, 16, 1, 1, sharding_kind::zero1), invalid, "cross_attention_tokens = 2147483647",
                   "text tokens fit");
  auto deep = dcp::models::llama3_8b();
  deep.blocks = dcp::max_blocks + 1;
  EXPECT_DCP_ERROR(dcp::validate(deep), invalid, "blocks = 65537 must be in [1, 65536]");
}

TEST(ModelFormulas, LayoutValidationNamesTheValue) {
  constexpr auto invalid = dcp::errc::invalid_argument;
  const auto llama = dcp::models::llama3_70b();
  EXPECT_DCP_ERROR((void)make(llama, 128, 3, 1, sharding_kind::zero3), invalid, "tp = 3");
  auto big_node = dcp::devices::h200_analytic();
  big_node.gpus_per_node = 16;
  EXPECT_DCP_ERROR((void)dcp::make_analytic_cost(
                       llama, big_node, {.gpus = 128, .gpus_per_node = 16, .tp = 16, .sharding = sharding_kind::zero3}),
                   invalid, "kv_heads = 8");
  EXPECT_DCP_ERROR((void)make(llama, 128, 8, 2, sharding_kind::zero3), invalid, "ep = 2 needs a MoE model");
  EXPECT_DCP_ERROR((void)make(dcp::models::qwen3_30b_a3b(), 64, 1, 3, sharding_kind::zero1), invalid, "ep = 3");
  EXPECT_DCP_ERROR((void)dcp::sharding_of("zero2"), invalid, "'zero2'");
  auto bad = dcp::models::qwen3_30b_a3b();
  bad.experts_per_token = 200;
  EXPECT_DCP_ERROR(dcp::validate(bad), invalid, "experts_per_token = 200");
  bad = dcp::models::llama3_70b();
  bad.kv_heads = 7;
  EXPECT_DCP_ERROR(dcp::validate(bad), invalid, "kv_heads = 7");
}

// ---- Golden values: generated by this implementation (DCP_MODELS_GOLDEN_OUT=path writes them) ----

nlohmann::json golden_cases() {
  nlohmann::json cases = nlohmann::json::array();
  const std::vector<std::vector<std::int64_t>> batches = {{4096}, {32768, 8192}, {131072}, {1000, 2000, 3000, 700}};
  for (const auto& c : configurations()) {
    const auto cost = make(c.model, c.N, c.tp, c.ep, c.sh);
    for (std::size_t bi = 0; bi < batches.size(); ++bi) {
      const int sp = 1 << (bi % 3);
      const int k = static_cast<int>(bi) * cost.blocks() / 4;
      dcp::analytic_load load{};
      for (std::size_t i = 0; i < batches[bi].size(); ++i)
        load = load + cost.load_of(dcp::make_sequence(static_cast<std::int64_t>(i), batches[bi][i]));
      cases.push_back({{"model", c.model.name},
                       {"gpus", c.N},
                       {"tp", c.tp},
                       {"ep", c.ep},
                       {"sharding", dcp::to_string(c.sh)},
                       {"tokens", batches[bi]},
                       {"sp", sp},
                       {"checkpointed_blocks", k},
                       {"time_s", cost.time(load, sp, k)},
                       {"memory_bytes", cost.memory(load, sp, k)},
                       {"static_memory_bytes", cost.static_memory()},
                       {"work_floor_unit_s", cost.work_floor(load, sp, k)}});
    }
  }
  return cases;
}

TEST(ModelGolden, MatchesTheStoredValues) {
  if (const char* out = std::getenv("DCP_MODELS_GOLDEN_OUT")) {
    nlohmann::json j;
    j["about"] =
        "Generated by analytic_cost (tests/models/models_test.cpp, DCP_MODELS_GOLDEN_OUT) from the formulas of DESIGN "
        "sections 4.1 and 4.2 on the h200 preset: 1D sequences of the given token counts, sp in planner units (TP "
        "groups), the presets' vocabularies included (llama3-70b 128256, qwen3-30b-a3b 151936, untied, full loss), "
        "time = max(t_comp + t_comm + t_over, [zero3] 3 L (alpha + V_b / bw_dp) + 3 n_V (alpha + V_V / bw_dp)) with "
        "t_comp = ((3 + k/L) F + 3 F_V) / (sp tp peak eff(x)), memory = M_static + ((L-k) beta_b + 2k + beta') h N_tok / "
        "(sp tp), beta' = max(beta_b, 6 V / h), beta_b = beta + (2 (h + w_q + w_o) + 4 H) / h with a cross-attention, "
        "else beta. Match to 1e-9 relative.";
    j["cases"] = golden_cases();
    std::ofstream(out) << j.dump(1) << "\n";
  }
  std::ifstream in(DCP_TEST_MODELS_JSON);
  ASSERT_TRUE(in) << "cannot open " << DCP_TEST_MODELS_JSON;
  const auto stored = nlohmann::json::parse(in).at("cases");
  const auto fresh = golden_cases();
  ASSERT_EQ(stored.size(), fresh.size());
  for (std::size_t i = 0; i < stored.size(); ++i) {
    SCOPED_TRACE("case " + std::to_string(i) + " " + stored[i].dump());
    for (const char* f : {"model", "gpus", "tp", "ep", "sharding", "tokens", "sp", "checkpointed_blocks"})
      EXPECT_EQ(stored[i].at(f), fresh[i].at(f)) << f;
    for (const char* f : {"time_s", "memory_bytes", "static_memory_bytes", "work_floor_unit_s"})
      EXPECT_TRUE(rel_close(stored[i].at(f).get<double>(), fresh[i].at(f).get<double>(), 1e-9)) << f;
  }
}

// ---- config.json ----

const char* llama70_config = R"({
  "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_act": "silu",
  "hidden_size": 8192, "intermediate_size": 28672, "num_attention_heads": 64, "num_hidden_layers": 80,
  "num_key_value_heads": 8, "rope_theta": 500000.0, "torch_dtype": "bfloat16", "vocab_size": 128256})";
const char* qwen3_config = R"({
  "architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe", "hidden_act": "silu", "head_dim": 128,
  "hidden_size": 2048, "intermediate_size": 6144, "moe_intermediate_size": 768, "num_attention_heads": 32,
  "num_experts": 128, "num_experts_per_tok": 8, "num_hidden_layers": 48, "num_key_value_heads": 4,
  "norm_topk_prob": true, "decoder_sparse_step": 1, "mlp_only_layers": [], "vocab_size": 151936,
  "tie_word_embeddings": false})";
const char* wan_config = R"({"model_type": "t2v", "dim": 5120, "ffn_dim": 13824, "num_heads": 40, "num_layers": 40,
  "text_len": 512, "in_dim": 16, "out_dim": 16, "freq_dim": 256})";

dcp::transformer_spec parse(const std::string& text) {
  std::istringstream in(text);
  return dcp::models::from_config(in, "test-config.json");
}

TEST(ModelConfig, ReadsTheConfigsOfTheNewPresets) {
  auto l = parse(llama70_config);
  EXPECT_EQ(l.name, "llama");
  l.name = "llama3-70b";
  EXPECT_EQ(l, dcp::models::llama3_70b());
  auto q = parse(qwen3_config);
  q.name = "qwen3-30b-a3b";
  EXPECT_EQ(q, dcp::models::qwen3_30b_a3b());
  auto w = parse(wan_config);
  w.name = "wan2.1-14b";
  EXPECT_EQ(w, dcp::models::wan2_1_14b());
  // A name given wins; a file path is read too.
  EXPECT_EQ(parse(R"({"name": "mine", "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
                      "intermediate_size": 256})")
                .name,
            "mine");
  EXPECT_EQ(parse(R"({"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 256,
                      "hidden_act": "gelu"})")
                .mlp_matrices,
            2);
}

TEST(ModelConfig, MissingOrInconsistentFieldsAreNamed) {
  struct bad {
    std::string text, needle;
  };
  const bad cases[] = {
      {R"({"num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 256})",
       "missing field 'hidden_size'"},
      {R"({"hidden_size": 64, "num_attention_heads": 4, "intermediate_size": 256})",
       "missing field 'num_hidden_layers'"},
      {R"({"hidden_size": 64, "num_hidden_layers": 2, "intermediate_size": 256})", "'num_attention_heads'"},
      {R"({"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4})", "'intermediate_size'"},
      {R"({"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 5, "intermediate_size": 256})",
       "num_attention_heads = 5 does not divide hidden_size = 64"},
      {R"({"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 3,
           "intermediate_size": 256})",
       "num_key_value_heads = 3"},
      {R"({"hidden_size": 64, "num_hidden_layers": 2.5, "num_attention_heads": 4, "intermediate_size": 256})",
       "'num_hidden_layers' = 2.5"},
      {R"({"hidden_size": "64", "num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 256})",
       "'hidden_size' = \"64\""},
      {R"({"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 256,
           "num_experts": 8, "moe_intermediate_size": 32})",
       "missing field 'num_experts_per_tok'"},
      {R"({"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 256,
           "num_experts": 8, "num_experts_per_tok": 9, "moe_intermediate_size": 32})",
       "num_experts_per_tok = 9"},
      {R"({"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 256,
           "num_experts_per_tok": 2})",
       "num_experts is missing"},
      {R"({"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 256,
           "attention": "sliding"})",
       "attention = 'sliding'"},
      {R"({"hidden_size": 64, "num_hidden_layers": 3, "num_attention_heads": 4, "intermediate_size": 256,
           "attention": "factorized_2d"})",
       "even number of blocks"},
      {R"({"hidden_size": 64, "num_hidden_layers": 2147483647, "num_attention_heads": 4, "intermediate_size": 256})",
       "blocks = 2147483647 must be in [1, 65536]"},
      {R"({"hidden_size": 64, "num_layers": 2147483647, "num_single_layers": 2147483647, "num_attention_heads": 4,
           "intermediate_size": 256})",
       "num_layers = 2147483647 and num_single_layers = 2147483647 make more than 65536 blocks"},
      {R"({"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 256,
           "kv_lora_rank": 16, "qk_nope_head_dim": 16})",
       "missing field 'qk_rope_head_dim'"},
      {R"({"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 256,
           "sliding_window": 8, "layer_types": ["sliding_attention"]})",
       "layer_types lists 1 layers"},
      {R"({"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 256,
           "num_experts": 8, "num_experts_per_tok": 2, "moe_intermediate_size": 32, "first_k_dense_replace": 2})",
       "leave no MoE block"},
      {R"({"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 256,
           "num_experts": 8, "num_experts_per_tok": 2, "moe_intermediate_size": 32, "mlp_only_layers": [5]})",
       "'mlp_only_layers' = 5"},
      {R"([1, 2])", "not a JSON object"},
      {R"({"hidden_size": 64,)", "not valid JSON"},
  };
  for (const auto& c : cases)
    EXPECT_DCP_ERROR((void)parse(c.text), dcp::errc::parse_error, c.needle, "test-config.json") << "input: " << c.text;
  EXPECT_DCP_ERROR((void)dcp::models::from_config(std::filesystem::path("/nonexistent/config.json")),
                   dcp::errc::io_error, "/nonexistent/config.json");
}

// Windows and dense blocks as each family's config states them.
TEST(ModelConfig, LayerPatternsCountTheirBlocks) {
  const std::string base =
      R"("hidden_size": 256, "num_hidden_layers": 12, "num_attention_heads": 4, "intermediate_size": 512)";
  const auto read = [&](const std::string& extra) { return parse("{" + base + ", " + extra + "}"); };
  EXPECT_EQ(read(R"("sliding_window": 64)").window_blocks(), 12);                     // Mistral, Phi-3: every block
  EXPECT_EQ(read(R"("sliding_window": 64, "use_sliding_window": false)").window, 0);  // Qwen's default
  const auto qwen = read(R"("sliding_window": 64, "use_sliding_window": true, "max_window_layers": 8)");
  EXPECT_EQ(qwen.window_blocks(), 4);  // blocks 8..11
  EXPECT_EQ(read(R"("model_type": "gemma2", "sliding_window": 64)").window_blocks(), 6);
  EXPECT_EQ(read(R"("model_type": "gemma3_text", "sliding_window": 64)").window_blocks(), 10);  // 5 of every 6
  EXPECT_EQ(read(R"("model_type": "gemma3_text", "sliding_window": 64, "sliding_window_pattern": 4)").window_blocks(),
            9);
  const auto listed = read(R"("sliding_window": 64, "layer_types": ["sliding_attention", "full_attention",
      "sliding_attention", "full_attention", "full_attention", "full_attention", "full_attention", "full_attention",
      "full_attention", "full_attention", "full_attention", "full_attention"])");
  EXPECT_EQ(listed.window_blocks(), 2);
  EXPECT_EQ(read(R"("sliding_window": 64, "layer_types": ["full_attention", "full_attention", "full_attention",
      "full_attention", "full_attention", "full_attention", "full_attention", "full_attention", "full_attention",
      "full_attention", "full_attention", "full_attention"])")
                .window,
            0);
  const std::string moe = R"("num_experts": 8, "num_experts_per_tok": 2, "moe_intermediate_size": 64, )";
  EXPECT_EQ(read(moe + R"("first_k_dense_replace": 3)").dense_blocks, 3);
  EXPECT_EQ(read(moe + R"("first_k_dense_replace": 1, "moe_layer_freq": 2)").dense_blocks, 7);  // MoE at 2, 4, .., 10
  EXPECT_EQ(read(moe + R"("decoder_sparse_step": 2)").dense_blocks, 6);                         // MoE at 1, 3, .., 11
  EXPECT_EQ(read(moe + R"("mlp_only_layers": [0, 11])").dense_blocks, 2);
  const auto mixed = read(moe + R"("mlp_only_layers": [0, 11])");
  EXPECT_EQ(mixed.parameters(), 2 * mixed.dense_block_parameters() + 10 * mixed.block_parameters());
  // A DeepSeek-V2-Lite style query of full rank: no q_lora_rank.
  const auto lite = read(R"("kv_lora_rank": 128, "qk_nope_head_dim": 64, "qk_rope_head_dim": 32, "v_head_dim": 64)");
  EXPECT_EQ(lite.q_rank, 0);
  EXPECT_EQ(lite.head_dim, 96);
  EXPECT_EQ(lite.value_dim, 64);
  EXPECT_EQ(lite.self_attention_parameters(),
            256.0 * 4 * 96 + 256.0 * (128 + 32) + 128.0 * 4 * (64 + 64) + 4 * 64 * 256.0);
}

// Published config files (tests/data/configs, each as its model's repository publishes it; the
// diffusers ones as model folders with transformer/config.json) read as the models are.
dcp::models::model_config published(const std::string& folder) {
  return dcp::models::read_config(std::filesystem::path(DCP_TEST_CONFIGS) / folder);
}
bool says(const dcp::models::model_config& c, const std::string& needle) {
  return std::any_of(c.unpriced.begin(), c.unpriced.end(),
                     [&](const std::string& u) { return u.find(needle) != std::string::npos; });
}

TEST(ModelConfig, PublishedDiffusersTransformersReadAsTheirPresets) {
  auto cog = published("cogvideox-5b");  // no intermediate_size: diffusers' 4 x width, joint text of 226
  EXPECT_EQ(cog.model.name, "cogvideox-5b");
  EXPECT_EQ(cog.model, dcp::models::cogvideox_5b());
  EXPECT_TRUE(cog.unpriced.empty());
  auto wan = published("wan2.1-t2v-14b-diffusers");  // no text_len: Wan's 512 cross-attended, full attention
  wan.model.name = "wan2.1-14b";
  EXPECT_EQ(wan.model, dcp::models::wan2_1_14b());
  EXPECT_NEAR(wan.model.blocks * wan.model.block_parameters() / 1e9, 14.0, 0.28);  // the card's 14B, within 2%
  const auto hunyuan = published("hunyuanvideo");  // 20 dual- and 40 single-stream blocks, 256 joint text tokens
  EXPECT_EQ(hunyuan.model.blocks, 60);
  EXPECT_EQ(hunyuan.model.mlp_width, 4 * 3072);
  EXPECT_EQ(hunyuan.model.text_tokens, 256);
  EXPECT_EQ(hunyuan.model.attention, dcp::attention_kind::full);
  EXPECT_TRUE(says(hunyuan, "dual-stream"));
}

TEST(ModelConfig, PublishedLanguageModelsReadRightAndSayWhatIsNotPriced) {
  const auto gemma = published("gemma-2-9b");  // GeGLU: gelu_pytorch_tanh, yet three matrices
  EXPECT_EQ(gemma.model.mlp_matrices, 3);
  EXPECT_EQ(gemma.model.kv_heads, 8);
  EXPECT_EQ(gemma.model.head_dim, 256);
  EXPECT_EQ(gemma.model.attention, dcp::attention_kind::causal);
  // Gemma-2 windows every other block from the first: 21 of 42 at 4096 tokens.
  EXPECT_EQ(gemma.model.window, 4096);
  EXPECT_EQ(gemma.model.windowed_blocks, 21);
  EXPECT_TRUE(gemma.unpriced.empty());
  EXPECT_FALSE(says(gemma, "vocab_size"));  // priced now
  // The file gives no tie_word_embeddings: Gemma's default ties the head to the embedding.
  EXPECT_EQ(gemma.model.vocab, 256000);
  EXPECT_TRUE(gemma.model.tied_embeddings);
  EXPECT_EQ(gemma.max_positions, 8192);
  // Blocks plus the one embedding matrix: the card's 9.24B within 2%.
  EXPECT_NEAR(gemma.model.total_parameters() / 1e9, 9.24, 0.18);
  const auto phi = published("phi-3-mini-4k-instruct");
  EXPECT_EQ(phi.model.mlp_matrices, 3);
  EXPECT_EQ(phi.model.window, 2047);  // every block
  EXPECT_EQ(phi.model.window_blocks(), 32);
  EXPECT_TRUE(phi.unpriced.empty());
  EXPECT_EQ(phi.model.vocab, 32064);
  EXPECT_FALSE(phi.model.tied_embeddings);
  EXPECT_EQ(phi.max_positions, 4096);
  EXPECT_NEAR(phi.model.total_parameters() / 1e9, 3.82, 0.08);  // the card's 3.8B
  const auto llama = published("llama-3.1-8b");
  EXPECT_EQ(llama.model.kv_heads, 8);
  EXPECT_EQ(llama.model.mlp_matrices, 3);
  EXPECT_EQ(llama.model.vocab, 128256);
  EXPECT_FALSE(llama.model.tied_embeddings);
  EXPECT_EQ(llama.model.loss, dcp::loss_kind::full);
  EXPECT_EQ(llama.max_positions, 131072);
  EXPECT_NEAR(llama.model.total_parameters() / 1e9, 8.03, 0.005);  // the card's 8.03B
  EXPECT_TRUE(llama.unpriced.empty());                             // every field that changes its cost is priced
  const auto deepseek = published("deepseek-v3");
  // Latent attention: heads of 128 + 64 for queries and keys, 128 for values, from a 512 latent
  // and a 1536 query rank; three dense blocks before 58 MoE ones. Only MTP is left unpriced.
  EXPECT_EQ(deepseek.model.kv_rank, 512);
  EXPECT_EQ(deepseek.model.q_rank, 1536);
  EXPECT_EQ(deepseek.model.rope_dim, 64);
  EXPECT_EQ(deepseek.model.head_dim, 192);
  EXPECT_EQ(deepseek.model.value_dim, 128);
  EXPECT_EQ(deepseek.model.kv_heads, 0);  // num_key_value_heads = heads
  EXPECT_EQ(deepseek.model.dense_blocks, 3);
  EXPECT_EQ(deepseek.model.mlp_width, 18432);
  ASSERT_EQ(deepseek.unpriced.size(), 1u);
  EXPECT_TRUE(says(deepseek, "num_nextn_predict_layers = 1"));
  EXPECT_EQ(deepseek.model.vocab, 129280);
  EXPECT_EQ(deepseek.model.experts, 256);
  EXPECT_EQ(deepseek.model.shared_experts, 1);
  // The card's 671B in all (the MTP module's 14B aside), 37B activated, each within 2%.
  EXPECT_NEAR(deepseek.model.total_parameters() / 1e9, 671, 13.4);
  EXPECT_NEAR((deepseek.model.active_parameters() + deepseek.model.vocabulary_parameters()) / 1e9, 37, 0.74);
  // A block's attention: Q 7168 x 1536 + 1536 x 128 x 192, K/V 7168 x 576 + 512 x 128 x 256, O 128 x 128 x 7168.
  EXPECT_EQ(deepseek.model.self_attention_parameters(),
            7168.0 * 1536 + 1536.0 * 128 * 192 + 7168.0 * 576 + 512.0 * 128 * 256 + 128.0 * 128 * 7168);
}

// A multimodal file: the language model of its text_config, with Gemma3TextConfig's defaults
// for what the nested config omits, and the vision encoder said.
TEST(ModelConfig, NestedTextConfigsReadTheirLanguageModel) {
  const auto gemma3 = published("gemma-3-4b-it");
  EXPECT_EQ(gemma3.model.blocks, 34);
  EXPECT_EQ(gemma3.model.hidden, 2560);
  EXPECT_EQ(gemma3.model.heads, 8);       // the family default
  EXPECT_EQ(gemma3.model.kv_heads, 4);    // the family default
  EXPECT_EQ(gemma3.model.head_dim, 256);  // the family default
  EXPECT_EQ(gemma3.model.vocab, 262208);  // the family default
  EXPECT_TRUE(gemma3.model.tied_embeddings);
  EXPECT_EQ(gemma3.model.window, 1024);
  EXPECT_EQ(gemma3.model.windowed_blocks, 29);  // all but every sixth block
  EXPECT_EQ(gemma3.max_positions, 131072);
  ASSERT_EQ(gemma3.unpriced.size(), 1u);
  EXPECT_EQ(gemma3.unpriced.front(), "text_config: its language model is priced; vision_config is not");
  // The Gemma 3 report's 4B: 3,209M non-embedding and 675M embedding parameters (the 417M vision encoder aside).
  EXPECT_NEAR(gemma3.model.parameters() / 1e9, 3.209, 0.064);
  EXPECT_NEAR(gemma3.model.vocabulary_parameters() / 1e9, 0.675, 0.0135);
  // A nested config that omits a field without a known family default names it.
  EXPECT_DCP_ERROR((void)parse(R"({"text_config": {"hidden_size": 64, "num_hidden_layers": 2}})"),
                   dcp::errc::parse_error, "num_attention_heads", "text_config");
}

TEST(ModelConfig, FoldersAndUnknownDiffusersClassesAreClearErrors) {
  // A folder with neither config.json nor transformer/config.json.
  const auto empty = std::filesystem::temp_directory_path() / "dcp-models-test-empty-folder";
  std::filesystem::create_directories(empty);
  EXPECT_DCP_ERROR((void)dcp::models::read_config(empty), dcp::errc::io_error, "is a folder with no config.json",
                   empty.string());
  std::filesystem::remove(empty);
  EXPECT_DCP_ERROR((void)parse(R"({"_class_name": "FluxTransformer2DModel", "num_layers": 19, "num_attention_heads": 24,
                                   "attention_head_dim": 128})"),
                   dcp::errc::parse_error, "FluxTransformer2DModel", "add \"attention\"");
  // Named, it reads (a file may state what the reader cannot know).
  const auto flux = parse(R"({"_class_name": "FluxTransformer2DModel", "num_layers": 19, "num_attention_heads": 24,
                               "attention_head_dim": 128, "attention": "full", "text_tokens": 512})");
  EXPECT_EQ(flux.text_tokens, 512);
  EXPECT_EQ(flux.mlp_width, 4 * 3072);
  for (const char* ratio : {"-1", "1e300", "\"4\""})
    EXPECT_DCP_ERROR((void)parse(std::string(R"({"_class_name": "HunyuanVideoTransformer3DModel", "num_layers": 2,
                                              "num_attention_heads": 4, "attention_head_dim": 16, "mlp_ratio": )") +
                                 ratio + "}"),
                     dcp::errc::parse_error, "mlp_ratio")
        << ratio;
}

// ---- Plan laws on TP units, zero3 and expert parallelism ----

void check_gpu_layout(const dcp::plan& p, const dcp::analytic_cost& cost, const char* what) {
  const dcp::parallel_layout& units = cost.layout();
  const int G = units.gpus_per_node;
  for (const auto& st : p.steps) {
    const auto gpus = units.gpus_of(st.ranks);
    EXPECT_EQ(gpus.size, st.sp() * units.tp) << what;
    EXPECT_EQ(gpus.first % gpus.size, 0) << what << ": GPU block " << gpus << " not aligned";
    EXPECT_LE(gpus.end(), units.gpus) << what;
    if (gpus.size <= G) {
      EXPECT_EQ(gpus.first / G, (gpus.end() - 1) / G) << what << ": " << gpus << " straddles nodes";
    }
    for (int r = gpus.first; r < gpus.end(); ++r) {
      EXPECT_TRUE(st.ranks.contains(units.unit_of(r))) << what;
      EXPECT_EQ(units.tp_group_of(r).first / units.tp, units.unit_of(r)) << what;
    }
  }
}

TEST(ModelPlans, EveryPlannerKeepsThePlanLawsOnNewLayouts) {
  const std::uint64_t seed = 4102;
  std::cout << "[     SEED ] " << seed << "\n";
  dcp::xoshiro256ss g(seed);
  using dcp::models::preset;
  const config_case layouts[] = {{preset("llama3-70b"), 64, 8, 1, sharding_kind::zero3},
                                 {preset("llama3-70b"), 32, 4, 1, sharding_kind::zero1},
                                 {preset("wan2.1-14b"), 32, 1, 1, sharding_kind::zero3},
                                 {preset("qwen3-30b-a3b"), 32, 1, 8, sharding_kind::zero1},
                                 {preset("qwen3-30b-a3b"), 16, 2, 4, sharding_kind::zero3},
                                 {preset("llama3-8b"), 16, 2, 1, sharding_kind::replicated}};
  int plans = 0;
  for (const auto& c : layouts) {
    const auto cost = make(c.model, c.N, c.tp, c.ep, c.sh);
    const double longest = 0.95 * static_cast<double>(dcp::largest_feasible_tokens(cost));
    for (int trial = 0; trial < 3; ++trial) {
      std::vector<dcp::sequence> batch;
      const int count = 1 + static_cast<int>(dcp::uniform_below(g, 48));
      for (int i = 0; i < count; ++i) {
        const double n = std::exp(dcp::uniform01(g) * std::log(std::max(2.0, longest)));
        batch.push_back(dcp::make_sequence(i * 7 + trial, std::max<std::int64_t>(1, static_cast<std::int64_t>(n))));
      }
      const std::span<const dcp::sequence> b(batch);
      const dcp::plan ps[] = {dcp::dcp_planner{}.plan(cost, b), dcp::tune(dcp::bucket_planner{}, cost, b).plan(cost, b),
                              dcp::tune(dcp::packed_planner{}, cost, b).plan(cost, b),
                              dcp::tune(dcp::dynamic_cp_planner{}, cost, b).plan(cost, b)};
      const double bound = dcp::joint_lower_bound(cost, b);
      for (const auto& p : ps) {
        const auto v = dcp::plan_violations(p, b, cost);
        std::string text;
        for (const auto& s : v) text += s + "\n";
        EXPECT_TRUE(v.empty()) << p.method << " on " << cost << ":\n" << text;
        check_gpu_layout(p, cost, p.method.c_str());
        EXPECT_LE(bound, p.makespan_s * (1 + 1e-9)) << p.method << " beats the lower bound on " << cost;
        // zero3: every step pays at least its weight gathers.
        for (const auto& st : p.steps) EXPECT_GE(st.time_s, cost.step_floor() * (1 - 1e-12));
        ++plans;
      }
    }
  }
  EXPECT_EQ(plans, 6 * 3 * 4);
}

}  // namespace

// Every field that changes cost round-trips through the JSON every dcp document uses.
TEST(ModelJson, TheVocabularyRoundTrips) {
  auto m = with_vocabulary(dcp::models::llama3_70b(), 128256, true, dcp::loss_kind::chunked);
  const auto j = dcp::spec_to_json(m);
  EXPECT_EQ(j.at("vocab"), 128256);
  EXPECT_EQ(j.at("tied_embeddings"), true);
  EXPECT_EQ(j.at("loss"), "chunked");
  const dcp::json_reader r("test: ");
  EXPECT_EQ(dcp::spec_from_json(nlohmann::json::parse(j.dump()), r), m);
  // A model without a vocabulary writes none of the three (older readers see the same file).
  const auto plain = dcp::spec_to_json(dcp::models::wan2_1_14b());
  EXPECT_FALSE(plain.contains("vocab") || plain.contains("tied_embeddings") || plain.contains("loss"));
  auto bad = nlohmann::json::parse(j.dump());
  bad["loss"] = "fused";
  EXPECT_DCP_ERROR((void)dcp::spec_from_json(bad, r), dcp::errc::parse_error, "model.loss = 'fused'");
  bad["loss"] = "full";
  bad["tied_embeddings"] = 1;
  EXPECT_DCP_ERROR((void)dcp::spec_from_json(bad, r), dcp::errc::parse_error, "model.tied_embeddings");
}

TEST(ModelJson, EveryShapeFieldRoundTrips) {
  const dcp::json_reader r("test: ");
  for (const auto& c : shape_configurations()) {
    const auto j = dcp::spec_to_json(c.model);
    EXPECT_EQ(dcp::spec_from_json(nlohmann::json::parse(j.dump()), r), c.model) << j.dump();
  }
  // A model without them writes none (older readers see the same file).
  const auto plain = dcp::spec_to_json(dcp::models::llama3_70b());
  for (const char* key : {"window", "windowed_blocks", "value_dim", "q_rank", "kv_rank", "rope_dim", "dense_blocks"})
    EXPECT_FALSE(plain.contains(key)) << key;
}

// What the shapes cost: a window makes attention linear beyond it; latent attention and dense
// blocks count what their layers hold; contradictions are named.
TEST(ModelFormulas, WindowsLatentAttentionAndDenseBlocksCostWhatDesignSays) {
  auto m = dcp::transformer_spec{"windowed", 32, 3072, 32, 8192, 3, dcp::attention_kind::causal, 0};
  const auto full = make(m, 8, 1, 1, sharding_kind::zero1);
  m.window = 2048;
  const auto windowed = make(m, 8, 1, 1, sharding_kind::zero1);
  const double p = 4 * 3072.0;
  // Within the window nothing changes; beyond it each query sees w keys.
  EXPECT_EQ(windowed.load_of(dcp::make_sequence(1, 2048)).attention,
            full.load_of(dcp::make_sequence(1, 2048)).attention);
  EXPECT_EQ(windowed.load_of(dcp::make_sequence(1, 100000)).attention, 32 * p * (2048.0 * 100000 - 2048.0 * 2048 / 2));
  const auto a1 = windowed.load_of(dcp::make_sequence(1, 50000)).attention;
  const auto a2 = windowed.load_of(dcp::make_sequence(1, 100000)).attention;
  EXPECT_NEAR(a2 - a1, 32 * p * 2048 * 50000, 1.0);  // linear
  EXPECT_TRUE(windowed.has_fitted_form());
  EXPECT_FALSE(windowed.is_classic());
  m.windowed_blocks = 16;  // half the blocks: halfway between
  const auto half = make(m, 8, 1, 1, sharding_kind::zero1);
  const auto s = dcp::make_sequence(1, 100000);
  EXPECT_NEAR(half.load_of(s).attention, (full.load_of(s).attention + windowed.load_of(s).attention) / 2, 1e3);
  // Latent attention holds fewer parameters than the heads it serves, and its Ulysses exchange
  // carries 192-wide queries and keys, 128-wide values and outputs.
  auto mla = dcp::transformer_spec{"mla", 4, 2048, 16, 8192, 3, dcp::attention_kind::causal, 0};
  mla.head_dim = 192, mla.value_dim = 128, mla.kv_rank = 512, mla.rope_dim = 64;
  const auto latent = make(mla, 8, 1, 1, sharding_kind::zero1);
  EXPECT_EQ(latent.all_to_all_width(4), (16 * 192 + 16 * 128 + 16 * 192 + 16 * 128) / 4.0);  // q, o, k, v
  EXPECT_EQ(mla.pair_flops(), 2 * (16 * 192.0 + 16 * 128.0));
  EXPECT_LT(mla.self_attention_parameters(), 2048.0 * (16 * 192) * 2 + 2048.0 * (16 * 128) * 2);
  // Dense blocks: parameters, active FLOPs and zero3's largest gathered block.
  auto q = dcp::models::qwen3_30b_a3b();
  const double all_moe = q.parameters();
  q.dense_blocks = 6;
  EXPECT_EQ(q.parameters(), all_moe - 6 * (q.block_parameters() - q.dense_block_parameters()));
  EXPECT_EQ(q.active_parameters(), 42 * q.active_block_parameters() + 6 * q.dense_block_parameters());
  // Contradictions.
  auto bad = dcp::models::llama3_70b();
  bad.windowed_blocks = 4;
  EXPECT_DCP_ERROR(dcp::validate(bad), dcp::errc::invalid_argument, "windowed_blocks needs a window");
  bad = dcp::models::wan2_1_14b();
  bad.window = 512;
  EXPECT_DCP_ERROR(dcp::validate(bad), dcp::errc::invalid_argument, "a window needs causal attention");
  bad = dcp::models::llama3_70b();
  bad.dense_blocks = 2;
  EXPECT_DCP_ERROR(dcp::validate(bad), dcp::errc::invalid_argument, "dense_blocks = 2 needs a MoE model");
  bad = mla;
  bad.kv_heads = 4;
  EXPECT_DCP_ERROR(dcp::validate(bad), dcp::errc::invalid_argument, "kv_heads = 4 must be 0 or heads");
  bad = dcp::models::llama3_70b();
  bad.rope_dim = 64;
  EXPECT_DCP_ERROR(dcp::validate(bad), dcp::errc::invalid_argument, "rope_dim = 64 needs latent attention");
}

// The optional fields' one table (DCP_MODEL_OPTIONAL_FIELDS): each field set away from its default
// round-trips through JSON, and a user's model type that has it hands it to the cost model.
namespace {

template <class T>
T away_from_default(T) {
  if constexpr (std::is_same_v<T, dcp::loss_kind>)
    return dcp::loss_kind::chunked;
  else if constexpr (std::is_same_v<T, bool>)
    return true;
  else
    return T{3};
}

// A user's model with the required fields, and (`Optional`) every field of the table.
template <bool Optional>
struct user_model;
template <>
struct user_model<false> {
  using policy_concept = dcp::model_spec_tag;
  int blocks = 4;
  std::int64_t hidden = 64, mlp_width = 256;
  int heads = 4, mlp_matrices = 2;
  dcp::attention_kind attention = dcp::attention_kind::causal;
  std::int64_t text_tokens = 0;
  double block_parameters() const { return 4.0 * hidden * hidden + mlp_matrices * hidden * mlp_width; }
  double parameters() const { return blocks * block_parameters(); }
};
template <>
struct user_model<true> : user_model<false> {
  std::string name = "mine";
#define DCP_TEST_MEMBER(f) decltype(dcp::transformer_spec::f) f = away_from_default(decltype(dcp::transformer_spec::f){});
  DCP_MODEL_OPTIONAL_FIELDS(DCP_TEST_MEMBER)
#undef DCP_TEST_MEMBER
};

}  // namespace

TEST(ModelOptionalFields, EveryFieldOfTheTableRoundTripsAndIsReadFromAUsersModel) {
  const dcp::json_reader r("test: ");
  const dcp::transformer_spec defaults;
  int fields = 0;
#define DCP_TEST_FIELD(f)                                                                                 \
  {                                                                                                       \
    dcp::transformer_spec m = dcp::models::llama3_8b();                                                    \
    m.f = away_from_default(m.f);                                                                         \
    const auto j = dcp::spec_to_json(m);                                                                  \
    EXPECT_TRUE(j.contains(#f)) << #f << " is not written away from its default";                         \
    EXPECT_EQ(dcp::spec_from_json(nlohmann::json::parse(j.dump()), r), m) << #f << ": " << j.dump();      \
    EXPECT_FALSE(dcp::spec_to_json(dcp::models::llama3_8b()).contains(#f) && dcp::models::llama3_8b().f == defaults.f) \
        << #f << " is written at its default";                                                           \
    ++fields;                                                                                             \
  }
  DCP_MODEL_OPTIONAL_FIELDS(DCP_TEST_FIELD)
#undef DCP_TEST_FIELD
  EXPECT_EQ(fields, 17);
  static_assert(!dcp::has_optional_kv_heads<user_model<false>> && dcp::has_optional_kv_heads<user_model<true>>);
  const auto plain = dcp::to_transformer_spec(user_model<false>{});
  const auto full = dcp::to_transformer_spec(user_model<true>{});
  EXPECT_EQ(full.name, "mine");
#define DCP_TEST_READ(f)                                                            \
  EXPECT_EQ(plain.f, defaults.f) << #f << " of a model without it";                 \
  EXPECT_EQ(full.f, away_from_default(defaults.f)) << #f << " of a model with it";
  DCP_MODEL_OPTIONAL_FIELDS(DCP_TEST_READ)
#undef DCP_TEST_READ
}
