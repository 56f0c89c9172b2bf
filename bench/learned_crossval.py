"""Cross-validation of the learned replay against the oracle: the advisor's options are chosen on one
group of node sets and reported on the others.

Every cell is a node set, an objective (OBJECTIVES: the workload's throughput, or each job's speedup over
its own one-node value), a policy and an accounting. In each cell the oracle replays once and the learned
replay once per perturbation ("seed" k: the advisor's single_interval_rel_sd times 1 + 0.001 k; the
replay itself is deterministic, so this shows how far a tiny change of the rule moves the result).

1. Choosing: every --candidate (advisor options, as bft replay --advisor, comma-separated; the item
   `models` declares each job's model from its name, sim.model_from_name, so that jobs of one model share
   their curve's shape: learned_diagnose --models-from-names) is replayed
   on the cells of the first --choose-on node sets; its score is, over those cells, the worst of the
   median over seeds of min(samples ratio, jobs-finished ratio, 1 / mean-turnaround ratio), learned
   against oracle. The candidate with the best score is chosen (the first one given on a tie).
2. Reporting: the chosen candidate on every cell; the node sets after the first --choose-on are held out.

    PYTHONPATH=build/dev/python .venv/bin/python bench/learned_crossval.py \\
        --trace ../shared/data/summit-idle-nodes-2021-02.csv.gz \\
        --jobs ../shared/data/jobs-imagenet-throughput-1001.jsonl \\
        --node-sets 0:1024,1024:2048,2048:3072,3072:4096 --choose-on 2
"""

from __future__ import annotations

import sys
import time

import numpy as np

from bft import Error, sim
from bft.curve import advisor_options
from workload_args import OBJECTIVES, OneLineParser, seconds, whole, with_objective

POLICIES = ("exact", "completion_aware")
ACCOUNTINGS = ("continuous", "reference")
DEFAULT_CANDIDATES = ("exploration_bonus=1", "exploration_bonus=0.5", "models,exploration_bonus=1",
                      "models,exploration_bonus=0.5")
MODELS = "models"  # a candidate's item: jobs of one model share priors
SEED_STEP = 1e-3  # a seed's relative change of single_interval_rel_sd


def _split(text: str, what: str) -> list:
    items = [s for s in text.split(",") if s]
    if not items:
        raise ValueError(f"{what}: empty list")
    return items


def _ratios(learned, oracle) -> tuple:
    """(samples, jobs finished, mean turnaround) of a learned replay over the oracle's."""
    def ratio(key):  # both 0 (no job finished in either): equal; only the oracle's 0: as far above as can be
        o, v = oracle.summary[key], learned.summary[key]
        return v / o if o else (1.0 if not v else float("inf"))
    return ratio("samples_done"), ratio("jobs_finished"), ratio("mean_turnaround_s")


def _candidate(text: str) -> tuple:
    """(advisor options, whether jobs of one model share priors) of a --candidate."""
    items = [s for s in text.split(",") if s]
    return advisor_options([s for s in items if s != MODELS]), MODELS in items


def _worst(r: tuple) -> float:
    """How far a cell is from the oracle, one number (higher is better, 1 = the oracle's)."""
    return min(r[0], r[1], 1.0 / r[2] if r[2] > 0 else float("inf"))  # 0: no job finished (the jobs ratio says so)


def _spread(values) -> str:
    v = np.asarray(values)
    return f"{np.median(v):.4f}" if len(v) == 1 else f"{np.median(v):.4f} [{v.min():.4f}, {v.max():.4f}]"


