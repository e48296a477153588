// Compile-time checks of the communicator concept: the shipped models satisfy it, look-alikes
// without the opt-in do not.
#include <gtest/gtest.h>

#include <dcp/comm/comm_concepts.hpp>
#include <dcp/comm/local.hpp>

namespace {

// Every expression of the concept, but no opt-in tag.
struct look_alike {
  static constexpr bool host_memory = true;
  bool valid() const { return true; }
  int rank() const { return 0; }
  int size() const { return 1; }
  look_alike split(int, int) { return {}; }
  template <class T> void all_to_all(std::span<const T>, std::span<T>) {}
  template <class T>
  void all_to_all_v(std::span<const T>, std::span<const std::size_t>, std::span<T>, std::span<const std::size_t>) {}
  template <class T> void all_gather(std::span<const T>, std::span<T>) {}
  template <class T> void all_reduce(std::span<const T>, std::span<T>, dcp::reduce_op) {}
  template <class T> void all_reduce(std::span<T>, dcp::reduce_op) {}
  template <class T> void broadcast(std::span<T>, int) {}
  template <class T> void send(std::span<const T>, int, int) {}
  template <class T> void recv(std::span<T>, int, int) {}
  void barrier() {}
  void abort() noexcept {}
  bool aborted() const { return false; }
  std::chrono::milliseconds timeout() const { return {}; }
  void set_timeout(std::chrono::milliseconds) {}
};

struct opted_in : look_alike {
  using communicator_concept = dcp::communicator_tag;
  opted_in split(int, int) { return {}; }
};

struct opted_in_no_abort : opted_in {
  void abort() {}  // may throw: not a communicator (teardown must be noexcept)
  opted_in_no_abort split(int, int) { return {}; }
};

static_assert(dcp::communicator<dcp::local_comm>);
static_assert(dcp::host_communicator<dcp::local_comm>);
static_assert(!dcp::communicator<look_alike>, "structure alone must not model communicator");
static_assert(dcp::communicator<opted_in>);
static_assert(!dcp::communicator<opted_in_no_abort>);
static_assert(!dcp::communicator<int>);
static_assert(dcp::transferable<double> && dcp::transferable<std::byte>);
static_assert(!dcp::transferable<std::string> && !dcp::transferable<const int>);
static_assert(dcp::reducible<float> && dcp::reducible<std::int64_t> && !dcp::reducible<bool>);
static_assert(requires { requires !dcp::reducible<std::byte>; });

TEST(CommConcepts, ReduceOpPrints) {
  EXPECT_STREQ(dcp::to_string(dcp::reduce_op::sum), "sum");
  EXPECT_STREQ(dcp::to_string(dcp::reduce_op::max), "max");
  EXPECT_EQ(dcp::no_color, -1);
}

TEST(CommConcepts, NullCommunicator) {
  dcp::local_comm c;
  EXPECT_FALSE(c.valid());
  EXPECT_EQ(c.rank(), -1);
  EXPECT_EQ(c.size(), 0);
  EXPECT_FALSE(c.aborted());
  c.abort();  // no-op, noexcept
  EXPECT_THROW(c.barrier(), dcp::error);
}

}  // namespace
