"""Trace replay: evaluate allocation policies on idle-node traces (a thin layer over ``bft._core.sim``).

>>> from bft import sim
>>> trace, jobs = sim.generate_synthetic(seed=1)
>>> result = sim.replay(trace, jobs, policy="exact")
>>> result.summary["idle_capture"]  # doctest: +SKIP

Traces are ``time,node,state`` CSV files (optionally gzip) and workloads are JSONL files with one
job per line; see docs/formats.md. The accounting is documented in docs/sim.md.
"""

from __future__ import annotations

import csv
import json
import math
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Dict, Iterable, List, Optional, Sequence, Tuple, Union

import numpy as np

from . import alloc as _alloc
from ._bounded import read_whole
from ._core import curve as _curve
from ._core import sim as _sim

# The job format has its own module (bft.jobs), beneath the allocator and the replay; its names stay here too.
from .jobs import JobSpec, configuration_fields, job_fields, parse_jobs, read_jobs, write_jobs

Trace = _sim.Trace
TraceStats = _sim.TraceStats
ImportedTrace = _sim.ImportedTrace
IdleLifetimePredictor = _sim.IdleLifetimePredictor
MAX_MACHINE_NODES = _sim.MAX_MACHINE_NODES
REFERENCE_START_EVENT = _sim.REFERENCE_START_EVENT  # sim::kReferenceStartEvent
reference_start_s = _sim.reference_start_s
NodeState = _sim.NodeState
CurveMode = _sim.CurveMode
# The replay's defaults and mode names, from C++ (ReplayOptions and the enums' ToString).
DEFAULT_MILP_TIME_LIMIT_S = _sim.DEFAULT_MILP_TIME_LIMIT_S
DEFAULT_MAX_JOBS = _sim.DEFAULT_MAX_JOBS
DEFAULT_TFWD_S = _sim.DEFAULT_TFWD_S
DEFAULT_POLICY = _sim.DEFAULT_POLICY
DEFAULT_CURVES = _sim.DEFAULT_CURVES
DEFAULT_ACCOUNTING = _sim.DEFAULT_ACCOUNTING
DEFAULT_CONFIGURATIONS = _sim.DEFAULT_CONFIGURATIONS
CURVE_MODES = _sim.CURVE_MODES
DIAGNOSTIC_CURVE_MODES = _sim.DIAGNOSTIC_CURVE_MODES
ACCOUNTINGS = _sim.ACCOUNTINGS
CONFIGURATION_MODES = _sim.CONFIGURATION_MODES

PathLike = Union[str, os.PathLike]

__all__ = [
    "Trace",
    "JobSpec",
    "NodeState",
    "CurveMode",
    "ReplayResult",
    "read_trace",
    "parse_trace",
    "write_trace",
    "TraceStats",
    "trace_stats",
    "format_trace_stats",
    "ImportedTrace",
    "IdleLifetimePredictor",
    "parse_sacct_time",
    "expand_hostlist",
    "expand_hostlists",
    "machine_nodes_spec",
    "select_nodes",
    "import_sacct",
    "import_swf",
    "read_jobs",
    "parse_jobs",
    "job_fields",
    "configuration_fields",
    "write_jobs",
    "generate_synthetic",
    "replay",
    "comparison_table",
    "format_summary",
    "replay_label",
    "POLICIES",
    "DEFAULT_MILP_TIME_LIMIT_S",
    "DEFAULT_MAX_JOBS",
    "DEFAULT_TFWD_S",
    "DEFAULT_POLICY",
    "DEFAULT_CURVES",
    "DEFAULT_ACCOUNTING",
    "DEFAULT_CONFIGURATIONS",
    "CURVE_MODES",
    "DIAGNOSTIC_CURVE_MODES",
    "ACCOUNTINGS",
    "CONFIGURATION_MODES",
    "REFERENCE_START_EVENT",
    "reference_start_s",
]

# The allocators of bft.alloc by name: the one list of policy names, from C++ (alloc::Policies).
POLICIES = _alloc.SOLVERS

