#pragma once
/// \file
/// Portable randomness for everything dcp generates or shuffles: the embedded workloads
/// (DESIGN section 5) and the sampler's per-epoch permutations.
///
/// `std::*_distribution` and `std::shuffle` are implementation-defined and differ between
/// libstdc++, libc++ and MSVC, so a seed would name different data on different ranks or
/// builds. Everything here is spelled out: splitmix64 for seeding, xoshiro256** (Blackman and
/// Vigna, 2018) for the stream, rejection sampling for bounded integers, Fisher-Yates for
/// permutations, inverse-CDF for categorical draws, Box-Muller for normals. Integer outputs are
/// identical everywhere; the floating-point draws use only `std::log`, `std::sqrt`, `std::cos`,
/// which the common C libraries round correctly or within one ulp.

#include <array>
#include <bit>
#include <cmath>
#include <cstdint>
#include <numbers>
#include <ostream>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include <dcp/error.hpp>

namespace dcp {

/// One step of splitmix64 (Steele, Lea, Flood 2014): advances `state` and returns the mixed value.
constexpr std::uint64_t splitmix64(std::uint64_t& state) noexcept {
  std::uint64_t z = (state += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

/// A 64-bit seed for sub-stream `stream` of `seed` (e.g. the permutation of epoch `stream`):
/// distinct streams of one seed, and one stream of distinct seeds, are unrelated.
constexpr std::uint64_t derive_seed(std::uint64_t seed, std::uint64_t stream) noexcept {
  std::uint64_t a = seed;
  std::uint64_t b = stream ^ 0x6a09e667f3bcc908ULL;  // keeps (s, 0) apart from plain s
  return splitmix64(a) ^ std::rotl(splitmix64(b), 17);
}

/// xoshiro256**: a small, fast, well-tested 64-bit generator with identical output on every
/// platform. A regular value; copying it forks the stream.
class xoshiro256ss {
 public:
  using result_type = std::uint64_t;

  /// Seeds the 256-bit state from `seed` with splitmix64, as the authors recommend.
  constexpr explicit xoshiro256ss(std::uint64_t seed = 0) noexcept {
    std::uint64_t sm = seed;
    for (auto& w : s_) w = splitmix64(sm);
  }

  static constexpr result_type min() noexcept { return 0; }
  static constexpr result_type max() noexcept { return ~result_type{0}; }

  /// The next 64 random bits.
  constexpr result_type operator()() noexcept {
    const std::uint64_t result = std::rotl(s_[1] * 5, 7) * 9;
    const std::uint64_t t = s_[1] << 17;
    s_[2] ^= s_[0];
    s_[3] ^= s_[1];
    s_[1] ^= s_[2];
    s_[0] ^= s_[3];
    s_[2] ^= t;
    s_[3] = std::rotl(s_[3], 45);
    return result;
  }

  friend constexpr bool operator==(const xoshiro256ss&, const xoshiro256ss&) = default;
  friend std::ostream& operator<<(std::ostream& os, const xoshiro256ss& g) {
    return os << "xoshiro256ss{" << g.s_[0] << ", " << g.s_[1] << ", " << g.s_[2] << ", " << g.s_[3] << "}";
  }

 private:
  std::array<std::uint64_t, 4> s_{};
};

/// Uniform integer in [0, n), unbiased (rejects the low `2^64 mod n` values). Requires n > 0.
template <class Gen>
constexpr std::uint64_t uniform_below(Gen& g, std::uint64_t n) {
  check(n > 0, errc::invalid_argument, [] { return std::string("uniform_below(0): the range must be non-empty"); });
  const std::uint64_t threshold = (0 - n) % n;  // 2^64 mod n
  for (;;) {
    const std::uint64_t r = g();
    if (r >= threshold) return r % n;
  }
}

/// Uniform double in [0, 1) with 53 random bits.
template <class Gen>
constexpr double uniform01(Gen& g) noexcept {
  return static_cast<double>(g() >> 11) * 0x1.0p-53;
}

/// Standard normal draw by Box-Muller (the cosine branch; the sine branch is discarded so each
/// draw consumes exactly two 64-bit outputs).
template <class Gen>
double standard_normal(Gen& g) noexcept {
  const double u1 = 1.0 - uniform01(g);  // (0, 1]: log stays finite
  const double u2 = uniform01(g);
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
}

/// Shuffles `v` in place by Fisher-Yates (Durstenfeld's variant, from the back).
template <class T, class Gen>
constexpr void fisher_yates(std::span<T> v, Gen& g) {
  for (std::size_t i = v.size(); i > 1; --i) {
    const auto j = static_cast<std::size_t>(uniform_below(g, i));
    using std::swap;
    swap(v[i - 1], v[j]);
  }
}

/// A uniformly random permutation of 0..n-1, from `seed` alone.
inline std::vector<std::int64_t> random_permutation(std::int64_t n, std::uint64_t seed) {
  check(n >= 0, errc::invalid_argument,
        [&] { return "random_permutation: size " + std::to_string(n) + " must not be negative"; });
  std::vector<std::int64_t> p(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) p[static_cast<std::size_t>(i)] = i;
  xoshiro256ss g(seed);
  fisher_yates(std::span<std::int64_t>(p), g);
  return p;
}

/// Inverse-CDF sampler of a categorical distribution over 0..k-1 with given non-negative weights.
/// A regular value; the cumulative table is built once.
class categorical {
 public:
  categorical() = default;
  /// Throws a `dcp::error` unless every weight is finite and non-negative and their sum positive.
  explicit categorical(std::span<const double> weights) {
    cumulative_.reserve(weights.size());
    double total = 0;
    for (std::size_t i = 0; i < weights.size(); ++i) {
      check(std::isfinite(weights[i]) && weights[i] >= 0, errc::invalid_argument, [&] {
        return "categorical: weight " + std::to_string(i) + " = " + std::to_string(weights[i]) +
               " must be finite and non-negative";
      });
      total += weights[i];
      cumulative_.push_back(total);
    }
    check(total > 0, errc::invalid_argument,
          [] { return std::string("categorical: weights must have a positive sum"); });
  }

  /// Number of categories.
  std::size_t size() const noexcept { return cumulative_.size(); }
  /// Probability of category `i`.
  double probability(std::size_t i) const noexcept {
    const double lo = i == 0 ? 0.0 : cumulative_[i - 1];
    return (cumulative_[i] - lo) / cumulative_.back();
  }

  /// One draw: the first category whose cumulative weight exceeds u * total, u uniform in [0, 1).
  template <class Gen>
  std::size_t operator()(Gen& g) const noexcept {
    const double x = uniform01(g) * cumulative_.back();
    std::size_t lo = 0, hi = cumulative_.size() - 1;  // answer in [lo, hi]
    while (lo < hi) {
      const std::size_t mid = lo + (hi - lo) / 2;
      if (cumulative_[mid] > x) hi = mid;
      else lo = mid + 1;
    }
    return lo;
  }

  friend bool operator==(const categorical&, const categorical&) = default;
  friend std::ostream& operator<<(std::ostream& os, const categorical& c) {
    os << "categorical{";
    for (std::size_t i = 0; i < c.size(); ++i) os << (i ? ", " : "") << c.probability(i);
    return os << "}";
  }

 private:
  std::vector<double> cumulative_;
};

}  // namespace dcp
