#pragma once
/// \file
/// `transformer_spec`: the shipped `model_spec`, with the presets of DESIGN section 4.

#include <algorithm>
#include <array>
#include <cstdint>
#include <ostream>
#include <sstream>
#include <string>
#include <string_view>
#include <type_traits>

#include <dcp/error.hpp>
#include <dcp/model/model_concepts.hpp>

namespace dcp {

/// How the training loop computes the loss over the vocabulary (DESIGN section 4.1): what its
/// logits hold in memory.
enum class loss_kind {
  full,     ///< the logits of every token at once (Megatron's vocab-parallel cross entropy)
  chunked,  ///< a fused linear cross entropy over chunks of tokens (Liger-Kernel's)
};

inline const char* to_string(loss_kind k) noexcept { return k == loss_kind::chunked ? "chunked" : "full"; }

/// A stack of L identical transformer blocks (attention + MLP). A regular value.
struct transformer_spec {
  using policy_concept = model_spec_tag;

  std::string name = "custom";
  int blocks = 1;           ///< L
  std::int64_t hidden = 1;  ///< h
  int heads = 1;
  std::int64_t mlp_width = 1;  ///< f
  int mlp_matrices = 2;        ///< m: 2 plain MLP, 3 gated (SwiGLU)
  attention_kind attention = attention_kind::full;
  std::int64_t text_tokens = 0;  ///< prepended to every sequence (1D models only)
  // Extensions of DESIGN section 4.1; every default leaves the model as the fields above say.
  int kv_heads = 0;                          ///< key/value heads (GQA); 0 = heads
  std::int64_t head_dim = 0;                 ///< d; 0 = hidden / heads
  std::int64_t cross_attention_tokens = 0;   ///< c: text keys of a cross-attention in every block
  int experts = 0;                           ///< E routed experts per block; 0 = dense MLP of width f
  int experts_per_token = 0;                 ///< k_e experts each token is routed to
  std::int64_t expert_width = 0;             ///< f_e: MLP width of one expert
  int shared_experts = 0;                    ///< S experts every token passes through
  std::int64_t vocab = 0;                    ///< V: embedding rows and LM-head outputs; 0 = not priced
  bool tied_embeddings = false;              ///< the LM head reuses the embedding matrix
  loss_kind loss = loss_kind::full;          ///< how the logits are held (priced when vocab > 0)
  std::int64_t window = 0;                   ///< w: keys a windowed block's query attends to; 0 = none
  int windowed_blocks = 0;                   ///< L_w: blocks with the window (causal); 0 = all L when w > 0
  std::int64_t value_dim = 0;                ///< d_v: value and output width per head; 0 = d
  std::int64_t q_rank = 0;                   ///< r_q: low-rank query projection (MLA); 0 = full rank
  std::int64_t kv_rank = 0;                  ///< r_kv: latent of the keys and values (MLA); 0 = none
  std::int64_t rope_dim = 0;                 ///< d_r: the MLA key's rotary part, shared by the heads (in d)
  int dense_blocks = 0;                      ///< L_d: blocks of a MoE stack whose MLP is dense of width f
  /// P: this spec is the heaviest stage of a model split over P pipeline stages
  /// (`pipeline_stage`); 1 = the whole model.
  int pipeline_stages = 1;

