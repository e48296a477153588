"""dcp in a PyTorch training loop, the lines to copy: trains the example GPT (gpt.py) on Python's
standard-library documentation (corpus.py), every global batch planned by dcp, and keeps model,
optimizer and sampler in --checkpoint; run it again with more --steps and it resumes there.

    .venv/bin/python -m torch.distributed.run --nproc_per_node 2 examples/python_train/quickstart.py \\
        --steps 20 --checkpoint gpt.pt

Each rank takes cuda:LOCAL_RANK and NCCL where there are GPUs, else the CPU and gloo.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time

import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.distributed.device_mesh import init_device_mesh

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import dcp  # noqa: E402
import dcp.torch  # noqa: E402
from corpus import stdlib_documents  # noqa: E402
from gpt import GPTConfig, make_gpt, scaled_device  # noqa: E402

log = logging.getLogger("quickstart")


def save(path, model, opt, sampler_state, step):
    """Rank 0 writes the checkpoint (the parameters are the same on every rank); the others wait."""
    if dist.get_rank() == 0:
        state = {"model": model.state_dict(), "optimizer": opt.state_dict(), "sampler": sampler_state, "step": step}
        torch.save(state, path + ".tmp")
        os.replace(path + ".tmp", path)  # never a half-written checkpoint
    dist.barrier()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=100, help="global batches trained in all, resumed ones included")
    ap.add_argument("--checkpoint", default="quickstart.pt", help="resumed from if it exists; saved to")
    ap.add_argument("--save-every", type=int, default=50, help="steps between checkpoints (and at the end)")
    ap.add_argument("--batch-tokens", type=int, default=4096, help="tokens per global batch")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()

    device = torch.device("cuda", int(os.environ["LOCAL_RANK"])) if torch.cuda.is_available() else torch.device("cpu")
    if device.type == "cuda":
        torch.cuda.set_device(device)
    dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
    mesh = init_device_mesh(device.type, (dist.get_world_size(),), mesh_dim_names=("dcp",))
    world = dcp.torch.World(mesh, dim="dcp")  # dcp plans the data x sequence-parallel dimension
    logging.basicConfig(level=logging.INFO if world.rank() == 0 else logging.WARNING, format="%(name)s: %(message)s")

    docs = stdlib_documents(1024)  # token ids of each document: its tokens, then its last target
    lengths = np.array([d.size - 1 for d in docs])
    config = GPTConfig(vocab=256, hidden=32, heads=4, mlp=128, blocks=2, max_len=1024, backend="sdpa")
    # A tiny model on a scaled device, so that CPU ranks see sp > 1 and recompute; on GPUs price
    # the real one: dcp.Cost(spec, "h100", gpus=world.size())
    cost = dcp.Cost(config.spec(), device=scaled_device(config.spec(), world.size(), 384), gpus=world.size())
    sched = dcp.Scheduler(cost, world=world, global_batch_tokens=args.batch_tokens, seed=args.seed)
    groups = dcp.torch.ProcessGroups()
    batches = dcp.torch.BatchSampler(dcp.Sampler(lengths, args.batch_tokens, args.seed, cost))
    model = make_gpt(config, torch.float32).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.01)

    step = 0
    if os.path.exists(args.checkpoint):
        saved = torch.load(args.checkpoint, map_location=device)
        model.load_state_dict(saved["model"])
        opt.load_state_dict(saved["optimizer"])
        batches.load_state_dict(saved["sampler"])  # the next batch is the one after the last trained
        step = saved["step"]
        log.info("resumed from %s at step %d, sampler epoch %d position %d", args.checkpoint, step,
                 saved["sampler"]["epoch"], saved["sampler"]["position"])

    while step < args.steps:
        for taken, ids in enumerate(batches, 1):  # the rest of the sampler's epoch
            start = time.perf_counter()
            plan = sched.plan(lengths[ids], ids=ids)
            planned = time.perf_counter() - start
            sched.verify(plan)  # every rank holds the same plan
            groups.prepare(sched, plan)  # collective: the plan's process groups, cached
            opt.zero_grad()
            loss = torch.zeros((), device=device)
            for st in sched.steps_for(plan):
                mb = dcp.torch.micro_batch(st, groups, docs, dtype=torch.float32, device=device)
                logits = model(mb.tokens, mb.positions, mb.context, st.checkpointed_blocks)
                st_loss = (F.cross_entropy(logits, mb.targets, reduction="none") * mb.weights).sum()
                st_loss.backward()  # weighted, never averaged per rank
                loss += st_loss.detach()
            loss = dcp.torch.all_reduce_gradients(model.parameters(), group=world, extra=loss)
            opt.step()
            step += 1
            summary = dcp.log_plan(plan, batch=step, plan_seconds=planned, observed_s=time.perf_counter() - start)
            position = batches.state_dict(consumed=taken)
            log.info("step %d: loss %.6f over %d tokens, sampler epoch %d position %d", step, loss.item(),
                     summary["tokens"], position["epoch"], position["position"])
            if step % args.save_every == 0 or step == args.steps:
                save(args.checkpoint, model, opt, position, step)
            if step == args.steps:
                break
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
