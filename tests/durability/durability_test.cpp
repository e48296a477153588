// Sampler durability: a training run that checkpoints its sampler after every global batch and is
// killed (a forked child, SIGKILL) at random points, then resumed from its checkpoint file, yields
// exactly the batches and plan hashes of an uninterrupted run; no epoch loses or repeats a sequence.
//
// The run (`worker`) is what a training loop does: draw a batch, plan it, record (epoch, index,
// ids, plan hash) in a log, then checkpoint atomically: the checkpoint file is written under a
// temporary name and renamed over the old one, and it holds the number of log records it covers
// followed by `token_budget_sampler::save`. Resuming loads the checkpoint, cuts the log back to
// the records it covers (batches after the checkpoint are redone, as a trainer redoes the steps
// after its last checkpoint), and continues. A kill can land anywhere: before a record, between
// the record and the checkpoint, in the middle of writing the checkpoint, after the rename, or
// (asynchronously, from the parent) at any instruction.

#include <dcp_test/support.hpp>
#include <gtest/gtest.h>

#include <signal.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <dcp/cost/analytic.hpp>
#include <dcp/error.hpp>
#include <dcp/model/transformer.hpp>
#include <dcp/plan/dcp_planner.hpp>
#include <dcp/sample/token_budget_sampler.hpp>

namespace {

namespace fs = std::filesystem;

// A mixed-length dataset (videos of 1k-200k tokens) that gives ~20 batches per epoch on 8 GPUs.
dcp::dataset make_dataset(std::uint64_t seed = 11, int count = 240) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int> frames(1, 12), spatial(900, 16000);
  dcp::dataset d;
  for (int i = 0; i < count; ++i) d.push_back(dcp::make_sequence(1000 + i * 3, frames(rng), spatial(rng)));
  return d;
}

const dcp::analytic_cost& job_cost() {
  static const dcp::analytic_cost cost =
      dcp::make_analytic_cost(dcp::models::cogvideox_5b(), dcp::devices::h200_analytic(), 8);
  return cost;
}

constexpr std::int64_t budget = 1'200'000;
constexpr std::uint64_t sampler_seed = 5;

dcp::token_budget_sampler make_sampler(const dcp::dataset& d = make_dataset()) {
  return dcp::token_budget_sampler(d, budget, sampler_seed, [](const dcp::sequence& s) { return job_cost().tokens_of(s); });
}

// One log record: what a batch was and how it was planned.
std::string record_of(const dcp::global_batch& b) {
  const dcp::plan p = dcp::dcp_planner{}.plan(job_cost(), b.sequences);
  std::ostringstream os;
  os << "epoch " << b.epoch << " batch " << b.index << " plan " << std::hex << p.hash() << std::dec << " ids";
  for (const auto& s : b.sequences) os << ' ' << s.id;
  return os.str();
}

// Where a worker kills itself (SIGKILL) while handling batch `at` of its run.
enum class phase { before_record, before_checkpoint, mid_checkpoint, after_checkpoint };
struct kill_point {
  std::int64_t at = -1;  // -1: never
  phase where = phase::before_record;
};

struct run_dir {
  fs::path dir;
  fs::path log() const { return dir / "log.txt"; }
  fs::path checkpoint() const { return dir / "sampler.ckpt"; }
  fs::path temporary() const { return dir / "sampler.ckpt.tmp"; }
};

