#pragma once
/// \file
/// A small transformer language model in plain C++, forward and backward by hand, for the
/// end-to-end proof of dcp on CPUs.
///
/// Token + position embedding, L pre-norm blocks (RMSNorm, multi-head self-attention, full or
/// causal, RMSNorm, GELU MLP), a final RMSNorm and an output head, cross-entropy against the
/// next token. A micro-step runs a *packed* set of sequences: their tokens are concatenated and
/// the packed axis is split over the sp ranks of the step's group (`dcp::shard_of`, uneven when
/// the token count does not divide). Every token-local operation runs on the rank's token shard;
/// attention is DeepSpeed-Ulysses: q, k, v go token shards -> head shards with one all-to-all
/// each, every rank attends its heads over whole sequences (a block-diagonal mask keeps packed
/// sequences apart), and the output goes back to token shards. Backward mirrors it (the adjoint
/// of a re-layout is its inverse). A Ulysses x Ring step (DESIGN section 4.3) gives every
/// Ulysses group one chunk of the packed axis (zig-zag half-chunks when causal): the all-to-alls
/// run over the Ulysses communicator within the chunk, and attention is `dcp::ring_attention_*`
/// over the ring communicator, with packed positions and sequence ids as the ring's segments.
///
/// Activation checkpointing is per block: a checkpointed block keeps only its input and
/// recomputes its forward (communication included) in backward. Activations are allocated through
/// `dcp::counting_allocator`, so a `dcp::memory_counter` sees the peak activation memory;
/// parameters, gradients and optimizer state are static memory and not counted.
///
/// Gradients are the rank's *partial* gradients (its tokens' contributions, weighted): the SUM
/// over all ranks of all micro-steps is the gradient of sum_i w_i * mean-token-loss_i.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <span>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <dcp/comm/comm_concepts.hpp>
#include <dcp/comm/ring.hpp>
#include <dcp/comm/shard.hpp>
#include <dcp/comm/ulysses.hpp>
#include <dcp/error.hpp>
#include <dcp/memory_counter.hpp>

namespace cpu_train {

/// Activation buffer: counted by the thread's `dcp::memory_counter`.
template <class T>
using act = std::vector<T, dcp::counting_allocator<T>>;

/// Shape of the model.
struct model_config {
  int vocab = 32;
  int hidden = 16;
  int heads = 8;
  int mlp = 32;
  int blocks = 2;
  int max_len = 2048;  ///< positions of the learned position embedding
  bool causal = false;
  std::uint64_t init_seed = 1;

  int head_dim() const noexcept { return hidden / heads; }
  void validate() const {
    dcp::check(vocab > 1 && hidden > 0 && heads > 0 && hidden % heads == 0 && mlp > 0 && blocks > 0 && max_len > 0,
               dcp::errc::invalid_argument, [&] {
                 return "model_config: vocab > 1, hidden, heads, mlp, blocks, max_len positive and heads dividing "
                        "hidden; got hidden = " + std::to_string(hidden) + ", heads = " + std::to_string(heads);
               });
  }
  friend bool operator==(const model_config&, const model_config&) = default;
};

/// Offsets of every tensor in the flat parameter vector.
struct param_layout {
  struct block_offsets {
    std::size_t g1, wq, wk, wv, wo, g2, w1, b1, w2, b2;
  };
  std::size_t tok_emb = 0, pos_emb = 0, gf = 0, wout = 0, size = 0;
  std::vector<block_offsets> blocks;

