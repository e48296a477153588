"""dcp.torch: what a PyTorch training loop needs to run dcp plans over torch.distributed.

A loop plans each global batch with :class:`dcp.Scheduler`, runs this rank's steps of the plan,
sums the gradients over the world and steps its optimizer::

    import dcp, dcp.torch
    world = dcp.torch.World()                       # after torch.distributed.init_process_group
    sched = dcp.Scheduler(dcp.Cost(spec, gpus=world.size()), world=world)
    groups = dcp.torch.ProcessGroups()
    for ids in dcp.torch.BatchSampler(dcp.Sampler(lengths, budget, seed)):
        plan = sched.plan(lengths[ids], ids=ids)
        sched.verify(plan)                          # every rank holds the same plan
        groups.prepare(sched, plan)                 # collective: the plan's process groups, cached
        optimizer.zero_grad()
        for step in sched.steps_for(plan):
            mb = dcp.torch.micro_batch(step, groups, documents)
            logits = model(mb.tokens, mb.positions, mb.context, step.checkpointed_blocks)
            token_loss = torch.nn.functional.cross_entropy(logits, mb.targets, reduction="none")
            (token_loss * mb.weights).sum().backward()   # weighted, never averaged per rank
        dcp.torch.all_reduce_gradients(model.parameters())  # SUM: the full batch's gradient
        optimizer.step()

Inside the model, :func:`attention` is sequence-parallel attention over the step's ranks: the
DeepSpeed-Ulysses all-to-all to head shards and back over the step's Ulysses group, and under a
ring split (``step.ring > 1``) the key/value all-gather over the ring (the all-gather form of
context parallelism; its backward sums the key/value gradients back to their owners). Each is a
``torch.autograd.Function``, so autograd derives the backward. :func:`checkpoint` recomputes a
block in backward (the plan's ``checkpointed_blocks``), its exchanges included.

The token shard of a step is dcp's (``dcp::shard_of``): the step's sequences back to back, split
into ``sp`` contiguous shards, the first ``tokens % sp`` of them one token longer. Tensor
parallelism inside a unit (``tp > 1``) is the model's own: the groups here are this rank's TP
rank's groups, as the plan names them.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable, Dict, Iterator, List, Optional, Sequence, Tuple

import numpy as np
import torch
import torch.distributed as dist

from . import _dcp

__all__ = [
    "World",
    "ProcessGroups",
    "StepContext",
    "MicroBatch",
    "micro_batch",
    "attention",
    "checkpoint",
    "all_reduce_gradients",
    "BatchSampler",
    "StepTimer",
]


def _error(code: str, message: str) -> _dcp.Error:
    e = _dcp.Error(message)
    e.code = code
    return e


class World:
    """The world as :class:`dcp.Scheduler` sees it: this rank, the world's size, and the host
    all-reduce that ``verify`` and calibration exchange, over a torch.distributed group (default:
    the whole world). Pass it as ``dcp.Scheduler(cost, world=World())``."""

    def __init__(self, group: Optional[dist.ProcessGroup] = None) -> None:
        if not dist.is_initialized():
            raise _error("invalid_argument", "dcp.torch.World: torch.distributed is not initialised; call "
                         "torch.distributed.init_process_group first")
        self.group = group

    def rank(self) -> int:
        return dist.get_rank(self.group)

    def size(self) -> int:
        return dist.get_world_size(self.group)

    def all_reduce(self, array: np.ndarray, op: str) -> np.ndarray:
        a = np.ascontiguousarray(array)
        unsigned = a.dtype == np.uint64  # torch has no uint64: the same bits as int64 (see verify)
        t = torch.from_numpy(a.view(np.int64) if unsigned else a).clone()
        dist.all_reduce(t, op=dist.ReduceOp.SUM if op == "sum" else dist.ReduceOp.MAX, group=self.group)
        out = t.numpy()
        return out.view(np.uint64) if unsigned else out


class ProcessGroups:
    """The process groups of plans' steps, created collectively and cached: ``prepare`` creates
    the groups a plan uses that are not cached yet, in ``Scheduler.process_groups``'s order,
    which every rank computes alike. A group of the whole world reuses the default group."""

    def __init__(self) -> None:
        self._groups: Dict[Tuple[int, ...], dist.ProcessGroup] = {}
        self.created = 0  #: process groups created by ``new_group``

    def prepare(self, scheduler: _dcp.Scheduler, plan: _dcp.Plan) -> None:
        """Collective over the world: every rank must call it with the same plan."""
        world = tuple(range(dist.get_world_size()))
        for ranks in scheduler.process_groups(plan):
            key = tuple(ranks)
            if key in self._groups:
                continue
            if key == world:
                self._groups[key] = dist.group.WORLD
            else:
                self._groups[key] = dist.new_group(list(key))
                self.created += 1

    def __getitem__(self, ranks: Sequence[int]) -> Optional[dist.ProcessGroup]:
        """The group of ``ranks`` (None for one rank, which needs no group)."""
        key = tuple(ranks)
        if len(key) <= 1:
            return None
        if key not in self._groups:
            raise _error("invalid_argument", f"dcp.torch.ProcessGroups: no group of ranks {list(key)} yet; call "
                         "prepare(scheduler, plan) on every rank first (it is collective)")
        return self._groups[key]

    def __len__(self) -> int:
        return len(self._groups)


def _shard(n: int, parts: int, index: int) -> Tuple[int, int]:
    """dcp::shard_of: [begin, end) of shard ``index`` of ``n`` items over ``parts`` ranks."""
    base, extra = divmod(n, parts)
    begin = index * base + min(index, extra)
    return begin, begin + base + (1 if index < extra else 0)


@dataclass
class StepContext:
    """What attention needs of one step on this rank: the packed sequences, this rank's token
    shard, and its Ulysses group and ring."""

    seq_begin: List[int]  #: packed offset of each sequence, then the total
    sp: int
    ring: int
    group_rank: int
    ulysses_group: Optional[dist.ProcessGroup] = None
    ring_group: Optional[dist.ProcessGroup] = None

    @property
    def total(self) -> int:
        return self.seq_begin[-1]

    @property
    def ulysses(self) -> int:
        return self.sp // self.ring

    @property
    def shard(self) -> Tuple[int, int]:
        """This rank's tokens [begin, end) of the packed step."""
        return _shard(self.total, self.sp, self.group_rank)

    def ulysses_sizes(self) -> List[int]:
        """Token counts of this rank's Ulysses group, in group order."""
        u, c = self.ulysses, self.group_rank // self.ulysses
        return [e - b for b, e in (_shard(self.total, self.sp, c * u + j) for j in range(u))]

    def chunk(self, c: Optional[int] = None) -> Tuple[int, int]:
        """Tokens [begin, end) that Ulysses group ``c`` (default: this rank's) holds together."""
        u = self.ulysses
        c = self.group_rank // u if c is None else c
        return _shard(self.total, self.sp, c * u)[0], _shard(self.total, self.sp, (c + 1) * u - 1)[1]


