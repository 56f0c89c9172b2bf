"""The resize state machine (bft.runtime.jobs.resize.machine) driven through random orders of events.

A hypothesis rule-based machine plays a small cluster around one job: decisions (grow, shrink, a
new configuration), reclaims, newcomers arriving or hanging, workers exiting with 0, 75, 76, a
crash or a kill, progress reports, the clock, a manager restart, the keeper lost, cancel and
shutdown. After every step it checks the invariants the lifecycle relies on; the examples below
pin the sequences of the issue's repros.
"""

from __future__ import annotations

import pytest

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule  # noqa: E402

from bft.runtime.jobs.resize import Exit, Machine, Outcome, Phase, Stop, method  # noqa: E402
from bft.runtime.jobs.resize.machine import KILL_MARGIN_S, RESIZE_BLAST_S  # noqa: E402
from bft.runtime.jobs.resize.verdicts import (  # noqa: E402
    BACKOFF_MAX_S,
    FAILURE_SETTLE_S,
    FORGIVE_AFTER_S,
    HEALTHY_GAP_S,
)
from bft.train import EXIT_INPLACE_FAILED, EXIT_RESIZE  # noqa: E402

NODES = ["n0", "n1", "n2", "n3", "n4"]
GRACE_S, JOIN_S, MAX_RETRIES = 3.0, 4.0, 2
INPLACE = method("inplace")
CODES = [0, EXIT_RESIZE, EXIT_INPLACE_FAILED, 1, -9]


FORGIVE_S = 20.0  # healthy training that forgives a counted failure (an hour in the manager)


def new_machine(retries: int = 0) -> Machine:
    return Machine(GRACE_S, JOIN_S, MAX_RETRIES, retries, forgive_after_s=FORGIVE_S)


