"""What a job is made of, checked: its name, its throughput curve, its configurations (structured
partial backpropagation) and the rates they imply (docs/runtime.md, "Submitting"). One home for
these checks: a submit (:func:`.control.job_from_request`, ``bft submit``) and the state file's
check (:mod:`.state_schema`) both call them; this module imports nothing of the runtime's, so no
import circle goes through it."""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any, Dict, List, Optional

from ... import jobs
from ..._bounded import read_json
from ...jobs import FULL_CONFIGURATION

JOB_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
CONFIGURATION_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,31}")
MAX_CONFIGURATIONS = 16
# A configuration's samples/s over full backpropagation's, assumed until measured, when its --configuration
# gives none (NAME:EFFICIENCY).
DEFAULT_SPEEDUP = 1.0
MAX_NODES = 1_000_000


def check_configurations(configurations: Any) -> List[Dict[str, Any]]:
    """A job's configurations (structured partial backpropagation, docs/spb.md): a list of
    {"name", "efficiency", "speedup"}: the name its script is given (BFT_CONFIGURATION), the value of a
    sample processed in it against one at full backpropagation (0 < efficiency <= 1), and its
    samples/s over full backpropagation's, the allocator's guess until the configuration is measured."""
    if not isinstance(configurations, list) or len(configurations) > MAX_CONFIGURATIONS:
        raise ValueError(f"--configuration: expected at most {MAX_CONFIGURATIONS} configurations")
    out, names = [], {FULL_CONFIGURATION}
    for c in configurations:
        if not isinstance(c, dict) or set(c) - {"name", "efficiency", "speedup"} or "name" not in c:
            raise ValueError("--configuration: expected NAME:EFFICIENCY[:SPEEDUP]")
        name = c["name"]
        if not isinstance(name, str) or not CONFIGURATION_NAME.fullmatch(name):
            raise ValueError(f"--configuration: {name!r} is not a configuration name (letters, digits, '_', '.', "
                             "'-'; at most 32; starting with a letter or digit)")
        if name in names:
            raise ValueError(f"--configuration {name}: the name is taken" + (" (full backpropagation)"
                                                                             if name == FULL_CONFIGURATION else ""))
        names.add(name)
        efficiency, speedup = c.get("efficiency"), c.get("speedup", DEFAULT_SPEEDUP)
        if isinstance(efficiency, bool) or not isinstance(efficiency, (int, float)) or not 0 < efficiency <= 1:
            raise ValueError(f"--configuration {name}: efficiency {efficiency!r} must be a number in (0, 1]")
        if (isinstance(speedup, bool) or not isinstance(speedup, (int, float)) or not math.isfinite(speedup)
                or not 0 < speedup <= 1000):
            raise ValueError(f"--configuration {name}: speedup {speedup!r} must be a number in (0, 1000]")
        out.append({"name": name, "efficiency": float(efficiency), "speedup": float(speedup)})
    return out


def check_rates(curve: Optional[Dict[str, list]], configurations: List[Dict[str, Any]], max_nodes: int) -> None:
    """Every rate the manager may hand the allocator for this job before it measures it stays within the
    job format's limit (jobs.MAX_SAMPLES_PER_S), so the allocator takes it: the curve, the advisor's
    prior from it (its best rate per node, linear up to `max_nodes`), and either times a configuration's
    speedup (its first guess, curvebook.py)."""
    if curve is None:
        return
    per_node = max(v / n for n, v in zip(curve["nodes"], curve["throughput"]) if n > 0)
    top = max(max(curve["throughput"]), per_node * max_nodes)
    if top > jobs.MAX_SAMPLES_PER_S:
        raise ValueError(f"--curve: its best rate per node, {per_node:g} samples/s, at --max {max_nodes} nodes "
                         f"is {top:g} samples/s, above {jobs.MAX_SAMPLES_PER_S:g}")
    for c in configurations:
        if top * c["speedup"] > jobs.MAX_SAMPLES_PER_S:
            raise ValueError(f"--configuration {c['name']}: speedup {c['speedup']:g} x the --curve's {top:g} "
                             f"samples/s (up to --max {max_nodes} nodes) exceeds {jobs.MAX_SAMPLES_PER_S:g}")


def read_curve(path: Path, flag: str) -> Optional[Dict[str, list]]:
    """The throughput curve in a JSON file given as `flag` (``bft submit --curve``), read within the
    caps of every file read whole and checked as the manager checks it; a ValueError names both."""
    return check_curve(read_json(path, flag), f"{flag} {path}")


def check_curve(curve: Any, where: str, max_rate: float = jobs.MAX_SAMPLES_PER_S) -> Optional[Dict[str, list]]:
    """A throughput curve given by the user: {"nodes": [...], "throughput": [...]} (samples/s) of rates
    up to `max_rate` (the state file's check takes what an older manager stored: its decision fails
    such a job, with the reason)."""
    if curve is None:
        return None
    if not isinstance(curve, dict) or set(curve) - {"nodes", "throughput"} or not {"nodes", "throughput"} <= set(curve):
        raise ValueError(f"{where}: expected an object with exactly the fields 'nodes' and 'throughput'")
    nodes, values = curve["nodes"], curve["throughput"]
    if not isinstance(nodes, list) or not isinstance(values, list) or len(nodes) != len(values) or not nodes:
        raise ValueError(f"{where}: 'nodes' and 'throughput' must be non-empty lists of the same length")
    for k, (n, v) in enumerate(zip(nodes, values)):
        if isinstance(n, bool) or not isinstance(n, int) or not 0 <= n <= MAX_NODES:
            raise ValueError(f"{where}: nodes[{k}] = {n!r} is not a node count")
        if (isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v)
                or not 0 <= v <= max_rate):  # the job format's limit, which the allocator takes
            raise ValueError(f"{where}: throughput[{k}] = {v!r} is not a rate in samples/s (0 to {max_rate:g})")
    if any(b <= a for a, b in zip(nodes, nodes[1:])):
        raise ValueError(f"{where}: 'nodes' must be strictly increasing")
    if not any(n > 0 and v > 0 for n, v in zip(nodes, values)):
        raise ValueError(f"{where}: no positive throughput at a positive node count")
    return {"nodes": nodes, "throughput": [float(v) for v in values]}
