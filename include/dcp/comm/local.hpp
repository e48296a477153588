#pragma once
/// \file
/// `local_comm`: N ranks as threads of one process. Data really moves through shared memory:
/// after every rank of a collective has posted its buffers, each rank copies what it needs straight
/// from its peers' send buffers, then all ranks meet again so no buffer is released while a peer
/// still reads it. Used by tests, the simulator and single-process runs.
///
/// Timeouts: a rank that waits longer than `timeout()` for its peers throws `dcp::error`
/// (`errc::timeout`) naming the operation and the ranks that never arrived, and aborts the
/// communicator, so every other rank (including the late one) gets `errc::aborted` instead of
/// waiting for its own deadline. Nothing ever blocks without a deadline.
///
/// \code
/// dcp::local_world::run(4, [](dcp::local_comm& c) {
///   std::vector<int> mine{c.rank()}, all(c.size());
///   c.all_gather(std::span<const int>(mine), std::span<int>(all));
/// });
/// \endcode

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <deque>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <numeric>
#include <span>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include <dcp/comm/comm_concepts.hpp>
#include <dcp/comm/detail/backend_checks.hpp>
#include <dcp/comm/detail/collective_check.hpp>
#include <dcp/error.hpp>

namespace dcp {

class local_comm;

namespace detail {
/// What one rank contributes to a collective: its call and its send buffer.
struct local_post {
  call_meta meta;
  const std::byte* send = nullptr;
};
}  // namespace detail

/// Shared state of one local communicator (the world, or one group of a split). Private to
/// `local_comm`; users create hubs only through `local_hub::make` or `local_world`.
class local_hub {
 public:
  explicit local_hub(int size) : size_(size), present_(size_t(size), 0), posts_(size_t(size)) {
    check(size > 0, errc::invalid_argument,
          [&] { return "local_hub: size = " + std::to_string(size) + " must be positive"; });
  }
  static std::shared_ptr<local_hub> make(int size) { return std::make_shared<local_hub>(size); }

  int size() const noexcept { return size_; }

  /// Aborts this hub and every group split from it, waking all waiters. Used by `local_world` when a
  /// rank fails, so its peers stop at once instead of at their deadlines.
  void abort_all(const std::string& reason) noexcept {
    std::vector<std::shared_ptr<local_hub>> kids;
    try {
      std::lock_guard lk(m_);
      abort_locked(reason);
      for (auto& w : children_all_)
        if (auto k = w.lock()) kids.push_back(std::move(k));
    } catch (...) {
      return;
    }
    for (auto& k : kids) k->abort_all(reason);
  }

 private:
  friend class local_comm;

  void abort_locked(const std::string& reason) {
    if (!aborted_) {
      aborted_ = true;
      abort_reason_ = reason;
    }
    cv_.notify_all();
  }

  int size_;
  std::mutex m_;
  std::condition_variable cv_;
  std::uint64_t generation_ = 0;
  int arrived_ = 0;
  std::vector<char> present_;
  std::vector<detail::local_post> posts_;     // being filled for the current generation
  std::vector<detail::local_post> snapshot_;  // the completed generation, read after the rendezvous
  std::vector<std::vector<std::size_t>> counts_store_;  // the snapshot's count arrays (all_to_all_v)
  std::vector<std::shared_ptr<local_hub>> split_result_;  // by old rank, for the completed split
  std::vector<std::weak_ptr<local_hub>> children_all_;
  bool aborted_ = false;
  std::string abort_reason_;
  // Point to point: eager, buffered messages keyed by (source, destination, tag).
  std::map<std::tuple<int, int, int>, std::deque<std::vector<std::byte>>> mail_;
};

/// One rank's handle on a `local_hub`. Use it from one thread at a time (its rank's thread).
class local_comm {
 public:
  using communicator_concept = communicator_tag;
  static constexpr bool host_memory = true;

