// nccl_comm on the GPUs of this machine, one local rank (thread) per device. Skipped with a reason
// when there is no device. The communicator conformance suite runs through a staging adapter that
// copies host spans to device buffers and back.
#include <dcp_test/support.hpp>
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include <dcp/comm/local.hpp>
#include <dcp/model/transformer.hpp>
#include <dcp/nccl.hpp>
#include <dcp/scheduler.hpp>

#include "../comm/communicator_conformance.hpp"

namespace {

using namespace std::chrono_literals;

int device_count(std::string& why) {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    why = std::string("no usable CUDA device: ") + cudaGetErrorString(e);
    return 0;
  }
  if (n == 0) why = "no CUDA device on this machine";
  return n;
}

#define DCP_REQUIRE_GPUS(min)                                                                  \
  std::string why_;                                                                            \
  const int gpus = device_count(why_);                                                         \
  if (gpus == 0) {                                                                             \
    GTEST_SKIP() << why_;                                                                      \
  }                                                                                            \
  if (gpus < (min)) {                                                                          \
    GTEST_SKIP() << "needs " << (min) << " GPUs, this machine has " << gpus;                   \
  }                                                                                            \
  static_assert(true)

// A host-memory view of an nccl_comm: every call stages its spans through device buffers.
class staged {
 public:
  using communicator_concept = dcp::communicator_tag;
  static constexpr bool host_memory = true;

  staged() = default;
  explicit staged(dcp::nccl_comm c) : c_(std::move(c)) {}

  bool valid() const noexcept { return c_.valid(); }
  int rank() const noexcept { return c_.rank(); }
  int size() const noexcept { return c_.size(); }
  std::chrono::milliseconds timeout() const noexcept { return c_.timeout(); }
  void set_timeout(std::chrono::milliseconds t) { c_.set_timeout(t); }
  void abort() noexcept { c_.abort(); }
  bool aborted() const noexcept { return c_.aborted(); }
  void barrier() { c_.barrier(); }
  staged split(int color, int key) { return staged(c_.split(color, key)); }

  template <class T>
  void all_to_all(std::span<const T> s, std::span<T> r) {
    dev<T> ds(s), dr(r.size());
    c_.all_to_all(ds.cspan(), dr.span());
    dr.to(r);
  }
  template <class T>
  void all_to_all_v(std::span<const T> s, std::span<const std::size_t> sc, std::span<T> r,
                    std::span<const std::size_t> rc) {
    dev<T> ds(s), dr(r.size());
    c_.all_to_all_v(ds.cspan(), sc, dr.span(), rc);
    dr.to(r);
  }
  template <class T>
  void all_gather(std::span<const T> s, std::span<T> r) {
    dev<T> ds(s), dr(r.size());
    c_.all_gather(ds.cspan(), dr.span());
    dr.to(r);
  }
  template <class T>
  void all_reduce(std::span<const T> s, std::span<T> r, dcp::reduce_op op) {
    dev<T> ds(s), dr(r.size());
    c_.all_reduce(ds.cspan(), dr.span(), op);
    dr.to(r);
  }
  template <class T>
  void all_reduce(std::span<T> d, dcp::reduce_op op) {
    dev<T> dd{std::span<const T>(d)};
    c_.all_reduce(dd.span(), op);
    dd.to(d);
  }
  template <class T>
  void broadcast(std::span<T> d, int root) {
    dev<T> dd{std::span<const T>(d)};
    c_.broadcast(dd.span(), root);
    dd.to(d);
  }
  template <class T>
  void send(std::span<const T> d, int peer, int tag) {
    dev<T> dd(d);
    c_.send(dd.cspan(), peer, tag);
  }
  template <class T>
  void recv(std::span<T> d, int peer, int tag) {
    dev<T> dd(d.size());
    c_.recv(dd.span(), peer, tag);
    dd.to(d);
  }

  dcp::nccl_comm& native() { return c_; }

 private:
  template <class T>
  struct dev {
    T* p = nullptr;
    std::size_t n = 0;
    explicit dev(std::size_t count) : n(count) {
      if (n) {
        EXPECT_EQ(cudaMalloc(&p, n * sizeof(T)), cudaSuccess);
      }
    }
    explicit dev(std::span<const T> h) : dev(h.size()) {
      if (n) {
        EXPECT_EQ(cudaMemcpy(p, h.data(), n * sizeof(T), cudaMemcpyHostToDevice), cudaSuccess);
      }
    }
    ~dev() {
      if (p) cudaFree(p);
    }
    void to(std::span<T> h) const {
      if (n) {
        EXPECT_EQ(cudaMemcpy(h.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost), cudaSuccess);
      }
    }
    std::span<T> span() const { return {p, n}; }
    std::span<const T> cspan() const { return {p, n}; }
  };
  dcp::nccl_comm c_;
};

static_assert(dcp::host_communicator<staged>);

