#pragma once
/// \file
/// Plan JSON, `dcp.plan/v3`, exactly DESIGN section 6:
/// ```
/// { "format": "dcp.plan/v3", "method": "dcp",
///   "layout": { "gpus": 32, "gpus_per_node": 8, "tp": 1, "ep": 1, "sharding": "zero1", "ring": 1 },
///   "memory_capacity_bytes": 1.269e11, "model": {"name": "cogvideox-5b", ...preset fields...},
///   "device": {"name": "h200", ...cost constants...},
///   "batches": [ { "index": 0, "makespan_s": 1.9, "lower_bound_s": 1.8, "joint_lower_bound_s": 1.85,
///      "steps": [ { "ranks": [0,1,2,3], "sp": 4, "start_s": 0.0, "time_s": 0.41,
///                   "memory_bytes": 9.1e10, "checkpointed_blocks": 12,
///                   "sequences": [ { "id": 17, "tokens": 30240, "shape": [120, 252],
///                                    "loss_weight": 0.0123 } ] } ] } ] }
/// ```
/// `shape` is [T, S] (1D sequences: [1, n]); `tokens` adds the model's text tokens. A batch
/// that skipped sequences (`infeasible_policy::skip`) also lists them under "skipped" as
/// {"id", "tokens", "reason"}; the key is absent otherwise. Every step carries its barrier
/// "round" (`plan_step::round`), and a plan made for per-GPU speed factors lists them under the
/// batch's "speeds". "layout" is the job's `parallel_layout` (GPUs, not units); its "tp" is the
/// GPUs of one planner unit (a TP group, DESIGN section 4.2): every step's "ranks" and "sp" and
/// the "speeds" count units, unit u being GPUs [u tp, (u + 1) tp). A Ulysses x Ring step carries
/// "ring" (absent: 1), so sp = (sp / ring) x ring. On a cluster of named nodes the layout also
/// lists them, one per node in rank order: "nodes": [{"name": "h100", "speed": 1,
/// "capacity_bytes": 7.2e10}, ...] (absent where the nodes are the cost model's device). A job
/// with pipeline stages has "pp" in its layout (absent: 1); its steps are micro-batches, each
/// unit's in its 1F1B order (the order of the steps it is in), "start_s" its forward's start on
/// stage 0 and "time_s" its time on one stage (DESIGN section 4.5); a batch whose stages run a
/// deeper warmup than 1F1B's carries "warmup_depth" d (absent: 1).
/// Plans made on a `cost_sum` (a trained model plus frozen forward networks, DESIGN 9.4) name
/// the trained model under "model" and "device" and list the networks after them under
/// "frozen", each with every constant of `forward_network`:
/// ```
///   "frozen": [ { "name": "vae3d-encoder", "parameters": 2.5e8, "flops_per_sequence": 0,
///                 "flops_per_token": 2.048e9, "workspace_bytes_per_token": 262144,
///                 "output_bytes_per_sequence": 0, "layers": 40, "flop_rate": 3.7e14, "tau": 2e-5 } ]
/// ```
/// The key is absent for a plain model and in files written before the networks were recorded.
///
/// `read_plan_json` reads such a document back, and the older formats too. They had no "layout":
/// v2 wrote "gpus" and "gpus_per_node" in units and "tp" beside them; v1 only "gpus" and
/// "gpus_per_node" (its plans are tp = 1). Their layout is then known only as far as N, G and tp
/// (`plan_document::full_layout` is false); ep, sharding and ring read as their defaults.
/// Files written before rounds existed have no "round" key on any step: their barriers are
/// inferred from the start times (`infer_rounds`: exact for lockstep plans, one round for dcp and
/// dynamic_cp plans) and the document's `warnings` say so.

#include <bit>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <istream>
#include <limits>
#include <optional>
#include <ostream>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include <nlohmann/json.hpp>

#include <dcp/cost/cost_concepts.hpp>
#include <dcp/cost/cost_sum.hpp>
#include <dcp/cost/device.hpp>
#include <dcp/error.hpp>
#include <dcp/json_reader.hpp>
#include <dcp/model/spec_json.hpp>
#include <dcp/model/transformer.hpp>
#include <dcp/plan/infer_rounds.hpp>
#include <dcp/plan/plan.hpp>
#include <dcp/sequence.hpp>

