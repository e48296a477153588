// The equivalence proof across MPI processes (run under mpiexec -n 4): plans from dcp, bucket and
// packed, recompute on and off, equal single-process full-batch training (computed by every
// rank alone) to 1e-10 relative in double and 1e-5 in float; and Ulysses x Ring plans likewise.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>

#include <dcp/comm/mpi.hpp>

#include "harness.hpp"

namespace {

using namespace equivalence;

dcp::mpi_comm* world_ptr = nullptr;

template <class T>
void expect_equal(const run_result<T>& got, const run_result<T>& ref, double tol, const std::string& what) {
  const double dp = relative_difference(got.params_after_first, ref.params_after_first);
  double dl = 0;
  ASSERT_EQ(got.losses.size(), ref.losses.size());
  for (std::size_t i = 0; i < ref.losses.size(); ++i) dl = std::max(dl, relative_difference(got.losses[i], ref.losses[i]));
  EXPECT_LE(dp, tol) << what;
  EXPECT_LE(dl, tol) << what;
  if (world_ptr->rank() == 0) std::printf("mpi %-34s params %.2e  max loss %.2e\n", what.c_str(), dp, dl);
}

TEST(mpi_equivalence, four_ranks_all_planners) {
  auto& world = *world_ptr;
  ASSERT_EQ(world.size(), 4) << "run under mpiexec -n 4";
  const setup s;
  const int R = world.size();
  const auto ref = run_reference<double>(s, R);
  int max_sp = 1;
  for (auto mode : {recompute_mode::plan, recompute_mode::off}) {
    const auto got = run_planned<double>(world, s, dcp::default_policies{}, mode);
    max_sp = std::max(max_sp, got.cov.max_sp);
    expect_equal(got, ref, 1e-10, "dcp mode=" + std::to_string(int(mode)));
  }
  EXPECT_GT(max_sp, 1);
  dcp::policies<dcp::bucket_planner> b;
  b.planner = tuned<dcp::bucket_planner>(s, R);
  dcp::policies<dcp::packed_planner> p;
  p.planner = tuned<dcp::packed_planner>(s, R);
  for (auto mode : {recompute_mode::plan, recompute_mode::off}) {
    expect_equal(run_planned<double>(world, s, b, mode), ref, 1e-10, "bucket mode=" + std::to_string(int(mode)));
    expect_equal(run_planned<double>(world, s, p, mode), ref, 1e-10, "packed mode=" + std::to_string(int(mode)));
  }
  setup f = s;
  f.opt = {optimizer_kind::sgd, 0.5};  // float with SGD (see the local suite for why not Adam)
  const auto ref_f = run_reference<float>(f, R);
  expect_equal(run_planned<float>(world, f, dcp::default_policies{}, recompute_mode::plan), ref_f, 1e-5, "dcp float");
}

// Ulysses x Ring across processes: 2 heads cap Ulysses at 2, so the long sequences run on
// sp = 4 = 2 x 2 with ring attention over the step's ring communicator.
TEST(mpi_equivalence, four_ranks_ulysses_x_ring) {
  auto& world = *world_ptr;
  ASSERT_EQ(world.size(), 4) << "run under mpiexec -n 4";
  for (const bool causal : {false, true}) {
    const setup s = ring_setup(causal);
    ASSERT_GT(longest_needing_ring(s, 4), 0) << "no sequence infeasible without rings";
    const auto got = run_planned<double>(world, s, ring_policies(s, 4, 2), recompute_mode::plan);
    EXPECT_EQ(got.cov.max_ring, 2) << "no u x r step in the plans";
    expect_equal(got, run_reference<double>(s, 4), 1e-10, std::string("dcp ring=2 ") + (causal ? "causal" : "full"));
  }
}

}  // namespace

int main(int argc, char** argv) {
  dcp::mpi_environment env(&argc, &argv);
  ::testing::InitGoogleTest(&argc, argv);
  int rc = 0;
  {
    auto world = dcp::mpi_comm::world();
    world_ptr = &world;
    if (world.rank() != 0) {
      auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
      delete listeners.Release(listeners.default_result_printer());
    }
    rc = RUN_ALL_TESTS();
    // Every rank must agree on the outcome.
    int v[1] = {rc};
    world.all_reduce(std::span<int>(v), dcp::reduce_op::max);
    rc = v[0];
    world_ptr = nullptr;
  }
  return rc;
}
