// Fuzz target: bytes -> (model, device, GPU count, group layout, batch) -> every planner; every
// plan must keep the plan laws (`dcp::plan_violations`, the layout's blocks included). Rejections
// must be dcp::error, never a crash. The layout is buddy blocks or blocks of any size.

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include <dcp/cost/analytic.hpp>
#include <dcp/group/buddy_groups.hpp>
#include <dcp/group/contiguous_groups.hpp>
#include <dcp/plan/bucket_planner.hpp>
#include <dcp/plan/check_plan.hpp>
#include <dcp/plan/dcp_planner.hpp>
#include <dcp/plan/dynamic_cp_planner.hpp>
#include <dcp/plan/packed_planner.hpp>
#include <dcp/plan/planning_context.hpp>
#include <dcp/recompute/selective_recompute.hpp>
#include <dcp/workload/tuning.hpp>

#include "fuzz_input.hpp"

namespace {

// A static baseline runs tuned on the batch (`dcp::tune`), as its users tune it on their data.
template <class Planner, class Context>
void run(const Planner& untuned, const Context& ctx, const std::vector<dcp::sequence>& batch) {
  const dcp::analytic_cost& cost = ctx.cost;
  dcp::plan plan;
  Planner p = untuned;
  // Must catch: a fuzz target sorts the error codes itself (infeasible is allowed, others abort).
  try {
    if constexpr (dcp::tunable_planner<Planner, dcp::analytic_cost>) p = dcp::tune(untuned, ctx, batch);
    plan = p.plan(ctx, batch);
  } catch (const dcp::error& e) {
    // Only an infeasible sequence (error policy) may stop a valid batch.
    if (e.code() != dcp::errc::infeasible) {
      std::fprintf(stderr, "%s: unexpected error: %s\n", p.name().c_str(), e.what());
      std::abort();
    }
    return;
  }
  const auto violations = dcp::plan_violations(plan, batch, cost, ctx.groups);
  if (!violations.empty()) {
    std::fprintf(stderr, "%s broke %zu plan laws, first: %s\n", p.name().c_str(), violations.size(),
                 violations.front().c_str());
    std::abort();
  }
  if (plan.hash() != p.plan(ctx, batch).hash()) {
    std::fprintf(stderr, "%s is not deterministic\n", p.name().c_str());
    std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  dcp::fuzz::input in(data, size);
  const std::uint8_t flags = in.byte();
  dcp::transformer_spec model = flags % 3 == 0   ? dcp::models::cogvideox_5b()
                                : flags % 3 == 1 ? dcp::models::stdit3_xl()
                                                 : dcp::models::llama3_8b();
  const dcp::device_spec device = (flags & 4) ? dcp::devices::h100_analytic() : dcp::devices::h200_analytic();
  int gpus = static_cast<int>(in.u16() % 1024) + 1;
  if (gpus > device.gpus_per_node) gpus -= gpus % device.gpus_per_node;  // whole nodes
  dcp::analytic_cost cost{model, device, gpus};
  // Must catch: a filter, not an expectation (a job the cost model rejects is not fuzzed further).
  try {
    cost.validate();
  } catch (const dcp::error&) {
    return 0;  // e.g. static memory over capacity on few GPUs: rejected up front
  }

  std::vector<dcp::sequence> batch;
  for (std::int64_t id = 0; !in.empty() && batch.size() < 512; ++id) {
    const std::uint32_t raw = in.u24();
    // Lengths spread over 1 .. ~2^22 tokens, log-uniform-ish; 2D shapes for the video model.
    const std::int64_t n = std::int64_t{1} + ((std::int64_t{raw} & 0xffff) << ((raw >> 16) % 7));
    if (model.attention == dcp::attention_kind::factorized_2d)
      batch.push_back(dcp::make_sequence(id, 1 + (raw >> 19) % 120, std::max<std::int64_t>(1, n / 64)));
    else
      batch.push_back(dcp::make_sequence(id, n));
  }
  if (batch.empty()) return 0;

  dcp::dcp_planner knobs, skipping;
  knobs.inter = (flags & 8) == 0, knobs.intra = (flags & 16) == 0;
  skipping.on_infeasible = dcp::infeasible_policy::skip;
  const auto plan_all = [&](const auto& ctx) {
    run(knobs, ctx, batch);
    run(skipping, ctx, batch);
    run(dcp::dynamic_cp_planner{}, ctx, batch);
    run(dcp::bucket_planner{}, ctx, batch);
    run(dcp::packed_planner{}, ctx, batch);
  };
  if (flags & 32)
    plan_all(dcp::planning_context{cost, dcp::selective_recompute{}, dcp::contiguous_groups{cost.gpus(), cost.gpus_per_node()}});
  else
    plan_all(dcp::planning_context{cost, dcp::selective_recompute{}, dcp::buddy_groups{cost.gpus(), cost.gpus_per_node()}});
  return 0;
}
