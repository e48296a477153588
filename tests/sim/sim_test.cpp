// Simulator, metrics, comparison table, plan JSON (dcp.plan/v1), trace and SVG writers.

#include <dcp_test/support.hpp>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <set>
#include <span>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include <dcp/cost/analytic.hpp>
#include <dcp/error.hpp>
#include <dcp/plan/check_plan.hpp>
#include <dcp/plan/dynamic_cp_planner.hpp>
#include <dcp/plan/pipeline_plan.hpp>
#include <dcp/plan/pipeline_schedule.hpp>
#include <dcp/sim/methods.hpp>
#include <dcp/sim/metrics.hpp>
#include <dcp/sim/plan_json.hpp>
#include <dcp/sim/report.hpp>
#include <dcp/sim/simulator.hpp>
#include <dcp/sim/svg.hpp>
#include <dcp/sim/trace.hpp>
#include <dcp/workload/embedded.hpp>
#include <dcp/workload/tuning.hpp>

namespace {

using dcp::sequence;
using json = nlohmann::json;

// Two batches on 2 GPUs, small enough to compute every metric by hand.
std::vector<dcp::plan> tiny_plans() {
  dcp::plan a;
  a.method = "tiny";
  a.gpus = 2;
  a.steps.push_back({{0, 2}, 0, 0.0, 1.0, 10.0, {{1, 100, 1, 100, 0.5}}});
  a.steps.push_back({{0, 1}, 0, 1.0, 2.0, 20.0, {{2, 50, 1, 50, 0.25}, {3, 50, 1, 50, 0.25}}});
  a.makespan_s = 3;
  a.lower_bound_s = 1.5;
  dcp::plan b;
  b.method = "tiny";
  b.gpus = 2;
  b.steps.push_back({{1, 1}, 0, 0.0, 1.0, 5.0, {{4, 100, 1, 100, 1.0}}});
  b.makespan_s = 1;
  b.lower_bound_s = 1;
  b.skipped.push_back({9, 7, "too long"});
  return {a, b};
}

TEST(SimMetrics, MatchHandComputedValues) {
  const auto plans = tiny_plans();
  std::vector<double> busy;
  const auto m = dcp::sim::measure(plans[0], &busy);
  EXPECT_EQ(busy, (std::vector<double>{3.0, 1.0}));
  EXPECT_DOUBLE_EQ(m.makespan_s, 3);
  EXPECT_DOUBLE_EQ(m.busy_s, 4);
  EXPECT_DOUBLE_EQ(m.imbalance, (0.0 + 2.0) / 2 / 3);  // mean_r (makespan - busy_r) / makespan
  EXPECT_DOUBLE_EQ(m.peak_memory_bytes, 20);
  EXPECT_EQ(m.sequences, 3);
  EXPECT_EQ(m.tokens, 200);
  EXPECT_EQ(m.steps, 2);

  dcp::sim::run_metrics r;
  r.add(plans[0], 0.5);
  r.add(plans[1], 1.5);
  EXPECT_EQ(r.method, "tiny");
  EXPECT_EQ(r.batches, 2);
  EXPECT_EQ(r.tokens, 300);
  EXPECT_EQ(r.sequences, 4);
  EXPECT_EQ(r.skipped, 1);
  EXPECT_DOUBLE_EQ(r.makespan_s, 4);
  EXPECT_DOUBLE_EQ(r.tokens_per_s, 300.0 / 4);
  EXPECT_DOUBLE_EQ(r.efficiency, 2.5 / 4);
  EXPECT_DOUBLE_EQ(r.imbalance, (1.0 / 3 + 0.5) / 2);
  EXPECT_DOUBLE_EQ(r.plan_seconds, 1.0);
  EXPECT_DOUBLE_EQ(r.plan_seconds_max, 1.5);
  EXPECT_DOUBLE_EQ(r.peak_memory_bytes, 20);
  EXPECT_EQ(r.busy_s, (std::vector<double>{3.0, 2.0}));
  EXPECT_EQ(r.idle_s, (std::vector<double>{1.0, 2.0}));
}

struct small_run {
  dcp::analytic_cost cost = dcp::make_analytic_cost(dcp::models::stdit3_xl(), dcp::devices::h200_analytic(), 8);
  dcp::dataset data;
  std::vector<std::vector<sequence>> batches;
  small_run() {
    data = dcp::workloads::make("opensora-zipf10", 5);
    data.resize(1500);
    batches = dcp::epoch_batches(cost, data, 0, 5);
  }
};

TEST(Simulator, PlansEveryBatchAndAccountsForEverySequence) {
  const small_run run;
  dcp::sim::options opt;
  opt.keep_plans = true;
  const auto dynamic = dcp::tune(dcp::dynamic_cp_planner{}, run.cost, std::span<const dcp::sequence>(run.data));
  const auto r = dcp::sim::simulate(run.cost, dynamic, run.batches, opt);
  ASSERT_EQ(r.plans.size(), run.batches.size());
  EXPECT_EQ(r.metrics.method, "dynamic_cp");
  EXPECT_EQ(r.metrics.batches, static_cast<std::int64_t>(run.batches.size()));
  EXPECT_EQ(r.metrics.sequences, static_cast<std::int64_t>(run.data.size()));
  std::int64_t tokens = 0;
  for (const auto& s : run.data) tokens += run.cost.tokens_of(s);
  EXPECT_EQ(r.metrics.tokens, tokens);
  double makespan = 0, bound = 0, simple = 0;
  for (std::size_t i = 0; i < r.plans.size(); ++i) {
    EXPECT_TRUE(dcp::plan_violations(r.plans[i], run.batches[i], run.cost).empty());
    makespan += r.plans[i].makespan_s, bound += r.plans[i].joint_lower_bound_s, simple += r.plans[i].lower_bound_s;
  }
  EXPECT_DOUBLE_EQ(r.metrics.makespan_s, makespan);
  EXPECT_DOUBLE_EQ(r.metrics.efficiency, bound / makespan);  // against the joint bound
  EXPECT_DOUBLE_EQ(r.metrics.simple_efficiency, simple / makespan);
  EXPECT_GE(r.metrics.efficiency, r.metrics.simple_efficiency);
  EXPECT_LE(r.metrics.efficiency, 1.0);
  EXPECT_GT(r.metrics.plan_seconds, 0);
  ASSERT_EQ(r.metrics.busy_s.size(), 8u);
  for (std::size_t g = 0; g < 8; ++g) EXPECT_NEAR(r.metrics.busy_s[g] + r.metrics.idle_s[g], makespan, 1e-9 * makespan);
  // Without keep_plans only the metrics come back, and they are the same.
  const auto lean = dcp::sim::simulate(run.cost, dynamic, run.batches);
  EXPECT_TRUE(lean.plans.empty());
  EXPECT_EQ(lean.metrics.tokens, r.metrics.tokens);
  EXPECT_DOUBLE_EQ(lean.metrics.makespan_s, r.metrics.makespan_s);
}

TEST(SimMethods, EveryMethodRunsByName) {
  const small_run run;
  dcp::sim::method_settings settings;
  std::vector<dcp::sim::run_metrics> rows;
  for (auto name : dcp::sim::default_methods) {
    const auto r = dcp::sim::run_method(name, run.cost, run.data, run.batches, settings);
    EXPECT_EQ(r.metrics.method, name);
    EXPECT_EQ(r.metrics.sequences, static_cast<std::int64_t>(run.data.size())) << name;
    EXPECT_GT(r.metrics.tokens_per_s, 0) << name;
    EXPECT_LE(r.metrics.efficiency, 1.0 + 1e-12) << name;
    rows.push_back(r.metrics);
  }
  EXPECT_DOUBLE_EQ(dcp::sim::speedup_vs_bucket(rows[3], rows), 1.0);
  EXPECT_DCP_ERROR(dcp::sim::validate_method("bukket"), dcp::errc::invalid_argument, "unknown method 'bukket'",
                   "dynamic_cp")
      << "names the method and lists the valid names";
}

std::set<std::string> keys(const json& j) {
  std::set<std::string> out;
  for (const auto& [k, v] : j.items()) out.insert(k);
  return out;
}

TEST(PlanJson, HasExactlyTheDesignFieldsAndEverySequenceOnce) {
  const small_run run;
  dcp::sim::options opt;
  opt.keep_plans = true;
  const auto r = dcp::sim::run_method("bucket", run.cost, run.data, run.batches, {}, opt);
  std::ostringstream os;
  dcp::sim::write_plan_json(os, run.cost, std::span<const dcp::plan>(r.plans));
  const json doc = json::parse(os.str());

  EXPECT_EQ(keys(doc),
            (std::set<std::string>{"format", "method", "layout", "memory_capacity_bytes", "model", "device", "batches"}));
  EXPECT_EQ(doc["format"], "dcp.plan/v3");
  EXPECT_EQ(keys(doc["layout"]), (std::set<std::string>{"gpus", "gpus_per_node", "tp", "ep", "sharding", "ring"}));
  EXPECT_EQ(doc["layout"]["tp"], 1);
  EXPECT_EQ(doc["method"], "bucket");
  EXPECT_EQ(doc["layout"]["gpus"], 8);
  EXPECT_EQ(doc["layout"]["gpus_per_node"], 8);
  EXPECT_EQ(doc["layout"]["sharding"], "zero1");
  EXPECT_DOUBLE_EQ(doc["memory_capacity_bytes"].get<double>(), run.cost.capacity());
  EXPECT_EQ(doc["model"]["name"], "stdit3-xl");
  EXPECT_EQ(doc["model"]["blocks"], 56);
  EXPECT_EQ(doc["model"]["attention"], "factorized_2d");
  EXPECT_EQ(doc["device"]["name"], "h200-analytic");
  EXPECT_DOUBLE_EQ(doc["device"]["peak"].get<double>(), 989e12);

  std::map<std::int64_t, const sequence*> by_id;
  for (const auto& s : run.data) by_id[s.id] = &s;
  std::map<std::int64_t, int> seen;
  ASSERT_EQ(doc["batches"].size(), run.batches.size());
  for (std::size_t b = 0; b < doc["batches"].size(); ++b) {
    const json& batch = doc["batches"][b];
    EXPECT_EQ(keys(batch), (std::set<std::string>{"index", "makespan_s", "lower_bound_s", "joint_lower_bound_s", "steps"}));
    EXPECT_EQ(batch["index"], b);
    for (const json& step : batch["steps"]) {
      EXPECT_EQ(keys(step), (std::set<std::string>{"ranks", "sp", "start_s", "time_s", "memory_bytes",
                                                   "checkpointed_blocks", "round", "sequences"}));
      const int sp = step["sp"];
      ASSERT_EQ(step["ranks"].size(), static_cast<std::size_t>(sp));
      EXPECT_EQ(step["ranks"][0].get<int>() % sp, 0);
      dcp::analytic_load load{};
      for (const json& q : step["sequences"]) {
        EXPECT_EQ(keys(q), (std::set<std::string>{"id", "tokens", "shape", "loss_weight"}));
        const sequence& s = *by_id.at(q["id"].get<std::int64_t>());
        EXPECT_EQ(q["shape"], json::array({s.frames, s.spatial}));
        EXPECT_EQ(q["tokens"], run.cost.tokens_of(s));
        ++seen[s.id];
        load = load + run.cost.load_of(s);
      }
      const int k = step["checkpointed_blocks"];
      EXPECT_DOUBLE_EQ(step["time_s"].get<double>(), run.cost.time(load, sp, k));
      EXPECT_DOUBLE_EQ(step["memory_bytes"].get<double>(), run.cost.memory(load, sp, k));
    }
  }
  EXPECT_EQ(seen.size(), run.data.size());
  for (const auto& [id, n] : seen) EXPECT_EQ(n, 1) << "sequence " << id;
}

TEST(PlanJson, ListsSkippedSequencesOnlyWhenThereAreSome) {
  const auto plans = tiny_plans();
  const auto cost = dcp::make_analytic_cost(dcp::models::cogvideox_5b(), dcp::devices::h200_analytic(), 2);
  const json doc = dcp::sim::plan_json(cost, std::span<const dcp::plan>(plans));
  EXPECT_FALSE(doc["batches"][0].contains("skipped"));
  ASSERT_TRUE(doc["batches"][1].contains("skipped"));
  EXPECT_EQ(doc["batches"][1]["skipped"][0]["id"], 9);
  EXPECT_THROW(dcp::sim::write_plan_json("/nonexistent-dir/plan.json", cost, std::span<const dcp::plan>(plans)),
               dcp::error);
}

// A tensor-parallel plan (llama3-70b, tp 8, 128 GPUs = 16 units, rings of 2) records tp in the
// plan, its JSON, trace and SVG, and its Ulysses x Ring steps' u x r; it reads back equal; a
// dcp.plan/v1 file (no "tp") reads as tp = 1; a v2 file needs a power-of-two tp.
TEST(PlanJson, RecordsTpAndUlyssesTimesRingAndReadsV1) {
  const auto cost = dcp::make_analytic_cost(dcp::models::llama3_70b(), dcp::devices::h200_analytic(),
                                            {.gpus = 128, .tp = 8, .sharding = dcp::sharding_kind::zero3, .ring = 2});
  const std::vector<dcp::sequence> batch = {dcp::make_sequence(1, 600000), dcp::make_sequence(2, 9000),
                                            dcp::make_sequence(3, 2000)};
  const auto p = dcp::dcp_planner{}.plan(cost, std::span<const dcp::sequence>(batch));
  ASSERT_EQ(p.layout, cost.layout());
  ASSERT_EQ(p.gpus, 16);
  EXPECT_TRUE(dcp::plan_violations(p, batch, cost).empty());
  const auto ring_step = std::find_if(p.steps.begin(), p.steps.end(), [](const auto& s) { return s.ring > 1; });
  ASSERT_NE(ring_step, p.steps.end()) << "600k tokens need more than 8 units (8 heads per TP rank)";
  auto tp1 = p;
  tp1.layout.tp = 1;
  EXPECT_NE(tp1.hash(), p.hash()) << "tp is part of what executes";
  const auto v = dcp::plan_violations(tp1, batch, cost);
  ASSERT_EQ(v.size(), 1u);
  EXPECT_NE(v.front().find("tp = 1"), std::string::npos) << v.front();

  std::stringstream ss;
  dcp::sim::write_plan_json(ss, cost, std::span<const dcp::plan>(&p, 1));
  const json j = json::parse(ss.str());
  EXPECT_EQ(j["format"], "dcp.plan/v3");
  EXPECT_EQ(j["layout"], json({{"gpus", 128}, {"gpus_per_node", 8}, {"tp", 8}, {"ep", 1}, {"sharding", "zero3"}, {"ring", 2}}));
  EXPECT_FALSE(j.contains("tp")) << "the layout is the one record of tp";
  EXPECT_EQ(j["model"]["kv_heads"], 8);
  const json& js = j["batches"][0]["steps"][static_cast<std::size_t>(ring_step - p.steps.begin())];
  EXPECT_EQ(js["ring"].get<int>() * (js["sp"].get<int>() / js["ring"].get<int>()), ring_step->sp());
  std::istringstream in(ss.str());
  const auto doc = dcp::sim::read_plan_json(in, "tp");
  EXPECT_EQ(doc.layout, cost.layout());
  EXPECT_TRUE(doc.full_layout);
  EXPECT_EQ(doc.gpus, 16);
  ASSERT_EQ(doc.plans.size(), 1u);
  EXPECT_EQ(doc.plans[0].layout, cost.layout());
  EXPECT_EQ(doc.plans[0].steps, p.steps);
  EXPECT_EQ(doc.plans[0].hash(), p.hash());

  // v2: units and tp at the top, no layout; v1: no tp either (tp = 1).
  json v2 = j;
  v2["format"] = "dcp.plan/v2";
  v2.erase("layout");
  v2["gpus"] = 16, v2["gpus_per_node"] = 1, v2["tp"] = 8;
  std::istringstream in_v2(v2.dump());
  const auto older = dcp::sim::read_plan_json(in_v2, "v2");
  EXPECT_FALSE(older.full_layout);
  EXPECT_EQ(older.layout, (dcp::parallel_layout{.gpus = 128, .gpus_per_node = 8, .tp = 8}));
  EXPECT_EQ(older.plans[0].steps, p.steps);
  EXPECT_EQ(older.plans[0].hash(), p.hash()) << "the hash counts tp, not ep, sharding or ring";
  json v1 = v2;
  v1["format"] = "dcp.plan/v1";
  v1.erase("tp");
  std::istringstream in1(v1.dump());
  const auto old = dcp::sim::read_plan_json(in1, "v1");
  EXPECT_EQ(old.layout.tp, 1);
  EXPECT_EQ(old.plans[0].layout.tp, 1);
  EXPECT_EQ(old.plans[0].steps, p.steps);
  for (const json& bad : {json(nullptr), json(3), json(0)}) {
    json w = v2;
    if (bad.is_null()) w.erase("tp");
    else w["tp"] = bad;
    std::istringstream in2(w.dump());
    EXPECT_DCP_ERROR(dcp::sim::read_plan_json(in2, "v2"), dcp::errc::parse_error, "tp");
    json l = j;
    if (bad.is_null()) l["layout"].erase("tp");
    else l["layout"]["tp"] = bad;
    std::istringstream in3(l.dump());
    EXPECT_DCP_ERROR(dcp::sim::read_plan_json(in3, "v3"), dcp::errc::parse_error, "tp");
  }
  json bad_sharding = j;
  bad_sharding["layout"]["sharding"] = "zero2";
  std::istringstream in4(bad_sharding.dump());
  EXPECT_DCP_ERROR(dcp::sim::read_plan_json(in4, "v3"), dcp::errc::parse_error, "layout sharding");

  const std::vector<dcp::sim::timeline> runs{{"dcp", std::span<const dcp::plan>(&p, 1)}};
  std::ostringstream trace;
  dcp::sim::write_trace(trace, runs);
  const json t = json::parse(trace.str());
  std::set<std::string> tracks;
  bool ring_event = false;
  for (const json& e : t["traceEvents"]) {
    if (e["name"] == "thread_name") tracks.insert(e["args"]["name"].get<std::string>());
    if (e["ph"] == "X") {
      EXPECT_EQ(e["args"]["tp"], 8);
      if (e["args"].contains("ring")) {
        ring_event = true;
        EXPECT_EQ(e["args"]["ulysses"].get<int>() * e["args"]["ring"].get<int>(), e["args"]["sp"].get<int>());
      }
    }
  }
  EXPECT_EQ(tracks.size(), 16u);
  EXPECT_TRUE(tracks.contains("TP group 15 (GPUs 120-127)"));
  EXPECT_TRUE(ring_event);
  std::ostringstream svg;
  dcp::sim::write_svg(svg, runs);
  EXPECT_NE(svg.str().find(" of tp 8 (GPUs ["), std::string::npos);
  EXPECT_NE(svg.str().find(" x ring " + std::to_string(ring_step->ring) + ")"), std::string::npos);
  EXPECT_NE(svg.str().find(">TP 15<"), std::string::npos);
}

TEST(Trace, HasOneTrackPerGpuAndOneEventPerStepAndGpu) {
  const small_run run;
  dcp::sim::options opt;
  opt.keep_plans = true;
  const auto a = dcp::sim::run_method("dcp", run.cost, run.data, run.batches, {}, opt);
  const auto b = dcp::sim::run_method("packed", run.cost, run.data, run.batches, {}, opt);
  const std::vector<dcp::sim::timeline> runs{{"dcp", a.plans}, {"packed", b.plans}};
  std::ostringstream os;
  dcp::sim::write_trace(os, runs);
  const json doc = json::parse(os.str());
  ASSERT_TRUE(doc.contains("traceEvents"));
  std::map<int, std::set<int>> tracks;
  std::map<int, std::int64_t> events;
  std::map<int, std::string> names;
  for (const json& e : doc["traceEvents"]) {
    if (e["name"] == "thread_name") {
      EXPECT_TRUE(tracks[e["pid"].get<int>()].insert(e["tid"].get<int>()).second) << "a GPU named twice";
    }
    if (e["name"] == "process_name") names[e["pid"].get<int>()] = e["args"]["name"].get<std::string>();
    if (e["ph"] == "X") {
      ++events[e["pid"].get<int>()];
      EXPECT_GE(e["dur"].get<double>(), 0);
    }
  }
  ASSERT_EQ(tracks.size(), 2u);
  for (const auto& [pid, gpus] : tracks) {
    EXPECT_EQ(gpus.size(), 8u);
    EXPECT_EQ(*gpus.rbegin(), 7);
  }
  EXPECT_EQ(names[1], "dcp");
  EXPECT_EQ(names[2], "packed");
  auto gpu_steps = [](const std::vector<dcp::plan>& plans) {
    std::int64_t n = 0;
    for (const auto& p : plans)
      for (const auto& s : p.steps) n += s.sp();
    return n;
  };
  EXPECT_EQ(events[1], gpu_steps(a.plans));
  EXPECT_EQ(events[2], gpu_steps(b.plans));
}

std::size_t count(const std::string& text, const std::string& what) {
  std::size_t n = 0;
  for (auto at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

TEST(Svg, HasOneLanePerGpuAndOneBoxPerStep) {
  const auto cost = dcp::make_analytic_cost(dcp::models::cogvideox_5b(), dcp::devices::h200_analytic(), 24);
  auto data = dcp::workloads::make("cogvideox-zipf50", 2);
  data.resize(800);
  const auto batches = dcp::epoch_batches(cost, data, 0, 2);
  dcp::sim::options opt;
  opt.keep_plans = true;
  const auto a = dcp::sim::run_method("dcp", cost, data, batches, {}, opt);
  const auto b = dcp::sim::run_method("bucket", cost, data, batches, {}, opt);
  const std::vector<dcp::sim::timeline> runs{{"dcp", a.plans}, {"bucket", b.plans}};
  std::ostringstream os;
  dcp::sim::write_svg(os, runs);
  const std::string svg = os.str();
  EXPECT_EQ(svg.rfind("<svg", 0), 0u);
  EXPECT_NE(svg.find("</svg>"), std::string::npos);
  EXPECT_EQ(count(svg, "class=\"lane\""), 2u * 24u);
  for (int r = 0; r < 24; ++r) EXPECT_EQ(count(svg, "data-gpu=\"" + std::to_string(r) + "\""), 2u) << "GPU " << r;
  std::size_t steps = 0;
  for (const auto* plans : {&a.plans, &b.plans})
    for (const auto& p : *plans) steps += p.steps.size();
  EXPECT_EQ(count(svg, "class=\"step\""), steps);
  EXPECT_EQ(count(svg, "class=\"method\""), 2u);
  EXPECT_EQ(count(svg, "<title>"), steps) << "every box has its tooltip";
  std::size_t barriers = 0;  // one line per round after the first, per batch
  for (const auto* plans : {&a.plans, &b.plans})
    for (const auto& p : *plans) {
      std::set<int> rounds;
      for (const auto& s : p.steps)
        if (s.round > 0) rounds.insert(s.round);
      barriers += rounds.size();
    }
  EXPECT_EQ(count(svg, "class=\"barrier\""), barriers);
  EXPECT_GT(barriers, 0u) << "bucket's lockstep iterations are barriers";
}

// Under pipeline stages the trace and the SVG draw every stage: one track (lane) per stage and
// unit, and every step's forward and backward on every stage, when its schedule runs them; no
// track holds two operations at once, and a step's forward on stage s + 1 starts after it ended
// on stage s.
TEST(StageLanes, EveryStagesForwardsAndBackwardsOnTheirOwnTracks) {
  const int stages = 2, gpus = 16;
  const auto cost = dcp::make_analytic_cost(dcp::models::cogvideox_5b(), dcp::devices::h200_analytic(),
                                            dcp::parallel_layout{.gpus = gpus, .gpus_per_node = 8, .pp = stages});
  auto data = dcp::workloads::make("cogvideox-zipf50", 3);
  data.resize(400);
  const auto batches = dcp::epoch_batches(cost, data, std::int64_t{1} << 17, 3);  // four batches
  dcp::sim::options opt;
  opt.keep_plans = true;
  const auto a = dcp::sim::run_method("dcp", cost, data, batches, {}, opt);
  std::vector<dcp::pipeline_timeline> schedules;
  for (const auto& p : a.plans) schedules.push_back(dcp::schedule_pipeline(p, dcp::pipeline_times(p, cost), stages));
  const std::vector<dcp::sim::timeline> runs{{"dcp", a.plans, schedules}};
  const int units = cost.layout().units();
  std::int64_t unit_steps = 0;
  for (const auto& p : a.plans)
    for (const auto& st : p.steps) unit_steps += st.sp();

  std::ostringstream trace;
  dcp::sim::write_trace(trace, runs);
  const json doc = json::parse(trace.str());
  std::map<int, std::vector<std::pair<double, double>>> busy;  // track -> operations
  std::set<std::string> names;
  std::int64_t events = 0;
  for (const json& e : doc["traceEvents"]) {
    if (e["name"] == "thread_name") names.insert(e["args"]["name"].get<std::string>());
    if (e["ph"] != "X") continue;
    ++events;
    const double t0 = e["ts"].get<double>(), t1 = t0 + e["dur"].get<double>();
    busy[e["tid"].get<int>()].push_back({t0, t1});
    EXPECT_EQ(e["tid"].get<int>() / units, e["args"]["stage"].get<int>());
  }
  EXPECT_EQ(names.size(), std::size_t(stages * units));
  EXPECT_TRUE(names.contains("stage 1, GPU " + std::to_string(units))) << "a stage-1 track names its GPU";
  EXPECT_EQ(events, 2 * stages * unit_steps) << "a forward and a backward per stage and unit of every step";
  for (auto& [track, spans] : busy) {
    std::sort(spans.begin(), spans.end());
    for (std::size_t i = 1; i < spans.size(); ++i)
      EXPECT_LE(spans[i - 1].second, spans[i].first + 1e-3) << "track " << track << " runs two operations at once";
  }
  for (std::size_t b = 0; b < a.plans.size(); ++b)
    for (std::size_t i = 0; i < a.plans[b].steps.size(); ++i)
      EXPECT_LE(schedules[b].forward_of(i, 0).end_s, schedules[b].forward_of(i, 1).start_s);

  std::ostringstream svg_out;
  dcp::sim::write_svg(svg_out, runs);
  const std::string svg = svg_out.str();
  std::size_t steps = 0;
  for (const auto& p : a.plans) steps += p.steps.size();
  EXPECT_EQ(count(svg, "class=\"lane\""), std::size_t(stages * units));
  EXPECT_EQ(count(svg, "class=\"step\""), 2 * stages * steps);
  EXPECT_EQ(count(svg, "backward, ranks"), stages * steps);
  EXPECT_NE(svg.find(">S1 GPU " + std::to_string(units) + "<"), std::string::npos);
  ASSERT_GT(a.plans.size(), 1u);
  const std::vector<dcp::sim::timeline> short_one{{"dcp", a.plans, std::span(schedules).first(1)}};
  std::ostringstream sink;
  EXPECT_DCP_ERROR(dcp::sim::write_svg(sink, short_one), dcp::errc::invalid_argument, "one per plan");
  EXPECT_DCP_ERROR(dcp::sim::write_trace(sink, short_one), dcp::errc::invalid_argument, "one per plan");
}

TEST(Report, TableAndJsonHaveEveryMethod) {
  const auto plans = tiny_plans();
  dcp::sim::run_metrics bucket, fast;
  bucket.add(plans[0], 0.01);
  bucket.method = "bucket";
  fast.add(plans[1], 0.002);
  fast.method = "dcp";
  const std::vector<dcp::sim::run_metrics> rows{fast, bucket};
  const dcp::sim::comparison_header h{"w", "cogvideox-5b", "h200", 2, 8, 4, 400, 2};
  const json j = dcp::sim::table_json(h, rows);
  EXPECT_EQ(keys(j),
            (std::set<std::string>{"workload", "model", "device", "gpus", "sequences", "tokens", "groups", "methods"}));
  ASSERT_EQ(j["methods"].size(), 2u);
  EXPECT_EQ(keys(j["methods"][0]),
            (std::set<std::string>{"method", "tokens_per_s", "speedup_vs_best_baseline", "speedup_vs_bucket",
                                   "efficiency", "simple_efficiency",
                                   "imbalance", "bubble", "peak_memory_bytes", "plan_seconds", "skipped", "oom_steps",
                                   "communicators_per_rank", "communicator_bytes_per_rank", "update_s"}));
  EXPECT_EQ(j["methods"][0]["method"], "dcp");
  EXPECT_DOUBLE_EQ(j["methods"][0]["speedup_vs_bucket"].get<double>(), (100.0 / 1) / (200.0 / 3));
  EXPECT_DOUBLE_EQ(j["methods"][1]["speedup_vs_bucket"].get<double>(), 1.0);
  // The only tuned baseline is the strongest.
  EXPECT_DOUBLE_EQ(j["methods"][0]["speedup_vs_best_baseline"].get<double>(), (100.0 / 1) / (200.0 / 3));
  EXPECT_EQ(j["methods"][0]["skipped"], 1);

  std::ostringstream os;
  dcp::sim::print_table(os, h, rows);
  const std::string text = os.str();
  for (const char* col : {"tokens/s", "vs baseline", "efficiency", "vs simple", "imbalance", "peak memory", "plan time", "skipped"})
    EXPECT_NE(text.find(col), std::string::npos) << col;
  EXPECT_NE(text.find("1.50x"), std::string::npos) << text;
  EXPECT_NE(text.find("1.00x"), std::string::npos) << text;
  EXPECT_NE(text.find("strongest tuned baseline, bucket"), std::string::npos) << text;

  // Without a baseline row the speedup is unknown: null in JSON, '-' in the table.
  const std::vector<dcp::sim::run_metrics> alone{fast};
  EXPECT_TRUE(dcp::sim::table_json(h, alone)["methods"][0]["speedup_vs_bucket"].is_null());
  EXPECT_TRUE(dcp::sim::table_json(h, alone)["methods"][0]["speedup_vs_best_baseline"].is_null());

  // The strongest tuned baseline is the fastest of bucket, packed and dynamic_cp; an
  // all-checkpointed row never is, however fast.
  dcp::sim::run_metrics packed = fast, old = fast;
  packed.method = "packed";
  packed.tokens_per_s = 80;
  old.method = "packed-ckpt-all";
  old.tokens_per_s = 1000;
  const std::vector<dcp::sim::run_metrics> many{fast, bucket, packed, old};
  ASSERT_NE(dcp::sim::strongest_baseline(many), nullptr);
  EXPECT_EQ(dcp::sim::strongest_baseline(many)->method, "packed");
  EXPECT_DOUBLE_EQ(dcp::sim::speedup_vs_best_baseline(fast, many), fast.tokens_per_s / 80);
}

// Every baseline tunes its recompute level; the -ckpt-all rows keep every block checkpointed and
// are never faster than the tuned rows on their tuning epoch (tuning includes that setting).
TEST(Methods, BaselinesTuneTheirRecomputeLevel) {
  const small_run run;
  dcp::sim::method_settings settings;
  const auto epoch = dcp::tuning_batches(run.cost, std::span<const sequence>(run.data), 0, settings.seed);
  for (std::string base : {"bucket", "packed", "dynamic_cp"}) {
    const auto tuned = dcp::sim::run_method(base, run.cost, run.data, epoch, settings);
    const auto all = dcp::sim::run_method(base + "-ckpt-all", run.cost, run.data, epoch, settings);
    EXPECT_EQ(all.metrics.method, base + "-ckpt-all");
    EXPECT_NE(tuned.metrics.tuned.find("recompute "), std::string::npos) << tuned.metrics.tuned;
    const std::string every = "recompute " + std::to_string(run.cost.blocks()) + "/" + std::to_string(run.cost.blocks());
    EXPECT_NE(all.metrics.tuned.find(every), std::string::npos) << all.metrics.tuned;
    EXPECT_GE(tuned.metrics.tokens_per_s, all.metrics.tokens_per_s * (1 - 1e-12)) << base;
  }
}

}  // namespace
