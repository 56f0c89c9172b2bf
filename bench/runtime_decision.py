"""Runtime bench: the manager's decision latency (event in -> new map), 100 jobs x 1,000 nodes, exact
policy, learned curves; medians, never pass/fail (bench/README.md, "Runtime").

    python bench/runtime_decision.py [--jobs 100] [--nodes 1000] [--events 21]

Run with the build on PYTHONPATH (``PYTHONPATH=build/dev/python .venv/bin/python bench/runtime_decision.py ...``).
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path


def bench_decision(jobs: int, nodes: int, events: int) -> None:
    """Event in -> new map, with a manager's own decider, curve book and job lifecycle (a Manager on the
    local source, never started: no process runs): 100 learned jobs on 1,000 nodes."""
    from bft.runtime import JobRow, JobState, Manager, ManagerOptions, StateStore, source_class

    tmp = Path(tempfile.mkdtemp())
    try:
        store = StateStore(tmp / "state.db")
        manager = Manager(state_dir=tmp, source=source_class("local")("bench", tmp, nodes=nodes), store=store,
                          identity="bench", options=ManagerOptions(max_jobs=jobs, standby=False))
        pool = {f"n{k}" for k in range(nodes)}
        names = sorted(pool)
        runs = []
        t0 = time.time() - 3600
        for j in range(jobs):
            row = JobRow(id=f"job{j}", seq=j + 1, script="/bin/true", args=[], cwd="/", python=sys.executable,
                         min_nodes=1, max_nodes=64, work=None, curve=None, secret="00", state=JobState.QUEUED)
            run = manager.lifecycle.new_run(store.add_job(row))
            runs.append(run)
            # Measured at three sizes, as the advisor would have learned from reports: progress records
            # replayed as a restarted manager replays its own.
            rate = 1000.0 * (1 + j % 7)
            samples, t = 0.0, t0
            for n in (1, 4, 16):
                for k in range(9):
                    if k:
                        t += 60
                        samples += 60 * rate * n ** 0.8
                    manager.book.replay_record(run, {
                        "configuration": "full", "advisor_samples": samples, "configuration_samples": samples,
                        "samples": samples, "method": "relaunch", "time_s": t, "nodes": n})

        def decide() -> None:
            # Applied by the job lifecycle: a job that never started only takes its new nodes (no process).
            for p in manager.decider.decide(runs, pool, time.monotonic()):
                manager.lifecycle.apply(p.run, p.nodes, p.configuration)

        decide()  # the initial map
        for e in range(events):
            node = names[(37 * e) % len(names)]
            if node in pool:  # reclaimed: it leaves the pool, and the next decision every job's target
                pool.discard(node)
                manager.lifecycle.node_reclaimed(node)
            else:
                pool.add(node)
            decide()
        latencies = list(manager.decider.latencies_s)[1:]
        store.close()
    finally:
        shutil.rmtree(tmp)
    lat = sorted(latencies)
    print(f"decision latency, {jobs} jobs x {nodes} nodes, policy exact, learned curves: median "
          f"{statistics.median(lat) * 1e3:.1f} ms, p90 {lat[int(0.9 * len(lat))] * 1e3:.1f} ms over {events} events "
          "(node reclaimed or joined -> allocator called -> new targets; process start-up excluded)")



def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--jobs", type=int, default=100)
    p.add_argument("--nodes", type=int, default=1000)
    p.add_argument("--events", type=int, default=21)
    a = p.parse_args()
    bench_decision(a.jobs, a.nodes, a.events)


if __name__ == "__main__":
    main()
