// Ring attention's circulating K/V blocks are counted by the thread's dcp::memory_counter: the
// counted peak of ring_attention_forward / _backward equals ring_forward_peak_bytes /
// ring_backward_peak_bytes from the shapes exactly (unequal rows, segments or none), everything
// is freed, and a CPU-model Ulysses x Ring step's counted peak exceeds the same step run
// Ulysses-only by exactly the ring buffers it holds at the step's peak.
#include <gtest/gtest.h>

#include <cstdint>
#include <mutex>
#include <random>
#include <span>
#include <sstream>
#include <string>
#include <vector>

#include <dcp/comm/local.hpp>
#include <dcp/comm/ring.hpp>
#include <dcp/group/buddy_groups.hpp>
#include <dcp/group_cache.hpp>
#include <dcp/memory_counter.hpp>

#include "../../examples/cpu_train/trainer.hpp"

namespace {

TEST(ring_memory, counted_peak_is_exactly_the_blocks_in_flight) {
  constexpr std::uint64_t seed = 11;
  std::mt19937_64 rng(seed);
  for (int r : {1, 2, 3, 4}) {
    for (const bool segments : {false, true}) {
      const dcp::ring_attention_shape s{2, 3, segments};  // causal with segments, full without
      std::vector<std::int64_t> rows(static_cast<std::size_t>(r));
      for (auto& n : rows) n = std::uniform_int_distribution<std::int64_t>(1, 9)(rng);
      std::mutex m;
      std::vector<std::string> bad;
      dcp::local_world::run(r, [&](dcp::local_comm& ring) {
        const int me = ring.rank();
        std::int64_t first = 0;
        for (int i = 0; i < me; ++i) first += rows[static_cast<std::size_t>(i)];
        const std::int64_t n = rows[static_cast<std::size_t>(me)];
        std::vector<std::int64_t> pos, seg;
        for (std::int64_t t = 0; t < n; ++t) pos.push_back(first + t), seg.push_back((first + t) / 4);
        const auto cells = static_cast<std::size_t>(n * s.heads * s.head_dim);
        std::vector<double> q(cells), k(cells), v(cells), out(cells), lse(static_cast<std::size_t>(n * s.heads));
        std::vector<double> dout(cells), dq(cells), dk(cells), dv(cells);
        for (std::size_t i = 0; i < cells; ++i)
          q[i] = 0.1 * double((i * 7 + first) % 5), k[i] = 0.2 * double((i + first) % 3), v[i] = double(i % 4), dout[i] = 1;
        const std::span<const std::int64_t> segs = segments ? std::span<const std::int64_t>(seg) : std::span<const std::int64_t>();
        dcp::memory_counter fwd, bwd;
        {
          dcp::memory_scope scope(fwd);
          dcp::ring_attention_forward(ring, s, std::span<const std::int64_t>(pos), std::span<const double>(q),
                                      std::span<const double>(k), std::span<const double>(v), std::span<double>(out),
                                      std::span<double>(lse), segs);
        }
        {
          dcp::memory_scope scope(bwd);
          dcp::ring_attention_backward(ring, s, std::span<const std::int64_t>(pos), std::span<const double>(q),
                                       std::span<const double>(k), std::span<const double>(v),
                                       std::span<const double>(out), std::span<const double>(lse),
                                       std::span<const double>(dout), std::span<double>(dq), std::span<double>(dk),
                                       std::span<double>(dv), segs);
        }
        const double want_f = dcp::ring_forward_peak_bytes(rows, me, s, sizeof(double), segments);
        const double want_b = dcp::ring_backward_peak_bytes(rows, me, s, sizeof(double), segments);
        std::ostringstream os;
        if (double(fwd.peak_bytes()) != want_f || double(bwd.peak_bytes()) != want_b || fwd.live_bytes() != 0 ||
            bwd.live_bytes() != 0)
          os << "r " << r << " rank " << me << " segments " << segments << " seed " << seed << ": forward peak "
             << fwd.peak_bytes() << " (want " << want_f << "), backward peak " << bwd.peak_bytes() << " (want "
             << want_b << "), live after " << fwd.live_bytes() << ", " << bwd.live_bytes();
        const std::lock_guard lock(m);
        if (!os.str().empty()) bad.push_back(os.str());
      });
      for (const auto& b : bad) ADD_FAILURE() << b;
    }
  }
}

// The CPU model's step on 4 ranks, run as u x r = 2 x 2 and as Ulysses over all 4 (4 heads), on
// the same packed sequences: this rank's counted peak of each.
struct step_peaks {
  std::int64_t ring = 0, ulysses = 0;
};

std::vector<step_peaks> model_step_peaks(bool causal, int checkpointed) {
  const cpu_train::model_config c{.vocab = 32, .hidden = 16, .heads = 4, .mlp = 32, .blocks = 2, .max_len = 256,
                                  .causal = causal};
  const cpu_train::tiny_transformer<double> model(c);
  const cpu_train::synthetic_data data{.vocab = 32, .min_len = 8, .max_len = 256, .seed = 3};
  const std::vector<cpu_train::segment> segs = {{5, 64, 1.0 / 96}, {9, 32, 1.0 / 96}};
  std::vector<step_peaks> out(4);
  dcp::local_world::run(4, [&](dcp::local_comm& world) {
    dcp::group_cache groups(world, dcp::buddy_groups{4, 4});
    groups.prepare_split(4, 2);
    const dcp::rank_block all{0, 4};
    const int me = world.rank();
    std::vector<double> grads(model.params().size());
    step_peaks p;
    {
      const auto shard = cpu_train::make_shard(data, segs, 4, me, 2, causal);
      dcp::memory_counter counter;
      dcp::memory_scope scope(counter);
      model.forward_backward(shard, &groups.ulysses_for(all, 2), checkpointed, std::span<double>(grads),
                             &groups.ring_for(all, 2));
      p.ring = counter.peak_bytes();
    }
    {
      const auto shard = cpu_train::make_shard(data, segs, 4, me, 1, causal);
      dcp::memory_counter counter;
      dcp::memory_scope scope(counter);
      model.forward_backward(shard, &groups.comm_for(all), checkpointed, std::span<double>(grads));
      p.ulysses = counter.peak_bytes();
    }
    out[static_cast<std::size_t>(me)] = p;
  });
  return out;
}

TEST(ring_memory, a_ring_step_peaks_higher_by_its_ring_buffers) {
  // The step peaks in a block's attention backward, where the Ulysses-only step holds exactly
  // what the ring step holds besides its ring buffers: the difference is the backward's ring
  // peak, from the shapes (rings of 2 ranks, each a 48-token chunk of 2 heads x 4 dims, with
  // segment ids).
  const cpu_train::synthetic_data data{.vocab = 32, .min_len = 8, .max_len = 256, .seed = 3};
  const std::vector<cpu_train::segment> segs = {{5, 64, 1.0 / 96}, {9, 32, 1.0 / 96}};
  for (const bool causal : {false, true})
    for (int k : {0, 2}) {
      const auto peaks = model_step_peaks(causal, k);
      for (int g = 0; g < 4; ++g) {
        std::vector<std::int64_t> rows;
        for (int j = 0; j < 2; ++j)
          rows.push_back(std::int64_t(cpu_train::make_shard(data, segs, 4, 2 * j, 2, causal).chunk.size()));
        const double want = dcp::ring_backward_peak_bytes(rows, g / 2, {2, 4, causal}, sizeof(double), true);
        const auto& p = peaks[static_cast<std::size_t>(g)];
        EXPECT_GT(p.ulysses, 0);
        EXPECT_EQ(double(p.ring - p.ulysses), want)
            << "causal " << causal << " k " << k << " rank " << g << ": ring step " << p.ring << " B, Ulysses-only "
            << p.ulysses << " B";
        EXPECT_GT(want, dcp::ring_forward_peak_bytes(rows, g / 2, {2, 4, causal}, sizeof(double), true));
      }
    }
}
}  // namespace
