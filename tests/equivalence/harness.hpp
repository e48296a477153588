#pragma once
// The equivalence proof: training under dcp plans (any planner, any rank count,
// recompute on or off) equals single-process full-batch training.
//
// `run_planned` trains on one rank of a world (local threads or MPI processes) through the
// scheduler; `run_reference` trains the same batches as full batches in one process. Both return
// the parameters after the first optimizer step and the loss of every step.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include <dcp/dcp.hpp>

#include "../../examples/cpu_train/trainer.hpp"

namespace equivalence {

using namespace cpu_train;

/// The small problem every run trains.
struct setup {
  model_config model{.vocab = 32, .hidden = 16, .heads = 8, .mlp = 32, .blocks = 2, .max_len = 128};
  synthetic_data data{.vocab = 32, .min_len = 8, .max_len = 96, .seed = 7};
  int sequences = 64;
  std::int64_t batch_tokens = 320;  // global batch budget
  int steps = 10;
  double fit_tokens = 40;  // a longer sequence needs recompute or sp > 1
  optimizer_config opt{optimizer_kind::adam, 1e-2};

  dcp::transformer_spec spec() const { return tiny_spec(model); }
  dcp::scheduler_options options(int world) const {
    dcp::scheduler_options o;
    o.device = cpu_device(spec(), world, fit_tokens);
    o.global_batch_tokens = batch_tokens;
    o.seed = 3;
    return o;
  }
  dcp::dataset dataset() const { return data.make(sequences); }
  /// The global batches of the run, as every rank's sampler draws them.
  std::vector<std::vector<dcp::sequence>> batches(int world) const {
    dcp::token_budget_sampler s(dataset(), batch_tokens, options(world).seed,
                                [](const dcp::sequence& q) { return q.shape_tokens(); });
    std::vector<std::vector<dcp::sequence>> out;
    for (int i = 0; i < steps; ++i) out.push_back(s.next().sequences);
    return out;
  }
  dcp::analytic_cost cost(int world) const {
    return dcp::make_analytic_cost(spec(), options(world).device, world);
  }
};

/// What the plans of a run exercised.
struct coverage {
  int max_sp = 1;
  bool other_size = false;  // a step on a group whose size is not a power of two
  int max_ring = 1;  // largest Ulysses x Ring ring of a step
  std::size_t max_sequences_per_step = 0;
  int max_checkpointed = 0;
  bool uneven_shards = false;
  bool unequal_accumulation = false;  // ranks ran different numbers of micro-steps
};

template <class T>
struct run_result {
  std::vector<T> params_after_first;
  std::vector<double> losses;
  coverage cov;
};

/// Trains `s.steps` batches on this rank of `world` under a scheduler with `policies`.
template <class T, class Policies, class Comm>
run_result<T> run_planned(Comm& world, const setup& s, Policies policies, recompute_mode mode) {
  dcp::scheduler<dcp::transformer_spec, Comm, Policies> sched(s.spec(), world, s.options(world.size()), policies);
  sched.set_dataset(s.dataset());
  tiny_transformer<T> model(s.model);
  optimizer<T> opt(s.opt, model.params().size());
  run_result<T> r;
  for (int i = 0; i < s.steps; ++i) {
    const auto batch = sched.sampler().next();
    const auto sum = train_step(sched, model, opt, s.data, batch.sequences, mode);
    r.losses.push_back(sum.loss);
    if (i == 0) r.params_after_first = model.params();
    std::vector<std::size_t> per_rank(size_t(world.size()), 0);
    for (const auto& st : sum.plan.steps) {
      r.cov.max_sp = std::max(r.cov.max_sp, st.sp());
      if ((st.sp() & (st.sp() - 1)) != 0) r.cov.other_size = true;
      r.cov.max_ring = std::max(r.cov.max_ring, st.ring);
      r.cov.max_sequences_per_step = std::max(r.cov.max_sequences_per_step, st.sequences.size());
      if (mode == recompute_mode::plan) r.cov.max_checkpointed = std::max(r.cov.max_checkpointed, st.checkpointed_blocks);
      std::int64_t tokens = 0;
      for (const auto& q : st.sequences) tokens += q.tokens;
      if (tokens % st.sp() != 0) r.cov.uneven_shards = true;
      for (int k = st.ranks.first; k < st.ranks.end(); ++k) ++per_rank[size_t(k)];
    }
    if (mode == recompute_mode::all) r.cov.max_checkpointed = s.model.blocks;
    if (std::ranges::min(per_rank) != std::ranges::max(per_rank)) r.cov.unequal_accumulation = true;
  }
  return r;
}

/// Single-process full-batch training on the same batches.
template <class T>
run_result<T> run_reference(const setup& s, int world) {
  tiny_transformer<T> model(s.model);
  optimizer<T> opt(s.opt, model.params().size());
  run_result<T> r;
  for (const auto& batch : s.batches(world)) {
    r.losses.push_back(reference_step(model, opt, s.data, batch));
    if (r.params_after_first.empty()) r.params_after_first = model.params();
  }
  return r;
}

/// max |a - b| / max |b| over the vector.
template <class T>
double relative_difference(const std::vector<T>& a, const std::vector<T>& b) {
  double num = 0, den = 0;
  for (std::size_t i = 0; i < a.size() && i < b.size(); ++i) {
    num = std::max(num, std::abs(double(a[i]) - double(b[i])));
    den = std::max(den, std::abs(double(b[i])));
  }
  return a.size() == b.size() ? num / std::max(den, 1e-300) : INFINITY;
}
inline double relative_difference(double a, double b) { return std::abs(a - b) / std::max(std::abs(b), 1e-300); }

/// A Ulysses x Ring problem (DESIGN section 4.3): 2 heads cap Ulysses at u = 2, and the long
/// sequences hold more tokens than two ranks fit even with every block checkpointed, so only a
/// u x r step can train them (up to 200 tokens: sp = 4 = 2 x 2; up to 400: also sp = 8 = 2 x 4).
inline setup ring_setup(bool causal, int max_len = 200) {
  setup s;
  s.model.heads = 2;
  s.model.causal = causal;
  s.model.max_len = max_len + 56;
  s.data.min_len = 24;
  s.data.max_len = max_len;
  s.batch_tokens = 12 * max_len / 5;
  s.fit_tokens = 20;
  s.steps = 2;
  return s;
}
/// The dcp planner over an analytic cost model whose rings reach `ring`.
inline dcp::default_policies ring_policies(const setup& s, int world, int ring) {
  dcp::default_policies p;
  const dcp::device_spec device = s.options(world).device;
  p.cost = dcp::make_analytic_cost(s.spec(), device,
                                   dcp::parallel_layout{.gpus = world, .gpus_per_node = device.gpus_per_node, .ring = ring});
  return p;
}
/// The longest sequence of the run's batches that no step without a ring can hold: it does
/// not fit on u_max = heads ranks even with every block checkpointed (0 if none).
inline std::int64_t longest_needing_ring(const setup& s, int world) {
  const dcp::analytic_cost c = s.cost(world);
  const int u_max = std::min(world, s.model.heads);
  std::int64_t longest = 0;
  for (const auto& batch : s.batches(world))
    for (const auto& q : batch)
      if (c.memory(c.load_of(q), u_max, c.blocks()) > c.capacity()) longest = std::max(longest, q.shape_tokens());
  return longest;
}

/// A bucket or packed planner tuned on the run's dataset, as a user would.
template <class Planner>
Planner tuned(const setup& s, int world) {
  const auto data = s.dataset();
  return dcp::tune(Planner{}, s.cost(world), std::span<const dcp::sequence>(data), s.batch_tokens, s.options(world).seed);
}

}  // namespace equivalence
