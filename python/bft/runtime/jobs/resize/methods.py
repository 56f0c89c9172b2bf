"""The resize methods, one class each behind one narrow interface: how a method's workers are
started (command line, environment, where they leave their exit status), how it reads an exit
status, and whether it resizes without stopping the survivors. The lifecycle asks the job's method;
nothing else branches on a method's name.

- ``relaunch``: torchrun agents; a resize stops every worker (they checkpoint) and starts a new
  generation at the new size.
- ``inplace``: the script itself on each node, once per local rank (``bft.train.run``, no torchrun);
  a resize publishes a new generation, the survivors keep their processes and send the state to the
  newcomers (bft.train.elastic; configurations in the keeper's store: :mod:`.configurations`).
- ``membership``: torchrun agents with a node range (``--nnodes=min:max``); a resize stops the
  leavers' agents and starts the newcomers', and torchrun re-forms the group (its own restart).
"""

from __future__ import annotations

import enum
from pathlib import Path
from typing import Dict, List, Tuple

from ....train import EXIT_INPLACE_FAILED, EXIT_RESIZE, protocol
from ..launcher import AGENTS_DIR, LaunchSpec, script_argv, torchrun_argv
from .states import Exit


class ResizeMethod(str, enum.Enum):
    """The methods' names (a job row's ``resize`` column, ``--resize``)."""

    RELAUNCH = "relaunch"
    MEMBERSHIP = "membership"
    INPLACE = protocol.RESIZE_INPLACE  # what an in-place worker reads (bft.train.elastic)

    def __str__(self) -> str:  # its value in messages and f-strings, as the bare string was
        return self.value


class Method:
    name: ResizeMethod
    in_place = False  # a resize keeps the survivors' processes
    regroups = False  # a resize stops leavers and starts newcomers in the same generation (torchrun's range)
    runs_script = False  # the worker is the script itself: a warm standby can become it
    # How the advisor counts its rescales (the curve book's rescale kinds): every one but in place
    # restarts the workers, and is counted as a relaunch.
    advisor_kind = ResizeMethod.RELAUNCH.value

    def node_range(self, min_nodes: int, max_nodes: int, nodes: int) -> Tuple[int, int, int]:
        """torchrun's --nnodes range and --max-restarts for a generation on `nodes` nodes."""
        return nodes, nodes, 0

    def argv(self, spec: LaunchSpec) -> List[str]:
        return torchrun_argv(spec)

    def environment(self, store_address: str, join_timeout_s: float, node_address: str) -> Dict[str, str]:
        """What the method's workers need beyond every job's environment."""
        return {}

    def processes(self, procs_per_node: int) -> int:
        """How many processes the manager starts on a node of a job with `procs_per_node` (one torchrun
        agent, which starts the node's workers itself)."""
        return 1

    def exit_file(self, job_dir: Path, generation: int, node: str, local_rank: int = 0) -> Path:
        """Where process `local_rank` of the manager's on `node` leaves its exit status (read by a
        restarted manager)."""
        return job_dir / AGENTS_DIR / f"g{generation}-{node}.exit"

    def judge(self, code: int) -> Exit:
        """What a worker's exit status means (whether it was asked to leave is the machine's business)."""
        if code == 0:
            return Exit.DONE
        if code == EXIT_RESIZE:
            return Exit.LEFT
        return Exit.CRASHED


class Relaunch(Method):
    name = ResizeMethod.RELAUNCH


class Membership(Method):
    name = ResizeMethod.MEMBERSHIP
    regroups = True

    def node_range(self, min_nodes: int, max_nodes: int, nodes: int) -> Tuple[int, int, int]:
        return min_nodes, max_nodes, 1000


class InPlace(Method):
    name = ResizeMethod.INPLACE
    in_place = True
    advisor_kind = ResizeMethod.INPLACE.value
    runs_script = True

    def argv(self, spec: LaunchSpec) -> List[str]:
        return script_argv(spec)

    def environment(self, store_address: str, join_timeout_s: float, node_address: str) -> Dict[str, str]:
        # Where the configurations are, and its node's address (it has no torchrun agent to point gloo
        # at it: bft.train.run does).
        return {protocol.ENV_RESIZE: self.name.value, protocol.ENV_STORE_ADDR: store_address,
                protocol.ENV_INPLACE_TIMEOUT_S: f"{join_timeout_s:g}", protocol.ENV_NODE_ADDR: node_address}

    def processes(self, procs_per_node: int) -> int:
        return procs_per_node  # the script itself, once per local rank

    def exit_file(self, job_dir: Path, generation: int, node: str, local_rank: int = 0) -> Path:
        # An in-place worker stays across generations: one file per process of a node, removed before
        # the process starts.
        return job_dir / AGENTS_DIR / f"inplace-{node}-{local_rank}.exit"

    def judge(self, code: int) -> Exit:
        if code == EXIT_INPLACE_FAILED:
            return Exit.INPLACE_FAILED
        return super().judge(code)


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
