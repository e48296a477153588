#pragma once
/// \file
/// `nccl_comm`: the `communicator` over an `ncclComm_t`, on device buffers and one CUDA stream.
/// Available when `DCP_HAS_NCCL()` (link `dcp::nccl`); empty otherwise. Host code: compiles with
/// a plain host compiler (g++) calling the CUDA runtime and NCCL, and with nvcc.
///
/// - Spans point to device memory (`host_memory == false`); `send`/`recv` ignore the tag (NCCL
///   matches point-to-point messages by order per peer) but still require it to be >= 0.
/// - Every communicator is created non-blocking (`ncclConfig_t::blocking = 0`), so init, split and
///   every call can be waited for with a deadline. Each call enqueues on `stream()` and, unless
///   `set_synchronous(false)`, waits for completion by polling `cudaStreamQuery` and
///   `ncclCommGetAsyncError`. After `timeout()` (or on an asynchronous NCCL error) the communicator
///   is aborted with `ncclCommAbort` (its kernels are stopped, so buffers are free again) and the
///   call throws `dcp::error` (`errc::timeout`, or the NCCL code in `nccl_category()`).
/// - Only local sizes are checked (no cross-rank description round trip on the GPU path).
/// - Bootstrap: `nccl_comm::init(bootstrap, device)` broadcasts the unique id over any host
///   communicator (`mpi_comm`, or `local_comm` with one thread per GPU);
///   `nccl_comm::init_from_file(path, nranks, rank, device)` shares it through a file.

#include <dcp/config.hpp>

#if DCP_HAS_NCCL()

#include <cuda_runtime.h>
#include <nccl.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <span>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include <dcp/comm/comm_concepts.hpp>
#include <dcp/comm/detail/backend_base.hpp>
#include <dcp/comm/detail/collective_check.hpp>
#include <dcp/comm/nccl_bootstrap.hpp>
#include <dcp/cuda/runtime.hpp>
#include <dcp/error.hpp>

namespace dcp {

namespace detail {

inline void nccl_check(ncclResult_t r, const char* call, const std::string& context, ncclComm_t comm = nullptr) {
  if (r == ncclSuccess || r == ncclInProgress) return;
  std::string msg = context + ": " + call + " failed: " + ncclGetErrorString(r);
  if (comm != nullptr) {
    const char* last = ncclGetLastError(comm);
    if (last != nullptr && *last != '\0') msg += std::string(" (") + last + ")";
  }
  throw error(std::error_code(int(r), nccl_category()), msg);
}

template <class T>
ncclDataType_t nccl_type() noexcept {
  if constexpr (std::is_same_v<T, float>) return ncclFloat32;
  else if constexpr (std::is_same_v<T, double>) return ncclFloat64;
  else if constexpr (std::is_signed_v<T> && sizeof(T) == 1) return ncclInt8;
  else if constexpr (std::is_unsigned_v<T> && sizeof(T) == 1) return ncclUint8;
  else if constexpr (std::is_signed_v<T> && sizeof(T) == 4) return ncclInt32;
  else if constexpr (std::is_unsigned_v<T> && sizeof(T) == 4) return ncclUint32;
  else if constexpr (std::is_signed_v<T> && sizeof(T) == 8) return ncclInt64;
  else if constexpr (std::is_unsigned_v<T> && sizeof(T) == 8) return ncclUint64;
  else static_assert(sizeof(T) == 0, "nccl_comm::all_reduce: no NCCL datatype for this element type");
}

}  // namespace detail

/// One rank's handle on an NCCL communicator, bound to a device and a stream. Move-only.
class nccl_comm : public detail::comm_backend<nccl_comm> {
 public:
  using communicator_concept = communicator_tag;
  static constexpr bool host_memory = false;

  /// The null communicator (what `split(no_color, key)` returns).
  nccl_comm() = default;

