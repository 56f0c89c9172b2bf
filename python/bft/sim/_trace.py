"""Idle-node traces: reading and writing, statistics, the scheduler-log importers (sacct, SWF), the
synthetic generator and node selection (``bft._core.sim``'s trace/ half, libbft/src/sim/trace/).

Re-exported by :mod:`bft.sim`; import from there.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import List, Optional, Sequence, Tuple, Union

import numpy as np

from .._bounded import read_whole
from .._core import sim as _sim
from ..jobs import JobSpec

Trace = _sim.Trace
TraceStats = _sim.TraceStats
ImportedTrace = _sim.ImportedTrace
NodeState = _sim.NodeState
MAX_MACHINE_NODES = _sim.MAX_MACHINE_NODES

PathLike = Union[str, os.PathLike]


def read_trace(path: PathLike) -> Trace:
    """Reads a ``time,node,state`` trace (plain or gzip). Bad lines raise ValueError("path:line: ...")."""
    return _sim.read_trace(os.fspath(path))


def parse_trace(text: str, source: str = "<trace>") -> Trace:
    return _sim.parse_trace(text, source)


def write_trace(trace: Trace, path: PathLike) -> None:
    """Writes the trace as CSV (gzip-compressed if the path ends in .gz)."""
    _sim.write_trace(trace, os.fspath(path))


def trace_stats(trace: Union[Trace, PathLike]) -> TraceStats:
    """Idle nodes over time and idle-hole lengths of a trace (or of the trace file at a path)."""
    return _sim.trace_stats(trace if isinstance(trace, Trace) else read_trace(trace))


def parse_sacct_time(text: str) -> int:
    """A time as sacct prints it (Unix seconds or YYYY-MM-DDTHH:MM:SS) in Unix seconds."""
    return _sim.parse_sacct_time(_text("time", text))


def expand_hostlist(expression: str) -> List[str]:
    """Node names of a Slurm hostlist expression: ``expand_hostlist("c[01-02],gpu5") == ["c01", "c02", "gpu5"]``."""
    return _sim.expand_hostlist(_text("hostlist", expression))


def read_sacct_jobs(path: PathLike, columns: Sequence[str], optional: Sequence[str] = (),
                    max_names: int = MAX_MACHINE_NODES) -> List[Tuple[int, List[str], List[str]]]:
    """The job lines of a ``sacct --parsable2`` log as (line number, the fields of `columns` in their
    order, NodeList's node names): the one reader of sacct's format, the importer's. The header must
    name each of `columns` once (those in `optional` may be missing: ""); steps are skipped; more than
    `max_names` node names in the file is a ValueError naming the line, counted before they are made."""
    return _sim.read_sacct_jobs(os.fspath(path), list(columns), list(optional), int(max_names))


def expand_hostlists(expressions: Sequence[str], labels: Optional[Sequence[str]] = None,
                     field: str = "machine_nodes") -> List[str]:
    """The node names of several hostlist expressions, at most MAX_MACHINE_NODES in all.

    A bad expression is a ValueError starting with its label (default ``machine_nodes[i]``); too many
    names, one starting with ``field``.
    """
    names: List[str] = []
    for i, expression in enumerate(expressions):
        label = labels[i] if labels is not None else f"{field}[{i}]"
        expression = _text(label, expression)
        try:
            names.extend(_sim.expand_hostlist(expression))
        except ValueError as e:
            raise ValueError(f"{label}: {e}") from None
        if len(names) > MAX_MACHINE_NODES:
            raise ValueError(f"{field}: more than {MAX_MACHINE_NODES:,} nodes")
    return names


def machine_nodes_spec(spec: str, field: str = "--machine-nodes") -> List[str]:
    """The node names of a ``--machine-nodes`` spec: a hostlist expression, or @FILE with one name or
    expression per line. Errors are ValueErrors naming ``field`` (and file:line for @FILE)."""
    spec = _text(field, spec)
    if not spec.startswith("@"):
        return expand_hostlists([spec], [field], field=field)
    entries = _read_lines_file(spec[1:], field)
    return expand_hostlists([entry for _, entry in entries],
                            [f"{field}: {spec[1:]}:{number}" for number, _ in entries], field=field)


def import_sacct(
    path: PathLike,
    machine_nodes: Union[str, Sequence[str]],
    start: Union[None, int, str] = None,
    end: Union[None, int, str] = None,
) -> ImportedTrace:
    """The idle-node trace of a Slurm accounting log (``sacct --parsable2``, docs/trace.md).

    ``machine_nodes``: every node of the machine, as names or hostlist expressions (``"c[001-128]"``).
    ``start`` / ``end``: the window, in Unix seconds or as sacct prints times; default: the log's
    first job start and last job end. Time 0 of the trace is the window's start (``origin_s``).
    """
    if isinstance(machine_nodes, str):
        items = [machine_nodes]
    elif isinstance(machine_nodes, (list, tuple)):
        items = list(machine_nodes)
    else:
        raise ValueError("machine_nodes: expected a hostlist string or a list of them, "
                         f"got {type(machine_nodes).__name__}")
    names = expand_hostlists(items)
    start_s, end_s = _sacct_time("start", start), _sacct_time("end", end)
    if start_s is not None and end_s is not None and end_s <= start_s:
        raise ValueError(f"end ({end}) must be after start ({start})")
    return _sim.import_sacct(os.fspath(path), names, start_s, end_s)


def import_swf(path: PathLike, procs_per_node: int, machine_nodes: Optional[int] = None) -> ImportedTrace:
    """The idle-node trace of a Standard Workload Format log at count level (docs/trace.md).

    Each job takes ceil(processors / ``procs_per_node``) whole nodes, the lowest-numbered free ones;
    ``machine_nodes`` defaults to the log header's MaxNodes (or MaxProcs / procs_per_node).
    """
    ppn = _whole("procs_per_node", procs_per_node, 1)
    nodes = 0 if machine_nodes is None else _whole("machine_nodes", machine_nodes, 1)
    return _sim.import_swf(os.fspath(path), ppn, nodes)


def _text(field: str, value) -> str:
    if not isinstance(value, str):
        raise ValueError(f"{field}: expected a string, got {type(value).__name__}")
    if "\0" in value:
        raise ValueError(f"{field}: contains a NUL byte")
    return value


def _whole(field: str, value, low: int, high: int = 2**31 - 1) -> int:
    if not isinstance(value, (int, np.integer)) or isinstance(value, (bool, np.bool_)):
        raise ValueError(f"{field}: expected a whole number, got {value!r}")
    if not low <= int(value) <= high:
        raise ValueError(f"{field}: {int(value)} is out of range ({low} to {high})")
    return int(value)


def _sacct_time(field: str, value) -> Optional[int]:
    if value is None:
        return None
    if isinstance(value, str):
        try:
            return parse_sacct_time(_text(field, value))
        except ValueError as e:
            raise ValueError(f"{field}: {e}") from None
    return _whole(field, value, 0, 2**62)


def select_nodes(spec: Optional[str], trace: Trace) -> Optional[List[str]]:
    """The node subset a ``--nodes`` spec names (``bft replay``, the bench scripts), for ``replay(nodes=...)``.

    ``spec``: a count N (the first N node names in sorted order), positions A:B in the trace's order
    of first appearance (A included, B not), a comma list of names, or @FILE (one name per line);
    None selects every node (returns None). A bad spec is a ValueError starting with ``--nodes``.
    """
    if spec is None:
        return None
    spec = _text("--nodes", spec)
    if spec.startswith("@"):
        return [name for _, name in _read_lines_file(spec[1:], "--nodes")]
    positions = re.fullmatch(r"([0-9]+):([0-9]+)", spec) if spec.isascii() else None
    if positions:
        a, b = int(positions.group(1)), int(positions.group(2))
        if not a < b <= len(trace.node_names):
            raise ValueError(f"--nodes {spec}: positions A:B need A < B <= {len(trace.node_names)} (the trace's nodes)")
        return list(trace.node_names[a:b])
    if spec.isascii() and spec.isdigit():
        n = int(spec)
        if n < 1:
            raise ValueError("--nodes: the count must be >= 1")
        names = sorted(trace.node_names)
        if n > len(names):
            raise ValueError(f"--nodes {n}: the trace has only {len(names)} nodes")
        return names[:n]
    names = [s.strip() for s in spec.split(",") if s.strip()]
    if not names:
        raise ValueError(f"--nodes {spec!r} names no nodes (a count N, positions A:B, a comma list of names, "
                         "or @FILE)")
    return names


def _read_lines_file(path: PathLike, field: str) -> List[Tuple[int, str]]:
    """FIELD @FILE (--nodes, --machine-nodes): the non-blank lines of a UTF-8 file with their numbers.

    Errors are ValueErrors naming the field and file:line; the file is read in bounded memory
    (_bounded.read_whole: at most MAX_FILE_BYTES, lines of at most MAX_LINE_BYTES).
    """
    path = Path(path)
    data = read_whole(path, field)
    lines = []
    data = data.removeprefix(b"\xef\xbb\xbf")  # a UTF-8 byte order mark
    for number, raw in enumerate(data.split(b"\n"), start=1):
        try:
            line = raw.decode("utf-8").strip()
        except UnicodeDecodeError as e:
            raise ValueError(f"{field}: {path}:{number}: not UTF-8 text "
                             f"(byte 0x{raw[e.start]:02X} at column {e.start + 1})") from None
        if "\0" in line:
            raise ValueError(f"{field}: {path}:{number}: NUL byte in a node name")
        if line:
            lines.append((number, line))
    if not lines:
        raise ValueError(f"{field}: {path} names no nodes")
    return lines


def generate_synthetic(seed: int = 1, **options) -> "tuple[Trace, List[JobSpec]]":
    """The synthetic trace and job mix of ``bft replay``'s default (docs/sim.md describes the model).

    Options (defaults in brackets): nodes [512], duration_s [2 days], mean_idle_nodes [96],
    mean_block_nodes [8], median_idle_s [1800], idle_sigma [1.2], jobs [48], mean_interarrival_s [3600].
    """
    trace, jobs = _sim.generate_synthetic(seed=seed, **options)
    return trace, list(jobs)
