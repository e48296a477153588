#pragma once
/// \file
/// `dcp::scheduler<Model, Comm, Policies>`: the one type a training loop talks to.
///
/// \code
/// dcp::scheduler sched(dcp::models::llama3_8b(), world, dcp::scheduler_options{});
/// sched.set_dataset(my_lengths);                      // ids + shapes
/// for (int it = 0; it < iters; ++it) {
///   auto batch = sched.sampler().next();              // same on every rank
///   auto plan = sched.plan(batch.sequences);          // no communication (calibrating: one exchange of measurements)
///   sched.verify(plan);                               // one all-reduce: ranks agree
///   for (auto& step : sched.steps_for(plan))          // this rank's micro-steps, in order
///     train_micro_step(step.sequences, step.comm(), step.checkpointed_blocks);  // loss *= weights
///   world.all_reduce(gradients, dcp::reduce_op::sum); // then the optimizer step
/// }
/// \endcode
///
/// The plan is a pure function of the batch, the model, the options and the policies, so every
/// rank computes it alone; `verify` checks they agree before any step runs. Each micro-step
/// carries its group's communicator (created once per block size and cached), its checkpointed
/// blocks and the loss weight of each sequence: scale each sequence's mean token loss by its
/// weight (each token's loss by weight / tokens), sum over the step's sequences, do not average
/// per rank, and the all-reduced SUM of gradients is exactly the
/// full-batch gradient whatever the plan. With a tensor-parallel cost model (tp > 1) plans name
/// TP groups; each step's `ulysses_comm()` / `ring_comm()` hold this TP rank's GPUs of its units,
/// and `tp_group()`, `ep_group()`, `data_parallel_group()` (reduce dense gradients over it instead
/// of the world) and `expert_data_parallel_group()` are the run's fixed groups (DESIGN 4.4).
/// With pipeline stages (a cost model whose layout has pp > 1) `pipeline_for(plan)` gives a rank
/// its stage, its steps, their forwards and backwards in 1F1B order (at the plan's warmup depth)
/// and its neighbours' ranks (DESIGN 4.5).

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <optional>
#include <ostream>
#include <span>
#include <sstream>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include <dcp/comm/comm_concepts.hpp>
#include <dcp/cost/analytic.hpp>
#include <dcp/cost/calibration.hpp>
#include <dcp/cost/device.hpp>
#include <dcp/error.hpp>
#include <dcp/group/buddy_groups.hpp>
#include <dcp/group/contiguous_groups.hpp>
#include <dcp/group_cache.hpp>
#include <dcp/layout.hpp>
#include <dcp/model/model_concepts.hpp>
#include <dcp/model/transformer.hpp>
#include <dcp/plan/feasibility.hpp>
#include <dcp/plan/pipeline_schedule.hpp>
#include <dcp/plan/plan.hpp>
#include <dcp/plan/plan_concepts.hpp>
#include <dcp/plan/planning_context.hpp>
#include <dcp/plan/probe.hpp>
#include <dcp/policies.hpp>
#include <dcp/sample/token_budget_sampler.hpp>
#include <dcp/sequence.hpp>

namespace dcp {

/// Run-time settings of a scheduler. Zero means "from the device".
struct scheduler_options {
  device_spec device = devices::h200();  ///< device preset (or a measured one)
  int gpus_per_node = 0;                 ///< G; 0: device.gpus_per_node
  double memory_capacity_bytes = 0;      ///< C per GPU; 0: the device's `capacity()`
  /// A mixed cluster: one device per node in rank order, each priced on `device`'s clock at its
  /// speed and within its own memory (`node_devices`, DESIGN 2.1); empty: every node is `device`.
  std::vector<device_spec> cluster{};
  /// Loss weights and infeasible sequences: when set, they override the planner's own knobs.
  std::optional<loss_normalization> loss;
  std::optional<infeasible_policy> on_infeasible;
  std::int64_t global_batch_tokens = 0;  ///< sampler budget; 0: 262144 * N
  std::uint64_t seed = 0;                ///< sampler shuffle seed (same on every rank)
  /// Online calibration: `observe` measured steps, and `plan` refits and replans (DESIGN 9.2).
  calibration_options calibration;

