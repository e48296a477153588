"""ctest example.python_quickstart: examples/python_train/quickstart.py resumes where it stopped.

    python quickstart_resume.py OUT -- python -m torch.distributed.run ... quickstart.py

runs the launch command given after ``--`` three times, each with ``--steps`` and ``--checkpoint``
in OUT appended: 4 steps straight; 2 steps; then 4 steps again from the 2-step checkpoint. The
resumed run must start from the sampler position and step index the 2-step run logged last,
train steps 3 and 4 only, and log for them the losses, tokens and sampler positions of the
straight run's steps 3 and 4. Exits 1, printing the runs' logs, where any of that fails."""

import os
import re
import subprocess
import sys

STEP = re.compile(r"^quickstart: step (\d+): (loss \S+ over \d+ tokens, sampler epoch \d+ position \d+)$", re.M)
RESUMED = re.compile(r"^quickstart: resumed from \S+ at step (\d+), sampler epoch (\d+) position (\d+)$", re.M)


def launch(command, steps, checkpoint):
    run = subprocess.run(command + ["--steps", str(steps), "--checkpoint", checkpoint], capture_output=True,
                         text=True, timeout=240, env=dict(os.environ, OMP_NUM_THREADS="1"))
    log = run.stdout + run.stderr
    if run.returncode != 0:
        sys.exit(f"{' '.join(command)} --steps {steps} exited with {run.returncode}:\n{log[-6000:]}")
    return log


def main():
    out, command = sys.argv[1], sys.argv[sys.argv.index("--") + 1:]
    os.makedirs(out, exist_ok=True)
    for name in ("straight.pt", "resumed.pt"):
        if os.path.exists(os.path.join(out, name)):
            os.remove(os.path.join(out, name))  # a checkpoint from an earlier run would be resumed
    straight = launch(command, 4, os.path.join(out, "straight.pt"))
    first = launch(command, 2, os.path.join(out, "resumed.pt"))
    second = launch(command, 4, os.path.join(out, "resumed.pt"))
    logs = f"--- 4 steps:\n{straight}\n--- 2 steps:\n{first}\n--- resumed to 4:\n{second}"

    straight_steps = dict(STEP.findall(straight))
    first_steps = dict(STEP.findall(first))
    second_steps = dict(STEP.findall(second))
    resumed = RESUMED.findall(second)
    last = re.search(r"sampler epoch (\d+) position (\d+)$", first_steps.get("2", ""))
    problems = []
    if sorted(straight_steps) != ["1", "2", "3", "4"] or sorted(first_steps) != ["1", "2"]:
        problems.append("the runs did not log steps 1-4 and 1-2")
    if not last or resumed != [("2",) + last.groups()]:
        problems.append(f"the resumed run logged {resumed}, not step 2 at the 2-step run's last sampler position")
    if sorted(second_steps) != ["3", "4"]:
        problems.append(f"the resumed run trained steps {sorted(second_steps)}, not 3 and 4")
    for s in ("3", "4"):
        if second_steps.get(s) != straight_steps.get(s):
            problems.append(f"step {s}: resumed {second_steps.get(s)!r}, straight {straight_steps.get(s)!r}")
    if problems:
        print(logs)
        sys.exit("quickstart.py did not resume where it stopped:\n  " + "\n  ".join(problems))
    print(f"resumed at step 2 (sampler epoch {last.group(1)} position {last.group(2)}); steps 3 and 4 equal "
          f"the straight run's: {second_steps['3']}; {second_steps['4']}")


if __name__ == "__main__":
    main()
