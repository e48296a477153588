// The LibTorch example under dcp plans equals single-process full-batch LibTorch training.
// Run under mpiexec with 1, 2 and 4 ranks: the parameters after 3 AdamW steps under dcp, bucket
// and packed plans match (and, on 6 ranks, under dcp plans on groups of 3 and 6 ranks), to 1e-10 relative in float64, a reference that trains every batch in
// one process, every sequence alone, with the batch's token-mean cross-entropy. The reference
// is written here from plain torch functions on the model's parameter tensors: it shares no
// loss-weight, packing, masking or re-layout code with the planned path.
#include <dcp_test/support.hpp>
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

#include <torch/torch.h>

#include <dcp/comm/mpi.hpp>
#include <dcp/cost/analytic.hpp>
#include <dcp/group/contiguous_groups.hpp>
#include <dcp/plan/bucket_planner.hpp>
#include <dcp/plan/packed_planner.hpp>
#include <dcp/policies.hpp>
#include <dcp/sample/token_budget_sampler.hpp>
#include <dcp/scheduler.hpp>
#include <dcp/workload/tuning.hpp>

#include "../../examples/libtorch_train/corpus.hpp"
#include "../../examples/libtorch_train/gpt.hpp"
#include "../../examples/libtorch_train/train.hpp"

namespace {

using namespace libtorch_train;
namespace F = torch::nn::functional;

dcp::mpi_comm* world_ptr = nullptr;

/// The problem every run trains: documents of 8..96 tokens. On one rank the planner's device
/// holds 40 tokens without recompute (up to 107 with every block checkpointed); on more ranks 24
/// (64 with recompute), so the longest documents need sp > 1 under every planner.
struct setup {
  gpt_config model{.vocab = corpus::vocab, .hidden = 16, .heads = 4, .mlp = 32, .blocks = 2, .max_len = 96, .seed = 5};
  corpus data = corpus::generate(64, 8, 96, 7);
  std::int64_t batch_tokens = 320;
  std::uint64_t seed = 4;  // its first 3 batches exercise everything below on 2 and 4 ranks
  int steps = 3;
  int tokens_per_rank = 24;  // without recompute, on more than one rank
  torch::optim::AdamWOptions adamw() const { return torch::optim::AdamWOptions(1e-2).weight_decay(0.01); }

