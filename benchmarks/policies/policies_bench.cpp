// Plan latency and efficiency (lower bound / makespan, DESIGN section 3) of every combination of
//   recompute {none, full, selective} x planner {dcp, dcp without DCP-inter} x workload {1D, 2D},
// each planned by a `dcp::scheduler` whose policy bundle Boost.Hana builds from the combination,
// on 32 H200s and one fixed global batch per workload.
//
// The bucketing slot is not in the product: no planner reads it from the bundle today (the
// scheduler passes only the cost model and the recompute policy), so its rows would repeat.
#include <benchmark/benchmark.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <boost/hana/at.hpp>
#include <boost/hana/cartesian_product.hpp>
#include <boost/hana/for_each.hpp>
#include <boost/hana/integral_constant.hpp>
#include <boost/hana/tuple.hpp>
#include <boost/hana/type.hpp>

#include <dcp/comm/local.hpp>
#include <dcp/recompute/full_recompute.hpp>
#include <dcp/recompute/no_recompute.hpp>
#include <dcp/recompute/selective_recompute.hpp>
#include <dcp/scheduler.hpp>
#include <dcp/workload/embedded.hpp>

namespace hana = boost::hana;

namespace {

constexpr int gpus = 32;

// ---- the axes of the product: one type per choice -------------------------------------------
template <class R>
struct recompute_choice;
template <>
struct recompute_choice<dcp::no_recompute> {
  static constexpr const char* name = "none";
};
template <>
struct recompute_choice<dcp::full_recompute> {
  static constexpr const char* name = "full";
};
template <>
struct recompute_choice<dcp::selective_recompute> {
  static constexpr const char* name = "selective";
};

struct dcp_inter {  // the full planner
  static constexpr const char* name = "dcp";
  static dcp::dcp_planner make() { return {}; }
};
struct dcp_no_inter {  // ablation: no balancing of gradient accumulation across groups
  static constexpr const char* name = "dcp-no-inter";
  static dcp::dcp_planner make() {
    dcp::dcp_planner p;
    p.inter = false;
    return p;
  }
};

struct video_1d {
  static constexpr const char* name = "cogvideox-zipf10";
  static dcp::transformer_spec model() { return dcp::models::cogvideox_5b(); }
};
struct video_2d {
  static constexpr const char* name = "opensora-zipf10";
  static dcp::transformer_spec model() { return dcp::models::stdit3_xl(); }
};

constexpr auto recomputes = hana::tuple_t<dcp::no_recompute, dcp::full_recompute, dcp::selective_recompute>;
constexpr auto planners = hana::tuple_t<dcp_inter, dcp_no_inter>;
constexpr auto workloads = hana::tuple_t<video_1d, video_2d>;

// The first global batch of a workload, as every rank's sampler draws it.
template <class Workload>
const dcp::dataset& fixed_batch() {
  static const dcp::dataset batch = [] {
    dcp::token_budget_sampler sampler(dcp::workloads::make(Workload::name), dcp::default_tokens_per_gpu * gpus, 0,
                                      [m = Workload::model()](const dcp::sequence& s) {
                                        return m.tokens_of(s.frames, s.spatial);
                                      });
    return sampler.next().sequences;
  }();
  return batch;
}

template <class Recompute, class Planner, class Workload>
void plan_batch(benchmark::State& state) {
  using bundle = dcp::policies<Recompute, dcp::use<dcp::slot::planner, dcp::dcp_planner>>;
  // Rank 0 of a 32-rank world: planning never communicates, so no other rank needs to run.
  dcp::local_comm world(dcp::local_hub::make(gpus), 0);
  dcp::scheduler_options options;
  options.on_infeasible = dcp::infeasible_policy::skip;  // no_recompute cannot fit the longest clips
  bundle policies;
  policies.planner = Planner::make();
  dcp::scheduler<dcp::transformer_spec, dcp::local_comm, bundle> sched(Workload::model(), world, options, policies);

  const dcp::dataset& batch = fixed_batch<Workload>();
  dcp::plan p;
  for (auto _ : state) {
    p = sched.plan(batch);
    benchmark::DoNotOptimize(p);
  }
  std::int64_t tokens = 0;
  for (const auto& s : p.steps)
    for (const auto& q : s.sequences) tokens += q.tokens;
  state.counters["efficiency"] = p.efficiency();
  state.counters["makespan_s"] = p.makespan_s;
  state.counters["tokens_per_s"] = p.makespan_s > 0 ? double(tokens) / p.makespan_s : 0;
  state.counters["steps"] = double(p.steps.size());
  state.counters["sequences"] = double(batch.size());
  state.counters["skipped"] = double(p.skipped.size());
  state.counters["gpus"] = gpus;
}

// One benchmark per element of the product.
void register_all() {
  hana::for_each(hana::cartesian_product(hana::make_tuple(recomputes, planners, workloads)), [](auto combo) {
    using R = typename decltype(+hana::at_c<0>(combo))::type;
    using P = typename decltype(+hana::at_c<1>(combo))::type;
    using W = typename decltype(+hana::at_c<2>(combo))::type;
    const std::string name = std::string("plan/recompute:") + recompute_choice<R>::name + "/planner:" + P::name +
                             "/workload:" + W::name;
    benchmark::RegisterBenchmark(name.c_str(), &plan_batch<R, P, W>)->Unit(benchmark::kMillisecond);
  });
}

}  // namespace

int main(int argc, char** argv) {
  register_all();
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
