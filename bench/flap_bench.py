"""What a flapping node and a cold grow cost the survivors of an in-place job, one source tree against
another in one run (issue 38, items 1-2). Medians; never pass/fail. Results: bench/README.md.

    PYTHONPATH=python .venv/bin/python bench/flap_bench.py --before 324d270 [--rounds 1]

Two scenarios, each on a real manager (local source, --resize inplace, --policy equal_share so the
job takes every idle node) with a one-node job that logs the wall time of each of its steps:

- **flap**: n1 is idle for 0.1, 0.2, ... 1.0 s, ten times, 8 s apart. The survivor's progress lost per
  flap is the time its steps took beyond their median, summed over [idle - 0.5 s, busy + 3 s];
  the same sum over the 4 s before each flap (nothing happens then) is the noise floor of the run.
- **cold grow**: n1 is idle for 12 s, four times, 20 s apart, without standbys (--no-standby), so each
  newcomer starts a new interpreter. The survivor's gap is the manager's ``resize_gap`` of the 1 -> 2
  grow (its last step at 1 node to its first at 2), and the survivor's excess over its median step in
  the 11 s after the decision.

``--before REV`` runs the tree at git revision REV (its python/ extracted to a temporary directory,
with this tree's compiled extension) beside this tree; the order alternates between rounds.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
STEP_S = 0.05
FLAPS = [0.1 * (k + 1) for k in range(10)]
FLAP_START_S, FLAP_EVERY_S = 15.0, 8.0
GROWS, GROW_START_S, GROW_EVERY_S, GROW_HELD_S = 4, 15.0, 20.0, 12.0
# A trace's times are whole seconds: it is written in tenths and played 10 times faster.
TIME_SCALE = 10

# The job: one small model trained in place, each step paced to STEP_S and its wall time logged.
SCRIPT = """
import os, sys, time
import torch
import bft.train as bt

out, step_s = sys.argv[1], float(sys.argv[2])
model = torch.nn.Linear(64, 64)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
state = bt.ElasticState(model=model, optimizer=optimizer, samples=0)
log = open(os.path.join(out, f"{os.getpid()}.txt"), "a", buffering=1)
while True:
    t = time.monotonic()
    loss = model(torch.randn(32, 64)).pow(2).mean()
    optimizer.zero_grad()
    loss.backward()
    if bt.world_size() > 1:  # (not state.ddp_model: its comm hook is refused by torch 2.13, see bench/README.md)
        for p in model.parameters():
            torch.distributed.all_reduce(p.grad)
    optimizer.step()
    state.samples += 32 * bt.world_size()
    bt.report(state.samples)
    time.sleep(max(0.0, step_s - (time.monotonic() - t)))
    state.commit()
    log.write(f"{time.time():.4f} {bt.world_size()}\\n")
