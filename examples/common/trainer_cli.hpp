#pragma once
// What the example trainers (dcp-train-cpu, dcp-train-libtorch) share on their command lines: a
// CLI11 check for finite numbers in a range, and the check that every rank was started with the
// same arguments.

#include <cmath>
#include <cstdint>
#include <span>
#include <string>

#include <CLI/CLI.hpp>

#include <dcp/comm/comm_concepts.hpp>
#include <dcp/error.hpp>

namespace trainer_cli {

// A finite number in [lo, hi] (CLI11's Range lets NaN through: it only compares).
inline CLI::Validator finite_in(double lo, double hi) {
  return CLI::Validator(
      [lo, hi](std::string& text) -> std::string {
        double v = 0;
        if (!CLI::detail::lexical_cast(text, v) || !std::isfinite(v) || v < lo || v > hi)
          return "value " + text + " is not a finite number in [" + CLI::detail::to_string(lo) + ", " +
                 CLI::detail::to_string(hi) + "]";
        return {};
      },
      "FLOAT in [" + CLI::detail::to_string(lo) + " - " + CLI::detail::to_string(hi) + "]");
}

// Every rank must be started with the same arguments: a rank with fewer --steps, say, would leave
// the others waiting in a collective. One all-reduce before the run's first collective over
// `steps` and a digest of `arguments` (every value that shapes the run, as text): a mismatch is an
// error on every rank naming it.
template <class Comm>
void check_same_arguments(Comm& world, int steps, const std::string& arguments) {
  std::uint64_t h = 0xcbf29ce484222325ull;
  for (char c : arguments) h = (h ^ static_cast<unsigned char>(c)) * 0x100000001b3ull;
  const auto digest = static_cast<std::int64_t>(h >> 2);
  std::int64_t v[4] = {steps, -std::int64_t{steps}, digest, -digest};  // max and -min of each
  world.all_reduce(std::span<std::int64_t>(v), dcp::reduce_op::max);
  dcp::check(v[0] == -v[1], dcp::errc::mismatch, [&] {
    return "the ranks were started with different --steps (" + std::to_string(-v[1]) + " to " + std::to_string(v[0]) +
           "; this rank " + std::to_string(steps) + "); start every rank with the same arguments";
  });
  dcp::check(v[2] == -v[3], dcp::errc::mismatch, [&] {
    return "the ranks were started with different arguments (this rank: " + arguments +
           "); start every rank with the same arguments";
  });
}

}  // namespace trainer_cli
