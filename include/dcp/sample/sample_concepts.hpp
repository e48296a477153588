#pragma once
/// \file
/// The `sampler` axis: how a dataset becomes a stream of global batches (DESIGN section 2,
/// "dataset lengths -> sampler -> global batch").
///
/// A model of `sampler` opts in with `using policy_concept = dcp::sampler_tag;`, is copyable, and has
///   - `typename S::state_type`: a regular value with `==` and `operator<<`, the sampler's position;
///   - `s.next() -> global_batch`: the next batch (epochs follow each other forever);
///   - `s.state() -> state_type` and `s.restore(st)`: save and resume;
///   - `s.size()`: sequences per epoch; `s.batches_in_epoch(e)`: batches of epoch `e`.
/// Laws: every sequence of the dataset appears exactly once in the batches of each epoch; two
/// samplers built from the same arguments yield the same batches on every rank and platform
/// without communicating; after `s2.restore(s1.state())` both yield the same batches forever.
/// Shipped: `token_budget_sampler` (batches filled to a token budget, DESIGN section 3).

#include <concepts>
#include <cstdint>
#include <ostream>
#include <vector>

#include <dcp/policy_concepts.hpp>
#include <dcp/sequence.hpp>

namespace dcp {

struct sampler_tag {};

/// One global batch: the sequences every rank plans and runs together in one optimizer step.
struct global_batch {
  std::int64_t epoch = 0;  ///< epoch the batch belongs to (0-based)
  std::int64_t index = 0;  ///< batch index within the epoch (0-based)
  std::vector<sequence> sequences;

  friend bool operator==(const global_batch&, const global_batch&) = default;
  friend std::ostream& operator<<(std::ostream& os, const global_batch& b) {
    std::int64_t tokens = 0;
    for (const auto& s : b.sequences) tokens += s.shape_tokens();
    return os << "global_batch{epoch=" << b.epoch << ", index=" << b.index << ", sequences=" << b.sequences.size()
              << ", shape_tokens=" << tokens << "}";
  }
};

/// Where a sampler stands: the seed it shuffles with, the epoch, and the index in that epoch's
/// permutation of the next sequence to hand out (always the first sequence of a batch).
struct sampler_state {
  std::uint64_t seed = 0;
  std::int64_t epoch = 0;
  std::int64_t position = 0;

  friend constexpr bool operator==(const sampler_state&, const sampler_state&) = default;
  friend std::ostream& operator<<(std::ostream& os, const sampler_state& s) {
    return os << "sampler_state{seed=" << s.seed << ", epoch=" << s.epoch << ", position=" << s.position << "}";
  }
};

template <class S>
concept sampler = opts_in_with<S, sampler_tag> && std::copyable<S> &&
                  std::regular<typename S::state_type> &&
                  requires(S& s, const S& cs, const typename S::state_type& st, std::int64_t e) {
                    { s.next() } -> std::same_as<global_batch>;
                    { cs.state() } -> std::same_as<typename S::state_type>;
                    s.restore(st);
                    { cs.size() } -> std::convertible_to<std::int64_t>;
                    { cs.batches_in_epoch(e) } -> std::convertible_to<std::int64_t>;
                  };

}  // namespace dcp
