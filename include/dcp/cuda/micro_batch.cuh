#pragma once
/// \file
/// Device-side assembly of one micro-step of a plan (DESIGN section 3, executed): the step's
/// sequences sorted longest first, `cu_seqlens` (exclusive scan, the varlen-attention format), every
/// rank's shard of every sequence, and the map that gathers this rank's rows out of the packed buffer
/// of the whole step.
///
/// Written against the Thrust device system (see `dcp/cuda/detail/thrust.cuh`): the same code runs on
/// the GPU under nvcc and on the CPU with `-DTHRUST_DEVICE_SYSTEM=THRUST_DEVICE_SYSTEM_CPP`.
///
/// Vocabulary. The *packed step buffer* holds every token of the step, sequences in the step's
/// order (`plan_step::sequences`), `row` elements per token. A rank's *local buffer* holds its shard
/// of every sequence, sequences in sorted order, rows contiguous per sequence. The shard axis:
///   - `tokens` (1D, Ulysses input): rank r holds tokens `shard_of(p_j, sp, r)` of sequence j, where
///     p_j = n_j (uneven shards, differing by at most one) or, with `pad_to = a > 0`, n_j rounded up
///     to a multiple of sp * a (equal shards, each a multiple of a, the padding rows zero at the end
///     of the sequence's last shards);
///   - `frames` (2D, DSP, spatial attention): rank r holds frames `shard_of(T_j, sp, r)`, all spatial
///     positions, rows ordered [frame][spatial];
///   - `spatial` (2D, DSP, temporal attention): rank r holds every frame and spatial positions
///     `shard_of(S_j, sp, r)`, rows ordered [frame][spatial].
/// 2D axes need tokens == frames * spatial for every sequence (no text tokens) and never pad.
///
/// \code
/// dcp::micro_batch mb = dcp::make_micro_batch(step, group_rank);           // tokens axis, uneven
/// thrust::device_vector<float> x = dcp::gather_local_rows(mb, packed, hidden);  // [local_rows][hidden]
/// attention(x, mb.cu_seqlens, ...);
/// \endcode

#include <algorithm>
#include <cstdint>
#include <limits>
#include <ostream>
#include <span>
#include <string>
#include <vector>

#include <dcp/cuda/detail/thrust.cuh>
#include <dcp/error.hpp>
#include <dcp/plan/plan.hpp>

namespace dcp {

/// How a sequence is split over the ranks of its group (see the file comment).
enum class shard_axis { tokens, frames, spatial };

inline const char* to_string(shard_axis a) noexcept {
  switch (a) {
    case shard_axis::tokens: return "tokens";
    case shard_axis::frames: return "frames";
    case shard_axis::spatial: return "spatial";
  }
  return "?";
}
inline std::ostream& operator<<(std::ostream& os, shard_axis a) { return os << to_string(a); }

/// Knobs of `make_micro_batch`.
struct micro_batch_options {
  shard_axis axis = shard_axis::tokens;
  /// Tokens axis only. 0: uneven shards, no padding. a > 0: every sequence padded to a multiple of
  /// sp * a tokens, so each rank's shard of it has the same length, a multiple of a (what an
  /// attention kernel with a tile of a tokens, or ring attention over 2 * sp chunks, needs).
  std::int64_t pad_to = 0;
  friend bool operator==(const micro_batch_options&, const micro_batch_options&) = default;
  friend std::ostream& operator<<(std::ostream& os, const micro_batch_options& o) {
    return os << "micro_batch_options{axis=" << o.axis << ", pad_to=" << o.pad_to << "}";
  }
};

/// One micro-step assembled for one rank of its group. Device vectors are indexed by sorted
/// position j in [0, sequences) unless stated otherwise.
struct micro_batch {
  micro_batch_options options;
  int sp = 1;                        ///< ranks of the group
  int rank = 0;                      ///< this rank in the group
  std::int64_t sequences = 0;        ///< b
  std::int64_t total_tokens = 0;     ///< sum n_j: rows of the packed step buffer
  std::int64_t padded_tokens = 0;    ///< sum p_j (== total_tokens without padding)
  std::int64_t local_rows = 0;       ///< rows of this rank's local buffer (padding included)
  std::vector<std::int64_t> rank_rows;  ///< host: rows of every rank's local buffer

