// The program every consumer project builds: price a small batch the way a user would.
//
// Interim: prices each sequence alone with selective recompute on the smallest sp that fits.
// Once <dcp/plan/dcp_planner.hpp> lands, this becomes
//   dcp::plan p = dcp::dcp_planner{}.plan(cost, batch);
//   std::cout << p.steps.size() << " steps, makespan " << p.makespan_s << " s\n";
#include <cstdlib>
#include <iostream>
#include <vector>

#include <dcp/dcp.hpp>

int main() {
  const dcp::analytic_cost cost = dcp::make_analytic_cost(dcp::models::cogvideox_5b(), dcp::devices::h200(), 8);
  const std::vector<dcp::sequence> batch{dcp::make_sequence(0, 1, 144),     // an image
                                         dcp::make_sequence(1, 13, 3600),   // 480p, 49 frames
                                         dcp::make_sequence(2, 25, 3600),   // 480p, 97 frames
                                         dcp::make_sequence(3, 25, 14400)};  // 720p-class, long
  double total_s = 0;
  for (const dcp::sequence& seq : batch) {
    bool placed = false;
    for (int sp = 1; sp <= cost.gpus() && !placed; sp *= 2) {
      if (!dcp::legal_sp(cost, sp)) continue;
      const auto k = dcp::selective_recompute{}.choose(cost, cost.load_of(seq), sp);
      if (!k) continue;
      const double t = cost.time(cost.load_of(seq), sp, *k);
      std::cout << "sequence " << seq.id << ": " << cost.tokens_of(seq) << " tokens, sp=" << sp << ", k=" << *k
                << ", " << t << " s\n";
      total_s += t * sp;
      placed = true;
    }
    if (!placed) {
      std::cerr << "sequence " << seq.id << " fits no sp\n";
      return EXIT_FAILURE;
    }
  }
  std::cout << batch.size() << " sequences, " << total_s << " GPU-seconds\n";
  return total_s > 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