  /// The null communicator (what `split(no_color, key)` returns).
  local_comm() = default;
  local_comm(std::shared_ptr<local_hub> hub, int rank, std::chrono::milliseconds timeout = default_timeout)
      : hub_(std::move(hub)), rank_(rank), timeout_(timeout) {
    check(hub_ != nullptr, errc::invalid_argument, [] { return std::string("local_comm: null hub"); });
    check(rank >= 0 && rank < hub_->size(), errc::invalid_argument, [&] {
      return "local_comm: rank " + std::to_string(rank) + " out of range [0, " + std::to_string(hub_->size()) + ")";
    });
  }

  bool valid() const noexcept { return hub_ != nullptr; }
  int rank() const noexcept { return hub_ ? rank_ : -1; }
  int size() const noexcept { return hub_ ? hub_->size() : 0; }
  std::chrono::milliseconds timeout() const noexcept { return timeout_; }
  void set_timeout(std::chrono::milliseconds t) {
    detail::check_timeout("local_comm", t);
    timeout_ = t;
  }
  /// The shared state (tests and `local_world` use it).
  const std::shared_ptr<local_hub>& hub() const noexcept { return hub_; }

  /// Aborts the communicator for every rank: their pending and later calls throw `errc::aborted`.
  void abort() noexcept {
    if (!hub_) return;
    try {
      std::lock_guard lk(hub_->m_);
      hub_->abort_locked("aborted by rank " + std::to_string(rank_));
    } catch (...) {
    }
  }
  bool aborted() const noexcept {
    if (!hub_) return false;
    std::lock_guard lk(hub_->m_);
    return hub_->aborted_;
  }

  // ---- collectives ------------------------------------------------------------------------------

  void barrier() {
    const auto dl = deadline();
    arrive(post(detail::meta_of<std::byte>(detail::coll_kind::barrier, 0, 0)), dl);
    check_all();
  }

  /// Collective. See `communicator`. Children inherit the timeout.
  local_comm split(int color, int key) {
    arrive(post(detail::meta_of_split(color, key)), deadline(), [this] { complete_split(); });
    check_all();
    std::shared_ptr<local_hub> child;
    {
      std::lock_guard lk(hub_->m_);
      child = hub_->split_result_[size_t(rank_)];
    }
    if (color < 0) return local_comm();
    return local_comm(std::move(child), child_rank(color, key), timeout_);
  }

  template <transferable T>
  void all_to_all(std::span<const T> send, std::span<T> recv) {
    const auto dl = deadline();
    arrive(post(detail::meta_of<T>(detail::coll_kind::all_to_all, send.size(), recv.size()), send.data()), dl);
    const auto& s = check_all();
    const int n = size();
    const size_t chunk = send.size() / size_t(n) * sizeof(T);
    auto* out = reinterpret_cast<std::byte*>(recv.data());
    for (int i = 0; i < n; ++i) copy_bytes(out + size_t(i) * chunk, s[i].send + size_t(rank_) * chunk, chunk);
    arrive_done("all_to_all", dl);
  }

  template <transferable T>
  void all_to_all_v(std::span<const T> send, std::span<const std::size_t> send_counts, std::span<T> recv,
                    std::span<const std::size_t> recv_counts) {
    const auto dl = deadline();
    arrive(post(detail::meta_of_counts<T>(send.size(), send_counts, recv.size(), recv_counts), send.data()), dl);
    const auto& s = check_all();
    auto* out = reinterpret_cast<std::byte*>(recv.data());
    for (int i = 0; i < size(); ++i) {
      const auto* counts = s[i].meta.send_counts;
      const size_t off = std::accumulate(counts, counts + rank_, size_t{0}) * sizeof(T);
      const size_t len = counts[rank_] * sizeof(T);
      copy_bytes(out, s[i].send + off, len);
      out += len;
    }
    arrive_done("all_to_all_v", dl);
  }

