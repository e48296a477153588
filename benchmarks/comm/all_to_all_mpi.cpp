// all_to_all bandwidth of mpi_comm under mpirun (every rank runs the same fixed iteration counts;
// rank 0 reports). Arguments: bytes in each rank's send buffer (1 KiB .. 64 MiB), checked (1: the
// default cross-rank call checks, 0: off). Time per iteration is the slowest rank's, after a barrier.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <vector>

#include <dcp/comm/mpi.hpp>

namespace {

dcp::mpi_comm* world = nullptr;

void bm_mpi_all_to_all(benchmark::State& state) {
  const auto bytes = std::size_t(state.range(0));
  const int n = world->size();
  world->set_checked(state.range(1) != 0);
  const std::size_t elems = bytes / sizeof(float) / std::size_t(n) * std::size_t(n);
  std::vector<float> send(elems, float(world->rank())), recv(elems);
  for (auto _ : state) {
    world->barrier();
    const auto t0 = std::chrono::steady_clock::now();
    world->all_to_all(std::span<const float>(send), std::span<float>(recv));
    double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    MPI_Allreduce(MPI_IN_PLACE, &dt, 1, MPI_DOUBLE, MPI_MAX, world->native());
    state.SetIterationTime(dt);
  }
  world->set_checked(true);
  const auto moved = elems * sizeof(float) * std::size_t(n - 1) / std::size_t(n);
  state.SetBytesProcessed(state.iterations() * std::int64_t(moved));
  state.counters["ranks"] = n;
  state.counters["msg_bytes"] = double(elems * sizeof(float));
}

// Ranks other than 0 run silently.
class null_reporter : public benchmark::BenchmarkReporter {
 public:
  bool ReportContext(const Context&) override { return true; }
  void ReportRuns(const std::vector<Run>&) override {}
};

}  // namespace

int main(int argc, char** argv) {
  dcp::mpi_environment env(&argc, &argv);
  auto w = dcp::mpi_comm::world();
  world = &w;
  benchmark::Initialize(&argc, argv);
  // Fixed iteration counts keep the ranks in step (adaptive counts would differ per process).
  for (long bytes = 1 << 10; bytes <= (64L << 20); bytes *= 4)
    for (int checked : {0, 1})
      benchmark::RegisterBenchmark("bm_mpi_all_to_all", bm_mpi_all_to_all)
          ->Args({bytes, checked})
          ->ArgNames({"bytes", "checked"})
          ->Iterations(std::clamp<long>((256L << 20) / bytes, 5, 2000))
          ->UseManualTime()
          ->Unit(benchmark::kMicrosecond);
  if (w.rank() == 0) {
    benchmark::RunSpecifiedBenchmarks();
  } else {
    null_reporter quiet;
    benchmark::RunSpecifiedBenchmarks(&quiet);
  }
  benchmark::Shutdown();
  return 0;
}
