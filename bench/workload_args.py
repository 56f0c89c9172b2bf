"""What the replay-based bench scripts share: the workload's options, as `bft replay` spells them, and
their reading (bft.sim's readers and node selection; errors as ValueError/OSError/bft.Error)."""

from __future__ import annotations

import argparse
from typing import Any, List, Optional, Tuple

from bft import sim


def add_workload_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--trace", required=True, help="idle-node trace (CSV time,node,state, optionally .gz)")
    p.add_argument("--jobs", required=True, help="job workload (JSONL)")
    p.add_argument("--nodes", metavar="SPEC", help="node subset, as bft replay --nodes (e.g. positions A:B in "
                   "the trace's order of first appearance)")


def read_workload(args: argparse.Namespace) -> Tuple[Any, List[Any], Optional[List[str]]]:
    """(trace, jobs, nodes) of the parsed options."""
    trace = sim.read_trace(args.trace)
    return trace, sim.read_jobs(args.jobs), sim.select_nodes(args.nodes, trace)
