#pragma once
/// \file
/// A GPT-style causal transformer from `torch::nn` modules, able to run one packed micro-step of a
/// `dcp::scheduler` plan on this rank's token shard, and the two autograd functions it needs:
///
/// - `ulysses_relayout`: DeepSpeed-Ulysses inside autograd. Forward moves q/k/v from token shards
///   to head shards (or the attention output back) with `dcp::ulysses_to_head_shards` /
///   `dcp::ulysses_to_token_shards` over the step's group communicator; backward runs the
///   inverse re-layout on the gradient (a permutation's adjoint is its inverse).
/// - `checkpoint`: activation checkpointing as LibTorch lacks it. Forward runs a block without
///   recording a graph and keeps its input; backward re-runs the block (its Ulysses exchanges
///   included) with autograd on and back-propagates through the recomputed graph.
///
/// Everything else is ordinary LibTorch: autograd derives every other gradient.

#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include <torch/torch.h>

#include <dcp/comm/shard.hpp>
#include <dcp/comm/ulysses.hpp>
#include <dcp/error.hpp>

namespace libtorch_train {

struct gpt_config {
  int vocab = 29;
  int hidden = 32;
  int heads = 4;
  int mlp = 64;
  int blocks = 2;
  int max_len = 512;  ///< rows of the learned position embedding
  std::uint64_t seed = 1;

  void validate() const {
    dcp::check(vocab > 1 && hidden > 0 && heads > 0 && hidden % heads == 0 && mlp > 0 && blocks > 0 && max_len > 0,
               dcp::errc::invalid_argument, [&] {
                 return "gpt_config: vocab > 1, hidden, heads, mlp, blocks and max_len positive, heads dividing "
                        "hidden; got vocab = " + std::to_string(vocab) + ", hidden = " + std::to_string(hidden) +
                        ", heads = " + std::to_string(heads);
               });
  }
};

/// This rank's part of one packed micro-step: the step's sequences lie back to back on the packed
/// axis, whose tokens `mine` this rank holds; `group` is the step's communicator when sp > 1.
template <class Comm>
struct packed_context {
  std::vector<std::int64_t> seq_begin;  ///< packed offset of each sequence, then the total
  dcp::shard mine;
  Comm* group = nullptr;

  std::int64_t total() const noexcept { return seq_begin.empty() ? 0 : seq_begin.back(); }
  int sp() const noexcept { return group ? group->size() : 1; }
};

namespace detail {

template <bool ToHeads, class Comm>
torch::Tensor relayout(Comm& comm, const dcp::ulysses_shape& s, const torch::Tensor& x) {
  const torch::Tensor in = x.contiguous();
  const auto t_mine = dcp::shard_of(s.tokens, comm.size(), comm.rank()).count;
  const torch::Tensor out =
      ToHeads ? torch::empty({s.tokens, s.heads / comm.size(), s.head_dim}, in.options())
              : torch::empty({t_mine, s.heads, s.head_dim}, in.options());
  auto run = [&]<class T>(T*) {
    const std::span<const T> src(in.data_ptr<T>(), size_t(in.numel()));
    const std::span<T> dst(out.data_ptr<T>(), size_t(out.numel()));
    if constexpr (ToHeads) dcp::ulysses_to_head_shards(comm, s, src, dst);
    else dcp::ulysses_to_token_shards(comm, s, src, dst);
  };
  if (in.scalar_type() == torch::kFloat64) run(static_cast<double*>(nullptr));
  else if (in.scalar_type() == torch::kFloat32) run(static_cast<float*>(nullptr));
  else throw dcp::error(dcp::errc::unsupported, "ulysses_relayout: float32 or float64 tensors only");
  return out;
}

}  // namespace detail

/// Ulysses re-layout as an autograd function: token shards [t_r, heads, head_dim] -> head shards
/// [tokens, heads/sp, head_dim] when `ToHeads`, the reverse otherwise; backward is the inverse.
template <class Comm, bool ToHeads>
struct ulysses_relayout : torch::autograd::Function<ulysses_relayout<Comm, ToHeads>> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, torch::Tensor x, Comm* comm,
                               dcp::ulysses_shape shape) {
    ctx->saved_data["comm"] = std::int64_t(reinterpret_cast<std::intptr_t>(comm));
    ctx->saved_data["tokens"] = shape.tokens;
    ctx->saved_data["heads"] = shape.heads;
    ctx->saved_data["head_dim"] = shape.head_dim;
    return detail::relayout<ToHeads>(*comm, shape, x);
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad) {
    auto* comm = reinterpret_cast<Comm*>(std::intptr_t(ctx->saved_data["comm"].toInt()));
    const dcp::ulysses_shape shape{ctx->saved_data["tokens"].toInt(), ctx->saved_data["heads"].toInt(),
                                   ctx->saved_data["head_dim"].toInt()};
    return {detail::relayout<!ToHeads>(*comm, shape, grad[0]), torch::Tensor(), torch::Tensor()};
  }
};