namespace dcp::sim {

/// The cost constants of a device (with its kernel clock's and its GEMM precision when it has one).
inline nlohmann::ordered_json to_json(const device_spec& d) {
  nlohmann::ordered_json j = {{"name", d.name},           {"peak", d.peak},         {"eff_max", d.eff_max},
                              {"x_half", d.x_half},       {"alpha", d.alpha},       {"tau", d.tau},
                              {"bw_intra", d.bw_intra},   {"bw_inter", d.bw_inter}, {"gpus_per_node", d.gpus_per_node},
                              {"mem_bytes", d.mem_bytes}, {"usable", d.usable},     {"beta", d.beta}};
  if (d.kernel.enabled()) {
    const kernel_clock& k = d.kernel;
    j["kernel"] = {{"attention_forward", k.attention_forward},
                   {"attention_forward_half", k.attention_forward_half},
                   {"attention_backward", k.attention_backward},
                   {"attention_backward_half", k.attention_backward_half},
                   {"attention_causal", k.attention_causal},
                   {"head_width_64", k.head_width_64},
                   {"head_width_256", k.head_width_256},
                   {"tp_exposed", k.tp_exposed},
                   {"hbm_bw", k.hbm_bw},
                   {"reserved_bytes", k.reserved_bytes},
                   {"fp8_gemm", k.fp8_gemm},
                   {"precision", to_string(d.precision)}};
  }
  return j;
}

/// The constants of a frozen forward network.
inline nlohmann::ordered_json to_json(const forward_network& f) {
  return {{"name", f.name},
          {"parameters", f.parameters},
          {"flops_per_sequence", f.flops_per_sequence},
          {"flops_per_token", f.flops_per_token},
          {"workspace_bytes_per_token", f.workspace_bytes_per_token},
          {"output_bytes_per_sequence", f.output_bytes_per_sequence},
          {"layers", f.layers},
          {"flop_rate", f.flop_rate},
          {"tau", f.tau}};
}

namespace detail {
/// A cost model that adds frozen forward networks to a trained model's (`cost_sum`).
template <class C>
concept with_frozen_networks = requires(const C& c) {
  c.trained;
  { c.forward } -> std::convertible_to<const std::vector<forward_network>&>;
};

/// The trained model's cost model inside `cost`: `cost` itself unless it adds frozen networks.
template <class C>
const auto& trained_part(const C& cost) noexcept {
  if constexpr (with_frozen_networks<C>)
    return trained_part(cost.trained);
  else
    return cost;
}
}  // namespace detail

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
                     {"round", s.round},
                     {"sequences", std::move(seqs)}});
    if (s.ring != 1) steps.back()["ring"] = s.ring;  // Ulysses x Ring; absent = 1
  }
  nlohmann::ordered_json b = {{"index", index},
                      {"makespan_s", p.makespan_s},
                      {"lower_bound_s", p.lower_bound_s},
                      {"joint_lower_bound_s", p.joint_lower_bound_s},
                      {"steps", std::move(steps)}};
  if (!p.skipped.empty()) {
    nlohmann::ordered_json skipped = nlohmann::ordered_json::array();
    for (const auto& k : p.skipped) skipped.push_back({{"id", k.id}, {"tokens", k.tokens}, {"reason", k.reason}});
    b["skipped"] = std::move(skipped);
  }
  if (!p.speeds.empty()) b["speeds"] = p.speeds;
  if (p.warmup_depth != 1) b["warmup_depth"] = p.warmup_depth;  // pipelines' warmup; absent = 1 (1F1B)
  return b;
}

/// The plan format this version writes; `read_plan_json` also reads `dcp.plan/v2` and `/v1`.
inline constexpr std::string_view plan_format = "dcp.plan/v3";

/// The "layout" object of a plan document.
inline nlohmann::ordered_json to_json(const parallel_layout& l) {
  nlohmann::ordered_json out = {{"gpus", l.gpus}, {"gpus_per_node", l.gpus_per_node},  {"tp", l.tp},
                                {"ep", l.ep},     {"sharding", to_string(l.sharding)}, {"ring", l.ring}};
  if (l.pp > 1) out["pp"] = l.pp;  // pipeline stages; absent = 1
  if (!l.nodes.empty()) {
    auto& nodes = out["nodes"] = nlohmann::ordered_json::array();
    for (const auto& d : l.nodes)
      nodes.push_back({{"name", d.name}, {"speed", d.speed}, {"capacity_bytes", d.capacity}});
  }
  return out;
}