  explicit param_layout(const model_config& c) {
    const std::size_t h = size_t(c.hidden), f = size_t(c.mlp), V = size_t(c.vocab);
    std::size_t at = 0;
    auto take = [&](std::size_t n) {
      const std::size_t o = at;
      at += n;
      return o;
    };
    tok_emb = take(V * h);
    pos_emb = take(size_t(c.max_len) * h);
    for (int l = 0; l < c.blocks; ++l) {
      block_offsets b{};
      b.g1 = take(h);
      b.wq = take(h * h);
      b.wk = take(h * h);
      b.wv = take(h * h);
      b.wo = take(h * h);
      b.g2 = take(h);
      b.w1 = take(h * f);
      b.b1 = take(f);
      b.w2 = take(f * h);
      b.b2 = take(h);
      blocks.push_back(b);
    }
    gf = take(h);
    wout = take(h * V);
    size = at;
  }
  /// The parameter units that ZeRO-3 gathers and reduce-scatters one at a time (FSDP's wrapping):
  /// 0 the embeddings, 1 + l block l, blocks.size() + 1 the final norm and the head; each is a
  /// contiguous range [first, second) of the flat vector, and together they cover it.
  int units() const noexcept { return int(blocks.size()) + 2; }
  std::pair<std::size_t, std::size_t> unit_range(int u) const {
    const int L = int(blocks.size());
    if (u == 0) return {tok_emb, L > 0 ? blocks.front().g1 : gf};
    if (u <= L) return {blocks[size_t(u - 1)].g1, u < L ? blocks[size_t(u)].g1 : gf};
    return {gf, size};
  }
};

/// The `Units` of `forward_backward` when parameters are whole on every rank: nothing to gather.
template <class T>
struct whole_parameters {
  void gather(int) {}
  void reduce_scatter(int, std::span<T>) {}
  void release(int) {}
};

/// The rank's part of one packed micro-step: the packed axis holds the step's sequences back to
/// back; this rank holds tokens [shard.begin, shard.end()).
struct packed_shard {
  std::vector<std::int64_t> seq_begin;  ///< packed offsets of the sequences, plus the total at the end
  dcp::shard tokens_shard;              ///< this rank's range of the packed axis
  std::vector<int> tokens, targets;     ///< of the shard
  std::vector<int> positions;           ///< position of each shard token within its sequence
  std::vector<double> weights;          ///< loss weight of each shard token (sequence weight / its length)
  /// Ulysses x Ring steps only: the packed-axis indices of the Ulysses group's chunk, and the
  /// index of each one's sequence; `tokens_shard` then ranges over the chunk, not the packed axis.
  std::vector<std::int64_t> chunk, chunk_sequence;

