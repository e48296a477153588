// dcp-train-cpu: trains the tiny transformer under dcp plans on CPU ranks.
//
//   dcp-train-cpu --local 4 --steps 20                 # 4 ranks as threads of one process
//   mpirun -np 4 dcp-train-cpu --steps 20              # 4 MPI processes (built with dcp::mpi)
//   dcp-train-cpu --local 4 --profile --steps 20       # profile first, then plan with the profile
//   dcp-train-cpu --local 4 --heads 2 --ring 2         # Ulysses x Ring steps (sp 4 = 2 x 2)
//
// Every step prints the loss and the plan: groups (sp x count), micro-steps per rank, recomputed
// blocks. The trainer is examples/cpu_train/trainer.hpp; the model tiny_transformer.hpp.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <map>
#include <utility>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include <dcp/dcp.hpp>
#include <dcp/cost/profiled_cost.hpp>
#include <dcp/profile/profile_json.hpp>
#include <dcp/profile/profiler.hpp>
#if DCP_HAS_MPI()
#include <dcp/comm/mpi.hpp>
#endif

#include "calibrate.hpp"
#include "profile_step.hpp"
#include "trainer.hpp"

namespace {

using namespace cpu_train;

struct arguments {
  int local = 0;  // 0: MPI (or 1 rank without MPI)
  int steps = 20;
  std::string dtype = "double";
  std::string planner = "dcp";
  std::string optimizer = "adam";
  double lr = 3e-3;
  model_config model{.vocab = 32, .hidden = 16, .heads = 8, .mlp = 32, .blocks = 4, .max_len = 2048};
  synthetic_data data{.vocab = 32, .min_len = 8, .max_len = 2048, .seed = 1};
  int sequences = 2000;
  int ring = 1;  // largest Ulysses x Ring ring a step may use (1: Ulysses only)
  std::int64_t batch_tokens = 0;  // 0: 1024 * ranks
  double fit_tokens = 512;
  bool profile = false;
  double profile_budget = 30;  // seconds of runs for the profiler's batch doubling
  std::string profile_out, profile_in;
  bool quiet_plan = false;
  bool calibrate = false;  // profile, fit, then plan with online calibration (calibrate.hpp)
  std::string calibrate_csv;  // rank 0's measured micro-steps and predictions, one CSV row each
};

[[noreturn]] void usage(int code) {
  std::printf(
      "usage: dcp-train-cpu [--local R] [--steps N] [--dtype float|double] [--planner dcp|bucket|packed]\n"
      "         [--optimizer sgd|adam] [--lr X] [--hidden H] [--heads A] [--mlp F] [--blocks L] [--vocab V]\n"
      "         [--causal] [--min-len N] [--max-len N] [--sequences N] [--global-batch-tokens N]\n"
      "         [--fit-tokens N] [--seed S] [--ring R] [--profile] [--profile-budget S]\n"
      "         [--profile-out FILE] [--profile-in FILE] [--quiet-plan]\n"
      "         [--calibrate] [--calibrate-csv FILE]\n"
      "Without --local the ranks are the MPI processes (mpirun -np R dcp-train-cpu ...).\n"
      "--calibrate: profile, fit dcp::fitted_cost to the profile, train with online calibration, and print each\n"
      "  micro-step's measured time (thread CPU time; the profile too) against the analytic, profiled, fitted and\n"
      "  calibrated models. --calibrate-csv FILE: also write rank 0's micro-steps (features, times, predictions).\n"
      "--fit-tokens: the analytic planner's device holds this many tokens per rank with nothing checkpointed.\n"
      "--ring R: steps may split sp = u x r with r <= R (a power of two): ring attention passes K/V blocks around\n"
      "  r ranks, so sp may exceed the heads (analytic planning only; default 1, Ulysses only).\n"
      "--profile: profile this model on this machine first (2-block truncation), then plan with the profile.\n"
      "--profile-budget: seconds of runs after which the profiler stops doubling batches (default 30, 0: no\n"
      "  limit); batch 1 of every length group always runs.\n");
  std::exit(code);
}

arguments parse(int argc, char** argv) {
  arguments a;
  for (int i = 1; i < argc; ++i) {
    const std::string k = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "dcp-train-cpu: %s needs a value\n", k.c_str());
        usage(2);
      }
      return argv[++i];
    };
    auto integer = [&]() { return std::stoll(value()); };
    if (k == "--help" || k == "-h") usage(0);
    else if (k == "--local") a.local = int(integer());
    else if (k == "--steps") a.steps = int(integer());
    else if (k == "--dtype") a.dtype = value();
    else if (k == "--planner") a.planner = value();
    else if (k == "--optimizer") a.optimizer = value();
    else if (k == "--lr") a.lr = std::stod(value());
    else if (k == "--hidden") a.model.hidden = int(integer());
    else if (k == "--heads") a.model.heads = int(integer());
    else if (k == "--mlp") a.model.mlp = int(integer());
    else if (k == "--blocks") a.model.blocks = int(integer());
    else if (k == "--vocab") a.model.vocab = a.data.vocab = int(integer());
    else if (k == "--causal") a.model.causal = true;
    else if (k == "--min-len") a.data.min_len = int(integer());
    else if (k == "--max-len") a.data.max_len = int(integer());
    else if (k == "--sequences") a.sequences = int(integer());
    else if (k == "--global-batch-tokens") a.batch_tokens = integer();
    else if (k == "--fit-tokens") a.fit_tokens = std::stod(value());
    else if (k == "--seed") a.data.seed = std::uint64_t(integer());
    else if (k == "--ring") a.ring = int(integer());
    else if (k == "--profile") a.profile = true;
    else if (k == "--profile-budget") a.profile_budget = std::stod(value());
    else if (k == "--profile-out") a.profile_out = value();
    else if (k == "--profile-in") a.profile_in = value();
    else if (k == "--quiet-plan") a.quiet_plan = true;
    else if (k == "--calibrate") a.calibrate = true;
    else if (k == "--calibrate-csv") a.calibrate_csv = value();
    else {
      std::fprintf(stderr, "dcp-train-cpu: unknown option %s\n", k.c_str());
      usage(2);
    }
  }
  a.model.max_len = std::max(a.model.max_len, a.data.max_len);
  if (a.dtype != "float" && a.dtype != "double") usage(2);
  if (a.planner != "dcp" && a.planner != "bucket" && a.planner != "packed") usage(2);
  if (a.optimizer != "sgd" && a.optimizer != "adam") usage(2);
  if (a.ring < 1 || (a.ring & (a.ring - 1)) != 0) {
    std::fprintf(stderr, "dcp-train-cpu: --ring %d must be a power of two >= 1\n", a.ring);
    usage(2);
  }
  if (a.ring > 1 && (a.profile || a.calibrate || !a.profile_in.empty())) {
    std::fprintf(stderr, "dcp-train-cpu: --ring %d plans with the analytic model; profiles and calibration price "
                         "Ulysses-only steps, drop --ring or --profile/--profile-in/--calibrate\n", a.ring);
    usage(2);
  }
  return a;
}

