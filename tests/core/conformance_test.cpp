// One conformance suite per concept: every shipped model of the concept passes the same typed
// tests of the laws its concept documents. A new model joins by adding a `sample<T>`
// specialisation (random instances) and its type to the suite's list.

#include "core_test_support.hpp"

#include <dcp/bucketing/bucketing_concepts.hpp>
#include <dcp/bucketing/fixed_edges_bucketing.hpp>
#include <dcp/bucketing/geometric_bucketing.hpp>
#include <dcp/bucketing/quantile_bucketing.hpp>
#include <dcp/cost/analytic.hpp>
#include <dcp/cost/cost_concepts.hpp>
#include <dcp/cost/cost_sum.hpp>
#include <dcp/cost/fitted_cost.hpp>
#include <dcp/cost/profiled_cost.hpp>
#include <dcp/group/buddy_groups.hpp>
#include <dcp/group/group_concepts.hpp>
#include <dcp/model/model_concepts.hpp>
#include <dcp/model/transformer.hpp>
#include <dcp/plan/sequence_options.hpp>
#include <dcp/recompute/full_recompute.hpp>
#include <dcp/recompute/no_recompute.hpp>
#include <dcp/recompute/recompute_concepts.hpp>
#include <dcp/recompute/selective_recompute.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <concepts>
#include <cstdint>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

