"""What one metrics snapshot costs the manager's loop (bft.runtime.ops.metrics): Summit's 4,680 nodes in
the pool, 1,000 jobs (100 running), a state database with their joins and process rows. Prints the
median and the largest of 21 snapshots (the first reads every event line; the later ones only new
lines): the loop's pause (the snapshot), and the textfile's writing in its own thread, timed apart.
Usage: PYTHONPATH=build/dev/python .venv/bin/python bench/metrics_bench.py
"""

from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path

from bft.runtime import JobState, MetricsExporter, StateStore

NODES, JOBS, RUNNING, SNAPSHOTS = 4680, 1000, 100, 21


def main() -> None:
    directory = Path(tempfile.mkdtemp(prefix="bft-metrics-bench-"))
    store = StateStore(directory / "state.db")
    with store.transaction():
        for n in range(NODES):
            store.log_event("join", node=f"n{n}")
        for j in range(JOBS):
            store.add_proc(f"job{j}", 1, f"n{j}")
    waiting = {"waiting": f"admission cap reached ({RUNNING} jobs admitted, --max-jobs)"}
    jobs = [{"id": f"job{j}", "state": (JobState.RUNNING if j < RUNNING else JobState.QUEUED).value, "samples": 1e6,
             "nodes": [f"n{j}"], "rate": 100.0, **({} if j < RUNNING else waiting)} for j in range(JOBS)]
    status = {"manager": {"dropped_reports": {"bad_mac": 0, "replay": 0}},
              "nodes": {"pool": [f"n{n}" for n in range(NODES)], "used": {f"n{j}": f"job{j}" for j in range(RUNNING)},
                        "standbys": []},
              "jobs": jobs}
    exporter = MetricsExporter(store, textfile=directory / "bft.prom")
    snapshots, writes = [], []
    for k in range(SNAPSHOTS):
        began = time.perf_counter()
        # the loop's part (the writer thread is not started)
        exporter.update(status, decision_latencies_s=[0.01] * 1000, decisions=1000 + k)
        snapshots.append(time.perf_counter() - began)
        began = time.perf_counter()
        exporter._write_textfile()  # the writer thread's part, here in this thread to time it alone
        writes.append(time.perf_counter() - began)
    for what, times in (("the loop's pause (snapshot)", snapshots), ("the textfile (writer thread)", writes)):
        print(f"{what}, {NODES:,} nodes, {JOBS:,} jobs: median {statistics.median(times) * 1e3:.1f} ms, "
              f"max {max(times) * 1e3:.1f} ms of {SNAPSHOTS}")
    print(f"the file: {(directory / 'bft.prom').stat().st_size:,} bytes")


if __name__ == "__main__":
    main()
