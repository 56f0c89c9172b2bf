"""Hung in-place workers, found by their heartbeats (docs/runtime.md, "A hung worker").

Every in-place worker writes "<beats> <steps> <waiting>" into its job's store every 0.5 s from a
thread of its own (bft.train.elastic): `beats` grows while the process runs, `steps` counts its step
boundaries, `waiting` says it waits for its peers at one. The lifecycle reads them about once a
second; this part judges them (pure: no I/O). A worker is hung when, while a peer of its job still
beats,

- its beats stopped (a stopped or frozen process: SIGSTOP, a node that no longer schedules it), or
- its steps stopped while it does not wait at the step boundary and a peer waits there, at the same
  step or later (a hang between two boundaries: a stuck data loader, a deadlock in the script),

for longer than the job's bound: HUNG_STEPS of its own steps (measured from the beats' step counts),
at least HUNG_FLOOR_S, at most --inplace-timeout (the bound until a step time is measured).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List, Optional, Tuple

HUNG_STEPS = 20  # steps of the job's own pace without a sign of life or progress
HUNG_FLOOR_S = 10.0  # never sooner: on a loaded 2-core VM a worker's heartbeats stalled for 3 s
READ_S = 1.0  # how often the lifecycle reads a job's heartbeats


@dataclass
class _Seen:
    beats: int
    steps: int
    waiting: bool
    beat_at: float  # when `beats` last changed (the manager's clock)
    step_at: float  # when `steps` last changed


def parse(value: str) -> Optional[Tuple[int, int, bool]]:
    """A heartbeat's fields, or None if it is not one."""
    try:
        beats, steps, waiting = value.split()
        return int(beats), int(steps), waiting == "1"
    except ValueError:
        return None


class Heartbeats:
    def __init__(self, timeout_s: float):
        self.timeout_s = timeout_s
        self._seen: Dict[Tuple[str, str, int], _Seen] = {}  # (job, node, pid) -> its last heartbeat
        self._step_s: Dict[str, float] = {}  # job -> seconds per step (moving average)
        self._read_at: Dict[str, float] = {}

    def due(self, job: str, now: float) -> bool:
        """Whether the job's heartbeats are to be read now (about once a second)."""
        if now < self._read_at.get(job, 0.0):
            return False
        self._read_at[job] = now + READ_S
        return True

    def bound_s(self, job: str) -> float:
        step = self._step_s.get(job)
        return self.timeout_s if step is None else min(self.timeout_s, max(HUNG_FLOOR_S, HUNG_STEPS * step))

    def forget(self, job: str) -> None:
        """The job ended, or its heartbeats could not be read: they are judged afresh from the next."""
        self._seen = {k: v for k, v in self._seen.items() if k[0] != job}
        self._read_at.pop(job, None)

    def hung(self, job: str, beats: Dict[Tuple[str, int], str], now: float) -> List[str]:
        """The nodes whose worker is hung, from the heartbeats just read: (node, worker pid) -> value,
        for the job's workers that run and have joined their generation."""
        current: Dict[Tuple[str, int], _Seen] = {}  # (node, pid): every process of a node is judged
        for (node, pid), value in beats.items():
            fields = parse(value)
            if fields is None:
                continue
            key = (job, node, pid)
            seen = self._seen.get(key)
            b, steps, waiting = fields
            if seen is None:
                seen = _Seen(b, steps, waiting, now, now)
            else:
                if b != seen.beats:
                    seen.beats, seen.beat_at = b, now
                if steps > seen.steps:
                    self._measure(job, (now - seen.step_at) / (steps - seen.steps))
                    seen.steps, seen.step_at = steps, now
                seen.waiting = waiting
            self._seen[key] = current[(node, pid)] = seen
        self._seen = {k: v for k, v in self._seen.items() if k[0] != job or current.get(k[1:]) is v}
        bound = self.bound_s(job)
        alive = [proc for proc, s in current.items() if now - s.beat_at <= bound]
        out = set()
        for proc, s in current.items():
            peers = [current[q] for q in alive if q != proc]
            if not peers:
                continue  # no peer beats: nothing tells this worker's silence from the job's or ours
            frozen = now - s.beat_at > bound
            stuck = (now - s.step_at > bound and not s.waiting
                     and any(p.waiting and p.steps >= s.steps for p in peers))
            if frozen or stuck:
                out.add(proc[0])  # a node's processes are one member: the node is hung
        return sorted(out)

    def _measure(self, job: str, step_s: float) -> None:
        old = self._step_s.get(job)
        self._step_s[job] = step_s if old is None else 0.8 * old + 0.2 * step_s
