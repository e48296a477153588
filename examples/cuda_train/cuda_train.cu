// dcp-train-cuda: a small causal transformer LM trained on GPUs under dcp plans.
//
// One rank per GPU (mpirun -np R dcp-train-cuda ...; without MPI a single rank). Every global
// batch is planned by dcp::scheduler; each rank runs its micro-steps (DCP-inter: its own
// gradient accumulation) on the step's NCCL group with Ulysses sequence parallelism (token shards
// <-> head shards through dcp::relayout), checkpoints the step's first k blocks and recomputes
// them in backward (DCP-intra), scales each sequence's mean token loss by its loss weight, and
// after one all-reduce(sum) of the gradients takes an Adam step. With --calibrate 1 each
// micro-step is timed with CUDA events and observed; the next plan refits the cost model from
// every rank's observations, exchanged over the host communicator (MPI; NCCL moves device memory).
//
// Model: embedding, L pre-norm blocks (RMSNorm, causal multi-head attention, GELU MLP), RMSNorm,
// output head, cross-entropy. GEMMs in cuBLAS; attention is a straightforward kernel (one thread
// per query and head, online softmax) over the varlen batch described by cu_seqlens.
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <random>
#include <span>
#include <string>
#include <vector>

#include <dcp/comm/nccl.hpp>
#include <dcp/cuda.cuh>
#include <dcp/dcp.hpp>
#include <dcp/scheduler.hpp>
#if DCP_HAS_MPI()
#include <dcp/comm/mpi.hpp>
#endif

