// The program every consumer project builds: plan one small global batch the way a user would,
// and check the plan's basic promises.
#include <cstdlib>
#include <iostream>
#include <vector>

#include <dcp/dcp.hpp>

int main() {
  const dcp::analytic_cost cost =
      dcp::make_analytic_cost(dcp::models::cogvideox_5b(), dcp::devices::h200_analytic(), 8);
  const std::vector<dcp::sequence> batch{dcp::make_sequence(0, 1, 144),      // an image
                                         dcp::make_sequence(1, 1, 144),      // another
                                         dcp::make_sequence(2, 13, 3600),    // 480p, 49 frames
                                         dcp::make_sequence(3, 25, 3600),    // 480p, 97 frames
                                         dcp::make_sequence(4, 25, 14400)};  // long
  const dcp::plan p = dcp::dcp_planner{}.plan(cost, batch);
  std::cout << p.steps.size() << " steps, makespan " << p.makespan_s << " s, lower bound " << p.lower_bound_s << " s\n";
  std::size_t planned = 0;
  for (const auto& step : p.steps) planned += step.sequences.size();
  if (planned != batch.size() || p.steps.empty() || !(p.makespan_s >= p.lower_bound_s) || !(p.lower_bound_s > 0)) {
    std::cerr << "bad plan: " << planned << " of " << batch.size() << " sequences planned\n";
    return EXIT_FAILURE;
  }
  return EXIT_SUCCESS;
}
