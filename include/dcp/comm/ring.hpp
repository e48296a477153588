#pragma once
/// \file
/// Ring attention, the "r" of Ulysses x Ring sequence parallelism (DESIGN section 4.3): a
/// sequence's tokens are spread over the r ranks of a ring communicator; each rank holds the
/// queries, keys and values of its tokens ([n][heads][head_dim], the heads its Ulysses group
/// gave it) and their positions in the sequence. The K/V blocks pass around the ring (r - 1
/// hops) while each rank folds them into an online softmax; the backward pass sends the K/V
/// blocks round again with their dK/dV accumulators (r - 1 hops each), so every rank ends with
/// the gradients of its own queries, keys and values. Exact (the same sums as whole-sequence
/// attention, in another order). Causal masking uses the positions, so any token split works;
/// optional segment ids (one per token) restrict attention to tokens of the same segment, for a
/// packed micro-step of several sequences (positions then index the packed axis);
/// `zigzag_tokens` is the balanced one (ring position j holds half-chunks j and 2r - 1 - j).
/// Host memory only (`host_communicator`).
///
/// The circulating blocks (K, V, their positions and segment ids, and in backward the dK/dV
/// accumulators and the gradients they bring home) are `ring_buffer`s: allocated through
/// `dcp::counting_allocator`, so a `dcp::memory_counter` installed on the calling thread counts
/// them (the profiler's peak memory includes them). `ring_forward_peak_bytes` and
/// `ring_backward_peak_bytes` say how many bytes that is at most.

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <vector>

#include <dcp/comm/comm_concepts.hpp>
#include <dcp/comm/shard.hpp>
#include <dcp/error.hpp>
#include <dcp/memory_counter.hpp>

