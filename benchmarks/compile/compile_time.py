#!/usr/bin/env python3
"""Compile seconds and peak memory of one source file built two ways, measured in one run.

Each case is `name=target=objects`: the object files are deleted, the target is rebuilt with
`cmake --build`, and the wall seconds and the largest resident set of any process of that build
(the compiler) are recorded. Cases alternate for `--rounds` rounds, so that both see the same
machine; the report gives each case's median and the ratio to the first case. `--library` times
the compiled library's own sources once (what a build pays once, not per file).
"""
import argparse
import os
import statistics
import subprocess
import sys
import time

# Runs a command in a child interpreter and prints its wall seconds and the peak RSS (KiB) of its
# descendants: RUSAGE_CHILDREN of a fresh process covers exactly that one build.
_MEASURE = r"""
import resource, subprocess, sys, time
t = time.perf_counter()
rc = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT).returncode
print(rc, time.perf_counter() - t, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
"""


def build(build_dir, target, objects, jobs):
    for o in objects:
        if os.path.exists(o):
            os.remove(o)
    out = subprocess.run([sys.executable, "-c", _MEASURE, "cmake", "--build", build_dir, "--target", target,
                          "-j", str(jobs)], capture_output=True, text=True, check=True).stdout.split()
    rc, seconds, kib = int(out[0]), float(out[1]), int(out[2])
    if rc != 0:
        sys.exit(f"compile_time: building {target} failed (rc {rc}); run cmake --build {build_dir} --target {target}")
    return seconds, kib / 1024.0


def split(spec, parts):
    fields = spec.split("=", parts - 1)
    if len(fields) != parts:
        sys.exit(f"compile_time: '{spec}' is not name=target=objects")
    return fields


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", required=True, help="the CMake build folder")
    ap.add_argument("--case", action="append", required=True, help="name=target=obj1|obj2")
    ap.add_argument("--library", help="target=obj1|obj2: the compiled library, timed once")
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    cases = [split(c, 3) for c in args.case]
    results = {name: [] for name, _, _ in cases}
    for _ in range(max(1, args.rounds)):
        for name, target, objects in cases:
            results[name].append(build(args.build, target, objects.split("|"), 1))
    print(f"examples/integrate/main.cpp, {args.rounds} rounds, median (one compiler at a time):")
    base = None
    for name, _, _ in cases:
        seconds = statistics.median(s for s, _ in results[name])
        mib = statistics.median(m for _, m in results[name])
        base = base or (seconds, mib)
        print(f"  {name:<12} {seconds:7.1f} s  {mib:7.0f} MiB peak   {seconds / base[0]:.2f}x time, "
              f"{mib / base[1]:.2f}x memory")
    if args.library:
        target, objects = split(args.library, 2)
        objs = objects.split("|")
        seconds, mib = build(args.build, target, objs, 1)
        print(f"  {target}: {len(objs)} sources, {seconds:.1f} s one at a time, {mib:.0f} MiB peak (once per build)")


if __name__ == "__main__":
    main()
