"""The resize methods, one class each behind one narrow interface: how a method's workers are
started (command line, environment, where they leave their exit status, whether a warm standby
becomes one), how it reads an exit status, and how it carries out each step of a resize (a
decision, a reclaim, a vacated node, each poll, a lost keeper, a generation's start, a restarted
manager's adoption). The lifecycle asks the job's method, handing it the job's ``Steps`` (the I/O it
may ask for: jobs/steps.py); nothing outside this package branches on a method's name or flags
(tests/python/test_runtime_methods.py).

- ``relaunch``: torchrun agents; a resize stops every worker (they checkpoint) and starts a new
  generation at the new size.
- ``inplace``: the script itself on each node, once per local rank (``bft.train.run``, no torchrun);
  a resize publishes a new generation, the survivors keep their processes and send the state to the
  newcomers (bft.train.inplace; configurations in the keeper's store: :mod:`.configurations`).
- ``membership``: torchrun agents with a node range (``--nnodes=min:max``); a resize stops the
  leavers' agents and starts the newcomers', and torchrun re-forms the group (its own restart).
"""

from __future__ import annotations

import enum
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Optional, Protocol, Tuple

from ....train import EXIT_INPLACE_FAILED, EXIT_RESIZE, protocol
from ..launcher import AGENTS_DIR, LaunchSpec, local_rank_environment, script_argv, torchrun_argv, worker_exit_code
from .machine import Machine
from .states import Exit, Phase, Plan, Stop

if TYPE_CHECKING:
    from ..standbys import Standbys


class ResizeMethod(str, enum.Enum):
    """The methods' names (a job row's ``resize`` column, ``--resize``)."""

    RELAUNCH = "relaunch"
    MEMBERSHIP = "membership"
    INPLACE = protocol.RESIZE_INPLACE  # what an in-place worker reads (bft.train.elastic)

    def __str__(self) -> str:  # its value in messages and f-strings, as the bare string was
        return self.value


class Steps(Protocol):
    """One running job as its method sees it: its resize machine, the nodes the allocator gave it,
    and the I/O the lifecycle does for it on the method's word (jobs/steps.py)."""

    machine: Machine
    target: List[str]

    def begin_gap(self, in_place: bool) -> None:
        """The gap meter's resize begins (jobs/resize/gaps.py)."""

    def has_nodes_left(self) -> bool:
        """Whether the job keeps nodes that are not being reclaimed."""

    def terminate(self, nodes: List[str]) -> None:
        """SIGTERM to its workers on `nodes`."""

    def terminate_stopping(self) -> None:
        """SIGTERM to the workers of its stopping generation that have not had it."""

    def launch(self, nodes: List[str], joining: bool = False) -> None:
        """Starts its workers on `nodes` (`joining`: newcomers of an in-place grow)."""

    def shrink_off(self, node: str) -> None:
        """Shrinks it off its reclaimed `node` (with the batch's other reclaims)."""

    def publish_first(self) -> bool:
        """Publishes the configuration of the generation that starts; False if it could not be."""

    def read_arrivals(self) -> None:
        """Tells the machine which newcomers have announced themselves in the keeper's store."""

    def carry_out(self, plan: Plan) -> None:
        """Carries out the machine's in-place plan (processes and the keeper's store)."""

    def check_newcomers(self, now: float) -> None:
        """Newcomers' arrivals and deadlines; the switch once none is on its way."""

    def heartbeats_due(self, now: float) -> bool:
        """Whether its workers' heartbeats are to be read now."""

    def check_heartbeats(self, now: float) -> None:
        """Hung workers found by their heartbeats, to be killed."""

    def members_in_store(self, nodes: List[str]) -> Optional[List[str]]:
        """The adopted generation's members by its configuration in the keeper's store, or None."""


