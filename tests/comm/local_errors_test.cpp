// Bad input on local_comm: a clear dcp::error on every rank, within the timeout, never a hang.
#include <dcp_test/support.hpp>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <string>
#include <thread>

#include <dcp/comm/local.hpp>

namespace {

using namespace std::chrono_literals;
using clock_type = std::chrono::steady_clock;

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// Runs `fn` on n ranks; every rank must throw dcp::error with `code` and a message containing `part`.
template <class Fn>
void expect_error_on_every_rank(int n, dcp::errc code, const std::string& part, Fn fn) {
  std::atomic<int> thrown = 0;
  dcp::local_world::run(
      n,
      [&](dcp::local_comm& c) {
        const auto r = dcp_test::throws_dcp_error("fn(c)", [&] { fn(c); }, code, {part});
        if (r) ++thrown;
        else ADD_FAILURE() << "rank " << c.rank() << ": " << r.message();
        // The communicator stays usable after a rejected call.
        c.barrier();
      },
      {.timeout = 10s});
  EXPECT_EQ(thrown, n);
}

TEST(LocalErrors, AllToAllSizesMismatchOnOneRank) {
  expect_error_on_every_rank(4, dcp::errc::invalid_argument, "rank 2 passed send of 8 elements and recv of 12",
                             [](dcp::local_comm& c) {
                               std::vector<int> s(8), r(c.rank() == 2 ? 12 : 8);
                               c.all_to_all(std::span<const int>(s), std::span<int>(r));
                             });
}

TEST(LocalErrors, AllToAllSizesDifferAcrossRanks) {
  expect_error_on_every_rank(3, dcp::errc::invalid_argument, "rank 0 sends 6 elements but rank 1 sends 9",
                             [](dcp::local_comm& c) {
                               std::vector<int> s(c.rank() == 1 ? 9 : 6), r(s.size());
                               c.all_to_all(std::span<const int>(s), std::span<int>(r));
                             });
}

TEST(LocalErrors, AllGatherRecvTooSmall) {
  expect_error_on_every_rank(4, dcp::errc::invalid_argument, "recv must hold size() * send = 12",
                             [](dcp::local_comm& c) {
                               std::vector<float> s(3), r(10);
                               c.all_gather(std::span<const float>(s), std::span<float>(r));
                             });
}

TEST(LocalErrors, AllReduceMixedTypesOrSizes) {
  expect_error_on_every_rank(2, dcp::errc::invalid_argument, "same element type", [](dcp::local_comm& c) {
    if (c.rank() == 0) {
      std::vector<double> d(4);
      c.all_reduce(std::span<double>(d), dcp::reduce_op::sum);
    } else {
      std::vector<float> f(4);
      c.all_reduce(std::span<float>(f), dcp::reduce_op::sum);
    }
  });
  expect_error_on_every_rank(2, dcp::errc::invalid_argument, "rank 1 passed send of 5 elements",
                             [](dcp::local_comm& c) {
                               std::vector<int> d(c.rank() == 1 ? 5 : 4);
                               c.all_reduce(std::span<int>(d), dcp::reduce_op::max);
                             });
}

TEST(LocalErrors, AllToAllVCountsDisagree) {
  expect_error_on_every_rank(2, dcp::errc::invalid_argument, "rank 0 sends 3 elements to rank 1, which expects 2",
                             [](dcp::local_comm& c) {
                               std::vector<std::size_t> sc{1, 3}, rc{1, 2};
                               if (c.rank() == 1) sc = {2, 1}, rc = {2, 1};
                               std::vector<int> s(c.rank() == 1 ? 3 : 4), r(3);
                               c.all_to_all_v(std::span<const int>(s), std::span<const std::size_t>(sc),
                                              std::span<int>(r), std::span<const std::size_t>(rc));
                             });
  expect_error_on_every_rank(2, dcp::errc::invalid_argument, "counts summing to", [](dcp::local_comm& c) {
    std::vector<std::size_t> sc{1, 1}, rc{1, 1};
    std::vector<int> s(5), r(2);
    c.all_to_all_v(std::span<const int>(s), std::span<const std::size_t>(sc), std::span<int>(r),
                   std::span<const std::size_t>(rc));
  });
}

TEST(LocalErrors, BroadcastRootsDisagree) {
  expect_error_on_every_rank(3, dcp::errc::invalid_argument, "same root", [](dcp::local_comm& c) {
    std::vector<int> d(2);
    c.broadcast(std::span<int>(d), c.rank() == 2 ? 1 : 0);
  });
  expect_error_on_every_rank(3, dcp::errc::invalid_argument, "root 3", [](dcp::local_comm& c) {
    std::vector<int> d(2);
    c.broadcast(std::span<int>(d), 3);
  });
}

TEST(LocalErrors, CollectivesCalledOutOfOrder) {
  expect_error_on_every_rank(2, dcp::errc::mismatch, "rank 0 called barrier but rank 1 called all_gather",
                             [](dcp::local_comm& c) {
                               if (c.rank() == 0) {
                                 c.barrier();
                               } else {
                                 int x = 0, y[2];
                                 c.all_gather(std::span<const int>(&x, 1), std::span<int>(y));
                               }
                             });
}

TEST(LocalErrors, SplitColorOutOfRange) {
  expect_error_on_every_rank(4, dcp::errc::invalid_argument, "rank 3 passed color 4, out of range [0, 4)",
                             [](dcp::local_comm& c) { (void)c.split(c.rank() == 3 ? 4 : 0, 0); });
}

TEST(LocalErrors, UseAfterAbort) {
  expect_error_on_every_rank(3, dcp::errc::aborted, "aborted by rank 1", [](dcp::local_comm& c) {
    auto sub = c.split(0, c.rank());
    if (sub.rank() == 1) sub.abort();
    c.barrier();  // the abort happened before anyone uses `sub` again
    EXPECT_TRUE(sub.aborted());
    std::vector<int> d(3);
    sub.all_reduce(std::span<int>(d), dcp::reduce_op::sum);
  });
  // Point to point too.
  dcp::local_world::run(2, [](dcp::local_comm& c) {
    c.barrier();
    if (c.rank() == 0) c.abort();
    int x = 0;
    if (c.rank() == 0) {
      EXPECT_THROW(c.send(std::span<const int>(&x, 1), 1, 0), dcp::error);
    }
  });
}

TEST(LocalErrors, AbortWakesWaitingPeersAtOnce) {
  const auto t0 = clock_type::now();
  dcp::local_world::run(
      3,
      [&](dcp::local_comm& c) {
        if (c.rank() == 2) {
          std::this_thread::sleep_for(50ms);
          c.abort();
          return;
        }
        EXPECT_DCP_ERROR(c.barrier(), dcp::errc::aborted);
      },
      {.timeout = 30s});
  EXPECT_LT(clock_type::now() - t0, 5s) << "an abort must not wait for the timeout";
}

TEST(LocalErrors, WithheldRankTimesOutWithinDeadline) {
  const auto timeout = 200ms;
  std::mutex m;
  std::vector<std::string> messages;
  std::atomic<int> timeouts = 0, aborted = 0;
  const auto t0 = clock_type::now();
  EXPECT_THROW(dcp::local_world::run(
                   4,
                   [&](dcp::local_comm& c) {
                     if (c.rank() == 3) return;  // withheld: never joins
                     std::vector<double> d(8, 1.0);
                     // Must catch: a rank either times out or is aborted by another's timeout, which
                     // one is a race; each outcome is counted and rethrown so run() ends in an error.
                     try {
                       c.all_reduce(std::span<double>(d), dcp::reduce_op::sum);
                     } catch (const dcp::error& e) {
                       if (e.code() == dcp::make_error_code(dcp::errc::timeout)) ++timeouts;
                       if (e.code() == dcp::make_error_code(dcp::errc::aborted)) ++aborted;
                       std::lock_guard lk(m);
                       messages.push_back(e.what());
                       throw;
                     }
                   },
                   {.timeout = timeout, .abort_on_error = false}),
               dcp::error);
  const auto elapsed = clock_type::now() - t0;
  EXPECT_LT(elapsed, timeout + 2s);
  EXPECT_GE(elapsed, timeout);
  EXPECT_GE(timeouts, 1);
  EXPECT_EQ(timeouts + aborted, 3);
  bool named = false;
  for (const auto& s : messages) named = named || (contains(s, "all_reduce") && contains(s, "waiting for rank 3 of 4"));
  EXPECT_TRUE(named) << (messages.empty() ? "" : messages.front());
}

TEST(LocalErrors, FirstErrorIsRethrown) {
  try {
    dcp::local_world::run(
        3,
        [](dcp::local_comm& c) {
          if (c.rank() == 1) throw std::runtime_error("rank 1 failed first");
          c.barrier();  // aborted by the failure of rank 1
        },
        {.timeout = 30s});
    FAIL() << "no exception";
  } catch (const std::runtime_error& e) {
    EXPECT_STREQ(e.what(), "rank 1 failed first");
  }
}

TEST(LocalErrors, RecvTimesOutNamingPeerAndChecksSize) {
  dcp::local_world::run(
      2,
      [](dcp::local_comm& c) {
        if (c.rank() == 0) {
          int x[3] = {1, 2, 3};
          c.send(std::span<const int>(x), 1, 5);
          c.barrier();
          return;
        }
        int y[2];
        EXPECT_DCP_ERROR(c.recv(std::span<int>(y), 0, 5), dcp::errc::invalid_argument,
                         "expects 8 bytes from rank 0 (tag 5) but the message has 12");
        c.barrier();
      },
      {.timeout = 10s});
  dcp::local_world::run(
      2,
      [](dcp::local_comm& c) {
        if (c.rank() == 0) return;
        int y = 0;
        const auto t0 = clock_type::now();
        EXPECT_DCP_ERROR(c.recv(std::span<int>(&y, 1), 0, 9), dcp::errc::timeout, "waiting for rank 0 (tag 9)");
        EXPECT_LT(clock_type::now() - t0, 3s);
        EXPECT_TRUE(c.aborted());
      },
      {.timeout = 150ms});
}

TEST(LocalErrors, BadArguments) {
  EXPECT_THROW(dcp::local_world::run(0, [](dcp::local_comm&) {}), dcp::error);
  EXPECT_THROW(dcp::local_hub::make(0), dcp::error);
  EXPECT_THROW(dcp::local_comm(dcp::local_hub::make(2), 2), dcp::error);
  dcp::local_world::run(2, [](dcp::local_comm& c) {
    int x = 0;
    EXPECT_THROW(c.send(std::span<const int>(&x, 1), 2, 0), dcp::error);
    EXPECT_THROW(c.send(std::span<const int>(&x, 1), 1, -1), dcp::error);
    EXPECT_THROW(c.set_timeout(0ms), dcp::error);
  });
}

}  // namespace
