// Ulysses x Ring training on local ranks (threads) equals single-process full-batch training:
// with 2 heads, Ulysses stops at u = 2, so the plans put the long sequences on u x r steps
// (4 ranks: sp = 4 = 2 x 2; 8 ranks with longer data: up to sp = 8 = 2 x 4), whose attention
// runs ring attention over the step's ring communicator; full and causal (zig-zag) attention,
// recompute planned or on every block.
// Double: parameters after one optimizer step and every step's loss to 1e-10 relative.
#include <cstdio>
#include <string>

#include <gtest/gtest.h>

#include "harness.hpp"

namespace {

using namespace equivalence;

struct ring_case {
  int ranks, ring, max_len;
};

class ring_equivalence_test : public ::testing::TestWithParam<ring_case> {};

TEST_P(ring_equivalence_test, matches_full_batch) {
  const auto [R, ring, max_len] = GetParam();
  for (const bool causal : {false, true}) {
    const setup s = ring_setup(causal, max_len);
    // Some sequence of the run needs the ring: two ranks cannot hold it even fully recomputed.
    const std::int64_t longest = longest_needing_ring(s, R);
    ASSERT_GT(longest, 0) << "no sequence infeasible without rings";
    const auto ref = run_reference<double>(s, R);
    for (const auto mode : {recompute_mode::plan, recompute_mode::all}) {
      run_result<double> got;
      dcp::local_world::run(R, [&](dcp::local_comm& world) {
        auto r = run_planned<double>(world, s, ring_policies(s, R, ring), mode);
        if (world.rank() == 0) got = std::move(r);
      });
      const std::string what = "ring R=" + std::to_string(R) + " ring<=" + std::to_string(ring) +
                               (causal ? " causal" : " full") + " mode=" + std::to_string(int(mode));
      ASSERT_EQ(got.losses.size(), ref.losses.size()) << what;
      const double dp = relative_difference(got.params_after_first, ref.params_after_first);
      double dl = 0;
      for (std::size_t i = 0; i < ref.losses.size(); ++i)
        dl = std::max(dl, relative_difference(got.losses[i], ref.losses[i]));
      EXPECT_LE(dp, 1e-10) << what << ": parameters after one step differ by " << dp;
      EXPECT_LE(dl, 1e-10) << what << ": some step's loss differs by " << dl;
      EXPECT_EQ(got.cov.max_ring, ring) << what << ": no u x r step with the largest ring in the plans";
      EXPECT_GT(got.cov.max_checkpointed, 0) << what << ": no recompute";
      std::printf("%-38s max sp %d ring %d, longest ring-only sequence %lld tokens: params %.2e loss %.2e\n",
                  what.c_str(), got.cov.max_sp, got.cov.max_ring, static_cast<long long>(longest), dp, dl);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(usp, ring_equivalence_test, ::testing::Values(ring_case{4, 2, 200}, ring_case{8, 4, 400}),
                         [](const auto& param_info) {
                           return "R" + std::to_string(param_info.param.ranks) + "_ring" +
                                  std::to_string(param_info.param.ring);
                         });

}  // namespace