  std::int64_t total() const noexcept { return seq_begin.empty() ? 0 : seq_begin.back(); }
  std::int64_t local() const noexcept { return tokens_shard.count; }
  /// Tokens the Ulysses all-to-alls lay out over heads: the packed axis, or the ring chunk.
  std::int64_t attended() const noexcept { return chunk.empty() ? total() : std::int64_t(chunk.size()); }
};

namespace detail {

// y[n][m] (+)= x[n][k] W[k][m]
template <class T>
void matmul(const T* x, const T* w, T* y, std::int64_t n, std::int64_t k, std::int64_t m, bool accumulate = false) {
  for (std::int64_t i = 0; i < n; ++i) {
    T* yi = y + i * m;
    if (!accumulate) std::fill(yi, yi + m, T(0));
    const T* xi = x + i * k;
    for (std::int64_t p = 0; p < k; ++p) {
      const T a = xi[p];
      const T* wp = w + p * m;
      for (std::int64_t j = 0; j < m; ++j) yi[j] += a * wp[j];
    }
  }
}
// dx[n][k] (+)= dy[n][m] W[k][m]^T
template <class T>
void matmul_bt(const T* dy, const T* w, T* dx, std::int64_t n, std::int64_t k, std::int64_t m, bool accumulate) {
  for (std::int64_t i = 0; i < n; ++i) {
    const T* dyi = dy + i * m;
    T* dxi = dx + i * k;
    for (std::int64_t p = 0; p < k; ++p) {
      const T* wp = w + p * m;
      T s = 0;
      for (std::int64_t j = 0; j < m; ++j) s += dyi[j] * wp[j];
      dxi[p] = accumulate ? dxi[p] + s : s;
    }
  }
}
// dW[k][m] += x[n][k]^T dy[n][m]
template <class T>
void matmul_at(const T* x, const T* dy, T* dw, std::int64_t n, std::int64_t k, std::int64_t m) {
  for (std::int64_t i = 0; i < n; ++i) {
    const T* xi = x + i * k;
    const T* dyi = dy + i * m;
    for (std::int64_t p = 0; p < k; ++p) {
      const T a = xi[p];
      T* dwp = dw + p * m;
      for (std::int64_t j = 0; j < m; ++j) dwp[j] += a * dyi[j];
    }
  }
}

template <class T>
constexpr T rms_eps = T(1e-6);

// y = x * r * g, r = 1 / sqrt(mean(x^2) + eps); stores r per row.
template <class T>
void rmsnorm(const T* x, const T* g, T* y, T* r, std::int64_t n, std::int64_t h) {
  for (std::int64_t i = 0; i < n; ++i) {
    const T* xi = x + i * h;
    T ss = 0;
    for (std::int64_t j = 0; j < h; ++j) ss += xi[j] * xi[j];
    const T ri = T(1) / std::sqrt(ss / T(h) + rms_eps<T>);
    r[i] = ri;
    for (std::int64_t j = 0; j < h; ++j) y[i * h + j] = xi[j] * ri * g[j];
  }
}
// dx += d(rmsnorm)/dx^T dy; dg += sum dy x r.
template <class T>
void rmsnorm_backward(const T* x, const T* g, const T* r, const T* dy, T* dx, T* dg, std::int64_t n, std::int64_t h) {
  for (std::int64_t i = 0; i < n; ++i) {
    const T* xi = x + i * h;
    const T* dyi = dy + i * h;
    const T ri = r[i];
    T s = 0;
    for (std::int64_t j = 0; j < h; ++j) {
      s += dyi[j] * g[j] * xi[j];
      dg[j] += dyi[j] * xi[j] * ri;
    }
    const T c = ri * ri * ri * s / T(h);
    for (std::int64_t j = 0; j < h; ++j) dx[i * h + j] += ri * g[j] * dyi[j] - xi[j] * c;
  }
}

template <class T>
constexpr T gelu_c = T(0.7978845608028654);  // sqrt(2 / pi)

template <class T>
T gelu(T u) {
  return T(0.5) * u * (T(1) + std::tanh(gelu_c<T> * (u + T(0.044715) * u * u * u)));
}
template <class T>
T gelu_grad(T u) {
  const T th = std::tanh(gelu_c<T> * (u + T(0.044715) * u * u * u));
  return T(0.5) * (T(1) + th) + T(0.5) * u * (T(1) - th * th) * gelu_c<T> * (T(1) + T(3 * 0.044715) * u * u);
}

}  // namespace detail

/// A model: configuration and flat parameters; `forward_backward` runs one micro-step.
template <class T>
class tiny_transformer {
 public:
  explicit tiny_transformer(model_config c) : config_(c), layout_((c.validate(), c)), params_(layout_.size) {
    init();
  }

  const model_config& config() const noexcept { return config_; }
  const param_layout& layout() const noexcept { return layout_; }
  std::vector<T>& params() noexcept { return params_; }
  const std::vector<T>& params() const noexcept { return params_; }