// One line per step: the loss and what the plan asked of the ranks.
void print_step(int step, const step_summary& s, int world, int model_blocks, int cost_blocks, double seconds) {
  std::map<std::pair<int, int>, int> groups;  // (sp, ring) -> micro-steps
  std::vector<int> per_rank(size_t(world), 0);
  int recomputing = 0;
  std::int64_t recomputed = 0, tokens = 0, sequences = 0;
  for (const auto& st : s.plan.steps) {
    ++groups[{st.sp(), st.ring}];
    for (int r = st.ranks.first; r < st.ranks.end(); ++r) ++per_rank[size_t(r)];
    const int k = map_checkpointed(st.checkpointed_blocks, cost_blocks, model_blocks);
    recomputing += k > 0;
    recomputed += std::int64_t(k) * st.sp();
    for (const auto& q : st.sequences) tokens += q.tokens, ++sequences;
  }
  std::ostringstream g, r;
  for (auto [key, n] : groups) {
    const auto [sp, ring] = key;
    g << (g.tellp() > 0 ? " " : "") << "sp" << sp;
    if (ring > 1) g << "(" << sp / ring << "x" << ring << ")";  // Ulysses x Ring
    g << "x" << n;
  }
  for (int v : per_rank) r << (r.tellp() > 0 ? "," : "") << v;
  std::printf("step %3d  loss %.5f  seqs %3lld tokens %6lld | %-22s | micro-steps/rank [%s] | recompute %d steps, "
              "%lld blocks | eff %.2f | %.2f s\n",
              step, s.loss, (long long)sequences, (long long)tokens, g.str().c_str(), r.str().c_str(), recomputing,
              (long long)recomputed, s.plan.efficiency(), seconds);
}

