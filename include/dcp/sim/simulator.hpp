#pragma once
/// \file
/// The simulator: plans every global batch of a run with one planner, times the planning
/// (steady_clock), and measures the plans on the cost model's clock (`sim/metrics.hpp`).
/// Steps already carry their gang start (all members free), so a plan is its own timeline.
///
/// ```
/// auto cost = dcp::make_analytic_cost(dcp::models::cogvideox_5b(), dcp::devices::h200(), 32);
/// auto data = dcp::workloads::make("cogvideox-zipf10");
/// auto batches = dcp::epoch_batches(cost, data);  // every method plans these (<dcp/workload/tuning.hpp>)
/// auto r = dcp::sim::simulate(cost, dcp::dcp_planner{}, batches);
/// std::cout << r.metrics.tokens_per_s;
/// ```

#include <chrono>
#include <cstdint>
#include <ostream>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include <dcp/cost/cost_concepts.hpp>
#include <dcp/plan/plan.hpp>
#include <dcp/plan/plan_concepts.hpp>
#include <dcp/plan/planning_context.hpp>
#include <dcp/recompute/selective_recompute.hpp>
#include <dcp/sequence.hpp>
#include <dcp/sim/metrics.hpp>

namespace dcp::sim {

/// How a run is simulated.
struct options {
  std::int64_t global_batch_tokens = 0;  ///< batch budget in model tokens; 0 = 262144 * N
  std::uint64_t seed = 0;                ///< sampler seed (and the seed of seeded planners)
  bool keep_plans = false;               ///< keep every batch's plan in `run_result::plans`
  std::ostream* progress = nullptr;      ///< where progress goes once a run takes over `progress_after_s`
  double progress_after_s = 1.0;
  friend bool operator==(const options&, const options&) = default;
};

/// Settings every method of a comparison shares.
struct method_settings {
  loss_normalization loss = loss_normalization::token_mean;
  infeasible_policy on_infeasible = infeasible_policy::error;
  std::int64_t global_batch_tokens = 0;  ///< the run's batch budget (bucket and packed tune on it); 0 = 262144 * N
  std::uint64_t seed = 0;                ///< the run's sampler seed, and bucket's shuffle seed
  friend bool operator==(const method_settings&, const method_settings&) = default;
};

/// The metrics of a run, and its plans when `options::keep_plans` is set.
struct run_result {
  run_metrics metrics;
  std::vector<plan> plans;
};

namespace detail {

// Progress on one line of a terminal (\r), shown only once the work has taken a while.
class progress_line {
 public:
  progress_line(std::ostream* out, double after_s, std::string what)
      : out_(out), after_s_(after_s), what_(std::move(what)), start_(std::chrono::steady_clock::now()) {}
  progress_line(const progress_line&) = delete;
  progress_line& operator=(const progress_line&) = delete;
  ~progress_line() {
    if (shown_) *out_ << "\r" << what_ << ": done" << std::string(24, ' ') << "\n" << std::flush;
  }
  void update(std::size_t done, std::size_t total) {
    if (!out_) return;
    const auto now = std::chrono::steady_clock::now();
    if (std::chrono::duration<double>(now - start_).count() < after_s_) return;
    if (shown_ && std::chrono::duration<double>(now - last_).count() < 0.2 && done != total) return;
    last_ = now;
    shown_ = true;
    *out_ << "\r" << what_ << ": batch " << done << "/" << total << std::flush;
  }

 private:
  std::ostream* out_;
  double after_s_;
  std::string what_;
  std::chrono::steady_clock::time_point start_, last_{};
  bool shown_ = false;
};

}  // namespace detail

/// Plans every batch of `batches` with `planner` in `ctx` (cost model, recompute policy, group
/// manager) and measures the run on the context's cost model.
/// Throws what the planner throws (an infeasible sequence under `infeasible_policy::error`).
template <any_planning_context Ctx, planner P>
run_result simulate(const Ctx& ctx, const P& planner, std::span<const std::vector<sequence>> batches,
                    const options& opt = {}) {
  const auto& cost = ctx.cost;
  run_result out;
  out.metrics.method = planner.name();
  out.metrics.gpus = cost.gpus();
  out.metrics.busy_s.assign(static_cast<std::size_t>(cost.gpus()), 0.0);
  out.metrics.update_s = update_seconds_of(cost);
  if (opt.keep_plans) out.plans.reserve(batches.size());
  detail::progress_line progress(opt.progress, opt.progress_after_s, "simulating " + planner.name());
  for (std::size_t i = 0; i < batches.size(); ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    plan p = planner.plan(ctx, std::span<const sequence>(batches[i]));
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    out.metrics.add(p, seconds, 0, peak_memory(p, cost));
    if (opt.keep_plans) out.plans.push_back(std::move(p));
    progress.update(i + 1, batches.size());
  }
  return out;
}

/// `simulate` in `planning_context{cost, selective_recompute{}, default_groups(cost)}`.
template <cost_model C, planner P>
run_result simulate(const C& cost, const P& planner, std::span<const std::vector<sequence>> batches,
                    const options& opt = {}) {
  return simulate(planning_context{cost, selective_recompute{}, default_groups(cost)}, planner, batches, opt);
}

/// Overload for a vector of batches (`cost_or_ctx` a cost model or a planning context).
template <class CostOrContext, planner P>
  requires cost_model<CostOrContext> || any_planning_context<CostOrContext>
run_result simulate(const CostOrContext& cost_or_ctx, const P& planner,
                    const std::vector<std::vector<sequence>>& batches, const options& opt = {}) {
  return simulate(cost_or_ctx, planner, std::span<const std::vector<sequence>>(batches), opt);
}

}  // namespace dcp::sim
