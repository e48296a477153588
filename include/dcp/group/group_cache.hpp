#pragma once
/// \file
/// `group_cache`: the communicator of every sequence-parallel group a rank belongs to, created once
/// and reused by every later plan (DESIGN section 2, `group_manager`).
///
/// The groups are a `group_manager`'s aligned blocks (`buddy_groups` by default): a rank belongs to
/// at most one block of each power-of-two size, so it holds at most log2(N) + 1 communicators.
/// Creating the communicators of a size is one `split(block index, rank)` of the world, which is
/// collective, so creation is explicit and lazy per size: every rank calls `prepare(sizes)` with the
/// same sizes (the plan is identical on every rank, so `prepare(plan sizes)` before running a plan
/// works), and only sizes not yet cached are created, smallest first (intra-node blocks first).
/// `comm_for(block)` is then a lookup, never collective. The block of the whole world reuses the
/// world communicator. Creation time is recorded per size.
///
/// \code
/// dcp::group_cache groups(world, dcp::buddy_groups{world.size(), 8});
/// groups.prepare({1, 2, 4});
/// auto& c = groups.comm_for(dcp::rank_block{world.rank() / 4 * 4, 4});
/// \endcode

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <initializer_list>
#include <map>
#include <sstream>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include <dcp/comm/comm_concepts.hpp>
#include <dcp/error.hpp>
#include <dcp/group/buddy_groups.hpp>
#include <dcp/group/group_concepts.hpp>

namespace dcp {

/// One cached group of this rank.
struct group_entry {
  rank_block block;                      ///< the ranks of the group (world ranks)
  bool intra_node = false;               ///< the block lies inside one node (size <= G)
  bool reuses_world = false;             ///< the block is the world: no new communicator
  std::chrono::duration<double> created; ///< time spent creating it (the split, this rank)

  friend bool operator==(const group_entry&, const group_entry&) = default;
};

template <communicator Comm, group_manager Groups = buddy_groups>
class group_cache {
 public:
  /// `world` must outlive the cache; `groups.gpus()` must equal `world.size()`.
  group_cache(Comm& world, Groups groups) : world_(&world), groups_(std::move(groups)) {
    groups_.validate();
    check(groups_.gpus() == world.size(), errc::invalid_argument, [&] {
      return "group_cache: the group manager has " + std::to_string(groups_.gpus()) +
             " GPUs but the world communicator has " + std::to_string(world.size()) + " ranks";
    });
  }

  const Groups& groups() const noexcept { return groups_; }
  Comm& world() const noexcept { return *world_; }

  /// Whether the communicators of block size `sp` exist.
  bool prepared(int sp) const noexcept { return comms_.contains(sp) || (sp == world_->size() && reused_); }

  /// Collective over the world: creates the communicators of every size in `sizes` not yet cached,
  /// smallest first. Every rank must pass the same sizes (in any order, repeats allowed).
  void prepare(std::span<const int> sizes) {
    std::vector<int> todo(sizes.begin(), sizes.end());
    std::sort(todo.begin(), todo.end());
    todo.erase(std::unique(todo.begin(), todo.end()), todo.end());
    for (int sp : todo) check_size(sp);
    for (int sp : todo)
      if (!prepared(sp)) create(sp);
  }
  void prepare(std::initializer_list<int> sizes) { prepare(std::span<const int>(sizes.begin(), sizes.size())); }
  /// Collective: every power-of-two size with at least one block.
  void prepare_all() {
    std::vector<int> all;
    for (int sp = 1; sp <= world_->size(); sp *= 2)
      if (groups_.block_count(sp) > 0) all.push_back(sp);
    prepare(all);
  }

  /// This rank's communicator for `block` (a block of the group manager holding this rank, of a
  /// prepared size). Not collective.
  Comm& comm_for(rank_block block) {
    const int rank = world_->rank();
    check_size(block.size);
    check(block.contains(rank) && groups_.block_of(rank, block.size) == block, errc::invalid_argument, [&] {
      std::ostringstream os;
      os << "group_cache: block " << block << " is not a group of rank " << rank << " (its block of size "
         << block.size << " is " << groups_.block_of(rank, block.size) << ")";
      return os.str();
    });
    check(prepared(block.size), errc::invalid_argument, [&] {
      return "group_cache: no communicators of size " + std::to_string(block.size) +
             " yet; call prepare() with that size on every rank first (it is collective)";
    });
    if (block.size == world_->size() && reused_) return *world_;
    Comm& c = comms_.at(block.size);
    check(c.valid(), errc::invalid_argument, [&] {
      return "group_cache: rank " + std::to_string(rank) + " is in no block of size " + std::to_string(block.size);
    });
    return c;
  }
  /// This rank's communicator of block size `sp`.
  Comm& comm_for_size(int sp) { return comm_for(groups_.block_of(world_->rank(), sp)); }

