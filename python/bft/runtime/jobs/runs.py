"""What the manager tracks of each active job besides its database row: its resize machine (which
also holds each node's processes: a torchrun agent, or N in-place workers), its reports, and the
bookkeeping of resizes and failures."""

from __future__ import annotations

import collections
import signal
from dataclasses import dataclass, field
from typing import Any, Deque, Dict, List, Optional, Tuple

from ...jobs import FULL_CONFIGURATION
from ...train import EXIT_INPLACE_FAILED, EXIT_RESIZE, protocol
from ..statedb.store import JobRow, StateStore
from .processes import signal_processes
from .resize import Machine, Phase, Stop


@dataclass
class NodeProcs:
    """A job's worker processes on one node, one member of its generation: a torchrun agent (which
    starts the node's N workers itself), or the node's N in-place workers (local rank k at index k).
    The job's resize machine holds it with the node's worker (run.machine.workers[node].procs), which
    also says where the member stands (its generation, a newcomer, leaving, its deadlines); the node's
    processes are counted, started, stopped and judged together."""

    job: str
    node: str
    procs: List[Any]  # subprocess.Popen or processes.AdoptedProcess, by local rank
    rows: List[int]  # their procs table rows, in the same order
    signalled: bool = False  # SIGTERM sent
    # Born of warm standbys: no job tag in their environment, known by their pids.
    standby: bool = False

    @property
    def pids(self) -> List[int]:
        return [proc.pid for proc in self.procs]

    def poll(self) -> Optional[int]:
        """None while the member runs, else its exit status. A node's processes leave together (they
        finish, stop for a resize or fail a resize at the same step boundary), so the member has exited
        once all of them have; its status is the first crash's, else the most telling of the others'
        (an in-place failure, a planned stop, 0). A crash while its siblings run ends the member: they
        are killed at once (their node's share of the world is gone)."""
        codes = [proc.poll() for proc in self.procs]
        crashes = [c for c in codes if c is not None and c not in _ORDERLY]
        if crashes and None in codes:
            signal_processes([-proc.pid for proc, c in zip(self.procs, codes) if c is None], signal.SIGKILL)
            return crashes[0]
        if None in codes:
            return None
        if crashes:
            return crashes[0]
        return max(codes, key=_ORDERLY.index)


# A member's orderly exit statuses, least telling first (NodeProcs.poll).
_ORDERLY = (0, EXIT_RESIZE, EXIT_INPLACE_FAILED)


