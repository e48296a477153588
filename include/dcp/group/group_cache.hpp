#pragma once
/// \file
/// `group_cache`: the communicator of every sequence-parallel group a rank belongs to, created once
/// and reused by every later plan (DESIGN section 2, `group_manager`).
///
/// The groups are a `group_manager`'s blocks (`buddy_groups` by default, `contiguous_groups` for
/// every size): a rank belongs to at most one block of each size, so it holds at most one
/// communicator per size a plan has used (log2(N) + 1 with power-of-two sizes).
/// Creating the communicators of a size is one `split(block index, rank)` of the world, which is
/// collective, so creation is explicit and lazy per size: every rank calls `prepare(sizes)` with the
/// same sizes (the plan is identical on every rank, so `prepare(plan sizes)` before running a plan
/// works), and only sizes not yet cached are created, smallest first (intra-node blocks first).
/// `comm_for(block)` is then a lookup, never collective. The block of the whole world reuses the
/// world communicator. Creation time is recorded per size.
///
/// Tensor parallelism (DESIGN section 4.2): with `tp` > 1 the manager lays out planner units (TP
/// groups of tp consecutive GPUs; `groups.gpus()` = world size / tp) and every block of sp units
/// is the sp tp GPUs `tp_units{tp}.gpus_of(block)`; its communicator holds all of them, in GPU
/// order. `prepare_split` then splits it per TP rank (the Ulysses and ring groups of a step), and
/// `parallel_groups` creates the run's fixed TP, expert-parallel and data-parallel communicators
/// (DESIGN section 4.4 says which GPUs each holds).
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
#include <optional>
#include <sstream>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include <dcp/comm/comm_concepts.hpp>
#include <dcp/error.hpp>
#include <dcp/group/buddy_groups.hpp>
#include <dcp/group/check_groups.hpp>
#include <dcp/group/group_concepts.hpp>

namespace dcp {

/// One cached group of this rank.
struct group_entry {
  rank_block block;                      ///< the units of the group (world ranks when tp = 1)
  bool intra_node = false;               ///< the block lies inside one node (size <= G)
  bool reuses_world = false;             ///< the block is the world: no new communicator
  std::chrono::duration<double> created; ///< time spent creating it (the split, this rank)

  friend bool operator==(const group_entry&, const group_entry&) = default;
};

/// The run's fixed communicators of one rank beside its steps' groups (`group_cache::parallel_groups`).
template <class Comm>
struct parallel_comms {
  int ep = 1;
  Comm tp;                     ///< this GPU's TP group: the tp GPUs of its unit
  Comm expert;                 ///< its expert-parallel group: same TP rank in ep consecutive units
  Comm data_parallel;          ///< same TP rank in every unit (gradient reduction; zero3's shards)
  Comm expert_data_parallel;   ///< same TP rank and same position in every EP group (expert gradients)
};

template <communicator Comm, group_manager Groups = buddy_groups>
class group_cache {
 public:
  /// `world` must outlive the cache; `groups.gpus()` (units) times `tp` must equal `world.size()`.
  group_cache(Comm& world, Groups groups, int tp = 1) : world_(&world), groups_(std::move(groups)), tp_(tp) {
    check_group_laws(groups_, "group_cache");  // validate(), then the laws (once: O(N log N))
    check(tp >= 1 && static_cast<long long>(groups_.gpus()) * tp == world.size(), errc::invalid_argument, [&] {
      return "group_cache: the group manager has " + std::to_string(groups_.gpus()) +
             (tp == 1 ? std::string(" GPUs") : " units of tp = " + std::to_string(tp) + " GPUs") +
             " but the world communicator has " + std::to_string(world.size()) + " ranks";
    });
  }

  const Groups& groups() const noexcept { return groups_; }
  Comm& world() const noexcept { return *world_; }
  /// GPUs per unit.
  int tp() const noexcept { return tp_; }

  /// Whether the communicators of block size `sp` exist.
  bool prepared(int sp) const noexcept { return comms_.contains(sp) || (sp == groups_.gpus() && reused_); }

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
  /// Collective: every size with at least one block.
  void prepare_all() {
    std::vector<int> all;
    for (int sp = 1; sp <= groups_.gpus(); ++sp)
      if (groups_.block_count(sp) > 0) all.push_back(sp);
    prepare(all);
  }

  /// This rank's communicator for `block` (a block of the group manager holding this rank's unit,
  /// of a prepared size): all its GPUs. Not collective.
  Comm& comm_for(rank_block block) {
    const int rank = unit();
    check_size(block.size);
    check(block.contains(rank) && groups_.block_of(rank, block.size) == block, errc::invalid_argument, [&] {
      std::ostringstream os;
      os << "group_cache: block " << block << " is not a group of " << (tp_ == 1 ? "rank " : "unit ") << rank
         << " (its block of size " << block.size << " is " << groups_.block_of(rank, block.size) << ")";
      return os.str();
    });
    check(prepared(block.size), errc::invalid_argument, [&] {
      return "group_cache: no communicators of size " + std::to_string(block.size) +
             " yet; call prepare() with that size on every rank first (it is collective)";
    });
    if (block.size == groups_.gpus() && reused_) return *world_;
    Comm& c = comms_.at(block.size);
    check(c.valid(), errc::invalid_argument, [&] {
      return "group_cache: rank " + std::to_string(rank) + " is in no block of size " + std::to_string(block.size);
    });
    return c;
  }
  /// This rank's communicator of block size `sp`.
  Comm& comm_for_size(int sp) { return comm_for(groups_.block_of(unit(), sp)); }

