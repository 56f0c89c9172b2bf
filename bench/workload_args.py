"""What the replay-based bench scripts share: the workload's options, as `bft replay` spells them, and
their reading (bft.sim's readers and node selection; errors as ValueError/OSError/bft.Error)."""

from __future__ import annotations

import argparse
import math
import os
import sys
from pathlib import Path
from typing import Any, Callable, Dict, List, NoReturn, Optional, Sequence, Tuple

import numpy as np

from bft import sim
from bft.alloc import MAX_HORIZON_S
from bft.curve import OBJECTIVES


class OneLineParser(argparse.ArgumentParser):
    """argparse's parser whose errors are one line, `NAME: error: ...`, exit status 2 (the house rule;
    argparse's own adds a usage line). NAME: the script's, without .py, as the scripts' other errors."""

    def __init__(self, **kwargs: Any):
        super().__init__(prog=Path(sys.argv[0]).stem, **kwargs)

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message}\n")


# argparse types that check a value's range, so a bad one is argparse's usage line and one error naming
# the flag (not a traceback, or a message naming the API's parameter, after a replay).
def whole(low: int, high: Optional[int] = None) -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
        if value < low or (high is not None and value > high):
            bounds = f"in [{low}, {high}]" if high is not None else f">= {low}"
            raise argparse.ArgumentTypeError(f"expected a whole number {bounds}, got {value}")
        return value
    return parse


def number(what: str, *, positive: bool = False, high: float = MAX_HORIZON_S) -> Callable[[str], float]:
    """A finite number (of `what`) in [0, high] ((0, high] if `positive`)."""
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}") from None
        if not (math.isfinite(value) and (value > 0 if positive else value >= 0) and value <= high):
            raise argparse.ArgumentTypeError(f"expected {what} in {'(' if positive else '['}0, {high:g}], got {text}")
        return value
    return parse


def seconds(*, positive: bool = False, high: float = MAX_HORIZON_S) -> Callable[[str], float]:
    """Seconds in [0, high] ((0, high] if `positive`); high defaults to the allocator's cap (MAX_HORIZON_S)."""
    return number("seconds", positive=positive, high=high)


def policies(text: str) -> List[str]:
    """A comma list of the replay's policies (bft replay --policy)."""
    names = [p for p in text.split(",")]
    bad = [p for p in names if p not in sim.POLICIES]
    if bad:
        raise argparse.ArgumentTypeError(f"unknown policy {bad[0]!r} (one of {', '.join(sim.POLICIES)})")
    return names


def refuse_overwriting(outputs: Sequence[Path], inputs: Dict[str, Optional[str]]) -> None:
    """A ValueError if an output file is one of the inputs (by device and inode: a link is the same file)."""
    def identity(path) -> Optional[Tuple[int, int]]:
        try:
            st = os.stat(path)
        except OSError:
            return None
        return st.st_dev, st.st_ino

    given = {identity(path): flag for flag, path in inputs.items() if path is not None}
    given.pop(None, None)
    for out in outputs:
        flag = given.get(identity(out))
        if flag is not None:
            raise ValueError(f"{out} would be written over the {flag} input: choose another output")


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
