#pragma once
/// \file
/// The `cost_model` axis: time and per-GPU memory of one micro-step.
///
/// A micro-step is a set of sequences run together on an aligned group of `sp` GPUs with `k`
/// of the model's blocks checkpointed. A cost model summarises the sequences of a step in an
/// additive `load_type` (so planners can grow and shrink steps in O(1)) and prices it.
///
/// A model of `cost_model` opts in with `using policy_concept = dcp::cost_model_tag;` and has
///   - `typename C::load_type`: regular, value-initialised to the empty step, with `a + b` and `a - b`;
///   - `c.load_of(seq)`: the load of one sequence; `c.tokens_of(seq)`: the tokens the model sees;
///   - `c.time(load, sp, k)`, `c.memory(load, sp, k)`: seconds and bytes per GPU of the step;
///   - `c.work_floor(load, sp, k)`: GPU-seconds the load costs at least, however it is batched
///     (used by the lower bound of DESIGN section 3);
///   - `c.layout()`: the `parallel_layout` it prices (`<dcp/layout.hpp>`: GPUs, GPUs per node,
///     tp, ep, sharding, ring cap), the one place code reads the job's layout from a cost model;
///   - `c.capacity()` (bytes per GPU), `c.blocks()` (L), `c.gpus()` (N), `c.gpus_per_node()` (G),
///     `c.heads()` (sp must divide it, or its Ulysses part for a `ring_cost_model`). N and G
///     count planner units: `gpus() == layout().units()`, `gpus_per_node() == layout().units_per_node()`.
/// Laws: time and memory are positive for a non-empty load; memory does not grow with k and
/// does not grow with sp; time does not fall with k; `work_floor(l, sp, k) <= sp * time(l, sp, k)` for every step that
/// fits. The concept is the conjunction of the named requirements below; a bundle that fails it is told the first one
/// its type misses.
///
/// Optional members, each a named refinement (code that finds one uses it, others do without):
///   - `validated_cost_model`: `c.validate()` throws `dcp::error` (errc::invalid_argument) naming
///     the bad parameter. Law: a model that passes prices every load of a legal sp and k with
///     finite, positive time and memory. Planners call it before planning.
///   - `token_limited_cost_model`: `c.max_tokens_per_gpu()`, the most tokens per GPU that any
///     feasible step holds (x_max of DESIGN section 3). Law: a step with more tokens per GPU than
///     this exceeds `capacity()` for every k; where absent, planners find the limit by search.
///   - `token_memory_cost_model`: `c.memory_at(sp)`, a callable `m(load, k)` equal to
///     `c.memory(load, sp, k)` with its per-(sp) terms computed once. Law: it depends on the load
///     only through `load.tokens`, and does not fall as they grow (also in floating point), so a
///     planner may compare tokens against a per-(sp, k) room instead of pricing memory.
///   - `step_floor_cost_model`: `c.step_floor()`, seconds every step lasts at least however few
///     tokens it holds (ZeRO-3's per-step weight gather, DESIGN section 4.2). Law: it is finite
///     and >= 0, and `time(l, sp, k)` (any legal ring) is at least it for every non-empty load;
///     0 means no floor. Under a floor the dcp planner trades recomputation for fewer steps.
///   - `step_floor_share_cost_model`: `c.step_floor_share(l)`, unit-seconds of the per-step
///     floor that the load claims in any step. Law: it is finite and >= 0, and for every step
///     that fits `capacity()` (any sp, k, legal ring) the shares of its sequences sum to at most
///     `sp * time` of the step, so a lower bound may add them up (DESIGN section 3).
///   - `packed_floor_cost_model`: `c.packed_work_floor(l, sp, k)` (and per ring, `(l, sp, k, r)`,
///     where rings are chosen), a floor on the unit-seconds the load claims in any step it shares
///     with others on sp units with k blocks. Law: for every step that fits, its sequences'
///     packed floors sum to at most `sp * time` of the step, so the joint bound may take the larger
///     of it and `work_floor` (`least_packed_floor` takes the least over the legal rings).
///   - `work_floors_cost_model`: `c.floors()`, a value whose `both(l, sp, k, r)` gives `.work`
///     and `.packed` of a step run with ring r, with the model's per-call terms computed once.
///     Law: they equal `c.work_floor(l, sp, k, r)` and `c.packed_work_floor(l, sp, k, r)` (the
///     three-argument forms at r = `step_ring_of(c, sp)`), so the lower bounds may take either;
///     and `.work` is affine in k, so the pipelined bound may read a step's least forward
///     (`work L / (3L + k)`, monotone in k) at the two ends of k's range (DESIGN 4.5).
///   - `shared_time_floor_cost_model`: `c.shared_time_floor(l, sp, k, alone_s, batch)`, given
///     `alone_s` (l's time alone with k blocks at its fastest legal ring), the least seconds of any
///     step on sp units with at least k blocks that holds l among sequences of `batch` (their
///     summed load). Law: at most `alone_s`, and at most the time of every such step that fits.
///     A model whose steps run more efficiently the more tokens they hold (eff(x)) can finish a
///     sequence sooner in company than alone; the lower bounds take this floor for t_i where a
///     model has it, and `alone_s` where it does not (such a model's time must not fall as a
///     step's load grows).
///   - `update_cost_model`: `c.update_seconds()`, seconds every global batch pays once after its
///     last step whatever its plan (the data-parallel gradient reduction and the optimizer step,
///     DESIGN section 4.6). Law: finite and >= 0, the same for every plan of the job; 0 where
///     absent (`update_seconds_of`).
/// Shipped: `analytic_cost` (DESIGN section 4), `fitted_cost` (its form fitted to measured steps),
/// `profiled_cost` (a measured table), `scaled_analytic_cost` (a truth's scaled clock) and
/// `cost_sum` (a trained model plus frozen forward networks).

