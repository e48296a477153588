#pragma once
/// \file
/// The `communicator` axis: how the ranks of a job move data (DESIGN section 2).
///
/// A model of `communicator` opts in with `using communicator_concept = dcp::communicator_tag;`
/// (a communicator is a handle to shared state, not a regular value, so it does not use the
/// `policy_concept` member of the policy axes). For a non-const `c`, const `cc`, element type
/// `T` (trivially copyable; arithmetic for reductions) it supports:
///   - `cc.valid()`: false for the null communicator a rank gets from `split(no_color, key)`;
///   - `cc.rank()`, `cc.size()`: this rank in [0, size) and the number of ranks (-1 and 0 when null);
///   - `c.split(color, key) -> C`: collective; ranks with the same `color` in [0, size()) form a new
///     communicator, ordered by (`key`, old rank); a negative color (`dcp::no_color`) gives a null
///     communicator; a color >= size() is an error on every rank;
///   - `c.all_to_all(send, recv)`: `send` and `recv` hold `size()` chunks of equal length; chunk j of
///     `send` goes to rank j and arrives as chunk `rank()` of its `recv`;
///   - `c.all_to_all_v(send, send_counts, recv, recv_counts)`: chunks packed by rank with per-rank
///     element counts (`send_counts[j]` on rank i == `recv_counts[i]` on rank j);
///   - `c.all_gather(send, recv)`: `recv` = the `send` of every rank, in rank order;
///   - `c.all_reduce(send, recv, op)` and in place `c.all_reduce(data, op)`, `op` in `reduce_op`;
///   - `c.broadcast(data, root)`; `c.send(data, peer, tag)`, `c.recv(data, peer, tag)`; `c.barrier()`;
///   - `c.abort()` (noexcept): every later call throws `dcp::error` with `errc::aborted`;
///     `cc.aborted()` tells whether that happened (by `abort()` or by a timeout);
///   - `cc.timeout()`, `c.set_timeout(d)`: the longest a call waits for its peers. A call whose peers do
///     not arrive in time throws `dcp::error` with `errc::timeout` naming the operation and, where the
///     backend can know it, the missing rank; the communicator is then aborted.
/// Laws: every rank of a communicator calls its collectives in the same order; buffers of one call do
/// not overlap; results are identical on every rank (reductions sum in rank order where the backend
/// controls it); a size mismatch is a `dcp::error` (`errc::invalid_argument`) naming both sizes.
/// `C::host_memory` says whether spans are host memory (true for `local_comm` and `mpi_comm`, false
/// for `nccl_comm`, whose spans point to device memory).
/// Shipped: `local_comm` (`<dcp/comm/local.hpp>`), `mpi_comm` (`<dcp/comm/mpi.hpp>`, behind
/// `DCP_HAS_MPI()`), `nccl_comm` (`<dcp/comm/nccl.hpp>`, behind `DCP_HAS_NCCL()`).

#include <chrono>
#include <concepts>
#include <cstddef>
#include <ostream>
#include <span>
#include <string>
#include <type_traits>

#include <dcp/error.hpp>

namespace dcp {

/// Opt-in tag of the `communicator` concept.
struct communicator_tag {};

/// The communicator tag of `C` (`type`): `C::communicator_concept` where it has one. A foreign
/// communicator opts in by specialising it (`using type = dcp::communicator_tag;`).
template <class C>
struct communicator_concept_of {};
template <class C>
  requires requires { typename C::communicator_concept; }
struct communicator_concept_of<C> {
  using type = typename C::communicator_concept;
};

/// Reductions of `all_reduce`.
enum class reduce_op { sum, max };

inline const char* to_string(reduce_op op) noexcept { return op == reduce_op::sum ? "sum" : "max"; }
inline std::ostream& operator<<(std::ostream& os, reduce_op op) { return os << to_string(op); }

/// The split color of a rank that joins no group (as `MPI_UNDEFINED` / `NCCL_SPLIT_NOCOLOR`).
inline constexpr int no_color = -1;

/// Default of `timeout()`: generous for real jobs; tests set short ones.
inline constexpr std::chrono::milliseconds default_timeout{60'000};

/// Element types a communicator moves: bytes copied as they are.
template <class T>
concept transferable = std::is_trivially_copyable_v<T> && !std::is_const_v<T> && !std::is_volatile_v<T>;

/// Element types `all_reduce` combines.
template <class T>
concept reducible = transferable<T> && std::is_arithmetic_v<T> && !std::same_as<T, bool>;

template <class C>
concept communicator =
    std::same_as<typename communicator_concept_of<C>::type, communicator_tag> && std::move_constructible<C> &&
    requires(C& c, const C& cc, int i, std::span<const double> cs, std::span<double> s,
             std::span<const std::size_t> counts, std::chrono::milliseconds d) {
      { C::host_memory } -> std::convertible_to<bool>;
      { cc.valid() } -> std::convertible_to<bool>;
      { cc.rank() } -> std::convertible_to<int>;
      { cc.size() } -> std::convertible_to<int>;
      { c.split(i, i) } -> std::same_as<C>;
      c.all_to_all(cs, s);
      c.all_to_all_v(cs, counts, s, counts);
      c.all_gather(cs, s);
      c.all_reduce(cs, s, reduce_op::sum);
      c.all_reduce(s, reduce_op::max);
      c.broadcast(s, i);
      c.send(cs, i, i);
      c.recv(s, i, i);
      c.barrier();
      { c.abort() } noexcept;
      { cc.aborted() } -> std::convertible_to<bool>;
      { cc.timeout() } -> std::convertible_to<std::chrono::milliseconds>;
      c.set_timeout(d);
    };

/// Communicators whose spans are host memory (the host re-layouts need this).
template <class C>
concept host_communicator = communicator<C> && bool(C::host_memory);

/// Communicators that may only enqueue a collective (a device communicator in asynchronous mode,
/// `nccl_comm::set_synchronous(false)`): `c.synchronous()` says whether calls complete before they
/// return, and `c.wait()` waits for what was enqueued, under the timeout.
template <class C>
concept asynchronous_communicator = communicator<C> && requires(C& c, const C& cc) {
  { cc.synchronous() } -> std::convertible_to<bool>;
  c.wait();
};

namespace detail {
inline std::string seconds_string(std::chrono::milliseconds d) {
  auto ms = d.count();
  return std::to_string(ms / 1000) + "." + std::to_string(ms % 1000 / 100) + std::to_string(ms % 100 / 10) +
         std::to_string(ms % 10) + " s";
}
}  // namespace detail

}  // namespace dcp