TEST(NcclComm, ConformanceOnEveryDevice) {
  DCP_REQUIRE_GPUS(1);
  dcp::local_world::run(
      gpus,
      [](dcp::local_comm& boot) {
        staged c(dcp::nccl_comm::init(boot, boot.rank(), nullptr, 30s));
        EXPECT_EQ(c.size(), boot.size());
        EXPECT_EQ(c.rank(), boot.rank());
        dcp_test::check_all_to_all(c, 1);
        dcp_test::check_all_to_all_v(c, 2);
        dcp_test::check_all_gather(c, 3);
        dcp_test::check_all_reduce(c, 4);
        dcp_test::check_broadcast(c, 5);
        dcp_test::check_send_recv(c, 6);
        for (unsigned s = 0; s < 3; ++s) dcp_test::check_split(c, 7 + s);
        c.barrier();
      },
      {.timeout = 60s});
}

TEST(NcclComm, BadInputAndUseAfterAbort) {
  DCP_REQUIRE_GPUS(1);
  dcp::local_world::run(
      gpus,
      [](dcp::local_comm& boot) {
        auto c = dcp::nccl_comm::init(boot, boot.rank(), nullptr, 30s);
        float* d = nullptr;
        ASSERT_EQ(cudaMalloc(&d, 64 * sizeof(float)), cudaSuccess);
        EXPECT_THROW(c.all_to_all(std::span<const float>(d, 8 * c.size()), std::span<float>(d, 8 * c.size() + 1)),
                     dcp::error);
        EXPECT_THROW(c.broadcast(std::span<float>(d, 4), c.size()), dcp::error);
        EXPECT_DCP_ERROR((void)c.split(c.rank() == 0 ? c.size() : 0, 0), dcp::errc::invalid_argument, "out of range");
        c.barrier();
        c.abort();
        EXPECT_TRUE(c.aborted());
        EXPECT_DCP_ERROR(c.all_reduce(std::span<float>(d, 4), dcp::reduce_op::sum), dcp::errc::aborted);
        cudaFree(d);
      },
      {.timeout = 60s});
}

TEST(NcclComm, WithheldRankTimesOutAndAborts) {
  DCP_REQUIRE_GPUS(2);
  dcp::local_world::run(
      gpus,
      [](dcp::local_comm& boot) {
        auto c = dcp::nccl_comm::init(boot, boot.rank(), nullptr, 30s);
        c.set_timeout(2s);
        float* d = nullptr;
        ASSERT_EQ(cudaMalloc(&d, 16 * sizeof(float)), cudaSuccess);
        boot.barrier();
        if (c.rank() != c.size() - 1) {
          const auto t0 = std::chrono::steady_clock::now();
          EXPECT_DCP_ERROR(c.all_reduce(std::span<float>(d, 16), dcp::reduce_op::sum), dcp::errc::timeout)
              << "all_reduce returned without the last rank";
          EXPECT_LT(std::chrono::steady_clock::now() - t0, 20s);
          EXPECT_TRUE(c.aborted());
        }
        boot.barrier();
        c.abort();
        cudaFree(d);
      },
      {.timeout = 60s, .abort_on_error = false});
}

// Online calibration on an NCCL world: observations are exchanged over the host communicator the
// world was bootstrapped from (`plan(batch, host)`); `plan(batch)` alone is errc::unsupported.
// Every step is reported 25% slower than modelled, so the refitted plan of the same batch is slower.
TEST(NcclComm, CalibratedSchedulerExchangesOverTheHostCommunicator) {
  DCP_REQUIRE_GPUS(1);
  dcp::local_world::run(
      gpus,
      [&](dcp::local_comm& boot) {
        auto world = dcp::nccl_comm::init(boot, boot.rank(), nullptr, 30s);
        dcp::scheduler_options o;
        o.calibration.enabled = true;
        dcp::scheduler<dcp::transformer_spec, dcp::nccl_comm> sched(dcp::models::cogvideox_5b(), world, o);
        dcp::dataset batch;
        for (int i = 0; i < 8 * gpus; ++i) batch.push_back(dcp::make_sequence(i, std::int64_t{2048} << (i % 4)));
        EXPECT_DCP_ERROR((void)sched.plan(batch), dcp::errc::unsupported, "plan(batch, host)");
        std::vector<double> makespans;
        for (int it = 0; it < 3; ++it) {
          const auto p = sched.plan(batch, boot);
          sched.verify(p, boot);
          makespans.push_back(p.makespan_s);
          for (const auto& s : sched.steps_for(p))
            sched.observe(s, 1.25 * s.time_s, p.steps[s.index].memory_bytes);
        }
        const auto q = sched.plan(batch, boot);
        sched.verify(q, boot);
        EXPECT_GT(sched.calibration()->report().time_points, 0u);
        EXPECT_GT(q.makespan_s, 1.1 * makespans.front()) << "the refit did not learn the slower clock";
      },
      {.timeout = 60s});
}

TEST(NcclComm, BootstrapThroughAFile) {
  DCP_REQUIRE_GPUS(1);
  const auto path = std::filesystem::temp_directory_path() / ("dcp_nccl_id_" + std::to_string(::getpid()));
  std::filesystem::remove(path);
  dcp::local_world::run(gpus, [&](dcp::local_comm& boot) {
    auto c = dcp::nccl_comm::init_from_file(path, boot.size(), boot.rank(), boot.rank(), nullptr, 30s);
    EXPECT_EQ(c.size(), boot.size());
    c.barrier();
  });
  std::filesystem::remove(path);
}

}  // namespace
