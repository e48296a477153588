// Published training runs priced on dcp's clocks (DESIGN section 4.6): each run's model as its
// config file publishes it, its layout, batch and recompute as its recipe states them, priced
// on the default kernel clock and on section 4's analytic clock, against the throughput its
// publisher measured. The clock's constants come from kernel and collective measurements
// (DESIGN 4.6), never from these rows: the rows check them.
//
// A published run is a static configuration: every data-parallel rank runs its share of the
// global batch as micro-batches of one sequence on a context-parallel group of `cp` TP groups,
// priced as a ring of cp (Megatron's context parallelism passes K/V blocks point to point), with
// `recompute` checkpointed blocks (or the fewest that fit, where the recipe does not say). The
// batch's time is its micro-batches' on one rank, and with pipeline stages 1F1B's
// (m + (pp - 1) / vp) stage slots of a micro-batch's forward, backward and two stage transfers
// (Megatron's interleaved schedule shrinks the fill and drain by vp), plus the per-batch update.
// The dcp column plans the same batch with the dcp planner on the same layout and clock (under
// pipeline stages its pipeline knobs tuned on that batch, as dcp-sim tunes them on a workload).
//
//   dcp_published_runs [--json] [--check]
// --check: exit 1 unless every row whose layout dcp expresses is within [0.85, 1.15] of its
// published figure on the default clock.

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include <dcp/cost/analytic.hpp>
#include <dcp/error.hpp>
#include <dcp/model/config.hpp>
#include <dcp/plan/check_plan.hpp>
#include <dcp/plan/dcp_planner.hpp>
#include <dcp/sequence.hpp>
#include <dcp/sim/simulator.hpp>
#include <dcp/workload/tuning.hpp>

#ifndef DCP_CONFIGS_DIR
#error "DCP_CONFIGS_DIR must name tests/data/configs"
#endif

