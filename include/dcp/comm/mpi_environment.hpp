#pragma once
/// \file
/// `mpi_environment`: MPI's initialisation and finalisation, and `detail::mpi_check`, which turns
/// an MPI error code into a `dcp::error` in `mpi_category()` (value = MPI error class) with
/// `MPI_Error_string`'s text. Available when `DCP_HAS_MPI()` (link `dcp::mpi`, or include <mpi.h>
/// first); empty otherwise. The communicator is `<dcp/comm/mpi.hpp>`.

#include <dcp/config.hpp>

#if DCP_HAS_MPI()

// dcp uses the C API; the deprecated C++ bindings only add warnings.
#ifndef OMPI_SKIP_MPICXX
#define OMPI_SKIP_MPICXX 1
#endif
#ifndef MPICH_SKIP_MPICXX
#define MPICH_SKIP_MPICXX 1
#endif
#include <mpi.h>

#include <cstddef>
#include <exception>
#include <string>
#include <system_error>

#include <dcp/error.hpp>

namespace dcp {

namespace detail {

inline std::string mpi_error_string(int code) {
  char buf[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(code, buf, &len) != MPI_SUCCESS) return "MPI error " + std::to_string(code);
  return std::string(buf, size_t(len));
}

/// Throws `dcp::error` in `mpi_category()` unless `rc == MPI_SUCCESS`.
inline void mpi_check(int rc, const char* call, const std::string& context) {
  if (rc == MPI_SUCCESS) return;
  int cls = rc;
  if (MPI_Error_class(rc, &cls) != MPI_SUCCESS) cls = rc;
  throw error(std::error_code(cls, mpi_category()), context + ": " + call + " failed: " + mpi_error_string(rc));
}

}  // namespace detail

/// Ends the whole MPI job at once (`MPI_Abort` on `MPI_COMM_WORLD` with `code`) when MPI is
/// initialised and not finalised; does nothing otherwise. The error path of a program: after one
/// rank has printed its error, the others, which may sit in a collective waiting for it, are
/// stopped by the launcher within seconds instead of timing out. Never returns when it aborts.
inline void abort_mpi_job(int code) noexcept {
  int init = 0, fin = 0;
  if (MPI_Initialized(&init) != MPI_SUCCESS || !init) return;
  if (MPI_Finalized(&fin) != MPI_SUCCESS || fin) return;
  MPI_Abort(MPI_COMM_WORLD, code);
}

/// Initialises MPI for its lifetime (unless already initialised) and finalises it at the end if it
/// did the initialisation. Requests `MPI_THREAD_SINGLE` by default. Destroyed while an exception
/// unwinds, it does not finalise: `MPI_Finalize` is collective and would wait for ranks that are
/// themselves waiting in a collective for this one. The handler that catches the exception prints
/// it and calls `abort_mpi_job`, which ends every rank:
///
/// \code
/// try {
///   dcp::mpi_environment env(&argc, &argv);
///   run(dcp::mpi_comm::world());
/// } catch (const std::exception& e) {
///   std::fprintf(stderr, "%s\n", e.what());
///   dcp::abort_mpi_job(1);
///   return 1;
/// }
/// \endcode
class mpi_environment {
 public:
  mpi_environment() : mpi_environment(nullptr, nullptr) {}
  mpi_environment(int* argc, char*** argv, int required = MPI_THREAD_SINGLE) {
    int init = 0;
    detail::mpi_check(MPI_Initialized(&init), "MPI_Initialized", "mpi_environment");
    if (init) {
      detail::mpi_check(MPI_Query_thread(&provided_), "MPI_Query_thread", "mpi_environment");
      return;
    }
    detail::mpi_check(MPI_Init_thread(argc, argv, required, &provided_), "MPI_Init_thread", "mpi_environment");
    owner_ = true;
  }
  mpi_environment(const mpi_environment&) = delete;
  mpi_environment& operator=(const mpi_environment&) = delete;
  ~mpi_environment() {
    if (!owner_ || std::uncaught_exceptions() > unwinding_) return;
    int fin = 0;
    MPI_Finalized(&fin);
    if (!fin) MPI_Finalize();
  }
  /// The thread support level MPI provides.
  int thread_level() const noexcept { return provided_; }
  /// Whether this object initialised MPI (and will finalise it).
  bool owner() const noexcept { return owner_; }

 private:
  int provided_ = MPI_THREAD_SINGLE;
  bool owner_ = false;
  int unwinding_ = std::uncaught_exceptions();  // exceptions in flight when it was made
};

}  // namespace dcp

#endif  // DCP_HAS_MPI()
