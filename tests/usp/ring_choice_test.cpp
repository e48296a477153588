// Ulysses x Ring choices (DESIGN section 4.3): any legal ring of a step prices as an independent
// transcription (1D, 2D and cross-attention models), the dcp planner's fastest ring is never
// slower than the smallest, every plan stays valid, and the lower bounds (with zero3's per-step
// floor, section 3) stay below every planner's makespan.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <iostream>
#include <span>
#include <string>
#include <vector>

#include <dcp/cost/analytic.hpp>
#include <dcp/model/transformer.hpp>
#include <dcp/plan/bucket_planner.hpp>
#include <dcp/plan/check_plan.hpp>
#include <dcp/plan/dcp_planner.hpp>
#include <dcp/plan/dynamic_cp_planner.hpp>
#include <dcp/plan/lower_bounds.hpp>
#include <dcp/plan/packed_planner.hpp>
#include <dcp/plan/sequence_options.hpp>
#include <dcp/random.hpp>
#include <dcp/workload/tuning.hpp>

namespace {

using dcp::analytic_cost;
using dcp::sharding_kind;

analytic_cost make(const std::string& model, int gpus, int tp, int ring, sharding_kind sharding = sharding_kind::zero1) {
  return dcp::make_analytic_cost(dcp::models::preset(model), dcp::devices::h200_analytic(),
                                 {.gpus = gpus, .tp = tp, .sharding = sharding, .ring = ring});
}

dcp::analytic_load load_of(const analytic_cost& c, std::span<const dcp::sequence> seqs) {
  dcp::analytic_load l{};
  for (const auto& s : seqs) l = l + c.load_of(s);
  return l;
}

// A 1D sequence, or for a 2D model a T x S clip.
dcp::sequence random_sequence(const analytic_cost& c, dcp::xoshiro256ss& g, std::int64_t id, double longest) {
  if (c.model.attention == dcp::attention_kind::factorized_2d) {
    const std::int64_t t = 1 + static_cast<std::int64_t>(dcp::uniform_below(g, 64));
    const std::int64_t s = 1 + static_cast<std::int64_t>(std::exp(dcp::uniform01(g) * std::log(std::max(2.0, longest / t))));
    return dcp::make_sequence(id, t, s);
  }
  // Cross-attention prices each sequence's text K/V projections at the step's efficiency, so a
  // sequence of a few tokens alone is slower than inside a larger step and the bound's "a step
  // lasts at least its members' alone times" fails below a few hundred tokens: start at 1024.
  const double shortest = c.model.cross_attention_tokens > 0 ? 1024 : 1;
  return dcp::make_sequence(id, static_cast<std::int64_t>(
                                    shortest * std::exp(dcp::uniform01(g) * std::log(std::max(longest / shortest, 1.0)))));
}

// DESIGN 4.3 transcribed from the text for u x r = (sp / r) x r, zero1, ep = 1, including its
// 2D rule (only the temporal blocks ring: their attention overlaps half the messages) and its
// cross-attention rule (only self-attention rings; the text K/V stay local).
double reference_time(const analytic_cost& c, std::span<const dcp::sequence> seqs, int sp, int k, int r) {
  const auto& m = c.model;
  const auto& dv = c.device;
  const double L = m.blocks, h = static_cast<double>(m.hidden), tp = c.parallel.tp;
  const double d = m.head_dim > 0 ? m.head_dim : h / m.heads;
  const int kvh = m.kv_heads > 0 ? m.kv_heads : m.heads;
  const double q = m.heads * d, kv = kvh * d, ct = m.cross_attention_tokens;
  const bool two_d = m.attention == dcp::attention_kind::factorized_2d;
  const int u = sp / r;
  double n_tok = 0, a = 0, a_ring = 0;
  for (const auto& s : seqs) {
    const double n = static_cast<double>(c.tokens_of(s));
    n_tok += n;
    if (two_d) {
      const double tt = static_cast<double>(s.frames), ss = static_cast<double>(s.spatial);
      a += (L / 2) * 4 * q * tt * ss * ss + (L / 2) * 4 * q * ss * tt * tt;
      a_ring += (L / 2) * 4 * q * ss * tt * tt;
    } else {
      const double self = L * (m.attention == dcp::attention_kind::causal ? 2 : 4) * q * n * n;
      a += self + L * (4 * q * n * ct + 4 * h * kv * ct);
      a_ring += self;
    }
  }
  const double p_act = 2 * h * q + 2 * h * kv + (ct > 0 ? 2 * h * q : 0) + m.mlp_matrices * h * m.mlp_width;
  const double f = L * 2 * p_act * n_tok + a;
  const double x = n_tok / sp, eff = dv.eff_max * x / (x + dv.x_half);
  auto bw = [&](double gpus) { return gpus <= dv.gpus_per_node ? dv.bw_intra : dv.bw_inter; };
  const double f_v = 2 * static_cast<double>(m.vocab) * h * n_tok;  // the LM head (DESIGN 4.1)
  const double t_comp = ((3 + k / L) * f + 3 * f_v) / (sp * tp * dv.peak * eff);
  double t_u = 0;
  if (u > 1) {
    const double w = two_d ? h / tp : (2 * q / tp + 2 * (kvh / c.parallel.tp >= u ? kv / tp : d * u)) / 4;
    t_u = (two_d ? 2 : 4) * (2 * L + k) * (dv.alpha + 2 * w * x * (u - 1) / u / bw(u * tp));
  }
  double t_att = 0, t_ring = 0;
  if (r > 1) {
    t_att = (3 + k / L) * a_ring / (sp * tp * dv.peak * eff);
    const double kv_u = kvh / c.parallel.tp >= u ? kv / (tp * u) : d;
    t_ring = (two_d ? 0.5 : 1.0) * (3 * L + k) * (r - 1) * (dv.alpha + 4 * kv_u * n_tok / r / bw(sp * tp));
  }
  double t_tp = 0;
  if (c.parallel.tp > 1)
    t_tp =
        ((ct > 0 ? 6 : 4) * (2 * L + k) + (m.vocab > 0 ? 4 : 0)) * (dv.alpha + 2 * h * x * (tp - 1) / tp / dv.bw_intra);
  return t_comp - t_att + std::max(t_att, t_ring) + t_u + t_tp + dv.tau * (3 * L + k);
}

// Every legal ring of every legal sp prices as the transcription; the smallest ring is the
// three-argument price bit for bit; the floor of each ring stays below sp t where the step fits.
TEST(RingChoice, EveryLegalRingMatchesTranscription) {
  const std::uint64_t seed = 20261130;
  std::cout << "[     SEED ] " << seed << "\n";
  dcp::xoshiro256ss g(seed);
  const analytic_cost costs[] = {make("llama3-8b", 64, 1, 8),  make("llama3-70b", 256, 8, 4), make("stdit3-xl", 64, 1, 4),
                                 make("wan2.1-14b", 64, 1, 8), make("wan2.1-14b", 128, 2, 4), make("cogvideox-5b", 64, 1, 2)};
  int checked = 0, wider = 0;
  for (const auto& c : costs) {
    const auto sps = dcp::legal_sp_sizes(c);
    for (int trial = 0; trial < 30; ++trial) {
      std::vector<dcp::sequence> seqs;
      const int b = 1 + static_cast<int>(dcp::uniform_below(g, 3));
      for (int i = 0; i < b; ++i) seqs.push_back(random_sequence(c, g, i, 2e6));
      const auto l = load_of(c, seqs);
      const int sp = sps[dcp::uniform_below(g, sps.size())];
      const int k = static_cast<int>(dcp::uniform_below(g, static_cast<std::uint64_t>(c.blocks()) + 1));
      EXPECT_EQ(c.time(l, sp, k, dcp::step_ring_of(c, sp)), c.time(l, sp, k)) << c << " sp " << sp;
      EXPECT_EQ(c.work_floor(l, sp, k, dcp::step_ring_of(c, sp)), c.work_floor(l, sp, k));
      for (int r = dcp::step_ring_of(c, sp); r <= dcp::widest_ring_of(c, sp) && sp % r == 0; r *= 2) {
        ASSERT_TRUE(dcp::legal_ring(c, sp, r));
        ASSERT_EQ(c.heads() % (sp / r), 0) << c << " sp " << sp << " r " << r;
        const double t = c.time(l, sp, k, r), ref = reference_time(c, seqs, sp, k, r);
        EXPECT_NEAR(t, ref, 1e-12 * ref) << c << " sp " << sp << " k " << k << " r " << r;
        if (c.memory(l, sp, k) <= c.capacity()) {
          EXPECT_LE(c.work_floor(l, sp, k, r), sp * t * (1 + 1e-12));
        }
        ++checked;
        wider += r > dcp::step_ring_of(c, sp);
      }
      EXPECT_FALSE(dcp::legal_ring(c, sp, 2 * dcp::widest_ring_of(c, sp)));
    }
  }
  EXPECT_GT(wider, 100);
  std::cout << checked << " (step, ring) prices, " << wider << " with a wider ring than the smallest\n";
}

// The dcp planner picks each step's fastest legal ring: never slower than the smallest ring of
// its sp, every plan valid; some steps do take a wider ring (their Ulysses part stays on a node).
TEST(RingChoice, FastestRingIsNeverWorseAndPlansStayValid) {
  const std::uint64_t seed = 1130;
  std::cout << "[     SEED ] " << seed << "\n";
  dcp::xoshiro256ss g(seed);
  const analytic_cost costs[] = {make("llama3-8b", 64, 1, 8), make("llama3-70b", 256, 8, 8), make("wan2.1-14b", 64, 1, 4),
                                 make("stdit3-xl", 32, 1, 2), make("llama3-8b", 32, 1, 4, sharding_kind::zero3)};
  int steps = 0, wider = 0;
  for (const auto& c : costs) {
    const double longest = 0.9 * static_cast<double>(dcp::largest_feasible_tokens(c));
    for (int trial = 0; trial < 3; ++trial) {
      std::vector<dcp::sequence> batch;
      const int count = 4 + static_cast<int>(dcp::uniform_below(g, 60));
      for (int i = 0; i < count; ++i) batch.push_back(random_sequence(c, g, i, longest));
      const std::span<const dcp::sequence> b(batch);
      const dcp::plan p = dcp::dcp_planner{}.plan(c, b);
      const auto v = dcp::plan_violations(p, b, c);
      EXPECT_TRUE(v.empty()) << c << ": " << (v.empty() ? "" : v.front());
      for (const auto& st : p.steps) {
        if (st.sequences.empty()) continue;  // a padding pass of a zero3 plan (lockstep, DESIGN 3.7)
        std::vector<dcp::sequence> seqs;
        for (const auto& q : st.sequences) seqs.push_back(batch[static_cast<std::size_t>(q.id)]);
        const auto l = load_of(c, seqs);
        const int sp = st.sp(), k = st.checkpointed_blocks;
        EXPECT_TRUE(dcp::legal_ring(c, sp, st.ring)) << c << " sp " << sp << " ring " << st.ring;
        EXPECT_LE(st.time_s, c.time(l, sp, k) * (1 + 1e-12)) << c << " sp " << sp << ": slower than the smallest ring";
        for (int r = dcp::step_ring_of(c, sp); r <= dcp::widest_ring_of(c, sp); r *= 2)
          EXPECT_LE(st.time_s, c.time(l, sp, k, r) * (1 + 1e-12)) << c << " sp " << sp << " r " << r;
        ++steps;
        wider += st.ring > dcp::step_ring_of(c, sp);
      }
      EXPECT_LE(p.joint_lower_bound_s, p.makespan_s * (1 + 1e-9));
    }
  }
  EXPECT_GT(wider, 0);
  std::cout << steps << " steps, " << wider << " on a wider ring than the smallest of their sp\n";
}

// Section 3 with zero3: every step lasts at least t_z3 and holds at most x_max tokens per unit,
// so the bounds count sum_i N_i t_z3 / x_max; they stay below every planner's makespan.
TEST(RingChoice, ZeroThreeBoundsStayBelowEveryPlanner) {
  const std::uint64_t seed = 3303;
  std::cout << "[     SEED ] " << seed << "\n";
  dcp::xoshiro256ss g(seed);
  // A slow network (1 GB/s across nodes) on two nodes: there the weight gathers, not compute,
  // set the time of a full step, so the share binds on a batch of 1.5 x_max tokens per unit.
  auto slow = dcp::devices::h200_analytic();
  slow.bw_inter = 1e9;
  const auto gather_bound =
      dcp::make_analytic_cost(dcp::models::preset("llama3-8b"), slow, {.gpus = 16, .sharding = sharding_kind::zero3});
  const analytic_cost costs[] = {make("llama3-8b", 32, 1, 1, sharding_kind::zero3),
                                 make("llama3-70b", 128, 8, 1, sharding_kind::zero3),
                                 make("wan2.1-14b", 64, 1, 1, sharding_kind::zero3),
                                 make("llama3-8b", 64, 1, 4, sharding_kind::zero3), gather_bound};
  int binding = 0, plans = 0;
  for (const auto& c : costs) {
    const bool dense = &c == &costs[4];
    const double longest = 0.8 * static_cast<double>(dcp::largest_feasible_tokens(c));
    for (int trial = 0; trial < 3; ++trial) {
      std::vector<dcp::sequence> batch;
      const int count = dense ? static_cast<int>(1.5 * c.gpus() * c.max_tokens_per_gpu() / 8192)
                              : 1 + static_cast<int>(dcp::uniform_below(g, 60));
      for (int i = 0; i < count; ++i)
        batch.push_back(dense ? dcp::make_sequence(i, 4096 + static_cast<std::int64_t>(dcp::uniform_below(g, 8192)))
                              : random_sequence(c, g, i, trial == 0 ? 8192.0 : longest));
      const std::span<const dcp::sequence> b(batch);
      const auto bounds = dcp::lower_bounds(c, b);
      double shares = 0;
      for (const auto& s : batch) shares += c.step_floor_share(c.load_of(s));
      EXPECT_GE(bounds.simple_s, shares / c.gpus() * (1 - 1e-12));
      EXPECT_GE(bounds.joint_s, bounds.simple_s);
      binding += shares / c.gpus() >= bounds.simple_s * (1 - 1e-12);
      dcp::bucket_planner bucket;
      dcp::packed_planner packed;
      dcp::dcp_planner no_inter;
      no_inter.inter = false;
      const dcp::plan ps[] = {dcp::dcp_planner{}.plan(c, b), no_inter.plan(c, b), dcp::tune(bucket, c, b).plan(c, b),
                              dcp::tune(packed, c, b).plan(c, b), dcp::tune(dcp::dynamic_cp_planner{}, c, b).plan(c, b)};
      for (const auto& p : ps) {
        const auto v = dcp::plan_violations(p, b, c);
        EXPECT_TRUE(v.empty()) << p.method << " on " << c << ": " << (v.empty() ? "" : v.front());
        EXPECT_LE(bounds.joint_s, p.makespan_s * (1 + 1e-9)) << p.method << " on " << c << " trial " << trial;
        ++plans;
      }
    }
  }
  EXPECT_GE(binding, 3) << "the zero3 share should set the bound on the gather-bound batches";
  std::cout << plans << " plans; the zero3 share set the simple bound on " << binding << " batches\n";
}

}  // namespace
