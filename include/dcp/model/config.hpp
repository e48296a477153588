#pragma once
/// \file
/// `models::from_config`: a `transformer_spec` from a Hugging Face-style `config.json`
/// (DESIGN section 4.1 lists the fields read and how each maps).

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <istream>
#include <limits>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include <dcp/error.hpp>
#include <dcp/json_reader.hpp>
#include <dcp/model/transformer.hpp>

namespace dcp::models {

/// The model a parsed `config.json` describes; `source` names it in every error.
/// Throws a `dcp::error` (errc::parse_error) naming any missing, mistyped or inconsistent field.
inline transformer_spec from_config_json(const nlohmann::json& j, std::string_view source = "config.json") {
  const std::string src(source);
  const json_reader r("model config '" + src + "': ");
  const auto fail = [&](const std::string& what) { r.fail(what); };
  if (!j.is_object()) fail("not a JSON object");
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

  transformer_spec m;
  m.name = text("name");
  if (m.name.empty()) m.name = text("_name_or_path");
  if (m.name.empty()) m.name = text("model_type");
  if (m.name.empty()) m.name = std::filesystem::path(src).stem().string();

  m.blocks = static_cast<int>(integer({"num_hidden_layers", "num_layers", "n_layer"}, true, 0));
  m.heads = static_cast<int>(integer({"num_attention_heads", "num_heads", "n_head"}, true, 0));
  const std::int64_t head_dim = integer({"head_dim", "attention_head_dim"}, false, 0);
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

  m.experts = static_cast<int>(integer({"num_experts", "num_local_experts", "n_routed_experts"}, false, 0));
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
  } else {
    for (const char* moe : {"num_experts_per_tok", "moe_intermediate_size"})
      if (j.contains(moe) && !j.at(moe).is_null() && !(j.at(moe).is_number_integer() && j.at(moe).get<std::int64_t>() == 0))
        fail(std::string("field '") + moe + "' is set but num_experts is missing; give num_experts (a MoE model) or drop it");
    m.mlp_width = integer({"intermediate_size", "ffn_dim", "n_inner"}, true, 0);
  }
  if (m.mlp_width == 0) fail("intermediate_size must be positive");

  // Gated MLPs (SwiGLU) come with silu; an explicit mlp_matrices wins.
  const std::string act = text("hidden_act").empty() ? text("activation_function") : text("hidden_act");
  m.mlp_matrices = (act == "silu" || act == "swish" || act == "swiglu") ? 3 : 2;
  m.mlp_matrices = static_cast<int>(integer({"mlp_matrices"}, false, m.mlp_matrices));

  m.cross_attention_tokens = integer({"cross_attention_tokens", "text_len"}, false, 0);
  m.text_tokens = integer({"text_tokens"}, false, 0);
  // Language models are causal; a model with cross-attention (a diffusion transformer) is full.
  const std::string att = text("attention");
  if (att.empty()) m.attention = m.cross_attention_tokens > 0 ? attention_kind::full : attention_kind::causal;
  else if (att == "full") m.attention = attention_kind::full;
  else if (att == "causal") m.attention = attention_kind::causal;
  else if (att == "factorized_2d") m.attention = attention_kind::factorized_2d;
  else fail("attention = '" + att + "'; use full, causal or factorized_2d");

  try {
    validate(m);
  } catch (const error& e) {
    fail(std::string("inconsistent fields: ") + e.what());
  }
  return m;
}

/// The model of a `config.json` read from `in`; `source` names it in errors.
inline transformer_spec from_config(std::istream& in, std::string_view source = "config.json") {
  return from_config_json(json_reader("model config '" + std::string(source) + "': ").parse(in), source);
}

/// The model of the `config.json` at `path`.
inline transformer_spec from_config(const std::filesystem::path& path) {
  std::ifstream in(path);
  check(static_cast<bool>(in), errc::io_error, [&] {
    return "cannot open model config '" + path.string() + "'; give the path of a Hugging Face config.json";
  });
  return from_config(in, path.string());
}

}  // namespace dcp::models
