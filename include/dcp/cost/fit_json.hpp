#pragma once
/// \file
/// `dcp.fit/v1`: a `fitted_cost` as JSON (`write_fit`, `read_fit`), beside `dcp.profile/v1`.

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <istream>
#include <limits>
#include <ostream>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include <dcp/cost/device.hpp>
#include <dcp/cost/fitted_cost.hpp>
#include <dcp/error.hpp>
#include <dcp/model/transformer.hpp>

namespace dcp {

inline constexpr std::string_view fit_format = "dcp.fit/v1";

/// Writes `c` as `dcp.fit/v1` JSON (validated first):
/// \code
/// { "format": "dcp.fit/v1", "gpus": 32, "memory_margin": 0.02, "recompute_ratio": 1,
///   "model": {...as dcp.profile/v1...}, "device": {"name": "h200", "peak": 9.89e14, ...every device_spec field},
///   "coefficients": {"linear_flop_s": 1.8e-15, ..., "checkpoint_bytes": 2},
///   "residuals": {"time_points": 40, "time_rms": 0.01, "time_max": 0.03, "memory_points": 40, ...} }
/// \endcode
inline void write_fit(std::ostream& out, const fitted_cost& c) {
  c.validate();
  const auto& m = c.shape.model;
  const auto& d = c.shape.device;
  nlohmann::json j;
  j["format"] = fit_format;
  j["gpus"] = c.gpus();
  j["memory_margin"] = c.memory_margin;
  j["recompute_ratio"] = c.recompute_ratio;
  j["model"] = {{"name", m.name},           {"blocks", m.blocks},
                {"hidden", m.hidden},       {"heads", m.heads},
                {"mlp_width", m.mlp_width}, {"mlp_matrices", m.mlp_matrices},
                {"attention", to_string(m.attention)}, {"text_tokens", m.text_tokens}};
  j["device"] = {{"name", d.name},         {"peak", d.peak},         {"eff_max", d.eff_max},
                 {"x_half", d.x_half},     {"alpha", d.alpha},       {"tau", d.tau},
                 {"bw_intra", d.bw_intra}, {"bw_inter", d.bw_inter}, {"gpus_per_node", d.gpus_per_node},
                 {"mem_bytes", d.mem_bytes}, {"usable", d.usable},   {"beta", d.beta}};
  j["coefficients"] = {{"linear_flop_s", c.coef.linear_flop_s}, {"attention_flop_s", c.coef.attention_flop_s},
                       {"intra_byte_s", c.coef.intra_byte_s},   {"inter_byte_s", c.coef.inter_byte_s},
                       {"message_s", c.coef.message_s},         {"block_pass_s", c.coef.block_pass_s},
                       {"static_bytes", c.coef.static_bytes},   {"activation_bytes", c.coef.activation_bytes},
                       {"checkpoint_bytes", c.coef.checkpoint_bytes}};
  j["residuals"] = {{"time_points", c.residuals.time_points},     {"time_rms", c.residuals.time_rms},
                    {"time_max", c.residuals.time_max},           {"memory_points", c.residuals.memory_points},
                    {"memory_rms", c.residuals.memory_rms},       {"memory_max", c.residuals.memory_max}};
  out << j.dump(1) << '\n';
}

/// Reads a `dcp.fit/v1` document; `source` names it in errors. Malformed JSON, another format, a
/// missing or mistyped field is a `dcp::error` (parse_error); a negative or non-finite
/// coefficient, an invalid model or device one with invalid_argument.
inline fitted_cost read_fit(std::istream& in, std::string_view source = "fit") {
  const std::string src(source);
  auto fail = [&](const std::string& what) -> void {
    throw error(errc::parse_error, std::string(fit_format) + " '" + src + "': " + what);
  };
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    fail(std::string("not valid JSON (") + e.what() + ")");
  }
  auto integer = [&](const nlohmann::json& v, const char* field) -> std::int64_t {
    const bool ok = (v.is_number_integer() && v.get<std::int64_t>() >= 0 && v.get<std::int64_t>() <= (std::int64_t{1} << 40)) ||
                    (v.is_number_unsigned() && v.get<std::uint64_t>() <= (std::uint64_t{1} << 40));
    if (!ok) fail(std::string("field '") + field + "' = " + v.dump() + " is not a non-negative integer in range");
    return v.get<std::int64_t>();
  };
  auto number = [&](const nlohmann::json& o, const char* field) -> double {
    const auto& v = o.at(field);
    if (!v.is_number()) fail(std::string("field '") + field + "' = " + v.dump() + " is not a number");
    return v.get<double>();
  };
  fitted_cost c;
  try {
    if (!j.is_object() || j.value("format", std::string()) != fit_format)
      fail("unknown format '" + (j.is_object() ? j.value("format", std::string()) : std::string()) +
           "'; expected \"dcp.fit/v1\"");
    c.shape.parallel.gpus = static_cast<int>(integer(j.at("gpus"), "gpus"));
    c.memory_margin = number(j, "memory_margin");
    if (j.contains("recompute_ratio")) c.recompute_ratio = number(j, "recompute_ratio");  // 1 before it was fitted
    const auto& m = j.at("model");
    c.shape.model.name = m.at("name").get<std::string>();
    c.shape.model.blocks = static_cast<int>(integer(m.at("blocks"), "model.blocks"));
    c.shape.model.hidden = integer(m.at("hidden"), "model.hidden");
    c.shape.model.heads = static_cast<int>(integer(m.at("heads"), "model.heads"));
    c.shape.model.mlp_width = integer(m.at("mlp_width"), "model.mlp_width");
    c.shape.model.mlp_matrices = static_cast<int>(integer(m.at("mlp_matrices"), "model.mlp_matrices"));
    const auto att = m.at("attention").get<std::string>();
    if (att == "full") c.shape.model.attention = attention_kind::full;
    else if (att == "causal") c.shape.model.attention = attention_kind::causal;
    else if (att == "factorized_2d") c.shape.model.attention = attention_kind::factorized_2d;
    else fail("model.attention = '" + att + "'; use full, causal or factorized_2d");
    c.shape.model.text_tokens = integer(m.at("text_tokens"), "model.text_tokens");
    const auto& d = j.at("device");
    auto& dv = c.shape.device;
    dv.name = d.at("name").get<std::string>();
    dv.peak = number(d, "peak"), dv.eff_max = number(d, "eff_max"), dv.x_half = number(d, "x_half");
    dv.alpha = number(d, "alpha"), dv.tau = number(d, "tau");
    dv.bw_intra = number(d, "bw_intra"), dv.bw_inter = number(d, "bw_inter");
    dv.gpus_per_node = static_cast<int>(integer(d.at("gpus_per_node"), "device.gpus_per_node"));
    c.shape.parallel.gpus_per_node = dv.gpus_per_node;  // the fit's job lies on the device's nodes
    dv.mem_bytes = number(d, "mem_bytes"), dv.usable = number(d, "usable"), dv.beta = number(d, "beta");
    const auto& k = j.at("coefficients");
    c.coef = {number(k, "linear_flop_s"), number(k, "attention_flop_s"), number(k, "intra_byte_s"),
              number(k, "inter_byte_s"),  number(k, "message_s"),        number(k, "block_pass_s"),
              number(k, "static_bytes"),  number(k, "activation_bytes"), number(k, "checkpoint_bytes")};
    if (j.contains("residuals")) {
      const auto& r = j["residuals"];
      c.residuals = {integer(r.at("time_points"), "residuals.time_points"),
                     integer(r.at("memory_points"), "residuals.memory_points"),
                     number(r, "time_rms"), number(r, "time_max"), number(r, "memory_rms"), number(r, "memory_max")};
    }
  } catch (const nlohmann::json::exception& e) {
    fail(std::string("missing or mistyped field (") + e.what() + ")");
  }
  c.validate();
  return c;
}

}  // namespace dcp
