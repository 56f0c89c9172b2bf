"""Job lifecycle: applying the decider's placements to real processes, and what follows when they exit.

A job runs as generations: each launch of its torchrun agents (one per node) is one generation. This
part starts generations, stops agents (SIGTERM, then SIGKILL after the grace time), notices agents
that exit, and decides what that means: finished, failed (retried up to a limit), cancelled, or
stopped for a resize or a preemption (the job goes on at its new size). Every process is recorded in
the state database before it is started, so a restarted manager finds it.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List, Optional

from ..train import EXIT_INPLACE_FAILED
from . import inplace
from .curvebook import INPLACE, RELAUNCH, CurveBook
from .launcher import (
    AGENTS_DIR,
    AdoptedAgent,
    LaunchSpec,
    agent_exit_file,
    default_python,
    inplace_environment,
    job_environment,
    script_argv,
    signal_processes,
    tagged_processes,
    terminate_tagged,
    torchrun_argv,
    worker_exit_code,
    worker_log_tail,
)
from .nodes import NodeSource, SourceError
from .reports import resize_begins
from .runs import Agent, JobRun
from .standby import Standbys
from .state import StateStore

LOG_TAIL_LINES = 20
# An agent that dies on its own may have been killed by the batch scheduler taking its node, and
# the source's word of that can come a moment later: a failure is judged after this long.
FAILURE_SETTLE_S = 5.0


class JobLifecycle:
    def __init__(self, state_dir: Path, store: StateStore, source: NodeSource, identity: str, book: CurveBook,
                 runs: Dict[str, JobRun], pool: Dict[str, float], grace_s: float,
                 report_timeout_s: float, mark_dirty: Callable[[float], None], inplace_timeout_s: float = 30.0,
                 standby: bool = False):
        self.state_dir = state_dir
        self.store = store
        self.source = source
        self.identity = identity
        self.book = book
        self.runs = runs  # the manager's: active jobs by id
        self.pool = pool  # the manager's: idle node -> since
        self.draining: set = set()  # reclaimed nodes that still run something of ours
        self.grace_s = grace_s
        self.report_timeout_s = report_timeout_s
        self.mark_dirty = mark_dirty
        self.store_address = ""  # set once the endpoints are open
        self.report_address = ""
        self.inplace_timeout_s = inplace_timeout_s
        self._configurations: Optional[inplace.Configurations] = None
        self._job_dirs: set = set()  # jobs whose directories exist
        self._holders: Optional[List[JobRun]] = None  # within node_events(): the jobs a reclaim may concern
        self._sweep: set = set()  # jobs whose generation ended: their strays are killed once per poll
        # Warm standbys on the pool's nodes that run nothing of a job (in-place workers only: they
        # run the script directly, as a standby does).
        self.standbys = (Standbys(source, identity, default_python(), state_dir, store.log_event)
                         if standby else None)

    @property
    def configurations(self) -> inplace.Configurations:
        """In-place jobs' configurations in the rendezvous store (connected on first use)."""
        if self._configurations is None:
            self._configurations = inplace.Configurations(self.store_address, self.inplace_timeout_s,
                                                          lambda job: bytes.fromhex(self.runs[job].row.secret))
        return self._configurations

    # -- applying a decision ----------------------------------------------------------------------

    def apply(self, run: JobRun, target: List[str], configuration: str) -> None:
        """Moves a job to the nodes and configuration the decider chose."""
        switch = bool(target) and configuration != run.row.configuration
        if target == run.target and not switch:
            return
        self.store.log_event("allocate", job=run.id, from_nodes=len(run.target), to_nodes=len(target),
                             nodes=target, curve=self.book.curve_source(run), configuration=configuration,
                             configuration_curve=self.book.curve_source(run, configuration))
        if switch:
            # Stored before the job is restarted in it: a restarted manager relaunches it so. The
            # advisor hears of it when the new generation starts (the old one reports until it stops).
            previous = run.row.configuration
            run.row.configuration = configuration
            self.store.update_job(run.id, configuration=configuration)
            self.store.log_event("configuration_changed", job=run.id, previous=previous, configuration=configuration,
                                 nodes=len(target))
        old, run.target = set(run.target), target
        if not run.agents:
            return  # launch_ready starts it once its nodes are clear
        resize = run.method
        resize_begins(run, in_place=resize == "inplace" and not switch)
        method = RELAUNCH
        if resize == "membership" and target and not switch:
            for node, agent in run.agents.items():
                if node not in target:
                    self.stop_agent(agent)
            self.launch_agents(run, sorted(set(target) - old - set(run.agents)))
        elif resize == "inplace" and target and not switch and inplace.resize(self, run, target):
            method = INPLACE  # the survivors go on; newcomers started, leavers on their way out
        else:  # a new configuration restarts every worker, whatever the resize method
            self.stop_run(run, "resize")
        if not switch:  # the rescale starts now: the advisor measures what it costs, per method
            self.book.record(run, len(target), method=method)

    @contextlib.contextmanager
    def node_events(self) -> Iterator[None]:
        """Scope of a batch of node events: a reclaim concerns only the jobs that hold nodes or run
        processes, found once per batch, not among every queued job for each of thousands of reclaims.
        (Within a batch no job gains nodes: a reclaim only shrinks.)"""
        self._holders = [run for run in self.runs.values() if run.target or run.agents]
        try:
            yield
        finally:
            self._holders = None

    def node_reclaimed(self, node: str) -> None:
        """The batch scheduler takes `node` back: whatever of ours runs there vacates within the grace time."""
        self.draining.add(node)
        if self.standbys is not None:
            self.standbys.end(node)  # never holds the node up: it has nothing to save
        for run in self._holders if self._holders is not None else list(self.runs.values()):
            if node in run.target:
                run.disturbed = True  # the decision that follows takes the node out of its target
            agent = run.agents.get(node)
            if agent is None or agent.stopping:
                continue
            self.store.log_event("preempted", job=run.id, node=node)
            rest = [n for n in run.target if n not in self.draining]
            if run.method == "inplace" and rest:
                # Shrunk in place now, not at the next decision: the node must be free within its grace time.
                self.apply(run, rest, run.row.configuration)
                if agent.stopping:
                    agent.stop_deadline = min(agent.stop_deadline or 1e18, time.monotonic() + self.grace_s)
                    continue
            if run.method == "membership":
                self.stop_agent(agent)
            else:
                self.stop_run(run, "resize")

    def stop_agent(self, agent: Agent) -> None:
        if agent.stopping:
            return
        agent.stopping = True
        try:
            os.killpg(agent.proc.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        agent.stop_deadline = time.monotonic() + self.grace_s + 10.0  # then SIGKILL

    def stop_run(self, run: JobRun, reason: str) -> None:
        """Stops every agent of a job; the first reason given sticks (resize, cancel, shutdown)."""
        run.stop_reason = run.stop_reason or reason
        run.disturbed = True
        for agent in run.agents.values():
            self.stop_agent(agent)

    def busy_nodes(self) -> Dict[str, str]:
        """node -> job, for every node where an agent of ours still runs."""
        return {node: job for job, run in self.runs.items() for node in run.agents}

    # -- starting ---------------------------------------------------------------------------------

    def launch_ready(self, admitted: List[JobRun], events_waiting: Callable[[], bool] = lambda: False) -> None:
        """Starts every job that has nodes, no live agents, and whose nodes no other job still occupies.
        After each start it returns early if `events_waiting()`: starting a 64-node generation takes
        tens of milliseconds, and a node event must not wait behind all of them to be decided (the
        rest start on the loop's next pass)."""
        busy = self.busy_nodes()
        for run in admitted:
            if run.agents or not run.target or run.stop_reason or run.settle_until is not None:
                continue
            if any(node in busy or node not in self.pool for node in run.target):
                continue
            self._start_generation(run)
            if events_waiting():
                return  # (standbys are filled on a pass with nothing waiting)
        if self.standbys is not None:
            busy = self.busy_nodes()
            self.standbys.fill([n for n in self.pool if n not in busy and n not in self.draining])

    def _start_generation(self, run: JobRun) -> None:
        row = run.row
        row.generation += 1
        row.started_s = row.started_s or time.time()
        row.state = "running"
        self.store.update_job(row.id, generation=row.generation, state="running", started_s=row.started_s)
        run.completed, run.failed_code, run.disturbed = False, None, False
        run.launched_at = time.monotonic()
        if run.nodeless_since is not None:
            run.nodeless_s += time.time() - run.nodeless_since
            run.nodeless_since = None
        run.round = 0
        run.last_seq.clear()
        run.rank_samples.clear()
        self.log_line(row.id, f"=== generation {row.generation}: {len(run.target)} nodes "
                              f"({', '.join(run.target)}), resize method {run.method} ===")
        self.store.log_event("launch", job=row.id, generation=row.generation, nodes=list(run.target),
                             configuration=row.configuration)
        if run.running != row.configuration:  # the last generation ran in another configuration
            self.book.record(run, 0)
            run.running = row.configuration
        self.book.launched(run, len(run.target))  # a start, or a relaunch (a failed in-place resize's too)
        if run.method == "inplace":
            run.members = list(run.target)
            try:
                self.configurations.publish(row.id, row.generation, run.members)
            except Exception as e:  # noqa: BLE001 - its workers could not start: judged as a launch failure
                self.store.log_event("launch_failed", job=row.id, error=f"rendezvous store: {e}")
                run.failed_code, run.failed_at = -1, time.monotonic()
                self._generation_ended(run)
                return
        self.launch_agents(run, run.target)
        if not run.agents:
            self._generation_ended(run)

    def launch_agents(self, run: JobRun, nodes: List[str]) -> None:
        """Starts the job's agents on `nodes`. Their process rows are recorded, in one commit, before
        any of them exists; their pids, or their failures, in one more."""
        row = run.row
        resize = run.method
        membership = resize == "membership"
        job_dir = self.job_dir(row.id)
        with self.store.transaction():
            rows = {node: self.store.add_proc(row.id, row.generation, node) for node in nodes}
        started: Dict[str, Any] = {}
        from_standby = set()
        failed: Dict[str, str] = {}
        for node in nodes:
            spec = LaunchSpec(
                job=row.id, generation=row.generation, script=row.script, args=row.args, python=row.python,
                node=node, node_address=self.source.address(node), store_address=self.store_address,
                min_nodes=row.min_nodes if membership else len(run.target),
                max_nodes=row.max_nodes if membership else len(run.target),
                max_restarts=1000 if membership else 0, log_dir=job_dir / "workers")
            exit_file = agent_exit_file(job_dir, row.generation, node, resize)
            exit_file.unlink(missing_ok=True)  # an earlier worker's on this node
            env = job_environment(row.id, row.generation, node, self.identity, self.report_address, row.secret,
                                  job_dir / "checkpoint", row.work, self.grace_s, row.configuration, exit_file)
            argv = torchrun_argv(spec)
            if resize == "inplace":
                argv = script_argv(spec)
                env.update(inplace_environment(self.store_address, self.inplace_timeout_s, spec.node_address))
                standby = self.standbys.take(node, row.python) if self.standbys is not None else None
                if standby is not None and self.standbys.assign(standby, argv, env, Path(row.cwd),
                                                                job_dir / "output.log"):
                    started[node] = standby
                    from_standby.add(node)
                    continue
            elif self.standbys is not None:
                self.standbys.end(node)  # its job runs under torchrun: a standby would only hold memory
            try:
                started[node] = self.source.launch(node, argv, env, job_dir / "output.log", cwd=Path(row.cwd))
            except (SourceError, OSError) as e:
                failed[node] = str(e)
        with self.store.transaction():
            for node, proc in started.items():
                self.store.set_proc_pid(rows[node], proc.pid)
                run.agents[node] = Agent(row.id, row.generation, node, proc, rows[node],
                                         standby=node in from_standby)
            for node, error in failed.items():
                self.store.end_proc(rows[node], None)
                self.store.log_event("launch_failed", job=row.id, node=node, error=error)
        if failed:
            run.failed_code, run.failed_at = -1, time.monotonic()

    def adopt(self, run: JobRun, procs: List[Any]) -> bool:
        """Takes over the agents a previous manager started for a running job (its keeper kept their
        store): they train on, nothing is relaunched. `procs` are the job's open process rows; True
        if every one of its current generation was found alive and adopted."""
        row = run.row
        current = [p for p in procs if p["generation"] == row.generation and p["pid"]]
        agents = {p["node"]: Agent(row.id, row.generation, p["node"],
                                   AdoptedAgent(p["pid"], self.identity, row.id, p["node"],
                                                agent_exit_file(self.job_dir(row.id), row.generation, p["node"],
                                                                run.method)),
                                   p["id"])
                  for p in current}
        for agent in agents.values():
            agent.standby = agent.proc.standby
        if not agents or any(a.proc.poll() is not None for a in agents.values()):
            return False
        run.agents, run.target = agents, sorted(agents)
        if run.method == "inplace":
            try:
                run.members = self.configurations.members(row.id, row.generation) or run.target
            except Exception:  # noqa: BLE001 - the keeper lost its store: relaunch instead of adopting
                return False
            run.target = list(run.members)
        run.launched_at = time.monotonic()
        self.log_line(row.id, f"=== generation {row.generation} adopted by a restarted manager on {len(agents)} "
                              "nodes: it trained on ===")
        return True

    # -- agents exiting ---------------------------------------------------------------------------

    def poll(self) -> None:
        """Reaps agents that exited, judges failures whose settle time has come, and hands vacated
        reclaimed nodes back to the source; what it records is one commit, and the source hears of the
        vacated nodes after it (a Slurm source's scancel may take seconds: not inside a transaction)."""
        with self.store.transaction():
            self._poll()
        if self._sweep:
            # A worker that outlived its agent (torchrun gives each its own session) must not train on:
            # the tag finds it. One scan of the host's processes for every generation that ended.
            signal_processes(tagged_processes(self.identity, jobs=self._sweep), signal.SIGKILL)
            self._sweep.clear()
        if self.draining:
            busy = self.busy_nodes()
            for node in [n for n in self.draining if n not in busy]:
                self.draining.discard(node)
                self.source.reclaim_done(node)  # vacated: a batch source may hand it back at once

    def _poll(self) -> None:
        now = time.monotonic()
        for run in list(self.runs.values()):
            if not run.agents and run.settle_until is None:
                continue  # queued, or between generations: nothing to reap or judge
            had_agents = bool(run.agents)
            for node, agent in list(run.agents.items()):
                code = agent.proc.poll()
                if code is None:
                    if agent.stop_deadline is not None and now > agent.stop_deadline:
                        terminate_tagged(self.identity, 0.0, job=run.id, node=node)
                        if agent.standby:  # no job tag: its own process group (it leads its session)
                            signal_processes([-agent.proc.pid], signal.SIGKILL)
                    continue
                del run.agents[node]
                self.store.end_proc(agent.row, code)
                if code == 0:
                    run.completed = True
                    if run.method == "inplace":  # a newcomer still on its way has nothing left to join
                        for other in run.agents.values():
                            self.stop_agent(other)
                elif code == EXIT_INPLACE_FAILED and run.method == "inplace" and not agent.stopping:
                    # A peer vanished or a resize timed out: the job is relaunched from its last checkpoint.
                    if not run.stop_reason:
                        self.store.log_event("inplace_failed", job=run.id, node=node, generation=run.row.generation)
                        self.log_line(run.id, "=== in-place resize failed: relaunch from the last checkpoint ===")
                    self.stop_run(run, "resize")
                elif not agent.stopping and node in self.pool and node in run.target and not run.disturbed:
                    run.failed_code, run.failed_at = code, time.monotonic()
                    if run.method != "membership":  # the others cannot go on without it
                        for other in run.agents.values():
                            self.stop_agent(other)
            if had_agents and not run.agents:
                self._generation_ended(run)
            elif run.settle_until is not None and now >= run.settle_until and not run.agents:
                self._generation_ended(run)
            elif run.agents and not run.silent and run.launched_at is not None:
                self._check_silence(run, now)
            if (run.method == "inplace" and run.agents and not run.stop_reason
                    and inplace.overdue(self, run, now)):
                self.log_line(run.id, "=== in-place resize failed: relaunch from the last checkpoint ===")
                self.stop_run(run, "resize")

    def _check_silence(self, run: JobRun, now: float) -> None:
        """A job that has run `report_timeout_s` without a report since its start (or since its last
        report) is silent: its script may never call bft.train.report()."""
        since = max(run.launched_at, run.reported_at or 0.0)
        if now - since < self.report_timeout_s:
            return
        run.silent = True
        self.store.log_event("no_reports", job=run.id, seconds=round(now - since, 1))
        self.log_line(run.id, f"=== no progress report for {now - since:.0f} s: the job now gets only nodes no "
                              "other job can use (does the script call bft.train.report()?) ===")
        self.mark_dirty(now)

    def _generation_ended(self, run: JobRun) -> None:
        row = run.row
        if (run.failed_code is not None and not run.disturbed and not run.completed
                and run.stop_reason not in ("cancel", "shutdown")):
            run.settle_until = run.failed_at + FAILURE_SETTLE_S
            if time.monotonic() < run.settle_until:
                return  # judged by a later poll
        if run.completed and row.work and row.samples < row.work and run.settle_until is None:
            # Its last report is sent as it exits and may be a moment behind the exit status.
            run.settle_until = time.monotonic() + FAILURE_SETTLE_S
            return
        run.settle_until = None
        self._sweep.add(row.id)  # its agents are gone: so must any worker of theirs be (poll)
        reason, run.stop_reason = run.stop_reason, ""
        if reason or run.disturbed:  # a planned stop: one line in the job's log, no stack dumps
            why = reason if reason != "resize" else f"resize to {len(run.target)} nodes" if run.target else "preempted"
            self.log_line(row.id, f"=== generation {row.generation} stopped: {why} ===")
        if not run.target or reason in ("cancel", "shutdown") or run.completed or run.failed_code is not None:
            self.book.record(run, 0)
        if not run.target:
            run.nodeless_since = time.time()
        if run.completed and reason != "cancel" and row.work and row.samples < row.work:
            self.end_job(run, "incomplete", f"the script exited at {row.samples:.0f} of {row.work:.0f} samples "
                                            "(it reported no more)")
        elif run.completed and reason != "cancel":
            self.end_job(run, "finished", "")
        elif reason == "cancel":
            self.end_job(run, "cancelled", "cancelled by the user")
        elif reason == "shutdown":
            self.store.update_job(row.id, state="queued")
            row.state = "queued"
        elif run.failed_code is not None and not run.disturbed:
            row.retries += 1
            self.store.update_job(row.id, retries=row.retries)
            tail = self.log_tail(row.id)
            code = worker_exit_code(self.output_tail(row.id)) or run.failed_code
            self.store.log_event("job_failed", job=row.id, exit_code=code, retry=row.retries, tail=tail)
            if row.retries > row.max_retries:
                self.end_job(run, "failed", f"the script exited with code {code} ({row.retries} attempts)\n{tail}")
                return
            self.mark_dirty(time.monotonic())
        else:
            # Stopped for a resize or by a preemption: it goes on at its new size (or waits for nodes).
            if not run.target:
                row.state = "queued"
                self.store.update_job(row.id, state="queued")
            self.mark_dirty(time.monotonic())

    def end_job(self, run: JobRun, state: str, reason: str) -> None:
        row = run.row
        row.state, row.reason, row.finished_s = state, reason, time.time()
        with self.store.transaction(durable=True):
            self.store.update_job(row.id, state=state, reason=reason, finished_s=row.finished_s, samples=row.samples)
            self.store.log_event(state, job=row.id, samples=row.samples)
        run.target = []
        del self.runs[row.id]
        self.book.forget(run)
        if self._configurations is not None:
            self._configurations.forget(row.id)
        self.mark_dirty(time.monotonic())

    # -- a job's files ----------------------------------------------------------------------------

    def job_dir(self, job: str) -> Path:
        d = self.state_dir / "jobs" / job
        if job not in self._job_dirs:  # made once per manager: every launch and log line asks
            d.mkdir(parents=True, exist_ok=True)
            (d / AGENTS_DIR).mkdir(exist_ok=True)
            self._job_dirs.add(job)
        return d

    def log_line(self, job: str, line: str) -> None:
        with open(self.job_dir(job) / "output.log", "a") as f:
            f.write(f"{time.strftime('%Y-%m-%d %H:%M:%S')} {line}\n")

    def log_tail(self, job: str, lines: int = LOG_TAIL_LINES) -> str:
        """What the job's workers printed last, else the end of the job's output log."""
        workers = worker_log_tail(self.job_dir(job) / "workers", lines)
        return workers or "\n".join(self.output_tail(job).splitlines()[-lines:])

    def output_tail(self, job: str, size: int = 64 * 1024) -> str:
        try:
            with open(self.job_dir(job) / "output.log", "rb") as f:
                f.seek(0, os.SEEK_END)
                f.seek(max(0, f.tell() - size))
                return f.read().decode("utf-8", "replace")
        except OSError:
            return ""