  /// Runs one micro-step on this rank's shard and ADDS its weighted gradient to `grads`
  /// (`params().size()` long). `comm` is the step's group (sp = its size; null for sp = 1), or
  /// with `ring` (a Ulysses x Ring step, `s.chunk` set) its Ulysses group; the first
  /// `checkpointed` blocks recompute their forward (ring passes included) in backward. Returns
  /// the rank's weighted loss (the sum over ranks is the step's loss).
  template <class Comm>
  T forward_backward(const packed_shard& s, Comm* comm, int checkpointed, std::span<T> grads,
                     Comm* ring = nullptr) const {
    whole_parameters<T> whole;
    return forward_backward(s, comm, checkpointed, grads, ring, whole);
  }
  /// The same with sharded parameters (ZeRO-3): `units.gather(u)` makes unit u's parameters whole
  /// in `params()` before each use, `units.reduce_scatter(u, grads)` takes unit u's gradient out
  /// of `grads` once the step has no more to add to it, and `units.release(u)` drops the gathered
  /// copy (`param_layout::units`). Forward gathers the embeddings, then each block (released after
  /// its forward), then the head; backward gathers each block again. Every call happens in this
  /// order on every rank, also for a padding pass (a shard without tokens), which computes
  /// nothing but joins every collective: the domain's members make the same calls.
  template <class Comm, class Units>
  T forward_backward(const packed_shard& s, Comm* comm, int checkpointed, std::span<T> grads, Comm* ring,
                     Units& units) const {
    const int sp = comm ? comm->size() : 1;
    dcp::check(config_.heads % sp == 0, dcp::errc::invalid_argument, [&] {
      return "tiny_transformer: sp = " + std::to_string(sp) + " does not divide heads = " +
             std::to_string(config_.heads);
    });
    dcp::check(!ring == s.chunk.empty(), dcp::errc::invalid_argument, [] {
      return std::string(
          "tiny_transformer: a ring communicator needs a shard with its ring chunk (make_shard with "
          "the step's ring) and the reverse");
    });
    dcp::check(grads.size() == params_.size(), dcp::errc::invalid_argument,
               [] { return std::string("tiny_transformer: gradient buffer size differs from the parameters"); });
    checkpointed = std::clamp(checkpointed, 0, config_.blocks);
    const std::int64_t n = s.local(), h = config_.hidden;
    const int L = config_.blocks, head_unit = L + 1;
    const bool padding = s.seq_begin.size() <= 1;  // a padding pass: no sequence, collectives only
    // Embedding.
    units.gather(0);
    act<T> x(size_t(n * h));
    for (std::int64_t i = 0; i < n; ++i)
      for (std::int64_t j = 0; j < h; ++j)
        x[size_t(i * h + j)] = params_[layout_.tok_emb + size_t(s.tokens[size_t(i)] * h + j)] +
                               params_[layout_.pos_emb + size_t(s.positions[size_t(i)] * h + j)];
    // Blocks: keep everything of a normal block, only the input of a checkpointed one.
    std::vector<block_state> states(static_cast<std::size_t>(L));
    for (int l = 0; l < L; ++l) {
      units.gather(1 + l);
      auto& st = states[size_t(l)];
      st.x_in = std::move(x);
      if (!padding) x = block_forward(l, s, comm, ring, st);
      if (l < checkpointed) st.release_all_but_input();
      units.release(1 + l);
    }
    // Head: loss and its gradient at once (logits are never stored).
    units.gather(head_unit);
    act<T> dx(size_t(n * h), T(0));
    const T loss = padding ? T(0) : head(s, x, dx, grads);
    x = act<T>();
    units.reduce_scatter(head_unit, grads);
    units.release(head_unit);
    // Blocks backward.
    for (int l = L - 1; l >= 0; --l) {
      units.gather(1 + l);
      auto& st = states[size_t(l)];
      if (!padding) {
        if (l < checkpointed) {
          act<T> out = block_forward(l, s, comm, ring, st);  // recompute (communication included)
          out = act<T>();
        }
        dx = block_backward(l, s, comm, ring, st, dx, grads);
      }
      st = block_state();
      units.reduce_scatter(1 + l, grads);
      units.release(1 + l);
    }
    // Embedding backward.
    for (std::int64_t i = 0; i < n; ++i)
      for (std::int64_t j = 0; j < h; ++j) {
        grads[layout_.tok_emb + size_t(s.tokens[size_t(i)] * h + j)] += dx[size_t(i * h + j)];
        grads[layout_.pos_emb + size_t(s.positions[size_t(i)] * h + j)] += dx[size_t(i * h + j)];
      }
    units.reduce_scatter(0, grads);
    units.release(0);
    return loss;
  }

 private:
  struct block_state {
    act<T> x_in, r1, a, qh, kh, vh, oh, lse, o, x1, r2, b, u, gu;
    // Each buffer is swapped with an empty one: a chained `r1 = a = ... = act<T>()` copy-assigns
    // an empty vector, which keeps the capacity and so frees nothing.
    void release_all_but_input() {
      for (act<T>* v : {&r1, &a, &qh, &kh, &vh, &oh, &lse, &o, &x1, &r2, &b, &u, &gu}) act<T>().swap(*v);
    }
  };

