#pragma once
/// \file
/// A sequence of a dataset: an id and a shape. 1D sequences (text, images seen as
/// one frame) have `frames == 1`; videos have `frames` latent frames of `spatial`
/// tokens each. The tokens a model sees add its text tokens (see `model_spec`).

#include <cstdint>
#include <string>
#include <vector>

#include <dcp/error.hpp>

namespace dcp {

/// One sample of a dataset, identified by `id` (unique within the dataset).
struct sequence {
  std::int64_t id = 0;
  std::int64_t frames = 1;   ///< T: latent frames (1 for text and images)
  std::int64_t spatial = 0;  ///< S: tokens per frame (the length, for 1D data)

  /// Tokens of the shape alone (T * S), before a model's text tokens.
  constexpr std::int64_t shape_tokens() const noexcept { return frames * spatial; }
  friend constexpr bool operator==(const sequence&, const sequence&) = default;
};

/// A 1D sequence of `n` tokens.
constexpr sequence make_sequence(std::int64_t id, std::int64_t n) noexcept { return {id, 1, n}; }
/// A 2D sequence of `t` frames of `s` tokens.
constexpr sequence make_sequence(std::int64_t id, std::int64_t t, std::int64_t s) noexcept { return {id, t, s}; }

/// Largest shape accepted: T * S must stay far from overflow in every cost formula.
inline constexpr std::int64_t max_shape_tokens = std::int64_t{1} << 40;

/// Throws a `dcp::error` naming the sequence unless its shape is positive and bounded.
inline void validate(const sequence& s) {
  check(s.frames > 0 && s.spatial > 0, errc::invalid_argument, [&] {
    return "sequence " + std::to_string(s.id) + " has shape " + std::to_string(s.frames) + " x " +
           std::to_string(s.spatial) + "; frames and tokens must be positive (drop empty samples from the dataset)";
  });
  check(s.spatial <= max_shape_tokens / s.frames, errc::invalid_argument, [&] {
    return "sequence " + std::to_string(s.id) + " has shape " + std::to_string(s.frames) + " x " +
           std::to_string(s.spatial) + ", over the limit of 2^40 tokens; split the sample";
  });
}

/// A dataset: the sequences an epoch visits.
using dataset = std::vector<sequence>;

}  // namespace dcp
