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
/// The model is `spec_to_json`'s (model/spec_json.hpp): every `transformer_spec` field, the
/// DESIGN section 4.1 extensions where set; a file without them reads them as 0, the dense
/// full-head model it described. There are no layout fields: `profiled_cost`
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
#include <dcp/json_reader.hpp>
#include <dcp/model/spec_json.hpp>
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
  j["model"] = nlohmann::json(spec_to_json(t.model));
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
  const json_reader r(std::string(profile_format) + " '" + std::string(source) + "': ");
  const nlohmann::json j = r.parse(in);
  auto integer = [&]<class Int>(const nlohmann::json& v, const char* field, Int) -> Int {
    return r.integer_as<Int>(v, field, std::numeric_limits<Int>::min());
  };
  auto optional_integer = [&]<class Int>(const nlohmann::json& o, const char* field, Int fallback) -> Int {
    return o.contains(field) ? integer(o.at(field), field, fallback) : fallback;
  };
  profile_table t;
  r.fields([&] {
    r.expect_format(j, {profile_format});
    t.device = j.at("device").get<std::string>();
    t.gpus = integer(j.at("gpus"), "gpus", 0);
    t.gpus_per_node = integer(j.at("gpus_per_node"), "gpus_per_node", 0);
    t.memory_capacity_bytes = j.at("memory_capacity_bytes").get<double>();
    t.static_memory_bytes = j.value("static_memory_bytes", 0.0);
    t.profiled_blocks = optional_integer(j, "profiled_blocks", 2);
    t.model = spec_from_json(j.at("model"), r);
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
  });
  validate(t);
  return t;
}

}  // namespace dcp
