// dcp-sim: simulate DCP and the baselines on a workload and print the comparison table of
// DESIGN section 7. With no arguments: cogvideox-zipf10 with cogvideox-5b on 32 H200 (8 per node),
// one epoch, methods dcp, dcp-no-inter, dcp-no-intra, bucket, packed, dynamic_cp.
//
//   dcp-sim [--workload NAME | --lengths FILE] [--model PRESET] [--gpus N] [--gpus-per-node G]
//           [--device h200|h100] [--methods LIST] [--global-batch-tokens T] [--seed S]
//           [--plan-out FILE] [--trace-out FILE] [--svg-out FILE] [--json]
//           [--on-infeasible error|skip]

#include <cstdint>
#include <exception>
#include <iostream>
#include <span>
#include <sstream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include <dcp/cost/analytic.hpp>
#include <dcp/cost/device.hpp>
#include <dcp/error.hpp>
#include <dcp/model/transformer.hpp>
#include <dcp/plan/tuning.hpp>
#include <dcp/sim/methods.hpp>
#include <dcp/sim/plan_json.hpp>
#include <dcp/sim/report.hpp>
#include <dcp/sim/simulator.hpp>
#include <dcp/sim/svg.hpp>
#include <dcp/sim/trace.hpp>
#include <dcp/workload/embedded.hpp>
#include <dcp/workload/lengths_file.hpp>

