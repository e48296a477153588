// dcp-fault-inject: one MPI job with one injected fault, run under `mpirun -np 4` by ctest
// (run_fault.cmake checks what it prints and how it ends).
//
//   dcp-fault-inject <scenario> [timeout_ms]
//
// Scenarios (the faulty rank is the last one, size() - 1):
//   exit-mid-all-to-all  every rank runs all-to-alls back to back; the faulty rank's watchdog
//                        thread ends its process (_Exit, no MPI_Finalize) while it is inside one.
//   stopped-mid-all-to-all  the same, but the faulty rank stops (SIGSTOP) instead of exiting.
// A survivor's report names the faulty rank: the timeout's roll call gets no answer from it.
//   never-joins-group    every rank but the faulty one splits the world into groups; the faulty
//                        rank never calls split (it stays alive, stuck, until the job is ended).
//   plan-mismatch        every rank plans a global batch with dcp::scheduler, the faulty one from
//                        another sampler seed; scheduler.verify(plan) must fail on every rank.
//   none                 the control: the same collectives with no fault; exits 0.
//
// Every rank that sees a fault prints exactly one line
//   dcp-fault: rank R caught dcp::error [dcp:<condition>] <t> s after the fault (timeout <T> s, within): <what()>
// where "within" becomes "LATE" when <t> exceeds the timeout plus one second of scheduling slack
// (4 ranks share 2 cores in CI). Survivors of a dead or stuck peer then meet in a barrier of their
// own (so nobody ends the job before every survivor has printed) and end the job with
// `abort_job(2)`, as mpi_comm's timeout message tells users to; after a plan mismatch every rank is
// alive, so they finalize MPI and exit 2. Either way the job exits non-zero.
//
// Times: the fault's moment is measured on std::chrono::steady_clock, which Linux shares across the
// processes of one host (CLOCK_MONOTONIC); ctest starts all 4 ranks on the local host.

#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <dcp/comm/mpi.hpp>
#include <dcp/error.hpp>
#include <dcp/model/transformer.hpp>
#include <dcp/scheduler.hpp>
#include <dcp/workload/embedded.hpp>

namespace {

using clock_type = std::chrono::steady_clock;
using namespace std::chrono_literals;

// Slack on top of the communicator timeout before a report counts as late.
constexpr auto slack = 1s;

double seconds(clock_type::duration d) { return std::chrono::duration<double>(d).count(); }

std::int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(clock_type::now().time_since_epoch()).count();
}

[[noreturn]] void usage() {
  std::fprintf(stderr,
               "usage: dcp-fault-inject exit-mid-all-to-all|stopped-mid-all-to-all|never-joins-group|plan-mismatch|none "
               "[timeout_ms]\n");
  std::exit(64);
}

// Prints the one report line of a rank that caught `e`; `fault_at` is when the fault happened.
void report(int rank, const dcp::error& e, clock_type::time_point fault_at, std::chrono::milliseconds timeout) {
  const auto late = clock_type::now() - fault_at;
  const bool within = late <= timeout + slack;
  std::fprintf(stderr, "dcp-fault: rank %d caught dcp::error [%s:%s] %.2f s after the fault (timeout %.1f s, %s): %s\n",
               rank, e.code().category().name(), e.code().message().c_str(), seconds(late), seconds(timeout),
               within ? "within" : "LATE", e.what());
  std::fflush(stderr);
}

// Survivors of a dead or stuck peer: meet among themselves, then end the job (exit code 2).
[[noreturn]] void end_job_as_survivor(dcp::mpi_comm& world, int faulty, std::chrono::milliseconds timeout) {
  MPI_Group all = MPI_GROUP_NULL, alive = MPI_GROUP_NULL;
  MPI_Comm_group(MPI_COMM_WORLD, &all);
  const int excluded[1] = {faulty};
  MPI_Group_excl(all, 1, excluded, &alive);
  MPI_Comm survivors = MPI_COMM_NULL;
  // Collective over the survivors only: the faulty rank takes no part.
  if (MPI_Comm_create_group(MPI_COMM_WORLD, alive, 99, &survivors) == MPI_SUCCESS && survivors != MPI_COMM_NULL) {
    // Must catch: a failed survivor barrier is reported, then the job still ends.
    try {
      auto c = dcp::mpi_comm::adopt(survivors, timeout);
      c.barrier();
    } catch (const dcp::error& e) {
      std::fprintf(stderr, "dcp-fault: rank %d: survivor barrier failed: %s\n", world.rank(), e.what());
    }
  }
  std::fflush(stderr);
  world.abort_job(2);
  std::_Exit(2);  // not reached: MPI_Abort ends this process too
}

