#pragma once
/// \file
/// One LibTorch training step under a `dcp::scheduler` plan. Per global batch (the same on every
/// rank, from the scheduler's sampler):
///   1. `plan = sched.plan(batch)` and `sched.verify(plan)`;
///   2. for each of this rank's `sched.steps_for(plan)`: the rank's token shard of the packed
///      step, forward with the step's group (Ulysses inside autograd) and its checkpointed blocks,
///      loss = sum over the step's sequences of loss_weight x the sequence's mean token loss
///      (the plan's weights make the sum over all steps the batch's token-mean loss), backward;
///      gradients accumulate in the parameters' `.grad`, never averaged per rank;
///   3. one all-reduce SUM of the gradients (and the loss) over the world;
///   4. the optimizer step, the same on every rank.

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <dcp/comm/shard.hpp>
#include <dcp/cost/device.hpp>
#include <dcp/model/transformer.hpp>
#include <dcp/plan/pipeline_schedule.hpp>
#include <dcp/plan/plan.hpp>
#include <dcp/scheduler.hpp>
#include <dcp/sequence.hpp>

#include "corpus.hpp"
#include "gpt.hpp"
#include <torch/torch.h>

namespace libtorch_train {

namespace F = torch::nn::functional;

/// The `transformer_spec` dcp prices for the model: same L, h, heads, MLP, causal attention.
inline dcp::transformer_spec spec_of(const gpt_config& c) {
  return {"libtorch-gpt", c.blocks, c.hidden, c.heads, c.mlp, 2, dcp::attention_kind::causal, 0};
}

/// A device for the analytic cost model, scaled to the small model on CPU ranks: a sequence of
/// `fit_tokens` tokens just fits one rank with nothing checkpointed, so longer ones need
/// recompute or sp > 1.
inline dcp::device_spec scaled_device(const dcp::transformer_spec& spec, int world, double fit_tokens) {
  dcp::device_spec d{"cpu-scaled", 5e9, 0.5, 128, 5e-5, 5e-5, 2e9, 1e9, 8, 0, 0.9, 34};
  const double p = spec.parameters();
  d.mem_bytes = (4 * p + 12 * p / world + (spec.blocks + 1) * d.beta * double(spec.hidden) * fit_tokens) / d.usable;
  return d;
}

/// This rank's tensors of one micro-step.
template <class Comm>
struct micro_batch {
  torch::Tensor tokens, positions, targets;  ///< int64 [t_r]
  torch::Tensor weights;                     ///< [t_r]: loss weight of the token's sequence / its length
  packed_context<Comm> context;
};

/// This rank's token shard of `step`'s packed sequences.
template <class Comm>
micro_batch<Comm> make_micro_batch(const corpus& data, const dcp::micro_step<Comm>& step, torch::Dtype dtype) {
  micro_batch<Comm> mb;
  auto& c = mb.context;
  c.seq_begin.push_back(0);
  for (const auto& q : step.sequences) c.seq_begin.push_back(c.seq_begin.back() + q.tokens);
  c.mine = dcp::shard_of(c.total(), step.sp(), step.group_rank);
  c.group = step.sp() > 1 ? &step.comm() : nullptr;
  std::vector<std::int64_t> tok, pos, tgt;
  std::vector<double> w;
  for (std::size_t i = 0; i < step.sequences.size(); ++i) {
    const auto& q = step.sequences[i];
    const auto& doc = data.document(q.id);
    dcp::check(std::int64_t(doc.size()) == q.tokens + 1, dcp::errc::mismatch, [&] {
      return "sequence " + std::to_string(q.id) + " has " + std::to_string(q.tokens) + " tokens in the plan but " +
             std::to_string(doc.size() - 1) + " in the corpus; plan the corpus' own dataset()";
    });
    const std::int64_t lo = std::max(c.mine.begin, c.seq_begin[i]), hi = std::min(c.mine.end(), c.seq_begin[i + 1]);
    for (std::int64_t p = lo - c.seq_begin[i]; p < hi - c.seq_begin[i]; ++p) {
      tok.push_back(doc[std::size_t(p)]);
      tgt.push_back(doc[std::size_t(p + 1)]);
      pos.push_back(p);
      w.push_back(q.loss_weight / double(q.tokens));
    }
  }
  const auto i64 = torch::TensorOptions().dtype(torch::kInt64);
  mb.tokens = torch::tensor(tok, i64);
  mb.targets = torch::tensor(tgt, i64);
  mb.positions = torch::tensor(pos, i64);
  mb.weights = torch::tensor(w, torch::TensorOptions().dtype(torch::kFloat64)).to(dtype);
  return mb;
}

/// Sums every parameter's gradient (zero where this rank ran nothing) and `loss` over `world`
/// with one all-reduce; returns the summed loss.
template <class Comm>
double all_reduce_gradients(Comm& world, torch::nn::Module& model, const torch::Tensor& loss) {
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> flat;
  auto params = model.parameters();
  for (auto& p : params) flat.push_back(p.grad().defined() ? p.grad().reshape(-1) : torch::zeros({p.numel()}, p.options()));
  flat.push_back(loss.reshape(-1).to(params.front().scalar_type()));
  torch::Tensor buf = torch::cat(flat).contiguous();
  auto reduce = [&]<class T>(T*) {
    world.all_reduce(std::span<T>(buf.data_ptr<T>(), std::size_t(buf.numel())), dcp::reduce_op::sum);
  };
  if (buf.scalar_type() == torch::kFloat64) reduce(static_cast<double*>(nullptr));
  else reduce(static_cast<float*>(nullptr));
  std::int64_t at = 0;
  for (auto& p : params) {
    p.mutable_grad() = buf.slice(0, at, at + p.numel()).view_as(p).clone();
    at += p.numel();
  }
  return buf[at].item<double>();
}

/// What one training step did on this rank.
struct step_report {
  double loss = 0;  ///< the batch's token-mean loss (all ranks)
  dcp::plan plan;
  std::size_t micro_steps = 0;   ///< this rank's
  std::int64_t recomputed = 0;   ///< blocks this rank recomputed, over its micro-steps
};

/// Seconds of wall-clock time since `t0`.
inline double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

/// One micro-step of this rank, forward and backward: its token shard of the packed step, the
/// forward with the step's group (Ulysses inside autograd) and checkpointed blocks, the loss
/// weighted as the plan says (not averaged per rank), backward into the parameters' `.grad`.
/// Returns the (detached) loss.
template <class Step>
torch::Tensor micro_step(gpt_impl& model, const corpus& data, const Step& st, torch::Dtype dtype) {
  const auto mb = make_micro_batch(data, st, dtype);
  // The cost model prices exactly this model's blocks, so the plan's k applies as it is.
  const int k = std::min(st.checkpointed_blocks, model.config.blocks);
  const torch::Tensor logits = model.forward(mb.tokens, mb.positions, mb.context, k);
  const torch::Tensor token_loss =
      F::cross_entropy(logits, mb.targets, F::CrossEntropyFuncOptions().reduction(torch::kNone));
  const torch::Tensor loss = (token_loss * mb.weights).sum();
  loss.backward();
  return loss.detach();
}

/// The start-up probe (calibration on, before the first plan; DESIGN 9.2): this rank's probe
/// micro-steps of the first batch run forward and backward and are observed (wall-clock time; a
/// CPU tensor's peak memory is not measured, so the probe calibrates the clock); the gradients
/// are discarded and no optimizer step follows. Returns the probe plan.
template <class Scheduler>
dcp::plan probe_step(Scheduler& sched, gpt_impl& model, const corpus& data, std::span<const dcp::sequence> batch) {
  const dcp::plan probe = sched.probe(batch);
  sched.verify(probe);
  const torch::Dtype dtype = model.parameters().front().scalar_type();
  for (const auto& st : sched.steps_for(probe)) {
    const auto t0 = std::chrono::steady_clock::now();
    (void)micro_step(model, data, st, dtype);
    sched.observe(st, seconds_since(t0));
  }
  model.zero_grad();
  return probe;
}

/// One training step under the scheduler's plan (collective over `sched.world()`). With
/// calibration on, each micro-step is observed with its wall-clock time.
template <class Scheduler>
step_report train_step(Scheduler& sched, gpt_impl& model, torch::optim::Optimizer& opt, const corpus& data,
                       std::span<const dcp::sequence> batch) {
  step_report r;
  r.plan = sched.plan(batch);
  sched.verify(r.plan);
  const auto steps = sched.steps_for(r.plan);
  const torch::Dtype dtype = model.parameters().front().scalar_type();
  opt.zero_grad();
  torch::Tensor loss_sum = torch::zeros({}, torch::TensorOptions().dtype(dtype));
  for (const auto& st : steps) {
    const auto t0 = std::chrono::steady_clock::now();
    const torch::Tensor loss = micro_step(model, data, st, dtype);  // forward and backward
    if (sched.calibration()) sched.observe(st, seconds_since(t0));  // calibration on: its time
    loss_sum += loss;
    r.recomputed += std::min(st.checkpointed_blocks, model.config.blocks);
  }
  r.micro_steps = steps.size();
  r.loss = all_reduce_gradients(sched.world(), model, loss_sum);
  opt.step();
  return r;
}

/// The blocks [first, last) pipeline stage `stage` of `stages` holds: an even split, the first
/// L mod P stages one block more (the heaviest stage's ceil(L / P) is what dcp prices).
inline dcp::shard stage_blocks(int blocks, int stages, int stage) { return dcp::shard_of(blocks, stages, stage); }

/// One training step of a pipelined plan (pp > 1; collective over `sched.world()`): this rank
/// runs its stage's share of each of its micro-steps, forwards and backwards in the order
/// `pipeline_for` gives (1F1B at the plan's warmup depth). A forward takes the embeddings (first stage) or the previous
/// stage's activations of this rank's token shard, runs the stage's blocks (the step's first k
/// recomputed) and sends the result on, or, on the last stage, takes the weighted loss. A
/// backward takes the next stage's gradient (or starts from the loss) and sends its input's
/// gradient back. Sends do not wait for their receiver (`isend`), so neighbours sending to each
/// other do not wait on each other. Every rank holds the whole model; the parameters a rank does
/// not run get no gradient, so the one all-reduce SUM over the world gives every parameter its
/// full-batch gradient on every rank, and the optimizer step is the same everywhere.
template <class Scheduler>
step_report pipeline_train_step(Scheduler& sched, gpt_impl& model, torch::optim::Optimizer& opt, const corpus& data,
                                std::span<const dcp::sequence> batch) {
  using comm_type = typename Scheduler::comm_type;
  step_report r;
  r.plan = sched.plan(batch);
  sched.verify(r.plan);
  auto work = sched.pipeline_for(r.plan);
  auto& world = sched.world();
  const torch::Dtype dtype = model.parameters().front().scalar_type();
  const dcp::shard mine = stage_blocks(model.config.blocks, work.stages, work.stage);
  const bool first = work.stage == 0, last = work.stage + 1 == work.stages;
  struct in_flight {
    micro_batch<comm_type> mb;
    torch::Tensor input, output;  // the stage's input (a leaf past the first stage) and its output or loss
  };
  std::vector<std::optional<in_flight>> live(work.steps.size());
  std::vector<std::pair<typename comm_type::pending_send, torch::Tensor>> sends;  // buffers live until sent
  auto tag = [](std::size_t index, bool backward) { return int(2 * index + (backward ? 1 : 0)); };
  auto send = [&](const torch::Tensor& t, int peer, int tg) {
    torch::Tensor c = t.detach().contiguous();
    if (c.numel() == 0) return;  // an empty shard: both sides know it
    auto run = [&]<class T>(T*) {
      sends.emplace_back(world.isend(std::span<const T>(c.data_ptr<T>(), std::size_t(c.numel())), peer, tg), c);
    };
    if (dtype == torch::kFloat64) run(static_cast<double*>(nullptr));
    else run(static_cast<float*>(nullptr));
  };
  auto receive = [&](std::int64_t rows, int peer, int tg) {
    torch::Tensor t = torch::empty({rows, model.config.hidden}, torch::TensorOptions().dtype(dtype));
    if (rows == 0) return t;
    auto run = [&]<class T>(T*) { world.recv(std::span<T>(t.data_ptr<T>(), std::size_t(t.numel())), peer, tg); };
    if (dtype == torch::kFloat64) run(static_cast<double*>(nullptr));
    else run(static_cast<float*>(nullptr));
    return t;
  };
  opt.zero_grad();
  torch::Tensor loss_sum = torch::zeros({}, torch::TensorOptions().dtype(dtype));
  for (const dcp::pipeline_op& op : work.ops) {
    const auto& st = work.steps[op.step];
    const int k = std::min<int>(st.checkpointed_blocks, int(mine.count));
    if (!op.backward) {
      in_flight f{make_micro_batch(data, st, dtype), {}, {}};
      const std::int64_t rows = f.mb.tokens.size(0);
      f.input = first ? model.embed(f.mb.tokens, f.mb.positions, f.mb.context)
                      : receive(rows, work.previous, tag(st.index, false)).requires_grad_(true);
      torch::Tensor x = model.run_blocks(f.input, f.mb.context, int(mine.begin), int(mine.end()), k);
      if (last) {
        f.output = (F::cross_entropy(model.logits(x), f.mb.targets, F::CrossEntropyFuncOptions().reduction(torch::kNone)) *
                    f.mb.weights)
                       .sum();
        loss_sum += f.output.detach();
      } else {
        send(x, work.next, tag(st.index, false));
        f.output = x;
      }
      r.recomputed += k;
      live[op.step] = std::move(f);
    } else {
      in_flight& f = *live[op.step];
      if (last) f.output.backward();
      else f.output.backward(receive(f.output.size(0), work.next, tag(st.index, true)));
      if (!first) send(f.input.grad().defined() ? f.input.grad() : torch::zeros_like(f.input), work.previous,
                       tag(st.index, true));
      live[op.step].reset();  // its activations go
    }
  }
  for (auto& [pending, buffer] : sends) world.wait(pending);
  r.micro_steps = work.steps.size();
  r.loss = all_reduce_gradients(world, model, loss_sum);
  opt.step();
  return r;
}

}  // namespace libtorch_train
