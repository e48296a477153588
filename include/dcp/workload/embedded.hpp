#pragma once
/// \file
/// The embedded workloads of DESIGN section 5, generated deterministically from a seed with dcp's
/// own PRNG (`<dcp/random.hpp>`), so a (name, seed) pair names the same dataset on every
/// rank, compiler and standard library.
///
///   - `opensora-zipf{1,10,50}` (2D, for `stdit3-xl`): 2000 videos over 20 (resolution, frames)
///     buckets, latent frames T = ceil(F/17) * 5 for F in {51, 102, 204, 408}, plus 1x / 10x / 50x
///     as many images (T = 1). Suffix 1 is long-dominated, 10 balanced, 50 short-dominated.
///   - `cogvideox-zipf{1,10,50}` (for the 1D `cogvideox-5b`, still stored as T x S): the same with
///     F in {25, 49, 73, 97} and T = (F-1)/4 + 1.
///   - `text-longtail` (1D causal, for `llama3-8b`): 20000 documents, log-normal lengths (median
///     2048, sigma 1.5) clipped to [128, 262144], stored as 1 x n.
///
/// Construction: ids 0..n-1 in generation order (videos, then images), then the dataset order is
/// shuffled by Fisher-Yates so images and videos interleave. Video bucket k = 1..20 (ascending
/// T*S, ties by resolution then frames) is drawn with probability proportional to (k+5)^-3,
/// image resolution r = 1..5 (ascending size) with probability proportional to (r+5)^-3.

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <ostream>
#include <span>
#include <string>
#include <string_view>

#include <dcp/error.hpp>
#include <dcp/random.hpp>
#include <dcp/sequence.hpp>

namespace dcp::workloads {

/// A video resolution (height x width in pixels).
struct resolution {
  std::string_view name;
  std::int64_t height = 0;
  std::int64_t width = 0;

  /// Spatial tokens per latent frame: S = ceil(H/16) * ceil(W/16) (8x VAE, 2x2 patches).
  constexpr std::int64_t spatial_tokens() const noexcept { return ((height + 15) / 16) * ((width + 15) / 16); }
  friend constexpr bool operator==(const resolution&, const resolution&) = default;
  friend std::ostream& operator<<(std::ostream& os, const resolution& r) {
    return os << r.name << "(" << r.height << "x" << r.width << ")";
  }
};

/// The five resolutions of DESIGN section 5, ascending size.
inline constexpr std::array<resolution, 5> resolutions{{
    {"144p", 144, 256},
    {"240p", 240, 426},
    {"360p", 360, 640},
    {"480p", 480, 854},
    {"720p", 720, 1280},
}};

/// Which video model's frame counts and temporal compression a video workload uses.
enum class video_family { opensora, cogvideox };

inline const char* to_string(video_family f) noexcept { return f == video_family::opensora ? "opensora" : "cogvideox"; }
inline std::ostream& operator<<(std::ostream& os, video_family f) { return os << to_string(f); }

/// Raw video frame counts F of a family, ascending.
constexpr std::array<std::int64_t, 4> video_frame_counts(video_family f) noexcept {
  if (f == video_family::opensora) return {51, 102, 204, 408};
  return {25, 49, 73, 97};
}

/// Latent frames T of a video of `video_frames` frames: ceil(F/17) * 5 (Open-Sora) or
/// (F-1)/4 + 1 (CogVideoX).
constexpr std::int64_t latent_frames(video_family f, std::int64_t video_frames) noexcept {
  if (f == video_family::opensora) return (video_frames + 16) / 17 * 5;
  return (video_frames - 1) / 4 + 1;
}

/// One (resolution, frame count) bucket of a video workload.
struct video_bucket {
  std::size_t resolution_index = 0;  ///< into `resolutions`
  std::int64_t video_frames = 0;     ///< F
  std::int64_t frames = 0;           ///< T (latent)
  std::int64_t spatial = 0;          ///< S

