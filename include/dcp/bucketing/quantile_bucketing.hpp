#pragma once
/// \file
/// `quantile_bucketing`: edges at the quantiles of a sample of lengths, so every bucket holds
/// about the same number of sequences. Fit once on the dataset, then use like fixed edges.

#include <algorithm>
#include <cstdint>
#include <ostream>
#include <span>
#include <string>
#include <vector>

#include <dcp/bucketing/bucketing_concepts.hpp>
#include <dcp/bucketing/fixed_edges_bucketing.hpp>
#include <dcp/error.hpp>

namespace dcp {

struct quantile_bucketing {
  using policy_concept = bucketing_tag;

  fixed_edges_bucketing fitted;  ///< the edges found by `fit`

  /// Edges at the i/count quantiles of `lengths` (duplicates merged, so heavy ties give fewer buckets).
  static quantile_bucketing fit(std::span<const std::int64_t> lengths, std::size_t count) {
    check(count >= 1, errc::invalid_argument,
          [&] { return std::string("quantile_bucketing: bucket count must be at least 1"); });
    check(!lengths.empty(), errc::invalid_argument,
          [&] { return std::string("quantile_bucketing: no lengths to fit; pass the dataset's lengths"); });
    std::vector<std::int64_t> sorted(lengths.begin(), lengths.end());
    std::sort(sorted.begin(), sorted.end());
    check(sorted.front() > 0, errc::invalid_argument, [&] {
      return "quantile_bucketing: length " + std::to_string(sorted.front()) + " is not positive";
    });
    quantile_bucketing q;
    for (std::size_t i = 1; i < count; ++i) {
      const std::int64_t e = sorted[(sorted.size() * i) / count];
      if (q.fitted.edges.empty() || e > q.fitted.edges.back()) q.fitted.edges.push_back(e);
    }
    if (q.fitted.edges.empty() || sorted.back() > q.fitted.edges.back()) q.fitted.edges.push_back(sorted.back());
    return q;
  }

  std::size_t bucket_count() const noexcept { return fitted.bucket_count(); }
  std::size_t bucket_of(std::int64_t n) const noexcept { return fitted.bucket_of(n); }
  std::int64_t representative(std::size_t i) const noexcept { return fitted.representative(i); }

  friend bool operator==(const quantile_bucketing&, const quantile_bucketing&) = default;
  friend std::ostream& operator<<(std::ostream& os, const quantile_bucketing& b) {
    return os << "quantile_bucketing{" << b.fitted << "}";
  }
};

static_assert(bucketing<quantile_bucketing>);

}  // namespace dcp
