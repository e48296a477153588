"""Worker of test_torch.py, run under torchrun: trains the example GPT for a few global batches
under dcp, bucket and packed plans over torch.distributed (gloo), and on every rank compares the
parameters with a single-process full-batch run written separately (below). A second job with
two heads and rings of up to 2 runs dcp's Ulysses x Ring steps. Rank 0 writes what it found as
JSON to argv[1]."""

import json
import math
import os
import sys

import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "examples", "python_train"))

import dcp  # noqa: E402
import dcp.torch  # noqa: E402
from gpt import GPTConfig, make_gpt, scaled_device  # noqa: E402

CONFIG = GPTConfig(vocab=29, hidden=16, heads=4, mlp=32, blocks=2, max_len=96, seed=5)
BATCH_TOKENS = 320
SEED = 4
STEPS = 3
LR, WEIGHT_DECAY = 1e-2, 0.01


RING_CONFIG = GPTConfig(vocab=29, hidden=16, heads=2, mlp=32, blocks=2, max_len=96, seed=6)


def documents(count=64, shortest=8, longest=96, seed=7):
    """Random token documents of log-uniform lengths (tokens + 1: inputs and the last target)."""
    rng = np.random.default_rng(seed)
    lengths = np.exp(rng.uniform(math.log(shortest + 1), math.log(longest + 1), count)).astype(np.int64)
    return [rng.integers(0, CONFIG.vocab, n, dtype=np.int64) for n in lengths]


def coverage(plan, world):
    per_rank = [0] * world
    out = {"max_sp": 1, "max_ring": 1, "ulysses_and_ring": False, "uneven_shards": False, "recompute": False}
    for st in plan.steps:
        out["max_sp"] = max(out["max_sp"], st.sp)
        out["max_ring"] = max(out["max_ring"], st.ring)
        out["ulysses_and_ring"] |= st.ring > 1 and st.ulysses > 1
        out["uneven_shards"] |= sum(q.tokens for q in st.sequences) % st.sp != 0
        out["recompute"] |= st.checkpointed_blocks > 0
        for r in range(*st.ranks):
            per_rank[r] += 1
    out["unequal_accumulation"] = min(per_rank) != max(per_rank)
    return out


def plan_batch(method, sched, cost, lengths, ids, groups):
    """``method``'s plan of batch ``ids``, checked against the plan laws and verified the same on
    every rank, its process groups prepared."""
    if method == "dcp":
        plan = sched.plan(lengths[ids], ids=ids)
    else:
        plan = dcp.plan(cost, lengths[ids], method=method, dataset=lengths, global_batch_tokens=BATCH_TOKENS,
                        seed=SEED, ids=ids)
    assert not plan.violations(cost, lengths[ids], ids=ids), plan.violations(cost, lengths[ids], ids=ids)
    sched.verify(plan)
    groups.prepare(sched, plan)
    return plan


def run_steps(model, sched, plan, groups, docs):
    """This rank's micro-steps of ``plan`` forward and backward; the gradients accumulate."""
    for step in sched.steps_for(plan):
        mb = dcp.torch.micro_batch(step, groups, docs)
        logits = model(mb.tokens, mb.positions, mb.context, step.checkpointed_blocks)
        (F.cross_entropy(logits, mb.targets, reduction="none") * mb.weights).sum().backward()


def train(config, method, docs, cost, sched, groups):
    """Trains under ``method``'s plans on the scheduler's world; the gradients are summed over it."""
    world = sched.world
    lengths = np.array([d.size - 1 for d in docs])
    sampler = dcp.Sampler(lengths, BATCH_TOKENS, SEED, cost)
    model = make_gpt(config)
    opt = torch.optim.AdamW(model.parameters(), lr=LR, weight_decay=WEIGHT_DECAY)
    batches, seen = [], {}
    for _ in range(STEPS):
        ids = sampler.next()
        plan = plan_batch(method, sched, cost, lengths, ids, groups)
        opt.zero_grad()
        run_steps(model, sched, plan, groups, docs)
        dcp.torch.all_reduce_gradients(model.parameters(), group=world)
        opt.step()
        batches.append(ids.tolist())
        for k, v in coverage(plan, world.size()).items():
            seen[k] = max(seen.get(k, v), v)
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()]), batches, seen


