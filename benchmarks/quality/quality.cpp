// Plan quality sweep: every embedded workload (with its model) on H200, for every method, one
// epoch per cell, over GPU counts x global batch sizes (tokens per GPU). Each cell prints the
// table of DESIGN section 7; a summary table follows. Every plan that is scored is checked with
// `plan_violations` against its batch, and every sequence of the dataset must appear exactly
// once over the epoch (planned in one step of one batch, or skipped).
//
// Gates (exit status 1 when one is missed), the efficiencies the docs claim, against the
// joint lower bound of DESIGN section 3:
//   - dcp at least as fast (tokens/s) as every baseline (bucket, packed, dynamic_cp) in every cell;
//   - dcp efficiency >= 0.95 at 262144 tokens per GPU, >= 0.90 at 32768 and >= 0.85 at 8192,
//     on every GPU count;
//   - no plan breaks a plan law, no sequence lost or planned twice.
// The summary prints each cell's margin over its gate.
//
//   dcp_quality [--quick] [--gpus N,N,..] [--tokens-per-gpu N,N,..] [workload...]
// Default: the full sweep, GPUs 8,32,128 x 8192,32768,262144 tokens per GPU x every workload.
// --quick: the reduced sweep ctest runs (every workload at 32 GPUs and 32768 / 262144 tokens per
// GPU, and at 128 GPUs and 8192).
// Exit status 0 when every gate holds, 1 when one is missed, 2 on bad arguments.

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <iostream>
#include <map>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include <dcp/cost/analytic.hpp>
#include <dcp/error.hpp>
#include <dcp/plan/check_plan.hpp>
#include <dcp/sim/methods.hpp>
#include <dcp/sim/report.hpp>
#include <dcp/workload/embedded.hpp>
#include <dcp/workload/tuning.hpp>

namespace {

std::vector<std::int64_t> parse_list(const std::string& flag, const std::string& text) {
  std::vector<std::int64_t> out;
  std::stringstream in(text);
  for (std::string item; std::getline(in, item, ',');) {
    char* end = nullptr;
    const long long v = std::strtoll(item.c_str(), &end, 10);
    if (item.empty() || *end != '\0' || v <= 0)
      throw dcp::error(dcp::errc::invalid_argument,
                       flag + " '" + text + "': expected a comma-separated list of positive integers");
    out.push_back(v);
  }
  return out;
}

/// The efficiency dcp must reach in a cell (what the docs claim).
double efficiency_gate(std::int64_t tokens_per_gpu) {
  if (tokens_per_gpu >= 262144) return 0.95;
  if (tokens_per_gpu >= 32768) return 0.90;
  return 0.85;
}

struct cell {
  std::string workload;
  int gpus = 0;
  std::int64_t tokens_per_gpu = 0;
  std::int64_t batches = 0;
  double efficiency = 0, simple_efficiency = 0, gate = 0;
  std::string runner_up;  // the fastest baseline
  double speedup = 0;     // dcp tokens/s over the fastest baseline's
  double vs_dynamic_cp = 0;
};

}  // namespace

