#pragma once
/// \file
/// `mpi_comm`: the `communicator` over an `MPI_Comm` (MPI's initialisation is
/// `<dcp/comm/mpi_environment.hpp>`).
/// Available when `DCP_HAS_MPI()` (link `dcp::mpi`, or include <mpi.h> first); empty otherwise.
///
/// - Errors: the wrapped communicator uses `MPI_ERRORS_RETURN`; an MPI error code becomes a
///   `dcp::error` in `mpi_category()` (value = MPI error class) with `MPI_Error_string`'s text.
/// - Timeouts: every operation is nonblocking (`MPI_Ialltoall`, `MPI_Iallreduce`, ...) and polled
///   with `MPI_Test` until `timeout()` (spinning, then yielding, then sleeping up to 100 us
///   between polls once a wait passes 1 ms: `detail::poll_backoff`). On a timeout the call
///   throws `dcp::error` with `errc::timeout` naming the operation and this rank (for
///   point-to-point, the peer), and the communicator is aborted: later calls throw
///   `errc::aborted`. MPI cannot tell which peer is missing, so before throwing the rank holds a
///   roll call: it asks every peer where it is, on two tags point-to-point calls may not use
///   (the top two of MPI_TAG_UB); a peer waiting in any call of this communicator answers at its
///   next poll, naming that call. The error then names the ranks that answered (and the calls
///   they wait in, where they differ) and those that did not within the roll call's grace
///   (a quarter of the timeout, at most 0.5 s): stopped, exited, or busy outside this
///   communicator's calls. It does NOT call `MPI_Abort`: the caller
///   decides (`abort_job()` does it). A timed-out collective cannot be cancelled in MPI, so its
///   request is kept (never freed) and its buffers must stay alive until the process ends or the
///   late peer joins; receives are matched by probing first, so a timed-out `recv` leaves
///   nothing pending.
/// - Checks: with `checked()` (the default) every collective first all-gathers a 64-byte
///   description of each rank's call, so a size, type, root or order mismatch is the same
///   `dcp::error` on every rank instead of undefined behaviour or a timeout. `set_checked(false)`
///   removes that round trip on hot paths.
/// - `abort()` marks this handle aborted (no MPI call, no effect on other processes).

#include <dcp/config.hpp>

#if DCP_HAS_MPI()

#include <dcp/comm/mpi_environment.hpp>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <span>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include <dcp/comm/comm_concepts.hpp>
#include <dcp/comm/detail/backend_base.hpp>
#include <dcp/comm/detail/collective_check.hpp>
#include <dcp/error.hpp>

namespace dcp {

namespace detail {

template <class T>
MPI_Datatype mpi_type() noexcept {
  if constexpr (std::is_same_v<T, float>) return MPI_FLOAT;
  else if constexpr (std::is_same_v<T, double>) return MPI_DOUBLE;
  else if constexpr (std::is_same_v<T, long double>) return MPI_LONG_DOUBLE;
  else if constexpr (std::is_signed_v<T> && sizeof(T) == 1) return MPI_INT8_T;
  else if constexpr (std::is_signed_v<T> && sizeof(T) == 2) return MPI_INT16_T;
  else if constexpr (std::is_signed_v<T> && sizeof(T) == 4) return MPI_INT32_T;
  else if constexpr (std::is_signed_v<T> && sizeof(T) == 8) return MPI_INT64_T;
  else if constexpr (std::is_unsigned_v<T> && sizeof(T) == 1) return MPI_UINT8_T;
  else if constexpr (std::is_unsigned_v<T> && sizeof(T) == 2) return MPI_UINT16_T;
  else if constexpr (std::is_unsigned_v<T> && sizeof(T) == 4) return MPI_UINT32_T;
  else if constexpr (std::is_unsigned_v<T> && sizeof(T) == 8) return MPI_UINT64_T;
  else static_assert(sizeof(T) == 0, "all_reduce: no MPI datatype for this element type");
}

// How a rank waits between two polls of MPI: spin briefly (a peer that is nearly there), then
// yield, then, once the wait has lasted a millisecond, sleep for up to 100 us at a time. A rank
// waiting for a busy peer then neither burns a core the peer could use (ranks often share cores
// under --oversubscribe) nor counts the wait as its own CPU time; a wake-up comes at most
// 100 us late, a tenth of the wait so far.
class poll_backoff {
 public:
  void pause() {
    ++polls_;
    if (polls_ <= 64) return;
    const auto now = std::chrono::steady_clock::now();
    if (polls_ == 65) since_ = now;
    if (now - since_ < std::chrono::milliseconds(1)) return std::this_thread::yield();
    nap_ = std::min(std::chrono::microseconds(100), std::max(std::chrono::microseconds(10), 2 * nap_));
    std::this_thread::sleep_for(nap_);
  }

