"""dcp.torch under torchrun: parameters after 3 optimizer steps under dcp, bucket and packed plans
on 1, 2 and 4 CPU ranks (gloo, float64) equal a single-process full-batch run to 1e-10 relative,
with sp > 1, uneven shards, unequal accumulation, recompute and Ulysses x Ring steps present
(asserted present); so do worlds that are part of the job (replicas, a DeviceMesh dimension),
and FSDP2 under zero3 plans with padding passes (ctest python.fsdp2, label collectives).
Collective calls made by one rank only are dcp.Error (timeout) naming the call. A rank's
micro-batch fetches only the documents of its token shard. Skipped, saying why, where torch 2.x
or its gloo backend is missing."""

import json
import os
import subprocess
import sys
import time

import pytest

torch = pytest.importorskip("torch", minversion="2", reason="PyTorch 2.x is not installed for this python "
                            "(scripts/setup-debian installs it into .venv)")
if not torch.distributed.is_available() or not torch.distributed.is_gloo_available():
    pytest.skip("this PyTorch has no torch.distributed gloo backend", allow_module_level=True)

HERE = os.path.dirname(os.path.abspath(__file__))
TOLERANCE = 1e-10


def torchrun(nproc, script, *args, timeout=600):
    """``python -m torch.distributed.run --nproc_per_node nproc script args`` with this interpreter."""
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(nproc),
           "--master_port", str(29400 + 10 * nproc + os.getpid() % 10), script, *args]
    env = dict(os.environ, OMP_NUM_THREADS="1")
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)


@pytest.mark.parametrize("nproc", [1, 2, 4])
def test_training_under_plans_equals_full_batch(nproc, tmp_path):
    out = tmp_path / "found.json"
    run = torchrun(nproc, os.path.join(HERE, "torch_exactness.py"), str(out))
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-4000:]
    found = json.loads(out.read_text())
    assert found["world"] == nproc
    runs = found["runs"]
    assert set(runs) == ({"ulysses/dcp", "ulysses/bucket", "ulysses/packed"} |
                         ({"ring/dcp"} if nproc > 1 else set()))
    for name, r in runs.items():
        assert r["max_relative_difference"] <= TOLERANCE, (name, r)
        assert r["recompute"], name
    if nproc == 1:
        return
    for name, r in runs.items():
        assert r["max_sp"] > 1 and r["uneven_shards"], (name, r)
    assert runs["ulysses/dcp"]["unequal_accumulation"]
    assert runs["ring/dcp"]["max_ring"] > 1
    if nproc == 4:
        assert runs["ring/dcp"]["ulysses_and_ring"]
        assert found["process_groups"] > 0


def test_fsdp2_runs_coupled_plans_exactly(tmp_path):
    """FSDP2 (fully_shard on a DeviceMesh, each block a unit) under zero3 plans of dcp, bucket and
    packed on 4 ranks: every plan is lockstep, padding passes join the gathers and
    reduce-scatters, and the parameters equal the full-batch run."""
    out = tmp_path / "found.json"
    run = torchrun(4, os.path.join(HERE, "torch_fsdp.py"), str(out))
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-4000:]
    found = json.loads(out.read_text())
    assert set(found["runs"]) == {"dcp", "bucket", "packed"}
    for name, r in found["runs"].items():
        assert r["lockstep"], name
        assert r["max_relative_difference"] <= TOLERANCE, (name, r)
    assert found["runs"]["dcp"]["padding_passes"] > 0 and found["runs"]["bucket"]["padding_passes"] > 0


@pytest.mark.parametrize("worlds", ["replicas", "uneven", "mesh"])
def test_worlds_that_are_part_of_the_job_train_exactly(worlds, tmp_path):
    """Two dcp worlds in one 4-rank job, each planning and training on its own: every rank's
    parameters equal the full-batch run (the sub-world's ranks once ran all-to-alls on groups
    of global ranks they were not in, and their gradients were NaN)."""
    out = tmp_path / "found.json"
    run = torchrun(4, os.path.join(HERE, "torch_worlds.py"), worlds, str(out))
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-4000:]
    found = json.loads(out.read_text())
    expected = {"replicas": [[0, 1], [0, 1], [2, 3], [2, 3]], "uneven": [[0], [1, 2, 3], [1, 2, 3], [1, 2, 3]],
                "mesh": [[0, 2], [1, 3], [0, 2], [1, 3]]}[worlds]
    assert [f["world_ranks"] for f in found] == expected
    for f in found:
        assert f["finite"] and f["max_relative_difference"] <= TOLERANCE, f
        assert f["rank"] == f["world_ranks"].index(f["global_rank"]), f
        if f["size"] > 1:
            assert f["max_sp"] > 1, f  # the plans' groups were used
    if worlds == "uneven":
        assert all(f["groups_created"] > 0 for f in found[1:])  # split from the 3-rank world