  dcp::scheduler_options options(int world) const {
    dcp::scheduler_options o;
    o.device = scaled_device(spec_of(model), world, world > 1 ? tokens_per_rank : 40);
    o.global_batch_tokens = batch_tokens;
    o.seed = seed;
    return o;
  }
  dcp::analytic_cost cost(int world) const {
    return dcp::make_analytic_cost(spec_of(model), options(world).device, world);
  }
};

/// What the plans of a run exercised.
struct coverage {
  int max_sp = 1;
  bool uneven_shards = false;         // a packed step's tokens do not divide by its sp
  bool unequal_accumulation = false;  // ranks ran different numbers of micro-steps in a batch
  bool accumulation = false;          // some rank ran more than one micro-step in a batch
  bool recompute = false;             // some step checkpointed blocks
  bool other_size = false;            // some step on a group whose size is not a power of two
  int warmup_depth = 1;               // the deepest pipeline warmup of any plan
  void add(const dcp::plan& p, int world) {
    warmup_depth = std::max(warmup_depth, p.warmup_depth);
    std::vector<int> per_rank(std::size_t(world), 0);
    for (const auto& st : p.steps) {
      max_sp = std::max(max_sp, st.sp());
      other_size |= (st.sp() & (st.sp() - 1)) != 0;
      std::int64_t tokens = 0;
      for (const auto& q : st.sequences) tokens += q.tokens;
      uneven_shards |= tokens % st.sp() != 0;
      recompute |= st.checkpointed_blocks > 0;
      for (int r = st.ranks.first; r < st.ranks.end(); ++r) ++per_rank[std::size_t(r)];
    }
    unequal_accumulation |= std::ranges::min(per_rank) != std::ranges::max(per_rank);
    accumulation |= std::ranges::max(per_rank) > 1;
  }
};

torch::Tensor flat_parameters(torch::nn::Module& m) {
  std::vector<torch::Tensor> v;
  for (const auto& p : m.parameters()) v.push_back(p.detach().reshape(-1));
  return torch::cat(v);
}

struct run_result {
  torch::Tensor params;
  std::vector<double> losses;
  coverage cov;
};

// `s.steps` optimizer steps of `step` (train_step or pipeline_train_step) under `sched`'s plans.
template <class Scheduler, class Step>
run_result train_with(Scheduler& sched, const setup& s, Step step) {
  sched.set_dataset(s.data.dataset());
  auto model = make_gpt(s.model, torch::kFloat64);
  torch::optim::AdamW opt(model->parameters(), s.adamw());
  run_result r;
  for (int i = 0; i < s.steps; ++i) {
    const auto batch = sched.sampler().next();
    const auto rep = step(sched, *model, opt, s.data, batch.sequences);
    r.losses.push_back(rep.loss);
    r.cov.add(rep.plan, rep.plan.gpus);  // micro-steps per unit (with stages, every stage runs the same)
  }
  r.params = flat_parameters(*model);
  return r;
}

template <class Policies>
run_result run_planned(dcp::mpi_comm& world, const setup& s, Policies policies) {
  dcp::scheduler<dcp::transformer_spec, dcp::mpi_comm, Policies> sched(spec_of(s.model), world,
                                                                        s.options(world.size()), policies);
  return train_with(sched, s, [](auto&... a) { return train_step(a...); });
}

// ---- the reference: one process, full batches, every sequence on its own ----------------------

torch::Tensor layer_norm(const torch::Tensor& x, const torch::nn::LayerNorm& ln) {
  return F::layer_norm(x, F::LayerNormFuncOptions({x.size(-1)}).weight(ln->weight).bias(ln->bias).eps(1e-5));
}

/// Summed next-token cross-entropy of one whole sequence (`doc`: inputs then the last target).
torch::Tensor sequence_loss(gpt_impl& m, const std::vector<int>& doc) {
  const std::int64_t n = std::int64_t(doc.size()) - 1, H = m.config.heads, d = m.config.hidden / H;
  const torch::Tensor ids = torch::tensor(std::vector<std::int64_t>(doc.begin(), doc.end()), torch::kInt64);
  torch::Tensor x = F::embedding(ids.slice(0, 0, n), m.tok->weight) + m.pos->weight.slice(0, 0, n);
  // Additive causal bias: -inf strictly above the diagonal.
  const torch::Tensor bias =
      torch::full({n, n}, -std::numeric_limits<double>::infinity(), x.options()).triu(1);
  for (auto& b : m.blocks) {
    const torch::Tensor qkv = F::linear(layer_norm(x, b->ln1), b->qkv->weight, b->qkv->bias).view({n, H, 3, d});
    const torch::Tensor q = qkv.select(2, 0).permute({1, 0, 2}), k = qkv.select(2, 1).permute({1, 0, 2}),
                        v = qkv.select(2, 2).permute({1, 0, 2});
    const torch::Tensor p = torch::softmax(torch::bmm(q, k.permute({0, 2, 1})) * (1.0 / std::sqrt(double(d))) + bias, -1);
    const torch::Tensor att = torch::bmm(p, v).permute({1, 0, 2}).reshape({n, H * d});
    x = x + F::linear(att, b->proj->weight, b->proj->bias);
    x = x + F::linear(torch::gelu(F::linear(layer_norm(x, b->ln2), b->fc1->weight, b->fc1->bias)), b->fc2->weight,
                      b->fc2->bias);
  }
  const torch::Tensor logits = F::linear(layer_norm(x, m.ln_f), m.head->weight, m.head->bias);
  return F::cross_entropy(logits, ids.slice(0, 1, n + 1), F::CrossEntropyFuncOptions().reduction(torch::kSum));
}

run_result run_reference(const setup& s, int world) {
  auto model = make_gpt(s.model, torch::kFloat64);
  torch::optim::AdamW opt(model->parameters(), s.adamw());
  // The batches every rank's scheduler draws: same dataset, budget and seed.
  dcp::token_budget_sampler sampler(s.data.dataset(), s.batch_tokens, s.options(world).seed);
  run_result r;
  for (int i = 0; i < s.steps; ++i) {
    const auto batch = sampler.next();
    opt.zero_grad();
    torch::Tensor sum = torch::zeros({}, torch::kFloat64);
    std::int64_t tokens = 0;
    for (const auto& q : batch.sequences) {
      sum = sum + sequence_loss(*model, s.data.document(q.id));
      tokens += std::int64_t(s.data.document(q.id).size()) - 1;
    }
    const torch::Tensor loss = sum / double(tokens);
    loss.backward();
    opt.step();
    r.losses.push_back(loss.item<double>());
  }
  r.params = flat_parameters(*model);
  return r;
}

double relative(const torch::Tensor& a, const torch::Tensor& b) {
  if (a.sizes() != b.sizes()) return std::numeric_limits<double>::infinity();
  return (a - b).abs().max().item<double>() / std::max(b.abs().max().item<double>(), 1e-300);
}

// The largest relative difference between two equally long loss curves.
double relative_losses(const std::vector<double>& got, const std::vector<double>& ref) {
  double d = 0;
  for (std::size_t k = 0; k < ref.size(); ++k) d = std::max(d, std::abs(got[k] - ref[k]) / std::abs(ref[k]));
  return d;
}

std::string describe(const coverage& c) {
  char buf[200];
  std::snprintf(buf, sizeof buf,
                "max sp %d, uneven shards %d, unequal accumulation %d, accumulation %d, recompute %d, warmup depth %d",
                c.max_sp, int(c.uneven_shards), int(c.unequal_accumulation), int(c.accumulation), int(c.recompute),
                c.warmup_depth);
  return buf;
}

TEST(libtorch_equivalence, adamw_after_three_steps_matches_full_batch) {
  auto& world = *world_ptr;
  const setup s;
  const int R = world.size();
  const auto dataset = s.data.dataset();
  dcp::policies<dcp::bucket_planner> bucket;
  bucket.planner = dcp::tune(dcp::bucket_planner{}, s.cost(R), std::span<const dcp::sequence>(dataset), s.batch_tokens, s.seed);
  dcp::policies<dcp::packed_planner> packed;
  packed.planner = dcp::tune(dcp::packed_planner{}, s.cost(R), std::span<const dcp::sequence>(dataset), s.batch_tokens, s.seed);
  dcp::default_policies full;
  full.planner.restrictions = false;  // dcp's full plans: these small batches accumulate unequally
  const run_result runs[] = {run_planned(world, s, full), run_planned(world, s, bucket),
                             run_planned(world, s, packed)};
  if (world.rank() != 0) return;  // rank 0 checks against the reference it trains alone
  const run_result ref = run_reference(s, R);
  const char* names[] = {"dcp", "bucket", "packed"};
  coverage all;  // accumulation over the three planners
  for (int i = 0; i < 3; ++i) {
    const auto& got = runs[i];
    const double dp = relative(got.params, ref.params);
    ASSERT_EQ(got.losses.size(), ref.losses.size());
    const double dl = relative_losses(got.losses, ref.losses);
    std::printf("%d ranks %-6s params %.2e  losses %.2e  | %s\n", R, names[i], dp, dl, describe(got.cov).c_str());
    EXPECT_LE(dp, 1e-10) << names[i];
    EXPECT_LE(dl, 1e-10) << names[i];
    all.accumulation |= got.cov.accumulation;
  }
  // The runs must exercise what the proof is about (sp > 1 needs more than one rank; bucket and
  // packed fix one sp for the run, so their ranks may all run the same number of micro-steps).
  EXPECT_TRUE(all.accumulation) << "no rank accumulated over micro-steps";
  for (int i = 0; i < 3; ++i) {
    EXPECT_TRUE(runs[i].cov.recompute) << names[i] << " plans recompute no block";
    if (R > 1) {
      EXPECT_GT(runs[i].cov.max_sp, 1) << names[i] << " plans no step with sp > 1";
      EXPECT_TRUE(runs[i].cov.uneven_shards) << names[i] << " plans no uneven token shards";
    }
  }
  if (R > 1) {
    EXPECT_TRUE(runs[0].cov.unequal_accumulation) << "dcp gives every rank the same number of micro-steps";
  }
}

// Groups of any size on 6 ranks (run alone under mpiexec -n 6): a model of 6 heads, so groups of
// 3 and 6 ranks are legal Ulysses sizes, planned on contiguous_groups; 3 AdamW steps under those
// plans match the full-batch reference as above.
TEST(libtorch_any_size, groups_of_three_and_six_match_full_batch) {
  auto& world = *world_ptr;
  if (world.size() % 3 != 0) GTEST_SKIP() << "groups of 3 and 6 need a multiple of 3 ranks";
  setup s;
  s.model.heads = 6, s.model.hidden = 24, s.model.mlp = 48;
  s.tokens_per_rank = 10;  // the longest documents then need more than two ranks
  const run_result got = run_planned(world, s, dcp::policies<dcp::contiguous_groups>{});
  if (world.rank() != 0) return;
  const run_result ref = run_reference(s, world.size());
  const double dp = relative(got.params, ref.params);
  ASSERT_EQ(got.losses.size(), ref.losses.size());
  const double dl = relative_losses(got.losses, ref.losses);
  std::printf("%d ranks dcp on contiguous groups: params %.2e  losses %.2e  | %s, other sizes %d\n", world.size(), dp,
              dl, describe(got.cov).c_str(), int(got.cov.other_size));
  EXPECT_LE(dp, 1e-10);
  EXPECT_LE(dl, 1e-10);
  EXPECT_TRUE(got.cov.other_size) << "no step ran on a group of 3 or 6 ranks";
}

// Pipeline stages (run alone under mpiexec, --gtest_filter=libtorch_pipeline.*): R ranks as
// R / 2 stages of 2 units, so pp = 2 on 4 ranks and pp = 4 on 8. A 4-block model, each stage's
// blocks on its ranks, activations and their gradients sent stage to stage in 1F1B order
// (`pipeline_train_step`); 3 AdamW steps under dcp, bucket and packed plans match the full-batch
// reference, with sp > 1, recompute and unequal micro-batch counts per unit present, and on 4
// stages a dcp plan with a deeper warmup than 1F1B.
TEST(libtorch_pipeline, stages_match_full_batch) {
  auto& world = *world_ptr;
  const int R = world.size();
  if (R < 4 || R % 2 != 0) GTEST_SKIP() << "pipelines of two units per stage need an even world of 4 or more ranks";
  setup s;
  s.model.blocks = 4;
  s.tokens_per_rank = 8;  // per stage's share of the model: the longest documents need both units
  const int P = R / 2;
  const auto spec = spec_of(s.model);
  const auto options = s.options(R);
  const auto cost =
      dcp::make_analytic_cost(spec, options.device, dcp::parallel_layout{.gpus = R, .gpus_per_node = 8, .pp = P});
  const auto dataset = s.data.dataset();
  auto run = [&]<class Policies>(Policies policies) {
    dcp::scheduler<dcp::transformer_spec, dcp::mpi_comm, Policies> sched(spec, world, cost, options, policies);
    return train_with(sched, s, [](auto&... a) { return pipeline_train_step(a...); });
  };
  dcp::policies<dcp::bucket_planner> bucket;
  bucket.planner =
      dcp::tune(dcp::bucket_planner{}, cost, std::span<const dcp::sequence>(dataset), s.batch_tokens, s.seed);
  dcp::policies<dcp::packed_planner> packed;
  packed.planner =
      dcp::tune(dcp::packed_planner{}, cost, std::span<const dcp::sequence>(dataset), s.batch_tokens, s.seed);
  // dcp's pipeline knobs tuned on the same epoch, as the baselines' are; on 4 stages also the
  // first knobs of the tuning grid under which a plan of the run's batches warms up deeper than
  // 1F1B (these tiny batches rarely need it), so that the order a deeper warmup gives is run too.
  dcp::default_policies tuned, deeper;
  tuned.planner = dcp::tune(tuned.planner, cost, std::span<const dcp::sequence>(dataset), s.batch_tokens, s.seed);
  if (P >= 4) {
    dcp::token_budget_sampler sampler(s.data.dataset(), s.batch_tokens, options.seed);
    std::vector<std::vector<dcp::sequence>> batches;
    for (int i = 0; i < s.steps; ++i) batches.push_back(sampler.next().sequences);
    auto warms_deeper = [&](const dcp::dcp_planner& p) {
      return std::any_of(batches.begin(), batches.end(), [&](const auto& b) {
        return p.plan(cost, std::span<const dcp::sequence>(b)).warmup_depth > 1;
      });
    };
    bool found = false;
    for (double cap : dcp::path_cap_candidates)
      for (int room : dcp::room_candidates)
        if (!found) {
          deeper.planner.pipeline = {cap, room};
          found = warms_deeper(deeper.planner);
        }
    ASSERT_TRUE(found) << "no knobs of the tuning grid give a plan deeper than 1F1B on 4 stages";
  }
  std::vector<run_result> runs{run(tuned), run(bucket), run(packed)};
  if (P >= 4) runs.push_back(run(deeper));
  if (world.rank() != 0) return;
  const run_result ref = run_reference(s, R);
  const char* names[] = {"dcp", "bucket", "packed", "dcp-deep"};
  for (std::size_t i = 0; i < runs.size(); ++i) {
    const auto& got = runs[i];
    const double dp = relative(got.params, ref.params);
    ASSERT_EQ(got.losses.size(), ref.losses.size());
    const double dl = relative_losses(got.losses, ref.losses);
    std::printf("%d ranks, pp %d, %-6s params %.2e  losses %.2e  | %s\n", R, P, names[i], dp, dl,
                describe(got.cov).c_str());
    EXPECT_LE(dp, 1e-10) << names[i];
    EXPECT_LE(dl, 1e-10) << names[i];
    EXPECT_TRUE(got.cov.recompute) << names[i] << " plans recompute no block";
    EXPECT_GT(got.cov.max_sp, 1) << names[i] << " plans no step with sp > 1";
  }
  EXPECT_TRUE(runs[0].cov.unequal_accumulation) << "dcp gives every unit the same number of micro-batches";
  if (P >= 4) {
    EXPECT_GT(runs[3].cov.warmup_depth, 1) << "no dcp plan runs a deeper warmup than 1F1B on 4 stages";
  }
}

TEST(libtorch_corpus, file_round_trip_and_malformed_files) {
  const auto dir = std::filesystem::temp_directory_path() /
                   ("dcp_libtorch_corpus_" + std::to_string(::getpid()) + "_" + std::to_string(world_ptr->rank()));
  std::filesystem::create_directories(dir);
  const std::string path = (dir / "corpus.txt").string();
  const corpus c = corpus::generate(50, 4, 40, 11);
  c.write(path);
  const corpus back = corpus::read(path);
  ASSERT_EQ(back.size(), c.size());
  for (std::size_t i = 0; i < c.size(); ++i) EXPECT_EQ(back.document(std::int64_t(i)), c.document(std::int64_t(i)));
  EXPECT_EQ(back.dataset(), c.dataset());
  EXPECT_GT(c.longest(), 20);  // lengths vary
  std::printf("sample document: \"%s\"\n", corpus::decode(c.document(0)).c_str());
  {
    std::ofstream bad(path);
    bad << "dcp-libtorch-corpus 1\nalphabet " << corpus::alphabet << "\ndocuments 1\n3 1 2\n";
  }
  EXPECT_DCP_ERROR((void)corpus::read(path), dcp::errc::parse_error, ":4:")
      << "a line with fewer tokens than declared was accepted";
  std::filesystem::remove_all(dir);
}

}  // namespace

int main(int argc, char** argv) {
  dcp::mpi_environment env(&argc, &argv);
  ::testing::InitGoogleTest(&argc, argv);
  torch::set_num_threads(1);  // one core per rank
  int rc = 0;
  {
    auto world = dcp::mpi_comm::world(std::chrono::minutes(5));  // rank 0 trains the reference alone
    world_ptr = &world;
    if (world.rank() != 0) {
      auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
      delete listeners.Release(listeners.default_result_printer());
    }
    rc = RUN_ALL_TESTS();
    int v[1] = {rc};  // every rank reports the outcome of all
    world.all_reduce(std::span<int>(v), dcp::reduce_op::max);
    rc = v[0];
    world_ptr = nullptr;
  }
  return rc;
}