std::vector<std::string> read_lines(const fs::path& p) {
  std::vector<std::string> out;
  std::ifstream in(p);
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

void die() {
  ::kill(::getpid(), SIGKILL);
  for (;;) ::pause();
}

// The training loop: resumes from the checkpoint if there is one and runs until the log holds
// `total` records. Returns normally only when done.
void worker(const run_dir& r, std::int64_t total, kill_point kp) {
  auto sampler = make_sampler();
  std::int64_t covered = 0;  // log records the checkpoint covers (none without a checkpoint)
  if (fs::exists(r.checkpoint())) {
    std::ifstream in(r.checkpoint());
    std::string word;
    in >> word >> covered;
    if (word != "records" || covered < 0) throw std::runtime_error("bad checkpoint header");
    sampler.load(in, r.checkpoint().string());
  }
  std::vector<std::string> log = read_lines(r.log());
  if (std::int64_t(log.size()) < covered) throw std::runtime_error("log shorter than its checkpoint");
  if (std::int64_t(log.size()) > covered) {
    log.resize(std::size_t(covered));  // records after the checkpoint are redone
    {
      std::ofstream rewrite(r.dir / "log.tmp", std::ios::trunc);
      for (const auto& l : log) rewrite << l << '\n';
    }
    fs::rename(r.dir / "log.tmp", r.log());  // a kill here leaves the old, longer log
  }
  std::ofstream out(r.log(), std::ios::app);
  for (std::int64_t i = std::int64_t(log.size()); i < total; ++i) {
    const std::string rec = record_of(sampler.next());
    const bool here = kp.at == i;
    if (here && kp.where == phase::before_record) die();
    out << rec << '\n' << std::flush;
    if (here && kp.where == phase::before_checkpoint) die();
    std::ostringstream ck;
    ck << "records " << i + 1 << '\n';
    sampler.save(ck);
    const std::string bytes = ck.str();
    {
      std::ofstream tmp(r.temporary(), std::ios::trunc | std::ios::binary);
      if (here && kp.where == phase::mid_checkpoint) {
        tmp.write(bytes.data(), std::streamsize(bytes.size() / 2)).flush();
        die();
      }
      tmp.write(bytes.data(), std::streamsize(bytes.size()));
    }
    fs::rename(r.temporary(), r.checkpoint());  // atomic: a reader sees the old or the new state
    if (here && kp.where == phase::after_checkpoint) die();
  }
}

// Runs `worker` in a child process. Returns the signal that ended it (0 = exited normally).
// With `kill_after_records` >= 0 the parent SIGKILLs the child once the log holds that many lines.
int run_child(const run_dir& r, std::int64_t total, kill_point kp, std::int64_t kill_after_records = -1) {
  std::fflush(nullptr);
  const pid_t pid = ::fork();
  if (pid < 0) throw std::runtime_error("fork failed");
  if (pid == 0) {
    int code = 0;
    try {
      worker(r, total, kp);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "worker failed: %s\n", e.what());
      code = 3;
    }
    std::fflush(nullptr);
    ::_exit(code);
  }
  if (kill_after_records >= 0) {
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (std::chrono::steady_clock::now() < give_up) {
      int st = 0;
      if (::waitpid(pid, &st, WNOHANG) == pid) return WIFSIGNALED(st) ? WTERMSIG(st) : (WEXITSTATUS(st) ? -1 : 0);
      if (std::int64_t(read_lines(r.log()).size()) >= kill_after_records) break;
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
    ::kill(pid, SIGKILL);
  }
  int st = 0;
  if (::waitpid(pid, &st, 0) != pid) throw std::runtime_error("waitpid failed");
  if (WIFSIGNALED(st)) return WTERMSIG(st);
  return WEXITSTATUS(st) == 0 ? 0 : -1;
}

class Durability : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    std::string name = std::string(info->test_suite_name()) + "." + info->name();
    for (auto& c : name)
      if (c == '/') c = '_';
    root_ = fs::temp_directory_path() / ("dcp-durability-" + std::to_string(::getpid()) + "-" + name);
    fs::remove_all(root_);
    fs::create_directories(root_);
  }
  void TearDown() override { fs::remove_all(root_); }

  run_dir fresh(const std::string& name) const {
    run_dir r{root_ / name};
    fs::create_directories(r.dir);
    return r;
  }

  // The uninterrupted run, in process.
  static const std::vector<std::string>& reference() {
    static const std::vector<std::string> ref = [] {
      auto s = make_sampler();
      std::vector<std::string> out;
      for (std::int64_t i = 0; i < total_batches(); ++i) out.push_back(record_of(s.next()));
      return out;
    }();
    return ref;
  }
  // Two and a half epochs: kills land in every epoch and on epoch boundaries.
  static std::int64_t total_batches() {
    static const std::int64_t n = [] {
      auto s = make_sampler();
      return s.batches_in_epoch(0) + s.batches_in_epoch(1) + s.batches_in_epoch(2) / 2;
    }();
    return n;
  }

  fs::path root_;
};

// Every complete epoch of `log` holds every id of the dataset exactly once, and batches of an
// epoch are numbered 0, 1, 2, ... in order.
void expect_exactly_once_per_epoch(const std::vector<std::string>& log) {
  std::set<std::int64_t> all;
  for (const auto& s : make_dataset()) all.insert(s.id);
  std::map<std::int64_t, std::multiset<std::int64_t>> seen;
  std::map<std::int64_t, std::int64_t> next_index;
  for (const auto& line : log) {
    std::istringstream in(line);
    std::string w;
    std::int64_t epoch = 0, index = 0;
    std::string hash;
    in >> w >> epoch >> w >> index >> w >> hash >> w;
    EXPECT_EQ(index, next_index[epoch]++) << line;
    for (std::int64_t id = 0; in >> id;) seen[epoch].insert(id);
  }
  ASSERT_GE(seen.size(), 3u);
  for (const auto& [epoch, ids] : seen) {
    std::set<std::int64_t> unique(ids.begin(), ids.end());
    EXPECT_EQ(unique.size(), ids.size()) << "epoch " << epoch << " repeats a sequence";
    if (std::next(seen.find(epoch)) != seen.end()) {  // complete epochs only
      EXPECT_EQ(unique, all) << "epoch " << epoch << " lost a sequence";
    }
    for (auto id : unique) EXPECT_TRUE(all.count(id)) << "unknown id " << id;
  }
}

TEST_F(Durability, ReferenceRunVisitsEveryEpochExactlyOnce) {
  ASSERT_GE(total_batches(), 30);
  expect_exactly_once_per_epoch(reference());
}

