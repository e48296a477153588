#pragma once
/// \file
/// Which sequences of a batch any configuration can hold (`feasible_sequences`), and the error
/// naming one that none can (`infeasible_error`).

#include <algorithm>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include <dcp/cost/cost_concepts.hpp>
#include <dcp/error.hpp>
#include <dcp/plan/plan.hpp>
#include <dcp/plan/sequence_options.hpp>
#include <dcp/sequence.hpp>

namespace dcp {

/// The error for a sequence no configuration can hold, the widest usable group being `widest`
/// units (0: the widest of `default_groups(cost)`).
template <cost_model C>
error infeasible_error(const C& cost, const sequence& s, int widest = 0) {
  return error(errc::infeasible, "sequence " + std::to_string(s.id) + " of " + std::to_string(cost.tokens_of(s)) +
                                     " tokens (shape " + std::to_string(s.frames) + " x " +
                                     std::to_string(s.spatial) + ") fits no configuration on " +
                                     std::to_string(cost.gpus()) + " GPUs; the largest length that fits is " +
                                     std::to_string(largest_feasible_tokens(cost, widest)) +
                                     " tokens; use more GPUs or memory, or on_infeasible = skip");
}

/// Validates the cost model (the planner validated the group layout: `planning_context::validate`) and the batch (positive shapes, unique ids), and splits it into sequences that have at
/// least one feasible option and those that have none, following `policy`.
/// A sequence is feasible when it fits alone with every block checkpointed on one of `sizes` (the
/// sizes the planner may use, ascending; empty: `default_sp_sizes`), tried widest first (memory
/// falls with sp, so in the shipped models the widest decides).
template <cost_model C>
std::vector<sequence> feasible_sequences(const C& cost, std::span<const sequence> batch, infeasible_policy policy,
                                         std::vector<skipped_sequence>& skipped, std::span<const int> sizes = {}) {
  if constexpr (validated_cost_model<C>) cost.validate();
  check(!batch.empty(), errc::invalid_argument,
        [] { return std::string("empty batch: a global batch needs at least one sequence"); });
  std::vector<std::int64_t> ids;
  ids.reserve(batch.size());
  for (const auto& s : batch) {
    validate(s);
    ids.push_back(s.id);
  }
  std::sort(ids.begin(), ids.end());
  if (auto d = std::adjacent_find(ids.begin(), ids.end()); d != ids.end())
    throw error(errc::invalid_argument,
                "sequence id " + std::to_string(*d) + " appears twice in the batch; ids must be unique");

  std::vector<sequence> out;
  out.reserve(batch.size());
  const std::vector<int> legal = sizes.empty() ? default_sp_sizes(cost) : std::vector<int>{};
  if (sizes.empty()) sizes = legal;
  const int widest = sizes.empty() ? 1 : sizes.back();
  auto fits = [&](const sequence& s) {
    const auto load = cost.load_of(s);
    for (auto sp = sizes.rbegin(); sp != sizes.rend(); ++sp)
      if (cost.memory(load, *sp, cost.blocks()) <= cost.capacity()) return true;
    return false;
  };
  for (const auto& s : batch) {
    if (fits(s)) {
      out.push_back(s);
    } else if (policy == infeasible_policy::skip) {
      skipped.push_back({s.id, cost.tokens_of(s), infeasible_error(cost, s, widest).what()});
    } else {
      throw infeasible_error(cost, s, widest);
    }
  }
  return out;
}

}  // namespace dcp
