#pragma once
/// \file
/// How sequence parallelism splits an axis of n items over sp ranks: contiguous shards, the first
/// `n % sp` one item longer (so shard sizes differ by at most one, and a shard may be empty when
/// n < sp). Used by the Ulysses and DSP re-layouts and by whoever fills a rank's token shard.

#include <cstdint>
#include <ostream>
#include <string>

#include <dcp/error.hpp>

namespace dcp {

/// The items [begin, begin + count) of an axis.
struct shard {
  std::int64_t begin = 0;
  std::int64_t count = 0;

  constexpr std::int64_t end() const noexcept { return begin + count; }
  friend constexpr bool operator==(const shard&, const shard&) = default;
  friend std::ostream& operator<<(std::ostream& os, const shard& s) {
    return os << "[" << s.begin << ", " << s.end() << ")";
  }
};

/// Shard `index` of `n` items split over `parts` ranks. Throws `dcp::error` on a negative n,
/// parts < 1 or an index outside [0, parts).
constexpr shard shard_of(std::int64_t n, int parts, int index) {
  check(n >= 0 && parts >= 1 && index >= 0 && index < parts, errc::invalid_argument, [&] {
    return "shard_of: shard " + std::to_string(index) + " of " + std::to_string(n) + " items over " +
           std::to_string(parts) + " ranks; need n >= 0, parts >= 1 and 0 <= index < parts";
  });
  const std::int64_t base = n / parts, extra = n % parts;
  return {index * base + (index < extra ? index : extra), base + (index < extra ? 1 : 0)};
}

}  // namespace dcp
