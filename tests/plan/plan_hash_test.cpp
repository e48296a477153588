// dcp_planner: plans and lower bounds are bit-identical to recorded ones over batches of every
// embedded workload and on pipeline stages (the latency work on the planner, the pipeline plan
// and the analytic cost model must not move a single plan), and the planner's shared-shape
// pricing of the bounds equals pricing every sequence on its own. A change meant to change plans
// updates the tables from the printed hashes.

#include <algorithm>
#include <bit>
#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>
#include <vector>

#include <gtest/gtest.h>

#include <dcp/cost/analytic.hpp>
#include <dcp/plan/dcp_planner.hpp>
#include <dcp/plan/dynamic_cp_planner.hpp>
#include <dcp/plan/lower_bounds.hpp>
#include <dcp/workload/embedded.hpp>
#include <dcp/workload/tuning.hpp>

namespace {

// `count` sequences of `workload` (seeds 0, 1, ...), ids 0..count-1, in reverse id order (the
// planner's canonical order must not depend on it), as the planner benchmark draws them.
std::vector<dcp::sequence> batch_of(std::string_view workload, std::int64_t count) {
  std::vector<dcp::sequence> batch;
  for (std::uint64_t seed = 0; static_cast<std::int64_t>(batch.size()) < count; ++seed)
    for (auto s : dcp::workloads::make(workload, seed)) {
      if (static_cast<std::int64_t>(batch.size()) == count) break;
      s.id = static_cast<std::int64_t>(batch.size());
      batch.push_back(s);
    }
  std::reverse(batch.begin(), batch.end());
  return batch;
}

struct recorded {
  const char* workload;
  int gpus;
  std::int64_t sequences;
  int variant;  // 0: dcp, 1: inter = false, 2: intra = false
  std::uint64_t plan_hash;
  std::uint64_t bounds;  // bits of the joint bound xor 3 x the bits of the simple bound
};

// Recorded before the planner's latency work (shared per-shape options, by-value sorts, the
// cost model's memory_at).
constexpr recorded table[] = {
    {"opensora-zipf1", 32, 512, 0, 0xb4e8306e78d7a1bcull, 0x8013324d94ccfe91ull},
    {"opensora-zipf1", 32, 512, 1, 0x715b6bf66527bb53ull, 0x8013324d94ccfe91ull},
    {"opensora-zipf1", 32, 512, 2, 0x2fd60e3a8c41e7d2ull, 0x8013324d94ccfe91ull},
    {"opensora-zipf1", 256, 4096, 0, 0xed367c6e2e7b36e1ull, 0x8013b51fca7cf645ull},
    {"opensora-zipf1", 256, 4096, 1, 0x77ebea26f9b9f137ull, 0x8013b51fca7cf645ull},
    {"opensora-zipf1", 256, 4096, 2, 0x71aa4123cd3d34c5ull, 0x8013b51fca7cf645ull},
    {"opensora-zipf1", 64, 200, 0, 0xef1cf0f405fc6b88ull, 0x80aae277ceac87e4ull},
    {"opensora-zipf1", 64, 200, 1, 0x1c044b71e38c44c6ull, 0x80aae277ceac87e4ull},
    {"opensora-zipf1", 64, 200, 2, 0x6c6bf3a1de225e1full, 0x80aae277ceac87e4ull},
    {"opensora-zipf1", 512, 1500, 0, 0x60fed749b14c5787ull, 0x8054554a89455522ull},
    {"opensora-zipf1", 512, 1500, 1, 0xcf17549b9e85c99aull, 0x8054554a89455522ull},
    {"opensora-zipf1", 512, 1500, 2, 0x42f9d53439325b7cull, 0x8054554a89455522ull},
    {"opensora-zipf1", 16, 40, 0, 0x447bce11c089dbf9ull, 0x808b82e06671974cull},
    {"opensora-zipf1", 16, 40, 1, 0x1035df1f2fe281e5ull, 0x808b82e06671974cull},
    {"opensora-zipf1", 16, 40, 2, 0x1f14ec577bb0473cull, 0x808b82e06671974cull},
    {"opensora-zipf10", 32, 512, 0, 0x1eb5eca9af4d612eull, 0x80af151b73747ae9ull},
    {"opensora-zipf10", 32, 512, 1, 0x285f475fd07a6e55ull, 0x80af151b73747ae9ull},
    {"opensora-zipf10", 32, 512, 2, 0xa0722de48ee6b90full, 0x80af151b73747ae9ull},
    {"opensora-zipf10", 256, 4096, 0, 0xbf7340730b3428cbull, 0x805c77ba1d80e9f0ull},
    {"opensora-zipf10", 256, 4096, 1, 0x5474c76accef70ecull, 0x805c77ba1d80e9f0ull},
    {"opensora-zipf10", 256, 4096, 2, 0x00aafcca1b1cd798ull, 0x805c77ba1d80e9f0ull},
    {"opensora-zipf10", 64, 200, 0, 0x6d1940928e57e61eull, 0x8091200904021020ull},
    {"opensora-zipf10", 64, 200, 1, 0xe7ba9ccf5e6ca31eull, 0x8091200904021020ull},
    {"opensora-zipf10", 64, 200, 2, 0xeb0b032dba9dd089ull, 0x8091200904021020ull},
    {"opensora-zipf10", 512, 1500, 0, 0x425f7ee9bdb89dd5ull, 0x80554942a924a08aull},
    {"opensora-zipf10", 512, 1500, 1, 0xdc521b11dfcfbbb1ull, 0x80554942a924a08aull},
    {"opensora-zipf10", 512, 1500, 2, 0x37bc3aa699598a5cull, 0x80554942a924a08aull},
    {"opensora-zipf10", 16, 40, 0, 0x85f9c6e35f049654ull, 0x817aef85bd42b935ull},
    {"opensora-zipf10", 16, 40, 1, 0x711cee064d69b043ull, 0x817aef85bd42b935ull},
    {"opensora-zipf10", 16, 40, 2, 0x532e35ef1f966ccdull, 0x817aef85bd42b935ull},
    {"opensora-zipf50", 32, 512, 0, 0xbfdbca3c2ea27ff7ull, 0x80a39ee75af60304ull},
    {"opensora-zipf50", 32, 512, 1, 0x04b5cedc7d44f004ull, 0x80a39ee75af60304ull},
    {"opensora-zipf50", 32, 512, 2, 0xab17ca01e07be71aull, 0x80a39ee75af60304ull},
    {"opensora-zipf50", 256, 4096, 0, 0x89cc1e5547fb8b5aull, 0x809ee56636b7db64ull},
    {"opensora-zipf50", 256, 4096, 1, 0xffeab2d71fd2a6cbull, 0x809ee56636b7db64ull},
    {"opensora-zipf50", 256, 4096, 2, 0xe1154b3fe2094c4dull, 0x809ee56636b7db64ull},
    {"opensora-zipf50", 64, 200, 0, 0x77dfd1dbbe53e69dull, 0x8090821102a4a084ull},
    {"opensora-zipf50", 64, 200, 1, 0x8b7cf2b270876df2ull, 0x8090821102a4a084ull},
    {"opensora-zipf50", 64, 200, 2, 0xf8b743b30a201025ull, 0x8090821102a4a084ull},
    {"opensora-zipf50", 512, 1500, 0, 0x13afc38c34103581ull, 0x8091200904021020ull},
    {"opensora-zipf50", 512, 1500, 1, 0xe49be4b156c3a21aull, 0x8091200904021020ull},
    {"opensora-zipf50", 512, 1500, 2, 0xf770766b5e8d3019ull, 0x8091200904021020ull},
    {"opensora-zipf50", 16, 40, 0, 0x83925ab23424ef01ull, 0x80914bbe4fee3a71ull},
    {"opensora-zipf50", 16, 40, 1, 0xfe282beb8b94a819ull, 0x80914bbe4fee3a71ull},
    {"opensora-zipf50", 16, 40, 2, 0x88168f7533b6db3full, 0x80914bbe4fee3a71ull},
    {"cogvideox-zipf1", 32, 512, 0, 0xf6848952d2c08e06ull, 0x802ba0f6b0cce697ull},
    {"cogvideox-zipf1", 32, 512, 1, 0x7ceb82aa93815ec1ull, 0x802ba0f6b0cce697ull},
    {"cogvideox-zipf1", 32, 512, 2, 0x3b7a0e63a793d19full, 0x802ba0f6b0cce697ull},
    {"cogvideox-zipf1", 256, 4096, 0, 0x564bba6e265e3046ull, 0x8028cb0346bcdb16ull},
    {"cogvideox-zipf1", 256, 4096, 1, 0x1c3a8ed413010556ull, 0x8028cb0346bcdb16ull},
    {"cogvideox-zipf1", 256, 4096, 2, 0x89087c09e61bb871ull, 0x8028cb0346bcdb16ull},
    {"cogvideox-zipf1", 64, 200, 0, 0xf947e825fc42697eull, 0x80372de69acfa2feull},
    {"cogvideox-zipf1", 64, 200, 1, 0x8fe391a6512172b5ull, 0x80372de69acfa2feull},
    {"cogvideox-zipf1", 64, 200, 2, 0x8d87f6a7a96e8f99ull, 0x80372de69acfa2feull},
    {"cogvideox-zipf1", 512, 1500, 0, 0x52f20e756dc31971ull, 0x800a951425509124ull},
    {"cogvideox-zipf1", 512, 1500, 1, 0x0e6afb007205a618ull, 0x800a951425509124ull},
    {"cogvideox-zipf1", 512, 1500, 2, 0x8637f0adcff591e5ull, 0x800a951425509124ull},
    {"cogvideox-zipf1", 16, 40, 0, 0x230c28fb13ffa598ull, 0x8040d68e108b2f48ull},
    {"cogvideox-zipf1", 16, 40, 1, 0x26d7600ecc466d8aull, 0x8040d68e108b2f48ull},
    {"cogvideox-zipf1", 16, 40, 2, 0x5b1aad5ab59ca28dull, 0x8040d68e108b2f48ull},
    {"cogvideox-zipf10", 32, 512, 0, 0x67aa69bf1389da37ull, 0x8017e89deedf76ceull},
    {"cogvideox-zipf10", 32, 512, 1, 0x915e6d18677630cfull, 0x8017e89deedf76ceull},
    {"cogvideox-zipf10", 32, 512, 2, 0xe8af486c46f2af70ull, 0x8017e89deedf76ceull},
    {"cogvideox-zipf10", 256, 4096, 0, 0x37688a399e73225cull, 0x8010d71af792da4eull},
    {"cogvideox-zipf10", 256, 4096, 1, 0xfed5d5bb6218389aull, 0x8010d71af792da4eull},
    {"cogvideox-zipf10", 256, 4096, 2, 0x000762d47286e598ull, 0x8010d71af792da4eull},
    {"cogvideox-zipf10", 64, 200, 0, 0x4787d2cfd9ce79beull, 0x8041228a250054a8ull},
    {"cogvideox-zipf10", 64, 200, 1, 0x942402b1681ddff5ull, 0x8041228a250054a8ull},
    {"cogvideox-zipf10", 64, 200, 2, 0x70c65f94b19309cdull, 0x8041228a250054a8ull},
    {"cogvideox-zipf10", 512, 1500, 0, 0x797d5a30f88f2899ull, 0x801102a812554a50ull},
    {"cogvideox-zipf10", 512, 1500, 1, 0x455a359f562033bcull, 0x801102a812554a50ull},
    {"cogvideox-zipf10", 512, 1500, 2, 0x97a18c20d3ad66b3ull, 0x801102a812554a50ull},
    {"cogvideox-zipf10", 16, 40, 0, 0xb1d4c472afc12960ull, 0x8084ce8fe7125532ull},
    {"cogvideox-zipf10", 16, 40, 1, 0x6f5b36a28c35b58dull, 0x8084ce8fe7125532ull},
    {"cogvideox-zipf10", 16, 40, 2, 0x32076b7576bbacc5ull, 0x8084ce8fe7125532ull},
    {"cogvideox-zipf50", 32, 512, 0, 0xbe9ea999303550d2ull, 0x802b4d6f319125d3ull},
    {"cogvideox-zipf50", 32, 512, 1, 0x31b9497da35649ceull, 0x802b4d6f319125d3ull},
    {"cogvideox-zipf50", 32, 512, 2, 0x266fdfd3041ce4e9ull, 0x802b4d6f319125d3ull},
    {"cogvideox-zipf50", 256, 4096, 0, 0xdbb895492892acefull, 0x8023472931e3f3a5ull},
    {"cogvideox-zipf50", 256, 4096, 1, 0x8c0c41abfb1ecf40ull, 0x8023472931e3f3a5ull},
    {"cogvideox-zipf50", 256, 4096, 2, 0x9e79d3aad50f7d42ull, 0x8023472931e3f3a5ull},
    {"cogvideox-zipf50", 64, 200, 0, 0xb4b0e424b8696e23ull, 0x805094882429052aull},
    {"cogvideox-zipf50", 64, 200, 1, 0x8892b2293d7e1e31ull, 0x805094882429052aull},
    {"cogvideox-zipf50", 64, 200, 2, 0x0c8b32e814035bd4ull, 0x805094882429052aull},
    {"cogvideox-zipf50", 512, 1500, 0, 0x31d801edbf0b30dcull, 0x8041228a250054a8ull},
    {"cogvideox-zipf50", 512, 1500, 1, 0xcf8cb8d2ead5d30full, 0x8041228a250054a8ull},
    {"cogvideox-zipf50", 512, 1500, 2, 0x747592d7288a5ce6ull, 0x8041228a250054a8ull},
    {"cogvideox-zipf50", 16, 40, 0, 0x408f320a16e38019ull, 0x805e85da1ec08a19ull},
    {"cogvideox-zipf50", 16, 40, 1, 0x91f468181a0a7f4cull, 0x805e85da1ec08a19ull},
    {"cogvideox-zipf50", 16, 40, 2, 0x8ac3d2fc745f7d7cull, 0x805e85da1ec08a19ull},
    {"text-longtail", 32, 512, 0, 0x9a03033a27cdc096ull, 0x805695ff719fd21bull},
    {"text-longtail", 32, 512, 1, 0xe2af769477ea2c26ull, 0x805695ff719fd21bull},
    {"text-longtail", 32, 512, 2, 0x9e66570bd9328175ull, 0x805695ff719fd21bull},
    {"text-longtail", 256, 4096, 0, 0x56c874c3505e92b7ull, 0x80bce7b809bc1abaull},
    {"text-longtail", 256, 4096, 1, 0x7f9254b64314996dull, 0x80bce7b809bc1abaull},
    {"text-longtail", 256, 4096, 2, 0xd76f4c7f6074f7f9ull, 0x80bce7b809bc1abaull},
    {"text-longtail", 64, 200, 0, 0x3d3270d535cc0ddbull, 0xffff578186dff316ull},
    {"text-longtail", 64, 200, 1, 0xf22409b06d115a6aull, 0xffff578186dff316ull},
    {"text-longtail", 64, 200, 2, 0x622ac390e9b6bf9cull, 0xffff578186dff316ull},
    {"text-longtail", 512, 1500, 0, 0x4f7619b61b355f88ull, 0x8005568725bb1eadull},
    {"text-longtail", 512, 1500, 1, 0x4c4a22e8cf37dad7ull, 0x8005568725bb1eadull},
    {"text-longtail", 512, 1500, 2, 0x55d21139bdd8c950ull, 0x8005568725bb1eadull},
    {"text-longtail", 16, 40, 0, 0x7192ecb1bafe017aull, 0x80047b365f12d532ull},
    {"text-longtail", 16, 40, 1, 0xc2faf578106b6964ull, 0x80047b365f12d532ull},
    {"text-longtail", 16, 40, 2, 0x1161b92908550311ull, 0x80047b365f12d532ull},
};

std::uint64_t bounds_bits(double joint, double simple) {
  return std::bit_cast<std::uint64_t>(joint) ^ std::bit_cast<std::uint64_t>(simple) * 3;
}

TEST(PlanHash, EveryEmbeddedWorkloadPlansAsRecorded) {
  int checked = 0;
  for (const recorded& r : table) {
    const auto cost =
        dcp::make_analytic_cost(dcp::models::preset(std::string(dcp::workloads::default_model(r.workload))),
                                dcp::devices::h200_analytic(), r.gpus);
    const auto batch = batch_of(r.workload, r.sequences);
    dcp::dcp_planner planner;
    planner.inter = r.variant != 1;
    planner.intra = r.variant != 2;
    const dcp::plan p = planner.plan(cost, std::span<const dcp::sequence>(batch));
    const std::uint64_t b = bounds_bits(p.joint_lower_bound_s, p.lower_bound_s);
    EXPECT_EQ(p.hash(), r.plan_hash) << r.workload << " on " << r.gpus << " GPUs, " << r.sequences
                                     << " sequences, variant " << r.variant;
    EXPECT_EQ(b, r.bounds) << r.workload << " on " << r.gpus << " GPUs, " << r.sequences << " sequences";
    if (p.hash() != r.plan_hash || b != r.bounds)
      std::printf("    {\"%s\", %d, %lld, %d, 0x%016llxull, 0x%016llxull},\n", r.workload, r.gpus,
                  static_cast<long long>(r.sequences), r.variant, static_cast<unsigned long long>(p.hash()),
                  static_cast<unsigned long long>(b));
    ++checked;
  }
  EXPECT_EQ(checked, static_cast<int>(dcp::workloads::names.size()) * 5 * 3);
}

// The planner prices the bounds once per shape; `lower_bounds` prices every sequence itself.
TEST(PlanHash, SharedShapeBoundsEqualPerSequenceBounds) {
  for (auto workload : dcp::workloads::names)
    for (int gpus : {16, 128}) {
      const auto cost =
          dcp::make_analytic_cost(dcp::models::preset(std::string(dcp::workloads::default_model(workload))),
                                  dcp::devices::h200_analytic(), gpus);
      const auto batch = batch_of(workload, 12 * gpus);
      const dcp::plan p = dcp::dcp_planner{}.plan(cost, std::span<const dcp::sequence>(batch));
      const auto direct = dcp::lower_bounds(cost, std::span<const dcp::sequence>(batch));
      EXPECT_EQ(std::bit_cast<std::uint64_t>(p.joint_lower_bound_s), std::bit_cast<std::uint64_t>(direct.joint_s))
          << workload << " on " << gpus << " GPUs";
      EXPECT_EQ(std::bit_cast<std::uint64_t>(p.lower_bound_s), std::bit_cast<std::uint64_t>(direct.simple_s))
          << workload << " on " << gpus << " GPUs";
    }
}

}  // namespace

