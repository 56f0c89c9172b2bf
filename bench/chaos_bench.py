"""Chaos replay: in-place resizes under the busiest hour of the Summit trace, with the manager killed.

    PYTHONPATH=build/dev/python .venv/bin/python bench/chaos_bench.py [--nodes 8] [--time-scale 12]
        [--jobs 3] [--kills 3] [--seed 1]

A real ``bft manager`` (local source, real in-place workers: examples/runtime/elastic_synthetic.py
with PyTorch on CPU) plays the hour of ../shared/data/summit-idle-nodes-2021-02.csv.gz with the most
transitions, on the `--nodes` nodes that change state most often in it, accelerated `--time-scale`
times. `--jobs` jobs train throughout (more work than the hour allows). The manager is killed with
SIGKILL `--kills` times at random moments (seeded) and restarted at once. Measured (never pass/fail;
figures in bench/README.md): resize gaps (p50, p95, max; in place and relaunch), in-place failures,
job failures, relaunches, cold starts (a worker started without a warm standby), samples redone
(counts that went back: a resume from an older checkpoint), processes left running after the stop,
and the samples trained against ``bft replay`` of the same nodes and hour with the jobs' curves and
rescale costs as this run measured them.
"""

from __future__ import annotations

import argparse
import collections
import gzip
import json
import math
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Dict, List, Tuple

sys.path.insert(0, str(Path(__file__).resolve().parent))
from workload_args import OneLineParser, number, whole  # noqa: E402  (beside this script)

REPO = Path(__file__).resolve().parents[1]
DATA = REPO.parent / "shared" / "data"
TRACE = DATA / "summit-idle-nodes-2021-02.csv.gz"
ELASTIC = REPO / "examples" / "runtime" / "elastic_synthetic.py"
HOUR_S = 3600.0