namespace {

using fvec = thrust::device_vector<float>;
using ivec = thrust::device_vector<std::int32_t>;
float* P(fvec& v) { return thrust::raw_pointer_cast(v.data()); }
const float* P(const fvec& v) { return thrust::raw_pointer_cast(v.data()); }

constexpr int max_head_dim = 64;

struct options {
  int steps = 10, blocks = 4, hidden = 128, heads = 8, vocab = 64, sequences = 512;
  std::int64_t min_len = 16, max_len = 2048, batch_tokens = 32768;
  // The memory capacity the planner assumes per GPU: small, so that plans vary (on one GPU, sequences
  // above ~520 tokens checkpoint blocks and 2048 still fits with all of them checkpointed).
  double mem_mb = 24;
  float lr = 3e-3f;
  std::uint64_t seed = 1;
  int calibrate = 0;  // 1: online calibration from CUDA-event times of the micro-steps
};

void cublas_check(cublasStatus_t s, const char* what) {
  dcp::check(s == CUBLAS_STATUS_SUCCESS, dcp::errc::unsupported,
             [&] { return std::string(what) + " failed: cuBLAS status " + std::to_string(int(s)); });
}
void launch_check(const char* what) { dcp::cuda_check(cudaGetLastError(), what, "dcp-train-cuda"); }
unsigned blocks_for(std::int64_t n, unsigned t = 256) { return unsigned((n + t - 1) / t); }

// ---- kernels ------------------------------------------------------------------------------------

__global__ void embed_fwd(const std::int32_t* ids, const float* E, float* x, std::int64_t T, int h) {
  const std::int64_t e = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x;
  if (e < T * h) x[e] = E[std::int64_t(ids[e / h]) * h + e % h];
}
__global__ void embed_bwd(const std::int32_t* ids, const float* dx, float* dE, std::int64_t T, int h) {
  const std::int64_t e = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x;
  if (e < T * h) atomicAdd(&dE[std::int64_t(ids[e / h]) * h + e % h], dx[e]);
}
// y = x / rms(x), r = 1 / rms(x) (no gain: fewer parameters, same structure).
__global__ void rms_fwd(const float* x, float* y, float* r, std::int64_t T, int h) {
  const std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x;
  if (i >= T) return;
  float s = 0;
  for (int c = 0; c < h; ++c) s += x[i * h + c] * x[i * h + c];
  const float inv = rsqrtf(s / h + 1e-6f);
  r[i] = inv;
  for (int c = 0; c < h; ++c) y[i * h + c] = x[i * h + c] * inv;
}
// dx += r * (dy - y * mean(dy * y)).
__global__ void rms_bwd(const float* x, const float* r, const float* dy, float* dx, std::int64_t T, int h) {
  const std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x;
  if (i >= T) return;
  float dot = 0;
  for (int c = 0; c < h; ++c) dot += dy[i * h + c] * x[i * h + c] * r[i];
  dot /= h;
  for (int c = 0; c < h; ++c) dx[i * h + c] += r[i] * (dy[i * h + c] - x[i * h + c] * r[i] * dot);
}
__device__ float gelu(float u) { return 0.5f * u * (1.f + tanhf(0.7978845608f * (u + 0.044715f * u * u * u))); }
__device__ float gelu_grad(float u) {
  const float k = 0.7978845608f, t = tanhf(k * (u + 0.044715f * u * u * u));
  return 0.5f * (1.f + t) + 0.5f * u * (1.f - t * t) * k * (1.f + 3.f * 0.044715f * u * u);
}
__global__ void gelu_fwd(const float* u, float* g, std::int64_t n) {
  const std::int64_t e = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x;
  if (e < n) g[e] = gelu(u[e]);
}
__global__ void gelu_bwd(const float* u, const float* dg, float* du, std::int64_t n) {
  const std::int64_t e = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x;
  if (e < n) du[e] = dg[e] * gelu_grad(u[e]);
}

// The sequence of token i: last j with cu[j] <= i.
__device__ int sequence_of(const std::int32_t* cu, int b, std::int64_t i) {
  int lo = 0, hi = b;
  while (hi - lo > 1) {
    const int mid = (lo + hi) / 2;
    if (cu[mid] <= i) lo = mid;
    else hi = mid;
  }
  return lo;
}

// Causal attention over [N][hp][dh] (whole sequences, this rank's heads). One thread per (query, head).
__global__ void attn_fwd(const float* q, const float* k, const float* v, float* o, float* lse,
                         const std::int32_t* cu, int b, std::int64_t N, int hp, int dh, float scale) {
  const std::int64_t t = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x;
  if (t >= N * hp) return;
  const std::int64_t i = t / hp;
  const int hh = int(t % hp);
  const std::int64_t start = cu[sequence_of(cu, b, i)], row = std::int64_t(hp) * dh;
  const float* qi = q + i * row + hh * dh;
  float acc[max_head_dim], m = -INFINITY, l = 0;
  for (int d = 0; d < dh; ++d) acc[d] = 0;
  for (std::int64_t j = start; j <= i; ++j) {
    const float* kj = k + j * row + hh * dh;
    float s = 0;
    for (int d = 0; d < dh; ++d) s += qi[d] * kj[d];
    s *= scale;
    const float m2 = fmaxf(m, s), c = expf(m - m2), p = expf(s - m2);
    l = l * c + p;
    const float* vj = v + j * row + hh * dh;
    for (int d = 0; d < dh; ++d) acc[d] = acc[d] * c + p * vj[d];
    m = m2;
  }
  for (int d = 0; d < dh; ++d) o[i * row + hh * dh + d] = acc[d] / l;
  lse[t] = m + logf(l);
}

// Backward of attn_fwd; dk and dv are accumulated atomically (zero them first).
__global__ void attn_bwd(const float* q, const float* k, const float* v, const float* o, const float* lse,
                         const float* dout, float* dq, float* dk, float* dv, const std::int32_t* cu, int b,
                         std::int64_t N, int hp, int dh, float scale) {
  const std::int64_t t = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x;
  if (t >= N * hp) return;
  const std::int64_t i = t / hp;
  const int hh = int(t % hp);
  const std::int64_t start = cu[sequence_of(cu, b, i)], row = std::int64_t(hp) * dh, at = i * row + hh * dh;
  float D = 0, dqi[max_head_dim];
  for (int d = 0; d < dh; ++d) {
    D += dout[at + d] * o[at + d];
    dqi[d] = 0;
  }
  for (std::int64_t j = start; j <= i; ++j) {
    const std::int64_t aj = j * row + hh * dh;
    float s = 0, dp = 0;
    for (int d = 0; d < dh; ++d) {
      s += q[at + d] * k[aj + d];
      dp += dout[at + d] * v[aj + d];
    }
    const float p = expf(s * scale - lse[t]), ds = p * (dp - D) * scale;
    for (int d = 0; d < dh; ++d) {
      dqi[d] += ds * k[aj + d];
      atomicAdd(&dk[aj + d], ds * q[at + d]);
      atomicAdd(&dv[aj + d], p * dout[at + d]);
    }
  }
  for (int d = 0; d < dh; ++d) dq[at + d] = dqi[d];
}

// Weighted cross-entropy: loss += w * (lse - logit[target]); dlogits = w * (softmax - onehot).
__global__ void cross_entropy(const float* logits, const std::int32_t* target, const float* weight, float* dlogits,
                              float* loss, std::int64_t T, int V) {
  const std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x;
  if (i >= T) return;
  const float* z = logits + i * V;
  float* dz = dlogits + i * V;
  if (target[i] < 0) {
    for (int c = 0; c < V; ++c) dz[c] = 0;
    return;
  }
  float m = -INFINITY, s = 0;
  for (int c = 0; c < V; ++c) m = fmaxf(m, z[c]);
  for (int c = 0; c < V; ++c) s += expf(z[c] - m);
  const float w = weight[i], l = m + logf(s);
  for (int c = 0; c < V; ++c) dz[c] = w * (expf(z[c] - l) - (c == target[i] ? 1.f : 0.f));
  atomicAdd(loss, w * (l - z[target[i]]));
}

__global__ void adam(float* p, const float* g, float* m, float* v, std::int64_t n, float lr, float c1, float c2) {
  const std::int64_t e = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x;
  if (e >= n) return;
  m[e] = 0.9f * m[e] + 0.1f * g[e];
  v[e] = 0.999f * v[e] + 0.001f * g[e] * g[e];
  p[e] -= lr * (m[e] / c1) / (sqrtf(v[e] / c2) + 1e-8f);
}

// ---- model --------------------------------------------------------------------------------------

// C[M,N] = op(A) op(B) + beta C, row-major (cuBLAS is column-major: compute C^T = op(B)^T op(A)^T).
void gemm(cublasHandle_t hd, bool ta, bool tb, std::int64_t M, std::int64_t N, std::int64_t K, const float* A,
          const float* B, float* C, float beta) {
  if (M == 0 || N == 0) return;
  const float one = 1;
  cublas_check(cublasSgemm(hd, tb ? CUBLAS_OP_T : CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N, int(N), int(M), int(K),
                           &one, B, int(tb ? K : N), A, int(ta ? M : K), &beta, C, int(N)),
               "cublasSgemm");
}

struct model {
  int L, h, H, f, V;
  std::int64_t E, Wout, block0, per_block, size;  // offsets into the flat parameter buffer
  fvec params, grads, m, v;
  int t = 0;