// Pipeline plans (pp > 1) are bit-identical to recorded ones: dcp's short-ends orders, warmup
// depths and recompute in flight at the planner's default knobs, and dynamic_cp's as placed
// (its token cap and uniform recompute level tuned on the batch; recorded when the level became a
// tuned knob).
struct recorded_pipeline {
  const char* model;
  const char* workload;
  int gpus, tp, pp;
  std::int64_t sequences;
  bool dynamic_cp;  // else dcp
  std::uint64_t plan_hash;
  std::uint64_t bounds;
};

constexpr recorded_pipeline pipeline_table[] = {
    {"llama3-70b", "text-longtail", 256, 8, 4, 4096, false, 0x887edcebfea14714ull, 0x8144abde8351a0d4ull},
    {"llama3-70b", "text-longtail", 256, 8, 4, 4096, true, 0x7b1e6600eeca4537ull, 0x8144abde8351a0d4ull},
    {"llama3-8b", "text-longtail", 128, 1, 8, 1500, false, 0x0b9880c03a30aea5ull, 0x80554aaa51412248ull},
    {"cogvideox-5b", "cogvideox-zipf10", 64, 1, 2, 1500, false, 0xe5c0a2a7cfe59fd8ull, 0x801229292a50aaa4ull},
    {"wan2.1-14b", "cogvideox-zipf10", 64, 1, 2, 1500, true, 0x1a2912f99747786cull, 0x805112a1082a4888ull},
};

