// Ring attention (include/dcp/comm/ring.hpp) and Ulysses x Ring attention over local
// communicators: outputs and hand-written gradients equal whole-sequence attention to 1e-12 in
// double, for full and causal attention, zig-zag and contiguous token splits.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <iostream>
#include <span>
#include <vector>

#include <dcp/comm/local.hpp>
#include <dcp/comm/ring.hpp>
#include <dcp/comm/shard.hpp>
#include <dcp/comm/ulysses.hpp>
#include <dcp/group/buddy_groups.hpp>
#include <dcp/group_cache.hpp>
#include <dcp/random.hpp>

namespace {

using vec = std::vector<double>;

// Whole-sequence attention [n][H][D] with P materialised, and its gradients.
struct reference {
  vec out, dq, dk, dv;
};
reference full_attention(std::int64_t n, std::int64_t H, std::int64_t D, bool causal, const vec& q, const vec& k,
                         const vec& v, const vec& g) {
  reference r{vec(q.size(), 0), vec(q.size(), 0), vec(q.size(), 0), vec(q.size(), 0)};
  const double scale = 1 / std::sqrt(static_cast<double>(D));
  for (std::int64_t h = 0; h < H; ++h)
    for (std::int64_t i = 0; i < n; ++i) {
      auto at = [&](const vec& x, std::int64_t t, std::int64_t d) { return x[static_cast<std::size_t>((t * H + h) * D + d)]; };
      vec p(static_cast<std::size_t>(n), 0);
      double mx = -1e300, sum = 0;
      for (std::int64_t j = 0; j <= (causal ? i : n - 1); ++j) {
        double s = 0;
        for (std::int64_t d = 0; d < D; ++d) s += at(q, i, d) * at(k, j, d);
        p[static_cast<std::size_t>(j)] = s * scale, mx = std::max(mx, s * scale);
      }
      const std::int64_t last = causal ? i : n - 1;
      for (std::int64_t j = 0; j <= last; ++j) sum += p[static_cast<std::size_t>(j)] = std::exp(p[static_cast<std::size_t>(j)] - mx);
      for (std::int64_t j = 0; j <= last; ++j) p[static_cast<std::size_t>(j)] /= sum;
      vec dp(static_cast<std::size_t>(n), 0);
      double dot = 0;
      for (std::int64_t j = 0; j <= last; ++j)
        for (std::int64_t d = 0; d < D; ++d) {
          r.out[static_cast<std::size_t>((i * H + h) * D + d)] += p[static_cast<std::size_t>(j)] * at(v, j, d);
          dp[static_cast<std::size_t>(j)] += at(g, i, d) * at(v, j, d);
        }
      for (std::int64_t j = 0; j <= last; ++j) dot += p[static_cast<std::size_t>(j)] * dp[static_cast<std::size_t>(j)];
      for (std::int64_t j = 0; j <= last; ++j) {
        const double ds = p[static_cast<std::size_t>(j)] * (dp[static_cast<std::size_t>(j)] - dot) * scale;
        for (std::int64_t d = 0; d < D; ++d) {
          r.dq[static_cast<std::size_t>((i * H + h) * D + d)] += ds * at(k, j, d);
          r.dk[static_cast<std::size_t>((j * H + h) * D + d)] += ds * at(q, i, d);
          r.dv[static_cast<std::size_t>((j * H + h) * D + d)] += p[static_cast<std::size_t>(j)] * at(g, i, d);
        }
      }
    }
  return r;
}

vec random_vec(dcp::xoshiro256ss& g, std::size_t n) {
  vec x(n);
  for (auto& e : x) e = 2 * dcp::uniform01(g) - 1;
  return x;
}

// Rows `tokens` (a list of positions) of x [n][H][D].
vec rows_of(const vec& x, const std::vector<std::int64_t>& tokens, std::int64_t HD) {
  vec out;
  for (auto t : tokens) out.insert(out.end(), x.begin() + t * HD, x.begin() + (t + 1) * HD);
  return out;
}

// Ulysses x Ring attention on u x r local ranks: ring position j holds `split(j)` of the
// sequence, token-sharded over its Ulysses group, re-laid to head shards, then ring attention
// over the ranks holding the same heads. Every rank compares its rows with the reference.
// With cut > 0 the sequence is two packed segments, [0, cut) and [cut, n), that never attend to
// each other.
void check_usp(int u, int r, std::int64_t n, std::int64_t H, std::int64_t D, bool causal, bool zigzag, std::uint64_t seed,
               std::int64_t cut = 0) {
  std::cout << "[     SEED ] " << seed << " u=" << u << " r=" << r << " n=" << n << (causal ? " causal" : " full")
            << (zigzag ? " zigzag" : " contiguous") << " cut=" << cut << "\n";
  dcp::xoshiro256ss g(seed);
  const std::size_t size = static_cast<std::size_t>(n * H * D);
  const vec q = random_vec(g, size), k = random_vec(g, size), v = random_vec(g, size), dout = random_vec(g, size);
  reference ref = full_attention(n, H, D, causal, q, k, v, dout);
  if (cut > 0) {  // each segment on its own, placed back on the packed axis
    const std::size_t at = static_cast<std::size_t>(cut * H * D);
    auto part = [&](const vec& x, bool first) {
      return first ? vec(x.begin(), x.begin() + static_cast<std::ptrdiff_t>(at)) : vec(x.begin() + static_cast<std::ptrdiff_t>(at), x.end());
    };
    const auto a = full_attention(cut, H, D, causal, part(q, true), part(k, true), part(v, true), part(dout, true));
    const auto b = full_attention(n - cut, H, D, causal, part(q, false), part(k, false), part(v, false), part(dout, false));
    auto join = [](const vec& x, const vec& y) {
      vec z(x);
      z.insert(z.end(), y.begin(), y.end());
      return z;
    };
    ref = {join(a.out, b.out), join(a.dq, b.dq), join(a.dk, b.dk), join(a.dv, b.dv)};
  }
  auto chunk = [&](int j) {
    if (zigzag) return dcp::zigzag_tokens(n, r, j);
    std::vector<std::int64_t> t;
    const auto s = dcp::shard_of(n, r, j);
    for (auto i = s.begin; i < s.end(); ++i) t.push_back(i);
    return t;
  };
  dcp::local_world::run(u * r, [&](dcp::local_comm& world) {
    const int me = world.rank(), j = me / u, i = me % u;
    auto ulysses = world.split(j, i);  // Ulysses group j: ranks [j u, (j + 1) u)
    auto ring = world.split(i, j);     // ring i: ranks i + j u
    const auto mine = chunk(j);
    const auto cn = static_cast<std::int64_t>(mine.size());
    const dcp::ulysses_shape shape{cn, H, D};
    const auto tok = dcp::shard_of(cn, u, i);
    const std::vector<std::int64_t> my_tokens(mine.begin() + tok.begin, mine.begin() + tok.end());
    auto to_heads = [&](const vec& x) {
      const vec local = rows_of(x, my_tokens, H * D);
      vec out(static_cast<std::size_t>(dcp::ulysses_head_shard_size(shape, u)));
      dcp::ulysses_to_head_shards(ulysses, shape, std::span<const double>(local), std::span<double>(out));
      return out;
    };
    auto to_tokens = [&](const vec& x) {
      vec out(static_cast<std::size_t>(tok.count * H * D));
      dcp::ulysses_to_token_shards(ulysses, shape, std::span<const double>(x), std::span<double>(out));
      return out;
    };
    const vec hq = to_heads(q), hk = to_heads(k), hv = to_heads(v), hg = to_heads(dout);
    const dcp::ring_attention_shape rs{H / u, D, causal};
    vec o(hq.size()), lse(static_cast<std::size_t>(cn * (H / u))), dq(hq.size()), dk(hq.size()), dv(hq.size());
    const std::span<const std::int64_t> pos(mine);
    std::vector<std::int64_t> seg;
    if (cut > 0)
      for (auto t : mine) seg.push_back(t < cut ? 0 : 1);
    dcp::ring_attention_forward(ring, rs, pos, std::span<const double>(hq), std::span<const double>(hk),
                                std::span<const double>(hv), std::span<double>(o), std::span<double>(lse),
                                std::span<const std::int64_t>(seg));
    dcp::ring_attention_backward(ring, rs, pos, std::span<const double>(hq), std::span<const double>(hk),
                                 std::span<const double>(hv), std::span<const double>(o), std::span<const double>(lse),
                                 std::span<const double>(hg), std::span<double>(dq), std::span<double>(dk),
                                 std::span<double>(dv), std::span<const std::int64_t>(seg));
    const struct {
      const char* name;
      vec got;
      const vec& want;
    } checks[] = {{"out", to_tokens(o), ref.out}, {"dq", to_tokens(dq), ref.dq}, {"dk", to_tokens(dk), ref.dk},
                  {"dv", to_tokens(dv), ref.dv}};
    for (const auto& c : checks) {
      const vec want = rows_of(c.want, my_tokens, H * D);
      ASSERT_EQ(c.got.size(), want.size());
      for (std::size_t e = 0; e < want.size(); ++e)
        ASSERT_NEAR(c.got[e], want[e], 1e-12 * std::max(1.0, std::abs(want[e]))) << c.name << " rank " << me << " element " << e;
    }
  });
}

TEST(RingAttention, RingAloneMatchesWholeSequence) {
  check_usp(1, 2, 13, 2, 3, false, false, 11);
  check_usp(1, 4, 29, 2, 4, true, true, 12);
  check_usp(1, 4, 29, 1, 4, true, false, 13);
  check_usp(1, 3, 7, 1, 2, true, true, 14);
}

// The small-shape analogue of a sequence longer than one Ulysses group: 4 heads cap Ulysses at
// u = 4, and the sequence runs on 4 x 2 = 8 ranks.
TEST(RingAttention, UlyssesTimesRingMatchesWholeSequence) {
  check_usp(2, 2, 23, 4, 3, true, true, 21);
  check_usp(4, 2, 37, 4, 2, true, true, 22);
  check_usp(2, 4, 41, 2, 3, false, true, 23);
}

// A packed micro-step of two sequences: segment ids keep them apart across the ring.
TEST(RingAttention, PackedSegmentsStayApart) {
  check_usp(2, 2, 31, 2, 3, true, true, 31, 12);
  check_usp(1, 4, 27, 1, 2, false, false, 32, 5);
}

TEST(RingAttention, ZigzagBalancesCausalWork) {
  // Causal key-query pairs per ring position: equal to within one half-chunk row.
  const std::int64_t n = 1000;
  const int r = 4;
  std::int64_t lo = n * n, hi = 0;
  for (int j = 0; j < r; ++j) {
    std::int64_t pairs = 0;
    for (auto t : dcp::zigzag_tokens(n, r, j)) pairs += t + 1;
    lo = std::min(lo, pairs), hi = std::max(hi, pairs);
  }
  EXPECT_LE(hi - lo, n / (2 * r) + 1) << lo << " .. " << hi;
}

// The group cache splits each block into Ulysses groups (u consecutive ranks) and rings (u apart),
// and the split's ring attention equals the one check_usp builds by hand.
TEST(RingAttention, GroupCacheSplitsUlyssesInsideRing) {
  dcp::local_world::run(8, [](dcp::local_comm& world) {
    dcp::group_cache groups(world, dcp::buddy_groups{8, 4});
    groups.prepare_split(8, 4);  // u = 2
    groups.prepare_split(4, 2);  // u = 2 inside each node of 4
    const int me = world.rank();
    const dcp::rank_block all{0, 8}, node{me / 4 * 4, 4};
    auto& u8 = groups.ulysses_for(all, 4);
    auto& r8 = groups.ring_for(all, 4);
    EXPECT_EQ(u8.size(), 2);
    EXPECT_EQ(u8.rank(), me % 2);
    EXPECT_EQ(r8.size(), 4);
    EXPECT_EQ(r8.rank(), me / 2);
    auto& r4 = groups.ring_for(node, 2);
    EXPECT_EQ(r4.size(), 2);
    EXPECT_EQ(r4.rank(), (me % 4) / 2);
    // Members of my ring are the ranks with my Ulysses position.
    std::vector<int> mine{me}, ring_ranks(4);
    r8.all_gather(std::span<const int>(mine), std::span<int>(ring_ranks));
    for (int j = 0; j < 4; ++j) EXPECT_EQ(ring_ranks[static_cast<std::size_t>(j)], me % 2 + 2 * j);
    EXPECT_THROW(groups.ring_for(all, 2), dcp::error);
  });
}

}  // namespace
