#pragma once
// The main of a GoogleTest program run under mpirun: one report (rank 0 prints; the other ranks
// still print their failures) and one outcome, the worst of every rank's.

#include <mpi.h>

#include <gtest/gtest.h>

#include <dcp/comm/mpi_environment.hpp>

namespace dcp_test {

inline int run_all_tests_under_mpi(int* argc, char*** argv) {
  dcp::mpi_environment env(argc, argv);
  ::testing::InitGoogleTest(argc, *argv);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (rank != 0) {
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
  }
  int failed = RUN_ALL_TESTS();
  MPI_Allreduce(MPI_IN_PLACE, &failed, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  return failed;
}

}  // namespace dcp_test