TEST(PlanHash, PipelinePlansAsRecorded) {
  int deeper = 0, recomputing = 0;  // dcp plans past 1F1B's depth, and with checkpointed blocks
  for (const recorded_pipeline& r : pipeline_table) {
    const auto cost = dcp::make_analytic_cost(dcp::models::preset(r.model), dcp::devices::h200(),
                                              {.gpus = r.gpus, .tp = r.tp, .pp = r.pp});
    const auto batch = batch_of(r.workload, r.sequences);
    const std::span<const dcp::sequence> data(batch);
    const dcp::plan p = r.dynamic_cp ? dcp::tune(dcp::dynamic_cp_planner{}, cost, data).plan(cost, data)
                                     : dcp::dcp_planner{}.plan(cost, data);
    const std::uint64_t b = bounds_bits(p.joint_lower_bound_s, p.lower_bound_s);
    EXPECT_EQ(p.hash(), r.plan_hash) << r.model << " pp " << r.pp << (r.dynamic_cp ? " dynamic_cp" : " dcp");
    EXPECT_EQ(b, r.bounds) << r.model << " pp " << r.pp << (r.dynamic_cp ? " dynamic_cp" : " dcp");
    if (p.hash() != r.plan_hash || b != r.bounds)
      std::printf("    {\"%s\", \"%s\", %d, %d, %d, %lld, %s, 0x%016llxull, 0x%016llxull},\n", r.model, r.workload,
                  r.gpus, r.tp, r.pp, static_cast<long long>(r.sequences), r.dynamic_cp ? "true" : "false",
                  static_cast<unsigned long long>(p.hash()), static_cast<unsigned long long>(b));
    if (!r.dynamic_cp) {
      deeper += p.warmup_depth > 1;
      recomputing += std::any_of(p.steps.begin(), p.steps.end(),
                                 [](const dcp::plan_step& s) { return s.checkpointed_blocks > 0; });
    }
  }
  EXPECT_GT(deeper, 0);
  EXPECT_GT(recomputing, 0);
}