class ResizeWorld(RuleBasedStateMachine):
    """One job on five nodes; `procs` are the worker processes that really run (node -> generation
    they were started for), which the machine must believe in exactly."""

    def __init__(self):
        super().__init__()
        self.m = new_machine()
        self.now = 0.0
        self.procs = {}
        self.pool = set(NODES)
        self.generation = 0  # the job row's
        self.outcomes = []
        self.crash_counts = False  # a crash the verdict must count (undisturbed, not after a resize)
        self.retries_seen = 0
        self.forgiven_seen = 0

    # -- the cluster's events ---------------------------------------------------------------------

    @rule(nodes=st.sets(st.sampled_from(NODES), max_size=5), switch=st.integers(0, 3))
    def decide(self, nodes, switch):
        """A decision; one in four switches the configuration (a restart whatever the method)."""
        target = sorted(n for n in nodes if n in self.pool)
        generation = self.m.generation
        plan = self.m.resize(target, self.now, in_place=switch != 0)
        if plan is not None:
            self.generation = plan.generation
            assert plan.members[0] not in plan.start, "rank 0 of an in-place generation holds the state"
            assert plan.publish or self.m.generation == generation, "a generation published without a switch"
            for n in plan.start:
                assert n not in self.procs, f"a second worker started on {n}"
                self.procs[n] = plan.generation
            self.crash_counts = False
        if switch and self.m.phase in (Phase.STEADY, Phase.RESIZING):
            # A shrink waits for nothing: the published generation is within the target at once.
            assert set(self.m.members) <= set(target), (self.m.members, target)
        self.start()

    # Decisions come as often as every other event put together (three rules of the same body).
    grow_or_shrink = decide
    another_decision = decide

    @rule()
    def start(self):
        """launch_ready: a job that may start does, on the nodes of its target that are idle and free."""
        nodes = [n for n in self.m.target if n in self.pool and n not in self.procs]
        if nodes and self.m.may_start(self.now):
            self.generation += 1
            self.m.start(nodes, self.generation)
            for n in nodes:
                self.procs[n] = self.generation

    @rule(node=st.sampled_from(NODES))
    def reclaim(self, node):
        self.pool.discard(node)
        self.m.reclaimed(node)
        self.crash_counts = False
        if node in self.m.workers and not self.m.blocked(node):
            rest = [n for n in self.m.target if n in self.pool]
            plan = self.m.resize(rest, self.now, in_place=True)
            if plan is not None:
                self.generation = plan.generation
                for n in plan.start:
                    self.procs[n] = plan.generation
            self.m.hurry(node, self.now + GRACE_S)

    @rule(node=st.sampled_from(NODES))
    def join(self, node):
        self.pool.add(node)

    @rule(data=st.data())
    def newcomer_arrives(self, data):
        """A newcomer announces itself; the lifecycle then asks for the switch (on every pass)."""
        pending = self.m.pending
        if pending:
            node = data.draw(st.sampled_from(pending))
            members = list(self.m.members)
            self.m.arrived(node)
            plan = self.m.switch(self.now)
            if plan is not None:  # the last one on its way arrived: one switch with every arrived newcomer
                assert plan.publish and not plan.start and not self.m.pending
                assert plan.members[:len([n for n in members if n in plan.members])] == \
                    [n for n in members if n in plan.members], "the members keep their ranks, first"
                assert node in plan.members
                self.apply(plan)
            else:
                assert self.m.members == members, "a switch published while a newcomer is on its way"

    @rule(data=st.data(), code=st.sampled_from(CODES))
    def worker_exits(self, data, code):
        if not self.procs:
            return
        node = data.draw(st.sampled_from(sorted(self.procs)))
        leaving = self.m.blocked(node)
        judged = INPLACE.judge(code)
        if judged is Exit.CRASHED and not leaving and not self.m.disturbed and self.m.failure is None \
                and self.m.phase is Phase.STEADY and (self.m.resized_at is None
                                                      or self.now - self.m.resized_at >= RESIZE_BLAST_S):
            self.crash_counts = True
        del self.procs[node]
        newcomer = node not in self.m.members
        generation = self.m.generation
        plan = self.m.exited(node, judged, code=code, now=self.now, in_place=True)
        if plan is not None:  # a lost worker or a newcomer gone before the switch: the survivors train on
            assert judged is Exit.CRASHED or newcomer
            assert node not in plan.members and plan.members[0] not in plan.start
            assert self.m.phase in (Phase.RESIZING, Phase.STEADY) and self.m.failure is None
            if newcomer:  # no published generation held it: it costs the members no generation
                assert not plan.publish or not self.m.pending, plan
                assert plan.publish or self.m.generation == generation
            self.crash_counts = False
            self.apply(plan)

    @rule(data=st.data())
    def worker_hangs(self, data):
        """The lifecycle's heartbeat found a worker that made no progress: killed at the next pass."""
        running = sorted(n for n in self.procs if not self.m.blocked(n) and not self.m.workers[n].hung)
        if running:
            node = data.draw(st.sampled_from(running))
            assert self.m.hung(node) and node in self.m.to_kill(self.now)
            assert not self.m.hung(node)  # once

    def apply(self, plan):
        self.generation = plan.generation
        for n in plan.start:
            assert n not in self.procs, f"a second worker started on {n}"
            self.procs[n] = plan.generation

    @rule()
    def leavers_exit(self):
        """Workers asked to go do so at their next step boundary (EXIT_RESIZE)."""
        for node in [n for n in sorted(self.procs) if self.m.blocked(n)]:
            del self.procs[node]
            self.m.exited(node, INPLACE.judge(EXIT_RESIZE), code=EXIT_RESIZE, now=self.now)

    @rule()
    def report(self):
        if self.m.running:
            self.m.progress(self.m.generation, self.now)

    @rule(dt=st.sampled_from([0.05, 0.5, 2.0, 5.0, 30.0]))
    def time_passes(self, dt):
        self.now += dt
        self.tick()
        self.judge()

    @rule(reason=st.sampled_from([Stop.CANCEL, Stop.SHUTDOWN]), rare=st.integers(0, 9))
    def user_stops(self, reason, rare):
        if rare:
            return  # (one draw in ten: the job lives long enough for the other rules to matter)
        self.m.stop(reason, self.now)
        if reason is Stop.CANCEL and not self.m.workers and self.m.phase is not Phase.ENDED:
            self.m.phase = Phase.ENDED  # the lifecycle ends a job with no workers at once

    @rule(rare=st.integers(0, 3))
    def keeper_lost(self, rare):
        if rare:
            return
        # In-place workers lose their store: every one of them fails its next phase with 76.
        for node in sorted(self.procs):
            del self.procs[node]
            self.m.exited(node, Exit.INPLACE_FAILED, code=EXIT_INPLACE_FAILED, now=self.now)

    @rule(all_alive=st.booleans())
    def manager_restarts(self, all_alive):
        """kill -9 and a new manager: it adopts the generation if every member's worker runs and no
        resize was under way; else it stops them and relaunches (a fresh machine either way)."""
        old = self.m
        self.m = new_machine(old.retries)
        self.forgiven_seen = 0
        if old.phase is Phase.ENDED:
            self.m.phase = Phase.ENDED
            return
        members = [n for n in old.members if n in self.procs]
        newcomers = sorted(n for n in self.procs if n not in old.members)  # on their way or arrived
        if all_alive and old.phase in (Phase.STEADY, Phase.RESIZING) and members and members == old.members \
                and not any(w.leaving for w in old.workers.values()):
            self.m.adopt(members, self.generation, newcomers, self.now)
        else:
            self.procs.clear()  # terminate_tagged: stopped, relaunched by a decision
        self.crash_counts = False

    @rule()
    def judge(self):
        if self.m.judgeable(self.now):
            before = self.m.retries
            outcome = self.m.outcome(self.now, work_done=False)
            self.outcomes.append(outcome)
            assert self.m.last_reason, "a generation ended without a reason"
            if self.crash_counts:
                assert outcome in (Outcome.BACKOFF, Outcome.FAILED, Outcome.FINISHED, Outcome.CANCELLED,
                                   Outcome.QUEUED), outcome
                if outcome in (Outcome.BACKOFF, Outcome.FAILED):
                    assert self.m.retries == before + 1
            self.crash_counts = False

    # -- what the lifecycle does on every pass ----------------------------------------------------

    def tick(self):
        for node in self.m.to_kill(self.now):  # SIGKILL: gone at once
            del self.procs[node]
            plan = self.m.exited(node, Exit.CRASHED, code=-9, now=self.now, in_place=True)
            if plan is not None:
                self.crash_counts = False
                self.apply(plan)
        for node in self.m.overdue(self.now):
            ready, generation = self.m.ready, self.m.generation
            plan = self.m.not_joined(node, self.now)
            if plan is not None:  # dismissed: the survivors never waited for it
                assert node not in plan.members and self.m.blocked(node) and node in self.m.to_kill(self.now)
                # It costs the members nothing: a generation only when it was the last one on its way
                # and others arrived (their switch).
                assert plan.publish == (self.m.generation != generation)
                assert not plan.publish or (ready and not self.m.pending)
                self.apply(plan)
        plan = self.m.switch(self.now)  # (the lifecycle's every pass; a dismissal may complete a switch)
        if plan is not None:
            self.apply(plan)

    @rule()
    def quiesce(self):
        """Nothing but time: every phase is left within its deadline (newcomers that never come fail
        the resize, leavers are killed, a failure settles, a back-off ends)."""
        horizon = JOIN_S + GRACE_S + KILL_MARGIN_S + FAILURE_SETTLE_S + BACKOFF_MAX_S + 1
        for _ in range(3):
            self.now += horizon
            self.tick()
            if self.m.judgeable(self.now):
                self.m.outcome(self.now, work_done=False)
        assert self.m.phase in (Phase.STEADY, Phase.IDLE, Phase.BACKOFF, Phase.ENDED), self.m.phase
        assert not any(w.leaving or w.joins_by is not None for w in self.m.workers.values())
        self.crash_counts = False

    # -- invariants -------------------------------------------------------------------------------

    @invariant()
    def the_machine_believes_in_exactly_the_workers_that_run(self):
        assert set(self.m.workers) == set(self.procs), (self.m.workers, self.procs)

    @invariant()
    def at_most_one_live_generation(self):
        live = {w.generation for w in self.m.workers.values() if not w.leaving}
        assert live <= {self.m.generation}, (live, self.m.generation)
        assert self.m.generation == self.generation or not self.m.workers

    @invariant()
    def a_published_generation_holds_no_newcomer_on_its_way_and_no_leaver(self):
        """The members never wait for a newcomer that has not arrived, and never see a leaver go inside
        a collective of a generation that still holds it: a leaver is out of the published generation
        (unless the whole generation stops)."""
        assert not set(self.m.members) & set(self.m.pending), (self.m.members, self.m.pending)
        if self.m.phase in (Phase.STEADY, Phase.RESIZING):
            assert not [n for n in self.m.members if n in self.m.workers and self.m.workers[n].leaving]

    @invariant()
    def no_worker_without_a_phase_that_runs(self):
        if self.m.phase in (Phase.IDLE, Phase.BACKOFF, Phase.ENDED):
            assert not self.m.workers, self.m.phase

    @invariant()
    def every_pending_state_has_a_deadline(self):
        for w in self.m.workers.values():
            if w.leaving:
                assert w.kill_at is not None and w.kill_at <= self.now + GRACE_S + JOIN_S + KILL_MARGIN_S + 1e-9
            if w.joins_by is not None:
                assert w.joins_by <= self.now + JOIN_S + 1e-9
        if self.m.phase is Phase.BACKOFF:
            assert self.m.deadline is not None and self.m.deadline <= self.now + BACKOFF_MAX_S
        if self.m.phase is Phase.STOPPING:
            assert self.m.reason is not None

    @invariant()
    def retries_are_bounded_and_go_back_only_when_forgiven(self):
        forgiven = self.m.forgiven - self.forgiven_seen
        assert self.retries_seen - forgiven <= self.m.retries <= MAX_RETRIES + 1
        assert forgiven in (0, 1)  # one per report at most, each after FORGIVE_S of training
        self.retries_seen, self.forgiven_seen = self.m.retries, self.m.forgiven
        if Outcome.FAILED in self.outcomes:
            assert self.m.phase is Phase.ENDED

    @invariant()
    def a_stopping_generation_asked_every_worker_to_go(self):
        if self.m.phase is Phase.STOPPING:
            assert all(w.leaving for w in self.m.workers.values())


