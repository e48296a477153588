#pragma once
/// \file
/// CUDA runtime errors as `dcp::error`, device discovery and memory checks: the host side of dcp's
/// CUDA path. Host code only (any C++20 compiler with the CUDA toolkit's headers), available when
/// `DCP_HAS_CTK()` (link `dcp::cuda`, or compile with nvcc); empty otherwise. `cuda_check` is the
/// one CUDA error helper of dcp: the device code, the NCCL communicator and the profiler use it.
///
/// - `cuda_check(rc, "cudaMalloc", context)` throws `dcp::error` in `cuda_category()` (value = the
///   `cudaError_t`) whose message names the call, the error and its text; `cuda_try` is the
///   `noexcept` twin for teardown paths.
/// - `cuda_device_count()` is 0, never an exception, when there is no device or no driver;
///   `cuda_no_device_reason()` says why, for skip messages and `scripts/gpu-check`.
/// - `require_cuda_device()` and `require_device_memory(bytes, what)` turn "no device" and "a device
///   with too little memory for the step" into clear errors before any work starts.

#include <dcp/config.hpp>

#if DCP_HAS_CTK()

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <system_error>

#include <dcp/error.hpp>

namespace dcp {

/// The `std::error_code` of a CUDA runtime result (empty for `cudaSuccess`).
inline std::error_code cuda_error_code(cudaError_t rc) noexcept {
  return rc == cudaSuccess ? std::error_code() : std::error_code(static_cast<int>(rc), cuda_category());
}

/// Throws `dcp::error` in `cuda_category()` unless `rc == cudaSuccess`. The message reads
/// "<context>: <call> failed: <cudaErrorName>: <text>".
inline void cuda_check(cudaError_t rc, const char* call, const std::string& context = "dcp") {
  if (rc == cudaSuccess) return;
  throw error(cuda_error_code(rc), context + ": " + call + " failed: " + cudaGetErrorName(rc) + ": " +
                                       cudaGetErrorString(rc));
}

/// `noexcept` twin of `cuda_check` for teardown: the error code, and the sticky error cleared.
inline std::error_code cuda_try(cudaError_t rc) noexcept {
  if (rc != cudaSuccess) (void)cudaGetLastError();
  return cuda_error_code(rc);
}

/// Devices this process can use; 0 (not an exception) without a device or a driver.
inline int cuda_device_count() noexcept {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return n;
}

/// Why `cuda_device_count()` is 0 ("" when a device is present).
inline std::string cuda_no_device_reason() {
  int n = 0;
  const cudaError_t rc = cudaGetDeviceCount(&n);
  (void)cudaGetLastError();
  if (rc == cudaSuccess && n > 0) return "";
  if (rc == cudaSuccess) return "no GPU: cudaGetDeviceCount reports 0 devices";
  return std::string("no GPU: cudaGetDeviceCount failed: ") + cudaGetErrorName(rc) + ": " + cudaGetErrorString(rc);
}

/// Throws `dcp::error` (`errc::unsupported`) unless device `device` exists, then makes it current.
inline void require_cuda_device(int device = 0) {
  const int n = cuda_device_count();
  check(n > 0, errc::unsupported, [] { return cuda_no_device_reason() + "; dcp's CUDA path needs an NVIDIA GPU"; });
  check(device >= 0 && device < n, errc::invalid_argument, [&] {
    return "device " + std::to_string(device) + " requested but only " + std::to_string(n) +
           " CUDA devices are visible; check CUDA_VISIBLE_DEVICES and the ranks per node";
  });
  cuda_check(cudaSetDevice(device), "cudaSetDevice", "require_cuda_device");
}

/// Free and total memory of the current device (cudaMemGetInfo).
struct device_memory_info {
  std::size_t free_bytes = 0;
  std::size_t total_bytes = 0;
  std::size_t used_bytes() const noexcept { return total_bytes - free_bytes; }
};

inline device_memory_info cuda_memory_info() {
  device_memory_info m;
  cuda_check(cudaMemGetInfo(&m.free_bytes, &m.total_bytes), "cudaMemGetInfo", "cuda_memory_info");
  return m;
}

/// Throws `dcp::error` (`errc::infeasible`) when the current device has less than `bytes` free,
/// naming `what`, both sizes and the fix.
inline void require_device_memory(std::size_t bytes, const std::string& what) {
  const device_memory_info m = cuda_memory_info();
  check(bytes <= m.free_bytes, errc::infeasible, [&] {
    return what + " needs " + std::to_string(bytes) + " bytes of device memory but only " +
           std::to_string(m.free_bytes) + " of " + std::to_string(m.total_bytes) +
           " are free; plan with this device's memory capacity, or checkpoint more blocks";
  });
}

}  // namespace dcp

#endif  // DCP_HAS_CTK()
