"""The GPT example's measured curve in a replay beside the ImageNet workload (issue 30, item 5).

Adds --gpt-jobs jobs of examples/runtime/gpt_synthetic.py to a workload (the shared ImageNet one): their
curve is a file in bft submit --curve's format ({"nodes": [...], "throughput": [...]}, as
`runtime_gpt.py --curve-out` writes it), their rescale costs the gaps measured under the manager,
their submits spread evenly over the workload's submit window, at most as many nodes as the curve
measured. Writes the mixed workload in the job format (docs/formats.md) to OUT/jobs-mixed.jsonl, replays
the workload alone and the mixed one, and prints per workload (base: the --jobs file's; GPT: the added
jobs) the jobs finished, samples done, node-hours, mean turnaround and admission to finish, and the
share of the admitted time without progress. The mixed
replay is also `bft replay --trace TRACE --jobs OUT/jobs-mixed.jsonl` (the command is printed).

    PYTHONPATH=build/dev/python .venv/bin/python bench/runtime_gpt.py --curve-out /tmp/gpt
    PYTHONPATH=build/dev/python .venv/bin/python bench/gpt_replay.py \\
        --trace ../shared/data/summit-idle-nodes-2021-02.csv.gz \\
        --jobs ../shared/data/jobs-imagenet-throughput-1001.jsonl --gpt-curve /tmp/gpt-global.json \\
        --scale-up-s GROW_GAP --scale-down-s SHRINK_GAP --out /tmp/gpt-replay
"""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

import numpy as np

from bft import jobs, sim
from bft.runtime import read_curve
from workload_args import (
    OBJECTIVES,
    OneLineParser,
    number,
    policies,
    refuse_overwriting,
    seconds,
    whole,
    with_objective,
)


def gpt_jobs(curve: dict, count: int, work: float, scale_up_s: float, scale_down_s: float,
             first_s: float, last_s: float) -> list:
    """`count` GPT jobs of `curve`, submitted evenly over [first_s, last_s], named G00000-GPT, ..."""
    top = max(curve["nodes"])
    return [jobs.from_dict({"name": f"G{k:05d}-GPT", "submit": first_s + (last_s - first_s) * (k + 0.5) / count,
                            "min_nodes": 1, "max_nodes": top, "work": work, "scale_up_s": scale_up_s,
                            "scale_down_s": scale_down_s, "nodes": curve["nodes"], "throughput": curve["throughput"]})
            for k in range(count)]


def by_workload(result, gpt_names: set) -> dict:
    """Per workload ("GPT": the jobs named in `gpt_names`, "base": the others): jobs, finished, samples
    done, node-hours, each job's share of its admitted time without progress (no nodes, or a rescale's
    or preemption's stall), and of the finished their turnarounds and times from admission to finish (s)."""
    out = {}
    j = result.jobs
    for k, name in enumerate(j["name"]):
        group = "GPT" if str(name) in gpt_names else "base"
        g = out.setdefault(group, {"jobs": 0, "finished": 0, "samples": 0.0, "node_hours": 0.0, "turnaround": [],
                                   "running": [], "stalled": []})
        g["jobs"] += 1
        g["samples"] += float(j["done"][k])
        g["node_hours"] += float(j["node_seconds"][k]) / 3600
        t, done = result.job_progress(k)  # at each event while admitted
        if len(t) > 1 and t[-1] > t[0]:
            g["stalled"].append(float(np.diff(t)[np.diff(done) <= 0].sum() / (t[-1] - t[0])))
        if j["finish_s"][k] >= 0:
            g["finished"] += 1
            g["turnaround"].append(float(j["finish_s"][k] - j["submit_s"][k]))
            g["running"].append(float(j["finish_s"][k] - j["admit_s"][k]))
    return out