  /// Collective over `bootstrap` (a host communicator: every rank of it joins): rank 0 creates the
  /// unique id and broadcasts it. `stream == nullptr` creates (and owns) a non-blocking stream.
  template <host_communicator Boot>
  static nccl_comm init(Boot& bootstrap, int device, cudaStream_t stream = nullptr,
                        std::chrono::milliseconds timeout = default_timeout) {
    ncclUniqueId id{};
    if (bootstrap.rank() == 0) detail::nccl_check(ncclGetUniqueId(&id), "ncclGetUniqueId", "nccl_comm::init");
    bootstrap.broadcast(std::span<ncclUniqueId>(&id, 1), 0);
    return init_rank(id, bootstrap.size(), bootstrap.rank(), device, stream, timeout);
  }

  /// Shares the unique id through a file (`<dcp/comm/nccl_bootstrap.hpp>`): rank 0 writes `path`
  /// atomically, the others wait for it until `timeout`. Remove the file between jobs.
  static nccl_comm init_from_file(const std::filesystem::path& path, int nranks, int rank, int device,
                                  cudaStream_t stream = nullptr, std::chrono::milliseconds timeout = default_timeout) {
    ncclUniqueId id{};
    if (rank == 0) detail::nccl_check(ncclGetUniqueId(&id), "ncclGetUniqueId", "nccl_comm::init_from_file");
    share_nccl_unique_id_through_file(path, rank, id, timeout);
    return init_rank(id, nranks, rank, device, stream, timeout);
  }

  /// Joins the communicator of `id` as `rank` of `nranks` on `device`.
  static nccl_comm init_rank(const ncclUniqueId& id, int nranks, int rank, int device, cudaStream_t stream = nullptr,
                             std::chrono::milliseconds timeout = default_timeout) {
    check(nranks > 0 && rank >= 0 && rank < nranks, errc::invalid_argument, [&] {
      return "nccl_comm::init_rank: rank " + std::to_string(rank) + " of " + std::to_string(nranks) + " is out of range";
    });
    nccl_comm c;
    c.device_ = device;
    c.timeout_ = timeout;
    c.set_device("init");
    c.adopt_stream(stream);
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    ncclUniqueId copy = id;
    detail::nccl_check(ncclCommInitRankConfig(&c.comm_, nranks, copy, rank, &config), "ncclCommInitRankConfig",
                       "nccl_comm::init_rank", c.comm_);
    c.settle("init");
    c.finish_setup();
    return c;
  }

  nccl_comm(nccl_comm&& o) noexcept { swap(o); }
  nccl_comm& operator=(nccl_comm&& o) noexcept {
    if (this != &o) {
      nccl_comm tmp(std::move(o));
      swap(tmp);
    }
    return *this;
  }
  nccl_comm(const nccl_comm&) = delete;
  nccl_comm& operator=(const nccl_comm&) = delete;
  ~nccl_comm() { (void)try_destroy(); }

  /// Finalizes and destroys the communicator (noexcept teardown): `ncclCommFinalize`, waited for
  /// until `timeout()`, then `ncclCommDestroy`; `ncclCommAbort` if finalizing fails or times out.
  std::error_code try_destroy() noexcept {
    std::error_code ec;
    if (comm_ != nullptr) {
      cudaSetDevice(device_);
      if (!aborted_) {
        ncclResult_t r = ncclCommFinalize(comm_);
        const auto dl = std::chrono::steady_clock::now() + timeout_;
        ncclResult_t st = r;
        while (r == ncclSuccess || r == ncclInProgress) {
          if (ncclCommGetAsyncError(comm_, &st) != ncclSuccess || st != ncclInProgress) break;
          if (std::chrono::steady_clock::now() > dl) break;
          std::this_thread::yield();
        }
        if ((r == ncclSuccess || r == ncclInProgress) && st == ncclSuccess) {
          r = ncclCommDestroy(comm_);
          if (r != ncclSuccess) ec = {int(r), nccl_category()};
        } else {
          ec = {int(st == ncclInProgress ? ncclInternalError : st), nccl_category()};
          ncclCommAbort(comm_);
        }
      }
      comm_ = nullptr;
    }
    if (scratch_ != nullptr) cudaFree(scratch_);
    scratch_ = nullptr;
    if (own_stream_ && stream_ != nullptr) cudaStreamDestroy(stream_);
    stream_ = nullptr;
    own_stream_ = false;
    return ec;
  }