 private:
  int polls_ = 0;
  std::chrono::steady_clock::time_point since_;
  std::chrono::microseconds nap_{0};
};

// What a timed-out request still references: kept until the process ends.
struct mpi_orphan {
  MPI_Request request = MPI_REQUEST_NULL;
  std::vector<int> arrays;
  std::vector<std::byte> payload;  // a roll-call message in flight
};

// One message of a timeout's roll call: a question (`answer` 0) or an answer naming the call the
// peer waits in and how many waits it has entered on the communicator.
struct mpi_rollcall_note {
  std::int64_t answer = 0;
  std::int64_t waits = 0;
  char call[48] = {};
};

// Fixed-size wire form of `call_meta` for the checked mode.
struct mpi_wire_meta {
  std::int64_t kind, type, root, key, elem_size, send_count, recv_count, send_counts_size, recv_counts_size;
};

}  // namespace detail

/// One rank's handle on an `MPI_Comm`, owning (freed on destruction) or borrowed. Move-only.
class mpi_comm : public detail::comm_backend<mpi_comm> {
 public:
  using communicator_concept = communicator_tag;
  static constexpr bool host_memory = true;

  /// The null communicator (what `split(no_color, key)` returns).
  mpi_comm() = default;

  /// A duplicate of `MPI_COMM_WORLD`, owned: error handling and traffic are separate from the user's.
  static mpi_comm world(std::chrono::milliseconds timeout = default_timeout) {
    MPI_Comm c = MPI_COMM_NULL;
    detail::mpi_check(MPI_Comm_dup(MPI_COMM_WORLD, &c), "MPI_Comm_dup", "mpi_comm::world");
    return mpi_comm(c, true, timeout);
  }
  /// Wraps `c` without taking ownership; sets `MPI_ERRORS_RETURN` on it.
  static mpi_comm borrow(MPI_Comm c, std::chrono::milliseconds timeout = default_timeout) {
    return mpi_comm(c, false, timeout);
  }
  /// Takes ownership of `c` (freed with `MPI_Comm_free`); sets `MPI_ERRORS_RETURN` on it.
  static mpi_comm adopt(MPI_Comm c, std::chrono::milliseconds timeout = default_timeout) {
    return mpi_comm(c, true, timeout);
  }

  mpi_comm(mpi_comm&& o) noexcept { swap(o); }
  mpi_comm& operator=(mpi_comm&& o) noexcept {
    if (this != &o) {
      mpi_comm tmp(std::move(o));
      swap(tmp);
    }
    return *this;
  }
  mpi_comm(const mpi_comm&) = delete;
  mpi_comm& operator=(const mpi_comm&) = delete;
  ~mpi_comm() { (void)try_free(); }

  /// Frees an owned communicator now (noexcept teardown); a no-op for borrowed or null ones, or once
  /// MPI is finalised. An aborted communicator with requests still pending is left to MPI.
  std::error_code try_free() noexcept {
    if (comm_ == MPI_COMM_NULL || !owning_) {
      comm_ = MPI_COMM_NULL;
      return {};
    }
    int fin = 0;
    MPI_Finalized(&fin);
    int rc = MPI_SUCCESS;
    if (!fin && orphans_.empty()) rc = MPI_Comm_free(&comm_);
    comm_ = MPI_COMM_NULL;
    if (rc != MPI_SUCCESS) return {rc, mpi_category()};
    return {};
  }

  MPI_Comm native() const noexcept { return comm_; }
  bool owning() const noexcept { return owning_; }
  bool valid() const noexcept { return comm_ != MPI_COMM_NULL; }
  bool checked() const noexcept { return checked_; }
  /// Turns the cross-rank checks of every collective on or off (all ranks must agree).
  void set_checked(bool on) noexcept { checked_ = on; }

