"""A job's resize as one explicit state machine, the only owner of where a resize stands.

The machine is pure: it starts and signals no process, opens no socket and reads no clock (it keeps
each worker's processes, the lifecycle's handle, only so that one map says what runs where). The lifecycle tells
it what happened (a decision, a newcomer's arrival, a worker's exit, the time) and carries out its
answer (start these nodes, let those go, kill that one, relaunch, end the job). Being pure, it is
driven through random orders of events by a stateful property test (tests/python/
test_resize_machine.py), which checks its invariants after every step.

Phases (``Phase``)::

    IDLE ──start──▶ STEADY ──resize in place──▶ RESIZING ──switched, leavers gone──▶ STEADY
      ▲               │  ▲                         │
      │               │  └──── newest target wins ─┤ (a second resize while one is under way)
      │             stop (a relaunch, a failure, a reclaim of everything, cancel, shutdown, done)
      │               ▼                            ▼
      ├────────── STOPPING ◀───────────────────────┘
      │               │ last worker gone: the outcome (``Outcome``)
      ├─ relaunch ────┤
      │               ├── a counted failure ──▶ BACKOFF ──deadline──▶ IDLE
      └───────────────┴── finished, failed, cancelled ──▶ ENDED

In place, a grow first *starts* its newcomers and publishes nothing: the members train on in their
generation while each newcomer starts, connects and announces itself (``arrived``); only once none
is on its way does the machine publish the switch (``switch``: a generation with them). A shrink publishes at
once, taking along the newcomers that have arrived; those still on its way join later. A newcomer
dismissed or lost before the switch publishes nothing (the published generation never held it).

Every phase but IDLE and ENDED has a deadline after which ``tick`` acts: a newcomer that has not
arrived by its deadline is dismissed (or, without survivors, fails the in-place resize); a worker
asked to leave is killed at its kill time; a back-off ends. In place, a worker
lost while its generation runs (crashed, killed, or found hung and killed) is dropped from a new
generation, a shrink, not a failure (``exited``), unless another one fails the same way; a lost
keeper's jobs re-form in the new store (``reform``); healthy training forgives counted failures.
The verdict on a generation that ended, and the counting of failures, are the machine's part in
:mod:`.verdicts`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple

from .states import USER_STOPS, Exit, Failure, Outcome, Phase, Plan, Stop, Worker
from .verdicts import FORGIVE_AFTER_S, Verdicts

# A crash that follows a membership change by less than this is the change's failure (a peer that
# went away mid-collective), not the script's: judged as an in-place failure, not a crash.
RESIZE_BLAST_S = 5.0
# Extra time a stopped worker has beyond the grace time before it is killed (torchrun's own shutdown).
KILL_MARGIN_S = 10.0


@dataclass
class Machine(Verdicts):
    """One job's resize. `checkpoint_grace_s`: a stopped worker's time to checkpoint; `join_timeout_s`: an in-place
    newcomer's time to arrive; `max_retries`: counted failures before the job fails."""

    checkpoint_grace_s: float
    join_timeout_s: float
    max_retries: int
    retries: int = 0  # counted failures so far (the job row's)
    forgive_after_s: float = FORGIVE_AFTER_S  # healthy training that forgives one counted failure
    min_nodes: int = 1  # the job's --min: survivors fewer than that cannot train on alone
    phase: Phase = Phase.IDLE
    generation: int = 0
    members: List[str] = field(default_factory=list)  # the generation's nodes, rank order
    target: List[str] = field(default_factory=list)  # the nodes the allocator gave the job
    workers: Dict[str, Worker] = field(default_factory=dict)  # node -> a worker process that runs
    reason: Optional[Stop] = None  # why the generation is stopping (STOPPING)
    deadline: Optional[float] = None  # BACKOFF: when it may start again
    failure: Optional[Failure] = None
    completed: bool = False  # a worker exited 0
    disturbed: bool = False  # a node of this generation was reclaimed: its failures are not the script's
    reported: bool = False  # the generation has sent a progress report: it made progress
    resized_at: Optional[float] = None  # the last in-place membership change
    last_outcome: Optional[Outcome] = None
    last_failure: Optional[Failure] = None  # the failure the last verdict judged
    last_reason: str = ""  # a person's words for the last stop or failure (never empty once stopped)
    lost: Optional[Failure] = None  # the last worker lost and dropped in place (a shrink), until forgiven
    healthy_s: float = 0.0  # training time (between reports) since the last counted failure or forgiveness
    forgiven: int = 0  # counted failures forgiven so far
    progress_at: Optional[float] = None  # the last report of the running generation (None between them)

    # -- what it holds ----------------------------------------------------------------------------

    @property
    def live(self) -> List[str]:
        """Nodes whose worker is not leaving."""
        return [n for n, w in self.workers.items() if not w.leaving]

    @property
    def pending(self) -> List[str]:
        """Newcomers on their way: started, not yet arrived."""
        return [n for n, w in self.workers.items() if w.joins_by is not None and not w.leaving]

    @property
    def training(self) -> List[str]:
        """Nodes whose worker trains now: not leaving, not a newcomer on its way (live, not pending)."""
        return [n for n, w in self.workers.items() if not w.leaving and w.joins_by is None]

    @property
    def ready(self) -> List[str]:
        """Newcomers that have arrived and wait for the switch (not yet members of a published generation)."""
        return [n for n, w in self.workers.items() if w.joins_by is None and not w.leaving and n not in self.members]

    @property
    def running(self) -> bool:
        return self.phase in (Phase.STEADY, Phase.RESIZING, Phase.STOPPING)

    @property
    def processes(self) -> Dict[str, Any]:
        """node -> the processes started for its worker (those not started yet, or reaped, are not here)."""
        return {n: w.procs for n, w in self.workers.items() if w.procs is not None}

    def attach(self, node: str, procs: Any) -> None:
        """The worker on `node` was started (or found again) as `procs`, or was reaped (None). The
        machine keeps them with the worker and never reads them."""
        self.workers[node].procs = procs

    def blocked(self, node: str) -> bool:
        """A node still vacated by a worker of this job that is leaving."""
        w = self.workers.get(node)
        return w is not None and w.leaving

    # -- a generation starts ----------------------------------------------------------------------

    def start(self, nodes: List[str], generation: int) -> None:
        """A new generation (a first start or a relaunch) on `nodes`: every worker is new."""
        if self.phase not in (Phase.IDLE, Phase.BACKOFF) or self.workers:
            raise RuntimeError(f"start in phase {self.phase.value} with {len(self.workers)} workers")
        self.phase, self.generation = Phase.STEADY, generation
        self.members, self.target = list(nodes), list(nodes)
        self.workers = {n: Worker(n, generation) for n in nodes}
        self.reason, self.deadline, self.failure = None, None, None
        self.completed = self.disturbed = self.reported = False
        self.resized_at = self.progress_at = None

    def adopt(self, members: List[str], generation: int, newcomers: List[str] = (), now: float = 0.0) -> None:
        """A restarted manager took over a running generation (its workers trained on) and the newcomers
        of a grow that were on their way (started, not yet published): they get a new deadline."""
        self.start(members, generation)
        for n in newcomers:
            self.workers[n] = Worker(n, generation, joins_by=now + self.join_timeout_s)
            self.target.append(n)
        if newcomers:
            self.phase = Phase.RESIZING

    def launch_failed(self, node: str, at: float, detail: str) -> None:
        """The worker for `node` could not be started at all."""
        self.workers.pop(node, None)
        self._fail(Failure(Exit.CRASHED, node, at, None, detail), at)

    def not_started(self, nodes: List[str], detail: str, at: float) -> None:
        """The newcomers on `nodes` of an in-place resize could not be started (the store is unreachable):
        the resize fails, not the script."""
        for node in nodes:
            self.workers.pop(node, None)
        self._fail(Failure(Exit.INPLACE_FAILED, nodes[0] if nodes else "", at, None, detail), at)

    # -- decisions --------------------------------------------------------------------------------

    def place(self, target: List[str]) -> None:
        """The allocator gave the job `target` (none: it is queued again or ended): kept as the nodes a
        start uses, and those a decision's resize (``resize``, ``regroup``) moves the generation to."""
        self.target = list(target)

    def resize(self, target: List[str], now: float, in_place: bool) -> Optional[Plan]:
        """The allocator moved the job to `target`; the newest target wins, whatever is under way.
        Returns the in-place plan to carry out, or None: nothing to do now, or the generation is
        being stopped for a relaunch (STOPPING) or was not running (the target is kept for the next
        start). `in_place`: the method resizes in place and the configuration is unchanged.

        In place, newcomers are started, not published: the members train on until every newcomer
        has arrived (then ``switch`` publishes them). Members that leave are dropped from a
        generation published at once (a shrink waits for nothing), with the newcomers that have
        arrived; a newcomer no longer wanted is dismissed, killed at once: it holds nothing and no
        published generation has it, so the members never see it go."""
        self.target = list(target)
        if self.phase not in (Phase.STEADY, Phase.RESIZING):
            return None
        if not target:
            self.stop(Stop.PREEMPTED, now)
            return None
        if not in_place:
            self.stop(Stop.RESIZE, now)
            return None
        holders = self._holders(target)
        if not holders:  # no survivor holds the state: a relaunch from the checkpoint
            self.stop(Stop.RESIZE, now)
            return None
        new = sorted(n for n in target if n not in self.workers)  # (a node still being vacated waits)
        leave = [n for n in self.live if n not in target]  # leavers, and newcomers no longer wanted
        for n in new:
            self.workers[n] = Worker(n, self.generation, joins_by=now + self.join_timeout_s)
        for n in leave:  # a newcomer (not a member) holds nothing: killed at once
            self._let_go(n, now if n not in self.members else now + self.join_timeout_s + self.checkpoint_grace_s)
        members = holders + [n for n in self.ready if n in target]
        shrink = any(n not in holders for n in self.members)  # a member leaves, or is gone (lost)
        if shrink or (members != self.members and not self.pending):
            plan = self._publish(members, now)
            plan.start, plan.leave = new, leave
        elif new or leave:
            self.phase = Phase.RESIZING
            plan = Plan(self.generation, list(self.members), new, [], leave, publish=False)
        else:
            return None
        self._settle()
        return plan

    def _publish(self, members: List[str], now: float) -> Plan:
        """A new generation of `members` (the holders first, rank 0 among them, then arrived newcomers),
        every one of them a worker that runs and holds the state or has arrived."""
        joined = [n for n in members if n not in self.members]
        left = [n for n in self.members if n not in members]
        self.generation += 1
        self.members = list(members)
        for w in self.workers.values():
            if not w.leaving:
                w.generation = self.generation
        self.phase = Phase.RESIZING
        self.disturbed = False  # a reclaim that led here has been answered
        self.resized_at = now
        return Plan(self.generation, list(members), [], list(members), [], joined=joined, left=left)

    def reform(self, now: float) -> Optional[Plan]:
        """The keeper was lost and a new one took its place: the store that held the generation's
        configuration and its group's rendezvous is gone. The same members are published as a new
        generation in the new store, where they re-form their group (those that hold the state keep
        it); every newcomer is on its way again, with a new deadline: it announces itself anew."""
        if self.phase not in (Phase.STEADY, Phase.RESIZING):
            return None
        self.generation += 1
        self.members = [n for n in self.members if n in self.live]
        for n, w in self.workers.items():
            if not w.leaving:
                w.generation = self.generation
            if n not in self.members and not w.leaving:  # a newcomer announces itself again, in the new store
                w.joins_by = now + self.join_timeout_s
        self.phase, self.resized_at = Phase.RESIZING, now
        self._settle()
        return Plan(self.generation, list(self.members), [], list(self.members), [], regroup=True)

    def regroup(self, target: List[str], now: float) -> Tuple[List[str], List[str]]:
        """A membership resize (torchrun's node range): the leavers' workers stop, newcomers start in the
        same generation and torchrun re-forms the group. Returns (leave, start)."""
        self.target = list(target)
        if self.phase not in (Phase.STEADY, Phase.RESIZING):
            return [], []
        leave = [n for n in self.live if n not in target]
        start = sorted(n for n in target if n not in self.workers)
        for n in leave:
            self._let_go(n, now + self.checkpoint_grace_s + KILL_MARGIN_S)
        for n in start:
            self.workers[n] = Worker(n, self.generation)
        self.members = [n for n in self.members if n not in leave] + start
        self.disturbed = False
        return leave, start

    def hurry(self, node: str, kill_at: float) -> None:
        """The leaver on `node` must be gone by `kill_at` (its node was reclaimed)."""
        if self.blocked(node):
            self._let_go(node, kill_at)

    def stop(self, reason: Stop, now: float) -> None:
        """Stops every worker of the generation (they checkpoint on SIGTERM); killed after the grace time."""
        if self.phase in (Phase.IDLE, Phase.BACKOFF, Phase.ENDED):
            if reason in USER_STOPS:
                self.reason = reason
            return
        if self.reason is None or (reason in USER_STOPS and self.reason not in USER_STOPS):
            self.reason = reason
        self.phase, self.progress_at = Phase.STOPPING, None
        for n in self.live:
            self._let_go(n, now + self.checkpoint_grace_s + KILL_MARGIN_S)

    def reclaimed(self, node: str) -> None:
        """The batch scheduler takes `node`: a failure of this generation is no longer the script's."""
        if node in self.workers or node in self.members or node in self.target:
            self.disturbed = True
        if self.failure is not None and self.failure.node == node:
            self.disturbed = True

    # -- what the workers do ----------------------------------------------------------------------

    def arrived(self, node: str) -> None:
        """The newcomer on `node` has started and announced itself (the lifecycle read it in the store):
        it waits for the switch (``switch``)."""
        w = self.workers.get(node)
        if w is not None and w.joins_by is not None and not w.leaving:
            w.joins_by = None

    def switch(self, now: float) -> Optional[Plan]:
        """Once no newcomer is on its way, the plan that publishes a generation with every arrived one
        (the members change group at their next step boundary); None before that, or with none."""
        if self.phase is not Phase.RESIZING or self.pending or not self.ready:
            return None
        holders = self._holders(self.target)
        if not holders:
            return None
        plan = self._publish(holders + [n for n in self.ready if n in self.target], now)
        self._settle()
        return plan

    def exited(self, node: str, kind: Exit, *, code: Optional[int], now: float,
               in_place: bool = False) -> Optional[Plan]:
        """The worker on `node` exited; `kind` is the method's reading of `code`, `in_place` whether the
        method resizes in place. Returns the in-place plan that drops a lost worker (a shrink: its
        survivors train on from their own state), or None."""
        w = self.workers.pop(node, None)
        if w is None:
            return None
        plan = None
        if kind is Exit.DONE:
            self.completed = True
            self.stop(Stop.DONE, now)  # a newcomer still on its way has nothing left to join
        elif w.leaving:
            if self.reason in (Stop.FAILED, Stop.INPLACE_FAILED) and _killed_by_others(kind, code, w, now):
                # Its peers' failures (reaped first) were its death's consequence: the crash is the cause.
                self._fail(Failure(Exit.CRASHED, node, now, code), now)
        elif in_place and kind is not Exit.CRASHED and node not in self.members and self.phase is Phase.RESIZING:
            # A newcomer gone before the switch (its node's SIGTERM came first, or it could not connect):
            # no published generation held it, the members go on; a node given back starts a new one.
            plan = self.resize([n for n in self.target if n != node], now, in_place=True)
        elif kind is Exit.LEFT:
            # Stopped by someone else's word before ours (the batch scheduler's SIGTERM on a reclaimed
            # node): a departure, not a failure; the others cannot go on without it.
            self.disturbed = True
            self.stop(Stop.PREEMPTED if node not in self.target else Stop.RESIZE, now)
        elif self._is_loss(kind, code, in_place):
            loss = Failure(kind, node, now, code)
            if len(self._holders(self.target)) >= self.min_nodes:
                plan = self._drop(node, loss, now)
            else:  # too few to train on: a relaunch on its nodes, charged as a resize all the same
                self.lost = loss
                self.stop(Stop.RESIZE, now)
        else:
            if kind is Exit.CRASHED and self._same_way(code):
                pass  # a worker failed as the lost one did: the script's failure, counted
            elif kind is Exit.CRASHED and self.resized_at is not None and now - self.resized_at < RESIZE_BLAST_S:
                kind = Exit.INPLACE_FAILED  # a peer lost mid-collective by the membership change
            self._fail(Failure(kind, node, now, code), now)
        self._settle()
        return plan

    def _is_loss(self, kind: Exit, code: Optional[int], in_place: bool) -> bool:
        """A crash that loses only its worker (a shrink, or a relaunch below the job's --min; never a
        counted failure): in place, while the generation runs, with a survivor that holds the state,
        unless the job already lost a worker the same way (then it is the script's)."""
        return (in_place and kind is Exit.CRASHED and self.phase in (Phase.STEADY, Phase.RESIZING)
                and not self._same_way(code) and bool(self._holders(self.target)))

    def _same_way(self, code: Optional[int]) -> bool:
        return self.lost is not None and self.lost.code == code

    def _drop(self, node: str, loss: Failure, now: float) -> Optional[Plan]:
        """A lost worker (dead, killed, or hung and killed): the next generation is the survivors
        (with the newcomers still wanted); the allocator may give the job its node or another later."""
        self.lost = loss
        return self.resize([n for n in self.target if n != node], now, in_place=True)

    def hung(self, node: str) -> bool:
        """The worker on `node` made no progress for too long (the lifecycle's heartbeat): it is to be
        killed at once (``to_kill``), and its exit is answered as any crash's: a loss, in place. True
        if it was not known hung before."""
        w = self.workers.get(node)
        if w is None or w.leaving or w.hung:
            return False
        w.hung = True
        return True

    def overdue(self, now: float) -> List[str]:
        """Newcomers past their generation's deadline: the lifecycle checks the store for each (an
        arrival it has not read yet) and calls `arrived` or `not_joined`."""
        return [n for n, w in self.workers.items() if w.joins_by is not None and not w.leaving and now >= w.joins_by]

    def not_joined(self, node: str, now: float) -> Optional[Plan]:
        """The newcomer on `node` did not arrive by its deadline. With survivors that hold the state it
        is dismissed (killed at once) and the members go on without it: no published generation ever
        held it, so it costs them nothing (the plan publishes nothing, unless the others on their way
        have all arrived: their switch). Without survivors the resize fails. Returns the plan, or None."""
        w = self.workers.get(node)
        if w is None or w.joins_by is None or w.leaving:
            return None
        if len(self._holders(self.target)) >= self.min_nodes:
            plan = self.resize([n for n in self.target if n != node], now, in_place=True)
            self._let_go(node, now)
            return plan
        self._fail(Failure(Exit.INPLACE_FAILED, node, now, None,
                           f"{node} not joined generation {w.generation} within {self.join_timeout_s:g} s"), now)
        return None

    def to_kill(self, now: float) -> List[str]:
        """Workers asked to leave that still run past their kill time, and hung ones."""
        return [n for n, w in self.workers.items()
                if w.hung or (w.leaving and w.kill_at is not None and now >= w.kill_at)]

    # -- internals --------------------------------------------------------------------------------

    def _holders(self, target: List[str]) -> List[str]:
        """Members of `target` whose worker runs, stays, and holds the state (not a newcomer on its way)."""
        return [n for n in self.members if n in target and n in self.live and self.workers[n].joins_by is None]

    def _let_go(self, node: str, kill_at: float) -> None:
        w = self.workers[node]
        w.leaving, w.joins_by = True, None
        w.kill_at = kill_at if w.kill_at is None else min(w.kill_at, kill_at)

    def _fail(self, failure: Failure, now: float) -> None:
        if self.failure is None or (failure.kind is Exit.CRASHED and self.failure.kind is not Exit.CRASHED):
            self.failure = failure  # a crash outweighs the in-place failures it caused in its peers
        self.stop(Stop.FAILED if failure.kind is Exit.CRASHED else Stop.INPLACE_FAILED, now)

    def _settle(self) -> None:
        if self.phase is Phase.RESIZING and not self.pending and not self.ready \
                and all(not w.leaving for w in self.workers.values()):
            self.phase = Phase.STEADY



def _killed_by_others(kind: Exit, code: Optional[int], worker: Worker, now: float) -> bool:
    """A worker ended by a signal the manager did not send (not its SIGTERM, not yet its SIGKILL)."""
    return (kind is Exit.CRASHED and code is not None and code < 0 and code != -15
            and (worker.kill_at is None or now < worker.kill_at))
