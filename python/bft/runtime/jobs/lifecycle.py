"""Job lifecycle: carrying out the decider's placements on real processes, and what follows when
they exit.

A job runs as generations of worker processes (each node's processes are one member). Where a job's
resize stands, and the answer to every event (a decision, a reclaim, a worker's exit, a newcomer's
deadline) is its resize machine's (:mod:`.resize.machine`); how its workers are started, what
their exit statuses mean and how each step of a resize is carried out is its method's
(:mod:`.resize.methods`), which the lifecycle asks without knowing which it is. This part does the
I/O they ask for: it records every process in the state database before starting it (a restarted
manager finds it), starts and signals processes (through :mod:`.workers`, their I/O), reaps them,
and writes the job's log and events; a method's steps for one job, in-place configurations and
newcomers included, are in :mod:`.steps`.
"""

from __future__ import annotations

import contextlib
import time
from typing import Any, Callable, Dict, Iterator, List, Optional

from ..decide import intake
from ..decide.curvebook import CurveBook
from ..sources.base import NodeSource
from ..statedb.schema import JobState
from ..statedb.store import JobRow, StateStore
from .files import JobFiles
from .heartbeats import Heartbeats
from .resize import Machine, Outcome, Phase, Plan, Stop, gaps, method
from .resize.verdicts import FAILURE_SETTLE_S
from .runs import JobRun, commit_generation, commit_retries
from .steps import JobSteps
from .workers import Workers

# A node where a worker was lost, hung or never arrived rests this long, idle (with standbys: with its
# standby running), before a decision may use it again: it proves it can run a process again.
REST_S = 10.0


