"""How long a grow's newcomers take to start, warm against cold (docs/runtime.md, "A grow onto a node
without a warm standby").

A grow's newcomer starts *warm* on a node with a standby (torch already imported: about 0.15 s to its
first step) and *cold* elsewhere (a new interpreter: 4–6 s; bench/README.md). The profiling advisor
measures a method's grow costs without telling the two apart, so the manager measures them itself:
from the decision to the first step at the new size, per resize method and per start (cold if any
newcomer started without a standby). What a cold grow costs beyond a warm one is added to the job's
scale-up cost whenever its grow must take a node without a standby. The measurements are the
``start`` and ``start_s`` fields of ``resize_gap`` events, so a restarted manager reads them back.
"""

from __future__ import annotations

import collections
import statistics
from dataclasses import dataclass
from typing import Any, Deque, Dict, Iterable, Optional, Sequence, Tuple

WARM, COLD = "warm", "cold"
# What a cold newcomer costs beyond a warm one until both are measured for the method: launch -> first
# step of a new job on 2 idle nodes, --no-standby 4.57 s and 6.10 s against 0.15 s and 0.16 s with
# standbys (bench/README.md, issue 22 item 2, medians of 5 in two runs): 5.2 s.
COLD_EXTRA_S = 5.2
KEPT = 50  # measurements kept per method and start (the median of the latest)


@dataclass(frozen=True)
class FreeNodes:
    """At a decision: how many of the pool's nodes no job holds, and how many of those have a warm standby
    (the decider gives those out first)."""

    count: int
    warm: int

    def grow_start(self, *, current: int, max_nodes: int) -> str:
        """How a job on `current` nodes starts its largest grow within the free nodes (up to `max_nodes`):
        COLD if it takes more nodes than the free warm ones, else WARM. (Jobs growing in one decision
        share the warm nodes: each is judged as if it had them all.)"""
        return COLD if min(max_nodes - current, self.count) > self.warm else WARM


@dataclass
class _Grow:
    method: str
    start: str  # WARM or COLD
    decided_s: float  # wall clock


class GrowStarts:
    def __init__(self, events: Iterable[Dict[str, Any]] = ()):
        """`events`: earlier ``resize_gap`` events (a restarted manager's measurements)."""
        self._pending: Dict[str, Optional[_Grow]] = {}  # job -> its grow being measured (None: unmeasurable)
        self._measured: Dict[Tuple[str, str], Deque[float]] = {}  # (method, start) -> seconds to the first step
        for e in events:
            if e.get("start") in (WARM, COLD) and e.get("start_s") is not None:
                self._add(e["method"], e["start"], float(e["start_s"]))

    def begins(self, job: str, *, method: str, newcomers_warm: Sequence[bool], decided_s: float) -> None:
        """A resize of `job` by `method` is decided at `decided_s` (wall clock) and started the newcomers
        whose standby flags are `newcomers_warm` (none: nothing to measure). A second resize before the
        first step at the new size makes the first one unmeasurable."""
        if job in self._pending:
            self._pending[job] = None
        elif newcomers_warm:
            self._pending[job] = _Grow(method, WARM if all(newcomers_warm) else COLD, decided_s)

    def first_step(self, job: str, at_s: float) -> Dict[str, Any]:
        """The job's first step at its new size came at `at_s` (wall clock): what the ``resize_gap``
        event records of the grow's start (nothing if it was not measurable)."""
        grow = self._pending.pop(job, None)
        if grow is None:
            return {}
        seconds = max(0.0, at_s - grow.decided_s)
        self._add(grow.method, grow.start, seconds)
        return {"start": grow.start, "start_s": seconds}

    def forget(self, job: str) -> None:
        """The job's pending grow is not measured (it was relaunched, or it ended)."""
        self._pending.pop(job, None)

    def cold_extra_s(self, method: str) -> Tuple[float, bool]:
        """(seconds a grow by `method` with a cold newcomer costs beyond a warm one, whether measured):
        the difference of the medians once both are measured, else COLD_EXTRA_S."""
        warm, cold = self._measured.get((method, WARM)), self._measured.get((method, COLD))
        if not warm or not cold:
            return COLD_EXTRA_S, False
        return max(0.0, statistics.median(cold) - statistics.median(warm)), True

    def counts(self, method: str) -> Dict[str, int]:
        """How many grows by `method` were measured, per start."""
        return {start: len(self._measured.get((method, start), ())) for start in (WARM, COLD)}

    def _add(self, method: str, start: str, seconds: float) -> None:
        self._measured.setdefault((method, start), collections.deque(maxlen=KEPT)).append(seconds)
