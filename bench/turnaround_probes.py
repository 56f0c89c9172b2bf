"""Probes of issue 11's turnaround target: the exact policies on altered inputs, in both accountings.

Each row replays the trace with a variant of the workload or of the horizon, and reports the mean
turnaround over the exact policy's on the unaltered workload at --tfwd (default 10 s) in the same
accounting, with the overhead efficiency. The variants (docs/sim.md, "How far the target is"):

- tfwd T: a longer forward-looking horizon;
- no rescale costs: every job's scale_up_s and scale_down_s set to 0 (a diagnostic, not a policy: no
  real job restarts for free);
- rescale costs UP/DOWN (``--rescale-costs UP DOWN``, repeatable): every job's costs set to measured
  ones, for example those of the runtime's in-place resizes (bench/README.md, issue 22);
- weights c: each job's weight is min over n of (c + n) / r(n), the node-seconds per sample at its
  most economical count with c nodes' worth of fixed cost (values jobs in node units, so that slow
  models are not starved while they hold an admission slot).

    python bench/turnaround_probes.py --trace ../shared/data/summit-idle-nodes-2021-02.csv.gz \\
        --jobs ../shared/data/jobs-imagenet-throughput-1001.jsonl --nodes 0:1024
"""

from __future__ import annotations

import argparse
import sys

from bft import Error, sim
from workload_args import add_workload_arguments, read_workload

ACCOUNTINGS = ("continuous", "reference")


# Each variant alters a fresh read of the workload (a JobSpec cannot be copied).
def with_rescale_costs(jobs, scale_up_s: float, scale_down_s: float):
    for job in jobs:
        job.scale_up_s, job.scale_down_s = scale_up_s, scale_down_s
    return jobs


def weighted_by_node_seconds_per_sample(jobs, fixed_nodes: float):
    for job in jobs:
        job.weight = min((fixed_nodes + n) / job.throughput_at(n) for n in range(job.min_nodes, job.max_nodes + 1))
    return jobs


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_workload_arguments(p)
    p.add_argument("--max-jobs", type=int, default=10)
    p.add_argument("--tfwd", type=float, default=10.0, help="the horizon of the reference rows (default 10 s)")
    p.add_argument("--rescale-costs", type=float, nargs=2, action="append", default=[], metavar=("UP", "DOWN"),
                   help="also replay with every job's scale_up_s and scale_down_s set to these (repeatable)")
    args = p.parse_args()
    try:
        trace, jobs, nodes = read_workload(args)

        def replay(policy, workload=jobs, tfwd=args.tfwd):
            return {acc: sim.replay(trace, workload, policy, nodes=nodes, max_jobs=args.max_jobs, tfwd_s=tfwd,
                                    accounting=acc, record_job_progress=False).summary for acc in ACCOUNTINGS}

        rows = [("exact", "as given", replay("exact")),
                ("completion_aware", "as given", replay("completion_aware"))]
        rows += [("exact", f"tfwd {t:g} s", replay("exact", tfwd=t)) for t in (60, 300, 1200)]
        rows.append(("completion_aware", "tfwd 30 s", replay("completion_aware", tfwd=30)))
        free = with_rescale_costs(sim.read_jobs(args.jobs), 0.0, 0.0)
        rows += [(policy, "no rescale costs", replay(policy, free)) for policy in ("exact", "completion_aware")]
        for up, down in args.rescale_costs:
            measured = with_rescale_costs(sim.read_jobs(args.jobs), up, down)
            rows += [(policy, f"rescale costs {up:g} s / {down:g} s", replay(policy, measured))
                     for policy in ("exact", "completion_aware")]
        for c in (1, 10):
            weighted = weighted_by_node_seconds_per_sample(sim.read_jobs(args.jobs), c)
            rows.append(("exact", f"weights c = {c}", replay("exact", weighted)))
    except (OSError, ValueError, Error) as e:  # unreadable or bad files, bad options
        p.error(str(e))

    base = rows[0][2]
    print("| policy | variant | "
          + " | ".join(f"{a}: mean turnaround (× exact), efficiency" for a in ACCOUNTINGS) + " |")
    print("|---|---|" + "---|" * len(ACCOUNTINGS))
    for policy, variant, summary in rows:
        cells = []
        for a in ACCOUNTINGS:
            s = summary[a]
            ratio = s["mean_turnaround_s"] / base[a]["mean_turnaround_s"]
            cells.append(f"{s['mean_turnaround_s'] / 86400:.2f} d ({ratio:.3f}), {s['overhead_efficiency']:.1%}")
        print(f"| {policy} | {variant} | " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
