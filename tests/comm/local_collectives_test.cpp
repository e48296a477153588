// Every collective of local_comm against a reference, on 1..8 ranks.
#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include <dcp/comm/local.hpp>

#include "communicator_conformance.hpp"

namespace {

using namespace std::chrono_literals;

class LocalComm : public ::testing::TestWithParam<int> {};

TEST_P(LocalComm, Conformance) {
  const int n = GetParam();
  std::atomic<int> failures = 0;
  dcp::local_world::run(
      n,
      [&](dcp::local_comm& c) {
        EXPECT_EQ(c.size(), n);
        dcp_test::run_conformance(c, unsigned(n) * 7 + 1);
        if (::testing::Test::HasFailure()) ++failures;
      },
      {.timeout = 20s});
  EXPECT_EQ(failures, 0);
}

TEST_P(LocalComm, NestedSplitAndAbortStaysInGroup) {
  const int n = GetParam();
  dcp::local_world::run(
      n,
      [&](dcp::local_comm& c) {
        auto halves = c.split(c.rank() % 2, c.rank());
        auto again = halves.split(0, -halves.rank());  // reversed order
        ASSERT_EQ(again.size(), halves.size());
        EXPECT_EQ(again.rank(), halves.size() - 1 - halves.rank());
        int x = c.rank(), sum = 0;
        again.all_reduce(std::span<const int>(&x, 1), std::span<int>(&sum, 1), dcp::reduce_op::sum);
        int want = 0;
        for (int i = c.rank() % 2; i < n; i += 2) want += i;
        EXPECT_EQ(sum, want);
        // Aborting one group leaves the world usable.
        if (c.rank() % 2 == 1) halves.abort();
        c.barrier();
        EXPECT_EQ(halves.aborted(), c.rank() % 2 == 1);
        EXPECT_FALSE(c.aborted());
      },
      {.timeout = 20s});
}

INSTANTIATE_TEST_SUITE_P(Ranks, LocalComm, ::testing::Range(1, 9));

TEST(LocalComm, DataReallyMovesBetweenThreads) {
  // Each rank's buffer lives on its own thread's stack: the result can only come through the hub.
  std::vector<std::thread::id> ids(4);
  dcp::local_world::run(4, [&](dcp::local_comm& c) {
    ids[c.rank()] = std::this_thread::get_id();
    std::array<std::uint64_t, 4> mine{}, all{};
    mine.fill(std::uint64_t(c.rank()) << 32 | 0xABCD);
    std::array<std::uint64_t, 16> gathered{};
    c.all_to_all(std::span<const std::uint64_t>(mine), std::span<std::uint64_t>(all));
    c.all_gather(std::span<const std::uint64_t>(all), std::span<std::uint64_t>(gathered));
    for (int i = 0; i < 16; ++i) EXPECT_EQ(gathered[i], std::uint64_t(i % 4) << 32 | 0xABCD);
  });
  std::sort(ids.begin(), ids.end());
  EXPECT_EQ(std::unique(ids.begin(), ids.end()), ids.end()) << "every rank must run on its own thread";
}

TEST(LocalComm, ManyRoundsStayInStep) {
  dcp::local_world::run(5, [](dcp::local_comm& c) {
    for (int round = 0; round < 300; ++round) {
      long v = round + c.rank(), s = 0;
      c.all_reduce(std::span<const long>(&v, 1), std::span<long>(&s, 1), dcp::reduce_op::sum);
      ASSERT_EQ(s, 5L * round + 10);
    }
  });
}

}  // namespace
