"""A lower bound on the mean turnaround any allocation policy can reach on a trace and a workload.

No policy, online or not, can finish a workload's jobs sooner on average than the optimum of this
fluid linear program, so it says how far a target on mean turnaround is from what the idle nodes
allow. It keeps the rules of the replay: first come first served admission of at most --max-jobs
jobs, at most max_nodes (and, when running, at least min_nodes) nodes per job, the jobs' true
throughput curves, and at every moment no more nodes in use than are idle. It relaxes:

- every rescale and preemption loss (none is charged);
- integrality: the jobs of a type (same curve, work and bounds) pool their progress, and completions
  are fractional;
- which nodes a job runs on (counts only), and the idle count within an interval (its time-average
  over intervals of at least --interval seconds, cut at the trace's own events);
- first come first served by type only: type k's work is bounded by the type-k jobs among the first
  (completed + max_jobs) jobs (the least concave majorant of that count, so that it stays linear).

Every schedule of the replay maps to a feasible point whose objective is at most its real flow time,
so the optimum divided by the jobs is a lower bound on the mean turnaround (finish - submit) in both
of the replay's accountings. The program, per interval t of length d_t and type k:

  Y[k,b,t] >= 0   time-average number of type-k jobs running at b nodes (b: breakpoints of the curve;
                  a count between two is a mix of its neighbours with the same slots, nodes and rate)
  D[k,t], C[k,t]  cumulative type-k work and completions, in jobs
  sum Y <= max_jobs;  sum b Y <= mean over t of min(idle, max_jobs * max_nodes)
  D[k,t] <= D[k,t-1] + sum_b Y r_k(b) d_t / work_k;  C[k,t-1] <= C[k,t] <= D[k,t] <= arrived_k(t)
  D[k,t] <= F_k(Ctot[t] + max_jobs);  sum_b Y[k,.,t] <= F_k(Ctot[t] + max_jobs) - C[k,t-1]
  sum_b Y[k,.,t] <= arrived_k(t) - C[k,t-1]
  minimise sum_t (integral of the jobs submitted over t - Ctot[t] d_t)

    python bench/turnaround_bound.py --trace ../shared/data/summit-idle-nodes-2021-02.csv.gz \\
        --jobs ../shared/data/jobs-imagenet-throughput-1001.jsonl --nodes 0:1024 [--interval 600]

It also replays the exact policy in both accountings and prints the bound as a fraction of each.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import OrderedDict

import numpy as np
from scipy.optimize import linprog
from scipy.sparse import coo_matrix

from bft import Error, sim
from workload_args import add_workload_arguments, read_workload


def concave_majorant(values: np.ndarray) -> list:
    """(slope, intercept) of the lines whose minimum is the least concave majorant of the points
    (m, values[m]), m = 0..len-1 (the upper hull)."""
    hull = []
    for m, v in enumerate(values):
        while len(hull) >= 2:
            (m1, v1), (m2, v2) = hull[-2], hull[-1]
            if (v2 - v1) * (m - m1) <= (v - v1) * (m2 - m1):
                hull.pop()
            else:
                break
        hull.append((m, float(v)))
    return [((v2 - v1) / (m2 - m1), v1 - (v2 - v1) / (m2 - m1) * m1) for (m1, v1), (m2, v2) in zip(hull, hull[1:])]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_workload_arguments(p)
    p.add_argument("--max-jobs", type=int, default=10)
    p.add_argument("--interval", type=float, default=600.0, help="shortest interval in seconds (default 600)")
    args = p.parse_args()
    if not args.interval > 0:
        p.error(f"--interval {args.interval:g}: must be > 0 seconds")

    try:
        trace, jobs, nodes = read_workload(args)
        exact = {acc: sim.replay(trace, jobs, "exact", nodes=nodes, max_jobs=args.max_jobs, accounting=acc,
                                 record_job_progress=False) for acc in ("continuous", "reference")}
    except (OSError, ValueError, Error) as e:  # unreadable or bad files, bad options
        p.error(str(e))
    steps = exact["continuous"].steps  # the idle count after every event of the subset: any policy's
    times, idle = np.asarray(steps["time_s"], float), np.asarray(steps["idle_nodes"], float)

    order = sorted(range(len(jobs)), key=lambda j: (jobs[j].submit_s, j))  # first come first served
    types: "OrderedDict[tuple, list]" = OrderedDict()
    for j in order:
        s = jobs[j]
        key = (s.min_nodes, s.max_nodes, s.work, tuple(s.nodes), tuple(s.throughput))
        types.setdefault(key, []).append(j)
    keys = list(types)
    n_types, total = len(keys), len(jobs)
    position = {j: m for m, j in enumerate(order)}
    cap_nodes = args.max_jobs * max(s.max_nodes for s in jobs)
    start = min(s.submit_s for s in jobs)
    end = float(times[-1])
    # Intervals cut at the subset's events, merged up to --interval; the idle count's average in each.
    cuts = [start]
    for t in times[(times > start) & (times < end)]:
        if t - cuts[-1] >= args.interval:
            cuts.append(float(t))
    cuts = np.array(cuts + [end])
    lengths = np.diff(cuts)
    starts = cuts[:-1]
    count = len(starts)

    def mean_idle(a: float, b: float) -> float:
        i0 = max(np.searchsorted(times, a, side="right") - 1, 0)
        i1 = np.searchsorted(times, b, side="left")
        edges = np.clip(np.r_[times[i0:i1], b], a, b)
        return float((np.diff(edges) * np.minimum(idle[i0:i1], cap_nodes)).sum() / (b - a))

    capacity = np.array([mean_idle(a, a + d) for a, d in zip(starts, lengths)])
    breakpoints, rates, work, majorants, arrived = [], [], [], [], []
    for key in keys:
        lo, hi, w, curve_nodes, curve_values = key
        b = sorted({lo, hi} | {n for n in curve_nodes if lo <= n <= hi})
        breakpoints.append(np.array(b, float))
        rates.append(np.interp(b, curve_nodes, curve_values))
        work.append(w)
        in_order = np.zeros(total + 1)
        for j in types[key]:
            in_order[position[j] + 1:] += 1
        majorants.append(concave_majorant(in_order))
        submits = np.sort([jobs[j].submit_s for j in types[key]])
        arrived.append(np.searchsorted(submits, starts + lengths, side="right").astype(float))
    submitted_integral = np.array([np.clip(a + d - np.array([s.submit_s for s in jobs]), 0, d).sum()
                                   for a, d in zip(starts, lengths)])

    # Variables: Y (per type, breakpoint, interval), then D and C (per type and interval).
    y_index, offset = [], 0
    for k in range(n_types):
        y_index.append(offset)
        offset += len(breakpoints[k]) * count
    n_y = offset
    d_of = lambda k, t: n_y + t * n_types + k  # noqa: E731
    c_of = lambda k, t: n_y + n_types * count + t * n_types + k  # noqa: E731
    y_of = lambda k, b, t: y_index[k] + t * len(breakpoints[k]) + b  # noqa: E731
    rows, cols, vals, rhs = [], [], [], []

    def constraint(entries, bound):
        row = len(rhs)
        for col, v in entries:
            rows.append(row)
            cols.append(col)
            vals.append(v)
        rhs.append(bound)

    for t in range(count):
        running = [(y_of(k, b, t), 1.0) for k in range(n_types) for b in range(len(breakpoints[k]))]
        constraint(running, float(args.max_jobs))
        constraint([(y_of(k, b, t), breakpoints[k][b]) for k in range(n_types) for b in range(len(breakpoints[k]))],
                   capacity[t])
        completed = [(c_of(kk, t), 1.0) for kk in range(n_types)]
        for k in range(n_types):
            nb = len(breakpoints[k])
            progress = [(d_of(k, t), 1.0)] + [(y_of(k, b, t), -rates[k][b] * lengths[t] / work[k]) for b in range(nb)]
            if t > 0:
                progress.append((d_of(k, t - 1), -1.0))
            constraint(progress, 0.0)
            constraint([(c_of(k, t), 1.0), (d_of(k, t), -1.0)], 0.0)
            if t > 0:
                constraint([(c_of(k, t - 1), 1.0), (c_of(k, t), -1.0)], 0.0)
            mine = [(y_of(k, b, t), 1.0) for b in range(nb)] + ([(c_of(k, t - 1), 1.0)] if t > 0 else [])
            constraint(mine, arrived[k][t])
            for slope, intercept in majorants[k]:
                # admitted type-k jobs <= F_k(completed + max_jobs) = slope * (Ctot + max_jobs) + intercept
                bound = slope * args.max_jobs + intercept
                constraint([(d_of(k, t), 1.0)] + [(c, -slope) for c, _ in completed], bound)
                constraint(mine + [(c, -slope) for c, _ in completed], bound)
    bounds = [(0, None)] * n_y + [(0, arrived[k][t]) for t in range(count) for k in range(n_types)] * 2
    objective = np.zeros(n_y + 2 * n_types * count)
    for t in range(count):
        for k in range(n_types):
            objective[c_of(k, t)] = -lengths[t]
    matrix = coo_matrix((vals, (rows, cols)), shape=(len(rhs), len(objective))).tocsr()
    t0 = time.perf_counter()
    result = linprog(objective, A_ub=matrix, b_ub=rhs, bounds=bounds, method="highs")
    if result.status != 0:
        print(f"the LP did not solve: {result.message}", file=sys.stderr)
        return 1
    completions = result.x[n_y + n_types * count:].reshape(count, n_types).sum(1)
    mean_turnaround = (submitted_integral.sum() - (completions * lengths).sum()) / total
    print(f"{len(jobs)} jobs in {n_types} types, {count} intervals (>= {args.interval:g} s), LP {len(rhs)} rows x "
          f"{len(objective)} columns, solved in {time.perf_counter() - t0:.0f} s")
    if completions[-1] < total - 1e-6:
        print(f"only {completions[-1]:.1f} of {total} jobs can finish within the trace: the bound below is partial")
    print(f"lower bound on the mean turnaround: {mean_turnaround / 86400:.3f} d")
    for acc, r in exact.items():
        s = r.summary
        print(f"  exact, {acc} accounting: {s['mean_turnaround_s'] / 86400:.3f} d "
              f"(bound = {mean_turnaround / s['mean_turnaround_s']:.3f} x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
