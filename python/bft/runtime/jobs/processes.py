"""Finding and ending every process the manager started, by the tags in its environment.

Every process the manager starts carries its identity in the environment (``BFT_MANAGER_ID``,
``BFT_JOB_ID``, ``BFT_NODE``; :func:`bft.runtime.jobs.launcher.node_environment`). torchrun starts its
workers in sessions of their own, so killing an agent's process group does not reach them; the
environment tag does, because workers inherit it. A restarted manager, a node source that must clear
a reclaimed node, and the tests all find processes the same way: :func:`tagged_processes`.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import Dict, Iterable, List, Mapping, Optional

from ...train import protocol


def _environ(pid: int) -> Dict[bytes, bytes]:
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            raw = f.read()
    except OSError:  # gone, or not ours
        return {}
    out = {}
    for item in raw.split(b"\0"):
        key, sep, value = item.partition(b"=")
        if sep:
            out[key] = value
    return out


def _tags(identity: str, job: Optional[str] = None, node: Optional[str] = None) -> Dict[str, str]:
    tags = {protocol.ENV_MANAGER_ID: identity}
    if job is not None:
        tags[protocol.ENV_JOB_ID] = job
    if node is not None:
        tags[protocol.ENV_NODE] = node
    return tags


def is_tagged(pid: int, tags: Mapping[str, str]) -> bool:
    """True if `pid` is alive (not a zombie) and its environment holds every one of `tags`."""
    env = _environ(pid)
    return bool(env) and all(env.get(k.encode()) == v.encode() for k, v in tags.items()) and not _is_zombie(pid)


def tagged_processes(identity: str, *, job: Optional[str] = None, node: Optional[str] = None,
                     except_jobs: Iterable[str] = (), except_pids: Iterable[int] = (),
                     jobs: Optional[Iterable[str]] = None) -> List[int]:
    """PIDs of live processes started by the manager ``identity`` (optionally one job's, or any of
    `jobs`'; one node's; none of `except_jobs`, none of `except_pids`: workers born of standbys carry
    no job tag)."""
    tags = _tags(identity, job, node)
    spared = {j.encode() for j in except_jobs}
    wanted = None if jobs is None else {j.encode() for j in jobs}
    skip = {os.getpid(), *except_pids}

    def job_of(pid: int) -> Optional[bytes]:
        return _environ(pid).get(protocol.ENV_JOB_ID.encode())

    return [int(e) for e in os.listdir("/proc") if e.isdigit() and int(e) not in skip and is_tagged(int(e), tags)
            and (not spared or job_of(int(e)) not in spared) and (wanted is None or job_of(int(e)) in wanted)]


def standby_born(pid: int, identity: str, node: str) -> bool:
    """True if `pid` is alive and was started as a standby of manager `identity` on `node`. A worker
    born of a standby keeps the standby's environment in /proc (fixed at exec), so its job is known
    from the process row that records its pid, not from a tag."""
    return is_tagged(pid, {**_tags(identity, node=node), protocol.ENV_STANDBY: "1"})


class AdoptedProcess:
    """An agent a previous manager started (so not a child of this one): the Popen calls the manager
    makes, from its pid and the exit status the agent leaves in its exit file (bft.runtime.onnode.torchrun_agent)."""

    def __init__(self, *, pid: int, identity: str, job: str, node: str, exit_file: Path):
        self.pid = pid
        self.standby = standby_born(pid, identity, node)
        self._tags = _tags(identity, None if self.standby else job, node)
        if self.standby:
            self._tags[protocol.ENV_STANDBY] = "1"
        self._exit_file = exit_file

    def poll(self) -> Optional[int]:
        if is_tagged(self.pid, self._tags):
            return None
        try:
            return int(self._exit_file.read_text())
        except (OSError, ValueError):
            return -1  # gone without a word (killed): judged like any failure or reclaim


def _is_zombie(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[0] == b"Z"
    except (OSError, IndexError):
        return True


def signal_processes(pids: Iterable[int], sig: int) -> None:
    for pid in pids:
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass


def terminate_tagged(identity: str, grace_s: float, *, job: Optional[str] = None, node: Optional[str] = None,
                     except_jobs: Iterable[str] = (), except_pids: Iterable[int] = ()) -> int:
    """SIGTERM every tagged process (of `job`, of `node`, none of `except_jobs` or `except_pids`),
    SIGKILL what is left after ``grace_s``; returns how many were found."""
    except_pids = set(except_pids)
    pids = tagged_processes(identity, job=job, node=node, except_jobs=except_jobs, except_pids=except_pids)
    if not pids:
        return 0
    signal_processes(pids, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        if not tagged_processes(identity, job=job, node=node, except_jobs=except_jobs, except_pids=except_pids):
            return len(pids)
        time.sleep(0.1)
    signal_processes(tagged_processes(identity, job=job, node=node, except_jobs=except_jobs,
                                      except_pids=except_pids), signal.SIGKILL)
    return len(pids)
