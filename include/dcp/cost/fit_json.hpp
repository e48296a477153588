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
#include <dcp/json_reader.hpp>
#include <dcp/model/spec_json.hpp>

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
  j["model"] = nlohmann::json(spec_to_json(m));
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
  const json_reader r(std::string(fit_format) + " '" + std::string(source) + "': ");
  const nlohmann::json j = r.parse(in);
  auto integer = [&](const nlohmann::json& v, const char* field) { return r.integer(v, field, 0, std::int64_t{1} << 40); };
  auto number = [&](const nlohmann::json& o, const char* field) { return r.number(o.at(field), field); };
  fitted_cost c;
  r.fields([&] {
    r.expect_format(j, {fit_format});
    c.shape.parallel.gpus = static_cast<int>(integer(j.at("gpus"), "gpus"));
    c.memory_margin = number(j, "memory_margin");
    if (j.contains("recompute_ratio")) c.recompute_ratio = number(j, "recompute_ratio");  // 1 before it was fitted
    c.shape.model = spec_from_json(j.at("model"), r);
    const auto& d = j.at("device");
    auto& dv = c.shape.device;
    dv = device_spec{};  // the fitted form's device has no kernel clock (its shape is the analytic twin)
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
      const auto& res = j.at("residuals");
      c.residuals = {integer(res.at("time_points"), "residuals.time_points"),
                     integer(res.at("memory_points"), "residuals.memory_points"),
                     number(res, "time_rms"), number(res, "time_max"), number(res, "memory_rms"), number(res, "memory_max")};
    }
  });
  c.validate();
  return c;
}

}  // namespace dcp
