#pragma once
/// \file
/// Private: cross-rank checks of one collective call, shared by the backends. Include
/// `<dcp/comm/local.hpp>` or `<dcp/comm/mpi.hpp>` instead.
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
  const auto un = std::uint64_t(n);
  switch (m[0].kind) {
    case coll_kind::barrier: return;
    case coll_kind::split:
      for (int r = 0; r < n; ++r)
        check(m[r].root < n, errc::invalid_argument, [&] {
          return "split: rank " + str(r) + " passed color " + str(m[r].root) + ", out of range [0, " + str(n) +
                 "); use at most size() groups, or a negative color (dcp::no_color) to join none";
        });
      return;
    case coll_kind::all_to_all:
      for (int r = 0; r < n; ++r) {
        check(m[r].send_count == m[r].recv_count && m[r].send_count % un == 0, errc::invalid_argument, [&] {
          return "all_to_all: rank " + str(r) + " passed send of " + str(m[r].send_count) + " elements and recv of " +
                 str(m[r].recv_count) + "; both must be equal and a multiple of size() = " + str(n);
        });
        check(m[r].send_count == m[0].send_count, errc::invalid_argument, [&] {
          return "all_to_all: rank 0 sends " + str(m[0].send_count) + " elements but rank " + str(r) + " sends " +
                 str(m[r].send_count) + "; all ranks must pass the same size";
        });
      }
      return;
    case coll_kind::all_to_all_v:
      for (int r = 0; r < n; ++r) {
        check(m[r].send_counts_size == un && m[r].recv_counts_size == un, errc::invalid_argument, [&] {
          return "all_to_all_v: rank " + str(r) + " passed " + str(m[r].send_counts_size) + " send counts and " +
                 str(m[r].recv_counts_size) + " recv counts; both must have size() = " + str(n) + " entries";
        });
      }
      for (int r = 0; r < n; ++r) {
        const auto ss = std::accumulate(m[r].send_counts, m[r].send_counts + n, std::uint64_t{0});
        const auto rs = std::accumulate(m[r].recv_counts, m[r].recv_counts + n, std::uint64_t{0});
        check(ss == m[r].send_count && rs == m[r].recv_count, errc::invalid_argument, [&] {
          return "all_to_all_v: rank " + str(r) + " passed send of " + str(m[r].send_count) +
                 " elements with counts summing to " + str(ss) + ", recv of " + str(m[r].recv_count) +
                 " with counts summing to " + str(rs) + "; each buffer must hold exactly the sum of its counts";
        });
      }
      for (int i = 0; i < n; ++i)
        for (int j = 0; j < n; ++j)
          check(m[i].send_counts[j] == m[j].recv_counts[i], errc::invalid_argument, [&] {
            return "all_to_all_v: rank " + str(i) + " sends " + str(std::uint64_t(m[i].send_counts[j])) +
                   " elements to rank " + str(j) + ", which expects " + str(std::uint64_t(m[j].recv_counts[i])) +
                   "; send_counts[j] on rank i must equal recv_counts[i] on rank j";
          });
      return;
    case coll_kind::all_gather:
      for (int r = 0; r < n; ++r) {
        check(m[r].recv_count == m[r].send_count * un, errc::invalid_argument, [&] {
          return "all_gather: rank " + str(r) + " passed send of " + str(m[r].send_count) + " elements and recv of " +
                 str(m[r].recv_count) + "; recv must hold size() * send = " + str(m[r].send_count * un);
        });
        check(m[r].send_count == m[0].send_count, errc::invalid_argument, [&] {
          return "all_gather: rank 0 sends " + str(m[0].send_count) + " elements but rank " + str(r) + " sends " +
                 str(m[r].send_count) + "; all ranks must pass the same size";
        });
      }
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

}  // namespace dcp::detail