  void init() {
    // A portable splitmix64 stream: the same parameters on every platform and rank.
    std::uint64_t state = config_.init_seed * 0x9e3779b97f4a7c15ull + 12345;
    auto uniform = [&state]() {
      std::uint64_t z = (state += 0x9e3779b97f4a7c15ull);
      z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
      z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
      z ^= z >> 31;
      return double(z >> 11) * 0x1.0p-53 * 2.0 - 1.0;  // [-1, 1)
    };
    const double h = config_.hidden, f = config_.mlp;
    auto fill = [&](std::size_t off, std::size_t count, double scale) {
      for (std::size_t i = 0; i < count; ++i) params_[off + i] = T(uniform() * scale);
    };
    auto ones = [&](std::size_t off, std::size_t count) { std::fill_n(params_.begin() + std::ptrdiff_t(off), count, T(1)); };
    const std::size_t H = size_t(config_.hidden), F = size_t(config_.mlp), V = size_t(config_.vocab);
    fill(layout_.tok_emb, V * H, 1.0);
    fill(layout_.pos_emb, size_t(config_.max_len) * H, 0.3);
    for (const auto& b : layout_.blocks) {
      ones(b.g1, H);
      fill(b.wq, H * H, std::sqrt(3.0 / h));
      fill(b.wk, H * H, std::sqrt(3.0 / h));
      fill(b.wv, H * H, std::sqrt(3.0 / h));
      fill(b.wo, H * H, std::sqrt(3.0 / h) * 0.5);
      ones(b.g2, H);
      fill(b.w1, H * F, std::sqrt(3.0 / h));
      fill(b.b1, F, 0.1);
      fill(b.w2, F * H, std::sqrt(3.0 / f) * 0.5);
      fill(b.b2, H, 0.1);
    }
    ones(layout_.gf, H);
    fill(layout_.wout, H * V, std::sqrt(3.0 / h));
  }

  // Token shards [n][heads][d] -> head shards [N][heads/sp][d] (a copy when sp == 1).
  template <class Comm>
  void to_heads(Comm* comm, std::int64_t total, const act<T>& in, act<T>& out) const {
    out.assign(size_t(total * config_.hidden / (comm ? comm->size() : 1)), T(0));
    if (!comm || comm->size() == 1) {
      std::copy(in.begin(), in.end(), out.begin());
      return;
    }
    const dcp::ulysses_shape shape{total, config_.heads, config_.head_dim()};
    dcp::ulysses_to_head_shards(*comm, shape, std::span<const T>(in.data(), in.size()), std::span<T>(out.data(), out.size()));
  }
  template <class Comm>
  void to_tokens(Comm* comm, std::int64_t total, std::int64_t local, const act<T>& in, act<T>& out) const {
    out.assign(size_t(local * config_.hidden), T(0));
    if (!comm || comm->size() == 1) {
      std::copy(in.begin(), in.end(), out.begin());
      return;
    }
    const dcp::ulysses_shape shape{total, config_.heads, config_.head_dim()};
    dcp::ulysses_to_token_shards(*comm, shape, std::span<const T>(in.data(), in.size()), std::span<T>(out.data(), out.size()));
  }

  // Spans over activation buffers, for the ring primitives.
  static std::span<const T> in_span(const act<T>& a) noexcept { return {a.data(), a.size()}; }
  static std::span<T> out_span(act<T>& a) noexcept { return {a.data(), a.size()}; }
  // The ring's attention: this rank's heads of its Ulysses group of `u`.
  dcp::ring_attention_shape ring_shape(int u) const noexcept {
    return {config_.heads / u, config_.head_dim(), config_.causal};
  }

  // Keys of query i in its sequence [begin, end): [begin, end) or [begin, i] (causal).
  std::int64_t key_end(std::int64_t i, std::int64_t end) const noexcept { return config_.causal ? i + 1 : end; }

