// all_to_all bandwidth of local_comm: N ranks as threads, data copied through shared memory.
// Arguments: bytes in each rank's send buffer (1 KiB .. 64 MiB), ranks. bytes_per_second counts
// the bytes one rank sends to its peers (its own chunk stays local). Ranks beyond the core count
// share cores, so on small machines the large sizes measure memory bandwidth under contention.
#include <benchmark/benchmark.h>

#include <cstddef>
#include <thread>
#include <vector>

#include <dcp/comm/local.hpp>

namespace {

void bm_local_all_to_all(benchmark::State& state) {
  const auto bytes = std::size_t(state.range(0));
  const int n = int(state.range(1));
  const std::size_t elems = bytes / sizeof(float) / std::size_t(n) * std::size_t(n);
  auto hub = dcp::local_hub::make(n);
  // Ranks 1..n-1 run exactly as many rounds as the benchmark loop of rank 0 (max_iterations).
  std::vector<std::jthread> peers;
  for (int r = 1; r < n; ++r)
    peers.emplace_back([&, r] {
      dcp::local_comm c(hub, r);
      std::vector<float> send(elems, float(r)), recv(elems);
      c.all_to_all(std::span<const float>(send), std::span<float>(recv));  // warm-up, pages touched
      for (benchmark::IterationCount i = 0; i < state.max_iterations; ++i)
        c.all_to_all(std::span<const float>(send), std::span<float>(recv));
    });
  dcp::local_comm c(hub, 0);
  std::vector<float> send(elems, 0.f), recv(elems);
  c.all_to_all(std::span<const float>(send), std::span<float>(recv));  // every rank ready
  for (auto _ : state) {
    c.all_to_all(std::span<const float>(send), std::span<float>(recv));
    benchmark::DoNotOptimize(recv.data());
  }
  peers.clear();
  const auto moved = elems * sizeof(float) * std::size_t(n - 1) / std::size_t(n);
  state.SetBytesProcessed(state.iterations() * std::int64_t(moved));
  state.counters["ranks"] = n;
  state.counters["msg_bytes"] = double(elems * sizeof(float));
}

BENCHMARK(bm_local_all_to_all)
    ->ArgsProduct({benchmark::CreateRange(1 << 10, 64 << 20, 4), {2, 4}})
    ->ArgNames({"bytes", "ranks"})
    ->UseRealTime()
    ->Unit(benchmark::kMicrosecond);

}  // namespace
