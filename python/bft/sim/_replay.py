"""One replay of a trace with a workload under an allocation policy, and its result (``bft._core.sim``'s
replay/ half, libbft/src/sim/replay/).

Re-exported by :mod:`bft.sim`; import from there.
"""

from __future__ import annotations

import csv
import json
import math
import os
from dataclasses import dataclass, field
from typing import Callable, Dict, Iterable, Optional, Sequence, Union

import numpy as np

from .. import alloc as _alloc
from .._core import curve as _curve
from .._core import sim as _sim
from ..jobs import JobSpec, read_jobs
from ._trace import PathLike, Trace, read_trace

IdleLifetimePredictor = _sim.IdleLifetimePredictor
REFERENCE_START_EVENT = _sim.REFERENCE_START_EVENT  # sim::kReferenceStartEvent
reference_start_s = _sim.reference_start_s
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