  friend bool operator==(const scheduler_options&, const scheduler_options&) = default;
  friend std::ostream& operator<<(std::ostream& os, const scheduler_options& o) {
    os << "scheduler_options{" << o.device << ", gpus_per_node=" << o.gpus_per_node
       << ", memory_capacity_bytes=" << o.memory_capacity_bytes << ", cluster=" << o.cluster.size() << " nodes, loss=";
    if (o.loss) os << *o.loss;
    else os << "planner's";
    os << ", on_infeasible=";
    if (o.on_infeasible) os << *o.on_infeasible;
    else os << "planner's";
    return os << ", global_batch_tokens=" << o.global_batch_tokens << ", seed=" << o.seed << ", " << o.calibration
              << "}";
  }
};

/// How a scheduler builds its cost model from the model, the options' device and N.
/// Specialise for a cost model that needs more (a profile, a fit).
template <class Cost>
struct cost_factory;

/// Cost models the scheduler can build by itself (others are passed to its constructor).
template <class Cost, class Model>
concept buildable_cost = requires(const Model& m, const device_spec& d, int n) {
  { cost_factory<Cost>::make(m, d, n) } -> std::same_as<Cost>;
};

template <>
struct cost_factory<analytic_cost> {
  template <model_spec Model>
  static analytic_cost make(const Model& model, const device_spec& device, int gpus) {
    return make_analytic_cost(to_transformer_spec(model), device, gpus);
  }
};

/// One micro-step of this rank: what to run, with whom, and how to weight it.
template <class Comm>
struct micro_step {
  std::size_t index = 0;      ///< position of the step in `plan::steps`
  rank_block ranks;           ///< the step's group as the plan names it: units (world ranks when tp = 1)
  int group_rank = 0;         ///< this rank's unit's position in the group (its token shard)
  int checkpointed_blocks = 0;
  double start_s = 0, time_s = 0;  ///< on the cost model's clock
  std::span<const planned_sequence> sequences;  ///< with `loss_weight`
  Comm* group = nullptr;      ///< the group's communicator (cached by the scheduler)
  int ring = 1;               ///< Ulysses x Ring split: sp = ulysses() x ring (DESIGN section 4.3)
  Comm* ulysses_group = nullptr;  ///< with ring > 1 or tp > 1: this rank's Ulysses group (u consecutive units)
  Comm* ring_group = nullptr;     ///< with ring > 1 or tp > 1: this rank's ring (ring units, u apart)
  parallel_layout layout{};       ///< the job's layout: GPUs per unit `layout.tp` (DESIGN section 4.2)
  int tp_rank = 0;                ///< this GPU's rank in its unit's TP group
  int stage = 0;                  ///< this GPU's pipeline stage (its group is the stage's matching units)

  int sp() const noexcept { return ranks.size; }
  int ulysses() const noexcept { return ranks.size / ring; }
  /// GPUs per unit.
  int tp() const noexcept { return layout.tp; }
  /// The GPU ranks of the step: its sp units' sp tp GPUs on this GPU's stage.
  rank_block gpus() const noexcept { return layout.gpus_of(ranks, stage); }
  /// Every GPU of the step (sp tp of them, in GPU order).
  Comm& comm() const noexcept { return *group; }
  /// The communicator of the step's Ulysses all-to-alls: the GPUs of this TP rank in the u units
  /// of this rank's Ulysses group (the whole group when ring = tp = 1).
  Comm& ulysses_comm() const noexcept { return ulysses_group ? *ulysses_group : *group; }
  /// The communicator `ring_attention_forward`/`_backward` pass K/V blocks over (ring > 1 only).
  Comm& ring_comm() const noexcept { return *ring_group; }
};

/// A rank's share of a pipelined plan: `ops` index `steps` (its micro-steps in plan order) and
/// run in order; `previous` / `next` are the GPU ranks of the neighbouring stages (-1 at the ends).
template <class Comm>
struct pipeline_work {
  int stage = 0, stages = 1;
  std::vector<micro_step<Comm>> steps;
  std::vector<pipeline_op> ops;  ///< `step` indexes `steps`; forward or backward
  int previous = -1, next = -1;
};

namespace detail {
template <class P> inline constexpr bool is_policy_bundle = false;
template <class... O> inline constexpr bool is_policy_bundle<policies<O...>> = true;

}  // namespace detail

template <class Model, communicator Comm, class Policies = default_policies>
class scheduler {
  static_assert(diagnose_model_spec<Model>());
  // An invalid bundle already failed with its own message (and falls back to the defaults).
  static_assert(detail::is_policy_bundle<Policies>,
                "dcp::scheduler: the third parameter must be a dcp::policies<...> bundle; "
                "fix: wrap the policies, e.g. dcp::policies<dcp::no_recompute>");