  ncclComm_t native() const noexcept { return comm_; }
  cudaStream_t stream() const noexcept { return stream_; }
  int device() const noexcept { return device_; }
  bool valid() const noexcept { return comm_ != nullptr || aborted_; }
  bool synchronous() const noexcept { return synchronous_; }
  /// With false, calls return once enqueued on `stream()`; call `wait()` before using the results.
  void set_synchronous(bool on) noexcept { synchronous_ = on; }

  /// `ncclCommAbort`: stops this rank's pending work; later calls throw `errc::aborted`.
  void abort() noexcept {
    if (comm_ != nullptr && !aborted_) {
      cudaSetDevice(device_);
      ncclCommAbort(comm_);
      comm_ = nullptr;
      note_abort_by_call();
    }
    aborted_ = true;
  }

  /// Waits until everything enqueued on `stream()` has finished, with the deadline of `timeout()`.
  void wait() { wait("wait"); }

  // ---- collectives ------------------------------------------------------------------------------

  /// Collective. Colors are checked on every rank first (one all-gather), so an out-of-range color
  /// is the same `dcp::error` everywhere.
  nccl_comm split(int color, int key) {
    enter("split");
    std::vector<int> colors = gather_ints(color, "split");
    for (int r = 0; r < size_; ++r) detail::check_split_color(r, colors[size_t(r)], size_);
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    nccl_comm child;
    child.device_ = device_;
    child.timeout_ = timeout_;
    child.synchronous_ = synchronous_;
    detail::nccl_check(ncclCommSplit(comm_, color < 0 ? NCCL_SPLIT_NOCOLOR : color, key, &child.comm_, &config),
                       "ncclCommSplit", where("split"), comm_);
    settle("split");
    if (color < 0 || child.comm_ == nullptr) return nccl_comm();
    child.settle("split");
    child.adopt_stream(nullptr);
    child.finish_setup();
    return child;
  }

  template <transferable T>
  void all_to_all(std::span<const T> send, std::span<T> recv) {
    enter("all_to_all");
    check_own(detail::meta_of<T>(detail::coll_kind::all_to_all, send.size(), recv.size()));
    detail::nccl_check(ncclAlltoAll(send.data(), recv.data(), send.size_bytes() / size_t(size_), ncclUint8, comm_,
                                    stream_),
                       "ncclAlltoAll", where("all_to_all"), comm_);
    done("all_to_all");
  }

  template <transferable T>
  void all_to_all_v(std::span<const T> send, std::span<const std::size_t> send_counts, std::span<T> recv,
                    std::span<const std::size_t> recv_counts) {
    enter("all_to_all_v");
    check_own(detail::meta_of_counts<T>(send.size(), send_counts, recv.size(), recv_counts));
    const size_t n = size_t(size_);
    const auto* sb = reinterpret_cast<const std::byte*>(send.data());
    auto* rb = reinterpret_cast<std::byte*>(recv.data());
    detail::nccl_check(ncclGroupStart(), "ncclGroupStart", where("all_to_all_v"));
    ncclResult_t first = ncclSuccess;
    for (size_t j = 0, so = 0, ro = 0; j < n; ++j) {
      const size_t sbytes = send_counts[j] * sizeof(T), rbytes = recv_counts[j] * sizeof(T);
      if (sbytes != 0 && first == ncclSuccess) first = ncclSend(sb + so, sbytes, ncclUint8, int(j), comm_, stream_);
      if (rbytes != 0 && first == ncclSuccess) first = ncclRecv(rb + ro, rbytes, ncclUint8, int(j), comm_, stream_);
      so += sbytes;
      ro += rbytes;
    }
    const ncclResult_t end = ncclGroupEnd();
    detail::nccl_check(first != ncclSuccess ? first : end, "ncclSend/ncclRecv", where("all_to_all_v"), comm_);
    done("all_to_all_v");
  }

