"""Worker of test_torch.py, run under torchrun: FSDP2 (``fully_shard`` on a DeviceMesh of the
whole job, each block its own unit, gradients summed) trains the example GPT under dcp, bucket and
packed plans of a zero3 cost model. Every plan runs its domain's micro-steps in lockstep: a rank
with fewer steps runs padding passes, micro-steps without tokens that join FSDP2's all-gathers
and reduce-scatters. On every rank the parameters after the run are compared with the
single-process full-batch reference of torch_exactness.py. Rank 0 writes what it found as JSON
to argv[1]."""

import os
import sys

import numpy as np
import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import FSDPModule, fully_shard

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "examples", "python_train"))

import dcp  # noqa: E402
import dcp.torch  # noqa: E402
from gpt import make_gpt, scaled_device  # noqa: E402
from torch_exactness import (BATCH_TOKENS, CONFIG, LR, SEED, STEPS, WEIGHT_DECAY, coverage, documents,  # noqa: E402
                             plan_batch, reference, report, run_steps)


def train(method, docs, cost, sched, groups, mesh):
    lengths = np.array([d.size - 1 for d in docs])
    sampler = dcp.Sampler(lengths, BATCH_TOKENS, SEED, cost)
    model = make_gpt(CONFIG)
    for block in model.blocks:
        fully_shard(block, mesh=mesh)
    fully_shard(model, mesh=mesh)
    for unit in model.modules():  # every unit sums: the plan's loss weights make the SUM the batch's gradient
        if isinstance(unit, FSDPModule):
            unit.set_gradient_divide_factor(1.0)
    opt = torch.optim.AdamW(model.parameters(), lr=LR, weight_decay=WEIGHT_DECAY)
    batches, padding, lockstep = [], 0, True
    for _ in range(STEPS):
        ids = sampler.next()
        plan = plan_batch(method, sched, cost, lengths, ids, groups)
        padding += sum(1 for st in plan.steps if not st.sequences)
        lockstep &= not coverage(plan, sched.world.size())["unequal_accumulation"]
        opt.zero_grad()
        # A padding pass gathers every unit and reduce-scatters its (zero) gradient, as the other
        # ranks' steps of its round do; FSDP2's reduce-scatters sum the gradients, no all-reduce.
        run_steps(model, sched, plan, groups, docs)
        opt.step()
        batches.append(ids.tolist())
    params = torch.cat([p.full_tensor().detach().reshape(-1) for p in model.parameters()])
    return params, batches, padding, lockstep


def main():
    dist.init_process_group("gloo")
    world = dcp.torch.World()
    n = world.size()
    mesh = init_device_mesh("cpu", (n,), mesh_dim_names=("shard",))
    docs = documents()
    cost = dcp.Cost(CONFIG.spec(), device=scaled_device(CONFIG.spec(), n, 24), gpus=n, sharding="zero3")
    sched = dcp.Scheduler(cost, world=world, global_batch_tokens=BATCH_TOKENS, seed=SEED)
    groups = dcp.torch.ProcessGroups()
    found = {"world": n, "runs": {}}
    for method in ("dcp", "bucket", "packed"):
        params, batches, padding, lockstep = train(method, docs, cost, sched, groups, mesh)
        ref = reference(CONFIG, docs, batches)
        rel = ((params - ref).abs().max() / ref.abs().max()).item()
        found["runs"][method] = {"max_relative_difference": rel, "padding_passes": padding, "lockstep": lockstep}
    report(found, sys.argv[1])


if __name__ == "__main__":
    main()
