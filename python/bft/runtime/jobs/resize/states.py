"""The resize machine's vocabulary: its phases, why a generation is stopped, what a worker's exit
means, what becomes of a job whose generation ended, and the records it keeps of workers, plans and
failures (:mod:`.machine` is the machine itself)."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any, List, Optional


class Phase(str, enum.Enum):
    IDLE = "idle"  # no worker runs: queued, or waiting for its nodes to be vacated
    STEADY = "steady"  # one generation runs on its members, nothing pending
    RESIZING = "resizing"  # in place: newcomers on their way or waiting for the switch, or leavers leaving
    STOPPING = "stopping"  # every worker is being stopped; `reason` says why
    BACKOFF = "backoff"  # after a counted failure: no start before `deadline`
    ENDED = "ended"  # finished, failed or cancelled


class Stop(str, enum.Enum):
    """Why a generation is stopped. The user's reasons (cancel, shutdown) override the others; among
    the others the first one given sticks."""

    RESIZE = "resize"  # relaunched at a new size or in a new configuration
    PREEMPTED = "preempted"  # its nodes were reclaimed and none are left to it
    INPLACE_FAILED = "inplace_failed"  # an in-place resize was given up: relaunch from the checkpoint
    FAILED = "failed"  # a worker failed on its own
    DONE = "done"  # the script finished
    CANCEL = "cancel"
    SHUTDOWN = "shutdown"


USER_STOPS = (Stop.CANCEL, Stop.SHUTDOWN)


class Exit(str, enum.Enum):
    """A method's reading of one worker's exit status (``Method.judge``)."""

    DONE = "done"  # 0: the script finished
    LEFT = "left"  # it was asked to stop and did (EXIT_RESIZE, or torchrun stopped on SIGTERM)
    INPLACE_FAILED = "inplace_failed"  # EXIT_INPLACE_FAILED: a peer vanished or a phase timed out
    CRASHED = "crashed"  # anything else: killed, crashed, or never started


class Outcome(str, enum.Enum):
    """What becomes of the job once its generation has ended (``Machine.outcome``)."""

    RELAUNCH = "relaunch"  # started again on its target as soon as its nodes are clear
    QUEUED = "queued"  # no nodes (preempted, or the manager stops): waits in the queue
    BACKOFF = "backoff"  # a counted failure: started again after the back-off
    FINISHED = "finished"
    FAILED = "failed"  # out of retries
    CANCELLED = "cancelled"


@dataclass
class Worker:
    """The machine's view of one worker process (one per node)."""

    node: str
    generation: int  # the generation it serves
    joins_by: Optional[float] = None  # a newcomer on its way: announces itself by then, or is dismissed
    leaving: bool = False  # asked to go (a leaver, or any worker of a stopping generation)
    kill_at: Optional[float] = None  # killed if it still runs then (set once it is leaving)
    hung: bool = False  # made no progress for too long: killed at once, its exit a loss
    # The node's processes once started (the lifecycle's handle, jobs/runs.NodeProcs; never read here):
    # held with the worker so that one map says what runs where.
    procs: Any = None


@dataclass
class Plan:
    """An in-place resize the lifecycle carries out: start the newcomers `start` (they announce
    themselves and wait), let `leave` go, and if `publish`, publish `members` as `generation` (the
    switch: the members change group at their next step boundary) with the process rows of `carried`
    moved over to it."""

    generation: int
    members: List[str]
    start: List[str]
    carried: List[str]
    leave: List[str]
    regroup: bool = False  # the members re-form their group even if unchanged (the keeper's store is new)
    publish: bool = True  # False: newcomers started or dismissed only; the published generation stays
    joined: List[str] = field(default_factory=list)  # published: newcomers that switch in
    left: List[str] = field(default_factory=list)  # published: members of the last generation not in this one


@dataclass
class Failure:
    """The first thing that went wrong in the current generation, for the verdict at its end."""

    kind: Exit  # CRASHED or INPLACE_FAILED
    node: str
    at: float
    code: Optional[int] = None  # the exit status, when a worker exited
    detail: str = ""
