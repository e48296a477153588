#pragma once
/// \file
/// `geometric_bucketing`: edges first, first*ratio, first*ratio^2, ... up to `limit`.
/// Time grows quadratically with length, so equal ratios keep the cost spread of every
/// bucket alike; the default doubles from 256 tokens to 2^24.

#include <algorithm>
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
    std::size_t count = 1;  // edges first .. limit, one bucket each
    for (std::int64_t e = first; e < limit; ++count) e = next_edge(e, count);
    return count;
  }
  /// Upper edge of bucket i: floor(first * ratio^i), at least one above the previous edge (so
  /// small first edges never repeat), and `limit` for the last bucket.
  std::int64_t representative(std::size_t i) const noexcept {
    std::int64_t e = first;
    for (std::size_t j = 1; j <= i && e < limit; ++j) e = next_edge(e, j);
    return std::min(e, limit);
  }
  std::size_t bucket_of(std::int64_t n) const noexcept {
    std::size_t i = 0;
    for (std::int64_t e = first; n > e && e < limit; e = next_edge(e, i)) ++i;
    return i;
  }

 private:
  // Edge j given edge j - 1.
  std::int64_t next_edge(std::int64_t previous, std::size_t j) const noexcept {
    const double grown = std::floor(static_cast<double>(first) * std::pow(ratio, static_cast<double>(j)));
    const std::int64_t e = grown >= static_cast<double>(limit) ? limit : static_cast<std::int64_t>(grown);
    return std::max(e, previous + 1);
  }

 public:
  friend bool operator==(const geometric_bucketing&, const geometric_bucketing&) = default;
  friend std::ostream& operator<<(std::ostream& os, const geometric_bucketing& b) {
    return os << "geometric_bucketing{first=" << b.first << ", ratio=" << b.ratio << ", limit=" << b.limit << "}";
  }
};

static_assert(bucketing<geometric_bucketing>);

}  // namespace dcp
