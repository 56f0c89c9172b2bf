"""Warm standbys, the manager's side (``--resize inplace``; docs/runtime.md, "Warm standbys").

Every node of the pool where nothing of a job runs gets a standby for each of its processes (``bft
manager --procs-per-node``; standby k bound to device k, as the worker of local rank k it becomes)
(:mod:`bft.train.standby`), started through the node source's ``launch`` like a worker, so it works
wherever workers do (``srun`` for Slurm). The manager holds the standby's standard input, the only
way to give it work: a job launched on the node is written there as one line and the standby becomes
that job's worker, the same process (its pid goes into the job's process row). Closing the pipe ends
a standby that has no job; so does the manager's death (its end of the pipe closes).

Standbys are no job's processes: they hold no node (a node with a standby is idle), have no process
rows, count in no node-hours, and a reclaim ends its node's standby at once (SIGTERM: a standby has
nothing to save; its default action ends it even in the middle of its imports).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Callable, Dict, Iterable, List, Mapping, Sequence

from ..sources.base import NodeSource, SourceError
from .launcher import standby_argv, standby_environment

# A standby that ended on its own (a broken environment, an import error) is not restarted on that
# node for this long, so a standby that cannot start does not become a loop of starts.
RETRY_S = 30.0


class Standbys:
    def __init__(self, *, source: NodeSource, identity: str, python: str, state_dir: Path,
                 log_event: Callable[..., None], procs_per_node: int = 1):
        """`state_dir`: where `standby.log` goes; `log_event`: the manager's event log; `procs_per_node`:
        the standbys of each node (the manager's processes per node)."""
        self.source = source
        self.procs_per_node = procs_per_node
        self.log_event = log_event
        self.identity = identity
        self.python = python
        self.log_path = state_dir / "standby.log"  # what standbys print before they get a job
        self._procs: Dict[str, List[subprocess.Popen]] = {}  # node -> its standbys by local rank, waiting
        self._ending: List[subprocess.Popen] = []  # ended, to be reaped
        self._retry_at: Dict[str, float] = {}  # node -> (monotonic) no new standby before

    def nodes(self) -> List[str]:
        return sorted(self._procs)

    def fill(self, idle: Iterable[str]) -> None:
        """Starts the standbys of every node of `idle` that has none; reaps those that ended."""
        self._reap()
        now = time.monotonic()
        for node in idle:
            if node in self._procs or self._retry_at.get(node, 0.0) > now:
                continue
            procs: List[subprocess.Popen] = []
            try:
                # In the manager's directory: it imports what the manager imports, also through a
                # relative PYTHONPATH; the job's directory is known only at its assignment.
                for k in range(self.procs_per_node):
                    env = standby_environment(self.identity, node, k, self.procs_per_node)
                    procs.append(self.source.launch(node, standby_argv(self.python), env, self.log_path, stdin=True))
            except (SourceError, OSError):  # the node is not usable now: its job launch will say why
                self.discard(procs)
                self._retry_at[node] = now + RETRY_S
                continue
            self._procs[node] = procs

    def take(self, node: str, python: str, count: int) -> List[subprocess.Popen]:
        """The first `count` standbys on `node` (local ranks 0..count-1), handed over for a job run by
        `python`, or none (no live standbys, too few, or of another interpreter: ended, so that the node
        runs the job's processes alone). The node's other standbys end: the node is the job's."""
        procs = self._procs.pop(node, [])
        usable = (len(procs) >= count and python == self.python and all(p.poll() is None for p in procs[:count]))
        self.discard(procs[count:] if usable else procs)
        return procs[:count] if usable else []

    @staticmethod
    def assign(proc: subprocess.Popen, *, argv: Sequence[str], env: Mapping[str, str], cwd: Path,
               log_path: Path) -> bool:
        """Gives a taken standby its job (bft.train.standby's assignment line); False if it is gone."""
        line = json.dumps({"argv": list(argv), "env": dict(env), "cwd": str(cwd), "log": str(log_path)}) + "\n"
        try:
            proc.stdin.write(line.encode())  # one line, far below a pipe's buffer: never blocks
            proc.stdin.close()
            return True
        except OSError:  # it ended meanwhile (a broken pipe)
            return False

    def end(self, node: str) -> None:
        """Ends the node's standbys now (its node is reclaimed, or the manager stops)."""
        self.discard(self._procs.pop(node, []))

    def end_all(self) -> None:
        for node in list(self._procs):
            self.end(node)

    def discard(self, procs: Iterable[subprocess.Popen]) -> None:
        """Ends standbys that are no node's any more (reaped later)."""
        for proc in procs:
            try:
                proc.stdin.close()  # an unassigned standby reads EOF and exits 0
            except OSError:
                pass
            try:
                os.killpg(proc.pid, signal.SIGTERM)  # at once, even in the middle of its imports
            except ProcessLookupError:
                pass
            self._ending.append(proc)

    def _reap(self) -> None:
        now = time.monotonic()
        for node, procs in list(self._procs.items()):
            ended = next((proc for proc in procs if proc.poll() is not None), None)
            if ended is not None:  # one ended on its own: the node's are not restarted there for a while
                self.log_event("standby_ended", node=node, exit_code=ended.returncode, retry_in_s=RETRY_S,
                               log=str(self.log_path))
                self.end(node)
                self._retry_at[node] = now + RETRY_S
        self._ending = [p for p in self._ending if p.poll() is None]