 public:
  using model_type = Model;
  using comm_type = Comm;
  using policies_type = Policies;
  using cost_type = typename Policies::template at<slot::cost>;
  using groups_type = typename Policies::template at<slot::groups>;
  using recompute_type = typename Policies::template at<slot::recompute>;
  using planner_type = typename Policies::template at<slot::planner>;
  using bucketing_type = typename Policies::template at<slot::bucketing>;

  /// Builds the cost model for `world.size()` GPUs with `cost_factory<cost_type>`. `world` must
  /// outlive the scheduler.
  scheduler(Model model, Comm& world, scheduler_options options = {}, Policies policies = {})
    requires buildable_cost<cost_type, Model>
      : scheduler(std::move(model), world, std::nullopt, std::move(options), std::move(policies)) {}

  /// Plans with `cost`, a cost model built by the caller (a profile, a fit): it must be for
  /// `world.size()` GPUs.
  scheduler(Model model, Comm& world, cost_type cost, scheduler_options options = {}, Policies policies = {})
      : scheduler(std::move(model), world, std::optional<cost_type>(std::move(cost)), std::move(options),
                  std::move(policies)) {}

 private:
  scheduler(Model model, Comm& world, std::optional<cost_type> cost, scheduler_options options, Policies policies)
      : model_(std::move(model)),
        world_(&world),
        options_(std::move(options)),
        policies_(std::move(policies)),
        cost_(make_cost(std::move(cost))),
        groups_(world, make_groups(), cost_.layout()) {
    // The bundle's cost and groups slots hold the model and the layout the scheduler plans with.
    policies_.cost = cost_;
    policies_.groups = groups_.groups();
    if constexpr (loss_weighting_planner<planner_type>)
      if (options_.loss) policies_.planner.loss = *options_.loss;
    if constexpr (skipping_planner<planner_type>)
      if (options_.on_infeasible) policies_.planner.on_infeasible = *options_.on_infeasible;
    if (options_.calibration.enabled) {
      check(layout().pp == 1, errc::unsupported, [&] {
        return "scheduler: calibration fits the flat (pp = 1) model; the cost model has pp = " +
               std::to_string(layout().pp) + " pipeline stages, turn calibration off";
      });
      check(tp() == 1, errc::unsupported, [&] {
        return "scheduler: calibration fits the tp = 1 model; the cost model has tp = " + std::to_string(tp()) +
               ", turn calibration off";
      });
      start_calibration();
    }
  }

 public:
  const Model& model() const noexcept { return model_; }
  const cost_type& cost() const noexcept { return cost_; }
  const Policies& policies() const noexcept { return policies_; }
  /// The length groups of the bundle (profiling unit; the bucket baseline's 1D buckets).
  const typename Policies::template at<slot::bucketing>& bucketing() const noexcept { return policies_.bucketing; }
  const scheduler_options& options() const noexcept { return options_; }
  Comm& world() const noexcept { return *world_; }
  /// The cached group communicators (creation times, entries).
  const group_cache<Comm, groups_type>& groups() const noexcept { return groups_; }

  /// The job's layout (the cost model's), its GPUs per planner unit (the tensor-parallel size)
  /// and its expert-parallel size.
  const parallel_layout& layout() const noexcept { return groups_.layout(); }
  int tp() const noexcept { return layout().tp; }
  int ep() const noexcept { return layout().ep; }
  /// The run's fixed communicators (DESIGN section 4.4). Collective over the world the first
  /// time any of them is asked for (every rank must ask at the same point), then cached lookups.
  /// This GPU's TP group: the tp GPUs of its unit, in GPU order.
  Comm& tp_group() { return groups_.parallel_groups().tp; }
  /// Its expert-parallel group (MoE dispatch and combine): the GPUs of its TP rank in the ep
  /// consecutive units [e ep, (e + 1) ep) holding its unit.
  Comm& ep_group() { return groups_.parallel_groups().expert; }
  /// Its data-parallel group (the gradient reduction; with zero3 the domain its shards live on):
  /// the GPU of its TP rank in every unit, N / tp of them.
  Comm& data_parallel_group() { return groups_.parallel_groups().data_parallel; }
  /// The GPUs holding the same expert shard (expert gradients reduce here): its TP rank at its
  /// position in every EP group, N / (tp ep) of them.
  Comm& expert_data_parallel_group() { return groups_.parallel_groups().expert_data_parallel; }

