"""dcp.torch's attention: its backends, the Ulysses re-layout and the point-to-point ring.

- Every backend (sdpa, flex; varlen on CUDA) equals the math backend and a dense reference
  written here, in float64 to 1e-10: outputs, log-sum-exps and the gradients of q, k and v, on
  random pieces of sequences (the queries' and keys' offsets in their sequences random too, as a
  ring hands them), causal and not, over several seeds.
- Under torchrun on 4 CPU ranks (gloo, float64; torch_attention.py): the p2p ring on 2 and 4
  ranks, Ulysses alone, and Ulysses 2 x Ring 2 equal a one-process reference to 1e-10, forward
  and backward, with the math, sdpa and flex backends; the all-gather form too.
- Memory: what a rank holds for attention's keys and values (bytes autograd saves for backward
  plus the largest keys + values handed to the backend at once) falls as 1 / r with the p2p
  ring's size r (within 20%), and the all-gather form's does not.
- Errors: an unknown backend or ring form, heads that u does not divide, varlen off CUDA are
  dcp.Error naming the value and the fix.
Skipped, saying why, where torch 2.x or its gloo backend is missing."""

import itertools
import json
import math
import os
import subprocess
import sys
import warnings

import pytest

torch = pytest.importorskip("torch", minversion="2", reason="PyTorch 2.x is not installed for this python "
                            "(scripts/setup-debian installs it into .venv)")

import dcp  # noqa: E402
import dcp.torch as dt  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
TOLERANCE = 1e-10
SEEDS = range(5)
HEADS, DIM = 3, 8

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")  # flex attention's "called without compile"


def random_segments(seed, causal):
    """2 to 4 pieces of 1 to 12 queries and keys each, at random positions of their sequences;
    causal, every query sees at least its piece's first key (the backend contract)."""
    g = torch.Generator().manual_seed(seed)

    def draw(lo, hi):
        return int(torch.randint(lo, hi + 1, (1,), generator=g))

    count = draw(2, 4)
    nq = [draw(1, 12) for _ in range(count)]
    nk = [draw(1, 12) for _ in range(count)]
    k_first = [draw(0, 10) for _ in range(count)]
    q_first = [kf + draw(0, 12) if causal else draw(0, 10) for kf in k_first]
    return dt.Segments(tuple(itertools.accumulate(nq, initial=0)), tuple(itertools.accumulate(nk, initial=0)),
                       tuple(q_first), tuple(k_first))


def dense_reference(q, k, v, segments, causal, scale):
    """softmax(scale q k^T + mask) v and the log-sum-exp, one piece at a time, written out."""
    out, lse = [], []
    for qa, qz, ka, kz, qf, kf in segments.pieces():
        s = torch.einsum("qhd,khd->hqk", q[qa:qz], k[ka:kz]) * scale
        if causal:
            hidden = torch.arange(kf, kf + kz - ka)[None, :] > torch.arange(qf, qf + qz - qa)[:, None]
            s = s.masked_fill(hidden, float("-inf"))
        out.append(torch.einsum("hqk,khd->qhd", s.softmax(-1), v[ka:kz]))
        lse.append(torch.logsumexp(s, -1).transpose(0, 1))
    return torch.cat(out), torch.cat(lse)


def inputs(segments, seed, dtype=torch.float64, device="cpu"):
    g = torch.Generator().manual_seed(100 + seed)
    tq, tk = segments.q_bounds[-1], segments.k_bounds[-1]
    q, k, v, dout = (torch.randn(n, HEADS, DIM, dtype=torch.float64, generator=g) for n in (tq, tk, tk, tq))
    dlse = torch.randn(tq, HEADS, dtype=torch.float64, generator=g)
    return [x.to(dtype=dtype, device=device) for x in (q, k, v, dout, dlse)]