  /// Collective over the world: for block size `sp` (prepared here if it is not yet) and ring
  /// size `ring` dividing it, splits every block into its Ulysses groups of u = sp / ring
  /// consecutive units and its rings (DESIGN section 4.3: u inside r; ring i is the block's
  /// units i, i + u, ..., its position j the Ulysses group j), one of each per TP rank: a GPU's
  /// groups hold the GPUs of the same TP rank in those units. Cached; with ring = 1 and tp = 1
  /// it creates nothing (the block is the Ulysses group).
  void prepare_split(int sp, int ring) {
    check(ring >= 1 && sp % ring == 0, errc::invalid_argument, [&] {
      return "group_cache: ring " + std::to_string(ring) + " does not divide group size " + std::to_string(sp);
    });
    prepare({sp});
    if ((ring == 1 && tp_ == 1) || splits_.contains({sp, ring})) return;
    const int u = sp / ring;
    const rank_block b = groups_.block_of(unit(), sp);
    Comm& group = offered(b) ? comm_for(b) : comms_.at(sp);
    if (!group.valid()) return;  // a trailing partial block runs no step: nothing to split
    const int p = group.rank() / tp_, t = group.rank() % tp_;  // unit position, TP rank
    Comm uly = group.split(p / u * tp_ + t, p % u);
    Comm rng = group.split(p % u * tp_ + t, p / u);
    splits_.emplace(std::pair{sp, ring}, std::pair{std::move(uly), std::move(rng)});
  }
  /// This rank's Ulysses communicator (u = sp / ring units, one GPU each: this rank's TP rank)
  /// of `block` split with `ring` (prepared by `prepare_split`). Not collective. With ring = 1 and
  /// tp = 1 it is the block's communicator.
  Comm& ulysses_for(rank_block block, int ring) {
    return ring == 1 && tp_ == 1 ? comm_for(block) : split_for(block, ring).first;
  }
  /// This rank's ring communicator (ring units, u apart, one GPU each) of `block`. Not collective.
  Comm& ring_for(rank_block block, int ring) { return split_for(block, ring).second; }

  /// Collective over the world on the first call (later calls with the same `ep` are lookups):
  /// this rank's fixed TP, expert-parallel and data-parallel communicators for expert-parallel
  /// size `ep` (dividing the units). Every rank makes the first call at the same point.
  parallel_comms<Comm>& parallel_groups(int ep = 1) {
    if (parallel_) {
      check(parallel_->ep == ep, errc::invalid_argument, [&] {
        return "group_cache: the parallel groups were made for ep = " + std::to_string(parallel_->ep) +
               ", asked for ep = " + std::to_string(ep) + "; ep is fixed for the run";
      });
      return *parallel_;
    }
    check(ep >= 1 && groups_.gpus() % ep == 0, errc::invalid_argument, [&] {
      return "group_cache: ep = " + std::to_string(ep) + " must divide the " + std::to_string(groups_.gpus()) +
             " units of the data-parallel domain";
    });
    const int rank = world_->rank(), u = unit(), t = rank % tp_;
    parallel_comms<Comm> c{ep, world_->split(u, rank), world_->split(u / ep * tp_ + t, u % ep),
                           world_->split(t, u), world_->split(u % ep * tp_ + t, u / ep)};
    parallel_.emplace(std::move(c));
    return *parallel_;
  }

  /// Groups this rank belongs to (at most one per prepared size), in the order they were made.
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
  int unit() const noexcept { return world_->rank() / tp_; }

  void check_size(int sp) const {
    check(sp >= 1 && sp <= groups_.gpus() && groups_.block_count(sp) > 0, errc::invalid_argument, [&] {
      return "group_cache: group size " + std::to_string(sp) + " has no block in the group manager's " +
             std::to_string(groups_.gpus()) + (tp_ == 1 ? " ranks" : " units") + "; use a size it offers";
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

  // Whether the manager offers `b`, searched: a manager may offer any subset of the blocks.
  bool offered(rank_block b) const {
    for (int i = 0, count = groups_.block_count(b.size); i < count; ++i)
      if (groups_.block(b.size, i) == b) return true;
    return false;
  }

  void create(int sp) {
    const int rank = world_->rank();
    const rank_block b = groups_.block_of(unit(), sp);
    const bool member = offered(b);  // a rank in no offered block of sp (a trailing partial block) gets none
    if (sp == groups_.gpus()) {
      reused_ = true;
      entries_.push_back({b, sp <= groups_.gpus_per_node(), true, std::chrono::duration<double>{0}});
      return;
    }
    const auto t0 = std::chrono::steady_clock::now();
    Comm c = world_->split(member ? b.first / sp : no_color, rank);
    const std::chrono::duration<double> dt = std::chrono::steady_clock::now() - t0;
    if (member) {
      check(c.valid() && c.size() == sp * tp_ && c.rank() == rank - b.first * tp_, errc::mismatch, [&] {
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
  int tp_ = 1;
  std::optional<parallel_comms<Comm>> parallel_;
};

}  // namespace dcp