  /// Plans a global batch. Pure: no communication, same result on every rank. With calibration
  /// on it is collective instead: every rank's observations of the previous plan are exchanged
  /// in one all-reduce over the world communicator, the model, GPU speeds and memory margin
  /// refitted (identically on every rank), and the batch planned with them. A world that moves
  /// device memory (NCCL) cannot carry that exchange: calibrate with `plan(batch, host)`.
  dcp::plan plan(std::span<const sequence> batch) const {
    if (!calib_) return policies_.planner.plan(context(cost_), batch);
    if constexpr (bool(Comm::host_memory)) {
      return plan(batch, *world_);
    } else {
      throw error(errc::unsupported,
                  "scheduler::plan(batch): calibration exchanges observations in host memory and the world "
                  "communicator moves device memory; call plan(batch, host) with a host-memory communicator of "
                  "the same ranks (e.g. the MPI communicator the NCCL world was bootstrapped from)");
    }
  }
  /// As above, with the calibration exchange over `host`, a host-memory communicator of the same
  /// processes as the world (any rank order; e.g. the MPI communicator an NCCL world was
  /// bootstrapped from), as `verify(plan, host)`. Every rank must plan with the same form and
  /// the same `host`. A host of another size is a `dcp::error` (invalid_argument) naming both.
  template <host_communicator Host>
  dcp::plan plan(std::span<const sequence> batch, Host& host) const {
    check(host.size() == world_->size(), errc::invalid_argument, [&] {
      return "plan: the host communicator has " + std::to_string(host.size()) + " ranks, the world " +
             std::to_string(world_->size()) + "; pass the host communicator of the same job";
    });
    if (!calib_) return policies_.planner.plan(context(cost_), batch);
    if (last_) exchange_observations(host);
    auto planner = policies_.planner;
    if constexpr (straggler_aware_planner<decltype(planner)>) planner.speeds = calib_->speeds();
    dcp::plan p = planner.plan(context(holding(calib_->model(), batch)), batch);
    planned_ = true;
    expect_observations(p);
    return p;
  }

  /// The start-up probe (DESIGN section 9.2; calibration on, before the first plan): a few
  /// micro-steps of `batch`, the first global batch, chosen where its plan will be tight
  /// (`probe_plan`, within `calibration.probe.budget` of its predicted time). Pure and the same
  /// on every rank, like `plan`. Run this rank's `steps_for(probe)` forward and backward with
  /// the gradients discarded (no optimizer step; the steps carry no loss weight), `observe` each,
  /// then `plan(batch)`: its exchange carries the probe's measurements, and the first plan is
  /// made on the model and memory margin they give. Throws `dcp::error` (invalid_argument) with
  /// calibration or its probe off, or once the run has probed or planned.
  dcp::plan probe(std::span<const sequence> batch) const {
    check(calib_.has_value() && options_.calibration.probe.enabled, errc::invalid_argument, [] {
      return std::string(
          "scheduler::probe: calibration or its probe is off; set scheduler_options::calibration."
          "enabled (and calibration.probe.enabled)");
    });
    check(!planned_ && !probed_, errc::invalid_argument, [&] {
      return std::string("scheduler::probe: the run has ") + (planned_ ? "planned" : "probed") +
             " already; probe once, before the first plan";
    });
    dcp::plan p = probe_plan(policies_.planner, context(calib_->model()), batch, options_.calibration.probe);
    probed_ = true;
    expect_observations(p);
    return p;
  }

  /// Records what this rank measured for `step` of the last plan: `seconds` of the micro-step
  /// (CUDA events or a host clock) and its peak memory in bytes (0: not measured). Used at the
  /// next `plan`. Throws `dcp::error` for NaN, infinite or negative values, a step of another
  /// plan or rank, a step observed twice, or calibration off.
  void observe(const micro_step<Comm>& step, double seconds, double peak_bytes = 0) {
    observe(step.index, seconds, peak_bytes, &step);
  }
  /// As above, by the step's index in the last plan's `steps`.
  void observe(std::size_t step, double seconds, double peak_bytes = 0) { observe(step, seconds, peak_bytes, nullptr); }

