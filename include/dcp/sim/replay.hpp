#pragma once
/// \file
/// Plans read from files as a method of their own (`dcp-sim --plan-in FILE`): the plans of a
/// `dcp.plan` document (`sim/plan_json.hpp`), checked against the run they are replayed in,
/// measured on the cost model's clock or executed on a truth (`sim/execute.hpp`) like every
/// planner's plans.
///
/// Batch b of the file is batch b of the run (the writer numbers them so). A document that does
/// not fit the run (GPU count, GPUs per node, memory capacity, model, device, number of batches)
/// or a plan that breaks a law of `plan_violations` against its batch and the run's cost model
/// (a sequence missing or added, a time or memory that is not the model's, a rank outside the
/// job, a step before its round's barrier) is a `dcp::error` naming the file, the batch and the
/// fix; nothing is executed then. What the file could forge is derived again, never read: lower
/// bounds are computed on the run's clock, every step must run on a block of the run's group
/// manager (`--groups`), a skipped sequence must fit no size the run offers, and the plans must
/// keep within the run's communicator budget (`--comm-budget`). A document that records frozen networks (`cost_sum`) brings
/// them to the run (`replay_frozen`) unless the run names other ones.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <optional>
#include <span>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include <dcp/cost/cost_concepts.hpp>
#include <dcp/cost/cost_sum.hpp>
#include <dcp/error.hpp>
#include <dcp/group/group_concepts.hpp>
#include <dcp/layout.hpp>
#include <dcp/plan/lower_bounds.hpp>
#include <dcp/plan/check_plan.hpp>
#include <dcp/plan/feasibility.hpp>
#include <dcp/plan/plan.hpp>
#include <dcp/plan/planning_context.hpp>
#include <dcp/sequence.hpp>
#include <dcp/recompute/full_recompute.hpp>
#include <dcp/sim/execute.hpp>
#include <dcp/sim/plan_json.hpp>
#include <dcp/sim/simulator.hpp>
#include <dcp/sim/truth.hpp>

