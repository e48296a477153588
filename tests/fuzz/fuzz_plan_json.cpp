// Fuzz target: the plan JSON reader (dcp.plan/v2 and v1). Any input is either a plan document whose plans write
// back and read again unchanged, or a dcp::error; never a crash.

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <sstream>

#include <nlohmann/json.hpp>

#include <dcp/sim/plan_json.hpp>

#include "fuzz_input.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  dcp::fuzz::input in(data, size);
  std::istringstream text(in.rest());
  dcp::sim::plan_document doc;
  // Must catch: a fuzz target has no expectations; a clean dcp::error is an accepted outcome.
  try {
    doc = dcp::sim::read_plan_json(text, "fuzz");
  } catch (const dcp::error&) {
    return 0;
  }
  // Write the plans back with the document's header and read them again.
  nlohmann::ordered_json again = {{"format", dcp::sim::plan_format},
                                  {"method", doc.method},
                                  {"layout", dcp::sim::to_json(doc.layout)},
                                  {"memory_capacity_bytes", doc.memory_capacity_bytes},
                                  {"model", {{"name", doc.model}}},
                                  {"device", {{"name", doc.device}}}};
  if (doc.frozen) {
    again["frozen"] = nlohmann::ordered_json::array();
    for (const auto& f : *doc.frozen) again["frozen"].push_back(dcp::sim::to_json(f));
  }
  again["batches"] = nlohmann::ordered_json::array();
  for (std::size_t b = 0; b < doc.plans.size(); ++b) again["batches"].push_back(dcp::sim::batch_json(doc.plans[b], b));
  std::istringstream back(again.dump());
  auto read_back = dcp::sim::read_plan_json(back, "round trip");
  read_back.warnings = doc.warnings;  // they describe the file read (rounds inferred), not its plans
  read_back.full_layout = doc.full_layout;  // so does this (a v1 or v2 file records less of the layout)
  if (!(read_back == doc)) {
    std::fprintf(stderr, "plan JSON does not round-trip\n");
    std::abort();
  }
  return 0;
}