  void abort() noexcept {
    note_abort_by_call();
    aborted_ = true;
  }
  /// Ends the whole MPI job (`MPI_Abort`): the last resort after a timeout.
  void abort_job(int code = 1) noexcept { MPI_Abort(valid() ? comm_ : MPI_COMM_WORLD, code); }

  // ---- collectives ------------------------------------------------------------------------------

  void barrier() {
    enter_call("barrier");
    check_call(detail::meta_of<std::byte>(detail::coll_kind::barrier, 0, 0));
    MPI_Request req = MPI_REQUEST_NULL;
    detail::mpi_check(MPI_Ibarrier(comm_, &req), "MPI_Ibarrier", where("barrier"));
    wait(req, "barrier");
  }

  mpi_comm split(int color, int key) {
    enter_call("split");
    // Always checked: MPI_Comm_split blocks, so agree on valid colors before entering it.
    check_call(detail::meta_of_split(color, key), true);
    MPI_Comm child = MPI_COMM_NULL;
    detail::mpi_check(MPI_Comm_split(comm_, color < 0 ? MPI_UNDEFINED : color, key, &child), "MPI_Comm_split",
                      where("split"));
    if (child == MPI_COMM_NULL) return mpi_comm();
    mpi_comm out(child, true, timeout_);
    out.checked_ = checked_;
    return out;
  }

  template <transferable T>
  void all_to_all(std::span<const T> send, std::span<T> recv) {
    enter_call("all_to_all");
    check_call(detail::meta_of<T>(detail::coll_kind::all_to_all, send.size(), recv.size()));
    const int chunk = to_int(send.size_bytes() / size_t(size_), "all_to_all");
    MPI_Request req = MPI_REQUEST_NULL;
    detail::mpi_check(MPI_Ialltoall(send.data(), chunk, MPI_BYTE, recv.data(), chunk, MPI_BYTE, comm_, &req),
                      "MPI_Ialltoall", where("all_to_all"));
    wait(req, "all_to_all");
  }

  template <transferable T>
  void all_to_all_v(std::span<const T> send, std::span<const std::size_t> send_counts, std::span<T> recv,
                    std::span<const std::size_t> recv_counts) {
    enter_call("all_to_all_v");
    check_call(detail::meta_of_counts<T>(send.size(), send_counts, recv.size(), recv_counts));
    const size_t n = size_t(size_);
    // Counts and displacements in bytes; MPI reads them until completion, so they live in `arrays`.
    detail::mpi_orphan keep;
    keep.arrays.resize(4 * n);
    int* sc = keep.arrays.data();
    int* sd = sc + n;
    int* rc = sd + n;
    int* rd = rc + n;
    size_t so = 0, ro = 0;
    for (size_t i = 0; i < n; ++i) {
      sc[i] = to_int(send_counts[i] * sizeof(T), "all_to_all_v");
      rc[i] = to_int(recv_counts[i] * sizeof(T), "all_to_all_v");
      sd[i] = to_int(so, "all_to_all_v");
      rd[i] = to_int(ro, "all_to_all_v");
      so += size_t(sc[i]);
      ro += size_t(rc[i]);
    }
    detail::mpi_check(MPI_Ialltoallv(send.data(), sc, sd, MPI_BYTE, recv.data(), rc, rd, MPI_BYTE, comm_,
                                     &keep.request),
                      "MPI_Ialltoallv", where("all_to_all_v"));
    wait(keep, "all_to_all_v");
  }

  template <transferable T>
  void all_gather(std::span<const T> send, std::span<T> recv) {
    enter_call("all_gather");
    check_call(detail::meta_of<T>(detail::coll_kind::all_gather, send.size(), recv.size()));
    const int len = to_int(send.size_bytes(), "all_gather");
    MPI_Request req = MPI_REQUEST_NULL;
    detail::mpi_check(MPI_Iallgather(send.data(), len, MPI_BYTE, recv.data(), len, MPI_BYTE, comm_, &req),
                      "MPI_Iallgather", where("all_gather"));
    wait(req, "all_gather");
  }

