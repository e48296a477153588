#pragma once
/// \file
/// The one exception family of dcp: `dcp::error`, a `std::system_error` whose
/// category says which layer failed (dcp itself, MPI, NCCL or CUDA).
/// Messages name the offending value and the fix.

#include <string>
#include <system_error>
#include <utility>

namespace dcp {

/// Error conditions raised by dcp itself.
enum class errc {
  invalid_argument = 1,  ///< a value outside its domain (zero GPUs, negative length, ...)
  infeasible,            ///< a sequence fits no configuration in memory
  parse_error,           ///< a malformed lengths, profile or plan file
  io_error,              ///< a file that cannot be opened or written
  mismatch,              ///< ranks disagree (plan hash, profile for another model/device)
  timeout,               ///< a peer did not answer in time
  aborted,               ///< a communicator was used after abort
  unsupported,           ///< a feature not built in (no MPI, no NCCL, no device)
};

namespace detail {
class dcp_category_impl final : public std::error_category {
 public:
  const char* name() const noexcept override { return "dcp"; }
  std::string message(int c) const override {
    switch (static_cast<errc>(c)) {
      case errc::invalid_argument: return "invalid argument";
      case errc::infeasible: return "infeasible sequence";
      case errc::parse_error: return "parse error";
      case errc::io_error: return "i/o error";
      case errc::mismatch: return "mismatch between ranks or inputs";
      case errc::timeout: return "timeout";
      case errc::aborted: return "communicator aborted";
      case errc::unsupported: return "unsupported";
    }
    return "unknown dcp error";
  }
};

// Categories for foreign libraries: the value is the library's own error code.
class named_category final : public std::error_category {
 public:
  explicit constexpr named_category(const char* n) noexcept : name_(n) {}
  const char* name() const noexcept override { return name_; }
  std::string message(int c) const override { return std::string(name_) + " error " + std::to_string(c); }

 private:
  const char* name_;
};
}  // namespace detail

/// Category of errors raised by dcp's own checks.
inline const std::error_category& dcp_category() noexcept {
  static const detail::dcp_category_impl c;
  return c;
}
/// Category of errors returned by MPI (value = MPI error class).
inline const std::error_category& mpi_category() noexcept {
  static const detail::named_category c("mpi");
  return c;
}
/// Category of errors returned by NCCL (value = ncclResult_t).
inline const std::error_category& nccl_category() noexcept {
  static const detail::named_category c("nccl");
  return c;
}
/// Category of errors returned by the CUDA runtime (value = cudaError_t).
inline const std::error_category& cuda_category() noexcept {
  static const detail::named_category c("cuda");
  return c;
}

inline std::error_code make_error_code(errc e) noexcept { return {static_cast<int>(e), dcp_category()}; }

/// The enumerator's name ("invalid_argument", ...): what code branches on, where the category's
/// `message` is prose for people.
constexpr const char* to_string(errc e) noexcept {
  switch (e) {
    case errc::invalid_argument: return "invalid_argument";
    case errc::infeasible: return "infeasible";
    case errc::parse_error: return "parse_error";
    case errc::io_error: return "io_error";
    case errc::mismatch: return "mismatch";
    case errc::timeout: return "timeout";
    case errc::aborted: return "aborted";
    case errc::unsupported: return "unsupported";
  }
  return "unknown";
}

/// The exception thrown by every dcp component. `what()` is the full message;
/// `code()` tells the layer and condition.
class error : public std::system_error {
 public:
  error(std::error_code ec, const std::string& what) : std::system_error(ec, what) {}
  error(errc e, const std::string& what) : std::system_error(make_error_code(e), what) {}
};

/// Throws `dcp::error{e, msg}` unless `ok`. The message is built only on failure.
template <class MakeMessage>
constexpr void check(bool ok, errc e, MakeMessage&& make_message) {
  if (!ok) throw error(e, std::forward<MakeMessage>(make_message)());
}

}  // namespace dcp

template <>
struct std::is_error_code_enum<dcp::errc> : std::true_type {};
