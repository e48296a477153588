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
DeepSpeed-Ulysses all-to-all to head shards and back over the step's Ulysses group
(:class:`Ulysses`), and under a ring split (``step.ring > 1``) ring attention over the ring
(:class:`RingAttention`: point-to-point, each member holding its own key/value chunk; or the
all-gather form, :class:`RingGather`). Each is a ``torch.autograd.Function`` with its backward
written out, around one of the attention backends (:data:`BACKENDS`: math, sdpa, flex, varlen,
or any callable with the contract of :class:`Segments`). :func:`checkpoint` recomputes a block
in backward (the plan's ``checkpointed_blocks``), its exchanges included.

The token shard of a step is dcp's (``dcp::shard_of``): the step's sequences back to back, split
into ``sp`` contiguous shards, the first ``tokens % sp`` of them one token longer. Tensor
parallelism inside a unit (``tp > 1``) is the model's own: the groups here are this rank's TP
rank's groups, as the plan names them.
"""

from __future__ import annotations

import math
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
    "Segments",
    "BACKENDS",
    "math_attention",
    "sdpa_attention",
    "flex_attention",
    "varlen_attention",
    "Ulysses",
    "ulysses_to_heads",
    "ulysses_to_tokens",
    "RingAttention",
    "RingGather",
    "ring_attention",
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

    Only the documents with tokens in this rank's shard are fetched (and checked): the plan's
    token counts give the shard's bounds, and a sequence's targets are its own document's, its
    last one included, so no shard needs a token of the next document or the next shard.

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
        a, b = max(lo, seq_begin[i]) - seq_begin[i], min(hi, seq_begin[i + 1]) - seq_begin[i]
        if a >= b:
            continue  # another rank's tokens: not fetched
        doc = np.asarray(fetch(q.id), dtype=np.int64)
        if doc.shape != (q.tokens + 1,):
            raise _error("mismatch", f"sequence {q.id} has {q.tokens} tokens in the plan but its document holds "
                         f"{doc.size} (need tokens + 1: the inputs and the last target); plan the documents' lengths")
        tok.append(doc[a:b])
        tgt.append(doc[a + 1:b + 1])
        pos.append(np.arange(a, b, dtype=np.int64))
        w.append(np.full(b - a, q.loss_weight / q.tokens))
    cat = (lambda parts, dt: np.concatenate(parts) if parts else np.zeros(0, dtype=dt))
    return MicroBatch(torch.from_numpy(cat(tok, np.int64)).to(device), torch.from_numpy(cat(tgt, np.int64)).to(device),
                      torch.from_numpy(cat(pos, np.int64)).to(device),
                      torch.from_numpy(cat(w, np.float64)).to(dtype=dtype, device=device), ctx)


# --- attention backends ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Segments:
    """The pieces of sequences one backend call attends within, and the backend contract.

    Piece ``s`` is the query rows ``[q_bounds[s], q_bounds[s + 1])`` and the key rows
    ``[k_bounds[s], k_bounds[s + 1])``: one sequence's tokens, its first query at position
    ``q_first[s]`` of that sequence and its first key at ``k_first[s]``. Without a ring both are a
    sequence's whole run of tokens at position 0; a ring hop hands a chunk of queries a chunk of
    keys of the same sequence further back, hence the offsets.

    A backend is a callable ``backend(q, k, v, segments, causal, scale, return_lse=False) ->
    (out, lse)``. q: [Tq, H, D], k and v: [Tk, H, D], token-major and packed without padding (Tq =
    ``q_bounds[-1]``, Tk = ``k_bounds[-1]``). Laws: piece s of q attends to piece s of k only,
    never across pieces; with ``causal`` a query at position p sees the keys at positions <= p;
    scores are ``scale * q . k``. Returns out [Tq, H, D], carrying autograd to q, k and v, and,
    when ``return_lse``, lse [Tq, H]: each (query, head)'s natural log-sum-exp of its scores over
    the keys it sees, float32 or wider, with or without autograd (else None). In every call
    dcp.torch makes each query sees at least one key, and a causal call's pieces either all end
    their queries and keys at the same position (flash attention's bottom-right causal mask) or
    all have every key before every query."""

    q_bounds: Tuple[int, ...]  #: S + 1 row offsets into q (``cu_seqlens_q``), from 0 to Tq
    k_bounds: Tuple[int, ...]  #: S + 1 row offsets into k and v (``cu_seqlens_k``), from 0 to Tk
    q_first: Tuple[int, ...]  #: position in its sequence of each piece's first query
    k_first: Tuple[int, ...]  #: position in its sequence of each piece's first key

    def __len__(self) -> int:
        return len(self.q_first)

    def pieces(self) -> Iterator[Tuple[int, int, int, int, int, int]]:
        """(q begin, q end, k begin, k end, q first position, k first position) of each piece."""
        for s in range(len(self)):
            yield (self.q_bounds[s], self.q_bounds[s + 1], self.k_bounds[s], self.k_bounds[s + 1], self.q_first[s],
                   self.k_first[s])


def _segments(seq_begin: Sequence[int], q_span: Tuple[int, int], k_span: Tuple[int, int],
              causal: bool) -> Optional[Tuple[int, int, int, int, Segments]]:
    """What the queries of step tokens ``q_span`` see of the keys of ``k_span`` (both [begin, end)
    of the packed step): (q rows begin, end, k rows begin, end, the Segments of those rows), rows
    relative to the spans, or None where no query sees a key. Causal, a piece's keys past its last
    query are cut: hidden anyway, and so every causal piece ends its queries and keys at the same
    position (the bottom-right alignment of flash attention's causal mask)."""
    lo, hi = q_span
    klo, khi = k_span
    qb, kb, qf, kf = [0], [0], [], []
    rows = None
    for b, e in zip(seq_begin, seq_begin[1:]):
        a, z = max(lo, b), min(hi, e)
        ka, kz = max(klo, b), min(khi, e)
        if causal:
            kz = min(kz, z)
        if a >= z or ka >= kz:
            continue
        if rows is None:
            rows = [a - lo, z - lo, ka - klo, kz - klo]
        elif rows[1] != a - lo or rows[3] != ka - klo:
            raise AssertionError("dcp.torch: the pieces of a span are not adjacent")  # spans are contiguous
        rows[1], rows[3] = z - lo, kz - klo
        qb.append(qb[-1] + z - a)
        kb.append(kb[-1] + kz - ka)
        qf.append(a - b)
        kf.append(ka - b)
    if rows is None:
        return None
    return rows[0], rows[1], rows[2], rows[3], Segments(tuple(qb), tuple(kb), tuple(qf), tuple(kf))


def _lse_dtype(dtype: torch.dtype) -> torch.dtype:
    return torch.promote_types(dtype, torch.float32)


def _causal_hidden(q_first: int, nq: int, k_first: int, nk: int, device: torch.device) -> torch.Tensor:
    """[nq, nk] True where the key's position is past the query's."""
    qpos = torch.arange(q_first, q_first + nq, device=device).unsqueeze(1)
    kpos = torch.arange(k_first, k_first + nk, device=device).unsqueeze(0)
    return kpos > qpos


def math_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, segments: Segments, causal: bool,
                   scale: float, return_lse: bool = False) -> Tuple[torch.Tensor, Optional[torch.Tensor]]:
    """The reference backend (``backend="math"``): per piece one batched matmul of the scores
    [H, nq, nk], the mask, a softmax and a matmul with the values. Any device and dtype; its lse
    carries autograd. Memory: the piece's whole score matrix."""
    out, lse = [], []
    for qa, qz, ka, kz, qf, kf in segments.pieces():
        qi = q[qa:qz].transpose(0, 1)  # [H, nq, D]
        ki = k[ka:kz].transpose(0, 1)
        vi = v[ka:kz].transpose(0, 1)
        scores = torch.matmul(qi, ki.transpose(1, 2)) * scale
        if causal:
            scores = scores.masked_fill(_causal_hidden(qf, qz - qa, kf, kz - ka, q.device), float("-inf"))
        out.append(torch.matmul(scores.softmax(-1), vi).transpose(0, 1))
        if return_lse:
            lse.append(torch.logsumexp(scores.to(_lse_dtype(scores.dtype)), -1).transpose(0, 1))
    o = torch.cat(out, 0) if out else q.new_zeros((0,) + tuple(q.shape[1:]))
    if not return_lse:
        return o, None
    return o, torch.cat(lse, 0) if lse else q.new_zeros((0, q.shape[1]), dtype=_lse_dtype(q.dtype))


def sdpa_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, segments: Segments, causal: bool,
                   scale: float, return_lse: bool = False) -> Tuple[torch.Tensor, Optional[torch.Tensor]]:
    """``backend="sdpa"``: ``torch.nn.functional.scaled_dot_product_attention`` on each piece.
    Any device and dtype torch's SDPA takes. Its lse has no autograd: SDPA returns none, so it is
    the log-sum-exp of the piece's scores computed beside it (materialised, without autograd),
    asked only by the ring."""
    import torch.nn.functional as F

    # One call per piece rather than one call with a block-diagonal mask over the micro-batch:
    # that mask is [Tq, Tk], the quadratic memory sequence parallelism exists to avoid, and an
    # explicit mask rules out the flash kernel on CUDA. Most pieces need no mask (is_causal on a
    # square diagonal block: a whole sequence, or a ring chunk against itself; nothing where every
    # key precedes the queries); the others (the all-gather form's chunk of queries against its
    # sequence's keys from the start) take a boolean mask of that piece alone.
    out, lse = [], []
    for qa, qz, ka, kz, qf, kf in segments.pieces():
        nq, nk = qz - qa, kz - ka
        qi, ki, vi = (x.transpose(0, 1).unsqueeze(0) for x in (q[qa:qz], k[ka:kz], v[ka:kz]))
        mask, square = None, False
        if causal and kf + nk - 1 > qf:  # some key is past some query
            square = qf == kf and nq == nk
            if not square:
                mask = ~_causal_hidden(qf, nq, kf, nk, q.device)
        o = F.scaled_dot_product_attention(qi, ki, vi, attn_mask=mask, is_causal=square, scale=scale)
        out.append(o[0].transpose(0, 1))
        if return_lse:
            with torch.no_grad():
                scores = torch.matmul(qi[0], ki[0].transpose(1, 2)).to(_lse_dtype(q.dtype)) * scale
                if causal:
                    scores = scores.masked_fill(_causal_hidden(qf, nq, kf, nk, q.device), float("-inf"))
                lse.append(torch.logsumexp(scores, -1).transpose(0, 1))
    o = torch.cat(out, 0) if out else q.new_zeros((0,) + tuple(q.shape[1:]))
    if not return_lse:
        return o, None
    return o, torch.cat(lse, 0) if lse else q.new_zeros((0, q.shape[1]), dtype=_lse_dtype(q.dtype))


def _token_table(bounds: Sequence[int], first: Sequence[int], device: torch.device) -> Tuple[torch.Tensor, ...]:
    """Each row's piece and position in its sequence."""
    lengths = torch.tensor([e - b for b, e in zip(bounds, bounds[1:])], device=device)
    piece = torch.repeat_interleave(torch.arange(len(first), device=device), lengths)
    start = torch.tensor(list(bounds[:-1]), dtype=torch.int64, device=device)
    pos = torch.arange(bounds[-1], device=device) - start[piece] + torch.tensor(list(first), device=device)[piece]
    return piece, pos


def flex_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, segments: Segments, causal: bool,
                   scale: float, return_lse: bool = False) -> Tuple[torch.Tensor, Optional[torch.Tensor]]:
    """``backend="flex"``: ``torch.nn.attention.flex_attention.flex_attention`` over the whole
    call at once, with a document mask built from the segments (same piece, and causal: key
    position <= query position) as its ``BlockMask``. Its lse carries autograd.

    On CUDA it is torch's (compiled) flex attention. On CPU the public function refuses inputs
    that require grad (torch 2.15: "FlexAttention does not support backward on CPU"); there this
    calls the flex attention operator under it (``torch._higher_order_ops.flex_attention``)
    eagerly, whose CPU forward and backward are torch's dense implementation: exact in float64,
    no compile, but the scores of the whole call are materialised."""
    from torch.nn.attention.flex_attention import AuxRequest, create_block_mask
    from torch.nn.attention.flex_attention import flex_attention as flex

    tq, tk = q.shape[0], k.shape[0]
    if tq == 0 or tk == 0:
        o = q.new_zeros(q.shape)
        return o, (q.new_full((tq, q.shape[1]), float("-inf"), dtype=_lse_dtype(q.dtype)) if return_lse else None)
    q_piece, q_pos = _token_table(segments.q_bounds, segments.q_first, q.device)
    k_piece, k_pos = _token_table(segments.k_bounds, segments.k_first, q.device)

    def document(b, h, qi, ki):
        same = q_piece[qi] == k_piece[ki]
        return same & (k_pos[ki] <= q_pos[qi]) if causal else same

    block_mask = create_block_mask(document, None, None, tq, tk, device=q.device)
    qq, kk, vv = (x.transpose(0, 1).unsqueeze(0) for x in (q, k, v))  # [1, H, T, D]
    if q.device.type == "cpu":
        # The public function refuses CPU inputs that require grad, and without them compiles a
        # graph per shape; the operator under it runs eagerly on CPU, forward and backward.
        from torch._higher_order_ops.flex_attention import flex_attention as flex_operator
        from torch.nn.attention.flex_attention import _apply_kernel_options

        options = _apply_kernel_options(qq, kk, vv, False, None, AuxRequest(lse=True))
        o, lse2, _ = flex_operator(qq, kk, vv, _identity_score, block_mask.as_tuple(), scale, options)
        lse = lse2 * math.log(2.0)  # the operator's dense path keeps base-2 statistics
    else:
        o, aux = flex(qq, kk, vv, block_mask=block_mask, scale=scale, return_aux=AuxRequest(lse=True))
        lse = aux.lse
    out = o[0].transpose(0, 1)
    return out, (lse[0].transpose(0, 1) if return_lse else None)