TestResizeMachineUnderRandomEvents = ResizeWorld.TestCase
TestResizeMachineUnderRandomEvents.settings = settings(max_examples=400, stateful_step_count=80, deadline=None,
                                                       derandomize=True)


# -- the repros, as exact sequences -------------------------------------------------------

def running(nodes, generation=1):
    m = new_machine()
    m.start(nodes, generation)
    m.progress(generation, 0.0)
    return m


def test_a_shrink_during_a_grow_is_published_at_once_and_the_newcomer_switches_in_when_it_arrives():
    """Grow at t=20 (n2 on its way until t=24), shrink at t=23.9 (n1 reclaimed): the shrink waits for
    nothing (n1 is out of the published generation at once, so it leaves after the survivor switched);
    n2 keeps its own deadline and switches in when it arrives."""
    m = running(["n0", "n1"])
    plan = m.resize(["n0", "n1", "n2"], 20.0, in_place=True)
    assert plan.start == ["n2"] and not plan.publish and m.generation == 1
    plan = m.resize(["n0", "n2"], 23.9, in_place=True)
    assert plan.publish and plan.members == ["n0"] and plan.leave == ["n1"] and plan.start == []
    assert m.generation == 2 and m.pending == ["n2"]
    assert m.overdue(23.95) == [] and m.overdue(24.0) == ["n2"]  # its deadline is its start's
    m.arrived("n2")
    plan = m.switch(23.95)
    assert plan.publish and plan.members == ["n0", "n2"] and m.generation == 3


