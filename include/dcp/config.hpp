#pragma once
/// \file
/// Version and feature macros. The version is defined here only: CMake reads it for
/// project(VERSION) and the installed package version. Feature macros are function-like so
/// that a typo (`DCP_HAS_NCLL()`) is a hard error under `-Wundef` instead of a silent 0.

#define DCP_VERSION_MAJOR 0
#define DCP_VERSION_MINOR 1
#define DCP_VERSION_PATCH 0

// MPI: defined by the dcp::mpi target, or detected from <mpi.h> being included first.
#if defined(DCP_WITH_MPI) || defined(OMPI_MPI_H) || defined(MPI_VERSION)
#define DCP_HAS_MPI() 1
#else
#define DCP_HAS_MPI() 0
#endif

// NCCL: defined by the dcp::nccl target.
#if defined(DCP_WITH_NCCL)
#define DCP_HAS_NCCL() 1
#else
#define DCP_HAS_NCCL() 0
#endif

// CUDA toolkit (host runtime API): defined by the dcp::cuda target or under nvcc.
#if defined(DCP_WITH_CTK) || defined(__CUDACC__)
#define DCP_HAS_CTK() 1
#else
#define DCP_HAS_CTK() 0
#endif

// Compiled mode: defined by the dcp::compiled target (<dcp/compiled.hpp>).
#if defined(DCP_COMPILED) && DCP_COMPILED
#define DCP_HAS_COMPILED() 1
#else
#define DCP_HAS_COMPILED() 0
#endif