  /// The calibration state (model, speeds, margin, last report); null when calibration is off.
  const calibrator* calibration() const noexcept { return calib_ ? &*calib_ : nullptr; }

  /// Collective: checks with one all-reduce that every rank holds the same plan; throws
  /// `dcp::error` (errc::mismatch) on every rank otherwise, before any step runs.
  void verify(const dcp::plan& p) const
    requires(bool(Comm::host_memory))
  {
    verify(p, *world_);
  }
  /// As above, over `host`, a host-memory communicator of the same ranks: the one to use when
  /// the world communicator moves device memory (NCCL), e.g. the MPI communicator it was
  /// bootstrapped from.
  template <host_communicator Host>
  void verify(const dcp::plan& p, Host& host) const {
    check(host.size() == world_->size(), errc::invalid_argument, [&] {
      return "verify: the host communicator has " + std::to_string(host.size()) + " ranks, the world " +
             std::to_string(world_->size()) + "; pass the communicator of the same job";
    });
    const std::uint64_t h = p.hash();
    std::uint64_t v[2] = {h, ~h};  // max(h) == h and max(~h) == ~h on all ranks iff all h are equal
    host.all_reduce(std::span<std::uint64_t>(v), reduce_op::max);
    if (v[0] != h || v[1] != ~h) {
      std::ostringstream os;
      os << "plan mismatch: rank " << host.rank() << " planned hash 0x" << std::hex << h
         << " but another rank planned a different batch or settings; start every rank with the same seed, "
            "dataset, options and policies";
      throw error(errc::mismatch, os.str());
    }
  }

  /// Collective (creates group communicators the first time a size is used): this rank's
  /// micro-steps of `p`, in execution order.
  std::vector<micro_step<Comm>> steps_for(const dcp::plan& p) {
    check(p.gpus == layout().units() && p.layout.tp == tp() && p.layout.pp == layout().pp, errc::mismatch, [&] {
      return "plan for " + std::to_string(p.gpus) +
             (p.layout.tp == 1 ? std::string(" GPUs") : " units of tp = " + std::to_string(p.layout.tp)) +
             " given to a world of " + std::to_string(world_->size()) + " ranks" +
             (tp() == 1 ? std::string() : " with tp = " + std::to_string(tp())) +
             (p.layout.pp == layout().pp
                  ? std::string()
                  : ", its pp = " + std::to_string(p.layout.pp) + " against the job's " + std::to_string(layout().pp)) +
             "; plan with this scheduler";
    });
    std::vector<int> sizes;
    for (const auto& s : p.steps) sizes.push_back(s.sp());
    groups_.prepare(sizes);
    // Ulysses x Ring splits, the same on every rank (the plan is), smallest first.
    std::vector<std::pair<int, int>> splits;
    for (const auto& s : p.steps)
      if (s.ring > 1 || tp() > 1) splits.push_back({s.sp(), s.ring});
    std::sort(splits.begin(), splits.end());
    splits.erase(std::unique(splits.begin(), splits.end()), splits.end());
    for (const auto& [sp, ring] : splits) groups_.prepare_split(sp, ring);
    std::vector<micro_step<Comm>> out;
    const int unit = layout().unit_of(world_->rank());
    for (std::size_t i : p.steps_of(unit)) {
      const auto& s = p.steps[i];
      out.push_back({i, s.ranks, unit - s.ranks.first, s.checkpointed_blocks, s.start_s, s.time_s,
                     std::span<const planned_sequence>(s.sequences), &groups_.comm_for(s.ranks)});
      out.back().ring = s.ring;
      out.back().layout = layout();
      out.back().tp_rank = layout().tp_rank_of(world_->rank());
      out.back().stage = layout().stage_of(world_->rank());
      if (s.ring > 1 || tp() > 1) {
        out.back().ulysses_group = &groups_.ulysses_for(s.ranks, s.ring);
        out.back().ring_group = &groups_.ring_for(s.ranks, s.ring);
      }
    }
    return out;
  }

