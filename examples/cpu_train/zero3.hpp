#pragma once
/// \file
/// ZeRO-3 (FSDP's full sharding) for the tiny transformer, and the training step that runs a
/// coupled dcp plan with it.
///
/// Every rank of the shard domain keeps 1/D of each parameter unit (`param_layout::units`: the
/// embeddings, each block, the head), of its gradient and of the optimizer state. A micro-step
/// gathers a unit (`all_gather` over the domain) before it uses it and releases it after, and
/// reduce-scatters the unit's gradient once the step has added to it (an `all_to_all` of the
/// gradient's chunks, each rank summing its own chunk in rank order): the collectives of
/// `tiny_transformer::forward_backward`'s `Units`. Every member of the domain makes these calls
/// once per micro-step, so every member must run the same number of micro-steps: the plan's
/// padding passes (steps without sequences, DESIGN 3.7) join the collectives and compute
/// nothing. A released unit's copy is overwritten with NaN, so a use without its gather would
/// show in every result. The optimizer steps each rank's shard; of the gradients nothing is
/// all-reduced (only the loss, for the report).

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>
#include <span>
#include <string>
#include <vector>

#include <dcp/error.hpp>
#include <dcp/layout.hpp>
#include <dcp/plan/coupling.hpp>
#include <dcp/plan/plan.hpp>

#include "tiny_transformer.hpp"
#include "trainer.hpp"

namespace cpu_train {

/// The `Units` of `tiny_transformer::forward_backward` under ZeRO-3 over `domain`.
template <class T, class Comm>
class zero3_shards {
 public:
  /// Takes this rank's shard of `model`'s parameters (the same on every rank at the start) and
  /// releases the whole copy.
  zero3_shards(tiny_transformer<T>& model, Comm& domain) : model_(model), domain_(domain) {
    const param_layout& lay = model.layout();
    const int D = domain.size();
    for (int u = 0; u < lay.units(); ++u) {
      const auto [b, e] = lay.unit_range(u);
      offset_.push_back(size_);
      chunk_.push_back((e - b + std::size_t(D) - 1) / std::size_t(D));
      size_ += chunk_.back();
    }
    params_.assign(size_, T(0));
    grads_.assign(size_, T(0));
    for (int u = 0; u < lay.units(); ++u) {
      const auto [b, e] = lay.unit_range(u);
      const std::size_t first = b + std::size_t(domain.rank()) * chunk_[size_t(u)];
      for (std::size_t i = 0; i < chunk_[size_t(u)] && first + i < e; ++i)
        params_[offset_[size_t(u)] + i] = model.params()[first + i];
      release(u);
    }
  }

  /// Unit `u` whole in the model's parameters: every member's chunk, gathered.
  void gather(int u) {
    const auto [b, e] = model_.layout().unit_range(u);
    const std::size_t c = chunk_[size_t(u)];
    std::vector<T> all(c * std::size_t(domain_.size()));
    domain_.all_gather(std::span<const T>(params_).subspan(offset_[size_t(u)], c), std::span<T>(all));
    std::copy_n(all.begin(), e - b, model_.params().begin() + std::ptrdiff_t(b));
    ++collectives_;
  }
  /// Adds the domain's sum of unit `u`'s gradient in `grads` (the model's size) to this rank's
  /// chunk, and clears the unit in `grads`.
  void reduce_scatter(int u, std::span<T> grads) {
    const auto [b, e] = model_.layout().unit_range(u);
    const std::size_t c = chunk_[size_t(u)], D = std::size_t(domain_.size());
    std::vector<T> send(c * D, T(0)), recv(c * D);
    std::copy(grads.begin() + std::ptrdiff_t(b), grads.begin() + std::ptrdiff_t(e), send.begin());
    domain_.all_to_all(std::span<const T>(send), std::span<T>(recv));
    for (std::size_t j = 0; j < D; ++j)
      for (std::size_t i = 0; i < c; ++i) grads_[offset_[size_t(u)] + i] += recv[j * c + i];
    std::fill(grads.begin() + std::ptrdiff_t(b), grads.begin() + std::ptrdiff_t(e), T(0));
    ++collectives_;
  }
  /// Drops the gathered copy of unit `u`.
  void release(int u) {
    const auto [b, e] = model_.layout().unit_range(u);
    std::fill(model_.params().begin() + std::ptrdiff_t(b), model_.params().begin() + std::ptrdiff_t(e),
              std::numeric_limits<T>::quiet_NaN());
  }