  // Attention on head shards: per local head, per packed sequence. Stores log-sum-exp per row.
  void attention_forward(const packed_shard& s, int local_heads, const act<T>& q, const act<T>& k, const act<T>& v,
                         act<T>& o, act<T>& lse) const {
    const std::int64_t N = s.total(), d = config_.head_dim(), stride = local_heads * d;
    const T scale = T(1) / std::sqrt(T(d));
    o.assign(size_t(N * stride), T(0));
    lse.assign(size_t(N * local_heads), T(0));
    std::vector<T> p;
    for (std::size_t q_seq = 0; q_seq + 1 < s.seq_begin.size(); ++q_seq) {
      const std::int64_t b = s.seq_begin[q_seq], e = s.seq_begin[q_seq + 1];
      p.resize(size_t(e - b));
      for (int hh = 0; hh < local_heads; ++hh)
        for (std::int64_t i = b; i < e; ++i) {
          const T* qi = q.data() + i * stride + hh * d;
          const std::int64_t ke = key_end(i, e);
          T m = -std::numeric_limits<T>::infinity();
          for (std::int64_t j = b; j < ke; ++j) {
            const T* kj = k.data() + j * stride + hh * d;
            T sdot = 0;
            for (std::int64_t c = 0; c < d; ++c) sdot += qi[c] * kj[c];
            p[size_t(j - b)] = sdot * scale;
            m = std::max(m, p[size_t(j - b)]);
          }
          T sum = 0;
          for (std::int64_t j = b; j < ke; ++j) sum += (p[size_t(j - b)] = std::exp(p[size_t(j - b)] - m));
          T* oi = o.data() + i * stride + hh * d;
          for (std::int64_t j = b; j < ke; ++j) {
            const T w = p[size_t(j - b)] / sum;
            const T* vj = v.data() + j * stride + hh * d;
            for (std::int64_t c = 0; c < d; ++c) oi[c] += w * vj[c];
          }
          lse[size_t(i * local_heads + hh)] = m + std::log(sum);
        }
    }
  }

  // Backward of attention, recomputing probabilities row by row from the log-sum-exp.
  void attention_backward(const packed_shard& s, int local_heads, const act<T>& q, const act<T>& k, const act<T>& v,
                          const act<T>& o, const act<T>& lse, const act<T>& dout, act<T>& dq, act<T>& dk,
                          act<T>& dv) const {
    const std::int64_t N = s.total(), d = config_.head_dim(), stride = local_heads * d;
    const T scale = T(1) / std::sqrt(T(d));
    dq.assign(size_t(N * stride), T(0));
    dk.assign(size_t(N * stride), T(0));
    dv.assign(size_t(N * stride), T(0));
    for (std::size_t q_seq = 0; q_seq + 1 < s.seq_begin.size(); ++q_seq) {
      const std::int64_t b = s.seq_begin[q_seq], e = s.seq_begin[q_seq + 1];
      for (int hh = 0; hh < local_heads; ++hh)
        for (std::int64_t i = b; i < e; ++i) {
          const std::int64_t off_i = i * stride + hh * d;
          const T* qi = q.data() + off_i;
          const T* doi = dout.data() + off_i;
          T D = 0;  // dO_i . O_i
          for (std::int64_t c = 0; c < d; ++c) D += doi[c] * o[size_t(off_i + c)];
          const T l = lse[size_t(i * local_heads + hh)];
          T* dqi = dq.data() + off_i;
          for (std::int64_t j = b, ke = key_end(i, e); j < ke; ++j) {
            const std::int64_t off_j = j * stride + hh * d;
            const T* kj = k.data() + off_j;
            const T* vj = v.data() + off_j;
            T sdot = 0, dp = 0;
            for (std::int64_t c = 0; c < d; ++c) {
              sdot += qi[c] * kj[c];
              dp += doi[c] * vj[c];
            }
            const T pij = std::exp(sdot * scale - l);
            const T ds = pij * (dp - D) * scale;
            T* dkj = dk.data() + off_j;
            T* dvj = dv.data() + off_j;
            for (std::int64_t c = 0; c < d; ++c) {
              dqi[c] += ds * kj[c];
              dkj[c] += ds * qi[c];
              dvj[c] += pij * doi[c];
            }
          }
        }
    }
  }

