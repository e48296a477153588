// The scheduler's communicators on a tensor- and expert-parallel layout, checked on any host
// communicator (local threads or MPI processes): the fixed TP, EP, data-parallel and expert
// data-parallel groups and every step's group, Ulysses group and ring hold exactly the GPUs
// DESIGN section 4.4 names, in GPU order, the same on every member, partitioning the world; an
// all-reduce over each sums exactly its members' ranks.
#pragma once

#include <algorithm>
#include <bit>
#include <cstdint>
#include <numeric>
#include <random>
#include <span>
#include <sstream>
#include <string>
#include <vector>

#include <dcp/cost/analytic.hpp>
#include <dcp/plan/plan.hpp>
#include <dcp/scheduler.hpp>

namespace dcp_test {

struct layout_case {
  int gpus = 1, gpus_per_node = 1, tp = 1, ep = 1;
};

inline std::ostream& operator<<(std::ostream& os, const layout_case& c) {
  return os << "N=" << c.gpus << " G=" << c.gpus_per_node << " tp=" << c.tp << " ep=" << c.ep;
}

// A small MoE model every layout fits: 8 heads (tp up to 8), 16 experts (ep up to 16).
inline dcp::transformer_spec tiny_moe() {
  dcp::transformer_spec m{"tiny-moe", 2, 256, 8, 512, 3, dcp::attention_kind::causal, 0};
  m.experts = 16, m.experts_per_token = 2, m.expert_width = 128;
  return m;
}

// The world ranks of `rank`'s group of each kind, in GPU order, from the DESIGN formulas.
inline std::vector<int> expected_members(const std::string& kind, const layout_case& c, int rank) {
  const int tp = c.tp, units = c.gpus / tp, u = rank / tp, t = rank % tp;
  std::vector<int> out;
  if (kind == "tp")
    for (int i = 0; i < tp; ++i) out.push_back(u * tp + i);
  else if (kind == "ep")
    for (int i = 0; i < c.ep; ++i) out.push_back((u / c.ep * c.ep + i) * tp + t);
  else if (kind == "dp")
    for (int i = 0; i < units; ++i) out.push_back(i * tp + t);
  else if (kind == "edp")
    for (int i = u % c.ep; i < units; i += c.ep) out.push_back(i * tp + t);
  return out;
}

// Members of `g` (world ranks) in its rank order, and the all-reduced sum of their world ranks.
template <class Comm>
std::vector<int> members_of(Comm& g, int world_rank, std::int64_t& sum) {
  std::vector<int> m(static_cast<std::size_t>(g.size()));
  g.all_gather(std::span<const int>(&world_rank, 1), std::span<int>(m));
  std::int64_t v = world_rank;
  g.all_reduce(std::span<std::int64_t>(&v, 1), dcp::reduce_op::sum);
  sum = v;
  return m;
}

// Every failure found on this rank (empty: all good). Collective over `world`.
template <class Comm>
std::vector<std::string> check_parallel_groups(Comm& world, const layout_case& c, std::uint64_t seed) {
  std::vector<std::string> bad;
  auto fail = [&](const std::string& what) {
    std::ostringstream os;
    os << "rank " << world.rank() << " (" << c << ", seed " << seed << "): " << what;
    bad.push_back(os.str());
  };
  auto show = [](const std::vector<int>& v) {
    std::string s = "[";
    for (int x : v) s += std::to_string(x) + " ";
    return s + "]";
  };
  dcp::device_spec dev = dcp::devices::h200_analytic();
  dev.gpus_per_node = c.gpus_per_node;
  const auto model = tiny_moe();
  const auto cost = dcp::make_analytic_cost(model, dev, {.gpus = c.gpus, .gpus_per_node = dev.gpus_per_node, .tp = c.tp, .ep = c.ep});
  dcp::scheduler_options opt;
  opt.device = dev;
  dcp::scheduler<dcp::transformer_spec, Comm> sched(model, world, cost, opt);
  if (sched.tp() != c.tp || sched.ep() != c.ep) fail("scheduler reports tp " + std::to_string(sched.tp()));

  const int n = world.size(), rank = world.rank();
  // Fixed groups: members, sums, and a world-wide table (row r: rank r's group) to check that
  // every member sees the same group and the groups partition the world.
  struct kind_comm {
    const char* kind;
    Comm* comm;
  };
  const kind_comm kinds[] = {{"tp", &sched.tp_group()},
                             {"ep", &sched.ep_group()},
                             {"dp", &sched.data_parallel_group()},
                             {"edp", &sched.expert_data_parallel_group()}};
  for (const auto& [kind, comm] : kinds) {
    std::int64_t sum = 0;
    const auto got = members_of(*comm, rank, sum);
    const auto want = expected_members(kind, c, rank);
    if (got != want) fail(std::string(kind) + " group " + show(got) + ", expected " + show(want));
    if (sum != std::accumulate(want.begin(), want.end(), std::int64_t{0}))
      fail(std::string(kind) + " all-reduce sums to " + std::to_string(sum));
    std::vector<int> table(static_cast<std::size_t>(n) * static_cast<std::size_t>(n), 0);
    for (int m : got) table[static_cast<std::size_t>(rank) * static_cast<std::size_t>(n) + static_cast<std::size_t>(m)] = 1;
    world.all_reduce(std::span<int>(table), dcp::reduce_op::sum);
    auto row = [&](int r) {
      return std::vector<int>(table.begin() + std::ptrdiff_t(r) * n, table.begin() + std::ptrdiff_t(r + 1) * n);
    };
    for (int r = 0; r < n; ++r) {
      if (row(r)[static_cast<std::size_t>(r)] != 1) fail(std::string(kind) + ": rank " + std::to_string(r) + " not in its own group");
      for (int s = 0; s < n; ++s)
        if (row(r)[static_cast<std::size_t>(s)] == 1 && row(s) != row(r))
          fail(std::string(kind) + ": ranks " + std::to_string(r) + " and " + std::to_string(s) + " disagree on their group");
    }
  }
  // Repeated asks are lookups of the same communicators.
  if (&sched.tp_group() != kinds[0].comm) fail("tp_group() is not cached");

  // A plan over every block of every size, each with a random ring (power of two dividing sp).
  std::mt19937_64 rng(seed);
  const int units = c.gpus / c.tp;
  dcp::plan p;
  p.method = "groups", p.gpus = units, p.gpus_per_node = std::max(1, c.gpus_per_node / c.tp);
  p.layout = sched.layout();
  for (int sp = 1; sp <= units; sp *= 2)
    for (int b = 0; b < units / sp; ++b) {
      dcp::plan_step st;
      st.ranks = {b * sp, sp};
      st.ring = 1 << std::uniform_int_distribution<int>(0, std::countr_zero(unsigned(sp)))(rng);
      p.steps.push_back(st);
    }
  const auto steps = sched.steps_for(p);
  if (steps.size() != static_cast<std::size_t>(std::countr_zero(unsigned(units)) + 1))
    fail("steps_for gave " + std::to_string(steps.size()) + " steps");
  const int unit = rank / c.tp, t = rank % c.tp;
  for (const auto& s : steps) {
    const int f = s.ranks.first, sp = s.sp(), r = s.ring, u = sp / r, pos = unit - f;
    std::vector<int> all, uly, ring;
    for (int g = s.gpus().first; g < s.gpus().end(); ++g) all.push_back(g);
    for (int a = 0; a < u; ++a) uly.push_back((f + pos / u * u + a) * c.tp + t);
    for (int b = 0; b < r; ++b) ring.push_back((f + pos % u + b * u) * c.tp + t);
    if (s.group_rank != pos || s.tp_rank != t || s.tp() != c.tp) fail("step " + std::to_string(s.index) + " positions");
    std::int64_t sum = 0;
    const std::string where = "step sp " + std::to_string(sp) + " = " + std::to_string(u) + " x " + std::to_string(r);
    if (const auto got = members_of(s.comm(), rank, sum); got != all) fail(where + " group " + show(got) + " != " + show(all));
    if (const auto got = members_of(s.ulysses_comm(), rank, sum); got != uly)
      fail(where + " Ulysses group " + show(got) + " != " + show(uly));
    if (r > 1 || c.tp > 1)
      if (const auto got = members_of(s.ring_comm(), rank, sum); got != ring)
        fail(where + " ring " + show(got) + " != " + show(ring));
  }
  return bad;
}

}  // namespace dcp_test