def test_a_reclaim_and_a_grow_decided_together_are_one_switch_once_the_newcomer_has_arrived():
    m = running(["n0", "n1"])
    m.resize(["n0", "n1", "n2"], 0.0, in_place=True)
    m.arrived("n2")  # read just before the next decision (the lifecycle reads arrivals first)
    plan = m.resize(["n0", "n2"], 0.05, in_place=True)  # n1 reclaimed within the same step
    assert plan.publish and plan.members == ["n0", "n2"] and plan.leave == ["n1"] and m.generation == 2
    assert m.switch(0.06) is None  # nothing more to publish


def test_a_grow_publishes_nothing_until_every_newcomer_has_arrived():
    m = running(["n0"])
    plan = m.resize(["n0", "n1", "n2"], 0.0, in_place=True)
    assert plan.start == ["n1", "n2"] and not plan.publish and m.phase is Phase.RESIZING
    m.arrived("n1")
    assert m.switch(0.5) is None and m.generation == 1  # n2 is still on its way
    m.arrived("n2")
    plan = m.switch(1.0)
    assert plan.members == ["n0", "n1", "n2"] and plan.carried == plan.members and m.generation == 2
    assert m.phase is Phase.STEADY


def test_a_newcomer_reclaimed_or_failed_before_it_arrived_costs_no_generation():
    m = running(["n0"])
    m.resize(["n0", "n1"], 0.0, in_place=True)
    plan = m.resize(["n0"], 0.3, in_place=True)  # a flap: n1 idle for 0.3 s
    assert not plan.publish and plan.leave == ["n1"] and m.to_kill(0.3) == ["n1"] and m.generation == 1
    m.exited("n1", Exit.CRASHED, code=-9, now=0.35, in_place=True)
    assert m.phase is Phase.STEADY and m.generation == 1 and m.failure is None
    m.resize(["n0", "n2"], 1.0, in_place=True)
    plan = m.exited("n2", Exit.CRASHED, code=1, now=2.0, in_place=True)  # crashed while starting
    assert plan is None and m.generation == 1 and m.target == ["n0"] and m.phase is Phase.STEADY
    m.resize(["n0", "n3"], 3.0, in_place=True)
    plan = m.exited("n3", Exit.LEFT, code=EXIT_RESIZE, now=3.5, in_place=True)  # its node's SIGTERM came first
    assert plan is None and m.generation == 1 and m.phase is Phase.STEADY and m.reason is None


