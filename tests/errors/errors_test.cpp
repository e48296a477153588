// The bad-input catalogue (docs/errors.md), one entry per row: each entry feeds one rejected input
// to dcp (the library, a group of local ranks, or the dcp-sim command line run as a process) and
// checks the kind of failure (dcp::errc, or the CLI's exit status) and the stable part of the
// message. A second test checks that docs/errors.md lists exactly these entries, with the same
// kind and message, and no others.

#include <gtest/gtest.h>

#include <sys/wait.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <mutex>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <unistd.h>

#include <nlohmann/json.hpp>

#include <dcp/dcp.hpp>

#ifndef DCP_ERRORS_MD
#error "DCP_ERRORS_MD must name docs/errors.md"
#endif

namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

// What an input led to: the kind ("invalid_argument", ..., "exit 1", "no error") and the message
// of every rank that reported (one for single-process entries).
struct outcome {
  std::string kind;
  std::vector<std::string> messages;
};

struct entry {
  std::string id;       // the row id in docs/errors.md
  std::string kind;     // expected kind
  std::string message;  // stable part every reported message must contain
  std::function<outcome()> run;
};

std::string errc_name(const std::error_code& ec) {
  if (ec.category() != dcp::dcp_category()) return std::string(ec.category().name()) + " error";
  return dcp::to_string(static_cast<dcp::errc>(ec.value()));
}

// Runs `fn`; the dcp::error it throws is the outcome. Must catch: the catalogue compares
// outcomes (library calls, rank views and CLI runs alike) as data, row by row.
template <class Fn>
outcome lib(Fn&& fn) {
  try {
    fn();
  } catch (const dcp::error& e) {
    return {errc_name(e.code()), {e.what()}};
  } catch (const std::exception& e) {
    return {"std::exception (not dcp::error)", {e.what()}};
  }
  return {"no error", {}};
}

// Runs `fn` on `n` local ranks (threads); every rank listed in `reporters` (all when empty) must
// throw, and the outcome holds each of their messages. Ranks do not abort each other on error, so
// every rank reports its own view.
outcome ranks(int n, const std::function<void(dcp::local_comm&)>& fn, std::vector<int> reporters = {},
              std::chrono::milliseconds timeout = 2s) {
  if (reporters.empty())
    for (int r = 0; r < n; ++r) reporters.push_back(r);
  std::vector<outcome> per(static_cast<std::size_t>(n));
  dcp::local_world::run(
      n,
      [&](dcp::local_comm& c) {
        per[static_cast<std::size_t>(c.rank())] = lib([&] { fn(c); });
      },
      {timeout, false});
  outcome out{per[static_cast<std::size_t>(reporters.front())].kind, {}};
  for (int r : reporters) {
    const auto& o = per[static_cast<std::size_t>(r)];
    if (o.kind != out.kind) out.kind = "ranks disagree: rank " + std::to_string(r) + " got " + o.kind;
    out.messages.push_back(o.messages.empty() ? "rank " + std::to_string(r) + ": no error" : o.messages.front());
  }
  return out;
}

// A per-process folder for the files the catalogue reads, removed when the process ends.
struct scratch_dir {
  fs::path path = fs::temp_directory_path() / ("dcp-errors-" + std::to_string(::getpid()));
  scratch_dir() { fs::create_directories(path); }
  ~scratch_dir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

fs::path scratch() {
  static const scratch_dir dir;
  return dir.path;
}

fs::path write_file(const std::string& name, const std::string& text) {
  const auto p = scratch() / name;
  std::ofstream(p, std::ios::binary) << text;
  return p;
}

// Runs `exe` with `args` (already shell-quoted where needed); the outcome is its exit status and
// its output (stdout and stderr).
outcome run_process(const std::string& exe, const std::string& args) {
  const std::string cmd = "'" + exe + "' " + args + " 2>&1";
  FILE* p = ::popen(cmd.c_str(), "r");
  if (!p) return {"popen failed", {cmd}};
  std::string out;
  std::array<char, 4096> buf{};
  for (std::size_t got; (got = std::fread(buf.data(), 1, buf.size(), p)) > 0;) out.append(buf.data(), got);
  const int st = ::pclose(p);
  const int code = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  return {"exit " + std::to_string(code), {out}};
}

// dcp-sim with `args`.
outcome cli(const std::string& args) {
#ifdef DCP_SIM_EXE
  return run_process(DCP_SIM_EXE, args);
#else
  return {"skip", {"dcp-sim is not built (DCP_BUILD_EXAMPLES=OFF): " + args}};
#endif
}

// dcp-train-cpu with `args`, on one rank (`--local 1`) unless they name the ranks.
outcome train_cli(const std::string& args) {
#ifdef DCP_TRAIN_CPU_EXE
  return run_process(DCP_TRAIN_CPU_EXE, (args.find("--local") == std::string::npos ? "--local 1 " : "") + args);
#else
  return {"skip", {"dcp-train-cpu is not built (DCP_BUILD_EXAMPLES=OFF): " + args}};
#endif
}

// dcp-train-libtorch with `args`, as one MPI process (a singleton: no mpirun).
outcome libtorch_cli(const std::string& args) {
#ifdef DCP_TRAIN_LIBTORCH_EXE
  return run_process(DCP_TRAIN_LIBTORCH_EXE, args);
#else
  return {"skip", {"dcp-train-libtorch is not built (it needs LibTorch and MPI): " + args}};
#endif
}

// ---- fixtures of the entries --------------------------------------------------------------------

// dcp's plans of the default workload on 8 GPUs over groups of every size (they use sizes buddy
// blocks do not offer, and several communicators per rank), written once by dcp-sim.
std::string any_groups_plan() {
  static const std::string path = [] {
    const std::string p = (scratch() / "any-groups-plan.json").string();
    const outcome made = cli("--gpus 8 --methods dcp --plan-out '" + p + "'");
    return made.kind == "exit 0" ? p : std::string("(dcp-sim failed to write it: ") + made.messages.front() + ")";
  }();
  return path;
}

dcp::analytic_cost cost8() {
  return dcp::make_analytic_cost(dcp::models::cogvideox_5b(), dcp::devices::h200_analytic(), 8);
}

dcp::dataset small_dataset(int n = 40) {
  dcp::dataset d;
  for (int i = 0; i < n; ++i) d.push_back(dcp::make_sequence(i, 1 + (i * 37) % 100));
  return d;
}

std::string saved_state(const dcp::token_budget_sampler& s) {
  std::ostringstream os;
  s.save(os);
  return os.str();
}

dcp::profile_table valid_profile() {
  dcp::profile_table t;
  t.model = dcp::models::cogvideox_5b();
  t.device = "h200";
  t.gpus = 8;
  t.gpus_per_node = 8;
  t.memory_capacity_bytes = 1.269e11;
  t.static_memory_bytes = 4e10;
  t.entries.push_back({0, 1024, 1, 1024, 1, 1, 0, 0.01, 5e10});
  return t;
}

std::string profile_text(const std::function<void(nlohmann::json&)>& edit = {}) {
  std::ostringstream os;
  dcp::write_profile(os, valid_profile());
  auto j = nlohmann::json::parse(os.str());
  if (edit) edit(j);
  return j.dump();
}

// A one-step dcp.plan/v1 document on 2 GPUs with the given round, ranks and format.
std::string plan_text(const std::string& round, const std::string& ranks, const std::string& format = "dcp.plan/v1") {
  return R"({"format": ")" + format +
         R"(", "method": "dcp", "gpus": 2, "gpus_per_node": 8, "memory_capacity_bytes": 1e11,
             "model": {"name": "m"}, "device": {"name": "d"},
             "batches": [{"index": 0, "makespan_s": 1, "lower_bound_s": 1,
               "steps": [{"ranks": )" + ranks + R"(, "sp": 2, "start_s": 0, "time_s": 1, "memory_bytes": 1,
                          "checkpointed_blocks": 0, "round": )" + round + R"(, "sequences": []}]}]})";
}

