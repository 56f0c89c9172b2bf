"""Summit-scale load on the real manager (measurements, never pass/fail; figures in bench/README.md).

    PYTHONPATH=build/dev/python .venv/bin/python bench/load_bench.py [--repeats 3] [--queued 1000]

A real ``bft manager`` (local source, real SQLite, real decisions, real process starts and stops)
plays the Summit idle-node trace (all its nodes) at ``--time-scale`` (default 100) with the
emulated launcher (``--local-emulate``, docs/runtime.md); the ImageNet jobs are submitted at their
arrival times in scaled time, each an emulated job (bft.runtime.sources.emulated) that advances by its true
curve. Measured per run: events handled per second, manager CPU per event (/proc/<pid>/stat),
decision latency (the manager's own, arrival of an event to a decided map), how far the manager's
handling of node events lags the trace, the state database's size and growth per trace day, and
samples done against ``bft replay`` of the same window, nodes, jobs and costs. Then one run of
``--queued-start``'s window, later than every job's arrival: all 1,001 jobs are queued at once, and
its 4 hours hold the trace's busiest burst (34,844 transitions, up to 2,875 idle nodes).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Dict, List, Optional

REPO = Path(__file__).resolve().parents[1]
DATA = REPO.parent / "shared" / "data"  # ../shared/data beside the checkout
EMULATED = REPO / "python" / "bft" / "runtime" / "sources" / "emulated.py"
CLK_TCK = os.sysconf("SC_CLK_TCK")


def cpu_s(pid: int) -> float:
    """utime + stime of a process, seconds (fields 14 and 15 of /proc/<pid>/stat)."""
    with open(f"/proc/{pid}/stat", "rb") as f:
        fields = f.read().rsplit(b")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def quantiles(values: List[float]) -> Dict[str, Optional[float]]:
    v = sorted(values)
    if not v:
        return {"p50": None, "p99": None, "max": None}
    return {"p50": v[len(v) // 2], "p99": v[min(len(v) - 1, int(0.99 * len(v)))], "max": v[-1]}


def load_jobs(path: Path, end_s: float, limit: Optional[int], work: Optional[float]) -> List[Dict[str, Any]]:
    """The workload's jobs submitted before `end_s` (the first `limit`), `work` overriding theirs."""
    jobs = []
    for line in path.read_text().splitlines():
        if line.strip():
            job = json.loads(line)
            if job["submit"] < end_s:
                jobs.append(dict(job, work=work or job["work"]))
    jobs.sort(key=lambda j: j["submit"])
    return jobs[:limit] if limit else jobs


def submit_request(job: Dict[str, Any], time_scale: float) -> Dict[str, Any]:
    curve = json.dumps({"nodes": job["nodes"], "throughput": job["throughput"]})
    return {"op": "submit", "name": job["name"], "script": str(EMULATED), "cwd": str(REPO), "python": sys.executable,
            "args": ["--curve", curve, "--time-scale", f"{time_scale:g}", "--scale-up-s", f"{job['scale_up_s']:g}",
                     "--scale-down-s", f"{job['scale_down_s']:g}"],
            "min_nodes": job["min_nodes"], "max_nodes": job["max_nodes"], "work": job["work"]}


def node_event_lags(store, trace, names: List[str], start_s: float, t0: float, time_scale: float) -> List[float]:
    """Seconds between each node event's due time (the trace's time, scaled) and the manager's
    handling of it (its event log), for the events after the start. The source drops transitions that
    change nothing, so the same filter pairs the trace's events with the logged ones in order."""
    keep = set(names)
    all_names = list(trace.node_names)
    idle: Dict[str, bool] = {}
    due = []
    initial = None  # the source's joins of the nodes idle at the start come first in the log
    for t, node, state in zip(trace.times.tolist(), trace.nodes.tolist(), trace.states.tolist()):
        name = all_names[node]
        if name not in keep:
            continue
        if t < start_s:
            idle[name] = state == 1
            continue
        if initial is None:
            initial = sum(idle.values())
        if idle.get(name, False) == (state == 1):
            continue
        idle[name] = state == 1
        due.append(t0 + (t - start_s) / time_scale)
    logged = [e["time_s"] for e in store.events(("join", "reclaim"))]
    return [max(0.0, handled - d) for d, handled in zip(due, logged[initial or 0:])]