STEP_COLUMNS = (
    "time_s",
    "transitions",
    "idle_nodes",
    "used_nodes",
    "running_jobs",
    "active_jobs",
    "queued_jobs",
    "finished_jobs",
    "rescales",
    "preemptions",
    "samples_done",
    "rate",
    "allocator_s",
)


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


def format_trace_stats(stats: TraceStats, label: str) -> str:
    """The text report of ``bft trace stats``: is this machine's idle capacity worth harvesting?"""
    span_s = stats.end_s - stats.start_s
    holes = stats.hole_lengths_s

    def hole_figure(q: float) -> str:
        return _duration(float(np.quantile(holes, q, method="inverted_cdf"))) if len(holes) else "-"

    share = 100.0 * stats.mean_idle_nodes / stats.nodes if stats.nodes else 0.0
    return "\n".join([
        f"{label}: {stats.nodes:,} nodes, {stats.transitions:,} transitions over {_duration(span_s)}",
        f"idle nodes (time-weighted): mean {stats.mean_idle_nodes:,.1f} ({share:.1f} % of the nodes), "
        f"median {stats.p50_idle_nodes:,}, p90 {stats.p90_idle_nodes:,}, p99 {stats.p99_idle_nodes:,}, "
        f"max {stats.max_idle_nodes:,}",
        f"idle node-hours: {stats.idle_node_s / 3600.0:,.0f}",
        f"idle holes: {len(holes):,} ended (+{stats.holes_open_at_end:,} open at the end); length "
        f"p10 {hole_figure(0.1)}, median {hole_figure(0.5)}, p90 {hole_figure(0.9)}, "
        f"mean {_duration(float(np.mean(holes))) if len(holes) else '-'}",
        f"events: {stats.events_per_hour:,.1f} per hour (distinct transition times)",
    ])


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


@dataclass
class ReplayResult:
    """What one replay produced. Columns are numpy arrays."""

    summary: Dict[str, object]
    steps: Dict[str, np.ndarray]
    jobs: Dict[str, object]
    progress: Dict[str, np.ndarray]
    assignments: Dict[str, np.ndarray] = field(default_factory=dict)

    @property
    def policy(self) -> str:
        return str(self.summary["policy"])

    @property
    def label(self) -> str:
        """The replay's :func:`replay_label`: "exact", "exact+learned", "exact/full/reference", ..."""
        s = self.summary
        return replay_label(self.policy, s["curves"], s.get("accounting", DEFAULT_ACCOUNTING),
                            s.get("configurations", DEFAULT_CONFIGURATIONS))

    def write_steps_csv(self, path: PathLike) -> None:
        """The per-event step log, one row per event, columns STEP_COLUMNS."""
        _write_columns(path, self.steps, STEP_COLUMNS)

    def write_jobs_csv(self, path: PathLike) -> None:
        """Per job: submit, admit and finish times (-1: never), work, done, losses, rescales, preemptions,
        node-seconds and the rescale costs the allocator was last given (docs/formats.md)."""
        keys = ("name", "submit_s", "admit_s", "finish_s", "work", "done", "loss_samples", "unpaid_loss_samples",
                "rescales", "preemptions", "node_seconds", "configuration_switches", "partial_node_seconds",
                "allocator_scale_up_s", "allocator_scale_down_s")
        _write_columns(path, self.jobs, keys)

    def write_summary_json(self, path: PathLike) -> None:
        """Writes the summary as JSON. A non-finite figure is an error, never ``Infinity``/``NaN``
        (which is not JSON); the inputs are bounded so that none arises."""
        bad = [k for k, v in self.summary.items() if isinstance(v, float) and not math.isfinite(v)]
        if bad:
            raise ValueError(f"summary: {', '.join(bad)} not finite; refusing to write invalid JSON to {path}")
        text = json.dumps(self.summary, indent=2, allow_nan=False)
        with open(path, "w") as f:
            f.write(text + "\n")

    def job_progress(self, job: int) -> "tuple[np.ndarray, np.ndarray]":
        """(times, done) of one job (index into the workload) at the events where it was admitted."""
        sel = self.progress["job"] == job
        return self.progress["time_s"][sel], self.progress["done"][sel]


