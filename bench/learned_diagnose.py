"""Where the learned replay's samples go: learned curves and costs against the oracle, job by job.

Replays the trace once per curve mode (oracle; learned; learned_curves: the learned curves with the
workload's rescale costs; learned_curves with exploration_bonus=0; learned_costs: the workload's
curves with the learned costs) and attributes the learned replay's shortfall against the oracle:

- wrong costs: learned against learned_curves (the same learning, only the costs differ);
- exploration: learned_curves against the same without the exploration bonus;
- curves (wrong shape and late learning): the rest of learned_curves against the oracle;

with each replay's share of the idle node-time it used while jobs were active (nodes left idle);

and, job by job over the learned replay, how far the advisor's estimate of the rate at the size the
job runs (JobProgress.estimate) is from the true rate, in the first hour after admission (late
learning) and later (wrong shape), and the learned rescale costs against the workload's.
The figure compared is the mean turnaround when every replay finishes every job, else samples done.

Two checks of what is left (docs/sim.md, "The two held-out misses, diagnosed"):

- --truth fit / fit-at-breakpoints: every replay runs on a workload whose true curves are the
  advisor's own model fitted to the workload's (curve.fit with the advisor's fit options), tabulated
  at every node count up to the last breakpoint (fit) or at the workload's breakpoints only
  (fit-at-breakpoints: the same kinks, the values on the model): a truth inside the advisor's model
  family, so that what the learned replay still loses is not the model's misfit;
- --oracle-perturbations K: the oracle again K times with every job's objective scaled by a random
  factor within +-0.5 % (numpy seed k), its mean turnaround over the unperturbed oracle's: how far a
  small error of the objectives moves the replay by itself.

    PYTHONPATH=build/dev/python .venv/bin/python bench/learned_diagnose.py \\
        --trace ../shared/data/summit-idle-nodes-2021-02.csv.gz \\
        --jobs ../shared/data/jobs-imagenet-throughput-1001.jsonl --nodes 0:1024 [--objective speedup] \\
        [--accounting reference]
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import numpy as np

from bft import Error, curve, sim
from workload_args import OneLineParser, add_workload_arguments, refuse_overwriting, seconds, whole, with_objective

EARLY_S = 3600.0  # "late learning": the first hour after admission
TRUTHS = ("workload", "fit", "fit-at-breakpoints")
PERTURBATION = 0.005  # --oracle-perturbations: each objective times a factor within 1 +- this


def fitted_truth(specs, truth, fit_options):
    """The jobs with their throughput and objective curves replaced by the advisor's fit of each
    (TRUTHS): tabulated at every count 1..last breakpoint ("fit") or at the breakpoints ("fit-at-breakpoints")."""
    if truth == "workload":
        return specs
    cache = {}

    def fitted(nodes, values):
        key = (tuple(nodes), tuple(values))
        if key not in cache:
            pts = [(n, v) for n, v in zip(nodes, values) if n >= 1]
            r = curve.fit([n for n, _ in pts], [v for _, v in pts], options=fit_options)
            if not r.ok:
                raise ValueError(f"--truth {truth}: the advisor's fit failed ({curve.status_name(r.status)})")
            at = [n for n, _ in pts] if truth == "fit-at-breakpoints" else list(range(1, int(pts[-1][0]) + 1))
            cache[key] = ([0] + at, [0.0] + [float(v) for v in r.evaluate(np.asarray(at, float))])
        return cache[key]

    for spec in specs:
        if spec.configurations:
            raise ValueError(f"--truth {truth}: job {spec.name} has configurations (not supported)")
        nodes, tp = fitted(spec.nodes, spec.throughput)
        _, ob = fitted(spec.nodes, spec.objective)
        spec.nodes, spec.throughput, spec.objective = nodes, tp, ob
    return specs


def _median(values):
    return float(np.median(values)) if len(values) else float("nan")


def curve_errors(result, specs):
    """Per job: time-weighted mean |estimate / rate - 1| while running, in the first EARLY_S after
    admission and later, with the running seconds behind each."""
    p = result.progress
    order = np.lexsort((p["time_s"], p["job"]))
    job, t, rate, est = p["job"][order], p["time_s"][order], p["rate"][order], p["estimate"][order]
    out = {}
    for j in np.unique(job):
        rows = np.flatnonzero(job == j)
        admit = result.jobs["admit_s"][j]
        early = [0.0, 0.0]
        late = [0.0, 0.0]
        for a, b in zip(rows[:-1], rows[1:]):
            dt = t[b] - t[a]
            if dt <= 0 or rate[a] <= 0:
                continue
            err = abs(est[a] / rate[a] - 1.0)
            acc = early if t[a] < admit + EARLY_S else late
            acc[0] += err * dt
            acc[1] += dt
        out[int(j)] = (early[0] / early[1] if early[1] else None, early[1],
                       late[0] / late[1] if late[1] else None, late[1])
    return out


def main() -> int:
    p = OneLineParser(description=__doc__.splitlines()[0])
    add_workload_arguments(p)
    p.add_argument("--start", type=seconds(high=1e12), help="window start, seconds on the trace's clock")
    p.add_argument("--end", type=seconds(high=1e12), help="window end, seconds on the trace's clock")
    p.add_argument("--first-jobs", type=whole(1), help="only the first N jobs of the workload")
    p.add_argument("--policy", choices=sim.POLICIES, default="exact")
    p.add_argument("--accounting", choices=("continuous", "reference"), default="continuous",
                   help="the replay's accounting (sim.replay accounting; docs/sim.md, \"Two accountings\")")
    p.add_argument("--max-jobs", type=whole(1), default=10)
    p.add_argument("--jobs-csv", help="write the per-job table here")
    p.add_argument("--models-from-names", action="store_true",
                   help="jobs of one model share priors, the model being the name after its first '-' "
                   "(sim.model_from_name)")
    p.add_argument("--advisor", action="append", default=[], metavar="KEY=VALUE",
                   help="an option of every learned replay's profiling advisor, as bft replay --advisor (repeatable; "
                   "fit.extrapolation_limit=2 fit.extrapolation_discount=0.5: the conservative rule of before)")
    p.add_argument("--truth", choices=TRUTHS, default="workload",
                   help="the true curves of every replay: the workload's, or the advisor's fit of them at every "
                   "count (fit) or at the workload's breakpoints (fit-at-breakpoints)")
    p.add_argument("--oracle-perturbations", type=whole(0), default=0, metavar="K",
                   help="also replay the oracle K times with every objective scaled by a random factor within "
                   "+-0.5 %% (seeds 0..K-1)")
    args = p.parse_args()
    try:
        options = curve.advisor_options(args.advisor)
        no_bonus = curve.advisor_options(args.advisor)
        no_bonus.exploration_bonus = 0.0
        if args.start is not None and args.end is not None and args.end <= args.start:
            raise ValueError(f"--end ({args.end:g}) must be after --start ({args.start:g})")
        if args.jobs_csv:  # checked before the replays, which take long
            refuse_overwriting([Path(args.jobs_csv)], {"--jobs": args.jobs, "--trace": args.trace})
            parent = Path(args.jobs_csv).absolute().parent
            if Path(args.jobs_csv).is_dir() or not os.access(parent, os.W_OK | os.X_OK):
                raise ValueError(f"--jobs-csv {args.jobs_csv}: cannot be written (a directory, or {parent} is not "
                                 "writable)")
        trace = sim.read_trace(args.trace)
        nodes = sim.select_nodes(args.nodes, trace)
        # The fitted truth replaces the workload's curves before the objective is derived from them.
        specs = with_objective(fitted_truth(sim.read_jobs(args.jobs), args.truth, options.fit), args.objective)
        if args.first_jobs is not None:
            specs = specs[: args.first_jobs]

        models = [sim.model_from_name(s.name) for s in specs] if args.models_from_names else None

        def replay(curves, advisor=options, specs=specs):
            return sim.replay(trace, specs, args.policy, curves, nodes=nodes, max_jobs=args.max_jobs,
                              start_s=args.start, end_s=args.end, advisor=advisor, accounting=args.accounting,
                              models=None if curves == "oracle" else models)

        runs = {
            "oracle": replay("oracle"),
            "learned": replay("learned"),
            "learned_curves": replay("learned_curves"),
            "learned_curves, no bonus": replay("learned_curves", no_bonus),
            "learned_costs": replay("learned_costs"),
        }
        perturbed = []
        for k in range(args.oracle_perturbations):
            rng = np.random.default_rng(k)
            varied = with_objective(fitted_truth(sim.read_jobs(args.jobs), args.truth, options.fit), args.objective)
            varied = varied[: len(specs)]  # --first-jobs
            for spec in varied:
                factor = rng.uniform(1.0 - PERTURBATION, 1.0 + PERTURBATION)
                spec.objective = [v * factor for v in spec.objective]
            perturbed.append(replay("oracle", specs=varied))
    except (Error, OSError, ValueError) as e:
        print(f"learned_diagnose: error: {e}", file=sys.stderr)
        return 2

    all_finish = all(r.summary["jobs_finished"] == r.summary["jobs_submitted"] for r in runs.values())
    if all_finish:
        name, key, better = "mean turnaround (d)", "mean_turnaround_s", -1.0
        value = {k: r.summary[key] / 86400.0 for k, r in runs.items()}
    else:
        name, key, better = "samples done", "samples_done", 1.0
        value = {k: r.summary[key] for k, r in runs.items()}
    oracle = value["oracle"]
    print(f"objective {args.objective}; policy {args.policy}; accounting {args.accounting}; truth {args.truth}; "
          f"models shared: {args.models_from_names}; "
          f"every job finishes: {all_finish}; "
          f"compared: {name}")
    # Idle node-time used while jobs were active: a learned allocator that under-values growth leaves
    # nodes idle that the oracle's used (what the conservative extrapolation did, docs/sim.md).
    print(f"| replay | {name} | / oracle | rescales | idle node-time used |")
    print("|---|---|---|---|---|")
    for k, r in runs.items():
        print(f"| {k} | {value[k]:.6g} | {_ratio(value[k], oracle)} | {r.summary['rescales']} | "
              f"{r.summary['active_idle_capture']:.4f} |")
    # Shortfalls in percent of the oracle's figure, positive = worse than the comparison.
    def loss(a, b):  # nan when the oracle's figure is 0 (no sample done in the window)
        return 100.0 * better * (value[b] - value[a]) / oracle if oracle else float("nan")

    print(f"\nlearned against oracle: {loss('learned', 'oracle'):+.2f} % of the oracle's figure, of which")
    print(f"  wrong costs (learned vs learned_curves):          {loss('learned', 'learned_curves'):+.2f} %")
    print(f"  exploration (learned_curves vs no bonus):          "
          f"{loss('learned_curves', 'learned_curves, no bonus'):+.2f} %")
    print(f"  curves: shape and late learning (no bonus vs oracle): "
          f"{loss('learned_curves, no bonus', 'oracle'):+.2f} %")
    print(f"  (learned costs alone, learned_costs vs oracle:     {loss('learned_costs', 'oracle'):+.2f} %)")

    if perturbed:
        ratios = [(r.summary[key] / 86400.0 if all_finish else r.summary[key]) / oracle if oracle else float("nan")
                  for r in perturbed]
        print(f"  (oracle, objectives perturbed within +-{100 * PERTURBATION:g} %, {name} / oracle's, "
              f"seeds 0..{len(ratios) - 1}: "
              f"{', '.join(f'{x:.4f}' for x in ratios)}; min {min(ratios):.4f}, max {max(ratios):.4f})")

    learned = runs["learned"]
    errors = curve_errors(learned, specs)
    early = [e[0] for e in errors.values() if e[0] is not None]
    late = [e[2] for e in errors.values() if e[2] is not None]
    print("\nlearned: |estimate / true rate - 1| at the size run, time-weighted per job, median over jobs:")
    print(f"  first {EARLY_S / 3600:g} h after admission: {100 * _median(early):.1f} % ({len(early)} jobs); "
          f"later: {100 * _median(late):.1f} % ({len(late)} jobs)")
    jobs = learned.jobs
    up, down = [], []
    for j, spec in enumerate(specs):
        if jobs["admit_s"][j] < 0:
            continue
        # A cost never measured stays the workload's exactly.
        if jobs["allocator_scale_up_s"][j] != spec.scale_up_s:
            up.append(jobs["allocator_scale_up_s"][j] / spec.scale_up_s)
        if jobs["allocator_scale_down_s"][j] != spec.scale_down_s:
            down.append(jobs["allocator_scale_down_s"][j] / spec.scale_down_s)
    print(f"learned rescale costs / workload's, median over jobs with a measured cost: "
          f"scale_up_s {_median(up):.3f} ({len(up)} jobs), scale_down_s {_median(down):.3f} ({len(down)} jobs)")

    if args.jobs_csv:
        try:
            write_jobs_csv(args.jobs_csv, runs["oracle"].jobs, jobs, specs, errors)
        except OSError as e:
            print(f"learned_diagnose: error: --jobs-csv {args.jobs_csv}: {e.strerror or e}", file=sys.stderr)
            return 2
    return 0


def _ratio(v: float, oracle: float) -> str:
    return f"{v / oracle:.4f}" if oracle else "n/a"


def write_jobs_csv(path: str, o, jobs, specs, errors) -> None:
    """The per-job table: the oracle's and the learned replay's figures side by side."""
    with open(path, "w", encoding="utf-8") as f:
        f.write("job,oracle_done,learned_done,oracle_finish_s,learned_finish_s,err_first_hour,err_later,"
                "scale_up_ratio,scale_down_ratio\n")
        for j, spec in enumerate(specs):
            e = errors.get(j, (None, 0, None, 0))
            cells = [o["done"][j], jobs["done"][j], o["finish_s"][j], jobs["finish_s"][j], e[0], e[2],
                     jobs["allocator_scale_up_s"][j] / spec.scale_up_s,
                     jobs["allocator_scale_down_s"][j] / spec.scale_down_s]
            f.write(",".join([spec.name] + ["" if c is None else repr(float(c)) for c in cells]) + "\n")


if __name__ == "__main__":
    sys.exit(main())
