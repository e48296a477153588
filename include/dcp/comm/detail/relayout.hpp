#pragma once
/// \file
/// Private: the all-to-all step shared by the Ulysses and DSP re-layouts. Include
/// `<dcp/comm/ulysses.hpp>` or `<dcp/comm/dsp.hpp>` instead.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <vector>

#include <dcp/comm/comm_concepts.hpp>
#include <dcp/error.hpp>

namespace dcp::detail {

inline void check_span_size(const char* what, const char* name, std::size_t got, std::int64_t want) {
  check(got == std::size_t(want), errc::invalid_argument, [&] {
    return std::string(what) + ": " + name + " has " + std::to_string(got) + " elements but this rank's shard needs " +
           std::to_string(want);
  });
}

/// all_to_all_v with per-rank counts, taking the equal-count collective when every count agrees.
template <class C, class T>
void exchange(C& comm, std::span<const T> send, const std::vector<std::size_t>& send_counts, std::span<T> recv,
              const std::vector<std::size_t>& recv_counts, bool even) {
  if (even)
    comm.all_to_all(send, recv);
  else
    comm.all_to_all_v(send, std::span<const std::size_t>(send_counts), recv, std::span<const std::size_t>(recv_counts));
}

/// Copies `rows` rows of `len` elements: row k from src[src_first + k * src_stride] to
/// dst[dst_first + k * dst_stride]. Offsets, not pointers: an empty shard has a null data()
/// that no offset may be added to, so nothing is computed when there is nothing to copy.
template <class T>
void copy_rows(std::span<const T> src, std::int64_t src_first, std::int64_t src_stride, std::span<T> dst,
               std::int64_t dst_first, std::int64_t dst_stride, std::int64_t rows, std::int64_t len) noexcept {
  if (len == 0 || rows == 0) return;
  for (std::int64_t k = 0; k < rows; ++k)
    std::memcpy(dst.data() + dst_first + k * dst_stride, src.data() + src_first + k * src_stride,
                std::size_t(len) * sizeof(T));
}

}  // namespace dcp::detail