def drive(root: Path, trace_path: Path, jobs_path: Path, nodes: int, start_s: float, window_s: Optional[float],
          time_scale: float, max_jobs: int = 10, limit: Optional[int] = None, work: Optional[float] = None,
          timeout_s: float = 3600.0, grace_s: float = 5.0) -> Dict[str, Any]:
    """One run of the real manager. With `window_s` it stops at the window's end; without, once every
    submitted job has ended (or after `timeout_s`). Returns the measurements and the final status."""
    from bft import sim
    from bft.runtime import ACTIVE_STATES, StateStore, tagged_processes
    from bft.runtime.ops import control

    state = root / "state"
    end_s = start_s + window_s if window_s is not None else math.inf
    jobs = load_jobs(jobs_path, end_s, limit, work)
    scale = float(time_scale)
    log = open(root / "manager.log", "wb")
    manager = subprocess.Popen(
        [sys.executable, "-m", "bft", "manager", "--state-dir", str(state), "--source", "local",
         "--local-trace", str(trace_path), "--local-nodes", str(nodes), "--local-time-scale", f"{scale:g}",
         "--local-start", f"{start_s:g}", "--local-emulate", "--local-grace-s", f"{grace_s / scale:g}",
         "--max-jobs", str(max_jobs), "--resize", "relaunch", "--grace", "5",
         # The manager's clock is wall time: the allocator's horizon and its rescale-cost priors scaled as the trace.
         "--tfwd", f"{10.0 / scale:g}", "--scale-up-s", f"{18.0 / scale:g}", "--scale-down-s", f"{12.0 / scale:g}"],
        stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        started = time.monotonic()
        while True:  # the manager imports torch before it holds its lock: wait for it to answer
            try:
                status = control.request(state, {"op": "status"})["status"]
                break
            except control.ControlError:
                if manager.poll() is not None or time.monotonic() - started > 120:
                    raise
                time.sleep(0.5)
        pid, identity = status["manager"]["pid"], status["manager"]["identity"]
        t0 = json.loads((state / "local-source.json").read_text())["t0"]
        cpu0, wall0 = cpu_s(pid), time.time()
        submitted: List[str] = []
        refused: List[str] = []  # submits not answered in time (the manager may take them later) or refused

        def submit_all() -> None:
            for job in jobs:  # those that arrived before the window's start at once
                time.sleep(max(0.0, t0 + (job["submit"] - start_s) / scale - time.time()))
                if manager.poll() is not None:
                    return
                try:
                    control.request(state, submit_request(job, scale))
                    submitted.append(job["name"])
                except control.ControlError as e:
                    refused.append(f"{job['name']}: {e}")

        submitter = threading.Thread(target=submit_all, daemon=True)
        submitter.start()
        deadline = t0 + (window_s / scale if window_s is not None else timeout_s)
        while time.time() < deadline and manager.poll() is None:
            time.sleep(min(1.0, max(0.0, deadline - time.time())))
            if window_s is None and not submitter.is_alive():
                jobs_now = control.request(state, {"op": "status"})["status"]["jobs"]
                if all(j["state"] not in ACTIVE_STATES for j in jobs_now):
                    break
        if manager.poll() is not None:
            raise RuntimeError(f"the manager exited ({manager.returncode}); see {root / 'manager.log'}")
        status = control.request(state, {"op": "status"})["status"]
        cpu, wall = cpu_s(pid) - cpu0, time.time() - wall0
        trace_end = start_s + (time.time() - t0) * scale
        control.request(state, {"op": "stop"}, timeout_s=120)
        manager.wait(120)
        orphans = tagged_processes(identity)
    finally:
        if manager.poll() is None:
            os.killpg(manager.pid, signal.SIGKILL)
            manager.wait()
        log.close()
    store = StateStore(state / "state.db", create=False, read_only=True)
    counts: Dict[str, int] = {}
    for e in store.events():
        counts[e["kind"]] = counts.get(e["kind"], 0) + 1
    reports = sum(1 for _ in store.progress())
    trace = sim.read_trace(trace_path)
    names = list(trace.node_names)[:nodes]
    lags = node_event_lags(store, trace, names, start_s, t0, scale)
    # The manager records a process row per node, started and ended (a commit each): how long a
    # generation's rows took to write from its first to its last, at its start and at its end.
    spans = store.db.execute("SELECT COUNT(*), MAX(started_s) - MIN(started_s), MAX(ended_s) - MIN(ended_s) "
                             "FROM procs GROUP BY job, generation").fetchall()
    held = node_hours(store, t0 + (min(trace_end, end_s) - start_s) / scale, scale)
    gaps = [json.loads(d) for (d,) in store.db.execute("SELECT detail FROM events WHERE kind = 'resize_gap'")]
    store.close()
    db_bytes = sum(p.stat().st_size for p in state.glob("state.db*"))
    node_events = counts.get("join", 0) + counts.get("reclaim", 0)
    handled = node_events + reports + status["manager"]["bad_reports"] + len(submitted)
    trace_days = (min(trace_end, end_s) - start_s) / 86400
    samples = sum(j["samples"] for j in status["jobs"])
    return {"nodes": len(names), "jobs_submitted": len(submitted), "submits_failed": refused, "wall_s": wall,
            "node_events": node_events, "reports": reports, "dropped_reports": status["manager"]["dropped_reports"],
            "events_handled": handled, "events_per_s": handled / wall,
            "cpu_s": cpu, "cpu_ms_per_event": 1000 * cpu / max(1, handled), "cpu_share": cpu / wall,
            "decisions": status["manager"]["decisions"], "decision_latency_s": status["manager"]["decision_latency_s"],
            "node_event_lag_s": quantiles(lags), "db_bytes": db_bytes, "db_bytes_per_trace_day": db_bytes / trace_days,
            "trace_days": trace_days, "samples_done": samples, "launches": counts.get("launch", 0),
            "proc_rows": sum(n for n, _, _ in spans), "generation_nodes": quantiles([n for n, _, _ in spans]),
            "launch_rows_s": quantiles([a for _, a, _ in spans]),
            "end_rows_s": quantiles([e for _, _, e in spans if e is not None]), "orphans": orphans,
            "node_hours_held": held["held"], "node_hours_training": held["training"],
            "measured_costs_s": measured_costs(gaps, scale),
            "jobs": status["jobs"], "job_specs": jobs, "trace_end_s": min(trace_end, end_s)}


def measured_costs(gaps: List[Dict[str, Any]], time_scale: float) -> Dict[str, Optional[float]]:
    """The rescale costs the run paid, in trace seconds: the medians of the manager's resize gaps (last
    report at the old size to first at the new, `resize_gap` events) of grows and of shrinks."""
    def median(values):
        return statistics.median(values) * time_scale if values else None
    return {"scale_up_s": median([g["gap_s"] for g in gaps if g["to_nodes"] > g["from_nodes"]]),
            "scale_down_s": median([g["gap_s"] for g in gaps if 0 < g["to_nodes"] < g["from_nodes"]])}


def replay_summary(trace_path: Path, jobs: List[Dict[str, Any]], nodes: List[str], start_s: float, end_s: float,
                   curves: str, root: Path) -> Dict[str, Any]:
    """`bft replay` of the same window, nodes, jobs (arrivals, curves, costs) and cap: its summary."""
    from bft import sim

    path = root / "replay-jobs.jsonl"
    path.write_text("".join(json.dumps(j) + "\n" for j in jobs))
    result = sim.replay(trace_path, path, policy="exact", curves=curves, nodes=nodes, start_s=start_s, end_s=end_s,
                        max_jobs=10, tfwd_s=10.0)
    return dict(result.summary)


def node_hours(store, end_wall: float, time_scale: float) -> Dict[str, float]:
    """Trace node-hours the jobs held (each node's process row, start to end or the run's end), and of
    them those after the generation's first report: the rest is start-up, the emulated rescale stall
    and stopping, which the replay charges as its rescale costs only."""
    first_report: Dict[tuple, float] = {}
    for p in store.progress():
        key = (p["job"], p["generation"])
        first_report[key] = min(first_report.get(key, math.inf), p["time_s"])
    held = training = 0.0
    for job, generation, started, ended in store.db.execute("SELECT job, generation, started_s, ended_s FROM procs"):
        end = min(ended if ended is not None else end_wall, end_wall)
        held += max(0.0, end - started)
        training += max(0.0, end - max(started, first_report.get((job, generation), math.inf)))
    return {"held": held * time_scale / 3600, "training": training * time_scale / 3600}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--trace", type=Path, default=DATA / "summit-idle-nodes-2021-02.csv.gz")
    p.add_argument("--jobs", type=Path, default=DATA / "jobs-imagenet-throughput-1001.jsonl")
    p.add_argument("--nodes", type=int, default=100_000, help="the trace's first N nodes (default: all)")
    p.add_argument("--start", type=float, default=72_000.0, help="window start, trace seconds (default 72000)")
    p.add_argument("--hours", type=float, default=4.0, help="window length, trace hours (default 4)")
    p.add_argument("--time-scale", type=float, default=100.0)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--queued-start", type=float, default=216_000.0,
                   help="window start of the run with every job queued (default 216000; negative: no such run)")
    p.add_argument("--keep", action="store_true", help="keep the runs' state directories")
    args = p.parse_args()
    from bft import sim

    runs = []
    for _ in range(args.repeats):
        root = Path(tempfile.mkdtemp(prefix="bft-load-"))
        r = drive(root, args.trace, args.jobs, args.nodes, args.start, args.hours * 3600, args.time_scale)
        names = list(sim.read_trace(args.trace).node_names)[: args.nodes]
        for curves in ("oracle", "learned"):
            summary = replay_summary(args.trace, r["job_specs"], names, args.start, r["trace_end_s"], curves, root)
            r[f"replay_{curves}"] = float(summary["samples_done"])
            r[f"replay_{curves}_node_hours"] = float(summary["used_node_hours"])
            r[f"replay_{curves}_idle_node_hours"] = float(summary["idle_node_hours"])
        # The same replay charged the rescale costs this run measured: what the manager's decisions
        # are worth apart from what a resize costs at this time scale (the emulated processes' start
        # and stop take fixed wall time, 100 times as much trace time at 100x).
        costs = r["measured_costs_s"]
        if costs["scale_up_s"] is not None and costs["scale_down_s"] is not None:
            specs = [dict(j, **costs) for j in r["job_specs"]]
            summary = replay_summary(args.trace, specs, names, args.start, r["trace_end_s"], "oracle", root)
            r["replay_measured_costs"] = float(summary["samples_done"])
        print(json.dumps({k2: v for k2, v in r.items() if k2 not in ("jobs", "job_specs")}), flush=True)
        runs.append(r)
        if not args.keep:
            shutil.rmtree(root)
    if runs:
        print_summary(runs, f"{args.hours:g} trace hours from {args.start:g} s at {args.time_scale:g}x")
    if args.queued_start >= 0:
        root = Path(tempfile.mkdtemp(prefix="bft-load-queued-"))
        r = drive(root, args.trace, args.jobs, args.nodes, args.queued_start, args.hours * 3600, args.time_scale)
        print(json.dumps({k: v for k, v in r.items() if k not in ("jobs", "job_specs")}), flush=True)
        print_summary([r], f"{args.hours:g} trace hours from {args.queued_start:g} s at {args.time_scale:g}x, "
                           f"{r['jobs_submitted']} jobs queued at the start")
        if not args.keep:
            shutil.rmtree(root)