  thrust::device_vector<std::int32_t> order;  ///< step position of sorted sequence j (longest first, stable)
  thrust::device_vector<std::int64_t> ids, tokens, frames, spatial;  ///< per sorted sequence
  thrust::device_vector<std::int64_t> padded;          ///< p_j (tokens axis; n_j otherwise)
  thrust::device_vector<std::int64_t> source_offsets;  ///< first row of sequence j in the packed step buffer
  thrust::device_vector<std::int32_t> cu_seqlens;         ///< b + 1: exclusive scan of n_j
  thrust::device_vector<std::int32_t> cu_seqlens_padded;  ///< b + 1: exclusive scan of p_j
  /// sp * (b + 1), rank-major: first row of sequence j in rank i's local buffer; entry
  /// i * (b + 1) + b is rank_rows[i].
  thrust::device_vector<std::int64_t> rank_offsets;
  /// local_rows: the packed step row each local row comes from, -1 for a padding row.
  thrust::device_vector<std::int64_t> local_index;

  /// b + 1 offsets of this rank's local buffer (its `cu_seqlens`), on the host.
  std::vector<std::int64_t> local_offsets() const {
    std::vector<std::int64_t> h(static_cast<std::size_t>(sequences + 1));
    auto first = rank_offsets.begin() + std::int64_t(rank) * (sequences + 1);
    thrust::copy(first, first + (sequences + 1), h.begin());
    return h;
  }
};

namespace detail {

struct pad_length {
  std::int64_t multiple;  // sp * pad_to, or 1
  DCP_HOST_DEVICE std::int64_t operator()(std::int64_t n) const { return (n + multiple - 1) / multiple * multiple; }
};

/// Rows rank i holds of sorted sequence j along `axis`.
struct shard_rows {
  shard_axis axis;
  int sp;
  const std::int64_t* padded;
  const std::int64_t* frames;
  const std::int64_t* spatial;
  DCP_HOST_DEVICE std::int64_t operator()(int i, std::int64_t j) const {
    switch (axis) {
      case shard_axis::tokens: return shard_count(padded[j], sp, i);
      case shard_axis::frames: return shard_count(frames[j], sp, i) * spatial[j];
      case shard_axis::spatial: return frames[j] * shard_count(spatial[j], sp, i);
    }
    return 0;
  }
};

/// Packed step row of local row k of rank `rank` (-1 for padding).
struct local_source {
  shard_axis axis;
  int sp, rank;
  std::int64_t b;
  const std::int64_t* offsets;  // this rank's b + 1 local offsets
  const std::int64_t* tokens;
  const std::int64_t* padded;
  const std::int64_t* frames;
  const std::int64_t* spatial;
  const std::int64_t* source;
  DCP_HOST_DEVICE std::int64_t operator()(std::int64_t k) const {
    const std::int64_t j = last_not_above(offsets, b + 1, k), w = k - offsets[j];
    switch (axis) {
      case shard_axis::tokens: {
        const std::int64_t t = shard_begin(padded[j], sp, rank) + w;
        return t < tokens[j] ? source[j] + t : -1;
      }
      case shard_axis::frames: {
        const std::int64_t s = spatial[j];
        return source[j] + (shard_begin(frames[j], sp, rank) + w / s) * s + w % s;
      }
      case shard_axis::spatial: {
        const std::int64_t c = shard_count(spatial[j], sp, rank);
        return source[j] + (w / c) * spatial[j] + shard_begin(spatial[j], sp, rank) + w % c;
      }
    }
    return -1;
  }
};

template <class T>
struct gather_rows_fn {
  const T* in;
  const std::int64_t* index;
  std::int64_t row;
  DCP_HOST_DEVICE T operator()(std::int64_t e) const {
    const std::int64_t r = index[e / row];
    return r < 0 ? T{} : in[r * row + e % row];
  }
};

template <class T>
struct scatter_rows_fn {
  const T* in;
  T* out;
  const std::int64_t* index;
  std::int64_t row;
  DCP_HOST_DEVICE void operator()(std::int64_t e) const {
    const std::int64_t r = index[e / row];
    if (r >= 0) out[r * row + e % row] = in[e];
  }
};

inline void check_buffer(const char* what, const char* name, std::size_t got, std::int64_t want) {
  check(got == std::size_t(want), errc::invalid_argument, [&] {
    return std::string(what) + ": " + name + " has " + std::to_string(got) + " elements, expected " +
           std::to_string(want);
  });
}

}  // namespace detail

/// Assembles the micro-step made of `sequences` (in step order) for rank `rank` of a group of `sp`.
/// Throws `dcp::error` (`errc::invalid_argument`) on sp < 1, a rank outside [0, sp), a negative
/// length, pad_to < 0 or padding on a 2D axis, a 2D axis with frames * spatial != tokens, or more
/// than 2^31 - 1 (padded) tokens, which the int32 `cu_seqlens` cannot hold.
inline micro_batch make_micro_batch(std::span<const planned_sequence> sequences, int sp, int rank,
                                    const micro_batch_options& options = {}, thrust_stream stream = {}) {
  check(sp >= 1 && rank >= 0 && rank < sp, errc::invalid_argument, [&] {
    return "make_micro_batch: rank " + std::to_string(rank) + " of a group of " + std::to_string(sp) +
           "; need sp >= 1 and 0 <= rank < sp";
  });
  check(options.pad_to >= 0 && (options.pad_to == 0 || options.axis == shard_axis::tokens),
        errc::invalid_argument, [&] {
          return "make_micro_batch: pad_to = " + std::to_string(options.pad_to) + " on the " +
                 to_string(options.axis) + " axis; padding is for the tokens axis and must be >= 0";
        });
  const bool two_d = options.axis != shard_axis::tokens;
  const std::int64_t b = std::int64_t(sequences.size());
  std::vector<std::int64_t> ids(sequences.size()), tokens(sequences.size()), frames(sequences.size()),
      spatial(sequences.size());
  for (std::size_t i = 0; i < sequences.size(); ++i) {
    const planned_sequence& q = sequences[i];
    check(q.tokens >= 0, errc::invalid_argument, [&] {
      return "make_micro_batch: sequence " + std::to_string(q.id) + " has " + std::to_string(q.tokens) +
             " tokens; lengths must be >= 0";
    });
    check(!two_d || (q.frames >= 1 && q.spatial >= 1 && q.frames * q.spatial == q.tokens), errc::invalid_argument,
          [&] {
            return "make_micro_batch: the " + std::string(to_string(options.axis)) + " axis needs tokens == frames * spatial, but sequence " +
                   std::to_string(q.id) + " has " + std::to_string(q.tokens) + " tokens and shape " +
                   std::to_string(q.frames) + " x " + std::to_string(q.spatial) +
                   "; shard 2D sequences without text tokens, or use the tokens axis";
          });
    ids[i] = q.id;
    tokens[i] = q.tokens;
    frames[i] = two_d ? q.frames : 1;
    spatial[i] = two_d ? q.spatial : q.tokens;
  }
  const std::int64_t multiple = options.pad_to > 0 ? options.pad_to * sp : 1;
  std::int64_t padded_total = 0;
  for (std::int64_t n : tokens) padded_total += detail::pad_length{multiple}(n);
  check(padded_total <= std::numeric_limits<std::int32_t>::max(), errc::invalid_argument, [&] {
    return "make_micro_batch: " + std::to_string(padded_total) +
           " (padded) tokens in one micro-step exceed the int32 range of cu_seqlens; split the step";
  });

  micro_batch mb;
  mb.options = options;
  mb.sp = sp;
  mb.rank = rank;
  mb.sequences = b;
  const auto pol = detail::policy(stream);
  const std::size_t bs = sequences.size();

  // Sort longest first; stable, so equal lengths keep the step order every rank agrees on.
  thrust::device_vector<std::int64_t> step_tokens(tokens.begin(), tokens.end()), keys = step_tokens;
  mb.order.resize(bs);
  thrust::sequence(pol, mb.order.begin(), mb.order.end());
  thrust::stable_sort_by_key(pol, keys.begin(), keys.end(), mb.order.begin(), thrust::greater<std::int64_t>());

  // Offsets in the packed step buffer are in step order; read them in sorted order.
  thrust::device_vector<std::int64_t> step_offsets(bs + 1);
  detail::exclusive_sum_with_total(detail::raw(step_tokens), b, detail::raw(step_offsets), stream);
  auto permuted = [&](const thrust::device_vector<std::int64_t>& v) {
    thrust::device_vector<std::int64_t> out(bs);
    thrust::gather(pol, mb.order.begin(), mb.order.end(), v.begin(), out.begin());
    return out;
  };
  mb.source_offsets = permuted(step_offsets);  // gathers only the first b entries
  mb.ids = permuted(thrust::device_vector<std::int64_t>(ids.begin(), ids.end()));
  mb.tokens = permuted(step_tokens);
  mb.frames = permuted(thrust::device_vector<std::int64_t>(frames.begin(), frames.end()));
  mb.spatial = permuted(thrust::device_vector<std::int64_t>(spatial.begin(), spatial.end()));
  mb.padded.resize(bs);
  thrust::transform(pol, mb.tokens.begin(), mb.tokens.end(), mb.padded.begin(), detail::pad_length{multiple});

  // cu_seqlens: exclusive scans with the total appended, narrowed to int32 (checked above).
  thrust::device_vector<std::int64_t> cu(bs + 1);
  detail::exclusive_sum_with_total(detail::raw(mb.tokens), b, detail::raw(cu), stream);
  mb.cu_seqlens.assign(cu.begin(), cu.end());
  mb.total_tokens = cu[bs];
  detail::exclusive_sum_with_total(detail::raw(mb.padded), b, detail::raw(cu), stream);
  mb.cu_seqlens_padded.assign(cu.begin(), cu.end());
  mb.padded_tokens = cu[bs];

  // Every rank's shard of every sequence, then this rank's gather map.
  const detail::shard_rows rows{options.axis, sp, detail::raw(mb.padded), detail::raw(mb.frames),
                                detail::raw(mb.spatial)};
  mb.rank_offsets = detail::offset_table(sp, b, rows, stream);
  const std::vector<std::int64_t> table = detail::to_host(mb.rank_offsets);
  mb.rank_rows.resize(std::size_t(sp));
  for (int i = 0; i < sp; ++i) mb.rank_rows[std::size_t(i)] = table[std::size_t(std::int64_t(i) * (b + 1) + b)];
  mb.local_rows = mb.rank_rows[std::size_t(rank)];
  mb.local_index.resize(std::size_t(mb.local_rows));
  const detail::local_source src{options.axis,
                                 sp,
                                 rank,
                                 b,
                                 detail::raw(mb.rank_offsets) + std::int64_t(rank) * (b + 1),
                                 detail::raw(mb.tokens),
                                 detail::raw(mb.padded),
                                 detail::raw(mb.frames),
                                 detail::raw(mb.spatial),
                                 detail::raw(mb.source_offsets)};
  thrust::counting_iterator<std::int64_t> k0(0);
  thrust::transform(pol, k0, k0 + mb.local_rows, mb.local_index.begin(), src);
  return mb;
}

/// `make_micro_batch` for the sequences of a plan step; `group_rank` is this rank's position in
/// the step's rank block (global rank - step.ranks.first).
inline micro_batch make_micro_batch(const plan_step& step, int group_rank, const micro_batch_options& options = {},
                                    thrust_stream stream = {}) {
  return make_micro_batch(std::span<const planned_sequence>(step.sequences), step.sp(), group_rank, options, stream);
}

/// Gathers this rank's local buffer ([local_rows][row]) out of the packed step buffer
/// ([total_tokens][row]); padding rows are zero. Spans point to device memory of the Thrust device
/// system (host memory on the CPP system).
template <class T>
void gather_local_rows(const micro_batch& mb, std::span<const T> packed, std::int64_t row, std::span<T> local,
                       thrust_stream stream = {}) {
  check(row >= 1, errc::invalid_argument, [&] { return "gather_local_rows: row = " + std::to_string(row) + " < 1"; });
  detail::check_buffer("gather_local_rows", "packed", packed.size(), mb.total_tokens * row);
  detail::check_buffer("gather_local_rows", "local", local.size(), mb.local_rows * row);
  thrust::counting_iterator<std::int64_t> e0(0);
  thrust::transform(detail::policy(stream), e0, e0 + std::int64_t(local.size()), local.data(),
                    detail::gather_rows_fn<T>{packed.data(), detail::raw(mb.local_index), row});
}

/// Convenience overload: returns the local buffer.
template <class T>
thrust::device_vector<T> gather_local_rows(const micro_batch& mb, const thrust::device_vector<T>& packed,
                                           std::int64_t row, thrust_stream stream = {}) {
  thrust::device_vector<T> local(std::size_t(std::max<std::int64_t>(mb.local_rows * row, 0)));
  gather_local_rows(mb, std::span<const T>(detail::raw(packed), packed.size()), row,
                    std::span<T>(detail::raw(local), local.size()), stream);
  return local;
}

/// The inverse of `gather_local_rows`: writes the local buffer's rows back to their places in the
/// packed step buffer (padding rows are dropped; rows other ranks own are left untouched). Used
/// for the gradients of a sharded input.
template <class T>
void scatter_local_rows(const micro_batch& mb, std::span<const T> local, std::int64_t row, std::span<T> packed,
                        thrust_stream stream = {}) {
  check(row >= 1, errc::invalid_argument, [&] { return "scatter_local_rows: row = " + std::to_string(row) + " < 1"; });
  detail::check_buffer("scatter_local_rows", "local", local.size(), mb.local_rows * row);
  detail::check_buffer("scatter_local_rows", "packed", packed.size(), mb.total_tokens * row);
  thrust::counting_iterator<std::int64_t> e0(0);
  thrust::for_each(detail::policy(stream), e0, e0 + std::int64_t(local.size()),
                   detail::scatter_rows_fn<T>{local.data(), packed.data(), detail::raw(mb.local_index), row});
}

}  // namespace dcp
