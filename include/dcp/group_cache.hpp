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
/// Tensor parallelism (DESIGN section 4.2): the cache takes the job's `parallel_layout`; with
/// tp > 1 the manager lays out planner units (TP groups of tp consecutive GPUs;
/// `groups.gpus()` = `layout.units()`) and every block of sp units is the sp tp GPUs
/// `layout.gpus_of(block)`; its communicator holds all of them, in GPU order. `prepare_split`
/// then splits it per TP rank (the Ulysses and ring groups of a step), and `parallel_groups`
/// creates the run's fixed TP, expert-parallel and data-parallel communicators (DESIGN section
/// 4.4 says which GPUs each holds). With pipeline stages (pp > 1) every block exists once per
/// stage on the matching GPUs (`gpus_of(block, stage)`): a rank's communicators are its stage's,
/// and the fixed groups stay inside a stage too.
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
#include <span>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include <dcp/comm/comm_concepts.hpp>
#include <dcp/error.hpp>
#include <dcp/group/buddy_groups.hpp>
#include <dcp/group/check_groups.hpp>
#include <dcp/group/group_concepts.hpp>
#include <dcp/layout.hpp>

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
  /// Data x sequence parallel only (tp = 1): the manager's ranks are the world's. `world` must
  /// outlive the cache; `groups.gpus()` must equal `world.size()`.
  group_cache(Comm& world, Groups groups)
      : group_cache(world, groups, parallel_layout{.gpus = groups.gpus(), .gpus_per_node = groups.gpus_per_node()}) {}
  /// On the job `layout`: the manager lays out its units (`layout.units()`, `units_per_node()`)
  /// and the world holds its GPUs (`layout.gpus`).
  group_cache(Comm& world, Groups groups, parallel_layout layout)
      : world_(&world), groups_(std::move(groups)), layout_(layout) {
    check_group_laws(groups_, "group_cache");  // validate(), then the laws (once: O(N log N))
    layout_.validate();
    check(groups_.gpus() == layout_.units(), errc::invalid_argument, [&] {
      std::ostringstream os;
      os << "group_cache: the group manager lays out " << groups_.gpus() << " units but " << layout_ << " has "
         << layout_.units() << "; build both for the same job";
      return os.str();
    });
    check(layout_.gpus == world.size(), errc::invalid_argument, [&] {
      return "group_cache: the group manager has " + std::to_string(groups_.gpus()) +
             (layout_.tp == 1 ? std::string(" GPUs") : " units of tp = " + std::to_string(layout_.tp) + " GPUs") +
             " but the world communicator has " + std::to_string(world.size()) + " ranks";
    });
  }

  const Groups& groups() const noexcept { return groups_; }
  Comm& world() const noexcept { return *world_; }
  /// The job's layout (GPUs per unit: `layout().tp`).
  const parallel_layout& layout() const noexcept { return layout_; }
  int tp() const noexcept { return layout_.tp; }

  /// Whether the communicators of block size `sp` exist.
  bool prepared(int sp) const noexcept { return comms_.contains(sp) || (sp == groups_.gpus() && reused_); }
  /// This rank's pipeline stage (0 without stages).
  int stage() const noexcept { return layout_.stage_of(world_->rank()); }

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
      os << "group_cache: block " << block << " is not a group of " << (layout_.tp == 1 ? "rank " : "unit ") << rank
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
    if ((ring == 1 && layout_.tp == 1) || splits_.contains({sp, ring})) return;
    const int u = sp / ring;
    const rank_block b = groups_.block_of(unit(), sp);
    Comm& group = offered(b) ? comm_for(b) : comms_.at(sp);
    if (!group.valid()) return;  // a trailing partial block runs no step: nothing to split
    const int p = layout_.unit_of(group.rank()), t = layout_.tp_rank_of(group.rank());  // unit position, TP rank
    const int tp = layout_.tp;
    Comm uly = group.split(p / u * tp + t, p % u);
    Comm rng = group.split(p % u * tp + t, p / u);
    splits_.emplace(std::pair{sp, ring}, std::pair{std::move(uly), std::move(rng)});
  }
  /// This rank's Ulysses communicator (u = sp / ring units, one GPU each: this rank's TP rank)
  /// of `block` split with `ring` (prepared by `prepare_split`). Not collective. With ring = 1 and
  /// tp = 1 it is the block's communicator.
  Comm& ulysses_for(rank_block block, int ring) {
    return ring == 1 && layout_.tp == 1 ? comm_for(block) : split_for(block, ring).first;
  }
  /// This rank's ring communicator (ring units, u apart, one GPU each) of `block`. Not collective.
  Comm& ring_for(rank_block block, int ring) { return split_for(block, ring).second; }

  /// Collective over the world on the first call (later calls are lookups): this rank's fixed
  /// TP, expert-parallel and data-parallel communicators for the layout's tp and ep. Every rank
  /// makes the first call at the same point.
  parallel_comms<Comm>& parallel_groups() {
    if (parallel_) return *parallel_;
    const int rank = world_->rank(), u = unit(), t = layout_.tp_rank_of(rank), ep = layout_.ep, tp = layout_.tp;
    // Colors are offset per stage, so every group stays inside its stage.
    const int s = stage(), units = layout_.units();
    parallel_comms<Comm> c{ep, world_->split(s * units + u, rank),
                           world_->split(s * layout_.stage_gpus() + u / ep * tp + t, u % ep),
                           world_->split(s * tp + t, u), world_->split(s * ep * tp + u % ep * tp + t, u / ep)};
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
  int unit() const noexcept { return layout_.unit_of(world_->rank()); }

  void check_size(int sp) const {
    check(sp >= 1 && sp <= groups_.gpus() && groups_.block_count(sp) > 0, errc::invalid_argument, [&] {
      return "group_cache: group size " + std::to_string(sp) + " has no block in the group manager's " +
             std::to_string(groups_.gpus()) + (layout_.tp == 1 ? " ranks" : " units") + "; use a size it offers";
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
    if (sp == groups_.gpus() && layout_.pp == 1) {
      reused_ = true;
      entries_.push_back({b, sp <= groups_.gpus_per_node(), true, std::chrono::duration<double>{0}});
      return;
    }
    const auto t0 = std::chrono::steady_clock::now();
    // One color per block and stage: below stage * units + units <= N.
    Comm c = world_->split(member ? stage() * layout_.units() + b.first / sp : no_color, rank);
    const std::chrono::duration<double> dt = std::chrono::steady_clock::now() - t0;
    if (member) {
      const rank_block gpus = layout_.gpus_of(b, stage());
      check(c.valid() && c.size() == gpus.size && c.rank() == rank - gpus.first, errc::mismatch, [&] {
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
  parallel_layout layout_;
  std::optional<parallel_comms<Comm>> parallel_;
};

}  // namespace dcp