/// A block forward that `checkpoint` can re-run.
using block_function = std::function<torch::Tensor(const torch::Tensor&)>;

namespace detail {
struct block_function_holder : torch::CustomClassHolder {
  explicit block_function_holder(block_function f) : fn(std::move(f)) {}
  block_function fn;
};

struct checkpoint_function : torch::autograd::Function<checkpoint_function> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, torch::Tensor x, block_function fn) {
    ctx->save_for_backward({x});
    torch::Tensor y = fn(x);  // autograd functions run their forward without recording a graph
    ctx->saved_data["fn"] = c10::IValue::make_capsule(c10::make_intrusive<block_function_holder>(std::move(fn)));
    return y;
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad) {
    const auto holder = c10::static_intrusive_pointer_cast<block_function_holder>(ctx->saved_data["fn"].toCapsule());
    const torch::Tensor x = ctx->get_saved_variables()[0].detach().requires_grad_(true);
    torch::Tensor y;
    {
      torch::AutoGradMode on(true);
      y = holder->fn(x);
    }
    // Parameters are leaves: their gradients accumulate here; x's comes back to the outer graph.
    torch::autograd::backward({y}, {grad[0]});
    return {x.grad(), torch::Tensor()};
  }
};
}  // namespace detail

/// `fn(x)`, keeping only `x` for backward, where `fn` runs again to rebuild the graph. The model
/// has no dropout, so there is no random state to replay.
inline torch::Tensor checkpoint(block_function fn, const torch::Tensor& x) {
  return detail::checkpoint_function::apply(x, std::move(fn));
}

/// Pre-norm block: x + proj(attention(ln1 x)), then x + fc2(gelu(fc1(ln2 x))).
struct block_impl : torch::nn::Module {
  explicit block_impl(const gpt_config& c)
      : heads(c.heads), head_dim(c.hidden / c.heads),
        ln1(register_module("ln1", torch::nn::LayerNorm(torch::nn::LayerNormOptions({c.hidden})))),
        qkv(register_module("qkv", torch::nn::Linear(c.hidden, 3 * c.hidden))),
        proj(register_module("proj", torch::nn::Linear(c.hidden, c.hidden))),
        ln2(register_module("ln2", torch::nn::LayerNorm(torch::nn::LayerNormOptions({c.hidden})))),
        fc1(register_module("fc1", torch::nn::Linear(c.hidden, c.mlp))),
        fc2(register_module("fc2", torch::nn::Linear(c.mlp, c.hidden))) {}

  template <class Comm>
  torch::Tensor forward(const torch::Tensor& x, const packed_context<Comm>& c) {
    const torch::Tensor h = x + proj(attention(ln1(x), c));
    return h + fc2(torch::gelu(fc1(ln2(h))));
  }

  /// Causal self-attention of every packed sequence with itself. Under sp > 1 the fused q/k/v of
  /// the rank's tokens go to head shards (whole sequences, heads/sp heads) and back.
  template <class Comm>
  torch::Tensor attention(const torch::Tensor& x, const packed_context<Comm>& c) {
    const std::int64_t t = x.size(0), T = c.total();
    torch::Tensor qkv_ = qkv(x).view({t, heads, 3 * head_dim});
    if (c.sp() > 1) qkv_ = ulysses_relayout<Comm, true>::apply(qkv_, c.group, dcp::ulysses_shape{T, heads, 3 * head_dim});
    const auto parts = qkv_.chunk(3, -1);  // q, k, v: [T, heads/sp, head_dim]
    std::vector<torch::Tensor> out;
    for (std::size_t i = 0; i + 1 < c.seq_begin.size(); ++i) {
      const std::int64_t b = c.seq_begin[i], e = c.seq_begin[i + 1], n = e - b;
      const torch::Tensor q = parts[0].slice(0, b, e).transpose(0, 1), k = parts[1].slice(0, b, e).transpose(0, 1),
                          v = parts[2].slice(0, b, e).transpose(0, 1);
      const torch::Tensor future = torch::ones({n, n}, torch::kBool).triu(1);
      const torch::Tensor scores = torch::matmul(q, k.transpose(1, 2)).div(std::sqrt(double(head_dim)));
      out.push_back(torch::matmul(scores.masked_fill(future, -std::numeric_limits<double>::infinity()).softmax(-1), v)
                        .transpose(0, 1));
    }
    torch::Tensor o = torch::cat(out, 0);  // [T, heads/sp, head_dim]
    if (c.sp() > 1) o = ulysses_relayout<Comm, false>::apply(o, c.group, dcp::ulysses_shape{T, heads, head_dim});
    return o.reshape({t, heads * head_dim});
  }

