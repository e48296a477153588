// How far dcp is from the optimum, and how far the lower bounds are from it, on small random
// batches: for each embedded workload, `instances` batches of 2..max sequences drawn from the
// workload's dataset (its length distribution), planned on 8 H200 (one node) with the
// workload's model by dcp, by dynamic_cp, and exactly (`optimal_plan`, optimum.hpp). Every plan
// is checked with `plan_violations`; the optimum must lie between the joint bound and every
// planner's makespan, and dcp's median gap to it must be at most 3% on every workload.
//
//   dcp_optimality [--instances N] [--max-sequences K] [--gpus N] [--seed S] [workload...]
// Defaults: 300 instances, 12 sequences at most, 8 GPUs, seed 1, every embedded workload.
// Prints per workload the gap of dcp (and dynamic_cp) to the optimum (makespan / optimum - 1:
// median, 90th percentile, worst) and the joint and simple bounds as fractions of the optimum.
// Exit status 0 when every check holds, 1 otherwise, 2 on bad arguments.

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <iostream>
#include <random>
#include <string>
#include <vector>

#include <dcp/cost/analytic.hpp>
#include <dcp/error.hpp>
#include <dcp/plan/check_plan.hpp>
#include <dcp/plan/dcp_planner.hpp>
#include <dcp/plan/dynamic_cp_planner.hpp>
#include <dcp/workload/embedded.hpp>
#include <dcp/workload/tuning.hpp>

#include "optimum.hpp"

namespace {

std::int64_t positive(const std::string& flag, const std::string& text) {
  char* end = nullptr;
  const long long v = std::strtoll(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0' || v <= 0)
    throw dcp::error(dcp::errc::invalid_argument, flag + " '" + text + "': expected a positive integer");
  return v;
}

double quantile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[static_cast<std::size_t>(q * static_cast<double>(v.size() - 1) + 0.5)];
}

}  // namespace

int main(int argc, char** argv) try {
  std::int64_t instances = 300, max_sequences = 12, gpus = 8, seed = 1;
  std::vector<std::string> workloads;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) throw dcp::error(dcp::errc::invalid_argument, a + " needs a value");
      return argv[++i];
    };
    if (a == "--instances") instances = positive(a, value());
    else if (a == "--max-sequences") max_sequences = positive(a, value());
    else if (a == "--gpus") gpus = positive(a, value());
    else if (a == "--seed") seed = positive(a, value());
    else if (a.starts_with("--"))
      throw dcp::error(dcp::errc::invalid_argument,
                       "unknown option '" + a + "'; use --instances, --max-sequences, --gpus or --seed");
    else workloads.push_back(a);
  }
  dcp::check(max_sequences >= 2 && max_sequences <= static_cast<std::int64_t>(dcp::bench::optimal_plan_max_sequences),
             dcp::errc::invalid_argument, [&] {
               return "--max-sequences " + std::to_string(max_sequences) + " must be 2 to " +
                      std::to_string(dcp::bench::optimal_plan_max_sequences);
             });
  if (workloads.empty())
    for (auto n : dcp::workloads::names) workloads.emplace_back(n);

  std::cout << "optimality on " << gpus << " x h200: " << instances << " random batches of 2-" << max_sequences
            << " sequences per workload (seed " << seed << ")\n";
  std::printf("%-18s %9s %9s %9s  %9s %9s  %12s %12s %12s\n", "workload", "dcp med", "dcp p90", "dcp worst",
              "dyn med", "dyn worst", "joint/opt med", "joint/opt min", "simple/opt med");
  std::vector<std::string> misses;
  const auto start = std::chrono::steady_clock::now();
  std::vector<double> all_gaps;
  for (const auto& w : workloads) {
    const auto data = dcp::workloads::make(w, 0);
    const auto cost = dcp::make_analytic_cost(dcp::models::preset(std::string(dcp::workloads::default_model(w))),
                                              dcp::devices::h200(), static_cast<int>(gpus));
    std::mt19937_64 g(static_cast<std::uint64_t>(seed));
    std::vector<double> gap, dyn_gap, joint, simple;
    for (std::int64_t t = 0; t < instances; ++t) {
      const auto n = static_cast<std::size_t>(2 + g() % static_cast<std::uint64_t>(max_sequences - 1));
      std::vector<dcp::sequence> batch;
      for (std::size_t i = 0; i < n; ++i) {
        auto s = data[static_cast<std::size_t>(g() % data.size())];
        s.id = static_cast<std::int64_t>(i);  // a dataset sequence may be drawn twice
        batch.push_back(s);
      }
      const dcp::plan opt = dcp::bench::optimal_plan(cost, batch);
      const dcp::plan d = dcp::dcp_planner{}.plan(cost, batch);
      const dcp::plan y = dcp::tune(dcp::dynamic_cp_planner{}, cost, batch).plan(cost, batch);
      const std::string where = w + " instance " + std::to_string(t);
      for (const dcp::plan* p : {&opt, &d, &y}) {
        const auto bad = dcp::plan_violations(*p, batch, cost);
        if (!bad.empty()) misses.push_back(where + ": " + p->method + ": " + bad.front());
        if (p->makespan_s < opt.makespan_s * (1 - 1e-9))
          misses.push_back(where + ": " + p->method + " beats the optimum");
      }
      if (opt.joint_lower_bound_s > opt.makespan_s * (1 + 1e-9)) misses.push_back(where + ": joint bound above the optimum");
      gap.push_back(d.makespan_s / opt.makespan_s - 1);
      dyn_gap.push_back(y.makespan_s / opt.makespan_s - 1);
      joint.push_back(opt.joint_lower_bound_s / opt.makespan_s);
      simple.push_back(opt.lower_bound_s / opt.makespan_s);
    }
    all_gaps.insert(all_gaps.end(), gap.begin(), gap.end());
    if (quantile(gap, 0.5) > 0.03)  // the target: dcp's median gap to the optimum at most 3%
      misses.push_back(w + ": dcp's median gap to the optimum " + std::to_string(100 * quantile(gap, 0.5)) + "% > 3%");
    std::printf("%-18s %8.2f%% %8.2f%% %8.2f%%  %8.2f%% %8.2f%%  %12.3f %12.3f %12.3f\n", w.c_str(),
                100 * quantile(gap, 0.5), 100 * quantile(gap, 0.9), 100 * quantile(gap, 1.0), 100 * quantile(dyn_gap, 0.5),
                100 * quantile(dyn_gap, 1.0), quantile(joint, 0.5), quantile(joint, 0.0), quantile(simple, 0.5));
    std::fflush(stdout);
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("all: dcp gap to the optimum median %.2f%%, worst %.2f%%; checks %s; %.1f s\n", 100 * quantile(all_gaps, 0.5),
              100 * quantile(all_gaps, 1.0), misses.empty() ? "all hold" : "FAILED", seconds);
  for (std::size_t i = 0; i < misses.size() && i < 20; ++i) std::cout << "  failed: " << misses[i] << "\n";
  return misses.empty() ? 0 : 1;
} catch (const std::exception& e) {
  std::cerr << "dcp_optimality: error: " << e.what() << "\n";
  return 2;
}
