"""The manager: adopts idle nodes, runs elastic PyTorch jobs on them, grows and shrinks them.

One event loop owns all state. Events come in from the node source (a node joins, a node is
reclaimed), the control socket (submit, cancel, status, stop), the progress-report socket and the
manager's own process table (an agent exits). After each batch of events the decider asks the
allocator for a new node-to-job map and the job lifecycle applies the difference. The parts, each
in its own module (docs/runtime.md, "Inside the manager"):

- :mod:`.curvebook`: the advisor, its keys, priors and configurations; the jobs as the allocator sees them;
- :mod:`.reports`: progress datagrams in, authenticated and deduplicated;
- :mod:`.decider`: the allocator's problem in, each job's nodes and configuration out;
- :mod:`.lifecycle`: generations of torchrun agents started, stopped and reaped (their processes:
  :mod:`.workers`);
- :mod:`.control`: the control socket; this module answers its requests (``bft status``'s: :mod:`.status`);
- :mod:`.options`: the manager's options and their defaults.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import queue
import secrets
import signal
import sys
import threading
import time
import traceback
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Optional, Tuple

from .decide.curvebook import CurveBook
from .decide.decider import Decider
from .decide.intake import ReportIntake
from .jobs.files import JobFiles
from .jobs.lifecycle import JobLifecycle
from .jobs.processes import terminate_tagged
from .jobs.resize import Stop, job_resize_method
from .jobs.resize.gaps import restore_gap_start
from .jobs.runs import JobRun
from .ops import control
from .ops.keeper import KeeperError, KeeperLink
from .ops.status import run_status, unused_nodes, waiting_reason
from .options import ManagerOptions
from .sources.base import NodeEvent, NodeSource
from .statedb.schema import ACTIVE_STATES, JobState
from .statedb.store import StateStore

if TYPE_CHECKING:  # prometheus-client is imported only by a manager that exports metrics
    from .ops.metrics import MetricsExporter


class Manager:
    def __init__(self, *, state_dir: Path, source: NodeSource, store: StateStore, identity: str,
                 options: ManagerOptions, metrics: Optional[MetricsExporter] = None):
        options.check()
        self.metrics = metrics  # started and stopped by its owner (cli); the loop feeds it
        self.state_dir = state_dir
        self.source = source
        self.store = store
        self.identity = identity
        self.options = options
        self.inbox: "queue.Queue[Tuple[float, str, Any]]" = queue.Queue()
        self.pool: Dict[str, float] = {}  # idle node -> since
        self.largest_pool = 0  # the most nodes the pool has held at once
        self.active_runs: Dict[str, JobRun] = {}
        self.book = CurveBook(store, warmup_s=options.advisor_warmup_s, scale_up_s=options.scale_up_s,
                              scale_down_s=options.scale_down_s, inplace_scale_up_s=options.inplace_scale_up_s,
                              inplace_scale_down_s=options.inplace_scale_down_s, objective=options.objective)
        self.reports = ReportIntake(store, self.book)
        self.decider = Decider(self.book, store, policy=options.policy, tfwd_s=options.tfwd_s,
                               max_jobs=options.max_jobs, curve_change=options.curve_change)
        self.files = JobFiles(state_dir)
        self.lifecycle = JobLifecycle(files=self.files, store=store, source=source, identity=identity, book=self.book,
                                      active_runs=self.active_runs, pool=self.pool,
                                      checkpoint_grace_s=options.checkpoint_grace_s,
                                      report_timeout_s=options.report_timeout_s, mark_dirty=self._mark_dirty,
                                      inplace_timeout_s=options.inplace_timeout_s,
                                      standby=options.standbys and source.runs_scripts,
                                      procs_per_node=options.procs_per_node)
        self._dirty = False
        self._dirty_since: Optional[float] = None
        self._last_decision = 0.0
        self._stopping = False
        self._shutdown_reply: Optional[Callable[[Dict[str, Any]], None]] = None
        self._threads: List[threading.Thread] = []

    # -- start-up ---------------------------------------------------------------------------------

    def _open_endpoints(self, store_port: Optional[int] = None, report_port: Optional[int] = None) -> None:
        """Attaches to the keeper (the rendezvous store and the report socket, in a process that outlives
        the manager), starting one if none runs for this state directory (on the given ports, else
        the options')."""
        bind = self.options.bind_address or self.source.listen_address()
        self.keeper = KeeperLink(self.state_dir, bind=bind,
                                 store_port=self.options.store_port if store_port is None else store_port,
                                 report_port=self.options.report_port if report_port is None else report_port)
        host = self.source.manager_address()
        info = self.keeper.info
        self.lifecycle.workers.keeper_started(f"{host}:{info['store_port']}", f"{host}:{info['report_port']}",
                                              alive=self.keeper.alive)

    def _recover(self) -> None:
        """Reconciles with what a previous manager left. If its keeper still runs, the jobs that were
        running trained on: their agents are adopted, nothing is relaunched, and the reports sent
        meanwhile arrive from the keeper. Otherwise (or for a job that lost an agent meanwhile) its
        processes are stopped (they checkpoint on SIGTERM) and it goes back to the queue with its
        progress. The advisor is rebuilt from the stored progress either way."""
        open_rows = self.store.open_procs()
        by_job: Dict[str, List[Any]] = {}
        for row in open_rows:
            by_job.setdefault(row["job"], []).append(row)
        for job in self.store.jobs(ACTIVE_STATES):
            if not job.resize:  # stored by a manager with one method for all: fixed now, as at a submit
                job.resize = job_resize_method(self.options.resize, job.script)
                self.store.update_job(job.id, resize=job.resize)
            self.active_runs[job.id] = self.lifecycle.new_run(job, running=job.configuration)
        for p in self.store.progress():
            run = self.active_runs.get(p["job"])
            if run is not None:
                self.book.replay_record(run, p)
        adopted = [run for run in self.active_runs.values() if run.row.state == JobState.RUNNING and self.keeper.adopted
                   and self.lifecycle.adopt(run, by_job.get(run.id, []))]
        kept = {r for run in adopted for a in run.node_procs.values() for r in a.rows}
        for run in adopted:  # one killed mid-resize still has its gap measured
            restore_gap_start(run, self.store)
        # One pass over the process table for all the others (also strays of jobs that have ended).
        # Workers born of standbys carry no job tag: spared by pid. Standbys of the previous manager end.
        stopped = terminate_tagged(self.identity, self.options.checkpoint_grace_s,
                                   except_jobs=[run.id for run in adopted],
                                   except_pids=[pid for run in adopted for member in run.node_procs.values()
                                                for pid in member.pids])
        for row in open_rows:
            if row["id"] not in kept:
                self.store.end_proc(row["id"], None)
        if open_rows or self.active_runs or stopped:  # what a previous manager left: said once, even if nothing ran
            self.store.log_event("recovered", adopted=[run.id for run in adopted], processes_stopped=stopped,
                                 process_rows_closed=len(open_rows) - len(kept))
        for run in list(self.active_runs.values()):
            if run.row.work and run.row.samples >= run.row.work and run not in adopted:
                # Its work was done before the last manager stopped (its workers' last word came too
                # late): finished now, never relaunched.
                self.lifecycle.end_job(run, JobState.FINISHED, "")
                continue
            if run.row.curve:
                self.book.set_prior(run)
            if run.row.state == JobState.RUNNING and run not in adopted:  # stopped now, relaunched by a decision
                run.row.state = JobState.QUEUED
                self.store.update_job(run.id, state=JobState.QUEUED)
                self.book.record(run, 0)

    def run(self) -> int:
        """Runs until ``bft manager stop`` or SIGTERM/SIGINT; returns the exit status."""
        self._open_endpoints()
        self._recover()
        self.server = control.ControlServer(self.state_dir / control.SOCKET_NAME, self._control)
        self._spawn(self._receive_reports, "bft-reports")
        self._spawn(self.server.serve_forever, "bft-control")
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: self.inbox.put((time.monotonic(), "shutdown", None)))
        self.store.log_event("manager_started", store=self.lifecycle.workers.store_address,
                             reports=self.lifecycle.workers.report_address,
                             source=self.source.describe(), policy=self.options.policy, resize=self.options.resize,
                             keeper_adopted=self.keeper.adopted)
        self.source.start(lambda ev: self.inbox.put((time.monotonic(), "node", ev)))
        try:
            self._loop()
        finally:
            self.server.shutdown()
            self.server.server_close()  # answers the last requests (a stop's) and removes the socket
        return 0

    def _spawn(self, target: Callable[[], None], name: str) -> None:
        t = threading.Thread(target=target, name=name, daemon=True)
        t.start()
        self._threads.append(t)

    def _receive_reports(self) -> None:
        for data in self.keeper.datagrams():
            self.inbox.put((time.monotonic(), "report", data))
        self.inbox.put((time.monotonic(), "keeper_lost", None))  # the keeper ended (stop, or it died)

    # -- the event loop ---------------------------------------------------------------------------

    def _loop(self) -> None:
        while True:
            items = []
            try:
                items.append(self.inbox.get(timeout=0.2))
                while True:
                    items.append(self.inbox.get_nowait())
            except queue.Empty:
                pass
            # A run of node events or of reports is one commit, not one fsync each (6 ms here): Summit
            # frees or takes thousands of nodes at once (bench/README.md, "Load on the real manager"),
            # and every job reports twice a second.
            for kind, group in itertools.groupby(items, key=lambda item: item[1]):
                batch = self.lifecycle.node_events() if kind == "node" else contextlib.nullcontext()
                with self.store.transaction() if kind in ("node", "report") else contextlib.nullcontext(), batch:
                    for item in group:
                        try:
                            self._handle(*item)
                        except Exception as e:  # noqa: BLE001 - one bad event must not take the manager down
                            self._internal_error(item[1], e)
            self.lifecycle.poll()
            if self.metrics is not None and self.metrics.due(time.monotonic()):
                self.metrics.update(self.status(), decision_latencies_s=list(self.decider.latencies_s),
                                    decisions=self.decider.decisions)
            if self._stopping:
                if not any(run.node_procs for run in self.active_runs.values()):
                    self._finish_shutdown()
                    return
                continue
            # Once per pass (a decision and its launches end no job, so it holds for all three): with
            # 1,000 jobs queued, choosing the admitted ones is a pass over all of them.
            admitted = self.decider.admitted(self.active_runs.values())
            self._check_curves(admitted)
            if self._dirty:
                self._decide(admitted)
            self.lifecycle.launch_ready(admitted, lambda: not self.inbox.empty())

    def _handle(self, arrived: float, kind: str, payload: Any) -> None:
        if kind == "node":
            self._on_node(payload)
            self._mark_dirty(arrived)
        elif kind == "report":
            self.reports.on_datagram(payload, self.active_runs.get)
        elif kind == "control":
            request, reply = payload
            answer = self._on_control(request, reply, arrived)
            if answer is not None:  # a stop is answered once everything has stopped
                reply(answer)
        elif kind == "shutdown":
            self._begin_shutdown()
        elif kind == "keeper_lost" and not self._stopping:
            # The new keeper takes the old one's ports: in-place workers reconnect to it, their reports
            # reach it, and their jobs re-form in place in its store (lifecycle.keeper_restarted).
            print("bft manager: the keeper died; starting a new one", file=sys.stderr, flush=True)
            self.store.log_event("keeper_lost")
            old = self.keeper.info
            try:
                self._open_endpoints(old["store_port"], old["report_port"])
            except KeeperError as e:  # its ports were taken meanwhile: new ones (in-place jobs are relaunched)
                self.store.log_event("keeper_ports_lost", error=str(e))
                self._open_endpoints()
            self.lifecycle.keeper_restarted()
            self._spawn(self._receive_reports, "bft-reports")

    def _internal_error(self, kind: str, error: Exception) -> None:
        detail = "".join(traceback.format_exception(error))
        print(f"bft manager: internal error while handling a {kind} event:\n{detail}", file=sys.stderr, flush=True)
        self.store.log_event("internal_error", event=kind, error=detail)

    def _mark_dirty(self, arrived: float) -> None:
        self._dirty = True
        if self._dirty_since is None:
            self._dirty_since = arrived

    def _on_node(self, ev: NodeEvent) -> None:
        self.store.log_event(ev.kind, node=ev.node, grace_s=ev.grace_s)
        if ev.kind == "join":
            self.lifecycle.draining.discard(ev.node)
            self.pool.setdefault(ev.node, time.time())
            self.largest_pool = max(self.largest_pool, len(self.pool))
        else:
            self.pool.pop(ev.node, None)
            self.lifecycle.node_reclaimed(ev.node)

    def _check_curves(self, admitted: List[JobRun]) -> None:
        """A learned curve that moved by more than curve_change since the last decision re-decides."""
        now = time.monotonic()
        if self._dirty or now - self._last_decision < self.options.min_decision_interval_s:
            return
        moved = self.decider.curve_moved(admitted, len(self.pool), now)
        if moved is not None:
            self.store.log_event("curve_changed", job=moved)
            self._mark_dirty(now)

    def _decide(self, admitted: List[JobRun]) -> None:
        arrived = self._dirty_since if self._dirty_since is not None else time.monotonic()
        self._dirty, self._dirty_since = False, None
        self._last_decision = time.monotonic()
        try:
            resting = self.lifecycle.resting  # (until healthy again: a worker was lost or hung there)
            pool = [n for n in self.pool if n not in resting] if resting else self.pool
            placements = self.decider.decide(admitted, pool, arrived, warm=self.lifecycle.workers.warm_nodes())
        except Exception as e:  # noqa: BLE001 - a decision that fails must not take the manager down
            self._internal_error("decision", e)
            return
        for p in placements or []:  # None: the allocator failed, the current map stays
            self.lifecycle.apply(p.run, p.nodes, p.configuration)
        for run, reason in self.decider.refused:  # one with agents ends once they stopped (it was placed nowhere)
            if not run.node_procs and run.row.state in ACTIVE_STATES:
                self.lifecycle.end_job(run, JobState.FAILED, reason)

    # -- control requests -------------------------------------------------------------------------

    def _control(self, request: Dict[str, Any], reply: Callable[[Dict[str, Any]], None]) -> None:
        """Called from the control server's threads: hands the request to the loop."""
        self.inbox.put((time.monotonic(), "control", (request, reply)))

    def _on_control(self, request: Dict[str, Any], reply, arrived: float) -> Optional[Dict[str, Any]]:
        op = request.get("op")
        try:
            if op == "submit":
                return self._submit(request, arrived)
            if op == "cancel":
                return self._cancel(str(request.get("job", "")), arrived)
            if op == "status":
                return {"ok": True, "status": self.status()}
            if op == "stop":
                self._shutdown_reply = reply
                self._begin_shutdown()
                return None  # answered when everything has stopped
            return {"ok": False, "error": f"unknown request {op!r}"}
        except ValueError as e:
            return {"ok": False, "error": str(e)}

    def _submit(self, request: Dict[str, Any], arrived: float) -> Dict[str, Any]:
        job = control.job_from_request(request, self.options.max_retries)
        capacity = self.source.capacity()
        if capacity is not None and job.min_nodes > capacity:
            raise ValueError(f"--min {job.min_nodes}: the {self.source.name} source offers at most {capacity} "
                             f"node{'s' if capacity != 1 else ''}")
        most = self.options.procs_per_node
        if job.procs_per_node > most:
            raise ValueError(f"--procs-per-node {job.procs_per_node}: a node of this manager gives at most {most} "
                             f"process{'es' if most != 1 else ''} (bft manager --procs-per-node: "
                             f"{self.options.procs_per_node_found or most})")
        job.procs_per_node = job.procs_per_node or most
        job.secret = secrets.token_hex(32)
        job.resize = job_resize_method(job.resize or self.options.resize, job.script)
        self.store.add_job(job)
        self.store.log_event("submitted", job=job.id, min_nodes=job.min_nodes, max_nodes=job.max_nodes)
        run = self.lifecycle.new_run(job)
        self.active_runs[job.id] = run
        if job.curve:
            self.book.set_prior(run)
        self._mark_dirty(arrived)
        return {"ok": True, "job": job.id}

    def _cancel(self, job: str, arrived: float) -> Dict[str, Any]:
        run = self.active_runs.get(job)
        if run is None:
            row = self.store.job(job)
            if row is None:
                raise ValueError(f"no job named {job!r}")
            raise ValueError(f"job {job!r} is {row.state} already")
        if run.node_procs:
            self.lifecycle.stop_run(run, Stop.CANCEL)
        else:
            self.lifecycle.end_job(run, JobState.CANCELLED, "cancelled by the user")
        self._mark_dirty(arrived)
        return {"ok": True, "job": job}

    def status(self) -> Dict[str, Any]:
        admitted = self.decider.admitted(self.active_runs.values())
        busy = self.lifecycle.busy_nodes()
        now = time.time()
        jobs = []
        for row in self.store.jobs():
            run = self.active_runs.get(row.id)
            if run is None:
                jobs.append(row.status())
                continue
            waiting = "" if run.node_procs else waiting_reason(run, admitted, max_jobs=self.options.max_jobs,
                                                           largest_pool=self.largest_pool)
            jobs.append(run_status(run, self.book, waiting=waiting, now=now))
        held = {n for run in self.active_runs.values() for n in run.target} | set(busy)
        return {
            "manager": {"identity": self.identity, "pid": os.getpid(), "policy": self.options.policy,
                        "resize": self.options.resize, "procs_per_node": self.options.procs_per_node,
                        "decisions": self.decider.decisions,
                        "bad_reports": self.reports.dropped_total, "dropped_reports": dict(self.reports.dropped),
                        "decision_p50_s": self.decider.latency_p50_s(),
                        "decision_latency_s": self.decider.latency_summary_s(), "stopping": self._stopping,
                        "source": self.source.describe()},
            "nodes": {"pool": sorted(self.pool), "used": busy,
                      "unused": unused_nodes(self.pool, held, admitted, decision_pending=self._dirty,
                                             tfwd_s=self.options.tfwd_s, book=self.book),
                      "standbys": self.lifecycle.workers.warm_nodes()},
            "jobs": jobs,
        }

    # -- shutdown ---------------------------------------------------------------------------------

    def _begin_shutdown(self) -> None:
        if self._stopping:
            return
        self._stopping = True
        self.store.log_event("manager_stopping")
        for run in self.active_runs.values():
            self.lifecycle.stop_run(run, Stop.SHUTDOWN)

    def _finish_shutdown(self) -> None:
        terminate_tagged(self.identity, self.options.checkpoint_grace_s)
        for run in list(self.active_runs.values()):
            if run.row.work and run.row.samples >= run.row.work:
                self.lifecycle.end_job(run, JobState.FINISHED, "")  # its work is done: never queued again
            elif run.row.state == JobState.RUNNING:
                self.store.update_job(run.id, state=JobState.QUEUED)
        self.source.stop(release=True)
        self.keeper.stop_keeper()  # nothing runs that needs the store any more
        self.store.log_event("manager_stopped")
        if self._shutdown_reply is not None:
            self._shutdown_reply({"ok": True, "stopped": True})


def new_identity() -> str:
    return f"bft-{uuid.uuid4().hex[:12]}"