def test_a_newcomer_no_longer_wanted_is_dismissed_not_waited_for():
    m = running(["n0"])
    m.resize(["n0", "n1"], 0.0, in_place=True)
    plan = m.resize(["n0"], 0.1, in_place=True)  # given and taken back at once
    assert plan.leave == ["n1"] and m.pending == [] and not plan.publish and m.generation == 1
    assert m.overdue(100.0) == []
    assert m.to_kill(0.1) == ["n1"]  # it holds nothing: stopped at once, not at the grace kill
    m.exited("n1", Exit.LEFT, code=EXIT_RESIZE, now=0.5)
    assert m.phase is Phase.STEADY and m.failure is None


def test_a_script_that_always_exits_76_before_reporting_fails_after_its_retries():
    m = new_machine()
    now, outcomes = 0.0, []
    for generation in range(1, 10):
        if not m.may_start(now):
            now = m.deadline
            assert m.may_start(now)
        m.start(["n0", "n1"], generation)
        m.exited("n0", INPLACE.judge(EXIT_INPLACE_FAILED), code=EXIT_INPLACE_FAILED, now=now + 1)
        m.exited("n1", INPLACE.judge(EXIT_RESIZE), code=EXIT_RESIZE, now=now + 1.5)
        now += 1.5
        assert not m.judgeable(now)  # a reclaim may still explain it
        now += FAILURE_SETTLE_S
        assert m.judgeable(now)
        outcomes.append(m.outcome(now, work_done=False))
        if m.phase is Phase.ENDED:
            break
    assert outcomes == [Outcome.BACKOFF, Outcome.BACKOFF, Outcome.FAILED]
    assert "in-place resize failed" in m.last_reason and "3 attempts" in m.last_reason