@dataclass
class MicroBatch:
    """This rank's tensors of one step."""

    tokens: torch.Tensor  #: int64 [t]: the inputs of this rank's token shard
    targets: torch.Tensor  #: int64 [t]: the next tokens
    positions: torch.Tensor  #: int64 [t]: each token's position in its sequence
    weights: torch.Tensor  #: [t]: the sequence's loss weight over its length (sum token losses x this)
    context: StepContext = field(repr=False)


def micro_batch(step: _dcp.RankStep, groups: ProcessGroups, documents: Callable[[int], Sequence[int]] | Sequence,
                dtype: torch.dtype = torch.float64, device: Optional[torch.device] = None) -> MicroBatch:
    """This rank's token shard of ``step``: ``documents[id]`` (or ``documents(id)``) holds the
    sequence's tokens followed by its last target (``tokens + 1`` of them)."""
    fetch = documents if callable(documents) else documents.__getitem__
    seq_begin = [0]
    for q in step.sequences:
        seq_begin.append(seq_begin[-1] + q.tokens)
    ctx = StepContext(seq_begin, step.sp, step.ring, step.group_rank,
                      groups[step.ulysses_gpus] if step.ulysses > 1 else None,
                      groups[step.ring_gpus] if step.ring > 1 else None)
    lo, hi = ctx.shard
    tok: List[np.ndarray] = []
    tgt: List[np.ndarray] = []
    pos: List[np.ndarray] = []
    w: List[np.ndarray] = []
    for i, q in enumerate(step.sequences):
        doc = np.asarray(fetch(q.id), dtype=np.int64)
        if doc.shape != (q.tokens + 1,):
            raise _error("mismatch", f"sequence {q.id} has {q.tokens} tokens in the plan but its document holds "
                         f"{doc.size} (need tokens + 1: the inputs and the last target); plan the documents' lengths")
        a, b = max(lo, seq_begin[i]) - seq_begin[i], min(hi, seq_begin[i + 1]) - seq_begin[i]
        if a >= b:
            continue
        tok.append(doc[a:b])
        tgt.append(doc[a + 1:b + 1])
        pos.append(np.arange(a, b, dtype=np.int64))
        w.append(np.full(b - a, q.loss_weight / q.tokens))
    cat = (lambda parts, dt: np.concatenate(parts) if parts else np.zeros(0, dtype=dt))
    return MicroBatch(torch.from_numpy(cat(tok, np.int64)).to(device), torch.from_numpy(cat(tgt, np.int64)).to(device),
                      torch.from_numpy(cat(pos, np.int64)).to(device),
                      torch.from_numpy(cat(w, np.float64)).to(dtype=dtype, device=device), ctx)


