"""Worker of test_torch.py, run under torchrun with 4 ranks: dcp on part of the job. Two worlds
train the example GPT under dcp plans (sp 2 steps, so the plans' groups are used), each world on
its own, and every rank compares its parameters with the single-process full-batch run of
torch_exactness.py. argv[1] picks the worlds:

- ``replicas``: ``dist.new_group([0, 1])`` and ``dist.new_group([2, 3])``;
- ``uneven``: ``dist.new_group([0])`` and ``dist.new_group([1, 2, 3])``: on 3 ranks the plans'
  groups of 2 ranks are split from the world's group (world rank 0 is global rank 1);
- ``mesh``: a 2 x 2 DeviceMesh ("dcp", "replica"), the worlds along "dcp": global ranks [0, 2]
  and [1, 3], so that a world's ranks are neither its global ranks nor contiguous.

Rank 0 writes every rank's findings as JSON to argv[2]."""

import os
import sys

import torch.distributed as dist

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import dcp  # noqa: E402
import dcp.torch  # noqa: E402
from torch_exactness import CONFIG, documents, reference, report, scaled_device, train  # noqa: E402

BATCH_TOKENS = 320
SEED = 4


def main():
    kind, out = sys.argv[1], sys.argv[2]
    dist.init_process_group("gloo")
    me = dist.get_rank()
    assert dist.get_world_size() == 4, "run with --nproc_per_node 4"
    if kind == "replicas":
        halves = [dist.new_group([0, 1]), dist.new_group([2, 3])]  # collective: every rank creates both
        world = dcp.torch.World(halves[me // 2])
    elif kind == "uneven":
        parts = [dist.new_group([0]), dist.new_group([1, 2, 3])]
        world = dcp.torch.World(parts[min(me, 1)])
    else:
        from torch.distributed.device_mesh import init_device_mesh

        mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dcp", "replica"))
        world = dcp.torch.World(mesh, dim="dcp")
    docs = documents()
    # 24 tokens per rank without recompute: the longest documents need sp 2 (40 on one rank).
    fit = 40 if world.size() == 1 else 24
    cost = dcp.Cost(CONFIG.spec(), device=scaled_device(CONFIG.spec(), world.size(), fit), gpus=world.size())
    sched = dcp.Scheduler(cost, world=world, global_batch_tokens=BATCH_TOKENS, seed=SEED)
    groups = dcp.torch.ProcessGroups()
    params, batches, seen = train(CONFIG, "dcp", docs, cost, sched, groups)
    ref = reference(CONFIG, docs, batches)
    finding = {"global_rank": me, "world_ranks": world.ranks, "rank": world.rank(), "size": world.size(),
               "max_relative_difference": ((params - ref).abs().max() / ref.abs().max()).item(),
               "finite": bool(params.isfinite().all()), "max_sp": seen["max_sp"], "groups_created": groups.created}
    report(finding, out, every_rank=True)


if __name__ == "__main__":
    main()
