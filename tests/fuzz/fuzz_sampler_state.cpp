// Fuzz target: loading a saved sampler state. Any input is either a state the sampler can
// resume from (and then every sequence of the epoch still comes exactly once) or a dcp::error.

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <set>
#include <sstream>

#include <dcp/sample/token_budget_sampler.hpp>

#include "fuzz_input.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  dcp::fuzz::input in(data, size);
  dcp::dataset d;
  for (std::int64_t i = 0; i < 40; ++i) d.push_back(dcp::make_sequence(i, 1 + (i * 37) % 100));
  dcp::token_budget_sampler s(d, 250, 7);
  std::istringstream text(in.rest());
  try {
    s.load(text, "fuzz");
  } catch (const dcp::error&) {
    return 0;
  }
  // A loaded state resumes at a batch boundary: the rest of its epoch holds no repeats.
  const auto epoch = s.state().epoch;
  std::set<std::int64_t> seen;
  for (int guard = 0; guard < 100 && s.state().epoch == epoch; ++guard) {
    for (const auto& q : s.next().sequences) {
      if (!seen.insert(q.id).second) {
        std::fprintf(stderr, "sequence %lld repeated after load\n", static_cast<long long>(q.id));
        std::abort();
      }
    }
  }
  return 0;
}
