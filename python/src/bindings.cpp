/// \file
/// `dcp._dcp`: the Python bindings of dcp (nanobind). One translation unit on purpose: the
/// planners and the simulator are heavy templates, and compiling them once keeps the build short.
///
/// Sequences cross the boundary as integer arrays: a 1-D array of lengths (text: T = 1, S = the
/// length) or an (n, 2) array of (frames, tokens per frame) rows (video); sequence i gets id i.
/// Planning and simulating run with the GIL released; every planner plans as dcp-sim does, in
/// `planning_context{cost, selective_recompute{}, contiguous_groups{any}}`, so that the numbers
/// of `simulate` are dcp-sim's for the same arguments.

#include <chrono>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <limits>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <dcp/cost/analytic.hpp>
#include <dcp/cost/device.hpp>
#include <dcp/error.hpp>
#include <dcp/group/contiguous_groups.hpp>
#include <dcp/model/config.hpp>
#include <dcp/model/optional_fields.hpp>
#include <dcp/model/transformer.hpp>
#include <dcp/plan/check_plan.hpp>
#include <dcp/plan/pipeline_schedule.hpp>
#include <dcp/plan/plan.hpp>
#include <dcp/plan/planning_context.hpp>
#include <dcp/recompute/selective_recompute.hpp>
#include <dcp/sample/token_budget_sampler.hpp>
#include <dcp/scheduler.hpp>
#include <dcp/sequence.hpp>
#include <dcp/sim/methods.hpp>
#include <dcp/sim/plan_json.hpp>
#include <dcp/workload/embedded.hpp>
#include <dcp/workload/tuning.hpp>

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/filesystem.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/string_view.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

namespace nb = nanobind;
using namespace nb::literals;

namespace {

using int_array = nb::ndarray<nb::numpy, std::int64_t>;

template <class T>
std::string printed(const T& v) {
  std::ostringstream os;
  os << v;
  return os.str();
}

// An int64 numpy array that owns a copy of `values`, shaped `shape`.
int_array owned_array(std::vector<std::int64_t> values, std::vector<std::size_t> shape) {
  auto* v = new std::vector<std::int64_t>(std::move(values));
  nb::capsule owner(v, [](void* p) noexcept { delete static_cast<std::vector<std::int64_t>*>(p); });
  return int_array(v->data(), shape.size(), shape.data(), owner);
}

// An int64 copy of the integer array `obj` (numpy's view when it is one), and its dtype kind.
nb::object int64_array(nb::handle obj, const char* what) {
  nb::module_ np = nb::module_::import_("numpy");
  nb::object arr = np.attr("asarray")(obj);
  const std::string kind = nb::cast<std::string>(arr.attr("dtype").attr("kind"));
  dcp::check(nb::cast<std::int64_t>(arr.attr("size")) == 0 || kind == "i" || kind == "u", dcp::errc::invalid_argument,
             [&] {
               return std::string(what) + " has dtype " + nb::cast<std::string>(arr.attr("dtype").attr("name")) +
                      "; give integers";
             });
  return np.attr("ascontiguousarray")(arr, "dtype"_a = np.attr("int64"));
}

// The sequence ids of a batch: `ids` (a 1-D integer array, one per sequence, no repeats), or
// 0..n-1 when None.
std::vector<std::int64_t> ids_of(nb::handle ids, std::size_t n) {
  std::vector<std::int64_t> out(n);
  if (ids.is_none()) {
    for (std::size_t i = 0; i < n; ++i) out[i] = static_cast<std::int64_t>(i);
    return out;
  }
  const nb::object arr = int64_array(ids, "ids");
  const auto view = nb::cast<nb::ndarray<const std::int64_t, nb::c_contig, nb::device::cpu>>(arr);
  dcp::check(view.ndim() == 1 && view.shape(0) == n, dcp::errc::invalid_argument, [&] {
    return "ids has " + std::to_string(view.ndim() == 1 ? view.shape(0) : view.size()) + " entries (ndim " +
           std::to_string(view.ndim()) + ") for " + std::to_string(n) + " sequences; give one id per sequence";
  });
  std::copy(view.data(), view.data() + n, out.begin());
  std::set<std::int64_t> seen;
  for (const auto id : out)
    dcp::check(seen.insert(id).second, dcp::errc::invalid_argument,
               [&] { return "ids holds " + std::to_string(id) + " twice; every sequence of a batch has its own id"; });
  return out;
}

// `what`'s sequences from a 1-D array of lengths or an (n, 2) array of (frames, spatial) rows;
// a float array is refused rather than truncated. Sequence i gets id ids[i] (None: i).
dcp::dataset to_sequences(nb::handle obj, const char* what, nb::handle ids = nb::none()) {
  nb::module_ np = nb::module_::import_("numpy");
  nb::object arr = np.attr("asarray")(obj);
  const std::string kind = nb::cast<std::string>(arr.attr("dtype").attr("kind"));
  const auto ndim = nb::cast<int>(arr.attr("ndim"));
  const auto size = nb::cast<std::int64_t>(arr.attr("size"));
  dcp::check(size == 0 || kind == "i" || kind == "u", dcp::errc::invalid_argument, [&] {
    return std::string(what) + " has dtype " + nb::cast<std::string>(arr.attr("dtype").attr("name")) +
           "; give integer token counts";
  });
  dcp::check(ndim == 1 || (ndim == 2 && nb::cast<std::int64_t>(arr.attr("shape")[1]) == 2), dcp::errc::invalid_argument,
             [&] {
               return std::string(what) + " has shape " + nb::cast<std::string>(nb::repr(arr.attr("shape"))) +
                      "; give a 1-D array of lengths or an (n, 2) array of (frames, tokens per frame)";
             });
  arr = np.attr("ascontiguousarray")(arr, "dtype"_a = np.attr("int64"));
  const auto view = nb::cast<nb::ndarray<const std::int64_t, nb::c_contig, nb::device::cpu>>(arr);
  const std::int64_t* p = view.data();
  dcp::dataset out(static_cast<std::size_t>(view.shape(0)));
  const std::vector<std::int64_t> id = ids_of(ids, out.size());
  for (std::size_t i = 0; i < out.size(); ++i)
    out[i] = ndim == 1 ? dcp::make_sequence(id[i], p[i]) : dcp::make_sequence(id[i], p[2 * i], p[2 * i + 1]);
  for (const auto& s : out) dcp::validate(s);
  return out;
}

// A model given as a `Model` or a preset name.
dcp::transformer_spec model_of(nb::handle obj) {
  if (nb::isinstance<dcp::transformer_spec>(obj)) return nb::cast<dcp::transformer_spec>(obj);
  if (nb::isinstance<nb::str>(obj)) return dcp::models::preset(nb::cast<std::string>(obj));
  throw dcp::error(dcp::errc::invalid_argument, "model must be a dcp.Model or a preset name (dcp.model_names()); got " +
                                                    nb::cast<std::string>(nb::repr(obj)));
}

dcp::device_spec device_of(nb::handle obj) {
  if (nb::isinstance<dcp::device_spec>(obj)) return nb::cast<dcp::device_spec>(obj);
  if (nb::isinstance<nb::str>(obj)) return dcp::devices::preset(nb::cast<std::string>(obj));
  throw dcp::error(
      dcp::errc::invalid_argument,
      "device must be a dcp.Device or a preset name (h200, h100, a100); got " + nb::cast<std::string>(nb::repr(obj)));
}

// The job as dcp-sim lays it out: G replaces the device's when given (0: the device's).
dcp::analytic_cost make_cost(nb::handle model, nb::handle device, int gpus, int gpus_per_node, int tp, int ep,
                             const std::string& sharding, int ring, int pp) {
  dcp::check(gpus_per_node >= 0, dcp::errc::invalid_argument, [&] {
    return "gpus_per_node = " + std::to_string(gpus_per_node) + " must be positive (0 = the device's)";
  });
  auto d = device_of(device);
  if (gpus_per_node > 0) d.gpus_per_node = gpus_per_node;
  const int g = d.gpus_per_node;
  return dcp::make_analytic_cost(model_of(model), std::move(d),
                                 dcp::parallel_layout{.gpus = gpus,
                                                      .gpus_per_node = g,
                                                      .tp = tp,
                                                      .ep = ep,
                                                      .sharding = dcp::sharding_of(sharding),
                                                      .ring = ring,
                                                      .pp = pp});
}

// Every group size, as dcp-sim's default `--groups any`.
dcp::contiguous_groups groups_of(const dcp::analytic_cost& cost) {
  return {cost.gpus(), cost.gpus_per_node(), dcp::group_sizes::any};
}

dcp::infeasible_policy infeasible_of(const std::string& name) {
  dcp::check(name == "error" || name == "skip", dcp::errc::invalid_argument,
             [&] { return "on_infeasible = '" + name + "' must be error or skip"; });
  return name == "skip" ? dcp::infeasible_policy::skip : dcp::infeasible_policy::error;
}

dcp::plan plan_batch(const dcp::analytic_cost& cost, nb::handle lengths, const std::string& method, nb::handle dataset,
                     std::int64_t global_batch_tokens, std::uint64_t seed, const std::string& on_infeasible,
                     nb::handle ids) {
  const dcp::dataset batch = to_sequences(lengths, "lengths", ids);
  // A baseline tunes its knobs on an epoch of the dataset; without one, on this batch alone.
  const dcp::dataset data = dataset.is_none() ? batch : to_sequences(dataset, "dataset");
  dcp::sim::method_settings s;
  s.global_batch_tokens = global_batch_tokens;
  s.seed = seed;
  s.on_infeasible = infeasible_of(on_infeasible);
  nb::gil_scoped_release unlocked;
  const dcp::planning_context ctx{cost, dcp::selective_recompute{}, groups_of(cost)};
  return dcp::sim::with_method(method, ctx, std::span<const dcp::sequence>(data), s,
                               [&](const auto& planner, double) { return planner.plan(ctx, batch); });
}

nb::list simulate(nb::handle workload, nb::handle model, nb::handle device, int gpus, int gpus_per_node,
                  const std::vector<std::string>& methods, std::int64_t global_batch_tokens, std::uint64_t seed, int tp,
                  int ep, const std::string& sharding, int ring, int pp) {
  // Inputs first, as dcp-sim reads them, so that a typo fails before any work.
  dcp::check(!methods.empty(), dcp::errc::invalid_argument,
             [] { return std::string("methods is empty; name at least one"); });
  for (const auto& m : methods) dcp::sim::validate_method(m);
  dcp::check(global_batch_tokens >= 0, dcp::errc::invalid_argument, [&] {
    return "global_batch_tokens = " + std::to_string(global_batch_tokens) + " must be positive (0 = 262144 * GPUs)";
  });
  const bool named = nb::isinstance<nb::str>(workload);
  const std::string name = named ? nb::cast<std::string>(workload) : std::string();
  nb::object chosen = nb::borrow(model);
  if (chosen.is_none())
    chosen = nb::str(named ? std::string(dcp::workloads::default_model(name)).c_str() : "cogvideox-5b");
  const auto cost = make_cost(chosen, device, gpus, gpus_per_node, tp, ep, sharding, ring, pp);
  const dcp::dataset data = named ? dcp::workloads::make(name, seed) : to_sequences(workload, "workload");

  std::vector<dcp::sim::run_metrics> rows;
  {
    nb::gil_scoped_release unlocked;
    dcp::sim::method_settings settings;
    settings.global_batch_tokens = global_batch_tokens;
    settings.seed = seed;
    const auto batches = dcp::epoch_batches(cost, data, global_batch_tokens, seed);
    dcp::sim::options opt;
    opt.seed = seed;
    opt.global_batch_tokens = global_batch_tokens;
    const dcp::planning_context ctx{cost, dcp::selective_recompute{}, groups_of(cost)};
    for (const auto& m : methods)
      rows.push_back(dcp::sim::run_method(m, ctx, std::span<const dcp::sequence>(data),
                                          std::span<const std::vector<dcp::sequence>>(batches), settings, opt)
                         .metrics);
  }
  nb::list out;
  for (const auto& r : rows) {
    nb::dict d;
    d["method"] = r.method;
    d["tokens_per_s"] = r.tokens_per_s;
    d["makespan_s"] = r.makespan_s;
    d["efficiency"] = r.efficiency;
    d["simple_efficiency"] = r.simple_efficiency;
    d["imbalance"] = r.imbalance;
    d["bubble"] = r.bubble;
    d["peak_memory_bytes"] = r.peak_memory_bytes;
    d["plan_seconds"] = r.plan_seconds;
    d["tune_seconds"] = r.tune_seconds;
    d["tuned"] = r.tuned;
    d["batches"] = r.batches;
    d["sequences"] = r.sequences;
    d["tokens"] = r.tokens;
    d["steps"] = r.steps;
    d["skipped"] = r.skipped;
    d["communicators_per_rank"] = r.communicators_per_rank;
    out.append(d);
  }
  return out;
}

// The sampler and the cost that counts its tokens (none: T * S).
struct sampler {
  dcp::token_budget_sampler s;
};

sampler make_sampler(nb::handle lengths, std::int64_t global_batch_tokens, std::uint64_t seed, nb::handle cost) {
  dcp::dataset data = to_sequences(lengths, "lengths");
  if (cost.is_none()) return {dcp::token_budget_sampler(std::move(data), global_batch_tokens, seed)};
  const auto& c = nb::cast<const dcp::analytic_cost&>(cost);
  if (global_batch_tokens == 0) global_batch_tokens = dcp::default_global_batch_tokens(c.gpus());
  return {dcp::token_budget_sampler(std::move(data), global_batch_tokens, seed, [c](const dcp::sequence& q) {
    return c.tokens_of(q);
  })};  // a copy: the Cost may go
}

std::int64_t dict_int(const nb::dict& d, const char* key) {
  dcp::check(d.contains(key), dcp::errc::invalid_argument, [&] {
    return "sampler state " + nb::cast<std::string>(nb::repr(d)) + " has no '" + key +
           "'; give the dict Sampler.state() returned";
  });
  return nb::cast<std::int64_t>(d[key]);
}

// --- the scheduler's world ---------------------------------------------------------------------

// The world of a Python training loop as dcp's scheduler sees it: this rank, the world's size,
// and the host all-reduce that `verify` and calibration exchange, carried out by a Python object
// (`dcp.torch.World` over torch.distributed, or any object with `rank()`, `size()` and
// `all_reduce(array, op) -> array`, op "sum" or "max"). The loop moves its tensors itself, so
// the data-path collectives are refused. Without an object the world only plans: `rank` and
// `size` are given, and what needs the others says so.
// dcp.Error, created by the module (below).
PyObject* dcp_error_type = nullptr;

class python_world {
 public:
  using communicator_concept = dcp::communicator_tag;
  static constexpr bool host_memory = true;

