// Plan quality report: every embedded workload (with its model) at 8, 32 and 128 H200 for every
// method, one epoch each, printed as the table of DESIGN section 7; then issue 3's targets:
// dcp at least as fast as every baseline, and dcp's efficiency >= 0.93, everywhere.
//
//   dcp_quality [workload...]      (default: every embedded workload)
// Exit status 0 when every target holds, 1 otherwise.

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <iostream>
#include <string>
#include <vector>

#include <dcp/cost/analytic.hpp>
#include <dcp/error.hpp>
#include <dcp/plan/tuning.hpp>
#include <dcp/sim/methods.hpp>
#include <dcp/sim/report.hpp>
#include <dcp/workload/embedded.hpp>

int main(int argc, char** argv) try {
  std::vector<std::string> workloads(argv + 1, argv + argc);
  if (workloads.empty())
    for (auto n : dcp::workloads::names) workloads.emplace_back(n);
  const int gpu_counts[] = {8, 32, 128};
  const double efficiency_target = 0.93;

  std::vector<std::string> misses;
  const auto start = std::chrono::steady_clock::now();
  for (const auto& w : workloads) {
    const std::string model = std::string(dcp::workloads::default_model(w));
    const auto data = dcp::workloads::make(w, 0);
    for (int gpus : gpu_counts) {
      const auto cost = dcp::make_analytic_cost(dcp::models::preset(model), dcp::devices::h200(), gpus);
      const auto batches = dcp::epoch_batches(cost, data, 0, 0);
      dcp::sim::comparison_header h{w, model, "h200", gpus, cost.gpus_per_node(),
                                    static_cast<std::int64_t>(data.size()), 0, static_cast<std::int64_t>(batches.size())};
      for (const auto& s : data) h.tokens += cost.tokens_of(s);
      std::vector<dcp::sim::run_metrics> rows;
      dcp::sim::options opt;
      opt.progress = &std::cerr;
      for (auto m : dcp::sim::default_methods)
        rows.push_back(dcp::sim::run_method(m, cost, data, batches, {}, opt).metrics);
      dcp::sim::print_table(std::cout, h, rows);
      std::cout << std::endl;

      const auto& d = rows.front();  // dcp
      char buf[160];
      if (d.efficiency < efficiency_target) {
        std::snprintf(buf, sizeof buf, "%s @ %d GPUs: dcp efficiency %.3f < %.2f", w.c_str(), gpus, d.efficiency,
                      efficiency_target);
        misses.emplace_back(buf);
      }
      for (const auto& r : rows)
        if ((r.method == "bucket" || r.method == "packed" || r.method == "dynamic_cp") &&
            r.tokens_per_s > d.tokens_per_s) {
          std::snprintf(buf, sizeof buf, "%s @ %d GPUs: %s %.0f tokens/s > dcp %.0f", w.c_str(), gpus,
                        r.method.c_str(), r.tokens_per_s, d.tokens_per_s);
          misses.emplace_back(buf);
        }
    }
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::cout << "targets (dcp >= every baseline, dcp efficiency >= " << efficiency_target << "): "
            << (misses.empty() ? "all met" : std::to_string(misses.size()) + " missed") << " in " << seconds << " s\n";
  for (const auto& m : misses) std::cout << "  missed: " << m << "\n";
  return misses.empty() ? 0 : 1;
} catch (const std::exception& e) {
  std::cerr << "dcp_quality: error: " << e.what() << "\n";
  return 2;
}
