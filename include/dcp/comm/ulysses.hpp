#pragma once
/// \file
/// Ulysses re-layouts of 1D sequence parallelism (DeepSpeed-Ulysses; DESIGN section 4 counts
/// c = 4 of them per block): a sequence of `tokens` tokens, each `heads` x `head_dim` elements,
/// held by an sp group either
///   - token-sharded: rank r holds tokens `shard_of(tokens, sp, r)`, all heads: [t_r][heads][head_dim];
///   - head-sharded:  rank r holds heads [r * heads / sp, (r + 1) * heads / sp) of every token:
///                    [tokens][heads / sp][head_dim] (what attention needs: whole sequences).
/// `ulysses_to_head_shards` goes token -> head (before attention), `ulysses_to_token_shards` back
/// (after it). Token shards may be uneven (tokens % sp != 0, or empty when tokens < sp); heads must
/// divide by sp. Both are one all-to-all (variable counts when the token shards are uneven), exact,
/// and inverse to each other. Host memory only (`host_communicator`); device versions live in
/// `<dcp/cuda.cuh>`.

#include <cstddef>
#include <cstdint>
#include <ostream>
#include <sstream>
#include <span>
#include <string>
#include <vector>

#include <dcp/comm/comm_concepts.hpp>
#include <dcp/comm/detail/relayout.hpp>
#include <dcp/comm/shard.hpp>
#include <dcp/error.hpp>

namespace dcp {

/// The tensor re-laid by Ulysses: one (packed) sequence.
struct ulysses_shape {
  std::int64_t tokens = 0;
  std::int64_t heads = 1;
  std::int64_t head_dim = 1;

  friend constexpr bool operator==(const ulysses_shape&, const ulysses_shape&) = default;
  friend std::ostream& operator<<(std::ostream& os, const ulysses_shape& s) {
    return os << "ulysses_shape{tokens=" << s.tokens << ", heads=" << s.heads << ", head_dim=" << s.head_dim << "}";
  }
};

/// Throws `dcp::error` unless the shape is non-negative, heads and head_dim positive, and sp divides heads.
inline void validate(const ulysses_shape& s, int sp) {
  check(s.tokens >= 0 && s.heads > 0 && s.head_dim > 0 && sp > 0, errc::invalid_argument, [&] {
    std::ostringstream os;
    os << s << " with sp = " << sp << ": tokens must be >= 0, heads, head_dim and sp positive";
    return os.str();
  });
  check(s.heads % sp == 0, errc::invalid_argument, [&] {
    return "ulysses: heads = " + std::to_string(s.heads) + " is not divisible by sp = " + std::to_string(sp) +
           "; use an sp that divides the head count";
  });
}

/// Elements rank `rank` holds token-sharded: t_r * heads * head_dim.
inline std::int64_t ulysses_token_shard_size(const ulysses_shape& s, int sp, int rank) {
  validate(s, sp);
  return shard_of(s.tokens, sp, rank).count * s.heads * s.head_dim;
}
/// Elements every rank holds head-sharded: tokens * heads / sp * head_dim.
inline std::int64_t ulysses_head_shard_size(const ulysses_shape& s, int sp) {
  validate(s, sp);
  return s.tokens * (s.heads / sp) * s.head_dim;
}

/// Token shards -> head shards. `in` is [t_r][heads][head_dim], `out` is [tokens][heads/sp][head_dim].
template <host_communicator C, transferable T>
void ulysses_to_head_shards(C& comm, const ulysses_shape& s, std::span<const T> in, std::span<T> out) {
  const int sp = comm.size(), r = comm.rank();
  validate(s, sp);
  const shard mine = shard_of(s.tokens, sp, r);
  detail::check_span_size("ulysses_to_head_shards", "in", in.size(), mine.count * s.heads * s.head_dim);
  detail::check_span_size("ulysses_to_head_shards", "out", out.size(), ulysses_head_shard_size(s, sp));
  const std::int64_t block = (s.heads / sp) * s.head_dim;  // one token's slice of one rank's heads
  // Chunk j of the send buffer is [t_r][heads/sp][head_dim] of rank j's heads.
  std::vector<T> packed(in.size());
  for (int j = 0; j < sp; ++j)
    detail::copy_rows(in, j * block, s.heads * s.head_dim, std::span<T>(packed), j * mine.count * block, block,
                      mine.count, block);
  std::vector<std::size_t> sc(static_cast<size_t>(sp), static_cast<size_t>(mine.count * block)), rc(static_cast<size_t>(sp));
  for (int i = 0; i < sp; ++i) rc[size_t(i)] = size_t(shard_of(s.tokens, sp, i).count * block);
  // Source i sends tokens shard_of(i) in order, so the receive buffer is the head-sharded layout.
  detail::exchange(comm, std::span<const T>(packed), sc, out, rc, s.tokens % sp == 0);
}

/// Head shards -> token shards, the inverse of `ulysses_to_head_shards`.
template <host_communicator C, transferable T>
void ulysses_to_token_shards(C& comm, const ulysses_shape& s, std::span<const T> in, std::span<T> out) {
  const int sp = comm.size(), r = comm.rank();
  validate(s, sp);
  const shard mine = shard_of(s.tokens, sp, r);
  detail::check_span_size("ulysses_to_token_shards", "in", in.size(), ulysses_head_shard_size(s, sp));
  detail::check_span_size("ulysses_to_token_shards", "out", out.size(), mine.count * s.heads * s.head_dim);
  const std::int64_t block = (s.heads / sp) * s.head_dim;
  // Tokens of rank j are contiguous in the head-sharded layout: send `in` as it is.
  std::vector<std::size_t> sc(static_cast<size_t>(sp)), rc(static_cast<size_t>(sp), static_cast<size_t>(mine.count * block));
  for (int j = 0; j < sp; ++j) sc[size_t(j)] = size_t(shard_of(s.tokens, sp, j).count * block);
  std::vector<T> packed(out.size());  // [sp][t_r][heads/sp][head_dim]
  detail::exchange(comm, in, sc, std::span<T>(packed), rc, s.tokens % sp == 0);
  for (int i = 0; i < sp; ++i)
    detail::copy_rows(std::span<const T>(packed), i * mine.count * block, block, out, i * block,
                      s.heads * s.head_dim, mine.count, block);
}

}  // namespace dcp