  template <transferable T>
  void all_gather(std::span<const T> send, std::span<T> recv) {
    enter("all_gather");
    check_own(detail::meta_of<T>(detail::coll_kind::all_gather, send.size(), recv.size()));
    detail::nccl_check(ncclAllGather(send.data(), recv.data(), send.size_bytes(), ncclUint8, comm_, stream_),
                       "ncclAllGather", where("all_gather"), comm_);
    done("all_gather");
  }

  template <reducible T>
  void all_reduce(std::span<const T> send, std::span<T> recv, reduce_op op) {
    enter("all_reduce");
    check_own(detail::meta_of_reduce<T>(send.size(), recv.size(), op));
    reduce(send.data(), recv.data(), recv.size(), op);
  }

  template <reducible T>
  void all_reduce(std::span<T> data, reduce_op op) {
    enter("all_reduce");
    reduce(data.data(), data.data(), data.size(), op);
  }

  template <transferable T>
  void broadcast(std::span<T> data, int root) {
    enter("broadcast");
    check_own(detail::meta_of_broadcast<T>(data.size(), root));
    detail::nccl_check(ncclBroadcast(data.data(), data.data(), data.size_bytes(), ncclUint8, root, comm_, stream_),
                       "ncclBroadcast", where("broadcast"), comm_);
    done("broadcast");
  }

  template <transferable T>
  void send(std::span<const T> data, int peer, int tag) {
    enter("send");
    check_p2p("send", peer, tag);
    detail::nccl_check(ncclSend(data.data(), data.size_bytes(), ncclUint8, peer, comm_, stream_), "ncclSend",
                       where("send"), comm_);
    done("send", peer);
  }

  template <transferable T>
  void recv(std::span<T> data, int peer, int tag) {
    enter("recv");
    check_p2p("recv", peer, tag);
    detail::nccl_check(ncclRecv(data.data(), data.size_bytes(), ncclUint8, peer, comm_, stream_), "ncclRecv",
                       where("recv"), comm_);
    done("recv", peer);
  }

  /// An all-reduce of one integer on a device scratch word; always waits.
  void barrier() {
    enter("barrier");
    detail::nccl_check(ncclAllReduce(scratch_, scratch_, 1, ncclInt32, ncclSum, comm_, stream_), "ncclAllReduce",
                       where("barrier"), comm_);
    settle("barrier");
    wait("barrier");
  }

 private:
  friend detail::comm_backend<nccl_comm>;
  using clock = std::chrono::steady_clock;
  static constexpr const char* backend_name = "nccl_comm";

  void swap(nccl_comm& o) noexcept {
    swap_state(o);
    std::swap(comm_, o.comm_);
    std::swap(stream_, o.stream_);
    std::swap(own_stream_, o.own_stream_);
    std::swap(scratch_, o.scratch_);
    std::swap(device_, o.device_);
    std::swap(synchronous_, o.synchronous_);
  }

  std::string where_detail() const { return "device " + std::to_string(device_); }

  void set_device(const char* what) const {
    cuda_check(cudaSetDevice(device_), "cudaSetDevice", where(what));
  }

  void adopt_stream(cudaStream_t s) {
    if (s != nullptr) {
      stream_ = s;
      return;
    }
    cuda_check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreateWithFlags",
                       where("init"));
    own_stream_ = true;
  }

  void finish_setup() {
    detail::nccl_check(ncclCommCount(comm_, &size_), "ncclCommCount", where("init"), comm_);
    detail::nccl_check(ncclCommUserRank(comm_, &rank_), "ncclCommUserRank", where("init"), comm_);
    cuda_check(cudaMalloc(&scratch_, sizeof(int) * size_t(size_ + 1)), "cudaMalloc", where("init"));
    cuda_check(cudaMemset(scratch_, 0, sizeof(int) * size_t(size_ + 1)), "cudaMemset", where("init"));
  }

  void enter(const char* what) {
    enter_call(what);
    set_device(what);
  }