  model(const options& o, std::uint64_t seed)
      : L(o.blocks), h(o.hidden), H(o.heads), f(4 * o.hidden), V(o.vocab) {
    E = 0;
    Wout = E + std::int64_t(V) * h;
    block0 = Wout + std::int64_t(h) * V;
    per_block = 4 * std::int64_t(h) * h + 2 * std::int64_t(h) * f;
    size = block0 + L * per_block;
    std::vector<float> init(static_cast<std::size_t>(size));
    std::mt19937_64 rng(seed);  // same seed on every rank: replicated weights
    std::normal_distribution<float> n01(0.f, 1.f);
    for (std::int64_t i = 0; i < size; ++i)
      init[std::size_t(i)] = n01(rng) * (i < block0 ? 0.5f : 1.f / std::sqrt(float(h)));
    params.assign(init.begin(), init.end());
    grads.assign(static_cast<std::size_t>(size), 0.f);
    m.assign(static_cast<std::size_t>(size), 0.f);
    v.assign(static_cast<std::size_t>(size), 0.f);
  }
  // Per block: Wq, Wk, Wv, Wo [h][h], W1 [h][f], W2 [f][h].
  float* w(fvec& buf, int l, int which) {
    const std::int64_t hh = std::int64_t(h) * h, off = block0 + l * per_block;
    return P(buf) + off + (which < 4 ? which * hh : 4 * hh + (which - 4) * std::int64_t(h) * f);
  }
};

// Activations of one block on T local tokens (N tokens of the group in head layout).
struct block_acts {
  fvec x, a, r1, q, k, v, qh, kh, vh, oh, lse, o, x1, bb, r2, u, g;
  void resize(std::int64_t T, std::int64_t N, const model& M, int sp) {
    const auto h = std::size_t(M.h), f = std::size_t(M.f);
    for (fvec* p : {&x, &a, &q, &k, &v, &o, &x1, &bb}) p->resize(static_cast<std::size_t>(T) * h);
    for (fvec* p : {&r1, &r2}) p->resize(static_cast<std::size_t>(T));
    for (fvec* p : {&u, &g}) p->resize(static_cast<std::size_t>(T) * f);
    for (fvec* p : {&qh, &kh, &vh, &oh}) p->resize(sp > 1 ? std::size_t(N) * h / std::size_t(sp) : 0);
    lse.resize(static_cast<std::size_t>(N) * std::size_t(M.H / sp));
  }
  void release() {
    for (fvec* p : {&a, &r1, &q, &k, &v, &qh, &kh, &vh, &oh, &lse, &o, &x1, &bb, &r2, &u, &g}) {
      p->clear();
      p->shrink_to_fit();
    }
  }
};

// One micro-step on one rank of its group.
struct step_context {
  cublasHandle_t blas;
  dcp::nccl_comm* comm;
  int sp;
  std::int64_t T, N;
  const dcp::micro_batch* mb;
  dcp::relayout_map to_heads, to_tokens;