@pytest.mark.parametrize("causal", [True, False], ids=["causal", "full"])
@pytest.mark.parametrize("backend", ["math", "sdpa", "flex"])
def test_backend_equals_math_on_random_pieces(backend, causal):
    fn = dt.BACKENDS[backend]
    for seed in SEEDS:
        segments = random_segments(seed, causal)
        q, k, v, dout, dlse = inputs(segments, seed)
        scale = 0.3 + 0.1 * seed
        leaves = [x.clone().requires_grad_() for x in (q, k, v)]
        ref_out, ref_lse = dense_reference(*leaves, segments, causal, scale)
        ref_out_grads = torch.autograd.grad(ref_out, leaves, dout, retain_graph=True)
        ref_lse_grads = torch.autograd.grad(ref_lse, leaves[:2], dlse)  # lse does not depend on v
        math_out, _ = dt.math_attention(q, k, v, segments, causal, scale)
        out, lse = fn(*leaves, segments, causal, scale, return_lse=True)
        assert out.shape == q.shape and lse.shape == q.shape[:2], (backend, seed)
        assert (out - math_out).abs().max().item() <= TOLERANCE, (backend, seed)
        assert (out - ref_out).abs().max().item() <= TOLERANCE, (backend, seed)
        assert (lse - ref_lse).abs().max().item() <= TOLERANCE, (backend, seed)
        for got, want in zip(torch.autograd.grad(out, leaves, dout, retain_graph=True), ref_out_grads):
            assert (got - want).abs().max().item() <= TOLERANCE, (backend, seed)
        # The contract lets a backend's lse carry autograd or not; math's and flex's do, sdpa's not.
        assert lse.requires_grad == (backend != "sdpa"), backend
        if lse.requires_grad:
            for got, want in zip(torch.autograd.grad(lse, leaves[:2], dlse), ref_lse_grads):
                assert (got - want).abs().max().item() <= TOLERANCE, (backend, seed)
        alone, none = fn(q, k, v, segments, causal, scale)  # return_lse defaults to False
        assert none is None and (alone - out.detach()).abs().max().item() <= TOLERANCE


def packed_batch(seed):
    """A random micro-batch of 2 to 6 sequences of 1 to 30 tokens, packed, as StepContext holds it."""
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(1, 31, (int(torch.randint(2, 7, (1,), generator=g)),), generator=g).tolist()
    return list(itertools.accumulate(lengths, initial=0))


@pytest.mark.parametrize("causal", [True, False], ids=["causal", "full"])
@pytest.mark.parametrize("backend", ["sdpa", "flex"])
def test_attention_with_each_backend_equals_math_on_one_rank(backend, causal):
    for seed in SEEDS:
        seq_begin = packed_batch(seed)
        ctx = dt.StepContext(seq_begin, 1, 1, 0)
        g = torch.Generator().manual_seed(seed)
        q, k, v, dout = (torch.randn(seq_begin[-1], HEADS, DIM, dtype=torch.float64, generator=g) for _ in range(4))
        runs = []
        for name in ("math", backend):
            leaves = [x.clone().requires_grad_() for x in (q, k, v)]
            out = dt.attention(*leaves, ctx, causal=causal, backend=name)
            out.backward(dout)
            runs.append([out.detach()] + [x.grad for x in leaves])
        for want, got in zip(*runs):
            assert (got - want).abs().max().item() <= TOLERANCE, (backend, seed)
        # Never across sequences: a sequence's output is its attention alone.
        b, e = seq_begin[0], seq_begin[1]
        alone = dt.attention(q[b:e], k[b:e], v[b:e], dt.StepContext([0, e - b], 1, 1, 0), causal=causal,
                             backend=backend)
        assert (alone - runs[1][0][b:e]).abs().max().item() <= TOLERANCE


@pytest.mark.gpu
def test_varlen_equals_math_on_cuda():
    if not torch.cuda.is_available():
        pytest.skip("varlen_attn is CUDA-only (flash attention) and this machine has no CUDA device")
    # Flash attention takes float16 / bfloat16 only: compared with math in float64 at bfloat16's
    # precision. Ring-shaped pieces: causal ones end queries and keys at one position, or every
    # key precedes every query.
    for seed in SEEDS:
        for causal in (True, False):
            segments = random_segments(seed, causal)
            if causal:
                segments = dt.Segments(segments.q_bounds, segments.k_bounds, segments.q_first,
                                       tuple(qf + (qz - qa) - (kz - ka) for qa, qz, ka, kz, qf, _ in
                                             segments.pieces()))
                if min(segments.k_first) < 0:
                    continue
            q, k, v, dout, _ = inputs(segments, seed, dtype=torch.bfloat16, device="cuda")
            leaves = [x.clone().requires_grad_() for x in (q, k, v)]
            out, lse = dt.varlen_attention(*leaves, segments, causal, 0.35, return_lse=True)
            grads = torch.autograd.grad(out, leaves, dout)
            wide = [x.double().requires_grad_() for x in (q, k, v)]
            ref_out, ref_lse = dt.math_attention(*wide, segments, causal, 0.35, return_lse=True)
            ref_grads = torch.autograd.grad(ref_out, wide, dout.double())
            assert (out.double() - ref_out).abs().max().item() < 3e-2, seed
            assert (lse.double() - ref_lse).abs().max().item() < 3e-2, seed
            for got, want in zip(grads, ref_grads):
                assert (got.double() - want).abs().max().item() < 1e-1, seed