  // Only this rank's own laws: no cross-rank description round trip on the GPU path.
  void check_own(const detail::call_meta& m) const { detail::check_rank_call(m, rank_, size_); }

  void check_p2p(const char* what, int peer, int tag) const {
    detail::check_peer(what, peer, size_);
    detail::check_tag(what, tag);
  }

  template <class T>
  void reduce(const T* in, T* out, size_t count, reduce_op op) {
    detail::nccl_check(ncclAllReduce(in, out, count, detail::nccl_type<T>(), op == reduce_op::sum ? ncclSum : ncclMax,
                                     comm_, stream_),
                       "ncclAllReduce", where("all_reduce"), comm_);
    done("all_reduce");
  }

  /// All-gathers one int per rank through the device scratch buffer.
  std::vector<int> gather_ints(int mine, const char* what) {
    cuda_check(cudaMemcpyAsync(scratch_ + 1 + rank_, &mine, sizeof(int), cudaMemcpyHostToDevice, stream_),
                       "cudaMemcpyAsync", where(what));
    detail::nccl_check(ncclAllGather(scratch_ + 1 + rank_, scratch_ + 1, 1, ncclInt32, comm_, stream_),
                       "ncclAllGather", where(what), comm_);
    settle(what);
    std::vector<int> all(size_t(size_), 0);
    cuda_check(cudaMemcpyAsync(all.data(), scratch_ + 1, sizeof(int) * size_t(size_), cudaMemcpyDeviceToHost,
                                       stream_),
                       "cudaMemcpyAsync", where(what));
    wait(what);
    return all;
  }

  void done(const char* what, int peer = -1) {
    settle(what, peer);
    if (synchronous_) wait(what, peer);
  }

  /// Waits while the non-blocking communicator reports `ncclInProgress` (an enqueue or init in flight).
  void settle(const char* what, int peer = -1) {
    const auto dl = clock::now() + timeout_;
    for (;;) {
      ncclResult_t st = ncclSuccess;
      detail::nccl_check(ncclCommGetAsyncError(comm_, &st), "ncclCommGetAsyncError", where(what));
      if (st == ncclSuccess) return;
      if (st != ncclInProgress) fail(st, what);
      if (clock::now() > dl) timed_out(what, peer);
      std::this_thread::yield();
    }
  }

  void wait(const char* what, int peer = -1) {
    const auto dl = clock::now() + timeout_;
    for (;;) {
      const cudaError_t q = cudaStreamQuery(stream_);
      if (q == cudaSuccess) return;
      if (q != cudaErrorNotReady) cuda_check(q, "cudaStreamQuery", where(what));
      ncclResult_t st = ncclSuccess;
      detail::nccl_check(ncclCommGetAsyncError(comm_, &st), "ncclCommGetAsyncError", where(what));
      if (st != ncclSuccess && st != ncclInProgress) fail(st, what);
      if (clock::now() > dl) timed_out(what, peer);
      std::this_thread::yield();
    }
  }

  [[noreturn]] void fail(ncclResult_t st, const char* what) {
    std::string msg = where(what) + ": asynchronous NCCL error: " + ncclGetErrorString(st);
    if (const char* last = ncclGetLastError(comm_); last != nullptr && *last != '\0') msg += std::string(" (") + last + ")";
    abort_reason_ = msg;
    abort();
    throw error(std::error_code(int(st), nccl_category()), msg + "; the communicator is aborted");
  }

  [[noreturn]] void timed_out(const char* what, int peer) {
    const std::string msg = timed_out_text(what, peer);
    abort();
    throw error(errc::timeout, msg + "; the communicator is aborted (ncclCommAbort)");
  }

  ncclComm_t comm_ = nullptr;
  cudaStream_t stream_ = nullptr;
  bool own_stream_ = false;
  int* scratch_ = nullptr;  // [0]: barrier word, [1, size]: gather_ints
  int device_ = 0;
  bool synchronous_ = true;
};

static_assert(communicator<nccl_comm>);
static_assert(!host_communicator<nccl_comm>);

}  // namespace dcp

#endif  // DCP_HAS_NCCL()