@dataclass
class JobRun:
    """An active job: its row, the nodes the allocator gave it, its live agents and its progress. Each
    field is written by one module, its owner (OWNERS, below); the others read it or ask the owner."""

    row: JobRow
    # Its resize: phase, target, generation, members, each worker's role, deadlines and processes,
    # failures and their verdict. Its retries and their limit start from the row's (the row mirrors
    # the machine's from then on: commit_retries). The lifecycle makes it with its manager's times
    # (JobLifecycle.new_run); a run made without one gets the protocol's defaults.
    machine: Machine = None  # type: ignore[assignment]
    # A script that exited 0 before its last report came: the job is judged at this time (monotonic).
    last_report_due: Optional[float] = None
    last_report: Optional[protocol.Report] = None
    round: int = 0  # torchrun's restart count of the current generation's workers
    last_seq: Dict[int, int] = field(default_factory=dict)  # rank -> highest seq this round
    seq_generation: int = 0  # the generation last_seq is of
    rank_samples: Dict[int, float] = field(default_factory=dict)
    advisor_samples: float = 0.0  # monotone cumulative count of the job's samples
    advisor_offset: float = 0.0
    # The configuration of the generation that runs (or ran last): its reports are progress in it. The
    # decided one (row.configuration) takes over when the next generation starts.
    running: str = FULL_CONFIGURATION
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
    gap_start: Optional[protocol.Report] = None
    resize_pending: bool = False
    # Time (wall clock) the job held no nodes between a resize's last step and its next first step:
    # not part of the resize's gap.
    nodeless_since: Optional[float] = None
    nodeless_s: float = 0.0
    # Reports: when the current generation started and when the last report was believed
    # (monotonic); a job running that long without any is silent (ManagerOptions.report_timeout_s).
    launched_at: Optional[float] = None
    reported_at: Optional[float] = None
    silent: bool = False

    def __post_init__(self) -> None:
        if self.machine is None:
            self.machine = Machine(checkpoint_grace_s=protocol.DEFAULT_GRACE_S,
                                   join_timeout_s=protocol.DEFAULT_INPLACE_TIMEOUT_S,
                                   max_retries=self.row.max_retries, retries=self.row.retries)

    @property
    def id(self) -> str:
        return self.row.id

    @property
    def target(self) -> List[str]:
        """The nodes the allocator gave the job: its resize machine's (the only holder; the lifecycle
        tells the machine, Machine.place), read here."""
        return self.machine.target

    @property
    def node_procs(self) -> Dict[str, NodeProcs]:
        """node -> its live processes: the machine's (started and reaped by jobs/workers.py, which tells
        the machine, Machine.attach)."""
        return self.machine.processes

    @property
    def training_nodes(self) -> int:
        """The nodes of its target that train (or will at once): not a grow's newcomers still on their
        way, which join only at the switch (until then the members train on at their size): the size
        the advisor hears of."""
        pending = set(self.machine.pending)
        return sum(1 for n in self.target if n not in pending)

    @property
    def method(self) -> str:
        """How the job changes size (inplace, relaunch or membership): fixed on its row by the manager
        when the job is submitted or recovered, so every part of the manager reads the same one."""
        return self.row.resize

    @property
    def stop_reason(self) -> Optional[Stop]:
        """Why its workers are being stopped (None unless they are)."""
        m = self.machine
        return m.reason if m.phase is Phase.STOPPING else None

    def nodes_spanned(self, world: int) -> int:
        """The nodes a report's world size spans: a node runs the job's processes per node (the
        allocator, the advisor and the gap events count nodes)."""
        return world // max(1, self.row.procs_per_node)

    def recent_rate(self, window_s: float = 10.0) -> float:
        """Samples per second over the last `window_s` of reports (0 with fewer than two)."""
        if len(self.recent) < 2:
            return 0.0
        t1, s1 = self.recent[-1]
        for t0, s0 in self.recent:
            if t1 - t0 <= window_s and t1 > t0:
                return max(0.0, (s1 - s0) / (t1 - t0))
        return 0.0


# The one module (under bft/runtime) that writes each JobRun field; every other module reads it or
# calls its owner (tests/python/test_runtime_owners.py checks the runtime and the benches). The row
# and the machine are set when the run is made (JobLifecycle.new_run); the row's columns mirror what
# a committed transition changed.
OWNERS = {
    "row": "jobs/lifecycle.py", "machine": "jobs/lifecycle.py",
    "last_report_due": "jobs/lifecycle.py", "launched_at": "jobs/lifecycle.py",
    "round": "decide/intake.py", "last_seq": "decide/intake.py", "seq_generation": "decide/intake.py",
    "rank_samples": "decide/intake.py",
    "reported_at": "decide/intake.py", "silent": "decide/intake.py",
    "last_report": "jobs/resize/gaps.py", "gap_start": "jobs/resize/gaps.py", "resize_pending": "jobs/resize/gaps.py",
    "nodeless_since": "jobs/resize/gaps.py", "nodeless_s": "jobs/resize/gaps.py",
    "advisor_samples": "decide/curvebook.py", "advisor_offset": "decide/curvebook.py", "running": "decide/curvebook.py",
    "configuration_samples": "decide/curvebook.py", "credited": "decide/curvebook.py",
    "advisor_time": "decide/curvebook.py", "recent": "decide/curvebook.py",
    "decided_curve": "decide/decider.py", "last_curve_check_s": "decide/decider.py",
}

# The row's columns that mirror the job's resize machine (the machine holds them; the row is what a
# restarted manager reads): written, and stored, only by the commits below, when a transition of the
# machine has committed (tests/python/test_runtime_owners.py checks the runtime and the benches).
ROW_MIRRORS = ("generation", "retries")


def commit_generation(run: JobRun, store: StateStore, **columns: Any) -> None:
    """The machine started or published a generation: the row takes its number, stored with the other
    `columns` that change with it."""
    run.row.generation = run.machine.generation
    store.update_job(run.id, generation=run.row.generation, **columns)


def commit_retries(run: JobRun, store: StateStore) -> None:
    """The machine counted a failure, or forgave one: the row takes its count, stored."""
    run.row.retries = run.machine.retries
    store.update_job(run.id, retries=run.row.retries)
