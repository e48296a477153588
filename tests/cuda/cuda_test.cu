// dcp's CUDA path on a real GPU (nvcc, label `gpu`): the device assembly against the host
// reference, the Ulysses and DSP re-layouts through NCCL on every visible GPU (one thread each),
// CUDA-event timing and peak memory, and the bad-input errors. Every test that needs a device
// skips with the reason when there is none; the error-message tests run everywhere.
#include <cstdint>
#include <random>
#include <span>
#include <string>
#include <vector>

#include <cuda_runtime.h>
#include <dcp_test/support.hpp>
#include <gtest/gtest.h>

#include <dcp/cuda.cuh>

#if DCP_HAS_NCCL() && __has_include(<dcp/comm/nccl.hpp>)
#include <dcp/comm/local.hpp>
#include <dcp/comm/nccl.hpp>
#define DCP_TEST_NCCL() 1
#else
#define DCP_TEST_NCCL() 0
#endif

#include "../thrust/host_reference.hpp"

static_assert(DCP_THRUST_CUDA(), "tests/cuda must be built by nvcc on Thrust's CUDA device system");

namespace {

using namespace dcp_test;

#define DCP_REQUIRE_GPU()                                                 \
  do {                                                                    \
    if (dcp::cuda_device_count() == 0) GTEST_SKIP() << dcp::cuda_no_device_reason(); \
  } while (0)

template <class T>
std::vector<T> host(const thrust::device_vector<T>& v) {
  std::vector<T> h(v.size());
  thrust::copy(v.begin(), v.end(), h.begin());
  return h;
}

thrust::device_vector<double> packed_buffer(i64 rows, i64 row) {
  std::vector<double> h(std::size_t(rows * row));
  for (std::size_t i = 0; i < h.size(); ++i) h[i] = double(i + 1);
  return thrust::device_vector<double>(h.begin(), h.end());
}

__global__ void spin(long long cycles) {
  const long long t0 = clock64();
  while (clock64() - t0 < cycles) {
  }
}

TEST(CudaRuntime, CheckNamesTheCallAndTheCudaError) {
  EXPECT_DCP_ERROR(dcp::cuda_check(cudaErrorInvalidValue, "cudaMemcpy", "copy of the packed batch"),
                   std::error_code(int(cudaErrorInvalidValue), dcp::cuda_category()),
                   "copy of the packed batch: cudaMemcpy failed: cudaErrorInvalidValue");
  EXPECT_FALSE(dcp::cuda_try(cudaSuccess));
  EXPECT_EQ(dcp::cuda_try(cudaErrorMemoryAllocation).value(), int(cudaErrorMemoryAllocation));
}

TEST(CudaRuntime, NoDeviceIsACountOfZeroAndAClearError) {
  if (dcp::cuda_device_count() > 0) {
    EXPECT_EQ(dcp::cuda_no_device_reason(), "");
    EXPECT_NO_THROW(dcp::require_cuda_device(0));
    EXPECT_THROW(dcp::require_cuda_device(dcp::cuda_device_count()), dcp::error);
    return;
  }
  EXPECT_NE(dcp::cuda_no_device_reason().find("no GPU"), std::string::npos);
  EXPECT_DCP_ERROR(dcp::require_cuda_device(), dcp::errc::unsupported, "no GPU");
}

TEST(CudaRuntime, TooLittleDeviceMemoryIsAClearError) {
  DCP_REQUIRE_GPU();
  dcp::require_cuda_device(0);
  const auto info = dcp::cuda_memory_info();
  EXPECT_GT(info.total_bytes, 0u);
  EXPECT_NO_THROW(dcp::require_device_memory(1, "a tiny step"));
  EXPECT_DCP_ERROR(dcp::require_device_memory(info.total_bytes * 2, "micro-step 3 (sp = 1, 0 checkpointed blocks)"),
                   dcp::errc::infeasible, "micro-step 3");
}

TEST(CudaMicroBatch, MatchesTheHostReferenceOnRandomShapes) {
  DCP_REQUIRE_GPU();
  dcp::require_cuda_device(0);
  std::mt19937_64 rng(11);
  const int sps[] = {1, 2, 3, 4, 8};
  for (int trial = 0; trial < 60; ++trial) {
    const int sp = sps[trial % 5];
    const auto axis = dcp::shard_axis(trial % 3);
    const dcp::micro_batch_options opt{axis, axis == dcp::shard_axis::tokens ? i64(trial % 3) : 0};
    auto s = axis == dcp::shard_axis::tokens ? random_1d(rng, 10, 500) : random_2d(rng, 6, 9, 40);
    const i64 row = 1 + trial % 4;
    i64 total = 0;
    for (const auto& q : s) total += q.tokens;
    const auto packed = packed_buffer(total, row);
    for (int r = 0; r < sp; ++r) {
      auto mb = dcp::make_micro_batch(s, sp, r, opt);
      const auto idx = ref_local_index(s, sp, r, opt);
      ASSERT_EQ(host(mb.local_index), idx) << "axis " << axis << " rank " << r << " of " << sp;
      std::vector<std::int32_t> cu{0};
      for (int j : ref_order(s)) cu.push_back(cu.back() + std::int32_t(s[std::size_t(j)].tokens));
      ASSERT_EQ(host(mb.cu_seqlens), cu);
      const auto local = host(dcp::gather_local_rows(mb, packed, row));
      for (std::size_t k = 0; k < idx.size(); ++k)
        for (i64 e = 0; e < row; ++e)
          ASSERT_EQ(local[std::size_t(i64(k) * row + e)], idx[k] < 0 ? 0.0 : double(idx[k] * row + e + 1));
    }
  }
}

#if DCP_TEST_NCCL()
// One thread per visible GPU, an NCCL communicator over them, the re-layouts on device buffers.
TEST(CudaRelayout, UlyssesAndDspThroughNcclMatchTheReferenceAndRoundTrip) {
  DCP_REQUIRE_GPU();
  const int gpus = std::min(dcp::cuda_device_count(), 8);
  std::mt19937_64 rng(12);
  for (int trial = 0; trial < 6; ++trial) {
    const i64 heads = 2 * gpus, head_dim = 8, width = heads * head_dim, channels = 16;
    const auto s1 = random_1d(rng, 6, 3000);
    const auto s2 = random_2d(rng, 4, 17, 90);
    dcp::local_world::run(gpus, [&](dcp::local_comm& boot) {
      dcp::cuda_check(cudaSetDevice(boot.rank()), "cudaSetDevice");
      dcp::nccl_comm comm = dcp::nccl_comm::init(boot, boot.rank());
      i64 total = 0;
      for (const auto& q : s1) total += q.tokens;
      const auto packed = packed_buffer(total, width);
      auto mb = dcp::make_micro_batch(s1, gpus, comm.rank(), {dcp::shard_axis::tokens, trial % 2 ? 4 : 0});
      const auto tokens = dcp::gather_local_rows(mb, packed, width);
      const auto to_heads = dcp::make_ulysses_relayout(mb, heads, head_dim);
      const auto heads_buf = dcp::relayout(comm, to_heads, tokens);
      const i64 hp = heads / gpus;
      const std::vector<std::int32_t> cup = host(mb.cu_seqlens_padded);
      const std::vector<i64> len = host(mb.tokens), src = host(mb.source_offsets);
      const std::vector<double> got = host(heads_buf);
      for (i64 j = 0; j < mb.sequences; ++j)
        for (i64 t = 0; t < cup[std::size_t(j + 1)] - cup[std::size_t(j)]; ++t)
          for (i64 e = 0; e < hp * head_dim; ++e)
            ASSERT_EQ(got[std::size_t((cup[std::size_t(j)] + t) * hp * head_dim + e)],
                      t < len[std::size_t(j)]
                          ? double((src[std::size_t(j)] + t) * width + comm.rank() * hp * head_dim + e + 1)
                          : 0.0);
      EXPECT_EQ(host(dcp::relayout(comm, dcp::inverse(to_heads), heads_buf)), host(tokens));

      i64 total2 = 0;
      for (const auto& q : s2) total2 += q.tokens;
      const auto packed2 = packed_buffer(total2, channels);
      auto ms = dcp::make_micro_batch(s2, gpus, comm.rank(), {dcp::shard_axis::spatial, 0});
      auto mf = dcp::make_micro_batch(s2, gpus, comm.rank(), {dcp::shard_axis::frames, 0});
      const auto xs = dcp::gather_local_rows(ms, packed2, channels);
      const auto xf = dcp::relayout(comm, dcp::make_dsp_relayout(ms, channels, dcp::shard_axis::spatial), xs);
      EXPECT_EQ(host(xf), host(dcp::gather_local_rows(mf, packed2, channels)));
      EXPECT_EQ(host(dcp::relayout(comm, dcp::make_dsp_relayout(mf, channels, dcp::shard_axis::frames), xf)), host(xs));
    });
  }
}
#endif

TEST(CudaProfiling, EventTimerMeasuresAKernelAndPeakMemorySeesThePool) {
  DCP_REQUIRE_GPU();
  dcp::require_cuda_device(0);
  cudaStream_t stream = nullptr;
  dcp::cuda_check(cudaStreamCreate(&stream), "cudaStreamCreate");
  constexpr std::size_t bytes = std::size_t(64) << 20;
  int calls = 0;
  const auto m = dcp::measure_cuda_step(
      [&](cudaStream_t s) {
        ++calls;
        void* p = nullptr;
        dcp::cuda_check(cudaMallocAsync(&p, bytes, s), "cudaMallocAsync");
        spin<<<1, 1, 0, s>>>(2'000'000);  // about a millisecond
        dcp::cuda_check(cudaGetLastError(), "spin<<<>>>");
        dcp::cuda_check(cudaFreeAsync(p, s), "cudaFreeAsync");
      },
      {1, 5, stream});
  EXPECT_EQ(calls, 6);
  ASSERT_EQ(m.samples.size(), 5u);
  EXPECT_GT(m.time_s, 1e-5);
  EXPECT_LT(m.time_s, 1.0);
  EXPECT_GE(m.peak_bytes, std::int64_t(bytes));
  dcp::cuda_check(cudaStreamDestroy(stream), "cudaStreamDestroy");
  EXPECT_THROW(dcp::measure_cuda_step([](cudaStream_t) {}, {0, 0, nullptr}), dcp::error);
}

}  // namespace