int main(int argc, char** argv) try {
  std::vector<std::string> workloads;
  std::vector<std::int64_t> gpu_counts{8, 32, 128}, budgets{8192, 32768, 262144};
  bool quick = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) throw dcp::error(dcp::errc::invalid_argument, a + " needs a value");
      return argv[++i];
    };
    if (a == "--quick") quick = true;
    else if (a == "--gpus") gpu_counts = parse_list(a, value());
    else if (a == "--tokens-per-gpu") budgets = parse_list(a, value());
    else if (a.starts_with("--")) throw dcp::error(dcp::errc::invalid_argument, "unknown option '" + a + "'; use --quick, --gpus or --tokens-per-gpu");
    else workloads.push_back(a);
  }
  if (workloads.empty())
    for (auto n : dcp::workloads::names) workloads.emplace_back(n);
  std::vector<std::pair<std::int64_t, std::int64_t>> grid;  // (gpus, tokens per GPU)
  if (quick) {
    grid = {{32, 32768}, {32, 262144}, {128, 8192}};
  } else {
    for (auto g : gpu_counts)
      for (auto b : budgets) grid.emplace_back(g, b);
  }

  std::vector<std::string> misses;
  std::vector<cell> cells;
  const auto start = std::chrono::steady_clock::now();
  for (const auto& w : workloads) {
    const std::string model = std::string(dcp::workloads::default_model(w));
    const auto data = dcp::workloads::make(w, 0);
    for (const auto& [gpus, per_gpu] : grid) {
      const auto cost = dcp::make_analytic_cost(dcp::models::preset(model), dcp::devices::h200(), static_cast<int>(gpus));
      const std::int64_t budget = per_gpu * gpus;
      const auto batches = dcp::epoch_batches(cost, data, budget, 0);
      dcp::sim::comparison_header h{w, model, "h200", static_cast<int>(gpus), cost.gpus_per_node(),
                                    static_cast<std::int64_t>(data.size()), 0, static_cast<std::int64_t>(batches.size())};
      for (const auto& s : data) h.tokens += cost.tokens_of(s);
      const std::string where = w + " @ " + std::to_string(gpus) + " GPUs, " + std::to_string(per_gpu) + " tokens/GPU";
      std::vector<dcp::sim::run_metrics> rows;
      dcp::sim::options opt;
      opt.progress = &std::cerr;
      opt.keep_plans = true;
      opt.global_batch_tokens = budget;
      dcp::sim::method_settings settings;
      settings.global_batch_tokens = budget;
      for (auto m : dcp::sim::default_methods) {
        auto r = dcp::sim::run_method(m, cost, data, batches, settings, opt);
        // Score only sound plans: every law of every plan, every sequence once over the epoch.
        std::map<std::int64_t, int> seen;
        for (std::size_t b = 0; b < r.plans.size(); ++b) {
          const auto bad = dcp::plan_violations(r.plans[b], batches[b], cost);
          if (!bad.empty()) misses.push_back(where + ": " + std::string(m) + " batch " + std::to_string(b) + ": " + bad.front());
          for (const auto& st : r.plans[b].steps)
            for (const auto& q : st.sequences) ++seen[q.id];
          for (const auto& k : r.plans[b].skipped) ++seen[k.id];
        }
        std::int64_t once = 0;
        for (const auto& [id, count] : seen) once += count == 1;
        if (once != static_cast<std::int64_t>(data.size()) || seen.size() != data.size())
          misses.push_back(where + ": " + std::string(m) + " has " + std::to_string(once) + " of " +
                           std::to_string(data.size()) + " sequences exactly once");
        rows.push_back(std::move(r.metrics));
      }
      dcp::sim::print_table(std::cout, h, rows);
      std::cout << std::endl;

      const auto& d = rows.front();  // dcp
      cell c{w, static_cast<int>(gpus), per_gpu, h.batches, d.efficiency, d.simple_efficiency, efficiency_gate(per_gpu), "", 0, 0};
      char buf[200];
      if (d.efficiency < c.gate) {
        std::snprintf(buf, sizeof buf, "%s: dcp efficiency %.3f < %.2f", where.c_str(), d.efficiency, c.gate);
        misses.emplace_back(buf);
      }
      double best = 0;
      for (const auto& r : rows) {
        if (r.method != "bucket" && r.method != "packed" && r.method != "dynamic_cp") continue;
        if (r.tokens_per_s > best) best = r.tokens_per_s, c.runner_up = r.method;
        if (r.method == "dynamic_cp") c.vs_dynamic_cp = d.tokens_per_s / r.tokens_per_s;
        if (r.tokens_per_s > d.tokens_per_s) {
          std::snprintf(buf, sizeof buf, "%s: %s %.0f tokens/s > dcp %.0f", where.c_str(), r.method.c_str(),
                        r.tokens_per_s, d.tokens_per_s);
          misses.emplace_back(buf);
        }
      }
      c.speedup = best > 0 ? d.tokens_per_s / best : 0;
      cells.push_back(c);
    }
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();

  std::cout << "summary: dcp efficiency against the joint bound (and the simple bound), the gate and the margin,\n"
               "and dcp's speedup over the fastest baseline and over dynamic_cp\n";
  std::printf("%-18s %5s %9s %8s %10s %8s %6s %8s  %-11s %8s %10s\n", "workload", "gpus", "tok/gpu", "batches", "efficiency",
              "simple", "gate", "margin", "best base", "speedup", "vs dyn_cp");
  double worst_margin = 1;
  for (const auto& c : cells) {
    worst_margin = std::min(worst_margin, c.efficiency - c.gate);
    std::printf("%-18s %5d %9lld %8lld %10.3f %8.3f %6.2f %+8.3f  %-11s %7.2fx %9.2fx\n", c.workload.c_str(), c.gpus,
                static_cast<long long>(c.tokens_per_gpu), static_cast<long long>(c.batches), c.efficiency,
                c.simple_efficiency, c.gate, c.efficiency - c.gate, c.runner_up.c_str(), c.speedup, c.vs_dynamic_cp);
  }
  std::cout << "gates (every plan sound, every sequence once, dcp >= every baseline, dcp efficiency >= gate): "
            << (misses.empty() ? "all met" : std::to_string(misses.size()) + " missed") << " in " << cells.size()
            << " cells, smallest efficiency margin " << worst_margin << ", " << seconds << " s\n";
  for (const auto& m : misses) std::cout << "  missed: " << m << "\n";
  return misses.empty() ? 0 : 1;
} catch (const std::exception& e) {
  std::cerr << "dcp_quality: error: " << e.what() << "\n";
  return 2;
}
