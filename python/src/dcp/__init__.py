"""dcp: Data-Centric Parallel planning for training on variable-length sequences.

Python bindings of the dcp C++ library: cost models of a training job, the DCP planner and its
baselines, plans (checked, hashed, written as dcp.plan JSON), the resumable token-budget
sampler, the simulator behind ``dcp-sim``, and the scheduler a training loop talks to
(``dcp.torch`` runs its steps on torch.distributed).

Sequences are integer arrays: a 1-D array of lengths (text), or an (n, 2) array of
(frames, tokens per frame) rows (video); sequence ``i`` gets id ``i``.
"""

import logging
from collections import Counter
from typing import Any, Callable, Dict, Optional

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
    "summary",
    "log_plan",
    "logger",
    "workload",
    "workload_names",
]


#: The package's logger: ``log_plan`` writes one INFO line per global batch to it.
logger = logging.getLogger("dcp")


def summary(plan: Plan, plan_seconds: Optional[float] = None, observed_s: Optional[float] = None) -> Dict[str, Any]:
    """What one global batch's plan does, as plain values: sequences and tokens planned, the
    micro-steps of every rank, the histogram of group sizes (sp -> steps), steps and blocks
    recomputed, padding passes, sequences skipped, the predicted makespan and efficiency, and,
    when given, the seconds planning took and the seconds the batch was observed to take (with
    observed / predicted)."""
    if not isinstance(plan, Plan):
        raise TypeError(f"summary: plan must be a dcp.Plan, not {type(plan).__name__}")
    per_rank = [0] * plan.gpus
    sizes: Counter = Counter()
    recompute_steps = recompute_blocks = padding = tokens = sequences = 0
    for st in plan.steps:
        sizes[st.sp] += 1
        for r in range(*st.ranks):
            per_rank[r] += 1
        if not st.sequences:
            padding += 1
        if st.checkpointed_blocks > 0:
            recompute_steps += 1
            recompute_blocks += st.checkpointed_blocks
        sequences += len(st.sequences)
        tokens += sum(q.tokens for q in st.sequences)
    out: Dict[str, Any] = {
        "method": plan.method, "sequences": sequences, "tokens": tokens, "steps": len(plan.steps),
        "micro_steps_per_rank": per_rank, "sp_histogram": dict(sorted(sizes.items())),
        "recompute_steps": recompute_steps, "recompute_blocks": recompute_blocks, "padding_passes": padding,
        "skipped": len(plan.skipped), "predicted_s": plan.makespan_s, "efficiency": plan.efficiency(),
    }
    if plan_seconds is not None:
        out["plan_s"] = float(plan_seconds)
    if observed_s is not None:
        out["observed_s"] = float(observed_s)
        out["observed_over_predicted"] = float(observed_s) / plan.makespan_s if plan.makespan_s > 0 else float("nan")
    return out


def log_plan(plan: Plan, batch: Optional[int] = None, plan_seconds: Optional[float] = None,
             observed_s: Optional[float] = None,
             callback: Optional[Callable[[Dict[str, Any]], None]] = None) -> Dict[str, Any]:
    """Logs one INFO line on ``dcp.logger`` for a global batch's plan (``summary``'s values),
    calls ``callback(summary)`` if given (a progress bar, a metrics writer), and returns the
    summary. ``batch`` numbers the line."""
    s = summary(plan, plan_seconds, observed_s)
    if batch is not None:
        s["batch"] = int(batch)
    if logger.isEnabledFor(logging.INFO):
        ranks = s["micro_steps_per_rank"]
        sp = " ".join(f"sp{k}x{v}" for k, v in s["sp_histogram"].items())
        line = (f"batch {s.get('batch', '-')}: {s['method']} planned {s['sequences']} sequences, {s['tokens']} tokens"
                f" | {sp} | micro-steps per rank {min(ranks)}-{max(ranks)}"
                f" | recompute {s['recompute_steps']} steps, {s['recompute_blocks']} blocks"
                f" | padding {s['padding_passes']} | skipped {s['skipped']}"
                f" | predicted {s['predicted_s']:.4g} s, efficiency {s['efficiency']:.3f}")
        if "plan_s" in s:
            line += f" | planned in {1e3 * s['plan_s']:.1f} ms"
        if "observed_s" in s:
            line += f" | observed {s['observed_s']:.4g} s ({s['observed_over_predicted']:.2f}x predicted)"
        logger.info(line)
    if callback is not None:
        callback(s)
    return s
