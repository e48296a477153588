#pragma once
/// \file
/// Private: the state and the members every process-level communicator handle shares (mpi_comm,
/// nccl_comm): rank, size, timeout, abort state, and how a call names itself in an error. Include
/// `<dcp/comm/mpi.hpp>` or `<dcp/comm/nccl.hpp>` instead.

#include <chrono>
#include <string>
#include <utility>

#include <dcp/comm/comm_concepts.hpp>
#include <dcp/comm/detail/backend_checks.hpp>

namespace dcp::detail {

/// CRTP base. `Comm` (a friend of this base) provides `valid()`, `static constexpr const char*
/// backend_name` and `std::string where_detail() const` (the "(...)" of `comm_where`, or empty).
template <class Comm>
class comm_backend {
 public:
  int rank() const noexcept { return self().valid() ? rank_ : -1; }
  int size() const noexcept { return self().valid() ? size_ : 0; }
  std::chrono::milliseconds timeout() const noexcept { return timeout_; }
  void set_timeout(std::chrono::milliseconds t) {
    check_timeout(Comm::backend_name, t);
    timeout_ = t;
  }
  bool aborted() const noexcept { return aborted_; }

 protected:
  comm_backend() = default;
  explicit comm_backend(std::chrono::milliseconds timeout) noexcept : timeout_(timeout) {}

  void swap_state(comm_backend& o) noexcept {
    std::swap(rank_, o.rank_);
    std::swap(size_, o.size_);
    std::swap(timeout_, o.timeout_);
    std::swap(aborted_, o.aborted_);
    std::swap(abort_reason_, o.abort_reason_);
  }

  /// "<backend>: <what> on rank r of n[ (<detail>)]".
  std::string where(const char* what) const {
    return comm_where(Comm::backend_name, what, rank_, size_, self().where_detail());
  }

  /// The guard at the top of every call: not the null communicator, not aborted.
  void enter_call(const char* what) const {
    check_usable(self().valid(), aborted_, Comm::backend_name, what, [&] { return where(what); }, abort_reason_);
  }

  /// An explicit `abort()` keeps an earlier cause (a timeout, an asynchronous error).
  void note_abort_by_call() {
    if (abort_reason_.empty()) abort_reason_ = abort_by_call_reason(rank_);
  }

  /// Records the timeout as the cause of the abort that follows and returns the error's text.
  std::string timed_out_text(const char* what, int peer) {
    abort_reason_ = "timeout in " + std::string(what);
    return timed_out_message(where(what), timeout_, peer, size_);
  }

  int rank_ = -1;
  int size_ = 0;
  std::chrono::milliseconds timeout_ = default_timeout;
  bool aborted_ = false;
  std::string abort_reason_;

 private:
  const Comm& self() const noexcept { return static_cast<const Comm&>(*this); }
};

}  // namespace dcp::detail