# --- the reference: one process, full batches, every sequence on its own -------------------------

def sequence_loss(config, model, doc):
    """Summed next-token cross-entropy of one whole sequence, written out functionally."""
    n, heads, hidden = doc.size - 1, config.heads, config.hidden
    d = hidden // heads
    ids = torch.from_numpy(doc)
    x = F.embedding(ids[:n], model.tok.weight) + model.pos.weight[:n]
    future = torch.full((n, n), float("-inf"), dtype=x.dtype).triu(1)
    for b in model.blocks:
        h = F.layer_norm(x, (hidden,), b.ln1.weight, b.ln1.bias)
        qkv = F.linear(h, b.qkv.weight, b.qkv.bias).view(n, heads, 3 * d)
        q, k, v = (t.permute(1, 0, 2) for t in qkv.split(d, -1))
        a = torch.softmax(q @ k.transpose(1, 2) / math.sqrt(d) + future, -1) @ v
        x = x + F.linear(a.permute(1, 0, 2).reshape(n, hidden), b.proj.weight, b.proj.bias)
        h = F.layer_norm(x, (hidden,), b.ln2.weight, b.ln2.bias)
        x = x + F.linear(F.gelu(F.linear(h, b.fc1.weight, b.fc1.bias)), b.fc2.weight, b.fc2.bias)
    logits = F.linear(F.layer_norm(x, (hidden,), model.ln_f.weight, model.ln_f.bias), model.head.weight,
                      model.head.bias)
    return F.cross_entropy(logits, ids[1:], reduction="sum")


def report(found, path, every_rank=False):
    """Ends a worker: rank 0 writes ``found`` as JSON to ``path`` (with ``every_rank``, every rank's
    ``found``, gathered in rank order), and the process group is destroyed once all have come."""
    if every_rank:
        every = [None] * dist.get_world_size()
        dist.all_gather_object(every, found)
        found = every
    if dist.get_rank() == 0:
        with open(path, "w") as f:
            json.dump(found, f, indent=1)
    dist.barrier()
    dist.destroy_process_group()


def reference(config, docs, batches):
    model = make_gpt(config)
    opt = torch.optim.AdamW(model.parameters(), lr=LR, weight_decay=WEIGHT_DECAY)
    for ids in batches:
        opt.zero_grad()
        tokens = sum(docs[i].size - 1 for i in ids)
        (sum(sequence_loss(config, model, docs[i]) for i in ids) / tokens).backward()  # the batch's token mean
        opt.step()
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()])


def main():
    dist.init_process_group("gloo")
    world = dcp.torch.World()
    n = world.size()
    docs = documents()
    # On one rank the device holds 40 tokens without recompute; on more ranks 24, so the longest
    # documents need sp > 1 under every planner.
    # With two heads and rings of up to 2, 12 tokens per rank on 4 ranks (24 on 2) give steps of
    # sp 4 as Ulysses 2 x Ring 2 (and pure rings of 2).
    jobs = [("ulysses", CONFIG, 1, 40 if n == 1 else 24, ("dcp", "bucket", "packed"))]
    if n > 1:
        jobs.append(("ring", RING_CONFIG, 2, 12 if n >= 4 else 24, ("dcp",)))
    groups = dcp.torch.ProcessGroups()
    found = {"world": n, "runs": {}}
    for name, config, ring, fit, methods in jobs:
        cost = dcp.Cost(config.spec(), device=scaled_device(config.spec(), n, fit), gpus=n, ring=ring)
        # dcp's full plans (restrictions off): these small batches accumulate unequally
        sched = dcp.Scheduler(cost, world=world, global_batch_tokens=BATCH_TOKENS, seed=SEED, restrictions=False)
        for method in methods:
            params, batches, seen = train(config, method, docs, cost, sched, groups)
            ref = reference(config, docs, batches)
            rel = ((params - ref).abs().max() / ref.abs().max()).item()
            found["runs"][f"{name}/{method}"] = dict(seen, max_relative_difference=rel)
    found["process_groups"] = groups.created
    report(found, sys.argv[1])


if __name__ == "__main__":
    main()