def _identity_score(score, b, h, q_index, k_index):
    return score


def varlen_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, segments: Segments, causal: bool,
                     scale: float, return_lse: bool = False) -> Tuple[torch.Tensor, Optional[torch.Tensor]]:
    """``backend="varlen"``: torch's ``torch.nn.attention.varlen.varlen_attn`` (flash or cuDNN
    attention over ``cu_seqlens``) on the packed [T, H, D] tensors, no padding. CUDA only, in
    float16 or bfloat16 (the flash kernels' types). Its causal mask is flash attention's
    bottom-right one, so causal pieces must end their queries and keys at the same position
    (every call dcp.torch makes does), or have every key before every query. Its lse has no
    autograd."""
    from torch.nn.attention.varlen import AuxRequest, varlen_attn

    if q.device.type != "cuda":
        raise _error("unsupported", f"varlen_attention: torch's varlen_attn runs on CUDA only, and q is on "
                     f"{q.device}; use backend 'flex', 'sdpa' or 'math' there")
    pieces = list(segments.pieces())
    if not pieces:
        o = q.new_zeros(q.shape)
        return o, (q.new_full((0, q.shape[1]), float("-inf"), dtype=torch.float32) if return_lse else None)
    masked = causal
    if causal:
        if all(kf + kz - ka - 1 <= qf for qa, qz, ka, kz, qf, kf in pieces):
            masked = False  # every key at or before every query: nothing to hide
        elif not all(qf + qz - qa == kf + kz - ka for qa, qz, ka, kz, qf, kf in pieces):
            raise _error("unsupported", "varlen_attention: a causal piece whose last query and last key are at "
                         f"different positions (q first {segments.q_first}, k first {segments.k_first}, q rows "
                         f"{segments.q_bounds}, k rows {segments.k_bounds}) needs a mask flash attention cannot "
                         "express; cut the keys past each piece's last query, or use backend 'flex'")
    cu_q = torch.tensor(segments.q_bounds, dtype=torch.int32, device=q.device)
    cu_k = torch.tensor(segments.k_bounds, dtype=torch.int32, device=q.device)
    max_q = max(qz - qa for qa, qz, *_ in pieces)
    max_k = max(kz - ka for _, _, ka, kz, *_ in pieces)
    out, lse = varlen_attn(q.contiguous(), k.contiguous(), v.contiguous(), cu_q, cu_k, max_q, max_k,
                           return_aux=AuxRequest(lse=True), scale=scale,
                           window_size=(-1, 0) if masked else (-1, -1))
    return out, (lse.transpose(0, 1) if return_lse else None)