  template <transferable T>
  void all_gather(std::span<const T> send, std::span<T> recv) {
    const auto dl = deadline();
    arrive(post(detail::meta_of<T>(detail::coll_kind::all_gather, send.size(), recv.size()), send.data()), dl);
    const auto& s = check_all();
    const size_t len = send.size() * sizeof(T);
    auto* out = reinterpret_cast<std::byte*>(recv.data());
    for (int i = 0; i < size(); ++i) copy_bytes(out + size_t(i) * len, s[i].send, len);
    arrive_done("all_gather", dl);
  }

  /// Out of place; every rank gets the same result, combined in rank order.
  template <reducible T>
  void all_reduce(std::span<const T> send, std::span<T> recv, reduce_op op) {
    const auto dl = deadline();
    arrive(post(detail::meta_of_reduce<T>(send.size(), recv.size(), op), send.data()), dl);
    const auto& s = check_all();
    for (size_t k = 0; k < recv.size(); ++k) {
      T acc = element<T>(s[0].send, k);
      for (int i = 1; i < size(); ++i) {
        const T v = element<T>(s[i].send, k);
        acc = op == reduce_op::sum ? T(acc + v) : std::max(acc, v);
      }
      recv[k] = acc;
    }
    arrive_done("all_reduce", dl);
  }

  /// In place: `data` holds this rank's input and receives the result.
  template <reducible T>
  void all_reduce(std::span<T> data, reduce_op op) {
    std::vector<T> in(data.begin(), data.end());  // peers read the input while `data` is overwritten
    all_reduce(std::span<const T>(in), data, op);
  }

  template <transferable T>
  void broadcast(std::span<T> data, int root) {
    const auto dl = deadline();
    arrive(post(detail::meta_of_broadcast<T>(data.size(), root), data.data()), dl);
    const auto& s = check_all();
    if (rank_ != root) copy_bytes(reinterpret_cast<std::byte*>(data.data()), s[root].send, data.size_bytes());
    arrive_done("broadcast", dl);
  }

  // ---- point to point ---------------------------------------------------------------------------

  /// Eager and buffered: returns once the message is queued, so exchanges never deadlock.
  template <transferable T>
  void send(std::span<const T> data, int peer, int tag) {
    check_p2p("send", peer, tag);
    std::vector<std::byte> msg(data.size_bytes());
    copy_bytes(msg.data(), reinterpret_cast<const std::byte*>(data.data()), msg.size());
    std::lock_guard lk(hub_->m_);
    throw_if_aborted_locked("send");
    hub_->mail_[{rank_, peer, tag}].push_back(std::move(msg));
    hub_->cv_.notify_all();
  }

  /// Waits for the message of `peer` with `tag`; its size must be exactly `data.size_bytes()`.
  template <transferable T>
  void recv(std::span<T> data, int peer, int tag) {
    check_p2p("recv", peer, tag);
    const auto dl = deadline();
    std::unique_lock lk(hub_->m_);
    const std::tuple<int, int, int> key{peer, rank_, tag};
    auto ready = [&] {
      auto it = hub_->mail_.find(key);
      return hub_->aborted_ || (it != hub_->mail_.end() && !it->second.empty());
    };
    if (!hub_->cv_.wait_until(lk, dl, ready)) {
      const std::string what = "local_comm: recv on rank " + std::to_string(rank_) + " timed out after " +
                               detail::seconds_string(timeout_) + " waiting for rank " + std::to_string(peer) +
                               " (tag " + std::to_string(tag) + "); the communicator is aborted";
      hub_->abort_locked(what);
      throw error(errc::timeout, what);
    }
    throw_if_aborted_locked("recv");
    auto& q = hub_->mail_[key];
    std::vector<std::byte> msg = std::move(q.front());
    q.pop_front();
    check(msg.size() == data.size_bytes(), errc::invalid_argument, [&] {
      return "recv: rank " + std::to_string(rank_) + " expects " + std::to_string(data.size_bytes()) +
             " bytes from rank " + std::to_string(peer) + " (tag " + std::to_string(tag) + ") but the message has " +
             std::to_string(msg.size()) + " bytes; send and recv sizes must match";
    });
    copy_bytes(reinterpret_cast<std::byte*>(data.data()), msg.data(), msg.size());
  }

