// dcp-sim: simulate DCP and the baselines on a workload and print the comparison table of
// DESIGN section 7. With no arguments: cogvideox-zipf10 with cogvideox-5b on 32 H200 (8 per node),
// one epoch, methods dcp, dcp-no-inter, dcp-no-intra, bucket, packed, dynamic_cp.
//
//   dcp-sim [--workload NAME | --lengths FILE] [--model PRESET | --model-config FILE] [--gpus N] [--gpus-per-node G]
//           [--tp T] [--ep E] [--sharding replicated|zero1|zero3] [--ring R] [--pp P]
//           [--device h200|h100|a100|h200-analytic|h100-analytic] [--precision bf16|fp8] [--cluster h100x2,h200x2|FILE]
//           [--groups any|buddy] [--comm-budget B]
//           [--methods LIST] [--global-batch-tokens T] [--seed S]
//           [--plan-out FILE] [--trace-out FILE] [--svg-out FILE] [--json]
//           [--on-infeasible error|skip] [--truth SPEC] [--truth-profile FILE] [--truth-seed S]
//           [--frozen t5-xxl,vae3d] [--plan-in FILE]...
//
// With --truth or --truth-profile every plan is executed on the truth clock (DESIGN section 8):
// the `dcp` row calibrates as a training loop does (the start-up probe, then each batch planned on
// the model refitted to what ran, DESIGN 9.3), the others plan on the analytic model, and the
// default methods gain the `dcp-open-loop` row (dcp on the model alone) and the `oracle` row. --frozen adds
// forward-only networks to every step (cost_sum, DESIGN 9.4) for every method and the truth;
// --plan-in replays plan files (sim/replay.hpp) as rows of their own, and brings the frozen
// networks a file records when --frozen is not given. --cluster lays the job out on nodes of
// different devices (presets x node counts in rank order, or a dcp.cluster/v1 file), priced on
// --device's clock at each node's speed and within each GPU's own memory; the default methods
// then gain the dcp-uniform row.

#include <algorithm>
#include <cstdint>
#include <exception>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>
#include <span>
#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <dcp/cost/analytic.hpp>
#include <dcp/cost/cluster_json.hpp>
#include <dcp/cost/cost_sum.hpp>
#include <dcp/cost/device.hpp>
#include <dcp/cost/profiled_cost.hpp>
#include <dcp/cost/scaled_cost.hpp>
#include <dcp/error.hpp>
#include <dcp/group/contiguous_groups.hpp>
#include <dcp/model/config.hpp>
#include <dcp/model/transformer.hpp>
#include <dcp/plan/pipeline_plan.hpp>
#include <dcp/plan/pipeline_schedule.hpp>
#include <dcp/plan/planning_context.hpp>
#include <dcp/profile/profile_json.hpp>
#include <dcp/sim/calibrated.hpp>
#include <dcp/sim/execute.hpp>
#include <dcp/sim/methods.hpp>
#include <dcp/sim/plan_json.hpp>
#include <dcp/sim/replay.hpp>
#include <dcp/sim/report.hpp>
#include <dcp/sim/simulator.hpp>
#include <dcp/sim/svg.hpp>
#include <dcp/sim/trace.hpp>
#include <dcp/sim/truth.hpp>
#include <dcp/workload/embedded.hpp>
#include <dcp/workload/lengths_file.hpp>
#include <dcp/workload/tuning.hpp>

