// Frozen forward networks through the cost slot (cost_sum) in the simulator, plan files replayed
// as a method (sim/replay.hpp), and the rounds of plan files written before rounds existed
// (infer_rounds).

#include <dcp_test/support.hpp>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <iostream>
#include <optional>
#include <span>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include <dcp/cost/analytic.hpp>
#include <dcp/cost/cost_sum.hpp>
#include <dcp/error.hpp>
#include <dcp/group/contiguous_groups.hpp>
#include <dcp/plan/bucket_planner.hpp>
#include <dcp/plan/check_plan.hpp>
#include <dcp/plan/dcp_planner.hpp>
#include <dcp/plan/dynamic_cp_planner.hpp>
#include <dcp/plan/infer_rounds.hpp>
#include <dcp/plan/packed_planner.hpp>
#include <dcp/sim/execute.hpp>
#include <dcp/sim/methods.hpp>
#include <dcp/sim/plan_json.hpp>
#include <dcp/sim/replay.hpp>
#include <dcp/sim/truth.hpp>
#include <dcp/workload/embedded.hpp>
#include <dcp/workload/tuning.hpp>

namespace {

using dcp::sequence;
using json = nlohmann::json;
using batch_list = std::vector<std::vector<sequence>>;

// 600 sequences of opensora-zipf50 (video shapes) on 8 GPUs, cut at 131072 tokens per batch.
struct video_run {
  static constexpr std::uint64_t seed = 7;
  dcp::analytic_cost cost = dcp::make_analytic_cost(dcp::models::stdit3_xl(), dcp::devices::h200_analytic(), 8);
  dcp::dataset data;
  video_run() {
    std::cout << "[     SEED ] " << seed << '\n';
    const auto all = dcp::workloads::make("opensora-zipf50", seed);
    data.assign(all.begin(), all.begin() + 600);
  }
  template <class C>
  batch_list batches(const C& c) const {
    return dcp::epoch_batches(c, data, 131072, seed);
  }
};

std::vector<dcp::forward_network> both(const dcp::device_spec& d) {
  return {dcp::forward_networks::t5_xxl_encoder(d), dcp::forward_networks::vae3d_encoder(d)};
}

// The frozen networks' time of a step, transcribed from DESIGN 9.4 independently of cost_sum.
double frozen_seconds(const std::vector<dcp::forward_network>& nets, const dcp::plan_step& s) {
  double b = 0, shape = 0;
  for (const auto& q : s.sequences) b += 1, shape += double(q.frames) * double(q.spatial);
  double t = 0;
  for (const auto& f : nets)
    t += (b * f.flops_per_sequence + shape * f.flops_per_token) / (s.sp() * f.flop_rate) + f.layers * f.tau;
  return t;
}

TEST(FrozenNetworks, EveryMethodPlansValidStepsPricedAsTheSumOfTheParts) {
  const video_run run;
  const auto nets = both(run.cost.device);
  const auto sum = dcp::make_cost_sum(run.cost, nets);
  const auto batches = run.batches(sum);
  ASSERT_EQ(batches, run.batches(run.cost)) << "the frozen networks add no tokens: the same batches";
  dcp::sim::options opt;
  opt.keep_plans = true;
  for (auto name : dcp::sim::default_methods) {
    const auto r = dcp::sim::run_method(name, sum, run.data, batches, {}, opt);
    ASSERT_EQ(r.plans.size(), batches.size()) << name;
    std::size_t steps = 0;
    for (std::size_t b = 0; b < batches.size(); ++b) {
      const auto& p = r.plans[b];
      const auto v = dcp::plan_violations(p, batches[b], sum);
      EXPECT_TRUE(v.empty()) << name << " batch " << b << ": " << v.front();
      for (const auto& s : p.steps) {
        dcp::analytic_load l{};
        for (const auto& q : s.sequences) l = l + run.cost.load_of({q.id, q.frames, q.spatial});
        const double parts = run.cost.time(l, s.sp(), s.checkpointed_blocks) + frozen_seconds(nets, s);
        EXPECT_NEAR(s.time_s, parts, 1e-12 * parts) << name << " batch " << b;
        EXPECT_GT(frozen_seconds(nets, s), 0.0);
        ++steps;
      }
    }
    EXPECT_GE(steps, batches.size()) << name;
    EXPECT_EQ(r.metrics.sequences, static_cast<std::int64_t>(run.data.size())) << name;
  }
}

TEST(FrozenNetworks, TheTruthOfTheSumWithUnitScalesReproducesThePlans) {
  const video_run run;
  const auto sum = dcp::make_cost_sum(run.cost, both(run.cost.device));
  const auto batches = run.batches(sum);
  const auto scaled = dcp::sim::make_truth(dcp::sim::parse_truth_spec(""), run.cost, 1);
  const dcp::sim::truth<dcp::cost_sum<dcp::scaled_analytic_cost>> truth{
      dcp::make_cost_sum(scaled.model, both(run.cost.device)), {}, 0, 1};
  dcp::sim::options opt;
  opt.keep_plans = true;
  const auto r = dcp::sim::run_method("dcp", sum, run.data, batches, {}, truth, opt);
  for (std::size_t b = 0; b < batches.size(); ++b) {
    EXPECT_NEAR(r.executed[b].makespan_s, r.plans[b].makespan_s, 1e-12 * r.plans[b].makespan_s);
  }
}

std::string to_text(const dcp::analytic_cost& cost, const std::vector<dcp::plan>& plans) {
  std::ostringstream os;
  dcp::sim::write_plan_json(os, cost, std::span<const dcp::plan>(plans));
  return os.str();
}

dcp::sim::plan_document from_text(const std::string& text, const char* source = "test") {
  std::istringstream in(text);
  return dcp::sim::read_plan_json(in, source);
}

TEST(Replay, APlanFileReproducesItsMethodOnTheModelAndOnATruth) {
  const video_run run;
  const auto batches = run.batches(run.cost);
  const std::span<const std::vector<sequence>> all(batches);
  const dcp::sim::replay_job job{run.cost.model.name, run.cost.device.name, {}, {}};
  const auto truth = dcp::sim::make_truth(dcp::sim::parse_truth_spec("attention=1.3,slow_gpus=3:0.8,jitter=0.05"),
                                          run.cost, 11);
  dcp::sim::options opt;
  opt.keep_plans = true;
  for (auto name : {"dcp", "bucket", "dcp-no-inter"}) {
    const auto made = dcp::sim::run_method(name, run.cost, run.data, all, {}, opt);
    const auto doc = from_text(to_text(run.cost, made.plans), "plan.json");
    EXPECT_TRUE(doc.warnings.empty()) << doc.warnings.front();
    const auto replayed = dcp::sim::replay(doc, "dir/plan.json", run.cost, all, job, opt);
    EXPECT_EQ(replayed.metrics.method, std::string(name) + "<plan.json>");
    EXPECT_EQ(replayed.plans, made.plans) << name;
    EXPECT_EQ(replayed.metrics.tokens, made.metrics.tokens);
    EXPECT_DOUBLE_EQ(replayed.metrics.makespan_s, made.metrics.makespan_s) << name;
    EXPECT_DOUBLE_EQ(replayed.metrics.efficiency, made.metrics.efficiency) << name;
    // On a truth the dcp row calibrates; the plans of the model alone are dcp-open-loop's.
    const std::string_view on_truth_name = std::string_view(name) == "dcp" ? dcp::sim::open_loop_method : name;
    const auto on_truth = dcp::sim::run_method(on_truth_name, run.cost, run.data, all, {}, truth, opt);
    const auto replayed_on_truth = dcp::sim::replay(doc, "plan.json", run.cost, all, job, truth, opt);
    EXPECT_DOUBLE_EQ(replayed_on_truth.metrics.makespan_s, on_truth.metrics.makespan_s) << name;
    EXPECT_EQ(replayed_on_truth.executed, on_truth.executed) << name;
  }
}

// A plan file's bounds are never read: a forged bound (one that shows efficiency 1) is replaced
// by the bound computed again on the run's clock, so the replay reports what the run would.
TEST(Replay, AForgedBoundIsComputedAgain) {
  const video_run run;
  const auto batches = run.batches(run.cost);
  const std::span<const std::vector<sequence>> all(batches);
  const dcp::sim::replay_job job{run.cost.model.name, run.cost.device.name, {}, {}};
  dcp::sim::options opt;
  opt.keep_plans = true;
  const auto made = dcp::sim::run_method("bucket", run.cost, run.data, all, {}, opt);
  ASSERT_LT(made.metrics.efficiency, 0.999) << "a plan at its bound cannot show a forged one";
  auto forged = made.plans;
  for (auto& p : forged) p.lower_bound_s = p.joint_lower_bound_s = p.makespan_s;
  const auto doc = from_text(to_text(run.cost, forged), "forged.json");
  const auto replayed = dcp::sim::replay(doc, "forged.json", run.cost, all, job, opt);
  EXPECT_DOUBLE_EQ(replayed.metrics.efficiency, made.metrics.efficiency);
  ASSERT_EQ(replayed.plans.size(), made.plans.size());
  for (std::size_t b = 0; b < made.plans.size(); ++b)
    EXPECT_DOUBLE_EQ(replayed.plans[b].bound_s(), made.plans[b].bound_s()) << "batch " << b;
}

// A pipelined plan file keeps what its schedule needs: the stages, each unit's micro-batch order
// and the warmup depth, so its replay times every batch as the planner did.
TEST(Replay, APipelinedPlanFileKeepsItsWarmupDepth) {
  constexpr std::uint64_t seed = 5;
  std::cout << "[     SEED ] " << seed << '\n';
  const auto cost = dcp::make_analytic_cost(dcp::models::llama3_8b(), dcp::devices::h200(),
                                            dcp::parallel_layout{.gpus = 32, .gpus_per_node = 8, .tp = 2, .pp = 4});
  auto data = dcp::workloads::make("text-longtail", seed);
  data.resize(1500);
  const auto batches = dcp::epoch_batches(cost, data, std::int64_t{1} << 20, seed);
  const std::span<const std::vector<sequence>> all(batches);
  dcp::sim::options opt;
  opt.keep_plans = true;
  const auto made = dcp::sim::run_method("dcp", cost, data, all, {}, opt);
  const auto deeper =
      std::count_if(made.plans.begin(), made.plans.end(), [](const dcp::plan& p) { return p.warmup_depth > 1; });
  ASSERT_GT(deeper, 0) << "no batch ran a deeper warmup than 1F1B, so the file's depth is not tested";
  const std::string text = to_text(cost, made.plans);
  EXPECT_NE(text.find("\"warmup_depth\""), std::string::npos);
  const auto doc = from_text(text, "piped.json");
  EXPECT_EQ(doc.layout.pp, 4);
  const dcp::sim::replay_job job{cost.model.name, cost.device.name, {}, {}};
  const auto replayed = dcp::sim::replay(doc, "piped.json", cost, all, job, opt);
  EXPECT_EQ(replayed.plans, made.plans);
  EXPECT_DOUBLE_EQ(replayed.metrics.makespan_s, made.metrics.makespan_s);
  for (std::size_t b = 0; b < made.plans.size(); ++b) EXPECT_EQ(replayed.plans[b].hash(), made.plans[b].hash());
  // The depth is part of what ranks agree on: the same plan at another depth hashes differently.
  dcp::plan other = made.plans.front();
  other.warmup_depth = other.warmup_depth == 1 ? 2 : 1;
  EXPECT_NE(other.hash(), made.plans.front().hash());
}

TEST(Replay, APlanThatDoesNotFitTheRunIsAClearError) {
  const video_run run;
  const auto batches = run.batches(run.cost);
  const std::span<const std::vector<sequence>> all(batches);
  const dcp::sim::replay_job job{run.cost.model.name, run.cost.device.name, {}, {}};
  dcp::sim::options opt;
  opt.keep_plans = true;
  const auto made = dcp::sim::run_method("dcp", run.cost, run.data, all, {}, opt);
  const std::string text = to_text(run.cost, made.plans);
  auto edited = [&](auto&& edit) {
    json j = json::parse(text);
    edit(j);
    return from_text(j.dump());
  };
  const auto bigger = dcp::make_analytic_cost(dcp::models::stdit3_xl(), dcp::devices::h200_analytic(), 16);
  EXPECT_DCP_ERROR(dcp::sim::check_replay(from_text(text), "f.json", bigger, all, job), dcp::errc::mismatch,
                   "plan file 'f.json': made for 8 GPUs, this run has 16", "--gpus 8");
  EXPECT_DCP_ERROR(dcp::sim::check_replay(from_text(text), "f.json", run.cost, all, {"llama3-8b", "h200", {}, {}}),
                   dcp::errc::mismatch, "made for model 'stdit3-xl', this run plans 'llama3-8b'");
  auto zero3 = run.cost;
  zero3.parallel.sharding = dcp::sharding_kind::zero3;
  EXPECT_DCP_ERROR(dcp::sim::check_replay(from_text(text), "f.json", zero3, all, job), dcp::errc::mismatch,
                   "made for parallel_layout{N=8, G=8}, this run has parallel_layout{N=8, G=8, zero3}", "--sharding");
  EXPECT_DCP_ERROR(dcp::sim::check_replay(from_text(text), "f.json", run.cost, all.first(all.size() - 1), job),
                   dcp::errc::mismatch, "batches, this run has " + std::to_string(all.size() - 1));
  // A step slower than the model says, and a sequence dropped from a step.
  const auto slow = edited([](json& j) { j["batches"][0]["steps"][0]["time_s"] = 99.0; });
  EXPECT_DCP_ERROR(dcp::sim::check_replay(slow, "f.json", run.cost, all, job), dcp::errc::mismatch,
                   "batch 0 is not a valid plan of this run's batch 0", "time 99");
  const auto lost = edited([](json& j) { j["batches"][1]["steps"][0]["sequences"].erase(0); });
  EXPECT_DCP_ERROR(dcp::sim::check_replay(lost, "f.json", run.cost, all, job), dcp::errc::mismatch, "batch 1", "is lost");
  // The frozen networks change every step's time: a plan of the trained model alone does not fit.
  const auto sum = dcp::make_cost_sum(run.cost, both(run.cost.device));
  EXPECT_DCP_ERROR(dcp::sim::check_replay(from_text(text), "f.json", sum, all, job), dcp::errc::mismatch,
                   "cost model says", "--frozen");
}

// What a file could forge beyond its times is derived again from the run: its steps must sit on
// blocks the run's group manager offers (--groups), its plans keep within the run's communicator
// budget (--comm-budget), a skipped sequence must fit nowhere in the run, and a kernel-clock file
// names the GEMM precision it was priced in.
TEST(Replay, APlanIsHeldToTheRunsGroupsBudgetSkipsAndPrecision) {
  // cogvideox-5b's 48 heads on 8 GPUs: groups of 3 and 6 are legal, and buddy blocks lack them.
  struct {
    dcp::analytic_cost cost = dcp::make_analytic_cost(dcp::models::cogvideox_5b(), dcp::devices::h200_analytic(), 8);
    dcp::dataset data;
  } run;
  run.data = dcp::workloads::make("cogvideox-zipf10", 0);  // dcp-sim --gpus 8's run: it uses 3 GPUs
  const auto batches = dcp::epoch_batches(run.cost, run.data, 8 * 262144, 0);
  const std::span<const std::vector<sequence>> all(batches);
  dcp::sim::options opt;
  opt.keep_plans = true;
  const dcp::contiguous_groups any{run.cost.gpus(), run.cost.gpus_per_node(), dcp::group_sizes::any};
  const auto made =
      dcp::sim::run_method("dcp", dcp::planning_context{run.cost, dcp::selective_recompute{}, any}, run.data, all, {}, opt);
  const auto doc = from_text(to_text(run.cost, made.plans));
  const dcp::sim::replay_job job{run.cost.model.name, run.cost.device.name, {}, {}};
  EXPECT_NO_THROW(dcp::sim::check_replay(doc, "f.json", run.cost, any, all, job));
  bool odd = false;  // a size buddy blocks do not offer
  for (const auto& p : made.plans)
    for (const auto& st : p.steps) odd = odd || (st.sp() & (st.sp() - 1)) != 0;
  ASSERT_TRUE(odd) << "dcp on every size should use one that is not a power of two here";
  EXPECT_DCP_ERROR(dcp::sim::check_replay(doc, "f.json", run.cost, all, job), dcp::errc::mismatch,
                   "not a block the group manager offers", "--groups");
  // The budget: the plans' own count passes, one less does not.
  const int used = made.metrics.communicators_per_rank;
  ASSERT_GE(used, 2);
  auto budget = job;
  budget.comm_budget = used;
  EXPECT_NO_THROW(dcp::sim::check_replay(doc, "f.json", run.cost, any, all, budget));
  budget.comm_budget = used - 1;
  EXPECT_DCP_ERROR(dcp::sim::check_replay(doc, "f.json", run.cost, any, all, budget), dcp::errc::mismatch,
                   "its plans need " + std::to_string(used) + " communicators per rank beyond the world's, this run "
                   "allows " + std::to_string(used - 1));
  // A sequence that fits, listed as skipped: the plan of the batch without it holds every other
  // sequence exactly once, so only the re-check of the list can see it.
  std::vector<sequence> rest(batches[0].begin() + 1, batches[0].end());
  dcp::plan without = dcp::dcp_planner{}.plan(dcp::planning_context{run.cost, dcp::selective_recompute{}, any},
                                              std::span<const sequence>(rest));
  without.skipped.push_back({batches[0][0].id, run.cost.tokens_of(batches[0][0]), "moved here"});
  auto one = doc;
  one.plans = {without};
  const std::span<const std::vector<sequence>> first = all.first(1);
  EXPECT_DCP_ERROR(dcp::sim::check_replay(one, "f.json", run.cost, any, first, job), dcp::errc::mismatch,
                   "sequence " + std::to_string(batches[0][0].id) + " is listed as skipped but fits this run");
  // A file priced in fp8 GEMMs replayed in a bf16 run names the precision.
  auto fp8 = doc;
  fp8.precision = "fp8";
  auto bf16 = job;
  bf16.precision = "bf16";
  EXPECT_DCP_ERROR(dcp::sim::check_replay(fp8, "f.json", run.cost, any, all, bf16), dcp::errc::mismatch,
                   "made with fp8 GEMMs, this run prices bf16", "--precision fp8");
}

TEST(Replay, APlanFileRecordsItsFrozenNetworksAndTheRunUsesThem) {
  const video_run run;
  const auto nets = both(run.cost.device);
  const auto sum = dcp::make_cost_sum(run.cost, nets);
  const auto batches = run.batches(sum);
  const std::span<const std::vector<sequence>> all(batches);
  const dcp::sim::replay_job job{run.cost.model.name, run.cost.device.name, {}, {}};
  dcp::sim::options opt;
  opt.keep_plans = true;
  const auto made = dcp::sim::run_method("packed", sum, run.data, all, {}, opt);
  std::ostringstream os;
  dcp::sim::write_plan_json(os, sum, std::span<const dcp::plan>(made.plans));
  const std::string text = os.str();
  // The trained model's name and device, then every constant of every network, bit for bit.
  const json j = json::parse(text);
  EXPECT_EQ(j["model"]["name"], "stdit3-xl");
  EXPECT_EQ(j["device"]["name"], "h200-analytic");
  ASSERT_TRUE(j.contains("frozen"));
  EXPECT_EQ(j["frozen"].size(), 2u);
  const auto doc = from_text(text, "frozen.json");
  ASSERT_TRUE(doc.frozen.has_value());
  EXPECT_EQ(*doc.frozen, nets);
  EXPECT_FALSE(from_text(to_text(run.cost, made.plans)).frozen.has_value()) << "a plain model records no networks";

  // Without --frozen the run takes the file's networks, and the file replays on their sum.
  const std::vector<dcp::sim::plan_document> docs{doc};
  const std::vector<std::string> sources{"frozen.json"};
  const auto frozen = dcp::sim::replay_frozen(docs, sources, std::nullopt);
  EXPECT_EQ(frozen, nets);
  const auto replayed = dcp::sim::replay(doc, "frozen.json", dcp::make_cost_sum(run.cost, frozen), all, job, opt);
  EXPECT_EQ(replayed.plans, made.plans);
  EXPECT_DOUBLE_EQ(replayed.metrics.makespan_s, made.metrics.makespan_s);
  // The same networks given again, in another order, agree with the file.
  const std::vector<dcp::forward_network> reversed{nets[1], nets[0]};
  EXPECT_EQ(dcp::sim::replay_frozen(docs, sources, reversed), reversed);
  // A file without the key leaves the choice to the run (and to check_replay).
  const std::vector<dcp::sim::plan_document> plain{from_text(to_text(run.cost, made.plans))};
  EXPECT_TRUE(dcp::sim::replay_frozen(plain, sources, std::nullopt).empty());
  EXPECT_EQ(dcp::sim::replay_frozen(plain, sources, nets), nets);
}

TEST(Replay, FrozenNetworksThatContradictTheFileAreAClearError) {
  const video_run run;
  const auto nets = both(run.cost.device);
  const auto sum = dcp::make_cost_sum(run.cost, nets);
  const auto batches = run.batches(sum);
  dcp::sim::options opt;
  opt.keep_plans = true;
  const auto made = dcp::sim::run_method("bucket", sum, run.data, batches, {}, opt);
  std::ostringstream os;
  dcp::sim::write_plan_json(os, sum, std::span<const dcp::plan>(made.plans));
  const std::vector<dcp::sim::plan_document> docs{from_text(os.str())};
  const std::vector<std::string> sources{"f.json"};
  const std::vector<dcp::forward_network> t5{nets[0]};
  EXPECT_DCP_ERROR(dcp::sim::replay_frozen(docs, sources, t5), dcp::errc::mismatch,
                   "plan file 'f.json' records the frozen networks t5-xxl-encoder, vae3d-encoder, but --frozen gives "
                   "t5-xxl-encoder",
                   "drop --frozen");
  EXPECT_DCP_ERROR(dcp::sim::replay_frozen(docs, sources, std::vector<dcp::forward_network>{}), dcp::errc::mismatch,
                   "--frozen gives none");
  // The same names on a slower device: other FLOP rates.
  auto slower = run.cost.device;
  slower.eff_max *= 0.8;
  EXPECT_DCP_ERROR(dcp::sim::replay_frozen(docs, sources, both(slower)), dcp::errc::mismatch, "with other constants");
  // Two files written with different networks.
  std::ostringstream os2;
  dcp::sim::write_plan_json(os2, dcp::make_cost_sum(run.cost, t5), std::span<const dcp::plan>(made.plans));
  const std::vector<dcp::sim::plan_document> two{docs[0], from_text(os2.str())};
  const std::vector<std::string> names{"a.json", "b.json"};
  EXPECT_DCP_ERROR(dcp::sim::replay_frozen(two, names, std::nullopt), dcp::errc::mismatch,
                   "plan file 'b.json' records the frozen networks t5-xxl-encoder, but 'a.json' records");
  // A malformed or out-of-domain network is a parse error naming it.
  json j = json::parse(os.str());
  j["frozen"][1]["flop_rate"] = 0.0;
  EXPECT_DCP_ERROR(from_text(j.dump()), dcp::errc::parse_error, "frozen[1]", "flop_rate = 0");
  j["frozen"][1].erase("flop_rate");
  EXPECT_DCP_ERROR(from_text(j.dump()), dcp::errc::parse_error, "frozen[1] has no \"flop_rate\"");
  j["frozen"] = "vae3d";
  EXPECT_DCP_ERROR(from_text(j.dump()), dcp::errc::parse_error, "\"frozen\" is not an array");
}

// A file written before rounds existed: the same document without any "round".
dcp::sim::plan_document without_rounds(const std::string& text) {
  json j = json::parse(text);
  for (auto& b : j["batches"])
    for (auto& s : b["steps"]) s.erase("round");
  return from_text(j.dump());
}

TEST(OldPlanFiles, LockstepRoundsAreInferredExactlyAndRunAsWritten) {
  const video_run run;
  const auto batches = run.batches(run.cost);
  const std::span<const std::vector<sequence>> all(batches);
  const auto truth = dcp::sim::make_truth(dcp::sim::parse_truth_spec("jitter=0.1,slow_gpus=5:0.7"), run.cost, 13);
  dcp::sim::options opt;
  opt.keep_plans = true;
  // bucket and packed at sp = 2 (four groups in lockstep), dcp-no-inter's rounds, and the
  // single-round dcp and dynamic_cp.
  auto check = [&](const auto& planner, const std::string& name) {
    const auto made = dcp::sim::simulate(run.cost, planner, all, opt);
    ASSERT_EQ(made.plans.front().method, name);
    const auto doc = without_rounds(to_text(run.cost, made.plans));
    ASSERT_EQ(doc.warnings.size(), 1u) << name;
    EXPECT_NE(doc.warnings[0].find("barriers inferred from the start times"), std::string::npos) << doc.warnings[0];
    int rounds = 0, differs = 0;
    for (std::size_t b = 0; b < batches.size(); ++b) {
      const auto& written = made.plans[b];
      const auto& read = doc.plans[b];
      ASSERT_EQ(read.steps.size(), written.steps.size());
      for (std::size_t i = 0; i < read.steps.size(); ++i) {
        EXPECT_EQ(read.steps[i].round, written.steps[i].round) << name << " batch " << b << " step " << i;
        rounds = std::max(rounds, written.steps[i].round);
      }
      // On a jittered truth with a slow GPU the inferred barriers wait exactly where the method does.
      const double as_written = dcp::sim::execute(written, truth, b).executed.makespan_s;
      const double as_read = dcp::sim::execute(read, truth, b).executed.makespan_s;
      EXPECT_DOUBLE_EQ(as_read, as_written) << name << " batch " << b;
      auto one_round = read;  // what reading as one round used to give
      for (auto& s : one_round.steps) s.round = 0;
      differs += dcp::sim::execute(one_round, truth, b).executed.makespan_s != as_written;
    }
    if (dcp::lockstep_method(name)) {
      EXPECT_GT(rounds, 0) << name << ": a lockstep run without barriers tests nothing";
      // dcp-no-inter's rounds here are mostly whole-machine gangs, which wait anyway.
      if (name != "dcp-no-inter") {
        EXPECT_GT(differs, 0) << name << ": one round would have run the same";
      }
    } else {
      EXPECT_EQ(rounds, 0) << name;
    }
  };
  dcp::bucket_planner bucket;
  bucket.sp = 2;
  check(bucket, "bucket");
  dcp::packed_planner packed;
  packed.sp = 2;
  packed.fill = 0.01;  // small micro-batches: several rounds per batch
  check(packed, "packed");
  dcp::dcp_planner no_inter;
  no_inter.inter = false;
  check(no_inter, "dcp-no-inter");
  check(dcp::dcp_planner{}, "dcp");
  check(dcp::tune(dcp::dynamic_cp_planner{}, run.cost, std::span<const sequence>(run.data)), "dynamic_cp");
}

TEST(OldPlanFiles, WithoutAMethodNameOnlyAWaitMakesABarrier) {
  // Two GPUs. Step 2 starts at 3 though GPU 1 was free at 1: only a barrier explains it, and
  // nothing spans t = 3. Step 3 starts at 5 when its GPU is free: no barrier.
  dcp::plan p;
  p.gpus = 2;
  p.steps.push_back({{0, 1}, 0, 0.0, 3.0, 1.0, {}});
  p.steps.push_back({{1, 1}, 0, 0.0, 1.0, 1.0, {}});
  p.steps.push_back({{1, 1}, 0, 3.0, 2.0, 1.0, {}});
  p.steps.push_back({{1, 1}, 0, 5.0, 1.0, 1.0, {}});
  p.steps.push_back({{0, 1}, 0, 3.0, 1.0, 1.0, {}});
  EXPECT_EQ(dcp::infer_rounds(p, false), 1);
  std::vector<int> rounds;
  for (const auto& s : p.steps) rounds.push_back(s.round);
  EXPECT_EQ(rounds, (std::vector<int>{0, 0, 1, 1, 1}));
  // The same wait across a step that spans t = 3 is no barrier (something else made it wait).
  p.steps[0].time_s = 4.0;
  p.steps[4].start_s = 4.0;
  EXPECT_EQ(dcp::infer_rounds(p, false), 0);
  // A lockstep plan whose GPUs all ended a round together still gets its barrier.
  dcp::plan q;
  q.gpus = 2;
  q.steps.push_back({{0, 1}, 0, 0.0, 2.0, 1.0, {}});
  q.steps.push_back({{1, 1}, 0, 0.0, 2.0, 1.0, {}});
  q.steps.push_back({{0, 1}, 0, 2.0, 1.0, 1.0, {}});
  q.steps.push_back({{1, 1}, 0, 2.0, 3.0, 1.0, {}});
  EXPECT_EQ(dcp::infer_rounds(q, false), 0);
  EXPECT_EQ(dcp::infer_rounds(q, true), 1);
  EXPECT_EQ(q.steps[3].round, 1);
}

}  // namespace