def main() -> int:
    p = OneLineParser(description=__doc__.splitlines()[0])
    p.add_argument("--trace", required=True, help="idle-node trace (CSV time,node,state, optionally .gz)")
    p.add_argument("--jobs", required=True, help="the workload the GPT jobs join (JSONL)")
    p.add_argument("--gpt-curve", required=True, help='the GPT\'s curve: {"nodes": [...], "throughput": [...]}')
    p.add_argument("--gpt-jobs", type=whole(1), default=100, help="GPT jobs to add (default 100)")
    p.add_argument("--gpt-work", type=number("samples", positive=True, high=1e18), default=20_000,
                   help="samples per GPT job (default 20,000, the "
                   "example's --samples)")
    p.add_argument("--scale-up-s", type=seconds(), required=True, help="the GPT's measured grow gap (s)")
    p.add_argument("--scale-down-s", type=seconds(), required=True, help="the GPT's measured shrink gap (s)")
    p.add_argument("--objective", choices=OBJECTIVES, default="throughput",
                   help="speedup: each job's objective over its own one-node value (default throughput)")
    p.add_argument("--policy", type=policies, default=["exact"],
                   help="comma list, as bft replay --policy (default exact)")
    p.add_argument("--max-jobs", type=whole(1), default=sim.DEFAULT_MAX_JOBS)
    p.add_argument("--tfwd", type=seconds(positive=True), default=sim.DEFAULT_TFWD_S)
    p.add_argument("--out", required=True, help="directory for jobs-mixed.jsonl")
    a = p.parse_args()
    try:
        curve = read_curve(a.gpt_curve, "--gpt-curve")
        base = sim.read_jobs(a.jobs)
        submits = [s.submit_s for s in base]
        added = gpt_jobs(curve, a.gpt_jobs, a.gpt_work, a.scale_up_s, a.scale_down_s, min(submits), max(submits))
        mixed = sorted(base + added, key=lambda s: s.submit_s)
        out = Path(a.out)
        refuse_overwriting([out / "jobs-mixed.jsonl"], {"--jobs": a.jobs, "--trace": a.trace,
                                                         "--gpt-curve": a.gpt_curve})
        out.mkdir(parents=True, exist_ok=True)
        jobs.write_jobs(mixed, out / "jobs-mixed.jsonl")
        trace = sim.read_trace(a.trace)
    except (OSError, ValueError) as e:
        print(f"gpt_replay: error: {e}", file=sys.stderr)
        return 2
    print(f"GPT curve {curve['nodes']} nodes: {curve['throughput']} samples/s; {a.gpt_jobs} GPT jobs of "
          f"{a.gpt_work:g} samples, scale up {a.scale_up_s:g} s, down {a.scale_down_s:g} s, submitted over "
          f"{min(submits):g}..{max(submits):g} s; objective {a.objective}")
    print("the mixed replay as bft replay: " + shlex.join(
        [sys.executable, "-m", "bft", "replay", "--trace", a.trace, "--jobs", str(out / "jobs-mixed.jsonl"),
         "--policy", ",".join(a.policy), "--max-jobs", str(a.max_jobs), "--tfwd", f"{a.tfwd:g}"])
        + ("" if a.objective == "throughput" else " (with the throughput objective; speedup is this script's)"))
    for policy in a.policy:
        for label, path in (("alone", a.jobs), ("with GPT", out / "jobs-mixed.jsonl")):
            specs = with_objective(sim.read_jobs(path), a.objective)  # read again: with_objective changes them
            r = sim.replay(trace, specs, policy, max_jobs=a.max_jobs, tfwd_s=a.tfwd)
            s = r.summary
            print(f"\n{policy}, {a.objective}, workload {label}: samples {s['samples_done']:.4g}, node-hours "
                  f"{s['used_node_hours']:.1f} of {s['idle_node_hours']:.1f} idle, jobs finished "
                  f"{s['jobs_finished']}/{s['jobs_submitted']}, makespan {s['makespan_s'] / 3600:.2f} h, mean "
                  f"turnaround {s['mean_turnaround_s'] / 3600:.2f} h")
            groups = by_workload(r, {x.name for x in added})
            for group, g in ((k, groups[k]) for k in ("base", "GPT") if k in groups):
                turnaround, running = (f"{np.mean(g[k]) / 3600:.2f} h" if g[k] else "n/a" for k in ("turnaround",
                                                                                                     "running"))
                print(f"  {group:8s} jobs finished {g['finished']}/{g['jobs']}, samples {g['samples']:.4g}, "
                      f"node-hours {g['node_hours']:.1f}; of the finished, mean turnaround {turnaround}, mean "
                      f"admission to finish {running}; median share of the admitted time without progress "
                      f"{np.median(g['stalled']) if g['stalled'] else float('nan'):.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
