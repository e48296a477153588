// The dcp planner never plans a batch slower than a restriction of itself: told less (the cluster
// as its weakest node, buddy blocks instead of groups of any size) or allowed less (no
// DCP-inter, no DCP-intra, neither), on 1000 random jobs over mixed clusters, groups of any size,
// pipeline stages, ZeRO-3 and expert parallelism. The batches are sparse (2 to 60 sequences on 8
// to 32 GPUs), where the planner (with `restrictions`, its default) tries its variants allowed less
// (its budget). A restriction that skips more sequences than dcp does is no rival (it plans less).
// With `restrictions` off, dcp loses to its no-intra self on some of these jobs (printed, not
// asserted).

#include <algorithm>
#include <cstdio>
#include <cstdint>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include <dcp/cost/analytic.hpp>
#include <dcp/cost/device.hpp>
#include <dcp/group/buddy_groups.hpp>
#include <dcp/group/contiguous_groups.hpp>
#include <dcp/plan/check_plan.hpp>
#include <dcp/plan/dcp_planner.hpp>
#include <dcp/plan/planning_context.hpp>
#include <dcp/plan/retime.hpp>
#include <dcp/recompute/selective_recompute.hpp>

#include <dcp_test/support.hpp>

namespace {

struct job {
  dcp::analytic_cost cost;
  bool any_size;  // contiguous groups of every legal size, else buddy blocks
  std::string name;
};

job draw_job(dcp_test::rng& r);

// A job whose weights fit (a draw that does not is drawn again).
job random_job(dcp_test::rng& r) {
  for (;;) {
    try {
      job j = draw_job(r);
      j.cost.validate();
      return j;
    } catch (const dcp::error&) {
    }
  }
}

job draw_job(dcp_test::rng& r) {
  const dcp::device_spec reference = dcp::devices::h200_analytic();
  const int kind = static_cast<int>(r.between(0, 3));
  const std::vector<std::string> video{"cogvideox-5b", "stdit3-xl", "wan2.1-14b"};
  const dcp::transformer_spec model = kind == 0   ? dcp::models::llama3_8b()
                                      : kind == 1 ? dcp::models::qwen3_30b_a3b()
                                                  : dcp::models::preset(r.pick(video));
  dcp::parallel_layout l{.gpus = 8 * static_cast<int>(r.between(1, 4)), .gpus_per_node = 8};
  if (kind == 1) l.sharding = dcp::sharding_kind::zero3;  // its weights fit 8 to 32 GPUs only sharded
  std::string name = model.name;
  const int shape = static_cast<int>(r.between(0, 3));
  if (shape == 0) {  // a mixed cluster
    const std::vector<dcp::device_spec> kinds{dcp::devices::h100_analytic(), reference, dcp::devices::a100()};
    std::vector<dcp::device_spec> nodes;
    for (int n = 0; n < l.gpus / 8; ++n) nodes.push_back(kinds[static_cast<std::size_t>(r.between(0, 2))]);
    l.nodes = dcp::node_devices(nodes, reference);
    name += ", mixed nodes";
  } else if (shape == 1 && kind == 0 && l.gpus >= 16) {  // pipeline stages of whole nodes (plain blocks)
    l.gpus = 16 * static_cast<int>(r.between(1, 2));
    l.pp = 2;
    name += ", pp 2";
  } else if (shape == 2) {  // collectives that span groups
    if (kind == 1) l.ep = static_cast<int>(1 << r.between(1, 3));
    if (kind != 1) l.sharding = dcp::sharding_kind::zero3;
    name += kind == 1 ? ", ep " + std::to_string(l.ep) : std::string(", zero3");
  }
  name += ", " + std::to_string(l.gpus) + " GPUs";
  const bool any_size = r.between(0, 1) == 1;
  if (any_size) name += ", groups of any size";
  return {dcp::make_analytic_cost(model, reference, l), any_size, name};
}

// 2..60 sequences, log-uniform from 128 tokens to half the longest the weakest whole cluster holds.
std::vector<dcp::sequence> random_batch(dcp_test::rng& r, const dcp::analytic_cost& c) {
  const auto& nodes = c.layout().nodes;  // none: every node is the reference device
  const auto weakest = nodes.empty() ? c : c.as_uniform(c.layout().as_weakest().nodes.front());
  const std::int64_t longest = dcp::step_token_capacity(weakest, weakest.gpus(), weakest.blocks());
  std::vector<dcp::sequence> out;
  const std::int64_t count = r.between(2, 60);
  for (std::int64_t i = 0; i < count; ++i)
    out.push_back(dcp::make_sequence(i, r.log_between(128, std::max<std::int64_t>(256, longest / 2))));
  return out;
}

struct tally {
  int compared = 0, faster = 0;
  double worst = 1;  // the default planner's largest makespan over its no-intra self's
};

// `rival` may not end sooner than `p` where it plans as many sequences.
void expect_no_slower(const dcp::plan& p, const dcp::plan& rival, const std::string& what, tally& t) {
  if (rival.skipped.size() != p.skipped.size()) return;
  ++t.compared;
  if (p.makespan_s < rival.makespan_s * (1 - 1e-9)) ++t.faster;
  EXPECT_LE(p.makespan_s, rival.makespan_s * (1 + 1e-9)) << what;
}

template <class G>
void check_job(const job& j, const G& groups, const std::vector<dcp::sequence>& batch, std::vector<tally>& tallies) {
  const dcp::analytic_cost& c = j.cost;
  const dcp::planning_context ctx{c, dcp::selective_recompute{}, groups};
  dcp::dcp_planner full;
  full.on_infeasible = dcp::infeasible_policy::skip;
  const dcp::plan p = full.plan(ctx, batch);
  const auto bad = dcp::plan_violations(p, batch, c);
  ASSERT_TRUE(bad.empty()) << j.name << ": " << bad.front();
  // Allowed less.
  for (int variant = 0; variant < 3; ++variant) {
    dcp::dcp_planner less = full;
    less.inter = variant == 1;
    less.intra = variant == 0;
    expect_no_slower(p, less.plan(ctx, batch), j.name + ", against " + less.name(), tallies[variant]);
  }
  // The planner without `restrictions` against its no-intra self: measured, not asserted.
  dcp::dcp_planner plain;
  plain.restrictions = false;
  plain.on_infeasible = dcp::infeasible_policy::skip;
  dcp::dcp_planner plain_less = plain;
  plain_less.intra = false;
  const dcp::plan d = plain.plan(ctx, batch), e = plain_less.plan(ctx, batch);
  if (d.skipped.size() == e.skipped.size() && e.makespan_s < d.makespan_s * (1 - 1e-9)) {
    ++tallies[5].compared;
    tallies[5].worst = std::max(tallies[5].worst, d.makespan_s / e.makespan_s);
  }
  // Told less: the weakest node everywhere, timed on the cluster.
  const auto& nodes = c.layout().nodes;
  if (!nodes.empty()) {
    const auto blind = c.as_uniform(c.layout().as_weakest().nodes.front());
    const dcp::plan q =
        dcp::retimed(full.plan(dcp::planning_context{blind, dcp::selective_recompute{}, groups}, batch), c, {});
    expect_no_slower(p, q, j.name + ", against the weakest node", tallies[3]);
  }
  // Told less: buddy blocks for groups of any size.
  if (j.any_size) {
    const dcp::planning_context buddy{c, dcp::selective_recompute{}, dcp::buddy_groups{c.gpus(), c.gpus_per_node()}};
    expect_no_slower(p, full.plan(buddy, batch), j.name + ", against buddy blocks", tallies[4]);
  }
}

TEST(never_worse, dcp_plans_no_batch_slower_than_a_restriction_of_itself) {
  dcp_test::rng r(7100);
  std::vector<tally> tallies(6);
  for (int i = 0; i < 1000; ++i) {
    const job j = random_job(r);
    const auto batch = random_batch(r, j.cost);
    SCOPED_TRACE("job " + std::to_string(i) + ": " + j.name + ", " + std::to_string(batch.size()) + " sequences");
    if (j.any_size)
      check_job(j, dcp::contiguous_groups{j.cost.gpus(), j.cost.gpus_per_node()}, batch, tallies);
    else
      check_job(j, dcp::buddy_groups{j.cost.gpus(), j.cost.gpus_per_node()}, batch, tallies);
    if (HasFatalFailure()) return;
  }
  const char* names[] = {"no-intra", "no-inter", "no-inter-no-intra", "weakest node", "buddy blocks"};
  std::printf("[ never worse ] without restrictions, dcp is slower than its no-intra self on %d batches, by up to "
              "%.1f%%\n", tallies[5].compared, (tallies[5].worst - 1) * 100);
  for (std::size_t v = 0; v < 5; ++v) {
    EXPECT_GT(tallies[v].compared, 0) << names[v] << " was never compared";
    std::printf("[ never worse ] against %-18s %4d batches compared, dcp faster on %d\n", names[v],
                tallies[v].compared, tallies[v].faster);
  }
}

}  // namespace