  python_world(nb::object world, int rank, int size) : world_(std::move(world)), rank_(rank), size_(size) {}

  bool valid() const noexcept { return size_ > 0; }
  int rank() const noexcept { return rank_; }
  int size() const noexcept { return size_; }
  bool connected() const noexcept { return world_.is_valid() && !world_.is_none(); }

  template <class T>
  void all_reduce(std::span<T> data, dcp::reduce_op op) {
    dcp::check(!aborted_, dcp::errc::aborted, [] { return std::string("the world was aborted"); });
    dcp::check(connected(), dcp::errc::invalid_argument, [] {
      return std::string(
          "this scheduler has no world to exchange with (verify and calibration are collective); "
          "pass world=dcp.torch.World() or any object with rank(), size() and all_reduce(array, op)");
    });
    nb::gil_scoped_acquire held;
    nb::module_ np = nb::module_::import_("numpy");
    auto* copy = new std::vector<T>(data.begin(), data.end());
    nb::capsule owner(copy, [](void* p) noexcept { delete static_cast<std::vector<T>*>(p); });
    const std::size_t n = data.size();
    nb::object sent = nb::cast(nb::ndarray<nb::numpy, T>(copy->data(), 1, &n, owner));
    nb::object got;
    std::string timed_out;
    try {
      got = world_.attr("all_reduce")(sent, dcp::to_string(op));
    } catch (nb::python_error& e) {
      // A world that gave up waiting (dcp.Error, code timeout) is named with the call it served.
      if (dcp_error_type == nullptr || !e.matches(dcp_error_type) || !nb::hasattr(e.value(), "code") ||
          !nb::isinstance<nb::str>(e.value().attr("code")) || nb::cast<std::string>(e.value().attr("code")) != "timeout")
        throw;
      timed_out = nb::cast<std::string>(nb::str(e.value()));
    }
    if (!timed_out.empty())
      throw dcp::error(dcp::errc::timeout, std::string(call_ != nullptr ? call_ : "a collective call") + ": " + timed_out);
    got = np.attr("ascontiguousarray")(got, "dtype"_a = sent.attr("dtype"));
    const auto view = nb::cast<nb::ndarray<const T, nb::c_contig, nb::device::cpu>>(got);
    dcp::check(view.ndim() == 1 && view.shape(0) == n, dcp::errc::invalid_argument, [&] {
      return "world.all_reduce returned " + std::to_string(view.size()) + " values for " + std::to_string(n) +
             "; it must return an array of the shape it was given";
    });
    std::copy(view.data(), view.data() + n, data.begin());
  }
  template <class T>
  void all_reduce(std::span<const T> send, std::span<T> recv, dcp::reduce_op op) {
    dcp::check(send.size() == recv.size(), dcp::errc::invalid_argument, [&] {
      return "all_reduce: send has " + std::to_string(send.size()) + " values, recv " + std::to_string(recv.size());
    });
    std::copy(send.begin(), send.end(), recv.begin());
    all_reduce(recv, op);
  }
  python_world split(int, int) { refuse("split"); }
  template <class T>
  void all_to_all(std::span<const T>, std::span<T>) {
    refuse("all_to_all");
  }
  template <class T>
  void all_to_all_v(std::span<const T>, std::span<const std::size_t>, std::span<T>, std::span<const std::size_t>) {
    refuse("all_to_all_v");
  }
  template <class T>
  void all_gather(std::span<const T>, std::span<T>) {
    refuse("all_gather");
  }
  template <class T>
  void broadcast(std::span<T>, int) {
    refuse("broadcast");
  }
  template <class T>
  void send(std::span<const T>, int, int) {
    refuse("send");
  }
  template <class T>
  void recv(std::span<T>, int, int) {
    refuse("recv");
  }
  void barrier() { refuse("barrier"); }
  /// The scheduler call that is exchanging now ("Scheduler.verify"), for its errors; see `calling`.
  const char* call_ = nullptr;
  const nb::object& object() const noexcept { return world_; }

