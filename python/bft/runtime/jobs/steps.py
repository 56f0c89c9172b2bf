"""The I/O of a resize method's steps, for one running job (``JobSteps``: what a method of
:mod:`.resize.methods` is handed, its ``Steps``): the gap meter told, workers started and signalled
through the lifecycle, and the in-place method's work on processes and the keeper's store: a
generation's configuration published, newcomers' arrivals read and their deadlines kept, the
members' process rows carried over to a new generation, hung workers found by their heartbeats, and
the members a restarted manager adopts."""

from __future__ import annotations

import time
from typing import List, Optional, Protocol, Set

from ..statedb.store import StateStore
from .files import JobFiles
from .heartbeats import Heartbeats
from .resize import Machine, Phase, Plan, gaps
from .runs import JobRun, commit_generation
from .workers import Workers


class Lifecycle(Protocol):
    """What the steps use of the job lifecycle (jobs/lifecycle.py)."""

    store: StateStore
    files: JobFiles
    workers: Workers
    heartbeats: Heartbeats
    draining: Set[str]
    inplace_timeout_s: float

    def launch_agents(self, run: JobRun, nodes: List[str], joining: bool = False) -> None: ...

    def terminate_stopping(self, run: JobRun) -> None: ...

    def shrink_off(self, run: JobRun, node: str) -> None: ...

    def follow(self, run: JobRun, plan: Plan) -> None: ...

    def rest(self, node: str, now: float) -> None: ...

    def mark_dirty(self, now: float) -> None: ...


