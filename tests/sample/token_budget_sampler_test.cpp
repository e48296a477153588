// token_budget_sampler: exactly-once epochs, budgets, determinism, resume, validation.

#include <dcp/sample/token_budget_sampler.hpp>
#include <dcp/workload/embedded.hpp>

#include <dcp_test/support.hpp>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <set>
#include <sstream>
#include <string>
#include <vector>

namespace {

// --- the concept -------------------------------------------------------------------------------

static_assert(dcp::sampler<dcp::token_budget_sampler>);
static_assert(std::copyable<dcp::token_budget_sampler>);
static_assert(std::regular<dcp::sampler_state>);

struct not_opted_in {  // has the structure but no tag: must not model the concept
  using state_type = dcp::sampler_state;
  dcp::global_batch next() { return {}; }
  dcp::sampler_state state() const { return {}; }
  void restore(const dcp::sampler_state&) {}
  std::int64_t size() const { return 0; }
  std::int64_t batches_in_epoch(std::int64_t) const { return 0; }
};
static_assert(!dcp::sampler<not_opted_in>);
static_assert(!dcp::sampler<dcp::sampler_state>);

// --- helpers -----------------------------------------------------------------------------------

// A random dataset: 1D and 2D shapes over several orders of magnitude, unique shuffled ids.
dcp::dataset random_dataset(dcp::xoshiro256ss& g, std::int64_t n) {
  dcp::dataset d;
  auto ids = dcp::random_permutation(n, g());
  for (std::int64_t i = 0; i < n; ++i) {
    const std::int64_t len = std::int64_t{1} << dcp::uniform_below(g, 18);
    const std::int64_t t = dcp::uniform_below(g, 2) ? 1 : 1 + static_cast<std::int64_t>(dcp::uniform_below(g, 30));
    d.push_back({ids[static_cast<std::size_t>(i)] * 3 + 7, t, len + static_cast<std::int64_t>(dcp::uniform_below(g, 100))});
  }
  return d;
}

std::int64_t shape_total(const dcp::global_batch& b) {
  std::int64_t t = 0;
  for (const auto& s : b.sequences) t += s.shape_tokens();
  return t;
}

// All batches of the sampler's current epoch, starting where it stands.
std::vector<dcp::global_batch> rest_of_epoch(dcp::token_budget_sampler& s) {
  std::vector<dcp::global_batch> out;
  const auto e = s.state().epoch;
  while (s.state().epoch == e) out.push_back(s.next());
  return out;
}

// --- properties over random inputs -------------------------------------------------------------

TEST(TokenBudgetSampler, EverySequenceExactlyOncePerEpochWithinBudget) {
  dcp::xoshiro256ss g(2024);
  for (int trial = 0; trial < 60; ++trial) {
    const auto n = 1 + static_cast<std::int64_t>(dcp::uniform_below(g, 400));
    const auto data = random_dataset(g, n);
    const std::int64_t budget = std::int64_t{1} << (10 + dcp::uniform_below(g, 14));
    dcp::token_budget_sampler s(data, budget, g());
    for (std::int64_t epoch = 0; epoch < 3; ++epoch) {
      const auto batches = rest_of_epoch(s);
      ASSERT_EQ(static_cast<std::int64_t>(batches.size()), s.batches_in_epoch(epoch));
      std::multiset<std::int64_t> seen;
      for (std::size_t i = 0; i < batches.size(); ++i) {
        const auto& b = batches[i];
        EXPECT_EQ(b.epoch, epoch);
        EXPECT_EQ(b.index, static_cast<std::int64_t>(i));
        ASSERT_FALSE(b.sequences.empty());
        if (b.sequences.size() > 1) {
          EXPECT_LE(shape_total(b), budget) << "trial " << trial;
        }
        // Greedy fill: the next batch's first sequence would not have fitted (except at the end).
        if (i + 1 < batches.size()) {
          EXPECT_GT(shape_total(b) + batches[i + 1].sequences.front().shape_tokens(), budget);
        }
        for (const auto& q : b.sequences) seen.insert(q.id);
      }
      std::multiset<std::int64_t> want;
      for (const auto& q : data) want.insert(q.id);
      ASSERT_EQ(seen, want) << "trial " << trial << " epoch " << epoch;
    }
    EXPECT_EQ(s.state().epoch, 3);
    EXPECT_EQ(s.state().position, 0);
  }
}

TEST(TokenBudgetSampler, BatchesCarryTheDatasetSequencesUnchanged) {
  dcp::xoshiro256ss g(5);
  const auto data = random_dataset(g, 300);
  dcp::token_budget_sampler s(data, 1 << 16, 9);
  for (const auto& b : rest_of_epoch(s))
    for (const auto& q : b.sequences) EXPECT_NE(std::find(data.begin(), data.end(), q), data.end());
}

TEST(TokenBudgetSampler, OversizedSequencesStandAlone) {
  const dcp::dataset d{{0, 1, 500}, {1, 1, 50}, {2, 1, 60}, {3, 1, 1000}, {4, 1, 70}, {5, 1, 100}};
  for (std::uint64_t seed = 0; seed < 20; ++seed) {
    dcp::token_budget_sampler s(d, 100, seed);
    for (const auto& b : rest_of_epoch(s)) {
      for (const auto& q : b.sequences) {
        if (q.shape_tokens() > 100) {
          EXPECT_EQ(b.sequences.size(), 1u);
        }
      }
    }
  }
  // A budget below every sequence: one batch per sequence.
  dcp::token_budget_sampler tiny(d, 1, 0);
  EXPECT_EQ(tiny.batches_in_epoch(0), 6);
  EXPECT_EQ(rest_of_epoch(tiny).size(), 6u);
  // A budget above the whole dataset: one batch per epoch.
  dcp::token_budget_sampler huge(d, INT64_MAX, 0);
  EXPECT_EQ(huge.batches_in_epoch(0), 1);
  EXPECT_EQ(huge.next().sequences.size(), 6u);
}

TEST(TokenBudgetSampler, DeterministicAcrossInstancesAndEpochsDiffer) {
  const auto data = dcp::workloads::make("opensora-zipf10");
  const auto budget = dcp::default_global_batch_tokens(32);
  dcp::token_budget_sampler a(data, budget, 77), b(data, budget, 77), c(data, budget, 78);
  const auto ea = rest_of_epoch(a), eb = rest_of_epoch(b), ec = rest_of_epoch(c);
  EXPECT_EQ(ea, eb);
  EXPECT_NE(ea, ec);
  const auto ea1 = rest_of_epoch(a);
  EXPECT_NE(ea.front().sequences, ea1.front().sequences);  // each epoch reshuffles
  EXPECT_EQ(a.permutation(1), b.permutation(1));
  EXPECT_NE(a.permutation(0), a.permutation(1));
}

TEST(TokenBudgetSampler, GoldenFirstBatch) {
  // Pins the permutation and fill rule: every rank and platform must produce exactly this.
  dcp::dataset d;
  for (std::int64_t i = 0; i < 10; ++i) d.push_back(dcp::make_sequence(i, 10 * (i + 1)));
  dcp::token_budget_sampler s(d, 120, 0);
  std::ostringstream ids;
  for (const auto& b : rest_of_epoch(s)) {
    for (const auto& q : b.sequences) ids << q.id << ' ';
    ids << "| ";
  }
  EXPECT_EQ(ids.str(), "2 5 | 6 | 9 | 4 1 0 3 | 8 | 7 | ");
}

TEST(TokenBudgetSampler, CallerGivenTokenCount) {
  // The planner counts model tokens (text tokens included): batches must respect that count.
  const dcp::dataset d{{0, 1, 100}, {1, 1, 100}, {2, 1, 100}, {3, 1, 100}};
  dcp::token_budget_sampler plain(d, 400, 0);
  EXPECT_EQ(plain.batches_in_epoch(0), 1);
  dcp::token_budget_sampler with_text(d, 400, 0, [](const dcp::sequence& q) { return q.shape_tokens() + 226; });
  EXPECT_EQ(with_text.batches_in_epoch(0), 4);
  EXPECT_EQ(with_text.tokens(0), 326);
  EXPECT_NE(plain.fingerprint(), with_text.fingerprint());
}

TEST(TokenBudgetSampler, ResumeFromRandomPointsGivesIdenticalBatches) {
  dcp::xoshiro256ss g(31337);
  for (int trial = 0; trial < 30; ++trial) {
    const auto data = random_dataset(g, 1 + static_cast<std::int64_t>(dcp::uniform_below(g, 300)));
    const std::int64_t budget = std::int64_t{1} << (12 + dcp::uniform_below(g, 10));
    const auto seed = g();
    dcp::token_budget_sampler reference(data, budget, seed);
    std::vector<dcp::global_batch> want;
    std::vector<dcp::sampler_state> states;
    for (int i = 0; i < 200; ++i) {
      states.push_back(reference.state());
      want.push_back(reference.next());
    }
    for (int k = 0; k < 5; ++k) {
      const auto at = static_cast<std::size_t>(dcp::uniform_below(g, states.size()));
      // Through the state value...
      dcp::token_budget_sampler r1(data, budget, /*seed=*/0);
      r1.restore(states[at]);
      // ...and through save/load text, as a checkpoint would.
      dcp::token_budget_sampler tmp(data, budget, seed);
      tmp.restore(states[at]);
      std::stringstream io;
      tmp.save(io);
      dcp::token_budget_sampler r2(data, budget, /*seed=*/12345);
      r2.load(io);
      EXPECT_EQ(r2, tmp);
      for (std::size_t i = at; i < want.size(); ++i) {
        ASSERT_EQ(r1.next(), want[i]) << "trial " << trial << " resumed at " << at << " batch " << i;
        ASSERT_EQ(r2.next(), want[i]) << "trial " << trial << " resumed at " << at << " batch " << i;
      }
    }
  }
}

TEST(TokenBudgetSampler, StateAcrossEpochBoundary) {
  const dcp::dataset d{{0, 1, 10}, {1, 1, 10}, {2, 1, 10}};
  dcp::token_budget_sampler s(d, 20, 4);
  EXPECT_EQ(s.state(), (dcp::sampler_state{4, 0, 0}));
  (void)s.next();
  EXPECT_EQ(s.state(), (dcp::sampler_state{4, 0, 2}));
  EXPECT_EQ(s.batch_index(), 1);
  (void)s.next();
  EXPECT_EQ(s.state(), (dcp::sampler_state{4, 1, 0}));  // normalised: never {0, size()}
  EXPECT_EQ(s.batch_index(), 0);

  dcp::token_budget_sampler a(d, 20, 4), b(d, 20, 4);
  a.restore({4, 0, 3});  // end of epoch 0 means the start of epoch 1
  b.restore({4, 1, 0});
  EXPECT_EQ(a, b);
  EXPECT_EQ(a.next(), b.next());
}

TEST(TokenBudgetSampler, CopiesForkTheStream) {
  dcp::token_budget_sampler a(dcp::workloads::make("cogvideox-zipf1"), 1 << 20, 1);
  (void)a.next();
  auto b = a;
  EXPECT_EQ(a, b);
  EXPECT_EQ(a.next(), b.next());
  (void)a.next();
  EXPECT_NE(a, b);
  std::ostringstream os;
  os << a;
  EXPECT_NE(os.str().find("token_budget_sampler{"), std::string::npos);
}

// --- validation --------------------------------------------------------------------------------

void expect_error(dcp::errc code, const std::string& mentions, auto&& f) {
  EXPECT_TRUE(dcp_test::throws_dcp_error("f()", f, code, {mentions}));
}

TEST(TokenBudgetSampler, RejectsBadConstruction) {
  const dcp::dataset ok{{0, 1, 10}, {1, 2, 10}};
  expect_error(dcp::errc::invalid_argument, "empty", [] { dcp::token_budget_sampler s({}, 100); });
  expect_error(dcp::errc::invalid_argument, "budget = 0", [&] { dcp::token_budget_sampler s(ok, 0); });
  expect_error(dcp::errc::invalid_argument, "budget = -5", [&] { dcp::token_budget_sampler s(ok, -5); });
  expect_error(dcp::errc::invalid_argument, "sequence 1",
               [] { dcp::token_budget_sampler s({{0, 1, 10}, {1, 0, 10}}, 100); });
  expect_error(dcp::errc::invalid_argument, "sequence 3",
               [] { dcp::token_budget_sampler s({{3, 1, -10}}, 100); });
  expect_error(dcp::errc::invalid_argument, "id 7 appears at positions 0 and 2",
               [] { dcp::token_budget_sampler s({{7, 1, 10}, {8, 1, 10}, {7, 1, 20}}, 100); });
  expect_error(dcp::errc::invalid_argument, "token count must be positive",
               [&] { dcp::token_budget_sampler s(ok, 100, 0, [](const dcp::sequence&) { return 0; }); });
}

TEST(TokenBudgetSampler, RejectsBadStatesAndStaysUnchanged) {
  const auto data = dcp::workloads::make("text-longtail");
  dcp::token_budget_sampler s(data, 1 << 20, 0);
  (void)s.next();
  const auto before = s;
  expect_error(dcp::errc::invalid_argument, "epoch -1", [&] { s.restore({0, -1, 0}); });
  expect_error(dcp::errc::invalid_argument, "position 20001", [&] { s.restore({0, 0, 20001}); });
  expect_error(dcp::errc::invalid_argument, "position -3", [&] { s.restore({0, 0, -3}); });
  // Position 1 is inside the first batch (a 1M-token budget holds many documents).
  ASSERT_GT(s.state().position, 1);
  expect_error(dcp::errc::invalid_argument, "not the start of a batch", [&] { s.restore({0, 0, 1}); });
  EXPECT_EQ(s, before);
}

std::string saved(const dcp::token_budget_sampler& s) {
  std::ostringstream os;
  s.save(os);
  return os.str();
}

TEST(TokenBudgetSampler, SaveFormat) {
  const dcp::dataset d{{0, 1, 10}, {1, 1, 10}, {2, 1, 10}};
  dcp::token_budget_sampler s(d, 20, 18446744073709551615ULL);
  (void)s.next();
  const auto text = saved(s);
  EXPECT_EQ(text.rfind("{\"format\": \"dcp.sampler_state/v1\", \"seed\": 18446744073709551615, \"epoch\": 0, "
                       "\"position\": 2, \"sequences\": 3, \"budget\": 20, \"fingerprint\": \"",
                       0),
            0u)
      << text;
  dcp::token_budget_sampler r(d, 20, 0);
  std::istringstream in(text);
  r.load(in);
  EXPECT_EQ(r, s);
  EXPECT_EQ(r.state().seed, 18446744073709551615ULL);
}

TEST(TokenBudgetSampler, LoadRejectsMalformedAndMismatchedStates) {
  const dcp::dataset d{{0, 1, 10}, {1, 1, 10}, {2, 1, 10}};
  dcp::token_budget_sampler s(d, 20, 3);
  const auto good = saved(s);
  const auto replace = [&](const std::string& from, const std::string& to) {
    auto t = good;
    const auto at = t.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    return t.replace(at, from.size(), to);
  };
  const auto load = [&](const std::string& text) {
    return [&s, text] {
      std::istringstream in(text);
      s.load(in, "ckpt/sampler.json");
    };
  };
  const auto before = s;
  expect_error(dcp::errc::parse_error, "ckpt/sampler.json", load(""));
  expect_error(dcp::errc::parse_error, "syntax error while parsing value", load("seed 3"));
  expect_error(dcp::errc::parse_error, "missing closing quote", load("{\"format"));
  expect_error(dcp::errc::parse_error, "expected end of input", load(good + "x"));
  expect_error(dcp::errc::parse_error, "expected one JSON object", load("[1]"));
  expect_error(dcp::errc::parse_error, "dcp.sampler_state/v1", load(replace("v1", "v9")));
  expect_error(dcp::errc::parse_error, "no format tag", load("{\"seed\": 1}"));
  expect_error(dcp::errc::parse_error, "\"epoch\"", load(replace("\"epoch\"", "\"epoc\"")));
  expect_error(dcp::errc::parse_error, "duplicate key", load(replace("\"epoch\": 0", "\"epoch\": 0, \"epoch\": 1")));
  expect_error(dcp::errc::parse_error, "\"seed\" must be an integer", load(replace("\"seed\": 3", "\"seed\": -3")));
  expect_error(dcp::errc::parse_error, "\"seed\" must be an integer",
               load(replace("\"seed\": 3", "\"seed\": 99999999999999999999999")));
  expect_error(dcp::errc::parse_error, "number overflow", load(replace("\"epoch\": 0", "\"epoch\": 2e8889")));
  expect_error(dcp::errc::parse_error, "\"epoch\" must be an integer in range but is 0.5",
               load(replace("\"epoch\": 0", "\"epoch\": 0.5")));
  expect_error(dcp::errc::parse_error, "\"position\" must be an integer",
               load(replace("\"position\": 0", "\"position\": \"0\"")));
  expect_error(dcp::errc::parse_error, "fingerprint", load(replace("\"fingerprint\": \"", "\"fingerprint\": \"zz")));
  expect_error(dcp::errc::mismatch, "3 sequences", load(replace("\"sequences\": 3", "\"sequences\": 4")));
  expect_error(dcp::errc::mismatch, "budget 21", load(replace("\"budget\": 20", "\"budget\": 21")));
  expect_error(dcp::errc::invalid_argument, "position 5", load(replace("\"position\": 0", "\"position\": 5")));
  EXPECT_EQ(s, before);

  // Same size and budget, other data: the fingerprint catches it.
  dcp::token_budget_sampler other(dcp::dataset{{0, 1, 10}, {1, 1, 10}, {2, 1, 11}}, 20, 3);
  std::istringstream in(good);
  expect_error(dcp::errc::mismatch, "fingerprint", [&] { other.load(in); });
}

TEST(TokenBudgetSampler, DefaultBudget) {
  EXPECT_EQ(dcp::default_global_batch_tokens(32), 262144 * 32);
}

TEST(TokenBudgetSampler, PrintsItsValues) {
  std::ostringstream os;
  os << dcp::sampler_state{1, 2, 3} << ' ' << dcp::global_batch{1, 2, {{0, 2, 5}}} << ' ' << dcp::shape_token_count{};
  EXPECT_EQ(os.str(),
            "sampler_state{seed=1, epoch=2, position=3} global_batch{epoch=1, index=2, sequences=1, shape_tokens=10} "
            "shape_token_count{}");
}

}  // namespace