  void abort() noexcept { aborted_ = true; }
  bool aborted() const noexcept { return aborted_; }
  std::chrono::milliseconds timeout() const noexcept { return timeout_; }
  void set_timeout(std::chrono::milliseconds d) { timeout_ = d; }

 private:
  [[noreturn]] static void refuse(const char* what) {
    throw dcp::error(dcp::errc::unsupported, std::string("the Python world does not ") + what +
                                                 ": a Python loop moves its tensors itself (dcp.torch)");
  }

  nb::object world_;
  int rank_ = 0, size_ = 0;
  bool aborted_ = false;
  std::chrono::milliseconds timeout_ = dcp::default_timeout;
};
static_assert(dcp::host_communicator<python_world>);

// Names the scheduler call that may exchange over the world while it runs.
struct calling {
  python_world& world;
  calling(python_world& w, const char* name) : world(w) { world.call_ = name; }
  ~calling() { world.call_ = nullptr; }
  calling(const calling&) = delete;
  calling& operator=(const calling&) = delete;
};

// The scheduler a Python loop talks to: the dcp planner on blocks of any size, as `dcp.plan`.
using python_scheduler_type =
    dcp::scheduler<dcp::transformer_spec, python_world, dcp::policies<dcp::contiguous_groups>>;

struct python_scheduler {
  python_world world;
  python_scheduler_type sched;

