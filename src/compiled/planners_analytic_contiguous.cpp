// dcp::compiled: the planners on (analytic_cost, selective_recompute, contiguous_groups), one entry of
// DCP_COMPILED_CONTEXTS (<dcp/compiled.hpp>). One context per file, so that they build in parallel.
#include <dcp/plan/dcp_planner.hpp>

DCP_DCP_PLANNER_ON(, ::dcp::analytic_cost, ::dcp::selective_recompute, ::dcp::contiguous_groups)
DCP_DYNAMIC_CP_PLANNER_ON(, ::dcp::analytic_cost, ::dcp::selective_recompute, ::dcp::contiguous_groups)
DCP_PACKED_PLANNER_ON(, ::dcp::analytic_cost, ::dcp::selective_recompute, ::dcp::contiguous_groups)
DCP_BUCKET_PLANNER_ON(, ::dcp::analytic_cost, ::dcp::selective_recompute, ::dcp::contiguous_groups)
