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
#include <type_traits>

#include <nlohmann/json.hpp>

#include <dcp/json_reader.hpp>
#include <dcp/model/optional_fields.hpp>
#include <dcp/model/transformer.hpp>

namespace dcp {

namespace detail {
// An optional field's JSON value: the number or boolean itself, or the loss's name.
template <class T>
T json_value(T v) {
  return v;
}
inline std::string json_value(loss_kind v) { return std::string(to_string(v)); }
}  // namespace detail

/// `m` as JSON (keys in the order above; the optional fields in the order of their table).
inline nlohmann::ordered_json spec_to_json(const transformer_spec& m) {
  nlohmann::ordered_json j = {{"name", m.name},
                              {"blocks", m.blocks},
                              {"hidden", m.hidden},
                              {"heads", m.heads},
                              {"mlp_width", m.mlp_width},
                              {"mlp_matrices", m.mlp_matrices},
                              {"attention", to_string(m.attention)},
                              {"text_tokens", m.text_tokens}};
  // Each optional field that differs from its default, from the one table.
  const transformer_spec defaults;
#define DCP_DETAIL_PUT_OPTIONAL(f) \
  if (m.f != defaults.f) j[#f] = detail::json_value(m.f);
  DCP_MODEL_OPTIONAL_FIELDS(DCP_DETAIL_PUT_OPTIONAL)
#undef DCP_DETAIL_PUT_OPTIONAL
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
  // Each optional field, from the one table: an integer in its type's range, a boolean, or the
  // loss's name.
  const auto read_optional = [&]<class T>(const char* key, T& out) {
    if constexpr (std::is_same_v<T, loss_kind>) {
      named(key, out, {loss_kind::full, loss_kind::chunked}, "full or chunked");
    } else if constexpr (std::is_same_v<T, bool>) {
      if (!j.contains(key)) return;
      const auto& v = j.at(key);
      if (!v.is_boolean()) r.fail("field '" + field(key) + "' = " + v.dump() + " is not true or false");
      out = v.get<bool>();
    } else {
      out = optional(key, out);
    }
  };
#define DCP_DETAIL_READ_OPTIONAL(f) read_optional(#f, m.f);
  DCP_MODEL_OPTIONAL_FIELDS(DCP_DETAIL_READ_OPTIONAL)
#undef DCP_DETAIL_READ_OPTIONAL
  m.pipeline_stages = optional("pipeline_stages", 1);
  return m;
}

}  // namespace dcp