def test_a_killed_worker_is_a_counted_failure_even_when_the_survivors_exit_76_first():
    m = running(["n0", "n1", "n2"])
    m.exited("n1", Exit.INPLACE_FAILED, code=EXIT_INPLACE_FAILED, now=10.0)  # they noticed the dead peer first
    m.exited("n2", Exit.INPLACE_FAILED, code=EXIT_INPLACE_FAILED, now=10.0)
    m.exited("n0", Exit.CRASHED, code=-9, now=10.1)
    assert not m.judgeable(10.2)  # a reclaim may still explain it
    assert m.judgeable(10.1 + FAILURE_SETTLE_S)
    assert m.outcome(10.1 + FAILURE_SETTLE_S, work_done=False) is Outcome.BACKOFF and m.retries == 1


def test_an_unasked_exit_75_is_a_departure_not_a_failure():
    m = running(["n0", "n1"])
    m.exited("n1", INPLACE.judge(EXIT_RESIZE), code=EXIT_RESIZE, now=5.0)  # its node's SIGTERM came first
    assert m.phase is Phase.STOPPING and m.failure is None
    m.exited("n0", Exit.INPLACE_FAILED, code=EXIT_INPLACE_FAILED, now=5.5)  # its peer vanished: a consequence
    assert m.outcome(5.5, work_done=False) is Outcome.RELAUNCH and m.retries == 0


def test_a_job_whose_work_is_done_finishes_however_its_workers_were_stopped():
    m = running(["n0", "n1"])
    m.stop(Stop.SHUTDOWN, 1.0)
    m.exited("n0", Exit.LEFT, code=EXIT_RESIZE, now=1.2)
    m.exited("n1", Exit.LEFT, code=EXIT_RESIZE, now=1.2)
    assert m.outcome(1.2, work_done=True) is Outcome.FINISHED and m.phase is Phase.ENDED


def test_a_crash_right_after_an_in_place_resize_is_the_resizes_failure():
    m = running(["n0", "n1"])
    m.resize(["n0", "n1", "n2"], 9.0, in_place=True)
    m.arrived("n2")
    assert m.switch(10.0).members == ["n0", "n1", "n2"]
    m.progress(m.generation, 0.0)
    m.exited("n1", Exit.CRASHED, code=1, now=11.0)  # a gloo error in backward: a peer changed mid-collective
    assert m.failure.kind is Exit.INPLACE_FAILED
    for n in ("n0", "n2"):
        m.exited(n, Exit.INPLACE_FAILED, code=EXIT_INPLACE_FAILED, now=11.5)
    assert m.outcome(20.0, work_done=False) is Outcome.RELAUNCH and m.retries == 0


def test_a_node_still_vacated_by_its_leaver_joins_once_it_is_free():
    m = running(["n0", "n1"])
    m.resize(["n0"], 0.0, in_place=True)  # n1 leaves
    assert m.resize(["n0", "n1"], 0.1, in_place=True) is None  # given back before its leaver is gone
    m.exited("n1", Exit.LEFT, code=EXIT_RESIZE, now=0.3)
    plan = m.resize(["n0", "n1"], 0.3, in_place=True)
    assert plan.start == ["n1"] and not plan.publish
    m.arrived("n1")
    assert m.switch(0.5).members == ["n0", "n1"]


# -- lost workers, hung workers, forgiven retries --------------------------------------------------

def test_a_worker_killed_in_place_is_dropped_and_the_survivors_go_on_without_a_failure():
    m = running(["n0", "n1", "n2"])
    plan = m.exited("n1", Exit.CRASHED, code=-9, now=10.0, in_place=True)
    assert (plan.members, plan.start, plan.carried, plan.leave) == (["n0", "n2"], [], ["n0", "n2"], [])
    assert m.phase is Phase.STEADY and m.failure is None and m.target == ["n0", "n2"]
    assert m.lost.node == "n1" and m.retries == 0
    grow = m.resize(["n0", "n1", "n2"], 11.0, in_place=True)  # the allocator gives the node back
    assert grow.start == ["n1"] and grow.members[:2] == ["n0", "n2"]


