#pragma once
/// \file
/// Private: the argument checks and messages every communicator backend shares (local, mpi,
/// nccl), so that one mistake reads the same whatever the backend. The laws of a collective call's
/// arguments are `detail/collective_check.hpp`'s. Include `<dcp/comm/local.hpp>`,
/// `<dcp/comm/mpi.hpp>` or `<dcp/comm/nccl.hpp>` instead.

#include <chrono>
#include <string>
#include <string_view>

#include <dcp/comm/comm_concepts.hpp>
#include <dcp/error.hpp>

namespace dcp::detail {

/// "<backend>: <what> on rank <r> of <n>[ (<extra>)]": where a failing call ran.
inline std::string comm_where(std::string_view backend, const char* what, int rank, int size,
                              std::string_view extra = {}) {
  std::string s = std::string(backend) + ": " + what + " on rank " + std::to_string(rank) + " of " + std::to_string(size);
  if (!extra.empty()) s += " (" + std::string(extra) + ")";
  return s;
}

/// A timeout must be positive.
inline void check_timeout(std::string_view backend, std::chrono::milliseconds t) {
  check(t.count() > 0, errc::invalid_argument,
        [&] { return std::string(backend) + ": timeout of " + std::to_string(t.count()) + " ms must be positive"; });
}

/// A call on the null communicator (what `split` returns to a rank that joins no group).
inline void check_not_null(bool valid, std::string_view backend, const char* what) {
  check(valid, errc::invalid_argument, [&] {
    return std::string(what) + " on a null " + std::string(backend) +
           " (a rank that split with a negative color joins no group)";
  });
}

/// A call on an aborted communicator: `where` is `comm_where(...)`, `reason` the abort's cause.
[[noreturn]] inline void throw_aborted(const std::string& where, const std::string& reason) {
  throw error(errc::aborted, where + ": the communicator was aborted (" + reason + "); create a new communicator");
}

/// The guard at the top of every call: not the null communicator, not aborted. `where()` builds
/// `comm_where(...)` only when it is needed.
template <class Where>
void check_usable(bool valid, bool aborted, std::string_view backend, const char* what, Where&& where,
                  const std::string& abort_reason) {
  check_not_null(valid, backend, what);
  if (aborted) throw_aborted(where(), abort_reason);
}

/// "<where> timed out after <t> waiting for rank <peer>" (point to point), or "... waiting for its
/// peers" (a collective: the backend cannot tell which rank is missing).
inline std::string timed_out_message(const std::string& where, std::chrono::milliseconds timeout, int peer, int size) {
  std::string msg = where + " timed out after " + seconds_string(timeout);
  msg += peer >= 0 ? " waiting for rank " + std::to_string(peer)
                   : " waiting for its peers (at least one of the " + std::to_string(size) + " ranks did not join)";
  return msg;
}

/// The cause recorded by an explicit `abort()`.
inline std::string abort_by_call_reason(int rank) { return "aborted by abort() on rank " + std::to_string(rank); }

/// A point-to-point peer must be a rank of the communicator.
inline void check_peer(const char* what, int peer, int size) {
  check(peer >= 0 && peer < size, errc::invalid_argument, [&] {
    return std::string(what) + ": peer " + std::to_string(peer) + " out of range [0, " + std::to_string(size) + ")";
  });
}

/// A point-to-point tag must be non-negative (MPI also bounds it above by MPI_TAG_UB).
inline void check_tag(const char* what, int tag) {
  check(tag >= 0, errc::invalid_argument,
        [&] { return std::string(what) + ": tag " + std::to_string(tag) + " must be non-negative"; });
}

}  // namespace dcp::detail
