#pragma once
/// \file
/// `fixed_edges_bucketing`: buckets given by ascending upper edges; lengths above the last
/// edge fall in an open last bucket.

#include <algorithm>
#include <cstdint>
#include <limits>
#include <ostream>
#include <string>
#include <vector>

#include <dcp/bucketing/bucketing_concepts.hpp>
#include <dcp/error.hpp>

namespace dcp {

struct fixed_edges_bucketing {
  using policy_concept = bucketing_tag;

  /// Upper edges (inclusive), strictly ascending and positive. Bucket i holds
  /// (edges[i-1], edges[i]]; bucket edges.size() holds everything longer.
  std::vector<std::int64_t> edges;

  void validate() const {
    for (std::size_t i = 0; i < edges.size(); ++i) {
      check(edges[i] > 0 && (i == 0 || edges[i] > edges[i - 1]), errc::invalid_argument, [&] {
        return "bucket edge " + std::to_string(i) + " = " + std::to_string(edges[i]) +
               " must be positive and above the previous edge; give strictly ascending edges";
      });
    }
  }

  std::size_t bucket_count() const noexcept { return edges.size() + 1; }
  std::size_t bucket_of(std::int64_t n) const noexcept {
    return static_cast<std::size_t>(std::lower_bound(edges.begin(), edges.end(), n) - edges.begin());
  }
  /// The upper edge of bucket i; the open last bucket is represented by the largest int64.
  std::int64_t representative(std::size_t i) const noexcept {
    return i < edges.size() ? edges[i] : std::numeric_limits<std::int64_t>::max();
  }

  friend bool operator==(const fixed_edges_bucketing&, const fixed_edges_bucketing&) = default;
  friend std::ostream& operator<<(std::ostream& os, const fixed_edges_bucketing& b) {
    os << "fixed_edges_bucketing{";
    for (std::size_t i = 0; i < b.edges.size(); ++i) os << (i ? ", " : "") << b.edges[i];
    return os << "}";
  }
};

static_assert(bucketing<fixed_edges_bucketing>);

}  // namespace dcp