# --- the re-layouts --------------------------------------------------------------------------------

def _to_heads(x: torch.Tensor, group: dist.ProcessGroup, sizes: List[int], me: int) -> torch.Tensor:
    """[t_me, H, D] token shard -> [sum(sizes), H / u, D]: every member's tokens, this member's heads."""
    u = len(sizes)
    t, heads, d = x.shape
    hh = heads // u
    send = x.reshape(t, u, hh, d).transpose(0, 1).contiguous()
    out = x.new_empty((sum(sizes), hh, d))
    dist.all_to_all_single(out.view(-1), send.view(-1), [s * hh * d for s in sizes], [t * hh * d] * u, group=group)
    return out


def _to_tokens(x: torch.Tensor, group: dist.ProcessGroup, sizes: List[int], me: int) -> torch.Tensor:
    """The inverse of ``_to_heads``: [sum(sizes), H / u, D] -> [t_me, H, D]."""
    u = len(sizes)
    _, hh, d = x.shape
    t = sizes[me]
    recv = x.new_empty((u, t, hh, d))
    dist.all_to_all_single(recv.view(-1), x.contiguous().view(-1), [t * hh * d] * u, [s * hh * d for s in sizes],
                           group=group)
    return recv.transpose(0, 1).reshape(t, u * hh, d)


class _Ulysses(torch.autograd.Function):
    """The Ulysses re-layout to head shards (``to_heads``) or back; backward runs the inverse
    (a permutation's adjoint is its inverse)."""

    @staticmethod
    def forward(ctx, x, group, sizes, me, to_heads):  # type: ignore[override]
        ctx.args = (group, sizes, me)
        ctx.to_heads = to_heads
        return (_to_heads if to_heads else _to_tokens)(x, group, sizes, me)

    @staticmethod
    def backward(ctx, grad):  # type: ignore[override]
        return (_to_tokens if ctx.to_heads else _to_heads)(grad, *ctx.args), None, None, None, None


class _RingGather(torch.autograd.Function):
    """Every ring member's key/value chunk, in ring order ([sum(sizes), H', D]); backward sums the
    gradient over the ring and keeps this member's chunk (the all-gather's adjoint)."""

    @staticmethod
    def forward(ctx, x, group, sizes, me):  # type: ignore[override]
        ctx.args = (group, sizes, me)
        longest = max(sizes)
        padded = x.new_zeros((longest,) + tuple(x.shape[1:]))
        padded[: x.shape[0]] = x
        parts = [torch.empty_like(padded) for _ in sizes]
        dist.all_gather(parts, padded, group=group)
        return torch.cat([p[:s] for p, s in zip(parts, sizes)], 0)

    @staticmethod
    def backward(ctx, grad):  # type: ignore[override]
        group, sizes, me = ctx.args
        g = grad.contiguous().clone()
        dist.all_reduce(g, group=group)
        begin = sum(sizes[:me])
        return g[begin: begin + sizes[me]], None, None, None


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, ctx: StepContext, causal: bool = True,
              scale: Optional[float] = None) -> torch.Tensor:
    """Sequence-parallel softmax attention of every packed sequence with itself.

    ``q``, ``k``, ``v``: [t, H, D] of this rank's token shard (``ctx.shard``); returns [t, H, D].
    With ``sp > 1`` the step's ranks exchange them (Ulysses, and the ring's key/value all-gather);
    attention never crosses sequences, and with ``causal`` a token sees its predecessors only.
    """
    heads, d = q.shape[1], q.shape[2]
    if scale is None:
        scale = d ** -0.5
    u = ctx.ulysses
    if u > 1:
        if heads % u:
            raise _error("invalid_argument", f"attention: {heads} heads do not split over a Ulysses group of {u} "
                         "ranks; plan with the model's heads (dcp.Model(heads=...))")
        sizes, me = ctx.ulysses_sizes(), ctx.group_rank % u
        qkv = _Ulysses.apply(torch.cat([q, k, v], -1), ctx.ulysses_group, sizes, me, True)
        q, k, v = qkv.split(d, -1)
    lo, hi = ctx.chunk()  # the queries here: this Ulysses group's tokens
    if ctx.ring > 1:
        ring_sizes = [e - b for b, e in (ctx.chunk(c) for c in range(ctx.ring))]
        me = ctx.group_rank // u
        k = _RingGather.apply(k, ctx.ring_group, ring_sizes, me)
        v = _RingGather.apply(v, ctx.ring_group, ring_sizes, me)
        k_lo = 0
    else:
        k_lo = lo  # keys and values are this chunk's own tokens
    out = []
    for i in range(len(ctx.seq_begin) - 1):
        b, e = ctx.seq_begin[i], ctx.seq_begin[i + 1]
        a, z = max(lo, b), min(hi, e)
        if a >= z:
            continue
        qi = q[a - lo: z - lo].transpose(0, 1)  # [H', n_q, D]
        ki = k[b - k_lo: e - k_lo].transpose(0, 1)  # [H', n, D]
        vi = v[b - k_lo: e - k_lo].transpose(0, 1)
        scores = torch.matmul(qi, ki.transpose(1, 2)) * scale
        if causal:
            qpos = torch.arange(a - b, z - b, device=q.device).unsqueeze(1)
            kpos = torch.arange(0, e - b, device=q.device).unsqueeze(0)
            scores = scores.masked_fill(kpos > qpos, float("-inf"))
        out.append(torch.matmul(scores.softmax(-1), vi).transpose(0, 1))
    o = torch.cat(out, 0) if out else q.new_zeros((0,) + tuple(q.shape[1:]))
    if u > 1:
        o = _Ulysses.apply(o, ctx.ulysses_group, ctx.ulysses_sizes(), ctx.group_rank % u, False)
    return o