#: The built-in backends by name (``attention(..., backend=name)``).
BACKENDS: Dict[str, Callable[..., Tuple[torch.Tensor, Optional[torch.Tensor]]]] = {
    "math": math_attention,
    "sdpa": sdpa_attention,
    "flex": flex_attention,
    "varlen": varlen_attention,
}


def _backend_of(backend) -> Callable[..., Tuple[torch.Tensor, Optional[torch.Tensor]]]:
    if callable(backend):
        return backend
    if isinstance(backend, str) and backend in BACKENDS:
        return BACKENDS[backend]
    raise _error("invalid_argument", f"attention: unknown backend {backend!r}; name one of {sorted(BACKENDS)} or "
                 "pass a callable backend(q, k, v, segments, causal, scale, return_lse) (see dcp.torch.Segments)")


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


class Ulysses(torch.autograd.Function):
    """The DeepSpeed-Ulysses re-layout over a Ulysses group of u ranks, as an autograd function.

    ``Ulysses.apply(x, group, sizes, me, to_heads)``: with ``to_heads``, ``x`` is this member's
    token shard [sizes[me], H, D] and the result [sum(sizes), H / u, D] holds every member's
    tokens (in member order) for heads ``me * H / u ..``; without, the inverse. One
    ``all_to_all_single``; uneven ``sizes`` need no padding. It is a permutation of the group's
    elements, so its backward is the inverse re-layout (a permutation's adjoint is its inverse).
    Any attention runs between the two directions (:func:`attention` does)."""

    @staticmethod
    def forward(ctx, x, group, sizes, me, to_heads):  # type: ignore[override]
        ctx.args = (group, sizes, me)
        ctx.to_heads = to_heads
        return (_to_heads if to_heads else _to_tokens)(x, group, sizes, me)

    @staticmethod
    def backward(ctx, grad):  # type: ignore[override]
        return (_to_tokens if ctx.to_heads else _to_heads)(grad, *ctx.args), None, None, None, None


