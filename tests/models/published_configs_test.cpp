// Published config.json files (tests/data/configs/<folder>/config.json, each as its model's
// Hugging Face repository publishes it) read by dcp::models::read_config: the parameters dcp
// prices against the count its model card gives, and the fields each file sets.

#include <cctype>
#include <cstdint>
#include <filesystem>
#include <ostream>
#include <string>

#include <gtest/gtest.h>

#include <dcp/model/config.hpp>
#include <dcp/model/transformer.hpp>

#ifndef DCP_TEST_CONFIGS
#error "DCP_TEST_CONFIGS must name tests/data/configs"
#endif

namespace {

/// One published model: its folder, what its model card says, and what its config.json must read as.
struct published_model {
  const char* folder;
  const char* card;                 // the model card's count, and where it is published
  double card_billions;             // total parameters (a MoE model's total, not its active ones)
  double card_blocks_billions = 0;  // non-embedding parameters; 0 where the card gives none
  double card_active_billions = 0;  // parameters activated per token (MoE); 0 for a dense model
  int blocks, heads;
  std::int64_t hidden;
  int kv_heads = 0;           // transformer_spec::kv_heads: 0 when every head has its own keys and values
  std::int64_t head_dim = 0;  // transformer_spec::head_dim: 0 when it is hidden / heads
  int mlp_matrices = 3;       // 3 gated (SwiGLU), 2 plain
  dcp::attention_kind attention = dcp::attention_kind::causal;
  std::int64_t cross_attention_tokens = 0;
  std::int64_t vocab = 0;
  bool tied = false;
  std::int64_t max_positions = 0;
  int experts = 0, experts_per_token = 0;
  bool all_priced = true;  // every field of the file that changes cost is priced: `unpriced` is empty
};

void PrintTo(const published_model& m, std::ostream* os) { *os << m.folder; }

// Every file below is priced in full (all_priced): none has a sliding window in use (Mistral-7B-v0.3,
// Mixtral and Qwen3 publish sliding_window null; Qwen2.5-7B publishes 131072 with
// use_sliding_window false), dense blocks in a MoE stack (Qwen3's mlp_only_layers [] and
// decoder_sparse_step 1) or multi-token prediction.
const published_model published_models[] = {
    {.folder = "llama-3.1-70b",
     .card = "Llama-3.1-70B model page: 70.6B params",
     .card_billions = 70.6,
     .blocks = 80,
     .heads = 64,
     .hidden = 8192,
     .kv_heads = 8,
     .vocab = 128256,
     .max_positions = 131072},
    {.folder = "llama-3.1-405b",
     .card = "Llama-3.1-405B model card: 405B",
     .card_billions = 405,
     .blocks = 126,
     .heads = 128,
     .hidden = 16384,
     .kv_heads = 8,
     .vocab = 128256,
     .max_positions = 131072},
    {.folder = "llama-2-7b",
     .card = "Llama-2-7b-hf model page: 6.74B params",
     .card_billions = 6.74,
     .blocks = 32,
     .heads = 32,
     .hidden = 4096,
     .vocab = 32000,
     .max_positions = 4096},
    {.folder = "mistral-7b-v0.3",
     .card = "Mistral-7B-v0.3 model page: 7.25B params",
     .card_billions = 7.25,
     .blocks = 32,
     .heads = 32,
     .hidden = 4096,
     .kv_heads = 8,
     .vocab = 32768,
     .max_positions = 32768},
    {.folder = "mixtral-8x7b",
     .card = "Mixtral-8x7B (Mistral AI, \"Mixtral of experts\"): 46.7B total, 12.9B per token",
     .card_billions = 46.7,
     .card_active_billions = 12.9,
     .blocks = 32,
     .heads = 32,
     .hidden = 4096,
     .kv_heads = 8,
     .vocab = 32000,
     .max_positions = 32768,
     .experts = 8,
     .experts_per_token = 2},
    {.folder = "qwen2.5-7b",
     .card = "Qwen2.5-7B model card: 7.61B, 6.53B non-embedding",
     .card_billions = 7.61,
     .card_blocks_billions = 6.53,
     .blocks = 28,
     .heads = 28,
     .hidden = 3584,
     .kv_heads = 4,
     .vocab = 152064,
     .max_positions = 131072},
    {.folder = "qwen3-8b",
     .card = "Qwen3-8B model card: 8.2B, 6.95B non-embedding",
     .card_billions = 8.2,
     .card_blocks_billions = 6.95,
     .blocks = 36,
     .heads = 32,
     .hidden = 4096,
     .kv_heads = 8,
     .vocab = 151936,
     .max_positions = 40960},
    // Query heads of 128 on a 2048 (4096) wide model: head_dim is not hidden / heads.
    {.folder = "qwen3-30b-a3b",
     .card = "Qwen3-30B-A3B model card: 30.5B total, 3.3B activated, 29.9B non-embedding",
     .card_billions = 30.5,
     .card_blocks_billions = 29.9,
     .card_active_billions = 3.3,
     .blocks = 48,
     .heads = 32,
     .hidden = 2048,
     .kv_heads = 4,
     .head_dim = 128,
     .vocab = 151936,
     .max_positions = 40960,
     .experts = 128,
     .experts_per_token = 8},
    {.folder = "qwen3-235b-a22b",
     .card = "Qwen3-235B-A22B model card: 235B total, 22B activated, 234B non-embedding",
     .card_billions = 235,
     .card_blocks_billions = 234,
     .card_active_billions = 22,
     .blocks = 94,
     .heads = 64,
     .hidden = 4096,
     .kv_heads = 4,
     .head_dim = 128,
     .vocab = 151936,
     .max_positions = 40960,
     .experts = 128,
     .experts_per_token = 8},
    // The original Wan repository's file (not the diffusers one): full self-attention over video
    // tokens, cross-attention to umT5's text_len = 512 tokens, a GELU MLP, no vocabulary.
    {.folder = "wan2.1-t2v-14b",
     .card = "Wan2.1-T2V-14B model card: 14B",
     .card_billions = 14,
     .blocks = 40,
     .heads = 40,
     .hidden = 5120,
     .mlp_matrices = 2,
     .attention = dcp::attention_kind::full,
     .cross_attention_tokens = 512},
};

dcp::models::model_config read_published(const std::string& folder) {
  return dcp::models::read_config(std::filesystem::path(DCP_TEST_CONFIGS) / folder);
}

/// `got` within `fraction` of `card` (both in billions).
void expect_within(double got, double card, double fraction, const char* what) {
  EXPECT_NEAR(got, card, fraction * card) << what << ": dcp prices " << got << "B, the card gives " << card << "B";
}

class published_config : public ::testing::TestWithParam<published_model> {};

std::string folder_name(const ::testing::TestParamInfo<published_model>& info) {
  std::string name = info.param.folder;
  for (char& c : name)
    if (std::isalnum(static_cast<unsigned char>(c)) == 0) c = '_';
  return name;
}

INSTANTIATE_TEST_SUITE_P(hub, published_config, ::testing::ValuesIn(published_models), folder_name);

// The original Wan file is the diffusers one's model, named by its folder (its model_type names
// the task, t2v).
TEST(published_config_wan, the_original_file_reads_as_the_diffusers_one) {
  auto original = read_published("wan2.1-t2v-14b"), diffusers = read_published("wan2.1-t2v-14b-diffusers");
  EXPECT_EQ(original.model.name, "wan2.1-t2v-14b");
  original.model.name = diffusers.model.name;
  EXPECT_EQ(original.model, diffusers.model);
  EXPECT_TRUE(original.unpriced.empty());
}

TEST_P(published_config, reads_as_its_model_card_counts) {
  const published_model& row = GetParam();
  SCOPED_TRACE(row.card);
  const dcp::models::model_config c = read_published(row.folder);
  const dcp::transformer_spec& m = c.model;

  EXPECT_EQ(m.blocks, row.blocks);
  EXPECT_EQ(m.hidden, row.hidden);
  EXPECT_EQ(m.heads, row.heads);
  EXPECT_EQ(m.kv_heads, row.kv_heads);
  EXPECT_EQ(m.head_dim, row.head_dim);
  EXPECT_EQ(m.mlp_matrices, row.mlp_matrices);
  EXPECT_EQ(m.attention, row.attention);
  EXPECT_EQ(m.cross_attention_tokens, row.cross_attention_tokens);
  EXPECT_EQ(m.text_tokens, 0);
  EXPECT_EQ(m.window, 0);  // no file here uses its sliding window
  EXPECT_EQ(m.vocab, row.vocab);
  EXPECT_EQ(m.tied_embeddings, row.tied);
  EXPECT_EQ(c.max_positions, row.max_positions);
  EXPECT_EQ(m.experts, row.experts);
  EXPECT_EQ(m.experts_per_token, row.experts_per_token);
  EXPECT_EQ(m.dense_blocks, 0);
  EXPECT_EQ(m.shared_experts, 0);
  if (row.all_priced) {
    EXPECT_TRUE(c.unpriced.empty()) << c.unpriced.size() << " unpriced, the first: "
                                    << (c.unpriced.empty() ? std::string() : c.unpriced.front());
  }

  // Everything the optimizer updates (a MoE model's every expert) within 2% of the card.
  expect_within(m.total_parameters() / 1e9, row.card_billions, 0.02, "total parameters");
  if (row.card_blocks_billions > 0)
    expect_within(m.parameters() / 1e9, row.card_blocks_billions, 0.02, "non-embedding parameters");
  if (row.card_active_billions > 0) {
    // The parameters a token passes through: its experts, the router, attention, embedding and head.
    ASSERT_TRUE(m.is_moe());
    expect_within((m.active_parameters() + m.vocabulary_parameters()) / 1e9, row.card_active_billions, 0.05,
                  "active parameters");
  }
}

}  // namespace