outcome read_plan_text(const std::string& text) {
  return lib([&] {
    std::istringstream in(text);
    (void)dcp::sim::read_plan_json(in, "plan.json");
  });
}

outcome read_profile_text(const std::string& text) {
  return lib([&] {
    std::istringstream in(text);
    (void)dcp::read_profile(in, "p.json");
  });
}

void read_lengths_text(const std::string& text) {
  std::istringstream in(text);
  (void)dcp::read_lengths(in, "l.txt");
}

// ---- the catalogue ------------------------------------------------------------------------------

const std::vector<entry>& catalogue() {
  static const std::vector<entry> table = {
      // Sequences and batches
      {"infeasible-sequence", "infeasible", "fits no configuration on 8 GPUs; the largest length that fits is",
       [] { return lib([] { dcp::dcp_planner{}.plan(cost8(), std::vector{dcp::make_sequence(3, 100'000'000)}); }); }},
      {"length-zero", "invalid_argument", "sequence 4 has shape 1 x 0; frames and tokens must be positive",
       [] { return lib([] { dcp::dcp_planner{}.plan(cost8(), std::vector{dcp::make_sequence(4, 0)}); }); }},
      {"length-negative", "invalid_argument", "sequence 5 has shape -2 x 100; frames and tokens must be positive",
       [] { return lib([] { dcp::dcp_planner{}.plan(cost8(), std::vector{dcp::make_sequence(5, -2, 100)}); }); }},
      {"length-overflow", "invalid_argument", "over the limit of 2^40 tokens; split the sample",
       [] {
         return lib([] {
           dcp::dcp_planner{}.plan(cost8(), std::vector{dcp::make_sequence(6, std::int64_t{1} << 21, std::int64_t{1} << 21)});
         });
       }},
      {"empty-batch", "invalid_argument", "empty batch: a global batch needs at least one sequence",
       [] { return lib([] { dcp::dcp_planner{}.plan(cost8(), std::vector<dcp::sequence>{}); }); }},
      {"duplicate-id-batch", "invalid_argument", "sequence id 7 appears twice in the batch; ids must be unique",
       [] {
         return lib([] {
           dcp::dcp_planner{}.plan(cost8(), std::vector{dcp::make_sequence(7, 100), dcp::make_sequence(7, 200)});
         });
       }},
      {"duplicate-id-dataset", "invalid_argument", "id 2 appears at positions 0 and 1 of the dataset",
       [] {
         return lib([] {
           dcp::token_budget_sampler(dcp::dataset{dcp::make_sequence(2, 10), dcp::make_sequence(2, 20)}, 100);
         });
       }},
      {"empty-dataset", "invalid_argument", "the dataset is empty",
       [] { return lib([] { dcp::token_budget_sampler(dcp::dataset{}, 100); }); }},
      {"batch-budget-not-positive", "invalid_argument", "budget = 0 tokens must be positive",
       [] { return lib([] { dcp::token_budget_sampler(small_dataset(), 0); }); }},

      // Lengths files
      {"lengths-not-integer", "parse_error", "l.txt:2: expected an integer token count but found 'abc'",
       [] { return lib([] { read_lengths_text("12\nabc\n"); }); }},
      {"lengths-not-positive", "parse_error", "l.txt:1: value -4 must be positive",
       [] { return lib([] { read_lengths_text("-4\n"); }); }},
      {"lengths-zero", "parse_error", "l.txt:2: value 0 must be positive",
       [] { return lib([] { read_lengths_text("8\n3 0\n"); }); }},
      {"lengths-out-of-range", "parse_error", "is out of range; lengths must be positive and at most 2^40",
       [] { return lib([] { read_lengths_text("99999999999999999999999\n"); }); }},
      {"lengths-over-limit", "parse_error", "value 2199023255553 is over the limit of 2^40 tokens",
       [] { return lib([] { read_lengths_text("2199023255553\n"); }); }},
      {"lengths-shape-over-limit", "parse_error", "shape 2097152 x 2097152 has over 2^40 tokens",
       [] { return lib([] { read_lengths_text("2097152 2097152\n"); }); }},
      {"lengths-third-value", "parse_error", "l.txt:1: expected 'n' or 'T S' but found a third value '7'",
       [] { return lib([] { read_lengths_text("5 6 7\n"); }); }},
      {"lengths-empty", "parse_error", "no sequences found; a lengths file has one sequence per line",
       [] { return lib([] { read_lengths_text("# header only: the file was cut here\n"); }); }},
      {"lengths-truncated-token", "parse_error", "l.txt:2: expected an integer token count but found '12e'",
       [] { return lib([] { read_lengths_text("10\n12e"); }); }},
      {"lengths-truncated", "parse_error", "the file is truncated or was edited",
       [] {
         return lib([] {
           std::istringstream in("# dcp lengths file: 3 sequences\n100\n200\n30");
           dcp::read_lengths(in, "l.txt");
         });
       }},
      {"lengths-missing-file", "io_error", "cannot open lengths file",
       [] { return lib([] { (void)dcp::read_lengths_file(scratch() / "no-such-file.txt"); }); }},
      {"lengths-directory", "io_error", "it is a directory",
       [] { return lib([] { (void)dcp::read_lengths_file(scratch()); }); }},

      // Profiles (dcp.profile/v1)
      {"profile-not-json", "parse_error", "dcp.profile/v1 'p.json': not valid JSON",
       [] { return read_profile_text("{ \"format\": "); }},
      {"profile-truncated", "parse_error", "dcp.profile/v1 'p.json': not valid JSON",
       [] {
         const auto t = profile_text();
         return read_profile_text(t.substr(0, t.size() / 2));
       }},
      {"profile-wrong-format", "parse_error", "unknown format 'dcp.profile/v0'; expected \"dcp.profile/v1\"",
       [] { return read_profile_text(profile_text([](auto& j) { j["format"] = "dcp.profile/v0"; })); }},
      {"profile-missing-field", "parse_error", "missing or mistyped field",
       [] { return read_profile_text(profile_text([](auto& j) { j.erase("entries"); })); }},
      {"profile-nan-time", "invalid_argument", "entry 0 has time_s = nan (must be positive and finite)",
       [] { return read_profile_text(profile_text([](auto& j) { j["entries"][0]["time_s"] = nullptr; })); }},
      {"profile-negative-time", "invalid_argument", "entry 0 has time_s = -0.500000 (must be positive and finite)",
       [] { return read_profile_text(profile_text([](auto& j) { j["entries"][0]["time_s"] = -0.5; })); }},
      {"profile-nan-memory", "invalid_argument", "entry 0 has memory_bytes = nan (must be finite, not negative)",
       [] { return read_profile_text(profile_text([](auto& j) { j["entries"][0]["memory_bytes"] = nullptr; })); }},
      {"profile-negative-memory", "invalid_argument",
       "entry 0 has memory_bytes = -1.000000 (must be finite, not negative)",
       [] { return read_profile_text(profile_text([](auto& j) { j["entries"][0]["memory_bytes"] = -1.0; })); }},
      {"profile-other-model", "mismatch", "profile does not match this job: it was made for",
       [] { return lib([] { dcp::make_profiled_cost(valid_profile(), dcp::models::llama3_8b(), "h200", 8); }); }},
      {"profile-other-device", "mismatch", "it was made on device 'h200', the job runs on 'h100'",
       [] { return lib([] { dcp::make_profiled_cost(valid_profile(), dcp::models::cogvideox_5b(), "h100", 8); }); }},
      {"profile-other-world-size", "mismatch", "it was made for 8 GPUs, the job has 16",
       [] { return lib([] { dcp::make_profiled_cost(valid_profile(), dcp::models::cogvideox_5b(), "h200", 16); }); }},
      {"profile-other-gpus-per-node", "mismatch", "it was made for 8 GPUs per node, the job has 4",
       [] { return lib([] { dcp::make_profiled_cost(valid_profile(), dcp::models::cogvideox_5b(), "h200", 8, 4); }); }},
      {"cost-model-other-world", "mismatch", "the cost model is for 8 GPUs but the world has 1 ranks",
       [] {
         return lib([] {
           dcp::local_world::run(1, [](dcp::local_comm& world) {
             dcp::scheduler s(dcp::models::cogvideox_5b(), world,
                              dcp::make_analytic_cost(dcp::models::cogvideox_5b(), dcp::devices::h200_analytic(), 8));
           });
         });
       }},

      // Model, device and GPUs
      {"sp-not-dividing-heads", "invalid_argument", "sp = 32 is not legal on 32 GPUs with 48 heads",
       [] {
         return lib([] {
           dcp::bucket_planner p;
           p.sp = 32;
           p.plan(dcp::make_analytic_cost(dcp::models::cogvideox_5b(), dcp::devices::h200_analytic(), 32),
                  std::vector{dcp::make_sequence(1, 1000)});
         });
       }},
      {"baseline-untuned", "invalid_argument",
       "bucket planner: sp = 0 is not tuned; choose it on the workload with dcp::tune(planner, ctx, data)",
       [] {
         return lib([] {
           dcp::bucket_planner{}.plan(
               dcp::make_analytic_cost(dcp::models::cogvideox_5b(), dcp::devices::h200_analytic(), 32),
               std::vector{dcp::make_sequence(1, 1000)});
         });
       }},
      {"dynamic-cp-limit-out-of-range", "invalid_argument", "dynamic_cp max_tokens_per_rank = -5 must be in [1, ",
       [] {
         return lib([] {
           dcp::dynamic_cp_planner p;
           p.max_tokens_per_rank = -5;
           p.plan(dcp::make_analytic_cost(dcp::models::cogvideox_5b(), dcp::devices::h200_analytic(), 32),
                  std::vector{dcp::make_sequence(1, 1000)});
         });
       }},
      {"dynamic-cp-min-cp-illegal", "invalid_argument",
       "dynamic_cp min_cp_size = 3 is not a legal CP size on 32 GPUs with 48 heads",
       [] {
         return lib([] {
           dcp::dynamic_cp_planner p;
           p.min_cp_size = 3;
           p.plan(dcp::make_analytic_cost(dcp::models::cogvideox_5b(), dcp::devices::h200_analytic(), 32),
                  std::vector{dcp::make_sequence(1, 1000)});
         });
       }},
      {"dynamic-cp-group-too-wide", "infeasible",
       "sequence 2 of 300226 tokens needs CP size 32 under dynamic_cp max_tokens_per_rank = 10000, over the widest "
       "legal group 16",
       [] {
         return lib([] {
           dcp::dynamic_cp_planner p;
           p.max_tokens_per_rank = 10000;
           p.plan(dcp::make_analytic_cost(dcp::models::cogvideox_5b(), dcp::devices::h200_analytic(), 32),
                  std::vector{dcp::make_sequence(1, 1000), dcp::make_sequence(2, 300'000)});
         });
       }},
      {"ulysses-heads-not-divisible", "invalid_argument", "ulysses: heads = 48 is not divisible by sp = 32",
       [] { return lib([] {
              dcp::validate(dcp::ulysses_shape{1024, 48, 64}, 32);
            }); }},
      {"gpus-zero", "invalid_argument", "gpus = 0 must be positive",
       [] {
         return lib([] { dcp::make_analytic_cost(dcp::models::cogvideox_5b(), dcp::devices::h200_analytic(), 0); });
       }},
      {"gpus-not-whole-nodes", "invalid_argument", "gpus = 12 is not a multiple of gpus_per_node = 8; use whole nodes",
       [] {
         return lib([] { dcp::make_analytic_cost(dcp::models::cogvideox_5b(), dcp::devices::h200_analytic(), 12); });
       }},
      {"gpus-per-node-not-power-of-two", "invalid_argument", "gpus_per_node = 6 must be a positive power of two",
       [] {
         return lib([] {
           auto d = dcp::devices::h200_analytic();
           d.gpus_per_node = 6;
           dcp::make_analytic_cost(dcp::models::cogvideox_5b(), d, 12);
         });
       }},
      {"memory-below-static", "invalid_argument", "is below the static memory",
       [] { return lib([] { dcp::make_analytic_cost(dcp::models::llama3_8b(), dcp::devices::h100_analytic(), 1); }); }},
      {"memory-capacity-over-device", "invalid_argument", "exceeds the device's 141000000000.000000 bytes",
       [] {
         return ranks(1, [](dcp::local_comm& w) {
           dcp::scheduler_options o;
           o.memory_capacity_bytes = 2e11;
           dcp::scheduler s(dcp::models::cogvideox_5b(), w, o);
         });
       }},
      {"model-heads-not-dividing-hidden", "invalid_argument", "heads = 7 must be positive and divide hidden = 3072",
       [] {
         return lib([] {
           auto m = dcp::models::cogvideox_5b();
           m.heads = 7;
           dcp::validate(m);
         });
       }},
      {"model-kv-heads-not-dividing", "invalid_argument", "kv_heads = 7 must divide heads = 64",
       [] {
         return lib([] {
           auto m = dcp::models::llama3_70b();
           m.kv_heads = 7;
           dcp::validate(m);
         });
       }},
      {"model-vocabulary-fields-without-vocabulary", "invalid_argument",
       "tied_embeddings and loss = chunked need a vocabulary (vocab > 0)",
       [] {
         return lib([] {
           auto m = dcp::models::llama3_8b();
           m.loss = dcp::loss_kind::chunked;
           dcp::validate(m);
         });
       }},
      {"model-window-without-causal-attention", "invalid_argument", "a window needs causal attention",
       [] {
         return lib([] {
           auto m = dcp::models::wan2_1_14b();
           m.window = 4096;
           dcp::validate(m);
         });
       }},
      {"model-dense-blocks-without-experts", "invalid_argument", "dense_blocks = 3 needs a MoE model",
       [] {
         return lib([] {
           auto m = dcp::models::llama3_70b();
           m.dense_blocks = 3;
           dcp::validate(m);
         });
       }},
      {"model-too-many-blocks", "invalid_argument", "blocks = 65537 must be in [1, 65536]",
       [] {
         return lib([] {
           auto m = dcp::models::llama3_8b();
           m.blocks = 65537;
           dcp::validate(m);
         });
       }},
      {"cross-attention-text-too-long", "invalid_argument",
       "cross_attention_tokens = 2147483647 of model 'wan2.1-14b': the text's keys and values of one sequence alone",
       [] {
         return lib([] {
           auto m = dcp::models::wan2_1_14b();
           m.cross_attention_tokens = 2147483647;
           dcp::make_analytic_cost(m, dcp::devices::h200_analytic(), 16);
         });
       }},
      {"pp-more-than-block-pairs", "invalid_argument",
       "pp = 29 stages for the 28 spatial-temporal block pairs of model 'stdit3-xl'; use 1 <= pp <= 28",
       [] { return lib([] { (void)dcp::pipeline_stage(dcp::models::stdit3_xl(), 29); }); }},
      {"tp-not-dividing", "invalid_argument", "tp = 3 must be a power of two dividing gpus_per_node = 8",
       [] {
         return lib([] {
           dcp::make_analytic_cost(dcp::models::llama3_70b(), dcp::devices::h200_analytic(), {.gpus = 128, .tp = 3});
         });
       }},
      {"ep-on-dense-model", "invalid_argument", "ep = 8 needs a MoE model (experts > 0)",
       [] {
         return lib([] {
           dcp::make_analytic_cost(dcp::models::llama3_8b(), dcp::devices::h200_analytic(), {.gpus = 64, .ep = 8});
         });
       }},
      {"unknown-sharding", "invalid_argument", "unknown sharding 'zero2'; use replicated, zero1 or zero3",
       [] { return lib([] { (void)dcp::sharding_of("zero2"); }); }},
      {"model-config-missing-field", "parse_error", "missing field 'num_hidden_layers'",
       [] {
         return lib([] {
           std::istringstream in(R"({"hidden_size": 64, "num_attention_heads": 4, "intermediate_size": 256})");
           (void)dcp::models::from_config(in, "config.json");
         });
       }},
      {"kernel-constant-without-clock", "invalid_argument",
       "device 'h200-analytic': kernel clock constants need kernel.attention_forward > 0",
       [] {
         return lib([] {
           auto d = dcp::devices::h200_analytic();
           d.kernel.tp_exposed = 0.5;
           dcp::validate(d);
         });
       }},
      {"fp8-without-rate", "invalid_argument", "device 'a100' has no FP8 GEMM rate (kernel.fp8_gemm = 0)",
       [] {
         return lib([] {
           auto d = dcp::devices::a100();
           d.precision = dcp::gemm_precision::fp8;
           dcp::validate(d);
         });
       }},
      {"device-not-positive", "invalid_argument", "device 'h200': peak = -1.000000 must be positive",
       [] {
         return lib([] {
           auto d = dcp::devices::h200();
           d.peak = -1;
           dcp::validate(d);
         });
       }},
      {"unknown-model-preset", "invalid_argument", "unknown model preset 'gpt5'; use one of",
       [] { return lib([] { (void)dcp::models::preset("gpt5"); }); }},
      {"unknown-device-preset", "invalid_argument",
       "unknown device preset 'v100'; use h200, h100, a100, h200-analytic or h100-analytic",
       [] { return lib([] { (void)dcp::devices::preset("v100"); }); }},
      {"cluster-node-count", "invalid_argument", "1 node devices for 2 nodes of gpus = 16",
       [] {
         return lib([] {
           dcp::parallel_layout l{.gpus = 16, .gpus_per_node = 8};
           l.nodes = {{"h100", 1, 72e9}};
           l.validate();
         });
       }},
      {"cluster-entry-bad", "invalid_argument", "cluster entry 'h100x0' must be PRESETxNODES with NODES >= 1",
       [] { return lib([] { (void)dcp::devices::cluster("h100x0"); }); }},
      {"cluster-file-unknown-key", "parse_error",
       "unknown key \"hbm\"; an entry may set count, peak, eff_max, mem_bytes and usable",
       [] {
         return lib([] {
           std::stringstream in(R"({"format": "dcp.cluster/v1", "nodes": [{"device": "h100", "hbm": 1}]})");
           (void)dcp::read_cluster_json(in);
         });
       }},
      {"group-size-not-offered", "invalid_argument",
       "group size 12 in 'only' is not a size between 1 and 64 that any groups offer",
       [] {
         return lib([] { dcp::contiguous_groups{64, 8, dcp::group_sizes::any, std::vector<int>{12}}.validate(); });
       }},
      {"comm-budget-too-small", "infeasible",
       "a budget of 0 communicators per rank cannot hold every sequence of the data: sizes 40 are each needed by one; "
       "raise the budget to 1",
       [] {
         return lib([] {
           const auto w = dcp::make_analytic_cost(dcp::models::wan2_1_14b(), dcp::devices::h200_analytic(), 64);
           const std::int64_t at8 = dcp::step_token_capacity(w, 8, w.blocks()) - w.model.text_tokens;
           const std::vector<dcp::sequence> data{dcp::make_sequence(1, at8 * 3), dcp::make_sequence(2, 4096)};
           (void)dcp::budget_group_sizes(
               dcp::planning_context{w, dcp::selective_recompute{}, dcp::contiguous_groups{64, 8}}, data, 0);
         });
       }},
      {"uniform-without-cluster", "invalid_argument",
       "method 'dcp-uniform' plans as if every node were the cluster's weakest; it needs a cluster",
       [] {
         return lib([] {
           const auto c = dcp::make_analytic_cost(dcp::models::llama3_8b(), dcp::devices::h200_analytic(), 8);
           const std::vector<dcp::sequence> data{dcp::make_sequence(1, 1000)};
           const std::vector<std::vector<dcp::sequence>> batches{data};
           (void)dcp::sim::run_method("dcp-uniform", c, data, batches, {});
         });
       }},
      {"unknown-workload", "invalid_argument", "unknown workload 'nope'; use one of",
       [] { return lib([] { (void)dcp::workloads::make("nope"); }); }},
      {"unknown-method", "invalid_argument", "unknown method 'nope'; use one of",
       [] { return lib([] { dcp::sim::validate_method("nope"); }); }},

      // Sampler state (checkpoints)
      {"sampler-state-other-dataset", "mismatch", "the state was saved for another dataset or token count",
       [] {
         dcp::token_budget_sampler a(small_dataset(), 250, 7);
         const auto st = saved_state(a);
         auto d = small_dataset();
         d[3].spatial += 1;
         return lib([&] {
           dcp::token_budget_sampler b(d, 250, 7);
           std::istringstream in(st);
           b.load(in, "ckpt");
         });
       }},
      {"sampler-state-other-size", "mismatch",
       "ckpt: the state was saved for 40 sequences and budget 250, but this sampler has 41",
       [] {
         dcp::token_budget_sampler a(small_dataset(), 250, 7);
         const auto st = saved_state(a);
         return lib([&] {
           dcp::token_budget_sampler b(small_dataset(41), 250, 7);
           std::istringstream in(st);
           b.load(in, "ckpt");
         });
       }},
      {"sampler-state-malformed", "parse_error",
       "ckpt: [json.exception.parse_error.101] parse error at line 1, column 2",
       [] {
         return lib([] {
           dcp::token_budget_sampler b(small_dataset(), 250, 7);
           std::istringstream in("not json");
           b.load(in, "ckpt");
         });
       }},
      {"sampler-state-truncated", "parse_error", "ckpt: [json.exception.parse_error.101] parse error at line 1",
       [] {
         dcp::token_budget_sampler a(small_dataset(), 250, 7);
         const auto st = saved_state(a);
         return lib([&] {
           dcp::token_budget_sampler b(small_dataset(), 250, 7);
           std::istringstream in(st.substr(0, st.size() / 2));
           b.load(in, "ckpt");
         });
       }},
      {"sampler-state-wrong-format", "parse_error", "expected \"format\": \"dcp.sampler_state/v1\" but found",
       [] {
         return lib([] {
           dcp::token_budget_sampler b(small_dataset(), 250, 7);
           std::istringstream in("{\"format\": \"other/v2\"}");
           b.load(in, "ckpt");
         });
       }},
      {"sampler-state-not-batch-start", "invalid_argument", "is not the start of a batch",
       [] {
         return lib([] {
           dcp::token_budget_sampler b(small_dataset(), 250, 7);
           b.restore({7, 0, 1});
         });
       }},

      // Communicators and ranks (local ranks as threads; mpi_comm reports the same conditions)
      {"comm-used-after-abort", "aborted",
       "of a communicator that was aborted (aborted by rank 0); create a new communicator",
       [] {
         return ranks(2, [](dcp::local_comm& c) {
           c.barrier();
           if (c.rank() == 0) c.abort();
           c.barrier();  // rank 1 may already wait here: the abort wakes it
         });
       }},
      {"comm-buffer-size-mismatch", "invalid_argument", "all_to_all: rank 0 sends 4 elements but rank 1 sends 8",
       [] {
         return ranks(2, [](dcp::local_comm& c) {
           std::vector<int> send(std::size_t(4 + 4 * c.rank())), recv(send.size());
           c.all_to_all(std::span<const int>(send), std::span<int>(recv));
         });
       }},
      {"comm-recv-size-mismatch", "invalid_argument",
       "expects 16 bytes from rank 0 (tag 3) but the message has 8 bytes",
       [] {
         return ranks(
             2,
             [](dcp::local_comm& c) {
               if (c.rank() == 0) {
                 std::vector<int> two(2);
                 c.send(std::span<const int>(two), 1, 3);
               } else {
                 std::vector<int> four(4);
                 c.recv(std::span<int>(four), 0, 3);
               }
             },
             {1});
       }},
      {"comm-split-color-out-of-range", "invalid_argument", "split: rank 1 passed color 9, out of range [0, 4)",
       [] { return ranks(4, [](dcp::local_comm& c) { c.split(c.rank() == 1 ? 9 : 0, 0); }); }},
      {"comm-collective-order-mismatch", "mismatch", "all ranks must call collectives in the same order",
       [] {
         return ranks(2, [](dcp::local_comm& c) {
           if (c.rank() == 0) c.barrier();
           else c.split(0, 0);
         });
       }},
      {"comm-peer-never-joins", "timeout", "barrier on rank 0 timed out after 0.200 s waiting for rank 1 of 2",
       [] {
         return ranks(
             2, [](dcp::local_comm& c) { if (c.rank() == 0) c.barrier(); }, {0}, 200ms);
       }},
      {"comm-null-group", "invalid_argument",
       "on a null local_comm (a rank that split with a negative color joins no group)",
       [] {
         return ranks(1, [](dcp::local_comm& c) {
           auto none = c.split(dcp::no_color, 0);
           none.barrier();
         });
       }},
      {"comm-timeout-not-positive", "invalid_argument", "timeout of 0 ms must be positive",
       [] { return ranks(1, [](dcp::local_comm& c) { c.set_timeout(0ms); }); }},
      {"plan-mismatch-between-ranks", "mismatch", "but another rank planned a different batch or settings",
       [] {
         return ranks(4, [](dcp::local_comm& w) {
           dcp::scheduler_options o;
           o.seed = w.rank() == 3 ? 1 : 0;
           dcp::scheduler s(dcp::models::cogvideox_5b(), w, o);
           s.set_dataset(dcp::workloads::make("cogvideox-zipf10"));
           const auto p = s.plan(s.sampler().next().sequences);
           s.verify(p);
         });
       }},
      {"plan-gpus-not-world", "mismatch", "plan for 8 GPUs given to a world of 4 ranks; plan with this scheduler",
       [] {
         return ranks(4, [](dcp::local_comm& w) {
           dcp::scheduler s(dcp::models::cogvideox_5b(), w);
           const auto p = dcp::dcp_planner{}.plan(cost8(), std::vector{dcp::make_sequence(1, 1000)});
           (void)s.steps_for(p);
         });
       }},
      {"groups-gpus-not-world", "invalid_argument",
       "the group manager has 8 GPUs but the world communicator has 4 ranks",
       [] {
         return ranks(4, [](dcp::local_comm& w) { dcp::group_cache<dcp::local_comm, dcp::buddy_groups> g(w, {8, 8}); });
       }},
      {"scheduler-no-dataset", "invalid_argument", "no dataset; call set_dataset() first",
       [] {
         return ranks(1, [](dcp::local_comm& w) {
           dcp::scheduler s(dcp::models::cogvideox_5b(), w);
           (void)s.sampler();
         });
       }},

      // The truth clock, speed factors and plan files
      {"truth-unknown-key", "invalid_argument",
       "truth SPEC key 'speed' is unknown; keys: compute, attention, intra_bw, inter_bw, overhead, memory, slow_gpus, "
       "jitter",
       [] { return lib([] { (void)dcp::sim::parse_truth_spec("speed=2"); }); }},
      {"truth-not-key-value", "invalid_argument", "truth SPEC entry 'compute' is not key=value",
       [] { return lib([] { (void)dcp::sim::parse_truth_spec("compute"); }); }},
      {"truth-repeated-key", "invalid_argument", "truth SPEC key 'compute' is given twice",
       [] { return lib([] { (void)dcp::sim::parse_truth_spec("compute=1,compute=2"); }); }},
      {"truth-not-a-number", "invalid_argument", "truth SPEC attention: 'fast' is not a finite number",
       [] { return lib([] { (void)dcp::sim::parse_truth_spec("attention=fast"); }); }},
      {"truth-factor-not-positive", "invalid_argument",
       "truth SPEC memory=0 must be a positive factor (1 = as modelled)",
       [] { return lib([] { (void)dcp::sim::parse_truth_spec("memory=0"); }); }},
      {"truth-speed-out-of-range", "invalid_argument", "truth SPEC slow_gpus speed 1.5 of GPU 5 must be in (0, 1]",
       [] { return lib([] { (void)dcp::sim::parse_truth_spec("slow_gpus=5:1.5"); }); }},
      {"truth-jitter-negative", "invalid_argument", "truth SPEC jitter=-0.1 must be a sigma >= 0",
       [] { return lib([] { (void)dcp::sim::parse_truth_spec("jitter=-0.1"); }); }},
      {"truth-jitter-too-large", "invalid_argument", "truth SPEC jitter=1000 must be a sigma >= 0 and <= 1",
       [] { return lib([] { (void)dcp::sim::parse_truth_spec("jitter=1000"); }); }},
      {"truth-gpu-outside-job", "invalid_argument", "truth slow_gpus names GPU 40, but the job has 32 GPUs (0..31)",
       [] {
         return lib([] {
           (void)dcp::sim::make_truth(
               dcp::sim::parse_truth_spec("slow_gpus=40:0.5"),
               dcp::make_analytic_cost(dcp::models::cogvideox_5b(), dcp::devices::h200_analytic(), 32), 0);
         });
       }},
      {"truth-profile-scaled", "invalid_argument", "a profile truth takes only slow_gpus and jitter from --truth",
       [] {
         return lib([] { (void)dcp::sim::make_truth(dcp::profiled_cost{}, dcp::sim::parse_truth_spec("attention=1.3"), 0); });
       }},
      {"truth-cannot-time-step", "invalid_argument",
       "the truth cannot time step 0 of batch 0 (sp = 2, 42 blocks checkpointed) nor its re-run",
       [] {
         return lib([] {
           const auto truth = dcp::sim::make_truth(
               dcp::make_profiled_cost(valid_profile(), dcp::models::cogvideox_5b(), "h200", 8),
               dcp::sim::parse_truth_spec(""), 0);
           dcp::bucket_planner on_two;
           on_two.sp = 2;
           const auto p = on_two.plan(cost8(), std::vector{dcp::make_sequence(0, 1000)});
           (void)dcp::sim::execute(p, truth, 0);
         });
       }},
      {"speeds-wrong-count", "invalid_argument", "2 GPU speed factors for 32 GPUs; give one per GPU, or none (all 1)",
       [] {
         return lib([] {
           dcp::dcp_planner p;
           p.speeds = {1.0, 0.5};
           p.plan(dcp::make_analytic_cost(dcp::models::cogvideox_5b(), dcp::devices::h200_analytic(), 32),
                  std::vector{dcp::make_sequence(1, 1000)});
         });
       }},
      {"speed-not-positive", "invalid_argument", "speed factor 0.000000 of GPU 3 must be positive and finite",
       [] {
         return lib([] {
           dcp::dcp_planner p;
           p.speeds.assign(32, 1.0);
           p.speeds[3] = 0;
           p.plan(dcp::make_analytic_cost(dcp::models::cogvideox_5b(), dcp::devices::h200_analytic(), 32),
                  std::vector{dcp::make_sequence(1, 1000)});
         });
       }},
      {"plan-json-format", "parse_error",
       "dcp.plan 'plan.json': unknown format 'dcp.plan/v0'; expected \"dcp.plan/v3\" (or \"dcp.plan/v2\", "
       "\"dcp.plan/v1\")",
       [] { return read_plan_text(plan_text("0", "[0, 1]", "dcp.plan/v0")); }},
      {"plan-json-round-negative", "parse_error", "field 'batch 0 step 0 round' = -1 is not an integer in [0, ",
       [] { return read_plan_text(plan_text("-1", "[0, 1]")); }},
      {"plan-json-ranks-not-a-block", "parse_error",
       "batch 0 step 0: \"ranks\" must be consecutive GPUs (a block), got [1,0]",
       [] { return read_plan_text(plan_text("0", "[1, 0]")); }},

      // The dcp-sim command line (run as a process)
      {"cli-unknown-method", "exit 1", "dcp-sim: error: unknown method 'nope'",
       [] { return cli("--methods dcp,nope"); }},
      {"cli-unknown-workload", "exit 1", "dcp-sim: error: unknown workload 'nope'",
       [] { return cli("--workload nope"); }},
      {"cli-unknown-model", "exit 1", "dcp-sim: error: unknown model preset 'gpt5'",
       [] { return cli("--model gpt5"); }},
      {"cli-unknown-device", "exit 1", "dcp-sim: error: unknown device preset 'v100'",
       [] { return cli("--device v100"); }},
      {"cli-precision-without-rate", "exit 1", "dcp-sim: error: --precision fp8 needs a device with an FP8 GEMM rate",
       [] { return cli("--device h200-analytic --precision fp8"); }},
      {"cli-unknown-option", "exit 109", "The following argument was not expected: --frobnicate",
       [] { return cli("--frobnicate"); }},
      {"cli-option-not-a-number", "exit 104", "Could not convert: --gpus = twelve",
       [] { return cli("--gpus twelve"); }},
      {"cli-gpus-zero", "exit 1", "dcp-sim: error: gpus = 0 must be positive", [] { return cli("--gpus 0"); }},
      {"cli-gpus-not-whole-nodes", "exit 1", "dcp-sim: error: gpus = 12 is not a multiple of gpus_per_node = 8",
       [] { return cli("--gpus 12"); }},
      {"cli-batch-tokens-negative", "exit 1", "dcp-sim: error: --global-batch-tokens -5 must be positive",
       [] { return cli("--global-batch-tokens -5"); }},
      {"cli-bad-on-infeasible", "exit 1", "dcp-sim: error: --on-infeasible 'maybe' must be error or skip",
       [] { return cli("--on-infeasible maybe"); }},
      {"cli-malformed-lengths", "exit 1", "bad.txt:2: expected an integer token count but found 'x'",
       [] { return cli("--lengths '" + write_file("bad.txt", "100\nx\n").string() + "'"); }},
      {"cli-infeasible-sequence", "exit 1", "dcp-sim: error: sequence 0 of 100000226 tokens",
       [] { return cli("--gpus 8 --lengths '" + write_file("giant.txt", "100000000\n").string() + "'"); }},
      {"cli-truth-bad-spec", "exit 1", "dcp-sim: error: truth SPEC key 'speed' is unknown",
       [] { return cli("--truth speed=2"); }},
      {"cli-oracle-without-truth", "exit 1",
       "dcp-sim: error: method 'oracle' plans on a truth clock; give --truth SPEC or --truth-profile FILE",
       [] { return cli("--methods dcp,oracle"); }},
      {"cli-replay-other-groups", "exit 1", "not a block the group manager offers",
       [] { return cli("--gpus 8 --methods dcp --groups buddy --plan-in '" + any_groups_plan() + "'"); }},
      {"cli-replay-over-comm-budget", "exit 1", "communicators per rank beyond the world's, this run allows 1",
       [] { return cli("--gpus 8 --methods dcp --comm-budget 1 --plan-in '" + any_groups_plan() + "'"); }},
      {"cli-replay-other-precision", "exit 1", "made with fp8 GEMMs, this run prices bf16; pass --precision fp8",
       [] {
         const std::string fp8 = (scratch() / "fp8-plan.json").string();
         const outcome made = cli("--gpus 8 --methods dcp --precision fp8 --plan-out '" + fp8 + "'");
         if (made.kind != "exit 0") return made;
         return cli("--gpus 8 --methods dcp --plan-in '" + fp8 + "'");
       }},
      {"replay-skips-a-feasible-sequence", "mismatch", "sequence 0 is listed as skipped but fits this run",
       [] {
         return lib([] {
           const auto cost = cost8();
           const std::vector<std::vector<dcp::sequence>> batch{{dcp::make_sequence(0, 1000), dcp::make_sequence(1, 2000)}};
           dcp::plan p = dcp::dcp_planner{}.plan(cost, std::vector{batch[0][1]});
           p.skipped.push_back({0, cost.tokens_of(batch[0][0]), "moved here"});
           dcp::sim::plan_document doc;
           doc.method = "dcp", doc.gpus = 8, doc.gpus_per_node = 8, doc.layout = cost.layout();
           doc.memory_capacity_bytes = cost.capacity(), doc.model = cost.model.name, doc.device = cost.device.name;
           doc.plans = {p};
           dcp::sim::check_replay(doc, "f.json", cost, batch, {cost.model.name, cost.device.name, {}, {}});
         });
       }},
      {"replay-lockstep-counts-disagree", "mismatch",
       "micro-steps: ZeRO-3's gathers need every unit the same number of times; add padding passes",
       [] {
         return lib([] {
           const auto cost = dcp::make_analytic_cost(dcp::models::llama3_8b(), dcp::devices::h200_analytic(),
                                                     {.gpus = 8, .gpus_per_node = 8, .sharding = dcp::sharding_kind::zero3});
           std::vector<std::vector<dcp::sequence>> batch(1);
           for (int i = 0; i < 11; ++i) batch[0].push_back(dcp::make_sequence(i, 2048 + 512 * i));
           dcp::packed_planner packed;  // 11 micro-batches of sp 1 on 8 GPUs: some GPUs pad
           packed.sp = 1;
           dcp::plan p = packed.plan(cost, batch[0]);
           const auto pad = std::find_if(p.steps.begin(), p.steps.end(), [](const dcp::plan_step& s) { return s.sequences.empty(); });
           if (pad != p.steps.end()) p.steps.erase(pad);  // a unit's padding pass dropped: its domain disagrees
           dcp::sim::plan_document doc;
           doc.method = "dcp", doc.gpus = 8, doc.gpus_per_node = 8, doc.layout = cost.layout();
           doc.memory_capacity_bytes = cost.capacity(), doc.model = cost.model.name, doc.device = cost.device.name;
           doc.plans = {p};
           dcp::sim::check_replay(doc, "f.json", cost, batch, {cost.model.name, cost.device.name, {}, {}});
         });
       }},
      {"cli-cluster-gpus-disagree", "exit 1",
       "dcp-sim: error: --gpus 16 but --cluster 'h100x2,h200x2' has 4 nodes of 8 GPUs (32)",
       [] { return cli("--cluster h100x2,h200x2 --gpus 16"); }},
      {"cli-cluster-too-many-nodes", "exit 1",
       "dcp-sim: error: --cluster 'h200x999999' has 999999 nodes of 8 GPUs, over the 131072 GPUs dcp-sim plans",
       [] { return cli("--cluster h200x999999"); }},
      {"cli-gpus-over-limit", "exit 1", "dcp-sim: error: --gpus 2147483000 is over the 131072 GPUs dcp-sim plans",
       [] { return cli("--gpus 2147483000"); }},
      {"cli-gpus-per-node-out-of-range", "exit 1", "dcp-sim: error: --gpus-per-node 1073741824 must be in [1, 1024]",
       [] { return cli("--cluster h200x2 --gpus-per-node 1073741824"); }},
      {"cli-cluster-file-missing", "exit 1", "dcp-sim: error: cannot open cluster file 'typo.json'",
       [] { return cli("--cluster typo.json"); }},
      {"cli-pp-not-whole-stages", "exit 1",
       "dcp-sim: error: pp = 3 must be >= 1 and divide gpus = 32 into stages of a multiple of tp = 1 GPUs",
       [] { return cli("--model stdit3-xl --pp 3"); }},
      {"cli-ep-not-dividing-stage", "exit 1",
       "ep = 8 must be >= 1 and divide the data-parallel domain of a stage, gpus / (tp x pp) = 64 / (4 x 4) = 4 units",
       [] { return cli("--model llama3-70b --gpus 64 --tp 4 --pp 4 --ep 8"); }},
      {"cli-plan-in-directory", "exit 1", "cannot read plan JSON '/': it is a directory; give a dcp.plan file",
       [] { return cli("--plan-in /"); }},
      // The trainers' command lines (CLI11: whole-string numbers in a range; exit 2 on a bad value).
      {"train-not-a-number", "exit 2", "--steps: Value abc not in range 1 to 100000000",
       [] { return train_cli("--steps abc"); }},
      {"train-number-overflow", "exit 2", "--steps: Value 99999999999999999999 not in range 1 to 100000000",
       [] { return train_cli("--steps 99999999999999999999"); }},
      {"train-partial-number", "exit 2", "--local: Value 4e2 not in range 0 to 1024",
       [] { return train_cli("--local 4e2"); }},
      {"train-lr-not-finite", "exit 2", "--lr: value nan is not a finite number in [1e-12, 100]",
       [] { return train_cli("--lr nan"); }},
      {"train-fit-tokens-zero", "exit 2", "--fit-tokens: value 0 is not a finite number in [1, 1e+09]",
       [] { return train_cli("--fit-tokens 0"); }},
      {"train-unknown-dtype", "exit 2", "--dtype: half not in {float,double}", [] { return train_cli("--dtype half"); }},
      {"train-unknown-planner", "exit 2", "--planner: foo not in {dcp,bucket,packed}",
       [] { return train_cli("--planner foo"); }},
      {"train-unknown-option", "exit 2", "The following arguments were not expected: 0 --threads",
       [] { return train_cli("--threads 0"); }},
      {"train-profile-missing", "exit 1", "dcp-train-cpu: cannot open profile /nonexistent/p.json",
       [] { return train_cli("--profile-in /nonexistent/p.json"); }},
      {"train-profile-directory", "exit 1",
       "dcp-train-cpu: cannot open profile / (a readable profile JSON file, from --profile-out)",
       [] { return train_cli("--profile-in /"); }},
      {"train-profile-out-lost", "exit 1", "dcp-train-cpu: cannot write profile /dev/full",
       [] {
         return train_cli("--profile --profile-budget 1 --blocks 1 --max-len 64 --steps 1 --quiet-plan "
                          "--profile-out /dev/full");
       }},
      {"libtorch-not-a-number", "exit 2", "--steps: Value abc not in range 1 to 100000000",
       [] { return libtorch_cli("--steps abc"); }},
      {"libtorch-corpus-unwritable", "exit 1", "dcp-train-libtorch: corpus: cannot write /nonexistent/d/c.txt",
       [] { return libtorch_cli("--corpus /nonexistent/d/c.txt"); }},
      {"libtorch-losses-lost", "exit 1", "dcp-train-libtorch: --losses /dev/full: writing the file failed",
       [] {
         return libtorch_cli("--steps 1 --corpus '" + (scratch() / "corpus.txt").string() + "' --losses /dev/full");
       }},
  };
  return table;
}

class Catalogue : public ::testing::TestWithParam<std::size_t> {};

TEST_P(Catalogue, RejectsWithItsMessage) {
  const entry& e = catalogue()[GetParam()];
  const outcome got = e.run();
  if (got.kind == "skip") GTEST_SKIP() << got.messages.front();
  EXPECT_EQ(got.kind, e.kind) << e.id << ": " << (got.messages.empty() ? "" : got.messages.front());
  ASSERT_FALSE(got.messages.empty()) << e.id << ": the input was accepted";
  for (const auto& m : got.messages) EXPECT_NE(m.find(e.message), std::string::npos) << e.id << ": " << m;
}

std::string param_name(const ::testing::TestParamInfo<std::size_t>& info) {
  std::string n = catalogue()[info.param].id;
  for (auto& c : n)
    if (c == '-') c = '_';
  return n;
}

INSTANTIATE_TEST_SUITE_P(Entry, Catalogue, ::testing::Range(std::size_t{0}, catalogue().size()), param_name);

// The rows of docs/errors.md's catalogue: `| `id` | input | `kind` | `message` | fix |`.
struct doc_row {
  std::string kind, message;
};

std::string unescape_md(const std::string& s) {
  // A literal '|' inside a table cell is written '\|'.
  std::string out;
  for (std::size_t i = 0; i < s.size(); ++i)
    if (!(s[i] == '\\' && i + 1 < s.size() && s[i + 1] == '|')) out += s[i];
  return out;
}

std::map<std::string, doc_row> doc_rows() {
  std::ifstream in(DCP_ERRORS_MD);
  EXPECT_TRUE(in.is_open()) << "cannot open " << DCP_ERRORS_MD;
  static const std::regex row(R"(^\|\s*`([a-z0-9-]+)`\s*\|.*\|\s*`([^`]+)`\s*\|\s*`([^`]+)`\s*\|[^|]*\|\s*$)");
  std::map<std::string, doc_row> out;
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("| `", 0) != 0) continue;
    std::smatch m;
    if (!std::regex_match(line, m, row)) {
      ADD_FAILURE() << "docs/errors.md: a catalogue row that does not parse: " << line;
      continue;
    }
    const bool fresh = out.emplace(m[1].str(), doc_row{m[2].str(), unescape_md(m[3].str())}).second;
    EXPECT_TRUE(fresh) << "docs/errors.md lists " << m[1] << " twice";
  }
  return out;
}

TEST(CatalogueDoc, AgreesWithTheTestEntryForEntry) {
  const auto doc = doc_rows();
  std::set<std::string> ids;
  for (const auto& e : catalogue()) {
    EXPECT_TRUE(ids.insert(e.id).second) << "the test lists " << e.id << " twice";
    const auto it = doc.find(e.id);
    if (it == doc.end()) {
      ADD_FAILURE() << "docs/errors.md has no row for " << e.id;
      continue;
    }
    EXPECT_EQ(it->second.kind, e.kind) << e.id;
    EXPECT_EQ(it->second.message, e.message) << e.id;
  }
  for (const auto& [id, row] : doc) EXPECT_TRUE(ids.count(id)) << "docs/errors.md lists " << id << ", the test does not";
  EXPECT_EQ(doc.size(), catalogue().size());
}

}  // namespace