  std::int64_t heads, head_dim;
  torch::nn::LayerNorm ln1;
  torch::nn::Linear qkv, proj;
  torch::nn::LayerNorm ln2;
  torch::nn::Linear fc1, fc2;
};

/// Token and position embeddings, `blocks` blocks, a final LayerNorm and the output head.
struct gpt_impl : torch::nn::Module {
  explicit gpt_impl(const gpt_config& c)
      : config(c), tok(register_module("tok", torch::nn::Embedding(c.vocab, c.hidden))),
        pos(register_module("pos", torch::nn::Embedding(c.max_len, c.hidden))) {
    for (int l = 0; l < c.blocks; ++l)
      blocks.push_back(register_module("block" + std::to_string(l), std::make_shared<block_impl>(c)));
    ln_f = register_module("ln_f", torch::nn::LayerNorm(torch::nn::LayerNormOptions({c.hidden})));
    head = register_module("head", torch::nn::Linear(c.hidden, c.vocab));
    torch::NoGradGuard no_grad;
    tok->weight.normal_(0, 0.1);
    pos->weight.normal_(0, 0.1);
  }

  /// Logits [t_r, vocab] of this rank's tokens; the first `checkpointed` blocks recompute.
  template <class Comm>
  torch::Tensor forward(const torch::Tensor& tokens, const torch::Tensor& positions, const packed_context<Comm>& c,
                        int checkpointed) {
    return logits(run_blocks(embed(tokens, positions, c), c, 0, int(blocks.size()), checkpointed));
  }

  /// The pieces a pipeline stage runs: the embeddings (the first stage), blocks [first, last)
  /// with the first `checkpointed` of them recomputed, and the head (the last stage).
  template <class Comm>
  torch::Tensor embed(const torch::Tensor& tokens, const torch::Tensor& positions, const packed_context<Comm>& c) {
    for (std::size_t i = 0; i + 1 < c.seq_begin.size(); ++i)
      dcp::check(c.seq_begin[i + 1] - c.seq_begin[i] <= config.max_len, dcp::errc::invalid_argument, [&] {
        return "gpt: a sequence of " + std::to_string(c.seq_begin[i + 1] - c.seq_begin[i]) +
               " tokens is longer than max_len = " + std::to_string(config.max_len) +
               " positions; build the model with a larger max_len";
      });
    return tok(tokens) + pos(positions);
  }
  template <class Comm>
  torch::Tensor run_blocks(torch::Tensor x, const packed_context<Comm>& c, int first, int last, int checkpointed) {
    for (int l = first; l < last; ++l) {
      auto& b = blocks[std::size_t(l)];
      if (l - first < checkpointed) x = checkpoint([b, c](const torch::Tensor& in) { return b->forward(in, c); }, x);
      else x = b->forward(x, c);
    }
    return x;
  }
  torch::Tensor logits(const torch::Tensor& x) { return head(ln_f(x)); }

  gpt_config config;
  torch::nn::Embedding tok, pos;
  std::vector<std::shared_ptr<block_impl>> blocks;
  torch::nn::LayerNorm ln_f{nullptr};
  torch::nn::Linear head{nullptr};
};

/// A model with the same parameters on every rank: initialised from `c.seed`, in `dtype`.
inline std::shared_ptr<gpt_impl> make_gpt(const gpt_config& c, torch::Dtype dtype) {
  c.validate();
  torch::manual_seed(c.seed);
  auto m = std::make_shared<gpt_impl>(c);
  m->to(dtype);
  return m;
}

}  // namespace libtorch_train