def _write_columns(path: PathLike, table: Dict[str, Sequence], keys: Sequence[str]) -> None:
    """CSV with a header row `keys` and one row per index of the equally long columns table[key]."""
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(keys)
        for row in zip(*(table[k] for k in keys)):
            w.writerow([_fmt(x) for x in row])


def _fmt(x) -> str:
    if isinstance(x, (float, np.floating)):
        return repr(float(x))
    return str(x)


def replay(
    trace: Union[Trace, PathLike],
    jobs: Union[Sequence[JobSpec], PathLike],
    policy: str = DEFAULT_POLICY,
    curves: str = DEFAULT_CURVES,
    *,
    max_jobs: int = DEFAULT_MAX_JOBS,
    tfwd_s: float = DEFAULT_TFWD_S,
    nodes: Optional[Iterable[str]] = None,
    start_s: Optional[float] = None,
    end_s: Optional[float] = None,
    record_job_progress: bool = True,
    record_assignments: bool = False,
    milp_backend: Optional[str] = None,
    time_limit_s: Optional[float] = None,
    isolate: bool = True,
    advisor: Optional[_curve.AdvisorOptions] = None,
    on_progress: Optional[Callable[[float], None]] = None,
    accounting: str = DEFAULT_ACCOUNTING,
    configurations: str = DEFAULT_CONFIGURATIONS,
    models: Optional[Sequence[str]] = None,
) -> ReplayResult:
    """Replays ``trace`` with ``jobs`` under one allocation policy (see POLICIES).

    ``curves`` is "oracle" (the allocator sees the workload's curves) or "learned" (the profiling
    advisor learns them and the rescale costs from the simulated progress); "learned_curves" and
    "learned_costs" give the allocator only the learned curves or only the learned costs (the
    workload's for the rest), to tell the two apart (docs/sim.md). ``nodes`` restricts the replay to a subset of
    the trace's node names; ``start_s``/``end_s`` to a window on the trace's clock. ``on_progress``
    is called with the fraction replayed. The replay runs in C++ with the GIL released; Ctrl-C
    stops it (within a MILP solve too) and raises ``KeyboardInterrupt``.

    MILP policies solve with ``time_limit_s`` per allocation (default
    ``DEFAULT_MILP_TIME_LIMIT_S``; the summary counts the allocations that hit it in
    ``allocator_time_limits``) and, with ``isolate`` (default), in a child process, so that a
    crash of a solver library ends one allocation (counted in ``allocator_failures``; every job
    keeps its nodes) instead of the replay.

    ``advisor`` (a ``curve.AdvisorOptions``) configures the profiling advisor of learned mode
    (default: its defaults, docs/curve.md).

    ``accounting`` is "continuous" (libbft's, the default) or "reference" (the published BFTrainer
    replayer's: decisions only at trace events, its window and its equal share; docs/sim.md).

    ``configurations`` is "choose" (the policy chooses among the configurations each job declares,
    structured partial backpropagation: docs/spb.md) or "full" (full backpropagation only: the plain
    policy). Samples count at full backpropagation: one processed in a configuration of efficiency
    e counts e.

    ``models`` (learned modes): each job's model, in workload order ("" for none); jobs of one model
    share what the advisor measured (``curve.ProfilingAdvisor.set_model``). ``model_from_name``
    derives them from names like "J00000-AlexNet".
    """
    if isinstance(nodes, (str, bytes)):
        raise ValueError(f"nodes: expected a list of node names, got the string {nodes!r} (write [{nodes!r}])")
    if nodes is not None:
        nodes = list(nodes)
        if not nodes:
            raise ValueError("nodes: the list is empty (pass None to replay every node of the trace)")
        for k, name in enumerate(nodes):
            if not isinstance(name, str):
                raise ValueError(f"nodes[{k}]: expected a node name (str), got {name!r}")
    if advisor is not None and not isinstance(advisor, _curve.AdvisorOptions):
        raise ValueError(f"advisor: expected a bft.curve.AdvisorOptions, got {type(advisor).__name__}")
    if not isinstance(trace, Trace):
        trace = read_trace(trace)
    if isinstance(jobs, (str, os.PathLike)):
        jobs = read_jobs(jobs)
    raw = _sim.replay(
        trace,
        list(jobs),
        policy=policy,
        curves=curves,
        max_jobs=max_jobs,
        tfwd_s=tfwd_s,
        nodes=nodes if nodes is not None else [],
        start_s=start_s,
        end_s=end_s,
        record_job_progress=record_job_progress,
        record_assignments=record_assignments,
        milp_backend=milp_backend,
        time_limit_s=time_limit_s,
        isolate=bool(isolate),
        advisor=advisor,
        on_progress=on_progress,
        accounting=accounting,
        configurations=configurations,
        models=list(models) if models is not None else [],
    )
    return ReplayResult(
        summary=dict(raw["summary"]),
        steps=dict(raw["steps"]),
        jobs=dict(raw["jobs"]),
        progress=dict(raw["progress"]),
        assignments=dict(raw["assignments"]),
    )


