#pragma once
/// \file
/// The methods a comparison runs, by name: `dcp`, `dcp-no-inter`, `dcp-no-intra` (and
/// `dcp-no-inter-no-intra`), `bucket`, `packed`, `dynamic_cp` (each baseline tuning its recompute
/// level with its other knobs), and `bucket-ckpt-all`, `packed-ckpt-all`, `dynamic_cp-ckpt-all`
/// (the same baselines with every block checkpointed, for continuity; never the strongest
/// baseline of a table). `with_method` builds the planner a name stands for, tunes it on the
/// dataset when the method is a tuned system (the baselines; the `dcp` row gets them tuned as its
/// candidates, `with_baselines`), and hands it to a callable; `run_method` simulates it, on the
/// cost model's clock or executed on a truth (`sim/execute.hpp`), where `oracle` is also a method:
/// the dcp planner planning on the truth's deterministic part and speeds, `dcp` calibrates (the
/// start-up probe, then each batch on the model refitted to what ran) and `dcp-open-loop` keeps
/// the planner on the cost model alone. On a cluster of named nodes `dcp-uniform` is the dcp
/// planner planning as if every node were the weakest (its slowest speed, its smallest capacity),
/// each plan executed on the cluster as it is: what knowing the cluster is worth.

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include <dcp/cost/cost_concepts.hpp>
#include <dcp/error.hpp>
#include <dcp/plan/bucket_planner.hpp>
#include <dcp/plan/dcp_planner.hpp>
#include <dcp/plan/dynamic_cp_planner.hpp>
#include <dcp/plan/packed_planner.hpp>
#include <dcp/plan/plan.hpp>
#include <dcp/plan/plan_concepts.hpp>
#include <dcp/plan/planning_context.hpp>
#include <dcp/recompute/selective_recompute.hpp>
#include <dcp/sequence.hpp>
#include <dcp/sim/calibrated.hpp>
#include <dcp/sim/execute.hpp>
#include <dcp/sim/simulator.hpp>
#include <dcp/sim/truth.hpp>
#include <dcp/workload/tuning.hpp>