  // Token shards -> head shards (or the buffer itself when sp == 1).
  float* heads(fvec& tok, fvec& hd) {
    if (sp == 1) return P(tok);
    dcp::relayout(*comm, to_heads, std::span<const float>(P(tok), tok.size()), std::span<float>(P(hd), hd.size()));
    return P(hd);
  }
  void tokens(const float* hd, std::size_t n, fvec& tok) {
    if (sp == 1) {
      thrust::copy(thrust::device_pointer_cast(hd), thrust::device_pointer_cast(hd) + std::int64_t(n), tok.begin());
      return;
    }
    dcp::relayout(*comm, to_tokens, std::span<const float>(hd, n), std::span<float>(P(tok), tok.size()));
  }
};

void block_forward(model& M, int l, step_context& c, block_acts& s, fvec& out) {
  const std::int64_t T = c.T, N = c.N, h = M.h, f = M.f;
  const int hp = M.H / c.sp, dh = M.h / M.H;
  rms_fwd<<<blocks_for(T), 256>>>(P(s.x), P(s.a), P(s.r1), T, M.h);
  gemm(c.blas, false, false, T, h, h, P(s.a), M.w(M.params, l, 0), P(s.q), 0);
  gemm(c.blas, false, false, T, h, h, P(s.a), M.w(M.params, l, 1), P(s.k), 0);
  gemm(c.blas, false, false, T, h, h, P(s.a), M.w(M.params, l, 2), P(s.v), 0);
  const float* qh = c.heads(s.q, s.qh);
  const float* kh = c.heads(s.k, s.kh);
  const float* vh = c.heads(s.v, s.vh);
  float* oh = c.sp == 1 ? P(s.o) : P(s.oh);
  attn_fwd<<<blocks_for(N * hp, 128), 128>>>(qh, kh, vh, oh, P(s.lse), thrust::raw_pointer_cast(c.mb->cu_seqlens.data()),
                                             int(c.mb->sequences), N, hp, dh, 1.f / std::sqrt(float(dh)));
  launch_check("attn_fwd");
  if (c.sp > 1) c.tokens(oh, s.oh.size(), s.o);
  thrust::copy(s.x.begin(), s.x.end(), s.x1.begin());
  gemm(c.blas, false, false, T, h, h, P(s.o), M.w(M.params, l, 3), P(s.x1), 1);  // x1 = x + o Wo
  rms_fwd<<<blocks_for(T), 256>>>(P(s.x1), P(s.bb), P(s.r2), T, M.h);
  gemm(c.blas, false, false, T, f, h, P(s.bb), M.w(M.params, l, 4), P(s.u), 0);
  gelu_fwd<<<blocks_for(T * f), 256>>>(P(s.u), P(s.g), T * f);
  out.resize(static_cast<std::size_t>(T * h));
  thrust::copy(s.x1.begin(), s.x1.end(), out.begin());
  gemm(c.blas, false, false, T, h, f, P(s.g), M.w(M.params, l, 5), P(out), 1);  // out = x1 + gelu(u) W2
  launch_check("block_forward");
}

// dx (in/out): gradient w.r.t. the block's output on entry, w.r.t. its input on return.
void block_backward(model& M, int l, step_context& c, block_acts& s, fvec& dx) {
  const std::int64_t T = c.T, N = c.N, h = M.h, f = M.f;
  const int hp = M.H / c.sp, dh = M.h / M.H;
  fvec dg(static_cast<std::size_t>(T * f)), du(static_cast<std::size_t>(T * f)), db(static_cast<std::size_t>(T * h), 0.f), dx1 = dx;
  gemm(c.blas, false, true, T, f, h, P(dx), M.w(M.params, l, 5), P(dg), 0);   // dg = dx W2^T
  gemm(c.blas, true, false, f, h, T, P(s.g), P(dx), M.w(M.grads, l, 5), 1);   // dW2 += g^T dx
  gelu_bwd<<<blocks_for(T * f), 256>>>(P(s.u), P(dg), P(du), T * f);
  gemm(c.blas, true, false, h, f, T, P(s.bb), P(du), M.w(M.grads, l, 4), 1);  // dW1 += b^T du
  gemm(c.blas, false, true, T, h, f, P(du), M.w(M.params, l, 4), P(db), 0);   // db = du W1^T
  rms_bwd<<<blocks_for(T), 256>>>(P(s.x1), P(s.r2), P(db), P(dx1), T, M.h);
  // Attention: do = dx1 Wo^T, dWo += o^T dx1, then back through the all-to-alls.
  fvec dout(static_cast<std::size_t>(T * h)), doh, dqh, dkh, dvh, dq(static_cast<std::size_t>(T * h)), dk(static_cast<std::size_t>(T * h)), dv(static_cast<std::size_t>(T * h));
  gemm(c.blas, false, true, T, h, h, P(dx1), M.w(M.params, l, 3), P(dout), 0);
  gemm(c.blas, true, false, h, h, T, P(s.o), P(dx1), M.w(M.grads, l, 3), 1);
  const std::size_t nh = std::size_t(N) * std::size_t(hp) * std::size_t(dh);
  for (fvec* p : {&doh, &dqh, &dkh, &dvh}) p->assign(c.sp > 1 ? nh : 0, 0.f);
  const float* doh_p = c.heads(dout, doh);
  float* dq_p = c.sp > 1 ? P(dqh) : P(dq);
  float* dk_p = c.sp > 1 ? P(dkh) : P(dk);
  float* dv_p = c.sp > 1 ? P(dvh) : P(dv);
  thrust::fill(thrust::device_pointer_cast(dk_p), thrust::device_pointer_cast(dk_p) + std::int64_t(nh), 0.f);
  thrust::fill(thrust::device_pointer_cast(dv_p), thrust::device_pointer_cast(dv_p) + std::int64_t(nh), 0.f);
  const float* qh = c.sp > 1 ? P(s.qh) : P(s.q);
  const float* kh = c.sp > 1 ? P(s.kh) : P(s.k);
  const float* vh = c.sp > 1 ? P(s.vh) : P(s.v);
  const float* oh = c.sp > 1 ? P(s.oh) : P(s.o);
  attn_bwd<<<blocks_for(N * hp, 128), 128>>>(qh, kh, vh, oh, P(s.lse), doh_p, dq_p, dk_p, dv_p,
                                             thrust::raw_pointer_cast(c.mb->cu_seqlens.data()), int(c.mb->sequences), N,
                                             hp, dh, 1.f / std::sqrt(float(dh)));
  launch_check("attn_bwd");
  if (c.sp > 1) {
    c.tokens(dq_p, nh, dq);
    c.tokens(dk_p, nh, dk);
    c.tokens(dv_p, nh, dv);
  }
  fvec da(static_cast<std::size_t>(T * h));
  gemm(c.blas, false, true, T, h, h, P(dq), M.w(M.params, l, 0), P(da), 0);
  gemm(c.blas, false, true, T, h, h, P(dk), M.w(M.params, l, 1), P(da), 1);
  gemm(c.blas, false, true, T, h, h, P(dv), M.w(M.params, l, 2), P(da), 1);
  gemm(c.blas, true, false, h, h, T, P(s.a), P(dq), M.w(M.grads, l, 0), 1);
  gemm(c.blas, true, false, h, h, T, P(s.a), P(dk), M.w(M.grads, l, 1), 1);
  gemm(c.blas, true, false, h, h, T, P(s.a), P(dv), M.w(M.grads, l, 2), 1);
  dx = dx1;  // residual
  rms_bwd<<<blocks_for(T), 256>>>(P(s.x), P(s.r1), P(da), P(dx), T, M.h);
  launch_check("block_backward");
}

// The packed step buffers (step order): token ids, next-token targets (-1 at a sequence's end) and
// per-token loss weights (the sequence's weight over its predicted tokens: a weighted mean).
void synthetic_tokens(std::span<const dcp::planned_sequence> seqs, int V, std::vector<std::int32_t>& ids,
                      std::vector<std::int32_t>& targets, std::vector<float>& weights) {
  for (const auto& s : seqs) {
    std::int32_t tok = std::int32_t(s.id % V);
    const std::int32_t inc = std::int32_t(1 + s.id % 3);  // learnable only with context: attention matters
    for (std::int64_t t = 0; t < s.tokens; ++t) {
      ids.push_back(tok);
      const std::int32_t next = (5 * tok + inc) % V;
      targets.push_back(t + 1 < s.tokens ? next : -1);
      weights.push_back(float(s.loss_weight / double(std::max<std::int64_t>(1, s.tokens - 1))));
      tok = next;
    }
  }
}

// Forward and backward of one micro-step; returns its weighted loss.
float micro_step(model& M, cublasHandle_t blas, const dcp::micro_step<dcp::nccl_comm>& st) {
  step_context c{blas, st.group, st.sp(), 0, 0, nullptr, {}, {}};
  const dcp::micro_batch mb = dcp::make_micro_batch(st.sequences, st.sp(), st.group_rank);
  c.mb = &mb;
  c.T = mb.local_rows;
  c.N = mb.padded_tokens;
  if (c.sp > 1) {
    c.to_heads = dcp::make_ulysses_relayout(mb, M.H, M.h / M.H);
    c.to_tokens = dcp::inverse(c.to_heads);
  }
  std::vector<std::int32_t> ids_h, tgt_h;
  std::vector<float> w_h;
  synthetic_tokens(st.sequences, M.V, ids_h, tgt_h, w_h);
  const ivec ids = dcp::gather_local_rows(mb, ivec(ids_h.begin(), ids_h.end()), 1);
  const ivec tgt = dcp::gather_local_rows(mb, ivec(tgt_h.begin(), tgt_h.end()), 1);
  const fvec wts = dcp::gather_local_rows(mb, fvec(w_h.begin(), w_h.end()), 1);
  const std::int64_t T = c.T, h = M.h;

  // Forward: checkpointed blocks (the first k) keep only their input.
  const int k = st.checkpointed_blocks;
  std::vector<block_acts> acts(static_cast<std::size_t>(M.L));
  fvec x(static_cast<std::size_t>(T * h));
  embed_fwd<<<blocks_for(T * h), 256>>>(thrust::raw_pointer_cast(ids.data()), P(M.params) + M.E, P(x), T, M.h);
  for (int l = 0; l < M.L; ++l) {
    block_acts& s = acts[std::size_t(l)];
    s.resize(T, c.N, M, c.sp);
    thrust::copy(x.begin(), x.end(), s.x.begin());
    block_forward(M, l, c, s, x);
    if (l < k) s.release();
  }
  fvec y(static_cast<std::size_t>(T * h)), r(static_cast<std::size_t>(T)), logits(static_cast<std::size_t>(T) * std::size_t(M.V)), dlogits(logits.size()),
      loss(1, 0.f);
  rms_fwd<<<blocks_for(T), 256>>>(P(x), P(y), P(r), T, M.h);
  gemm(blas, false, false, T, M.V, h, P(y), P(M.params) + M.Wout, P(logits), 0);
  cross_entropy<<<blocks_for(T), 256>>>(P(logits), thrust::raw_pointer_cast(tgt.data()), P(wts), P(dlogits), P(loss),
                                        T, M.V);
  launch_check("cross_entropy");

  // Backward.
  fvec dy(static_cast<std::size_t>(T * h)), dx(static_cast<std::size_t>(T * h), 0.f);
  gemm(blas, false, true, T, h, M.V, P(dlogits), P(M.params) + M.Wout, P(dy), 0);
  gemm(blas, true, false, h, M.V, T, P(y), P(dlogits), P(M.grads) + M.Wout, 1);
  rms_bwd<<<blocks_for(T), 256>>>(P(x), P(r), P(dy), P(dx), T, M.h);
  for (int l = M.L - 1; l >= 0; --l) {
    block_acts& s = acts[std::size_t(l)];
    if (l < k) {  // DCP-intra: recompute the checkpointed block from its saved input
      fvec ignored;
      s.resize(T, c.N, M, c.sp);
      block_forward(M, l, c, s, ignored);
    }
    block_backward(M, l, c, s, dx);
    s = block_acts{};
  }
  embed_bwd<<<blocks_for(T * h), 256>>>(thrust::raw_pointer_cast(ids.data()), P(dx), P(M.grads) + M.E, T, M.h);
  launch_check("embed_bwd");
  return loss[0];
}

int run(int argc, char** argv) {
  options o;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    const char* v = argv[i + 1];
    if (a == "--steps") o.steps = std::atoi(v);
    else if (a == "--blocks") o.blocks = std::atoi(v);
    else if (a == "--hidden") o.hidden = std::atoi(v);
    else if (a == "--heads") o.heads = std::atoi(v);
    else if (a == "--max-len") o.max_len = std::atoll(v);
    else if (a == "--batch-tokens") o.batch_tokens = std::atoll(v);
    else if (a == "--mem-mb") o.mem_mb = std::atof(v);
    else if (a == "--lr") o.lr = float(std::atof(v));
    else if (a == "--seed") o.seed = std::strtoull(v, nullptr, 10);
    else if (a == "--calibrate") o.calibrate = std::atoi(v);
    else throw dcp::error(dcp::errc::invalid_argument, "unknown option " + a +
                          "; options: --steps --blocks --hidden --heads --max-len --batch-tokens --mem-mb --lr --seed "
                          "--calibrate");
  }
  dcp::check(o.hidden % o.heads == 0 && o.hidden / o.heads <= max_head_dim, dcp::errc::invalid_argument,
             [&] { return "hidden / heads must be an integer <= " + std::to_string(max_head_dim); });

#if DCP_HAS_MPI()
  dcp::mpi_environment env(&argc, &argv);
  dcp::mpi_comm boot = dcp::mpi_comm::world();
  const int rank = boot.rank(), ranks = boot.size();
#else
  const int rank = 0, ranks = 1;
#endif
  const int devices = dcp::cuda_device_count();
  dcp::require_cuda_device(devices > 0 ? rank % devices : 0);
#if DCP_HAS_MPI()
  dcp::nccl_comm world = dcp::nccl_comm::init(boot, rank % devices);
#else
  ncclUniqueId id{};
  const ncclResult_t nr = ncclGetUniqueId(&id);
  dcp::check(nr == ncclSuccess, dcp::errc::unsupported,
             [&] { return std::string("ncclGetUniqueId failed: ") + ncclGetErrorString(nr); });
  dcp::nccl_comm world = dcp::nccl_comm::init_rank(id, 1, 0, 0);
#endif
  // The host-memory communicator of the same ranks: plan agreement and calibration go over it.
#if DCP_HAS_MPI()
  dcp::mpi_comm& host = boot;
#else
  dcp::local_comm host(dcp::local_hub::make(1), 0);
#endif

