// Online calibration under mpirun: each MPI rank observes its own steps in its own shuffled
// order (one rank slow, one silent), and every rank plans the identical plan at every batch.
#include "calibration_test_support.hpp"

#include <gtest/gtest.h>

#include <vector>

#include <dcp/comm/mpi.hpp>
#include <dcp/mpi.hpp>

#include <dcp_test/mpi_main.hpp>

namespace {

TEST(mpi_calibration, every_rank_plans_the_same_plans_from_shuffled_observations) {
  auto world = dcp::mpi_comm::world(std::chrono::seconds(60));
  const int n = world.size();
  calib_test::rng g(41);
  const auto truth = calib_test::scaled_truth(calib_test::prior(n), g);
  std::vector<dcp::dataset> work;
  for (int b = 0; b < 4; ++b) work.push_back(calib_test::random_batch(g, 24, 1000 * b));
  const auto r = calib_test::calibrated_loop(world, work, truth, /*slow=*/1 % n, /*silent=*/n - 1);
  // Gather every rank's hashes on every rank and compare.
  std::vector<std::uint64_t> all(r.hashes.size() * std::size_t(n));
  world.all_gather(std::span<const std::uint64_t>(r.hashes), std::span<std::uint64_t>(all));
  for (int k = 1; k < n; ++k)
    for (std::size_t i = 0; i < r.hashes.size(); ++i) EXPECT_EQ(all[std::size_t(k) * r.hashes.size() + i], all[i]) << "rank " << k;
  EXPECT_GT(r.state->report().time_points, 0u);
  if (n > 1) {
    EXPECT_GT(r.state->report().missing_reports, 0u);
  }
}

// The exchange over a host communicator (`plan(batch, host)`, the form an NCCL world needs):
// the world is MPI_COMM_WORLD's ranks in reverse order and the host MPI_COMM_WORLD itself; the
// plans equal those of the exchange over the world, on every rank.
TEST(mpi_calibration, exchange_over_the_host_communicator_plans_as_over_the_world) {
  auto host = dcp::mpi_comm::world(std::chrono::seconds(60));
  const int n = host.size();
  auto world = host.split(0, n - 1 - host.rank());
  calib_test::rng g(42);
  const auto truth = calib_test::scaled_truth(calib_test::prior(n), g);
  std::vector<dcp::dataset> work;
  for (int b = 0; b < 3; ++b) work.push_back(calib_test::random_batch(g, 24, 1000 * b));
  const auto a = calib_test::calibrated_loop(world, work, truth, /*slow=*/0, /*silent=*/-1, &host);
  const auto b = calib_test::calibrated_loop(world, work, truth, /*slow=*/0, /*silent=*/-1);
  EXPECT_EQ(a.hashes, b.hashes);
  EXPECT_EQ(a.state->model(), b.state->model());
  std::vector<std::uint64_t> all(a.hashes.size() * std::size_t(n));
  host.all_gather(std::span<const std::uint64_t>(a.hashes), std::span<std::uint64_t>(all));
  for (int k = 1; k < n; ++k)
    for (std::size_t i = 0; i < a.hashes.size(); ++i) EXPECT_EQ(all[std::size_t(k) * a.hashes.size() + i], all[i]) << "rank " << k;
  EXPECT_GT(a.state->report().time_points, 0u);
}

}  // namespace

int main(int argc, char** argv) { return dcp_test::run_all_tests_under_mpi(&argc, &argv); }