namespace {

/// One published run: what was measured, where, and the configuration it ran.
struct published_run {
  const char* id;
  const char* run;
  const char* source;
  const char* config;  // folder under tests/data/configs
  const char* device;
  int gpus, tp, cp, pp = 1, vp = 1, ep = 1;
  dcp::sharding_kind sharding = dcp::sharding_kind::zero1;
  dcp::gemm_precision precision = dcp::gemm_precision::bf16;
  std::int64_t sequences, tokens;  // global batch: sequences of this many tokens
  int recompute = -1;              // checkpointed blocks; -1: the fewest that fit
  double published;                // tokens/s/GPU
  const char* not_expressed = "";
};

const published_run runs[] = {
    {.id = "A",
     .run = "Llama-3.1-8B BF16, 8 GPUs, TP1 CP2, GBS 128 x 8192, no recompute",
     .source = "NVIDIA dgxc-benchmarking llama3.1/README.md (v25.04)",
     .config = "llama-3.1-8b",
     .device = "h100",
     .gpus = 8,
     .tp = 1,
     .cp = 2,
     .sequences = 128,
     .tokens = 8192,
     .recompute = 0,
     .published = 10682},
    {.id = "D",
     .run = "Llama-3.1-70B BF16, 64 GPUs, TP4 PP4 CP2 VP5, GBS 128 x 8192",
     .source = "NVIDIA dgxc-benchmarking llama3.1/README.md (v25.04)",
     .config = "llama-3.1-70b",
     .device = "h100",
     .gpus = 64,
     .tp = 4,
     .cp = 2,
     .pp = 4,
     .vp = 5,
     .sequences = 128,
     .tokens = 8192,
     .published = 1118,
     .not_expressed = "virtual stages priced as a shorter fill and drain only"},
    {.id = "G",
     .run = "Qwen3-30B-A3B BF16, 8 GPUs, EP8 FSDP8, GBS 512 x 4096, balanced routing",
     .source = "NeMo Automodel docs/performance-summary.mdx",
     .config = "qwen3-30b-a3b",
     .device = "h100",
     .gpus = 8,
     .tp = 1,
     .cp = 1,
     .ep = 8,
     .sharding = dcp::sharding_kind::zero3,
     .sequences = 512,
     .tokens = 4096,
     .published = 12040},
    {.id = "I",
     .run = "Wan2.1-14B BF16, 128 GPUs, TP2 + SP, CP4, GBS 128 x 37,440 tokens, 8 blocks recomputed",
     .source = "NeMo DFM docs/performance-summary.md (Megatron backend)",
     .config = "wan2.1-t2v-14b-diffusers",
     .device = "h100",
     .gpus = 128,
     .tp = 2,
     .cp = 4,
     .sequences = 128,
     .tokens = 37440,
     .recompute = 8,
     .published = 1972},
    {.id = "L2",
     .run = "Llama-2-7B FP8, 128 GPUs, TP4 CP4, 128k tokens, GBS 32",
     .source = "NeMo docs/source/performance/performance_long_sequence.md (24.03)",
     .config = "llama-2-7b",
     .device = "h100",
     .gpus = 128,
     .tp = 4,
     .cp = 4,
     .precision = dcp::gemm_precision::fp8,
     .sequences = 32,
     .tokens = 131072,
     .published = 2258},
    {.id = "L4",
     .run = "Llama-2-7B FP8, 1024 GPUs, TP8 CP32, 1M tokens, GBS 4",
     .source = "NeMo docs/source/performance/performance_long_sequence.md (24.03)",
     .config = "llama-2-7b",
     .device = "h100",
     .gpus = 1024,
     .tp = 8,
     .cp = 32,
     .precision = dcp::gemm_precision::fp8,
     .sequences = 4,
     .tokens = 1048576,
     .published = 317},
};

struct priced {
  double tokens_per_s_per_gpu = 0;
  int recompute = 0;
  bool fits = true;
};

dcp::analytic_cost cost_of(const published_run& r, const dcp::transformer_spec& model, dcp::device_spec device,
                           int ring) {
  device.precision = device.kernel.enabled() ? r.precision : dcp::gemm_precision::bf16;
  return dcp::make_analytic_cost(model, device,
                                 {.gpus = r.gpus,
                                  .gpus_per_node = device.gpus_per_node,
                                  .tp = r.tp,
                                  .ep = r.ep,
                                  .sharding = r.sharding,
                                  .ring = ring,
                                  .pp = r.pp});
}

// The published configuration on `cost` (a ring of cp for context parallelism).
priced price_published(const published_run& r, const dcp::analytic_cost& cost) {
  const dcp::sequence s = dcp::make_sequence(0, r.tokens);
  const auto load = cost.load_of(s);
  const int sp = r.cp, ring = r.cp;
  priced out;
  int k = r.recompute;
  if (k < 0) {
    k = 0;
    while (k < cost.blocks() && cost.memory(load, sp, k) > cost.capacity()) ++k;
  }
  out.recompute = k;
  out.fits = cost.memory(load, sp, k) <= cost.capacity();
  const double dp = static_cast<double>(r.gpus) / (r.tp * r.cp * r.pp);
  const double micro_batches = static_cast<double>(r.sequences) / dp;
  double seconds = 0;
  if (r.pp == 1) {
    seconds = micro_batches * cost.time(load, sp, k, ring);
  } else {
    const double slot = cost.time(load, sp, k, ring) + 2 * cost.stage_transfer(load, sp);
    seconds = (micro_batches + static_cast<double>(r.pp - 1) / r.vp) * slot;
  }
  seconds += cost.update_seconds();
  out.tokens_per_s_per_gpu = static_cast<double>(r.sequences * r.tokens) / seconds / r.gpus;
  return out;
}

// The dcp planner on the same batch, layout and clock (rings up to cp where cp exceeds the heads).
double price_dcp(const published_run& r, const dcp::analytic_cost& cost) {
  std::vector<std::vector<dcp::sequence>> batch(1);
  for (std::int64_t i = 0; i < r.sequences; ++i) batch[0].push_back(dcp::make_sequence(i, r.tokens));
  dcp::sim::options opt;
  opt.keep_plans = true;
  // Under pipeline stages its micro-batch shape tuned on this batch (a tuning epoch of it alone):
  // untuned, row D's uniform 8192-token sequences stay on one unit each and recompute to fit the
  // micro-batches in flight (913 tokens/s per GPU), where the tuned cap spreads each over two.
  const auto planner =
      dcp::tune(dcp::dcp_planner{}, cost, std::span<const dcp::sequence>(batch[0]), r.sequences * r.tokens);
  const auto result = dcp::sim::simulate(cost, planner, batch, opt);
  for (const auto& p : result.plans) {
    const auto violations = dcp::plan_violations(p, batch[0], cost);
    if (!violations.empty())
      throw dcp::error(dcp::errc::mismatch, std::string("row ") + r.id + ": dcp plan invalid: " + violations.front());
  }
  return result.metrics.tokens_per_s / r.gpus;
}

}  // namespace

