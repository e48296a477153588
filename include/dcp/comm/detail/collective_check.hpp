#pragma once
/// \file
/// Private: the checks of one collective call, shared by the backends. Include
/// `<dcp/comm/local.hpp>`, `<dcp/comm/mpi.hpp>` or `<dcp/comm/nccl.hpp>` instead.
///
/// Every rank of a collective describes its call in a `call_meta`; once a backend has all of them
/// (local: shared memory; mpi: one small all-gather), every rank runs `check_call` on the same input
/// and therefore throws the same error, instead of some ranks failing and their peers timing out.

#include <cstddef>
#include <cstdint>
#include <numeric>
#include <span>
#include <string>
#include <type_traits>

#include <dcp/comm/comm_concepts.hpp>
#include <dcp/error.hpp>

namespace dcp::detail {

enum class coll_kind : std::int32_t { barrier, split, all_to_all, all_to_all_v, all_gather, all_reduce, broadcast };

inline const char* to_string(coll_kind k) noexcept {
  switch (k) {
    case coll_kind::barrier: return "barrier";
    case coll_kind::split: return "split";
    case coll_kind::all_to_all: return "all_to_all";
    case coll_kind::all_to_all_v: return "all_to_all_v";
    case coll_kind::all_gather: return "all_gather";
    case coll_kind::all_reduce: return "all_reduce";
    case coll_kind::broadcast: return "broadcast";
  }
  return "?";
}

// Identifies arithmetic element types so all_reduce refuses mixed types across ranks.
template <class T>
constexpr std::int32_t type_code() noexcept {
  if constexpr (std::is_floating_point_v<T>) return 1000 + std::int32_t(sizeof(T));
  else if constexpr (std::is_signed_v<T>) return 2000 + std::int32_t(sizeof(T));
  else if constexpr (std::is_unsigned_v<T>) return 3000 + std::int32_t(sizeof(T));
  else return 0;
}

/// One rank's description of its call. `root` is the broadcast root, the split color or the
/// reduce_op; the count arrays (all_to_all_v) have `size()` entries when well formed.
struct call_meta {
  coll_kind kind = coll_kind::barrier;
  std::int32_t type = 0;
  std::int32_t root = 0;
  std::int32_t key = 0;
  std::uint64_t elem_size = 0;
  std::uint64_t send_count = 0;
  std::uint64_t recv_count = 0;
  std::uint64_t send_counts_size = 0;
  std::uint64_t recv_counts_size = 0;
  const std::size_t* send_counts = nullptr;
  const std::size_t* recv_counts = nullptr;
};

inline std::string str(std::uint64_t v) { return std::to_string(v); }
inline std::string str(int v) { return std::to_string(v); }

// The laws of one rank's own call, each with its one message: `check_call` applies them to every
// rank, `check_rank_call` to the calling rank alone (nccl, and mpi without its cross-rank round).

inline void check_split_color(int r, std::int64_t color, int n) {
  check(color < n, errc::invalid_argument, [&] {
    return "split: rank " + str(r) + " passed color " + std::to_string(color) + ", out of range [0, " + str(n) +
           "); use at most size() groups, or a negative color (dcp::no_color) to join none";
  });
}

inline void check_all_to_all_sizes(int r, std::uint64_t send, std::uint64_t recv, int n) {
  check(send == recv && send % std::uint64_t(n) == 0, errc::invalid_argument, [&] {
    return "all_to_all: rank " + str(r) + " passed send of " + str(send) + " elements and recv of " + str(recv) +
           "; both must be equal and a multiple of size() = " + str(n);
  });
}

inline void check_all_to_all_v_count_sizes(int r, std::uint64_t send_counts, std::uint64_t recv_counts, int n) {
  check(send_counts == std::uint64_t(n) && recv_counts == std::uint64_t(n), errc::invalid_argument, [&] {
    return "all_to_all_v: rank " + str(r) + " passed " + str(send_counts) + " send counts and " + str(recv_counts) +
           " recv counts; both must have size() = " + str(n) + " entries";
  });
}

// Reads `n` counts of each array: call it only once their sizes passed.
inline void check_all_to_all_v_sums(int r, const call_meta& m, int n) {
  const auto ss = std::accumulate(m.send_counts, m.send_counts + n, std::uint64_t{0});
  const auto rs = std::accumulate(m.recv_counts, m.recv_counts + n, std::uint64_t{0});
  check(ss == m.send_count && rs == m.recv_count, errc::invalid_argument, [&] {
    return "all_to_all_v: rank " + str(r) + " passed send of " + str(m.send_count) +
           " elements with counts summing to " + str(ss) + ", recv of " + str(m.recv_count) +
           " with counts summing to " + str(rs) + "; each buffer must hold exactly the sum of its counts";
  });
}

inline void check_all_gather_sizes(int r, std::uint64_t send, std::uint64_t recv, int n) {
  check(recv == send * std::uint64_t(n), errc::invalid_argument, [&] {
    return "all_gather: rank " + str(r) + " passed send of " + str(send) + " elements and recv of " + str(recv) +
           "; recv must hold size() * send = " + str(send * std::uint64_t(n));
  });
}

/// Throws when rank `r`'s own call `m` on a communicator of `n` ranks breaks a law that needs no
/// other rank's call. The messages are `check_call`'s.
inline void check_rank_call(const call_meta& m, int r, int n) {
  switch (m.kind) {
    case coll_kind::barrier: return;
    case coll_kind::split: check_split_color(r, m.root, n); return;
    case coll_kind::all_to_all: check_all_to_all_sizes(r, m.send_count, m.recv_count, n); return;
    case coll_kind::all_to_all_v:
      check_all_to_all_v_count_sizes(r, m.send_counts_size, m.recv_counts_size, n);
      check_all_to_all_v_sums(r, m, n);
      return;
    case coll_kind::all_gather: check_all_gather_sizes(r, m.send_count, m.recv_count, n); return;
    case coll_kind::all_reduce:
      check(m.send_count == m.recv_count, errc::invalid_argument, [&] {
        return "all_reduce: rank " + str(r) + " passed send of " + str(m.send_count) + " elements and recv of " +
               str(m.recv_count) + "; they must be equal";
      });
      return;
    case coll_kind::broadcast:
      check(m.root >= 0 && m.root < n, errc::invalid_argument, [&] {
        return "broadcast: rank " + str(r) + " passed root " + str(m.root) + ", out of range [0, " + str(n) + ")";
      });
      return;
  }
}

// all_to_all and all_gather: rank r sends as many elements as rank 0.
inline void check_same_send_count(std::span<const call_meta> m, int r) {
  check(m[r].send_count == m[0].send_count, errc::invalid_argument, [&] {
    return std::string(to_string(m[0].kind)) + ": rank 0 sends " + str(m[0].send_count) + " elements but rank " +
           str(r) + " sends " + str(m[r].send_count) + "; all ranks must pass the same size";
  });
}

/// Throws the same `dcp::error` on every rank when the calls `m[0..n)` do not fit together.
inline void check_call(std::span<const call_meta> m) {
  const int n = int(m.size());
  const char* what = to_string(m[0].kind);
  for (int r = 0; r < n; ++r)
    check(m[r].kind == m[0].kind, errc::mismatch, [&] {
      return std::string(what) + ": rank 0 called " + to_string(m[0].kind) + " but rank " + str(r) + " called " +
             to_string(m[r].kind) + "; all ranks must call collectives in the same order";
    });
  for (int r = 0; r < n; ++r)
    check(m[r].elem_size == m[0].elem_size, errc::invalid_argument, [&] {
      return std::string(what) + ": rank 0 passes elements of " + str(m[0].elem_size) + " bytes but rank " + str(r) +
             " of " + str(m[r].elem_size) + "; all ranks must use the same element type";
    });
  switch (m[0].kind) {
    case coll_kind::barrier: return;
    case coll_kind::split:
      for (int r = 0; r < n; ++r) check_split_color(r, m[r].root, n);
      return;
    case coll_kind::all_to_all:
    case coll_kind::all_gather:
      for (int r = 0; r < n; ++r) {
        check_rank_call(m[r], r, n);
        check_same_send_count(m, r);
      }
      return;
    case coll_kind::all_to_all_v:
      // Every rank's count sizes first: only then may any rank's counts be read.
      for (int r = 0; r < n; ++r) check_all_to_all_v_count_sizes(r, m[r].send_counts_size, m[r].recv_counts_size, n);
      for (int r = 0; r < n; ++r) check_all_to_all_v_sums(r, m[r], n);
      for (int i = 0; i < n; ++i)
        for (int j = 0; j < n; ++j)
          check(m[i].send_counts[j] == m[j].recv_counts[i], errc::invalid_argument, [&] {
            return "all_to_all_v: rank " + str(i) + " sends " + str(std::uint64_t(m[i].send_counts[j])) +
                   " elements to rank " + str(j) + ", which expects " + str(std::uint64_t(m[j].recv_counts[i])) +
                   "; send_counts[j] on rank i must equal recv_counts[i] on rank j";
          });
      return;
    case coll_kind::all_reduce:
      for (int r = 0; r < n; ++r) {
        check(m[r].send_count == m[r].recv_count && m[r].send_count == m[0].send_count, errc::invalid_argument, [&] {
          return "all_reduce: rank " + str(r) + " passed send of " + str(m[r].send_count) + " elements and recv of " +
                 str(m[r].recv_count) + ", rank 0 send of " + str(m[0].send_count) + "; all must be equal";
        });
        check(m[r].type == m[0].type && m[r].root == m[0].root, errc::invalid_argument, [&] {
          return "all_reduce: rank " + str(r) + " uses another element type or reduction (" +
                 to_string(reduce_op(m[r].root)) + ") than rank 0 (" + to_string(reduce_op(m[0].root)) + ")";
        });
      }
      return;
    case coll_kind::broadcast:
      for (int r = 0; r < n; ++r) {
        check(m[r].root == m[0].root && m[0].root >= 0 && m[0].root < n, errc::invalid_argument, [&] {
          return "broadcast: rank " + str(r) + " passed root " + str(m[r].root) + ", rank 0 root " + str(m[0].root) +
                 "; all ranks must pass the same root in [0, " + str(n) + ")";
        });
        check(m[r].send_count == m[0].send_count, errc::invalid_argument, [&] {
          return "broadcast: rank 0 passed " + str(m[0].send_count) + " elements but rank " + str(r) + " passed " +
                 str(m[r].send_count) + "; all ranks must pass the same size";
        });
      }
      return;
  }
}

/// The description of a call with a send and a receive buffer of element type T.
template <class T>
call_meta meta_of(coll_kind kind, std::size_t send_count, std::size_t recv_count) noexcept {
  call_meta m;
  m.kind = kind;
  m.elem_size = sizeof(T);
  m.send_count = send_count;
  m.recv_count = recv_count;
  return m;
}

/// `split(color, key)`: the color travels as `root`.
inline call_meta meta_of_split(int color, int key) noexcept {
  call_meta m = meta_of<std::byte>(coll_kind::split, 0, 0);
  m.root = color;
  m.key = key;
  return m;
}

/// `all_to_all_v`: the count arrays are referenced, not copied.
template <class T>
call_meta meta_of_counts(std::size_t send_count, std::span<const std::size_t> send_counts, std::size_t recv_count,
                         std::span<const std::size_t> recv_counts) noexcept {
  call_meta m = meta_of<T>(coll_kind::all_to_all_v, send_count, recv_count);
  m.send_counts = send_counts.data();
  m.send_counts_size = send_counts.size();
  m.recv_counts = recv_counts.data();
  m.recv_counts_size = recv_counts.size();
  return m;
}

/// `all_reduce`: the element type and the reduction must agree across ranks.
template <class T>
call_meta meta_of_reduce(std::size_t send_count, std::size_t recv_count, reduce_op op) noexcept {
  call_meta m = meta_of<T>(coll_kind::all_reduce, send_count, recv_count);
  m.type = type_code<T>();
  m.root = std::int32_t(op);
  return m;
}

/// `broadcast` of `count` elements from `root`.
template <class T>
call_meta meta_of_broadcast(std::size_t count, int root) noexcept {
  call_meta m = meta_of<T>(coll_kind::broadcast, count, count);
  m.root = root;
  return m;
}

}  // namespace dcp::detail
