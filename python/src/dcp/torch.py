"""dcp.torch: what a PyTorch training loop needs to run dcp plans over torch.distributed.

A loop plans each global batch with :class:`dcp.Scheduler`, runs this rank's steps of the plan,
sums the gradients over the world and steps its optimizer::

    import dcp, dcp.torch
    world = dcp.torch.World()                       # after init_process_group; or World(group), World(mesh, dim=)
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
        dcp.torch.all_reduce_gradients(model.parameters(), group=world)  # SUM: the full batch's gradient
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
from datetime import timedelta
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
    "DataLoader",
    "StepTimer",
]


def _error(code: str, message: str) -> _dcp.Error:
    e = _dcp.Error(message)
    e.code = code
    return e


class World:
    """The world as :class:`dcp.Scheduler` sees it: this rank, the world's size, and the host
    all-reduce that ``verify`` and calibration exchange. Pass it as
    ``dcp.Scheduler(cost, world=World(...))``; plan ranks are ranks of this world.

    ``group``: the data x sequence-parallel domain that dcp plans for: None (the whole job), a
    ``ProcessGroup`` (e.g. one replica of ``dist.new_group``), or a ``DeviceMesh`` with ``dim``
    naming its dimension (a 1-D mesh needs none). Every rank of the group constructs its World
    together (it creates the world's own gloo group for the host exchange, so that exchange runs
    on CPU whatever the group's backend). ``timeout``: seconds a host exchange waits for the
    other ranks; past it the call raises ``dcp.Error`` with code ``timeout`` naming it."""

    def __init__(self, group: Optional[object] = None, *, dim: Optional[str] = None, timeout: float = 300.0) -> None:
        if not dist.is_initialized():
            raise _error("invalid_argument", "dcp.torch.World: torch.distributed is not initialised; call "
                         "torch.distributed.init_process_group first")
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)):
            raise TypeError(f"dcp.torch.World: timeout must be a number of seconds, not {type(timeout).__name__}")
        if not timeout > 0 or timeout == float("inf"):
            raise ValueError(f"dcp.torch.World: timeout = {timeout} must be a positive, finite number of seconds")
        self.group: Optional[dist.ProcessGroup] = _domain_of(group, dim)
        self.timeout = float(timeout)
        #: global rank of each rank of this world, in world order
        self.ranks: List[int] = dist.get_process_group_ranks(self.group or dist.group.WORLD)
        if dist.get_rank() not in self.ranks:
            raise _error("invalid_argument", f"dcp.torch.World: global rank {dist.get_rank()} is not in the group's "
                         f"ranks {self.ranks}; only its members construct a World of it")
        self._host = dist.new_group(self.ranks, timeout=timedelta(seconds=self.timeout), backend="gloo",
                                    use_local_synchronization=True)
        self._broken = ""

    def rank(self) -> int:
        return dist.get_rank(self.group)

    def size(self) -> int:
        return dist.get_world_size(self.group)

    def global_rank(self, rank: int) -> int:
        """The global rank (torch.distributed's) of this world's ``rank``."""
        return self.ranks[rank]

    def all_reduce(self, array: np.ndarray, op: str) -> np.ndarray:
        if self._broken:
            raise _error("aborted", f"dcp.torch.World: {self._broken}; the world's host exchange cannot be used "
                         "again: end the job, or build a new World on every rank")
        if op not in ("sum", "max"):
            raise ValueError(f"dcp.torch.World.all_reduce: op = {op!r} must be 'sum' or 'max'")
        a = np.ascontiguousarray(array)
        unsigned = a.dtype == np.uint64  # torch has no uint64: the same bits as int64 (see verify)
        t = torch.from_numpy(a.view(np.int64) if unsigned else a).clone()
        start = time.monotonic()
        try:
            dist.all_reduce(t, op=dist.ReduceOp.SUM if op == "sum" else dist.ReduceOp.MAX, group=self._host)
        except RuntimeError as e:
            waited = time.monotonic() - start
            if "timed out" not in str(e).lower() and waited < self.timeout:
                raise
            self._broken = (f"global rank {dist.get_rank()} waited {waited:.1f} s (timeout {self.timeout:g} s) "
                            f"for the other ranks of its world {self.ranks} in a host all-reduce ({op} of {a.size} "
                            "values); every rank of the world must make this collective call together")
            raise _error("timeout", self._broken) from e
        out = t.numpy()
        return out.view(np.uint64) if unsigned else out

    def __repr__(self) -> str:
        return f"dcp.torch.World(rank {self.rank()} of {self.size()}, global ranks {self.ranks})"


def _domain_of(group: Optional[object], dim: Optional[str]) -> Optional[dist.ProcessGroup]:
    """The ProcessGroup of World's ``group`` (a group, a DeviceMesh and its ``dim``, or None)."""
    from torch.distributed.device_mesh import DeviceMesh

    if isinstance(group, DeviceMesh):
        names = list(group.mesh_dim_names or [])
        if dim is None:
            if group.ndim != 1:
                raise ValueError(f"dcp.torch.World: a {group.ndim}-D DeviceMesh needs dim=, the name of its data x "
                                 f"sequence-parallel dimension (one of {names})")
            return group.get_group()
        if not isinstance(dim, str):
            raise TypeError(f"dcp.torch.World: dim must be a mesh dimension's name (str), not {type(dim).__name__}")
        if dim not in names:
            raise ValueError(f"dcp.torch.World: the DeviceMesh has no dimension {dim!r}; its dimensions are {names}")
        return group.get_group(dim)
    if dim is not None:
        raise ValueError("dcp.torch.World: dim names a dimension of a DeviceMesh; this group is not one")
    if group is None or isinstance(group, dist.ProcessGroup):
        return group
    raise TypeError(f"dcp.torch.World: group must be None, a torch.distributed ProcessGroup or a DeviceMesh, "
                    f"not {type(group).__name__}")


class ProcessGroups:
    """The process groups of plans' steps, created collectively and cached: ``prepare`` creates
    the groups a plan uses that are not cached yet, in ``Scheduler.process_groups``'s order,
    which every rank computes alike. The plan's ranks are ranks of the scheduler's
    :class:`World`; each group is split from the world's group (``torch.distributed.split_group``:
    every rank of the world takes part, none outside it), so replicas and mesh dimensions each
    plan on their own. A group of the whole world reuses the world's group."""

    def __init__(self) -> None:
        self._groups: Dict[Tuple[int, ...], Optional[dist.ProcessGroup]] = {}  # None: this rank is not in it
        self.world: Optional[World] = None  #: the world of the plans, set by the first ``prepare``
        self.created = 0  #: process groups created

    def prepare(self, scheduler: _dcp.Scheduler, plan: _dcp.Plan) -> None:
        """Collective over the scheduler's world: every rank must call it with the same plan."""
        if not isinstance(scheduler, _dcp.Scheduler):
            raise TypeError(f"ProcessGroups.prepare: scheduler must be a dcp.Scheduler, not {type(scheduler).__name__}")
        if not isinstance(plan, _dcp.Plan):
            raise TypeError(f"ProcessGroups.prepare: plan must be a dcp.Plan, not {type(plan).__name__}")
        world = scheduler.world
        if not isinstance(world, World):
            raise _error("invalid_argument", "ProcessGroups.prepare: the scheduler has no dcp.torch.World; build it "
                         "as dcp.Scheduler(cost, world=dcp.torch.World(...))")
        if self.world is None:
            self.world = world
        elif world is not self.world:
            raise _error("mismatch", f"ProcessGroups.prepare: these groups belong to {self.world!r}, the scheduler "
                         f"to {world!r}; keep one ProcessGroups per World")
        everyone = tuple(range(world.size()))
        for ranks in scheduler.process_groups(plan):
            key = tuple(ranks)
            if key in self._groups:
                continue
            if key == everyone:
                self._groups[key] = world.group or dist.group.WORLD
                continue
            self._groups[key] = _split(world, list(key))
            self.created += 1

    def __getitem__(self, ranks: Sequence[int]) -> Optional[dist.ProcessGroup]:
        """The group of ``ranks``, ranks of the world (None for one rank, which needs no group).
        Raises ``dcp.Error`` where this rank is not one of them: its step is another rank's."""
        key = tuple(ranks)
        if self.world is not None and self.world.rank() not in key:
            raise _error("invalid_argument", f"dcp.torch.ProcessGroups: rank {self.world.rank()} of the world "
                         f"(global {dist.get_rank()}) is asked for the group of ranks {list(key)} (global "
                         f"{[self.world.global_rank(r) for r in key]}), which it is not in; run only this "
                         "rank's steps (Scheduler.steps_for(plan))")
        if len(key) <= 1:
            return None
        if key not in self._groups:
            raise _error("invalid_argument", f"dcp.torch.ProcessGroups: no group of ranks {list(key)} yet; call "
                         "prepare(scheduler, plan) on every rank first (it is collective)")
        return self._groups[key]

    def __len__(self) -> int:
        return len(self._groups)


def _split(world: World, ranks: List[int]) -> Optional[dist.ProcessGroup]:
    """The group of the world's ``ranks``, created collectively by every rank of the world (None
    on the ranks outside it)."""
    if hasattr(dist, "split_group"):
        g = dist.split_group(world.group or dist.group.WORLD, split_ranks=[ranks])
        return g if isinstance(g, dist.ProcessGroup) else None
    # Before split_group (torch < 2.6) new_group is collective over the whole job: only a world
    # that is the whole job can create its groups alike on every rank.
    if world.size() != dist.get_world_size():
        raise _error("unsupported", f"dcp.torch: this torch ({torch.__version__}) has no "
                     "torch.distributed.split_group; a World of part of the job needs torch 2.6 or later")
    g = dist.new_group([world.global_rank(r) for r in ranks])
    return g if world.rank() in ranks else None


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
    sequence's tokens followed by its last target (``tokens + 1`` of them).

    A padding pass (a step without sequences: under ZeRO-3/FSDP or expert parallelism a rank
    with fewer micro-steps runs them, so that every rank calls the domain's collectives the same
    number of times) is one token 0 at position 0 with loss weight 0: the model's forward and
    backward run as in any step, so FSDP2's gathers and reduce-scatters fire in the same order on
    every rank, and its gradient is exactly zero. (With no token at all autograd skips the
    hooks of zero-size tensors, and the ranks' collectives fall out of order.)"""
    if not isinstance(step, _dcp.RankStep):
        raise TypeError(f"micro_batch: step must be a dcp.RankStep (Scheduler.steps_for), not {type(step).__name__}")
    if not isinstance(groups, ProcessGroups):
        raise TypeError(f"micro_batch: groups must be dcp.torch.ProcessGroups, not {type(groups).__name__}")
    if groups.world is not None and groups.world.rank() not in step.gpus:
        raise _error("invalid_argument", f"micro_batch: the step runs on ranks {list(step.gpus)} of the world, not on "
                     f"rank {groups.world.rank()} (global {dist.get_rank()}); run only this rank's steps "
                     "(Scheduler.steps_for(plan))")
    if not step.sequences:
        zero = torch.zeros(1, dtype=torch.int64, device=device)
        return MicroBatch(zero, zero.clone(), zero.clone(), torch.zeros(1, dtype=dtype, device=device),
                          StepContext([0, 1], 1, 1, 0, None, None))
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


def all_reduce_gradients(parameters, group: Optional[dist.ProcessGroup | World] = None,
                         extra: Optional[torch.Tensor] = None) -> Optional[torch.Tensor]:
    """Sums every parameter's gradient (zero where this rank ran nothing) over ``group`` (a
    ProcessGroup or a :class:`World`; default: the whole job) in one all-reduce: with the plan's
    loss weights the sum over the plan's world is the full batch's gradient. ``extra`` (a tensor,
    e.g. the summed loss) rides along and is returned summed."""
    if isinstance(group, World):
        group = group.group
    elif group is not None and not isinstance(group, dist.ProcessGroup):
        raise TypeError(f"all_reduce_gradients: group must be a ProcessGroup or a dcp.torch.World, not "
                        f"{type(group).__name__}")
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
    batches (lists of sequence ids), the same on every rank; ``len()`` is the epoch's number of
    batches, ``set_epoch`` starts an epoch over, and ``state_dict`` resumes mid-epoch.

    ``state_dict()`` is the position after the last batch *yielded*. A ``DataLoader`` with
    workers draws batches ahead of the loop (``prefetch_factor`` per worker), so there the
    position of the last batch the loop *received* is ``state_dict(consumed=n)``, n the batches
    of this iteration the loop has taken; :class:`DataLoader` counts them and does that itself.
    """

    def __init__(self, sampler: _dcp.Sampler) -> None:
        self.sampler = sampler
        self._after: List[dict] = []  # the sampler's state after each batch of this iteration
        self._start = sampler.state()

    def __iter__(self) -> Iterator[List[int]]:
        epoch = self.sampler.state()["epoch"]
        self._start, self._after = self.sampler.state(), []
        while self.sampler.state()["epoch"] == epoch:
            ids = self.sampler.next()
            self._after.append(self.sampler.state())
            yield ids.tolist()
            if self.sampler.batch_index >= self.sampler.batches_in_epoch(epoch):
                return

    def __len__(self) -> int:
        return self.sampler.batches_in_epoch(self.sampler.state()["epoch"])

    def set_epoch(self, epoch: int) -> None:
        """The next iteration yields epoch ``epoch`` from its first batch."""
        if not isinstance(epoch, int) or isinstance(epoch, bool) or epoch < 0:
            raise ValueError(f"BatchSampler.set_epoch: epoch = {epoch!r} must be an int >= 0")
        self.sampler.restore({"seed": self.sampler.state()["seed"], "epoch": epoch, "position": 0})
        self._start, self._after = self.sampler.state(), []

    def state_dict(self, consumed: Optional[int] = None) -> dict:
        """The sampler's state after the last batch yielded, or after the first ``consumed``
        batches of the current iteration (what a loop that ran ahead has actually taken)."""
        if consumed is None:
            return self.sampler.state()
        if not isinstance(consumed, int) or isinstance(consumed, bool) or not 0 <= consumed <= len(self._after):
            raise ValueError(
                f"BatchSampler.state_dict: consumed = {consumed!r} must be an int in [0, {len(self._after)}], "
                "the batches of this iteration taken so far")
        return dict(self._start) if consumed == 0 else dict(self._after[consumed - 1])

    def load_state_dict(self, state: dict) -> None:
        self.sampler.restore(state)
        self._start, self._after = self.sampler.state(), []


class DataLoader:
    """A ``torch.utils.data.DataLoader`` over a :class:`BatchSampler` whose ``state_dict`` is the
    position of the batches the loop has received, with any number of workers: the loader's
    workers draw ahead, and resuming from the sampler's own position would skip what they drew.
    Other arguments go to torch's ``DataLoader`` (``batch_sampler`` is this one's)::

        loader = dcp.torch.DataLoader(documents, dcp.torch.BatchSampler(sampler), num_workers=2,
                                      collate_fn=list)
        for batch in loader: ...
        checkpoint["data"] = loader.state_dict()      # later: loader.load_state_dict(...)
    """

    def __init__(self, dataset, batch_sampler: BatchSampler, **kwargs) -> None:
        if not isinstance(batch_sampler, BatchSampler):
            raise TypeError(f"dcp.torch.DataLoader: batch_sampler must be a dcp.torch.BatchSampler, "
                            f"not {type(batch_sampler).__name__}")
        if "batch_size" in kwargs or "sampler" in kwargs or "shuffle" in kwargs:
            raise ValueError("dcp.torch.DataLoader: the BatchSampler makes the batches; leave out batch_size, "
                             "sampler and shuffle")
        self.batch_sampler = batch_sampler
        self._loader = torch.utils.data.DataLoader(dataset, batch_sampler=batch_sampler, **kwargs)
        self._consumed = 0

    def __iter__(self):
        self._consumed = 0
        for batch in self._loader:  # in the sampler's order (torch keeps it: in_order)
            self._consumed += 1
            yield batch

    def __len__(self) -> int:
        return len(self.batch_sampler)

    def state_dict(self) -> dict:
        """The sampler's position after the last batch this loader gave the loop."""
        return self.batch_sampler.state_dict(consumed=self._consumed)

    def load_state_dict(self, state: dict) -> None:
        self.batch_sampler.load_state_dict(state)
        self._consumed = 0


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
