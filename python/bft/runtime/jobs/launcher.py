"""Launching elastic PyTorch jobs with torchrun: their command lines, the environment of every
process the manager starts (its tags, :mod:`.processes` finds them by), and what torchrun leaves
behind (the workers' logs, the failed worker's exit code).
"""

from __future__ import annotations

import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional, Sequence

from ...jobs import FULL_CONFIGURATION
from ...train import protocol

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
    procs_per_node: int = 1  # the job's processes on each node (torchrun's --nproc-per-node)


def torchrun_argv(spec: LaunchSpec) -> List[str]:
    """The torchrun command line of one agent.

    The rendezvous store is the manager's (``is_host=false``): no agent hosts it, so losing any node
    never loses the rendezvous. Each generation is a fresh rendezvous id.
    """
    rdzv_conf = "is_host=false,join_timeout=120,last_call_timeout=1,close_timeout=5"
    return [
        spec.python, "-m", "bft.runtime.agent",  # torchrun, quiet about planned stops
        f"--nnodes={spec.min_nodes}:{spec.max_nodes}",
        f"--nproc-per-node={spec.procs_per_node}",
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


def standby_environment(identity: str, node: str, local_rank: int = 0, procs_per_node: int = 1) -> Dict[str, str]:
    """A standby's: bound to device `local_rank` of its node's `procs_per_node` from its start (it
    becomes that local rank's worker)."""
    return {**node_environment(identity, node), protocol.ENV_STANDBY: "1",
            protocol.ENV_PROCS_PER_NODE: str(procs_per_node), **local_rank_environment(local_rank, procs_per_node)}


def local_rank_environment(local_rank: int, procs_per_node: int) -> Dict[str, str]:
    """What tells one of a node's in-place workers which it is (torchrun sets the same for its own)."""
    return {"LOCAL_RANK": str(local_rank), "LOCAL_WORLD_SIZE": str(procs_per_node)}


def job_environment(*, job: str, generation: int, node: str, identity: str, report_address: str, secret_file: Path,
                    checkpoint_dir: Path, work: Optional[float], checkpoint_grace_s: float,
                    configuration: str = FULL_CONFIGURATION, exit_file: Optional[Path] = None,
                    procs_per_node: int = 1) -> Dict[str, str]:
    env = {
        **node_environment(identity, node),
        protocol.ENV_PROCS_PER_NODE: str(procs_per_node),
        protocol.ENV_CONFIGURATION: configuration,
        protocol.ENV_JOB_ID: job,
        protocol.ENV_GENERATION: str(generation),
        protocol.ENV_REPORT_ADDR: report_address,
        # The path of the secret, never the secret: the launch crosses the network (docs/security.md).
        protocol.ENV_JOB_SECRET_FILE: str(secret_file),
        protocol.ENV_CHECKPOINT_DIR: str(checkpoint_dir),
        protocol.ENV_GRACE_S: f"{checkpoint_grace_s:g}",
    }
    if work is not None:
        env[protocol.ENV_TARGET_SAMPLES] = f"{work:.0f}"
    if exit_file is not None:
        env[protocol.ENV_EXIT_FILE] = str(exit_file)
    return env


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
