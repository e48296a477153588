#pragma once
/// \file
/// Timing and peak memory of one CUDA step, for the profiler (DESIGN section 1) on GPUs: the same
/// measurement the host profiler takes with a steady clock and a counting allocator, taken here
/// with CUDA events and the device's memory pool. Available when `DCP_HAS_CTK()`.
///
/// - `cuda_event_timer`: a pair of events on a stream; `seconds()` waits for the stop event.
/// - `cuda_peak_memory`: bytes above the level at `reset()`: the high watermark of the current
///   device's default memory pool (exact for stream-ordered allocations, `cudaMallocAsync`), and
///   `cudaMemGetInfo` sampled by `sample()` (catches `cudaMalloc` too, at the sampling points).
/// - `measure_cuda_step(step, options)`: `step(stream)` enqueues one step; warm-up runs, then
///   `repeats` timed runs; returns the median seconds and the peak bytes over the timed runs.
///
/// \code
/// dcp::cuda_step_measurement m = dcp::measure_cuda_step([&](cudaStream_t s) { model.step(batch, s); });
/// profile_entry.time_s = m.time_s;  profile_entry.memory_bytes = static_memory + m.peak_bytes;
/// \endcode

#include <dcp/config.hpp>

#if DCP_HAS_CTK()

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include <dcp/cuda/runtime.hpp>
#include <dcp/error.hpp>

namespace dcp {

/// Elapsed device time between `start()` and `stop()` on one stream.
class cuda_event_timer {
 public:
  explicit cuda_event_timer(cudaStream_t stream = nullptr) : stream_(stream) {
    cuda_check(cudaEventCreate(&start_), "cudaEventCreate", "cuda_event_timer");
    if (const cudaError_t rc = cudaEventCreate(&stop_); rc != cudaSuccess) {
      (void)cudaEventDestroy(start_);
      cuda_check(rc, "cudaEventCreate", "cuda_event_timer");
    }
  }
  cuda_event_timer(const cuda_event_timer&) = delete;
  cuda_event_timer& operator=(const cuda_event_timer&) = delete;
  ~cuda_event_timer() {
    (void)cuda_try(cudaEventDestroy(start_));
    (void)cuda_try(cudaEventDestroy(stop_));
  }

  void start() { cuda_check(cudaEventRecord(start_, stream_), "cudaEventRecord", "cuda_event_timer::start"); }
  void stop() { cuda_check(cudaEventRecord(stop_, stream_), "cudaEventRecord", "cuda_event_timer::stop"); }
  /// Seconds from start to stop; waits for the stop event.
  double seconds() const {
    cuda_check(cudaEventSynchronize(stop_), "cudaEventSynchronize", "cuda_event_timer::seconds");
    float ms = 0;
    cuda_check(cudaEventElapsedTime(&ms, start_, stop_), "cudaEventElapsedTime", "cuda_event_timer::seconds");
    return double(ms) * 1e-3;
  }

 private:
  cudaStream_t stream_;
  cudaEvent_t start_ = nullptr, stop_ = nullptr;
};

/// Peak device bytes above the level at the last `reset()` (see the file comment).
class cuda_peak_memory {
 public:
  cuda_peak_memory() { reset(); }

  /// Synchronizes the device, then starts a new measurement from the bytes in use now.
  void reset() {
    cuda_check(cudaDeviceSynchronize(), "cudaDeviceSynchronize", "cuda_peak_memory::reset");
    int device = 0;
    cuda_check(cudaGetDevice(&device), "cudaGetDevice", "cuda_peak_memory::reset");
    cuda_check(cudaDeviceGetDefaultMemPool(&pool_, device), "cudaDeviceGetDefaultMemPool", "cuda_peak_memory::reset");
    std::uint64_t used = 0, zero = 0;
    cuda_check(cudaMemPoolGetAttribute(pool_, cudaMemPoolAttrUsedMemCurrent, &used), "cudaMemPoolGetAttribute",
               "cuda_peak_memory::reset");
    // The watermark can only be reset to 0, which makes it restart from the current usage.
    cuda_check(cudaMemPoolSetAttribute(pool_, cudaMemPoolAttrUsedMemHigh, &zero), "cudaMemPoolSetAttribute",
               "cuda_peak_memory::reset");
    pool_base_ = used;
    info_base_ = cuda_memory_info().used_bytes();
    info_peak_ = info_base_;
  }

  /// Records the bytes in use now (cudaMemGetInfo); call it where non-pool allocations peak.
  void sample() { info_peak_ = std::max(info_peak_, cuda_memory_info().used_bytes()); }

  /// Peak bytes above the level at `reset()`, from both sources.
  std::int64_t peak_bytes() {
    std::uint64_t high = 0;
    cuda_check(cudaMemPoolGetAttribute(pool_, cudaMemPoolAttrUsedMemHigh, &high), "cudaMemPoolGetAttribute",
               "cuda_peak_memory::peak_bytes");
    sample();
    const std::int64_t pool = std::int64_t(high) - std::int64_t(pool_base_);
    const std::int64_t info = std::int64_t(info_peak_) - std::int64_t(info_base_);
    return std::max<std::int64_t>({pool, info, 0});
  }

 private:
  cudaMemPool_t pool_ = nullptr;
  std::uint64_t pool_base_ = 0;
  std::size_t info_base_ = 0, info_peak_ = 0;
};

/// Knobs of `measure_cuda_step`.
struct cuda_measure_options {
  int warmup = 1;
  int repeats = 5;
  cudaStream_t stream = nullptr;
  friend bool operator==(const cuda_measure_options&, const cuda_measure_options&) = default;
  friend std::ostream& operator<<(std::ostream& os, const cuda_measure_options& o) {
    return os << "cuda_measure_options{warmup=" << o.warmup << ", repeats=" << o.repeats << "}";
  }
};

/// What `measure_cuda_step` measured.
struct cuda_step_measurement {
  double time_s = 0;            ///< median of the timed runs
  std::int64_t peak_bytes = 0;  ///< peak device bytes above the level before the first timed run
  std::vector<double> samples;  ///< seconds of every timed run
};

/// Times `step(stream)` with CUDA events (warm-up, then the median of `repeats` runs) and measures
/// its peak device memory. `step` enqueues its work on the stream it is given.
template <class Step>
cuda_step_measurement measure_cuda_step(Step&& step, const cuda_measure_options& options = {}) {
  check(options.warmup >= 0 && options.repeats >= 1, errc::invalid_argument, [&] {
    std::string s = "measure_cuda_step: warmup = " + std::to_string(options.warmup) + ", repeats = " +
                    std::to_string(options.repeats) + "; need warmup >= 0 and repeats >= 1";
    return s;
  });
  for (int i = 0; i < options.warmup; ++i) step(options.stream);
  cuda_check(cudaStreamSynchronize(options.stream), "cudaStreamSynchronize", "measure_cuda_step warm-up");
  cuda_peak_memory memory;
  cuda_event_timer timer(options.stream);
  cuda_step_measurement m;
  for (int i = 0; i < options.repeats; ++i) {
    timer.start();
    step(options.stream);
    timer.stop();
    m.samples.push_back(timer.seconds());
    memory.sample();
  }
  std::vector<double> sorted = m.samples;
  std::sort(sorted.begin(), sorted.end());
  const std::size_t n = sorted.size();
  m.time_s = n % 2 ? sorted[n / 2] : 0.5 * (sorted[n / 2 - 1] + sorted[n / 2]);
  m.peak_bytes = memory.peak_bytes();
  return m;
}

}  // namespace dcp

#endif  // DCP_HAS_CTK()
