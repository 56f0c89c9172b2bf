"""The manager: adopts idle nodes, runs elastic PyTorch jobs on them, grows and shrinks them.

One event loop owns all state. Events come in from the node source (a node joins, a node is
reclaimed), the control socket (submit, cancel, status, stop), the progress-report socket and the
manager's own process table (an agent exits). After each batch of events the manager asks the
allocator (``bft.allocate``: the same call ``bft replay`` and a C++ scheduler make) for a new
node-to-job map, with curves learned by ``curve.ProfilingAdvisor`` from the jobs' reports, and
applies the difference: start, grow, shrink, stop. docs/runtime.md explains the design.
"""

from __future__ import annotations

import collections
import math
import os
import queue
import secrets
import signal
import socket
import sys
import threading
import time
import traceback
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Deque, Dict, List, Optional, Set, Tuple

from .. import Error, alloc, curve
from ..train import _report
from . import control
from .launcher import (LaunchSpec, RESIZE_METHODS, job_environment, signal_processes, tagged_processes,
                       terminate_tagged, torchrun_argv, worker_exit_code, worker_log_tail)
from .nodes import NodeEvent, NodeSource, SourceError
from .state import ACTIVE_STATES, JobRow, StateStore

LOG_TAIL_LINES = 20
# An agent that dies on its own may have been killed by the batch scheduler taking its node, and
# the source's word of that can come a moment later: a failure is judged after this long.
FAILURE_SETTLE_S = 5.0
MILP_POLICIES = ("count_milp", "node_milp")
MILP_TIME_LIMIT_S = 10.0  # per decision, as the replay's default


@dataclass
class ManagerOptions:
    policy: str = "exact"
    resize: str = "relaunch"
    tfwd_s: float = 10.0
    max_jobs: int = 10
    bind_address: str = "127.0.0.1"  # where the rendezvous store and the report socket listen
    store_port: int = 0  # 0: any free port
    report_port: int = 0
    grace_s: float = 20.0  # a job's time to checkpoint after SIGTERM before it is killed
    scale_up_s: float = 5.0  # rescale costs the allocator assumes until the advisor measured some
    scale_down_s: float = 5.0
    max_retries: int = 2
    curve_change: float = 0.15  # relative change of a learned curve that triggers a new decision
    min_decision_interval_s: float = 2.0  # between decisions triggered by curve changes alone
    # Reports after a (re)start that still count as warm-up. The first report of a process comes
    # after its first step, so a short warm-up suffices (the replay's default, 30 s, is for Summit).
    advisor_warmup_s: float = 3.0

    def check(self) -> None:
        if self.policy not in alloc.SOLVERS:
            raise ValueError(f"--policy: unknown policy {self.policy!r} (choose from {', '.join(alloc.SOLVERS)})")
        if self.resize not in RESIZE_METHODS:
            raise ValueError(f"--resize: unknown method {self.resize!r} (choose from {', '.join(RESIZE_METHODS)})")
        for name in ("tfwd_s", "grace_s", "advisor_warmup_s", "scale_up_s", "scale_down_s", "curve_change", "min_decision_interval_s"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value >= 0):
                raise ValueError(f"--{name.replace('_', '-')}: expected a finite number >= 0, got {value}")
        if self.max_jobs < 1:
            raise ValueError("--max-jobs must be >= 1")
        if self.max_retries < 0:
            raise ValueError("--max-retries must be >= 0")


@dataclass
class Agent:
    """One torchrun agent: a job's process on one node."""

    job: str
    generation: int
    node: str
    proc: Any  # subprocess.Popen
    row: int  # procs table row
    stopping: bool = False
    stop_deadline: Optional[float] = None  # SIGKILL after this (monotonic) once stopping


@dataclass
class JobRun:
    """What the manager tracks of an active job besides its database row."""

    row: JobRow
    target: List[str] = field(default_factory=list)  # nodes the allocator gave the job
    agents: Dict[str, Agent] = field(default_factory=dict)  # node -> live agent
    stop_reason: str = ""  # why the live agents are being stopped: resize, cancel, shutdown
    completed: bool = False  # an agent exited 0: the script finished
    failed_code: Optional[int] = None  # an agent failed on its own
    failed_at: float = 0.0  # when (monotonic)
    settle_until: Optional[float] = None  # a failure is judged at this time, unless a reclaim explains it
    disturbed: bool = False  # a node of this generation was reclaimed or stopped on purpose
    last_report: Optional[_report.Report] = None
    round: int = 0  # torchrun's restart count of the current generation's workers
    last_seq: Dict[int, int] = field(default_factory=dict)  # rank -> highest seq this round
    rank_samples: Dict[int, float] = field(default_factory=dict)
    advisor_samples: float = 0.0  # monotone cumulative count of the job's samples
    advisor_offset: float = 0.0
    # The configuration of the generation that runs (or ran last): its reports are progress in it. The
    # decided one (row.configuration) takes over when the next generation starts.
    running: str = "full"
    # The samples processed in each configuration (what that configuration's advisor key sees), and
    # the count of advisor_samples up to which they have been credited.
    configuration_samples: Dict[str, float] = field(default_factory=dict)
    credited: float = 0.0
    advisor_time: float = 0.0
    recent: Deque[Tuple[float, float]] = field(default_factory=lambda: collections.deque(maxlen=64))
    decided_curve: Optional[List[float]] = None
    last_curve_check_s: float = 0.0
    # The last report before a pending resize, if the resize is measurable: the job had reported at
    # its current size, and no second resize came before its first step at the new size.
    gap_start: Optional[_report.Report] = None
    resize_pending: bool = False


