#pragma once
/// \file
/// Ulysses (1D) and DSP (2D) re-layouts of a whole micro-step on device buffers (DESIGN section 4:
/// c = 4 all-to-alls per block for Ulysses, c = 2 for DSP), through any `communicator` whose memory
/// is the Thrust device system's: `nccl_comm` under nvcc, `local_comm` / `mpi_comm` on the CPP
/// system (which is how CI runs these exact functions without a GPU).
///
/// A re-layout is one all-to-all between two row gathers, all three described by a `relayout_map`:
///   send[s] = in[send_index[s]],  all_to_all_v(send, send_counts, recv, recv_counts),
///   out[o]  = recv[out_index[o]]        (one index per row of `row` elements).
/// Both gathers are permutations, so `inverse(map)` is the way back and round trips are exact.
///
/// Layouts (sequences in the micro-batch's sorted order, see `<dcp/cuda/micro_batch.cuh>`):
///   - Ulysses, token shards -> head shards: `in` is this rank's local buffer on the tokens axis,
///     [local_rows][heads][head_dim]; `out` is [padded_tokens][heads / sp][head_dim]: every token of
///     every sequence (padding included, `cu_seqlens_padded` delimits them) for this rank's heads
///     [rank * heads / sp, (rank + 1) * heads / sp), which is what varlen attention reads.
///     For one unpadded sequence this is exactly `dcp::ulysses_to_head_shards` of
///     `<dcp/comm/ulysses.hpp>`.
///   - DSP, spatial shards <-> frame shards: the `spatial` and `frames` local buffers of
///     `micro_batch`, [rows][channels] each.
///
/// \code
/// auto mb = dcp::make_micro_batch(step, group_rank);
/// auto to_heads = dcp::make_ulysses_relayout(mb, heads, head_dim);
/// auto to_tokens = dcp::inverse(to_heads);
/// dcp::relayout(comm, to_heads, q_tokens, q_heads);   // before attention
/// dcp::relayout(comm, to_tokens, o_heads, o_tokens);  // after it
/// \endcode

#include <cstddef>
#include <cstdint>
#include <numeric>
#include <ostream>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include <dcp/comm/comm_concepts.hpp>
#include <dcp/cuda/detail/thrust.cuh>
#include <dcp/cuda/micro_batch.cuh>
#include <dcp/error.hpp>

namespace dcp {

/// One all-to-all re-layout of one rank (see the file comment). Built by `make_ulysses_relayout`,
/// `make_dsp_relayout` or `inverse`.
struct relayout_map {
  int sp = 1;
  int rank = 0;
  std::int64_t row = 1;      ///< elements moved together (one token's slice)
  std::int64_t in_rows = 0;  ///< rows of the input buffer
  std::int64_t out_rows = 0;
  std::vector<std::size_t> send_counts;  ///< elements to every peer
  std::vector<std::size_t> recv_counts;  ///< elements from every peer
  bool uniform = false;  ///< every rank sends every peer the same count: the equal-count collective applies
  thrust::device_vector<std::int64_t> send_index;  ///< send row s <- input row send_index[s]
  thrust::device_vector<std::int64_t> out_index;   ///< output row o <- received row out_index[o]