 private:
  using clock = std::chrono::steady_clock;

  clock::time_point deadline() const { return clock::now() + timeout_; }

  void require_valid(const char* what) const { detail::check_not_null(hub_ != nullptr, "local_comm", what); }

  void throw_if_aborted_locked(const char* what) const {
    if (hub_->aborted_)
      throw error(errc::aborted, std::string("local_comm: ") + what + " on rank " + std::to_string(rank_) +
                                     " of a communicator that was aborted (" + hub_->abort_reason_ +
                                     "); create a new communicator");
  }

  void check_p2p(const char* what, int peer, int tag) const {
    require_valid(what);
    detail::check_peer(what, peer, size());
    detail::check_tag(what, tag);
  }

  template <class T = std::byte>
  static detail::local_post post(const detail::call_meta& m, const T* send = nullptr) noexcept {
    return {m, reinterpret_cast<const std::byte*>(send)};
  }

  template <class T>
  static T element(const std::byte* base, size_t k) noexcept {
    T v;
    std::memcpy(&v, base + k * sizeof(T), sizeof(T));
    return v;
  }

  static void copy_bytes(std::byte* dst, const std::byte* src, size_t n) noexcept {
    if (n != 0) std::memcpy(dst, src, n);
  }

  /// Meets every rank of the hub: posts `p`, waits until all have posted (or the deadline), and lets
  /// the last arrival run `complete` under the lock before anyone proceeds.
  void arrive(const detail::local_post& p, clock::time_point dl, const std::function<void()>& complete = {}) {
    const char* what = detail::to_string(p.meta.kind);
    require_valid(what);
    std::unique_lock lk(hub_->m_);
    throw_if_aborted_locked(what);
    hub_->posts_[size_t(rank_)] = p;
    wait_all(lk, what, dl, [&] {
      hub_->snapshot_ = hub_->posts_;
      // Count arrays are copied into the hub: a rank that fails the checks may return (and free
      // them) while its peers still read them.
      auto& store = hub_->counts_store_;
      store.resize(hub_->snapshot_.size());
      for (size_t r = 0; r < store.size(); ++r) {
        auto& m = hub_->snapshot_[r].meta;
        store[r].assign(m.send_counts, m.send_counts + (m.send_counts ? m.send_counts_size : 0));
        store[r].insert(store[r].end(), m.recv_counts, m.recv_counts + (m.recv_counts ? m.recv_counts_size : 0));
        if (m.send_counts) m.send_counts = store[r].data();
        if (m.recv_counts) m.recv_counts = store[r].data() + m.send_counts_size;
      }
      if (complete) complete();
    });
  }

  /// Second meeting of a data collective: nobody returns (and frees its send buffer) before every
  /// rank has finished copying from it.
  void arrive_done(const char* what, clock::time_point dl) {
    std::unique_lock lk(hub_->m_);
    throw_if_aborted_locked(what);
    wait_all(lk, what, dl, [] {});
  }

  template <class Complete>
  void wait_all(std::unique_lock<std::mutex>& lk, const char* what, clock::time_point dl, Complete&& complete) {
    local_hub& h = *hub_;
    h.present_[size_t(rank_)] = 1;
    const auto gen = h.generation_;
    if (++h.arrived_ == h.size_) {
      complete();
      h.arrived_ = 0;
      std::fill(h.present_.begin(), h.present_.end(), 0);
      ++h.generation_;
      h.cv_.notify_all();
      return;
    }
    h.cv_.wait_until(lk, dl, [&] { return h.generation_ != gen || h.aborted_; });
    if (h.generation_ != gen) return;
    if (h.aborted_) throw_if_aborted_locked(what);
    std::string missing;
    int count = 0;
    for (int r = 0; r < h.size_; ++r)
      if (!h.present_[size_t(r)]) {
        missing += (count++ ? ", " : "") + std::to_string(r);
      }
    const std::string msg = "local_comm: " + std::string(what) + " on rank " + std::to_string(rank_) +
                            " timed out after " + detail::seconds_string(timeout_) + " waiting for rank" +
                            (count > 1 ? "s " : " ") + missing + " of " + std::to_string(h.size_) +
                            "; the communicator is aborted";
    h.abort_locked(msg);
    throw error(errc::timeout, msg);
  }