class Method:
    """The relaunch behaviour, which the others refine: every resize stops the generation (its workers
    checkpoint) and starts a new one."""

    name: ResizeMethod
    in_place = False  # a resize keeps the survivors' processes (the machine's in-place rules)
    # How the advisor counts its rescales (the curve book's rescale kinds): every one but in place
    # restarts the workers, and is counted as a relaunch.
    advisor_kind = ResizeMethod.RELAUNCH.value

    # -- starting its workers ---------------------------------------------------------------------

    def node_range(self, min_nodes: int, max_nodes: int, nodes: int) -> Tuple[int, int, int]:
        """torchrun's --nnodes range and --max-restarts for a generation on `nodes` nodes."""
        return nodes, nodes, 0

    def argv(self, spec: LaunchSpec) -> List[str]:
        return torchrun_argv(spec)

    def environment(self, spec: LaunchSpec, join_timeout_s: float, local_rank: int,
                    ticket: Optional[int]) -> Dict[str, str]:
        """What process `local_rank` of the method's workers on a node needs beyond every job's
        environment; `ticket`: a joining newcomer's process row (None for the others)."""
        return {}

    def processes(self, procs_per_node: int) -> int:
        """How many processes the manager starts on a node of a job with `procs_per_node` (one torchrun
        agent, which starts the node's workers itself)."""
        return 1

    def exit_file(self, job_dir: Path, generation: int, node: str, local_rank: int = 0) -> Path:
        """Where process `local_rank` of the manager's on `node` leaves its exit status (read by a
        restarted manager)."""
        return job_dir / AGENTS_DIR / f"g{generation}-{node}.exit"

    def standbys_for(self, standbys: Standbys, node: str, python: str, count: int) -> Optional[List[Any]]:
        """The warm standbys on `node` that become its `count` workers (an empty list: those it needs
        are not all there), or None if its workers never come from standbys: its job runs under
        torchrun, and a standby on the node would only hold memory (ended)."""
        standbys.end(node)
        return None

    def publish_first(self, job: Steps) -> bool:
        """A new generation starts on job.target: whether its workers may be started now."""
        return True

    def adopted_members(self, job: Steps, nodes: List[str]) -> Optional[List[str]]:
        """The members of the running generation a restarted manager found the workers of on `nodes`
        (all alive), or None if it cannot be adopted (relaunched instead)."""
        return nodes

    # -- what an exit means -----------------------------------------------------------------------

    def judge(self, code: int) -> Exit:
        """What a worker's exit status means (whether it was asked to leave is the machine's business)."""
        if code == 0:
            return Exit.DONE
        if code == EXIT_RESIZE:
            return Exit.LEFT
        return Exit.CRASHED

    def failed_status(self, code: int, output_tail: Callable[[], str]) -> int:
        """The status a failed member is logged with: a torchrun agent's is its failed worker's own,
        from the agent's report in the job's output (`output_tail()`)."""
        return worker_exit_code(output_tail()) or code

    def exited(self, machine: Machine, node: str, kind: Exit, code: int, now: float) -> Optional[Plan]:
        """Tells the machine of the exit (judged `kind`); the in-place plan it answers with, or None."""
        return machine.exited(node, kind, code=code, now=now, in_place=self.in_place)

    # -- the steps of a resize --------------------------------------------------------------------

    def rescale(self, job: Steps, now: float, switch: bool) -> str:
        """Moves the job's running generation towards job.target (the decider's; `switch`: in a new
        configuration, so never in place) and begins the gap meter's resize; returns how the advisor
        counts the rescale. Here: every worker stops, and a new generation starts once they are gone."""
        job.begin_gap(in_place=False)
        job.machine.resize(job.target, now, in_place=False)
        job.terminate_stopping()
        return Method.advisor_kind

    def reclaimed(self, job: Steps, node: str, now: float) -> None:
        """The batch scheduler takes `node`, where a worker of the job runs and is not leaving yet."""
        job.machine.stop(Stop.RESIZE if job.has_nodes_left() else Stop.PREEMPTED, now)
        job.terminate_stopping()

    def vacated(self, job: Steps, now: float) -> None:
        """A node of job.target was still being vacated by the job's own leaver, and now is free."""

    def watch(self, job: Steps, now: float) -> None:
        """Every pass of the lifecycle's poll, after the job's exits are reaped."""

    def keeper_restarted(self, job: Steps, now: float) -> None:
        """A new keeper (and store) replaced a lost one while the job runs."""


class Relaunch(Method):
    name = ResizeMethod.RELAUNCH


class Membership(Method):
    name = ResizeMethod.MEMBERSHIP

    def node_range(self, min_nodes: int, max_nodes: int, nodes: int) -> Tuple[int, int, int]:
        return min_nodes, max_nodes, 1000

    def rescale(self, job: Steps, now: float, switch: bool) -> str:
        # Leavers stop and newcomers start in the same generation (torchrun's range); a new
        # configuration, or no nodes left, is a relaunch.
        if switch or not job.target:
            return super().rescale(job, now, switch)
        job.begin_gap(in_place=False)
        leave, start = job.machine.regroup(job.target, now)
        job.terminate(leave)
        job.launch(start)
        return self.advisor_kind

    def reclaimed(self, job: Steps, node: str, now: float) -> None:
        job.shrink_off(node)  # the others train on


