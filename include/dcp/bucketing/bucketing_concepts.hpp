#pragma once
/// \file
/// The `bucketing` axis: sequence length -> length group (bucket) and its representative.
///
/// Buckets are the unit of profiling (one profile row per bucket and configuration) and of the
/// bucket-parallel baseline. A model of `bucketing` opts in with
/// `using policy_concept = dcp::bucketing_tag;` and has
///   - `b.bucket_count()`: number of buckets B (>= 1);
///   - `b.bucket_of(n)`: the bucket in [0, B) of a sequence of n >= 1 tokens;
///   - `b.representative(i)`: a token count standing for bucket i (its upper edge).
/// Laws: `bucket_of` is monotone non-decreasing in n; `bucket_of(representative(i)) == i`.
/// Shipped: `fixed_edges_bucketing`, `geometric_bucketing`, `quantile_bucketing`.

#include <concepts>
#include <cstddef>
#include <cstdint>

#include <dcp/concept_diagnosis.hpp>
#include <dcp/policy_concepts.hpp>

namespace dcp {

struct bucketing_tag {};

// The named requirements of `bucketing`, in the order a diagnostic reports them.

/// Opts in: `using policy_concept = dcp::bucketing_tag;`.
template <class B>
concept bucketing_opts_in = opts_in_with<B, bucketing_tag>;
/// A regular value (copyable, default-constructible, `==`).
template <class B>
concept bucketing_regular = std::regular<B>;
/// Maps lengths: `bucket_count()`, `bucket_of(n)`, `representative(i)`.
template <class B>
concept bucketing_maps_lengths = requires(const B& b, std::int64_t n, std::size_t i) {
  { b.bucket_count() } -> std::convertible_to<std::size_t>;
  { b.bucket_of(n) } -> std::convertible_to<std::size_t>;
  { b.representative(i) } -> std::convertible_to<std::int64_t>;
};

template <class B>
concept bucketing = bucketing_opts_in<B> && bucketing_regular<B> && bucketing_maps_lengths<B>;

/// The first requirement of `bucketing` that P misses, as one static_assert; true when P models it.
template <class P>
constexpr bool diagnose_bucketing() {
  if constexpr (false) {
  }
  DCP_DIAGNOSE_UNMET("dcp::policies: slot 'bucketing'", "bucketing", bucketing_opts_in,
                     "`using policy_concept = dcp::bucketing_tag;`")
  DCP_DIAGNOSE_UNMET("dcp::policies: slot 'bucketing'", "bucketing", bucketing_regular,
                     "copyable, default-constructible, ==")
  DCP_DIAGNOSE_UNMET("dcp::policies: slot 'bucketing'", "bucketing", bucketing_maps_lengths,
                     "bucket_count, bucket_of, representative")
  DCP_DIAGNOSE_ALL_LISTED("dcp::policies: slot 'bucketing'", "bucketing", dcp::bucketing,
                          "dcp/bucketing/bucketing_concepts.hpp")
  return dcp::bucketing<P>;
}


}  // namespace dcp
