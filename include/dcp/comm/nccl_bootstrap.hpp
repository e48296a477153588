#pragma once
/// \file
/// Sharing an NCCL unique id through a file, for jobs without a host communicator to broadcast
/// it: rank 0 writes the id atomically (a temporary file, then a rename), every other rank waits
/// for the file until a deadline. `nccl_comm::init_from_file` (`<dcp/comm/nccl.hpp>`) uses it.
/// Available when `DCP_HAS_NCCL()` (link `dcp::nccl`); empty otherwise.

#include <dcp/config.hpp>

#if DCP_HAS_NCCL()

#include <nccl.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>

#include <dcp/comm/comm_concepts.hpp>
#include <dcp/error.hpp>

namespace dcp {

/// Rank 0 writes `id` to `path`; any other rank reads it from there into `id`, waiting at most
/// `timeout` for rank 0 (errc::timeout naming the rank and the path). Remove the file between jobs.
inline void share_nccl_unique_id_through_file(const std::filesystem::path& path, int rank, ncclUniqueId& id,
                                              std::chrono::milliseconds timeout) {
  if (rank == 0) {
    auto tmp = path;
    tmp += ".tmp";
    {
      std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
      out.write(reinterpret_cast<const char*>(&id), sizeof(id));
      check(bool(out), errc::io_error, [&] { return "nccl_comm::init_from_file: cannot write " + tmp.string(); });
    }
    std::filesystem::rename(tmp, path);
    return;
  }
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    std::ifstream in(path, std::ios::binary);
    if (in && in.read(reinterpret_cast<char*>(&id), sizeof(id))) return;
    check(std::chrono::steady_clock::now() < deadline, errc::timeout, [&] {
      return "nccl_comm::init_from_file: rank " + std::to_string(rank) + " timed out after " +
             detail::seconds_string(timeout) + " waiting for rank 0 to write " + path.string();
    });
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

}  // namespace dcp

#endif  // DCP_HAS_NCCL()