def test_collective_calls_on_one_rank_time_out_and_wrong_arguments_are_named(tmp_path):
    out = tmp_path / "found.json"
    started = time.monotonic()
    run = torchrun(2, os.path.join(HERE, "torch_errors.py"), str(out), timeout=300)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-4000:]
    assert time.monotonic() - started < 120  # three 3 s timeouts, never gloo's 30 minutes
    zero, one = json.loads(out.read_text())
    for call, name in (("verify", "Scheduler.verify"), ("calibrating_plan", "Scheduler.plan")):
        code, message, seconds = zero[call]
        assert code == "timeout" and message.startswith(name + ": ") and "[0, 1]" in message, zero[call]
        assert 2.5 < seconds < 30, zero[call]
    assert zero["after_timeout"][0] == "aborted"
    for found in (zero, one):
        t = found["types"]
        for case in ("world_of_a_string", "timeout_text", "prepare_a_string", "gradients_over_a_list"):
            assert t[case][0] == "TypeError", (case, t[case])
        for case in ("timeout_zero", "mesh_without_dim", "mesh_unknown_dim", "dim_of_a_group"):
            assert t[case][0] == "ValueError", (case, t[case])
        assert "'dp', 'tp'" in t["mesh_without_dim"][2]
        assert found["mesh_world"][1:] == [2, [0, 1]]
        assert found["foreign_steps"] > 0
        for case in ("foreign_micro_batch", "foreign_group"):
            assert found[case][:2] == ["Error", "invalid_argument"], (case, found[case])
            assert "steps_for" in found[case][2]


def test_batch_sampler_yields_each_epoch_once_and_resumes():
    import numpy as np

    import dcp
    from dcp.torch import BatchSampler

    lengths = np.random.default_rng(1).integers(10, 500, 200)
    sampler = BatchSampler(dcp.Sampler(lengths, 2000, 3))
    first = list(sampler)
    assert len(first) == sampler.sampler.batches_in_epoch(0)
    assert sorted(i for batch in first for i in batch) == list(range(200))  # every sequence once
    again = BatchSampler(dcp.Sampler(lengths, 2000, 3))
    it = iter(again)
    head = [next(it) for _ in range(5)]
    state = again.state_dict()
    resumed = BatchSampler(dcp.Sampler(lengths, 2000, 3))
    resumed.load_state_dict(state)
    assert head + list(resumed) == first  # the rest of the epoch, from where it stopped
    second = list(sampler)
    assert len(second) == sampler.sampler.batches_in_epoch(1)  # the next epoch
    again.set_epoch(1)  # any epoch on demand, from its first batch
    assert len(again) == len(second) and list(again) == second


def test_data_loader_with_workers_resumes_where_the_loop_stopped():
    import numpy as np

    import dcp
    from dcp.torch import BatchSampler, DataLoader

    lengths = np.random.default_rng(1).integers(10, 500, 200)
    documents = list(range(200))  # a dataset whose item i is sequence i

    def loader(**kw):
        return DataLoader(documents, BatchSampler(dcp.Sampler(lengths, 2000, 3)), num_workers=2, collate_fn=list,
                          **kw)

    whole = list(loader())
    assert sorted(i for batch in whole for i in batch) == documents
    run = loader(prefetch_factor=4)
    it = iter(run)
    head = [next(it) for _ in range(3)]
    state = run.state_dict()
    # The workers drew ahead of the loop: the sampler's own position is past what the loop took,
    # and resuming from it would skip those batches.
    assert run.batch_sampler.state_dict()["position"] > state["position"]
    assert state["position"] == sum(len(b) for b in head)
    del it
    resumed = loader()
    resumed.load_state_dict(state)
    assert head + list(resumed) == whole
    with pytest.raises(TypeError):
        DataLoader(documents, dcp.Sampler(lengths, 2000, 3))
    with pytest.raises(ValueError):
        BatchSampler(dcp.Sampler(lengths, 2000, 3)).state_dict(consumed=1)  # nothing taken yet


class CountingDocuments:
    """Documents fetched as ``documents(id)`` (a callable), each fetch recorded."""

    def __init__(self, docs):
        self.docs = docs
        self.fetched = []

    def __call__(self, i):
        self.fetched.append(i)
        return self.docs[i]


class CountingIndex:
    """Documents fetched as ``documents[id]`` (a list-like dataset), each fetch recorded."""

    def __init__(self, docs):
        self.docs = docs
        self.fetched = []

    def __getitem__(self, i):
        self.fetched.append(i)
        return self.docs[i]

    def __len__(self):
        return len(self.docs)