  template <class Comm>
  act<T> block_forward(int l, const packed_shard& s, Comm* comm, Comm* ring, block_state& st) const {
    const auto& B = layout_.blocks[size_t(l)];
    const T* P = params_.data();
    const std::int64_t n = s.local(), h = config_.hidden, f = config_.mlp;
    const int sp = comm ? comm->size() : 1;
    st.r1.assign(size_t(n), T(0));
    st.a.assign(size_t(n * h), T(0));
    detail::rmsnorm(st.x_in.data(), P + B.g1, st.a.data(), st.r1.data(), n, h);
    {
      act<T> q(size_t(n * h)), k(size_t(n * h)), v(size_t(n * h));
      detail::matmul(st.a.data(), P + B.wq, q.data(), n, h, h);
      detail::matmul(st.a.data(), P + B.wk, k.data(), n, h, h);
      detail::matmul(st.a.data(), P + B.wv, v.data(), n, h, h);
      to_heads(comm, s.attended(), q, st.qh);
      to_heads(comm, s.attended(), k, st.kh);
      to_heads(comm, s.attended(), v, st.vh);
    }
    if (ring) {
      st.oh.assign(st.qh.size(), T(0));
      st.lse.assign(size_t(s.attended() * (config_.heads / sp)), T(0));
      dcp::ring_attention_forward(*ring, ring_shape(sp), s.chunk, in_span(st.qh), in_span(st.kh), in_span(st.vh),
                                  out_span(st.oh), out_span(st.lse), s.chunk_sequence);
    } else {
      attention_forward(s, config_.heads / sp, st.qh, st.kh, st.vh, st.oh, st.lse);
    }
    to_tokens(comm, s.attended(), n, st.oh, st.o);
    st.x1 = st.x_in;
    detail::matmul(st.o.data(), P + B.wo, st.x1.data(), n, h, h, true);
    st.r2.assign(size_t(n), T(0));
    st.b.assign(size_t(n * h), T(0));
    detail::rmsnorm(st.x1.data(), P + B.g2, st.b.data(), st.r2.data(), n, h);
    st.u.assign(size_t(n * f), T(0));
    detail::matmul(st.b.data(), P + B.w1, st.u.data(), n, h, f);
    st.gu.assign(size_t(n * f), T(0));
    for (std::int64_t i = 0; i < n; ++i)
      for (std::int64_t j = 0; j < f; ++j) {
        T& u = st.u[size_t(i * f + j)];
        u += P[B.b1 + size_t(j)];
        st.gu[size_t(i * f + j)] = detail::gelu(u);
      }
    act<T> out = st.x1;
    detail::matmul(st.gu.data(), P + B.w2, out.data(), n, f, h, true);
    for (std::int64_t i = 0; i < n; ++i)
      for (std::int64_t j = 0; j < h; ++j) out[size_t(i * h + j)] += P[B.b2 + size_t(j)];
    return out;
  }

