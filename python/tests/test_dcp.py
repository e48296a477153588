"""Tests of the dcp Python package: plan laws over random batches, JSON round trips, the
simulator against dcp-sim, errors, and the resumable sampler."""

import json
import os
import subprocess
import threading
from pathlib import Path

import numpy as np
import pytest

import dcp

REPO = Path(__file__).resolve().parents[2]
SEEDS = [1, 2, 3, 4]
METHODS = ["dcp", "bucket", "packed", "dynamic_cp"]


def random_lengths(seed, n=48, low=64, high=32768):
    """Log-uniform lengths: many short sequences and a few long ones, as in real data."""
    rng = np.random.default_rng(seed)
    return np.exp(rng.uniform(np.log(low), np.log(high), size=n)).astype(np.int64)


@pytest.fixture(scope="module")
def cost():
    return dcp.Cost("llama3-8b", "h200", gpus=16)


# --- plan laws -------------------------------------------------------------------------------------


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("seed", SEEDS)
def test_plan_laws(cost, method, seed):
    lengths = random_lengths(seed)
    where = f"method {method}, seed {seed}"
    p = dcp.plan(cost, lengths, method=method, seed=seed)
    assert p.method == method, where
    assert p.gpus == cost.gpus == 16, where

    ids = [q.id for s in p.steps for q in s.sequences]
    assert sorted(ids) == list(range(len(lengths))), f"{where}: every sequence exactly once"
    assert not p.skipped, where
    tokens = {q.id: q.tokens for s in p.steps for q in s.sequences}
    assert all(tokens[i] == lengths[i] for i in range(len(lengths))), f"{where}: tokens are the lengths"

    weights = sum(q.loss_weight for s in p.steps for q in s.sequences)
    assert weights == pytest.approx(1.0, rel=1e-9), f"{where}: loss weights sum to {weights}"

    for s in p.steps:
        first, end = s.ranks
        assert 0 <= first < end <= cost.gpus, f"{where}: step on ranks [{first}, {end})"
        assert end - first == s.sp, where
        assert s.memory_bytes <= cost.capacity() * (1 + 1e-9), f"{where}: {s.memory_bytes} B over capacity"
    assert p.makespan_s >= max(s.end_s for s in p.steps) * (1 - 1e-12), where
    assert 0 < p.efficiency() <= 1 + 1e-9, where
    assert p.violations(cost, lengths) == [], where


def test_violations_catch_a_wrong_batch(cost):
    lengths = random_lengths(7)
    p = dcp.plan(cost, lengths)
    assert p.violations(cost, lengths) == []
    other = lengths.copy()
    other[0] += 1
    assert p.violations(cost, other), "a plan checked against another batch must break a law"
    assert p.violations(cost, lengths[:-1]), "a plan checked against a shorter batch must break a law"


def test_dcp_beats_or_matches_bucket(cost):
    # Both plan the same batch; dcp's makespan is the shorter on a skewed batch (the paper's claim).
    lengths = random_lengths(11, n=64)
    data = np.concatenate([random_lengths(s, n=64) for s in range(12, 20)])
    fast = dcp.plan(cost, lengths)
    bucket = dcp.plan(cost, lengths, method="bucket", dataset=data)
    assert fast.makespan_s <= bucket.makespan_s * (1 + 1e-9)


def test_plan_is_deterministic_and_json_round_trips(cost):
    for seed in SEEDS:
        lengths = random_lengths(seed)
        plans = [dcp.plan(cost, lengths, method=m, seed=seed) for m in METHODS]
        again = [dcp.plan(cost, lengths, method=m, seed=seed) for m in METHODS]
        assert [p.hash() for p in plans] == [p.hash() for p in again], f"seed {seed}"

        for p in plans:  # a document holds one method's plans
            text = dcp.plans_to_json(cost, [p, p])
            doc = json.loads(text)
            assert doc["format"].startswith("dcp.plan/") and doc["method"] == p.method, f"seed {seed}"
            back = dcp.plans_from_json(text)
            assert len(back) == 2, f"seed {seed}"
            for q in back:
                assert q.hash() == p.hash(), f"seed {seed}, method {p.method}: hash changed in the round trip"
                assert q == p, f"seed {seed}, method {p.method}"
        with pytest.raises(dcp.Error, match="'dcp' with 'bucket'"):
            dcp.plans_to_json(cost, plans)


