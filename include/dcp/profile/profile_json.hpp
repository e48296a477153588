#pragma once
/// \file
/// Reading and writing `dcp.profile/v1` (DESIGN section 6) with nlohmann_json.
///
/// \code
/// { "format": "dcp.profile/v1", "device": "h200", "gpus": 8, "gpus_per_node": 8,
///   "memory_capacity_bytes": 1.269e11, "static_memory_bytes": 4.1e10, "profiled_blocks": 2,
///   "model": {"name": "cogvideox-5b", "blocks": 42, "hidden": 3072, "heads": 48, "mlp_width": 12288,
///             "mlp_matrices": 2, "attention": "full", "text_tokens": 226},
///   "stats": {"runs": 120, "seconds": 3.2, "exhaustive_runs": 2000, "exhaustive_seconds": 410},
///   "entries": [ {"bucket": 0, "tokens": 1024, "shape": [1, 1024], "sp": 1, "batch": 4,
///                 "checkpointed_blocks": 0, "time_s": 0.012, "memory_bytes": 4.2e10} ] }
/// \endcode
/// A malformed or truncated document, an unknown format or a missing field is a `dcp::error`
/// (parse_error), a NaN / negative entry one with invalid_argument; both name the source and
/// the field.

#include <istream>
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
                {"attention", to_string(t.model.attention)}, {"text_tokens", t.model.text_tokens}};
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
  profile_table t;
  try {
    if (!j.is_object() || j.value("format", std::string()) != profile_format)
      fail("unknown format '" + (j.is_object() ? j.value("format", std::string()) : std::string()) +
           "'; expected \"dcp.profile/v1\"");
    t.device = j.at("device").get<std::string>();
    t.gpus = j.at("gpus").get<int>();
    t.gpus_per_node = j.at("gpus_per_node").get<int>();
    t.memory_capacity_bytes = j.at("memory_capacity_bytes").get<double>();
    t.static_memory_bytes = j.value("static_memory_bytes", 0.0);
    t.profiled_blocks = j.value("profiled_blocks", 2);
    const auto& m = j.at("model");
    t.model.name = m.at("name").get<std::string>();
    t.model.blocks = m.at("blocks").get<int>();
    t.model.hidden = m.at("hidden").get<std::int64_t>();
    t.model.heads = m.at("heads").get<int>();
    t.model.mlp_width = m.at("mlp_width").get<std::int64_t>();
    t.model.mlp_matrices = m.value("mlp_matrices", 2);
    const auto att = m.value("attention", std::string("full"));
    if (att == "full") t.model.attention = attention_kind::full;
    else if (att == "causal") t.model.attention = attention_kind::causal;
    else if (att == "factorized_2d") t.model.attention = attention_kind::factorized_2d;
    else fail("model.attention = '" + att + "'; use full, causal or factorized_2d");
    t.model.text_tokens = m.value("text_tokens", std::int64_t{0});
    if (j.contains("stats")) {
      const auto& s = j["stats"];
      t.stats = {s.value("runs", std::int64_t{0}), s.value("seconds", 0.0), s.value("exhaustive_runs", std::int64_t{0}),
                 s.value("exhaustive_seconds", 0.0)};
    }
    for (const auto& e : j.at("entries")) {
      profile_entry p;
      p.bucket = e.at("bucket").get<int>();
      p.tokens = e.at("tokens").get<std::int64_t>();
      if (e.contains("shape")) {
        p.frames = e["shape"].at(0).get<std::int64_t>();
        p.spatial = e["shape"].at(1).get<std::int64_t>();
      } else {
        p.spatial = p.tokens;
      }
      p.sp = e.at("sp").get<int>();
      p.batch = e.at("batch").get<int>();
      p.checkpointed_blocks = e.at("checkpointed_blocks").get<int>();
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