/// The `dcp.plan/v3` document of `plans` (the batches of one method, in order) made on `cost`.
/// Model and device come from the cost model's `model` and `device` members when it has them
/// (the trained model's for a `cost_sum`, whose networks go under "frozen").
template <cost_model C>
nlohmann::ordered_json plan_json(const C& cost, std::span<const plan> plans) {
  const auto& trained = detail::trained_part(cost);
  nlohmann::ordered_json doc;
  doc["format"] = plan_format;
  doc["method"] = plans.empty() ? std::string() : plans.front().method;
  doc["layout"] = to_json(parallel_layout(cost.layout()));
  doc["memory_capacity_bytes"] = cost.capacity();
  using trained_type = std::remove_cvref_t<decltype(trained)>;
  if constexpr (cost_model_names_model<trained_type, transformer_spec>)
    doc["model"] = spec_to_json(trained.model);
  else
    doc["model"] = {{"name", "custom"}, {"blocks", cost.blocks()}, {"heads", cost.heads()}};
  if constexpr (cost_model_names_device<trained_type, device_spec>)
    doc["device"] = to_json(trained.device);
  else
    doc["device"] = {{"name", "custom"}, {"gpus_per_node", cost.gpus_per_node()}};
  if constexpr (detail::with_frozen_networks<C>) {
    doc["frozen"] = nlohmann::ordered_json::array();
    for (const auto& f : cost.forward) doc["frozen"].push_back(to_json(f));
  }
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
  out.close();  // flushes: a full disk fails here, not silently later
  check(!out.fail(), errc::io_error, [&] { return "writing plan JSON to '" + path.string() + "' failed"; });
}

/// A plan JSON document read back: the job it was made for and its plans, one per batch.
struct plan_document {
  std::string method;
  int gpus = 0;           ///< planner units (`layout.units()`)
  int gpus_per_node = 0;  ///< units per node
  parallel_layout layout;   ///< the job's layout; tp = 1 for a `dcp.plan/v1` file
  bool full_layout = true;  ///< false for v1 and v2 files: only N, G and tp were recorded
  double memory_capacity_bytes = 0;
  std::string model;   ///< the model's name
  std::string device;  ///< the device's name
  /// The GEMM precision the file's device priced ("bf16" or "fp8"; "" when not recorded: a
  /// device without a kernel clock, or a file written before it was recorded).
  std::string precision;
  /// The frozen networks every step also ran ("frozen"); none recorded when the file has no such
  /// key (a plain model, or a file written before they were recorded).
  std::optional<std::vector<forward_network>> frozen;
  std::vector<plan> plans;
  std::vector<std::string> warnings;  ///< what the reader inferred (rounds of an older file)
  friend bool operator==(const plan_document&, const plan_document&) = default;
};