"""


def extract_tree(rev: str, into: Path) -> Path:
    """python/ of git revision `rev` under `into`, with this tree's compiled extension."""
    archive = subprocess.run(["git", "-C", str(REPO), "archive", rev, "python"], check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    for core in (REPO / "python" / "bft").glob("_core*.so"):
        shutil.copy2(core, into / "python" / "bft" / core.name)
    return into / "python"


def run_scenario(pythonpath: Path, rows, options, seconds: float) -> dict:
    """One manager on the trace `rows` with the step-logging job for `seconds`; its trace origin (wall
    clock), the survivor's step times and the job's events."""
    tmp = Path(tempfile.mkdtemp(prefix="flap-bench-"))
    state, steps = tmp / "state", tmp / "steps"
    steps.mkdir()
    trace = tmp / "trace.csv"
    trace.write_text("time,node,state\n" + "".join(f"{round(t * TIME_SCALE)},{n},{s}\n" for t, n, s in rows))
    script = tmp / "steps_job.py"
    script.write_text(SCRIPT)
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(pythonpath))
    manager_log = open(tmp / "manager.log", "w")
    manager = subprocess.Popen([sys.executable, "-m", "bft", "manager", "--state-dir", str(state),
                                "--resize", "inplace", "--policy", "equal_share", "--local-trace", str(trace),
                                "--local-time-scale", str(TIME_SCALE), "--local-nodes", "2", "--local-grace-s", "5",
                                "--grace", "5", "--inplace-timeout", "30", *options],
                               env=env, stdout=manager_log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        for _ in range(300):  # until the manager answers on its control socket
            submit = subprocess.run([sys.executable, "-m", "bft", "submit", str(script), "--state-dir", str(state),
                                     "--name", "job", "--min", "1", "--max", "2", "--", str(steps), str(STEP_S)],
                                    env=env, capture_output=True, text=True)
            if submit.returncode == 0:
                break
            if manager.poll() is not None:
                raise RuntimeError(f"bft manager exited: {(tmp / 'manager.log').read_text().strip()}")
            time.sleep(0.2)
        else:
            raise RuntimeError(f"bft submit: {submit.stderr.strip()}")
        time.sleep(seconds)
    finally:
        manager.send_signal(signal.SIGTERM)
        try:
            manager.wait(90)
        except subprocess.TimeoutExpired:
            os.killpg(manager.pid, signal.SIGKILL)
        manager_log.close()
    t0 = json.loads((state / "local-source.json").read_text())["t0"]
    logs = [[float(line.split()[0]) for line in f.read_text().splitlines() if line.strip()]
            for f in steps.glob("*.txt")]
    db = sqlite3.connect(state / "state.db")
    events = [json.loads(row[0]) | {"kind": row[1], "time_s": row[2], "job": row[3]}
              for row in db.execute("SELECT detail, kind, time_s, job FROM events ORDER BY id")]
    db.close()
    shutil.rmtree(tmp, ignore_errors=True)
    survivor = max(logs, key=len) if logs else []  # the process on n0 steps from the start to the end
    return {"t0": t0, "steps": survivor, "events": events}


def excess_s(steps, median: float, start: float, end: float) -> float:
    """Time the steps between `start` and `end` took beyond the median step."""
    return sum(max(0.0, b - a - median) for a, b in zip(steps, steps[1:]) if start <= b and a <= end)


def flap(pythonpath: Path) -> dict:
    rows = [(0, "n0", "idle")]  # (every node is busy before its first line)
    for k, held in enumerate(FLAPS):
        t = FLAP_START_S + k * FLAP_EVERY_S
        rows += [(t, "n1", "idle"), (t + held, "n1", "busy")]
    run = run_scenario(pythonpath, rows, (), FLAP_START_S + len(FLAPS) * FLAP_EVERY_S + 5)
    steps, t0 = run["steps"], run["t0"]
    median = statistics.median(b - a for a, b in zip(steps, steps[1:]))
    lost, quiet = [], []
    for k, held in enumerate(FLAPS):
        t = t0 + FLAP_START_S + k * FLAP_EVERY_S
        lost.append(excess_s(steps, median, t - 0.5, t + held + 3.0))
        quiet.append(excess_s(steps, median, t - 4.5, t - 0.5))
    kinds = [e["kind"] for e in run["events"] if e.get("job") == "job"]
    return {"lost_per_flap_s": lost, "quiet_s": quiet, "median_step_s": median,
            "generations": sum(k in ("resize_inplace",) for k in kinds), "launches": kinds.count("launch"),
            "failed": sum(k in ("inplace_failed", "job_failed") for k in kinds)}


def cold_grow(pythonpath: Path) -> dict:
    rows = [(0, "n0", "idle")]  # (every node is busy before its first line)
    for k in range(GROWS):
        t = GROW_START_S + k * GROW_EVERY_S
        rows += [(t, "n1", "idle"), (t + GROW_HELD_S, "n1", "busy")]
    run = run_scenario(pythonpath, rows, ("--no-standby",), GROW_START_S + GROWS * GROW_EVERY_S + 5)
    steps, t0 = run["steps"], run["t0"]
    median = statistics.median(b - a for a, b in zip(steps, steps[1:]))
    stalls = [excess_s(steps, median, t0 + GROW_START_S + k * GROW_EVERY_S, t0 + GROW_START_S + k * GROW_EVERY_S + 11)
              for k in range(GROWS)]
    gaps = [e["gap_s"] for e in run["events"] if e["kind"] == "resize_gap" and e.get("job") == "job"
            and e["from_nodes"] == 1 and e["to_nodes"] == 2]
    kinds = [e["kind"] for e in run["events"] if e.get("job") == "job"]
    return {"grow_gap_s": gaps, "survivor_excess_s": stalls, "median_step_s": median,
            "launches": kinds.count("launch"), "failed": sum(k in ("inplace_failed", "job_failed") for k in kinds)}


def median(values) -> float:
    return statistics.median(values) if values else float("nan")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--before", required=True, metavar="REV", help="the git revision to compare this tree against")
    p.add_argument("--rounds", type=int, default=1, help="rounds of both trees, alternating their order")
    a = p.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="flap-before-"))
    trees = {"before": extract_tree(a.before, tmp), "after": REPO / "python"}
    results = {name: {"flap": [], "grow": []} for name in trees}
    try:
        for r in range(a.rounds):
            for name in (["before", "after"] if r % 2 == 0 else ["after", "before"]):
                print(f"round {r + 1}: {name} (load {os.getloadavg()[0]:.1f})", flush=True)
                results[name]["flap"].append(flap(trees[name]))
                print(json.dumps({name: results[name]["flap"][-1]}), flush=True)
                results[name]["grow"].append(cold_grow(trees[name]))
                print(json.dumps({name: results[name]["grow"][-1]}), flush=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    summary = {}
    for name, r in results.items():
        summary[name] = {
            "lost_per_flap_s": median([x for f in r["flap"] for x in f["lost_per_flap_s"]]),
            "quiet_s": median([x for f in r["flap"] for x in f["quiet_s"]]),
            "flap_generations": sum(f["generations"] for f in r["flap"]),
            "grow_gap_s": median([x for g in r["grow"] for x in g["grow_gap_s"]]),
            "grow_survivor_excess_s": median([x for g in r["grow"] for x in g["survivor_excess_s"]]),
            "relaunches": sum(f["launches"] - 1 for f in r["flap"]) + sum(g["launches"] - 1 for g in r["grow"]),
            "failed": sum(f["failed"] for f in r["flap"]) + sum(g["failed"] for g in r["grow"]),
        }
    print(json.dumps({"summary": summary, "load_end": os.getloadavg()[0]}, indent=1))


if __name__ == "__main__":
    main()