def model_from_name(name: str) -> str:
    """A job's model by the naming convention of the shared workloads: the part of its name after
    the first "-" ("J00000-AlexNet": "AlexNet"); "" (no model) for a name without one."""
    return name.split("-", 1)[1] if "-" in name else ""


def replay_label(policy: str, curves: str = DEFAULT_CURVES, accounting: str = DEFAULT_ACCOUNTING,
                 configurations: str = DEFAULT_CONFIGURATIONS) -> str:
    """How the replay of a policy is named in tables and file names: the policy, "+learned" for
    learned curves, "/full" for full backpropagation only, "/reference" for the reference accounting."""
    label = policy if curves == DEFAULT_CURVES else f"{policy}+{curves}"
    if configurations != DEFAULT_CONFIGURATIONS:
        label += f"/{configurations}"
    return label if accounting == DEFAULT_ACCOUNTING else f"{label}/{accounting}"


def _duration(s: float) -> str:
    s = float(s)
    if s >= 86400:
        return f"{s / 86400:.2f} d"
    if s >= 3600:
        return f"{s / 3600:.2f} h"
    if s >= 60:
        return f"{s / 60:.1f} min"
    return f"{s:.1f} s"


def _seconds(s: float) -> str:
    s = float(s)
    if s >= 1:
        return f"{s:.2f} s"
    if s >= 1e-3:
        return f"{s * 1e3:.2f} ms"
    return f"{s * 1e6:.0f} us"


