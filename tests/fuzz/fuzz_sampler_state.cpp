// Fuzz target: loading a saved sampler state. Any input is either a state the sampler can
// resume from (and then every sequence of the epoch still comes exactly once: none repeated,
// none lost) or a dcp::error.

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <sstream>

#include <dcp/sample/token_budget_sampler.hpp>

#include "fuzz_input.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  dcp::fuzz::input in(data, size);
  dcp::dataset d;
  for (std::int64_t i = 0; i < 40; ++i) d.push_back(dcp::make_sequence(i, 1 + (i * 37) % 100));
  dcp::token_budget_sampler s(d, 250, 7);
  std::istringstream text(in.rest());
  // Must catch: a fuzz target has no expectations; a clean dcp::error is an accepted outcome.
  try {
    s.load(text, "fuzz");
  } catch (const dcp::error&) {
    return 0;
  }
  // A loaded state resumes at a batch boundary. The batches of its epoch before it (replayed
  // from the epoch's start with the same seed) and the batches after it hold every sequence of
  // the dataset exactly once. An epoch has at most one batch per sequence, hence the guards.
  const auto loaded = s.state();
  std::map<std::int64_t, int> count;
  auto take = [&](dcp::token_budget_sampler& from) {
    for (const auto& q : from.next().sequences) ++count[q.id];
  };
  auto replay = s;
  replay.restore({loaded.seed, loaded.epoch, 0});
  for (std::size_t guard = 0; guard <= d.size() && replay.state().epoch == loaded.epoch &&
                              replay.state().position < loaded.position;
       ++guard)
    take(replay);
  if (replay.state() != loaded) {
    std::fprintf(stderr, "replaying epoch %lld from its start does not reach position %lld\n",
                 static_cast<long long>(loaded.epoch), static_cast<long long>(loaded.position));
    std::abort();
  }
  for (std::size_t guard = 0; guard <= d.size() && s.state().epoch == loaded.epoch; ++guard) take(s);
  for (const auto& q : d) {
    const auto it = count.find(q.id);
    const int n = it == count.end() ? 0 : it->second;
    if (n != 1) {
      std::fprintf(stderr, "sequence %lld %s in epoch %lld around a load at position %lld\n",
                   static_cast<long long>(q.id), n == 0 ? "lost" : "repeated", static_cast<long long>(loaded.epoch),
                   static_cast<long long>(loaded.position));
      std::abort();
    }
  }
  if (count.size() != d.size()) {
    std::fprintf(stderr, "a sequence outside the dataset was sampled\n");
    std::abort();
  }
  return 0;
}