class JobSteps:
    """One running job's steps, as its method asks for them (resize.methods.Steps)."""

    def __init__(self, life: Lifecycle, run: JobRun):
        self.life, self.run = life, run

    @property
    def machine(self) -> Machine:
        return self.run.machine

    @property
    def target(self) -> List[str]:
        return self.run.target

    def begin_gap(self, in_place: bool) -> None:
        gaps.resize_begins(self.run, self.life.store, in_place=in_place)

    def has_nodes_left(self) -> bool:
        return any(n not in self.life.draining for n in self.run.target)

    def terminate(self, nodes: List[str]) -> None:
        self.life.workers.terminate(self.run, nodes)

    def terminate_stopping(self) -> None:
        self.life.terminate_stopping(self.run)

    def launch(self, nodes: List[str], joining: bool = False) -> None:
        self.life.launch_agents(self.run, nodes, joining=joining)

    def shrink_off(self, node: str) -> None:
        self.life.shrink_off(self.run, node)

    def publish_first(self) -> bool:
        """The configuration of the generation that starts on its target, published before its workers
        start (they read it); False if it could not be (a launch failure for the machine)."""
        life, run = self.life, self.run
        row = run.row
        try:
            life.workers.configurations.publish(row.id, row.generation, run.target, row.procs_per_node)
        except Exception as e:  # noqa: BLE001 - its workers could not start: a launch failure
            if life.workers.keeper_alive():
                life.store.log_event("launch_failed", job=row.id, error=f"rendezvous store: {e}")
                for node in list(run.target):
                    run.machine.launch_failed(node, time.monotonic(), f"rendezvous store: {e}")
                return False
            # Unless the keeper died meanwhile: its successor gets the generation (keeper_restarted
            # re-forms it), and the workers start and wait for it there.
        return True

    def read_arrivals(self) -> None:
        for node in self.life.workers.read_arrivals(self.run):
            self.run.machine.arrived(node)

    def carry_out(self, plan: Plan) -> None:
        """An in-place resize: newcomers started (they announce themselves; the members train on), and
        if the plan publishes (a shrink, or the switch once every newcomer has arrived), the
        configuration published and the members' process rows carried over to the new generation; the
        leavers exit at their next step boundary (a newcomer dismissed is killed: the lifecycle's reap)."""
        life, run = self.life, self.run
        store = life.store
        if not plan.publish:
            if plan.start:
                life.files.log_line(run.id, f"=== starting {', '.join(plan.start)} in place: generation "
                                            f"{run.row.generation} trains on until they have arrived ===")
                store.log_event("newcomers_starting", job=run.id, generation=run.row.generation, nodes=plan.start)
            life.launch_agents(run, plan.start, joining=True)
            return
        commit_generation(run, store)  # the machine's, published by this plan
        row = run.row
        try:
            life.workers.configurations.publish(row.id, row.generation, plan.members, row.procs_per_node,
                                                regroup=plan.regroup)
        except Exception as e:  # noqa: BLE001 - the store is unreachable: relaunch instead
            run.machine.not_started(plan.start, f"rendezvous store: {e}", time.monotonic())
            store.log_event("inplace_failed", job=row.id, generation=row.generation, error=str(e))
            return
        life.workers.carried_over(run, plan.carried)  # the same processes, now of the new generation
        life.files.log_line(row.id, f"=== generation {row.generation} in place: {len(plan.members)} nodes "
                                    f"({', '.join(plan.members)}); joining {', '.join(plan.joined) or 'none'}, "
                                    f"leaving {', '.join(plan.left) or 'none'} ===")
        store.log_event("resize_inplace", job=row.id, generation=row.generation, nodes=plan.members,
                        joined=plan.joined, left=plan.left)
        if plan.start:
            store.log_event("newcomers_starting", job=run.id, generation=row.generation, nodes=plan.start)
        life.launch_agents(run, plan.start, joining=True)

    def check_newcomers(self, now: float) -> None:
        """Newcomers that announced themselves (read from the store): once none is on its way, the
        switch is published. One past its deadline that has not is dismissed (or fails the resize)."""
        life, run = self.life, self.run
        m = run.machine
        if m.pending:
            self.read_arrivals()
        for node in m.overdue(now):
            generation = m.workers[node].generation
            plan = m.not_joined(node, now)
            if m.phase is Phase.STOPPING:
                life.store.log_event("inplace_failed", job=run.id, node=node, generation=generation,
                                     error=f"not joined within {life.inplace_timeout_s:g} s")
                continue
            life.store.log_event("newcomer_dismissed", job=run.id, node=node, generation=generation,
                                 error=f"not joined within {life.inplace_timeout_s:g} s")
            life.rest(node, now)
            if plan is not None:
                life.follow(run, plan)
            life.mark_dirty(now)
        plan = m.switch(now)
        if plan is not None:
            life.follow(run, plan)
        life.terminate_stopping(run)

    def heartbeats_due(self, now: float) -> bool:
        return len(self.run.node_procs) > 1 and self.life.heartbeats.due(self.run.id, now)

    def check_heartbeats(self, now: float) -> None:
        """A worker hung (its heartbeats say so: :mod:`.heartbeats`) is killed at the next pass and its
        exit answered as a lost worker's; its node rests."""
        life, run = self.life, self.run
        beats = life.workers.read_beats(run)
        if beats is None:
            life.heartbeats.forget(run.id)
            return
        for node, bound_s in life.heartbeats.hung(run.id, beats, now).items():
            if run.machine.hung(node):
                life.store.log_event("worker_hung", job=run.id, node=node, bound_s=round(bound_s, 2))
                life.files.log_line(run.id, f"=== the worker on {node} is hung (no heartbeat or no progress for "
                                            f"{bound_s:.1f} s): killed ===")
                life.rest(node, now)

    def members_in_store(self, nodes: List[str]) -> Optional[List[str]]:
        """The members of the adopted generation by its configuration in the keeper's store (the others
        on `nodes` are a grow's newcomers on their way); None if the store is lost or a member's worker
        is gone (relaunched instead)."""
        row = self.run.row
        members = nodes
        try:
            members = self.life.workers.configurations.members(row.id, row.generation) or members
        except Exception:  # noqa: BLE001 - the keeper lost its store: relaunch instead of adopting
            return None
        if not set(members) <= set(nodes):  # a member's worker is gone: relaunch
            return None
        return members
