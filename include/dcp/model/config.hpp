#pragma once
/// \file
/// `models::read_config`: a `transformer_spec` from a Hugging Face-style `config.json` (a
/// transformers model's, or a diffusers transformer's), with the fields it read that change cost
/// but that the model does not price, each named; `models::from_config` gives the spec alone.
/// DESIGN section 4.1 lists the fields read and how each maps.

#include <algorithm>
#include <array>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <istream>
#include <limits>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include <dcp/error.hpp>
#include <dcp/json_reader.hpp>
#include <dcp/model/transformer.hpp>

namespace dcp::models {

/// A model read from a config file: its spec, and each field present that changes its cost but
/// that `transformer_spec` does not price (one sentence each, naming the field and its value).
struct model_config {
  transformer_spec model;
  std::vector<std::string> unpriced;
  /// max_position_embeddings: the longest sequence the model was built for (0 when the file
  /// gives none). It changes no cost; a caller warns of data longer than it.
  std::int64_t max_positions = 0;
};

namespace detail {

/// Published diffusers transformers (`_class_name`): their files give neither the text tokens
/// nor the attention kind, which these classes fix (their pipelines' text lengths).
struct diffusers_class {
  std::string_view name;
  std::int64_t cross_attention_tokens;  // text tokens attended through cross-attention
  std::int64_t text_tokens;             // joined to the sequence (joint attention); -1: max_text_seq_length
};
inline constexpr std::array<diffusers_class, 4> diffusers_classes{{
    {"WanTransformer3DModel", 512, 0},             // Wan2.1: umT5 text_len 512 (the original config's)
    {"WanModel", 512, 0},                          // Wan2.1's original config (its text_len says 512 too)
    {"CogVideoXTransformer3DModel", 0, -1},        // the file's max_text_seq_length (226 for CogVideoX-5b)
    {"HunyuanVideoTransformer3DModel", 0, 256},    // the LLM text encoder's 256 tokens (text_len)
}};

/// transformers model types whose MLP is gated (gate, up and down projections) whatever the
/// activation: Gemma's GeGLU names gelu_pytorch_tanh, which alone reads as a plain MLP.
inline constexpr std::array<std::string_view, 17> gated_model_types{
    "llama",  "mistral", "mixtral",     "qwen2",       "qwen2_moe",   "qwen3", "qwen3_moe", "gemma",  "gemma2",
    "gemma3", "gemma3_text", "phi3",    "deepseek_v2", "deepseek_v3", "olmo2", "granite",   "cohere"};

/// transformers model types whose configs tie the LM head to the embedding when the file does not
/// say (`tie_word_embeddings` defaults to true there); the other families' default is untied.
inline constexpr std::array<std::string_view, 4> tied_model_types{"gemma", "gemma2", "gemma3", "gemma3_text"};

/// A nested text_config with its family's defaults for the fields it omits (transformers
/// writes only what differs from them): Gemma-3's Gemma3TextConfig.
inline nlohmann::json with_family_defaults(nlohmann::json text) {
  if (text.value("model_type", std::string()) == "gemma3_text") {
    const std::pair<const char*, nlohmann::json> defaults[] = {
        {"vocab_size", 262208},       {"hidden_size", 2304},           {"intermediate_size", 9216},
        {"num_hidden_layers", 26},    {"num_attention_heads", 8},      {"num_key_value_heads", 4},
        {"head_dim", 256},            {"sliding_window", 4096},        {"sliding_window_pattern", 6},
        {"max_position_embeddings", 131072}};
    for (const auto& [key, value] : defaults)
      if (!text.contains(key)) text[key] = value;
  }
  return text;
}

/// The layer indices of `field` (a list of integers in [0, L)), empty when absent.
inline std::vector<int> layer_list(const nlohmann::json& j, const json_reader& r, const char* field, int blocks) {
  std::vector<int> out;
  if (!j.contains(field) || j.at(field).is_null()) return out;
  if (!j.at(field).is_array()) r.fail(std::string("field '") + field + "' = " + j.at(field).dump() + " is not a list");
  for (const auto& v : j.at(field)) out.push_back(static_cast<int>(r.integer(v, field, 0, blocks - 1)));
  return out;
}

/// L_d: the dense blocks of a MoE stack. DeepSeek's first_k_dense_replace leading blocks (and
/// after them every moe_layer_freq-th block is MoE); Qwen's mlp_only_layers, and the blocks
/// that decoder_sparse_step skips (block i is MoE when (i + 1) % step == 0).
inline int dense_blocks_of(const nlohmann::json& j, const json_reader& r, int blocks) {
  const auto count = [&](const char* name, std::int64_t fallback) {
    return j.contains(name) && !j.at(name).is_null() ? r.integer(j.at(name), name, 0, blocks) : fallback;
  };
  const std::int64_t first = count("first_k_dense_replace", 0), freq = count("moe_layer_freq", 1);
  const std::int64_t step = count("decoder_sparse_step", 1);
  if (freq == 0 || step == 0) r.fail("moe_layer_freq and decoder_sparse_step must be positive");
  const std::vector<int> dense = layer_list(j, r, "mlp_only_layers", blocks);
  int moe = 0;
  for (int i = 0; i < blocks; ++i)
    moe +=
        i >= first && i % freq == 0 && (i + 1) % step == 0 && std::find(dense.begin(), dense.end(), i) == dense.end();
  if (moe == 0)
    r.fail("first_k_dense_replace, moe_layer_freq, decoder_sparse_step and mlp_only_layers leave no MoE block of " +
           std::to_string(blocks) + "; drop num_experts for a dense model");
  return blocks - moe;
}

/// L_w: the blocks with the sliding window. `layer_types` lists them ("sliding_attention"); else
/// Gemma-2 windows every other block from the first, Gemma-3 all but every
/// sliding_window_pattern-th (default 6), Qwen the blocks from max_window_layers on; every block
/// otherwise (Mistral, Phi-3).
inline int windowed_blocks_of(const nlohmann::json& j, const json_reader& r, std::string_view type, int blocks) {
  if (j.contains("layer_types") && j.at("layer_types").is_array()) {
    const auto& types = j.at("layer_types");
    if (types.size() != static_cast<std::size_t>(blocks))
      r.fail("layer_types lists " + std::to_string(types.size()) +
             " layers but num_hidden_layers = " + std::to_string(blocks) + "; give one type per layer");
    int n = 0;
    for (const auto& t : types) n += t.is_string() && t.get<std::string>() == "sliding_attention";
    return n;
  }
  if (type == "gemma2") return (blocks + 1) / 2;
  if (type == "gemma3" || type == "gemma3_text") {
    const std::int64_t pattern = j.contains("sliding_window_pattern") && !j.at("sliding_window_pattern").is_null()
                                     ? r.integer(j.at("sliding_window_pattern"), "sliding_window_pattern", 1, blocks)
                                     : 6;
    return blocks - static_cast<int>(blocks / pattern);
  }
  if (j.contains("use_sliding_window") && j.contains("max_window_layers") && !j.at("max_window_layers").is_null())
    return blocks - static_cast<int>(r.integer(j.at("max_window_layers"), "max_window_layers", 0, blocks));
  return blocks;
}

}  // namespace detail

/// The model a parsed `config.json` describes, and what it leaves unpriced; `source` names the
/// file in every error. Throws a `dcp::error` (errc::parse_error) naming any missing, mistyped or
/// inconsistent field.
inline model_config read_config_json(const nlohmann::json& j, std::string_view source = "config.json") {
  const std::string src(source);
  const json_reader r("model config '" + src + "': ");
  const auto fail = [&](const std::string& what) { r.fail(what); };
  if (!j.is_object()) fail("not a JSON object");
  // A multimodal model's file (Gemma-3, Llama-4, Mistral-3) nests its language model in
  // text_config: that model is read, with the family's defaults for the fields the nested
  // config omits, and the encoders beside it are said.
  if (j.contains("text_config") && j.at("text_config").is_object() && !j.contains("num_hidden_layers") &&
      !j.contains("hidden_size")) {
    nlohmann::json text = detail::with_family_defaults(j.at("text_config"));
    for (const char* outer : {"name", "_name_or_path", "tie_word_embeddings"})
      if (j.contains(outer) && !text.contains(outer)) text[outer] = j.at(outer);
    model_config out = read_config_json(text, src + " text_config");
    std::string others;
    int count = 0;
    for (const auto& [key, value] : j.items())
      if (key != "text_config" && key.size() > 7 && key.ends_with("_config") && value.is_object())
        others += (count++ == 0 ? "" : ", ") + key;
    out.unpriced.insert(out.unpriced.begin(),
                        "text_config: its language model is priced" +
                            (count == 0 ? std::string() : "; " + others + (count == 1 ? " is not" : " are not")));
    return out;
  }
  // The first of `names` present, as a positive integer; `required` makes its absence an error.
  auto integer = [&](std::initializer_list<const char*> names, bool required, std::int64_t fallback) -> std::int64_t {
    for (const char* n : names) {
      if (!j.contains(n) || j.at(n).is_null()) continue;
      return r.integer(j.at(n), n, 0, std::numeric_limits<std::int32_t>::max());
    }
    if (required) {
      std::string list;
      for (const char* n : names) list += (list.empty() ? "'" : " or '") + std::string(n) + "'";
      fail("missing field " + list);
    }
    return fallback;
  };
  auto text = [&](const char* name) -> std::string {
    if (!j.contains(name)) return {};
    if (!j.at(name).is_string()) fail(std::string("field '") + name + "' = " + j.at(name).dump() + " is not a string");
    return j.at(name).get<std::string>();
  };

  model_config out;
  transformer_spec& m = out.model;
  const auto unpriced = [&](const std::string& what) { out.unpriced.push_back(what); };
  // A field's value as JSON text, or empty when absent or null.
  const auto given = [&](const char* name) -> std::string {
    return j.contains(name) && !j.at(name).is_null() ? j.at(name).dump() : std::string();
  };
  const std::string cls = text("_class_name");
  const detail::diffusers_class* diffusers = nullptr;
  for (const auto& c : detail::diffusers_classes)
    if (cls == c.name) diffusers = &c;
  if (!cls.empty() && diffusers == nullptr && text("attention").empty())
    fail("_class_name '" + cls + "' is a diffusers transformer this reader does not know; add \"attention\" (full, "
         "causal or factorized_2d) and its text tokens (text_tokens or cross_attention_tokens) to the file");

  m.name = text("name");
  if (m.name.empty()) m.name = text("_name_or_path");
  // A transformers model_type names the family; Wan's original one names the task (t2v, i2v).
  if (m.name.empty() && diffusers == nullptr) m.name = text("model_type");
  if (m.name.empty()) {  // the file's name, or for a model folder's config.json the folder's
    std::filesystem::path at(src);
    if (at.stem() == "config") at = at.parent_path();
    if (at.filename() == "transformer") at = at.parent_path();
    m.name = at.filename().string();
    if (m.name.empty()) m.name = "config";
  }

  m.blocks = static_cast<int>(integer({"num_hidden_layers", "num_layers", "n_layer"}, true, 0));
  m.heads = static_cast<int>(integer({"num_attention_heads", "num_heads", "n_head"}, true, 0));
  // Multi-head latent attention (DeepSeek-V2/V3): a query and key head is qk_nope_head_dim +
  // qk_rope_head_dim wide, a value head v_head_dim.
  m.kv_rank = integer({"kv_lora_rank"}, false, 0);
  std::int64_t head_dim = integer({"head_dim", "attention_head_dim"}, false, 0);
  if (m.kv_rank > 0) {
    m.rope_dim = integer({"qk_rope_head_dim"}, true, 0);
    head_dim = integer({"qk_nope_head_dim"}, true, 0) + m.rope_dim;
    m.q_rank = integer({"q_lora_rank"}, false, 0);
  }
  // Diffusers configs give heads x head width instead of a hidden size.
  m.hidden = integer({"hidden_size", "dim", "n_embd"}, head_dim == 0, m.heads * head_dim);
  if (m.blocks == 0 || m.heads == 0 || m.hidden == 0) fail("num_hidden_layers, num_attention_heads and hidden_size must be positive");
  if (head_dim == 0 && m.hidden % m.heads != 0)
    fail("num_attention_heads = " + std::to_string(m.heads) + " does not divide hidden_size = " + std::to_string(m.hidden) +
         "; give head_dim");
  if (head_dim != 0 && !(m.hidden % m.heads == 0 && head_dim == m.hidden / m.heads)) m.head_dim = head_dim;

  const std::int64_t kv = integer({"num_key_value_heads", "num_kv_heads"}, false, m.heads);
  if (kv == 0 || kv > m.heads || m.heads % kv != 0)
    fail("num_key_value_heads = " + std::to_string(kv) + " must divide num_attention_heads = " + std::to_string(m.heads));
  if (kv != m.heads) m.kv_heads = static_cast<int>(kv);
  if (const std::int64_t v = integer({"v_head_dim"}, false, 0); v > 0 && v != static_cast<std::int64_t>(m.head_width()))
    m.value_dim = v;

  m.experts = static_cast<int>(integer({"num_experts", "num_local_experts", "n_routed_experts"}, false, 0));
  // A diffusers transformer's MLP: its ffn_dim, else mlp_ratio x width, else diffusers'
  // FeedForward default of 4 x width.
  std::int64_t default_mlp = 0;
  if (!cls.empty()) {
    default_mlp = 4 * m.hidden;
    if (j.contains("mlp_ratio") && !j.at("mlp_ratio").is_null()) {
      const double width = r.number(j.at("mlp_ratio"), "mlp_ratio") * static_cast<double>(m.hidden);
      if (!(width >= 1 && width <= std::numeric_limits<std::int32_t>::max()))
        fail("mlp_ratio = " + j.at("mlp_ratio").dump() + " gives an MLP of " + std::to_string(width) +
             " channels; give a positive ratio (4.0 for HunyuanVideo) or ffn_dim");
      default_mlp = static_cast<std::int64_t>(width);
    }
  }
  if (m.experts > 0) {
    m.experts_per_token = static_cast<int>(integer({"num_experts_per_tok", "moe_topk"}, true, 0));
    if (m.experts_per_token == 0 || m.experts_per_token > m.experts)
      fail("num_experts_per_tok = " + std::to_string(m.experts_per_token) + " must be in [1, num_experts = " +
           std::to_string(m.experts) + "]");
    // Mixtral gives each expert the dense intermediate_size; Qwen and DeepSeek a moe_intermediate_size.
    m.expert_width = integer({"moe_intermediate_size", "intermediate_size"}, true, 0);
    m.shared_experts = static_cast<int>(integer({"n_shared_experts"}, false, 0));
    if (const std::int64_t shared_width = integer({"shared_expert_intermediate_size"}, false, 0); shared_width > 0) {
      if (m.expert_width == 0 || shared_width % m.expert_width != 0)
        fail("shared_expert_intermediate_size = " + std::to_string(shared_width) +
             " is not a multiple of moe_intermediate_size = " + std::to_string(m.expert_width));
      m.shared_experts += static_cast<int>(shared_width / m.expert_width);
    }
    m.mlp_width = integer({"intermediate_size", "ffn_dim", "n_inner"}, false, m.expert_width);
    m.dense_blocks = detail::dense_blocks_of(j, r, m.blocks);
  } else {
    for (const char* moe : {"num_experts_per_tok", "moe_intermediate_size"})
      if (j.contains(moe) && !j.at(moe).is_null() && !(j.at(moe).is_number_integer() && j.at(moe).get<std::int64_t>() == 0))
        fail(std::string("field '") + moe + "' is set but num_experts is missing; give num_experts (a MoE model) or drop it");
    m.mlp_width = integer({"intermediate_size", "ffn_dim", "n_inner"}, cls.empty(), default_mlp);
  }
  if (m.mlp_width == 0) fail("intermediate_size must be positive");

  // Gated MLPs: SwiGLU comes with silu, and the transformers families of `gated_model_types`
  // gate whatever their activation (Gemma's GeGLU); an explicit mlp_matrices wins.
  std::string act = text("hidden_act");
  if (act.empty()) act = text("hidden_activation");
  if (act.empty()) act = text("activation_function");
  if (act.empty()) act = text("activation_fn");
  const std::string type = text("model_type");
  const bool gated_family = std::find(detail::gated_model_types.begin(), detail::gated_model_types.end(), type) !=
                            detail::gated_model_types.end();
  m.mlp_matrices = (gated_family || act == "silu" || act == "swish" || act == "swiglu" || act == "geglu") ? 3 : 2;
  m.mlp_matrices = static_cast<int>(integer({"mlp_matrices"}, false, m.mlp_matrices));

  m.cross_attention_tokens =
      integer({"cross_attention_tokens", "text_len"}, false, diffusers ? diffusers->cross_attention_tokens : 0);
  m.text_tokens = integer({"text_tokens"}, false, 0);
  if (diffusers != nullptr && !j.contains("text_tokens"))
    m.text_tokens = diffusers->text_tokens >= 0 ? diffusers->text_tokens : integer({"max_text_seq_length"}, true, 0);
  // Language models are causal; a model with cross-attention or joint text tokens (a diffusion
  // transformer) is full.
  const std::string att = text("attention");
  if (att.empty())
    m.attention = diffusers != nullptr || m.cross_attention_tokens > 0 ? attention_kind::full : attention_kind::causal;
  else if (att == "full") m.attention = attention_kind::full;
  else if (att == "causal") m.attention = attention_kind::causal;
  else if (att == "factorized_2d") m.attention = attention_kind::factorized_2d;
  else fail("attention = '" + att + "'; use full, causal or factorized_2d");

  // HunyuanVideo: dual-stream blocks, then single-stream ones; every token passes each.
  if (const std::int64_t single = integer({"num_single_layers"}, false, 0); single > 0) {
    unpriced("num_layers = " + std::to_string(m.blocks) + " dual-stream blocks are priced as single-stream ones: "
             "their text-stream weights are not counted");
    if (single > max_blocks - m.blocks)
      fail("num_layers = " + std::to_string(m.blocks) + " and num_single_layers = " + std::to_string(single) +
           " make more than " + std::to_string(max_blocks) + " blocks");
    m.blocks += static_cast<int>(single);
  }

  // The vocabulary of a language model: the embedding, the LM head and the loss's logits. A
  // diffusers transformer's vocab_size (none publish one) would be its text encoder's.
  if (diffusers == nullptr) {
    m.vocab = integer({"vocab_size", "padded_vocab_size"}, false, 0);
    if (j.contains("tie_word_embeddings") && !j.at("tie_word_embeddings").is_null()) {
      if (!j.at("tie_word_embeddings").is_boolean())
        fail("field 'tie_word_embeddings' = " + j.at("tie_word_embeddings").dump() + " is not true or false");
      m.tied_embeddings = j.at("tie_word_embeddings").get<bool>();
    } else {
      m.tied_embeddings = std::find(detail::tied_model_types.begin(), detail::tied_model_types.end(), type) !=
                          detail::tied_model_types.end();
    }
    if (m.vocab == 0) m.tied_embeddings = false;
  }
  out.max_positions = integer({"max_position_embeddings", "n_positions"}, false, 0);

  // Sliding-window attention: its window, and the blocks that have it.
  if (given("use_sliding_window") != "false") {
    if (const std::int64_t w = integer({"sliding_window"}, false, 0); w > 0) {
      const int windowed = detail::windowed_blocks_of(j, r, type, m.blocks);
      if (windowed > 0 && m.attention == attention_kind::causal) {
        m.window = w;
        if (windowed < m.blocks) m.windowed_blocks = windowed;
      } else if (windowed > 0) {
        unpriced("sliding_window = " + std::to_string(w) + ": a window over " + to_string(m.attention) +
                 " attention is priced over the whole sequence");
      }
    }
  }

  // Fields that change cost and that the model does not price: said, not dropped.
  if (const std::string v = given("num_nextn_predict_layers"); !v.empty() && v != "0")
    unpriced("num_nextn_predict_layers = " + v + ": the multi-token-prediction layers are not priced");
  if (const std::string v = given("image_dim"); diffusers != nullptr && !v.empty())
    unpriced("image_dim = " + v + ": the image tokens of image-to-video cross-attention are not priced");
  if (cls == "WanModel" && type != "t2v" && !type.empty())
    unpriced("model_type = " + type + ": the image tokens of image-to-video cross-attention are not priced");

  try {
    validate(m);
  } catch (const error& e) {
    fail(std::string("inconsistent fields: ") + e.what());
  }
  return out;
}

/// The model a parsed `config.json` describes (`read_config_json(j, source).model`), without
/// the fields it leaves unpriced: call `read_config_json` to hear of them.
inline transformer_spec from_config_json(const nlohmann::json& j, std::string_view source = "config.json") {
  return read_config_json(j, source).model;
}

/// The model of a `config.json` read from `in`, and what it leaves unpriced; `source` names it in errors.
inline model_config read_config(std::istream& in, std::string_view source = "config.json") {
  return read_config_json(json_reader("model config '" + std::string(source) + "': ").parse(in), source);
}

/// The model of the config at `path`: a config.json, or a downloaded model folder holding one
/// (a transformers model's `config.json`, or a diffusers pipeline's `transformer/config.json`).
inline model_config read_config(const std::filesystem::path& path) {
  std::error_code ec;
  std::filesystem::path file = path;
  if (std::filesystem::is_directory(path, ec)) {
    file.clear();
    for (const char* inside : {"config.json", "transformer/config.json"})
      if (std::filesystem::is_regular_file(path / inside, ec)) {
        file = path / inside;
        break;
      }
    check(!file.empty(), errc::io_error, [&] {
      return "model config '" + path.string() + "' is a folder with no config.json or transformer/config.json; give "
             "the path of the model's config file";
    });
  }
  std::ifstream in(file);
  check(static_cast<bool>(in), errc::io_error, [&] {
    return "cannot open model config '" + file.string() + "'; give the path of a Hugging Face config.json";
  });
  return read_config(in, file.string());
}

/// The model of a `config.json` read from `in` (`read_config(in, source).model`).
inline transformer_spec from_config(std::istream& in, std::string_view source = "config.json") {
  return read_config(in, source).model;
}

/// The model of the config at `path` (`read_config(path).model`).
inline transformer_spec from_config(const std::filesystem::path& path) { return read_config(path).model; }

}  // namespace dcp::models