def ulysses_to_heads(x: torch.Tensor, ctx: StepContext) -> torch.Tensor:
    """This rank's token shard [t, H, D] -> its Ulysses group's tokens (``ctx.chunk()``) for its
    H / u heads (``Ulysses`` over ``ctx.ulysses_group``); ``x`` unchanged where u = 1."""
    u = ctx.ulysses
    if u == 1:
        return x
    _check_heads(x.shape[1], u)
    return Ulysses.apply(x, ctx.ulysses_group, ctx.ulysses_sizes(), ctx.group_rank % u, True)


def ulysses_to_tokens(x: torch.Tensor, ctx: StepContext) -> torch.Tensor:
    """The inverse of :func:`ulysses_to_heads`."""
    u = ctx.ulysses
    if u == 1:
        return x
    return Ulysses.apply(x, ctx.ulysses_group, ctx.ulysses_sizes(), ctx.group_rank % u, False)


def _check_heads(heads: int, u: int) -> None:
    if heads % u:
        raise _error("invalid_argument", f"attention: {heads} heads do not split over a Ulysses group of {u} "
                     "ranks; plan with the model's heads (dcp.Model(heads=...)) so that u divides them")


class RingGather(torch.autograd.Function):
    """The all-gather form of ring attention's key/value exchange, kept for comparison with
    :class:`RingAttention`: ``RingGather.apply(x, group, sizes, me)`` is every ring member's
    chunk of ``x`` in ring order ([sum(sizes), H', D]), so every member holds the whole step's
    keys and values. Backward sums the gradient over the ring and keeps this member's chunk (the
    all-gather's adjoint)."""

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