  /// Runs the cross-rank checks on the completed rendezvous; the same on every rank.
  const std::vector<detail::local_post>& check_all() const {
    const auto& s = hub_->snapshot_;
    std::vector<detail::call_meta> m(s.size());
    for (size_t r = 0; r < s.size(); ++r) m[r] = s[r].meta;
    detail::check_call(m);
    return s;
  }

  /// Under the lock, by the last rank to arrive: one hub per valid color.
  void complete_split() {
    local_hub& h = *hub_;
    const auto& s = h.snapshot_;
    h.split_result_.assign(size_t(h.size_), nullptr);
    for (const auto& p : s)
      if (p.meta.kind != detail::coll_kind::split || p.meta.root >= h.size_) return;  // every rank reports it
    std::map<int, std::shared_ptr<local_hub>> by_color;
    for (int r = 0; r < h.size_; ++r) {
      const int c = s[size_t(r)].meta.root;
      if (c < 0) continue;
      auto& hub = by_color[c];
      if (!hub) {
        int members = 0;
        for (const auto& q : s) members += q.meta.root == c;
        hub = std::make_shared<local_hub>(members);
        h.children_all_.push_back(hub);
      }
      h.split_result_[size_t(r)] = hub;
    }
    std::erase_if(h.children_all_, [](const std::weak_ptr<local_hub>& w) { return w.expired(); });
  }

  /// Rank in the new group: position by (key, old rank) among the ranks of `color`.
  int child_rank(int color, int key) const {
    const auto& s = hub_->snapshot_;
    int r = 0;
    for (int q = 0; q < size(); ++q)
      if (s[q].meta.root == color && std::pair(s[q].meta.key, q) < std::pair(key, rank_)) ++r;
    return r;
  }

  std::shared_ptr<local_hub> hub_;
  int rank_ = -1;
  std::chrono::milliseconds timeout_ = default_timeout;
};

static_assert(communicator<local_comm>);
static_assert(host_communicator<local_comm>);

/// Options of `local_world::run`.
struct local_world_options {
  std::chrono::milliseconds timeout = default_timeout;  ///< of every rank's communicator
  bool abort_on_error = true;  ///< a rank that throws aborts the world so its peers stop at once
};

/// Runs a function on N ranks, one thread each, sharing one hub.
struct local_world {
  /// Calls `fn(local_comm&)` on ranks 0..n-1 concurrently, joins every thread, and rethrows the first
  /// exception a rank threw (by time). With `abort_on_error`, that rank's failure aborts the world
  /// and every group split from it.
  template <class Fn>
  static void run(int n, Fn&& fn, local_world_options opt = {}) {
    check(n > 0, errc::invalid_argument,
          [&] { return "local_world::run: n = " + std::to_string(n) + " ranks; it must be positive"; });
    auto hub = local_hub::make(n);
    std::mutex m;
    std::exception_ptr first;
    auto body = [&](int r) {
      try {
        local_comm c(hub, r, opt.timeout);
        fn(c);
      } catch (...) {
        {
          std::lock_guard lk(m);
          if (!first) first = std::current_exception();
        }
        if (opt.abort_on_error) hub->abort_all("rank " + std::to_string(r) + " failed");
      }
    };
    std::vector<std::jthread> threads;
    threads.reserve(size_t(n));
    for (int r = 1; r < n; ++r) threads.emplace_back(body, r);
    body(0);
    threads.clear();  // joins
    if (first) std::rethrow_exception(first);
  }
};

}  // namespace dcp