// `stop`: the faulty rank stops (SIGSTOP, as a debugger or a frozen node would) instead of exiting.
int fault_mid_all_to_all(dcp::mpi_comm& world, std::chrono::milliseconds timeout, bool stop) {
  const int faulty = world.size() - 1;
  // Rank 0 picks the moment of the fault; everyone learns it (same host: one steady clock).
  std::int64_t fault_ns[1] = {now_ns() + std::int64_t{400'000'000}};
  world.broadcast(std::span<std::int64_t>(fault_ns), 0);
  const clock_type::time_point fault_at{std::chrono::nanoseconds(fault_ns[0])};
  if (world.rank() == faulty) {
    std::thread([fault_at, faulty, stop] {
      std::this_thread::sleep_until(fault_at);
      std::fprintf(stderr, "dcp-fault: rank %d %s now, inside an all-to-all\n", faulty,
                   stop ? "stops (SIGSTOP)" : "exits without MPI_Finalize");
      std::fflush(stderr);
      if (stop) std::raise(SIGSTOP);  // every thread of the process halts; MPI_Abort's kill ends it
      std::_Exit(3);
    }).detach();
  }
  const std::size_t per_peer = 16 * 1024;
  std::vector<std::uint32_t> send(per_peer * std::size_t(world.size()), std::uint32_t(world.rank()));
  std::vector<std::uint32_t> recv(send.size());
  // Must catch: the injected fault's error is what this program reports, then every survivor ends the job.
  try {
    const auto give_up = fault_at + 10 * timeout + 10s;
    for (std::int64_t it = 0; clock_type::now() < give_up; ++it)
      world.all_to_all(std::span<const std::uint32_t>(send), std::span<std::uint32_t>(recv));
  } catch (const dcp::error& e) {
    report(world.rank(), e, fault_at, timeout);
    end_job_as_survivor(world, faulty, timeout);
  }
  std::fprintf(stderr, "dcp-fault: rank %d saw no error long after rank %d %s\n", world.rank(), faulty,
               stop ? "stopped" : "exited");
  return 1;
}

int never_joins_group(dcp::mpi_comm& world, std::chrono::milliseconds timeout) {
  const int faulty = world.size() - 1;
  world.barrier();
  if (world.rank() == faulty) {
    std::fprintf(stderr, "dcp-fault: rank %d never calls split (stuck until the job is ended)\n", faulty);
    std::fflush(stderr);
    for (;;) std::this_thread::sleep_for(1s);
  }
  const auto entered = clock_type::now();  // the fault: the faulty rank is missing from here on
  // Must catch: as above, for a fault inside split.
  try {
    auto pairs = world.split(world.rank() / 2, world.rank());
    pairs.barrier();
  } catch (const dcp::error& e) {
    report(world.rank(), e, entered, timeout);
    end_job_as_survivor(world, faulty, timeout);
  }
  std::fprintf(stderr, "dcp-fault: rank %d split without rank %d\n", world.rank(), faulty);
  return 1;
}

// Plans one batch on every rank and verifies agreement; with `fault` the last rank uses another
// sampler seed. Returns the exit code.
int plan_agreement(dcp::mpi_comm& world, std::chrono::milliseconds timeout, bool fault) {
  const int faulty = world.size() - 1;
  dcp::scheduler_options opt;
  opt.seed = fault && world.rank() == faulty ? 1 : 0;
  dcp::scheduler sched(dcp::models::cogvideox_5b(), world, opt);
  sched.set_dataset(dcp::workloads::make("cogvideox-zipf10"));
  const dcp::plan p = sched.plan(sched.sampler().next().sequences);
  world.barrier();  // the fault is in place once every rank has planned
  const auto planned = clock_type::now();
  // Must catch: every rank must report the mismatch and then reach the closing barrier.
  try {
    sched.verify(p);
  } catch (const dcp::error& e) {
    report(world.rank(), e, planned, timeout);
    world.barrier();  // every rank is alive: end cleanly, but with a failure status
    return 2;
  }
  if (fault) {
    std::fprintf(stderr, "dcp-fault: rank %d verified a plan although rank %d used another seed\n", world.rank(),
                 faulty);
    return 1;
  }
  // Control run: the same collectives as the fault scenarios, all succeeding.
  const auto steps = sched.steps_for(p);
  std::vector<std::uint32_t> send(4 * std::size_t(world.size()), 1u), recv(send.size());
  world.all_to_all(std::span<const std::uint32_t>(send), std::span<std::uint32_t>(recv));
  auto pairs = world.split(world.rank() / 2, world.rank());
  pairs.barrier();
  std::fprintf(stderr, "dcp-fault: rank %d ok (%zu micro-steps, plan hash %016llx)\n", world.rank(), steps.size(),
               static_cast<unsigned long long>(p.hash()));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || argc > 3) usage();
  const std::string_view scenario = argv[1];
  const std::chrono::milliseconds timeout{argc == 3 ? std::atol(argv[2]) : 2000};
  if (timeout.count() <= 0) usage();
  dcp::mpi_environment env(&argc, &argv);
  auto world = dcp::mpi_comm::world(timeout);
  int rc = 1;
  try {
    if (world.size() < 3) {
      std::fprintf(stderr, "dcp-fault: needs at least 3 ranks (mpirun -np 4), got %d\n", world.size());
      return 64;
    }
    if (scenario == "exit-mid-all-to-all") rc = fault_mid_all_to_all(world, timeout, false);
    else if (scenario == "stopped-mid-all-to-all") rc = fault_mid_all_to_all(world, timeout, true);
    else if (scenario == "never-joins-group") rc = never_joins_group(world, timeout);
    else if (scenario == "plan-mismatch") rc = plan_agreement(world, timeout, true);
    else if (scenario == "none") rc = plan_agreement(world, timeout, false);
    else usage();
  } catch (const std::exception& e) {
    // Anything else is not the clear dcp::error the scenario expects: fail loudly.
    std::fprintf(stderr, "dcp-fault: rank %d: unexpected failure: %s\n", world.rank(), e.what());
    std::fflush(stderr);
    world.abort_job(1);
  }
  std::fflush(stderr);
  return rc;
}
