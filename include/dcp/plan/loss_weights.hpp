#pragma once
/// \file
/// Loss weights (DESIGN section 3 step 7): token mean or sample mean over the whole plan, so the
/// summed gradients of its steps are the full-batch gradient.

#include <dcp/plan/plan.hpp>

namespace dcp {

/// Sets every planned sequence's loss weight so the weights sum to 1 over the plan
/// (DESIGN section 3 step 7).
inline void assign_loss_weights(plan& p, loss_normalization norm) {
  double tokens = 0, count = 0;
  for (const auto& s : p.steps)
    for (const auto& q : s.sequences) tokens += static_cast<double>(q.tokens), count += 1;
  for (auto& s : p.steps)
    for (auto& q : s.sequences)
      q.loss_weight = norm == loss_normalization::token_mean ? static_cast<double>(q.tokens) / tokens : 1.0 / count;
}

}  // namespace dcp