def test_video_batches_keep_their_shape():
    cost = dcp.Cost("cogvideox-5b", gpus=8)
    rng = np.random.default_rng(5)
    shapes = np.stack([rng.integers(1, 14, size=24), rng.choice([1350, 3600], size=24)], axis=1)
    p = dcp.plan(cost, shapes)
    seen = {q.id: (q.frames, q.spatial, q.tokens) for s in p.steps for q in s.sequences}
    assert sorted(seen) == list(range(len(shapes)))
    for i, (t, s) in enumerate(shapes):
        assert seen[i][:2] == (t, s)
        assert seen[i][2] == cost.tokens_of(int(s), int(t))
    assert p.violations(cost, shapes) == []


def test_planning_releases_the_gil(cost):
    # Planning in threads gives the plans of planning one after another.
    batches = [random_lengths(s, n=64) for s in range(4)]
    serial = [dcp.plan(cost, b).hash() for b in batches]
    out = [None] * len(batches)

    def work(i):
        out[i] = dcp.plan(cost, batches[i]).hash()

    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(batches))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert out == serial


# --- models and errors -----------------------------------------------------------------------------


def test_presets_and_config():
    assert "llama3-8b" in dcp.model_names()
    m = dcp.model_preset("llama3-8b")
    assert (m.blocks, m.hidden, m.heads) == (32, 4096, 32)
    assert "llama3-8b" in repr(m)
    config = REPO / "tests" / "data" / "configs" / "llama-3.1-8b" / "config.json"
    read, notes = dcp.model_from_config(config)
    assert (read.blocks, read.hidden, read.heads, read.kv_heads) == (32, 4096, 32, 8)
    assert read.vocab == 128256
    assert isinstance(notes, list)
    assert dcp.plan(dcp.Cost(read, gpus=8), random_lengths(3)).violations(dcp.Cost(read, gpus=8), random_lengths(3)) == []


def test_errors_name_the_value():
    with pytest.raises(dcp.Error, match="no-such-model") as e:
        dcp.model_preset("no-such-model")
    assert e.value.code == "invalid_argument"
    assert isinstance(e.value, RuntimeError)
    with pytest.raises(dcp.Error, match="h999"):
        dcp.Cost("llama3-8b", "h999")
    with pytest.raises(dcp.Error, match="gpus = 12") as e:
        dcp.Cost("llama3-8b", gpus=12)
    assert e.value.code == "invalid_argument"
    with pytest.raises(dcp.Error, match="gpus = 0"):
        dcp.Cost("llama3-8b", gpus=0)
    with pytest.raises(dcp.Error, match="zero2"):
        dcp.Cost("llama3-8b", sharding="zero2")
    with pytest.raises(dcp.Error, match="'fastest'"):
        dcp.plan(dcp.Cost("llama3-8b"), [1024], method="fastest")
    with pytest.raises(dcp.Error, match="float64"):
        dcp.plan(dcp.Cost("llama3-8b"), [1024.5])
    with pytest.raises(dcp.Error, match="sequence 1 ") as e:
        dcp.plan(dcp.Cost("llama3-8b"), [1024, 0])
    assert e.value.code == "invalid_argument"
    with pytest.raises(dcp.Error) as e:
        dcp.plan(dcp.Cost("llama3-8b", gpus=2), [10_000_000])
    assert e.value.code == "infeasible", str(e.value)
    with pytest.raises(dcp.Error) as e:
        dcp.plans_from_json("{}")
    assert e.value.code == "parse_error"


# --- the simulator against dcp-sim ----------------------------------------------------------------


def dcp_sim():
    path = Path(os.environ.get("DCP_SIM", REPO / "build" / "examples" / "sim" / "dcp-sim"))
    return path if path.is_file() and os.access(path, os.X_OK) else None