def test_a_lost_worker_is_a_failure_when_not_in_place_or_when_no_survivor_holds_the_state():
    m = running(["n0", "n1"])
    assert m.exited("n1", Exit.CRASHED, code=-9, now=10.0) is None  # relaunch method: every worker stops
    assert m.phase is Phase.STOPPING and m.failure.node == "n1"
    m = running(["n0"])
    assert m.exited("n0", Exit.CRASHED, code=-9, now=10.0, in_place=True) is None
    assert m.outcome(10.0 + FAILURE_SETTLE_S, work_done=False) is Outcome.BACKOFF and m.retries == 1


def test_a_worker_failing_as_the_lost_one_did_is_the_scripts_failure_and_counted():
    m = running(["n0", "n1", "n2"])
    assert m.exited("n2", Exit.CRASHED, code=1, now=10.0, in_place=True) is not None  # a loss
    # Another worker, in the next generation, exits with the same status: the script fails so.
    assert m.exited("n1", Exit.CRASHED, code=1, now=11.0, in_place=True) is None
    assert m.phase is Phase.STOPPING and m.reason is Stop.FAILED
    m.exited("n0", Exit.LEFT, code=EXIT_RESIZE, now=11.5)
    assert m.outcome(11.0 + FAILURE_SETTLE_S, work_done=False) is Outcome.BACKOFF and m.retries == 1
    assert "the script exited with code 1" in m.last_reason


def test_a_hung_worker_is_killed_at_once_and_its_exit_is_a_loss():
    m = running(["n0", "n1"])
    assert m.hung("n1") and m.to_kill(0.0) == ["n1"]
    plan = m.exited("n1", Exit.CRASHED, code=-9, now=0.1, in_place=True)
    assert plan.members == ["n0"] and m.retries == 0 and m.failure is None


def test_an_hour_of_training_forgives_one_counted_failure_and_gaps_without_reports_do_not_count():
    m = Machine(GRACE_S, JOIN_S, MAX_RETRIES, retries=2)
    m.start(["n0"], 3)
    now = 0.0
    m.progress(3, now)
    while now < FORGIVE_AFTER_S - 60:
        now += 30.0
        m.progress(3, now)
    now += HEALTHY_GAP_S + 1  # no report for longer than that: not training time
    m.progress(3, now)
    assert m.retries == 2
    now += 60.0
    m.progress(3, now)
    assert (m.retries, m.forgiven) == (1, 1)
    m.progress(3, now + 30.0)
    assert m.retries == 1  # the next one takes another hour


def test_a_lost_worker_that_leaves_fewer_than_the_jobs_min_is_a_relaunch_not_a_failure():
    m = Machine(GRACE_S, JOIN_S, MAX_RETRIES, min_nodes=2)
    m.start(["n0", "n1"], 1)
    m.progress(1, 0.0)
    assert m.exited("n1", Exit.CRASHED, code=-9, now=10.0, in_place=True) is None
    assert m.phase is Phase.STOPPING and m.lost.node == "n1" and m.target == ["n0", "n1"]
    m.exited("n0", Exit.LEFT, code=EXIT_RESIZE, now=10.5)
    assert m.outcome(10.5, work_done=False) is Outcome.RELAUNCH and m.retries == 0


def test_a_newcomer_past_its_deadline_is_dismissed_at_once_and_the_survivors_go_on():
    m = running(["n0"])
    m.resize(["n0", "n1"], 0.0, in_place=True)
    assert m.overdue(JOIN_S) == ["n1"]
    plan = m.not_joined("n1", JOIN_S)
    assert plan.members == ["n0"] and plan.leave == ["n1"] and m.to_kill(JOIN_S) == ["n1"]
    m.exited("n1", Exit.CRASHED, code=-9, now=JOIN_S + 0.1, in_place=True)
    assert m.phase is Phase.STEADY and m.failure is None and m.lost is None and m.target == ["n0"]
