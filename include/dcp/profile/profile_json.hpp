#pragma once
/// \file
/// Reading and writing `dcp.profile/v1` (DESIGN section 6) with nlohmann_json.
///
/// \code
/// { "format": "dcp.profile/v1", "device": "h200", "gpus": 8, "gpus_per_node": 8,
///   "memory_capacity_bytes": 1.269e11, "static_memory_bytes": 4.1e10, "profiled_blocks": 2,
///   "model": {"name": "cogvideox-5b", "blocks": 42, "hidden": 3072, "heads": 48, "mlp_width": 12288,
///             "mlp_matrices": 2, "attention": "full", "text_tokens": 226, "kv_heads": 0, "head_dim": 0,
///             "cross_attention_tokens": 0, "experts": 0, "experts_per_token": 0, "expert_width": 0,
///             "shared_experts": 0},
///   "stats": {"runs": 120, "seconds": 3.2, "exhaustive_runs": 2000, "exhaustive_seconds": 410},
///   "entries": [ {"bucket": 0, "tokens": 1024, "shape": [1, 1024], "sp": 1, "batch": 4,
///                 "checkpointed_blocks": 0, "time_s": 0.012, "memory_bytes": 4.2e10} ] }
/// \endcode
/// The model carries every `transformer_spec` field (DESIGN section 4.1); a file without the
/// extension fields (written before them) reads them as 0, the dense full-head model it
/// described. There are no layout fields: `profiled_cost`
/// prices tp = ep = 1, Ulysses-only steps.
/// A malformed or truncated document, an unknown format or a missing field is a `dcp::error`
/// (parse_error), a NaN / negative entry one with invalid_argument; both name the source and
/// the field.

#include <cstdint>
#include <istream>
#include <limits>
#include <ostream>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include <dcp/error.hpp>
#include <dcp/model/transformer.hpp>
#include <dcp/profile/profile_table.hpp>