  /// Collective over the world: for block size `sp` (prepared here if it is not yet) and ring
  /// size `ring` dividing it, splits every block into its Ulysses groups of u = sp / ring
  /// consecutive ranks and its rings (DESIGN section 4.3: u inside r; ring i is the block's
  /// ranks i, i + u, ..., its position j the Ulysses group j). Cached; ring = 1 creates nothing.
  void prepare_split(int sp, int ring) {
    check(ring >= 1 && sp % ring == 0, errc::invalid_argument, [&] {
      return "group_cache: ring " + std::to_string(ring) + " does not divide group size " + std::to_string(sp);
    });
    prepare({sp});
    if (ring == 1 || splits_.contains({sp, ring})) return;
    const int u = sp / ring;
    const int rank = world_->rank();
    const rank_block b = groups_.block_of(rank, sp);
    Comm& group = b.end() <= groups_.block_count(sp) * sp ? comm_for(b) : comms_.at(sp);
    if (!group.valid()) return;  // a trailing partial block runs no step: nothing to split
    const int g = group.rank();
    Comm uly = group.split(g / u, g % u);
    Comm rng = group.split(g % u, g / u);
    splits_.emplace(std::pair{sp, ring}, std::pair{std::move(uly), std::move(rng)});
  }
  /// This rank's Ulysses communicator (u = sp / ring ranks) of `block` split with `ring`
  /// (prepared by `prepare_split`). Not collective.
  Comm& ulysses_for(rank_block block, int ring) { return split_for(block, ring).first; }
  /// This rank's ring communicator (ring ranks, u apart) of `block`. Not collective.
  Comm& ring_for(rank_block block, int ring) { return split_for(block, ring).second; }

  /// Groups this rank belongs to (at most log2(N) + 1), smallest first.
  const std::vector<group_entry>& entries() const noexcept { return entries_; }
  /// Communicators this rank created (the world's own block is reused, not counted).
  int created() const noexcept {
    return int(std::count_if(comms_.begin(), comms_.end(), [](const auto& kv) { return kv.second.valid(); }));
  }
  /// Total time this rank spent creating communicators.
  std::chrono::duration<double> creation_time() const noexcept {
    std::chrono::duration<double> t{0};
    for (const auto& e : entries_) t += e.created;
    return t;
  }

 private:
  void check_size(int sp) const {
    check(sp >= 1 && (sp & (sp - 1)) == 0 && sp <= world_->size() && groups_.block_count(sp) > 0,
          errc::invalid_argument, [&] {
            return "group_cache: group size " + std::to_string(sp) + " is not a power of two with a block in " +
                   std::to_string(world_->size()) + " ranks";
          });
  }

  std::pair<Comm, Comm>& split_for(rank_block block, int ring) {
    comm_for(block);  // checks the block is this rank's and prepared
    auto it = splits_.find({block.size, ring});
    check(it != splits_.end(), errc::invalid_argument, [&] {
      return "group_cache: no Ulysses x Ring split of size " + std::to_string(block.size) + " with ring " +
             std::to_string(ring) + " yet; call prepare_split() with it on every rank first (it is collective)";
    });
    return it->second;
  }

  void create(int sp) {
    const int rank = world_->rank();
    const rank_block b = groups_.block_of(rank, sp);
    const bool member = b.end() <= groups_.block_count(sp) * sp;  // a trailing partial block is unused
    if (sp == world_->size()) {
      reused_ = true;
      entries_.push_back({b, sp <= groups_.gpus_per_node(), true, std::chrono::duration<double>{0}});
      return;
    }
    const auto t0 = std::chrono::steady_clock::now();
    Comm c = world_->split(member ? rank / sp : no_color, rank);
    const std::chrono::duration<double> dt = std::chrono::steady_clock::now() - t0;
    if (member) {
      check(c.valid() && c.size() == sp && c.rank() == rank - b.first, errc::mismatch, [&] {
        return "group_cache: split for size " + std::to_string(sp) + " gave rank " + std::to_string(c.rank()) +
               " of " + std::to_string(c.size()) + " on world rank " + std::to_string(rank);
      });
      entries_.push_back({b, sp <= groups_.gpus_per_node(), false, dt});
    }
    comms_.emplace(sp, std::move(c));
  }

  Comm* world_;
  Groups groups_;
  std::map<int, Comm> comms_;
  std::map<std::pair<int, int>, std::pair<Comm, Comm>> splits_;  // (sp, ring) -> (Ulysses, ring)
  std::vector<group_entry> entries_;
  bool reused_ = false;
};

}  // namespace dcp