namespace {

using dcp_test::rng;

// --- opt-in: structure alone never models a concept ------------------------------------------------

struct cost_lookalike {  // every expression of cost_model, but no tag
  using load_type = dcp::analytic_load;
  dcp::analytic_load load_of(const dcp::sequence&) const { return {}; }
  std::int64_t tokens_of(const dcp::sequence&) const { return 0; }
  double time(const load_type&, int, int) const { return 0; }
  double memory(const load_type&, int, int) const { return 0; }
  double work_floor(const load_type&, int, int) const { return 0; }
  double capacity() const { return 0; }
  int blocks() const { return 1; }
  int gpus() const { return 1; }
  int gpus_per_node() const { return 1; }
  int heads() const { return 1; }
};
struct bucketing_lookalike {
  std::size_t bucket_count() const { return 1; }
  std::size_t bucket_of(std::int64_t) const { return 0; }
  std::int64_t representative(std::size_t) const { return 1; }
};
struct recompute_lookalike {
  std::optional<int> choose(const dcp::analytic_cost&, const dcp::analytic_load&, int) const { return 0; }
  bool operator==(const recompute_lookalike&) const = default;
};
struct wrong_tag_recompute : recompute_lookalike {
  using policy_concept = dcp::bucketing_tag;
};

static_assert(!dcp::cost_model<cost_lookalike>);
static_assert(!dcp::bucketing<bucketing_lookalike>);
static_assert(!dcp::recompute_policy<recompute_lookalike>);
static_assert(!dcp::recompute_policy<wrong_tag_recompute>);
// Models of one axis never model another.
static_assert(!dcp::cost_model<dcp::geometric_bucketing>);
static_assert(!dcp::bucketing<dcp::analytic_cost>);
static_assert(!dcp::recompute_policy<dcp::buddy_groups>);
static_assert(!dcp::group_manager<dcp::selective_recompute>);
static_assert(!dcp::model_spec<dcp::device_spec>);
static_assert(!dcp::model_spec<dcp::analytic_cost>);

// --- random instances of each shipped model --------------------------------------------------------

template <class T>
struct sample;

template <>
struct sample<dcp::analytic_cost> {
  static dcp::analytic_cost draw(rng& g) { return dcp_test::random_cost(g); }
};
// A profile measured on a random analytic job: every (length, batch, sp, k) of one grid, so the
// laws hold wherever the table interpolates (lengths 1..2^23 tokens cover every drawn step).
template <>
struct sample<dcp::profiled_cost> {
  static dcp::profiled_cost draw(rng& g) {
    const dcp::analytic_cost c = dcp_test::random_cost(g);
    dcp::profile_table t;
    t.model = c.model;
    t.device = c.device.name;
    t.gpus = c.gpus();
    t.gpus_per_node = c.gpus_per_node();
    t.memory_capacity_bytes = c.capacity();
    t.static_memory_bytes = c.static_memory();
    const int L = c.blocks();
    const int ks[] = {0, L / 2, L};
    for (std::int64_t n = 1; n <= (std::int64_t(1) << 23); n *= 2) {
      const dcp::sequence s = dcp::make_sequence(0, n);
      for (int sp = 1; sp <= c.gpus(); sp *= 2) {
        if (!dcp::legal_sp(c, sp)) continue;
        for (int b : {1, 2})
          for (int k : ks) {
            const auto load = dcp::repeated_load<dcp::analytic_cost>(c.load_of(s), b);
            t.entries.push_back({0, c.tokens_of(s), s.frames, s.spatial, sp, b, k, c.time(load, sp, k),
                                 c.memory(load, sp, k)});
          }
      }
    }
    return dcp::make_profiled_cost(std::move(t), c.model, c.device.name, c.gpus());
  }
};
// A fit: a random classic analytic job with every coefficient scaled by [0.5, 2] (checkpoint
// bytes kept at most activation bytes) and a memory margin in [0, 0.1).
template <>
struct sample<dcp::fitted_cost> {
  static dcp::fitted_cost draw(rng& g) {
    for (;;) {
      const dcp::analytic_cost c = dcp_test::random_cost(g);
      if (!c.is_classic()) continue;
      dcp::fitted_cost f{c, dcp::fit_coefficients::of(c), 0.1 * g.unit(), {}};
      auto t = f.coef.time_array();
      for (double& v : t) v *= 0.5 + 1.5 * g.unit();
      f.coef.set_time(t);
      auto m = f.coef.memory_array();
      for (double& v : m) v *= 0.5 + 1.5 * g.unit();
      m[2] = std::min(m[2], m[1]);
      f.coef.set_memory(m);
      if (f.coef.static_bytes < f.capacity()) return f;
    }
  }
};
// The trained model with none, one or both frozen encoder presets.
template <>
struct sample<dcp::cost_sum<dcp::analytic_cost>> {
  static dcp::cost_sum<dcp::analytic_cost> draw(rng& g) {
    for (;;) {
      dcp::cost_sum<dcp::analytic_cost> c{dcp_test::random_cost(g), {}};
      const auto pick = g.between(0, 3);
      if (pick & 1) c.forward.push_back(dcp::forward_networks::t5_xxl_encoder(c.trained.device));
      if (pick & 2) c.forward.push_back(dcp::forward_networks::vae3d_encoder(c.trained.device));
      if (c.memory({}, 1, c.blocks()) < c.capacity()) return c;
    }
  }
};
template <>
struct sample<dcp::transformer_spec> {
  static dcp::transformer_spec draw(rng& g) { return g.pick(dcp_test::model_presets()); }
};
template <>
struct sample<dcp::fixed_edges_bucketing> {
  static dcp::fixed_edges_bucketing draw(rng& g) {
    dcp::fixed_edges_bucketing b;
    std::int64_t e = 0;
    for (auto i = g.between(0, 20); i > 0; --i) b.edges.push_back(e += g.log_between(1, 100000));
    return b;
  }
};
template <>
struct sample<dcp::geometric_bucketing> {
  // Anywhere in the domain `validate` accepts: first > 0, ratio > 1, limit >= first.
  static dcp::geometric_bucketing draw(rng& g) {
    const std::int64_t first = g.log_between(1, 100000);
    const double ratio = 1.05 + 3 * g.unit();
    return {first, ratio, first * g.log_between(1, 1 << 16)};
  }
};
template <>
struct sample<dcp::quantile_bucketing> {
  static dcp::quantile_bucketing draw(rng& g) {
    std::vector<std::int64_t> lengths;
    for (auto i = g.between(1, 2000); i > 0; --i) lengths.push_back(g.log_between(1, 1 << 22));
    return dcp::quantile_bucketing::fit(lengths, static_cast<std::size_t>(g.between(1, 40)));
  }
};
template <>
struct sample<dcp::buddy_groups> {
  static dcp::buddy_groups draw(rng& g) {
    const int node = 1 << g.between(0, 4);
    const int n = g.between(0, 2) == 0 ? static_cast<int>(g.between(1, node)) : node * static_cast<int>(g.between(1, 130));
    return {n, node};
  }
};

template <class T>
std::string show(const T& v) {
  std::ostringstream os;
  os << v;
  return os.str();
}

// --- cost_model --------------------------------------------------------------------------------------

template <class C>
class CostModelConformance : public ::testing::Test {};
using cost_models =
    ::testing::Types<dcp::analytic_cost, dcp::profiled_cost, dcp::fitted_cost, dcp::cost_sum<dcp::analytic_cost>>;
TYPED_TEST_SUITE(CostModelConformance, cost_models);

TYPED_TEST(CostModelConformance, ModelsTheConcept) {
  static_assert(dcp::cost_model<TypeParam>);
  static_assert(std::regular<TypeParam>);
  static_assert(std::regular<typename TypeParam::load_type>);
}

TYPED_TEST(CostModelConformance, Laws) {
  rng g(101);
  for (int trial = 0; trial < 400; ++trial) {
    const auto c = sample<TypeParam>::draw(g);
    SCOPED_TRACE(show(c));
    ASSERT_GT(c.capacity(), 0);
    ASSERT_GT(c.blocks(), 0);
    ASSERT_GT(c.gpus(), 0);
    ASSERT_GT(c.gpus_per_node(), 0);
    ASSERT_GT(c.heads(), 0);
    EXPECT_TRUE(dcp::legal_sp(c, 1));
    const auto s1 = dcp::make_sequence(1, g.log_between(1, 64), g.log_between(1, 20000));
    const auto s2 = dcp::make_sequence(2, g.log_between(1, 64), g.log_between(1, 20000));
    using load_t = typename TypeParam::load_type;
    const load_t empty{};
    const load_t a = c.load_of(s1), b = c.load_of(s2);
    EXPECT_EQ(a + empty, a);                                     // value-initialised = empty step
    EXPECT_EQ(a + b, b + a);                                     // order of sequences does not matter
    EXPECT_EQ(c.tokens_of(s1), c.tokens_of(s1));
    EXPECT_GE(c.tokens_of(s1), s1.shape_tokens());              // text tokens only add
    const load_t ab = a + b;
    for (int sp = 1; sp <= c.gpus(); sp *= 2) {
      if (!dcp::legal_sp(c, sp)) continue;
      for (int k = 0; k <= c.blocks(); k += std::max(1, c.blocks() / 5)) {
        EXPECT_GT(c.time(ab, sp, k), 0);
        EXPECT_GT(c.memory(ab, sp, k), 0);
        if (k + 1 <= c.blocks()) {
          EXPECT_LE(c.memory(ab, sp, k + 1), c.memory(ab, sp, k)) << "sp=" << sp << " k=" << k;
          EXPECT_GE(c.time(ab, sp, k + 1), c.time(ab, sp, k)) << "sp=" << sp << " k=" << k;
        }
        if (2 * sp <= c.gpus() && dcp::legal_sp(c, 2 * sp)) {
          EXPECT_LE(c.memory(ab, 2 * sp, k), c.memory(ab, sp, k)) << "sp=" << sp << " k=" << k;
        }
        if (c.memory(ab, sp, k) <= c.capacity()) {  // the floor holds for steps that fit (x <= x_max)
          EXPECT_LE(c.work_floor(ab, sp, k), sp * c.time(ab, sp, k) * (1 + 1e-12)) << "sp=" << sp << " k=" << k;
        }
      }
    }
  }
}

// --- model_spec --------------------------------------------------------------------------------------

template <class M>
class ModelSpecConformance : public ::testing::Test {};
using model_specs = ::testing::Types<dcp::transformer_spec>;
TYPED_TEST_SUITE(ModelSpecConformance, model_specs);

TYPED_TEST(ModelSpecConformance, Laws) {
  static_assert(dcp::model_spec<TypeParam>);
  static_assert(std::regular<TypeParam>);
  rng g(102);
  for (int trial = 0; trial < 30; ++trial) {
    const auto m = sample<TypeParam>::draw(g);
    SCOPED_TRACE(show(m));
    EXPECT_GT(m.blocks, 0);
    EXPECT_GT(m.hidden, 0);
    EXPECT_GT(m.heads, 0);
    EXPECT_GT(m.mlp_width, 0);
    EXPECT_TRUE(m.mlp_matrices == 2 || m.mlp_matrices == 3);
    EXPECT_GE(m.text_tokens, 0);
    EXPECT_EQ(static_cast<std::int64_t>(m.hidden) % m.heads, 0);
    if (m.attention == dcp::attention_kind::factorized_2d) {
      EXPECT_EQ(m.blocks % 2, 0);
    }
    const double h = static_cast<double>(m.hidden);
    EXPECT_EQ(m.block_parameters(), 4 * h * h + m.mlp_matrices * h * static_cast<double>(m.mlp_width));
    EXPECT_EQ(m.parameters(), m.blocks * m.block_parameters());
  }
}

// --- recompute_policy --------------------------------------------------------------------------------

template <class R>
class RecomputeConformance : public ::testing::Test {};
using recompute_policies = ::testing::Types<dcp::no_recompute, dcp::full_recompute, dcp::selective_recompute>;
TYPED_TEST_SUITE(RecomputeConformance, recompute_policies);

TYPED_TEST(RecomputeConformance, ReturnedBlocksAreInRangeAndFit) {
  static_assert(dcp::recompute_policy<TypeParam>);
  static_assert(std::regular<TypeParam>);
  const TypeParam r{};
  EXPECT_FALSE(show(r).empty());
  rng g(103);
  int returned = 0, refused = 0;
  for (int trial = 0; trial < 3000; ++trial) {
    const auto c = dcp_test::random_cost(g);
    int sp = 1 << g.between(0, 6);
    while (sp > c.gpus()) sp /= 2;
    dcp::analytic_load l{};
    for (auto j = g.between(1, 4); j > 0; --j) l = l + c.load_of(dcp_test::random_sequence(g, c.model, j, 1 << 19));
    const auto k = r.choose(c, l, sp);
    EXPECT_EQ(k, r.choose(c, l, sp));  // a pure function of its inputs
    if (!k) {
      ++refused;
      continue;
    }
    ++returned;
    EXPECT_GE(*k, 0);
    EXPECT_LE(*k, c.blocks());
    EXPECT_LE(c.memory(l, sp, *k), c.capacity()) << c << " sp=" << sp << " k=" << *k;
  }
  EXPECT_GT(returned, 100);
  EXPECT_GT(refused, 100);
}

// --- bucketing ---------------------------------------------------------------------------------------

template <class B>
class BucketingConformance : public ::testing::Test {};
using bucketings = ::testing::Types<dcp::fixed_edges_bucketing, dcp::geometric_bucketing, dcp::quantile_bucketing>;
TYPED_TEST_SUITE(BucketingConformance, bucketings);

TYPED_TEST(BucketingConformance, MonotoneAndRepresentativesMapHome) {
  static_assert(dcp::bucketing<TypeParam>);
  static_assert(std::regular<TypeParam>);
  rng g(104);
  for (int trial = 0; trial < 300; ++trial) {
    const auto b = sample<TypeParam>::draw(g);
    const std::size_t count = b.bucket_count();
    ASSERT_GE(count, 1u) << b;
    ASSERT_LE(count, 10000u) << b;
    bool ok = true;
    for (std::size_t i = 0; i < count && ok; ++i) {
      const auto rep = b.representative(i);
      if (rep < 1 || b.bucket_of(rep) != i) {
        ADD_FAILURE() << b << ": representative(" << i << ") = " << rep << " lies in bucket " << b.bucket_of(rep);
        ok = false;
      }
      if (i > 0 && rep <= b.representative(i - 1)) {
        ADD_FAILURE() << b << ": representative(" << i << ") = " << rep << " does not exceed representative("
                      << i - 1 << ") = " << b.representative(i - 1);
        ok = false;
      }
    }
    std::vector<std::int64_t> lengths;
    for (int j = 0; j < 200; ++j) lengths.push_back(g.log_between(1, std::int64_t{1} << 40));
    for (std::size_t i = 0; i + 1 < count; ++i) {  // the edges and their neighbours
      lengths.push_back(b.representative(i));
      lengths.push_back(b.representative(i) + 1);
    }
    std::sort(lengths.begin(), lengths.end());
    for (std::size_t j = 0; j < lengths.size() && ok; ++j) {
      const auto i = b.bucket_of(lengths[j]);
      if (i >= count) {
        ADD_FAILURE() << b << ": bucket_of(" << lengths[j] << ") = " << i << " is not below bucket_count() = " << count;
        ok = false;
      }
      if (j > 0 && i < b.bucket_of(lengths[j - 1])) {
        ADD_FAILURE() << b << ": bucket_of is not monotone at " << lengths[j - 1] << ", " << lengths[j];
        ok = false;
      }
    }
  }
}

// --- group_manager -----------------------------------------------------------------------------------

template <class G>
class GroupManagerConformance : public ::testing::Test {};
using group_managers = ::testing::Types<dcp::buddy_groups>;
TYPED_TEST_SUITE(GroupManagerConformance, group_managers);

TYPED_TEST(GroupManagerConformance, AlignedDisjointInsideNodesAndConsistent) {
  static_assert(dcp::group_manager<TypeParam>);
  rng g(105);
  for (int trial = 0; trial < 300; ++trial) {
    const auto groups = sample<TypeParam>::draw(g);
    SCOPED_TRACE(show(groups));
    ASSERT_NO_THROW(groups.validate());
    const int n = groups.gpus(), node = groups.gpus_per_node();
    for (int sp = 1; sp <= n; sp *= 2) {
      const int count = groups.block_count(sp);
      ASSERT_GE(count, 1) << "sp=" << sp;
      std::vector<int> owner(static_cast<std::size_t>(n), -1);
      for (int i = 0; i < count; ++i) {
        const auto b = groups.block(sp, i);
        ASSERT_EQ(b.size, sp);
        ASSERT_EQ(b.first % sp, 0) << "sp=" << sp << " i=" << i;                      // aligned
        ASSERT_TRUE(b.first >= 0 && b.end() <= n) << "sp=" << sp << " i=" << i;      // inside [0, N)
        if (sp <= node) {
          EXPECT_EQ(b.first / node, (b.end() - 1) / node) << "sp=" << sp;  // inside one node
        }
        for (int r = b.first; r < b.end(); ++r) {
          ASSERT_EQ(owner[static_cast<std::size_t>(r)], -1) << "rank " << r << " in two blocks of " << sp;  // disjoint
          owner[static_cast<std::size_t>(r)] = i;
        }
      }
      for (int r = 0; r < n; ++r) {
        for (int i = 0; i < count; ++i) {
          EXPECT_EQ(groups.block(sp, i).contains(r), groups.block_of(r, sp) == groups.block(sp, i))
              << "rank " << r << " sp " << sp << " block " << i;
        }
      }
    }
  }
}

}  // namespace