#include <algorithm>
#include <bit>
#include <concepts>
#include <cstdint>
#include <utility>

#include <dcp/concept_diagnosis.hpp>
#include <dcp/error.hpp>
#include <dcp/layout.hpp>
#include <dcp/policy_concepts.hpp>
#include <dcp/sequence.hpp>

namespace dcp {

struct cost_model_tag {};

// The named requirements of `cost_model`, in the order a diagnostic reports them.

/// Opts in: `using policy_concept = dcp::cost_model_tag;`.
template <class C>
concept cost_model_opts_in = opts_in_with<C, cost_model_tag>;
/// An additive load: a regular `load_type` with `a + b` and `a - b`.
template <class C>
concept cost_model_additive_load =
    std::regular<typename C::load_type> && requires(const typename C::load_type& l) {
      { l + l } -> std::same_as<typename C::load_type>;
      { l - l } -> std::same_as<typename C::load_type>;
    };
/// Reads sequences: `c.load_of(seq)` and `c.tokens_of(seq)`.
template <class C>
concept cost_model_reads_sequences = requires(const C& c, const sequence& s) {
  { c.load_of(s) } -> std::same_as<typename C::load_type>;
  { c.tokens_of(s) } -> std::convertible_to<std::int64_t>;
};
/// Prices steps: `c.time(l, sp, k)`, `c.memory(l, sp, k)`, `c.work_floor(l, sp, k)`.
template <class C>
concept cost_model_prices_steps = requires(const C& c, const typename C::load_type& l, int sp, int k) {
  { c.time(l, sp, k) } -> std::convertible_to<double>;
  { c.memory(l, sp, k) } -> std::convertible_to<double>;
  { c.work_floor(l, sp, k) } -> std::convertible_to<double>;
};
/// Describes the job: `layout()`, `capacity()`, `blocks()`, `gpus()`, `gpus_per_node()`, `heads()`.
template <class C>
concept cost_model_describes_job = requires(const C& c) {
  { c.layout() } -> std::convertible_to<parallel_layout>;
  { c.capacity() } -> std::convertible_to<double>;
  { c.blocks() } -> std::convertible_to<int>;
  { c.gpus() } -> std::convertible_to<int>;
  { c.gpus_per_node() } -> std::convertible_to<int>;
  { c.heads() } -> std::convertible_to<int>;
};

template <class C>
concept cost_model = cost_model_opts_in<C> && cost_model_additive_load<C> && cost_model_reads_sequences<C> &&
                     cost_model_prices_steps<C> && cost_model_describes_job<C>;

/// The first requirement of `cost_model` that P misses, as one static_assert (`dcp::policies`'
/// cost slot); true when P models it.
template <class P>
constexpr bool diagnose_cost_model() {
  if constexpr (false) {
  }
  DCP_DIAGNOSE_UNMET("dcp::policies: slot 'cost'", "cost_model", cost_model_opts_in,
                     "`using policy_concept = dcp::cost_model_tag;`")
  DCP_DIAGNOSE_UNMET("dcp::policies: slot 'cost'", "cost_model", cost_model_additive_load,
                     "a regular `load_type` with a + b and a - b")
  DCP_DIAGNOSE_UNMET("dcp::policies: slot 'cost'", "cost_model", cost_model_reads_sequences,
                     "load_of(seq) -> load_type, tokens_of(seq)")
  DCP_DIAGNOSE_UNMET("dcp::policies: slot 'cost'", "cost_model", cost_model_prices_steps,
                     "time, memory, work_floor of (load, sp, k)")
  DCP_DIAGNOSE_UNMET("dcp::policies: slot 'cost'", "cost_model", cost_model_describes_job,
                     "layout, capacity, blocks, gpus, gpus_per_node, heads")
  DCP_DIAGNOSE_ALL_LISTED("dcp::policies: slot 'cost'", "cost_model", cost_model, "dcp/cost/cost_concepts.hpp")
  return cost_model<P>;
}


/// A cost model that checks its own parameters (see the file comment for the law).
template <class C>
concept validated_cost_model = cost_model<C> && requires(const C& c) { c.validate(); };

/// A cost model that knows the most tokens per GPU a feasible step holds (see the file comment).
template <class C>
concept token_limited_cost_model = cost_model<C> && requires(const C& c) {
  { c.max_tokens_per_gpu() } -> std::convertible_to<double>;
};

/// A cost model whose memory on a fixed sp depends on the load's tokens alone (see the file comment).
template <class C>
concept token_memory_cost_model = cost_model<C> && requires(const C& c, const typename C::load_type& l) {
  { c.memory_at(1)(l, 0) } -> std::convertible_to<double>;
  { l.tokens } -> std::convertible_to<double>;
};

/// A cost model whose steps last at least a fixed time (see the file comment).
template <class C>
concept step_floor_cost_model = cost_model<C> && requires(const C& c) {
  { c.step_floor() } -> std::convertible_to<double>;
};

/// A cost model that knows the share of its per-step floor a load claims (see the file comment).
template <class C>
concept step_floor_share_cost_model = cost_model<C> && requires(const C& c, const typename C::load_type& l) {
  { c.step_floor_share(l) } -> std::convertible_to<double>;
};

/// A cost model that knows how fast a load can run in company (see the file comment).
template <class C>
concept shared_time_floor_cost_model =
    cost_model<C> && requires(const C& c, const typename C::load_type& l, int sp, int k, double alone_s) {
      { c.shared_time_floor(l, sp, k, alone_s, l) } -> std::convertible_to<double>;
    };

/// A cost model with a floor on a load's share of a packed step (see the file comment).
template <class C>
concept packed_floor_cost_model =
    cost_model<C> && requires(const C& c, const typename C::load_type& l, int sp, int k) {
      { c.packed_work_floor(l, sp, k) } -> std::convertible_to<double>;
    };

/// A cost model that prices both work floors of a step at once (see the file comment).
template <class C>
concept work_floors_cost_model =
    cost_model<C> && requires(const C& c, const typename C::load_type& l, int sp, int k, int r) {
      { c.floors().both(l, sp, k, r).work } -> std::convertible_to<double>;
      { c.floors().both(l, sp, k, r).packed } -> std::convertible_to<double>;
    };

/// A cost model of a cluster whose nodes differ (DESIGN section 2.1): `c.capacity_of(units)`, the
/// capacity of a block of units (its smallest member's; `capacity()` is the job's smallest), and
/// `c.as_uniform(d)`, the same model with every node device `d`, of the same type: what a step
/// sees on blocks of `d`'s capacity. Law: `as_uniform(d).capacity() == capacity_of(b)` for every
/// block b whose smallest node is d, and memory and time do not depend on the nodes.
template <class C>
concept mixed_cluster_cost_model = cost_model<C> && requires(const C& c, rank_block b, const unit_device& d) {
  { c.capacity_of(b) } -> std::convertible_to<double>;
  { c.as_uniform(d) } -> std::same_as<C>;
};

/// A cost model that prices pipeline stages (DESIGN section 4.5): its `time` and `memory` are one
/// micro-batch's on the heaviest of `layout().pp` stages (`blocks()` of them), and
///   - `c.stage_transfer(l, sp)`: seconds to send the micro-batch's activations across one stage
///     boundary (its gradient takes as long back); 0 when pp = 1;
///   - `c.static_memory()`: the bytes per GPU a stage holds with no micro-batch in flight;
///   - `c.working_memory(l, sp)`: the bytes of the micro-batch's own that live only while one of
///     its operations runs (its peak working set: a block's activations being computed or
///     recomputed, or the loss's logits), whatever its k.
/// Laws: all finite and >= 0; `memory(l, sp, k) >= static_memory() + working_memory(l, sp)`, the
/// rest the micro-batch's stored activations; a GPU runs one operation at a time, so micro-batches
/// in flight together hold static_memory() plus their stored activations plus the largest of
/// their working sets. Only such a model plans a layout with pp > 1.
template <class C>
concept pipeline_cost_model = cost_model<C> && requires(const C& c, const typename C::load_type& l, int sp) {
  { c.stage_transfer(l, sp) } -> std::convertible_to<double>;
  { c.static_memory() } -> std::convertible_to<double>;
  { c.working_memory(l, sp) } -> std::convertible_to<double>;
};

/// A pipeline cost model whose stored activations are a fixed number of bytes per token
/// (DESIGN 4.5, around a path): `c.stored_per_token(k)`, the bytes one token of a micro-batch
/// stores in flight at k checkpointed blocks, summed over the step's units (one GPU of each, at
/// one TP rank). Law: `memory(l, sp, k) = static_memory() + working_memory(l, sp) + l.tokens
/// stored_per_token(k) / sp` for every load, sp and k, and `stored_per_token` is affine and
/// non-increasing in k: so micro-batches in flight together store the sum of their sequences'
/// bytes, whatever their sp.
template <class C>
concept stored_per_token_cost_model = pipeline_cost_model<C> && requires(const C& c, int k) {
  { c.stored_per_token(k) } -> std::convertible_to<double>;
};

/// A cost model that prices the per-global-batch update (see the file comment).
template <class C>
concept update_cost_model = cost_model<C> && requires(const C& c) {
  { c.update_seconds() } -> std::convertible_to<double>;
};

/// A cost model that prices a padding pass (DESIGN section 3.7): `c.padding_time()`, the seconds
/// of a micro-step with no tokens on one unit, its collectives at their cost, which a unit of a
/// layout whose collectives span groups (ZeRO-3, ep > 1) runs to keep its domain in step.
template <class C>
concept padding_cost_model = cost_model<C> && requires(const C& c) {
  { c.padding_time() } -> std::convertible_to<double>;
};

/// `c.padding_time()`; a `dcp::error` where the model prices none (it cannot time a coupled plan).
template <cost_model C>
double padding_time_of(const C& c) {
  if constexpr (padding_cost_model<C>)
    return c.padding_time();
  else
    throw error(errc::invalid_argument,
                "the cost model prices no padding pass (padding_time()), which a layout whose collectives span "
                "planner groups (zero3, or ep > 1) runs; use analytic_cost or give the model padding_time()");
}

/// `c.update_seconds()` where the model prices the update, else 0.
template <cost_model C>
double update_seconds_of(const C& c) {
  if constexpr (update_cost_model<C>)
    return c.update_seconds();
  else
    return 0;
}

/// The capacity of a block of units: `c.capacity_of(units)` on a mixed cluster model, else
/// `c.capacity()`.
template <cost_model C>
double capacity_on(const C& c, rank_block units) {
  if constexpr (mixed_cluster_cost_model<C>)
    return c.capacity_of(units);
  else
    return c.capacity();
}

/// True when the blocks of `c` differ in capacity: a mixed cluster model whose named nodes
/// (`parallel_layout::nodes`) do not all have one capacity.
template <cost_model C>
bool capacities_differ(const C& c) {
  if constexpr (mixed_cluster_cost_model<C>) {
    const auto& nodes = c.layout().nodes;
    return std::any_of(nodes.begin(), nodes.end(),
                       [&](const unit_device& d) { return d.capacity != nodes.front().capacity; });
  } else {
    return false;
  }
}

/// `c` where every block has the largest capacity of the job (itself where capacities do not
/// differ): what the lower bounds price on, since a step may run on the largest block.
template <cost_model C>
C at_largest_capacity(const C& c) {
  if constexpr (mixed_cluster_cost_model<C>) {
    if (capacities_differ(c)) {
      const auto& nodes = c.layout().nodes;
      return c.as_uniform(*std::max_element(nodes.begin(), nodes.end(), [](const unit_device& a, const unit_device& b) {
        return a.capacity < b.capacity;
      }));
    }
  }
  return c;
}

/// A cost model that prices Ulysses x Ring steps (DESIGN section 4.3): `c.max_ring()`, the
/// largest ring r a step may use (1 = Ulysses only). Law: with max_ring() == 1 it prices
/// exactly as the plain model.
template <class C>
concept ring_cost_model = cost_model<C> && requires(const C& c) {
  { c.max_ring() } -> std::convertible_to<int>;
};

/// The ring size r of a step on `sp` units: sp over gcd(sp, heads), so u = sp / r Ulysses ranks
/// share the heads and r rings pass K/V blocks (1 when sp divides the heads). For a power-of-two
/// sp it is a power of two; a size whose r is not one is not legal (`legal_sp`).
template <cost_model C>
constexpr int ring_of(const C& c, int sp) noexcept {
  int a = sp, b = c.heads();
  while (b != 0) {
    const int t = a % b;
    a = b, b = t;
  }
  return a > 0 ? sp / a : sp;
}

/// The largest ring size `c` prices: `max_ring()` for a ring cost model, else 1.
template <cost_model C>
constexpr int max_ring_of(const C& c) noexcept {
  if constexpr (ring_cost_model<C>)
    return c.max_ring();
  else
    return 1;
}

/// The ring a step of a legal `sp` runs with: `ring_of(c, sp)` for a ring cost model, else 1.
template <cost_model C>
constexpr int step_ring_of(const C& c, int sp) noexcept {
  return max_ring_of(c) > 1 ? ring_of(c, sp) : 1;
}

/// True when `sp` is a legal sequence-parallel size for `c`: at most N, with a Ulysses part
/// u = gcd(sp, heads) (Ulysses shards heads) and a ring r = sp / u that is a power of two of at
/// most `max_ring_of(c)` (1 without rings: sp divides the heads). Any such size is legal, not
/// only powers of two (40 heads: 5, 10, 20, 40); which sizes a plan may use is also the group
/// manager's choice (`planning_context::sp_sizes`).
template <cost_model C>
constexpr bool legal_sp(const C& c, int sp) noexcept {
  if (sp < 1 || sp > c.gpus()) return false;
  const int r = ring_of(c, sp);
  return std::has_single_bit(static_cast<unsigned>(r)) && r <= max_ring_of(c);
}

/// A ring cost model that prices a step with any ring its sp allows (DESIGN section 4.3):
/// `c.time(l, sp, k, r)` and `c.work_floor(l, sp, k, r)` for every `legal_ring(c, sp, r)`; the
/// three-argument forms price r = `step_ring_of(c, sp)`. Law: they agree at that r.
template <class C>
concept ring_choice_cost_model =
    ring_cost_model<C> && requires(const C& c, const typename C::load_type& l, int sp, int k, int r) {
      { c.time(l, sp, k, r) } -> std::convertible_to<double>;
      { c.work_floor(l, sp, k, r) } -> std::convertible_to<double>;
    };

/// The largest ring a step on a legal `sp` may run: min(sp, max_ring) for a `ring_choice_cost_model`
/// with rings, else `step_ring_of(c, sp)` (the only one).
template <cost_model C>
constexpr int widest_ring_of(const C& c, int sp) noexcept {
  if constexpr (ring_choice_cost_model<C>)
    if (max_ring_of(c) > 1) return sp < max_ring_of(c) ? sp : max_ring_of(c);
  return step_ring_of(c, sp);
}

/// True when a step on a legal `sp` may run ring `r`: a power of two dividing sp from
/// `step_ring_of(c, sp)` (the largest Ulysses part that divides the heads) up to
/// `widest_ring_of(c, sp)`; every such r leaves u = sp / r dividing the heads. The legal rings
/// are step_ring_of(c, sp) times 2, 4, ... while they divide sp (once 2r does not divide sp, no
/// larger power does), so loops over them stop at the first that does not.
template <cost_model C>
constexpr bool legal_ring(const C& c, int sp, int r) noexcept {
  return r >= step_ring_of(c, sp) && r <= widest_ring_of(c, sp) && std::has_single_bit(static_cast<unsigned>(r)) &&
         sp % r == 0;
}

/// Calls `f(r)` for every `legal_ring` r of a step on `sp` units wider than `step_ring_of(c, sp)`:
/// each wider power of two up to `widest_ring_of(c, sp)` while it divides sp.
template <cost_model C, std::invocable<int> F>
constexpr void for_each_wider_ring(const C& c, int sp, F&& f) {
  for (int r = 2 * step_ring_of(c, sp), last = widest_ring_of(c, sp); r <= last && sp % r == 0; r *= 2) f(r);
}

/// Calls `f(r)` for every `legal_ring` r of a step on `sp` units: `step_ring_of(c, sp)`, then
/// `for_each_wider_ring`. Every loop over a step's rings is one of these two.
template <cost_model C, std::invocable<int> F>
constexpr void for_each_legal_ring(const C& c, int sp, F&& f) {
  f(step_ring_of(c, sp));
  for_each_wider_ring(c, sp, f);
}

/// Seconds of a step on `sp` units with `k` checkpointed blocks run with ring `r` (a `legal_ring`).
template <cost_model C>
double time_with_ring(const C& c, const typename C::load_type& l, int sp, int k, int r) {
  if constexpr (ring_choice_cost_model<C>)
    if (r != step_ring_of(c, sp)) return c.time(l, sp, k, r);
  return c.time(l, sp, k);
}

/// A step's ring and its time.
struct ring_choice {
  int ring = 1;
  double time_s = 0;
};

/// The fastest legal ring of a step (the smallest on ties) and its time. With one legal ring
/// (no rings, or sp at the ring cap) it is `step_ring_of(c, sp)` priced by `c.time(l, sp, k)`.
template <cost_model C>
ring_choice fastest_ring(const C& c, const typename C::load_type& l, int sp, int k) {
  ring_choice best{step_ring_of(c, sp), static_cast<double>(c.time(l, sp, k))};
  if constexpr (ring_choice_cost_model<C>)
    for_each_wider_ring(c, sp, [&](int r) {
      if (const double t = c.time(l, sp, k, r); t < best.time_s) best = {r, t};
    });
  return best;
}

/// The least `work_floor` of a step over its legal rings (`c.work_floor(l, sp, k)` with one).
template <cost_model C>
double least_work_floor(const C& c, const typename C::load_type& l, int sp, int k) {
  double w = c.work_floor(l, sp, k);
  if constexpr (ring_choice_cost_model<C>)
    for_each_wider_ring(c, sp, [&](int r) {
      const double x = c.work_floor(l, sp, k, r);
      w = x < w ? x : w;
    });
  return w;
}

/// The least `packed_work_floor` of a step over its legal rings (the three-argument form with one,
/// or where the model prices no ring of its own).
template <packed_floor_cost_model C>
double least_packed_floor(const C& c, const typename C::load_type& l, int sp, int k) {
  double packed = c.packed_work_floor(l, sp, k);
  if constexpr (requires { c.packed_work_floor(l, sp, k, 1); })
    for_each_wider_ring(c, sp, [&](int r) { packed = std::min(packed, c.packed_work_floor(l, sp, k, r)); });
  return packed;
}

/// A cost model that names what it prices in a member of type `Model` (`c.model`): plan files
/// record it (`sim/plan_json.hpp`).
template <class C, class Model>
concept cost_model_names_model = requires(const C& c) {
  { c.model } -> std::convertible_to<const Model&>;
};
/// A cost model that names its device in a member of type `Device` (`c.device`), likewise.
template <class C, class Device>
concept cost_model_names_device = requires(const C& c) {
  { c.device } -> std::convertible_to<const Device&>;
};

/// `memory(load, k)` of `cost` on `sp` GPUs: the cost model's `memory_at(sp)` where it has one
/// (its per-size constants computed once), else `cost.memory`.
template <cost_model C>
auto memory_of(const C& cost, int sp) {
  if constexpr (requires { cost.memory_at(sp)(std::declval<const typename C::load_type&>(), 0); })
    return cost.memory_at(sp);
  else
    return [&cost, sp](const typename C::load_type& l, int k) { return cost.memory(l, sp, k); };
}

}  // namespace dcp
