// mpi_comm under mpirun -np 4 (every test is collective: all ranks run all tests in order).
#include <dcp_test/mpi_main.hpp>
#include <dcp_test/support.hpp>
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include <dcp/comm/dsp.hpp>
#include <dcp/comm/mpi.hpp>
#include <dcp/comm/ulysses.hpp>
#include <dcp/group/contiguous_groups.hpp>
#include <dcp/group_cache.hpp>
#include <dcp/layout.hpp>

#include "../comm/communicator_conformance.hpp"

namespace {

using namespace std::chrono_literals;
using clock_type = std::chrono::steady_clock;

dcp::mpi_comm world() { return dcp::mpi_comm::world(10s); }

TEST(MpiComm, WorldBasics) {
  auto w = world();
  int size = 0, rank = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  EXPECT_TRUE(w.valid());
  EXPECT_TRUE(w.owning());
  EXPECT_EQ(w.size(), size);
  EXPECT_EQ(w.rank(), rank);
  EXPECT_TRUE(w.checked());
  auto b = dcp::mpi_comm::borrow(MPI_COMM_WORLD);
  EXPECT_FALSE(b.owning());
  EXPECT_EQ(b.size(), size);
  dcp::mpi_comm moved(std::move(w));
  EXPECT_TRUE(moved.valid());
  EXPECT_FALSE(w.valid());  // NOLINT(bugprone-use-after-move): moved-from is null by contract
}

TEST(MpiComm, ConformanceChecked) {
  auto w = world();
  dcp_test::run_conformance(w, 3);
}

TEST(MpiComm, ConformanceUnchecked) {
  auto w = world();
  w.set_checked(false);
  dcp_test::run_conformance(w, 5);
}

TEST(MpiComm, ConformanceOnSplitGroups) {
  auto w = world();
  auto pairs = w.split(w.rank() / 2, w.rank());
  ASSERT_EQ(pairs.size(), std::min(2, w.size()));
  dcp_test::run_conformance(pairs, 9);
  auto none = w.split(dcp::no_color, 0);
  EXPECT_FALSE(none.valid());
  EXPECT_EQ(none.size(), 0);
  EXPECT_THROW(none.barrier(), dcp::error);
}

TEST(MpiComm, UlyssesAndDspRoundTrips) {
  auto w = world();
  const int sp = w.size(), r = w.rank();
  for (std::int64_t tokens : {0, 3, 10, 17}) {
    const dcp::ulysses_shape s{tokens, 2 * sp, 3};
    std::vector<float> in(std::size_t(dcp::ulysses_token_shard_size(s, sp, r)));
    for (std::size_t k = 0; k < in.size(); ++k) in[k] = float(r * 100000 + int(k));
    std::vector<float> heads(std::size_t(dcp::ulysses_head_shard_size(s, sp))), back(in.size());
    dcp::ulysses_to_head_shards(w, s, std::span<const float>(in), std::span<float>(heads));
    dcp::ulysses_to_token_shards(w, s, std::span<const float>(heads), std::span<float>(back));
    EXPECT_EQ(back, in);
  }
  for (auto s : {dcp::dsp_shape{1, 7, 2}, dcp::dsp_shape{9, 5, 3}, dcp::dsp_shape{4, 64, 1}}) {
    std::vector<double> in(std::size_t(dcp::dsp_spatial_shard_size(s, sp, r)));
    for (std::size_t k = 0; k < in.size(); ++k) in[k] = r * 1e6 + double(k);
    std::vector<double> temporal(std::size_t(dcp::dsp_temporal_shard_size(s, sp, r))), back(in.size());
    dcp::dsp_to_temporal_shards(w, s, std::span<const double>(in), std::span<double>(temporal));
    dcp::dsp_to_spatial_shards(w, s, std::span<const double>(temporal), std::span<double>(back));
    EXPECT_EQ(back, in);
  }
}

TEST(MpiComm, GroupCacheMembership) {
  auto w = world();
  dcp::group_cache cache(w, dcp::buddy_groups{w.size(), 2});
  cache.prepare_all();
  for (int sp = 1; sp <= w.size(); sp *= 2) {
    auto& c = cache.comm_for_size(sp);
    ASSERT_EQ(c.size(), sp);
    const int first = w.rank() / sp * sp;
    EXPECT_EQ(c.rank(), w.rank() - first);
    std::vector<int> members(static_cast<std::size_t>(sp));
    const int me = w.rank();
    c.all_gather(std::span<const int>(&me, 1), std::span<int>(members));
    for (int i = 0; i < sp; ++i) EXPECT_EQ(members[std::size_t(i)], first + i);
  }
  EXPECT_LE(cache.entries().size(), std::size_t(std::bit_width(unsigned(w.size()))));
}

// Neighbours sending to each other at once (a pipeline's 1F1B: stage s sends a forward while
// stage s + 1 sends a backward), with messages past the eager limit: blocking sends would wait on
// each other's receive; isend returns, the receives match, and the waits end.
TEST(MpiComm, IsendCrossingNeighboursDoNotWaitOnEachOther) {
  auto w = world();
  const int peer = w.rank() ^ 1;  // pairs (0, 1), (2, 3)
  std::vector<double> out(1 << 18, double(w.rank())), in(out.size(), -1);
  auto pending = w.isend(std::span<const double>(out), peer, 7);
  w.recv(std::span<double>(in), peer, 7);
  w.wait(pending);
  EXPECT_EQ(in.front(), double(peer));
  EXPECT_EQ(in.back(), double(peer));
  EXPECT_DCP_ERROR((void)w.isend(std::span<const double>(out), w.size(), 7), dcp::errc::invalid_argument, "isend");
}

// With pipeline stages every block exists once per stage: 4 ranks as 2 stages of 2 units, each
// rank's group of 2 holds its stage's GPUs, and the fixed data-parallel group stays in the stage.
TEST(MpiComm, GroupCacheOnPipelineStages) {
  auto w = world();
  const dcp::parallel_layout layout{.gpus = w.size(), .gpus_per_node = 8, .pp = 2};
  dcp::group_cache cache(w, dcp::contiguous_groups{layout.units(), 8}, layout);
  cache.prepare({1, 2});
  auto& c = cache.comm_for_size(2);
  const int stage = w.rank() / 2;
  EXPECT_EQ(cache.stage(), stage);
  ASSERT_EQ(c.size(), 2);
  EXPECT_EQ(c.rank(), w.rank() % 2);
  std::vector<int> members(2);
  const int me = w.rank();
  c.all_gather(std::span<const int>(&me, 1), std::span<int>(members));
  EXPECT_EQ(members, (std::vector<int>{2 * stage, 2 * stage + 1}));
  auto& dp = cache.parallel_groups().data_parallel;
  ASSERT_EQ(dp.size(), 2);
  dp.all_gather(std::span<const int>(&me, 1), std::span<int>(members));
  EXPECT_EQ(members, (std::vector<int>{2 * stage, 2 * stage + 1}));
}

// Every rank throws dcp::error with `code` and `part` in its message.
template <class Fn>
void expect_error(dcp::errc code, const std::string& part, Fn fn) {
  EXPECT_TRUE(dcp_test::throws_dcp_error("fn()", fn, code, {part}));
}

TEST(MpiErrors, MismatchedSizesOnOneRankFailEveryRank) {
  auto w = world();
  const int n = w.size();
  expect_error(dcp::errc::invalid_argument, "rank 1 passed send of " + std::to_string(2 * n), [&] {
    std::vector<int> s(static_cast<std::size_t>(2 * n)), r(static_cast<std::size_t>(w.rank() == 1 ? 3 * n : 2 * n));
    w.all_to_all(std::span<const int>(s), std::span<int>(r));
  });
  expect_error(dcp::errc::invalid_argument, "all ranks must pass the same size", [&] {
    std::vector<int> s(std::size_t(w.rank() == 2 ? 5 : 4));
    w.broadcast(std::span<int>(s), 0);
  });
  expect_error(dcp::errc::invalid_argument, "rank 0 sends", [&] {
    std::vector<std::size_t> sc(std::size_t(n), 1), rc(std::size_t(n), 1);
    if (w.rank() == 0) sc[1] = 2;
    std::vector<int> s(static_cast<std::size_t>(n + (w.rank() == 0 ? 1 : 0))), r(static_cast<std::size_t>(n));
    w.all_to_all_v(std::span<const int>(s), std::span<const std::size_t>(sc), std::span<int>(r),
                   std::span<const std::size_t>(rc));
  });
  expect_error(dcp::errc::mismatch, "same order", [&] {
    if (w.rank() == 0) {
      w.barrier();
    } else {
      int x = 0;
      w.all_reduce(std::span<int>(&x, 1), dcp::reduce_op::sum);
    }
  });
  w.barrier();  // still usable
  // Unchecked: the offending rank still rejects its own call before MPI sees it.
  w.set_checked(false);
  std::vector<int> s(4), r(5);
  EXPECT_THROW(w.all_to_all(std::span<const int>(s), std::span<int>(r)), dcp::error);
  w.barrier();
}

TEST(MpiErrors, SplitColorOutOfRange) {
  auto w = world();
  expect_error(dcp::errc::invalid_argument, "rank 3 passed color 99, out of range", [&] {
    (void)w.split(w.rank() == 3 ? 99 : 0, 0);
  });
  auto ok = w.split(0, 0);  // the communicator still works
  EXPECT_EQ(ok.size(), w.size());
}

TEST(MpiErrors, UseAfterAbort) {
  auto w = world();
  auto sub = w.split(0, w.rank());
  sub.abort();
  EXPECT_TRUE(sub.aborted());
  expect_error(dcp::errc::aborted, "aborted", [&] { sub.barrier(); });
  expect_error(dcp::errc::aborted, "aborted", [&] {
    int x = 0;
    sub.send(std::span<const int>(&x, 1), 0, 0);
  });
  w.barrier();
}

TEST(MpiErrors, RecvSizeMismatchAndTimeoutNamePeer) {
  auto w = world();
  if (w.rank() == 0) {
    const int x[3] = {1, 2, 3};
    w.send(std::span<const int>(x), 1, 4);
  } else if (w.rank() == 1) {
    int y[2];
    expect_error(dcp::errc::invalid_argument, "expects 8 bytes from rank 0 (tag 4) but the message has 12",
                 [&] { w.recv(std::span<int>(y), 0, 4); });
  }
  w.barrier();
  auto c = world();
  c.set_timeout(300ms);
  if (c.rank() == 1) {
    int y = 0;
    const auto t0 = clock_type::now();
    expect_error(dcp::errc::timeout, "waiting for rank 2", [&] { c.recv(std::span<int>(&y, 1), 2, 7); });
    EXPECT_LT(clock_type::now() - t0, 3s);
    EXPECT_TRUE(c.aborted());
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

void withheld_rank_times_out(bool checked) {
  auto c = world();
  c.set_checked(checked);
  c.set_timeout(400ms);
  const int withheld = c.size() - 1;
  std::vector<double> data(16, 1.0);  // outlives the timed-out request (see mpi.hpp)
  if (c.rank() != withheld) {
    const auto t0 = clock_type::now();
    expect_error(dcp::errc::timeout, "all_reduce on rank " + std::to_string(c.rank()),
                 [&] { c.all_reduce(std::span<double>(data), dcp::reduce_op::sum); });
    const auto elapsed = clock_type::now() - t0;
    EXPECT_GE(elapsed, 400ms);
    EXPECT_LT(elapsed, 4s);
    expect_error(dcp::errc::aborted, "aborted", [&] { c.barrier(); });
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

TEST(MpiErrors, WithheldRankTimesOutChecked) { withheld_rank_times_out(true); }
TEST(MpiErrors, WithheldRankTimesOutUnchecked) { withheld_rank_times_out(false); }

}  // namespace

int main(int argc, char** argv) { return dcp_test::run_all_tests_under_mpi(&argc, &argv); }