def _exchange(send: torch.Tensor, recv: torch.Tensor, group: dist.ProcessGroup, to: int, frm: int) -> List:
    """Posts ``send`` to global rank ``to`` and ``recv`` from global rank ``frm`` (one
    ``batch_isend_irecv``); the caller waits. Every member posts its exchanges in the same order,
    which is what pairs them (NCCL ignores tags)."""
    return dist.batch_isend_irecv([dist.P2POp(dist.isend, send, to, group), dist.P2POp(dist.irecv, recv, frm, group)])


def _wait(requests: List) -> None:
    for r in requests:
        r.wait()


def _merge(out: torch.Tensor, lse: torch.Tensor, part: torch.Tensor, part_lse: torch.Tensor) -> None:
    """Folds a partial result into the running one in place: the online softmax
    (Milakov and Gimelshein 2018; Ring Attention, Liu et al. 2023, section 3): weights exp(lse_i -
    lse), lse the log-sum-exp of both. Rows not yet seen hold lse -inf and take the part whole."""
    merged = torch.logaddexp(lse, part_lse)
    out.mul_(torch.exp(lse - merged).unsqueeze(-1)).add_(part * torch.exp(part_lse - merged).unsqueeze(-1))
    lse.copy_(merged)


def _hop_grads(backend, q, k, v, segments, causal, scale, out, lse, dout):
    """The gradients of q, k, v through one ring hop's partial attention (out_h, lse_h), given the
    merged ``out`` and ``lse`` of its rows and their gradient ``dout``. The merged output is
    sum_h w_h out_h with w_h = exp(lse_h - lse), so out_h's gradient is w_h dout and lse_h's is
    w_h (dout . (out_h - out)). A backend whose lse carries autograd takes both in one
    vector-Jacobian product; for one whose lse does not, lse_h's term is added from the identities
    d lse_i / d q_i = scale sum_j P_ij k_j and d lse_i / d k_j = scale P_ij q_i: one more call of
    the backend with the keys as values, and the values' gradient of that call."""
    acc = _lse_dtype(q.dtype)
    with torch.enable_grad():
        qq, kk, vv = (x.detach().requires_grad_() for x in (q, k, v))
        part, part_lse = backend(qq, kk, vv, segments, causal, scale, return_lse=True)
        w = torch.exp(part_lse.detach().to(acc) - lse)
        g_out = (w.unsqueeze(-1) * dout.to(acc)).to(part.dtype)
        g_lse = w * (dout.to(acc) * (part.detach().to(acc) - out)).sum(-1)
        if part_lse.requires_grad:
            return torch.autograd.grad((part, part_lse), (qq, kk, vv), (g_out, g_lse.to(part_lse.dtype)))
        dq, dk, dv = torch.autograd.grad(part, (qq, kk, vv), g_out)
        keys = k.detach().requires_grad_()
        seen, _ = backend(q.detach(), k.detach(), keys, segments, causal, scale, return_lse=False)
        coef = (scale * g_lse).unsqueeze(-1)
        dk_lse, = torch.autograd.grad(seen, keys, (coef * q.to(acc)).to(seen.dtype))
    return dq + (coef * seen.to(acc)).to(dq.dtype), dk + dk_lse, dv


