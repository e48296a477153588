#pragma once
/// \file
/// The compiled mode, as fmt's non-header-only mode: the planners' entry points (dcp, dynamic_cp,
/// packed, bucket) on the planning contexts most programs use, compiled once into the
/// `dcp::compiled` library.
///
/// Linking `dcp::compiled` (CMake) defines `DCP_COMPILED=1` (`DCP_HAS_COMPILED()` is then 1).
/// Each planner's header then ends by declaring its instantiations on `DCP_COMPILED_CONTEXTS`
/// `extern template`, so a translation unit that plans on one of these contexts calls the
/// library's copy instead of instantiating and optimising the planner itself. Without the macro
/// (header-only, the default) nothing is declared, and every context, listed or not, is
/// instantiated where it is used. The plans are the same either way; `benchmarks/compile`
/// measures what the mode saves. This header names no planner, so the planners include it.

#include <dcp/config.hpp>

/// X(cost, recompute, groups) for each planning context the library compiles: the default bundle
/// (`analytic_cost`, `selective_recompute`, `buddy_groups`), its calibrated cost (`fitted_cost`,
/// what a calibrated scheduler plans on), and both on contiguous groups.
#define DCP_COMPILED_CONTEXTS(X)                                                \
  X(::dcp::analytic_cost, ::dcp::selective_recompute, ::dcp::buddy_groups)      \
  X(::dcp::analytic_cost, ::dcp::selective_recompute, ::dcp::contiguous_groups) \
  X(::dcp::fitted_cost, ::dcp::selective_recompute, ::dcp::buddy_groups)        \
  X(::dcp::fitted_cost, ::dcp::selective_recompute, ::dcp::contiguous_groups)

/// The explicit instantiation of each planner's entry point on one context, after `extern` (the
/// declaration, at the end of the planner's header) or after nothing (the definition, made once
/// by the library's sources, src/compiled/).
#define DCP_DCP_PLANNER_ON(EXTERN, C, R, G)                                                    \
  EXTERN template ::dcp::plan dcp::dcp_planner::plan(const ::dcp::planning_context<C, R, G>&, \
                                                       ::std::span<const ::dcp::sequence>) const;
#define DCP_PACKED_PLANNER_ON(EXTERN, C, R, G)                                                    \
  EXTERN template ::dcp::plan dcp::packed_planner::plan(const ::dcp::planning_context<C, R, G>&, \
                                                          ::std::span<const ::dcp::sequence>,      \
                                                          const ::dcp::batch_bounds*) const;
#define DCP_BUCKET_PLANNER_ON(EXTERN, C, R, G)                                                    \
  EXTERN template ::dcp::plan dcp::bucket_planner::plan(const ::dcp::planning_context<C, R, G>&, \
                                                          ::std::span<const ::dcp::sequence>,      \
                                                          const ::dcp::batch_bounds*) const;
#define DCP_DYNAMIC_CP_PLANNER_ON(EXTERN, C, R, G)                                                    \
  EXTERN template ::dcp::plan dcp::dynamic_cp_planner::plan(const ::dcp::planning_context<C, R, G>&, \
                                                              ::std::span<const ::dcp::sequence>,      \
                                                              const ::dcp::batch_bounds*) const;

#if DCP_HAS_COMPILED()
// The types the contexts name.
#include <span>

#include <dcp/cost/analytic.hpp>
#include <dcp/cost/fitted_cost.hpp>
#include <dcp/group/buddy_groups.hpp>
#include <dcp/group/contiguous_groups.hpp>
#include <dcp/plan/planning_context.hpp>
#include <dcp/recompute/selective_recompute.hpp>
#include <dcp/sequence.hpp>
#endif
