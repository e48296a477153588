#pragma once
/// \file
/// Synthetic token sequences for the CPU example: lengths log-uniform in [min_len, max_len] and
/// tokens that follow a per-sequence rule (next = 3 * token + key mod V, with 10% noise), so a
/// model that reads its context learns. Everything is a pure function of (seed, id): every rank
/// regenerates the tokens of any sequence without communication.

#include <cmath>
#include <cstdint>
#include <vector>

#include <dcp/error.hpp>
#include <dcp/sequence.hpp>

namespace cpu_train {

/// A portable 64-bit mixer (splitmix64 finaliser).
constexpr std::uint64_t mix64(std::uint64_t z) noexcept {
  z += 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

struct synthetic_data {
  int vocab = 32;
  int min_len = 8;
  int max_len = 2048;
  std::uint64_t seed = 0;

  /// `count` sequences with ids 0..count-1.
  dcp::dataset make(int count) const {
    dcp::check(min_len >= 2 && max_len >= min_len && count > 0, dcp::errc::invalid_argument, [&] {
      return "synthetic_data: need 2 <= min_len <= max_len and count > 0; got min_len = " + std::to_string(min_len) +
             ", max_len = " + std::to_string(max_len) + ", count = " + std::to_string(count);
    });
    dcp::dataset out;
    const double lo = std::log(double(min_len)), hi = std::log(double(max_len) + 1);
    for (int i = 0; i < count; ++i) {
      const double u = double(mix64(seed ^ mix64(std::uint64_t(i) * 2 + 1)) >> 11) * 0x1.0p-53;
      const auto n = std::int64_t(std::floor(std::exp(lo + u * (hi - lo))));
      out.push_back(dcp::make_sequence(i, std::min<std::int64_t>(std::max<std::int64_t>(n, min_len), max_len)));
    }
    return out;
  }

  /// Tokens 0..n of sequence `id` (n + 1 of them: inputs are [0, n), targets [1, n]).
  std::vector<int> tokens(std::int64_t id, std::int64_t n) const {
    std::uint64_t st = mix64(seed * 0x632be59bd9b4e019ull ^ mix64(std::uint64_t(id)));
    auto next = [&st] { return st = mix64(st); };
    const int key = 1 + int(next() % std::uint64_t(vocab - 1));
    std::vector<int> t(size_t(n + 1));
    t[0] = int(next() % std::uint64_t(vocab));
    for (std::int64_t i = 1; i <= n; ++i) {
      const std::uint64_t r = next();
      t[size_t(i)] = (r % 10 == 0) ? int((r >> 8) % std::uint64_t(vocab)) : (3 * t[size_t(i - 1)] + key) % vocab;
    }
    return t;
  }
};

}  // namespace cpu_train
