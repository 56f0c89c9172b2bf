"""Launching elastic PyTorch jobs with torchrun, and finding every process the manager started.

Every process the manager starts carries its identity in the environment (``BFT_MANAGER_ID``,
``BFT_JOB_ID``, ``BFT_NODE``). torchrun starts its workers in sessions of their own, so killing an
agent's process group does not reach them; the environment tag does, because workers inherit it.
A restarted manager, a node source that must clear a reclaimed node, and the tests all find
processes the same way: :func:`tagged_processes`.
"""

from __future__ import annotations

import os
import re
import signal
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, Iterable, List, Mapping, Optional, Sequence

from ..train import protocol

AGENTS_DIR = "agents"  # in a job's directory: the agents' exit files


@dataclass(frozen=True)
class LaunchSpec:
    """What one torchrun agent of a job needs to know."""

    job: str
    generation: int
    script: str
    args: Sequence[str]
    python: str
    node: str
    node_address: str
    store_address: str  # host:port of the manager's rendezvous store
    min_nodes: int  # torchrun's --nnodes range for this launch
    max_nodes: int
    max_restarts: int
    log_dir: Path  # torchrun copies each worker's stdout/stderr here (and to the job's output)


def torchrun_argv(spec: LaunchSpec) -> List[str]:
    """The torchrun command line of one agent.

    The rendezvous store is the manager's (``is_host=false``): no agent hosts it, so losing any node
    never loses the rendezvous. Each generation is a fresh rendezvous id.
    """
    rdzv_conf = "is_host=false,join_timeout=120,last_call_timeout=1,close_timeout=5"
    return [
        spec.python, "-m", "bft.runtime.agent",  # torchrun, quiet about planned stops
        f"--nnodes={spec.min_nodes}:{spec.max_nodes}",
        "--nproc-per-node=1",
        "--rdzv-backend=c10d",
        f"--rdzv-endpoint={spec.store_address}",
        f"--rdzv-id={spec.job}-g{spec.generation}",
        f"--rdzv-conf={rdzv_conf}",
        f"--max-restarts={spec.max_restarts}",
        "--monitor-interval=0.2",
        f"--local-addr={spec.node_address}",
        f"--log-dir={spec.log_dir}", "--tee=3",
        spec.script, *spec.args,
    ]


def script_argv(spec: LaunchSpec) -> List[str]:
    """The command line of one in-place worker: the script itself, no torchrun (bft.train.run leaves
    its exit status for a restarted manager)."""
    return [spec.python, "-m", "bft.train.run", spec.script, *spec.args]


def standby_argv(python: str) -> List[str]:
    """The command line of a warm standby (bft.train.standby): it imports torch and waits for a job."""
    return [python, "-m", "bft.train.standby"]


def node_environment(identity: str, node: str) -> Dict[str, str]:
    """What every process the manager starts on a node gets, a job's or a standby's: the tags, and
    what must be set before Python and torch start (a standby's cannot change after its imports)."""
    return {
        protocol.ENV_MANAGER_ID: identity,
        protocol.ENV_NODE: node,
        "PYTHONUNBUFFERED": "1",
        # Several virtual nodes share a host's cores; one thread per worker unless the user says otherwise.
        "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1"),
    }


def standby_environment(identity: str, node: str) -> Dict[str, str]:
    return {**node_environment(identity, node), protocol.ENV_STANDBY: "1"}


def job_environment(*, job: str, generation: int, node: str, identity: str, report_address: str, secret: str,
                    checkpoint_dir: Path, work: Optional[float], grace_s: float, configuration: str = "full",
                    exit_file: Optional[Path] = None) -> Dict[str, str]:
    env = {
        **node_environment(identity, node),
        protocol.ENV_CONFIGURATION: configuration,
        protocol.ENV_JOB_ID: job,
        protocol.ENV_GENERATION: str(generation),
        protocol.ENV_REPORT_ADDR: report_address,
        protocol.ENV_JOB_SECRET: secret,
        protocol.ENV_CHECKPOINT_DIR: str(checkpoint_dir),
        protocol.ENV_GRACE_S: f"{grace_s:g}",
    }
    if work is not None:
        env[protocol.ENV_TARGET_SAMPLES] = f"{work:.0f}"
    if exit_file is not None:
        env[protocol.ENV_EXIT_FILE] = str(exit_file)
    return env


# -- finding and ending processes -----------------------------------------------------------------

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


class AdoptedAgent:
    """An agent a previous manager started (so not a child of this one): the Popen calls the manager
    makes, from its pid and the exit status the agent leaves in its exit file (bft.runtime.agent)."""

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


def default_python() -> str:
    return sys.executable


def worker_log_tail(log_dir: Path, lines: int) -> str:
    """The last lines the job's workers wrote in their latest attempt (torchrun's --log-dir layout:
    <run>/attempt_<k>/<local rank>/stdout.log and stderr.log), stderr after stdout."""
    files = sorted(log_dir.glob("*/attempt_*/*/std*.log"), key=lambda f: f.stat().st_mtime)
    if not files:
        return ""
    newest_attempt = files[-1].parent
    text = []
    for name in ("stdout.log", "stderr.log"):
        try:
            text += (newest_attempt / name).read_text(errors="replace").splitlines()
        except OSError:
            pass
    return "\n".join(text[-lines:])


def worker_exit_code(agent_output: str) -> Optional[int]:
    """The failed worker's exit code from torchrun's error summary ("exitcode  : 3"), if it printed one."""
    codes = re.findall(r"exitcode\s*:\s*(-?\d+)", agent_output)
    return int(codes[-1]) if codes else None
