#pragma once
/// \file
/// Opt-in umbrella of dcp's CUDA path (STYLE: the device tier). Needs the CUDA toolkit's CCCL
/// (Thrust, CUB); with nvcc everything runs on the GPU, with a host compiler and
/// `-DTHRUST_DEVICE_SYSTEM=THRUST_DEVICE_SYSTEM_CPP` the Thrust parts run on the CPU.
///   - `<dcp/cuda/micro_batch.cuh>`: a plan step assembled on the device: sorted sequences,
///     `cu_seqlens`, shards (uneven or padded), gather/scatter of a rank's tokens;
///   - `<dcp/cuda/relayout.cuh>`: Ulysses and DSP all-to-all re-layouts of a whole micro-step on
///     device buffers, through any communicator on device memory (`nccl_comm`);
///   - `<dcp/cuda/runtime.hpp>`: CUDA errors as `dcp::error`, device discovery, memory checks
///     (only with the CUDA runtime: `DCP_HAS_CTK()`);
///   - `<dcp/profile/cuda_timer.hpp>`: CUDA-event step timing and peak device memory.

#include <dcp/cuda/micro_batch.cuh>
#include <dcp/cuda/relayout.cuh>
#include <dcp/cuda/runtime.hpp>
#include <dcp/profile/cuda_timer.hpp>
