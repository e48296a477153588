"""Worker of test_torch_attention.py, run under torchrun with 4 ranks (gloo, CPU, float64):
dcp.torch's sequence-parallel attention against a one-process reference written out here, and
what a rank holds for attention's keys and values as the ring grows. Rank 0 writes what every
rank found as JSON to argv[1].

Layouts (sp = u x ring, group rank = rank within the layout's ranks): Ulysses groups of u
consecutive ranks, ring c of ranks c, c + u, ... as StepContext defines them (design section
4.3). Two-rank layouts run on ranks {0, 1} and {2, 3} at once, each pair on its own groups."""

import math
import sys

import torch
import torch.distributed as dist

import dcp.torch as dt
from torch_exactness import report

HEADS, DIM = 4, 8
SEEDS = (0, 1, 2)
TOLERANCE = 1e-10
LAYOUTS = {  # name: (ranks per layout, u, ring)
    "ring2": (2, 1, 2),
    "ulysses2": (2, 2, 1),
    "ring4": (4, 1, 4),
    "ulysses2xring2": (4, 2, 2),
    "ulysses4": (4, 4, 1),
}
MEMORY_LENGTHS = [200, 150, 162]  # 512 tokens: every ring size divides it, and sequences span chunks


def lengths_of(seed):
    """A random packed micro-batch: 2 to 5 sequences of 1 to 40 tokens (some span several chunks)."""
    g = torch.Generator().manual_seed(1000 + seed)
    count = int(torch.randint(2, 6, (1,), generator=g))
    return [int(n) for n in torch.randint(1, 41, (count,), generator=g)]


def tensors(seq_lengths, seed):
    g = torch.Generator().manual_seed(seed)
    total = sum(seq_lengths)
    q, k, v, dout = (torch.randn(total, HEADS, DIM, dtype=torch.float64, generator=g) for _ in range(4))
    return q, k, v, dout


def reference(q, k, v, seq_lengths, causal, dout):
    """One process, each sequence on its own: softmax(q k^T / sqrt(D) + mask) v, and the
    gradients of sum(out * dout)."""
    q, k, v = (x.clone().requires_grad_() for x in (q, k, v))
    out, at = [], 0
    for n in seq_lengths:
        s = torch.einsum("qhd,khd->hqk", q[at:at + n], k[at:at + n]) / math.sqrt(DIM)
        if causal:
            s = s + torch.full((n, n), float("-inf"), dtype=s.dtype).triu(1)
        out.append(torch.einsum("hqk,khd->qhd", s.softmax(-1), v[at:at + n]))
        at += n
    out = torch.cat(out)
    grads = torch.autograd.grad(out, (q, k, v), dout)
    return out.detach(), grads


class Layouts:
    """Every layout's groups, created collectively in one order on every rank."""

    def __init__(self):
        world = dist.get_world_size()
        self.groups = {}
        for name, (size, u, ring) in LAYOUTS.items():
            mine = None
            for first in range(0, world, size):
                ranks = list(range(first, first + size))
                uly = [dist.new_group(ranks[c * u:(c + 1) * u]) if u > 1 else None for c in range(ring)]
                rings = [dist.new_group(ranks[j::u]) if ring > 1 else None for j in range(u)]
                if dist.get_rank() in ranks:
                    me = ranks.index(dist.get_rank())
                    mine = (me, uly[me // u], rings[me % u])
            self.groups[name] = mine

    def context(self, name, seq_begin):
        size, u, ring = LAYOUTS[name]
        me, uly, rng = self.groups[name]
        return dt.StepContext(list(seq_begin), size, ring, me, uly, rng)


def exactness(layouts, name, backend, form, seeds):
    """The largest absolute difference from the reference over seeds and causal / not, of the
    output and of the q, k, v gradients of this rank's shard."""
    worst = {"out": 0.0, "dq": 0.0, "dk": 0.0, "dv": 0.0}
    for seed in seeds:
        seq_lengths = lengths_of(seed)
        seq_begin = [0]
        for n in seq_lengths:
            seq_begin.append(seq_begin[-1] + n)
        q, k, v, dout = tensors(seq_lengths, seed)
        for causal in (True, False):
            ref_out, ref_grads = reference(q, k, v, seq_lengths, causal, dout)
            ctx = layouts.context(name, seq_begin)
            lo, hi = ctx.shard
            mine = [x[lo:hi].clone().requires_grad_() for x in (q, k, v)]
            out = dt.attention(*mine, ctx, causal=causal, backend=backend, ring=form)
            out.backward(dout[lo:hi])
            worst["out"] = max(worst["out"], (out.detach() - ref_out[lo:hi]).abs().max().item() if hi > lo else 0.0)
            for key, x, g in zip(("dq", "dk", "dv"), mine, ref_grads):
                if hi > lo:
                    worst[key] = max(worst[key], (x.grad - g[lo:hi]).abs().max().item())
    return worst


def held_bytes(ctx, form, backend):
    """What this rank holds for attention's keys and values at its peak, measured: the bytes of
    every tensor autograd saves for backward (torch.autograd.graph.saved_tensors_hooks, each
    storage once) plus the largest keys + values the backend is handed at once, forward or
    backward (the chunk a ring hop attends to, or the gathered whole)."""
    g = torch.Generator().manual_seed(7)
    lo, hi = ctx.shard
    q, k, v = (torch.randn(hi - lo, HEADS, DIM, dtype=torch.float64, generator=g).requires_grad_() for _ in range(3))
    largest = [0]
    fn = dt.BACKENDS[backend]

    def watched(q, k, v, *args, **kwargs):
        largest[0] = max(largest[0], k.nbytes + v.nbytes)
        return fn(q, k, v, *args, **kwargs)

    saved = {}

    def pack(t):
        s = t.untyped_storage()
        saved[s.data_ptr()] = s.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = dt.attention(q, k, v, ctx, causal=True, backend=watched, ring=form)
    out.sum().backward()
    return sum(saved.values()) + largest[0]


def main():
    dist.init_process_group("gloo")
    assert dist.get_world_size() == 4, "run with --nproc_per_node 4"
    layouts = Layouts()
    found = {"exactness": {}, "memory": {}}
    # math (its lse carries autograd) and sdpa (its lse does not: the ring's other backward
    # path) on every layout and seed; flex, slower on CPU, on the two ring layouts of 4 ranks.
    for name in LAYOUTS:
        for backend in ("math", "sdpa", "flex"):
            for form in ("p2p", "gather"):
                if form == "gather" and (backend != "math" or LAYOUTS[name][2] == 1):
                    continue
                if backend == "flex" and name not in ("ring4", "ulysses2xring2"):
                    continue
                seeds = SEEDS[:1] if backend == "flex" else SEEDS
                found["exactness"][f"{name}/{backend}/{form}"] = exactness(layouts, name, backend, form, seeds)
    seq_begin = [0]
    for n in MEMORY_LENGTHS:
        seq_begin.append(seq_begin[-1] + n)
    for form in ("p2p", "gather"):
        alone = dt.StepContext(list(seq_begin), 1, 1, 0)
        found["memory"][form] = {"1": held_bytes(alone, form, "flex"),
                                 "2": held_bytes(layouts.context("ring2", seq_begin), form, "flex"),
                                 "4": held_bytes(layouts.context("ring4", seq_begin), form, "flex")}
    report(found, sys.argv[1], every_rank=True)


if __name__ == "__main__":
    main()