TEST_F(Durability, StateRoundTripsThroughAFileAtEveryBatch) {
  auto a = make_sampler();
  const auto path = fresh("roundtrip").dir / "state.json";
  for (std::int64_t i = 0; i < total_batches(); ++i) {
    {
      std::ofstream out(path, std::ios::trunc);
      a.save(out);
    }
    auto b = make_sampler();
    std::ifstream in(path);
    b.load(in, path.string());
    EXPECT_EQ(b.state(), a.state());
    EXPECT_EQ(b.batch_index(), a.batch_index());
    EXPECT_EQ(b, a);
    const auto next_a = a.next(), next_b = b.next();
    ASSERT_EQ(next_b, next_a) << "batch " << i;
  }
}

TEST_F(Durability, UninterruptedChildMatchesInProcessRun) {
  const auto r = fresh("whole");
  ASSERT_EQ(run_child(r, total_batches(), {}), 0);
  EXPECT_EQ(read_lines(r.log()), reference());
}

// Each kill point in turn: every phase of a batch, on the first batch, an epoch's last batch and
// first batch, and random batches.
TEST_F(Durability, KilledAtRandomPointsAndResumedEqualsUninterrupted) {
  const auto s = make_sampler();
  const std::int64_t e0 = s.batches_in_epoch(0);
  std::vector<std::int64_t> points = {0, e0 - 1, e0, total_batches() - 1};
  const std::uint64_t seed = 1301;  // fixed, so a failure replays; printed and in every trace
  dcp_test::rng pick(seed);
  for (int i = 0; i < 6; ++i) points.push_back(pick.between(0, total_batches() - 1));
  int run = 0;
  for (const auto at : points) {
    for (const auto where : {phase::before_record, phase::before_checkpoint, phase::mid_checkpoint,
                             phase::after_checkpoint}) {
      SCOPED_TRACE("seed " + std::to_string(seed) + ", kill at batch " + std::to_string(at) + ", phase " +
                   std::to_string(int(where)));
      const auto r = fresh("run" + std::to_string(run++));
      ASSERT_EQ(run_child(r, total_batches(), {at, where}), SIGKILL);
      if (where == phase::mid_checkpoint) {
        // The torn temporary file is a clear parse error, never a half-read state.
        auto torn = make_sampler();
        std::ifstream in(r.temporary());
        std::string header;
        std::getline(in, header);
        EXPECT_DCP_ERROR(torn.load(in, "torn"), dcp::errc::parse_error) << "a torn checkpoint";
      }
      ASSERT_EQ(run_child(r, total_batches(), {}), 0);  // resume to the end
      const auto log = read_lines(r.log());
      ASSERT_EQ(log.size(), reference().size());
      for (std::size_t i = 0; i < log.size(); ++i) ASSERT_EQ(log[i], reference()[i]) << "record " << i;
    }
  }
}

// The parent kills the child asynchronously (it may be anywhere: planning, writing the log, in the
// middle of a checkpoint), several times in one run, then lets it finish.
TEST_F(Durability, KilledAsynchronouslyManyTimesAndResumedEqualsUninterrupted) {
  // The kill targets are seeded; when the signal lands inside a batch still varies by run.
  const std::uint64_t seed = 1302;
  dcp_test::rng pick(seed);
  for (int trial = 0; trial < 3; ++trial) {
    SCOPED_TRACE("seed " + std::to_string(seed) + ", trial " + std::to_string(trial));
    const auto r = fresh("async" + std::to_string(trial));
    std::int64_t kills = 0;
    for (int k = 0; k < 4; ++k) {
      const auto have = std::int64_t(read_lines(r.log()).size());
      const auto target = std::min(total_batches() - 1, have + 1 + pick.between(0, 9));
      const int sig = run_child(r, total_batches(), {}, target);
      ASSERT_TRUE(sig == SIGKILL || sig == 0) << "child ended with " << sig;
      kills += sig == SIGKILL;
    }
    ASSERT_EQ(run_child(r, total_batches(), {}), 0);
    EXPECT_GT(kills, 0);
    EXPECT_EQ(read_lines(r.log()), reference());
    expect_exactly_once_per_epoch(read_lines(r.log()));
  }
}

// A checkpoint is tied to its dataset, budget and token counts.
TEST_F(Durability, CheckpointOfAnotherDatasetIsRefused) {
  auto a = make_sampler();
  for (int i = 0; i < 3; ++i) a.next();
  std::stringstream state;
  a.save(state);
  const std::string saved = state.str();
  auto check_refused = [&](dcp::token_budget_sampler other, const char* what) {
    const auto before = other.state();
    std::istringstream in(saved);
    EXPECT_DCP_ERROR(other.load(in, "ckpt"), dcp::errc::mismatch) << what;
    EXPECT_EQ(other.state(), before) << what << ": a refused load changed the sampler";
  };
  check_refused(make_sampler(make_dataset(12)), "other lengths");
  auto ids = make_dataset();
  ids[7].id = 999999;
  check_refused(make_sampler(ids), "other ids");
  check_refused(make_sampler(make_dataset(11, 241)), "other size");
  check_refused(dcp::token_budget_sampler(make_dataset(), budget + 1, sampler_seed), "other budget");
  check_refused(dcp::token_budget_sampler(make_dataset(), budget, sampler_seed), "shape-only token counts");
}

}  // namespace