class Manager:
    def __init__(self, state_dir: Path, source: NodeSource, store: StateStore, identity: str,
                 options: ManagerOptions):
        options.check()
        self.state_dir = state_dir
        self.source = source
        self.store = store
        self.identity = identity
        self.options = options
        self.inbox: "queue.Queue[Tuple[float, str, Any]]" = queue.Queue()
        self.pool: Dict[str, float] = {}  # idle node -> since
        self.draining: Set[str] = set()  # reclaimed nodes that still run something of ours
        self.node_names = alloc.NodeNames()  # node -> the allocator's id, stable from its first join
        self.runs: Dict[str, JobRun] = {}
        advisor_options = curve.AdvisorOptions()
        advisor_options.warmup_s = options.advisor_warmup_s
        self.advisor = curve.ProfilingAdvisor(advisor_options)
        self.bad_reports = 0
        self.decision_s: Deque[float] = collections.deque(maxlen=1000)
        self.decisions = 0
        self._dirty = False
        self._dirty_since: Optional[float] = None
        self._last_decision = 0.0
        self._stopping = False
        self._shutdown_reply: Optional[Callable[[Dict[str, Any]], None]] = None
        self._threads: List[threading.Thread] = []

    # -- start-up ---------------------------------------------------------------------------------

    def _open_endpoints(self) -> None:
        import torch.distributed as dist  # the runtime extra; imported here so bft imports without torch

        # The rendezvous store of every job lives here, not in an agent: losing a node never loses it.
        self.rdzv_store = dist.TCPStore(self.options.bind_address, self.options.store_port, is_master=True,
                                        wait_for_workers=False, use_libuv=True)
        self.report_sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.report_sock.bind((self.options.bind_address, self.options.report_port))
        host = self.source.manager_address()
        self.store_address = f"{host}:{self.rdzv_store.port}"
        self.report_address = f"{host}:{self.report_sock.getsockname()[1]}"

    def _recover(self) -> None:
        """Reconciles with what a previous manager left: its processes are stopped (they checkpoint on
        SIGTERM), running jobs go back to the queue with their progress, the advisor is rebuilt."""
        found = terminate_tagged(self.identity, self.options.grace_s)
        open_rows = self.store.open_procs()
        for row in open_rows:
            self.store.end_proc(row["id"], None)
        if found or open_rows:
            self.store.log_event("recovered", processes_stopped=found, process_rows_closed=len(open_rows))
        interrupted = {job.id for job in self.store.jobs(("running",))}
        for job in self.store.jobs(ACTIVE_STATES):
            self.runs[job.id] = JobRun(job, running=job.configuration)
        for p in self.store.progress():
            run = self.runs.get(p["job"])
            if run is None:
                continue
            configuration = p["configuration"]
            count = p["advisor_samples"] if p["configuration_samples"] is None else p["configuration_samples"]
            self._advisor_report(run, p["time_s"], p["nodes"], count, configuration)
            run.advisor_offset = p["advisor_samples"] - p["samples"]
            run.advisor_samples = run.credited = p["advisor_samples"]
            run.configuration_samples[configuration] = count
            run.running = configuration
        for run in self.runs.values():
            if run.row.curve:
                self._set_prior(run)
            if run.row.id in interrupted:  # its processes are gone: stopped now, relaunched by a decision
                run.row.state = "queued"
                self.store.update_job(run.row.id, state="queued")
                self._record(run, 0)

    def run(self) -> int:
        """Runs until ``bft manager stop`` or SIGTERM/SIGINT; returns the exit status."""
        self._recover()
        self._open_endpoints()
        self.server = control.ControlServer(self.state_dir / "manager.sock", self._control)
        self._spawn(self._receive_reports, "bft-reports")
        self._spawn(self.server.serve_forever, "bft-control")
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: self.inbox.put((time.monotonic(), "shutdown", None)))
        self.store.log_event("manager_started", store=self.store_address, reports=self.report_address,
                             source=self.source.describe(), policy=self.options.policy, resize=self.options.resize)
        self.source.start(lambda ev: self.inbox.put((time.monotonic(), "node", ev)))
        try:
            self._loop()
        finally:
            self.server.shutdown()
            self.server.server_close()
            self.report_sock.close()
        return 0

    def _spawn(self, target: Callable[[], None], name: str) -> None:
        t = threading.Thread(target=target, name=name, daemon=True)
        t.start()
        self._threads.append(t)

    # -- the event loop ---------------------------------------------------------------------------

    def _loop(self) -> None:
        while True:
            try:
                item = self.inbox.get(timeout=0.2)
            except queue.Empty:
                item = None
            while item is not None:
                try:
                    self._handle(*item)
                except Exception as e:  # noqa: BLE001 - one bad event must not take the manager down
                    self._internal_error(item[1], e)
                try:
                    item = self.inbox.get_nowait()
                except queue.Empty:
                    item = None
            self._poll_agents()
            self._settle_failures()
            if self._stopping:
                if not any(run.agents for run in self.runs.values()):
                    self._finish_shutdown()
                    return
                continue
            self._check_curves()
            if self._dirty:
                self._decide()
            self._launch_ready()

    def _handle(self, arrived: float, kind: str, payload: Any) -> None:
        if kind == "node":
            self._on_node(payload)
            self._mark_dirty(arrived)
        elif kind == "report":
            self._on_report(payload)
        elif kind == "control":
            request, reply = payload
            answer = self._on_control(request, reply, arrived)
            if answer is not None:  # a stop is answered once everything has stopped
                reply(answer)
        elif kind == "shutdown":
            self._begin_shutdown()

    def _internal_error(self, kind: str, error: Exception) -> None:
        detail = "".join(traceback.format_exception(error))
        print(f"bft manager: internal error while handling a {kind} event:\n{detail}", file=sys.stderr, flush=True)
        self.store.log_event("internal_error", event=kind, error=detail)

    def _mark_dirty(self, arrived: float) -> None:
        self._dirty = True
        if self._dirty_since is None:
            self._dirty_since = arrived

    # -- nodes ------------------------------------------------------------------------------------

    def _on_node(self, ev: NodeEvent) -> None:
        self.store.log_event(ev.kind, node=ev.node, grace_s=ev.grace_s)
        if ev.kind == "join":
            self.draining.discard(ev.node)
            self.pool.setdefault(ev.node, time.time())
            self.node_names.intern(ev.node)
            return
        self.pool.pop(ev.node, None)
        self.draining.add(ev.node)
        for run in self.runs.values():
            if ev.node in run.target:
                run.disturbed = True  # the decision that follows takes the node out of its target
            agent = run.agents.get(ev.node)
            if agent is None or agent.stopping:
                continue
            # Vacate within the grace time: the job checkpoints and goes on without the node.
            self.store.log_event("preempted", job=run.row.id, node=ev.node)
            if self.options.resize == "membership":
                self._stop_agent(agent)
            else:
                self._stop_run(run, "resize")

    # -- progress reports -------------------------------------------------------------------------

    def _receive_reports(self) -> None:
        while True:
            try:
                data, _ = self.report_sock.recvfrom(_report.MAX_DATAGRAM + 1)
            except OSError:
                return
            self.inbox.put((time.monotonic(), "report", data))

    def _on_report(self, data: bytes) -> None:
        job = _report.peek_job(data)
        run = self.runs.get(job) if job else None
        if run is None:
            self.bad_reports += 1
            return
        try:
            r = _report.decode(data, bytes.fromhex(run.row.secret))
        except ValueError:
            self.bad_reports += 1
            return
        if r.job != job or r.generation != run.row.generation or r.round < run.round:
            return  # a late datagram of a previous launch or of workers torchrun has restarted since
        if r.round > run.round:  # torchrun restarted the workers (membership change): new processes
            run.round = r.round
            run.last_seq.clear()
            run.rank_samples.clear()
        if r.seq <= run.last_seq.get(r.rank, 0) or (not r.all_ranks and r.rank != 0):
            return  # a replay, or a rank whose reports do not count
        run.last_seq[r.rank] = r.seq
        run.rank_samples[r.rank] = r.samples
        samples = sum(v for k, v in run.rank_samples.items() if k < r.world) if r.all_ranks else r.samples
        prev = run.last_report
        if run.resize_pending and prev is not None and (prev.generation, prev.round) != (r.generation, r.round):
            start, run.gap_start, run.resize_pending = run.gap_start, None, False
            if start is not None and start.world != r.world:
                # Resize gap: last step at the old size -> first step at the new one.
                self.store.log_event("resize_gap", job=job, from_nodes=start.world, to_nodes=r.world,
                                     method=self.options.resize, gap_s=r.time_s - start.time_s)
        run.last_report = r
        now = max(r.time_s, run.advisor_time)
        if samples + run.advisor_offset < run.advisor_samples:
            # Resumed from a checkpoint older than the last report: the advisor's count stays monotone.
            run.advisor_offset = run.advisor_samples - samples
        run.advisor_samples = samples + run.advisor_offset
        run.recent.append((now, samples))
        run.row.samples = samples
        # Every report is stored (a transaction each, a few per second per job): after kill -9 the
        # next manager knows every count a job reported.
        self._record(run, len(run.agents) or r.world, now)

    def _record(self, run: JobRun, nodes: int, time_s: Optional[float] = None) -> None:
        """Tells the advisor that from now on the job runs on `nodes` nodes (0: stopped) in the
        configuration it runs in, at its current count, and stores the same record, so a restarted
        manager rebuilds the advisor exactly."""
        now = max(time.time() if time_s is None else time_s, run.advisor_time)
        # The samples since the last record were processed in the configuration the job ran in.
        if run.advisor_samples > run.credited:
            run.configuration_samples[run.running] = (run.configuration_samples.get(run.running, 0.0)
                                                      + run.advisor_samples - run.credited)
            run.credited = run.advisor_samples
        count = run.configuration_samples.get(run.running, 0.0)
        self._advisor_report(run, now, nodes, count, run.running)
        self.store.add_progress(run.row.id, run.row.generation, now, nodes, run.row.samples, run.advisor_samples,
                                run.running, count)

    @staticmethod
    def _key(run: JobRun, configuration: Optional[str] = None) -> str:
        """The advisor's name for a job in a configuration (default: the one it runs in): each
        configuration's curve is learned apart (job names cannot hold '/')."""
        configuration = run.running if configuration is None else configuration
        return run.row.id if configuration == "full" else f"{run.row.id}/{configuration}"

    def _advisor_nodes(self, run: JobRun) -> int:
        key = self._key(run)
        return self.advisor.profile(key).current_nodes if self.advisor.has_job(key) else 0

    def _advisor_report(self, run: JobRun, time_s: float, nodes: int, samples: float, configuration: str) -> None:
        run.advisor_time = max(run.advisor_time, time_s)
        try:
            self.advisor.report(self._key(run, configuration), run.advisor_time, nodes, samples)
        except (ValueError, Error) as e:  # never let one odd report stop the manager
            self.store.log_event("advisor_rejected", job=run.row.id, error=str(e))

    # -- curves -----------------------------------------------------------------------------------

    def _set_prior(self, run: JobRun) -> None:
        c = run.row.curve
        per_node = max(v / n for n, v in zip(c["nodes"], c["throughput"]) if n > 0)
        if per_node > 0:
            self.advisor.set_prior(run.row.id, per_node)

    def _update_priors(self) -> None:
        """A job with no measurement yet is assumed to scale linearly at the best per-node rate measured
        so far on this machine: optimistic, so the allocator gives it nodes and the advisor learns it."""
        best, unmeasured = 0.0, []
        for run in self.runs.values():
            job = run.row.id
            sizes = self.advisor.profile(job).sizes if self.advisor.has_job(job) else []
            if sizes:
                best = max(best, max(s.samples_per_s / s.nodes for s in sizes))
            elif not run.row.curve:
                unmeasured.append(job)
        if best > 0:
            for job in unmeasured:
                self.advisor.set_prior(job, best)

    def _curves(self, run: JobRun, top: int) -> Tuple[Any, Any]:
        """(throughput, objective) for the allocator: the advisor's once it has fitted a curve, else the
        user's curve if one was given, else the advisor's optimistic prior."""
        job = run.row.id
        if self._curve_source(run) == "user":
            c = curve.ThroughputCurve([int(n) for n in run.row.curve["nodes"]],
                                      [float(v) for v in run.row.curve["throughput"]])
            return c, c
        both = self.advisor.curves(job, top)
        return both.throughput, both.objective

    def _curve_source(self, run: JobRun) -> str:
        """Which curve the allocator sees for a job: "fitted" (the advisor fitted a model to its reports),
        "user" (its --curve, until a model is fitted), "measured" (the advisor's per-size measurements
        and the prior between them), or "prior" (nothing measured yet)."""
        job = run.row.id
        profile = self.advisor.profile(job) if self.advisor.has_job(job) else None
        if profile is not None and profile.fit.ok:
            return "fitted"
        if run.row.curve:
            return "user"
        return "measured" if profile is not None and profile.sizes else "prior"

    def _configuration_curves(self, run: JobRun, configuration: Dict[str, Any], top: int, full: Any) -> Tuple[Any, Any]:
        """(throughput, objective) of a configuration: the advisor's once it has measured the job in it,
        else full backpropagation's throughput times the declared speedup from 2 nodes on (on one node
        a configuration of structured partial backpropagation has no partial rank: it is full)."""
        key = self._key(run, configuration["name"])
        if self.advisor.has_job(key) and self.advisor.profile(key).sizes:
            both = self.advisor.curves(key, top)
            return both.throughput, both.objective
        values = [v * (configuration["speedup"] if n >= 2 else 1.0) for n, v in zip(full.nodes, full.values)]
        guess = curve.ThroughputCurve(list(full.nodes), values)
        return guess, guess

    def _allocation_job(self, run: JobRun, top: int) -> Any:
        """The job as the allocator sees it: learned (or given) curves, measured rescale costs, and its
        configurations with the one it runs in now."""
        throughput, objective = self._curves(run, min(run.row.max_nodes, top))
        up, down = self._rescale_costs(run)
        job = alloc.Job(run.row.id, run.row.min_nodes, run.row.max_nodes, objective, throughput, up, down, 1.0)
        if run.row.configurations:
            configurations = []
            for c in run.row.configurations:
                rate, value = self._configuration_curves(run, c, min(run.row.max_nodes, top), throughput)
                configurations.append(alloc.Configuration(c["name"], value, rate, c["efficiency"]))
            job.configurations = configurations
            job.configuration = self._configuration_index(run, run.row.configuration)
        return job

    @staticmethod
    def _configuration_index(run: JobRun, name: str) -> int:
        """0 for full backpropagation, k for the job's k-th configuration (alloc.Job.configuration)."""
        names = [c["name"] for c in run.row.configurations]
        return names.index(name) + 1 if name in names else 0

    def _configuration_source(self, run: JobRun, configuration: str) -> str:
        """Which curve the allocator sees for a job in a configuration: full backpropagation's
        (_curve_source), or for another one "fitted"/"measured" (the advisor's) or "guess" (full
        backpropagation's times the declared speedup)."""
        if configuration == "full":
            return self._curve_source(run)
        key = self._key(run, configuration)
        profile = self.advisor.profile(key) if self.advisor.has_job(key) else None
        if profile is not None and profile.fit.ok:
            return "fitted"
        return "measured" if profile is not None and profile.sizes else "guess"

    def _rescale_costs(self, run: JobRun) -> Tuple[float, float]:
        up, down = self.options.scale_up_s, self.options.scale_down_s
        key = self._key(run)
        if self.advisor.has_job(key):
            return curve.measured_rescale_costs(self.advisor.profile(key), up, down)
        return up, down

    def _check_curves(self) -> None:
        """A learned curve that moved by more than curve_change since the last decision re-decides."""
        now = time.monotonic()
        if self._dirty or now - self._last_decision < self.options.min_decision_interval_s:
            return
        self._update_priors()
        top = max(1, len(self.pool))
        for run in self.runs.values():
            if run.decided_curve is None or run.resize_pending or now - run.last_curve_check_s < 1.0:
                continue  # (a job in the middle of a resize has no steady rate to compare yet)
            run.last_curve_check_s = now
            values = self._decided_values(self._allocation_job(run, top))
            if len(values) != len(run.decided_curve) or any(
                    abs(a - b) > self.options.curve_change * max(abs(b), 1e-9)
                    for a, b in zip(values, run.decided_curve)):
                self.store.log_event("curve_changed", job=run.row.id)
                self._mark_dirty(now)
                return

    # -- decisions --------------------------------------------------------------------------------

    def _admitted(self) -> List[JobRun]:
        active = sorted((r for r in self.runs.values() if r.row.state in ACTIVE_STATES and r.stop_reason != "cancel"),
                        key=lambda r: r.row.seq)
        return active[: self.options.max_jobs]

    def _decide(self) -> None:
        arrived = self._dirty_since if self._dirty_since is not None else time.monotonic()
        self._dirty, self._dirty_since = False, None
        self._last_decision = time.monotonic()
        runs = self._admitted()
        if not runs:
            return
        self._update_priors()
        top = max(1, len(self.pool))
        jobs = [self._allocation_job(run, top) for run in runs]
        pool = [self.node_names.find(n) for n in self.pool]
        current = {self.node_names.find(n): run.row.id for run in runs for n in run.target if n in self.pool}
        # A MILP policy solves in a child process under a time limit: a solver crash or a hard instance
        # costs one decision, never the manager.
        milp = self.options.policy in MILP_POLICIES
        # completion_aware reads what each job still has to do (0: a job submitted without --samples).
        remaining = [max(run.row.work - run.row.samples, 1.0) if run.row.work else 0.0 for run in runs]
        result = alloc.allocate(jobs, pool, current, tfwd=self.options.tfwd_s, solver=self.options.policy,
                                isolate=milp, time_limit_s=MILP_TIME_LIMIT_S if milp else None,
                                remaining_samples=remaining)
        if result.status == alloc.AllocationStatus.FAILED:
            self.store.log_event("allocation_failed", policy=self.options.policy, message=result.message)
            return  # the current map stays; the next event decides again
        new_targets: Dict[str, List[str]] = {run.row.id: [] for run in runs}
        for node_id, job in result.map.items():
            new_targets[job].append(self.node_names.name(node_id))
        self.decisions += 1
        for k, (run, job) in enumerate(zip(runs, jobs)):
            chosen = int(result.configuration[k])
            configuration = run.row.configurations[chosen - 1]["name"] if chosen else "full"
            job.configuration = chosen
            run.decided_curve = self._decided_values(job)
            self._apply(run, sorted(new_targets[run.row.id]), configuration)
        self.decision_s.append(time.monotonic() - arrived)

    @staticmethod
    def _decided_values(job: Any) -> List[float]:
        """The throughput curve of the configuration a job runs in, as the allocator saw it: a decision
        is taken again once it moves by more than curve_change."""
        c = job.configuration
        return list((job.throughput if c == 0 else job.configurations[c - 1].throughput).values)

    def _apply(self, run: JobRun, target: List[str], configuration: str) -> None:
        switch = bool(target) and configuration != run.row.configuration
        if target == run.target and not switch:
            return
        self.store.log_event("allocate", job=run.row.id, from_nodes=len(run.target), to_nodes=len(target),
                             nodes=target, curve=self._curve_source(run), configuration=configuration,
                             configuration_curve=self._configuration_source(run, configuration))
        if switch:
            # Stored before the job is restarted in it: a restarted manager relaunches it so. The
            # advisor hears of it when the new generation starts (the old one reports until it stops).
            previous = run.row.configuration
            run.row.configuration = configuration
            self.store.update_job(run.row.id, configuration=configuration)
            self.store.log_event("configuration_changed", job=run.row.id, previous=previous, configuration=configuration,
                                 nodes=len(target))
        old, run.target = set(run.target), target
        if not run.agents:
            return  # _launch_ready starts it once its nodes are clear
        self._resize_begins(run)
        if self.options.resize == "membership" and target and not switch:
            for node, agent in run.agents.items():
                if node not in target:
                    self._stop_agent(agent)
            for node in set(target) - old - set(run.agents):
                self._launch_agent(run, node)
        else:  # a new configuration restarts every worker, whatever the resize method
            self._stop_run(run, "resize")
        if not switch:
            self._record(run, len(target))  # the rescale starts now: the advisor measures what it costs

    def _resize_begins(self, run: JobRun) -> None:
        last = run.last_report
        current = last is not None and (last.generation, last.round) == (run.row.generation, run.round)
        # A second resize before the first step at the new size makes the first one unmeasurable.
        run.gap_start = last if current and not run.resize_pending else None
        run.resize_pending = True

    def _stop_agent(self, agent: Agent) -> None:
        if agent.stopping:
            return
        agent.stopping = True
        try:
            os.killpg(agent.proc.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        agent.stop_deadline = time.monotonic() + self.options.grace_s + 10.0  # then SIGKILL

    def _stop_run(self, run: JobRun, reason: str) -> None:
        run.stop_reason = run.stop_reason or reason
        run.disturbed = True
        for agent in run.agents.values():
            self._stop_agent(agent)

    def _busy_nodes(self) -> Dict[str, str]:
        return {node: job for job, run in self.runs.items() for node in run.agents}

    def _launch_ready(self) -> None:
        """Starts every job that has nodes, no live agents, and whose nodes no other job still occupies."""
        busy = self._busy_nodes()
        for run in self._admitted():
            if run.agents or not run.target or run.stop_reason or run.settle_until is not None:
                continue
            if any(node in busy or node not in self.pool for node in run.target):
                continue
            self._start_generation(run)

    def _start_generation(self, run: JobRun) -> None:
        row = run.row
        row.generation += 1
        row.started_s = row.started_s or time.time()
        row.state = "running"
        self.store.update_job(row.id, generation=row.generation, state="running", started_s=row.started_s)
        run.completed, run.failed_code, run.disturbed = False, None, False
        run.round = 0
        run.last_seq.clear()
        run.rank_samples.clear()
        self._log_line(row.id, f"=== generation {row.generation}: {len(run.target)} nodes "
                               f"({', '.join(run.target)}), resize method {self.options.resize} ===")
        self.store.log_event("launch", job=row.id, generation=row.generation, nodes=list(run.target),
                             configuration=row.configuration)
        if run.running != row.configuration:  # the last generation ran in another configuration
            self._record(run, 0)
            run.running = row.configuration
        if self._advisor_nodes(run) != len(run.target):  # a start (a resize was recorded when decided)
            self._record(run, len(run.target))
        for node in run.target:
            self._launch_agent(run, node)
        if not run.agents:
            self._generation_ended(run)

    def _launch_agent(self, run: JobRun, node: str) -> None:
        row = run.row
        membership = self.options.resize == "membership"
        spec = LaunchSpec(
            job=row.id, generation=row.generation, script=row.script, args=row.args, python=row.python, node=node,
            node_address=self.source.address(node), store_address=self.store_address,
            min_nodes=row.min_nodes if membership else len(run.target),
            max_nodes=row.max_nodes if membership else len(run.target),
            max_restarts=1000 if membership else 0, log_dir=self._job_dir(row.id) / "workers")
        env = job_environment(row.id, row.generation, node, self.identity, self.report_address, row.secret,
                              self._job_dir(row.id) / "checkpoint", row.work, self.options.grace_s, row.configuration)
        proc_row = self.store.add_proc(row.id, row.generation, node)  # recorded before it exists
        try:
            proc = self.source.launch(node, torchrun_argv(spec), env, self._job_dir(row.id) / "output.log",
                                      cwd=Path(row.cwd))
        except (SourceError, OSError) as e:
            self.store.end_proc(proc_row, None)
            self.store.log_event("launch_failed", job=row.id, node=node, error=str(e))
            run.failed_code, run.failed_at = -1, time.monotonic()
            return
        self.store.set_proc_pid(proc_row, proc.pid)
        run.agents[node] = Agent(row.id, row.generation, node, proc, proc_row)

    # -- agents exiting ---------------------------------------------------------------------------

    def _poll_agents(self) -> None:
        now = time.monotonic()
        for run in list(self.runs.values()):
            had_agents = bool(run.agents)
            for node, agent in list(run.agents.items()):
                code = agent.proc.poll()
                if code is None:
                    if agent.stop_deadline is not None and now > agent.stop_deadline:
                        terminate_tagged(self.identity, 0.0, job=run.row.id, node=node)
                    continue
                del run.agents[node]
                self.store.end_proc(agent.row, code)
                if code == 0:
                    run.completed = True
                elif not agent.stopping and node in self.pool and node in run.target and not run.disturbed:
                    run.failed_code, run.failed_at = code, time.monotonic()
                    if self.options.resize == "relaunch":  # the others cannot go on without it
                        for other in run.agents.values():
                            self._stop_agent(other)
            if had_agents and not run.agents:
                self._generation_ended(run)
        if self.draining:
            busy = self._busy_nodes()
            for node in [n for n in self.draining if n not in busy]:
                self.draining.discard(node)
                self.source.reclaim_done(node)  # vacated: a batch source may hand it back at once

    def _settle_failures(self) -> None:
        now = time.monotonic()
        for run in list(self.runs.values()):
            if run.settle_until is not None and now >= run.settle_until and not run.agents:
                self._generation_ended(run)

    def _generation_ended(self, run: JobRun) -> None:
        row = run.row
        if (run.failed_code is not None and not run.disturbed and not run.completed
                and run.stop_reason not in ("cancel", "shutdown")):
            run.settle_until = run.failed_at + FAILURE_SETTLE_S
            if time.monotonic() < run.settle_until:
                return  # judged by _settle_failures
        run.settle_until = None
        # Its agents are gone; a worker that outlived its agent (torchrun gives each its own session)
        # must not train on: the tag finds it.
        signal_processes(tagged_processes(self.identity, job=row.id), signal.SIGKILL)
        reason, run.stop_reason = run.stop_reason, ""
        if not run.target or reason in ("cancel", "shutdown") or run.completed or run.failed_code is not None:
            self._record(run, 0)
        if run.completed and reason != "cancel":
            self._end_job(run, "finished", "")
        elif reason == "cancel":
            self._end_job(run, "cancelled", "cancelled by the user")
        elif reason == "shutdown":
            self.store.update_job(row.id, state="queued")
            row.state = "queued"
        elif run.failed_code is not None and not run.disturbed:
            row.retries += 1
            self.store.update_job(row.id, retries=row.retries)
            tail = self._log_tail(row.id)
            code = worker_exit_code(self._output_tail(row.id)) or run.failed_code
            self.store.log_event("job_failed", job=row.id, exit_code=code, retry=row.retries, tail=tail)
            if row.retries > row.max_retries:
                self._end_job(run, "failed", f"the script exited with code {code} ({row.retries} attempts)\n{tail}")
                return
            self._mark_dirty(time.monotonic())
        else:
            # Stopped for a resize or by a preemption: it goes on at its new size (or waits for nodes).
            if not run.target:
                row.state = "queued"
                self.store.update_job(row.id, state="queued")
            self._mark_dirty(time.monotonic())

    def _end_job(self, run: JobRun, state: str, reason: str) -> None:
        row = run.row
        row.state, row.reason, row.finished_s = state, reason, time.time()
        self.store.update_job(row.id, state=state, reason=reason, finished_s=row.finished_s, samples=row.samples)
        self.store.log_event(state, job=row.id, samples=row.samples)
        run.target = []
        del self.runs[row.id]
        for configuration in ["full"] + [c["name"] for c in row.configurations]:
            self.advisor.forget(self._key(run, configuration))
        self._mark_dirty(time.monotonic())

    # -- logs -------------------------------------------------------------------------------------

    def _job_dir(self, job: str) -> Path:
        d = self.state_dir / "jobs" / job
        d.mkdir(parents=True, exist_ok=True)
        return d

    def _log_line(self, job: str, line: str) -> None:
        with open(self._job_dir(job) / "output.log", "a") as f:
            f.write(f"{time.strftime('%Y-%m-%d %H:%M:%S')} {line}\n")

    def _log_tail(self, job: str, lines: int = LOG_TAIL_LINES) -> str:
        """What the job's workers printed last, else the end of the job's output log."""
        workers = worker_log_tail(self._job_dir(job) / "workers", lines)
        return workers or "\n".join(self._output_tail(job).splitlines()[-lines:])

    def _output_tail(self, job: str, size: int = 64 * 1024) -> str:
        try:
            with open(self._job_dir(job) / "output.log", "rb") as f:
                f.seek(0, os.SEEK_END)
                f.seek(max(0, f.tell() - size))
                return f.read().decode("utf-8", "replace")
        except OSError:
            return ""

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
        job.secret = secrets.token_hex(32)
        self.store.add_job(job)
        self.store.log_event("submitted", job=job.id, min_nodes=job.min_nodes, max_nodes=job.max_nodes)
        run = JobRun(job)
        self.runs[job.id] = run
        if job.curve:
            self._set_prior(run)
        self._mark_dirty(arrived)
        return {"ok": True, "job": job.id}

    def _cancel(self, job: str, arrived: float) -> Dict[str, Any]:
        run = self.runs.get(job)
        if run is None:
            row = self.store.job(job)
            if row is None:
                raise ValueError(f"no job named {job!r}")
            raise ValueError(f"job {job!r} is {row.state} already")
        if run.agents:
            self._stop_run(run, "cancel")
            run.stop_reason = "cancel"
        else:
            self._end_job(run, "cancelled", "cancelled by the user")
        self._mark_dirty(arrived)
        return {"ok": True, "job": job}

    # -- status -----------------------------------------------------------------------------------

    def status(self) -> Dict[str, Any]:
        jobs = []
        for row in self.store.jobs():
            run = self.runs.get(row.id)
            d = (run.row if run else row).status()
            if run is not None:
                d["nodes"] = sorted(run.agents)
                d["target"] = list(run.target)
                d["rate"] = _recent_rate(run.recent) if run.agents else 0.0
                d["curve"] = self._curve_source(run)
                d["resizing"] = bool(run.stop_reason) or set(run.agents) != set(run.target)
                if row.work and d["rate"] > 0:
                    d["eta_s"] = max(0.0, (row.work - d["samples"]) / d["rate"])
            jobs.append(d)
        busy = self._busy_nodes()
        lat = sorted(self.decision_s)
        return {
            "manager": {"identity": self.identity, "pid": os.getpid(), "policy": self.options.policy,
                        "resize": self.options.resize, "decisions": self.decisions, "bad_reports": self.bad_reports,
                        "decision_p50_s": lat[len(lat) // 2] if lat else None, "stopping": self._stopping,
                        "source": self.source.describe()},
            "nodes": {"pool": sorted(self.pool), "used": busy},
            "jobs": jobs,
        }

    # -- shutdown ---------------------------------------------------------------------------------

    def _begin_shutdown(self) -> None:
        if self._stopping:
            return
        self._stopping = True
        self.store.log_event("manager_stopping")
        for run in self.runs.values():
            if run.agents:
                self._stop_run(run, "shutdown")
                run.stop_reason = "shutdown"

    def _finish_shutdown(self) -> None:
        terminate_tagged(self.identity, self.options.grace_s)
        for run in self.runs.values():
            if run.row.state == "running":
                self.store.update_job(run.row.id, state="queued")
        self.source.stop(release=True)
        self.store.log_event("manager_stopped")
        if self._shutdown_reply is not None:
            self._shutdown_reply({"ok": True, "stopped": True})


def _recent_rate(recent: Deque[Tuple[float, float]], window_s: float = 10.0) -> float:
    if len(recent) < 2:
        return 0.0
    t1, s1 = recent[-1]
    for t0, s0 in recent:
        if t1 - t0 <= window_s and t1 > t0:
            return max(0.0, (s1 - s0) / (t1 - t0))
    return 0.0


def new_identity() -> str:
    return f"bft-{uuid.uuid4().hex[:12]}"