  template <reducible T>
  void all_reduce(std::span<const T> send, std::span<T> recv, reduce_op op) {
    enter_call("all_reduce");
    check_call(detail::meta_of_reduce<T>(send.size(), recv.size(), op));
    reduce(send.data(), recv.data(), recv.size(), op);
  }

  template <reducible T>
  void all_reduce(std::span<T> data, reduce_op op) {
    enter_call("all_reduce");
    check_call(detail::meta_of_reduce<T>(data.size(), data.size(), op));
    reduce(static_cast<const T*>(MPI_IN_PLACE), data.data(), data.size(), op);
  }

  template <transferable T>
  void broadcast(std::span<T> data, int root) {
    enter_call("broadcast");
    check_call(detail::meta_of_broadcast<T>(data.size(), root));
    MPI_Request req = MPI_REQUEST_NULL;
    detail::mpi_check(MPI_Ibcast(data.data(), to_int(data.size_bytes(), "broadcast"), MPI_BYTE, root, comm_, &req),
                      "MPI_Ibcast", where("broadcast"));
    wait(req, "broadcast");
  }

  // ---- point to point ---------------------------------------------------------------------------

  template <transferable T>
  void send(std::span<const T> data, int peer, int tag) {
    enter_call("send");
    check_p2p("send", peer, tag);
    MPI_Request req = MPI_REQUEST_NULL;
    detail::mpi_check(MPI_Isend(data.data(), to_int(data.size_bytes(), "send"), MPI_BYTE, peer, tag, comm_, &req),
                      "MPI_Isend", where("send"));
    wait(req, "send", peer);
  }

  /// A send in flight (`isend`), finished by `wait`.
  struct pending_send {
    MPI_Request request = MPI_REQUEST_NULL;
    int peer = -1;
  };
  /// Starts sending `data` to `peer` with `tag` and returns at once: `data` must stay alive and
  /// unchanged until `wait` returns. A pipeline stage sends its activations and gradients this
  /// way, so that two neighbours sending to each other do not wait on each other's receive.
  template <transferable T>
  [[nodiscard]] pending_send isend(std::span<const T> data, int peer, int tag) {
    enter_call("isend");
    check_p2p("isend", peer, tag);
    pending_send out{MPI_REQUEST_NULL, peer};
    detail::mpi_check(
        MPI_Isend(data.data(), to_int(data.size_bytes(), "isend"), MPI_BYTE, peer, tag, comm_, &out.request),
        "MPI_Isend", where("isend"));
    return out;
  }
  /// Waits until the send has left `data` (within the timeout, as every call).
  void wait(pending_send& s) {
    if (s.request != MPI_REQUEST_NULL) wait(s.request, "isend", s.peer);
  }

  /// Receives exactly `data.size_bytes()` bytes from `peer` with `tag`. A message of another size is
  /// received and dropped, and reported with both sizes.
  template <transferable T>
  void recv(std::span<T> data, int peer, int tag) {
    enter_call("recv");
    check_p2p("recv", peer, tag);
    const auto dl = clock::now() + timeout_;
    MPI_Message msg = MPI_MESSAGE_NULL;
    MPI_Status st;
    detail::poll_backoff backoff;
    ++waits_, waiting_in_ = "recv";
    for (int flag = 0; !flag;) {
      detail::mpi_check(MPI_Improbe(peer, tag, comm_, &flag, &msg, &st), "MPI_Improbe", where("recv"));
      if (!flag) {
        if (clock::now() > dl) timed_out("recv", peer);
        answer_rollcall();
        backoff.pause();
      }
    }
    int bytes = 0;
    detail::mpi_check(MPI_Get_count(&st, MPI_BYTE, &bytes), "MPI_Get_count", where("recv"));
    if (size_t(bytes) != data.size_bytes()) {
      std::vector<std::byte> drop(static_cast<size_t>(bytes));
      detail::mpi_check(MPI_Mrecv(drop.data(), bytes, MPI_BYTE, &msg, MPI_STATUS_IGNORE), "MPI_Mrecv", where("recv"));
      throw error(errc::invalid_argument, "recv: rank " + std::to_string(rank_) + " expects " +
                                              std::to_string(data.size_bytes()) + " bytes from rank " +
                                              std::to_string(peer) + " (tag " + std::to_string(tag) +
                                              ") but the message has " + std::to_string(bytes) +
                                              " bytes; send and recv sizes must match");
    }
    MPI_Request req = MPI_REQUEST_NULL;
    detail::mpi_check(MPI_Imrecv(data.data(), bytes, MPI_BYTE, &msg, &req), "MPI_Imrecv", where("recv"));
    wait(req, "recv", peer);
  }