  python_scheduler(python_world w, dcp::analytic_cost cost, dcp::scheduler_options options,
                   dcp::policies<dcp::contiguous_groups> policies)
      : world(std::move(w)), sched(cost.model, world, cost, std::move(options), std::move(policies)) {}  // cost copied
};

// One micro-step of one rank, with its groups as lists of GPU (process) ranks: what a Python
// loop needs to run it and to find its process groups.
struct rank_step {
  std::size_t index = 0;
  dcp::rank_block ranks;
  int group_rank = 0;
  int ring = 1;
  int tp_rank = 0;
  int stage = 0;
  int checkpointed_blocks = 0;
  double start_s = 0, time_s = 0;
  std::vector<dcp::planned_sequence> sequences;
  std::vector<int> gpus, ulysses_gpus, ring_gpus;
};

// The GPU ranks of TP rank `t` in `units` on pipeline stage `stage`.
std::vector<int> gpus_at(const dcp::parallel_layout& layout, const std::vector<int>& units, int t, int stage) {
  std::vector<int> out;
  for (const int u : units) out.push_back(layout.gpus_of({u, 1}, stage).first + t);
  return out;
}

// The Ulysses group and ring of unit position `p` in `block` split with `ring` (DESIGN 4.3:
// Ulysses groups of u = sp / ring consecutive units; ring i holds units i, i + u, ...).
std::pair<std::vector<int>, std::vector<int>> split_units(dcp::rank_block block, int ring, int p) {
  const int u = block.size / ring;
  std::vector<int> uly, rng;
  for (int j = 0; j < u; ++j) uly.push_back(block.first + p / u * u + j);
  for (int j = 0; j < ring; ++j) rng.push_back(block.first + p % u + j * u);
  return {uly, rng};
}

void check_plan_for(const python_scheduler_type& s, const dcp::plan& p) {
  const auto& l = s.layout();
  dcp::check(p.gpus == l.units() && p.layout.tp == l.tp && p.layout.pp == l.pp, dcp::errc::mismatch, [&] {
    return "the plan is for " + std::to_string(p.gpus) + " units of tp = " + std::to_string(p.layout.tp) +
           " on pp = " + std::to_string(p.layout.pp) + ", the scheduler's job has " + std::to_string(l.units()) +
           " units of tp = " + std::to_string(l.tp) + " on pp = " + std::to_string(l.pp) +
           "; plan with this scheduler or with its cost";
  });
}

// Rank `rank`'s micro-steps of `p`, in execution order (pure: no communication).
std::vector<rank_step> steps_of_rank(const python_scheduler_type& s, const dcp::plan& p, int rank) {
  check_plan_for(s, p);
  const auto& l = s.layout();
  dcp::check(rank >= 0 && rank < l.gpus, dcp::errc::invalid_argument, [&] {
    return "rank = " + std::to_string(rank) + " is not a rank of the job's " + std::to_string(l.gpus) + " GPUs";
  });
  const int unit = l.unit_of(rank), t = l.tp_rank_of(rank), stage = l.stage_of(rank);
  std::vector<rank_step> out;
  for (const std::size_t i : p.steps_of(unit)) {
    const auto& st = p.steps[i];
    rank_step r;
    r.index = i, r.ranks = st.ranks, r.group_rank = unit - st.ranks.first, r.ring = st.ring, r.tp_rank = t;
    r.stage = stage;
    r.checkpointed_blocks = st.checkpointed_blocks, r.start_s = st.start_s, r.time_s = st.time_s;
    r.sequences = st.sequences;
    const dcp::rank_block g = l.gpus_of(st.ranks, stage);
    for (int k = 0; k < g.size; ++k) r.gpus.push_back(g.first + k);
    const auto [uly, rng] = split_units(st.ranks, st.ring, r.group_rank);
    r.ulysses_gpus = gpus_at(l, uly, t, stage);
    r.ring_gpus = gpus_at(l, rng, t, stage);
    out.push_back(std::move(r));
  }
  return out;
}

// Every process group of more than one rank that some rank's steps of `p` use (the steps'
// groups, their Ulysses groups and rings), each once, in one order that every rank computes
// alike: the order to create them collectively in.
std::vector<std::vector<int>> process_groups_of(const python_scheduler_type& s, const dcp::plan& p) {
  check_plan_for(s, p);
  const auto& l = s.layout();
  std::set<std::vector<int>> seen;
  std::vector<std::vector<int>> out;
  auto add = [&](std::vector<int> g) {
    if (g.size() > 1 && seen.insert(g).second) out.push_back(std::move(g));
  };
  for (int stage = 0; stage < l.pp; ++stage)
    for (const auto& st : p.steps) {
      const dcp::rank_block g = l.gpus_of(st.ranks, stage);
      std::vector<int> all;
      for (int k = 0; k < g.size; ++k) all.push_back(g.first + k);
      add(std::move(all));
      for (int pos = 0; pos < st.sp(); ++pos)
        for (int t = 0; t < l.tp; ++t) {
          const auto [uly, rng] = split_units(st.ranks, st.ring, pos);
          add(gpus_at(l, uly, t, stage));
          add(gpus_at(l, rng, t, stage));
        }
    }
  std::sort(out.begin(), out.end(),
            [](const auto& a, const auto& b) { return a.size() != b.size() ? a.size() < b.size() : a < b; });
  return out;
}

// Calibration from Python: False / True, or a dict of calibration_options fields (on).
dcp::calibration_options calibration_of(nb::handle given, bool probe) {
  dcp::calibration_options o;
  o.probe.enabled = probe;
  if (nb::isinstance<nb::bool_>(given)) {
    o.enabled = nb::cast<bool>(given);
    return o;
  }
  dcp::check(nb::isinstance<nb::dict>(given), dcp::errc::invalid_argument, [&] {
    return "calibration = " + nb::cast<std::string>(nb::repr(given)) + " must be True, False or a dict of options";
  });
  o.enabled = true;
  for (auto [key, value] : nb::cast<nb::dict>(given)) {
    const std::string k = nb::cast<std::string>(key);
    if (k == "memory_margin") o.memory_margin = nb::cast<double>(value);
    else if (k == "min_memory_margin") o.min_memory_margin = nb::cast<double>(value);
    else if (k == "prior_weight") o.prior_weight = nb::cast<double>(value);
    else if (k == "window") o.window = nb::cast<std::size_t>(value);
    else if (k == "learn_speed") o.learn_speed = nb::cast<bool>(value);
    else if (k == "speed_tolerance") o.speed_tolerance = nb::cast<double>(value);
    else if (k == "speed_confidence") o.speed_confidence = nb::cast<double>(value);
    else if (k == "half_life") o.half_life = nb::cast<double>(value);
    else if (k == "full_fit_steps") o.full_fit_steps = nb::cast<std::size_t>(value);
    else
      throw dcp::error(dcp::errc::invalid_argument,
                       "calibration has no option '" + k +
                           "'; options are memory_margin, min_memory_margin, prior_weight, window, learn_speed, "
                           "speed_tolerance, speed_confidence, half_life, full_fit_steps");
  }
  return o;
}

// An optional field of the model as Python sees it: a number, a bool, or the loss's name.
template <class T>
T python_value(T v) {
  return v;
}
std::string python_value(dcp::loss_kind v) { return std::string(dcp::to_string(v)); }

// Sets optional field `key` of `t` from a keyword argument of Model; an unknown key names the fields.
void set_optional_field(dcp::transformer_spec& t, const std::string& key, nb::handle value) {
  const std::string text = nb::cast<std::string>(nb::repr(value));
  const auto assign = [&]<class T>(T& field) {
    if constexpr (std::is_same_v<T, dcp::loss_kind>) {
      const bool known = nb::isinstance<nb::str>(value) &&
                         (nb::cast<std::string>(value) == "full" || nb::cast<std::string>(value) == "chunked");
      dcp::check(known, dcp::errc::invalid_argument,
                 [&] { return "Model: loss = " + text + " must be full or chunked"; });
      field = nb::cast<std::string>(value) == "chunked" ? dcp::loss_kind::chunked : dcp::loss_kind::full;
    } else if constexpr (std::is_same_v<T, bool>) {
      dcp::check(nb::isinstance<nb::bool_>(value), dcp::errc::invalid_argument,
                 [&] { return "Model: " + key + " = " + text + " must be True or False"; });
      field = nb::cast<bool>(value);
    } else {
      dcp::check(nb::isinstance<nb::int_>(value) && !nb::isinstance<nb::bool_>(value), dcp::errc::invalid_argument,
                 [&] { return "Model: " + key + " = " + text + " must be an integer"; });
      std::int64_t v = 0;
      const bool in_range = nb::try_cast<std::int64_t>(value, v) && v >= std::numeric_limits<T>::min() &&
                            v <= std::numeric_limits<T>::max();
      dcp::check(in_range, dcp::errc::invalid_argument, [&] {
        return "Model: " + key + " = " + text + " is out of range [" + std::to_string(std::numeric_limits<T>::min()) +
               ", " + std::to_string(std::numeric_limits<T>::max()) + "]";
      });
      field = static_cast<T>(v);
    }
  };
#define DCP_PY_SET_OPTIONAL(f) \
  if (key == #f) return assign(t.f);
  DCP_MODEL_OPTIONAL_FIELDS(DCP_PY_SET_OPTIONAL)
#undef DCP_PY_SET_OPTIONAL
  std::string known;
#define DCP_PY_NAME_OPTIONAL(f) known += std::string(known.empty() ? "" : ", ") + #f;
  DCP_MODEL_OPTIONAL_FIELDS(DCP_PY_NAME_OPTIONAL)
#undef DCP_PY_NAME_OPTIONAL
  throw dcp::error(dcp::errc::invalid_argument, "Model: unknown field '" + key + "'; the optional fields are " + known);
}

dcp::loss_normalization loss_of(const std::string& name) {
  dcp::check(name == "token_mean" || name == "sample_mean", dcp::errc::invalid_argument,
             [&] { return "loss = '" + name + "' must be token_mean or sample_mean"; });
  return name == "sample_mean" ? dcp::loss_normalization::sample_mean : dcp::loss_normalization::token_mean;
}

// Sets the named fields of `d` (the device's and its kernel clock's), then validates it; `who`
// names the call in messages.
// `value` as a T, or a TypeError naming the call, the field and the type it must have (nb::cast
// would say only bad_cast).
template <class T>
T field_value(nb::handle value, const char* who, const std::string& field, const char* type) {
  T out{};
  if (!nb::try_cast(value, out))
    nb::raise_type_error("%s: %s must be %s, not %s", who, field.c_str(), type, nb::type_name(value.type()).c_str());
  return out;
}

void replace_device_fields(dcp::device_spec& d, const nb::kwargs& fields, const char* who) {
  for (auto [key, value] : fields) {
    const std::string k = nb::cast<std::string>(key);
    if (k == "name") {
      d.name = field_value<std::string>(value, who, k, "a str");
    } else if (k == "gpus_per_node") {
      d.gpus_per_node = field_value<int>(value, who, k, "an int");
    } else if (k == "precision") {
      const std::string p = field_value<std::string>(value, who, k, "a str");
      dcp::check(p == "bf16" || p == "fp8", dcp::errc::invalid_argument,
                 [&] { return std::string(who) + ": precision = '" + p + "'; use bf16 or fp8"; });
      d.precision = p == "fp8" ? dcp::gemm_precision::fp8 : dcp::gemm_precision::bf16;
    } else {
      dcp::kernel_clock& c = d.kernel;
      double* field = k == "peak"                      ? &d.peak
                      : k == "eff_max"                 ? &d.eff_max
                      : k == "x_half"                  ? &d.x_half
                      : k == "alpha"                   ? &d.alpha
                      : k == "tau"                     ? &d.tau
                      : k == "bw_intra"                ? &d.bw_intra
                      : k == "bw_inter"                ? &d.bw_inter
                      : k == "mem_bytes"               ? &d.mem_bytes
                      : k == "usable"                  ? &d.usable
                      : k == "beta"                    ? &d.beta
                      : k == "attention_forward"       ? &c.attention_forward
                      : k == "attention_forward_half"  ? &c.attention_forward_half
                      : k == "attention_backward"      ? &c.attention_backward
                      : k == "attention_backward_half" ? &c.attention_backward_half
                      : k == "attention_causal"        ? &c.attention_causal
                      : k == "head_width_64"           ? &c.head_width_64
                      : k == "head_width_256"          ? &c.head_width_256
                      : k == "tp_exposed"              ? &c.tp_exposed
                      : k == "hbm_bw"                  ? &c.hbm_bw
                      : k == "reserved_bytes"          ? &c.reserved_bytes
                      : k == "fp8_gemm"                ? &c.fp8_gemm
                                                       : nullptr;
      dcp::check(field != nullptr, dcp::errc::invalid_argument, [&] {
        return std::string(who) + ": no field '" + k +
               "'; fields are name, peak, eff_max, x_half, alpha, tau, bw_intra, bw_inter, gpus_per_node, mem_bytes, "
               "usable, beta, precision and the kernel clock's attention_forward, attention_forward_half, "
               "attention_backward, attention_backward_half, attention_causal, head_width_64, head_width_256, "
               "tp_exposed, hbm_bw, reserved_bytes, fp8_gemm";
      });
      *field = field_value<double>(value, who, k, "a number");
    }
  }
  dcp::validate(d);
}

}  // namespace

NB_MODULE(_dcp, m) {
  m.doc() = "dcp: Data-Centric Parallel planning (bindings of the C++ library)";

  // dcp.Error: every dcp::error, with its message and `code` (the errc name, or
  // "<category>:<value>" for MPI, NCCL and CUDA errors).
  // Held for the process's life: the translator outlives the module object.
  PyObject* error_type = PyErr_NewExceptionWithDoc("dcp.Error", "An error raised by dcp; `code` names its condition.",
                                                   PyExc_RuntimeError, nullptr);
  if (error_type == nullptr) throw nb::python_error();
  m.attr("Error") = nb::handle(error_type);
  dcp_error_type = error_type;
  nb::register_exception_translator(
      [](const std::exception_ptr& p, void* type) {
        try {
          std::rethrow_exception(p);
        } catch (const dcp::error& e) {
          // std::system_error appends ": <condition>"; the condition is in `code` already.
          std::string msg = e.what();
          const std::string tail = ": " + e.code().message();
          if (msg.size() > tail.size() && msg.ends_with(tail)) msg.resize(msg.size() - tail.size());
          const std::string code =
              e.code().category() == dcp::dcp_category()
                  ? dcp::to_string(static_cast<dcp::errc>(e.code().value()))
                  : std::string(e.code().category().name()) + ":" + std::to_string(e.code().value());
          PyObject* exc = PyObject_CallFunction(static_cast<PyObject*>(type), "s", msg.c_str());
          if (exc == nullptr) return;  // the call's own error is set
          PyObject* c = PyUnicode_FromString(code.c_str());
          if (c != nullptr) PyObject_SetAttrString(exc, "code", c);
          Py_XDECREF(c);
          PyErr_SetObject(static_cast<PyObject*>(type), exc);
          Py_DECREF(exc);
        }
      },
      error_type);

  // --- models and devices ------------------------------------------------------------------------
  nb::class_<dcp::transformer_spec> model(m, "Model",
                                          "A transformer model (dcp::transformer_spec). The fields after text_tokens "
                                          "are its optional fields (optional_fields), keyword-only.");
  model
      .def(
          "__init__",
          [](dcp::transformer_spec* self, std::string name, int blocks, std::int64_t hidden, int heads,
             std::int64_t mlp_width, int mlp_matrices, const std::string& attention, std::int64_t text_tokens,
             const nb::kwargs& optional) {
            dcp::transformer_spec t;
            t.name = std::move(name);
            t.blocks = blocks, t.hidden = hidden, t.heads = heads, t.mlp_width = mlp_width;
            t.mlp_matrices = mlp_matrices, t.text_tokens = text_tokens;
            if (attention == "full")
              t.attention = dcp::attention_kind::full;
            else if (attention == "causal")
              t.attention = dcp::attention_kind::causal;
            else if (attention == "factorized_2d")
              t.attention = dcp::attention_kind::factorized_2d;
            else
              throw dcp::error(dcp::errc::invalid_argument,
                               "attention = '" + attention + "' must be full, causal or factorized_2d");
            for (const auto& [key, value] : optional) set_optional_field(t, nb::cast<std::string>(key), value);
            dcp::validate(t);
            new (self) dcp::transformer_spec(std::move(t));
          },
          "name"_a, "blocks"_a, "hidden"_a, "heads"_a, "mlp_width"_a, "mlp_matrices"_a = 2, "attention"_a = "full",
          "text_tokens"_a = 0, "optional"_a)
      .def_ro("name", &dcp::transformer_spec::name)
      .def_ro("blocks", &dcp::transformer_spec::blocks)
      .def_ro("hidden", &dcp::transformer_spec::hidden)
      .def_ro("heads", &dcp::transformer_spec::heads)
      .def_ro("mlp_width", &dcp::transformer_spec::mlp_width)
      .def_ro("mlp_matrices", &dcp::transformer_spec::mlp_matrices)
      .def_prop_ro("attention", [](const dcp::transformer_spec& t) { return std::string(dcp::to_string(t.attention)); })
      .def_ro("text_tokens", &dcp::transformer_spec::text_tokens)
      .def_ro("pipeline_stages", &dcp::transformer_spec::pipeline_stages,
              "P: this model is the heaviest stage of a model split over P pipeline stages (1: the whole model).");
  // Every optional field, from the one table: an attribute, and `optional_fields` lists them.
  nb::list optional_names;
#define DCP_PY_OPTIONAL_ATTRIBUTE(f)                                                                       \
  model.def_prop_ro(#f, [](const dcp::transformer_spec& t) { return python_value(t.f); });                \
  optional_names.append(#f);
  DCP_MODEL_OPTIONAL_FIELDS(DCP_PY_OPTIONAL_ATTRIBUTE)
#undef DCP_PY_OPTIONAL_ATTRIBUTE
  model.attr("optional_fields") = nb::tuple(optional_names);
  model
      .def("parameters", &dcp::transformer_spec::parameters, "Parameters of the blocks.")
      .def("total_parameters", &dcp::transformer_spec::total_parameters, "Blocks plus embedding and head.")
      .def("active_parameters", &dcp::transformer_spec::active_parameters)
      .def("describe", [](const dcp::transformer_spec& t) { return dcp::describe(t); })
      .def("__eq__", [](const dcp::transformer_spec& a, const dcp::transformer_spec& b) { return a == b; })
      .def("__repr__", &printed<dcp::transformer_spec>);

  m.def(
      "model_preset", [](const std::string& name) { return dcp::models::preset(name); }, "name"_a,
      "The model preset `name` (see model_names()).");
  m.def("model_names", [] {
    std::vector<std::string> out(dcp::models::preset_names.begin(), dcp::models::preset_names.end());
    return out;
  });
  m.def(
      "model_from_config",
      [](const std::filesystem::path& path) {
        auto read = dcp::models::read_config(path);
        return std::make_pair(std::move(read.model), std::move(read.unpriced));
      },
      "path"_a,
      "The model of a Hugging Face config.json (or a folder holding one), and a note for each field it does not "
      "price.");

  nb::class_<dcp::device_spec>(m, "Device", "A GPU and its node (dcp::device_spec).")
      .def_ro("name", &dcp::device_spec::name)
      .def_ro("peak", &dcp::device_spec::peak)
      .def_ro("gpus_per_node", &dcp::device_spec::gpus_per_node)
      .def_ro("mem_bytes", &dcp::device_spec::mem_bytes)
      .def_ro("usable", &dcp::device_spec::usable)
      .def_ro("bw_intra", &dcp::device_spec::bw_intra)
      .def_ro("bw_inter", &dcp::device_spec::bw_inter)
      .def_ro("eff_max", &dcp::device_spec::eff_max)
      .def_ro("x_half", &dcp::device_spec::x_half)
      .def_ro("alpha", &dcp::device_spec::alpha)
      .def_ro("tau", &dcp::device_spec::tau)
      .def_ro("beta", &dcp::device_spec::beta)
      .def_prop_ro("reserved_bytes", [](const dcp::device_spec& d) { return d.kernel.reserved_bytes; })
      .def_prop_ro("precision", [](const dcp::device_spec& d) { return dcp::to_string(d.precision); })
      .def(
          "replace",
          [](const dcp::device_spec& d, const nb::kwargs& fields) {
            dcp::device_spec out = d;
            replace_device_fields(out, fields, "Device.replace");
            return out;
          },
          "fields"_a,
          "A copy with the named fields replaced (a measured or scaled device), validated: the device's own "
          "fields and its kernel clock's (DESIGN 4.6).")
      .def_static(
          "custom",
          [](double memory_gb, nb::handle peak_tflops, int gpus_per_node, const std::string& base,
             const nb::kwargs& fields) {
            dcp::check(std::isfinite(memory_gb) && memory_gb > 0, dcp::errc::invalid_argument, [&] {
              return "Device.custom: memory_gb = " + std::to_string(memory_gb) +
                     " must be a positive number of GB per GPU";
            });
            dcp::device_spec out = dcp::devices::preset(base);
            out.name = "custom";
            out.mem_bytes = memory_gb * 1e9;
            out.gpus_per_node = gpus_per_node;
            if (!peak_tflops.is_none()) {
              const double t = nb::cast<double>(peak_tflops);
              dcp::check(std::isfinite(t) && t > 0, dcp::errc::invalid_argument, [&] {
                return "Device.custom: peak_tflops = " + std::to_string(t) + " must be a positive dense TFLOP/s";
              });
              out.peak = t * 1e12;
            }
            replace_device_fields(out, fields, "Device.custom");
            return out;
          },
          "memory_gb"_a, "peak_tflops"_a = nb::none(), "gpus_per_node"_a = 8, "base"_a = "h200", "fields"_a,
          "A machine that is no preset: `base`'s constants (a preset name) with memory_gb GB per GPU, "
          "peak_tflops dense TFLOP/s (default: the base's), gpus_per_node, and any field `replace` takes; validated.")
      .def("capacity", &dcp::device_spec::capacity, "Bytes per GPU a step may use.")
      .def("__eq__", [](const dcp::device_spec& a, const dcp::device_spec& b) { return a == b; })
      .def("__repr__", [](const dcp::device_spec& d) {
        return "Device(" + d.name + ", " + std::to_string(d.gpus_per_node) + " GPUs per node, " +
               std::to_string(d.mem_bytes / 1e9) + " GB)";
      });
  m.def(
      "device_preset", [](const std::string& name) { return dcp::devices::preset(name); }, "name"_a);
  m.def("device_names",
        [] { return std::vector<std::string>(dcp::devices::preset_names.begin(), dcp::devices::preset_names.end()); });

  // --- the cost model ----------------------------------------------------------------------------
  nb::class_<dcp::analytic_cost>(m, "Cost", "The analytic cost model of a job (dcp::analytic_cost).")
      .def(
          "__init__",
          [](dcp::analytic_cost* self, nb::handle model, nb::handle device, int gpus, int gpus_per_node, int tp, int ep,
             const std::string& sharding, int ring, int pp) {
            new (self) dcp::analytic_cost(make_cost(model, device, gpus, gpus_per_node, tp, ep, sharding, ring, pp));
          },
          "model"_a, "device"_a = "h200", "gpus"_a = 8, "gpus_per_node"_a = 0, "tp"_a = 1, "ep"_a = 1,
          "sharding"_a = "zero1", "ring"_a = 1, "pp"_a = 1)
      .def_prop_ro("model", [](const dcp::analytic_cost& c) { return c.model; })
      .def_prop_ro("device", [](const dcp::analytic_cost& c) { return c.device; })
      .def_prop_ro("gpus", &dcp::analytic_cost::gpus, "Planner units (GPUs / tp).")
      .def_prop_ro("gpus_per_node", &dcp::analytic_cost::gpus_per_node, "Planner units per node.")
      .def_prop_ro("total_gpus", [](const dcp::analytic_cost& c) { return c.layout().gpus; })
      .def_prop_ro("tp", [](const dcp::analytic_cost& c) { return c.layout().tp; })
      .def_prop_ro("ep", [](const dcp::analytic_cost& c) { return c.layout().ep; })
      .def_prop_ro("ring", [](const dcp::analytic_cost& c) { return c.layout().ring; })
      .def_prop_ro("pp", [](const dcp::analytic_cost& c) { return c.layout().pp; })
      .def_prop_ro("sharding",
                   [](const dcp::analytic_cost& c) { return std::string(dcp::to_string(c.layout().sharding)); })
      .def("capacity", &dcp::analytic_cost::capacity, "Bytes per GPU a step may use.")
      .def(
          "tokens_of",
          [](const dcp::analytic_cost& c, std::int64_t length, std::int64_t frames) {
            return c.tokens_of(dcp::make_sequence(0, frames, length));
          },
          "length"_a, "frames"_a = 1, "Tokens the model sees for a sample of frames x length (plus text tokens).")
      .def("__repr__", [](const dcp::analytic_cost& c) {
        const auto& l = c.layout();
        return "Cost(" + c.model.name + " on " + std::to_string(l.gpus) + " x " + c.device.name + ", " +
               std::to_string(l.gpus_per_node) + " per node, tp=" + std::to_string(l.tp) +
               ", ep=" + std::to_string(l.ep) + ", ring=" + std::to_string(l.ring) + ", pp=" + std::to_string(l.pp) +
               ", " + dcp::to_string(l.sharding) + ")";
      });

  // --- plans -------------------------------------------------------------------------------------
  nb::class_<dcp::planned_sequence>(m, "PlannedSequence")
      .def_ro("id", &dcp::planned_sequence::id)
      .def_ro("tokens", &dcp::planned_sequence::tokens)
      .def_ro("frames", &dcp::planned_sequence::frames)
      .def_ro("spatial", &dcp::planned_sequence::spatial)
      .def_ro("loss_weight", &dcp::planned_sequence::loss_weight)
      .def("__repr__", [](const dcp::planned_sequence& q) {
        return "PlannedSequence(id=" + std::to_string(q.id) + ", tokens=" + std::to_string(q.tokens) +
               ", loss_weight=" + std::to_string(q.loss_weight) + ")";
      });

  nb::class_<dcp::plan_step>(m, "Step", "One micro-step: sequences run together on ranks [first, first + sp).")
      .def_prop_ro("first", [](const dcp::plan_step& s) { return s.ranks.first; })
      .def_prop_ro("sp", &dcp::plan_step::sp)
      .def_ro("ring", &dcp::plan_step::ring)
      .def_prop_ro("ulysses", &dcp::plan_step::ulysses)
      .def_prop_ro(
          "ranks", [](const dcp::plan_step& s) { return nb::make_tuple(s.ranks.first, s.ranks.end()); },
          "(first, end): the half-open range of planner units.")
      .def_ro("checkpointed_blocks", &dcp::plan_step::checkpointed_blocks)
      .def_ro("start_s", &dcp::plan_step::start_s)
      .def_ro("time_s", &dcp::plan_step::time_s)
      .def_prop_ro("end_s", &dcp::plan_step::end_s)
      .def_ro("memory_bytes", &dcp::plan_step::memory_bytes)
      .def_ro("round", &dcp::plan_step::round)
      .def_ro("sequences", &dcp::plan_step::sequences)
      .def("__repr__", [](const dcp::plan_step& s) {
        return "Step(ranks=" + printed(s.ranks) + ", sequences=" + std::to_string(s.sequences.size()) +
               ", start_s=" + std::to_string(s.start_s) + ", time_s=" + std::to_string(s.time_s) + ")";
      });

  nb::class_<dcp::skipped_sequence>(m, "SkippedSequence")
      .def_ro("id", &dcp::skipped_sequence::id)
      .def_ro("tokens", &dcp::skipped_sequence::tokens)
      .def_ro("reason", &dcp::skipped_sequence::reason);

  nb::class_<dcp::plan>(m, "Plan", "The plan of one global batch (dcp::plan).")
      .def_ro("method", &dcp::plan::method)
      .def_ro("gpus", &dcp::plan::gpus)
      .def_ro("gpus_per_node", &dcp::plan::gpus_per_node)
      .def_ro("memory_capacity_bytes", &dcp::plan::memory_capacity_bytes)
      .def_ro("steps", &dcp::plan::steps)
      .def_ro("makespan_s", &dcp::plan::makespan_s)
      .def_ro("lower_bound_s", &dcp::plan::lower_bound_s)
      .def_ro("joint_lower_bound_s", &dcp::plan::joint_lower_bound_s)
      .def_ro("skipped", &dcp::plan::skipped)
      .def_ro("warmup_depth", &dcp::plan::warmup_depth,
              "Under pipeline stages, stage s runs warmup_depth * (pp - 1 - s) forwards before its first backward (1: "
              "1F1B).")
      .def("efficiency", &dcp::plan::efficiency, "The larger lower bound over the makespan (1 = optimal).")
      .def("hash", &dcp::plan::hash, "A 64-bit digest every rank can compare.")
      .def(
          "violations",
          [](const dcp::plan& p, const dcp::analytic_cost& cost, nb::handle lengths, nb::handle ids) {
            const dcp::dataset batch = to_sequences(lengths, "lengths", ids);
            return dcp::plan_violations(p, std::span<const dcp::sequence>(batch), cost, groups_of(cost));
          },
          "cost"_a, "lengths"_a, "ids"_a = nb::none(),
          "The laws this plan breaks for `lengths` (ids: as planned) on `cost`; empty for a sound plan.")
      .def("__eq__", [](const dcp::plan& a, const dcp::plan& b) { return a == b; })
      .def("__repr__", &printed<dcp::plan>);

  m.def("plan", &plan_batch, "cost"_a, "lengths"_a, "method"_a = "dcp", "dataset"_a = nb::none(),
        "global_batch_tokens"_a = 0, "seed"_a = 0, "on_infeasible"_a = "error", "ids"_a = nb::none(),
        "Plans one global batch with `method`; bucket, packed and dynamic_cp (and dcp's pipeline knobs under pp > "
        "1) are tuned on `dataset` (default: the batch). Sequence i gets id ids[i] (default: i).");
  m.def(
      "_plan_seconds",
      [](const dcp::analytic_cost& cost, nb::handle lengths, const std::string& method, int repeats) {
        // The C++ side of python/benchmarks/plan_overhead.py: the call `plan` makes, timed in C++.
        const dcp::dataset batch = to_sequences(lengths, "lengths");
        dcp::sim::method_settings s;
        std::vector<double> seconds;
        nb::gil_scoped_release unlocked;
        for (int r = 0; r < repeats; ++r) {
          const auto t0 = std::chrono::steady_clock::now();
          const dcp::planning_context ctx{cost, dcp::selective_recompute{}, groups_of(cost)};
          const dcp::plan p = dcp::sim::with_method(method, ctx, std::span<const dcp::sequence>(batch), s,
                                                    [&](const auto& planner, double) { return planner.plan(ctx, batch); });
          seconds.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
          dcp::check(!p.steps.empty() || batch.empty(), dcp::errc::invalid_argument, [] { return std::string("empty plan"); });
        }
        return seconds;
      },
      "cost"_a, "lengths"_a, "method"_a = "dcp", "repeats"_a = 1,
      "Seconds of each of `repeats` C++ planning calls on `lengths` (what plan() runs, without the Python side).");
  m.def("method_names",
        [] { return std::vector<std::string>(dcp::sim::method_names.begin(), dcp::sim::method_names.end()); });

  m.def(
      "plans_to_json",
      [](const dcp::analytic_cost& cost, const std::vector<dcp::plan>& plans) {
        // The format records one method per document (every plan reads back with the first's).
        for (const auto& p : plans)
          dcp::check(p.method == plans.front().method, dcp::errc::invalid_argument, [&] {
            return "plans_to_json: a document holds one method's plans, and these mix '" + plans.front().method +
                   "' with '" + p.method + "'; write one document per method";
          });
        std::ostringstream os;
        dcp::sim::write_plan_json(os, cost, std::span<const dcp::plan>(plans));
        return os.str();
      },
      "cost"_a, "plans"_a, "A dcp.plan/v3 document of one method's plans (what dcp-sim --plan-out writes).");
  m.def(
      "plans_from_json",
      [](const std::string& text) {
        std::istringstream in(text);
        return dcp::sim::read_plan_json(in, "plans_from_json").plans;
      },
      "text"_a);

  // --- workloads and the simulator ---------------------------------------------------------------
  m.def("workload_names",
        [] { return std::vector<std::string>(dcp::workloads::names.begin(), dcp::workloads::names.end()); });
  m.def(
      "workload",
      [](const std::string& name, std::uint64_t seed) {
        const auto data = dcp::workloads::make(name, seed);
        std::vector<std::int64_t> v;
        v.reserve(2 * data.size());
        for (const auto& s : data) v.push_back(s.frames), v.push_back(s.spatial);
        return owned_array(std::move(v), {data.size(), 2});
      },
      "name"_a, "seed"_a = 0, "The embedded workload `name` as an (n, 2) array of (frames, tokens per frame).");
  m.def("simulate", &simulate, "workload"_a = "cogvideox-zipf10", "model"_a = nb::none(), "device"_a = "h200",
        "gpus"_a = 32, "gpus_per_node"_a = 8,
        "methods"_a = std::vector<std::string>{"dcp", "bucket", "packed", "dynamic_cp"}, "global_batch_tokens"_a = 0,
        "seed"_a = 0, "tp"_a = 1, "ep"_a = 1, "sharding"_a = "zero1", "ring"_a = 1, "pp"_a = 1,
        "Plans every global batch of one epoch with each method on the cost model's clock, as dcp-sim does.");

  // --- the sampler -------------------------------------------------------------------------------
  nb::class_<sampler>(m, "Sampler", "Global batches filled to a token budget, shuffled from a seed, resumable.")
      .def(
          "__init__",
          [](sampler* self, nb::handle lengths, std::int64_t global_batch_tokens, std::uint64_t seed, nb::handle cost) {
            new (self) sampler(make_sampler(lengths, global_batch_tokens, seed, cost));
          },
          "lengths"_a, "global_batch_tokens"_a = 0, "seed"_a = 0, "cost"_a = nb::none())
      .def(
          "next",
          [](sampler& s) {
            const auto b = s.s.next();
            std::vector<std::int64_t> ids;
            ids.reserve(b.sequences.size());
            for (const auto& q : b.sequences) ids.push_back(q.id);
            const std::size_t n = ids.size();
            return owned_array(std::move(ids), {n});
          },
          "The ids of the next global batch; after an epoch's last batch comes the next epoch's first.")
      .def("state",
           [](const sampler& s) {
             const auto st = s.s.state();
             nb::dict d;
             d["seed"] = st.seed;
             d["epoch"] = st.epoch;
             d["position"] = st.position;
             return d;
           })
      .def(
          "restore",
          [](sampler& s, const nb::dict& d) {
            s.s.restore(dcp::sampler_state{static_cast<std::uint64_t>(dict_int(d, "seed")), dict_int(d, "epoch"),
                                           dict_int(d, "position")});
          },
          "state"_a, "Resumes at a state() of a sampler over the same lengths and budget.")
      .def(
          "save",
          [](const sampler& s) {
            std::ostringstream os;
            s.s.save(os);
            return os.str();
          },
          "The state as dcp.sampler_state/v1 JSON, with the dataset's fingerprint.")
      .def(
          "load",
          [](sampler& s, const std::string& text) {
            std::istringstream in(text);
            s.s.load(in, "Sampler.load");
          },
          "text"_a)
      .def_prop_ro("budget", [](const sampler& s) { return s.s.budget(); })
      .def_prop_ro("batch_index", [](const sampler& s) { return s.s.batch_index(); })
      .def("__len__", [](const sampler& s) { return s.s.size(); })
      .def(
          "batches_in_epoch", [](const sampler& s, std::int64_t epoch) { return s.s.batches_in_epoch(epoch); },
          "epoch"_a);
  // --- the scheduler -----------------------------------------------------------------------------
  nb::class_<rank_step>(m, "RankStep",
                        "One micro-step of one rank: what to run, with which process groups, how to weight it.")
      .def_ro("index", &rank_step::index, "The step's position in the plan's steps.")
      .def_prop_ro(
          "ranks", [](const rank_step& r) { return nb::make_tuple(r.ranks.first, r.ranks.end()); },
          "(first, end): the step's planner units.")
      .def_prop_ro("sp", [](const rank_step& r) { return r.ranks.size; })
      .def_ro("ring", &rank_step::ring)
      .def_prop_ro("ulysses", [](const rank_step& r) { return r.ranks.size / r.ring; })
      .def_ro("group_rank", &rank_step::group_rank, "This rank's unit's position in the step: its token shard.")
      .def_ro("tp_rank", &rank_step::tp_rank)
      .def_ro("stage", &rank_step::stage, "This rank's pipeline stage: the step runs on its matching units.")
      .def_ro("checkpointed_blocks", &rank_step::checkpointed_blocks, "Recompute the first k blocks.")
      .def_ro("start_s", &rank_step::start_s)
      .def_ro("time_s", &rank_step::time_s)
      .def_ro("sequences", &rank_step::sequences)
      .def_ro("gpus", &rank_step::gpus, "The step's process ranks (sp x tp of them).")
      .def_ro("ulysses_gpus", &rank_step::ulysses_gpus, "This rank's Ulysses group (its TP rank in u units).")
      .def_ro("ring_gpus", &rank_step::ring_gpus, "This rank's ring (its TP rank in ring units, u apart).")
      .def("__repr__", [](const rank_step& r) {
        return "RankStep(index=" + std::to_string(r.index) + ", ranks=" + printed(r.ranks) +
               ", ring=" + std::to_string(r.ring) + ", checkpointed_blocks=" + std::to_string(r.checkpointed_blocks) +
               ", sequences=" + std::to_string(r.sequences.size()) + ")";
      });

  nb::class_<python_scheduler>(m, "Scheduler",
                               "dcp's scheduler for a training loop: plans (dcp planner, groups of any size), this "
                               "rank's steps and their process groups, verification and online calibration.")
      .def(
          "__init__",
          [](python_scheduler* self, const dcp::analytic_cost& cost, nb::object world, int rank, nb::object calibration,
             bool probe, std::int64_t global_batch_tokens, std::uint64_t seed, nb::object loss,
             nb::object on_infeasible, nb::handle dataset, bool restrictions) {
            const int size = cost.layout().gpus;
            if (!world.is_none()) {
              const int wr = nb::cast<int>(world.attr("rank")()), ws = nb::cast<int>(world.attr("size")());
              dcp::check(ws == size, dcp::errc::mismatch, [&] {
                return "the world has " + std::to_string(ws) + " ranks and the cost model's job " +
                       std::to_string(size) + " GPUs; build the cost for this world (gpus=" + std::to_string(ws) + ")";
              });
              rank = wr;
            }
            dcp::check(rank >= 0 && rank < size, dcp::errc::invalid_argument, [&] {
              return "rank = " + std::to_string(rank) + " is not a rank of the job's " + std::to_string(size) + " GPUs";
            });
            dcp::scheduler_options o;
            o.device = cost.device;
            o.global_batch_tokens = global_batch_tokens;
            o.seed = seed;
            o.calibration = calibration_of(calibration, probe);
            if (!loss.is_none()) o.loss = loss_of(nb::cast<std::string>(loss));
            if (!on_infeasible.is_none()) o.on_infeasible = infeasible_of(nb::cast<std::string>(on_infeasible));
            // Under pipeline stages the planner's micro-batch shape is tuned on the dataset, as dcp.plan
            // tunes it (the same epoch: global_batch_tokens and seed).
            dcp::policies<dcp::contiguous_groups> policies;
            policies.planner.restrictions = restrictions;
            if (!dataset.is_none()) {
              const dcp::dataset data = to_sequences(dataset, "dataset");
              if (o.on_infeasible) policies.planner.on_infeasible = *o.on_infeasible;
              nb::gil_scoped_release unlocked;
              const dcp::planning_context ctx{cost, dcp::selective_recompute{}, groups_of(cost)};
              policies.planner =
                  dcp::tune(policies.planner, ctx, std::span<const dcp::sequence>(data), global_batch_tokens, seed);
            }
            new (self)
                python_scheduler(python_world(std::move(world), rank, size), cost, std::move(o), std::move(policies));
          },
          "cost"_a, "world"_a = nb::none(), "rank"_a = 0, "calibration"_a = false, "probe"_a = true,
          "global_batch_tokens"_a = 0, "seed"_a = 0, "loss"_a = nb::none(), "on_infeasible"_a = nb::none(),
          "dataset"_a = nb::none(), "restrictions"_a = true,
          "cost: the job (its gpus are the world's ranks). world: an object with rank(), size() and "
          "all_reduce(array, op) (dcp.torch.World); without one the scheduler plans for `rank`. calibration: True, "
          "or a dict of calibration options. probe: with calibration on, whether probe() runs a start-up probe of the "
          "first batch. global_batch_tokens: the token budget of a global batch (0: 262144 x GPUs); seed: the "
          "shuffle seed, the same on every rank. loss: 'token_mean' (default) or 'sample_mean', how loss weights "
          "are set. on_infeasible: 'error' (default) or 'skip' a sequence that fits on no group. dataset: the "
          "training set's lengths, to tune the micro-batch shape under pipeline stages. restrictions: True (default): a "
          "sparse batch is also planned as the planner allowed less (no DCP-intra, no DCP-inter, neither) and the "
          "sooner plan kept; False: the full plan only (plans faster; keeps small batches' padding passes and unequal "
          "micro-step counts). A collective call the other "
          "ranks do not make raises dcp.Error (code 'timeout') naming the call, after the world's timeout.")
      .def_prop_ro(
          "pipeline_knobs",
          [](const python_scheduler& s) {
            const auto& k = s.sched.policies().planner.pipeline;
            return std::make_pair(k.path_cap, k.room);
          },
          "(path_cap, room): the dcp planner's micro-batch shape under pipeline stages, tuned on `dataset` when "
          "given (DESIGN 4.5).")
      .def_prop_ro(
          "world", [](const python_scheduler& s) { return s.world.object(); },
          "The world object the scheduler was built with (None without one).")
      .def_prop_ro("rank", [](const python_scheduler& s) { return s.world.rank(); })
      .def_prop_ro("world_size", [](const python_scheduler& s) { return s.world.size(); })
      .def_prop_ro("cost", [](const python_scheduler& s) { return s.sched.cost(); })
      .def_prop_ro("calibrating", [](const python_scheduler& s) { return s.sched.calibration() != nullptr; })
      .def(
          "plan",
          [](python_scheduler& s, nb::handle lengths, nb::handle ids) {
            const dcp::dataset batch = to_sequences(lengths, "lengths", ids);
            const calling call(s.world, "Scheduler.plan");
            nb::gil_scoped_release unlocked;  // the world's exchange takes it back
            return s.sched.plan(std::span<const dcp::sequence>(batch));
          },
          "lengths"_a, "ids"_a = nb::none(),
          "Plans a global batch (sequence i gets id ids[i]). Pure and the same on every rank; collective over the "
          "world when calibrating (it exchanges the observed steps and refits).")
      .def(
          "probe",
          [](python_scheduler& s, nb::handle lengths, nb::handle ids) {
            const dcp::dataset batch = to_sequences(lengths, "lengths", ids);
            const calling call(s.world, "Scheduler.probe");
            nb::gil_scoped_release unlocked;
            return s.sched.probe(std::span<const dcp::sequence>(batch));
          },
          "lengths"_a, "ids"_a = nb::none(),
          "The start-up probe of the first batch (calibrating, before the first plan): run and observe its steps, "
          "discard their gradients, then plan.")
      .def(
          "verify",
          [](python_scheduler& s, const dcp::plan& p) {
            const calling call(s.world, "Scheduler.verify");
            s.sched.verify(p);
          },
          "plan"_a,
          "Collective: raises dcp.Error (code mismatch) on every rank unless all ranks hold the same plan.")
      .def(
          "steps_for",
          [](const python_scheduler& s, const dcp::plan& p, std::optional<int> rank) {
            return steps_of_rank(s.sched, p, rank.value_or(s.world.rank()));
          },
          "plan"_a, "rank"_a = nb::none(),
          "The micro-steps of `rank` (default: this one) in `plan`, in execution order. Any plan for this job "
          "(dcp.plan with the scheduler's cost, any method) is accepted.")
      .def(
          "pipeline_for",
          [](const python_scheduler& s, const dcp::plan& p, std::optional<int> rank) {
            const int r = rank.value_or(s.world.rank());
            const auto& l = s.sched.layout();
            std::vector<rank_step> steps = steps_of_rank(s.sched, p, r);
            std::vector<std::size_t> position(p.steps.size(), p.steps.size());
            for (std::size_t i = 0; i < steps.size(); ++i) position[steps[i].index] = i;
            nb::list ops;
            for (const dcp::pipeline_op& o : dcp::pipeline_ops(p, l.pp, l.unit_of(r), l.stage_of(r)))
              ops.append(nb::make_tuple(position[o.step], o.backward ? "backward" : "forward"));
            nb::dict out;
            out["stage"] = l.stage_of(r);
            out["stages"] = l.pp;
            out["steps"] = std::move(steps);
            out["ops"] = ops;
            out["previous"] = l.stage_of(r) > 0 ? r - l.stage_gpus() : -1;
            out["next"] = l.stage_of(r) + 1 < l.pp ? r + l.stage_gpus() : -1;
            return out;
          },
          "plan"_a, "rank"_a = nb::none(),
          "`rank`'s share of a pipelined plan (the cost's pp): its stage, its steps, the (step position, "
          "'forward' | 'backward') operations in 1F1B order at the plan's warmup depth, and the ranks one stage before "
          "and after (-1: none).")
      .def(
          "process_groups", [](const python_scheduler& s, const dcp::plan& p) { return process_groups_of(s.sched, p); },
          "plan"_a,
          "Every process group of two or more ranks that the plan's steps use, once each, in the order every rank "
          "computes alike (the order to create them collectively).")
      .def(
          "observe",
          [](python_scheduler& s, nb::handle step, double seconds, double peak_bytes) {
            const std::size_t index =
                nb::isinstance<rank_step>(step) ? nb::cast<const rank_step&>(step).index : nb::cast<std::size_t>(step);
            s.sched.observe(index, seconds, peak_bytes);
          },
          "step"_a, "seconds"_a, "peak_bytes"_a = 0.0,
          "Records what this rank measured for a step of the last plan (a RankStep or its index): seconds, and "
          "peak memory in bytes (0: not measured). Calibration only.")
      .def("__repr__", [](const python_scheduler& s) {
        return "Scheduler(rank " + std::to_string(s.world.rank()) + " of " + std::to_string(s.world.size()) + ", " +
               s.sched.cost().model.name + (s.sched.calibration() ? ", calibrating)" : ")");
      });
}