template <class T, class Cost, class Planner, class Comm>
void train(Comm& world, const arguments& a, Cost cost, Planner planner) {
  using policies = dcp::policies<Cost, Planner>;
  policies p;
  p.planner = planner;
  dcp::scheduler_options o;
  o.device = cpu_device(tiny_spec(a.model), world.size(), a.fit_tokens);
  o.global_batch_tokens = a.batch_tokens;
  dcp::scheduler<dcp::transformer_spec, Comm, policies> sched(tiny_spec(a.model), world, cost, o, p);
  sched.set_dataset(a.data.make(a.sequences));
  tiny_transformer<T> model(a.model);
  optimizer<T> opt({a.optimizer == "sgd" ? optimizer_kind::sgd : optimizer_kind::adam, a.lr}, model.params().size());
  const bool root = world.rank() == 0;
  if (root)
    std::printf("dcp-train-cpu: %d ranks, %s, %s planner, %s, model L=%d h=%d heads=%d f=%d V=%d %s, "
                "%zu parameters, global batch %lld tokens\n",
                world.size(), a.dtype.c_str(), planner.name().c_str(), a.optimizer.c_str(), a.model.blocks,
                a.model.hidden, a.model.heads, a.model.mlp, a.model.vocab, a.model.causal ? "causal" : "full",
                model.params().size(), (long long)(a.batch_tokens));
  std::vector<double> losses;
  for (int i = 0; i < a.steps; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    const auto batch = sched.sampler().next();
    const auto s = train_step(sched, model, opt, a.data, batch.sequences);
    const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    losses.push_back(s.loss);
    // Every plan keeps the plan laws under the cost model it was made with (a profile included).
    if (const auto bad = dcp::plan_violations(s.plan, std::span<const dcp::sequence>(batch.sequences), sched.cost());
        !bad.empty())
      throw std::runtime_error("step " + std::to_string(i) + ": the plan breaks a plan law: " + bad.front());
    if (root && !a.quiet_plan) print_step(i, s, world.size(), a.model.blocks, sched.cost().blocks(), dt);
  }
  if (root) {
    std::printf("loss curve:");
    for (double l : losses) std::printf(" %.4f", l);
    std::printf("\n");
  }
}

