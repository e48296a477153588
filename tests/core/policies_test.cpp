// Policy models: recompute (none, full, selective), bucketing (fixed edges, geometric,
// quantile) and buddy groups: their specific behaviour, laws over random inputs, bad input.

#include "core_test_support.hpp"

#include <dcp/bucketing/fixed_edges_bucketing.hpp>
#include <dcp/bucketing/geometric_bucketing.hpp>
#include <dcp/bucketing/quantile_bucketing.hpp>
#include <dcp/group/buddy_groups.hpp>
#include <dcp/recompute/full_recompute.hpp>
#include <dcp/recompute/no_recompute.hpp>
#include <dcp/recompute/selective_recompute.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

namespace {

using dcp_test::message_of;

using dcp_test::rng;


// A random step near the memory boundaries: tokens per GPU up to twice what fits with no
// recomputation, or up to 1.3 x_max, so every outcome (0, some, all blocks, none) occurs.
struct random_step {
  dcp::analytic_cost cost;
  dcp::analytic_load load;
  int sp;
};
random_step near_boundary(rng& g) {
  const auto c = dcp_test::random_cost(g);
  int sp = 1 << g.between(0, 5);
  while (sp > c.gpus()) sp /= 2;
  const double free_bytes = c.capacity() - c.static_memory();
  const double x_no_recompute = free_bytes / ((c.blocks() + 1) * c.device.beta * static_cast<double>(c.model.hidden));
  const double x_top = g.between(0, 1) ? 2 * x_no_recompute : 1.3 * c.max_tokens_per_gpu();
  const auto per_gpu = std::max<std::int64_t>(1, static_cast<std::int64_t>(x_top * g.unit()));
  const std::int64_t n = per_gpu * sp;
  const auto s = c.model.attention == dcp::attention_kind::factorized_2d
                     ? dcp::make_sequence(0, 1, n)
                     : dcp::make_sequence(0, std::max<std::int64_t>(1, n - c.model.text_tokens));
  return {c, c.load_of(s), sp};
}

// --- recompute -----------------------------------------------------------------------------------

TEST(SelectiveRecompute, FewestBlocksThatFit) {
  rng g(21);
  int none = 0, zero = 0, some = 0, all = 0;
  for (int trial = 0; trial < 5000; ++trial) {
    const auto [c, l, sp] = near_boundary(g);
    const double cap = c.capacity();
    const auto k = dcp::selective_recompute{}.choose(c, l, sp);
    // Linear scan, the definition itself.
    std::optional<int> want;
    for (int j = 0; j <= c.blocks() && !want; ++j)
      if (c.memory(l, sp, j) <= cap) want = j;
    ASSERT_EQ(k, want) << c << " sp=" << sp << " tokens=" << l.tokens;
    if (!k) {
      EXPECT_GT(c.memory(l, sp, c.blocks()), cap);
      ++none;
      continue;
    }
    EXPECT_LE(c.memory(l, sp, *k), cap);
    if (*k > 0) {
      EXPECT_GT(c.memory(l, sp, *k - 1), cap) << "k - 1 = " << *k - 1 << " fits too";
    }
    (*k == 0 ? zero : *k == c.blocks() ? all : some)++;
  }
  EXPECT_GT(none, 100);
  EXPECT_GT(zero, 100);
  EXPECT_GT(some, 100);
  EXPECT_GT(all, 0);
}

TEST(FullRecompute, AllBlocksOrNothing) {
  rng g(22);
  int fits = 0, misfits = 0;
  for (int trial = 0; trial < 3000; ++trial) {
    const auto [c, l, sp] = near_boundary(g);
    const auto k = dcp::full_recompute{}.choose(c, l, sp);
    if (c.memory(l, sp, c.blocks()) <= c.capacity()) {
      ASSERT_TRUE(k.has_value());
      EXPECT_EQ(*k, c.blocks());
      ++fits;
    } else {
      EXPECT_FALSE(k.has_value());
      ++misfits;
    }
  }
  EXPECT_GT(fits, 100);
  EXPECT_GT(misfits, 100);
}

TEST(NoRecompute, ZeroBlocksOrNothing) {
  rng g(23);
  int fits = 0, misfits = 0;
  for (int trial = 0; trial < 3000; ++trial) {
    const auto [c, l, sp] = near_boundary(g);
    const auto k = dcp::no_recompute{}.choose(c, l, sp);
    if (c.memory(l, sp, 0) <= c.capacity()) {
      ASSERT_EQ(k, std::optional<int>(0));
      ++fits;
    } else {
      EXPECT_FALSE(k.has_value());
      ++misfits;
    }
  }
  EXPECT_GT(fits, 100);
  EXPECT_GT(misfits, 100);
}

TEST(RecomputePolicies, ShortStepsRecomputeNothing) {
  const dcp::analytic_cost c{dcp::models::cogvideox_5b(), dcp::devices::h200_analytic(), 32};
  const auto l = c.load_of(dcp::make_sequence(1, 1000));
  EXPECT_EQ(dcp::selective_recompute{}.choose(c, l, 1), std::optional<int>(0));
  EXPECT_EQ(dcp::full_recompute{}.choose(c, l, 1), std::optional<int>(42));
  EXPECT_EQ(dcp::no_recompute{}.choose(c, l, 1), std::optional<int>(0));
}

TEST(RecomputePolicies, RegularAndPrintable) {
  EXPECT_EQ(dcp::selective_recompute{}, dcp::selective_recompute{});
  std::ostringstream os;
  os << dcp::no_recompute{} << ' ' << dcp::full_recompute{} << ' ' << dcp::selective_recompute{};
  EXPECT_EQ(os.str(), "no_recompute{} full_recompute{} selective_recompute{}");
}

// --- bucketing -----------------------------------------------------------------------------------

TEST(FixedEdgesBucketing, EdgesAreInclusiveUpperBounds) {
  const dcp::fixed_edges_bucketing b{{100, 200}};
  EXPECT_NO_THROW(b.validate());
  EXPECT_EQ(b.bucket_count(), 3u);
  EXPECT_EQ(b.bucket_of(1), 0u);
  EXPECT_EQ(b.bucket_of(100), 0u);
  EXPECT_EQ(b.bucket_of(101), 1u);
  EXPECT_EQ(b.bucket_of(200), 1u);
  EXPECT_EQ(b.bucket_of(201), 2u);
  EXPECT_EQ(b.bucket_of(std::int64_t{1} << 40), 2u);
  EXPECT_EQ(b.representative(0), 100);
  EXPECT_EQ(b.representative(1), 200);
  EXPECT_EQ(b.representative(2), std::numeric_limits<std::int64_t>::max());
  std::ostringstream os;
  os << b;
  EXPECT_EQ(os.str(), "fixed_edges_bucketing{100, 200}");
  const dcp::fixed_edges_bucketing one{};
  EXPECT_EQ(one.bucket_count(), 1u);
  EXPECT_EQ(one.bucket_of(12345), 0u);
}

TEST(FixedEdgesBucketing, BadEdgesNameIndexAndValue) {
  struct bad {
    std::vector<std::int64_t> edges;
    const char* needle;
  };
  const bad cases[] = {
      {{10, 5}, "bucket edge 1 = 5"},
      {{0, 5}, "bucket edge 0 = 0"},
      {{-3}, "bucket edge 0 = -3"},
      {{5, 5}, "bucket edge 1 = 5"},
      {{1, 2, 3, 100, 99}, "bucket edge 4 = 99"},
  };
  for (const auto& c : cases) {
    const dcp::fixed_edges_bucketing b{c.edges};
    EXPECT_DCP_ERROR(b.validate(), dcp::errc::invalid_argument, c.needle) << b;
  }
}

TEST(GeometricBucketing, DefaultDoublesFrom256To2Pow24) {
  const dcp::geometric_bucketing b{};
  EXPECT_NO_THROW(b.validate());
  EXPECT_EQ(b.bucket_count(), 17u);  // 256 * 2^i for i < 16, then 2^24
  for (std::size_t i = 0; i < 16; ++i) EXPECT_EQ(b.representative(i), std::int64_t{256} << i) << i;
  EXPECT_EQ(b.representative(16), std::int64_t{1} << 24);
  EXPECT_EQ(b.bucket_of(1), 0u);
  EXPECT_EQ(b.bucket_of(256), 0u);
  EXPECT_EQ(b.bucket_of(257), 1u);
  EXPECT_EQ(b.bucket_of(std::int64_t{1} << 30), 16u);  // longer than the limit: the last bucket
}

// With a small first edge, floor(first * ratio^i) repeats; repeated edges must not leave an
// empty bucket that breaks the bucketing law. Both parameter sets pass validate().
TEST(GeometricBucketing, SmallFirstEdgesKeepTheLaw) {
  for (const auto& b : {dcp::geometric_bucketing{1, 1.5, 100}, dcp::geometric_bucketing{5, 1.1, 25}}) {
    ASSERT_NO_THROW(b.validate()) << b;
    for (std::size_t i = 0; i < b.bucket_count(); ++i) {
      EXPECT_EQ(b.bucket_of(b.representative(i)), i) << b << ": representative(" << i << ") = " << b.representative(i);
      if (i > 0) {
        EXPECT_GT(b.representative(i), b.representative(i - 1)) << b << " at bucket " << i;
      }
    }
  }
}

TEST(GeometricBucketing, BadParametersAreNamed) {
  for (const auto& b : {dcp::geometric_bucketing{0, 2.0, 100}, dcp::geometric_bucketing{256, 1.0, 1 << 20},
                        dcp::geometric_bucketing{256, 0.5, 1 << 20}, dcp::geometric_bucketing{256, 2.0, 100}}) {
    std::ostringstream os;
    os << "first=" << b.first;
    const auto msg = message_of([&] { b.validate(); });
    EXPECT_NE(msg.find(os.str()), std::string::npos) << msg;
    EXPECT_NE(msg.find("ratio="), std::string::npos) << msg;
  }
}

TEST(QuantileBucketing, EqualCountsOnDistinctLengths) {
  std::vector<std::int64_t> lengths;
  for (std::int64_t i = 1; i <= 1000; ++i) lengths.push_back(i * 7);
  const auto q = dcp::quantile_bucketing::fit(lengths, 4);
  ASSERT_EQ(q.fitted.edges.size(), 4u);
  EXPECT_EQ(q.fitted.edges.back(), 7000);
  std::vector<int> count(q.bucket_count());
  for (auto n : lengths) ++count[q.bucket_of(n)];
  for (std::size_t i = 0; i < 4; ++i) EXPECT_NEAR(count[i], 250, 1) << i;
  EXPECT_EQ(count[4], 0);  // nothing of the sample in the open bucket
  EXPECT_NO_THROW(q.fitted.validate());
}

TEST(QuantileBucketing, TiesMergeBuckets) {
  const std::vector<std::int64_t> lengths(100, 42);
  const auto q = dcp::quantile_bucketing::fit(lengths, 8);
  EXPECT_EQ(q.fitted.edges, std::vector<std::int64_t>{42});
  EXPECT_EQ(q.bucket_of(42), 0u);
}

TEST(QuantileBucketing, BadInputIsAnError) {
  const std::vector<std::int64_t> ok{1, 2, 3};
  EXPECT_NE(message_of([&] { (void)dcp::quantile_bucketing::fit(ok, 0); }).find("at least 1"), std::string::npos);
  EXPECT_NE(message_of([] { (void)dcp::quantile_bucketing::fit({}, 4); }).find("no lengths"), std::string::npos);
  const std::vector<std::int64_t> bad{5, -7, 3};
  EXPECT_NE(message_of([&] { (void)dcp::quantile_bucketing::fit(bad, 2); }).find("length -7"), std::string::npos);
  const std::vector<std::int64_t> zero{0, 3};
  EXPECT_NE(message_of([&] { (void)dcp::quantile_bucketing::fit(zero, 2); }).find("length 0"), std::string::npos);
}

// --- buddy groups --------------------------------------------------------------------------------

TEST(BuddyGroups, ThreeNodesOfEight) {
  const dcp::buddy_groups g{24, 8};
  EXPECT_NO_THROW(g.validate());
  EXPECT_EQ(g.block_count(1), 24);
  EXPECT_EQ(g.block_count(8), 3);
  EXPECT_EQ(g.block_count(16), 1);  // [16, 32) would leave the job: never used
  EXPECT_EQ(g.block_count(32), 0);
  EXPECT_EQ(g.block(8, 2), (dcp::rank_block{16, 8}));
  EXPECT_EQ(g.block(16, 0), (dcp::rank_block{0, 16}));
  EXPECT_EQ(g.block_of(13, 4), (dcp::rank_block{12, 4}));
  EXPECT_TRUE(g.block_of(13, 4).contains(15));
  EXPECT_FALSE(g.block_of(13, 4).contains(16));
  std::ostringstream os;
  os << g << ' ' << g.block(4, 1);
  EXPECT_EQ(os.str(), "buddy_groups{N=24, G=8} [4, 8)");
}

TEST(BuddyGroups, BadLayoutsNameTheValue) {
  struct bad {
    dcp::buddy_groups g;
    const char* needle;
  };
  const bad cases[] = {
      {{0, 8}, "gpus = 0"},
      {{-8, 8}, "gpus = -8"},
      {{12, 8}, "gpus = 12 is not a multiple of gpus_per_node = 8"},
      {{36, 8}, "gpus = 36"},
      {{8, 6}, "gpus_per_node = 6"},
      {{8, 0}, "gpus_per_node = 0"},
  };
  for (const auto& c : cases) {
    EXPECT_DCP_ERROR(c.g.validate(), dcp::errc::invalid_argument, c.needle) << c.g;
  }
  for (int n : {1, 3, 5, 7, 8, 16, 24, 40, 72, 1024}) EXPECT_NO_THROW((dcp::buddy_groups{n, 8}.validate())) << n;
}

// The group_manager laws are in conformance_test.cpp; these are buddy_groups' own promises.
TEST(BuddyGroups, EveryWholeBlockIsUsedAndWideBlocksSpanWholeNodes) {
  rng g(31);
  for (int trial = 0; trial < 300; ++trial) {
    const int node = 1 << g.between(0, 4);
    const int n = g.between(0, 2) == 0 ? static_cast<int>(g.between(1, node)) : node * static_cast<int>(g.between(1, 70));
    const dcp::buddy_groups groups{n, node};
    ASSERT_NO_THROW(groups.validate()) << groups;
    for (int sp = 1; sp <= n; sp *= 2) {
      EXPECT_EQ(groups.block_count(sp), n / sp) << groups << " sp=" << sp;
      for (int i = 0; i < groups.block_count(sp); ++i) {
        EXPECT_EQ(groups.block(sp, i), (dcp::rank_block{i * sp, sp}));
        if (sp > node) {
          EXPECT_EQ(groups.block(sp, i).first % node, 0) << groups << " sp=" << sp;
        }
      }
    }
    EXPECT_EQ(groups.block_count(0), 0);
    EXPECT_EQ(groups.block_count(2 * n), 0);
  }
}

}  // namespace