def checkpoint(function: Callable[..., torch.Tensor], *args) -> torch.Tensor:
    """``function(*args)`` keeping only its inputs; backward runs it again (its exchanges too, on
    every rank of the step alike) and back-propagates through the recomputed graph."""
    from torch.utils.checkpoint import checkpoint as torch_checkpoint
    return torch_checkpoint(function, *args, use_reentrant=False)


def all_reduce_gradients(parameters, group: Optional[dist.ProcessGroup] = None,
                         extra: Optional[torch.Tensor] = None) -> Optional[torch.Tensor]:
    """Sums every parameter's gradient (zero where this rank ran nothing) over ``group`` in one
    all-reduce: with the plan's loss weights the sum is the full batch's gradient. ``extra`` (a
    tensor, e.g. the summed loss) rides along and is returned summed."""
    params = [p for p in parameters if p.requires_grad]
    if not params:
        return extra
    like = params[0]
    flat = [(p.grad if p.grad is not None else torch.zeros_like(p)).reshape(-1) for p in params]
    if extra is not None:
        flat.append(extra.detach().reshape(-1).to(like.dtype))
    buf = torch.cat(flat)
    dist.all_reduce(buf, group=group)
    at = 0
    for p in params:
        g = buf[at: at + p.numel()].view_as(p)
        if p.grad is None:
            p.grad = g.clone()
        else:
            p.grad.copy_(g)
        at += p.numel()
    return buf[at:].reshape(extra.shape) if extra is not None else None


class BatchSampler(torch.utils.data.Sampler):
    """A ``dcp.Sampler`` as a torch batch sampler: each iteration yields one epoch's global
    batches (lists of sequence ids), the same on every rank; ``state_dict`` resumes mid-epoch."""

    def __init__(self, sampler: _dcp.Sampler) -> None:
        self.sampler = sampler

    def __iter__(self) -> Iterator[List[int]]:
        epoch = self.sampler.state()["epoch"]
        while self.sampler.state()["epoch"] == epoch:
            ids = self.sampler.next()
            yield ids.tolist()
            if self.sampler.batch_index >= self.sampler.batches_in_epoch(epoch):
                return

    def __len__(self) -> int:
        return self.sampler.batches_in_epoch(self.sampler.state()["epoch"])

    def state_dict(self) -> dict:
        return self.sampler.state()

    def load_state_dict(self, state: dict) -> None:
        self.sampler.restore(state)


class StepTimer:
    """Times a micro-step for ``Scheduler.observe``: CUDA events on a GPU, the thread's CPU time
    otherwise; on a GPU ``peak_bytes`` is the step's peak allocation (0 on a CPU: not measured)."""

    def __init__(self, device: Optional[torch.device] = None) -> None:
        self.cuda = device is not None and torch.device(device).type == "cuda"
        self.seconds = 0.0
        self.peak_bytes = 0.0

    def __enter__(self) -> "StepTimer":
        if self.cuda:
            torch.cuda.reset_peak_memory_stats()
            self._start, self._end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            self._start.record()
        else:
            self._t0 = time.thread_time()
        return self

    def __exit__(self, *exc) -> None:
        if self.cuda:
            self._end.record()
            self._end.synchronize()
            self.seconds = self._start.elapsed_time(self._end) / 1e3
            self.peak_bytes = float(torch.cuda.max_memory_allocated())
        else:
            self.seconds = time.thread_time() - self._t0