@pytest.mark.skipif(dcp_sim() is None, reason="dcp-sim not built (build/examples/sim/dcp-sim; or set DCP_SIM)")
def test_simulate_matches_dcp_sim():
    args = dict(workload="opensora-zipf50", gpus=8, methods=["dcp", "bucket"], seed=0)
    out = subprocess.run(
        [str(dcp_sim()), "--workload", "opensora-zipf50", "--gpus", "8", "--methods", "dcp,bucket", "--json"],
        check=True, capture_output=True, text=True,
    )
    want = json.loads(out.stdout)["methods"]
    got = dcp.simulate(**args)
    assert [r["method"] for r in got] == [r["method"] for r in want]
    for g, w in zip(got, want):
        for key in ["tokens_per_s", "efficiency", "simple_efficiency", "imbalance", "peak_memory_bytes"]:
            assert g[key] == pytest.approx(w[key], rel=1e-12, abs=1e-15), f"{g['method']} {key}"
        assert g["skipped"] == w["skipped"]
        assert g["communicators_per_rank"] == w["communicators_per_rank"]
        assert g["sequences"] == len(dcp.workload("opensora-zipf50", 0))


def test_simulate_reports_every_method():
    rows = dcp.simulate(workload=random_lengths(9, n=400), model="llama3-8b", gpus=8, methods=METHODS)
    assert [r["method"] for r in rows] == METHODS
    for r in rows:
        assert r["sequences"] == 400, r["method"]
        assert r["tokens_per_s"] > 0 and 0 < r["efficiency"] <= 1 + 1e-9, r
        assert r["peak_memory_bytes"] <= dcp.Cost("llama3-8b", gpus=8).capacity() * (1 + 1e-9), r


def test_pipeline_stages_plan_and_simulate():
    cost = dcp.Cost("llama3-8b", gpus=32, pp=4)
    assert cost.pp == 4 and cost.gpus == 8 and cost.model.blocks == 8
    rows = dcp.simulate(workload=random_lengths(11, n=300), model="llama3-8b", gpus=32, pp=4, methods=METHODS)
    assert [r["method"] for r in rows] == METHODS
    for r in rows:
        assert r["sequences"] == 300, r["method"]
        assert 0 < r["efficiency"] <= 1 + 1e-9 and 0 <= r["bubble"] < 1, r
    with pytest.raises(dcp.Error, match="pp = 3"):
        dcp.Cost("llama3-8b", gpus=32, pp=3)