  std::int64_t in_size() const noexcept { return in_rows * row; }    ///< elements of the input
  std::int64_t out_size() const noexcept { return out_rows * row; }  ///< elements of the output
};

inline std::ostream& operator<<(std::ostream& os, const relayout_map& m) {
  return os << "relayout_map{rank " << m.rank << " of " << m.sp << ", " << m.in_rows << " -> " << m.out_rows
            << " rows of " << m.row << (m.uniform ? ", uniform" : ", variable counts") << "}";
}

namespace detail {

struct ulysses_send {
  std::int64_t local;  // T_r
  int sp;
  DCP_HOST_DEVICE std::int64_t operator()(std::int64_t s) const { return (s % local) * sp + s / local; }
};

struct ulysses_out {
  int sp;
  std::int64_t b;
  const std::int64_t* cu_padded;     // b + 1
  const std::int64_t* padded;        // b
  const std::int64_t* rank_offsets;  // sp * (b + 1)
  const std::int64_t* recv_start;    // sp: first received row from rank i
  DCP_HOST_DEVICE std::int64_t operator()(std::int64_t o) const {
    const std::int64_t j = last_not_above(cu_padded, b, o), t = o - cu_padded[j], p = padded[j];
    const int i = shard_owner(p, sp, t);
    return recv_start[i] + rank_offsets[i * (b + 1) + j] + (t - shard_begin(p, sp, i));
  }
};

// DSP, spatial shards -> frame shards, on rank r.
struct dsp_send_rows {  // rows rank r sends rank g of sequence j: frames of g x spatial of r
  int sp, r;
  const std::int64_t* frames;
  const std::int64_t* spatial;
  DCP_HOST_DEVICE std::int64_t operator()(int g, std::int64_t j) const {
    return shard_count(frames[j], sp, g) * shard_count(spatial[j], sp, r);
  }
};
struct dsp_recv_rows {  // rows rank r receives from rank i of sequence j: frames of r x spatial of i
  int sp, r;
  const std::int64_t* frames;
  const std::int64_t* spatial;
  DCP_HOST_DEVICE std::int64_t operator()(int i, std::int64_t j) const {
    return shard_count(frames[j], sp, r) * shard_count(spatial[j], sp, i);
  }
};

struct dsp_send {
  int sp, r;
  std::int64_t b;
  const std::int64_t* frames;
  const std::int64_t* spatial;
  const std::int64_t* chunk_start;  // sp + 1
  const std::int64_t* send_offsets;  // sp * (b + 1)
  const std::int64_t* in_offsets;    // b + 1: rank r's spatial-axis offsets
  DCP_HOST_DEVICE std::int64_t operator()(std::int64_t s) const {
    const int g = int(last_not_above(chunk_start, sp, s));
    const std::int64_t* off = send_offsets + g * (b + 1);
    const std::int64_t w0 = s - chunk_start[g], j = last_not_above(off, b, w0), w = w0 - off[j];
    const std::int64_t sc = shard_count(spatial[j], sp, r);
    return in_offsets[j] + (shard_begin(frames[j], sp, g) + w / sc) * sc + w % sc;
  }
};

struct dsp_out {
  int sp, r;
  std::int64_t b;
  const std::int64_t* spatial;
  const std::int64_t* chunk_start;   // sp + 1
  const std::int64_t* recv_offsets;  // sp * (b + 1)
  const std::int64_t* out_offsets;   // b + 1: rank r's frames-axis offsets
  DCP_HOST_DEVICE std::int64_t operator()(std::int64_t o) const {
    const std::int64_t j = last_not_above(out_offsets, b, o), w = o - out_offsets[j], S = spatial[j];
    const std::int64_t t = w / S, x = w % S;
    const int i = shard_owner(S, sp, x);
    return chunk_start[i] + recv_offsets[i * (b + 1) + j] + t * shard_count(S, sp, i) + (x - shard_begin(S, sp, i));
  }
};

/// Row of table `t` (sp x (b + 1), rank-major) at rank i, column j.
inline std::int64_t at(const std::vector<std::int64_t>& t, std::int64_t b, int i, std::int64_t j) {
  return t[std::size_t(std::int64_t(i) * (b + 1) + j)];
}

/// Send and receive counts (elements) and the chunk starts (rows) of both buffers, from the send
/// and receive offset tables of this rank.
inline void fill_counts(relayout_map& m, const std::vector<std::int64_t>& send, const std::vector<std::int64_t>& recv,
                        std::int64_t b, std::vector<std::int64_t>& send_start, std::vector<std::int64_t>& recv_start) {
  m.send_counts.assign(std::size_t(m.sp), 0);
  m.recv_counts.assign(std::size_t(m.sp), 0);
  send_start.assign(std::size_t(m.sp) + 1, 0);
  recv_start.assign(std::size_t(m.sp) + 1, 0);
  for (int i = 0; i < m.sp; ++i) {
    const std::int64_t s = at(send, b, i, b), r = at(recv, b, i, b);
    m.send_counts[std::size_t(i)] = std::size_t(s * m.row);
    m.recv_counts[std::size_t(i)] = std::size_t(r * m.row);
    send_start[std::size_t(i) + 1] = send_start[std::size_t(i)] + s;
    recv_start[std::size_t(i) + 1] = recv_start[std::size_t(i)] + r;
  }
}

inline void check_positive(const char* what, const char* name, std::int64_t v) {
  check(v >= 1, errc::invalid_argument,
        [&] { return std::string(what) + ": " + name + " = " + std::to_string(v) + " must be >= 1"; });
}

}  // namespace detail

/// Ulysses token shards -> head shards of the micro-batch `mb` (tokens axis), with `heads` heads of
/// `head_dim` elements per token. Throws `dcp::error` unless mb is on the tokens axis, heads and
/// head_dim are positive and sp divides heads.
inline relayout_map make_ulysses_relayout(const micro_batch& mb, std::int64_t heads, std::int64_t head_dim,
                                          thrust_stream stream = {}) {
  check(mb.options.axis == shard_axis::tokens, errc::invalid_argument, [&] {
    return std::string("make_ulysses_relayout: the micro-batch is sharded on the ") + to_string(mb.options.axis) +
           " axis; Ulysses starts from token shards (micro_batch_options::axis = tokens)";
  });
  detail::check_positive("make_ulysses_relayout", "heads", heads);
  detail::check_positive("make_ulysses_relayout", "head_dim", head_dim);
  check(heads % mb.sp == 0, errc::invalid_argument, [&] {
    return "make_ulysses_relayout: heads = " + std::to_string(heads) + " is not divisible by sp = " +
           std::to_string(mb.sp) + "; use an sp that divides the head count";
  });
  const auto pol = detail::policy(stream);
  const std::int64_t b = mb.sequences;
  relayout_map m;
  m.sp = mb.sp;
  m.rank = mb.rank;
  m.row = heads / mb.sp * head_dim;
  m.in_rows = mb.local_rows * mb.sp;
  m.out_rows = mb.padded_tokens;
  m.uniform = true;
  std::vector<std::int64_t> recv_start(std::size_t(mb.sp) + 1, 0);
  m.send_counts.assign(std::size_t(mb.sp), std::size_t(mb.local_rows * m.row));
  m.recv_counts.resize(std::size_t(mb.sp));
  for (int i = 0; i < mb.sp; ++i) {
    m.recv_counts[std::size_t(i)] = std::size_t(mb.rank_rows[std::size_t(i)] * m.row);
    recv_start[std::size_t(i) + 1] = recv_start[std::size_t(i)] + mb.rank_rows[std::size_t(i)];
    m.uniform = m.uniform && mb.rank_rows[std::size_t(i)] == mb.rank_rows[0];
  }

  thrust::counting_iterator<std::int64_t> k0(0);
  m.send_index.resize(std::size_t(m.in_rows));
  if (mb.local_rows > 0)
    thrust::transform(pol, k0, k0 + m.in_rows, m.send_index.begin(), detail::ulysses_send{mb.local_rows, mb.sp});
  thrust::device_vector<std::int64_t> cu(std::size_t(b) + 1), starts(recv_start.begin(), recv_start.end());
  detail::exclusive_sum_with_total(detail::raw(mb.padded), b, detail::raw(cu), stream);
  m.out_index.resize(std::size_t(m.out_rows));
  thrust::transform(pol, k0, k0 + m.out_rows, m.out_index.begin(),
                    detail::ulysses_out{mb.sp, b, detail::raw(cu), detail::raw(mb.padded), detail::raw(mb.rank_offsets),
                                        detail::raw(starts)});
  return m;
}

/// DSP re-layout of the micro-batch `mb` (2D shapes; either 2D axis) with `channels` elements per
/// token: from spatial shards to frame shards (`from == spatial`), or back (`from == frames`).
inline relayout_map make_dsp_relayout(const micro_batch& mb, std::int64_t channels, shard_axis from,
                                      thrust_stream stream = {});

/// The re-layout that undoes `m` (its gathers inverted, its counts swapped).
inline relayout_map inverse(const relayout_map& m, thrust_stream stream = {}) {
  const auto pol = detail::policy(stream);
  relayout_map r;
  r.sp = m.sp;
  r.rank = m.rank;
  r.row = m.row;
  r.in_rows = m.out_rows;
  r.out_rows = m.in_rows;
  r.send_counts = m.recv_counts;
  r.recv_counts = m.send_counts;
  r.uniform = m.uniform;
  thrust::counting_iterator<std::int64_t> k0(0);
  // The new send buffer is the old receive buffer: its row out_index[o] comes from input row o.
  r.send_index.resize(m.out_index.size());
  thrust::scatter(pol, k0, k0 + std::int64_t(m.out_index.size()), m.out_index.begin(), r.send_index.begin());
  r.out_index.resize(m.send_index.size());
  thrust::scatter(pol, k0, k0 + std::int64_t(m.send_index.size()), m.send_index.begin(), r.out_index.begin());
  return r;
}

inline relayout_map make_dsp_relayout(const micro_batch& mb, std::int64_t channels, shard_axis from,
                                      thrust_stream stream) {
  check(mb.options.axis != shard_axis::tokens && from != shard_axis::tokens, errc::invalid_argument, [&] {
    return std::string("make_dsp_relayout: DSP moves between the frames and spatial axes; got a micro-batch on the ") +
           to_string(mb.options.axis) + " axis and from = " + to_string(from);
  });
  detail::check_positive("make_dsp_relayout", "channels", channels);
  const auto pol = detail::policy(stream);
  const std::int64_t b = mb.sequences;
  const int sp = mb.sp, r = mb.rank;
  const std::int64_t* T = detail::raw(mb.frames);
  const std::int64_t* S = detail::raw(mb.spatial);

  relayout_map m;
  m.sp = sp;
  m.rank = r;
  m.row = channels;
  // Offsets of this rank's spatial (input) and frames (output) buffers.
  auto spatial_off = detail::offset_table(sp, b, detail::shard_rows{shard_axis::spatial, sp, nullptr, T, S}, stream);
  auto frames_off = detail::offset_table(sp, b, detail::shard_rows{shard_axis::frames, sp, nullptr, T, S}, stream);
  auto send_off = detail::offset_table(sp, b, detail::dsp_send_rows{sp, r, T, S}, stream);
  auto recv_off = detail::offset_table(sp, b, detail::dsp_recv_rows{sp, r, T, S}, stream);
  std::vector<std::int64_t> send_start, recv_start;
  detail::fill_counts(m, detail::to_host(send_off), detail::to_host(recv_off), b, send_start, recv_start);
  m.in_rows = send_start.back();
  m.out_rows = recv_start.back();

  // Uniform only if every (source, destination) pair moves the same count: a property of the
  // shapes, so every rank decides the same.
  const std::vector<std::int64_t> Th = detail::to_host(mb.frames), Sh = detail::to_host(mb.spatial);
  m.uniform = true;
  std::int64_t first = -1;
  for (int i = 0; i < sp && m.uniform; ++i)
    for (int g = 0; g < sp && m.uniform; ++g) {
      std::int64_t c = 0;
      for (std::size_t j = 0; j < Th.size(); ++j)
        c += detail::shard_count(Th[j], sp, g) * detail::shard_count(Sh[j], sp, i);
      if (first < 0) first = c;
      m.uniform = c == first;
    }

  thrust::device_vector<std::int64_t> ss(send_start.begin(), send_start.end()), rs(recv_start.begin(), recv_start.end());
  thrust::counting_iterator<std::int64_t> k0(0);
  m.send_index.resize(std::size_t(m.in_rows));
  thrust::transform(pol, k0, k0 + m.in_rows, m.send_index.begin(),
                    detail::dsp_send{sp, r, b, T, S, detail::raw(ss), detail::raw(send_off),
                                     detail::raw(spatial_off) + std::int64_t(r) * (b + 1)});
  m.out_index.resize(std::size_t(m.out_rows));
  thrust::transform(pol, k0, k0 + m.out_rows, m.out_index.begin(),
                    detail::dsp_out{sp, r, b, S, detail::raw(rs), detail::raw(recv_off),
                                    detail::raw(frames_off) + std::int64_t(r) * (b + 1)});
  return from == shard_axis::spatial ? m : inverse(m, stream);
}

/// Reusable send and receive buffers of `relayout` (one per element type and size class).
template <class T>
struct relayout_workspace {
  thrust::device_vector<T> send, recv;
};

/// Runs the re-layout `m` on `comm` (size m.sp, rank m.rank): `in` has `m.in_size()` elements,
/// `out` `m.out_size()`, both in the memory of the Thrust device system. Collective: every rank of
/// the group calls it with its own map of the same re-layout.
template <communicator C, transferable T>
void relayout(C& comm, const relayout_map& m, std::span<const T> in, std::span<T> out, thrust_stream stream = {},
              relayout_workspace<T>* workspace = nullptr) {
  static_assert(bool(C::host_memory) == !DCP_THRUST_CUDA(),
                "dcp::relayout: the communicator's memory must be the Thrust device system's: nccl_comm under "
                "CUDA; local_comm or mpi_comm with THRUST_DEVICE_SYSTEM=THRUST_DEVICE_SYSTEM_CPP");
  check(comm.size() == m.sp && comm.rank() == m.rank, errc::invalid_argument, [&] {
    return "relayout: map of rank " + std::to_string(m.rank) + " of " + std::to_string(m.sp) +
           " used on rank " + std::to_string(comm.rank()) + " of a communicator of " + std::to_string(comm.size());
  });
  detail::check_buffer("relayout", "in", in.size(), m.in_size());
  detail::check_buffer("relayout", "out", out.size(), m.out_size());
  relayout_workspace<T> own;
  relayout_workspace<T>& ws = workspace ? *workspace : own;
  ws.send.resize(std::size_t(m.in_size()));
  ws.recv.resize(std::size_t(m.out_size()));
  const auto pol = detail::policy(stream);
  thrust::counting_iterator<std::int64_t> e0(0);
  thrust::transform(pol, e0, e0 + m.in_size(), ws.send.begin(),
                    detail::gather_rows_fn<T>{in.data(), detail::raw(m.send_index), m.row});
#if DCP_THRUST_CUDA()
  // The communicator may run on its own stream: the send buffer must be complete first.
  cuda_check(cudaStreamSynchronize(stream), "cudaStreamSynchronize", "relayout, before the all-to-all");
#endif
  std::span<const T> send(detail::raw(ws.send), ws.send.size());
  std::span<T> recv(detail::raw(ws.recv), ws.recv.size());
  if (m.uniform)
    comm.all_to_all(send, recv);
  else
    comm.all_to_all_v(send, std::span<const std::size_t>(m.send_counts), recv,
                      std::span<const std::size_t>(m.recv_counts));
  // A device communicator in asynchronous mode (nccl_comm::set_synchronous(false)) has only enqueued
  // the exchange on its stream: wait for it, under its deadline, before reading the receive buffer.
  if constexpr (asynchronous_communicator<std::remove_cvref_t<decltype(comm)>>)
    if (!comm.synchronous()) comm.wait();
  thrust::transform(pol, e0, e0 + m.out_size(), out.data(),
                    detail::gather_rows_fn<T>{detail::raw(ws.recv), detail::raw(m.out_index), m.row});
}

/// Convenience overload on device vectors: returns the output.
template <communicator C, transferable T>
thrust::device_vector<T> relayout(C& comm, const relayout_map& m, const thrust::device_vector<T>& in,
                                  thrust_stream stream = {}) {
  thrust::device_vector<T> out(std::size_t(m.out_size()));
  relayout(comm, m, std::span<const T>(detail::raw(in), in.size()), std::span<T>(detail::raw(out), out.size()), stream);
  return out;
}

}  // namespace dcp