class RingAttention(torch.autograd.Function):
    """Ring attention over point-to-point exchanges (Ring Attention, Liu et al. 2023): each ring
    member keeps only its own key/value chunk and passes chunks around the ring.

    ``RingAttention.apply(q, k, v, seq_begin, spans, group, backend, causal, scale)``: ``q``, ``k``,
    ``v`` [t, H', D] are this member's chunk, the step's tokens ``spans[me]`` (``me`` its rank in
    ``group``, the ring; ``spans`` every member's [begin, end) of the packed step, in ring order,
    contiguous and ascending); ``seq_begin`` the packed offset of each sequence, then the total.
    Returns the chunk's attention output [t, H', D]: every query against every key of its own
    sequence in the whole step (causal: up to its position), never across sequences.

    Forward: r - 1 hops; at each the member posts its current key/value chunk to the next member
    and receives the previous one's (``batch_isend_irecv``) while ``backend`` attends its queries
    to the chunk it holds; the partial outputs merge by their log-sum-exps (online softmax).
    Causal, a chunk after the queries' is skipped (passed on, not computed). Saved for backward:
    the chunk's q, k, v, the merged output and its log-sum-exp, nothing of other chunks.

    Backward: the chunks go round again; each hop recomputes its partial attention and its
    gradients (:func:`_hop_grads`, exact: the saved log-sum-exp gives each hop's share), adds the
    queries' gradient here and the keys'/values' into an accumulator that travels with the chunk,
    and a last hop hands each accumulator to the chunk's owner. At most two chunks' keys and
    values, and two accumulators, are alive on a member at once."""

    @staticmethod
    def forward(ctx, q, k, v, seq_begin, spans, group, backend, causal, scale):  # type: ignore[override]
        r = len(spans)
        me = dist.get_rank(group) if r > 1 else 0
        ctx.ring = (list(seq_begin), [tuple(s) for s in spans], group, me, backend, causal, scale)
        acc = _lse_dtype(q.dtype)
        out = torch.zeros(q.shape, dtype=acc, device=q.device)
        lse = torch.full(q.shape[:2], float("-inf"), dtype=acc, device=q.device)
        d = k.shape[-1]
        kv = torch.cat([k, v], -1)
        to, frm = _neighbours(group, me, r)
        for hop in range(r):
            holder = (me - hop) % r  # whose chunk this member holds at this hop
            pending = []
            if hop + 1 < r:
                nxt = kv.new_empty((_size(spans[(holder - 1) % r]),) + tuple(kv.shape[1:]))
                pending = _exchange(kv, nxt, group, to, frm)
            seen = _segments(seq_begin, spans[me], spans[holder], causal)
            if seen is not None:
                qa, qz, ka, kz, segs = seen
                part, part_lse = backend(q[qa:qz], kv[ka:kz, :, :d], kv[ka:kz, :, d:], segs, causal, scale,
                                         return_lse=True)
                _merge(out[qa:qz], lse[qa:qz], part.to(acc), part_lse.to(acc))
            if pending:
                _wait(pending)
                kv = nxt
        ctx.save_for_backward(q, k, v, out, lse)
        return out.to(q.dtype)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, dout):  # type: ignore[override]
        q, k, v, out, lse = ctx.saved_tensors
        seq_begin, spans, group, me, backend, causal, scale = ctx.ring
        r = len(spans)
        acc = _lse_dtype(q.dtype)
        d = k.shape[-1]
        kv = torch.cat([k, v], -1)
        dq = torch.zeros(q.shape, dtype=acc, device=q.device)
        to, frm = _neighbours(group, me, r)
        carried: Optional[torch.Tensor] = None  # the accumulator received for this hop's chunk
        handed: List = []  # the last accumulator exchange posted, and its buffers
        for hop in range(r):
            holder = (me - hop) % r
            pending = []
            if hop + 1 < r:
                nxt = kv.new_empty((_size(spans[(holder - 1) % r]),) + tuple(kv.shape[1:]))
                pending = _exchange(kv, nxt, group, to, frm)
            grads = torch.zeros(kv.shape, dtype=acc, device=kv.device)
            seen = _segments(seq_begin, spans[me], spans[holder], causal)
            if seen is not None:
                qa, qz, ka, kz, segs = seen
                gq, gk, gv = _hop_grads(backend, q[qa:qz], kv[ka:kz, :, :d], kv[ka:kz, :, d:], segs, causal, scale,
                                        out[qa:qz], lse[qa:qz], dout[qa:qz])
                dq[qa:qz] += gq
                grads[ka:kz, :, :d] += gk
                grads[ka:kz, :, d:] += gv
            if handed:
                _wait(handed[0])
                carried = handed[1]
            if carried is not None:
                grads += carried
            if r > 1:
                # To the next member, which holds this chunk at its next hop; after the last hop,
                # the next member is the chunk's owner and this member receives its own.
                back = grads.new_empty((_size(spans[(holder - 1) % r]),) + tuple(grads.shape[1:]))
                handed = [_exchange(grads, back, group, to, frm), back, grads]
            else:
                carried = grads
            if pending:
                _wait(pending)
                kv = nxt
        if r > 1:
            _wait(handed[0])
            carried = handed[1]
        dkv = carried.to(k.dtype)
        return dq.to(q.dtype), dkv[..., :d], dkv[..., d:], None, None, None, None, None, None