  /// Collective like `steps_for`: this rank's share of a pipelined plan (pp > 1; DESIGN section
  /// 4.5). Its stage, its steps (as `steps_for`: groups of its stage's matching units), the order
  /// to run their forwards and backwards in (1F1B per round at the plan's warmup depth, what the
  /// plan's schedule timed), and the GPUs it exchanges activations (forward) and their gradients
  /// (backward) with on the neighbouring stages: the same unit and TP rank, one stage before and
  /// after.
  pipeline_work<Comm> pipeline_for(const dcp::plan& p) {
    pipeline_work<Comm> w;
    w.stages = layout().pp;
    w.stage = layout().stage_of(world_->rank());
    w.steps = steps_for(p);
    std::vector<std::size_t> position(p.steps.size(), p.steps.size());
    for (std::size_t i = 0; i < w.steps.size(); ++i) position[w.steps[i].index] = i;
    for (const pipeline_op& o : pipeline_ops(p, w.stages, layout().unit_of(world_->rank()), w.stage))
      w.ops.push_back({position[o.step], o.backward});
    const int g = layout().stage_gpus();
    w.previous = w.stage > 0 ? world_->rank() - g : -1;
    w.next = w.stage + 1 < w.stages ? world_->rank() + g : -1;
    return w;
  }

  /// Sets the dataset the sampler draws global batches from (budget and seed from the options;
  /// tokens counted as the model sees them).
  void set_dataset(dataset data) {
    const std::int64_t budget =
        options_.global_batch_tokens > 0 ? options_.global_batch_tokens : default_global_batch_tokens(world_->size());
    sampler_.emplace(std::move(data), budget, options_.seed, [c = cost_](const sequence& s) { return c.tokens_of(s); });
  }
  /// The sampler (after `set_dataset`): identical on every rank, resumable from its state.
  token_budget_sampler& sampler() {
    check(sampler_.has_value(), errc::invalid_argument,
          [] { return std::string("scheduler::sampler(): no dataset; call set_dataset() first"); });
    return *sampler_;
  }

  friend std::ostream& operator<<(std::ostream& os, const scheduler& s) {
    return os << "scheduler{world=" << s.world_->size() << ", " << s.options_ << ", " << s.policies_ << "}";
  }

 private:
  device_spec job_device() const {
    device_spec d = options_.device;
    if (options_.gpus_per_node > 0) d.gpus_per_node = options_.gpus_per_node;
    if (options_.memory_capacity_bytes > 0) {
      // A measured C already leaves out what the framework holds.
      d.usable = options_.memory_capacity_bytes / d.mem_bytes;
      d.kernel.reserved_bytes = 0;
    }
    return d;
  }
  cost_type make_cost(std::optional<cost_type> given) const {
    check(world_->valid() && world_->size() > 0, errc::invalid_argument,
          [] { return std::string("scheduler: the world communicator is null; pass a valid communicator"); });
    auto not_negative = [](double v, const char* field) {
      check(v >= 0, errc::invalid_argument, [&] {
        return std::string("scheduler_options::") + field + " = " + std::to_string(v) +
               " must not be negative (0 means: take it from the device or the default)";
      });
    };
    not_negative(options_.gpus_per_node, "gpus_per_node");
    not_negative(options_.memory_capacity_bytes, "memory_capacity_bytes");
    not_negative(static_cast<double>(options_.global_batch_tokens), "global_batch_tokens");
    check(options_.memory_capacity_bytes <= options_.device.mem_bytes, errc::invalid_argument, [&] {
      return "memory_capacity_bytes = " + std::to_string(options_.memory_capacity_bytes) + " exceeds the device's " +
             std::to_string(options_.device.mem_bytes) + " bytes; set device.mem_bytes to the real HBM size";
    });
    // A cost value set in the bundle counts as given.
    if (!given && !(policies_.cost == cost_type{})) given = policies_.cost;
    if (!options_.cluster.empty()) {
      // The nodes as the scheduler builds them; a given cost model must price the same ones.
      std::vector<device_spec> nodes = options_.cluster;
      for (auto& d : nodes) d.gpus_per_node = job_device().gpus_per_node;
      const std::vector<unit_device> named = node_devices(nodes, job_device());
      if (!given) {
        if constexpr (std::is_same_v<cost_type, analytic_cost>) {
          return make_analytic_cost(
              to_transformer_spec(model_), job_device(),
              parallel_layout{.gpus = world_->size(), .gpus_per_node = job_device().gpus_per_node, .nodes = named});
        } else {
          throw error(errc::invalid_argument,
                      "scheduler_options::cluster builds an analytic_cost; pass a cost model of the cluster to the "
                      "scheduler's constructor instead");
        }
      }
      check(given->layout().nodes == named, errc::mismatch, [] {
        return std::string(
            "the cost model's nodes are not scheduler_options::cluster's; build the cost model on "
            "the cluster, or leave the option empty");
      });
    }
    if constexpr (buildable_cost<cost_type, Model>)
      if (!given) return cost_factory<cost_type>::make(model_, job_device(), world_->size());
    check(given->layout().gpus == world_->size(), errc::mismatch, [&] {
      return "the cost model is for " + std::to_string(given->gpus()) +
             (given->layout().tp == 1 ? std::string(" GPUs")
                                      : " units of tp = " + std::to_string(given->layout().tp) + " GPUs") +
             " but the world has " + std::to_string(world_->size()) + " ranks; build it for this job";
    });
    return std::move(*given);
  }
  void start_calibration() {
    options_.calibration.validate();
    fitted_cost prior;
    if constexpr (std::is_same_v<cost_type, fitted_cost>) prior = cost_;
    else if constexpr (std::is_same_v<cost_type, analytic_cost>) prior = make_fitted_cost(cost_);  // its nodes too
    else if constexpr (std::constructible_from<transformer_spec, const Model&>)
      prior = make_fitted_cost(make_analytic_cost(transformer_spec(model_), job_device(), world_->size()));
    check(prior.gpus() == world_->size(), errc::mismatch, [&] {
      return "calibration: the prior model is for " + std::to_string(prior.gpus()) + " GPUs, the world has " +
             std::to_string(world_->size()) + "; build it for this job";
    });
    calib_.emplace(std::move(prior), options_.calibration);
  }