  dcp::transformer_spec spec;
  spec.name = "tiny-lm";
  spec.blocks = o.blocks;
  spec.hidden = o.hidden;
  spec.heads = o.heads;
  spec.mlp_width = 4 * o.hidden;
  spec.attention = dcp::attention_kind::causal;
  dcp::scheduler_options so;
  so.memory_capacity_bytes = o.mem_mb * 1e6;
  so.global_batch_tokens = o.batch_tokens;
  so.seed = o.seed;
  so.calibration.enabled = o.calibrate != 0;
  dcp::scheduler sched(spec, world, so);
  dcp::dataset data;
  std::mt19937_64 rng(o.seed);
  std::uniform_real_distribution<double> u(std::log(double(o.min_len)), std::log(double(o.max_len)));
  for (int i = 0; i < o.sequences; ++i) data.push_back(dcp::make_sequence(i, std::int64_t(std::exp(u(rng)))));
  sched.set_dataset(std::move(data));

  model M(o, o.seed);
  cublasHandle_t blas = nullptr;
  cublas_check(cublasCreate(&blas), "cublasCreate");
  if (rank == 0)
    std::cout << "dcp-train-cuda: " << ranks << " GPU rank(s), " << spec.name << " L=" << o.blocks << " h=" << o.hidden
              << " heads=" << o.heads << ", " << M.size << " parameters, planner memory " << o.mem_mb << " MB/GPU\n";
  for (int it = 0; it < o.steps; ++it) {
    dcp::cuda_event_timer timer;
    timer.start();
    const dcp::global_batch batch = sched.sampler().next();
    const dcp::plan p = sched.plan(batch.sequences, host);  // collective over host when calibrating
    sched.verify(p, host);  // ranks agree on the plan: NCCL moves device memory, so verify over the host
    thrust::fill(M.grads.begin(), M.grads.end(), 0.f);
    float loss = 0;
    int max_sp = 1, recomputed = 0;
    const auto steps = sched.steps_for(p);
    double measured = 0, predicted = 0;
    for (const auto& st : steps) {
      dcp::cuda_event_timer step_timer;
      step_timer.start();
      loss += micro_step(M, blas, st);
      step_timer.stop();
      if (o.calibrate) {
        const double s = step_timer.seconds();
        sched.observe(st, s);
        measured += s, predicted += st.time_s;
      }
      max_sp = std::max(max_sp, st.sp());
      recomputed += st.checkpointed_blocks;
    }
    // Gradients and loss: one sum over all ranks gives the full-batch values.
    world.all_reduce(std::span<float>(P(M.grads), M.grads.size()), dcp::reduce_op::sum);
    fvec lv(1, loss);
    world.all_reduce(std::span<float>(P(lv), 1), dcp::reduce_op::sum);
    ++M.t;
    adam<<<blocks_for(M.size), 256>>>(P(M.params), P(M.grads), P(M.m), P(M.v), M.size, o.lr,
                                     1.f - std::pow(0.9f, float(M.t)), 1.f - std::pow(0.999f, float(M.t)));
    launch_check("adam");
    timer.stop();
    if (rank == 0)
      std::printf("step %3d  loss %.4f  seqs %3zu  plan steps %3zu  rank0 micro-steps %2zu  max sp %d  "
                  "recomputed blocks %2d  efficiency %.3f  %.1f ms\n",
                  it, double(lv[0]), batch.sequences.size(), p.steps.size(), steps.size(), max_sp, recomputed,
                  p.efficiency(), timer.seconds() * 1e3);
    if (rank == 0 && o.calibrate)  // predicted: the plan's model, refitted on the earlier steps
      std::printf("          rank0 micro-steps measured %.2f ms, predicted %.2f ms\n", measured * 1e3, predicted * 1e3);
  }
  cublasDestroy(blas);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const dcp::error& e) {
    std::cerr << "dcp-train-cuda: " << e.what() << "\n";
    const int code = e.code() == dcp::errc::unsupported ? 3 : 1;
#if DCP_HAS_MPI()
    dcp::abort_mpi_job(code);  // the other ranks may wait for this one in a collective: end them too
#endif
    return code;
  }
}
