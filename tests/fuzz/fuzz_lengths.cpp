// Fuzz target: the lengths-file reader. Any input is either a dataset of valid sequences that
// round-trips through write_lengths, or a dcp::error; never a crash.

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <sstream>

#include <dcp/workload/lengths_file.hpp>

#include "fuzz_input.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  dcp::fuzz::input in(data, size);
  std::istringstream text(in.rest());
  dcp::dataset d;
  // Must catch: a fuzz target has no expectations; a clean dcp::error is an accepted outcome.
  try {
    d = dcp::read_lengths(text, "fuzz");
  } catch (const dcp::error&) {
    return 0;
  }
  for (const auto& s : d) dcp::validate(s);  // throws (and so aborts the fuzzer) if invalid
  std::stringstream again;
  dcp::write_lengths(again, d);
  if (dcp::read_lengths(again, "round trip") != d) {
    std::fprintf(stderr, "lengths file does not round-trip\n");
    std::abort();
  }
  return 0;
}
