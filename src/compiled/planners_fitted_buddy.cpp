// dcp::compiled: the planners on (fitted_cost, selective_recompute, buddy_groups), one entry of
// DCP_COMPILED_CONTEXTS (<dcp/compiled.hpp>). One context per file, so that they build in parallel.
#include <dcp/plan/dcp_planner.hpp>

DCP_DCP_PLANNER_ON(, ::dcp::fitted_cost, ::dcp::selective_recompute, ::dcp::buddy_groups)
DCP_DYNAMIC_CP_PLANNER_ON(, ::dcp::fitted_cost, ::dcp::selective_recompute, ::dcp::buddy_groups)
DCP_PACKED_PLANNER_ON(, ::dcp::fitted_cost, ::dcp::selective_recompute, ::dcp::buddy_groups)
DCP_BUCKET_PLANNER_ON(, ::dcp::fitted_cost, ::dcp::selective_recompute, ::dcp::buddy_groups)
