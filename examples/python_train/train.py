"""Trains the example GPT on real text under dcp, bucket and packed plans and writes the curves.

    .venv/bin/python -m torch.distributed.run --nproc_per_node 2 examples/python_train/train.py --out build/python_train

Every method starts from the same parameters and samples the same global batches (the same
sampler seed), so the loss curves are the same curve: identical in float64 up to summation
order, and within float32 rounding in float32. Rank 0 writes ``curves.json`` (per method and
dtype: the loss and tokens/s of every step, and what the plans used) and ``curves.png`` (loss
and tokens/s per step) to ``--out``, and prints the largest difference between the methods.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import dcp  # noqa: E402
import dcp.torch  # noqa: E402
from corpus import stdlib_documents  # noqa: E402
from gpt import GPTConfig, make_gpt, scaled_device  # noqa: E402

DTYPES = {"float64": torch.float64, "float32": torch.float32}


def train(args, method, dtype, docs, lengths, cost, sched, groups):
    """One run: `args.steps` optimizer steps of `method`'s plans; the loss and tokens/s per step."""
    config = GPTConfig(vocab=256, hidden=args.hidden, heads=args.heads, mlp=4 * args.hidden, blocks=args.blocks,
                       max_len=args.max_len, seed=args.seed)
    model = make_gpt(config, dtype)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.01)
    sampler = dcp.Sampler(lengths, args.batch_tokens, args.seed, cost)
    out = {"loss": [], "tokens_per_s": [], "max_sp": 1, "recomputed_steps": 0, "steps": 0}
    for _ in range(args.steps):
        t0 = time.perf_counter()
        ids = sampler.next()
        if method == "dcp":
            plan = sched.plan(lengths[ids], ids=ids)
        else:
            plan = dcp.plan(cost, lengths[ids], method=method, dataset=lengths, global_batch_tokens=args.batch_tokens,
                            seed=args.seed, ids=ids)
        sched.verify(plan)
        groups.prepare(sched, plan)
        opt.zero_grad()
        loss = torch.zeros((), dtype=dtype)
        for step in sched.steps_for(plan):
            with dcp.torch.StepTimer() as timer:
                mb = dcp.torch.micro_batch(step, groups, docs, dtype=dtype)
                logits = model(mb.tokens, mb.positions, mb.context, step.checkpointed_blocks)
                step_loss = (F.cross_entropy(logits, mb.targets, reduction="none") * mb.weights).sum()
                step_loss.backward()
            if sched.calibrating:
                sched.observe(step, timer.seconds)
            loss += step_loss.detach()
        loss = dcp.torch.all_reduce_gradients(model.parameters(), extra=loss)
        opt.step()
        seconds = torch.tensor([time.perf_counter() - t0], dtype=torch.float64)
        dist.all_reduce(seconds, op=dist.ReduceOp.MAX)  # the step ends when its slowest rank does
        out["loss"].append(loss.item())
        out["tokens_per_s"].append(float(lengths[ids].sum()) / seconds.item())
        out["max_sp"] = max([out["max_sp"]] + [st.sp for st in plan.steps])
        out["recomputed_steps"] += sum(st.checkpointed_blocks > 0 for st in plan.steps)
        out["steps"] += len(plan.steps)
    return out


def plot(found, path):
    try:
        import matplotlib
    except ImportError:
        print(f"no {path}: matplotlib is missing (scripts/setup-debian installs it into .venv)")
        return False

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax_loss, ax_speed) = plt.subplots(1, 2, figsize=(11, 4))
    for key, run in found["runs"].items():
        method, dtype = key.split("/")
        style = "-" if dtype == "float64" else "--"
        steps = np.arange(1, len(run["loss"]) + 1)
        ax_loss.plot(steps, run["loss"], style, label=key, linewidth=1)
        ax_speed.plot(steps, run["tokens_per_s"], style, label=key, linewidth=0.8)
    ax_loss.set(xlabel="step", ylabel="loss (nats per token)", yscale="log",
                title="Loss per step (the methods' curves lie on each other)")
    ax_speed.set(xlabel="step", ylabel="tokens/s", title=f"Tokens/s per step ({found['world']} CPU ranks, gloo)")
    for ax in (ax_loss, ax_speed):
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle(f"GPT on Python's standard-library documentation, byte-level, {found['documents']} documents")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return True


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--batch-tokens", type=int, default=4096, help="tokens per global batch")
    ap.add_argument("--max-len", type=int, default=1024, help="longest document, in tokens (longer ones are cut)")
    ap.add_argument("--fit-tokens", type=float, default=384,
                    help="tokens one rank holds without recompute (the planner's memory)")
    ap.add_argument("--hidden", type=int, default=32)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--blocks", type=int, default=2)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--methods", default="dcp,bucket,packed")
    ap.add_argument("--dtypes", default="float64,float32")
    ap.add_argument("--calibrate", action="store_true", help="dcp plans on the measured CPU clock")
    ap.add_argument("--out", default="python_train")
    args = ap.parse_args()

    dist.init_process_group("gloo")
    world = dcp.torch.World()
    docs = stdlib_documents(args.max_len)
    lengths = np.array([d.size - 1 for d in docs], dtype=np.int64)
    spec = GPTConfig(vocab=256, hidden=args.hidden, heads=args.heads, mlp=4 * args.hidden, blocks=args.blocks,
                     max_len=args.max_len).spec()
    cost = dcp.Cost(spec, device=scaled_device(spec, world.size(), args.fit_tokens), gpus=world.size())
    groups = dcp.torch.ProcessGroups()
    found = {"world": world.size(), "documents": len(docs), "tokens": int(lengths.sum()), "seed": args.seed,
             "args": vars(args), "runs": {}}
    for dtype in args.dtypes.split(","):
        for method in args.methods.split(","):
            sched = dcp.Scheduler(cost, world=world, global_batch_tokens=args.batch_tokens, seed=args.seed,
                                  calibration=args.calibrate and method == "dcp", probe=False)
            found["runs"][f"{method}/{dtype}"] = train(args, method, DTYPES[dtype], docs, lengths, cost, sched, groups)
    if world.rank() == 0:
        for dtype in args.dtypes.split(","):
            curves = [np.array(r["loss"]) for k, r in found["runs"].items() if k.endswith("/" + dtype)]
            diff = max(np.abs(c - curves[0]).max() for c in curves)
            found[f"largest_difference_{dtype}"] = float(diff)
            print(f"{dtype}: largest loss difference between methods {diff:.3g} over {args.steps} steps; loss "
                  f"{curves[0][0]:.4f} -> {curves[0][-1]:.4f}")
        os.makedirs(args.out, exist_ok=True)
        with open(os.path.join(args.out, "curves.json"), "w") as f:
            json.dump(found, f, indent=1)
        drawn = plot(found, os.path.join(args.out, "curves.png"))
        print(f"wrote {args.out}/curves.json" + (" and curves.png" if drawn else ""))
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