  void observe(std::size_t index, double seconds, double peak_bytes, const micro_step<Comm>* step) {
    const int rank = world_->rank();
    auto bad = [&](const std::string& what) {
      throw error(errc::invalid_argument, "observe(step " + std::to_string(index) + ", " + std::to_string(seconds) + " s, " +
                                              std::to_string(peak_bytes) + " B) on rank " + std::to_string(rank) + ": " + what);
    };
    if (!calib_) bad("calibration is off; set scheduler_options::calibration.enabled");
    if (!last_) bad("no plan yet; observe the steps of the plan this scheduler made last");
    if (index >= last_->steps.size())
      bad("the last plan has " + std::to_string(last_->steps.size()) + " steps; observe a step of the last plan");
    const auto& s = last_->steps[index];
    if (step && (step->ranks != s.ranks || step->sequences.size() != s.sequences.size() ||
                 !std::equal(s.sequences.begin(), s.sequences.end(), step->sequences.begin())))
      bad("the step is not step " + std::to_string(index) + " of the last plan; observe the steps of the latest plan");
    if (!s.ranks.contains(rank))
      bad("the step runs on ranks [" + std::to_string(s.ranks.first) + ", " + std::to_string(s.ranks.end()) +
          "), not on this rank; observe only this rank's steps (steps_for)");
    if (!(std::isfinite(seconds) && seconds >= 0)) bad("seconds must be finite and not negative");
    if (!(std::isfinite(peak_bytes) && peak_bytes >= 0)) bad("peak_bytes must be finite and not negative (0: not measured)");
    double* slot = &observed_[3 * (slot_of_[index] + std::size_t(rank - s.ranks.first))];
    if (slot[0] != 0) bad("this rank already observed that step");
    slot[0] = 1, slot[1] = seconds, slot[2] = peak_bytes;
  }

  // `p` is the plan observations refer to from now on, with an empty slot per (step, member).
  void expect_observations(const dcp::plan& p) const {
    last_ = p;
    slot_of_.assign(p.steps.size() + 1, 0);
    for (std::size_t i = 0; i < p.steps.size(); ++i) slot_of_[i + 1] = slot_of_[i] + std::size_t(p.steps[i].sp());
    observed_.assign(3 * slot_of_.back(), 0.0);
  }

  // One all-reduce over `host` of the (step, member) slots of the last plan: each rank fills
  // only its own (by world rank), so the sum is every rank's reports, in plan order on every
  // rank, whatever order they came in and however `host` orders the ranks (x + 0 is exact).
  template <class Host>
  void exchange_observations(Host& host) const {
    host.all_reduce(std::span<double>(observed_), reduce_op::sum);
    for (std::size_t i = 0; i < last_->steps.size(); ++i) {
      const auto& s = last_->steps[i];
      executed_step e{{}, s.ranks, s.checkpointed_blocks, {}, {}};
      bool any = false;
      for (int m = 0; m < s.sp(); ++m) {
        const double* slot = &observed_[3 * (slot_of_[i] + std::size_t(m))];
        any = any || slot[0] != 0;
        e.seconds.push_back(slot[0] != 0 ? slot[1] : -1.0);
        e.peak_bytes.push_back(slot[0] != 0 ? slot[2] : -1.0);
      }
      if (!any) continue;  // nobody ran or measured it
      for (const auto& q : s.sequences) e.load = e.load + calib_->model().load_of({q.id, q.frames, q.spatial});
      calib_->add(std::move(e));
    }
    calib_->refit();
    last_.reset();
  }