def shard_bounds(total, sp, index):
    """dcp::shard_of written out again: the first ``total % sp`` shards are one token longer."""
    base, extra = divmod(total, sp)
    begin = index * base + min(index, extra)
    return begin, begin + base + (index < extra)


@pytest.mark.parametrize("seed", range(6))
def test_micro_batch_fetches_only_the_documents_of_its_shard(seed):
    """Over random lengths and three batches each of dcp, bucket and packed plans (rings of 1 and
    2) on 4 ranks, every rank's micro-batch of every step fetches exactly the documents with
    tokens in its shard, once each, in order, through a callable or an index, and its tensors
    and context equal the packed step's tokens, targets, positions and weights with every
    document fetched, then sliced to the shard (the fetch-everything result)."""
    import math

    import numpy as np

    import dcp
    import dcp.torch
    sys.path.insert(0, os.path.join(HERE, "..", "..", "examples", "python_train"))
    from gpt import GPTConfig, scaled_device

    rng = np.random.default_rng(seed)
    lengths = np.exp(rng.uniform(math.log(3), math.log(97), 40)).astype(np.int64)
    docs = [rng.integers(0, 29, n + 1, dtype=np.int64) for n in lengths]
    config = GPTConfig(vocab=29, hidden=16, heads=4, mlp=32, blocks=2, max_len=96)
    gpus, budget = 4, 320
    seen = {"split": 0, "skipped_fetches": 0, "ring": 0, "uneven": 0, "ends_with_a_document": 0}
    for ring, fit in ((1, 24), (2, 12)):
        cost = dcp.Cost(config.spec(), device=scaled_device(config.spec(), gpus, fit), gpus=gpus, ring=ring)
        sched = dcp.Scheduler(cost, global_batch_tokens=budget, seed=seed)
        sampler = dcp.Sampler(lengths, budget, seed, cost)
        for method in ("dcp", "bucket", "packed") * 3:
            ids = sampler.next()
            if method == "dcp":
                plan = sched.plan(lengths[ids], ids=ids)
            else:
                plan = dcp.plan(cost, lengths[ids], method=method, dataset=lengths, global_batch_tokens=budget,
                                seed=seed, ids=ids)
            groups = dcp.torch.ProcessGroups()
            # No torch.distributed here: the plan's groups stand in as None (this rank's only).
            groups._groups = {tuple(r): None for r in sched.process_groups(plan)}
            for rank in range(gpus):
                for step in sched.steps_for(plan, rank):
                    seqs = list(step.sequences)
                    begin = np.cumsum([0] + [q.tokens for q in seqs])
                    total = int(begin[-1])
                    lo, hi = shard_bounds(total, step.sp, step.group_rank) if seqs else (0, 0)
                    overlapping = [q.id for i, q in enumerate(seqs) if begin[i] < hi and lo < begin[i + 1]]
                    for counting in (CountingDocuments(docs), CountingIndex(docs)):
                        mb = dcp.torch.micro_batch(step, groups, counting)
                        assert counting.fetched == overlapping, (method, rank, step.index)
                        if not seqs:  # a padding pass
                            assert mb.weights.tolist() == [0.0]
                            continue
                        # The reference: every document fetched, packed, then sliced to the shard.
                        whole = [docs[q.id] for q in seqs]
                        tokens = np.concatenate([d[:-1] for d in whole])[lo:hi]
                        targets = np.concatenate([d[1:] for d in whole])[lo:hi]
                        positions = np.concatenate([np.arange(q.tokens) for q in seqs])[lo:hi]
                        weights = np.concatenate([np.full(q.tokens, q.loss_weight / q.tokens) for q in seqs])[lo:hi]
                        assert mb.tokens.tolist() == tokens.tolist()
                        assert mb.targets.tolist() == targets.tolist()
                        assert mb.positions.tolist() == positions.tolist()
                        assert mb.weights.tolist() == weights.tolist()
                        assert mb.tokens.dtype == mb.targets.dtype == mb.positions.dtype == torch.int64
                        assert mb.weights.dtype == torch.float64
                        ctx = mb.context
                        assert ctx.seq_begin == begin.tolist() and ctx.shard == (lo, hi)
                        assert (ctx.sp, ctx.ring, ctx.group_rank) == (step.sp, step.ring, step.group_rank)
                    if seqs:
                        seen["split"] += any(begin[i] < lo < begin[i + 1] for i in range(len(seqs)))
                        seen["skipped_fetches"] += len(overlapping) < len(seqs)
                        seen["ring"] += step.ring > 1
                        seen["uneven"] += total % step.sp != 0
                        # the last target of a shard that ends with a document is that document's own
                        seen["ends_with_a_document"] += step.sp > 1 and hi in begin[1:-1]
    # What the plans held, so that the assertions above met shards that cut documents and
    # shards that leave documents out.
    assert all(v > 0 for v in seen.values()), seen