def _size(span: Tuple[int, int]) -> int:
    return span[1] - span[0]


def _neighbours(group: Optional[dist.ProcessGroup], me: int, r: int) -> Tuple[int, int]:
    """Global ranks of the next and the previous ring member."""
    if r == 1:
        return -1, -1
    return dist.get_global_rank(group, (me + 1) % r), dist.get_global_rank(group, (me - 1) % r)


def ring_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, ctx: StepContext, causal: bool = True,
                   scale: Optional[float] = None, backend="math", form: str = "p2p") -> torch.Tensor:
    """Attention of this rank's Ulysses group chunk (``ctx.chunk()``: q, k, v [t, H', D], the
    head shard after :func:`ulysses_to_heads`) over its ring (``ctx.ring_group``, members the
    chunks ``ctx.chunk(c)``, c = 0 .. ring - 1). ``form="p2p"``: :class:`RingAttention`, each
    member holding one chunk of keys and values; ``form="gather"``: :class:`RingGather` of the
    keys and values, then one backend call (every member holds the whole step's). With a ring of
    one it is the backend on the chunk alone."""
    fn = _backend_of(backend)
    if form not in ("p2p", "gather"):
        raise _error("invalid_argument", f"ring_attention: form = {form!r}; use 'p2p' (point-to-point ring) or "
                     "'gather' (the all-gather form)")
    if scale is None:
        scale = q.shape[-1] ** -0.5
    span = ctx.chunk()
    if ctx.ring > 1 and dist.get_rank(ctx.ring_group) != ctx.group_rank // ctx.ulysses:
        raise _error("invalid_argument", f"ring_attention: this rank is member {dist.get_rank(ctx.ring_group)} of "
                     f"its ring group but holds chunk {ctx.group_rank // ctx.ulysses}; create the ring group with "
                     "its ranks in chunk order (ProcessGroups does)")
    if ctx.ring > 1 and form == "p2p":
        spans = [ctx.chunk(c) for c in range(ctx.ring)]
        return RingAttention.apply(q, k, v, ctx.seq_begin, spans, ctx.ring_group, fn, causal, scale)
    k_span = span
    if ctx.ring > 1:
        sizes = [_size(ctx.chunk(c)) for c in range(ctx.ring)]
        d = k.shape[-1]
        kv = RingGather.apply(torch.cat([k, v], -1), ctx.ring_group, sizes, ctx.group_rank // ctx.ulysses)
        k, v = kv[..., :d], kv[..., d:]
        k_span = (0, ctx.total)
    seen = _segments(ctx.seq_begin, span, k_span, causal)
    if seen is None:
        # An empty chunk: zeros still tied to the inputs, so that its backward runs the exchanges too.
        return q.new_zeros(q.shape) + 0 * (q.sum() + k.sum() + v.sum())
    qa, qz, ka, kz, segs = seen
    o, _ = fn(q[qa:qz], k[ka:kz], v[ka:kz], segs, causal, scale, return_lse=False)
    if qa == 0 and qz == q.shape[0]:
        return o
    return torch.cat([o.new_zeros((qa,) + tuple(o.shape[1:])), o, o.new_zeros((q.shape[0] - qz,) + tuple(o.shape[1:]))])


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, ctx: StepContext, causal: bool = True,
              scale: Optional[float] = None, backend="math", ring: str = "p2p") -> torch.Tensor:
    """Sequence-parallel softmax attention of every packed sequence with itself.

    ``q``, ``k``, ``v``: [t, H, D] of this rank's token shard (``ctx.shard``); returns [t, H, D].
    With u > 1 the Ulysses group re-lays them out to head shards of its chunk and back
    (:func:`ulysses_to_heads`); with a ring (``ctx.ring > 1``) the chunks attend over it
    (:func:`ring_attention`, ``ring="p2p"`` or ``"gather"``). Attention never crosses sequences;
    with ``causal`` a token sees its predecessors only. ``backend``: ``"math"`` (the reference),
    ``"sdpa"``, ``"flex"``, ``"varlen"`` (CUDA) or a callable with the backend contract (see
    :class:`Segments`); ``scale`` defaults to D ** -0.5."""
    fn = _backend_of(backend)
    if ring not in ("p2p", "gather"):
        raise _error("invalid_argument", f"attention: ring = {ring!r}; use 'p2p' (point-to-point ring) or 'gather' "
                     "(the all-gather form)")
    d = q.shape[2]
    if scale is None:
        scale = d ** -0.5
    u = ctx.ulysses
    if u > 1:
        _check_heads(q.shape[1], u)
        q, k, v = ulysses_to_heads(torch.cat([q, k, v], -1), ctx).split(d, -1)
    o = ring_attention(q, k, v, ctx, causal, scale, fn, ring)
    return ulysses_to_tokens(o, ctx)


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