def busiest_hour(path: Path, nodes: int) -> Tuple[float, List[str], List[Tuple[float, str, str]]]:
    """(start, the `nodes` nodes with the most transitions in the trace's busiest hour, their rows in
    that hour with an `idle` row at its start for each node idle then)."""
    rows = []
    with gzip.open(path, "rt") as f:
        next(f)
        for line in f:
            t, node, state = line.rstrip("\n").split(",")
            rows.append((float(t), node, state))
    counts: Dict[int, int] = collections.Counter(int(t // 600) for t, _, _ in rows)  # per 10 minutes
    start_bin = max(counts, key=lambda b: sum(counts.get(b + k, 0) for k in range(6)))
    start, end = start_bin * 600.0, start_bin * 600.0 + HOUR_S
    state: Dict[str, str] = {}
    per_node: Dict[str, int] = collections.Counter()
    inside = []
    for t, node, s in rows:
        if t < start:
            state[node] = s
        elif t < end:
            per_node[node] += 1
            inside.append((t, node, s))
    chosen = sorted(per_node, key=lambda n: (-per_node[n], n))[:nodes]
    picked = set(chosen)
    out = [(start, n, "idle") for n in chosen if state.get(n) == "idle"]
    out += [r for r in inside if r[1] in picked]
    return start, chosen, out


def quantiles(values: List[float]) -> Dict[str, Any]:
    v = sorted(values)
    if not v:
        return {"n": 0}
    return {"n": len(v), "p50": statistics.median(v), "p95": v[min(len(v) - 1, math.ceil(0.95 * len(v)) - 1)],
            "max": v[-1]}


def start_manager(state: Path, trace: Path, nodes: int, scale: float, start_s: float, log_path: Path):
    from bft.runtime.ops import control

    log = open(log_path, "ab")
    proc = subprocess.Popen(
        [sys.executable, "-m", "bft", "manager", "--state-dir", str(state), "--source", "local",
         "--local-trace", str(trace), "--local-nodes", str(nodes), "--local-time-scale", f"{scale:g}",
         "--local-start", f"{start_s:g}", "--local-grace-s", "5", "--resize", "inplace", "--grace", "5",
         "--tfwd", f"{600.0 / scale:g}"],
        stdout=log, stderr=subprocess.STDOUT, start_new_session=True, env=child_env())
    deadline = time.monotonic() + 120
    while True:
        try:
            status = control.request(state, {"op": "status"})["status"]
            return proc, status["manager"]["identity"]
        except control.ControlError:
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the manager did not start; see {log_path}") from None
            time.sleep(0.5)


def child_env() -> Dict[str, str]:
    env = dict(os.environ, OMP_NUM_THREADS="1", CUDA_VISIBLE_DEVICES="")
    return env


def measured_curve(progress: List[Dict[str, Any]], scale: float, max_nodes: int) -> Tuple[list, list]:
    """The jobs' throughput per node count as this run measured it (they run one script: the median,
    over every job, of the rates between consecutive reports of one generation at one size, in samples
    per trace second), linear between the sizes measured, flat beyond the largest."""
    rates: Dict[int, List[float]] = collections.defaultdict(list)
    by_job: Dict[str, list] = collections.defaultdict(list)
    for p in progress:
        by_job[p["job"]].append(p)
    for rows in by_job.values():
        for a, b in zip(rows, rows[1:]):
            dt = b["time_s"] - a["time_s"]
            if a["generation"] == b["generation"] and a["nodes"] == b["nodes"] > 0 and 0 < dt < 5:
                rates[a["nodes"]].append((b["samples"] - a["samples"]) / dt / scale)
    nodes, throughput = [0], [0.0]
    for n in sorted(rates):
        nodes.append(n)
        throughput.append(max(throughput[-1], statistics.median(rates[n])))
    if nodes[-1] < max_nodes:
        nodes.append(max_nodes)
        throughput.append(throughput[-1])
    return nodes, throughput


def run(args: argparse.Namespace, root: Path) -> Dict[str, Any]:
    from bft import sim
    from bft.runtime import StateStore, tagged_processes
    from bft.runtime.ops import control

    start_s, chosen, rows = busiest_hour(TRACE, args.nodes)
    trace = root / "hour.csv"
    trace.write_text("time,node,state\n" + "".join(f"{t:g},{n},{s}\n" for t, n, s in rows))
    wall_s = HOUR_S / args.time_scale
    state, log_path = root / "state", root / "manager.log"
    rng = random.Random(args.seed)
    kills = sorted(rng.uniform(0.1, 0.9) * wall_s for _ in range(args.kills))
    proc, identity = start_manager(state, trace, args.nodes, args.time_scale, start_s, log_path)
    identities = [identity]
    t0 = time.monotonic()
    for k in range(args.jobs):
        r = subprocess.run([sys.executable, "-m", "bft", "submit", str(ELASTIC), "--state-dir", str(state),
                            "--name", f"job{k}", "--min", "1", "--max", str(args.nodes), "--samples", "100000000",
                            "--", "--step-s", "0.05"], env=child_env(), capture_output=True, text=True)
        if r.returncode != 0:
            raise RuntimeError(r.stderr)
    for at in kills:
        time.sleep(max(0.0, at - (time.monotonic() - t0)))
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        proc, identity = start_manager(state, trace, args.nodes, args.time_scale, start_s, log_path)
        identities.append(identity)
    time.sleep(max(0.0, wall_s - (time.monotonic() - t0)))
    status = control.request(state, {"op": "status"})["status"]
    stop = subprocess.run([sys.executable, "-m", "bft", "manager", "stop", "--state-dir", str(state)],
                          env=child_env(), capture_output=True, text=True, timeout=180)
    proc.wait(60)
    left = sorted({pid for i in identities for pid in tagged_processes(i)})

    store = StateStore(state / "state.db", create=False, read_only=True)
    try:
        events = list(store.events(None, None))
        progress = [dict(p) for p in store.progress()]
    finally:
        store.close()
    by_kind = collections.Counter(e["kind"] for e in events)
    gaps = [e for e in events if e["kind"] == "resize_gap" and e.get("gap") == "resize"]
    launches = collections.Counter(e["job"] for e in events if e["kind"] == "launch")
    redone = 0.0
    for job in {p["job"] for p in progress}:
        rows_ = [p["samples"] for p in progress if p["job"] == job]
        redone += sum(max(0.0, a - b) for a, b in zip(rows_, rows_[1:]))
    samples = {j["id"]: j["samples"] for j in status["jobs"]}

    def median_gap(grow: bool):
        v = [g["gap_s"] for g in gaps if (g["to_nodes"] > g["from_nodes"]) == grow]
        return statistics.median(v) * args.time_scale if v else None

    # A start from nothing (the job had held no nodes): its gap without the nodeless wait, in trace seconds.
    restarts = [e["gap_s"] for e in events if e["kind"] == "resize_gap" and e.get("gap") == "restart"]
    restart_s = statistics.median(restarts) * args.time_scale if restarts else 0.0
    jobs = []
    nodes, throughput = measured_curve(progress, args.time_scale, args.nodes)
    for k in range(args.jobs):
        jobs.append({"name": f"job{k}", "submit": start_s, "min_nodes": 1, "max_nodes": args.nodes,
                     "work": 1e12, "scale_up_s": median_gap(True) or 0.0, "scale_down_s": median_gap(False) or 0.0,
                     "restart_s": restart_s, "nodes": nodes, "throughput": throughput, "objective": throughput})
    (root / "replay-jobs.jsonl").write_text("".join(json.dumps(j) + "\n" for j in jobs))
    replay = sim.replay(trace, root / "replay-jobs.jsonl", policy="exact", nodes=chosen, start_s=start_s,
                        end_s=start_s + HOUR_S, max_jobs=args.jobs, tfwd_s=600.0)
    return {
        "hour_start_s": start_s, "nodes": chosen, "transitions": len(rows), "time_scale": args.time_scale,
        "kills": len(kills), "stop_rc": stop.returncode,
        "gaps_s": {m: quantiles([g["gap_s"] for g in gaps if g.get("method") == m]) for m in ("inplace", "relaunch")},
        "resizes_inplace": by_kind["resize_inplace"], "inplace_failed": by_kind["inplace_failed"],
        "job_failed": by_kind["job_failed"], "worker_exited": by_kind["worker_exited"],
        "launches": dict(launches), "relaunches": sum(max(0, n - 1) for n in launches.values()),
        "recovered": by_kind["recovered"], "samples": samples, "samples_total": sum(samples.values()),
        "samples_redone": redone, "left_running": left,
        "replay_samples": float(replay.summary["samples_done"]), "replay_idle_capture": replay.summary["idle_capture"],
        "curve_nodes": nodes, "curve_samples_per_trace_s": throughput,
        "measured_costs_trace_s": {"scale_up_s": median_gap(True), "scale_down_s": median_gap(False),
                                   "restart_s": restart_s, "restarts_measured": len(restarts)},
    }


def main() -> None:
    p = OneLineParser(description=__doc__.splitlines()[0])
    # Checked as the flags are read: --nodes 0 was a traceback after the hour's selection, --time-scale 0 a
    # ZeroDivisionError. At most an hour played in a second; at least an hour in an hour.
    p.add_argument("--nodes", type=whole(1, 4608), default=8, help="nodes (Summit's count at most; default 8)")
    p.add_argument("--time-scale", type=number("trace seconds per wall second", positive=True, high=HOUR_S),
                   default=12.0, help="trace seconds per wall second (12: 5 minutes)")
    p.add_argument("--jobs", type=whole(1), default=3)
    p.add_argument("--kills", type=whole(0), default=3, help="kill -9 of the manager at random moments")
    p.add_argument("--seed", type=whole(0), default=1)
    p.add_argument("--keep", metavar="DIR", help="run in DIR and keep it (default: a temporary directory)")
    args = p.parse_args()
    if args.time_scale < 1:
        p.error(f"argument --time-scale: expected at least 1 (an hour in an hour), got {args.time_scale:g}")
    if not TRACE.exists():
        sys.exit(f"chaos_bench: {TRACE} not found (../shared/data beside the checkout)")
    if args.keep:
        root = Path(args.keep)
        root.mkdir(parents=True, exist_ok=True)
        result = run(args, root)
    else:
        with tempfile.TemporaryDirectory(prefix="bft-chaos-") as d:
            result = run(args, Path(d))
    replayed = result["replay_samples"]
    result["samples_vs_replay"] = result["samples_total"] / replayed if replayed else None
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