namespace {

struct cli_options {
  std::string workload = "cogvideox-zipf10";
  std::string lengths;
  std::string model;
  int gpus = 32;
  int gpus_per_node = 8;
  std::string device = "h200";
  std::string methods = "dcp,dcp-no-inter,dcp-no-intra,bucket,packed,dynamic_cp";
  std::int64_t global_batch_tokens = 0;
  std::uint64_t seed = 0;
  std::string plan_out, trace_out, svg_out;
  bool json = false;
  std::string on_infeasible = "error";
};

std::vector<std::string> split_methods(const std::string& list) {
  std::vector<std::string> out;
  std::stringstream in(list);
  for (std::string name; std::getline(in, name, ',');) {
    const auto b = name.find_first_not_of(" \t"), e = name.find_last_not_of(" \t");
    if (b == std::string::npos) continue;
    out.push_back(name.substr(b, e - b + 1));
  }
  dcp::check(!out.empty(), dcp::errc::invalid_argument,
             [&] { return "--methods '" + list + "' names no method; give a comma-separated list"; });
  for (const auto& m : out) dcp::sim::validate_method(m);
  return out;
}

int run(const cli_options& o) {
  // Inputs first, so that a typo fails before any work.
  const auto methods = split_methods(o.methods);
  dcp::check(o.on_infeasible == "error" || o.on_infeasible == "skip", dcp::errc::invalid_argument,
             [&] { return "--on-infeasible '" + o.on_infeasible + "' must be error or skip"; });
  dcp::check(o.global_batch_tokens >= 0, dcp::errc::invalid_argument, [&] {
    return "--global-batch-tokens " + std::to_string(o.global_batch_tokens) + " must be positive (0 = 262144 * GPUs)";
  });
  const std::string source = o.lengths.empty() ? o.workload : o.lengths;
  const std::string model_name =
      !o.model.empty() ? o.model : (o.lengths.empty() ? std::string(dcp::workloads::default_model(o.workload)) : "cogvideox-5b");
  auto device = dcp::devices::preset(o.device);
  device.gpus_per_node = o.gpus_per_node;
  const auto cost = dcp::make_analytic_cost(dcp::models::preset(model_name), device, o.gpus);
  const dcp::dataset data = o.lengths.empty() ? dcp::workloads::make(o.workload, o.seed) : dcp::read_lengths_file(o.lengths);

  dcp::sim::method_settings settings;
  settings.on_infeasible = o.on_infeasible == "skip" ? dcp::infeasible_policy::skip : dcp::infeasible_policy::error;
  settings.global_batch_tokens = o.global_batch_tokens;
  settings.seed = o.seed;
  const auto batches = dcp::epoch_batches(cost, data, o.global_batch_tokens, o.seed);

  dcp::sim::comparison_header header{source, model_name, device.name, o.gpus, o.gpus_per_node,
                                     static_cast<std::int64_t>(data.size()), 0,
                                     static_cast<std::int64_t>(batches.size())};
  for (const auto& s : data) header.tokens += cost.tokens_of(s);

  const bool views = !o.trace_out.empty() || !o.svg_out.empty();
  std::vector<dcp::sim::run_metrics> rows;
  std::vector<std::vector<dcp::plan>> plans;
  for (std::size_t i = 0; i < methods.size(); ++i) {
    dcp::sim::options opt;
    opt.seed = o.seed;
    opt.global_batch_tokens = o.global_batch_tokens;
    opt.keep_plans = views || (i == 0 && !o.plan_out.empty());
    opt.progress = &std::cerr;
    auto r = dcp::sim::run_method(methods[i], cost, data, batches, settings, opt);
    rows.push_back(r.metrics);
    plans.push_back(std::move(r.plans));
  }

  if (!o.plan_out.empty()) dcp::sim::write_plan_json(o.plan_out, cost, std::span<const dcp::plan>(plans.front()));
  if (views) {
    std::vector<dcp::sim::timeline> runs;
    for (std::size_t i = 0; i < methods.size(); ++i) runs.push_back({methods[i], plans[i]});
    if (!o.trace_out.empty()) dcp::sim::write_trace(o.trace_out, runs);
    if (!o.svg_out.empty()) dcp::sim::write_svg(o.svg_out, runs);
  }
  if (o.json) std::cout << dcp::sim::table_json(header, rows).dump(2) << "\n";
  else dcp::sim::print_table(std::cout, header, rows);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"dcp-sim: plan every global batch of a workload with DCP and the baselines, on the cost model's "
               "clock, and compare them (tokens/s, speedup vs bucket, efficiency, imbalance, memory, plan time)"};
  cli_options o;
  auto* workload = app.add_option("--workload", o.workload, "embedded workload (opensora-zipf{1,10,50}, "
                                                              "cogvideox-zipf{1,10,50}, text-longtail)")
                       ->capture_default_str();
  auto* lengths = app.add_option("--lengths", o.lengths, "lengths file: one sequence per line, 'n' or 'T S'");
  workload->excludes(lengths);
  lengths->excludes(workload);
  app.add_option("--model", o.model, "model preset (cogvideox-5b, stdit3-xl, llama3-8b); default: the workload's");
  app.add_option("--gpus", o.gpus, "number of GPUs N (any positive count; whole nodes beyond one)")->capture_default_str();
  app.add_option("--gpus-per-node", o.gpus_per_node, "GPUs per node G")->capture_default_str();
  app.add_option("--device", o.device, "device preset: h200 or h100")->capture_default_str();
  app.add_option("--methods", o.methods, "comma-separated methods: dcp, dcp-no-inter, dcp-no-intra, "
                                         "dcp-no-inter-no-intra, bucket, packed, dynamic_cp")
      ->capture_default_str();
  app.add_option("--global-batch-tokens", o.global_batch_tokens, "tokens per global batch (default 262144 * N)");
  app.add_option("--seed", o.seed, "seed of the workload, the sampler and seeded planners")->capture_default_str();
  app.add_option("--plan-out", o.plan_out, "write the plan JSON (dcp.plan/v1) of the first method, all batches");
  app.add_option("--trace-out", o.trace_out, "write a Chrome/Perfetto trace of every method");
  app.add_option("--svg-out", o.svg_out, "write an SVG timeline comparing every method");
  app.add_flag("--json", o.json, "print the table as one JSON object");
  app.add_option("--on-infeasible", o.on_infeasible, "what to do with a sequence that fits nowhere: error or skip")
      ->capture_default_str();
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
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