namespace {

// The most GPUs a run plans: a planner's tables grow with N, and a count past this is a typo, not a
// job (the planner benchmark's largest layout is 8192 GPUs).
constexpr int max_gpus = 131072;

struct cli_options {
  std::string workload = "cogvideox-zipf10";
  std::string lengths;
  std::string model;
  std::string model_config;
  std::string loss;  // empty: the model's (full)
  std::string precision = "bf16";
  int tp = 1;
  int ep = 1;
  int ring = 1;
  int pp = 1;
  std::string sharding = "zero1";
  int gpus = 32;
  bool gpus_given = false;
  int gpus_per_node = 8;
  std::string device = "h200";
  std::string cluster;
  std::optional<int> comm_budget;
  std::string groups = "any";
  std::string methods = "dcp,dcp-no-inter,dcp-no-intra,bucket,packed,dynamic_cp";
  bool methods_given = false;
  std::int64_t global_batch_tokens = 0;
  std::uint64_t seed = 0;
  std::string plan_out, trace_out, svg_out;
  bool json = false;
  std::string on_infeasible = "error";
  std::optional<std::string> truth;
  std::string truth_profile;
  std::optional<std::uint64_t> truth_seed;
  std::optional<std::string> frozen;  // nullopt: not given (a --plan-in file may name the networks)
  std::vector<std::string> plan_in;
};

// --frozen LIST: the forward-only networks every step also runs (DESIGN 9.4), each at most once.
std::vector<dcp::forward_network> parse_frozen(const std::string& list, const dcp::device_spec& device) {
  std::vector<dcp::forward_network> out;
  std::vector<std::string> seen;
  std::stringstream in(list);
  for (std::string name; std::getline(in, name, ',');) {
    const auto b = name.find_first_not_of(" \t"), e = name.find_last_not_of(" \t");
    if (b == std::string::npos) continue;
    name = name.substr(b, e - b + 1);
    dcp::check(std::find(seen.begin(), seen.end(), name) == seen.end(), dcp::errc::invalid_argument,
               [&] { return "--frozen names '" + name + "' twice; list each network once"; });
    seen.push_back(name);
    if (name == "t5-xxl") out.push_back(dcp::forward_networks::t5_xxl_encoder(device));
    else if (name == "vae3d") out.push_back(dcp::forward_networks::vae3d_encoder(device));
    else throw dcp::error(dcp::errc::invalid_argument, "--frozen: unknown network '" + name + "'; use t5-xxl, vae3d");
  }
  return out;
}

// The frozen networks on a truth: their FLOP rate divided by `compute`, tau by `overhead`, and
// workspace and conditioning (activations) times `memory`; their weights are static memory.
std::vector<dcp::forward_network> frozen_on_truth(std::vector<dcp::forward_network> frozen, const dcp::cost_scales& s) {
  for (auto& f : frozen) {
    f.flop_rate /= s.compute;
    f.tau *= s.overhead;
    f.workspace_bytes_per_token *= s.memory;
    f.output_bytes_per_sequence *= s.memory;
  }
  return frozen;
}

std::vector<std::string> split_methods(const std::string& list, bool on_truth) {
  std::vector<std::string> out;
  std::stringstream in(list);
  for (std::string name; std::getline(in, name, ',');) {
    const auto b = name.find_first_not_of(" \t"), e = name.find_last_not_of(" \t");
    if (b == std::string::npos) continue;
    out.push_back(name.substr(b, e - b + 1));
  }
  dcp::check(!out.empty(), dcp::errc::invalid_argument,
             [&] { return "--methods '" + list + "' names no method; give a comma-separated list"; });
  for (const auto& m : out) dcp::sim::validate_method(m, on_truth);
  return out;
}

// Every method's metrics, plans as made, and plans as executed (the same without a truth).
struct method_runs {
  std::vector<dcp::sim::run_metrics> rows;
  std::vector<std::vector<dcp::plan>> plans, executed;
};

template <class Cost, class T>
method_runs run_methods(const std::vector<std::string>& methods, const Cost& cost, const dcp::contiguous_groups& groups,
                        const dcp::contiguous_groups& dcp_groups, const dcp::dataset& data,
                        const std::vector<std::vector<dcp::sequence>>& batches,
                        const dcp::sim::method_settings& settings, const dcp::sim::options& base,
                        bool keep_first, bool keep_all, const dcp::sim::truth<T>* truth) {
  method_runs out;
  // Every method plans in the job's context: its cost model, selective recompute (the baselines
  // checkpoint every block regardless) and the job's GPU groups (--groups: every size, or powers
  // of two, which are buddy_groups' blocks). The dcp planner's rows plan on `dcp_groups`, the
  // sizes --comm-budget keeps; the baselines keep theirs (one size, or Megatron's powers of two).
  const dcp::planning_context all{cost, dcp::selective_recompute{}, groups};
  const dcp::planning_context budgeted{cost, dcp::selective_recompute{}, dcp_groups};
  for (std::size_t i = 0; i < methods.size(); ++i) {
    const auto& ctx = methods[i].starts_with("dcp") || methods[i] == "oracle" ? budgeted : all;
    dcp::sim::options opt = base;
    opt.keep_plans = keep_all || (i == 0 && keep_first);
    if (truth) {
      auto r = dcp::sim::run_method(methods[i], ctx, data, batches, settings, *truth, opt);
      out.rows.push_back(r.metrics);
      out.plans.push_back(std::move(r.plans));
      out.executed.push_back(std::move(r.executed));
    } else {
      auto r = dcp::sim::run_method(methods[i], ctx, data, batches, settings, opt);
      out.rows.push_back(r.metrics);
      out.executed.push_back(r.plans);
      out.plans.push_back(std::move(r.plans));
    }
  }
  return out;
}

// With a truth: how dcp and dcp-open-loop compare with the oracle (tokens/s over the run and
// over its second half), their out-of-memory steps (in all and in the first batch), and dcp's
// start-up probe (seconds on the truth, its share of the run, its steps).
template <class T>
nlohmann::json truth_summary(const method_runs& runs, const std::vector<std::string>& methods,
                             const std::vector<std::vector<dcp::sequence>>& batches, const dcp::sim::truth<T>& truth) {
  nlohmann::json summary = nlohmann::json::object();
  const auto at = [&](std::string_view m) {
    const auto it = std::find(methods.begin(), methods.end(), m);
    return it == methods.end() ? methods.size() : std::size_t(it - methods.begin());
  };
  const std::size_t oracle = at("oracle"), n = batches.size();
  auto tps = [&](std::size_t i, std::size_t from) {
    return dcp::sim::tokens_per_s(std::span<const dcp::plan>(runs.executed[i]), from, n);
  };
  for (std::string_view m : {std::string_view("dcp"), dcp::sim::open_loop_method}) {
    const std::size_t i = at(m);
    if (i == methods.size() || runs.executed[i].size() != n) continue;
    const auto& row = runs.rows[i];
    nlohmann::json j;
    j["oom_steps"] = row.oom_steps;
    j["oom_steps_first_batch"] = dcp::sim::oom_steps(std::span<const dcp::plan>(runs.executed[i]), truth.model, 0, 1);
    if (oracle < methods.size()) {
      // Over the run with the probe's time charged: the row's own tokens/s.
      j["vs_oracle"] = row.tokens_per_s / runs.rows[oracle].tokens_per_s;
      j["vs_oracle_second_half"] = tps(i, n / 2) / tps(oracle, n / 2);
    }
    if (row.probe_steps > 0) {
      j["probe_s"] = row.probe_s;
      j["probe_share"] = row.probe_s / row.makespan_s;
      j["probe_steps"] = row.probe_steps;
    }
    summary[std::string(m)] = j;
  }
  return summary;
}

int run(const cli_options& o) {
  // Inputs first, so that a typo fails before any work.
  const bool with_truth = o.truth.has_value() || !o.truth_profile.empty();
  std::string method_list = o.methods;
  if (!o.methods_given && !o.cluster.empty()) method_list += "," + std::string(dcp::sim::uniform_method);
  if (!o.methods_given && with_truth) method_list += "," + std::string(dcp::sim::open_loop_method) + ",oracle";
  const auto methods = split_methods(method_list, with_truth);
  const dcp::sim::truth_spec spec = dcp::sim::parse_truth_spec(o.truth.value_or(""));
  const std::uint64_t truth_seed = o.truth_seed.value_or(o.seed);
  dcp::check(o.on_infeasible == "error" || o.on_infeasible == "skip", dcp::errc::invalid_argument,
             [&] { return "--on-infeasible '" + o.on_infeasible + "' must be error or skip"; });
  dcp::check(o.gpus <= max_gpus, dcp::errc::invalid_argument, [&] {
    return "--gpus " + std::to_string(o.gpus) + " is over the " + std::to_string(max_gpus) +
           " GPUs dcp-sim plans; give fewer";
  });
  dcp::check(o.gpus_per_node >= 1 && o.gpus_per_node <= 1024, dcp::errc::invalid_argument, [&] {
    return "--gpus-per-node " + std::to_string(o.gpus_per_node) + " must be in [1, 1024]";
  });
  dcp::check(o.global_batch_tokens >= 0, dcp::errc::invalid_argument, [&] {
    return "--global-batch-tokens " + std::to_string(o.global_batch_tokens) + " must be positive (0 = 262144 * GPUs)";
  });
  const std::string source = o.lengths.empty() ? o.workload : o.lengths;
  dcp::models::model_config read;
  if (!o.model_config.empty()) {
    read = dcp::models::read_config(std::filesystem::path(o.model_config));
    for (const auto& u : read.unpriced)
      std::cerr << "dcp-sim: note: model config '" << o.model_config << "': " << u << "\n";
  }
  dcp::transformer_spec model = !o.model_config.empty() ? read.model
                                : !o.model.empty()
                                    ? dcp::models::preset(o.model)
                                    : dcp::models::preset(o.lengths.empty() ? dcp::workloads::default_model(o.workload)
                                                                            : std::string_view("cogvideox-5b"));
  if (!o.loss.empty()) {
    dcp::check(o.loss == "full" || o.loss == "chunked", dcp::errc::invalid_argument,
               [&] { return "--loss '" + o.loss + "' must be full or chunked"; });
    dcp::check(model.vocab > 0, dcp::errc::invalid_argument, [&] {
      return "--loss " + o.loss + " prices the logits of a vocabulary, and model '" + model.name +
             "' has none (vocab = 0); drop --loss, or give a --model-config with vocab_size";
    });
    model.loss = o.loss == "chunked" ? dcp::loss_kind::chunked : dcp::loss_kind::full;
  }
  // The table's model line names the layout beyond data x sequence parallelism.
  std::string model_name = model.name;
  if (o.tp > 1) model_name += " tp" + std::to_string(o.tp);
  if (o.ep > 1) model_name += " ep" + std::to_string(o.ep);
  if (o.sharding != "zero1") model_name += " " + o.sharding;
  if (o.ring > 1) model_name += " ring<=" + std::to_string(o.ring);
  if (o.pp > 1) model_name += " pp" + std::to_string(o.pp);
  auto device = dcp::devices::preset(o.device);
  device.gpus_per_node = o.gpus_per_node;
  dcp::check(o.precision == "bf16" || o.precision == "fp8", dcp::errc::invalid_argument,
             [&] { return "--precision '" + o.precision + "' must be bf16 or fp8"; });
  if (o.precision == "fp8") {
    device.precision = dcp::gemm_precision::fp8;
    dcp::check(device.kernel.fp8_gemm > 0, dcp::errc::invalid_argument, [&] {
      return "--precision fp8 needs a device with an FP8 GEMM rate, and '" + device.name +
             "' prices section 4's clock; use --device h200 or h100";
    });
  }
  if (o.precision == "fp8") model_name += " fp8";
  // --cluster: the nodes in rank order, each at its speed on --device's clock.
  std::vector<dcp::unit_device> nodes;
  int gpus = o.gpus;
  std::string device_name = device.name;
  if (!o.cluster.empty()) {
    // A name that looks like a file is read as one, so a typo in its path is named as a missing file.
    const bool file_like = o.cluster.find('/') != std::string::npos || o.cluster.ends_with(".json");
    std::vector<dcp::device_spec> per_node = std::filesystem::is_regular_file(o.cluster) || file_like
                                                 ? dcp::read_cluster_json(std::filesystem::path(o.cluster))
                                                 : dcp::devices::cluster(o.cluster);
    dcp::check(per_node.size() <= std::size_t{max_gpus} / std::size_t(o.gpus_per_node), dcp::errc::invalid_argument,
               [&] {
                 return "--cluster '" + o.cluster + "' has " + std::to_string(per_node.size()) + " nodes of " +
                        std::to_string(o.gpus_per_node) + " GPUs, over the " + std::to_string(max_gpus) +
                        " GPUs dcp-sim plans; use fewer nodes";
               });
    for (auto& d : per_node) {
      d.gpus_per_node = o.gpus_per_node;
      // Every node runs the run's number format, priced against the reference in the same one.
      if (o.precision == "fp8") {
        d.precision = dcp::gemm_precision::fp8;
        dcp::check(d.kernel.fp8_gemm > 0, dcp::errc::invalid_argument, [&] {
          return "--precision fp8 needs every node of --cluster to have an FP8 GEMM rate, and '" + d.name +
                 "' has none; use bf16 or nodes with FP8 (h100, h200)";
        });
      }
    }
    nodes = dcp::node_devices(per_node, device);
    const int cluster_gpus = static_cast<int>(nodes.size()) * o.gpus_per_node;
    dcp::check(!o.gpus_given || o.gpus == cluster_gpus, dcp::errc::invalid_argument, [&] {
      return "--gpus " + std::to_string(o.gpus) + " but --cluster '" + o.cluster + "' has " +
             std::to_string(nodes.size()) + " nodes of " + std::to_string(o.gpus_per_node) + " GPUs (" +
             std::to_string(cluster_gpus) + "); drop --gpus or make them agree";
    });
    gpus = cluster_gpus;
  }
  std::optional<std::vector<dcp::forward_network>> frozen_given;
  if (o.frozen) frozen_given = parse_frozen(*o.frozen, device);
  std::vector<dcp::sim::plan_document> replays;
  for (const auto& file : o.plan_in) {
    replays.push_back(dcp::sim::read_plan_json(std::filesystem::path(file)));
    for (const auto& w : replays.back().warnings) std::cerr << "dcp-sim: " << file << ": " << w << "\n";
  }
  // The networks of --frozen, else those the --plan-in files were written with.
  const auto frozen = dcp::sim::replay_frozen(replays, o.plan_in, frozen_given);
  for (const auto& f : frozen) model_name += " + " + f.name;
  const auto cost = dcp::make_analytic_cost(model, device,
                                            {.gpus = gpus,
                                             .gpus_per_node = device.gpus_per_node,
                                             .tp = o.tp,
                                             .ep = o.ep,
                                             .sharding = dcp::sharding_of(o.sharding),
                                             .ring = o.ring,
                                             .pp = o.pp,
                                             .nodes = nodes});
  if (!nodes.empty()) device_name = cost.layout().cluster_name() + " on the " + device.name + " clock";
  const dcp::group_sizes sizes = dcp::group_sizes_of(o.groups);
  dcp::contiguous_groups{cost.gpus(), cost.gpus_per_node(), sizes}.validate();
  // A profile is a table of one GPU per rank of the dense zero1 model; --truth scales any layout.
  dcp::check((cost.is_classic() && nodes.empty()) || o.truth_profile.empty(), dcp::errc::invalid_argument, [&] {
    return "--truth-profile prices the dense zero1 model of DESIGN section 4 only, on its clock (--device "
           "h200-analytic or h100-analytic); drop --tp, --ep, --sharding, --ring and the "
           "GQA/MoE/cross-attention/vocabulary model, or use --truth SPEC";
  });
  const dcp::dataset data = o.lengths.empty() ? dcp::workloads::make(o.workload, o.seed) : dcp::read_lengths_file(o.lengths);
  if (read.max_positions > 0) {
    std::int64_t longest = 0, over = 0;
    for (const auto& s : data) {
      longest = std::max(longest, cost.tokens_of(s));
      over += cost.tokens_of(s) > read.max_positions;
    }
    if (over > 0)
      std::cerr << "dcp-sim: note: model config '" << o.model_config << "': " << over << " sequences of " << source
                << " are longer than max_position_embeddings = " << read.max_positions << " (the longest " << longest
                << " tokens); they are planned as given, beyond the positions the model was trained for\n";
  }

  dcp::sim::method_settings settings;
  settings.on_infeasible = o.on_infeasible == "skip" ? dcp::infeasible_policy::skip : dcp::infeasible_policy::error;
  settings.global_batch_tokens = o.global_batch_tokens;
  settings.seed = o.seed;
  const auto batches = dcp::epoch_batches(cost, data, o.global_batch_tokens, o.seed);

  dcp::sim::comparison_header header{source,
                                     model_name,
                                     device_name,
                                     gpus,
                                     o.gpus_per_node,
                                     static_cast<std::int64_t>(data.size()),
                                     0,
                                     static_cast<std::int64_t>(batches.size())};
  for (const auto& s : data) header.tokens += cost.tokens_of(s);
  header.groups = sizes == dcp::group_sizes::any ? "any" : "buddy";
  header.model_shape = dcp::describe(model);
  header.model_parameters = model.total_parameters();
  header.model_active_parameters = model.blocks * model.active_block_parameters() + model.vocabulary_parameters();

  if (with_truth && !frozen.empty())
    std::cerr << "dcp-sim: note: the dcp row plans open loop: calibration refits the trained model's analytic "
                 "form, which has no term for the frozen networks\n";
  else if (with_truth && !cost.has_fitted_form())
    std::cerr << "dcp-sim: note: the dcp row plans open loop: calibration refits the form of the dense zero1 model "
                 "(tp = ep = ring = 1, self-attention, dense MLP), and this job is not one\n";
  const bool views = !o.trace_out.empty() || !o.svg_out.empty();
  nlohmann::json calibration;
  dcp::sim::options opt;
  opt.seed = o.seed;
  opt.global_batch_tokens = o.global_batch_tokens;
  opt.progress = &std::cerr;
  const bool keep_first = !o.plan_out.empty();
  method_runs runs;
  // Every row on `pcost` (the analytic model; with --frozen its cost_sum) and, with a truth, on
  // the truth whose deterministic part `on_truth(m, scales)` builds from a model `m` of the
  // trained network (adding the frozen networks on the truth's clock).
  auto run_all = [&](const auto& pcost, const auto& on_truth) {
    const std::span<const std::vector<dcp::sequence>> all(batches);
    // --comm-budget: the sizes the dcp planner keeps within it on this workload (its rows only).
    const dcp::contiguous_groups groups{cost.gpus(), cost.gpus_per_node(), sizes};
    dcp::contiguous_groups dcp_groups = groups;
    if (o.comm_budget) {
      dcp_groups = dcp::budget_group_sizes(dcp::planning_context{pcost, dcp::selective_recompute{}, groups}, data,
                                           *o.comm_budget, dcp::dcp_planner{}, o.global_batch_tokens, o.seed);
      header.groups += ", dcp within " + std::to_string(*o.comm_budget) + " communicators per rank (sizes";
      for (int sp : *dcp_groups.only) header.groups += " " + std::to_string(sp);
      header.groups += ")";
    }
    const dcp::sim::replay_job job{cost.model.name, device.name, o.comm_budget,
                                   device.kernel.enabled() ? dcp::to_string(device.precision) : std::string()};
    for (std::size_t f = 0; f < replays.size(); ++f)
      dcp::sim::check_replay(replays[f], o.plan_in[f], pcost, groups, all, job);
    auto add_replays = [&](const auto* truth) {
      for (std::size_t f = 0; f < replays.size(); ++f) {
        dcp::sim::options ro = opt;
        ro.keep_plans = true;
        if (truth) {
          auto r = dcp::sim::replay(replays[f], o.plan_in[f], pcost, groups, all, job, *truth, ro);
          runs.rows.push_back(r.metrics), runs.plans.push_back(std::move(r.plans)), runs.executed.push_back(std::move(r.executed));
        } else {
          auto r = dcp::sim::replay(replays[f], o.plan_in[f], pcost, groups, all, job, ro);
          runs.rows.push_back(r.metrics), runs.executed.push_back(r.plans), runs.plans.push_back(std::move(r.plans));
        }
      }
    };
    if (!o.truth_profile.empty()) {
      std::ifstream in(o.truth_profile);
      std::error_code ec;
      dcp::check(in.is_open() && !std::filesystem::is_directory(o.truth_profile, ec), dcp::errc::io_error, [&] {
        return "cannot open --truth-profile '" + o.truth_profile + "'; give a dcp.profile/v1 file for this model, device and GPU count (the profiler writes one)";
      });
      auto profiled = dcp::make_profiled_cost(dcp::read_profile(in, o.truth_profile), cost.model, device.name, o.gpus,
                                              cost.gpus_per_node());
      const auto truth = dcp::sim::make_truth(on_truth(std::move(profiled), dcp::cost_scales{}), spec, truth_seed);
      header.truth = "profile " + o.truth_profile + (o.truth ? " with " + *o.truth : std::string());
      header.truth_seed = truth_seed;
      runs = run_methods(methods, pcost, groups, dcp_groups, data, batches, settings, opt, keep_first, true, &truth);
      calibration = truth_summary(runs, methods, batches, truth);
      add_replays(&truth);
    } else if (o.truth) {
      const auto scaled = dcp::sim::make_truth(spec, cost, truth_seed);
      using truth_model = std::decay_t<decltype(on_truth(scaled.model, spec.scales))>;
      const dcp::sim::truth<truth_model> truth{on_truth(scaled.model, spec.scales), scaled.speeds, scaled.jitter,
                                               scaled.seed};
      truth.validate();
      header.truth = o.truth->empty() ? std::string("(the model itself)") : *o.truth;
      header.truth_seed = truth_seed;
      runs = run_methods(methods, pcost, groups, dcp_groups, data, batches, settings, opt, keep_first, true, &truth);
      calibration = truth_summary(runs, methods, batches, truth);
      add_replays(&truth);
    } else {
      using none = dcp::sim::truth<std::decay_t<decltype(pcost)>>;
      runs = run_methods(methods, pcost, groups, dcp_groups, data, batches, settings, opt, keep_first, views, static_cast<const none*>(nullptr));
      add_replays(static_cast<const none*>(nullptr));
    }
  };
  if (frozen.empty())
    run_all(cost, [](auto trained, const dcp::cost_scales&) { return trained; });
  else
    run_all(dcp::make_cost_sum(cost, frozen), [&](auto trained, const dcp::cost_scales& s) {
      return dcp::make_cost_sum(std::move(trained), frozen_on_truth(frozen, s));
    });
  const auto& rows = runs.rows;

  if (!o.plan_out.empty()) {
    const std::span<const dcp::plan> first(runs.plans.front());
    // With frozen networks the file records them, so that --plan-in needs no --frozen.
    if (frozen.empty()) dcp::sim::write_plan_json(o.plan_out, cost, first);
    else dcp::sim::write_plan_json(o.plan_out, dcp::make_cost_sum(cost, frozen), first);
  }
  if (views) {
    // Under pipeline stages, each executed plan's schedule on the cost model's stage split and
    // transfers (DESIGN 4.5): the stage lanes of the trace and the SVG.
    std::vector<std::vector<dcp::pipeline_timeline>> schedules(rows.size());
    if (cost.layout().pp > 1)
      for (std::size_t i = 0; i < rows.size(); ++i)
        for (const auto& p : runs.executed[i])
          schedules[i].push_back(dcp::schedule_pipeline(p, dcp::pipeline_times(p, cost), cost.layout().pp));
    std::vector<dcp::sim::timeline> runs_view;
    for (std::size_t i = 0; i < rows.size(); ++i) runs_view.push_back({rows[i].method, runs.executed[i], schedules[i]});
    if (!o.trace_out.empty()) dcp::sim::write_trace(o.trace_out, runs_view);
    if (!o.svg_out.empty()) dcp::sim::write_svg(o.svg_out, runs_view);
  }
  if (o.json) {
    auto j = dcp::sim::table_json(header, rows);
    if (with_truth) j["calibration"] = calibration;
    std::cout << j.dump(2) << "\n";
  } else {
    dcp::sim::print_table(std::cout, header, rows);
    if (o.pp > 1) {
      // Of each batch, the share its busiest unit waits: its pipelines' fill, drain and stalls.
      std::cout << "pipeline bubble (" << o.pp << " stages; the baselines 1F1B, dcp its warmup depth per batch):";
      for (std::size_t i = 0; i < rows.size(); ++i)
        std::cout << (i == 0 ? " " : ", ") << rows[i].method << " "
                  << dcp::sim::detail::format("%.1f%%", 100 * rows[i].bubble);
      std::cout << "\n";
    }
    for (const auto& [m, c] : calibration.items()) {
      std::cout << m << ": " << c["oom_steps"].get<std::int64_t>() << " OOM steps, "
                << c["oom_steps_first_batch"].get<std::int64_t>() << " in the first batch";
      if (c.contains("vs_oracle"))
        std::cout << "; tokens/s " << c["vs_oracle"].get<double>() << " x oracle over the run, "
                  << c["vs_oracle_second_half"].get<double>() << " x over its second half";
      if (c.contains("probe_s"))
        std::cout << "; start-up probe " << c["probe_steps"].get<std::int64_t>() << " steps, "
                  << c["probe_s"].get<double>() << " s (" << 100 * c["probe_share"].get<double>() << "% of the run)";
      std::cout << "\n";
    }
  }
  for (const auto& r : rows)  // a row of zeros must not pass for a result
    if (r.tokens == 0 && r.skipped > 0)
      std::cerr << "dcp-sim: warning: " << r.method << " trained no token: all " << r.skipped
                << " sequences were skipped, none fits any configuration on " << cost.layout().gpus
                << " GPUs (--on-infeasible skip); use more GPUs or memory\n";
  std::cout.flush();  // a table lost to a full disk or a closed pipe is a failed run, not exit 0
  dcp::check(!std::cout.fail(), dcp::errc::io_error,
             [] { return std::string("writing the table to standard output failed (a full disk or a closed pipe?)"); });
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"dcp-sim: plan every global batch of a workload with DCP and the baselines, on the cost model's "
               "clock, and compare them (tokens/s, speedup over the strongest tuned baseline, efficiency, imbalance, memory, plan time)"};
  cli_options o;
  auto* workload = app.add_option("--workload", o.workload, "embedded workload (opensora-zipf{1,10,50}, "
                                                              "cogvideox-zipf{1,10,50}, text-longtail)")
                       ->capture_default_str();
  auto* lengths = app.add_option("--lengths", o.lengths, "lengths file: one sequence per line, 'n' or 'T S'");
  workload->excludes(lengths);
  lengths->excludes(workload);
  auto* model = app.add_option("--model", o.model, "model preset (cogvideox-5b, stdit3-xl, llama3-8b, llama3-70b, "
                                                   "qwen3-30b-a3b, wan2.1-14b); default: the workload's");
  auto* model_config = app.add_option("--model-config", o.model_config, "a Hugging Face config.json describing the model");
  model->excludes(model_config);
  model_config->excludes(model);
  app.add_option("--loss", o.loss,
                 "how the loss holds its logits (models with a vocabulary): full (every token's "
                 "logits at once, Megatron's cross entropy) or chunked (a fused linear cross "
                 "entropy over chunks, Liger-Kernel's); default full");
  app.add_option("--tp", o.tp, "tensor-parallel size: the planner's unit is a TP group of this many GPUs on one node")
      ->capture_default_str();
  app.add_option("--ep", o.ep, "expert-parallel size (MoE models): experts shard over this many GPUs")->capture_default_str();
  app.add_option("--ring", o.ring, "largest Ulysses x Ring ring size: sp = ulysses x ring lifts the head cap on sp "
                                    "(the dcp planner picks each step's ring up to this; 1 = Ulysses only)")
      ->capture_default_str();
  app.add_option("--sharding", o.sharding, "weights/grads/optimizer layout: replicated, zero1 or zero3")
      ->capture_default_str();
  app.add_option("--pp", o.pp,
                 "pipeline stages: each holds its share of the blocks on gpus / pp GPUs, and every plan runs "
                 "its steps as micro-batches of 1F1B pipelines (dcp's micro-batch shape tuned on the workload, "
                 "as the baselines' knobs are)")
      ->capture_default_str();
  auto* gpus = app.add_option("--gpus", o.gpus,
                              "number of GPUs N (any positive count up to 131072; whole nodes beyond one)")
                   ->capture_default_str();
  app.add_option("--gpus-per-node", o.gpus_per_node, "GPUs per node G (1 to 1024)")->capture_default_str();
  app.add_option("--device", o.device,
                 "device preset: h200 or h100 (the kernel clock, DESIGN 4.6), a100, h200-analytic or "
                 "h100-analytic (section 4's clock) (with --cluster: the clock node speeds are relative to)")
      ->capture_default_str();
  app.add_option("--precision", o.precision,
                 "GEMM number format: bf16, or fp8 (Transformer Engine's FP8 GEMMs on a kernel-clock device; "
                 "attention stays bf16)")
      ->capture_default_str();
  app.add_option("--cluster", o.cluster,
                 "nodes of different devices in rank order: presets x node counts "
                 "(h100x2,h200x2) or a dcp.cluster/v1 file; sets N");
  app.add_option("--groups", o.groups, "GPU groups a plan may use: any (every size inside a node or of whole nodes, "
                                       "e.g. 5 or 40 GPUs for 40 heads) or buddy (powers of two; dynamic_cp always "
                                       "rounds to those, as Megatron-Core does)")
      ->capture_default_str();
  auto* methods =
      app.add_option("--methods", o.methods,
                     "comma-separated methods: dcp, dcp-no-inter, dcp-no-intra, "
                     "dcp-no-inter-no-intra, bucket, packed, dynamic_cp (each tuning its recompute level); "
                     "bucket-ckpt-all, packed-ckpt-all, dynamic_cp-ckpt-all (every block checkpointed); "
                     "dcp-uniform on a --cluster; oracle with a truth")
          ->capture_default_str();
  app.add_option("--comm-budget", o.comm_budget, "communicators per rank the dcp planner may use beyond the world's: "
                                                 "the group sizes it keeps within it on the workload (default: no "
                                                 "budget; the baselines keep their sizes)");
  app.add_option("--global-batch-tokens", o.global_batch_tokens, "tokens per global batch (default 262144 * N)");
  app.add_option("--seed", o.seed, "seed of the workload, the sampler and seeded planners")->capture_default_str();
  app.add_option("--plan-out", o.plan_out, "write the plan JSON (dcp.plan/v3) of the first method, all batches");
  app.add_option("--trace-out", o.trace_out, "write a Chrome/Perfetto trace of every method");
  app.add_option("--svg-out", o.svg_out, "write an SVG timeline comparing every method");
  app.add_flag("--json", o.json, "print the table as one JSON object");
  app.add_option("--on-infeasible", o.on_infeasible, "what to do with a sequence that fits nowhere: error or skip")
      ->capture_default_str();
  app.add_option("--truth", o.truth, "execute every plan on a true clock: key=value pairs, comma-separated: "
                                     "compute, attention, intra_bw, inter_bw, overhead, memory (factors), "
                                     "slow_gpus=R:F+R:F (speeds in (0, 1]), jitter=S (log-normal sigma)");
  app.add_option("--truth-profile", o.truth_profile, "execute every plan on a dcp.profile/v1 table as the true clock "
                                                     "(--truth may add slow_gpus and jitter)");
  app.add_option("--truth-seed", o.truth_seed, "seed of the truth's jitter (default: --seed)");
  app.add_option("--frozen", o.frozen, "forward-only networks every step also runs, priced for every method and "
                                       "the truth (cost_sum): comma-separated t5-xxl, vae3d; default: those a "
                                       "--plan-in file records, else none");
  app.add_option("--plan-in", o.plan_in,
                 "replay a plan JSON (dcp.plan, e.g. from --plan-out of the same run) "
                 "as a row of its own, checked against this run; repeatable");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  o.methods_given = methods->count() > 0;
  o.gpus_given = gpus->count() > 0;
  try {
    return run(o);
  } catch (const dcp::error& e) {
    std::cerr << "dcp-sim: error: " << e.what() << "\n";
    return 1;
  } catch (const std::exception& e) {
    std::cerr << "dcp-sim: error: " << e.what() << "\n";
    return 1;
  }
}
