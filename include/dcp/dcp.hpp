#pragma once
/// \file
/// The host-only umbrella: every public header that needs no MPI, NCCL or CUDA.
/// Opt-in umbrellas: `<dcp/mpi.hpp>`, `<dcp/nccl.hpp>`, `<dcp/cuda.cuh>`.
///
/// Keep the list sorted; the `headers.umbrella_complete` test fails when a host-only public
/// header is missing here.

#include <dcp/bucketing/bucketing_concepts.hpp>
#include <dcp/bucketing/fixed_edges_bucketing.hpp>
#include <dcp/bucketing/geometric_bucketing.hpp>
#include <dcp/bucketing/quantile_bucketing.hpp>
#include <dcp/comm/comm_concepts.hpp>
#include <dcp/comm/dsp.hpp>
#include <dcp/comm/local.hpp>
#include <dcp/comm/shard.hpp>
#include <dcp/comm/ulysses.hpp>
#include <dcp/config.hpp>
#include <dcp/cost/analytic.hpp>
#include <dcp/cost/calibration.hpp>
#include <dcp/cost/cost_concepts.hpp>
#include <dcp/cost/cost_sum.hpp>
#include <dcp/cost/device.hpp>
#include <dcp/cost/fitted_cost.hpp>
#include <dcp/cost/profiled_cost.hpp>
#include <dcp/cost/scaled_cost.hpp>
#include <dcp/error.hpp>
#include <dcp/group/buddy_groups.hpp>
#include <dcp/group/group_cache.hpp>
#include <dcp/group/group_concepts.hpp>
#include <dcp/model/config.hpp>
#include <dcp/model/model_concepts.hpp>
#include <dcp/model/transformer.hpp>
#include <dcp/plan/bucket_planner.hpp>
#include <dcp/plan/check_plan.hpp>
#include <dcp/plan/dcp_planner.hpp>
#include <dcp/plan/dynamic_cp_planner.hpp>
#include <dcp/plan/packed_planner.hpp>
#include <dcp/plan/plan.hpp>
#include <dcp/plan/plan_builder.hpp>
#include <dcp/plan/plan_concepts.hpp>
#include <dcp/plan/sequence_options.hpp>
#include <dcp/plan/tuning.hpp>
#include <dcp/policies.hpp>
#include <dcp/profile/memory_counter.hpp>
#include <dcp/profile/profile_json.hpp>
#include <dcp/profile/profile_table.hpp>
#include <dcp/profile/profiler.hpp>
#include <dcp/random.hpp>
#include <dcp/recompute/full_recompute.hpp>
#include <dcp/recompute/no_recompute.hpp>
#include <dcp/recompute/recompute_concepts.hpp>
#include <dcp/recompute/selective_recompute.hpp>
#include <dcp/sample/sample_concepts.hpp>
#include <dcp/sample/token_budget_sampler.hpp>
#include <dcp/scheduler.hpp>
#include <dcp/sequence.hpp>
#include <dcp/sim/execute.hpp>
#include <dcp/sim/methods.hpp>
#include <dcp/sim/metrics.hpp>
#include <dcp/sim/plan_json.hpp>
#include <dcp/sim/report.hpp>
#include <dcp/sim/simulator.hpp>
#include <dcp/sim/svg.hpp>
#include <dcp/sim/trace.hpp>
#include <dcp/sim/truth.hpp>
#include <dcp/workload/embedded.hpp>
#include <dcp/workload/lengths_file.hpp>
