// Host references of the device assembly (tests/thrust and tests/cuda share them): plain loops,
// written independently of the library's formulas.
#pragma once
#include <algorithm>
#include <cstdint>
#include <numeric>
#include <random>
#include <vector>

#include <dcp/cuda/micro_batch.cuh>
#include <dcp/plan/plan.hpp>

namespace dcp_test {

using i64 = std::int64_t;

struct ref_shard {
  i64 begin, count;
};
// Written independently of the library's formula: hand items out one at a time, longest shards first.
inline ref_shard ref_shard_of(i64 n, int parts, int index) {
  std::vector<i64> sizes(std::size_t(parts), 0);
  for (i64 t = 0; t < n; ++t) sizes[std::size_t(t % parts)]++;
  i64 begin = 0;
  for (int i = 0; i < index; ++i) begin += sizes[std::size_t(i)];
  return {begin, sizes[std::size_t(index)]};
}

inline std::vector<int> ref_order(const std::vector<dcp::planned_sequence>& s) {
  std::vector<int> o(s.size());
  std::iota(o.begin(), o.end(), 0);
  std::stable_sort(o.begin(), o.end(), [&](int a, int b) { return s[std::size_t(a)].tokens > s[std::size_t(b)].tokens; });
  return o;
}

inline i64 ref_padded(i64 n, int sp, i64 pad_to) {
  if (pad_to == 0) return n;
  const i64 m = sp * pad_to;
  return (n + m - 1) / m * m;
}

// Packed step rows of rank `rank`'s local buffer, in order (-1 = padding).
inline std::vector<i64> ref_local_index(const std::vector<dcp::planned_sequence>& s, int sp, int rank,
                                        const dcp::micro_batch_options& opt) {
  std::vector<i64> start(s.size(), 0);
  for (std::size_t i = 1; i < s.size(); ++i) start[i] = start[i - 1] + s[i - 1].tokens;
  std::vector<i64> out;
  for (int j : ref_order(s)) {
    const auto& q = s[std::size_t(j)];
    const i64 base = start[std::size_t(j)];
    if (opt.axis == dcp::shard_axis::tokens) {
      const ref_shard sh = ref_shard_of(ref_padded(q.tokens, sp, opt.pad_to), sp, rank);
      for (i64 t = sh.begin; t < sh.begin + sh.count; ++t) out.push_back(t < q.tokens ? base + t : -1);
    } else if (opt.axis == dcp::shard_axis::frames) {
      const ref_shard sh = ref_shard_of(q.frames, sp, rank);
      for (i64 f = sh.begin; f < sh.begin + sh.count; ++f)
        for (i64 x = 0; x < q.spatial; ++x) out.push_back(base + f * q.spatial + x);
    } else {
      const ref_shard sh = ref_shard_of(q.spatial, sp, rank);
      for (i64 f = 0; f < q.frames; ++f)
        for (i64 x = sh.begin; x < sh.begin + sh.count; ++x) out.push_back(base + f * q.spatial + x);
    }
  }
  return out;
}

// --- random inputs -------------------------------------------------------------------------------

inline std::vector<dcp::planned_sequence> random_1d(std::mt19937_64& rng, int max_seqs, i64 max_len) {
  std::uniform_int_distribution<int> count(1, max_seqs);
  std::uniform_int_distribution<i64> len(0, max_len);
  std::vector<dcp::planned_sequence> s(std::size_t(count(rng)));
  for (std::size_t i = 0; i < s.size(); ++i) {
    s[i].id = i64(1000 + 7 * i);
    // Repeated lengths test the stable tie order; small ones give empty shards.
    s[i].tokens = (rng() % 4 == 0 && i > 0) ? s[i - 1].tokens : len(rng);
    s[i].spatial = s[i].tokens;
  }
  return s;
}

inline std::vector<dcp::planned_sequence> random_2d(std::mt19937_64& rng, int max_seqs, i64 max_frames, i64 max_spatial) {
  std::uniform_int_distribution<int> count(1, max_seqs);
  std::uniform_int_distribution<i64> f(1, max_frames), x(1, max_spatial);
  std::vector<dcp::planned_sequence> s(std::size_t(count(rng)));
  for (std::size_t i = 0; i < s.size(); ++i) {
    s[i].id = i64(i);
    s[i].frames = f(rng);
    s[i].spatial = x(rng);
    s[i].tokens = s[i].frames * s[i].spatial;
  }
  return s;
}

}  // namespace dcp_test
