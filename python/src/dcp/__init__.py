"""dcp: Data-Centric Parallel planning for training on variable-length sequences.

Python bindings of the dcp C++ library: cost models of a training job, the DCP planner and its
baselines, plans (checked, hashed, written as dcp.plan JSON), the resumable token-budget
sampler, the simulator behind ``dcp-sim``, and the scheduler a training loop talks to
(``dcp.torch`` runs its steps on torch.distributed).

Sequences are integer arrays: a 1-D array of lengths (text), or an (n, 2) array of
(frames, tokens per frame) rows (video); sequence ``i`` gets id ``i``.
"""

from ._dcp import (
    Cost,
    Device,
    Error,
    Model,
    Plan,
    PlannedSequence,
    RankStep,
    Sampler,
    Scheduler,
    SkippedSequence,
    Step,
    device_names,
    device_preset,
    method_names,
    model_from_config,
    model_names,
    model_preset,
    plan,
    plans_from_json,
    plans_to_json,
    simulate,
    workload,
    workload_names,
)

__all__ = [
    "Cost",
    "Device",
    "Error",
    "Model",
    "Plan",
    "PlannedSequence",
    "RankStep",
    "Sampler",
    "Scheduler",
    "SkippedSequence",
    "Step",
    "device_names",
    "device_preset",
    "method_names",
    "model_from_config",
    "model_names",
    "model_preset",
    "plan",
    "plans_from_json",
    "plans_to_json",
    "simulate",
    "workload",
    "workload_names",
]