def main() -> int:
    p = OneLineParser(description=__doc__.splitlines()[0])
    p.add_argument("--trace", required=True, help="idle-node trace (CSV time,node,state, optionally .gz)")
    p.add_argument("--jobs", required=True, help="job workload (JSONL)")
    p.add_argument("--node-sets", required=True, metavar="A:B,...",
                   help="disjoint node sets, each as bft replay --nodes A:B (first-appearance positions)")
    p.add_argument("--choose-on", type=whole(1), default=2, help="the first N node sets choose the options (default 2)")
    p.add_argument("--candidate", action="append", default=[], metavar="KEY=VALUE[,KEY=VALUE]",
                   help=f"advisor options to choose among (repeatable; default: {' / '.join(DEFAULT_CANDIDATES)})")
    p.add_argument("--seeds", type=whole(1), default=3, help="learned replays per cell (default 3)")
    p.add_argument("--objectives", default=",".join(OBJECTIVES))
    p.add_argument("--policies", default=",".join(POLICIES))
    p.add_argument("--accountings", default=",".join(ACCOUNTINGS))
    p.add_argument("--max-jobs", type=whole(1), default=10)
    p.add_argument("--first-jobs", type=whole(1), help="only the first N jobs of the workload")
    p.add_argument("--start", type=seconds(high=1e12), help="window start, seconds on the trace's clock")
    p.add_argument("--end", type=seconds(high=1e12), help="window end, seconds on the trace's clock")
    args = p.parse_args()
    try:
        candidates = args.candidate or list(DEFAULT_CANDIDATES)
        for c in candidates:  # checked before anything is replayed, as bft replay checks them
            _candidate(c)
        sets = _split(args.node_sets, "--node-sets")
        repeated = next((x for k, x in enumerate(sets) if x in sets[:k]), None)
        if repeated is not None:
            raise ValueError(f"--node-sets: {repeated} is given twice (the sets must be disjoint)")
        if args.start is not None and args.end is not None and args.end <= args.start:
            raise ValueError(f"--end ({args.end:g}) must be after --start ({args.start:g})")
        if not 1 <= args.choose_on < len(sets):
            raise ValueError(f"--choose-on: {args.choose_on} must be in 1..{len(sets) - 1} (some node sets held out)")
        objectives, policies = _split(args.objectives, "--objectives"), _split(args.policies, "--policies")
        accountings = _split(args.accountings, "--accountings")
        for name, given, valid in (("--objectives", objectives, OBJECTIVES), ("--policies", policies, sim.POLICIES),
                                   ("--accountings", accountings, ACCOUNTINGS)):
            bad = [g for g in given if g not in valid]
            if bad:
                raise ValueError(f"{name}: {bad[0]!r} is not one of {', '.join(valid)}")
        trace = sim.read_trace(args.trace)
        node_sets = {s: sim.select_nodes(s, trace) for s in sets}
        taken = set()
        for s, nodes in node_sets.items():
            if taken & set(nodes):
                raise ValueError(f"--node-sets: {s} overlaps an earlier set (the sets must be disjoint)")
            taken |= set(nodes)
        workloads = {}
        for objective in objectives:
            specs = with_objective(sim.read_jobs(args.jobs), objective)
            workloads[objective] = specs[: args.first_jobs] if args.first_jobs else specs

        def replay(cell, curves, advisor=None, models=False):
            node_set, objective, policy, accounting = cell
            specs = workloads[objective]
            return sim.replay(trace, specs, policy, curves, nodes=node_sets[node_set],
                              max_jobs=args.max_jobs, start_s=args.start, end_s=args.end, advisor=advisor,
                              accounting=accounting, record_job_progress=False,
                              models=[sim.model_from_name(s.name) for s in specs] if models else None)

        def learned(cell, oracle, candidate):
            print(f"learned_crossval: {candidate} on {' '.join(cell)} ({time.time() - began:.0f} s)", file=sys.stderr,
                  flush=True)
            out = []
            for k in range(args.seeds):
                options, models = _candidate(candidate)
                options.single_interval_rel_sd *= 1.0 + SEED_STEP * k
                out.append(_ratios(replay(cell, "learned", options, models), oracle))
            return out

        began = time.time()
        cells = [(s, ob, po, ac) for s in sets for ob in objectives for po in policies for ac in accountings]
        choosing = [c for c in cells if sets.index(c[0]) < args.choose_on]
        oracles = {c: replay(c, "oracle") for c in cells}
        scores = {}
        for candidate in candidates:
            per_cell = [learned(c, oracles[c], candidate) for c in choosing]
            scores[candidate] = (min(float(np.median([_worst(r) for r in rs])) for rs in per_cell), per_cell)
        chosen = max(candidates, key=lambda c: scores[c][0])  # max keeps the first of equals
        results = dict(zip(choosing, scores[chosen][1]))
        for c in cells:
            if c not in results:
                results[c] = learned(c, oracles[c], chosen)
        elapsed = time.time() - began
    except (Error, OSError, ValueError) as e:
        print(f"learned_crossval: error: {e}", file=sys.stderr)
        return 2

    print(f"choosing on {', '.join(sets[: args.choose_on])}; held out: {', '.join(sets[args.choose_on:])}; "
          f"{args.seeds} seed(s); {len(cells)} cells; {elapsed:.0f} s")
    print("\n| candidate | score on the choosing cells (worst cell: min of samples, jobs, 1/turnaround ratios) |")
    print("|---|---|")
    for candidate in candidates:
        mark = " (chosen)" if candidate == chosen else ""
        print(f"| {candidate}{mark} | {scores[candidate][0]:.4f} |")
    print(f"\nlearned / oracle with {chosen}: median over seeds [min, max]")
    print("| node set | group | objective | policy | accounting | samples | jobs finished | mean turnaround | "
          "oracle: jobs, turnaround (d) |")
    print("|---|---|---|---|---|---|---|---|---|")
    for c in cells:
        group = "choosing" if c in choosing else "held out"
        rs = results[c]
        o = oracles[c].summary
        print(f"| {c[0]} | {group} | {c[1]} | {c[2]} | {c[3]} | {_spread([r[0] for r in rs])} | "
              f"{_spread([r[1] for r in rs])} | {_spread([r[2] for r in rs])} | "
              f"{o['jobs_finished']}, {o['mean_turnaround_s'] / 86400:.3f} |")
    held = [results[c] for c in cells if c not in choosing]
    flat = [r for rs in held for r in rs]
    meets = sum(all(r[0] >= 0.99 and r[1] >= 0.99 and r[2] <= 1.01 for r in rs) for rs in held)
    print(f"\nheld out: {meets} of {len(held)} cells within 1 % on all three in every seed; worst over their replays: "
          f"samples {min(r[0] for r in flat):.4f}, jobs {min(r[1] for r in flat):.4f}, "
          f"turnaround {max(r[2] for r in flat):.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