namespace dcp {

inline constexpr std::string_view profile_format = "dcp.profile/v1";

/// Writes `t` as `dcp.profile/v1` JSON (validated first).
inline void write_profile(std::ostream& out, const profile_table& t) {
  validate(t);
  nlohmann::json j;
  j["format"] = profile_format;
  j["device"] = t.device;
  j["gpus"] = t.gpus;
  j["gpus_per_node"] = t.gpus_per_node;
  j["memory_capacity_bytes"] = t.memory_capacity_bytes;
  j["static_memory_bytes"] = t.static_memory_bytes;
  j["profiled_blocks"] = t.profiled_blocks;
  j["model"] = {{"name", t.model.name},         {"blocks", t.model.blocks},
                {"hidden", t.model.hidden},     {"heads", t.model.heads},
                {"mlp_width", t.model.mlp_width}, {"mlp_matrices", t.model.mlp_matrices},
                {"attention", to_string(t.model.attention)}, {"text_tokens", t.model.text_tokens},
                {"kv_heads", t.model.kv_heads},   {"head_dim", t.model.head_dim},
                {"cross_attention_tokens", t.model.cross_attention_tokens},
                {"experts", t.model.experts},     {"experts_per_token", t.model.experts_per_token},
                {"expert_width", t.model.expert_width}, {"shared_experts", t.model.shared_experts}};
  j["stats"] = {{"runs", t.stats.runs},
                {"seconds", t.stats.seconds},
                {"exhaustive_runs", t.stats.exhaustive_runs},
                {"exhaustive_seconds", t.stats.exhaustive_seconds}};
  auto& es = j["entries"] = nlohmann::json::array();
  for (const auto& e : t.entries)
    es.push_back({{"bucket", e.bucket},
                  {"tokens", e.tokens},
                  {"shape", {e.frames, e.spatial}},
                  {"sp", e.sp},
                  {"batch", e.batch},
                  {"checkpointed_blocks", e.checkpointed_blocks},
                  {"time_s", e.time_s},
                  {"memory_bytes", e.memory_bytes}});
  out << j.dump(1) << '\n';
}

/// Reads a `dcp.profile/v1` document; `source` names it in error messages.
inline profile_table read_profile(std::istream& in, std::string_view source = "profile") {
  const std::string src(source);
  auto fail = [&](const std::string& what) -> void {
    throw error(errc::parse_error, std::string(profile_format) + " '" + src + "': " + what);
  };
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    fail(std::string("not valid JSON (") + e.what() + ")");
  }
  // Integer fields must be JSON integers in range: nlohmann's get<int>() on 1e54 is undefined.
  auto integer = [&]<class Int>(const nlohmann::json& v, const char* field, Int) -> Int {
    bool ok = false;
    if (v.is_number_unsigned()) ok = v.get<std::uint64_t>() <= static_cast<std::uint64_t>(std::numeric_limits<Int>::max());
    else if (v.is_number_integer())
      ok = v.get<std::int64_t>() >= static_cast<std::int64_t>(std::numeric_limits<Int>::min()) &&
           v.get<std::int64_t>() <= static_cast<std::int64_t>(std::numeric_limits<Int>::max());
    if (!ok) fail(std::string("field '") + field + "' = " + v.dump() + " is not an integer in range");
    return static_cast<Int>(v.get<std::int64_t>());
  };
  auto optional_integer = [&]<class Int>(const nlohmann::json& o, const char* field, Int fallback) -> Int {
    return o.contains(field) ? integer(o.at(field), field, fallback) : fallback;
  };
  profile_table t;
  try {
    if (!j.is_object() || j.value("format", std::string()) != profile_format)
      fail("unknown format '" + (j.is_object() ? j.value("format", std::string()) : std::string()) +
           "'; expected \"dcp.profile/v1\"");
    t.device = j.at("device").get<std::string>();
    t.gpus = integer(j.at("gpus"), "gpus", 0);
    t.gpus_per_node = integer(j.at("gpus_per_node"), "gpus_per_node", 0);
    t.memory_capacity_bytes = j.at("memory_capacity_bytes").get<double>();
    t.static_memory_bytes = j.value("static_memory_bytes", 0.0);
    t.profiled_blocks = optional_integer(j, "profiled_blocks", 2);
    const auto& m = j.at("model");
    t.model.name = m.at("name").get<std::string>();
    t.model.blocks = integer(m.at("blocks"), "model.blocks", 0);
    t.model.hidden = integer(m.at("hidden"), "model.hidden", std::int64_t{0});
    t.model.heads = integer(m.at("heads"), "model.heads", 0);
    t.model.mlp_width = integer(m.at("mlp_width"), "model.mlp_width", std::int64_t{0});
    t.model.mlp_matrices = optional_integer(m, "mlp_matrices", 2);
    const auto att = m.value("attention", std::string("full"));
    if (att == "full") t.model.attention = attention_kind::full;
    else if (att == "causal") t.model.attention = attention_kind::causal;
    else if (att == "factorized_2d") t.model.attention = attention_kind::factorized_2d;
    else fail("model.attention = '" + att + "'; use full, causal or factorized_2d");
    t.model.text_tokens = optional_integer(m, "text_tokens", std::int64_t{0});
    // The section 4.1 extensions; files written before them are dense full-head models (0).
    t.model.kv_heads = optional_integer(m, "kv_heads", 0);
    t.model.head_dim = optional_integer(m, "head_dim", std::int64_t{0});
    t.model.cross_attention_tokens = optional_integer(m, "cross_attention_tokens", std::int64_t{0});
    t.model.experts = optional_integer(m, "experts", 0);
    t.model.experts_per_token = optional_integer(m, "experts_per_token", 0);
    t.model.expert_width = optional_integer(m, "expert_width", std::int64_t{0});
    t.model.shared_experts = optional_integer(m, "shared_experts", 0);
    if (j.contains("stats")) {
      const auto& s = j["stats"];
      t.stats = {optional_integer(s, "runs", std::int64_t{0}), s.value("seconds", 0.0),
                 optional_integer(s, "exhaustive_runs", std::int64_t{0}), s.value("exhaustive_seconds", 0.0)};
    }
    for (const auto& e : j.at("entries")) {
      profile_entry p;
      p.bucket = integer(e.at("bucket"), "bucket", 0);
      p.tokens = integer(e.at("tokens"), "tokens", std::int64_t{0});
      if (e.contains("shape")) {
        p.frames = integer(e["shape"].at(0), "shape[0]", std::int64_t{0});
        p.spatial = integer(e["shape"].at(1), "shape[1]", std::int64_t{0});
      } else {
        p.spatial = p.tokens;
      }
      p.sp = integer(e.at("sp"), "sp", 0);
      p.batch = integer(e.at("batch"), "batch", 0);
      p.checkpointed_blocks = integer(e.at("checkpointed_blocks"), "checkpointed_blocks", 0);
      // JSON has no NaN: a null time or memory is how NaN comes out of nlohmann's dump.
      p.time_s = e.at("time_s").is_null() ? std::nan("") : e.at("time_s").get<double>();
      p.memory_bytes = e.at("memory_bytes").is_null() ? std::nan("") : e.at("memory_bytes").get<double>();
      t.entries.push_back(p);
    }
  } catch (const nlohmann::json::exception& e) {
    fail(std::string("missing or mistyped field (") + e.what() + ")");
  }
  validate(t);
  return t;
}

}  // namespace dcp
