#pragma once
/// \file
/// Plan JSON, `dcp.plan/v1`, exactly DESIGN section 6:
/// ```
/// { "format": "dcp.plan/v1", "method": "dcp", "gpus": 32, "gpus_per_node": 8,
///   "memory_capacity_bytes": 1.269e11, "model": {"name": "cogvideox-5b", ...preset fields...},
///   "device": {"name": "h200", ...cost constants...},
///   "batches": [ { "index": 0, "makespan_s": 1.9, "lower_bound_s": 1.8,
///      "steps": [ { "ranks": [0,1,2,3], "sp": 4, "start_s": 0.0, "time_s": 0.41,
///                   "memory_bytes": 9.1e10, "checkpointed_blocks": 12,
///                   "sequences": [ { "id": 17, "tokens": 30240, "shape": [120, 252],
///                                    "loss_weight": 0.0123 } ] } ] } ] }
/// ```
/// `shape` is [T, S] (1D sequences: [1, n]); `tokens` adds the model's text tokens. A batch
/// that skipped sequences (`infeasible_policy::skip`) also lists them under "skipped" as
/// {"id", "tokens", "reason"}; the key is absent otherwise.

#include <filesystem>
#include <fstream>
#include <ostream>
#include <span>
#include <string>

#include <nlohmann/json.hpp>

#include <dcp/cost/cost_concepts.hpp>
#include <dcp/cost/device.hpp>
#include <dcp/error.hpp>
#include <dcp/model/transformer.hpp>
#include <dcp/plan/plan.hpp>

namespace dcp::sim {

/// The preset fields of a model.
inline nlohmann::ordered_json to_json(const transformer_spec& m) {
  return {{"name", m.name},
          {"blocks", m.blocks},
          {"hidden", m.hidden},
          {"heads", m.heads},
          {"mlp_width", m.mlp_width},
          {"mlp_matrices", m.mlp_matrices},
          {"attention", to_string(m.attention)},
          {"text_tokens", m.text_tokens}};
}

/// The cost constants of a device.
inline nlohmann::ordered_json to_json(const device_spec& d) {
  return {{"name", d.name},         {"peak", d.peak},         {"eff_max", d.eff_max},
          {"x_half", d.x_half},     {"alpha", d.alpha},       {"tau", d.tau},
          {"bw_intra", d.bw_intra}, {"bw_inter", d.bw_inter}, {"gpus_per_node", d.gpus_per_node},
          {"mem_bytes", d.mem_bytes}, {"usable", d.usable},   {"beta", d.beta}};
}

/// One batch of a plan JSON.
inline nlohmann::ordered_json batch_json(const plan& p, std::size_t index) {
  nlohmann::ordered_json steps = nlohmann::ordered_json::array();
  for (const auto& s : p.steps) {
    nlohmann::ordered_json ranks = nlohmann::ordered_json::array();
    for (int r = s.ranks.first; r < s.ranks.end(); ++r) ranks.push_back(r);
    nlohmann::ordered_json seqs = nlohmann::ordered_json::array();
    for (const auto& q : s.sequences)
      seqs.push_back({{"id", q.id},
                      {"tokens", q.tokens},
                      {"shape", nlohmann::ordered_json::array({q.frames, q.spatial})},
                      {"loss_weight", q.loss_weight}});
    steps.push_back({{"ranks", std::move(ranks)},
                     {"sp", s.sp()},
                     {"start_s", s.start_s},
                     {"time_s", s.time_s},
                     {"memory_bytes", s.memory_bytes},
                     {"checkpointed_blocks", s.checkpointed_blocks},
                     {"sequences", std::move(seqs)}});
  }
  nlohmann::ordered_json b = {{"index", index},
                      {"makespan_s", p.makespan_s},
                      {"lower_bound_s", p.lower_bound_s},
                      {"steps", std::move(steps)}};
  if (!p.skipped.empty()) {
    nlohmann::ordered_json skipped = nlohmann::ordered_json::array();
    for (const auto& k : p.skipped) skipped.push_back({{"id", k.id}, {"tokens", k.tokens}, {"reason", k.reason}});
    b["skipped"] = std::move(skipped);
  }
  return b;
}

/// The `dcp.plan/v1` document of `plans` (the batches of one method, in order) made on `cost`.
/// Model and device come from the cost model's `model` and `device` members when it has them.
template <cost_model C>
nlohmann::ordered_json plan_json(const C& cost, std::span<const plan> plans) {
  nlohmann::ordered_json doc;
  doc["format"] = "dcp.plan/v1";
  doc["method"] = plans.empty() ? std::string() : plans.front().method;
  doc["gpus"] = cost.gpus();
  doc["gpus_per_node"] = cost.gpus_per_node();
  doc["memory_capacity_bytes"] = cost.capacity();
  if constexpr (requires { to_json(cost.model); })
    doc["model"] = to_json(cost.model);
  else
    doc["model"] = {{"name", "custom"}, {"blocks", cost.blocks()}, {"heads", cost.heads()}};
  if constexpr (requires { to_json(cost.device); })
    doc["device"] = to_json(cost.device);
  else
    doc["device"] = {{"name", "custom"}, {"gpus_per_node", cost.gpus_per_node()}};
  nlohmann::ordered_json batches = nlohmann::ordered_json::array();
  for (std::size_t i = 0; i < plans.size(); ++i) batches.push_back(batch_json(plans[i], i));
  doc["batches"] = std::move(batches);
  return doc;
}

/// Writes `plan_json(cost, plans)` to `os` (compact when `indent` < 0).
template <cost_model C>
void write_plan_json(std::ostream& os, const C& cost, std::span<const plan> plans, int indent = -1) {
  os << plan_json(cost, plans).dump(indent) << "\n";
}

/// Writes the plan JSON to the file at `path`; throws `dcp::error(errc::io_error)` when it cannot.
template <cost_model C>
void write_plan_json(const std::filesystem::path& path, const C& cost, std::span<const plan> plans) {
  std::ofstream out(path);
  check(out.is_open(), errc::io_error, [&] { return "cannot write plan JSON to '" + path.string() + "'"; });
  write_plan_json(out, cost, plans);
  check(out.good(), errc::io_error, [&] { return "writing plan JSON to '" + path.string() + "' failed"; });
}

}  // namespace dcp::sim
