// dcp's device code (include/dcp/cuda/*.cuh) compiled for the CPU: THRUST_DEVICE_SYSTEM_CPP turns
// thrust::device_vector into host memory, so the SAME functions nvcc builds for the GPU run here,
// with the local (threads) communicator standing in for NCCL. Every result is checked against a
// plain host reference, on random shapes.
#include <algorithm>
#include <cstdint>
#include <numeric>
#include <random>
#include <set>
#include <span>
#include <vector>

#include <dcp_test/support.hpp>
#include <gtest/gtest.h>

#include <dcp/comm/dsp.hpp>
#include <dcp/comm/local.hpp>
#include <dcp/comm/ulysses.hpp>
#include <dcp/cuda/micro_batch.cuh>
#include <dcp/cuda/relayout.cuh>

#include "host_reference.hpp"

static_assert(!DCP_THRUST_CUDA(), "tests/thrust must be built with THRUST_DEVICE_SYSTEM=THRUST_DEVICE_SYSTEM_CPP");

namespace {

using namespace dcp_test;
using i64 = std::int64_t;

template <class T>
std::vector<T> host(const thrust::device_vector<T>& v) {
  return std::vector<T>(v.begin(), v.end());
}

// Packed step buffer whose every element says where it is: value = row * row_len + element + 1.
thrust::device_vector<double> packed_buffer(i64 rows, i64 row) {
  std::vector<double> h(std::size_t(rows * row));
  std::iota(h.begin(), h.end(), 1.0);
  return thrust::device_vector<double>(h.begin(), h.end());
}

constexpr int sps[] = {1, 2, 3, 4, 8};

// --- micro-batch assembly ------------------------------------------------------------------------

TEST(MicroBatch, SortedOrderAndCuSeqlensMatchTheReference) {
  std::mt19937_64 rng(1);
  for (int trial = 0; trial < 200; ++trial) {
    auto s = random_1d(rng, 12, 300);
    const int sp = sps[trial % 5];
    const i64 pad_to = trial % 3 == 0 ? 0 : 1 + trial % 4;
    auto mb = dcp::make_micro_batch(s, sp, trial % sp, {dcp::shard_axis::tokens, pad_to});
    const auto order = ref_order(s);
    ASSERT_EQ(mb.sequences, i64(s.size()));
    std::vector<std::int32_t> cu{0}, cup{0};
    std::vector<i64> src(s.size(), 0);
    for (std::size_t i = 1; i < s.size(); ++i) src[i] = src[i - 1] + s[i - 1].tokens;
    for (std::size_t j = 0; j < order.size(); ++j) {
      const auto& q = s[std::size_t(order[j])];
      EXPECT_EQ(mb.order[j], order[j]);
      EXPECT_EQ(mb.ids[j], q.id);
      EXPECT_EQ(mb.tokens[j], q.tokens);
      EXPECT_EQ(mb.source_offsets[j], src[std::size_t(order[j])]);
      const i64 p = ref_padded(q.tokens, sp, pad_to);
      EXPECT_EQ(mb.padded[j], p);
      EXPECT_GE(p, q.tokens);
      if (pad_to > 0) {
        EXPECT_EQ(p % (sp * pad_to), 0);
        EXPECT_LT(p - q.tokens, sp * pad_to);
      }
      cu.push_back(cu.back() + std::int32_t(q.tokens));
      cup.push_back(cup.back() + std::int32_t(p));
    }
    EXPECT_EQ(host(mb.cu_seqlens), cu);
    EXPECT_EQ(host(mb.cu_seqlens_padded), cup);
    EXPECT_EQ(mb.total_tokens, cu.back());
    EXPECT_EQ(mb.padded_tokens, cup.back());
  }
}

TEST(MicroBatch, ShardBoundariesPartitionEverySequence) {
  std::mt19937_64 rng(2);
  for (int trial = 0; trial < 150; ++trial) {
    auto s = random_1d(rng, 10, 100);
    const int sp = sps[trial % 5];
    const i64 pad_to = trial % 2 ? 0 : 1 + trial % 3;
    auto mb = dcp::make_micro_batch(s, sp, 0, {dcp::shard_axis::tokens, pad_to});
    const auto table = host(mb.rank_offsets);
    const auto padded = host(mb.padded);
    const i64 b = mb.sequences;
    for (i64 j = 0; j < b; ++j) {
      i64 covered = 0, lo = padded[std::size_t(j)], hi = 0;
      for (int i = 0; i < sp; ++i) {
        const i64 rows = table[std::size_t(i * (b + 1) + j + 1)] - table[std::size_t(i * (b + 1) + j)];
        const ref_shard sh = ref_shard_of(padded[std::size_t(j)], sp, i);
        EXPECT_EQ(rows, sh.count) << "rank " << i << " sequence " << j;
        EXPECT_EQ(sh.begin, covered);  // contiguous, in rank order
        covered += rows;
        lo = std::min(lo, rows);
        hi = std::max(hi, rows);
        if (pad_to > 0) {
          EXPECT_EQ(rows % pad_to, 0);
        }
      }
      EXPECT_EQ(covered, padded[std::size_t(j)]);
      EXPECT_LE(hi - lo, pad_to > 0 ? 0 : 1) << "shards of one sequence differ by at most one (none when padded)";
    }
    i64 all = 0;
    for (int i = 0; i < sp; ++i) all += mb.rank_rows[std::size_t(i)];
    EXPECT_EQ(all, mb.padded_tokens);
  }
}

TEST(MicroBatch, LocalIndexMatchesTheReferenceOnEveryAxis) {
  std::mt19937_64 rng(3);
  for (int trial = 0; trial < 150; ++trial) {
    const int sp = sps[trial % 5];
    const dcp::shard_axis axis = dcp::shard_axis(trial % 3);
    const dcp::micro_batch_options opt{axis, axis == dcp::shard_axis::tokens ? i64(trial % 4) : 0};
    auto s = axis == dcp::shard_axis::tokens ? random_1d(rng, 8, 64) : random_2d(rng, 6, 9, 11);
    for (int r = 0; r < sp; ++r) {
      auto mb = dcp::make_micro_batch(s, sp, r, opt);
      EXPECT_EQ(host(mb.local_index), ref_local_index(s, sp, r, opt)) << "axis " << axis << " rank " << r << "/" << sp;
      const auto off = mb.local_offsets();
      EXPECT_EQ(off.back(), mb.local_rows);
    }
  }
}

TEST(MicroBatch, EveryTokenIsGatheredByExactlyOneRankAndScattersBack) {
  std::mt19937_64 rng(4);
  for (int trial = 0; trial < 100; ++trial) {
    const int sp = sps[trial % 5];
    const dcp::shard_axis axis = dcp::shard_axis(trial % 3);
    const dcp::micro_batch_options opt{axis, axis == dcp::shard_axis::tokens ? i64(trial % 3) : 0};
    auto s = axis == dcp::shard_axis::tokens ? random_1d(rng, 8, 80) : random_2d(rng, 5, 7, 13);
    const i64 row = 1 + trial % 5;
    i64 total = 0;
    for (const auto& q : s) total += q.tokens;
    const auto packed = packed_buffer(total, row);
    thrust::device_vector<double> rebuilt(packed.size(), -1.0);
    std::multiset<i64> seen;
    for (int r = 0; r < sp; ++r) {
      auto mb = dcp::make_micro_batch(s, sp, r, opt);
      const auto local = dcp::gather_local_rows(mb, packed, row);
      ASSERT_EQ(i64(local.size()), mb.local_rows * row);
      const auto idx = host(mb.local_index);
      for (i64 k = 0; k < mb.local_rows; ++k)
        for (i64 e = 0; e < row; ++e) {
          const double want = idx[std::size_t(k)] < 0 ? 0.0 : double(idx[std::size_t(k)] * row + e + 1);
          ASSERT_EQ(local[std::size_t(k * row + e)], want);
        }
      for (i64 v : idx)
        if (v >= 0) seen.insert(v);
      dcp::scatter_local_rows(mb, std::span<const double>(thrust::raw_pointer_cast(local.data()), local.size()), row,
                              std::span<double>(thrust::raw_pointer_cast(rebuilt.data()), rebuilt.size()));
    }
    ASSERT_EQ(i64(seen.size()), total);
    for (i64 t = 0; t < total; ++t) EXPECT_EQ(seen.count(t), 1u) << "packed row " << t;
    EXPECT_EQ(host(rebuilt), host(packed));
  }
}

TEST(MicroBatch, PlanStepOverloadUsesTheStepsGroup) {
  dcp::plan_step step;
  step.ranks = dcp::rank_block{4, 4};
  step.sequences = {{1, 10, 1, 10, 0.5}, {2, 30, 1, 30, 0.5}};
  auto mb = dcp::make_micro_batch(step, 3);
  EXPECT_EQ(mb.sp, 4);
  EXPECT_EQ(mb.rank, 3);
  EXPECT_EQ(mb.order[0], 1);
  EXPECT_EQ(mb.total_tokens, 40);
  EXPECT_EQ(mb.local_rows, 7 + 2);  // shard 3 of 30 and of 10
}

TEST(MicroBatch, BadInputIsAClearError) {
  std::vector<dcp::planned_sequence> s{{1, 12, 3, 4, 1.0}};
  const auto bad = dcp::errc::invalid_argument;
  EXPECT_DCP_ERROR(dcp::make_micro_batch(s, 2, 2), bad, "rank 2 of a group of 2");
  EXPECT_DCP_ERROR(dcp::make_micro_batch(s, 0, 0), bad, "sp >= 1");
  EXPECT_DCP_ERROR(dcp::make_micro_batch(s, 2, 0, dcp::micro_batch_options{dcp::shard_axis::frames, 2}), bad, "pad_to = 2");
  s[0].tokens = 13;
  EXPECT_DCP_ERROR(dcp::make_micro_batch(s, 2, 0, dcp::micro_batch_options{dcp::shard_axis::spatial, 0}), bad,
                   "13 tokens and shape 3 x 4");
  s[0].tokens = -1;
  EXPECT_DCP_ERROR(dcp::make_micro_batch(s, 2, 0), bad, "-1 tokens");
  s[0].tokens = i64(1) << 31;
  EXPECT_DCP_ERROR(dcp::make_micro_batch(s, 1, 0), bad, "int32");
  s[0].tokens = 12;
  auto mb = dcp::make_micro_batch(s, 2, 0);
  thrust::device_vector<double> packed(12 * 3), local(5);
  EXPECT_DCP_ERROR(dcp::gather_local_rows(mb, std::span<const double>(thrust::raw_pointer_cast(packed.data()), packed.size()),
                                         3, std::span<double>(thrust::raw_pointer_cast(local.data()), local.size())),
                   bad, "local has 5 elements, expected 18");
}

// --- re-layouts through the local communicator ---------------------------------------------------

TEST(Relayout, UlyssesMatchesTheReferenceAndRoundTrips) {
  std::mt19937_64 rng(5);
  for (int trial = 0; trial < 60; ++trial) {
    const int sp = sps[trial % 5];
    const i64 heads = sp * (1 + trial % 3), head_dim = 1 + trial % 4, width = heads * head_dim;
    const i64 pad_to = trial % 4 == 0 ? 1 + trial % 3 : 0;
    auto s = random_1d(rng, 6, 70);
    i64 total = 0;
    for (const auto& q : s) total += q.tokens;
    const auto packed = packed_buffer(total, width);
    dcp::local_world::run(sp, [&](dcp::local_comm& comm) {
      auto mb = dcp::make_micro_batch(s, sp, comm.rank(), {dcp::shard_axis::tokens, pad_to});
      const auto tokens = dcp::gather_local_rows(mb, packed, width);
      const auto to_heads = dcp::make_ulysses_relayout(mb, heads, head_dim);
      const auto heads_buf = dcp::relayout(comm, to_heads, tokens);
      // Reference: every (padded) token of every sorted sequence, this rank's heads only.
      const i64 hp = heads / sp;
      const auto cup = host(mb.cu_seqlens_padded);
      const auto len = host(mb.tokens);
      const auto src = host(mb.source_offsets);
      ASSERT_EQ(i64(heads_buf.size()), mb.padded_tokens * hp * head_dim);
      for (i64 j = 0; j < mb.sequences; ++j)
        for (i64 t = 0; t < cup[std::size_t(j + 1)] - cup[std::size_t(j)]; ++t)
          for (i64 e = 0; e < hp * head_dim; ++e) {
            const i64 o = (cup[std::size_t(j)] + t) * hp * head_dim + e;
            const double want =
                t < len[std::size_t(j)] ? double((src[std::size_t(j)] + t) * width + comm.rank() * hp * head_dim + e + 1) : 0.0;
            ASSERT_EQ(heads_buf[std::size_t(o)], want) << "sp " << sp << " rank " << comm.rank() << " seq " << j << " t " << t;
          }
      const auto back = dcp::relayout(comm, dcp::inverse(to_heads), heads_buf);
      EXPECT_EQ(host(back), host(tokens));
    });
  }
}

TEST(Relayout, DspSpatialToFramesMatchesTheFramesShardsAndRoundTrips) {
  std::mt19937_64 rng(6);
  for (int trial = 0; trial < 60; ++trial) {
    const int sp = sps[trial % 5];
    const i64 channels = 1 + trial % 6;
    auto s = random_2d(rng, 5, 10, 12);
    i64 total = 0;
    for (const auto& q : s) total += q.tokens;
    const auto packed = packed_buffer(total, channels);
    dcp::local_world::run(sp, [&](dcp::local_comm& comm) {
      auto by_spatial = dcp::make_micro_batch(s, sp, comm.rank(), {dcp::shard_axis::spatial, 0});
      auto by_frames = dcp::make_micro_batch(s, sp, comm.rank(), {dcp::shard_axis::frames, 0});
      const auto xs = dcp::gather_local_rows(by_spatial, packed, channels);
      const auto xf = dcp::gather_local_rows(by_frames, packed, channels);
      const auto to_frames = dcp::make_dsp_relayout(by_spatial, channels, dcp::shard_axis::spatial);
      const auto to_spatial = dcp::make_dsp_relayout(by_frames, channels, dcp::shard_axis::frames);
      const auto got_f = dcp::relayout(comm, to_frames, xs);
      EXPECT_EQ(host(got_f), host(xf)) << "sp " << sp << " rank " << comm.rank();
      const auto got_s = dcp::relayout(comm, to_spatial, got_f);
      EXPECT_EQ(host(got_s), host(xs));
      EXPECT_EQ(host(dcp::relayout(comm, dcp::inverse(to_frames), got_f)), host(xs));
    });
  }
}

// One sequence: the device re-layouts are the host ones of <dcp/comm/ulysses.hpp> and <dcp/comm/dsp.hpp>.
TEST(Relayout, OneSequenceAgreesWithTheHostRelayouts) {
  std::mt19937_64 rng(7);
  for (int trial = 0; trial < 40; ++trial) {
    const int sp = sps[trial % 5];
    const i64 heads = 2 * sp, head_dim = 3, frames = 1 + i64(rng() % 9), spatial = 1 + i64(rng() % 13), channels = 2;
    const i64 tokens = i64(rng() % 50);
    const auto packed1 = packed_buffer(tokens, heads * head_dim);
    const auto packed2 = packed_buffer(frames * spatial, channels);
    dcp::local_world::run(sp, [&](dcp::local_comm& comm) {
      std::vector<dcp::planned_sequence> one{{9, tokens, 1, tokens, 1.0}};
      auto mb = dcp::make_micro_batch(one, sp, comm.rank());
      const auto x = host(dcp::gather_local_rows(mb, packed1, heads * head_dim));
      std::vector<double> want(std::size_t(tokens * heads / sp * head_dim));
      dcp::ulysses_to_head_shards(comm, dcp::ulysses_shape{tokens, heads, head_dim}, std::span<const double>(x),
                                  std::span<double>(want));
      const auto got = dcp::relayout(comm, dcp::make_ulysses_relayout(mb, heads, head_dim),
                                     thrust::device_vector<double>(x.begin(), x.end()));
      EXPECT_EQ(host(got), want);

      std::vector<dcp::planned_sequence> video{{3, frames * spatial, frames, spatial, 1.0}};
      auto ms = dcp::make_micro_batch(video, sp, comm.rank(), {dcp::shard_axis::spatial, 0});
      const auto xs = host(dcp::gather_local_rows(ms, packed2, channels));
      const dcp::dsp_shape shape{frames, spatial, channels};
      std::vector<double> want_t(std::size_t(dcp::dsp_temporal_shard_size(shape, sp, comm.rank())));
      dcp::dsp_to_temporal_shards(comm, shape, std::span<const double>(xs), std::span<double>(want_t));
      const auto got_t = dcp::relayout(comm, dcp::make_dsp_relayout(ms, channels, dcp::shard_axis::spatial),
                                       thrust::device_vector<double>(xs.begin(), xs.end()));
      EXPECT_EQ(host(got_t), want_t);
    });
  }
}

TEST(Relayout, UniformCountsTakeTheEqualCountCollectiveOnEveryRank) {
  std::vector<dcp::planned_sequence> even{{0, 64, 1, 64, 1.0}, {1, 32, 1, 32, 0.0}};
  auto mb = dcp::make_micro_batch(even, 4, 1);
  EXPECT_TRUE(dcp::make_ulysses_relayout(mb, 8, 2).uniform);
  std::vector<dcp::planned_sequence> uneven{{0, 63, 1, 63, 1.0}};
  EXPECT_FALSE(dcp::make_ulysses_relayout(dcp::make_micro_batch(uneven, 4, 1), 8, 2).uniform);
  EXPECT_TRUE(dcp::make_ulysses_relayout(dcp::make_micro_batch(uneven, 4, 1, {dcp::shard_axis::tokens, 1}), 8, 2).uniform);
}

TEST(Relayout, BadInputIsAClearError) {
  std::vector<dcp::planned_sequence> s{{0, 10, 2, 5, 1.0}};
  auto mb = dcp::make_micro_batch(s, 2, 0);
  EXPECT_THROW(dcp::make_ulysses_relayout(mb, 3, 4), dcp::error);  // heads % sp
  EXPECT_THROW(dcp::make_ulysses_relayout(mb, 4, 0), dcp::error);
  EXPECT_THROW(dcp::make_dsp_relayout(mb, 4, dcp::shard_axis::spatial), dcp::error);  // tokens axis
  dcp::local_world::run(2, [&](dcp::local_comm& comm) {
    auto m = dcp::make_ulysses_relayout(dcp::make_micro_batch(s, 2, comm.rank()), 4, 4);
    // Both ranks pass a wrong size: the checks fail before any collective.
    thrust::device_vector<float> in(std::size_t(m.in_size() + 1)), out(std::size_t(m.out_size()));
    EXPECT_DCP_ERROR(dcp::relayout(comm, m, std::span<const float>(thrust::raw_pointer_cast(in.data()), in.size()),
                                   std::span<float>(thrust::raw_pointer_cast(out.data()), out.size())),
                     dcp::errc::invalid_argument, "in has 81 elements, expected 80");
  });
  auto m = dcp::make_ulysses_relayout(mb, 4, 4);
  dcp::local_world::run(1, [&](dcp::local_comm& comm) {
    thrust::device_vector<float> in(std::size_t(m.in_size()));
    EXPECT_THROW(dcp::relayout(comm, m, in), dcp::error);  // a map of 2 ranks on a world of 1
  });
}

}  // namespace