  /// This rank's shard of the parameters and of the accumulated gradient (unit by unit, each
  /// chunk padded to the same length on every rank).
  std::span<T> params() noexcept { return params_; }
  std::span<T> grads() noexcept { return grads_; }
  /// Collective: every unit gathered into the model's parameters (to read or save them).
  void gather_all() {
    for (int u = 0; u < model_.layout().units(); ++u) gather(u);
  }
  /// Drops every gathered copy.
  void release_all() {
    for (int u = 0; u < model_.layout().units(); ++u) release(u);
  }
  /// The domain collectives this rank has made.
  std::size_t collectives() const noexcept { return collectives_; }

 private:
  tiny_transformer<T>& model_;
  Comm& domain_;
  std::vector<std::size_t> offset_, chunk_;
  std::size_t size_ = 0;
  std::vector<T> params_, grads_;
  std::size_t collectives_ = 0;
};

/// Refuses `p` unless `layout` is the one this trainer runs (zero3, tp, pp and ep 1: its one shard
/// domain is the world) and every unit runs one micro-step per lockstep round: a `dcp::error`
/// naming the units and their counts, on every rank alike, before any collective.
inline void require_lockstep(const dcp::plan& p, const dcp::parallel_layout& layout) {
  dcp::check(layout.sharding == dcp::sharding_kind::zero3 && layout.tp == 1 && layout.pp == 1 && layout.ep == 1,
             dcp::errc::invalid_argument, [] {
               return std::string("zero3 training: the cost model's layout must shard with zero3, with tp, pp and "
                                  "ep 1 (the trainer's one shard domain is the world)");
             });
  const auto unequal = dcp::coupling_violations(p, layout);
  dcp::check(unequal.empty(), dcp::errc::mismatch,
             [&] { return "zero3 training: " + unequal.front() + " (the ZeRO-3 gathers would hang)"; });
}

/// Runs plan `p` (the same on every rank) as one ZeRO-3 training step on this rank: the lockstep
/// check (`require_lockstep`), this rank's micro-steps with gathered units, and the optimizer
/// step on this rank's shard. Collective over the scheduler's world.
template <class T, class Scheduler, class Comm>
step_summary zero3_run_plan(Scheduler& sched, tiny_transformer<T>& model, zero3_shards<T, Comm>& shards,
                            optimizer<T>& opt, const synthetic_data& data, const dcp::plan& p,
                            recompute_mode mode = recompute_mode::plan) {
  require_lockstep(p, sched.cost().layout());
  step_summary out;
  out.plan = p;
  std::vector<T> g(model.params().size(), T(0));  // a micro-step's gradient, before its reduce-scatters
  T total[1] = {run_micro_steps(sched, model, data, p, mode, std::span<T>(g), out, memory_limit{}, shards)};
  sched.world().all_reduce(std::span<T>(total), dcp::reduce_op::sum);
  opt.step(shards.params(), std::span<const T>(shards.grads()));
  std::fill(shards.grads().begin(), shards.grads().end(), T(0));
  out.loss = double(total[0]);
  return out;
}

/// One training step under ZeRO-3: `sched.plan(batch)`, `sched.verify`, then `zero3_run_plan`.
template <class T, class Scheduler, class Comm>
step_summary zero3_train_step(Scheduler& sched, tiny_transformer<T>& model, zero3_shards<T, Comm>& shards,
                              optimizer<T>& opt, const synthetic_data& data, std::span<const dcp::sequence> batch,
                              recompute_mode mode = recompute_mode::plan) {
  const dcp::plan p = sched.plan(batch);
  sched.verify(p);
  return zero3_run_plan(sched, model, shards, opt, data, p, mode);
}

}  // namespace cpu_train
