// dcp-train-cpu: trains the tiny transformer under dcp plans on CPU ranks.
//
//   dcp-train-cpu --local 4 --steps 20                 # 4 ranks as threads of one process
//   mpirun -np 4 dcp-train-cpu --steps 20              # 4 MPI processes (built with dcp::mpi)
//   dcp-train-cpu --local 4 --profile --steps 20       # profile first, then plan with the profile
//   dcp-train-cpu --local 4 --heads 2 --ring 2         # Ulysses x Ring steps (sp 4 = 2 x 2)
//
// Every step prints the loss and the plan: groups (sp x count), micro-steps per rank, recomputed
// blocks. The trainer is examples/cpu_train/trainer.hpp; the model tiny_transformer.hpp.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <optional>
#include <utility>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include <dcp/dcp.hpp>
#include <dcp/cost/profiled_cost.hpp>
#include <dcp/profile/profile_json.hpp>
#include <dcp/profile/profiler.hpp>
#if DCP_HAS_MPI()
#include <dcp/comm/mpi.hpp>
#endif

#include "../common/trainer_cli.hpp"
#include "calibrate.hpp"
#include "profile_step.hpp"
#include "trainer.hpp"
#include "zero3.hpp"

namespace {

using namespace cpu_train;

struct arguments {
  int local = 0;  // 0: MPI (or 1 rank without MPI)
  int steps = 20;
  std::string dtype = "double";
  std::string planner = "dcp";
  std::string restrictions = "on";  // dcp also plans a sparse batch as itself allowed less
  std::string optimizer = "adam";
  double lr = 3e-3;
  model_config model{.vocab = 32, .hidden = 16, .heads = 8, .mlp = 32, .blocks = 4, .max_len = 2048};
  synthetic_data data{.vocab = 32, .min_len = 8, .max_len = 2048, .seed = 1};
  int sequences = 2000;
  int ring = 1;  // largest Ulysses x Ring ring a step may use (1: Ulysses only)
  std::string sharding = "zero1";  // zero3: parameters sharded over the ranks (zero3.hpp)
  std::int64_t batch_tokens = 0;  // 0: 1024 * ranks
  double fit_tokens = 512;
  bool profile = false;
  double profile_budget = 30;  // seconds of runs for the profiler's batch doubling
  std::string profile_out, profile_in;
  bool quiet_plan = false;
  bool calibrate = false;  // profile, fit, then plan with online calibration (calibrate.hpp)
  std::string calibrate_csv;  // rank 0's measured micro-steps and predictions, one CSV row each
  double timeout_s = 300;     // a collective's wait for the other ranks
};

// Parses the command line (CLI11: whole-string numbers, each in its range; a bad value is a
// message naming the option and the value, exit status 2). Exits after --help.
arguments parse(int argc, char** argv) {
  arguments a;
  CLI::App app{"dcp-train-cpu: the tiny transformer trained under dcp plans on CPU ranks. Without --local the "
               "ranks are the MPI processes (mpirun -np R dcp-train-cpu ...)."};
  app.option_defaults()->always_capture_default();
  app.add_option("--local", a.local, "run R ranks as threads of this process (0: the MPI processes)")
      ->check(CLI::Range(0, 1024));
  app.add_option("--steps", a.steps, "global batches to train")->check(CLI::Range(1, 100'000'000));
  app.add_option("--dtype", a.dtype, "float or double")->check(CLI::IsMember({"float", "double"}));
  app.add_option("--planner", a.planner, "dcp, bucket or packed")->check(CLI::IsMember({"dcp", "bucket", "packed"}));
  app.add_option("--restrictions", a.restrictions,
                 "on: dcp also plans a sparse batch as itself allowed less (no DCP-intra, no DCP-inter, neither) "
                 "and keeps the sooner plan; off: its full plan only, which plans faster and keeps the padding "
                 "passes and unequal micro-step counts of small batches")
      ->check(CLI::IsMember({"on", "off"}));
  app.add_option("--optimizer", a.optimizer, "sgd or adam")->check(CLI::IsMember({"sgd", "adam"}));
  app.add_option("--lr", a.lr, "learning rate")->check(trainer_cli::finite_in(1e-12, 100));
  app.add_option("--hidden", a.model.hidden, "model width")->check(CLI::Range(1, 1 << 16));
  app.add_option("--heads", a.model.heads, "attention heads")->check(CLI::Range(1, 1 << 12));
  app.add_option("--mlp", a.model.mlp, "MLP width")->check(CLI::Range(1, 1 << 18));
  app.add_option("--blocks", a.model.blocks, "transformer blocks")->check(CLI::Range(1, 1 << 12));
  app.add_option("--vocab", a.model.vocab, "vocabulary")->check(CLI::Range(2, 1 << 20));
  app.add_flag("--causal", a.model.causal, "causal attention");
  app.add_option("--min-len", a.data.min_len, "shortest synthetic sequence")->check(CLI::Range(1, 1 << 20));
  app.add_option("--max-len", a.data.max_len, "longest synthetic sequence")->check(CLI::Range(1, 1 << 20));
  app.add_option("--sequences", a.sequences, "synthetic sequences in the dataset")->check(CLI::Range(1, 10'000'000));
  app.add_option("--global-batch-tokens", a.batch_tokens, "tokens per global batch (0: 1024 x ranks)")
      ->check(CLI::Range(std::int64_t{0}, std::int64_t{1} << 40));
  app.add_option("--fit-tokens", a.fit_tokens,
                 "the analytic planner's device holds this many tokens per rank with nothing checkpointed")
      ->check(trainer_cli::finite_in(1, 1e9));
  app.add_option("--seed", a.data.seed, "seed of the synthetic data");
  app.add_option("--sharding", a.sharding,
                 "zero1 (every rank holds the parameters) or zero3 (each rank holds 1/R of every block, "
                 "gathered before use; plans run in lockstep with padding passes)")
      ->check(CLI::IsMember({"zero1", "zero3"}));
  app.add_option("--ring", a.ring,
                 "steps may split sp = u x r with r <= R (a power of two): ring attention passes K/V blocks "
                 "around r ranks, so sp may exceed the heads (analytic planning only; 1: Ulysses only)")
      ->check(CLI::Range(1, 1024));
  app.add_flag("--profile", a.profile, "profile this model on this machine first (2-block truncation), then plan "
                                       "with the profile");
  app.add_option("--profile-budget", a.profile_budget,
                 "seconds of runs after which the profiler stops doubling batches (0: no limit); batch 1 of every "
                 "length group always runs")
      ->check(trainer_cli::finite_in(0, 1e6));
  app.add_option("--profile-out", a.profile_out, "write the profile JSON here");
  app.add_option("--profile-in", a.profile_in, "plan with this profile JSON (from --profile-out)");
  app.add_flag("--quiet-plan", a.quiet_plan, "no per-step plan summary");
  app.add_flag("--calibrate", a.calibrate,
               "profile, fit dcp::fitted_cost to the profile, train with online calibration, and print each "
               "micro-step's measured time (thread CPU time; the profile too) against the analytic, profiled, "
               "fitted and calibrated models");
  app.add_option("--calibrate-csv", a.calibrate_csv,
                 "with --calibrate, also write rank 0's micro-steps (features, times, predictions) as CSV");
  app.add_option("--timeout", a.timeout_s,
                 "seconds a rank waits in a collective for the others before it reports which one stalled")
      ->check(trainer_cli::finite_in(1, 86400));
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    std::exit(app.exit(e) == 0 ? 0 : 2);
  }
  a.data.vocab = a.model.vocab;
  auto refuse = [](const std::string& why) {
    std::fprintf(stderr, "dcp-train-cpu: %s\n", why.c_str());
    std::exit(2);
  };
  a.model.max_len = std::max(a.model.max_len, a.data.max_len);
  if ((a.ring & (a.ring - 1)) != 0) refuse("--ring " + std::to_string(a.ring) + " must be a power of two >= 1");
  if (a.data.min_len > a.data.max_len)
    refuse("--min-len " + std::to_string(a.data.min_len) + " is above --max-len " + std::to_string(a.data.max_len));
  if (a.ring > 1 && (a.profile || a.calibrate || !a.profile_in.empty()))
    refuse("--ring " + std::to_string(a.ring) +
           " plans with the analytic model; profiles and calibration price Ulysses-only steps, drop --ring or "
           "--profile/--profile-in/--calibrate");
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
  const bool zero3 = a.sharding == "zero3";
  std::optional<zero3_shards<T, Comm>> shards;
  if (zero3) shards.emplace(model, world);
  optimizer<T> opt({a.optimizer == "sgd" ? optimizer_kind::sgd : optimizer_kind::adam, a.lr},
                   zero3 ? shards->params().size() : model.params().size());
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
    const auto s = zero3 ? zero3_train_step(sched, model, *shards, opt, a.data, batch.sequences)
                         : train_step(sched, model, opt, a.data, batch.sequences);
    const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    losses.push_back(s.loss);
    // Every plan keeps the plan laws under the cost model it was made with (a profile included).
    if (const auto bad = dcp::plan_violations(s.plan, std::span<const dcp::sequence>(batch.sequences), sched.cost());
        !bad.empty())
      throw std::runtime_error("step " + std::to_string(i) + ": the plan breaks a plan law: " + bad.front());
    if (root && !a.quiet_plan) print_step(i, s, world.size(), a.model.blocks, sched.cost().blocks(), dt);
    if (root && zero3 && !a.quiet_plan)
      std::printf("          zero3: %zu padding passes\n",
                  std::size_t(std::ranges::count_if(s.plan.steps, [](const auto& st) { return st.sequences.empty(); })));
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
      dcp::dcp_planner planner;
      planner.restrictions = a.restrictions == "on";
      train<T>(world, a, cost, planner);
    } else if (a.planner == "bucket") {
      const std::span<const dcp::sequence> all(data);
      train<T>(world, a, cost, dcp::tune(dcp::bucket_planner{}, cost, all, a.batch_tokens));
    } else {
      const std::span<const dcp::sequence> all(data);
      train<T>(world, a, cost, dcp::tune(dcp::packed_planner{}, cost, all, a.batch_tokens));
    }
  };
  if (!a.profile && a.profile_in.empty() && !a.calibrate) {
    go(dcp::make_analytic_cost(spec, device,
                               {.gpus = world.size(),
                                .gpus_per_node = device.gpus_per_node,
                                .sharding = a.sharding == "zero3" ? dcp::sharding_kind::zero3 : dcp::sharding_kind::zero1,
                                .ring = a.ring}));
    return;
  }
  dcp::check(a.sharding == "zero1", dcp::errc::invalid_argument, [] {
    return std::string("--sharding zero3 plans on the analytic model; leave out --profile, --profile-in and --calibrate");
  });
  // Rank 0 profiles (or reads the file) and broadcasts the JSON, so every rank plans with the same table.
  std::string text;
  if (world.rank() == 0) {
    dcp::profile_table table;
    if (!a.profile_in.empty()) {
      std::ifstream in(a.profile_in);
      dcp::check(bool(in) && !std::filesystem::is_directory(a.profile_in), dcp::errc::invalid_argument,
                 [&] { return "cannot open profile " + a.profile_in + " (a readable profile JSON file, from --profile-out)"; });
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
        out.close();  // flushed and closed before it is reported: a full disk or a missing folder fails here
        dcp::check(!out.fail(), dcp::errc::invalid_argument, [&] {
          return "cannot write profile " + a.profile_out + " (its folder must exist and have room)";
        });
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

// Every value that shapes the run, as text: what `trainer_cli::check_same_arguments` compares
// across ranks.
std::string described(const arguments& a) {
  std::ostringstream os;
  os << a.steps << ' ' << a.dtype << ' ' << a.planner << ' ' << a.restrictions << ' ' << a.optimizer << ' ' << a.lr << ' ' << a.model.vocab << ' '
     << a.model.hidden << ' ' << a.model.heads << ' ' << a.model.mlp << ' ' << a.model.blocks << ' ' << a.model.causal
     << ' ' << a.data.min_len << ' ' << a.data.max_len << ' ' << a.data.seed << ' ' << a.sequences << ' ' << a.ring << ' '
     << a.batch_tokens << ' ' << a.fit_tokens << ' ' << a.profile << ' ' << a.profile_budget << ' ' << a.profile_in << ' '
     << a.calibrate;
  return os.str();
}

template <class Comm>
void run(Comm& world, const arguments& a) {
  trainer_cli::check_same_arguments(world, a.steps, described(a));
  if (a.dtype == "float") run_with_planner<float>(world, a);
  else run_with_planner<double>(world, a);
}

}  // namespace

int main(int argc, char** argv) {
  arguments a = parse(argc, argv);
  const auto timeout = std::chrono::milliseconds(static_cast<std::int64_t>(a.timeout_s * 1000));
  try {
    if (a.local > 0) {
      if (a.batch_tokens == 0) a.batch_tokens = 1024 * std::int64_t(a.local);
      dcp::local_world::run(a.local, [&](dcp::local_comm& world) { run(world, a); }, {.timeout = timeout});
      return 0;
    }
#if DCP_HAS_MPI()
    dcp::mpi_environment env(&argc, &argv);
    auto world = dcp::mpi_comm::world(timeout);
    if (a.batch_tokens == 0) a.batch_tokens = 1024 * std::int64_t(world.size());
    run(world, a);
#else
    if (a.batch_tokens == 0) a.batch_tokens = 1024;
    dcp::local_world::run(1, [&](dcp::local_comm& world) { run(world, a); });
#endif
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "dcp-train-cpu: %s\n", e.what());
#if DCP_HAS_MPI()
    dcp::abort_mpi_job(1);  // the other ranks may wait for this one in a collective: end them too
#endif
    return 1;
  }
}
