#pragma once
/// \file
/// Private: the Thrust device system dcp's device code runs on, and the helpers every `.cuh` of
/// `include/dcp/cuda/` shares. Include `<dcp/cuda.cuh>` or a public header of `dcp/cuda/` instead.
///
/// The same source builds for two device systems:
///   - CUDA (nvcc, the default of Thrust under nvcc): device vectors live in GPU memory, CUB runs
///     the scans, and every algorithm runs on the caller's `thrust_stream`;
///   - CPP (any host compiler, `-DTHRUST_DEVICE_SYSTEM=THRUST_DEVICE_SYSTEM_CPP`): device vectors
///     are host memory and algorithms run sequentially; this is how CI tests the device code.
/// `DCP_THRUST_CUDA()` tells which one (function-like, so a typo fails under `-Wundef`).

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include <thrust/binary_search.h>
#include <thrust/copy.h>
#include <thrust/device_vector.h>
#include <thrust/execution_policy.h>
#include <thrust/fill.h>
#include <thrust/for_each.h>
#include <thrust/functional.h>
#include <thrust/gather.h>
#include <thrust/iterator/counting_iterator.h>
#include <thrust/iterator/transform_iterator.h>
#include <thrust/scan.h>
#include <thrust/scatter.h>
#include <thrust/sequence.h>
#include <thrust/sort.h>
#include <thrust/transform.h>

#include <dcp/error.hpp>

#if THRUST_DEVICE_SYSTEM == THRUST_DEVICE_SYSTEM_CUDA
#define DCP_THRUST_CUDA() 1
#include <cuda_runtime_api.h>
#include <cub/device/device_scan.cuh>

#include <dcp/cuda/runtime.hpp>
#else
#define DCP_THRUST_CUDA() 0
#endif

// Functors run on the device under nvcc and on the host otherwise.
#if defined(__CUDACC__)
#define DCP_HOST_DEVICE __host__ __device__
#else
#define DCP_HOST_DEVICE
#endif

namespace dcp {

#if DCP_THRUST_CUDA()
/// The stream device algorithms run on (the legacy default stream unless given).
using thrust_stream = cudaStream_t;
#else
/// No streams on the CPP device system; the parameter keeps one signature for both builds.
using thrust_stream = std::nullptr_t;
#endif

namespace detail {

#if DCP_THRUST_CUDA()
/// Execution policy on `s`. `par` (not `par_nosync`) so results read back on the host are ready.
inline auto policy(thrust_stream s) { return thrust::cuda::par.on(s); }

#else
inline auto policy(thrust_stream) { return thrust::device; }
#endif

template <class T>
T* raw(thrust::device_vector<T>& v) noexcept {
  return thrust::raw_pointer_cast(v.data());
}
template <class T>
const T* raw(const thrust::device_vector<T>& v) noexcept {
  return thrust::raw_pointer_cast(v.data());
}

/// `out[0..n]` = exclusive prefix sums of `in[0..n)`, with `out[n]` the total (n + 1 values).
/// CUB's DeviceScan on CUDA, Thrust elsewhere.
// Functors live at namespace scope: nvcc does not launch kernels templated on local types.
template <class InputIt>
struct padded_input {
  InputIt in;
  std::int64_t n;
  DCP_HOST_DEVICE std::int64_t operator()(std::int64_t i) const { return i < n ? std::int64_t(in[i]) : 0; }
};

template <class Count>
struct table_cell {
  Count count;
  std::int64_t b;
  DCP_HOST_DEVICE std::int64_t operator()(std::int64_t k) const {
    const std::int64_t i = k / (b + 1), j = k % (b + 1);
    return j == b ? 0 : count(int(i), j);
  }
};

struct table_row {
  std::int64_t b;
  DCP_HOST_DEVICE std::int64_t operator()(std::int64_t k) const { return k / (b + 1); }
};

template <class InputIt>
void exclusive_sum_with_total(InputIt in, std::int64_t n, std::int64_t* out, thrust_stream s) {
  // Scanning n + 1 values whose last is 0 yields the total in out[n].
  auto first = thrust::make_transform_iterator(thrust::counting_iterator<std::int64_t>(0), padded_input<InputIt>{in, n});
#if DCP_THRUST_CUDA()
  std::size_t bytes = 0;
  cuda_check(cub::DeviceScan::ExclusiveSum(nullptr, bytes, first, out, n + 1, s), "cub::DeviceScan::ExclusiveSum",
             "exclusive_scan");
  thrust::device_vector<unsigned char> temp(bytes);
  cuda_check(cub::DeviceScan::ExclusiveSum(raw(temp), bytes, first, out, n + 1, s), "cub::DeviceScan::ExclusiveSum",
             "exclusive_scan");
  cuda_check(cudaStreamSynchronize(s), "cudaStreamSynchronize", "exclusive_scan");
#else
  thrust::exclusive_scan(policy(s), first, first + (n + 1), out, std::int64_t(0));
#endif
}

/// Rank-major table of per-(rank, sequence) row counts turned into offsets: entry i * (b + 1) + j is
/// the first row of sequence j in rank i's buffer, entry i * (b + 1) + b the rows rank i holds.
template <class Count>
thrust::device_vector<std::int64_t> offset_table(int sp, std::int64_t b, Count count, thrust_stream s) {
  const std::int64_t n = std::int64_t(sp) * (b + 1);
  thrust::device_vector<std::int64_t> counts(static_cast<std::size_t>(n)), offsets(static_cast<std::size_t>(n));
  thrust::counting_iterator<std::int64_t> k0(0);
  thrust::transform(policy(s), k0, k0 + n, counts.begin(), table_cell<Count>{count, b});
  auto keys = thrust::make_transform_iterator(k0, table_row{b});
  thrust::exclusive_scan_by_key(policy(s), keys, keys + n, counts.begin(), offsets.begin());
  return offsets;
}

/// Host copy of a device vector.
template <class T>
std::vector<T> to_host(const thrust::device_vector<T>& v) {
  std::vector<T> h(v.size());
  thrust::copy(v.begin(), v.end(), h.begin());
  return h;
}

/// Index of the last offset <= x in the non-decreasing `off[0..n)` (n >= 1, off[0] <= x).
DCP_HOST_DEVICE inline std::int64_t last_not_above(const std::int64_t* off, std::int64_t n, std::int64_t x) {
  std::int64_t lo = 0, hi = n;  // invariant: off[lo] <= x, answer in [lo, hi)
  while (hi - lo > 1) {
    const std::int64_t mid = lo + (hi - lo) / 2;
    if (off[mid] <= x) lo = mid;
    else hi = mid;
  }
  return lo;
}

// `shard_of` of <dcp/comm/shard.hpp> on the device: n items over `parts` ranks, the first n % parts
// shards one item longer.
DCP_HOST_DEVICE inline std::int64_t shard_count(std::int64_t n, int parts, int i) {
  return n / parts + (i < n % parts ? 1 : 0);
}
DCP_HOST_DEVICE inline std::int64_t shard_begin(std::int64_t n, int parts, int i) {
  const std::int64_t extra = n % parts;
  return i * (n / parts) + (i < extra ? i : extra);
}
/// The shard that holds item t (0 <= t < n).
DCP_HOST_DEVICE inline int shard_owner(std::int64_t n, int parts, std::int64_t t) {
  const std::int64_t base = n / parts, extra = n % parts, long_items = extra * (base + 1);
  if (t < long_items) return int(t / (base + 1));
  return int(extra + (t - long_items) / base);
}

}  // namespace detail
}  // namespace dcp