 private:
  friend detail::comm_backend<mpi_comm>;
  using clock = std::chrono::steady_clock;
  static constexpr const char* backend_name = "mpi_comm";

  mpi_comm(MPI_Comm c, bool owning, std::chrono::milliseconds timeout)
      : comm_backend(timeout), comm_(c), owning_(owning) {
    check(c != MPI_COMM_NULL, errc::invalid_argument, [] { return std::string("mpi_comm: MPI_COMM_NULL"); });
    detail::mpi_check(MPI_Comm_set_errhandler(c, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler", "mpi_comm");
    detail::mpi_check(MPI_Comm_rank(c, &rank_), "MPI_Comm_rank", "mpi_comm");
    detail::mpi_check(MPI_Comm_size(c, &size_), "MPI_Comm_size", "mpi_comm");
    int* ub = nullptr;
    int has = 0;
    MPI_Comm_get_attr(c, MPI_TAG_UB, &ub, &has);
    if (has && ub) tag_ub_ = *ub;
  }

  void swap(mpi_comm& o) noexcept {
    swap_state(o);
    std::swap(comm_, o.comm_);
    std::swap(owning_, o.owning_);
    std::swap(checked_, o.checked_);
    std::swap(orphans_, o.orphans_);
    std::swap(tag_ub_, o.tag_ub_);
    std::swap(waits_, o.waits_);
    std::swap(waiting_in_, o.waiting_in_);
  }

  std::string where_detail() const { return {}; }

  static int to_int(size_t v, const char* what) {
    check(v <= size_t(INT_MAX), errc::unsupported, [&] {
      return std::string(what) + ": " + std::to_string(v) + " bytes exceed MPI's int count (" +
             std::to_string(INT_MAX) + "); split the transfer";
    });
    return int(v);
  }

  void check_p2p(const char* what, int peer, int tag) const {
    detail::check_peer(what, peer, size_);
    const int max_tag = rollcall_question_tag() - 1;  // the top two are the roll call's
    check(tag >= 0 && tag <= max_tag, errc::invalid_argument, [&] {
      return std::string(what) + ": tag " + std::to_string(tag) + " out of range [0, " + std::to_string(max_tag) + "]";
    });
  }

  int rollcall_question_tag() const { return tag_ub_ - 1; }
  int rollcall_answer_tag() const { return tag_ub_; }

  // Sends a roll-call note to `peer` without waiting; the message's request and bytes are kept
  // until the process ends (a stopped peer may never take it). Errors are ignored: a roll call
  // only adds to a timeout's message.
  void post_note(const detail::mpi_rollcall_note& note, int peer, int tag) noexcept {
    try {
      detail::mpi_orphan o;
      o.payload.resize(sizeof note);
      std::memcpy(o.payload.data(), &note, sizeof note);
      if (MPI_Isend(o.payload.data(), int(sizeof note), MPI_BYTE, peer, tag, comm_, &o.request) == MPI_SUCCESS)
        orphans_.push_back(std::move(o));
    } catch (...) {
    }
  }

  // Answers every roll-call question that has arrived: where this rank waits.
  void answer_rollcall() noexcept {
    const int question = rollcall_question_tag();
    for (;;) {
      int flag = 0;
      MPI_Message msg = MPI_MESSAGE_NULL;
      MPI_Status st;
      if (MPI_Improbe(MPI_ANY_SOURCE, question, comm_, &flag, &msg, &st) != MPI_SUCCESS || !flag) return;
      detail::mpi_rollcall_note q;
      if (MPI_Mrecv(&q, int(sizeof q), MPI_BYTE, &msg, MPI_STATUS_IGNORE) != MPI_SUCCESS) return;
      detail::mpi_rollcall_note a;
      a.answer = 1;
      a.waits = waits_;
      std::strncpy(a.call, waiting_in_, sizeof a.call - 1);
      post_note(a, st.MPI_SOURCE, rollcall_answer_tag());
    }
  }

  // The roll call of a timed-out wait in `what`: asks every peer, collects the answers for the
  // grace period (answering the peers' own questions meanwhile) and says who answered, where.
  std::string rollcall(const char* what) noexcept {
    try {
      const int n = size_;
      if (n <= 1) return {};
      detail::mpi_rollcall_note q;
      q.waits = waits_;
      std::strncpy(q.call, what, sizeof q.call - 1);
      for (int r = 0; r < n; ++r)
        if (r != rank_) post_note(q, r, rollcall_question_tag());
      const auto grace = std::clamp(timeout_ / 4, std::chrono::milliseconds(20), std::chrono::milliseconds(500));
      const auto dl = clock::now() + grace;
      std::vector<detail::mpi_rollcall_note> notes(static_cast<std::size_t>(n));
      std::vector<char> answered(static_cast<std::size_t>(n), 0);
      int left = n - 1;
      while (left > 0 && clock::now() < dl) {
        answer_rollcall();
        int flag = 0;
        MPI_Message msg = MPI_MESSAGE_NULL;
        MPI_Status st;
        if (MPI_Improbe(MPI_ANY_SOURCE, rollcall_answer_tag(), comm_, &flag, &msg, &st) == MPI_SUCCESS && flag) {
          detail::mpi_rollcall_note a;
          if (MPI_Mrecv(&a, int(sizeof a), MPI_BYTE, &msg, MPI_STATUS_IGNORE) == MPI_SUCCESS &&
              st.MPI_SOURCE >= 0 && st.MPI_SOURCE < n && !answered[std::size_t(st.MPI_SOURCE)]) {
            answered[std::size_t(st.MPI_SOURCE)] = 1, notes[std::size_t(st.MPI_SOURCE)] = a, --left;
          }
          continue;
        }
        std::this_thread::sleep_for(std::chrono::microseconds(100));
      }
      std::string silent, elsewhere;
      int here = 0;
      for (int r = 0; r < n; ++r) {
        if (r == rank_) continue;
        const auto& a = notes[std::size_t(r)];
        if (!answered[std::size_t(r)]) {
          silent += (silent.empty() ? "" : ", ") + std::to_string(r);
        } else if (std::string(a.call, strnlen(a.call, sizeof a.call)) != what || a.waits != waits_) {
          elsewhere += (elsewhere.empty() ? "" : ", ") + std::string("rank ") + std::to_string(r) + " waits in " +
                       std::string(a.call, strnlen(a.call, sizeof a.call)) + " (its wait " + std::to_string(a.waits) +
                       ", this rank's " + std::to_string(waits_) + ")";
        } else {
          ++here;
        }
      }
      std::string out = "; roll call (" + detail::seconds_string(grace) + "): " + std::to_string(here) + " of " +
                        std::to_string(n - 1) + " peers wait in this call";
      if (!elsewhere.empty()) out += "; " + elsewhere;
      if (!silent.empty())
        out += "; no answer from rank" + std::string(silent.find(',') == std::string::npos ? " " : "s ") + silent +
               " (stopped, exited, or busy outside this communicator's calls)";
      return out;
    } catch (...) {
      return {};
    }
  }

  template <class T>
  void reduce(const T* in, T* out, size_t count, reduce_op op) {
    MPI_Request req = MPI_REQUEST_NULL;
    detail::mpi_check(MPI_Iallreduce(in, out, to_int(count, "all_reduce"), detail::mpi_type<T>(),
                                     op == reduce_op::sum ? MPI_SUM : MPI_MAX, comm_, &req),
                      "MPI_Iallreduce", where("all_reduce"));
    wait(req, "all_reduce");
  }

  /// This rank's own laws of the call, and in the checked mode (or with `force`) first every
  /// rank's: all-gathers the call descriptions and runs the shared cross-rank checks.
  void check_call(const detail::call_meta& m, bool force = false) {
    if (checked_ || force) check_all_ranks(m);
    detail::check_rank_call(m, rank_, size_);
  }

  void check_all_ranks(const detail::call_meta& m) {
    const char* what = detail::to_string(m.kind);
    const size_t n = size_t(size_);
    detail::mpi_wire_meta mine{std::int64_t(m.kind),       m.type,
                               m.root,                     m.key,
                               std::int64_t(m.elem_size),  std::int64_t(m.send_count),
                               std::int64_t(m.recv_count), std::int64_t(m.send_counts_size),
                               std::int64_t(m.recv_counts_size)};
    std::vector<detail::mpi_wire_meta> all(n);
    gather_raw(&mine, all.data(), sizeof(mine), what);
    std::vector<detail::call_meta> metas(n);
    for (size_t r = 0; r < n; ++r) {
      auto& d = metas[r];
      d.kind = detail::coll_kind(all[r].kind);
      d.type = std::int32_t(all[r].type);
      d.root = std::int32_t(all[r].root);
      d.key = std::int32_t(all[r].key);
      d.elem_size = std::uint64_t(all[r].elem_size);
      d.send_count = std::uint64_t(all[r].send_count);
      d.recv_count = std::uint64_t(all[r].recv_count);
      d.send_counts_size = std::uint64_t(all[r].send_counts_size);
      d.recv_counts_size = std::uint64_t(all[r].recv_counts_size);
    }
    // The count arrays of all_to_all_v travel only when every rank called it with size() of each;
    // otherwise check_call reports the malformed call before it reads any count.
    bool counts_ok = true;
    for (auto& d : metas)
      counts_ok = counts_ok && d.kind == detail::coll_kind::all_to_all_v && d.send_counts_size == n &&
                  d.recv_counts_size == n;
    std::vector<std::size_t> counts;
    if (counts_ok) {
      std::vector<std::uint64_t> mine_counts(2 * n), all_counts(2 * n * n);
      std::copy(m.send_counts, m.send_counts + n, mine_counts.begin());
      std::copy(m.recv_counts, m.recv_counts + n, mine_counts.begin() + std::ptrdiff_t(n));
      gather_raw(mine_counts.data(), all_counts.data(), 2 * n * sizeof(std::uint64_t), what);
      counts.assign(all_counts.begin(), all_counts.end());
      for (size_t r = 0; r < n; ++r) {
        metas[r].send_counts = counts.data() + 2 * n * r;
        metas[r].recv_counts = counts.data() + 2 * n * r + n;
      }
    }
    detail::check_call(metas);
  }

  void gather_raw(const void* mine, void* all, size_t bytes, const char* what) {
    MPI_Request req = MPI_REQUEST_NULL;
    detail::mpi_check(MPI_Iallgather(mine, int(bytes), MPI_BYTE, all, int(bytes), MPI_BYTE, comm_, &req),
                      "MPI_Iallgather", where(what));
    wait(req, what);
  }

  void wait(MPI_Request& req, const char* what, int peer = -1) {
    detail::mpi_orphan o;
    o.request = req;
    wait(o, what, peer);
    req = o.request;
  }

  void wait(detail::mpi_orphan& o, const char* what, int peer = -1) {
    const auto start = clock::now(), dl = start + timeout_;
    ++waits_, waiting_in_ = what;
    detail::poll_backoff backoff;
    for (int flag = 0;;) {
      detail::mpi_check(MPI_Test(&o.request, &flag, MPI_STATUS_IGNORE), "MPI_Test", where(what));
      if (flag) return;
      const auto now = clock::now();
      if (now > dl) break;
      if (now - start > std::chrono::milliseconds(1)) answer_rollcall();  // a peer's timeout asks
      backoff.pause();
    }
    orphans_.push_back(std::move(o));
    timed_out(what, peer);
  }

  [[noreturn]] void timed_out(const char* what, int peer) {
    std::string msg = timed_out_text(what, peer) + rollcall(what);
    aborted_ = true;
    throw error(errc::timeout, msg + "; the communicator is aborted (call abort_job() to end the MPI job)");
  }

  MPI_Comm comm_ = MPI_COMM_NULL;
  bool owning_ = false;
  bool checked_ = true;
  std::vector<detail::mpi_orphan> orphans_;
  int tag_ub_ = 32767;                // MPI_TAG_UB: the top two tags are the roll call's
  std::int64_t waits_ = 0;            // waits entered on this handle (a roll call's answer names it)
  const char* waiting_in_ = "none";  // the call of the latest wait
};

static_assert(communicator<mpi_comm>);
static_assert(host_communicator<mpi_comm>);

}  // namespace dcp

#endif  // DCP_HAS_MPI()