class JobLifecycle:
    def __init__(self, *, files: JobFiles, store: StateStore, source: NodeSource, identity: str, book: CurveBook,
                 active_runs: Dict[str, JobRun], pool: Dict[str, float], checkpoint_grace_s: float,
                 report_timeout_s: float, mark_dirty: Callable[[float], None], inplace_timeout_s: float,
                 standby: bool, procs_per_node: int = 1):
        self.files = files
        self.store = store
        self.source = source
        self.book = book
        self.active_runs = active_runs  # the manager's: active jobs by id
        self.pool = pool  # the manager's: idle node -> since
        self.draining: set = set()  # reclaimed nodes that still run something of ours
        self.checkpoint_grace_s = checkpoint_grace_s
        self.report_timeout_s = report_timeout_s
        self.mark_dirty = mark_dirty
        self.inplace_timeout_s = inplace_timeout_s
        self.workers = Workers(files=files, store=store, source=source, identity=identity,
                               checkpoint_grace_s=checkpoint_grace_s, inplace_timeout_s=inplace_timeout_s,
                               standby=standby,
                               secret_of=lambda job: bytes.fromhex(active_runs[job].row.secret),
                               procs_per_node=procs_per_node)
        self._holders: Optional[List[JobRun]] = None  # within node_events(): the jobs a reclaim may concern
        self._shrinks: Dict[str, Any] = {}  # within node_events(): job -> (run, its reclaimed nodes)
        self._sweep: set = set()  # jobs whose generation ended: their strays are killed once per poll
        # Nodes where a worker was lost or a newcomer never arrived -> since when (monotonic): left out
        # of decisions until healthy again (rested).
        self.resting: Dict[str, float] = {}
        self.heartbeats = Heartbeats(inplace_timeout_s)

    def new_run(self, row: JobRow, **fields: Any) -> JobRun:
        """The manager's record of an active job, its resize machine set up with this manager's times."""
        machine = Machine(checkpoint_grace_s=self.checkpoint_grace_s, join_timeout_s=self.inplace_timeout_s,
                          max_retries=row.max_retries, retries=row.retries, min_nodes=row.min_nodes)
        return JobRun(row, machine=machine, **fields)

    # -- applying a decision ----------------------------------------------------------------------

    def apply(self, run: JobRun, target: List[str], configuration: str) -> None:
        """Moves a job to the nodes and configuration the decider chose."""
        switch = bool(target) and configuration != run.row.configuration
        if target == run.target and not switch:
            return
        self.store.log_event("allocate", job=run.id, from_nodes=len(run.target), to_nodes=len(target), nodes=target,
                             configuration=configuration, **self.book.seen_by_allocator(run, configuration))
        if switch:
            # Stored before the job is restarted in it: a restarted manager relaunches it so. The
            # advisor hears of it when the new generation starts (the old one reports until it stops).
            previous = run.row.configuration
            run.row.configuration = configuration
            self.store.update_job(run.id, configuration=configuration)
            self.store.log_event("configuration_changed", job=run.id, previous=previous, configuration=configuration,
                                 nodes=len(target))
        m = run.machine
        m.place(target)  # the resize below moves the generation there
        if m.phase not in (Phase.STEADY, Phase.RESIZING):
            return  # started there once its nodes are clear (launch_ready)
        # Its method carries the resize out (and begins the gap meter's): in place, a relaunch, or a regroup.
        kind = method(run.method).rescale(JobSteps(self, run), time.monotonic(), switch)
        if not switch:  # the rescale starts now: the book measures what it costs, per method
            self.book.rescale_begins(run, run.training_nodes, method=kind)

    @contextlib.contextmanager
    def node_events(self) -> Iterator[None]:
        """Scope of a batch of node events: a reclaim concerns only the jobs that hold nodes or run
        processes, found once per batch, not among every queued job for each of thousands of reclaims;
        a job resized in place is shrunk once, at the batch's end, off all its nodes the batch reclaimed.
        (Within a batch no job gains nodes: a reclaim only shrinks.)"""
        self._holders = [run for run in self.active_runs.values() if run.target or run.node_procs]
        self._shrinks = {}
        try:
            yield
        finally:
            self._holders = None
            shrinks, self._shrinks = self._shrinks, {}
            for run, nodes in shrinks.values():  # one in-place shrink per job for the whole batch
                try:
                    self._shrink_now(run, nodes)
                except Exception as e:  # noqa: BLE001 - one job's shrink must not take the manager down
                    self.store.log_event("internal_error", event="reclaim", job=run.id, error=repr(e))

    def node_reclaimed(self, node: str) -> None:
        """The batch scheduler takes `node` back: whatever of ours runs there vacates within the grace time."""
        self.draining.add(node)
        if self.workers.standbys is not None:
            self.workers.standbys.end(node)  # never holds the node up: it has nothing to save
        now = time.monotonic()
        for run in self._holders if self._holders is not None else list(self.active_runs.values()):
            m = run.machine
            m.reclaimed(node)
            if node not in run.node_procs:
                continue  # the decision that follows takes the node out of its target
            if m.blocked(node):  # already leaving: it must be gone within the grace time
                m.hurry(node, now + self.checkpoint_grace_s)
                continue
            self.store.log_event("preempted", job=run.id, node=node)
            method(run.method).reclaimed(JobSteps(self, run), node, now)

    def shrink_off(self, run: JobRun, node: str) -> None:
        """A method that resizes without stopping the survivors shrinks the job off its reclaimed `node`."""
        if self._holders is not None:
            # Summit takes many nodes in the same second: one generation for all of the batch's.
            self._shrinks.setdefault(run.id, (run, []))[1].append(node)
        else:
            self._shrink_now(run, [node])

    def _shrink_now(self, run: JobRun, reclaimed: List[str]) -> None:
        """Shrinks a job off its reclaimed nodes at once, not at the next decision: they must be free
        within their grace time."""
        if run.id not in self.active_runs:
            return
        self.apply(run, [n for n in run.target if n not in self.draining], run.row.configuration)
        for node in reclaimed:
            run.machine.hurry(node, time.monotonic() + self.checkpoint_grace_s)

    def keeper_restarted(self) -> None:
        """A new keeper replaced a lost one: every job that runs is told (its method's step: in place, it
        re-forms in the new store)."""
        now = time.monotonic()
        for run in list(self.active_runs.values()):
            self.heartbeats.forget(run.id)  # written into the new store once each worker has reconnected
            method(run.method).keeper_restarted(JobSteps(self, run), now)

    def stop_run(self, run: JobRun, reason: Stop) -> None:
        """Stops every worker of a job (cancel, shutdown); the user's reason overrides a resize's."""
        run.machine.stop(reason, time.monotonic())
        self.terminate_stopping(run)

    def terminate_stopping(self, run: JobRun) -> None:
        """SIGTERM to the workers of a stopping generation that have not had it."""
        if run.machine.phase is Phase.STOPPING:
            self.workers.terminate(run, [n for n in run.machine.workers if run.machine.workers[n].leaving])

    def busy_nodes(self) -> Dict[str, str]:
        """node -> job, for every node where an agent of ours still runs."""
        return {node: job for job, run in self.active_runs.items() for node in run.node_procs}

    # -- starting ---------------------------------------------------------------------------------

    def launch_ready(self, admitted: List[JobRun], events_waiting: Callable[[], bool] = lambda: False) -> None:
        """Starts every job that has nodes, no live agents, may start (no back-off, no stop asked) and
        whose nodes no other job still occupies. After each start it returns early if `events_waiting()`:
        starting a 64-node generation takes tens of milliseconds, and a node event must not wait behind
        all of them to be decided (the rest start on the loop's next pass)."""
        busy = self.busy_nodes()
        now = time.monotonic()
        for run in admitted:
            if run.node_procs or not run.target or run.last_report_due is not None or not run.machine.may_start(now):
                continue
            if any(node in busy or node not in self.pool for node in run.target):
                continue
            self._start_generation(run)
            if events_waiting():
                return  # (standbys are filled on a pass with nothing waiting)
        if self.workers.standbys is not None:
            busy = self.busy_nodes()
            self.workers.standbys.fill([n for n in self.pool if n not in busy and n not in self.draining])

    def _start_generation(self, run: JobRun) -> None:
        row = run.row
        # The machine starts the next generation; the row mirrors it, stored before any process starts.
        run.machine.start(run.target, row.generation + 1)
        row.started_s = row.started_s or time.time()
        row.state = JobState.RUNNING
        commit_generation(run, self.store, state=JobState.RUNNING, started_s=row.started_s)
        run.launched_at = time.monotonic()
        gaps.generation_starts(run)
        intake.generation_starts(run)
        self.files.log_line(row.id, f"=== generation {row.generation}: {len(run.target)} nodes "
                                    f"({', '.join(run.target)}), resize method {run.method} ===")
        self.store.log_event("launch", job=row.id, generation=row.generation, nodes=list(run.target),
                             configuration=row.configuration)
        self.book.configuration_starts(run, row.configuration)
        self.book.launched(run, len(run.target))  # a start, or a relaunch (a failed in-place resize's too)
        if method(run.method).publish_first(JobSteps(self, run)):
            self.launch_agents(run, run.target)

    def launch_agents(self, run: JobRun, nodes: List[str], joining: bool = False) -> None:
        """Starts the job's workers on `nodes` (the machine knows them already); a node where none could
        start is a launch failure for the machine. `joining`: newcomers of an in-place grow."""
        if not nodes:
            return
        for node, error in self.workers.start(run, nodes, joining=joining).items():
            run.machine.launch_failed(node, time.monotonic(), error)
        self.terminate_stopping(run)

    def adopt(self, run: JobRun, procs: List[Any]) -> bool:
        """Takes over the agents a previous manager started for a running job (its keeper kept their
        store): they train on, nothing is relaunched. `procs` are the job's open process rows; True
        if every one of its current generation was found alive and adopted."""
        row = run.row
        agents = self.workers.find_again(run, procs)
        if not agents or any(a.poll() is not None for a in agents.values()):
            return False
        members = method(run.method).adopted_members(JobSteps(self, run), sorted(agents))
        if members is None:
            return False
        # In place, the others are a grow's newcomers on their way (their process rows are their tickets).
        newcomers = sorted(n for n in agents if n not in members)
        run.machine.adopt(members, row.generation, newcomers, time.monotonic())
        self.workers.adopted(run, agents)
        run.launched_at = time.monotonic()
        self.files.log_line(row.id, f"=== generation {row.generation} adopted by a restarted manager on "
                                    f"{len(agents)} nodes: it trained on ===")
        return True

    # -- agents exiting ---------------------------------------------------------------------------

    def poll(self) -> None:
        """Reaps workers that exited, acts on the machines' deadlines, judges generations that ended,
        and hands vacated reclaimed nodes back to the source; what it records is one commit, and the
        source hears of the vacated nodes after it (a Slurm source's scancel may take seconds)."""
        with self.store.transaction():
            self._poll()
        if self.resting:
            self._rested(time.monotonic())
        if self._sweep:
            self.workers.kill_strays(self._sweep)  # once for every generation that ended
            self._sweep.clear()
        if self.draining:
            busy = self.busy_nodes()
            for node in [n for n in self.draining if n not in busy]:
                self.draining.discard(node)
                self.source.reclaim_done(node)  # vacated: a batch source may hand it back at once

    def _poll(self) -> None:
        now = time.monotonic()
        for run in list(self.active_runs.values()):
            m = run.machine
            if not run.node_procs and not m.running and run.last_report_due is None:
                continue  # queued, backing off or between generations: nothing to reap or judge
            self._reap(run, now)
            method(run.method).watch(JobSteps(self, run), now)  # in place: newcomers' arrivals, hung workers
            if run.node_procs and not run.silent and run.launched_at is not None:
                self._check_silence(run, now)
            if not run.node_procs and (m.judgeable(now) or run.last_report_due is not None):
                self._generation_ended(run, now)

    def _reap(self, run: JobRun, now: float) -> None:
        m, how = run.machine, method(run.method)
        kill = set(m.to_kill(now))
        vacated = False
        for node, agent in list(run.node_procs.items()):
            code = agent.poll()
            if code is None:
                if node in kill:
                    self.workers.kill(agent)
                continue
            generation = m.workers[node].generation
            self.workers.exited(run, node)
            for row_id in agent.rows:
                self.store.end_proc(row_id, code)
            was_leaving, judged = m.blocked(node), how.judge(code)
            if not was_leaving and code != 0:
                code = how.failed_status(code, lambda: self.files.output_tail(run.id))
                self.store.log_event("worker_exited", job=run.id, node=node, exit_code=code,
                                     generation=generation, judged=judged.value)
            lost = m.lost
            plan = how.exited(m, node, judged, code, now)
            if m.lost is not lost:
                self._drop_lost(run, node, code)
            if plan is not None:
                self.follow(run, plan)
            vacated = vacated or (was_leaving and node in run.target)
        self.terminate_stopping(run)
        if vacated:
            how.vacated(JobSteps(self, run), time.monotonic())

    def _drop_lost(self, run: JobRun, node: str, code: int) -> None:
        """A worker lost while its job trains in place (dead, killed, or hung and killed): the machine
        dropped it (a member: from a generation published at once; a newcomer: before it was ever
        published) and the survivors train on from their own state; the allocator decides again (it
        may give the job a node back: a grow). Survivors too few for the job's --min are stopped by
        the machine for a relaunch."""
        relaunch = run.machine.phase is Phase.STOPPING
        self.store.log_event("worker_lost", job=run.id, node=node, exit_code=code,
                             generation=None if relaunch else run.machine.generation)
        self.files.log_line(run.id, f"=== the worker on {node} was lost (exit status {code}): " +
                            ("too few left for --min: relaunched ===" if relaunch
                             else "dropped, the others train on ==="))
        self.rest(node, time.monotonic())
        if not relaunch:
            self.mark_dirty(time.monotonic())

    def follow(self, run: JobRun, plan: Plan) -> None:
        """Carries out an in-place plan the machine made on its own (a lost worker dropped, a newcomer
        gone, the switch once every newcomer has arrived). A published one ends a gap the intake
        measures (from the members' last step before it); one that drops a member is a rescale nobody
        decided, which the advisor hears of; at a switch it hears of the grown size (until then the
        members trained at theirs: a grow's cost is the switch's, not the newcomers' start)."""
        if plan.publish:
            gaps.resize_begins(run, self.store, in_place=True)
        JobSteps(self, run).carry_out(plan)
        if plan.publish and plan.left:
            self.book.rescale_begins(run, run.training_nodes, method=method(run.method).advisor_kind)
        elif plan.publish and plan.joined:  # the switch: the grow's newcomers train from now
            self.book.record(run, run.training_nodes, method=method(run.method).advisor_kind)

    def rest(self, node: str, now: float) -> None:
        """A worker on `node` was lost, hung, or never arrived: the node is left out of decisions until
        it has been idle for REST_S and, with standbys, has kept one running that long."""
        if node not in self.resting:
            self.store.log_event("node_resting", node=node, seconds=REST_S)
        self.resting[node] = now

    def _rested(self, now: float) -> None:
        """Nodes that have rested go back to the decisions (a decision follows: a job may grow back)."""
        busy = self.busy_nodes()
        standbys = self.workers.standbys
        for node, since in list(self.resting.items()):
            if node in busy or (standbys is not None and node in self.pool and node not in standbys.nodes()):
                self.resting[node] = now  # not idle, or its standby not up yet: its rest starts again
            elif now - since >= REST_S or node not in self.pool:
                del self.resting[node]
                self.store.log_event("node_rested", node=node)
                self.mark_dirty(now)

    def _check_silence(self, run: JobRun, now: float) -> None:
        """A job that has run `report_timeout_s` without a report since its start (or since its last
        report) is silent: its script may never call bft.train.report()."""
        since = max(run.launched_at, run.reported_at or 0.0)
        if now - since < self.report_timeout_s:
            return
        intake.judged_silent(run)
        self.store.log_event("no_reports", job=run.id, seconds=round(now - since, 1))
        self.files.log_line(run.id, f"=== no progress report for {now - since:.0f} s: the job now gets only nodes "
                                    "no other job can use (does the script call bft.train.report()?) ===")
        self.mark_dirty(now)

    def _generation_ended(self, run: JobRun, now: float) -> None:
        row, m = run.row, run.machine
        short = bool(row.work) and row.samples < row.work
        if m.completed and short and m.reason is not Stop.CANCEL and run.last_report_due is None:
            # Its last report is sent as it exits and may be a moment behind the exit status.
            run.last_report_due = now + FAILURE_SETTLE_S
            return
        if run.last_report_due is not None and now < run.last_report_due and short:
            return
        run.last_report_due = None
        completed = m.completed
        outcome = m.outcome(now, work_done=bool(row.work) and row.samples >= row.work)
        self._sweep.add(row.id)  # its workers are gone: so must any worker of theirs be (poll)
        self.files.log_line(row.id, f"=== generation {row.generation} stopped: {m.last_reason} ===")
        self.store.log_event("generation_ended", job=row.id, generation=row.generation, outcome=outcome.value,
                             reason=m.last_reason, retries=m.retries)
        self.book.record(run, 0)
        if not run.target:
            gaps.nodeless(run)
        if outcome is Outcome.FINISHED and completed and short:
            self.end_job(run, JobState.INCOMPLETE, f"the script exited at {row.samples:.0f} of {row.work:.0f} samples "
                                            "(it reported no more)")
        elif outcome is Outcome.FINISHED:
            self.end_job(run, JobState.FINISHED, "")
        elif outcome is Outcome.CANCELLED:
            self.end_job(run, JobState.CANCELLED, "cancelled by the user")
        elif outcome in (Outcome.FAILED, Outcome.BACKOFF):
            commit_retries(run, self.store)
            tail = self.files.log_tail(row.id)
            self.store.log_event("job_failed", job=row.id, exit_code=m.last_failure.code, retry=row.retries,
                                 reason=m.last_reason, tail=tail)
            if outcome is Outcome.FAILED:
                self.end_job(run, JobState.FAILED, f"{m.last_reason}\n{tail}")
        if row.id in self.active_runs and (outcome is Outcome.QUEUED or not run.target):
            row.state = JobState.QUEUED  # it waits for nodes (or for the next manager)
            self.store.update_job(row.id, state=JobState.QUEUED)
        self.mark_dirty(now)

    def end_job(self, run: JobRun, state: JobState, reason: str) -> None:
        row = run.row
        row.state, row.reason, row.finished_s = state, reason, time.time()
        with self.store.transaction(durable=True):
            self.store.update_job(row.id, state=state, reason=reason, finished_s=row.finished_s, samples=row.samples)
            self.store.log_event(state, job=row.id, samples=row.samples)
        run.machine.place([])
        del self.active_runs[row.id]
        self.heartbeats.forget(row.id)
        self.book.forget(run)
        self.workers.forget(row.id)
        self.mark_dirty(time.monotonic())
