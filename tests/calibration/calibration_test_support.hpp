#pragma once
// Helpers of the calibration tests: a seeded generator (printed), random steps, a synthetic
// "true" clock (a fitted_cost with known coefficients), and a calibrated training loop that
// runs on any host communicator (local threads or MPI).

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <iostream>
#include <memory>
#include <optional>
#include <random>
#include <span>
#include <vector>

#include <gtest/gtest.h>

#include <dcp/cost/calibration.hpp>
#include <dcp/cost/fit.hpp>
#include <dcp/cost/fitted_cost.hpp>
#include <dcp/scheduler.hpp>
#include <dcp/sequence.hpp>

namespace calib_test {

/// mt19937_64's raw output (the same on every standard library) with portable draws.
class rng {
 public:
  using result_type = std::uint64_t;
  explicit rng(std::uint64_t seed) : g_(seed) { std::cout << "[     SEED ] " << seed << '\n'; }
  static constexpr result_type min() { return 0; }
  static constexpr result_type max() { return ~result_type{0}; }
  result_type operator()() { return g_(); }
  double unit() { return static_cast<double>(g_() >> 11) * 0x1.0p-53; }
  std::int64_t between(std::int64_t lo, std::int64_t hi) { return lo + static_cast<std::int64_t>(unit() * double(hi - lo + 1)); }
  double log_between(double lo, double hi) { return std::exp(std::log(lo) + (std::log(hi) - std::log(lo)) * unit()); }

 private:
  std::mt19937_64 g_;
};

/// The prior: the analytic model of `model` on H200 with `gpus` GPUs.
inline dcp::fitted_cost prior(int gpus, dcp::transformer_spec model = dcp::models::cogvideox_5b()) {
  return dcp::make_fitted_cost(dcp::make_analytic_cost(std::move(model), dcp::devices::h200_analytic(), gpus));
}

/// A truth: the prior with every coefficient scaled by a factor in [0.5, 2] (memory by [0.9, 1.2]),
/// checkpoint bytes kept below activation bytes.
inline dcp::fitted_cost scaled_truth(const dcp::fitted_cost& p, rng& g) {
  dcp::fitted_cost t = p;
  auto tt = t.coef.time_array();
  for (double& v : tt) v *= g.log_between(0.5, 2.0);
  t.coef.set_time(tt);
  auto mm = t.coef.memory_array();
  for (double& v : mm) v *= 0.9 + 0.3 * g.unit();
  mm[2] = std::min(mm[2], mm[1]);
  t.coef.set_memory(mm);
  return t;
}

/// A random step of 1-4 sequences on a legal sp (intra and inter node) with random k.
inline dcp::step_observation random_step(const dcp::fitted_cost& c, rng& g) {
  dcp::step_observation o;
  std::vector<int> sps;
  for (int sp = 1; sp <= c.gpus(); sp *= 2)
    if (dcp::legal_sp(c, sp)) sps.push_back(sp);
  o.sp = sps[std::size_t(g.between(0, std::int64_t(sps.size()) - 1))];
  o.checkpointed_blocks = int(g.between(0, c.blocks()));
  for (auto j = g.between(1, 4); j > 0; --j)
    o.load = o.load + c.load_of(dcp::make_sequence(j, std::int64_t(g.log_between(64, 120000))));
  return o;
}

/// `count` steps measured on `truth` (seconds and peak bytes exact).
inline std::vector<dcp::step_observation> observe_on(const dcp::fitted_cost& truth, int count, rng& g) {
  std::vector<dcp::step_observation> out;
  for (int i = 0; i < count; ++i) {
    auto o = random_step(truth, g);
    o.seconds = truth.time(o.load, o.sp, o.checkpointed_blocks);
    o.peak_bytes = truth.memory(o.load, o.sp, o.checkpointed_blocks);
    out.push_back(o);
  }
  return out;
}

/// A global batch of `count` 1D sequences (ids from `first_id`), 256 to `longest` tokens.
inline dcp::dataset random_batch(rng& g, int count, std::int64_t first_id, double longest = 65536) {
  dcp::dataset b;
  for (int i = 0; i < count; ++i) b.push_back(dcp::make_sequence(first_id + i, std::int64_t(g.log_between(256, longest))));
  return b;
}

/// Plans `batches` global batches with calibration on, runs each on `truth` (rank `slow` at
/// speed 0.75, the gang at its slowest member), and observes this rank's steps in an order
/// shuffled per rank; `silent` (if >= 0) never observes. With `host`, observations are exchanged
/// and plans verified over it (`plan(batch, host)`, as an NCCL world needs) instead of `world`.
/// Returns each batch's plan hash (verified across ranks) and the calibrator as it ended. Every
/// rank must pass the same batches.
struct loop_result {
  std::vector<std::uint64_t> hashes;
  std::optional<dcp::calibrator> state;
};
template <class Comm, class Host = Comm>
loop_result calibrated_loop(Comm& world, const std::vector<dcp::dataset>& batches, const dcp::fitted_cost& truth,
                            int slow, int silent, Host* host = nullptr) {
  dcp::scheduler_options o;
  o.calibration.enabled = true;
  using sched_t = dcp::scheduler<dcp::transformer_spec, Comm>;
  auto sched = std::make_unique<sched_t>(dcp::models::cogvideox_5b(), world, o);
  rng order(1000 + std::uint64_t(world.rank()));
  loop_result out;
  for (const auto& batch : batches) {
    const dcp::plan p = host ? sched->plan(batch, *host) : sched->plan(batch);
    if (host) sched->verify(p, *host);
    else sched->verify(p);  // throws on every rank when plans diverge
    out.hashes.push_back(p.hash());
    auto steps = sched->steps_for(p);
    std::shuffle(steps.begin(), steps.end(), order);
    if (world.rank() == silent) continue;
    for (const auto& s : steps) {
      dcp::analytic_load l{};
      for (const auto& q : s.sequences) l = l + truth.load_of({q.id, q.frames, q.spatial});
      double t = truth.time(l, s.sp(), s.checkpointed_blocks);
      if (s.ranks.contains(slow)) t /= 0.75;
      sched->observe(s, t, truth.memory(l, s.sp(), s.checkpointed_blocks));
    }
  }
  // The calibrator refits at the next plan: make one more so the last batch counts.
  (void)(host ? sched->plan(batches.front(), *host) : sched->plan(batches.front()));
  out.state = *sched->calibration();
  return out;
}

}  // namespace calib_test
