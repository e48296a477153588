#pragma once
/// \file
/// `geometric_bucketing`: edges first, first*ratio, first*ratio^2, ... up to `limit`.
/// Time grows quadratically with length, so equal ratios keep the cost spread of every
/// bucket alike; the default doubles from 256 tokens to 2^24.

#include <cmath>
#include <cstdint>
#include <ostream>
#include <string>

#include <dcp/bucketing/bucketing_concepts.hpp>
#include <dcp/error.hpp>

namespace dcp {

struct geometric_bucketing {
  using policy_concept = bucketing_tag;

  std::int64_t first = 256;            ///< upper edge of bucket 0
  double ratio = 2.0;                  ///< edge growth per bucket (> 1)
  std::int64_t limit = std::int64_t{1} << 24;  ///< lengths above the last edge <= limit share the last bucket

  void validate() const {
    check(first > 0 && ratio > 1 && limit >= first, errc::invalid_argument, [&] {
      return "geometric_bucketing{first=" + std::to_string(first) + ", ratio=" + std::to_string(ratio) +
             ", limit=" + std::to_string(limit) + "}: need first > 0, ratio > 1, limit >= first";
    });
  }

  std::size_t bucket_count() const noexcept {
    std::size_t count = 1;
    for (double e = static_cast<double>(first); e < static_cast<double>(limit); e *= ratio) ++count;
    return count;
  }
  std::int64_t representative(std::size_t i) const noexcept {
    if (i + 1 >= bucket_count()) return limit;
    return static_cast<std::int64_t>(std::floor(static_cast<double>(first) * std::pow(ratio, static_cast<double>(i))));
  }
  std::size_t bucket_of(std::int64_t n) const noexcept {
    const std::size_t count = bucket_count();
    std::size_t i = 0;
    while (i + 1 < count && n > representative(i)) ++i;
    return i;
  }

  friend bool operator==(const geometric_bucketing&, const geometric_bucketing&) = default;
  friend std::ostream& operator<<(std::ostream& os, const geometric_bucketing& b) {
    return os << "geometric_bucketing{first=" << b.first << ", ratio=" << b.ratio << ", limit=" << b.limit << "}";
  }
};

static_assert(bucketing<geometric_bucketing>);

}  // namespace dcp