  /// Key/value heads: `kv_heads`, or `heads` when 0.
  constexpr int key_value_heads() const noexcept { return kv_heads > 0 ? kv_heads : heads; }
  /// d = head_dim, or h / heads when 0.
  constexpr double head_width() const noexcept {
    return head_dim > 0 ? static_cast<double>(head_dim) : static_cast<double>(hidden / heads);
  }
  /// q = heads d: the queries' width (and the output projection's unless value_dim decouples
  /// it); h unless head_dim decouples it.
  constexpr double query_width() const noexcept {
    return head_dim > 0 ? heads * head_width() : static_cast<double>(hidden);
  }
  /// kv = kv_heads d: the keys' width (and the values' unless value_dim decouples it).
  constexpr double key_value_width() const noexcept {
    return kv_heads > 0 || head_dim > 0 ? key_value_heads() * head_width() : static_cast<double>(hidden);
  }
  /// d_v = value_dim, or d when 0.
  constexpr double value_head_width() const noexcept {
    return value_dim > 0 ? static_cast<double>(value_dim) : head_width();
  }
  /// o = heads d_v: the values' and the output projection's width (q unless value_dim decouples it).
  constexpr double output_width() const noexcept { return value_dim > 0 ? heads * value_head_width() : query_width(); }
  /// kv_v = kv_heads d_v: the values' width (kv unless value_dim decouples it).
  constexpr double value_width() const noexcept {
    return value_dim > 0 ? key_value_heads() * value_head_width() : key_value_width();
  }
  /// Multi-head latent attention: keys and values up-projected from an r_kv latent.
  constexpr bool is_latent_attention() const noexcept { return kv_rank > 0; }
  constexpr bool is_moe() const noexcept { return experts > 0; }
  /// L_w: the blocks whose attention is windowed (0 without a window).
  constexpr int window_blocks() const noexcept {
    return window == 0 ? 0 : windowed_blocks > 0 ? windowed_blocks : blocks;
  }
  /// L_e: the blocks whose MLP is the MoE layer (L - L_d; 0 for a dense model).
  constexpr int moe_blocks() const noexcept { return is_moe() ? blocks - dense_blocks : 0; }
  /// Parameters of the self-attention of a block: Q, O, K and V. 2 h q + 2 h kv for multi-head
  /// (and grouped) attention, h q + h o + h (kv + kv_v) with a value width of its own; MLA's
  /// projections h r_q + r_q q (or h q) for Q, h (r_kv + d_r) + r_kv heads (d - d_r + d_v) for K
  /// and V, h o for O.
  constexpr double self_attention_parameters() const noexcept {
    const double h = static_cast<double>(hidden);
    const bool multi_head = value_dim == 0 && !is_latent_attention() && q_rank == 0;
    if (multi_head && kv_heads == 0 && head_dim == 0) return 4.0 * h * h;
    if (multi_head) return 2 * h * query_width() + 2 * h * key_value_width();
    const double rq = static_cast<double>(q_rank), rkv = static_cast<double>(kv_rank);
    const double dr = static_cast<double>(rope_dim);
    const double q_proj = q_rank > 0 ? h * rq + rq * query_width() : h * query_width();
    const double kv_proj = is_latent_attention() ? h * (rkv + dr) + rkv * heads * (head_width() - dr + value_head_width())
                                                 : h * (key_value_width() + value_width());
    return q_proj + kv_proj + h * output_width();
  }
  /// Parameters of the attentions of a block: the self-attention's, twice with a cross-attention.
  constexpr double attention_parameters() const noexcept {
    const double self = self_attention_parameters();
    return cross_attention_tokens > 0 ? 2 * self : self;
  }
  /// Parameters of the routed experts of a block: E m h f_e (0 for a dense model).
  constexpr double expert_parameters() const noexcept {
    return is_moe() ? experts * mlp_matrices * static_cast<double>(hidden) * static_cast<double>(expert_width) : 0.0;
  }
  /// Parameters of the MLP of a block: m h f (dense) or (E + S) m h f_e + h E (MoE with router).
  constexpr double mlp_parameters() const noexcept {
    const double h = static_cast<double>(hidden);
    if (!is_moe()) return mlp_matrices * h * static_cast<double>(mlp_width);
    return expert_parameters() + shared_experts * mlp_matrices * h * static_cast<double>(expert_width) + h * experts;
  }
  /// Parameters a token passes through in a block (the linear FLOPs per token are twice this):
  /// P_b for a dense model without cross-attention; MoE counts k_e + S experts and the router;
  /// a cross-attention counts its query and output projections (its keys and values are the c
  /// text tokens', priced in A). A MoE stack's dense blocks: `dense_active_block_parameters`.
  constexpr double active_block_parameters() const noexcept {
    if (!is_moe() && cross_attention_tokens == 0) return block_parameters();
    const double h = static_cast<double>(hidden);
    double p = attention_parameters();
    if (cross_attention_tokens > 0) p -= h * (key_value_width() + value_width());
    if (!is_moe()) return p + mlp_parameters();
    return p + (experts_per_token + shared_experts) * mlp_matrices * h * static_cast<double>(expert_width) + h * experts;
  }
  /// Parameters of one of a MoE stack's dense blocks: its attention and an MLP m h f.
  constexpr double dense_block_parameters() const noexcept {
    return attention_parameters() + mlp_matrices * static_cast<double>(hidden) * static_cast<double>(mlp_width);
  }
  /// The parameters a token passes through in one of those dense blocks.
  constexpr double dense_active_block_parameters() const noexcept {
    const double cross_kv =
        cross_attention_tokens > 0 ? static_cast<double>(hidden) * (key_value_width() + value_width()) : 0.0;
    return dense_block_parameters() - cross_kv;
  }