  constexpr std::int64_t shape_tokens() const noexcept { return frames * spatial; }
  friend constexpr bool operator==(const video_bucket&, const video_bucket&) = default;
  friend std::ostream& operator<<(std::ostream& os, const video_bucket& b) {
    return os << "video_bucket{" << resolutions[b.resolution_index].name << ", F=" << b.video_frames
              << ", T=" << b.frames << ", S=" << b.spatial << "}";
  }
};

/// The 20 buckets of a family in the order that ranks them: ascending T*S, ties broken by
/// resolution, then frame count. Bucket k (1-based) of this array has weight `zipf_weight(k)`.
constexpr std::array<video_bucket, 20> video_buckets(video_family f) {
  std::array<video_bucket, 20> b{};
  std::size_t i = 0;
  for (std::size_t r = 0; r < resolutions.size(); ++r)
    for (std::int64_t frames : video_frame_counts(f))
      b[i++] = {r, frames, latent_frames(f, frames), resolutions[r].spatial_tokens()};
  // A total order (no two buckets share resolution and frames), so std::sort is deterministic.
  std::sort(b.begin(), b.end(), [](const video_bucket& x, const video_bucket& y) {
    if (x.shape_tokens() != y.shape_tokens()) return x.shape_tokens() < y.shape_tokens();
    if (x.resolution_index != y.resolution_index) return x.resolution_index < y.resolution_index;
    return x.video_frames < y.video_frames;
  });
  return b;
}

/// Weight of rank k (1-based) of the power law of DESIGN section 5: (k + 5)^-3.
constexpr double zipf_weight(std::int64_t k) noexcept {
  const double x = static_cast<double>(k + 5);
  return 1.0 / (x * x * x);
}

/// Videos in every video workload.
inline constexpr std::int64_t video_count = 2000;
/// Documents in `text-longtail`.
inline constexpr std::int64_t text_document_count = 20000;
/// Log-normal parameters and clip range of `text-longtail`.
inline constexpr double text_median = 2048;
inline constexpr double text_sigma = 1.5;
inline constexpr std::int64_t text_min_tokens = 128;
inline constexpr std::int64_t text_max_tokens = 262144;

/// Names accepted by `make`.
inline constexpr std::array<std::string_view, 7> names{
    "opensora-zipf1",   "opensora-zipf10",  "opensora-zipf50", "cogvideox-zipf1",
    "cogvideox-zipf10", "cogvideox-zipf50", "text-longtail",
};

/// The model preset (`dcp::models::preset`) a workload is meant for.
inline std::string_view default_model(std::string_view name);

namespace detail {

inline std::string joined_names() {
  std::string s;
  for (auto n : names) s += (s.empty() ? "" : ", ") + std::string(n);
  return s;
}

[[noreturn]] inline void unknown_workload(std::string_view name) {
  throw error(errc::invalid_argument,
              "unknown workload '" + std::string(name) + "'; use one of " + joined_names() + " or a lengths file");
}

// Ranks k = 1..n of the power law, as categorical weights.
template <std::size_t N>
std::array<double, N> zipf_weights() {
  std::array<double, N> w{};
  for (std::size_t k = 0; k < N; ++k) w[k] = zipf_weight(static_cast<std::int64_t>(k) + 1);
  return w;
}

inline dataset make_video(video_family f, std::int64_t images_per_video, std::uint64_t seed) {
  const auto buckets = video_buckets(f);
  const auto bucket_w = zipf_weights<buckets.size()>();
  const auto image_w = zipf_weights<resolutions.size()>();
  const categorical pick_bucket{std::span<const double>(bucket_w)};
  const categorical pick_resolution{std::span<const double>(image_w)};

  xoshiro256ss g(seed);
  dataset d;
  d.reserve(static_cast<std::size_t>(video_count * (1 + images_per_video)));
  for (std::int64_t i = 0; i < video_count; ++i) {
    const video_bucket& b = buckets[pick_bucket(g)];
    d.push_back(make_sequence(static_cast<std::int64_t>(d.size()), b.frames, b.spatial));
  }
  for (std::int64_t i = 0; i < video_count * images_per_video; ++i) {
    const resolution& r = resolutions[pick_resolution(g)];
    d.push_back(make_sequence(static_cast<std::int64_t>(d.size()), 1, r.spatial_tokens()));
  }
  fisher_yates(std::span<sequence>(d), g);
  return d;
}

inline dataset make_text(std::uint64_t seed) {
  xoshiro256ss g(seed);
  dataset d;
  d.reserve(static_cast<std::size_t>(text_document_count));
  const double mu = std::log(text_median);
  for (std::int64_t i = 0; i < text_document_count; ++i) {
    const double x = std::exp(mu + text_sigma * standard_normal(g));
    // Clip in floating point first: a far tail draw must not overflow the integer conversion.
    const double clipped = std::clamp(x, static_cast<double>(text_min_tokens), static_cast<double>(text_max_tokens));
    d.push_back(make_sequence(i, 1, std::llround(clipped)));
  }
  fisher_yates(std::span<sequence>(d), g);
  return d;
}

}  // namespace detail

/// The embedded workload `name` (one of `names`) generated from `seed`.
/// Throws `dcp::error(errc::invalid_argument)` listing the valid names for an unknown name.
inline dataset make(std::string_view name, std::uint64_t seed = 0) {
  if (name == "text-longtail") return detail::make_text(seed);
  for (const auto family : {video_family::opensora, video_family::cogvideox}) {
    const std::string prefix = std::string(to_string(family)) + "-zipf";
    if (!name.starts_with(prefix)) continue;
    const std::string_view suffix = name.substr(prefix.size());
    if (suffix == "1") return detail::make_video(family, 1, seed);
    if (suffix == "10") return detail::make_video(family, 10, seed);
    if (suffix == "50") return detail::make_video(family, 50, seed);
  }
  detail::unknown_workload(name);
}

inline std::string_view default_model(std::string_view name) {
  if (std::find(names.begin(), names.end(), name) == names.end()) detail::unknown_workload(name);
  if (name.starts_with("opensora-zipf")) return "stdit3-xl";
  if (name.starts_with("cogvideox-zipf")) return "cogvideox-5b";
  return "llama3-8b";
}

}  // namespace dcp::workloads
