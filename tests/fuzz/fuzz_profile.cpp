// Fuzz target: the dcp.profile/v1 loader. Any input is either a valid profile table that
// round-trips through write_profile and prices steps with finite, non-negative numbers, or a
// dcp::error; never a crash.

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <sstream>

#include <dcp/cost/profiled_cost.hpp>
#include <dcp/profile/profile_json.hpp>

#include "fuzz_input.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  dcp::fuzz::input in(data, size);
  std::istringstream text(in.rest());
  dcp::profile_table t;
  // Must catch: a fuzz target has no expectations; a clean dcp::error is an accepted outcome.
  try {
    t = dcp::read_profile(text, "fuzz");
  } catch (const dcp::error&) {
    return 0;
  }
  std::stringstream again;
  dcp::write_profile(again, t);
  if (!(dcp::read_profile(again, "round trip") == t)) {
    std::fprintf(stderr, "profile does not round-trip\n");
    std::abort();
  }
  const dcp::profiled_cost cost(t);
  for (std::int64_t n : {1, 100, 10000}) {
    const auto load = cost.load_of(dcp::make_sequence(0, n));
    for (int sp = 1; sp <= 8; sp *= 2) {
      const double time = cost.time(load, sp, 0), memory = cost.memory(load, sp, 0);
      if (std::isnan(time) || std::isnan(memory) || time < 0 || memory < 0) {
        std::fprintf(stderr, "profiled cost gives time %g, memory %g\n", time, memory);
        std::abort();
      }
    }
  }
  return 0;
}