  /// P_b = 4 h^2 + m h f (dense, no GQA), in general attention_parameters() + mlp_parameters():
  /// a MoE block's in a MoE stack.
  constexpr double block_parameters() const noexcept {
    const double h = static_cast<double>(hidden);
    if (kv_heads == 0 && head_dim == 0 && cross_attention_tokens == 0 && !is_moe() && value_dim == 0 &&
        !is_latent_attention() && q_rank == 0)
      return 4.0 * h * h + mlp_matrices * h * static_cast<double>(mlp_width);
    return attention_parameters() + mlp_parameters();
  }
  /// P = L P_b, or L_d P_b,dense + (L - L_d) P_b with dense blocks in a MoE stack.
  constexpr double parameters() const noexcept {
    if (dense_blocks == 0) return blocks * block_parameters();
    return dense_blocks * dense_block_parameters() + moe_blocks() * block_parameters();
  }
  /// L P_act: the parameters a token passes through in all blocks.
  constexpr double active_parameters() const noexcept {
    if (dense_blocks == 0) return blocks * active_block_parameters();
    return dense_blocks * dense_active_block_parameters() + moe_blocks() * active_block_parameters();
  }
  /// Vocabulary matrices: 1 tied (the LM head is the embedding), 2 untied, 0 without a vocabulary.
  constexpr int vocabulary_matrices() const noexcept { return vocab == 0 ? 0 : tied_embeddings ? 1 : 2; }
  /// P_V = (1 or 2) V h: the embedding and the LM head.
  constexpr double vocabulary_parameters() const noexcept {
    return vocabulary_matrices() * static_cast<double>(vocab) * static_cast<double>(hidden);
  }
  /// P + P_V: everything the optimizer updates.
  constexpr double total_parameters() const noexcept { return parameters() + vocabulary_parameters(); }
  /// F_V / N_tok = 2 V h: the LM head's forward FLOPs per token (the embedding is a lookup).
  constexpr double head_flops_per_token() const noexcept {
    return 2 * static_cast<double>(vocab) * static_cast<double>(hidden);
  }
  /// lambda V: bytes per token the loss holds at its peak, its share of the vocabulary for each of
  /// the GPU's tokens. full: 6 V (bf16 logits and their fp32 copy, whose softmax the backward
  /// turns into the gradient in place); chunked: 4 V / ceil(V / h) (chunks of at most
  /// 2 x / ceil(V / h) tokens' bf16 logits, Liger-Kernel's power-of-two chunking). 0 without a
  /// vocabulary.
  constexpr double loss_bytes_per_token() const noexcept {
    const double v = static_cast<double>(vocab);
    if (vocab == 0) return 0;
    if (loss == loss_kind::full) return 6 * v;
    return 4 * v / static_cast<double>((vocab + hidden - 1) / hidden);
  }
  /// 2 (q + o): forward FLOPs of one query-key pair in a block, the scores' 2 d and the values'
  /// 2 d_v per head (4 q when d_v = d).
  constexpr double pair_flops() const noexcept { return 2 * (query_width() + output_width()); }
  /// Query-key pairs of a windowed causal block over n tokens: n^2 / 2 within the window, and
  /// w n - w^2 / 2 beyond it (each later query attends to w keys).
  constexpr double windowed_pairs(double n) const noexcept {
    const double w = static_cast<double>(window);
    return n <= w ? n * n / 2 : w * n - w * w / 2;
  }
  /// Tokens this model processes for a sample of shape T x S.
  constexpr std::int64_t tokens_of(std::int64_t frames, std::int64_t spatial) const noexcept {
    return frames * spatial + text_tokens;
  }