def test_varlen_off_cuda_names_the_device_and_the_other_backends():
    segments = random_segments(0, False)
    q, k, v, _, _ = inputs(segments, 0)
    with pytest.raises(dcp.Error) as e:
        dt.varlen_attention(q, k, v, segments, False, 0.3)
    assert e.value.code == "unsupported" and "cpu" in str(e.value) and "'flex'" in str(e.value)


def test_wrong_backend_ring_form_or_heads_are_named():
    seq_begin = [0, 5, 9]
    q = torch.zeros(9, HEADS, DIM, dtype=torch.float64)
    one = dt.StepContext(seq_begin, 1, 1, 0)
    with pytest.raises(dcp.Error) as e:
        dt.attention(q, q, q, one, backend="flash9")
    assert e.value.code == "invalid_argument" and "'flash9'" in str(e.value) and "'math'" in str(e.value)
    with pytest.raises(dcp.Error) as e:
        dt.attention(q, q, q, one, ring="allgather")
    assert e.value.code == "invalid_argument" and "'allgather'" in str(e.value) and "'p2p'" in str(e.value)
    # 3 heads over a Ulysses group of 2: refused before any exchange (no group needed to see it).
    with pytest.raises(dcp.Error) as e:
        dt.attention(q, q, q, dt.StepContext(seq_begin, 2, 1, 0))
    assert e.value.code == "invalid_argument" and "3 heads" in str(e.value) and "of 2 ranks" in str(e.value)
    assert "dcp.Model(heads=" in str(e.value)


@pytest.fixture(scope="module")
def distributed():
    """torch_attention.py's findings on each of 4 ranks."""
    if not torch.distributed.is_available() or not torch.distributed.is_gloo_available():
        pytest.skip("this PyTorch has no torch.distributed gloo backend")
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "found.json")
        cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "4", "--master_port",
               str(29500 + os.getpid() % 97), os.path.join(HERE, "torch_attention.py"), out]
        run = subprocess.run(cmd, env=dict(os.environ, OMP_NUM_THREADS="1"), capture_output=True, text=True,
                             timeout=300)
        assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-4000:]
        with open(out) as f:
            return json.load(f)


def test_p2p_ring_and_ulysses_equal_the_reference(distributed):
    assert len(distributed) == 4
    for rank in distributed:
        runs = rank["exactness"]
        for layout in ("ring2", "ring4", "ulysses2", "ulysses2xring2", "ulysses4"):
            for backend in ("math", "sdpa"):
                assert f"{layout}/{backend}/p2p" in runs
        assert {"ring4/flex/p2p", "ulysses2xring2/flex/p2p", "ring2/math/gather",
                "ulysses2xring2/math/gather"} <= set(runs)
        for name, worst in runs.items():
            assert set(worst) == {"out", "dq", "dk", "dv"}
            assert max(worst.values()) <= TOLERANCE, (name, worst)


def test_p2p_ring_memory_falls_as_one_over_ring_size(distributed):
    for rank in distributed:
        p2p, gather = rank["memory"]["p2p"], rank["memory"]["gather"]
        assert p2p["1"] == gather["1"] > 0  # a ring of one is one backend call either way
        for r in (2, 4):
            assert 0.8 / r <= p2p[str(r)] / p2p["1"] <= 1.2 / r, (r, p2p)
            assert gather[str(r)] / gather["1"] > 1.2 / r, (r, gather)  # every member holds the whole K/V