def print_summary(runs: List[Dict[str, Any]], title: str) -> None:
    def med(key, *path):
        values = []
        for r in runs:
            v = r[key]
            for p in path:
                v = v[p]
            values.append(v)
        return statistics.median(values)

    print(f"\n{title}, {runs[0]['nodes']} nodes, {len(runs)} run(s), medians:")
    print(f"  {med('node_events'):.0f} node events, {med('reports'):.0f} reports, {med('launches'):.0f} launches; "
          f"{med('events_per_s'):.1f} events handled/s; manager CPU {med('cpu_ms_per_event'):.2f} ms/event "
          f"({med('cpu_share'):.0%} of a core)")
    for q in ("p50", "p99", "max"):
        print(f"  {q}: decision latency {1000 * med('decision_latency_s', q):.1f} ms; node event handled "
              f"{1000 * med('node_event_lag_s', q):.1f} ms after its due time")
    print(f"  deciding itself (curves and allocator, apart from waiting behind other events): p99 "
          f"{1000 * med('decision_latency_s', 'compute_p99'):.1f} ms, "
          f"max {1000 * med('decision_latency_s', 'compute_max'):.1f} ms")
    print(f"  a generation's process rows written in {med('launch_rows_s', 'p50'):.3f} s (p50), "
          f"{med('launch_rows_s', 'max'):.2f} s (max) at its start, {med('end_rows_s', 'max'):.2f} s (max) at its end; "
          f"generations of {med('generation_nodes', 'p50'):.0f} (p50) to {med('generation_nodes', 'max'):.0f} nodes")
    print(f"  state DB {med('db_bytes') / 1e6:.1f} MB, {med('db_bytes_per_trace_day') / 1e6:.1f} MB per trace day")
    for curves in ("oracle", "learned"):
        if f"replay_{curves}" in runs[0]:
            ratio = statistics.median((r["samples_done"] - r[f"replay_{curves}"]) / r[f"replay_{curves}"] for r in runs)
            print(f"  samples done {med('samples_done'):.3g} vs bft replay ({curves} curves) "
                  f"{med(f'replay_{curves}'):.3g}: {ratio:+.1%}")
    if all("replay_measured_costs" in r for r in runs):
        ratio = statistics.median((r["samples_done"] - r["replay_measured_costs"]) / r["replay_measured_costs"]
                                  for r in runs)
        print(f"  rescale costs measured (resize gaps, trace s): grow {med('measured_costs_s', 'scale_up_s'):.0f}, "
              f"shrink {med('measured_costs_s', 'scale_down_s'):.0f}; samples done vs bft replay (oracle curves) "
              f"charged them {med('replay_measured_costs'):.3g}: {ratio:+.1%}")
    if "replay_oracle" in runs[0]:
        print(f"  node-hours held by jobs {med('node_hours_held'):.0f}, of them training (after a generation's "
              f"first report) {med('node_hours_training'):.0f}; bft replay (oracle) used "
              f"{med('replay_oracle_node_hours'):.0f} of {med('replay_oracle_idle_node_hours'):.0f} idle")


if __name__ == "__main__":
    main()