namespace dcp::sim {

/// The run a plan file is replayed in, beyond its cost model: names as the file records them.
struct replay_job {
  std::string model;   ///< the trained model's name
  std::string device;  ///< the device's name
  /// Sequence-parallel communicators per rank beyond the world's the plans may use (distinct
  /// groups wider than one rank and narrower than the job, as `run_metrics` counts them);
  /// none: no budget.
  std::optional<int> comm_budget;
  /// The run's GEMM precision ("bf16" or "fp8"; "": not compared).
  std::string precision;
  friend bool operator==(const replay_job&, const replay_job&) = default;
};

/// Throws `dcp::error(errc::mismatch)` unless `doc` (read from `source`) fits the run: its job
/// (its layout, capacity, model and device) is `cost`'s and `job`'s, it has one plan per batch of
/// `batches`, every plan keeps the laws of `plan_violations` against its batch on `cost` and
/// `groups`, skips only sequences that fit no size `groups` offers, and the plans keep within
/// `job.comm_budget`.
template <cost_model C, group_manager G>
void check_replay(const plan_document& doc, std::string_view source, const C& cost, const G& groups,
                  std::span<const std::vector<sequence>> batches, const replay_job& job) {
  const std::string src(source);
  auto need = [&](bool ok, const std::string& what, const std::string& fix) {
    check(ok, errc::mismatch, [&] { return "plan file '" + src + "': " + what + "; " + fix; });
  };
  const std::string same_run = "replay it with the settings it was written with";
  need(doc.gpus == cost.gpus(),
       "made for " + std::to_string(doc.gpus) + " GPUs, this run has " + std::to_string(cost.gpus()),
       "pass --gpus " + std::to_string(doc.gpus) + " or " + same_run);
  need(doc.gpus_per_node == cost.gpus_per_node(),
       "made for " + std::to_string(doc.gpus_per_node) + " GPUs per node, this run has " +
           std::to_string(cost.gpus_per_node()),
       "pass --gpus-per-node " + std::to_string(doc.gpus_per_node) + " or " + same_run);
  const parallel_layout& run = cost.layout();
  need(doc.layout.tp == run.tp,
       "made for tp = " + std::to_string(doc.layout.tp) + ", this run has tp = " + std::to_string(run.tp),
       "pass --tp " + std::to_string(doc.layout.tp) + " or " + same_run);
  if (doc.full_layout) {  // v1 and v2 files recorded N, G and tp only
    std::ostringstream made, here;
    made << doc.layout, here << run;
    need(doc.layout == run, "made for " + made.str() + ", this run has " + here.str(),
         "pass the same --tp, --ep, --sharding, --ring and --pp, or " + same_run);
  }
  need(doc.model == job.model, "made for model '" + doc.model + "', this run plans '" + job.model + "'",
       "pass --model " + doc.model + " or " + same_run);
  need(doc.device == job.device, "made for device '" + doc.device + "', this run has '" + job.device + "'",
       "pass --device " + doc.device + " or " + same_run);
  need(doc.precision.empty() || job.precision.empty() || doc.precision == job.precision,
       "made with " + doc.precision + " GEMMs, this run prices " + job.precision,
       "pass --precision " + doc.precision + " or " + same_run);
  const double c = cost.capacity();
  need(std::abs(doc.memory_capacity_bytes - c) <= 1e-9 * std::max(1.0, std::abs(c)),
       "made for " + std::to_string(doc.memory_capacity_bytes) + " B of memory per GPU, this run has " +
           std::to_string(c) + " B",
       same_run);
  need(doc.plans.size() == batches.size(),
       "has " + std::to_string(doc.plans.size()) + " batches, this run has " + std::to_string(batches.size()),
       "cut the run the same way (--workload or --lengths, --seed, --global-batch-tokens) or " + same_run);
  const std::vector<int> sizes = planning_context{cost, full_recompute{}, groups}.sp_sizes();
  for (std::size_t b = 0; b < batches.size(); ++b) {
    auto v = plan_violations(doc.plans[b], std::span<const sequence>(batches[b]), cost, groups);
    // A skipped sequence must be one no configuration of this run holds: a feasible one moved to
    // the list would be a sequence silently lost.
    for (const skipped_sequence& k : doc.plans[b].skipped) {
      const auto it = std::find_if(batches[b].begin(), batches[b].end(), [&](const sequence& q) { return q.id == k.id; });
      if (it == batches[b].end()) continue;  // a foreign id: plan_violations names it
      std::vector<skipped_sequence> none;
      if (!feasible_sequences(cost, std::span<const sequence>(&*it, 1), infeasible_policy::skip, none, sizes).empty())
        v.push_back("sequence " + std::to_string(k.id) + " is listed as skipped but fits this run");
    }
    if (v.empty()) continue;
    std::string list;
    for (std::size_t i = 0; i < v.size() && i < 3; ++i) list += (i ? "; " : "") + v[i];
    if (v.size() > 3) list += "; and " + std::to_string(v.size() - 3) + " more";
    need(false,
         "batch " + std::to_string(b) + " is not a valid plan of this run's batch " + std::to_string(b) + " (" + list +
             ")",
         "it was made for another model, layout (--tp, --ep, --sharding, --ring, --pp, --frozen, --groups), dataset "
         "or seed; " + same_run);
  }
  if (job.comm_budget) {
    run_metrics counted;  // counts each rank's groups as the report does
    for (const plan& p : doc.plans) counted.add(p, 0.0);
    const int used = counted.communicators_per_rank;
    need(used <= *job.comm_budget,
         "its plans need " + std::to_string(used) + " communicators per rank beyond the world's, this run allows " +
             std::to_string(*job.comm_budget),
         "pass --comm-budget " + std::to_string(used) + " or more, or " + same_run);
  }
}

/// `check_replay` in a run on `default_groups(cost)` (buddy blocks), as `run_method(name, cost, ...)`.
template <cost_model C>
void check_replay(const plan_document& doc, std::string_view source, const C& cost,
                  std::span<const std::vector<sequence>> batches, const replay_job& job) {
  check_replay(doc, source, cost, default_groups(cost), batches, job);
}

/// The frozen networks of a run that replays `docs` (read from `sources`, one name each): `given`
/// when the run names them (`dcp-sim --frozen`; `std::nullopt` when it does not), else those the
/// documents record, else none. Throws `dcp::error(errc::mismatch)` naming the file when a
/// document records other networks than `given`, or than an earlier document (the order of the
/// networks does not matter). A document that records none is left to `check_replay`.
inline std::vector<forward_network> replay_frozen(std::span<const plan_document> docs,
                                                  std::span<const std::string> sources,
                                                  const std::optional<std::vector<forward_network>>& given) {
  check(docs.size() == sources.size(), errc::invalid_argument, [&] {
    return std::to_string(docs.size()) + " plan documents with " + std::to_string(sources.size()) +
           " source names; give one name per document";
  });
  auto sorted = [](std::vector<forward_network> v) {
    std::sort(v.begin(), v.end(), [](const forward_network& a, const forward_network& b) { return a.name < b.name; });
    return v;
  };
  auto names = [](const std::vector<forward_network>& v) {
    std::string out;
    for (const auto& f : v) out += (out.empty() ? "" : ", ") + f.name;
    return out.empty() ? std::string("none") : out;
  };
  std::optional<std::vector<forward_network>> out = given;
  std::string from = "--frozen";  // where `out` came from, for messages
  for (std::size_t i = 0; i < docs.size(); ++i) {
    if (!docs[i].frozen) continue;
    if (!out) {
      out = docs[i].frozen, from = "'" + sources[i] + "'";
      continue;
    }
    if (sorted(*docs[i].frozen) == sorted(*out)) continue;
    const std::string recorded = names(*docs[i].frozen), other = names(*out);
    const std::string differs = recorded == other ? " with other constants (another --device?)" : "";
    throw error(errc::mismatch,
                "plan file '" + sources[i] + "' records the frozen networks " + recorded + differs + ", but " + from +
                    (from == "--frozen" ? " gives " : " records ") + other + "; " +
                    (from == "--frozen" ? "drop --frozen (the file's networks are used) or replay it with the networks "
                                          "it was written with"
                                        : "replay files written with the same networks together"));
  }
  return out.value_or(std::vector<forward_network>{});
}

/// The row name of a replayed document: its method and the file, e.g. "bucket<plan.json>".
inline std::string replay_name(const plan_document& doc, std::string_view source) {
  std::string file(source);
  if (const auto slash = file.find_last_of('/'); slash != std::string::npos) file = file.substr(slash + 1);
  return doc.method + "<" + file + ">";
}

/// `p` with its lower bounds computed again on `cost` over the blocks `groups` offers (never read
/// from a file: a forged bound would show any efficiency), over the sequences it plans, with its
/// speed factors.
template <cost_model C, group_manager G>
plan with_recomputed_bounds(plan p, const C& cost, const G& groups) {
  std::vector<sequence> planned;
  for (const auto& s : p.steps)
    for (const auto& q : s.sequences) planned.push_back(sequence{q.id, q.frames, q.spatial});
  std::sort(planned.begin(), planned.end(), [](const sequence& a, const sequence& b) { return a.id < b.id; });
  const batch_bounds b = pipelined(lower_bounds(cost, groups, planned, p.speeds), cost.layout().pp);
  p.lower_bound_s = b.simple_s;
  p.joint_lower_bound_s = b.joint_s;
  return p;
}

/// The checked plans of `doc` measured on `cost`'s clock (their own start times: on the model
/// they were validated against, those are exact; their bounds computed again on the run's
/// `groups`, `with_recomputed_bounds`). Plan time is 0: nothing was planned.
template <cost_model C, group_manager G>
run_result replay(const plan_document& doc, std::string_view source, const C& cost, const G& groups,
                  std::span<const std::vector<sequence>> batches, const replay_job& job, const options& opt = {}) {
  check_replay(doc, source, cost, groups, batches, job);
  run_result out;
  out.metrics.method = replay_name(doc, source);
  out.metrics.gpus = cost.gpus();
  out.metrics.busy_s.assign(static_cast<std::size_t>(cost.gpus()), 0.0);
  out.metrics.update_s = update_seconds_of(cost);
  for (const plan& read : doc.plans) {
    const plan p = with_recomputed_bounds(read, cost, groups);
    out.metrics.add(p, 0.0, 0, peak_memory(p, cost));
    if (opt.keep_plans) out.plans.push_back(p);
  }
  return out;
}
/// `replay` in a run on `default_groups(cost)` (buddy blocks), as `run_method(name, cost, ...)`.
template <cost_model C>
run_result replay(const plan_document& doc, std::string_view source, const C& cost,
                  std::span<const std::vector<sequence>> batches, const replay_job& job, const options& opt = {}) {
  return replay(doc, source, cost, default_groups(cost), batches, job, opt);
}

/// The checked plans of `doc` (against `groups`) executed on the truth `t` (batch i on jitter
/// stream i, as every method's).
template <cost_model C, group_manager G, cost_model T>
truth_run_result replay(const plan_document& doc, std::string_view source, const C& cost, const G& groups,
                        std::span<const std::vector<sequence>> batches, const replay_job& job, const truth<T>& t,
                        const options& opt = {}) {
  check_replay(doc, source, cost, groups, batches, job);
  truth_run_result out;
  out.metrics.method = replay_name(doc, source);
  out.metrics.gpus = cost.gpus();
  out.metrics.busy_s.assign(static_cast<std::size_t>(cost.gpus()), 0.0);
  out.metrics.update_s = update_seconds_of(t.model);
  for (std::size_t i = 0; i < doc.plans.size(); ++i) {
    execution e = execute(doc.plans[i], t, i);
    out.metrics.add(e.executed, 0.0, e.oom_steps, e.peak_bytes);
    if (opt.keep_plans) out.plans.push_back(doc.plans[i]), out.executed.push_back(std::move(e.executed));
  }
  return out;
}

/// `replay` on the truth `t` in a run on `default_groups(cost)`.
template <cost_model C, cost_model T>
truth_run_result replay(const plan_document& doc, std::string_view source, const C& cost,
                        std::span<const std::vector<sequence>> batches, const replay_job& job, const truth<T>& t,
                        const options& opt = {}) {
  return replay(doc, source, cost, default_groups(cost), batches, job, t, opt);
}

}  // namespace dcp::sim
