#pragma once
/// \file
/// A `transformer_spec` as JSON, the one form every dcp document uses for its model (profiles,
/// fits, plans): the preset fields always, the DESIGN section 4.1 extensions where a model sets
/// them. Reading takes what an older file omits at its default, and nothing else: every field
/// that changes cost round-trips.
///
/// \code
/// {"name": "qwen3-30b-a3b", "blocks": 48, "hidden": 2048, "heads": 32, "mlp_width": 6144,
///  "mlp_matrices": 3, "attention": "causal", "text_tokens": 0, "kv_heads": 4, "head_dim": 128,
///  "experts": 128, "experts_per_token": 8, "expert_width": 768, "vocab": 151936}
/// \endcode

#include <cstdint>
#include <initializer_list>
#include <string>

#include <nlohmann/json.hpp>

#include <dcp/json_reader.hpp>
#include <dcp/model/transformer.hpp>

namespace dcp {

/// `m` as JSON (keys in the order above).
inline nlohmann::ordered_json spec_to_json(const transformer_spec& m) {
  nlohmann::ordered_json j = {{"name", m.name},
                              {"blocks", m.blocks},
                              {"hidden", m.hidden},
                              {"heads", m.heads},
                              {"mlp_width", m.mlp_width},
                              {"mlp_matrices", m.mlp_matrices},
                              {"attention", to_string(m.attention)},
                              {"text_tokens", m.text_tokens}};
  auto put = [&](const char* key, std::int64_t v) {
    if (v != 0) j[key] = v;
  };
  put("kv_heads", m.kv_heads);
  put("head_dim", m.head_dim);
  put("cross_attention_tokens", m.cross_attention_tokens);
  put("experts", m.experts);
  put("experts_per_token", m.experts_per_token);
  put("expert_width", m.expert_width);
  put("shared_experts", m.shared_experts);
  put("vocab", m.vocab);
  if (m.tied_embeddings) j["tied_embeddings"] = true;
  if (m.loss != loss_kind::full) j["loss"] = to_string(m.loss);
  put("window", m.window);
  put("windowed_blocks", m.windowed_blocks);
  put("value_dim", m.value_dim);
  put("q_rank", m.q_rank);
  put("kv_rank", m.kv_rank);
  put("rope_dim", m.rope_dim);
  put("dense_blocks", m.dense_blocks);
  if (m.pipeline_stages > 1) j["pipeline_stages"] = m.pipeline_stages;  // a stage of the model (DESIGN 4.5)
  return j;
}

/// The model `j` describes (`where` names it in errors: "model"). name, blocks, hidden, heads and
/// mlp_width are required; mlp_matrices (2), attention (full), text_tokens, the extensions (0),
/// tied_embeddings (false) and loss (full) may be absent. Integers are checked as JSON integers in range; the caller
/// validates the model.
inline transformer_spec spec_from_json(const nlohmann::json& j, const json_reader& r,
                                       const std::string& where = "model") {
  transformer_spec m;
  const auto required = [&](const char* key) -> const nlohmann::json& { return r.at(j, key, "\"" + where + "\""); };
  const auto field = [&](const char* key) { return where + "." + key; };
  const auto optional = [&]<class Int>(const char* key, Int fallback) -> Int {
    return j.contains(key) ? r.integer_as<Int>(j.at(key), field(key)) : fallback;
  };
  const auto& name = required("name");
  if (!name.is_string()) r.fail("field '" + field("name") + "' = " + name.dump() + " is not a string");
  m.name = name.get<std::string>();
  m.blocks = r.integer_as<int>(required("blocks"), field("blocks"));
  m.hidden = r.integer_as<std::int64_t>(required("hidden"), field("hidden"));
  m.heads = r.integer_as<int>(required("heads"), field("heads"));
  m.mlp_width = r.integer_as<std::int64_t>(required("mlp_width"), field("mlp_width"));
  m.mlp_matrices = optional("mlp_matrices", 2);
  // An enum field written as its `to_string` name; `use` lists the names in the error.
  const auto named = [&]<class Enum>(const char* key, Enum& out, std::initializer_list<Enum> values, const char* use) {
    if (!j.contains(key)) return;
    const auto& v = j.at(key);
    const std::string text = v.is_string() ? v.get<std::string>() : v.dump();
    for (const Enum e : values)
      if (text == to_string(e)) {
        out = e;
        return;
      }
    r.fail(field(key) + " = '" + text + "'; use " + use);
  };
  named("attention", m.attention, {attention_kind::full, attention_kind::causal, attention_kind::factorized_2d},
        "full, causal or factorized_2d");
  m.text_tokens = optional("text_tokens", std::int64_t{0});
  m.kv_heads = optional("kv_heads", 0);
  m.head_dim = optional("head_dim", std::int64_t{0});
  m.cross_attention_tokens = optional("cross_attention_tokens", std::int64_t{0});
  m.experts = optional("experts", 0);
  m.experts_per_token = optional("experts_per_token", 0);
  m.expert_width = optional("expert_width", std::int64_t{0});
  m.shared_experts = optional("shared_experts", 0);
  m.vocab = optional("vocab", std::int64_t{0});
  if (j.contains("tied_embeddings")) {
    const auto& t = j.at("tied_embeddings");
    if (!t.is_boolean()) r.fail("field '" + field("tied_embeddings") + "' = " + t.dump() + " is not true or false");
    m.tied_embeddings = t.get<bool>();
  }
  named("loss", m.loss, {loss_kind::full, loss_kind::chunked}, "full or chunked");
  m.window = optional("window", std::int64_t{0});
  m.windowed_blocks = optional("windowed_blocks", 0);
  m.value_dim = optional("value_dim", std::int64_t{0});
  m.q_rank = optional("q_rank", std::int64_t{0});
  m.kv_rank = optional("kv_rank", std::int64_t{0});
  m.rope_dim = optional("rope_dim", std::int64_t{0});
  m.dense_blocks = optional("dense_blocks", 0);
  m.pipeline_stages = optional("pipeline_stages", 1);
  return m;
}

}  // namespace dcp
