#pragma once
/// \file
/// DSP re-layouts of 2D sequence parallelism (Dynamic Sequence Parallelism; DESIGN section 4
/// counts c = 2 of them per block): a video of `frames` (T) latent frames of `spatial` (S) tokens,
/// `channels` (C) elements each, held by an sp group either
///   - spatial-sharded:  rank r holds tokens `shard_of(S, sp, r)` of every frame: [T][S_r][C]
///                       (what temporal attention needs: whole frame sequences per token);
///   - temporal-sharded: rank r holds frames `shard_of(T, sp, r)`, all their tokens: [T_r][S][C]
///                       (what spatial attention needs: whole frames).
/// `dsp_to_temporal_shards` goes spatial -> temporal, `dsp_to_spatial_shards` back. Shards may be
/// uneven or empty on either axis (T = 1 images, S % sp != 0). Both are one all-to-all (variable
/// counts), exact, and inverse to each other. Host memory only (`host_communicator`).

#include <cstddef>
#include <cstdint>
#include <ostream>
#include <span>
#include <sstream>
#include <string>
#include <vector>

#include <dcp/comm/comm_concepts.hpp>
#include <dcp/comm/detail/relayout.hpp>
#include <dcp/comm/shard.hpp>
#include <dcp/error.hpp>

namespace dcp {

/// The tensor re-laid by DSP: one video, T x S tokens of C elements.
struct dsp_shape {
  std::int64_t frames = 1;    ///< T
  std::int64_t spatial = 0;   ///< S
  std::int64_t channels = 1;  ///< C

  friend constexpr bool operator==(const dsp_shape&, const dsp_shape&) = default;
  friend std::ostream& operator<<(std::ostream& os, const dsp_shape& s) {
    return os << "dsp_shape{frames=" << s.frames << ", spatial=" << s.spatial << ", channels=" << s.channels << "}";
  }
};

/// Throws `dcp::error` unless frames and spatial are non-negative and channels and sp positive.
inline void validate(const dsp_shape& s, int sp) {
  check(s.frames >= 0 && s.spatial >= 0 && s.channels > 0 && sp > 0, errc::invalid_argument, [&] {
    std::ostringstream os;
    os << s << " with sp = " << sp << ": frames and spatial must be >= 0, channels and sp positive";
    return os.str();
  });
}

/// Elements rank `rank` holds spatial-sharded: T * S_r * C.
inline std::int64_t dsp_spatial_shard_size(const dsp_shape& s, int sp, int rank) {
  validate(s, sp);
  return s.frames * shard_of(s.spatial, sp, rank).count * s.channels;
}
/// Elements rank `rank` holds temporal-sharded: T_r * S * C.
inline std::int64_t dsp_temporal_shard_size(const dsp_shape& s, int sp, int rank) {
  validate(s, sp);
  return shard_of(s.frames, sp, rank).count * s.spatial * s.channels;
}

/// Spatial shards -> temporal shards. `in` is [T][S_r][C], `out` is [T_r][S][C].
template <host_communicator C, transferable T>
void dsp_to_temporal_shards(C& comm, const dsp_shape& s, std::span<const T> in, std::span<T> out) {
  const int sp = comm.size(), r = comm.rank();
  detail::check_span_size("dsp_to_temporal_shards", "in", in.size(), dsp_spatial_shard_size(s, sp, r));
  detail::check_span_size("dsp_to_temporal_shards", "out", out.size(), dsp_temporal_shard_size(s, sp, r));
  const shard my_s = shard_of(s.spatial, sp, r), my_t = shard_of(s.frames, sp, r);
  // Frames of rank j are contiguous in [T][S_r][C]: send `in` as it is.
  std::vector<std::size_t> sc(static_cast<size_t>(sp)), rc(static_cast<size_t>(sp));
  for (int j = 0; j < sp; ++j) {
    sc[size_t(j)] = size_t(shard_of(s.frames, sp, j).count * my_s.count * s.channels);
    rc[size_t(j)] = size_t(my_t.count * shard_of(s.spatial, sp, j).count * s.channels);
  }
  std::vector<T> packed(out.size());  // from each source i: [T_r][S_i][C]
  detail::exchange(comm, in, sc, std::span<T>(packed), rc, false);
  std::int64_t from = 0;
  for (int i = 0; i < sp; ++i) {
    const shard si = shard_of(s.spatial, sp, i);
    detail::copy_rows(std::span<const T>(packed), from, si.count * s.channels, out, si.begin * s.channels,
                      s.spatial * s.channels, my_t.count, si.count * s.channels);
    from += my_t.count * si.count * s.channels;
  }
}

/// Temporal shards -> spatial shards, the inverse of `dsp_to_temporal_shards`.
template <host_communicator C, transferable T>
void dsp_to_spatial_shards(C& comm, const dsp_shape& s, std::span<const T> in, std::span<T> out) {
  const int sp = comm.size(), r = comm.rank();
  detail::check_span_size("dsp_to_spatial_shards", "in", in.size(), dsp_temporal_shard_size(s, sp, r));
  detail::check_span_size("dsp_to_spatial_shards", "out", out.size(), dsp_spatial_shard_size(s, sp, r));
  const shard my_s = shard_of(s.spatial, sp, r), my_t = shard_of(s.frames, sp, r);
  std::vector<std::size_t> sc(static_cast<size_t>(sp)), rc(static_cast<size_t>(sp));
  std::vector<T> packed(in.size());  // to each destination j: [T_r][S_j][C]
  std::int64_t to = 0;
  for (int j = 0; j < sp; ++j) {
    const shard sj = shard_of(s.spatial, sp, j);
    detail::copy_rows(in, sj.begin * s.channels, s.spatial * s.channels, std::span<T>(packed), to,
                      sj.count * s.channels, my_t.count, sj.count * s.channels);
    to += my_t.count * sj.count * s.channels;
    sc[size_t(j)] = size_t(my_t.count * sj.count * s.channels);
    rc[size_t(j)] = size_t(shard_of(s.frames, sp, j).count * my_s.count * s.channels);
  }
  // Source i sends frames shard_of(T, i) in order, so the receive buffer is [T][S_r][C].
  detail::exchange(comm, std::span<const T>(packed), sc, out, rc, false);
}

}  // namespace dcp