int main(int argc, char** argv) {
  bool as_json = false, gate = false;
  for (int i = 1; i < argc; ++i) {
    const std::string_view a = argv[i];
    if (a == "--json")
      as_json = true;
    else if (a == "--check")
      gate = true;
    else {
      std::cerr << "usage: dcp_published_runs [--json] [--check]\n";
      return 2;
    }
  }
  try {
    nlohmann::ordered_json rows = nlohmann::ordered_json::array();
    bool ok = true;
    if (!as_json)
      std::printf("%-3s %-72s %10s %10s %6s %10s %6s %10s\n", "row", "run", "published", "kernel", "ratio", "analytic",
                  "ratio", "dcp plan");
    for (const auto& r : runs) {
      const auto model = dcp::models::from_config(std::filesystem::path(DCP_CONFIGS_DIR) / r.config);
      const auto device = dcp::devices::preset(r.device);
      const int ring = r.cp;  // the published CP runs as a ring; the analytic clock has no fp8
      const auto kernel = cost_of(r, model, device, ring);
      const auto analytic = cost_of(r, model, dcp::devices::preset(std::string(r.device) + "-analytic"), ring);
      const priced on_kernel = price_published(r, kernel), on_analytic = price_published(r, analytic);
      const double dcp_plan = price_dcp(r, kernel);
      const double ratio = on_kernel.tokens_per_s_per_gpu / r.published;
      const double analytic_ratio = on_analytic.tokens_per_s_per_gpu / r.published;
      const bool in_band = ratio >= 0.85 && ratio <= 1.15;
      if (!in_band && std::string_view(r.not_expressed).empty()) ok = false;
      rows.push_back({{"row", r.id},
                      {"run", r.run},
                      {"source", r.source},
                      {"published", r.published},
                      {"kernel_clock", on_kernel.tokens_per_s_per_gpu},
                      {"ratio", ratio},
                      {"analytic_clock", on_analytic.tokens_per_s_per_gpu},
                      {"analytic_ratio", analytic_ratio},
                      {"recompute", on_kernel.recompute},
                      {"fits", on_kernel.fits},
                      {"dcp_plan", dcp_plan},
                      {"not_expressed", r.not_expressed}});
      if (!as_json)
        std::printf("%-3s %-72s %10.0f %10.0f %6.2f %10.0f %6.2f %10.0f%s%s\n", r.id, r.run, r.published,
                    on_kernel.tokens_per_s_per_gpu, ratio, on_analytic.tokens_per_s_per_gpu, analytic_ratio, dcp_plan,
                    on_kernel.fits ? "" : "  (over memory)", in_band ? "" : "  (outside [0.85, 1.15])");
    }
    if (as_json) std::cout << rows.dump(1) << "\n";
    if (gate && !ok) {
      std::cerr << "dcp_published_runs: a row dcp expresses is outside [0.85, 1.15] of its published figure\n";
      return 1;
    }
    return 0;
  } catch (const dcp::error& e) {
    std::cerr << "dcp_published_runs: " << e.what() << "\n";
    return 1;
  }
}
