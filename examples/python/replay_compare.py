"""Compare allocation policies on an idle-node trace, from Python.

    python examples/python/replay_compare.py                       # the built-in synthetic workload
    python examples/python/replay_compare.py TRACE.csv.gz JOBS.jsonl [--hours 24]

Replays the same trace and jobs under the exact optimiser and the equal-share heuristic, with the
workload's curves and with curves learned online, and prints the side-by-side table.
"""

import argparse
import sys

from bft import sim


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("trace", nargs="?", help="time,node,state CSV (optionally .gz)")
    p.add_argument("jobs", nargs="?", help="JSONL workload")
    p.add_argument("--hours", type=float, default=None, help="replay only this many hours from the first submit")
    args = p.parse_args()

    if args.trace and args.jobs:
        trace, jobs = sim.read_trace(args.trace), sim.read_jobs(args.jobs)
    else:
        trace, jobs = sim.generate_synthetic(seed=1)
    window = {}
    if args.hours is not None:
        start = min(j.submit_s for j in jobs)
        window = dict(start_s=start, end_s=start + args.hours * 3600)

    results = []
    for policy, curves in [("exact", "oracle"), ("equal_share", "oracle"), ("exact", "learned")]:
        r = sim.replay(trace, jobs, policy, curves, record_job_progress=False, **window)
        print(f"{r.label:>14}: {r.summary['samples_done']:.4g} samples in {r.summary['wall_s']:.2f} s")
        results.append(r)
    print()
    print(sim.comparison_table(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