/// Reads a `dcp.plan/v3`, `/v2` or `/v1` document; `source` names it in errors. Throws
/// `dcp::error(errc::parse_error)` naming the field for malformed JSON, a wrong format, a missing
/// or mistyped field, or a step whose ranks are not `sp` consecutive GPUs inside the job.
inline plan_document read_plan_json(std::istream& in, std::string_view source = "plan") {
  const std::string src(source);
  json_reader reader("dcp.plan '" + src + "': ");  // the version once known
  const auto fail = [&](const std::string& what) { reader.fail(what); };
  const nlohmann::json j = reader.parse(in);
  const auto integer = [&](const nlohmann::json& v, const std::string& field, std::int64_t lo, std::int64_t hi) {
    return reader.integer(v, field, lo, hi);
  };
  const auto number = [&](const nlohmann::json& v, const std::string& field) { return reader.number(v, field); };
  const auto at = [&](const nlohmann::json& o, const char* key, const std::string& where) -> const nlohmann::json& {
    return reader.at(o, key, where);
  };
  constexpr std::int64_t int_max = std::numeric_limits<int>::max(), i64_max = std::numeric_limits<std::int64_t>::max();
  plan_document doc;
  bool rounds_given = false;
  try {
    const std::string format = reader.expect_format(j, {plan_format, "dcp.plan/v2", "dcp.plan/v1"});
    reader.set_prefix(format + " '" + src + "': ");
    doc.method = at(j, "method", "the document").get<std::string>();
    parallel_layout& l = doc.layout;
    if (format == plan_format) {
      const auto& jl = at(j, "layout", "the document");
      l.gpus = static_cast<int>(integer(at(jl, "gpus", "\"layout\""), "layout gpus", 1, int_max));
      l.gpus_per_node =
          static_cast<int>(integer(at(jl, "gpus_per_node", "\"layout\""), "layout gpus_per_node", 1, int_max));
      l.tp = static_cast<int>(integer(at(jl, "tp", "\"layout\""), "layout tp", 1, int_max));
      l.ep = static_cast<int>(integer(at(jl, "ep", "\"layout\""), "layout ep", 1, int_max));
      const auto& sharding = at(jl, "sharding", "\"layout\"");
      if (!sharding.is_string()) fail("field 'layout sharding' = " + sharding.dump() + " is not a string");
      try {
        l.sharding = sharding_of(sharding.get<std::string>());
      } catch (const error&) {
        fail("field 'layout sharding' = " + sharding.dump() + " is not replicated, zero1 or zero3");
      }
      l.ring = static_cast<int>(integer(at(jl, "ring", "\"layout\""), "layout ring", 1, int_max));
      if (jl.contains("pp")) l.pp = static_cast<int>(integer(jl.at("pp"), "layout pp", 1, int_max));
      if (jl.contains("nodes")) {
        const auto& nodes = jl.at("nodes");
        if (!nodes.is_array()) fail("field 'layout nodes' is not an array");
        if (nodes.size() > static_cast<std::size_t>(l.node_count()))
          fail("field 'layout nodes' lists " + std::to_string(nodes.size()) + " nodes for " +
               std::to_string(l.node_count()));
        for (std::size_t i = 0; i < nodes.size(); ++i) {
          const std::string where = "layout node " + std::to_string(i);
          const auto& name = at(nodes[i], "name", "\"" + where + "\"");
          if (!name.is_string()) fail("field '" + where + " name' = " + name.dump() + " is not a string");
          l.nodes.push_back({name.get<std::string>(), number(at(nodes[i], "speed", where), where + " speed"),
                             number(at(nodes[i], "capacity_bytes", where), where + " capacity_bytes")});
        }
      }
    } else {
      // Units and tp; v1 plans are tp = 1.
      const auto units = integer(at(j, "gpus", "the document"), "gpus", 1, int_max);
      const auto per_node = integer(at(j, "gpus_per_node", "the document"), "gpus_per_node", 1, int_max);
      if (format != "dcp.plan/v1") l.tp = static_cast<int>(integer(at(j, "tp", "the document"), "tp", 1, 1024));
      if (units * l.tp > int_max || per_node * l.tp > int_max) fail("\"gpus\" x \"tp\" overflows");
      l.gpus = static_cast<int>(units * l.tp), l.gpus_per_node = static_cast<int>(per_node * l.tp);
      doc.full_layout = false;
    }
    try {
      l.validate();
    } catch (const error& e) {
      std::string why = e.what();  // without the category's words: this is a parse error
      const std::string category = ": " + e.code().message();
      if (why.ends_with(category)) why.resize(why.size() - category.size());
      fail("\"layout\": " + why);
    }
    doc.gpus = l.units(), doc.gpus_per_node = l.units_per_node();
    doc.memory_capacity_bytes = number(at(j, "memory_capacity_bytes", "the document"), "memory_capacity_bytes");
    doc.model = at(at(j, "model", "the document"), "name", "\"model\"").get<std::string>();
    doc.device = at(at(j, "device", "the document"), "name", "\"device\"").get<std::string>();
    if (const auto& d = j.at("device"); d.contains("kernel") && d.at("kernel").is_object() &&
                                        d.at("kernel").contains("precision")) {
      const auto& p = d.at("kernel").at("precision");
      if (!p.is_string()) fail("\"device\" \"kernel\" \"precision\" is not a string");
      doc.precision = p.get<std::string>();
    }
    if (j.contains("frozen")) {
      const auto& nets = j.at("frozen");
      if (!nets.is_array()) fail("\"frozen\" is not an array");
      doc.frozen.emplace();
      for (std::size_t i = 0; i < nets.size(); ++i) {
        const std::string wf = "frozen[" + std::to_string(i) + "]";
        const auto& jf = nets[i];
        auto constant = [&](const char* key) { return number(at(jf, key, wf), wf + " " + key); };
        forward_network net;
        net.name = at(jf, "name", wf).get<std::string>();
        net.parameters = constant("parameters");
        net.flops_per_sequence = constant("flops_per_sequence");
        net.flops_per_token = constant("flops_per_token");
        net.workspace_bytes_per_token = constant("workspace_bytes_per_token");
        net.output_bytes_per_sequence = constant("output_bytes_per_sequence");
        net.layers = static_cast<int>(integer(at(jf, "layers", wf), wf + " layers", 1, int_max));
        net.flop_rate = constant("flop_rate");
        net.tau = constant("tau");
        try {
          dcp::validate(net);
        } catch (const error& e) {
          std::string why = e.what();  // without the category's words: this is a parse error
          const std::string category = ": " + e.code().message();
          if (why.ends_with(category)) why.resize(why.size() - category.size());
          fail(wf + ": " + why);
        }
        doc.frozen->push_back(std::move(net));
      }
    }
    const auto& batches = at(j, "batches", "the document");
    if (!batches.is_array()) fail("\"batches\" is not an array");
    for (std::size_t b = 0; b < batches.size(); ++b) {
      const std::string wb = "batch " + std::to_string(b);
      const auto& jb = batches[b];
      plan p;
      p.method = doc.method, p.gpus = doc.gpus, p.gpus_per_node = doc.gpus_per_node, p.layout = doc.layout;
      p.memory_capacity_bytes = doc.memory_capacity_bytes;
      p.makespan_s = number(at(jb, "makespan_s", wb), wb + " makespan_s");
      p.lower_bound_s = number(at(jb, "lower_bound_s", wb), wb + " lower_bound_s");
      if (jb.contains("joint_lower_bound_s"))
        p.joint_lower_bound_s = number(jb.at("joint_lower_bound_s"), wb + " joint_lower_bound_s");
      if (jb.contains("warmup_depth"))
        p.warmup_depth = static_cast<int>(integer(jb.at("warmup_depth"), wb + " warmup_depth", 1, int_max));
      const auto& steps = at(jb, "steps", wb);
      if (!steps.is_array()) fail(wb + " \"steps\" is not an array");
      for (std::size_t i = 0; i < steps.size(); ++i) {
        const std::string ws = wb + " step " + std::to_string(i);
        const auto& js = steps[i];
        plan_step st;
        const auto& ranks = at(js, "ranks", ws);
        const auto sp = integer(at(js, "sp", ws), ws + " sp", 1, doc.gpus);
        if (!ranks.is_array() || static_cast<std::int64_t>(ranks.size()) != sp)
          fail(ws + ": \"ranks\" must list sp = " + std::to_string(sp) + " GPUs");
        for (std::size_t r = 0; r < ranks.size(); ++r) {
          const auto rank = integer(ranks[r], ws + " ranks[" + std::to_string(r) + "]", 0, doc.gpus - 1);
          if (r == 0) st.ranks.first = static_cast<int>(rank);
          else if (rank != st.ranks.first + static_cast<std::int64_t>(r))
            fail(ws + ": \"ranks\" must be consecutive GPUs (a block), got " + ranks.dump());
        }
        st.ranks.size = static_cast<int>(sp);
        if (st.ranks.end() > doc.gpus) fail(ws + ": ranks run past GPU " + std::to_string(doc.gpus - 1));
        st.checkpointed_blocks = static_cast<int>(integer(at(js, "checkpointed_blocks", ws), ws + " checkpointed_blocks", 0, int_max));
        st.start_s = number(at(js, "start_s", ws), ws + " start_s");
        st.time_s = number(at(js, "time_s", ws), ws + " time_s");
        st.memory_bytes = number(at(js, "memory_bytes", ws), ws + " memory_bytes");
        // Files written before rounds existed: inferred below (see the file comment).
        rounds_given = rounds_given || js.contains("round");
        if (js.contains("round")) st.round = static_cast<int>(integer(js.at("round"), ws + " round", 0, int_max));
        // Ulysses x Ring split; files without it run Ulysses over all sp ranks.
        if (js.contains("ring")) {
          st.ring = static_cast<int>(integer(js.at("ring"), ws + " ring", 1, sp));
          if (sp % st.ring != 0 || !std::has_single_bit(static_cast<unsigned>(st.ring)))
            fail(ws + ": \"ring\" = " + std::to_string(st.ring) + " must be a power of two dividing sp = " +
                 std::to_string(sp));
        }
        const auto& seqs = at(js, "sequences", ws);
        if (!seqs.is_array()) fail(ws + " \"sequences\" is not an array");
        for (std::size_t q = 0; q < seqs.size(); ++q) {
          const std::string wq = ws + " sequence " + std::to_string(q);
          const auto& jq = seqs[q];
          planned_sequence ps;
          ps.id = integer(at(jq, "id", wq), wq + " id", std::numeric_limits<std::int64_t>::min() / 2, i64_max);
          ps.tokens = integer(at(jq, "tokens", wq), wq + " tokens", 1, i64_max);
          const auto& shape = at(jq, "shape", wq);
          if (!shape.is_array() || shape.size() != 2) fail(wq + ": \"shape\" must be [T, S]");
          ps.frames = integer(shape[0], wq + " shape[0]", 1, max_shape_tokens);
          ps.spatial = integer(shape[1], wq + " shape[1]", 1, max_shape_tokens);
          ps.loss_weight = number(at(jq, "loss_weight", wq), wq + " loss_weight");
          st.sequences.push_back(ps);
        }
        p.steps.push_back(std::move(st));
      }
      if (jb.contains("skipped")) {
        const auto& sk = jb.at("skipped");
        if (!sk.is_array()) fail(wb + " \"skipped\" is not an array");
        for (std::size_t q = 0; q < sk.size(); ++q) {
          const std::string wq = wb + " skipped " + std::to_string(q);
          p.skipped.push_back({integer(at(sk[q], "id", wq), wq + " id", std::numeric_limits<std::int64_t>::min() / 2, i64_max),
                               integer(at(sk[q], "tokens", wq), wq + " tokens", 0, i64_max),
                               at(sk[q], "reason", wq).get<std::string>()});
        }
      }
      if (jb.contains("speeds")) {
        const auto& sp = jb.at("speeds");
        if (!sp.is_array() || static_cast<int>(sp.size()) != doc.gpus)
          fail(wb + " \"speeds\" must list one factor per GPU (" + std::to_string(doc.gpus) + ")");
        for (std::size_t r = 0; r < sp.size(); ++r) {
          const double v = number(sp[r], wb + " speeds[" + std::to_string(r) + "]");
          if (!(v > 0) || !std::isfinite(v)) fail(wb + " speeds[" + std::to_string(r) + "] = " + sp[r].dump() + " must be positive");
          p.speeds.push_back(v);
        }
      }
      doc.plans.push_back(std::move(p));
    }
  } catch (const nlohmann::json::exception& e) {
    fail(std::string("malformed (") + e.what() + ")");
  }
  std::size_t steps = 0;
  for (const auto& p : doc.plans) steps += p.steps.size();
  if (!rounds_given && steps > 0) {
    int barriers = 0;
    for (auto& p : doc.plans) barriers += infer_rounds(p, lockstep_method(doc.method));
    doc.warnings.push_back("no step has a \"round\" (a file written before rounds existed): " + std::to_string(barriers) +
                           " barriers inferred from the start times" +
                           (lockstep_method(doc.method) ? " (every start of the lockstep method " + doc.method + ")"
                                                        : " (starts that only a barrier explains)") +
                           "; write the file again to record them");
  }
  return doc;
}

/// Reads the plan JSON file at `path`; throws `dcp::error(errc::io_error)` when it cannot be opened.
inline plan_document read_plan_json(const std::filesystem::path& path) {
  std::error_code ec;
  check(!std::filesystem::is_directory(path, ec), errc::io_error,
        [&] { return "cannot read plan JSON '" + path.string() + "': it is a directory; give a dcp.plan file"; });
  std::ifstream in(path);
  check(in.is_open(), errc::io_error, [&] { return "cannot open plan JSON '" + path.string() + "'"; });
  return read_plan_json(in, path.string());
}

}  // namespace dcp::sim
