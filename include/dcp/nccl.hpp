#pragma once
/// \file
/// Opt-in umbrella for the NCCL tier: everything in `<dcp/dcp.hpp>` plus `nccl_comm`
/// (`<dcp/comm/nccl.hpp>`) and its file bootstrap (`<dcp/comm/nccl_bootstrap.hpp>`). Link `dcp::nccl`; without NCCL the backend is absent and this header
/// is the host umbrella alone. Compiles with a host compiler and with nvcc.

#include <dcp/comm/nccl.hpp>
#include <dcp/comm/nccl_bootstrap.hpp>
#include <dcp/dcp.hpp>
