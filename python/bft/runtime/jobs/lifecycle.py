"""Job lifecycle: carrying out the decider's placements on real processes, and what follows when
they exit.

A job runs as generations of worker processes (each node's processes are one member). Where a job's
resize stands, and the answer to every event (a decision, a reclaim, a worker's exit, a newcomer's
deadline) is its resize machine's (:mod:`.resize.machine`); how its workers are started and what
their exit statuses mean is its method's (:mod:`.resize.methods`). This part does the I/O they ask
for: it records every process in the state database before starting it (a restarted manager finds
it), starts and signals processes (through :mod:`.workers`, their I/O), reaps them, publishes
in-place configurations, and writes the job's log and events.
"""

from __future__ import annotations

import contextlib
import time
from typing import Any, Callable, Dict, Iterator, List, Optional

from ..decide import intake
from ..decide.curvebook import INPLACE, RELAUNCH, CurveBook
from ..sources.base import NodeSource
from ..statedb.schema import JobState
from ..statedb.store import JobRow, StateStore
from .files import JobFiles
from .heartbeats import Heartbeats
from .launcher import worker_exit_code
from .resize import Machine, Outcome, Phase, Plan, Stop, gaps, method
from .resize.machine import FAILURE_SETTLE_S
from .runs import JobRun
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
        run.target = target
        m = run.machine
        if m.phase not in (Phase.STEADY, Phase.RESIZING):
            m.target = list(target)  # started there once its nodes are clear (launch_ready)
            return
        gaps.resize_begins(run, self.store, in_place=method(run.method).in_place and not switch)
        kind = self._resize(run, switch)
        if not switch:  # the rescale starts now: the book measures what it costs, per method
            self.book.rescale_begins(run, len(target), method=kind)

    def _resize(self, run: JobRun, switch: bool) -> str:
        """Moves a running generation towards run.target (the machine decides how); returns how the
        rescale is done, for the advisor (INPLACE or RELAUNCH)."""
        m, how, now = run.machine, method(run.method), time.monotonic()
        if how.regroups and run.target and not switch:
            leave, start = m.regroup(run.target, now)
            self.workers.terminate(run, leave)
            self.launch_agents(run, start)
            return RELAUNCH
        in_place = how.in_place and not switch
        if in_place:
            self._read_arrivals(run)  # a newcomer that arrived meanwhile switches in with this decision
        plan = m.resize(run.target, now, in_place=in_place)
        if plan is not None:
            self._carry_out(run, plan)
        self._terminate_stopping(run)
        return INPLACE if plan is not None else RELAUNCH

    def _read_arrivals(self, run: JobRun) -> None:
        """Tells the job's machine which of its newcomers have announced themselves in the store."""
        for node in self.workers.read_arrivals(run):
            run.machine.arrived(node)

    def _carry_out(self, run: JobRun, plan: Plan) -> None:
        """An in-place resize: newcomers started (they announce themselves; the members train on), and
        if the plan publishes (a shrink, or the switch once every newcomer has arrived), the
        configuration published and the members' process rows carried over to the new generation; the
        leavers exit at their next step boundary (a newcomer dismissed is killed: ``_reap``)."""
        if not plan.publish:
            if plan.start:
                self.files.log_line(run.id, f"=== starting {', '.join(plan.start)} in place: generation "
                                            f"{run.row.generation} trains on until they have arrived ===")
                self.store.log_event("newcomers_starting", job=run.id, generation=run.row.generation,
                                     nodes=plan.start)
            self.launch_agents(run, plan.start, joining=True)
            return
        row = run.row
        row.generation = plan.generation
        self.store.update_job(row.id, generation=row.generation)
        try:
            self.workers.configurations.publish(row.id, row.generation, plan.members, row.procs_per_node,
                                                regroup=plan.regroup)
        except Exception as e:  # noqa: BLE001 - the store is unreachable: relaunch instead
            run.machine.not_started(plan.start, f"rendezvous store: {e}", time.monotonic())
            self.store.log_event("inplace_failed", job=row.id, generation=row.generation, error=str(e))
            return
        with self.store.transaction():
            for node in plan.carried:  # the same processes, now of the new generation
                agent = run.node_procs[node]
                for k, (old, pid) in enumerate(zip(agent.rows, agent.pids)):
                    self.store.end_proc(old, None)
                    agent.rows[k] = self.store.add_proc(row.id, row.generation, node, k)
                    self.store.set_proc_pid(agent.rows[k], pid)
                agent.generation = row.generation
        self.files.log_line(row.id, f"=== generation {row.generation} in place: {len(plan.members)} nodes "
                                    f"({', '.join(plan.members)}); joining {', '.join(plan.joined) or 'none'}, "
                                    f"leaving {', '.join(plan.left) or 'none'} ===")
        self.store.log_event("resize_inplace", job=row.id, generation=row.generation, nodes=plan.members,
                             joined=plan.joined, left=plan.left)
        if plan.start:
            self.store.log_event("newcomers_starting", job=run.id, generation=row.generation, nodes=plan.start)
        self.launch_agents(run, plan.start, joining=True)

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
            rest = [n for n in run.target if n not in self.draining]
            how = method(run.method)
            if (how.in_place or how.regroups) and self._holders is not None:
                # Summit takes many nodes in the same second: one generation for all of the batch's.
                self._shrinks.setdefault(run.id, (run, []))[1].append(node)
            elif how.in_place or how.regroups:
                self._shrink_now(run, [node])
            else:
                m.stop(Stop.RESIZE if rest else Stop.PREEMPTED, now)
                self._terminate_stopping(run)

    def _shrink_now(self, run: JobRun, reclaimed: List[str]) -> None:
        """Shrinks a job off its reclaimed nodes at once, not at the next decision: they must be free
        within their grace time."""
        if run.id not in self.active_runs:
            return
        self.apply(run, [n for n in run.target if n not in self.draining], run.row.configuration)
        for node in reclaimed:
            run.machine.hurry(node, time.monotonic() + self.checkpoint_grace_s)

    def keeper_restarted(self) -> None:
        """A new keeper replaced a lost one: every in-place job that runs re-forms in place in its store
        (the same members as a new generation; the workers reconnect and keep their state)."""
        now = time.monotonic()
        for run in list(self.active_runs.values()):
            self.heartbeats.forget(run.id)  # written into the new store once each worker has reconnected
            plan = run.machine.reform(now) if method(run.method).in_place else None
            if plan is not None:
                gaps.resize_begins(run, self.store, in_place=True)
                self._carry_out(run, plan)

    def stop_run(self, run: JobRun, reason: Stop) -> None:
        """Stops every worker of a job (cancel, shutdown); the user's reason overrides a resize's."""
        run.machine.stop(reason, time.monotonic())
        self._terminate_stopping(run)

    def _terminate_stopping(self, run: JobRun) -> None:
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
        row.generation += 1
        row.started_s = row.started_s or time.time()
        row.state = JobState.RUNNING
        self.store.update_job(row.id, generation=row.generation, state=JobState.RUNNING, started_s=row.started_s)
        run.launched_at = time.monotonic()
        gaps.generation_starts(run)
        intake.generation_starts(run)
        self.files.log_line(row.id, f"=== generation {row.generation}: {len(run.target)} nodes "
                                    f"({', '.join(run.target)}), resize method {run.method} ===")
        self.store.log_event("launch", job=row.id, generation=row.generation, nodes=list(run.target),
                             configuration=row.configuration)
        self.book.configuration_starts(run, row.configuration)
        self.book.launched(run, len(run.target))  # a start, or a relaunch (a failed in-place resize's too)
        run.machine.start(run.target, row.generation)
        if method(run.method).in_place:
            try:
                self.workers.configurations.publish(row.id, row.generation, run.target, row.procs_per_node)
            except Exception as e:  # noqa: BLE001 - its workers could not start: a launch failure
                if self.workers.keeper_alive():
                    self.store.log_event("launch_failed", job=row.id, error=f"rendezvous store: {e}")
                    for node in list(run.target):
                        run.machine.launch_failed(node, time.monotonic(), f"rendezvous store: {e}")
                    return
                # Unless the keeper died meanwhile: its successor gets the generation (keeper_restarted
                # re-forms it), and the workers start and wait for it there.
        self.launch_agents(run, run.target)

    def launch_agents(self, run: JobRun, nodes: List[str], joining: bool = False) -> None:
        """Starts the job's workers on `nodes` (the machine knows them already); a node where none could
        start is a launch failure for the machine. `joining`: newcomers of an in-place grow."""
        if not nodes:
            return
        for node, error in self.workers.start(run, nodes, joining=joining).items():
            run.machine.launch_failed(node, time.monotonic(), error)
        self._terminate_stopping(run)

    def adopt(self, run: JobRun, procs: List[Any]) -> bool:
        """Takes over the agents a previous manager started for a running job (its keeper kept their
        store): they train on, nothing is relaunched. `procs` are the job's open process rows; True
        if every one of its current generation was found alive and adopted."""
        row = run.row
        how = method(run.method)
        agents = self.workers.find_again(run, procs)
        if not agents or any(a.poll() is not None for a in agents.values()):
            return False
        members = sorted(agents)
        if how.in_place:
            try:
                members = self.workers.configurations.members(row.id, row.generation) or members
            except Exception:  # noqa: BLE001 - the keeper lost its store: relaunch instead of adopting
                return False
            if not set(members) <= set(agents):  # a member's worker is gone: relaunch
                return False
        # In place, the others are a grow's newcomers on their way (their process rows are their tickets).
        newcomers = sorted(n for n in agents if n not in members)
        self.workers.adopted(run, agents)
        run.target = list(members) + newcomers
        run.machine.adopt(members, row.generation, newcomers, time.monotonic())
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
            if m.phase is Phase.RESIZING:
                self._check_newcomers(run, now)
            if m.phase in (Phase.STEADY, Phase.RESIZING) and len(run.node_procs) > 1 \
                    and self.heartbeats.due(run.id, now) and method(run.method).in_place:
                self._check_heartbeats(run, now)
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
            self.workers.exited(run, node)
            for row_id in agent.rows:
                self.store.end_proc(row_id, code)
            was_leaving, judged = m.blocked(node), how.judge(code)
            if not was_leaving and code != 0:
                if not how.runs_script:  # a torchrun agent: its failed worker's own status, from its report
                    code = worker_exit_code(self.files.output_tail(run.id)) or code
                self.store.log_event("worker_exited", job=run.id, node=node, exit_code=code,
                                     generation=agent.generation, judged=judged.value)
            lost = m.lost
            plan = m.exited(node, judged, code=code, now=now, in_place=how.in_place)
            if m.lost is not lost:
                self._drop_lost(run, node, code)
            if plan is not None:
                self._follow(run, plan)
            vacated = vacated or (was_leaving and node in run.target)
        self._terminate_stopping(run)
        if vacated and m.phase in (Phase.STEADY, Phase.RESIZING) and how.in_place:
            # A node of its target was still being vacated by its own leaver: it joins now.
            self._resize(run, switch=False)

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
            run.target = list(run.machine.target)
            self.mark_dirty(time.monotonic())

    def _follow(self, run: JobRun, plan: Plan) -> None:
        """Carries out a plan the machine made on its own (a lost worker dropped, a newcomer gone, the
        switch once every newcomer has arrived). A published one ends a gap the intake measures (from
        the members' last step before it); one that drops a member is a rescale nobody decided, which
        the advisor hears of (a switch is the rescale its decision began)."""
        run.target = list(run.machine.target)
        if plan.publish:
            gaps.resize_begins(run, self.store, in_place=True)
        self._carry_out(run, plan)
        if plan.publish and plan.left:
            self.book.rescale_begins(run, len(run.target), method=INPLACE)

    def _check_newcomers(self, run: JobRun, now: float) -> None:
        """Newcomers that announced themselves (read from the store): once none is on its way, the
        switch is published. One past its deadline that has not is dismissed (or fails the resize)."""
        m = run.machine
        if m.pending:
            self._read_arrivals(run)
        for node in m.overdue(now):
            generation = m.workers[node].generation
            plan = m.not_joined(node, now)
            if m.phase is Phase.STOPPING:
                self.store.log_event("inplace_failed", job=run.id, node=node, generation=generation,
                                     error=f"not joined within {self.inplace_timeout_s:g} s")
                continue
            self.store.log_event("newcomer_dismissed", job=run.id, node=node, generation=generation,
                                 error=f"not joined within {self.inplace_timeout_s:g} s")
            self.rest(node, now)
            if plan is not None:
                self._follow(run, plan)
            self.mark_dirty(now)
        plan = m.switch(now)
        if plan is not None:
            self._follow(run, plan)
        self._terminate_stopping(run)

    def _check_heartbeats(self, run: JobRun, now: float) -> None:
        """A worker hung (its heartbeats say so: :mod:`.heartbeats`) is killed at the next pass and its
        exit answered as a lost worker's; its node rests."""
        beats = self.workers.read_beats(run)
        if beats is None:
            self.heartbeats.forget(run.id)
            return
        for node, bound_s in self.heartbeats.hung(run.id, beats, now).items():
            if run.machine.hung(node):
                self.store.log_event("worker_hung", job=run.id, node=node, bound_s=round(bound_s, 2))
                self.files.log_line(run.id, f"=== the worker on {node} is hung (no heartbeat or no progress for "
                                            f"{bound_s:.1f} s): killed ===")
                self.rest(node, now)

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
            row.retries = m.retries
            self.store.update_job(row.id, retries=row.retries)
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
        run.target = []
        del self.active_runs[row.id]
        self.heartbeats.forget(row.id)
        self.book.forget(run)
        self.workers.forget(row.id)
        self.mark_dirty(time.monotonic())
