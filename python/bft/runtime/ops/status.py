"""What ``bft status`` shows of the manager's live jobs and idle nodes beyond their database rows:
each job's nodes and processes, rate, curve, rescale costs and resize phase, why a job holds no nodes, and why
an idle node is left unused. Pure functions of what the manager passes in (:mod:`.manager`
assembles the answer)."""

from __future__ import annotations

from typing import Any, Dict, Iterable, List, Set

from ..decide.curvebook import CurveBook
from ..decide.growstarts import COLD
from ..jobs.resize import Phase, Stop
from ..jobs.runs import JobRun

SILENT = "no progress reports: does the script call bft.train.report()?"


def run_status(run: JobRun, book: CurveBook, *, waiting: str, now: float) -> Dict[str, Any]:
    """A live job's status: its row's, and what the manager knows of it (`waiting`: why it holds no
    nodes, "" when it runs; `now`: wall-clock time)."""
    row = run.row
    d = row.status()
    d["nodes"] = sorted(run.node_procs)
    d["world_size"] = len(run.node_procs) * row.procs_per_node  # its training processes: each node's N
    d["target"] = list(run.target)
    d["rate"] = run.recent_rate() if run.node_procs else 0.0
    d["curve"] = book.curve_source(run)
    d["rescale_costs"] = book.cost_status(run)
    d["phase"] = run.machine.phase.value
    d["resizing"] = bool(run.node_procs) and (run.machine.phase is Phase.RESIZING
                                          or run.stop_reason in (Stop.RESIZE, Stop.INPLACE_FAILED))
    if run.machine.last_reason:
        d["last_stop"] = run.machine.last_reason
    if row.work and d["rate"] > 0:
        d["eta_s"] = max(0.0, (row.work - d["samples"]) / d["rate"])
    if run.silent:
        d["warning"] = SILENT
    if not run.node_procs:
        d["waiting"] = waiting
        # Since it last held nodes (or since its submit, if it never ran).
        d["waiting_since"] = "stopped" if run.nodeless_since is not None else "submit"
        d["waiting_s"] = now - (run.nodeless_since or row.submitted_s)
    return d


def waiting_reason(run: JobRun, admitted: List[JobRun], *, max_jobs: int, largest_pool: int) -> str:
    """Why a job holds no nodes."""
    if run.silent:
        return SILENT
    if run not in admitted:
        return f"admission cap reached ({max_jobs} jobs admitted, --max-jobs)"
    if run.machine.phase is Phase.BACKOFF:
        return (f"backing off after a failure (retry {run.row.retries} of {run.row.max_retries}): "
                f"{run.machine.last_reason}")
    if run.row.min_nodes > largest_pool:
        return f"needs {run.row.min_nodes} nodes; the pool has never had more than {largest_pool}"
    if run.target:
        return "waiting for its nodes to be vacated"
    return "waiting for idle nodes"


def unused_nodes(pool: Iterable[str], held: Set[str], admitted: List[JobRun], *, decision_pending: bool,
                 tfwd_s: float, book: CurveBook) -> Dict[str, Any]:
    """The pool's nodes no job holds or was given (`held`), and why (`book`: the grows the last decision
    charged a cold start)."""
    nodes = sorted(n for n in pool if n not in held)
    below_max = [run.id for run in admitted if len(run.target) < run.row.max_nodes and not run.silent]
    if not nodes:
        why = ""
    elif not admitted:
        why = "no job is queued"
    elif not below_max:
        why = "every admitted job runs at its --max"
    elif decision_pending:
        why = "a decision is pending"
    else:
        cold = [job for job in below_max if book.charged_starts.get(job) == COLD]
        why = (f"the allocator's choice: growing {', '.join(below_max)} onto them does not pay off within "
               f"--tfwd ({tfwd_s:g} s) against its rescale cost"
               + (f" (a cold start for {', '.join(cold)}: more nodes than have a warm standby)" if cold else ""))
    return {"nodes": nodes, "why": why}