class InPlace(Method):
    name = ResizeMethod.INPLACE
    in_place = True
    advisor_kind = ResizeMethod.INPLACE.value

    def argv(self, spec: LaunchSpec) -> List[str]:
        return script_argv(spec)

    def environment(self, spec: LaunchSpec, join_timeout_s: float, local_rank: int,
                    ticket: Optional[int]) -> Dict[str, str]:
        # Where the configurations are, and its node's address (it has no torchrun agent to point gloo
        # at it: bft.train.run does); which of its node's processes it is; a newcomer's ticket, which
        # it announces itself with.
        env = {protocol.ENV_RESIZE: self.name.value, protocol.ENV_STORE_ADDR: spec.store_address,
               protocol.ENV_INPLACE_TIMEOUT_S: f"{join_timeout_s:g}", protocol.ENV_NODE_ADDR: spec.node_address}
        env.update(local_rank_environment(local_rank, spec.procs_per_node))
        if ticket is not None:
            env[protocol.ENV_JOIN_TICKET] = str(ticket)
        return env

    def processes(self, procs_per_node: int) -> int:
        return procs_per_node  # the script itself, once per local rank

    def exit_file(self, job_dir: Path, generation: int, node: str, local_rank: int = 0) -> Path:
        # An in-place worker stays across generations: one file per process of a node, removed before
        # the process starts.
        return job_dir / AGENTS_DIR / f"inplace-{node}-{local_rank}.exit"

    def standbys_for(self, standbys: Standbys, node: str, python: str, count: int) -> Optional[List[Any]]:
        return standbys.take(node, python, count)  # a standby is the script's interpreter, as its workers are

    def publish_first(self, job: Steps) -> bool:
        return job.publish_first()  # its workers read the configuration as they start

    def adopted_members(self, job: Steps, nodes: List[str]) -> Optional[List[str]]:
        return job.members_in_store(nodes)  # the others are a grow's newcomers on their way

    def judge(self, code: int) -> Exit:
        if code == EXIT_INPLACE_FAILED:
            return Exit.INPLACE_FAILED
        return super().judge(code)

    def failed_status(self, code: int, output_tail: Callable[[], str]) -> int:
        return code  # the script's own

    def rescale(self, job: Steps, now: float, switch: bool) -> str:
        if switch:  # a new configuration: relaunched in it
            return super().rescale(job, now, switch)
        job.begin_gap(in_place=True)
        return self.advisor_kind if self._resize(job, now) else Method.advisor_kind

    def _resize(self, job: Steps, now: float) -> bool:
        """The machine's in-place answer to job.target, carried out; whether it was one (not a relaunch)."""
        job.read_arrivals()  # a newcomer that arrived meanwhile switches in with this decision
        plan = job.machine.resize(job.target, now, in_place=True)
        if plan is not None:
            job.carry_out(plan)
        job.terminate_stopping()
        return plan is not None

    def reclaimed(self, job: Steps, node: str, now: float) -> None:
        job.shrink_off(node)  # the others train on

    def vacated(self, job: Steps, now: float) -> None:
        if job.machine.phase in (Phase.STEADY, Phase.RESIZING):
            self._resize(job, now)  # it joins now

    def watch(self, job: Steps, now: float) -> None:
        m = job.machine
        if m.phase is Phase.RESIZING:
            job.check_newcomers(now)
        if m.phase in (Phase.STEADY, Phase.RESIZING) and job.heartbeats_due(now):
            job.check_heartbeats(now)

    def keeper_restarted(self, job: Steps, now: float) -> None:
        # It re-forms in place in the new store (the same members as a new generation; the workers
        # reconnect and keep their state).
        plan = job.machine.reform(now)
        if plan is not None:
            job.begin_gap(in_place=True)
            job.carry_out(plan)


METHODS: Dict[str, Method] = {m.name: m for m in (Relaunch(), Membership(), InPlace())}


def method(name: str) -> Method:
    """The method called `name` (a job row's resize method)."""
    try:
        return METHODS[name]
    except KeyError:
        raise ValueError(f"unknown resize method {name!r} (choose from {', '.join(METHODS)})") from None


RESIZE_METHODS = tuple(METHODS)
# The manager's default: in place for a script that holds its state in bft.train.ElasticState (the
# only scripts an in-place worker can run), relaunch for the others.
AUTO = "auto"
RESIZE_CHOICES = (AUTO, *RESIZE_METHODS)  # what --resize accepts (bft manager, bft submit)


def may_run_in_place(choice: str) -> bool:
    """Whether a manager's --resize `choice` may give a job a method that resizes in place (auto does, for
    a script that can: job_resize_method)."""
    return choice == AUTO or (choice in METHODS and METHODS[choice].in_place)


def check_resize_choice(value: str) -> None:
    """Raises ValueError naming --resize unless `value` is one of RESIZE_CHOICES."""
    if value not in RESIZE_CHOICES:
        raise ValueError(f"--resize: unknown method {value!r} (choose from {', '.join(RESIZE_CHOICES)})")


def uses_elastic_state(script: str) -> bool:
    """Whether the training script constructs bft.train.ElasticState (read from its source)."""
    try:
        with open(script, encoding="utf-8", errors="replace") as f:
            return "ElasticState(" in f.read()
    except OSError:
        return False


def job_resize_method(requested: str, script: str) -> str:
    """The resize method of a job: the one asked for (bft submit --resize, else the manager's
    --resize), `auto` resolved from the script."""
    if requested != AUTO:
        return requested
    return InPlace.name if uses_elastic_state(script) else Relaunch.name
