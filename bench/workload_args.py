"""What the replay-based bench scripts share: the workload's options, as `bft replay` spells them, and
their reading (bft.sim's readers and node selection; errors as ValueError/OSError/bft.Error)."""

from __future__ import annotations

import argparse
from typing import Any, List, Optional, Sequence, Tuple

import numpy as np

from bft import sim
from bft.curve import OBJECTIVES


def add_workload_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--trace", required=True, help="idle-node trace (CSV time,node,state, optionally .gz)")
    p.add_argument("--jobs", required=True, help="job workload (JSONL)")
    p.add_argument("--nodes", metavar="SPEC", help="node subset, as bft replay --nodes (e.g. positions A:B in "
                   "the trace's order of first appearance)")
    p.add_argument("--objective", choices=OBJECTIVES, default="throughput",
                   help="speedup: each job's objective divided by its value at 1 node (the paper's second "
                   "objective); throughput: the workload's objective as it is")


def with_objective(specs: Sequence[Any], objective: str) -> List[Any]:
    """The jobs with `objective` (OBJECTIVES): speedup divides each job's objective by its value at 1 node."""
    if objective not in OBJECTIVES:
        raise ValueError(f"objective {objective!r}: expected one of {', '.join(OBJECTIVES)}")
    if objective == "throughput":
        return list(specs)
    out = []
    for spec in specs:
        one = float(np.interp(1.0, spec.nodes, spec.objective))  # the curve is piecewise-linear
        if not one > 0:
            raise ValueError(f"job {spec.name}: objective: speedup needs a positive value at 1 node")
        spec.objective = [v / one for v in spec.objective]
        out.append(spec)
    return out


def read_workload(args: argparse.Namespace) -> Tuple[Any, List[Any], Optional[List[str]]]:
    """(trace, jobs, nodes) of the parsed options."""
    trace = sim.read_trace(args.trace)
    specs = with_objective(sim.read_jobs(args.jobs), args.objective)
    return trace, specs, sim.select_nodes(args.nodes, trace)