# --- the sampler -----------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", SEEDS)
def test_sampler_resumes_where_it_stopped(seed):
    lengths = random_lengths(seed, n=300)
    budget = int(lengths.sum() // 17)
    s = dcp.Sampler(lengths, budget, seed=seed)
    per_epoch = s.batches_in_epoch(0)
    total = 2 * per_epoch + 3  # across an epoch boundary
    states, batches = [], []
    for _ in range(total):
        states.append(s.state())
        batches.append(s.next().tolist())

    epoch0 = [i for b in batches[:per_epoch] for i in b]
    assert sorted(epoch0) == list(range(len(lengths))), f"seed {seed}: an epoch visits every sequence once"
    for b in batches:
        assert len(b) == 1 or lengths[b].sum() <= budget, f"seed {seed}: batch over the budget"

    for k in [1, per_epoch // 2, per_epoch, per_epoch + 1, total - 1]:
        r = dcp.Sampler(lengths, budget, seed=seed)
        r.restore(states[k])
        rest = [r.next().tolist() for _ in range(total - k)]
        assert rest == batches[k:], f"seed {seed}: resumed at batch {k} ({states[k]})"

    saved = dcp.Sampler(lengths, budget, seed=seed)
    for _ in range(5):
        saved.next()
    text = saved.save()
    loaded = dcp.Sampler(lengths, budget, seed=seed)
    loaded.load(text)
    assert loaded.state() == saved.state() == states[5]
    assert loaded.next().tolist() == batches[5]
    with pytest.raises(dcp.Error):  # a state saved over another budget
        dcp.Sampler(lengths, budget + 1, seed=seed).load(text)


def test_sampler_counts_the_models_tokens():
    cost = dcp.Cost("cogvideox-5b", gpus=8)  # 226 text tokens before every sample
    shapes = np.array([[1, 1000]] * 10)
    s = dcp.Sampler(shapes, 3 * cost.tokens_of(1000), cost=cost)
    assert len(s.next()) == 3
    with pytest.raises(dcp.Error, match="budget"):
        dcp.Sampler([100, 200], 0)


def test_readme_python_block_runs_as_written():
    """The guide's Python section (docs/guide.md) is run as it is (docs are code), from the repository root."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    with open(os.path.join(root, "docs", "guide.md"), encoding="utf-8") as f:
        readme = f.read()
    section = readme[readme.index("\n## Python\n"):]
    block = section[section.index("```python\n") + len("```python\n"):]
    block = block[: block.index("```")]
    cwd = os.getcwd()
    os.chdir(root)
    try:
        exec(compile(block, "docs/guide.md (Python)", "exec"), {})
    finally:
        os.chdir(cwd)


def test_readme_torch_loop_is_the_examples_own():
    """The guide's PyTorch loop is the Python example's, verbatim (up to indentation)."""
    readme = (REPO / "docs" / "guide.md").read_text(encoding="utf-8")
    section = readme[readme.index("**In a PyTorch loop.**"):]
    block = section[section.index("```python\n") + len("```python\n"):]
    block = block[: block.index("```")]
    example = (REPO / "examples" / "python_train" / "train.py").read_text(encoding="utf-8")
    dedented = "\n".join(line[8:] if line.startswith(" " * 8) else line for line in example.splitlines())
    assert block.strip() in dedented


def test_readme_pytorch_lines_are_the_quickstarts_own():
    """README's PyTorch lines are quickstart.py's, verbatim and in its order (indented 4 less,
    outside main's body); a line ``...`` stands for lines left out."""
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    section = readme[readme.index("### From PyTorch"):]
    block = section[section.index("```python\n") + len("```python\n"):]
    shown = [line for line in block[: block.index("```")].splitlines() if line.strip() != "..."]
    script = (REPO / "examples" / "python_train" / "quickstart.py").read_text(encoding="utf-8").splitlines()
    assert len(shown) > 20
    at = 0
    for line in shown:
        found = [i for i in range(at, len(script)) if script[i] == "    " + line]
        assert found, f"README's line {line!r} is not in quickstart.py (after its line {at})"
        at = found[0] + 1


# --- the scheduler ---------------------------------------------------------------------------------


class FakeWorld:
    """A world of `size` ranks whose all-reduce sees every rank's array: the ranks' schedulers run
    in turn, so each call records its array and returns the reduction of the arrays recorded so
    far with the others' (test only; dcp.torch.World does this over torch.distributed)."""

    def __init__(self, rank, size, others):
        self._rank, self._size, self.others = rank, size, others

    def rank(self):
        return self._rank

    def size(self):
        return self._size

    def all_reduce(self, array, op):
        values = [array] + self.others
        return np.sum(values, axis=0) if op == "sum" else np.max(values, axis=0)


@pytest.mark.parametrize("seed", SEEDS)
def test_scheduler_steps_cover_the_plan_once(seed):
    lengths = random_lengths(seed, high=400000)
    ids = np.arange(100, 100 + lengths.size)
    cost = dcp.Cost("llama3-8b", "h200", gpus=12, gpus_per_node=4, ring=2)
    sched = dcp.Scheduler(cost, rank=0, seed=seed)
    p = sched.plan(lengths, ids=ids)
    assert p.hash() == dcp.plan(cost, lengths, ids=ids).hash()  # the scheduler plans as dcp.plan
    assert not p.violations(cost, lengths, ids=ids)
    assert sorted(q.id for st in p.steps for q in st.sequences) == ids.tolist()
    groups = {tuple(g) for g in sched.process_groups(p)}
    assert len(groups) == len(sched.process_groups(p))
    members = {}
    for rank in range(cost.total_gpus):
        steps = sched.steps_for(p, rank)
        assert [s.index for s in steps] == sorted(s.index for s in steps)  # execution order
        for s in steps:
            st = p.steps[s.index]
            assert s.ranks == st.ranks and s.checkpointed_blocks == st.checkpointed_blocks
            assert s.group_rank == rank - st.first and s.gpus == list(range(*st.ranks))
            assert s.ulysses * s.ring == s.sp and rank in s.ulysses_gpus and rank in s.ring_gpus
            assert len(s.ulysses_gpus) == s.ulysses and len(s.ring_gpus) == s.ring
            for g in (s.gpus, s.ulysses_gpus, s.ring_gpus):
                assert len(g) == 1 or tuple(g) in groups  # every group the step needs is listed
            members.setdefault(s.index, []).append(rank)
    # Every step runs on exactly its ranks.
    assert members == {i: list(range(*st.ranks)) for i, st in enumerate(p.steps)}


def test_scheduler_verify_and_calibration_exchange_through_the_world():
    cost = dcp.Cost("llama3-8b", "h200", gpus=2)
    lengths = random_lengths(5, n=16)
    plain = dcp.Scheduler(cost, rank=1)
    with pytest.raises(dcp.Error, match="no world to exchange with") as e:
        plain.verify(plain.plan(lengths))
    assert e.value.code == "invalid_argument"
    p = plain.plan(lengths)
    h = p.hash()
    same = dcp.Scheduler(cost, world=FakeWorld(0, 2, [np.array([h, h ^ (2**64 - 1)], dtype=np.uint64)]))
    same.verify(p)
    other = np.array([h ^ 1, (h ^ 1) ^ (2**64 - 1)], dtype=np.uint64)
    with pytest.raises(dcp.Error, match="plan mismatch") as e:
        dcp.Scheduler(cost, world=FakeWorld(0, 2, [other])).verify(p)
    assert e.value.code == "mismatch"
    # Calibrating: observations of this rank's steps travel in the next plan's exchange.
    cal = dcp.Scheduler(cost, world=FakeWorld(0, 2, []), calibration=True)
    assert cal.calibrating
    first = cal.plan(lengths)
    for s in cal.steps_for(first):
        cal.observe(s, 0.5 * s.time_s)
    with pytest.raises(dcp.Error, match="already observed"):
        cal.observe(cal.steps_for(first)[0], 1.0)
    assert cal.plan(lengths).makespan_s < first.makespan_s  # the clock was learned twice as fast
    tuned = dcp.Scheduler(cost, world=FakeWorld(0, 2, []), calibration={"memory_margin": 0.2, "window": 64})
    assert tuned.calibrating
    with pytest.raises(dcp.Error, match="no option 'margin'"):
        dcp.Scheduler(cost, world=FakeWorld(0, 2, []), calibration={"margin": 0.2})
    with pytest.raises(dcp.Error, match="memory_margin"):  # validated by the C++ options
        dcp.Scheduler(cost, world=FakeWorld(0, 2, []), calibration={"memory_margin": 2.0})
    with pytest.raises(dcp.Error, match="the world has 3 ranks"):
        dcp.Scheduler(cost, world=FakeWorld(0, 3, []))


def test_scheduler_and_device_errors_name_the_value():
    cost = dcp.Cost("llama3-8b", "h200", gpus=4)
    with pytest.raises(dcp.Error, match="rank = 4"):
        dcp.Scheduler(cost, rank=4)
    sched = dcp.Scheduler(cost)
    with pytest.raises(dcp.Error, match="ids holds 3 twice"):
        sched.plan([100, 200], ids=[3, 3])
    with pytest.raises(dcp.Error, match="one id per sequence"):
        sched.plan([100, 200], ids=[3])
    with pytest.raises(dcp.Error, match="the plan is for 8 units"):
        sched.steps_for(dcp.plan(dcp.Cost("llama3-8b", "h200", gpus=8), [100]))
    with pytest.raises(dcp.Error, match="calibration is off"):
        sched.observe(0, 1.0)
    d = dcp.device_preset("h100-analytic")
    assert d.replace(mem_bytes=40e9).capacity() == pytest.approx(40e9 * d.usable)
    with pytest.raises(dcp.Error, match="no field 'memory'"):
        d.replace(memory=1)
    with pytest.raises(dcp.Error, match="mem_bytes"):
        d.replace(mem_bytes=-1)


def test_a_machine_that_is_no_preset_and_every_field_replaceable():
    h200 = dcp.device_preset("h200")
    d = dcp.Device.custom(memory_gb=96, peak_tflops=700, gpus_per_node=4)
    assert (d.name, d.mem_bytes, d.peak, d.gpus_per_node) == ("custom", 96e9, 700e12, 4)
    assert d.capacity() == pytest.approx(96e9 * h200.usable - h200.reserved_bytes)
    assert dcp.Device.custom(memory_gb=141).peak == h200.peak  # the base's peak by default
    # The kernel clock's fields are replaceable too, and price what they say.
    assert h200.reserved_bytes > 0
    lean = h200.replace(reserved_bytes=0)
    assert lean.capacity() == pytest.approx(h200.capacity() + h200.reserved_bytes)
    assert dcp.Cost("llama3-8b", lean, gpus=8).capacity() > dcp.Cost("llama3-8b", h200, gpus=8).capacity()
    assert h200.replace(precision="fp8").precision == "fp8"
    with pytest.raises(dcp.Error, match="memory_gb = -1"):
        dcp.Device.custom(memory_gb=-1)
    with pytest.raises(dcp.Error, match="precision = 'fp4'"):
        h200.replace(precision="fp4")
    with pytest.raises(dcp.Error, match="no field 'memory'"):
        dcp.Device.custom(memory_gb=80, memory=1)
    with pytest.raises(TypeError, match="Device.replace: peak must be a number, not str"):
        h200.replace(peak="fast")


def test_scheduler_tunes_its_pipeline_knobs_on_the_dataset():
    cost = dcp.Cost("llama3-8b", "h200", gpus=32, pp=4)
    data = random_lengths(21, n=400, high=131072)
    batch = data[:120]
    assert dcp.Scheduler(cost).pipeline_knobs == (16.0, 4)  # the defaults, untuned
    sched = dcp.Scheduler(cost, dataset=data, global_batch_tokens=1 << 20, seed=3)
    cap, room = sched.pipeline_knobs
    assert cap > 0 and room >= 1
    # The scheduler plans as dcp.plan tuned on the same dataset and epoch.
    p = sched.plan(batch)
    assert p.hash() == dcp.plan(cost, batch, dataset=data, global_batch_tokens=1 << 20, seed=3).hash()
    assert not p.violations(cost, batch)
    # Without stages there is nothing to tune.
    flat = dcp.Cost("llama3-8b", "h200", gpus=8)
    assert dcp.Scheduler(flat, dataset=data).pipeline_knobs == (16.0, 4)


def test_scheduler_hands_each_rank_its_pipeline_stage():
    cost = dcp.Cost("llama3-70b", "h200", gpus=32, tp=2, pp=4)  # 4 stages of 4 units
    sched = dcp.Scheduler(cost)
    lengths = random_lengths(6, n=40, high=131072)
    p = sched.plan(lengths)
    assert not p.violations(cost, lengths)
    groups = {tuple(g) for g in sched.process_groups(p)}
    for rank in range(cost.total_gpus):
        w = sched.pipeline_for(p, rank)
        stage, per_stage = rank // 8, 8
        assert w["stage"] == stage and w["stages"] == 4
        assert w["previous"] == (rank - per_stage if stage > 0 else -1)
        assert w["next"] == (rank + per_stage if stage < 3 else -1)
        steps = w["steps"]
        assert [s.index for s in steps] == [s.index for s in sched.steps_for(p, rank)]
        for s in steps:
            assert s.stage == stage and rank in s.gpus and all(g // per_stage == stage for g in s.gpus)
            assert len(s.gpus) == 1 or tuple(s.gpus) in groups
        # Every step's forward comes once, before its backward; the schedule keeps at most
        # warmup_depth * (3 - stage) + 1 in flight (1F1B: 4 - stage).
        seen, live, most = {}, 0, 0
        for i, kind in w["ops"]:
            assert (i, kind) not in seen
            seen[(i, kind)] = True
            if kind == "backward":
                assert (i, "forward") in seen
                live -= 1
            else:
                live += 1
                most = max(most, live)
        assert len(seen) == 2 * len(steps)
        assert most <= p.warmup_depth * (3 - stage) + 1
    with pytest.raises(dcp.Error, match="on pp = 1"):
        sched.steps_for(dcp.plan(dcp.Cost("llama3-70b", "h200", gpus=32, tp=2, sharding="zero3"), lengths))


def test_scheduler_arguments_are_documented_in_help_and_stubs():
    """Every argument of dcp.Scheduler is described by help() and by the stubs."""
    names = ["cost", "world", "calibration", "probe", "global_batch_tokens", "seed", "loss", "on_infeasible", "dataset",
             "restrictions"]
    doc = dcp.Scheduler.__init__.__doc__
    stubs = (REPO / "python" / "src" / "dcp" / "_dcp.pyi").read_text(encoding="utf-8")
    stub = stubs[stubs.index("class Scheduler:"):]
    stub = stub[: stub.index("def __init__")]
    for name in names:
        assert f"{name}:" in doc, name
        assert f"``{name}``" in stub, name
    sig = stubs[stubs.index("class Scheduler:"):]
    sig = sig[sig.index("def __init__"): sig.index(") -> None")]
    arguments = [line.strip().split(":")[0] for line in sig.splitlines()[2:] if line.strip()]
    assert arguments == names[:2] + ["rank"] + names[2:]
    assert "``rank``" in stub and "`rank`" in doc


def test_scheduler_keeps_its_world():
    """dcp.torch.ProcessGroups reads the plan's world from the scheduler."""
    world = FakeWorld(1, 4, [])
    assert dcp.Scheduler(dcp.Cost("llama3-8b", gpus=4), world=world).world is world
    assert dcp.Scheduler(dcp.Cost("llama3-8b", gpus=4), rank=2).world is None


def test_log_plan_says_what_each_batch_does(caplog):
    import logging

    cost = dcp.Cost("llama3-8b", "h200", gpus=8, sharding="zero3")
    lengths = random_lengths(5, n=40, high=65536)
    p = dcp.plan(cost, lengths)
    seen = []
    with caplog.at_level(logging.INFO, logger="dcp"):
        s = dcp.log_plan(p, batch=3, plan_seconds=0.002, observed_s=2 * p.makespan_s, callback=seen.append)
    assert seen == [s]
    # The counts, recomputed from the plan's steps.
    per_rank = [0] * 8
    for st in p.steps:
        for r in range(*st.ranks):
            per_rank[r] += 1
    assert s["micro_steps_per_rank"] == per_rank
    assert min(per_rank) == max(per_rank)  # zero3: lockstep
    assert s["sequences"] == 40 and s["tokens"] == int(lengths.sum()) and s["skipped"] == 0
    assert sum(s["sp_histogram"].values()) == s["steps"] == len(p.steps)
    assert s["padding_passes"] == sum(1 for st in p.steps if not st.sequences)
    assert s["recompute_blocks"] == sum(st.checkpointed_blocks for st in p.steps)
    assert s["observed_over_predicted"] == pytest.approx(2.0)
    assert "batch 3: dcp planned 40 sequences" in caplog.text and "(2.00x predicted)" in caplog.text
    with pytest.raises(TypeError, match="dcp.Plan"):
        dcp.summary("a plan")


def test_model_optional_fields_come_from_one_table():
    """Every optional field of the model (the C++ table) is a keyword argument of dcp.Model, an
    attribute, and listed in the stubs; a typo or a value out of range is a dcp.Error."""
    names = dcp.Model.optional_fields
    assert {"kv_heads", "vocab", "loss", "tied_embeddings", "window", "rope_dim"} <= set(names)
    stubs = (REPO / "python" / "src" / "dcp" / "_dcp.pyi").read_text(encoding="utf-8")
    stub = stubs[stubs.index("class Model:"):stubs.index("def model_preset")]
    init = stub[stub.index("def __init__"):stub.index(") -> None")]
    for name in names:
        assert f"        {name}: " in init, name
        assert f"def {name}(self)" in stub, name
    plain = dcp.Model("m", blocks=4, hidden=64, heads=4, mlp_width=256, attention="causal")
    for name in names:
        value = getattr(plain, name)
        assert value in (0, False, "full"), (name, value)
    # Fields that make a coherent model: GQA, a vocabulary with a chunked loss, a window on one block.
    given = dict(kv_heads=2, head_dim=32, vocab=1000, tied_embeddings=True, loss="chunked", window=64,
                 windowed_blocks=1)
    m = dcp.Model("m", blocks=4, hidden=64, heads=4, mlp_width=256, attention="causal", **given)
    for name, value in given.items():
        assert getattr(m, name) == value, name
    assert m.total_parameters() > plain.total_parameters()
    with pytest.raises(dcp.Error, match="unknown field 'kv_head'; the optional fields are kv_heads"):
        dcp.Model("m", blocks=4, hidden=64, heads=4, mlp_width=256, kv_head=2)
    with pytest.raises(dcp.Error, match="vocab = 99999999999999999999999 is out of range"):
        dcp.Model("m", blocks=4, hidden=64, heads=4, mlp_width=256, vocab=99999999999999999999999)
    with pytest.raises(dcp.Error, match="kv_heads = 2.5 must be an integer"):
        dcp.Model("m", blocks=4, hidden=64, heads=4, mlp_width=256, kv_heads=2.5)
    with pytest.raises(dcp.Error, match="loss = 'fused' must be full or chunked"):
        dcp.Model("m", blocks=4, hidden=64, heads=4, mlp_width=256, vocab=10, loss="fused")