def format_summary(summary: Dict[str, object]) -> str:
    """A readable multi-line summary of one replay."""
    s = summary
    label = s["policy"] if s["curves"] == DEFAULT_CURVES else f"{s['policy']} (learned curves)"
    if s.get("accounting", DEFAULT_ACCOUNTING) != DEFAULT_ACCOUNTING:
        label += f", {s['accounting']} accounting"
    if s.get("configurations", DEFAULT_CONFIGURATIONS) != DEFAULT_CONFIGURATIONS:
        label += ", full backpropagation only"
    lines = [
        f"policy {label}: {s['nodes']} nodes, window {_duration(float(s['end_s']) - float(s['start_s']))}, "
        f"{s['events']} events",
        f"  samples done          {float(s['samples_done']):.4g}  "
        f"(overhead efficiency {float(s['overhead_efficiency']):.1%}, "
        f"{float(s['loss_samples']):.3g} lost to {s['rescales']} rescales and {s['preemptions']} preemptions)",
        f"  node-hours            {float(s['used_node_hours']):.1f} used of {float(s['idle_node_hours']):.1f} idle "
        f"(idle capture {float(s['idle_capture']):.1%})",
        f"  jobs                  {s['jobs_finished']} finished of {s['jobs_submitted']} submitted "
        f"({s['jobs_admitted']} admitted)",
    ]
    if int(s.get("configuration_switches", 0)) or float(s.get("partial_node_hours", 0.0)):
        lines.append(
            f"  configurations        {float(s['partial_node_hours']):.1f} node-hours in partial backpropagation, "
            f"{s['configuration_switches']} switches"
        )
    if int(s["jobs_finished"]) > 0:
        lines.append(
            f"  makespan              {_duration(s['makespan_s'])}, mean turnaround {_duration(s['mean_turnaround_s'])}"
        )
        lines.append(
            f"  active window         {float(s['active_used_node_hours']):.1f} used of "
            f"{float(s['active_idle_node_hours']):.1f} idle node-hours (idle capture "
            f"{float(s['active_idle_capture']):.1%}), first admission to last finish"
        )
    lines.append(
        f"  allocator             {s['allocator_calls']} calls, p50 {_seconds(s['allocator_p50_s'])}, "
        f"p99 {_seconds(s['allocator_p99_s'])}, max {_seconds(s['allocator_max_s'])}"
    )
    if int(s.get("allocator_time_limits", 0)) or int(s.get("allocator_failures", 0)):
        lines.append(
            f"  MILP allocations      {s['allocator_time_limits']} stopped at the time limit, "
            f"{s['allocator_failures']} failed (jobs kept their nodes or the incumbent)"
        )
    lines.append(f"  replay wall time      {_seconds(s['wall_s'])}")
    return "\n".join(lines)


def comparison_table(results: Sequence[ReplayResult]) -> str:
    """Side-by-side comparison of several replays of the same trace and workload."""
    rows = [
        ("samples done", lambda s: f"{float(s['samples_done']):.4g}"),
        ("idle capture", lambda s: f"{float(s['idle_capture']):.1%}"),
        ("active idle capture", lambda s: f"{float(s['active_idle_capture']):.1%}" if int(s["jobs_finished"]) else "-"),
        ("node-hours used", lambda s: f"{float(s['used_node_hours']):.1f}"),
        ("overhead efficiency", lambda s: f"{float(s['overhead_efficiency']):.1%}"),
        ("jobs finished", lambda s: f"{s['jobs_finished']}/{s['jobs_submitted']}"),
        ("makespan", lambda s: _duration(s["makespan_s"]) if int(s["jobs_finished"]) else "-"),
        ("mean turnaround", lambda s: _duration(s["mean_turnaround_s"]) if int(s["jobs_finished"]) else "-"),
        ("rescales", lambda s: str(s["rescales"])),
        ("preemptions", lambda s: str(s["preemptions"])),
        ("allocator p50", lambda s: _seconds(s["allocator_p50_s"])),
        ("allocator p99", lambda s: _seconds(s["allocator_p99_s"])),
        ("allocator max", lambda s: _seconds(s["allocator_max_s"])),
        ("replay wall time", lambda s: _seconds(s["wall_s"])),
    ]
    if any(float(r.summary["partial_node_hours"]) or r.summary["configurations"] != DEFAULT_CONFIGURATIONS
           for r in results):
        at = [name for name, _ in rows].index("preemptions") + 1
        rows[at:at] = [
            ("partial-backprop node-hours", lambda s: f"{float(s['partial_node_hours']):.1f}"),
            ("configuration switches", lambda s: str(s["configuration_switches"])),
        ]
    if results:
        base = float(results[0].summary["samples_done"])
        if base > 0 and len(results) > 1:
            rows.insert(1, (f"vs {results[0].label}", lambda s: f"{float(s['samples_done']) / base:.3f}x"))
    header = [""] + [r.label for r in results]
    table = [header] + [[name] + [fmt(r.summary) for r in results] for name, fmt in rows]
    widths = [max(len(row[i]) for row in table) for i in range(len(header))]
    out = []
    for k, row in enumerate(table):
        out.append("  ".join(cell.ljust(widths[0]) if i == 0 else cell.rjust(widths[i]) for i, cell in enumerate(row)))
        if k == 0:
            out.append("  ".join("-" * w for w in widths))
    return "\n".join(out)