namespace dcp::sim {

/// Every method name `with_method` accepts.
inline constexpr std::array<std::string_view, 10> method_names{
    "dcp",    "dcp-no-inter", "dcp-no-intra", "dcp-no-inter-no-intra", "bucket", "packed", "dynamic_cp",
    "bucket-ckpt-all", "packed-ckpt-all", "dynamic_cp-ckpt-all"};

/// The suffix of a baseline run with every block checkpointed (its recompute level not tuned).
inline constexpr std::string_view all_checkpointed_suffix = "-ckpt-all";

/// The methods of the default comparison (DESIGN section 7).
inline constexpr std::array<std::string_view, 6> default_methods{"dcp",    "dcp-no-inter", "dcp-no-intra",
                                                                  "bucket", "packed",       "dynamic_cp"};

/// The method that plans on the truth itself (a run on a truth only).
inline constexpr std::string_view oracle_method = "oracle";

/// The dcp planner on the cost model alone, never corrected by what ran (a run on a truth only,
/// where `dcp` calibrates: `sim/calibrated.hpp`).
inline constexpr std::string_view open_loop_method = "dcp-open-loop";

/// The dcp planner blind to a mixed cluster (a cluster of named nodes only).
inline constexpr std::string_view uniform_method = "dcp-uniform";

namespace detail {
/// The weakest device of `layout`'s nodes: the slowest speed and the smallest capacity.
inline unit_device weakest_node(const parallel_layout& layout) {
  check(layout.has_node_devices(), errc::invalid_argument, [] {
    return std::string(
        "method 'dcp-uniform' plans as if every node were the cluster's weakest; it needs a cluster "
        "of named nodes (dcp-sim --cluster)");
  });
  return layout.as_weakest().nodes.front();
}
}  // namespace detail

/// Throws `dcp::error(errc::invalid_argument)` listing the valid names unless `name` is one
/// (`oracle` counts when `on_truth`).
inline void validate_method(std::string_view name, bool on_truth = false) {
  if (std::find(method_names.begin(), method_names.end(), name) != method_names.end()) return;
  if (name == uniform_method) return;
  if (name == oracle_method || name == open_loop_method) {
    check(on_truth, errc::invalid_argument, [&] {
      return std::string(name == oracle_method
                             ? "method 'oracle' plans on a truth clock"
                             : "method 'dcp-open-loop' runs on a truth clock (where dcp calibrates)") +
             "; give --truth SPEC or --truth-profile FILE";
    });
    return;
  }
  std::string list;
  for (auto n : method_names) list += (list.empty() ? "" : ", ") + std::string(n);
  list += ", " + std::string(uniform_method) + " (on a cluster)";
  if (on_truth) list += ", " + std::string(oracle_method) + ", " + std::string(open_loop_method);
  throw error(errc::invalid_argument, "unknown method '" + std::string(name) + "'; use one of " + list);
}

/// Calls `f(planner, tune_seconds)` with the planner `name` stands for, tuned in `ctx` on `data`
/// (the whole dataset) when it is a tuned method (bucket, packed, dynamic_cp; the dcp methods'
/// pipeline knobs where the context has pp > 1). Returns what `f` returns.
template <any_planning_context Ctx, class F>
decltype(auto) with_method(std::string_view name, const Ctx& ctx, std::span<const sequence> data,
                           const method_settings& s, F&& f) {
  validate_method(name);
  const auto t0 = std::chrono::steady_clock::now();
  auto seconds = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(); };
  if (name.starts_with("dcp")) {
    dcp_planner p;
    p.inter = name.find("no-inter") == std::string_view::npos;
    p.intra = name.find("no-intra") == std::string_view::npos;
    p.loss = s.loss;
    p.on_infeasible = s.on_infeasible;
    // The full planner plans no batch slower than a tuned baseline: they are its candidates (the
    // ablations keep to their own halves).
    if (name == "dcp") p = with_baselines(std::move(p), ctx, data, s.global_batch_tokens, s.seed);
    // Under pipelines its micro-batch shape, tuned as the baselines' knobs are.
    if (ctx.cost.layout().pp > 1) p = tune(std::move(p), ctx, data, s.global_batch_tokens, s.seed);
    return f(p, name == "dcp" || ctx.cost.layout().pp > 1 ? seconds() : 0.0);
  }
  // A baseline: tuned as its users tune it, its recompute level too unless the name fixes it.
  const bool all_checkpointed = name.ends_with(all_checkpointed_suffix);
  const std::string_view base = name.substr(0, name.size() - (all_checkpointed ? all_checkpointed_suffix.size() : 0));
  const uniform_recompute recompute{-1, !all_checkpointed};
  auto tuned = [&](auto p) {
    p.loss = s.loss;
    p.on_infeasible = s.on_infeasible;
    p.recompute_level = recompute;
    p = tune(std::move(p), ctx, data, s.global_batch_tokens, s.seed);
    return f(p, seconds());
  };
  if (base == "packed") return tuned(packed_planner{});
  if (base == "dynamic_cp") return tuned(dynamic_cp_planner{});
  bucket_planner p;
  p.seed = s.seed;
  return tuned(p);
}

/// `with_method` in `planning_context{cost, selective_recompute{}, default_groups(cost)}`.
template <cost_model C, class F>
decltype(auto) with_method(std::string_view name, const C& cost, std::span<const sequence> data,
                           const method_settings& s, F&& f) {
  return with_method(name, planning_context{cost, selective_recompute{}, default_groups(cost)}, data, s,
                     std::forward<F>(f));
}

/// Simulates method `name` on `batches` (cut from `data`) in `ctx`, tuning it on `data` first if
/// needed.
template <any_planning_context Ctx>
run_result run_method(std::string_view name, const Ctx& ctx, std::span<const sequence> data,
                      std::span<const std::vector<sequence>> batches, const method_settings& s,
                      const options& opt = {}) {
  if (name == uniform_method) {  // its plans, executed on the cluster's own clock (no jitter)
    const truth<typename Ctx::cost_type> cluster{ctx.cost, {}, 0.0, 0};
    truth_run_result t = run_method(name, ctx, data, batches, s, cluster, opt);
    return {std::move(t.metrics), std::move(t.executed)};
  }
  return with_method(name, ctx, data, s, [&](const auto& planner, double tune_seconds) {
    run_result r = simulate(ctx, planner, batches, opt);
    r.metrics.method = std::string(name);
    r.metrics.tune_seconds = tune_seconds;
    r.metrics.tuned = tuned_setting_of(planner, ctx.cost);
    return r;
  });
}