  friend bool operator==(const transformer_spec&, const transformer_spec&) = default;
};

inline const char* to_string(attention_kind k) noexcept {
  switch (k) {
    case attention_kind::full: return "full";
    case attention_kind::causal: return "causal";
    case attention_kind::factorized_2d: return "factorized_2d";
  }
  return "?";
}

inline std::ostream& operator<<(std::ostream& os, const transformer_spec& m) {
  os << "transformer_spec{" << m.name << ", L=" << m.blocks << ", h=" << m.hidden << ", heads=" << m.heads
            << ", f=" << m.mlp_width << ", m=" << m.mlp_matrices << ", " << to_string(m.attention)
            << ", text=" << m.text_tokens;
  if (m.kv_heads > 0) os << ", kv_heads=" << m.kv_heads;
  if (m.head_dim > 0) os << ", head_dim=" << m.head_dim;
  if (m.cross_attention_tokens > 0) os << ", cross=" << m.cross_attention_tokens;
  if (m.is_moe())
    os << ", experts=" << m.experts << "x" << m.expert_width << " top" << m.experts_per_token << "+" << m.shared_experts;
  if (m.dense_blocks > 0) os << ", dense_blocks=" << m.dense_blocks;
  if (m.value_dim > 0) os << ", value_dim=" << m.value_dim;
  if (m.q_rank > 0) os << ", q_rank=" << m.q_rank;
  if (m.kv_rank > 0) os << ", kv_rank=" << m.kv_rank << ", rope_dim=" << m.rope_dim;
  if (m.window > 0) os << ", window=" << m.window << " in " << m.window_blocks() << " blocks";
  if (m.vocab > 0) os << ", vocab=" << m.vocab << (m.tied_embeddings ? " tied" : "") << ", loss=" << to_string(m.loss);
  if (m.pipeline_stages > 1) os << ", stage of " << m.pipeline_stages;
  return os << "}";
}

/// A person's line for a model: its shape, and the parameters its blocks hold (total and, for a
/// MoE model, those a token passes through). Two models that price differently read differently.
inline std::string describe(const transformer_spec& m) {
  std::ostringstream os;
  if (m.pipeline_stages > 1) os << "the heaviest of " << m.pipeline_stages << " pipeline stages: ";
  os << m.blocks << " blocks, width " << m.hidden << ", " << m.heads << " heads";
  if (m.kv_heads > 0) os << " (" << m.kv_heads << " key/value)";
  if (m.head_dim > 0) os << " of " << m.head_dim;
  if (m.value_dim > 0) os << " (values " << m.value_dim << ")";
  if (m.is_latent_attention())
    os << ", latent attention (key/value rank " << m.kv_rank << ", query rank " << m.q_rank << ", rope " << m.rope_dim
       << ")";
  if (m.is_moe()) {
    os << ", " << m.experts << " experts of " << m.expert_width << " (top " << m.experts_per_token << ", "
       << m.shared_experts << " shared)";
    if (m.dense_blocks > 0)
      os << " in " << m.moe_blocks() << " blocks, " << m.dense_blocks << " dense of " << m.mlp_width;
  } else {
    os << ", MLP " << m.mlp_width;
  }
  os << (m.mlp_matrices == 3 ? " gated" : "") << ", " << to_string(m.attention) << " attention";
  if (m.window > 0) os << ", window " << m.window << " in " << m.window_blocks() << " of " << m.blocks << " blocks";
  if (m.text_tokens > 0) os << ", " << m.text_tokens << " text tokens";
  if (m.cross_attention_tokens > 0) os << ", cross-attention to " << m.cross_attention_tokens << " text tokens";
  if (m.vocab > 0)
    os << ", vocabulary " << m.vocab << (m.tied_embeddings ? " (tied head)" : "") << ", " << to_string(m.loss)
       << " loss";
  os.setf(std::ios::fixed);
  os.precision(2);
  os << "; " << m.parameters() / 1e9 << "B parameters in blocks";
  if (m.vocab > 0) os << " + " << m.vocabulary_parameters() / 1e9 << "B embedding and head";
  if (m.is_moe()) os << ", " << m.active_parameters() / 1e9 << "B active in blocks";
  return os.str();
}

/// The heaviest of `pp` pipeline stages of `m` (DESIGN section 4.5), the model a stage's cost
/// prices: the stages split the L blocks evenly, the first L mod pp stages one more, so the
/// heaviest holds L_s = ceil(L / pp); of its blocks as many are dense (of a MoE stack) or windowed
/// as every L_s-block stage must hold, max(0, L_x - (L - L_s)), so it has the most MoE and
/// full-attention blocks any stage has. It keeps the vocabulary: the embedding (stage 0's) and the
/// LM head with its logits (the last stage's) are priced on it, an upper bound for every stage.
/// Factorized 2D attention splits by its (spatial, temporal) pairs, which a stage never divides:
/// L_s = 2 ceil(L / 2 / pp).
/// Throws a `dcp::error` unless 1 <= pp <= L (L / 2 pairs for factorized 2D attention), or when
/// `m` is already a stage.
inline transformer_spec pipeline_stage(const transformer_spec& m, int pp) {
  const int unit = m.attention == attention_kind::factorized_2d ? 2 : 1, units = m.blocks / unit;
  check(pp >= 1 && pp <= units, errc::invalid_argument, [&] {
    return "pp = " + std::to_string(pp) + " stages for the " + std::to_string(units) +
           (unit == 2 ? " spatial-temporal block pairs" : " blocks") + " of model '" + m.name + "'; use 1 <= pp <= " +
           std::to_string(units);
  });
  check(m.pipeline_stages == 1, errc::invalid_argument, [&] {
    return "model '" + m.name + "' is already one of " + std::to_string(m.pipeline_stages) +
           " pipeline stages; split the whole model";
  });
  if (pp == 1) return m;
  transformer_spec s = m;
  const int stage = unit * ((units + pp - 1) / pp), others = m.blocks - stage;
  s.blocks = stage;
  s.pipeline_stages = pp;
  s.dense_blocks = std::max(0, m.dense_blocks - others);
  if (m.window > 0 && m.windowed_blocks > 0) {
    s.windowed_blocks = std::max(0, m.windowed_blocks - others);
    if (s.windowed_blocks == 0) s.window = 0;  // no windowed block is forced onto every stage
  }
  return s;
}

/// The transformer of any `model_spec`: its sizes, attention and text tokens, and its name and
/// each optional field (`optional_fields.hpp`) it has, so a user's own model type works wherever
/// dcp needs a `transformer_spec` (the analytic cost model).
template <model_spec M>
transformer_spec to_transformer_spec(const M& m) {
  if constexpr (std::is_convertible_v<const M&, transformer_spec>) {
    return transformer_spec(m);
  } else {
    transformer_spec t;
    if constexpr (has_model_name<M>) t.name = std::string(m.name);
    t.blocks = static_cast<int>(m.blocks);
    t.hidden = static_cast<std::int64_t>(m.hidden);
    t.heads = static_cast<int>(m.heads);
    t.mlp_width = static_cast<std::int64_t>(m.mlp_width);
    t.mlp_matrices = static_cast<int>(m.mlp_matrices);
    t.attention = m.attention;
    t.text_tokens = static_cast<std::int64_t>(m.text_tokens);
#define DCP_DETAIL_COPY_OPTIONAL(f) \
  if constexpr (has_optional_##f<M>) t.f = static_cast<decltype(t.f)>(m.f);
    DCP_MODEL_OPTIONAL_FIELDS(DCP_DETAIL_COPY_OPTIONAL)
#undef DCP_DETAIL_COPY_OPTIONAL
    return t;
  }
}

/// The most blocks a model may have: far above any published one, low enough that counts of
/// block passes (2L + k and the like) never overflow an int.
inline constexpr int max_blocks = 65536;

/// Throws a `dcp::error` naming the field unless `m` keeps the laws of `model_spec`.
inline void validate(const transformer_spec& m) {
  auto need = [&](bool ok, const std::string& what) {
    check(ok, errc::invalid_argument, [&] { return "model '" + m.name + "': " + what; });
  };
  need(m.blocks > 0 && m.blocks <= max_blocks, "blocks = " + std::to_string(m.blocks) + " must be in [1, " +
                                                  std::to_string(max_blocks) + "] (published models have a few hundred)");
  need(m.hidden > 0, "hidden = " + std::to_string(m.hidden) + " must be positive");
  need(m.heads > 0 && m.hidden % m.heads == 0,
       "heads = " + std::to_string(m.heads) + " must be positive and divide hidden = " + std::to_string(m.hidden));
  need(m.mlp_width > 0, "mlp_width = " + std::to_string(m.mlp_width) + " must be positive");
  need(m.mlp_matrices == 2 || m.mlp_matrices == 3,
       "mlp_matrices = " + std::to_string(m.mlp_matrices) + " must be 2 (plain MLP) or 3 (gated MLP)");
  need(m.text_tokens >= 0, "text_tokens = " + std::to_string(m.text_tokens) + " must not be negative");
  need(m.kv_heads >= 0 && (m.kv_heads == 0 || (m.kv_heads <= m.heads && m.heads % m.kv_heads == 0)),
       "kv_heads = " + std::to_string(m.kv_heads) + " must divide heads = " + std::to_string(m.heads) +
           " (0 means kv_heads = heads)");
  need(m.head_dim >= 0, "head_dim = " + std::to_string(m.head_dim) + " must not be negative (0 means hidden / heads)");
  need(m.cross_attention_tokens >= 0,
       "cross_attention_tokens = " + std::to_string(m.cross_attention_tokens) + " must not be negative");
  need(m.cross_attention_tokens == 0 || m.attention != attention_kind::factorized_2d,
       "cross_attention_tokens needs 1D attention (full or causal)");
  need(m.experts >= 0 && m.shared_experts >= 0, "experts = " + std::to_string(m.experts) + " and shared_experts = " +
                                                    std::to_string(m.shared_experts) + " must not be negative");
  if (m.is_moe()) {
    need(m.experts_per_token >= 1 && m.experts_per_token <= m.experts,
         "experts_per_token = " + std::to_string(m.experts_per_token) + " must be in [1, experts = " +
             std::to_string(m.experts) + "]");
    need(m.expert_width > 0, "expert_width = " + std::to_string(m.expert_width) + " must be positive for a MoE model");
  } else {
    need(m.experts_per_token == 0 && m.shared_experts == 0,
         "experts_per_token and shared_experts need experts > 0 (a MoE model); got experts = 0");
  }
  need(m.vocab >= 0, "vocab = " + std::to_string(m.vocab) + " must not be negative (0 means no vocabulary priced)");
  need(m.vocab > 0 || (!m.tied_embeddings && m.loss == loss_kind::full),
       "tied_embeddings and loss = chunked need a vocabulary (vocab > 0); give vocab or drop them");
  need(m.window >= 0 && m.windowed_blocks >= 0 && m.windowed_blocks <= m.blocks,
       "window = " + std::to_string(m.window) +
           " must not be negative and windowed_blocks = " + std::to_string(m.windowed_blocks) +
           " must be in [0, blocks = " + std::to_string(m.blocks) + "] (0 means all blocks)");
  need(m.window > 0 || m.windowed_blocks == 0, "windowed_blocks needs a window (window > 0); give window or drop it");
  need(m.window == 0 || m.attention == attention_kind::causal,
       "a window needs causal attention (a sliding window over earlier tokens); got " +
           std::string(to_string(m.attention)));
  need(m.value_dim >= 0, "value_dim = " + std::to_string(m.value_dim) + " must not be negative (0 means head_dim)");
  need(m.q_rank >= 0 && m.kv_rank >= 0 && m.rope_dim >= 0,
       "q_rank, kv_rank and rope_dim must not be negative (0 means no low-rank projection)");
  need(m.rope_dim == 0 || (m.kv_rank > 0 && m.rope_dim < m.head_width()),
       "rope_dim = " + std::to_string(m.rope_dim) +
           " needs latent attention (kv_rank > 0) and must be below the head width (head_dim = qk_nope_head_dim + "
           "qk_rope_head_dim)");
  need(m.kv_rank == 0 || (m.cross_attention_tokens == 0 && m.attention != attention_kind::factorized_2d),
       "latent attention (kv_rank > 0) needs 1D self-attention only (no cross_attention_tokens, not factorized_2d)");
  need(m.kv_rank == 0 || m.kv_heads == 0 || m.kv_heads == m.heads,
       "latent attention (kv_rank > 0) up-projects keys and values for every head; kv_heads = " +
           std::to_string(m.kv_heads) + " must be 0 or heads = " + std::to_string(m.heads));
  need(m.dense_blocks >= 0 && (m.dense_blocks == 0 || (m.is_moe() && m.dense_blocks < m.blocks)),
       "dense_blocks = " + std::to_string(m.dense_blocks) + " needs a MoE model and must be below blocks = " +
           std::to_string(m.blocks) + " (a model of dense blocks only has experts = 0)");
  need(m.attention != attention_kind::factorized_2d || m.blocks % 2 == 0,
       "factorized_2d needs an even number of blocks (half spatial, half temporal), got " +
           std::to_string(m.blocks));
}

namespace models {
/// CogVideoX-5B, the paper's 1D model.
inline transformer_spec cogvideox_5b() { return {"cogvideox-5b", 42, 3072, 48, 12288, 2, attention_kind::full, 226}; }
/// STDiT3-XL (Open-Sora), the paper's 2D model: 28 spatial + 28 temporal blocks.
inline transformer_spec stdit3_xl() { return {"stdit3-xl", 56, 1152, 16, 4608, 2, attention_kind::factorized_2d, 0}; }
/// Llama-3 8B for long-context text, as DESIGN section 4 defines it: multi-head attention and no
/// vocabulary (the published model has 8 key/value heads and 128256 tokens; read its config).
inline transformer_spec llama3_8b() { return {"llama3-8b", 32, 4096, 32, 14336, 3, attention_kind::causal, 0}; }

/// Llama-3 70B: GQA with 8 key/value heads, a 128256-token vocabulary, untied head.
inline transformer_spec llama3_70b() {
  auto m = transformer_spec{"llama3-70b", 80, 8192, 64, 28672, 3, attention_kind::causal, 0};
  m.kv_heads = 8;
  m.vocab = 128256;
  return m;
}
/// Qwen3-30B-A3B: 48 MoE blocks (128 experts of width 768, 8 per token), 32 query heads of
/// width 128 (q = 4096 > h = 2048), 4 key/value heads. `mlp_width` is its dense
/// intermediate_size, unused since every block is MoE. A 151936-token vocabulary, untied head.
inline transformer_spec qwen3_30b_a3b() {
  auto m = transformer_spec{"qwen3-30b-a3b", 48, 2048, 32, 6144, 3, attention_kind::causal, 0};
  m.kv_heads = 4;
  m.head_dim = 128;
  m.experts = 128;
  m.experts_per_token = 8;
  m.expert_width = 768;
  m.vocab = 151936;
  return m;
}
/// Wan2.1-T2V-14B: 40 blocks of full self-attention over video tokens, cross-attention to 512
/// text tokens, GELU MLP of width 13824.
inline transformer_spec wan2_1_14b() {
  auto m = transformer_spec{"wan2.1-14b", 40, 5120, 40, 13824, 2, attention_kind::full, 0};
  m.cross_attention_tokens = 512;
  return m;
}

/// Names of the presets accepted by `preset`.
inline constexpr std::array<std::string_view, 6> preset_names{"cogvideox-5b", "stdit3-xl",     "llama3-8b",
                                                              "llama3-70b",   "qwen3-30b-a3b", "wan2.1-14b"};

/// The preset called `name`; throws a `dcp::error` listing the presets otherwise.
inline transformer_spec preset(std::string_view name) {
  if (name == "cogvideox-5b") return cogvideox_5b();
  if (name == "stdit3-xl") return stdit3_xl();
  if (name == "llama3-8b") return llama3_8b();
  if (name == "llama3-70b") return llama3_70b();
  if (name == "qwen3-30b-a3b") return qwen3_30b_a3b();
  if (name == "wan2.1-14b") return wan2_1_14b();
  throw error(errc::invalid_argument,
              "unknown model preset '" + std::string(name) +
                  "'; use one of cogvideox-5b, stdit3-xl, llama3-8b, llama3-70b, qwen3-30b-a3b, wan2.1-14b");
}
}  // namespace models

static_assert(model_spec<transformer_spec>);

}  // namespace dcp
