// group_cache over local ranks: at most log2(N) + 1 groups per rank, the right members, lazily
// created per size and reused.
#include <dcp_test/support.hpp>
#include <gtest/gtest.h>

#include <bit>
#include <vector>

#include <dcp/comm/local.hpp>
#include <dcp/group/buddy_groups.hpp>
#include <dcp/group_cache.hpp>

namespace {

using namespace std::chrono_literals;

class GroupCache : public ::testing::TestWithParam<int> {};

TEST_P(GroupCache, OneCommunicatorPerAlignedBlock) {
  const int n = GetParam();
  dcp::local_world::run(
      n,
      [&](dcp::local_comm& world) {
        dcp::group_cache cache(world, dcp::buddy_groups{n, 8});
        cache.prepare_all();
        const int log2n = std::bit_width(unsigned(n)) - 1;
        EXPECT_LE(int(cache.entries().size()), log2n + 1);
        EXPECT_EQ(int(cache.entries().size()), log2n + 1);  // N a power of two: one block of each size
        EXPECT_LE(cache.created(), log2n);                  // the whole world is reused
        EXPECT_GE(cache.creation_time().count(), 0.0);
        for (int sp = 1; sp <= n; sp *= 2) {
          auto& c = cache.comm_for_size(sp);
          const dcp::rank_block b{world.rank() / sp * sp, sp};
          EXPECT_EQ(&c, &cache.comm_for(b));
          ASSERT_EQ(c.size(), sp);
          EXPECT_EQ(c.rank(), world.rank() - b.first);
          std::vector<int> members(sp);
          const int me = world.rank();
          c.all_gather(std::span<const int>(&me, 1), std::span<int>(members));
          for (int i = 0; i < sp; ++i) EXPECT_EQ(members[i], b.first + i);
        }
        for (const auto& e : cache.entries()) EXPECT_EQ(e.intra_node, e.block.size <= 8);
        // Preparing again creates nothing.
        const int before = cache.created();
        cache.prepare_all();
        EXPECT_EQ(cache.created(), before);
      },
      {.timeout = 30s});
}

INSTANTIATE_TEST_SUITE_P(Worlds, GroupCache, ::testing::Values(1, 2, 4, 8, 16));

TEST(GroupCacheLazy, CreatesOnlyPreparedSizes) {
  dcp::local_world::run(8, [](dcp::local_comm& world) {
    dcp::group_cache cache(world, dcp::buddy_groups{8, 4});
    EXPECT_TRUE(cache.entries().empty());
    EXPECT_FALSE(cache.prepared(2));
    EXPECT_DCP_ERROR((void)cache.comm_for_size(2), dcp::errc::invalid_argument, "call prepare()");
    const int sizes[] = {4, 2, 4};
    cache.prepare(sizes);
    EXPECT_EQ(cache.created(), 2);
    ASSERT_EQ(cache.entries().size(), 2u);
    EXPECT_EQ(cache.entries()[0].block.size, 2);  // smallest first
    EXPECT_FALSE(cache.prepared(8));
    // A block that is not this rank's.
    EXPECT_THROW((void)cache.comm_for(dcp::rank_block{(world.rank() / 4 * 4 + 4) % 8, 4}), dcp::error);
    EXPECT_THROW(cache.prepare({3}), dcp::error);
    EXPECT_THROW(cache.prepare({16}), dcp::error);
  });
}

TEST(GroupCacheLazy, PartialBlocksBeyondWholeNodes) {
  // 12 ranks in nodes of 4: one block of 8, [0, 8); ranks 8..11 are in none.
  dcp::local_world::run(12, [](dcp::local_comm& world) {
    dcp::group_cache cache(world, dcp::buddy_groups{12, 4});
    cache.prepare_all();
    const bool in8 = world.rank() < 8;
    EXPECT_EQ(int(cache.entries().size()), in8 ? 4 : 3);
    if (in8) {
      EXPECT_EQ(cache.comm_for_size(8).size(), 8);
      EXPECT_FALSE(cache.entries().back().intra_node);
    } else {
      EXPECT_THROW((void)cache.comm_for_size(8), dcp::error);
    }
  });
}

TEST(GroupCacheLazy, RejectsMismatchedWorld) {
  dcp::local_world::run(2, [](dcp::local_comm& world) {
    EXPECT_THROW(dcp::group_cache(world, dcp::buddy_groups{4, 8}), dcp::error);
  });
}

}  // namespace