/// `run_method` in `planning_context{cost, selective_recompute{}, default_groups(cost)}`.
template <cost_model C>
run_result run_method(std::string_view name, const C& cost, std::span<const sequence> data,
                      std::span<const std::vector<sequence>> batches, const method_settings& s,
                      const options& opt = {}) {
  return run_method(name, planning_context{cost, selective_recompute{}, default_groups(cost)}, data, batches, s, opt);
}

/// Simulates method `name` in `ctx` on `batches`, every plan executed on the truth `t`. `dcp`
/// calibrates as a training loop with `scheduler_options::calibration` does: the start-up probe,
/// then every batch planned on the model refitted to what ran (`simulate_calibrated`; an analytic
/// cost model whose form `fitted_cost` mirrors, `has_fitted_form`; on another `dcp` plans open
/// loop).
/// `dcp-open-loop` is the dcp planner on `ctx` alone. `oracle` is the dcp planner planning on
/// `t.model` with `t.speeds` (the truth without its jitter) and the context's recompute policy
/// and group manager; every other method (the ablations and the baselines) plans in `ctx` as it
/// does without a truth.
template <any_planning_context Ctx, cost_model T>
truth_run_result run_method(std::string_view name, const Ctx& ctx, std::span<const sequence> data,
                            std::span<const std::vector<sequence>> batches, const method_settings& s,
                            const truth<T>& t, const options& opt = {}) {
  validate_method(name, true);
  if (name == uniform_method) {
    if constexpr (mixed_cluster_cost_model<typename Ctx::cost_type>) {
      const auto blind = ctx.cost.as_uniform(detail::weakest_node(ctx.cost.layout()));
      dcp_planner p;
      p.loss = s.loss;
      p.on_infeasible = s.on_infeasible;
      truth_run_result r = simulate(planning_context{blind, ctx.recompute, ctx.groups}, p, batches, t, opt);
      r.metrics.method = std::string(name);
      return r;
    } else {
      throw error(errc::invalid_argument, "method 'dcp-uniform' needs a cost model of a mixed cluster");
    }
  }
  if (name == oracle_method) {
    dcp_planner p;
    p.loss = s.loss;
    p.on_infeasible = s.on_infeasible;
    p.speeds = t.speeds;
    truth_run_result r = simulate(planning_context{t.model, ctx.recompute, ctx.groups}, p, batches, t, opt);
    r.metrics.method = std::string(name);
    return r;
  }
  if constexpr (std::is_same_v<typename Ctx::cost_type, analytic_cost>)
    if (name == "dcp" && ctx.cost.has_fitted_form()) return simulate_calibrated(ctx, batches, t, s, {}, opt);
  const auto& cost = ctx.cost;
  const std::string_view planned_as = name == open_loop_method ? std::string_view("dcp") : name;
  return with_method(planned_as, ctx, data, s, [&](const auto& planner, double tune_seconds) {
    truth_run_result r = simulate(ctx, planner, batches, t, opt);
    r.metrics.method = std::string(name);
    r.metrics.tune_seconds = tune_seconds;
    r.metrics.tuned = tuned_setting_of(planner, cost);
    return r;
  });
}

/// `run_method` on a truth in `planning_context{cost, selective_recompute{}, default_groups(cost)}`.
template <cost_model C, cost_model T>
truth_run_result run_method(std::string_view name, const C& cost, std::span<const sequence> data,
                            std::span<const std::vector<sequence>> batches, const method_settings& s,
                            const truth<T>& t, const options& opt = {}) {
  return run_method(name, planning_context{cost, selective_recompute{}, default_groups(cost)}, data, batches, s, t,
                    opt);
}

}  // namespace dcp::sim
