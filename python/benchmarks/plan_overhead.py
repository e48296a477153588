"""What planning from Python costs over the C++ call: ``dcp.plan`` and ``Scheduler.plan`` timed
from Python against ``dcp._dcp._plan_seconds``, the same C++ planning call timed inside C++, on
the same batch, alternating call by call so both see the same machine. Prints the median of each
and their ratio per batch size; the target is at most 1.2x. Seeds are fixed and printed.

    PYTHONPATH=build/python/python_package python3 python/benchmarks/plan_overhead.py
"""

import argparse
import statistics
import time

import numpy as np

import dcp


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="llama3-8b")
    ap.add_argument("--repeats", type=int, default=15)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    print(f"model {a.model}, {a.repeats} repeats per size, lengths log-uniform in [256, 131072] from seed {a.seed}")
    print(f"{'gpus':>5} {'sequences':>9} {'C++ (ms)':>9} {'dcp.plan (ms)':>13} {'ratio':>6} "
          f"{'Scheduler.plan (ms)':>19} {'ratio':>6}")
    for gpus, n in ((64, 256), (256, 1024), (1024, 4096), (1024, 16384)):
        rng = np.random.default_rng(a.seed)
        lengths = np.exp(rng.uniform(np.log(256), np.log(131072), n)).astype(np.int64)
        cost = dcp.Cost(a.model, "h200", gpus=gpus)
        sched = dcp.Scheduler(cost)
        cpp, py, sch = [], [], []
        dcp.plan(cost, lengths)  # warm: first-touch allocations
        for _ in range(a.repeats):
            cpp += dcp._dcp._plan_seconds(cost, lengths, "dcp", 1)
            t0 = time.perf_counter()
            dcp.plan(cost, lengths)
            py.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            sched.plan(lengths)
            sch.append(time.perf_counter() - t0)
        c, p, s = (statistics.median(v) * 1e3 for v in (cpp, py, sch))
        print(f"{gpus:>5} {n:>9} {c:>9.2f} {p:>13.2f} {p / c:>6.3f} {s:>19.2f} {s / c:>6.3f}")


if __name__ == "__main__":
    main()
