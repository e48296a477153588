"""Worker of test_torch.py, run under torchrun with 2 ranks: what a user gets wrong. Collective
calls made on rank 0 only end in dcp.Error (code timeout) naming the call within the World's
timeout; wrong types and values are TypeError / ValueError; a rank asked for another rank's step
is a dcp.Error. Rank 0 writes what it found as JSON to argv[1]."""

import os
import sys
import time

import numpy as np
import torch.distributed as dist

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import dcp  # noqa: E402
import dcp.torch  # noqa: E402
from torch_exactness import CONFIG, documents, report, scaled_device  # noqa: E402

TIMEOUT = 3.0


def alone(call):
    """Runs ``call`` on rank 0 only: (error code, message, seconds)."""
    found = None
    if dist.get_rank() == 0:
        start = time.monotonic()
        try:
            call()
            found = ("none", "", time.monotonic() - start)
        except dcp.Error as e:
            found = (e.code, str(e), time.monotonic() - start)
    dist.barrier()  # the default group: rank 1 waits here for rank 0
    return found


def raised(call):
    """The name of the exception ``call`` raises, and its message ("" where none)."""
    try:
        call()
    except Exception as e:  # noqa: BLE001 - the test asserts the type
        return [type(e).__name__, getattr(e, "code", ""), str(e)]
    return ["", "", ""]


def main():
    dist.init_process_group("gloo")
    docs = documents()
    lengths = np.array([d.size - 1 for d in docs])
    cost = dcp.Cost(CONFIG.spec(), device=scaled_device(CONFIG.spec(), 2, 24), gpus=2)
    found = {}

    sched = dcp.Scheduler(cost, world=dcp.torch.World(timeout=TIMEOUT), global_batch_tokens=320, seed=4)
    plan = sched.plan(lengths[:12])
    found["verify"] = alone(lambda: sched.verify(plan))
    calibrating = dcp.Scheduler(cost, world=dcp.torch.World(timeout=TIMEOUT), calibration=True,
                                global_batch_tokens=320, seed=4)
    first = calibrating.plan(lengths[:12])  # together; then each rank observes its steps
    for step in calibrating.steps_for(first):
        calibrating.observe(step, 1e-3 * (1 + step.index))
    found["calibrating_plan"] = alone(lambda: calibrating.plan(lengths[12:24]))  # exchanges the observations
    found["after_timeout"] = alone(lambda: sched.verify(plan))  # the world that timed out stays unusable

    from torch.distributed.device_mesh import init_device_mesh

    mesh = init_device_mesh("cpu", (2, 1), mesh_dim_names=("dp", "tp"))
    found["types"] = {
        "world_of_a_string": raised(lambda: dcp.torch.World("dp")),
        "timeout_text": raised(lambda: dcp.torch.World(timeout="3")),
        "timeout_zero": raised(lambda: dcp.torch.World(timeout=0)),
        "mesh_without_dim": raised(lambda: dcp.torch.World(mesh)),
        "mesh_unknown_dim": raised(lambda: dcp.torch.World(mesh, dim="cp")),
        "dim_of_a_group": raised(lambda: dcp.torch.World(None, dim="dp")),
        "prepare_a_string": raised(lambda: dcp.torch.ProcessGroups().prepare("sched", plan)),
        "gradients_over_a_list": raised(lambda: dcp.torch.all_reduce_gradients([], group=[0, 1])),
    }
    mesh_world = dcp.torch.World(mesh, dim="dp")
    found["mesh_world"] = [mesh_world.rank(), mesh_world.size(), mesh_world.ranks]

    # Every step of the other rank: asked of this rank, the groups and micro_batch refuse it.
    # dcp's full plan (restrictions off) gives each rank steps of its own here
    good = dcp.Scheduler(cost, world=dcp.torch.World(), global_batch_tokens=320, seed=4, restrictions=False)
    p = good.plan(lengths[:12])
    groups = dcp.torch.ProcessGroups()
    groups.prepare(good, p)
    other = 1 - dist.get_rank()
    foreign = [s for s in good.steps_for(p, rank=other) if dist.get_rank() not in s.gpus]
    found["foreign_steps"] = len(foreign)
    if foreign:
        found["foreign_micro_batch"] = raised(lambda: dcp.torch.micro_batch(foreign[0], groups, docs))
        found["foreign_group"] = raised(lambda: groups[[other]])
    report(found, sys.argv[1], every_rank=True)


if __name__ == "__main__":
    main()