namespace dcp {

/// A block that travels around the ring (counted by the thread's `memory_counter`, if any).
template <class T>
using ring_buffer = std::vector<T, counting_allocator<T>>;

/// The token positions ring position `j` of `r` holds under zig-zag: half-chunks j and
/// 2r - 1 - j of the sequence's 2r near-equal half-chunks, so each position's causal work is
/// the same to within one half-chunk row.
inline std::vector<std::int64_t> zigzag_tokens(std::int64_t tokens, int r, int j) {
  check(r >= 1 && j >= 0 && j < r, errc::invalid_argument,
        [&] { return "zigzag_tokens: ring position " + std::to_string(j) + " outside [0, " + std::to_string(r) + ")"; });
  std::vector<std::int64_t> out;
  for (const int half : {j, 2 * r - 1 - j}) {
    const shard s = shard_of(tokens, 2 * r, half);
    for (std::int64_t t = s.begin; t < s.end(); ++t) out.push_back(t);
  }
  return out;
}

/// The attention a ring runs: every rank's rows are [tokens][heads][head_dim].
struct ring_attention_shape {
  std::int64_t heads = 1;
  std::int64_t head_dim = 1;
  bool causal = false;  ///< key position p attends only to query positions >= p
};

namespace detail {

// The rows of every ring rank (an all-gather), checked against the data this rank passes.
template <host_communicator Comm>
std::vector<std::int64_t> ring_rows(Comm& ring, std::span<const std::int64_t> positions, const ring_attention_shape& s,
                                    std::size_t q_size, const char* op) {
  check(ring.valid(), errc::invalid_argument, [&] { return std::string(op) + ": the ring communicator is null"; });
  check(s.heads >= 1 && s.head_dim >= 1, errc::invalid_argument, [&] {
    return std::string(op) + ": heads = " + std::to_string(s.heads) + " and head_dim = " + std::to_string(s.head_dim) +
           " must be positive";
  });
  const auto n = static_cast<std::int64_t>(positions.size());
  check(static_cast<std::int64_t>(q_size) == n * s.heads * s.head_dim, errc::invalid_argument, [&] {
    return std::string(op) + ": " + std::to_string(q_size) + " elements for " + std::to_string(n) + " tokens x " +
           std::to_string(s.heads) + " heads x " + std::to_string(s.head_dim) + " head_dim";
  });
  std::vector<std::int64_t> rows(static_cast<std::size_t>(ring.size()));
  const std::int64_t mine[1] = {n};
  ring.all_gather(std::span<const std::int64_t>(mine), std::span<std::int64_t>(rows));
  return rows;
}

// Sends `out` to the next ring rank and receives the previous rank's block into `in`. Even
// ranks send first and odd ranks receive first, so a blocking send cannot deadlock the ring.
template <host_communicator Comm, class T>
void ring_shift(Comm& ring, std::span<const T> out, std::span<T> in, int tag) {
  const int r = ring.size(), me = ring.rank();
  if (me % 2 == 0) {
    ring.send(out, (me + 1) % r, tag);
    ring.recv(in, (me + r - 1) % r, tag);
  } else {
    ring.recv(in, (me + r - 1) % r, tag);
    ring.send(out, (me + 1) % r, tag);
  }
}

// Segment ids, when given, are one per token.
inline void check_segments(std::span<const std::int64_t> segments, std::int64_t n, const char* op) {
  check(segments.empty() || static_cast<std::int64_t>(segments.size()) == n, errc::invalid_argument, [&] {
    return std::string(op) + ": " + std::to_string(segments.size()) + " segment ids for " + std::to_string(n) +
           " tokens; give one per token or none";
  });
}

// Whether query row i attends key j of the block held (positions kpos, segments kseg).
inline auto mask(const ring_attention_shape& s, std::span<const std::int64_t> positions,
                 std::span<const std::int64_t> segments) {
  return [causal = s.causal, positions, segments](std::int64_t i, const ring_buffer<std::int64_t>& kpos,
                                                   const ring_buffer<std::int64_t>& kseg, std::int64_t j) {
    const auto a = static_cast<std::size_t>(i), b = static_cast<std::size_t>(j);
    if (!segments.empty() && kseg[b] != segments[a]) return false;
    return !causal || kpos[b] <= positions[a];
  };
}

}  // namespace detail

/// Forward ring attention: `out` (same layout as q) = softmax(q k^T / sqrt(head_dim)) v over
/// every key of the sequence (of the query's segment when `segments` is given), causal by
/// position when `s.causal`; `lse` ([n][heads]) receives each row's log-sum-exp for the
/// backward pass. Collective over `ring`; every rank passes segments or none does.
template <host_communicator Comm, class T>
void ring_attention_forward(Comm& ring, const ring_attention_shape& s, std::span<const std::int64_t> positions,
                            std::span<const T> q, std::span<const T> k, std::span<const T> v, std::span<T> out,
                            std::span<T> lse, std::span<const std::int64_t> segments = {}) {
  const auto rows = detail::ring_rows(ring, positions, s, q.size(), "ring_attention_forward");
  const std::int64_t n = static_cast<std::int64_t>(positions.size()), H = s.heads, D = s.head_dim;
  check(k.size() == q.size() && v.size() == q.size() && out.size() == q.size() &&
            static_cast<std::int64_t>(lse.size()) == n * H,
        errc::invalid_argument, [] { return std::string("ring_attention_forward: k, v, out must match q and lse hold n x heads"); });
  const int r = ring.size(), me = ring.rank();
  const T scale = T(1) / std::sqrt(static_cast<T>(D));
  detail::check_segments(segments, n, "ring_attention_forward");
  const bool by_segment = !segments.empty();
  const auto attends = detail::mask(s, positions, segments);
  std::vector<T> m(static_cast<std::size_t>(n * H), -std::numeric_limits<T>::infinity()), l(m.size(), T(0));
  std::vector<T> acc(q.size(), T(0));
  // The block held now (this rank's own first); the ring passes it on, one hop per step.
  ring_buffer<std::int64_t> kpos(positions.begin(), positions.end()), kseg(segments.begin(), segments.end());
  ring_buffer<T> kb(k.begin(), k.end()), vb(v.begin(), v.end());
  for (int step = 0; step < r; ++step) {
    const std::int64_t kn = static_cast<std::int64_t>(kpos.size());
    for (std::int64_t i = 0; i < n; ++i)
      for (std::int64_t h = 0; h < H; ++h) {
        const T* qi = q.data() + (i * H + h) * D;
        T* ai = acc.data() + (i * H + h) * D;
        T& mi = m[static_cast<std::size_t>(i * H + h)];
        T& li = l[static_cast<std::size_t>(i * H + h)];
        for (std::int64_t j = 0; j < kn; ++j) {
          if (!attends(i, kpos, kseg, j)) continue;
          const T* kj = kb.data() + (j * H + h) * D;
          const T* vj = vb.data() + (j * H + h) * D;
          T dot = 0;
          for (std::int64_t d = 0; d < D; ++d) dot += qi[d] * kj[d];
          const T sc = dot * scale;
          if (sc > mi) {  // rescale what is accumulated to the new running max
            const T f = std::exp(mi - sc);
            li *= f;
            for (std::int64_t d = 0; d < D; ++d) ai[d] *= f;
            mi = sc;
          }
          const T p = std::exp(sc - mi);
          li += p;
          for (std::int64_t d = 0; d < D; ++d) ai[d] += p * vj[d];
        }
      }
    if (step + 1 == r) break;
    // The block of ring rank (me - step - 1) arrives from the previous rank.
    const int from = (me + r - step - 1) % r;
    const std::int64_t in_n = rows[static_cast<std::size_t>(from)];
    ring_buffer<std::int64_t> pin(static_cast<std::size_t>(in_n));
    ring_buffer<T> kin(static_cast<std::size_t>(in_n * H * D)), vin(kin.size());
    detail::ring_shift(ring, std::span<const std::int64_t>(kpos), std::span<std::int64_t>(pin), 4 * step);
    detail::ring_shift(ring, std::span<const T>(kb), std::span<T>(kin), 4 * step + 1);
    detail::ring_shift(ring, std::span<const T>(vb), std::span<T>(vin), 4 * step + 2);
    if (by_segment) {
      ring_buffer<std::int64_t> sin(pin.size());
      detail::ring_shift(ring, std::span<const std::int64_t>(kseg), std::span<std::int64_t>(sin), 4 * step + 3);
      kseg.swap(sin);
    }
    kpos.swap(pin), kb.swap(kin), vb.swap(vin);
  }
  for (std::int64_t i = 0; i < n * H; ++i) {
    const auto u = static_cast<std::size_t>(i);
    check(l[u] > 0, errc::invalid_argument, [&] {
      return "ring_attention_forward: query row " + std::to_string(i / H) + " (position " +
             std::to_string(positions[static_cast<std::size_t>(i / H)]) + ") sees no key; causal attention needs "
             "every position's own key in the sequence";
    });
    lse[u] = m[u] + std::log(l[u]);
    for (std::int64_t d = 0; d < D; ++d) out[u * static_cast<std::size_t>(D) + static_cast<std::size_t>(d)] =
        acc[u * static_cast<std::size_t>(D) + static_cast<std::size_t>(d)] / l[u];
  }
}

/// Backward ring attention: given the forward's `out` and `lse` and the loss gradient `d_out`,
/// writes dq, dk, dv (same layout as q) for this rank's tokens, with the forward's `segments`.
/// Collective over `ring`.
/// With P = exp(q k^T / sqrt(d) - lse): dv = P^T d_out, dP = d_out v^T,
/// dS = P (dP - rowsum(d_out o)), dq = dS k / sqrt(d), dk = dS^T q / sqrt(d).
template <host_communicator Comm, class T>
void ring_attention_backward(Comm& ring, const ring_attention_shape& s, std::span<const std::int64_t> positions,
                             std::span<const T> q, std::span<const T> k, std::span<const T> v, std::span<const T> out,
                             std::span<const T> lse, std::span<const T> d_out, std::span<T> dq, std::span<T> dk,
                             std::span<T> dv, std::span<const std::int64_t> segments = {}) {
  const auto rows = detail::ring_rows(ring, positions, s, q.size(), "ring_attention_backward");
  const std::int64_t n = static_cast<std::int64_t>(positions.size()), H = s.heads, D = s.head_dim;
  check(k.size() == q.size() && v.size() == q.size() && out.size() == q.size() && d_out.size() == q.size() &&
            dq.size() == q.size() && dk.size() == q.size() && dv.size() == q.size() &&
            static_cast<std::int64_t>(lse.size()) == n * H,
        errc::invalid_argument,
        [] { return std::string("ring_attention_backward: k, v, out, d_out, dq, dk, dv must match q and lse hold n x heads"); });
  const int r = ring.size(), me = ring.rank();
  const T scale = T(1) / std::sqrt(static_cast<T>(D));
  detail::check_segments(segments, n, "ring_attention_backward");
  const bool by_segment = !segments.empty();
  const auto attends = detail::mask(s, positions, segments);
  std::vector<T> delta(static_cast<std::size_t>(n * H), T(0));  // rowsum(d_out o)
  for (std::int64_t i = 0; i < n * H; ++i)
    for (std::int64_t d = 0; d < D; ++d) delta[static_cast<std::size_t>(i)] += d_out[i * D + d] * out[i * D + d];
  std::fill(dq.begin(), dq.end(), T(0));
  // Adds the block (kpos, kb, vb)'s contributions to dq and to its accumulators (dkb, dvb).
  auto fold = [&](const ring_buffer<std::int64_t>& kpos, const ring_buffer<std::int64_t>& kseg, const ring_buffer<T>& kb,
                  const ring_buffer<T>& vb, std::span<T> dkb, std::span<T> dvb) {
    const std::int64_t kn = static_cast<std::int64_t>(kpos.size());
    for (std::int64_t i = 0; i < n; ++i)
      for (std::int64_t h = 0; h < H; ++h) {
        const std::int64_t row = i * H + h;
        const T* qi = q.data() + row * D;
        const T* gi = d_out.data() + row * D;
        T* dqi = dq.data() + row * D;
        for (std::int64_t j = 0; j < kn; ++j) {
          if (!attends(i, kpos, kseg, j)) continue;
          const T* kj = kb.data() + (j * H + h) * D;
          const T* vj = vb.data() + (j * H + h) * D;
          T dot = 0, dp = 0;
          for (std::int64_t d = 0; d < D; ++d) dot += qi[d] * kj[d], dp += gi[d] * vj[d];
          const T p = std::exp(dot * scale - lse[static_cast<std::size_t>(row)]);
          const T ds = p * (dp - delta[static_cast<std::size_t>(row)]) * scale;
          T* dkj = dkb.data() + (j * H + h) * D;
          T* dvj = dvb.data() + (j * H + h) * D;
          for (std::int64_t d = 0; d < D; ++d) {
            dvj[d] += p * gi[d];
            dqi[d] += ds * kj[d];
            dkj[d] += ds * qi[d];
          }
        }
      }
  };
  ring_buffer<std::int64_t> kpos(positions.begin(), positions.end()), kseg(segments.begin(), segments.end());
  ring_buffer<T> kb(k.begin(), k.end()), vb(v.begin(), v.end());
  // This rank's own block accumulates straight into dk, dv.
  std::fill(dk.begin(), dk.end(), T(0));
  std::fill(dv.begin(), dv.end(), T(0));
  fold(kpos, kseg, kb, vb, dk, dv);
  // The accumulators of the block held now; empty until the first remote block arrives.
  ring_buffer<T> dkb, dvb;
  for (int step = 1; step < r; ++step) {
    const int from = (me + r - step) % r;  // owner of the block arriving now
    const std::int64_t in_n = rows[static_cast<std::size_t>(from)];
    ring_buffer<std::int64_t> pin(static_cast<std::size_t>(in_n));
    ring_buffer<T> kin(static_cast<std::size_t>(in_n * H * D)), vin(kin.size());
    const int tag = 6 * step;
    detail::ring_shift(ring, std::span<const std::int64_t>(kpos), std::span<std::int64_t>(pin), tag);
    detail::ring_shift(ring, std::span<const T>(kb), std::span<T>(kin), tag + 1);
    detail::ring_shift(ring, std::span<const T>(vb), std::span<T>(vin), tag + 2);
    ring_buffer<T> dkin(kin.size(), T(0)), dvin(kin.size(), T(0));
    if (step >= 2) {  // the accumulators travel one hop behind the block's first visit
      detail::ring_shift(ring, std::span<const T>(dkb), std::span<T>(dkin), tag + 3);
      detail::ring_shift(ring, std::span<const T>(dvb), std::span<T>(dvin), tag + 4);
    }
    if (by_segment) {
      ring_buffer<std::int64_t> sin(pin.size());
      detail::ring_shift(ring, std::span<const std::int64_t>(kseg), std::span<std::int64_t>(sin), tag + 5);
      kseg.swap(sin);
    }
    kpos.swap(pin), kb.swap(kin), vb.swap(vin), dkb.swap(dkin), dvb.swap(dvin);
    fold(kpos, kseg, kb, vb, dkb, dvb);
  }
  if (r > 1) {  // the last hop takes every accumulator home: this rank receives its own block's
    ring_buffer<T> dk_home(q.size()), dv_home(q.size());
    detail::ring_shift(ring, std::span<const T>(dkb), std::span<T>(dk_home), 6 * r);
    detail::ring_shift(ring, std::span<const T>(dvb), std::span<T>(dv_home), 6 * r + 1);
    for (std::size_t e = 0; e < dk.size(); ++e) dk[e] += dk_home[e], dv[e] += dv_home[e];
  }
}

/// Bytes of one block of `rows` tokens as it circulates: K and V (`bytes_per_value` each per
/// element), positions and, with segments, segment ids (8 bytes each per token).
inline double ring_block_bytes(std::int64_t rows, const ring_attention_shape& s, std::size_t bytes_per_value,
                               bool segments) {
  return static_cast<double>(rows) *
         (2.0 * static_cast<double>(s.heads * s.head_dim * static_cast<std::int64_t>(bytes_per_value)) + 8.0 +
          (segments ? 8.0 : 0.0));
}

/// The most `ring_buffer` bytes `ring_attention_forward` holds at once on ring rank `me`, whose
/// ranks hold `rows` tokens each: the block it holds and the one arriving, the largest pair over
/// its r - 1 hops (a ring of one rank passes nothing and holds only its own block's copy).
inline double ring_forward_peak_bytes(std::span<const std::int64_t> rows, int me, const ring_attention_shape& s,
                                      std::size_t bytes_per_value, bool segments) {
  const int r = static_cast<int>(rows.size());
  auto block = [&](int rank) { return ring_block_bytes(rows[static_cast<std::size_t>((rank % r + r) % r)], s, bytes_per_value, segments); };
  double peak = block(me);
  for (int step = 0; step + 1 < r; ++step) peak = std::max(peak, block(me - step) + block(me - step - 1));
  return peak;
}

/// The same for `ring_attention_backward`: at hop k the held block with its accumulators (none
/// before the first hop) and the arriving block with its accumulators; after the last hop the
/// held block, its accumulators and the gradients they bring home.
inline double ring_backward_peak_bytes(std::span<const std::int64_t> rows, int me, const ring_attention_shape& s,
                                       std::size_t bytes_per_value, bool segments) {
  const int r = static_cast<int>(rows.size());
  auto at = [&](int rank) { return rows[static_cast<std::size_t>((rank % r + r) % r)]; };
  auto block = [&](int rank) { return ring_block_bytes(at(rank), s, bytes_per_value, segments); };
  auto grads = [&](int rank) {
    return 2.0 * static_cast<double>(at(rank) * s.heads * s.head_dim * static_cast<std::int64_t>(bytes_per_value));
  };
  double peak = block(me);
  for (int step = 1; step < r; ++step)
    peak = std::max(peak, block(me - step + 1) + (step >= 2 ? grads(me - step + 1) : 0.0) + block(me - step) + grads(me - step));
  if (r > 1) peak = std::max(peak, block(me - r + 1) + grads(me - r + 1) + grads(me));
  return peak;
}

}  // namespace dcp
