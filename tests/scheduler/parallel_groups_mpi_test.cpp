// The scheduler's TP, EP and data-parallel communicators and its steps' Ulysses and ring groups
// under mpirun -np 4: every layout of 4 GPUs (tp, ep in {1, 2, 4}, G in {2, 4}) on MPI processes.
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <vector>

#include <dcp/comm/mpi.hpp>

#include "parallel_groups_check.hpp"

#include <dcp_test/mpi_main.hpp>

namespace {

TEST(MpiParallelGroups, EveryLayoutOfTheWorld) {
  auto world = dcp::mpi_comm::world(std::chrono::seconds(10));
  const int n = world.size();
  std::uint64_t seed = 7;
  for (int g : {2, 4})
    for (int tp = 1; tp <= g && tp <= n; tp *= 2)
      for (int ep = 1; ep <= n / tp; ep *= 2) {
        const dcp_test::layout_case c{n, g, tp, ep};
        SCOPED_TRACE(::testing::Message() << c);
        for (const auto& b : dcp_test::check_parallel_groups(world, c, ++seed)) ADD_FAILURE() << b;
      }
}

}  // namespace

int main(int argc, char** argv) { return dcp_test::run_all_tests_under_mpi(&argc, &argv); }