  // The bundle's group manager, which places every step and whose blocks get the communicators:
  // a user's value as given, checked against the job (units: TP groups when tp > 1; group_cache
  // then checks the group_manager laws); a default-constructed buddy_groups or
  // contiguous_groups (any sizes) is filled from the cost model's units, which come from the world
  // and the device; a contiguous_groups that only sets `sizes` keeps them.
  groups_type make_groups() const {
    groups_type g = policies_.groups;
    if constexpr (std::is_same_v<groups_type, buddy_groups>)
      if (g == buddy_groups{}) g = default_groups(cost_);
    if constexpr (std::is_same_v<groups_type, contiguous_groups>)
      if (g.world == contiguous_groups{}.world && g.node_size == contiguous_groups{}.node_size)
        g = contiguous_groups{cost_.gpus(), cost_.gpus_per_node(), g.sizes, g.only};
    check(g.gpus() == cost_.gpus() && g.gpus_per_node() == cost_.gpus_per_node(), errc::invalid_argument, [&] {
      std::ostringstream os;
      os << "scheduler: the groups slot holds " << g << ", laying out " << g.gpus() << " units, " << g.gpus_per_node()
         << " per node, but the world of " << world_->size() << " ranks has " << cost_.gpus() << " units, "
         << cost_.gpus_per_node() << " per node (a unit is a TP group of " << cost_.layout().tp
         << " GPUs); build the manager for this world, or leave the slot default-constructed";
      return os.str();
    });
    return g;  // group_cache checks the group_manager laws
  }
  // The calibrated model to plan `batch` on: `m`, or, where its memory margin alone leaves a
  // sequence no configuration (it fits at the fit itself, every block checkpointed), `m` with the
  // largest margin that holds every such sequence (bisected to 1e-6). The margin is room for what
  // the fit misses, not a reason to end the run or skip data: a step that then runs out of memory
  // is an observation, re-run fully checkpointed, and refits the model.
  fitted_cost holding(fitted_cost m, std::span<const sequence> batch) const {
    if (!(m.memory_margin > 0)) return m;
    const std::vector<int> sizes = context(m).sp_sizes();
    const auto lost = [&](double margin) {
      fitted_cost c = m;
      c.memory_margin = margin;
      std::vector<skipped_sequence> skipped;
      feasible_sequences(c, batch, infeasible_policy::skip, skipped, std::span<const int>(sizes));
      return skipped.size();
    };
    const std::size_t at_margin = lost(m.memory_margin), at_fit = lost(0);
    if (at_margin == at_fit) return m;  // the margin costs no sequence (or the device holds none of them)
    double lo = 0, hi = m.memory_margin;
    while (hi - lo > 1e-6) {
      const double mid = (lo + hi) / 2;
      (lost(mid) == at_fit ? lo : hi) = mid;
    }
    m.memory_margin = lo;
    return m;
  }

  // What the planner plans with: `cost`, the bundle's recompute policy, the job's group manager.
  template <class C>
  planning_context<C, recompute_type, groups_type> context(const C& cost) const {
    return {cost, policies_.recompute, groups_.groups()};
  }

  Model model_;
  Comm* world_;
  scheduler_options options_;
  Policies policies_;
  cost_type cost_;
  group_cache<Comm, groups_type> groups_;
  std::optional<token_budget_sampler> sampler_;
  // Calibration (plan() stays const: like verify(), it is collective when calibration is on).
  mutable std::optional<calibrator> calib_;
  mutable std::optional<dcp::plan> last_;          // the plan observations refer to (or the probe)
  mutable bool planned_ = false, probed_ = false;  // the probe comes once, before the first plan
  mutable std::vector<std::size_t> slot_of_;  // first (step, member) slot of each step
  mutable std::vector<double> observed_;      // per slot: reported, seconds, peak bytes
};

}  // namespace dcp
