#pragma once
// Conformance suite of the `communicator` concept: every check runs on all ranks of `c`
// (collectively), compares with a reference computed locally from the same seed, and records
// failures with GoogleTest. Used by the local tests (1..8 threads) and the MPI tests (mpirun -np 4).

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <random>
#include <span>
#include <vector>

#include <dcp/comm/comm_concepts.hpp>

namespace dcp_test {

// Value rank `r` puts at position `k` of a message to rank `to` in round `seed`.
inline std::int64_t value(int r, int to, std::size_t k, unsigned seed) {
  return std::int64_t(seed) * 1'000'003 + r * 10'007 + to * 101 + std::int64_t(k);
}

template <class C>
void check_all_to_all(C& c, unsigned seed) {
  const int n = c.size(), r = c.rank();
  for (std::size_t chunk : {std::size_t{0}, std::size_t{1}, std::size_t{7}, std::size_t{1000}}) {
    std::vector<std::int64_t> send(chunk * n), recv(chunk * n, -1);
    for (int j = 0; j < n; ++j)
      for (std::size_t k = 0; k < chunk; ++k) send[j * chunk + k] = value(r, j, k, seed);
    c.all_to_all(std::span<const std::int64_t>(send), std::span<std::int64_t>(recv));
    for (int i = 0; i < n; ++i)
      for (std::size_t k = 0; k < chunk; ++k)
        ASSERT_EQ(recv[i * chunk + k], value(i, r, k, seed)) << "chunk " << chunk << " from " << i << " at " << k;
  }
}

// counts[i][j]: elements rank i sends to rank j, identical on every rank (same seed).
inline std::vector<std::vector<std::size_t>> random_counts(int n, unsigned seed) {
  std::mt19937 g(seed);
  std::uniform_int_distribution<int> d(0, 9);
  std::vector<std::vector<std::size_t>> m(n, std::vector<std::size_t>(n));
  for (auto& row : m)
    for (auto& x : row) x = std::size_t(d(g) == 0 ? 0 : d(g) * 37);
  return m;
}

template <class C>
void check_all_to_all_v(C& c, unsigned seed) {
  const int n = c.size(), r = c.rank();
  const auto m = random_counts(n, seed);
  std::vector<std::size_t> sc(n), rc(n);
  for (int j = 0; j < n; ++j) sc[j] = m[r][j], rc[j] = m[j][r];
  std::vector<double> send, recv(std::accumulate(rc.begin(), rc.end(), std::size_t{0}), -1.0);
  for (int j = 0; j < n; ++j)
    for (std::size_t k = 0; k < sc[j]; ++k) send.push_back(double(value(r, j, k, seed)) + 0.5);
  c.all_to_all_v(std::span<const double>(send), std::span<const std::size_t>(sc), std::span<double>(recv),
                 std::span<const std::size_t>(rc));
  std::size_t at = 0;
  for (int i = 0; i < n; ++i)
    for (std::size_t k = 0; k < rc[i]; ++k, ++at)
      ASSERT_EQ(recv[at], double(value(i, r, k, seed)) + 0.5) << "from " << i << " at " << k;
}

template <class C>
void check_all_gather(C& c, unsigned seed) {
  const int n = c.size(), r = c.rank();
  for (std::size_t len : {std::size_t{0}, std::size_t{1}, std::size_t{33}}) {
    std::vector<std::int32_t> send(len), recv(len * n, -1);
    for (std::size_t k = 0; k < len; ++k) send[k] = std::int32_t(value(r, 0, k, seed));
    c.all_gather(std::span<const std::int32_t>(send), std::span<std::int32_t>(recv));
    for (int i = 0; i < n; ++i)
      for (std::size_t k = 0; k < len; ++k) ASSERT_EQ(recv[i * len + k], std::int32_t(value(i, 0, k, seed)));
  }
}

template <class C>
void check_all_reduce(C& c, unsigned seed) {
  const int n = c.size(), r = c.rank();
  const std::size_t len = 257;
  // Integers: exact sum and max, out of place and in place.
  std::vector<std::int64_t> in(len), out(len), want_sum(len, 0), want_max(len, INT64_MIN);
  for (std::size_t k = 0; k < len; ++k) {
    in[k] = value(r, 0, k, seed) * (k % 2 ? 1 : -1);
    for (int i = 0; i < n; ++i) {
      const auto v = value(i, 0, k, seed) * (k % 2 ? 1 : -1);
      want_sum[k] += v;
      want_max[k] = std::max(want_max[k], v);
    }
  }
  c.all_reduce(std::span<const std::int64_t>(in), std::span<std::int64_t>(out), dcp::reduce_op::sum);
  EXPECT_EQ(out, want_sum);
  c.all_reduce(std::span<const std::int64_t>(in), std::span<std::int64_t>(out), dcp::reduce_op::max);
  EXPECT_EQ(out, want_max);
  auto inplace = in;
  c.all_reduce(std::span<std::int64_t>(inplace), dcp::reduce_op::sum);
  EXPECT_EQ(inplace, want_sum);
  // Doubles whose sums are exact in binary floating point.
  std::vector<double> d(len), want(len, 0.0);
  for (std::size_t k = 0; k < len; ++k) {
    d[k] = double(r + 1) * 0.25 + double(k);
    for (int i = 0; i < n; ++i) want[k] += double(i + 1) * 0.25 + double(k);
  }
  c.all_reduce(std::span<double>(d), dcp::reduce_op::sum);
  EXPECT_EQ(d, want);
  float f = float(r), fmax = 0;
  c.all_reduce(std::span<const float>(&f, 1), std::span<float>(&fmax, 1), dcp::reduce_op::max);
  EXPECT_EQ(fmax, float(n - 1));
}

template <class C>
void check_broadcast(C& c, unsigned seed) {
  const int n = c.size(), r = c.rank();
  for (int root = 0; root < n; ++root) {
    std::vector<std::uint16_t> data(100);
    for (std::size_t k = 0; k < data.size(); ++k)
      data[k] = r == root ? std::uint16_t(value(root, 0, k, seed)) : std::uint16_t(0xFFFF);
    c.broadcast(std::span<std::uint16_t>(data), root);
    for (std::size_t k = 0; k < data.size(); ++k) ASSERT_EQ(data[k], std::uint16_t(value(root, 0, k, seed)));
  }
}

struct pair_payload {  // a trivially copyable struct moves as bytes
  std::int32_t a;
  double b;
};

template <class C>
void check_send_recv(C& c, unsigned seed) {
  const int n = c.size(), r = c.rank();
  if (n == 1) return;
  // Ring exchange in both directions, every rank sending before receiving.
  const int next = (r + 1) % n, prev = (r + n - 1) % n;
  std::vector<pair_payload> out(5), in(5);
  for (int k = 0; k < 5; ++k) out[k] = {int(value(r, next, k, seed)), k + 0.5};
  if (r % 2 == 0) {
    c.send(std::span<const pair_payload>(out), next, 3);
    c.recv(std::span<pair_payload>(in), prev, 3);
  } else {
    c.recv(std::span<pair_payload>(in), prev, 3);
    c.send(std::span<const pair_payload>(out), next, 3);
  }
  for (int k = 0; k < 5; ++k) {
    EXPECT_EQ(in[k].a, int(value(prev, r, k, seed)));
    EXPECT_EQ(in[k].b, k + 0.5);
  }
  // Tags keep messages apart: receive in the opposite order of sending.
  if (r == 0) {
    int a = 1, b = 2;
    c.send(std::span<const int>(&a, 1), 1, 10);
    c.send(std::span<const int>(&b, 1), 1, 11);
  } else if (r == 1) {
    int a = 0, b = 0;
    c.recv(std::span<int>(&b, 1), 0, 11);
    c.recv(std::span<int>(&a, 1), 0, 10);
    EXPECT_EQ(a, 1);
    EXPECT_EQ(b, 2);
  }
  c.barrier();
}

// Random colors (some ranks opting out) and keys; membership checked by gathering world ranks.
template <class C>
void check_split(C& c, unsigned seed) {
  const int n = c.size(), r = c.rank();
  std::mt19937 g(seed);
  std::vector<int> color(n), key(n);
  for (int i = 0; i < n; ++i) {
    color[i] = int(g() % (unsigned(n) + 1)) - 1;  // -1 = no_color
    key[i] = int(g() % 5);
  }
  C sub = c.split(color[r], key[r]);
  if (color[r] < 0) {
    EXPECT_FALSE(sub.valid());
    c.barrier();
    return;
  }
  std::vector<int> members;
  for (int i = 0; i < n; ++i)
    if (color[i] == color[r]) members.push_back(i);
  std::stable_sort(members.begin(), members.end(), [&](int a, int b) { return key[a] < key[b]; });
  ASSERT_TRUE(sub.valid());
  ASSERT_EQ(sub.size(), int(members.size()));
  EXPECT_EQ(members[sub.rank()], r);
  EXPECT_EQ(sub.timeout(), c.timeout());
  std::vector<int> got(members.size());
  sub.all_gather(std::span<const int>(&r, 1), std::span<int>(got));
  EXPECT_EQ(got, members);
  // The sub-communicator is fully functional.
  check_all_to_all_v(sub, seed + 1);
  c.barrier();
}

template <class C>
void run_conformance(C& c, unsigned seed) {
  check_all_to_all(c, seed);
  check_all_to_all_v(c, seed);
  check_all_gather(c, seed);
  check_all_reduce(c, seed);
  check_broadcast(c, seed);
  check_send_recv(c, seed);
  for (unsigned s = 0; s < 4; ++s) check_split(c, seed * 31 + s);
  c.barrier();
}

}  // namespace dcp_test