  template <class Comm>
  act<T> block_backward(int l, const packed_shard& s, Comm* comm, Comm* ring, const block_state& st, const act<T>& dout,
                        std::span<T> grads) const {
    const auto& B = layout_.blocks[size_t(l)];
    const T* P = params_.data();
    T* G = grads.data();
    const std::int64_t n = s.local(), h = config_.hidden, f = config_.mlp;
    const int sp = comm ? comm->size() : 1;
    // MLP.
    act<T> dx1 = dout;
    for (std::int64_t i = 0; i < n; ++i)
      for (std::int64_t j = 0; j < h; ++j) G[B.b2 + size_t(j)] += dout[size_t(i * h + j)];
    detail::matmul_at(st.gu.data(), dout.data(), G + B.w2, n, f, h);
    act<T> du(size_t(n * f));
    detail::matmul_bt(dout.data(), P + B.w2, du.data(), n, f, h, false);
    for (std::int64_t i = 0; i < n; ++i)
      for (std::int64_t j = 0; j < f; ++j) {
        T& g = du[size_t(i * f + j)];
        g *= detail::gelu_grad(st.u[size_t(i * f + j)]);
        G[B.b1 + size_t(j)] += g;
      }
    detail::matmul_at(st.b.data(), du.data(), G + B.w1, n, h, f);
    act<T> db(size_t(n * h));
    detail::matmul_bt(du.data(), P + B.w1, db.data(), n, h, f, false);
    du = act<T>();
    detail::rmsnorm_backward(st.x1.data(), P + B.g2, st.r2.data(), db.data(), dx1.data(), G + B.g2, n, h);
    db = act<T>();
    // Attention.
    detail::matmul_at(st.o.data(), dx1.data(), G + B.wo, n, h, h);
    act<T> dx_in = dx1;
    {
      act<T> dtok(size_t(n * h)), doh, dqh, dkh, dvh;
      detail::matmul_bt(dx1.data(), P + B.wo, dtok.data(), n, h, h, false);
      dx1 = act<T>();
      to_heads(comm, s.attended(), dtok, doh);
      if (ring) {
        for (act<T>* g : {&dqh, &dkh, &dvh}) g->assign(st.qh.size(), T(0));
        dcp::ring_attention_backward(*ring, ring_shape(sp), s.chunk, in_span(st.qh), in_span(st.kh), in_span(st.vh),
                                     in_span(st.oh), in_span(st.lse), in_span(doh), out_span(dqh), out_span(dkh),
                                     out_span(dvh), s.chunk_sequence);
      } else {
        attention_backward(s, config_.heads / sp, st.qh, st.kh, st.vh, st.oh, st.lse, doh, dqh, dkh, dvh);
      }
      doh = act<T>();
      act<T> da(size_t(n * h), T(0));
      const std::size_t wts[3] = {B.wq, B.wk, B.wv};
      act<T>* heads[3] = {&dqh, &dkh, &dvh};
      for (int m = 0; m < 3; ++m) {
        to_tokens(comm, s.attended(), n, *heads[m], dtok);
        *heads[m] = act<T>();
        detail::matmul_at(st.a.data(), dtok.data(), G + wts[m], n, h, h);
        detail::matmul_bt(dtok.data(), P + wts[m], da.data(), n, h, h, true);
      }
      detail::rmsnorm_backward(st.x_in.data(), P + B.g1, st.r1.data(), da.data(), dx_in.data(), G + B.g1, n, h);
    }
    return dx_in;
  }

  // Final norm, output head and weighted cross-entropy; writes d(loss)/dx into dx.
  T head(const packed_shard& s, const act<T>& x, act<T>& dx, std::span<T> grads) const {
    const std::int64_t n = s.local(), h = config_.hidden, V = config_.vocab;
    const T* P = params_.data();
    T* G = grads.data();
    act<T> r(static_cast<size_t>(n)), z(size_t(n * h)), dz(size_t(n * h), T(0));
    detail::rmsnorm(x.data(), P + layout_.gf, z.data(), r.data(), n, h);
    std::vector<T> logits(static_cast<size_t>(V));
    T loss = 0;
    for (std::int64_t i = 0; i < n; ++i) {
      detail::matmul(z.data() + i * h, P + layout_.wout, logits.data(), 1, h, V);
      const T m = *std::max_element(logits.begin(), logits.end());
      const int t = s.targets[size_t(i)];
      const T target_logit = logits[size_t(t)] - m;
      T sum = 0;
      for (auto& v : logits) sum += (v = std::exp(v - m));
      const T w = T(s.weights[size_t(i)]);
      loss += w * (std::log(sum) - target_logit);
      for (std::int64_t j = 0; j < V; ++j) logits[size_t(j)] = w * (logits[size_t(j)] / sum - (j == t ? T(1) : T(0)));
      detail::matmul_at(z.data() + i * h, logits.data(), G + layout_.wout, 1, h, V);
      detail::matmul_bt(logits.data(), P + layout_.wout, dz.data() + i * h, 1, h, V, false);
    }
    detail::rmsnorm_backward(x.data(), P + layout_.gf, r.data(), dz.data(), dx.data(), G + layout_.gf, n, h);
    return loss;
  }

  model_config config_;
  param_layout layout_;
  std::vector<T> params_;
};

}  // namespace cpu_train