// The cost model the planner uses: the analytic model on the scaled CPU device, or a profile.
template <class T, class Comm>
void run_with_planner(Comm& world, const arguments& a) {
  const auto spec = tiny_spec(a.model);
  const auto device = cpu_device(spec, world.size(), a.fit_tokens);
  auto go = [&](auto cost) {
    const auto data = a.data.make(a.sequences);
    if (a.planner == "dcp") {
      train<T>(world, a, cost, dcp::dcp_planner{});
    } else if (a.planner == "bucket") {
      const std::span<const dcp::sequence> all(data);
      train<T>(world, a, cost, dcp::tune(dcp::bucket_planner{}, cost, all, a.batch_tokens));
    } else {
      const std::span<const dcp::sequence> all(data);
      train<T>(world, a, cost, dcp::tune(dcp::packed_planner{}, cost, all, a.batch_tokens));
    }
  };
  if (!a.profile && a.profile_in.empty() && !a.calibrate) {
    go(dcp::make_analytic_cost(spec, device, {.gpus = world.size(), .gpus_per_node = device.gpus_per_node, .ring = a.ring}));
    return;
  }
  // Rank 0 profiles (or reads the file) and broadcasts the JSON, so every rank plans with the same table.
  std::string text;
  if (world.rank() == 0) {
    dcp::profile_table table;
    if (!a.profile_in.empty()) {
      std::ifstream in(a.profile_in);
      dcp::check(bool(in), dcp::errc::invalid_argument, [&] { return "cannot open profile " + a.profile_in; });
      table = dcp::read_profile(in, a.profile_in);
    } else {
      // --calibrate measures its steps in thread CPU time (calibrate.hpp), so its profile does too.
      const double capacity = cpu_capacity<T>(a.model, a.fit_tokens);
      table = a.calibrate ? profile_cpu_model<T>(a.model, a.data, world.size(), capacity, true, a.sequences, 8,
                                                 a.profile_budget, nullptr, thread_cpu_meter{})
                          : profile_cpu_model<T>(a.model, a.data, world.size(), capacity, true, a.sequences, 8,
                                                 a.profile_budget);
      print_profile_report(table, a.calibrate ? check_extrapolation<T>(a.model, a.data, table, 4, thread_cpu_meter{})
                                              : check_extrapolation<T>(a.model, a.data, table));
      if (!a.profile_out.empty()) {
        std::ofstream out(a.profile_out);
        dcp::write_profile(out, table);
        std::printf("profile written to %s\n", a.profile_out.c_str());
      }
    }
    std::ostringstream os;
    dcp::write_profile(os, table);
    text = os.str();
  }
  std::uint64_t size[1] = {text.size()};
  world.broadcast(std::span<std::uint64_t>(size), 0);
  text.resize(size[0]);
  world.broadcast(std::span<char>(text.data(), text.size()), 0);
  std::istringstream in(text);
  auto table = dcp::read_profile(in, "broadcast profile");
  if (a.calibrate) {
    const auto analytic = dcp::make_analytic_cost(spec, device, world.size());
    const auto fitted = dcp::fit_profile(table, dcp::make_fitted_cost(analytic));
    if (world.rank() == 0) std::cout << "fitted to the profile's " << table.entries.size() << " entries: " << fitted << "\n";
    train_calibrated<T>(world, a.model, a.data, a.sequences, a.steps, a.batch_tokens,
                        {a.optimizer == "sgd" ? optimizer_kind::sgd : optimizer_kind::adam, a.lr}, analytic,
                        dcp::make_profiled_cost(table, spec, device.name, world.size()), fitted, a.calibrate_csv);
    return;
  }
  auto profiled = dcp::make_profiled_cost(std::move(table), spec, device.name, world.size());
  if (world.rank() == 0)
    report_profile_coverage(dcp::make_analytic_cost(spec, device, world.size()), profiled, a.data.make(a.sequences));
  go(profiled);
}

template <class Comm>
void run(Comm& world, const arguments& a) {
  if (a.dtype == "float") run_with_planner<float>(world, a);
  else run_with_planner<double>(world, a);
}

}  // namespace

int main(int argc, char** argv) {
  arguments a = parse(argc, argv);
  try {
    if (a.local > 0) {
      if (a.batch_tokens == 0) a.batch_tokens = 1024 * std::int64_t(a.local);
      dcp::local_world::run(a.local, [&](dcp::local_comm& world) { run(world, a); }, {.timeout = std::chrono::minutes(30)});
      return 0;
    }
#if DCP_HAS_MPI()
    dcp::mpi_environment env(&argc, &argv);
    auto world = dcp::mpi_comm::world(std::chrono::minutes(30));
    if (a.batch_tokens == 0) a.batch_tokens = 1024 * std::int64_t(world.size());
    run(world, a);
#else
    if (a.batch_tokens == 0) a.batch_tokens = 1024;
    dcp::local_world::run(1, [&](dcp::local_comm& world) { run(world, a); });
#endif
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "dcp-train-cpu: %s\n", e.what());
    return 1;
  }
}
