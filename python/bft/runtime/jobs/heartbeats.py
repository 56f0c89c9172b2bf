"""Hung in-place workers, found by their heartbeats (docs/runtime.md, "A hung worker").

Every in-place worker writes "<beats> <steps> <waiting>" into its job's store every 0.5 s from a
thread of its own (bft.train.store_link): `beats` grows while the process runs, `steps` counts its step
boundaries, `waiting` says it waits for its peers at one. The lifecycle reads them about once a
second; this part judges them (pure: no I/O). A worker is hung when, while a peer of its job still
beats,

- its beats stopped (a stopped or frozen process: SIGSTOP, a node that no longer schedules it), or
- its steps stopped while it does not wait at the step boundary and a peer waits there, at the same
  step or later (a hang between two boundaries: a stuck data loader, a deadlock in the script),

for longer than its bound. The beats come from a thread of their own, whatever the script does, so
a silence is judged against how late a healthy process's beat can be on this machine now (the
floor): JITTER_MARGIN times the longest pause between two beats of the job's processes seen in the
last JITTER_WINDOW_S (a loaded 2-core VM stalled a heartbeat thread for 3 s), at least MIN_FLOOR_S,
UNSURE_FLOOR_S while the job has been seen beating for less than JITTER_LEARN_S. Steps are the
script's: a step that stopped is judged against HUNG_STEPS of the job's own steps (measured from the
beats' step counts), never shorter than the floor. Both are at most --inplace-timeout, which is also
the stuck step's bound until a step time is measured.
"""

from __future__ import annotations

import collections
from dataclasses import dataclass
from typing import Deque, Dict, Optional, Tuple

HUNG_STEPS = 20  # steps of the job's own pace without a sign of life or progress
MIN_FLOOR_S = 5.0  # never sooner, however punctual the beats
JITTER_MARGIN = 4.0  # the floor: this many times the longest recent pause between a process's beats
JITTER_WINDOW_S = 60.0  # how long a pause is remembered
JITTER_LEARN_S = 5.0  # beats seen for less than this: the floor is UNSURE_FLOOR_S
UNSURE_FLOOR_S = 10.0
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
        self._first_read: Dict[str, float] = {}  # job -> when its beats were first read
        self._pauses: Dict[str, Deque[Tuple[float, float]]] = {}  # job -> (when, pause) between beats, recent

    def due(self, job: str, now: float) -> bool:
        """Whether the job's heartbeats are to be read now (about once a second)."""
        if now < self._read_at.get(job, 0.0):
            return False
        self._read_at[job] = now + READ_S
        return True

    def silent_bound_s(self, job: str) -> float:
        """How long a process of the job may send no beat."""
        return min(self.timeout_s, self.floor_s(job))

    def stuck_bound_s(self, job: str) -> float:
        """How long a process of the job may make no step while a peer waits for it."""
        step = self._step_s.get(job)
        return self.timeout_s if step is None else min(self.timeout_s, max(self.floor_s(job), HUNG_STEPS * step))

    def floor_s(self, job: str) -> float:
        """The shortest bound: how late a healthy process's beat can be on this machine, with a margin."""
        pauses = self._pauses.get(job)
        if not pauses or pauses[-1][0] - self._first_read[job] < JITTER_LEARN_S:
            return UNSURE_FLOOR_S
        return max(MIN_FLOOR_S, JITTER_MARGIN * max(p for _, p in pauses))

    def forget(self, job: str) -> None:
        """The job ended, or its heartbeats could not be read: they are judged afresh from the next."""
        self._seen = {k: v for k, v in self._seen.items() if k[0] != job}
        for table in (self._read_at, self._first_read, self._pauses):
            table.pop(job, None)

    def hung(self, job: str, beats: Dict[Tuple[str, int], str], now: float) -> Dict[str, float]:
        """The nodes whose worker is hung, each with the bound it overran, from the heartbeats just read:
        (node, worker pid) -> value, for the job's workers that run and have joined their generation."""
        current: Dict[Tuple[str, int], _Seen] = {}  # (node, pid): every process of a node is judged
        self._first_read.setdefault(job, now)
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
                    self._pause(job, now, now - seen.beat_at)
                    seen.beats, seen.beat_at = b, now
                if steps > seen.steps:
                    self._measure(job, (now - seen.step_at) / (steps - seen.steps))
                    seen.steps, seen.step_at = steps, now
                seen.waiting = waiting
            self._seen[key] = current[(node, pid)] = seen
        self._seen = {k: v for k, v in self._seen.items() if k[0] != job or current.get(k[1:]) is v}
        silent, stuck = self.silent_bound_s(job), self.stuck_bound_s(job)
        alive = [proc for proc, s in current.items() if now - s.beat_at <= silent]
        out: Dict[str, float] = {}
        for proc, s in current.items():
            peers = [current[q] for q in alive if q != proc]
            if not peers:
                continue  # no peer beats: nothing tells this worker's silence from the job's or ours
            if now - s.beat_at > silent:
                out[proc[0]] = silent  # a node's processes are one member: the node is hung
            elif (now - s.step_at > stuck and not s.waiting
                  and any(p.waiting and p.steps >= s.steps for p in peers)):
                out.setdefault(proc[0], stuck)
        return dict(sorted(out.items()))

    def _pause(self, job: str, now: float, pause: float) -> None:
        pauses = self._pauses.setdefault(job, collections.deque())
        pauses.append((now, pause))
        while pauses[0][0] < now - JITTER_WINDOW_S:
            pauses.popleft()

    def _measure(self, job: str, step_s: float) -> None:
        old = self._step_s.get(job)
        self._step_s[job] = step_s if old is None else 0.8 * old + 0.2 * step_s
