// Ulysses and DSP re-layouts: results match the global tensor, round trips are exact, for random
// shapes with uneven and empty shards.
#include <dcp_test/support.hpp>
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <vector>

#include <dcp/comm/dsp.hpp>
#include <dcp/comm/local.hpp>
#include <dcp/comm/shard.hpp>
#include <dcp/comm/ulysses.hpp>

namespace {

using namespace std::chrono_literals;

TEST(Shard, CoversTheAxisInOrderWithSizesWithinOne) {
  std::mt19937 g(5);
  for (int trial = 0; trial < 500; ++trial) {
    const std::int64_t n = g() % 100;
    const int parts = 1 + int(g() % 16);
    std::int64_t next = 0, lo = n, hi = 0;
    for (int i = 0; i < parts; ++i) {
      const auto s = dcp::shard_of(n, parts, i);
      EXPECT_EQ(s.begin, next);
      next = s.end();
      lo = std::min(lo, s.count);
      hi = std::max(hi, s.count);
    }
    EXPECT_EQ(next, n);
    EXPECT_LE(hi - lo, 1);
  }
  static_assert(dcp::shard_of(10, 4, 0) == dcp::shard{0, 3});
  static_assert(dcp::shard_of(10, 4, 3) == dcp::shard{8, 2});
  EXPECT_THROW((void)dcp::shard_of(10, 0, 0), dcp::error);
  EXPECT_THROW((void)dcp::shard_of(10, 4, 4), dcp::error);
  EXPECT_THROW((void)dcp::shard_of(-1, 4, 0), dcp::error);
}

// Global element (token t, head h, dim k) of sequence `seed`.
float global_1d(std::int64_t t, std::int64_t h, std::int64_t k, unsigned seed) {
  return float(seed % 97) * 1e6f + float(t) * 1000.f + float(h) * 10.f + float(k);
}

TEST(Ulysses, RandomShapesRoundTrip) {
  std::mt19937 g(11);
  for (int trial = 0; trial < 40; ++trial) {
    const int sp = 1 + int(g() % 8);
    const dcp::ulysses_shape s{std::int64_t(g() % 40), std::int64_t(sp * (1 + g() % 3)), std::int64_t(1 + g() % 4)};
    const unsigned seed = unsigned(trial);
    SCOPED_TRACE(::testing::Message() << s << " sp=" << sp);
    dcp::local_world::run(
        sp,
        [&](dcp::local_comm& c) {
          const int r = c.rank();
          const auto mine = dcp::shard_of(s.tokens, sp, r);
          std::vector<float> tokens(std::size_t(dcp::ulysses_token_shard_size(s, sp, r)));
          std::size_t at = 0;
          for (std::int64_t t = mine.begin; t < mine.end(); ++t)
            for (std::int64_t h = 0; h < s.heads; ++h)
              for (std::int64_t k = 0; k < s.head_dim; ++k) tokens[at++] = global_1d(t, h, k, seed);
          std::vector<float> heads(std::size_t(dcp::ulysses_head_shard_size(s, sp)), -1.f);
          dcp::ulysses_to_head_shards(c, s, std::span<const float>(tokens), std::span<float>(heads));
          const std::int64_t hp = s.heads / sp;
          at = 0;
          for (std::int64_t t = 0; t < s.tokens; ++t)
            for (std::int64_t h = r * hp; h < (r + 1) * hp; ++h)
              for (std::int64_t k = 0; k < s.head_dim; ++k) ASSERT_EQ(heads[at++], global_1d(t, h, k, seed));
          std::vector<float> back(tokens.size(), -1.f);
          dcp::ulysses_to_token_shards(c, s, std::span<const float>(heads), std::span<float>(back));
          EXPECT_EQ(back, tokens);
        },
        {.timeout = 20s});
  }
}

TEST(Ulysses, RejectsBadShapesAndSizes) {
  EXPECT_THROW(dcp::validate(dcp::ulysses_shape{10, 6, 4}, 4), dcp::error);  // 6 heads over 4 ranks
  EXPECT_NO_THROW(dcp::validate(dcp::ulysses_shape{0, 8, 4}, 4));
  dcp::local_world::run(2, [](dcp::local_comm& c) {
    const dcp::ulysses_shape s{5, 4, 2};
    std::vector<int> in(3), out(10);
    EXPECT_DCP_ERROR(dcp::ulysses_to_head_shards(c, s, std::span<const int>(in), std::span<int>(out)),
                     dcp::errc::invalid_argument, "in has 3 elements but this rank's shard needs");
  });
}

double global_2d(std::int64_t t, std::int64_t x, std::int64_t ch, unsigned seed) {
  return double(seed) * 1e9 + double(t) * 1e5 + double(x) * 10 + double(ch);
}

TEST(Dsp, RandomShapesRoundTrip) {
  std::mt19937 g(13);
  for (int trial = 0; trial < 40; ++trial) {
    const int sp = 1 + int(g() % 8);
    const dcp::dsp_shape s{std::int64_t(g() % 12), std::int64_t(g() % 30), std::int64_t(1 + g() % 3)};
    const unsigned seed = unsigned(trial);
    SCOPED_TRACE(::testing::Message() << s << " sp=" << sp);
    dcp::local_world::run(
        sp,
        [&](dcp::local_comm& c) {
          const int r = c.rank();
          const auto ms = dcp::shard_of(s.spatial, sp, r), mt = dcp::shard_of(s.frames, sp, r);
          std::vector<double> spatial(std::size_t(dcp::dsp_spatial_shard_size(s, sp, r)));
          std::size_t at = 0;
          for (std::int64_t t = 0; t < s.frames; ++t)
            for (std::int64_t x = ms.begin; x < ms.end(); ++x)
              for (std::int64_t ch = 0; ch < s.channels; ++ch) spatial[at++] = global_2d(t, x, ch, seed);
          std::vector<double> temporal(std::size_t(dcp::dsp_temporal_shard_size(s, sp, r)), -1);
          dcp::dsp_to_temporal_shards(c, s, std::span<const double>(spatial), std::span<double>(temporal));
          at = 0;
          for (std::int64_t t = mt.begin; t < mt.end(); ++t)
            for (std::int64_t x = 0; x < s.spatial; ++x)
              for (std::int64_t ch = 0; ch < s.channels; ++ch) ASSERT_EQ(temporal[at++], global_2d(t, x, ch, seed));
          std::vector<double> back(spatial.size(), -1);
          dcp::dsp_to_spatial_shards(c, s, std::span<const double>(temporal), std::span<double>(back));
          EXPECT_EQ(back, spatial);
        },
        {.timeout = 20s});
  }
}

TEST(Dsp, RejectsBadShapes) {
  EXPECT_THROW(dcp::validate(dcp::dsp_shape{-1, 4, 1}, 2), dcp::error);
  EXPECT_THROW(dcp::validate(dcp::dsp_shape{1, 4, 0}, 2), dcp::error);
  EXPECT_THROW(dcp::validate(dcp::dsp_shape{1, 4, 1}, 0), dcp::error);
}

}  // namespace
