"""The manager's options and their defaults, in one place: ``bft manager``'s argument table
(:mod:`.cli_options`) reads its defaults from ``DEFAULTS``, and the API (``Manager``) takes the same
dataclass, so a default is never restated."""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from typing import Callable, Mapping, Optional, Tuple

from .. import alloc, curve, sim
from ..train.protocol import DEFAULT_GRACE_S, DEFAULT_INPLACE_TIMEOUT_S
from .jobs.resize import AUTO, check_resize_choice, may_run_in_place
from .trust.addresses import check_listen_address


@dataclass
class ManagerOptions:
    policy: str = sim.DEFAULT_POLICY  # the defaults of bft replay, from the C++ option structs
    resize: str = AUTO  # the method of a job submitted without one (bft submit --resize)
    tfwd_s: float = alloc.DEFAULT_TFWD_S
    # What the allocator maximises for each job, learned as the replay learns it (curve.Objective):
    # "throughput" (samples/s) or "speedup" (over the job's own one-node rate).
    objective: str = "throughput"
    max_jobs: int = sim.DEFAULT_MAX_JOBS
    bind_address: str = ""  # where the rendezvous store and the report socket listen ("": the source's)
    store_port: int = 0  # 0: any free port
    report_port: int = 0
    checkpoint_grace_s: float = DEFAULT_GRACE_S  # a job's time to checkpoint after SIGTERM before it is killed
    scale_up_s: float = 5.0  # relaunch costs the allocator assumes until the advisor measured some
    scale_down_s: float = 5.0
    # The same for in-place rescales (--resize inplace), from what was measured on CPU/gloo
    # (bench/README.md, issue 22 item 6): a grow as the advisor measures it, 2.46 s and 2.92 s in two
    # runs (more than its ~0.5 s gap: the job trains at the old size's rate while the newcomer starts);
    # a shrink as its gap (medians 0.50 s and 0.65 s), not as free as the advisor measures it (~0 s).
    inplace_scale_up_s: float = 2.5
    inplace_scale_down_s: float = 0.5
    max_retries: int = 2
    curve_change: float = 0.15  # relative change of a learned curve that triggers a new decision
    min_decision_interval_s: float = 2.0  # between decisions triggered by curve changes alone
    # Reports after a (re)start that still count as warm-up. The first report of a process comes
    # after its first step, so a short warm-up suffices (the replay's default, 30 s, is for Summit).
    advisor_warmup_s: float = 3.0
    # A running job with no progress report for this long is silent (lowest priority, flagged).
    report_timeout_s: float = 60.0
    # An in-place resize whose new process group has not formed in this long fails: relaunch instead.
    inplace_timeout_s: float = DEFAULT_INPLACE_TIMEOUT_S
    # Warm standbys on idle nodes (for jobs resized in place); None: on unless --resize relaunch or
    # membership (a job may still ask for inplace: it then starts without a standby).
    standby: Optional[bool] = None
    # The processes a job runs on each node unless it asks for fewer (bft submit --procs-per-node): the
    # most a node gives (--procs-per-node N, or auto: resolve_procs_per_node).
    procs_per_node: int = 1
    # How it was found (resolve_procs_per_node), for the manager's first line: not part of the value.
    procs_per_node_found: str = field(default="", compare=False)

    @property
    def standbys(self) -> bool:
        return self.standby if self.standby is not None else may_run_in_place(self.resize)

    def check(self) -> None:
        if self.policy not in alloc.SOLVERS:
            raise ValueError(f"--policy: unknown policy {self.policy!r} (choose from {', '.join(alloc.SOLVERS)})")
        check_resize_choice(self.resize)
        if self.bind_address:  # "": the node source's address, checked by the source
            check_listen_address("--bind", self.bind_address)
        try:
            curve.objective_from_string(self.objective)
        except ValueError as e:
            raise ValueError(f"--objective: {e}") from None
        # The command line's name of each (bft manager --help); the others are options of the API only.
        flags = {"tfwd_s": "--tfwd", "checkpoint_grace_s": "--grace", "report_timeout_s": "--report-timeout",
                 "inplace_timeout_s": "--inplace-timeout"}
        for name in ("tfwd_s", "checkpoint_grace_s", "advisor_warmup_s", "scale_up_s", "scale_down_s",
                     "inplace_scale_up_s", "inplace_scale_down_s", "curve_change", "min_decision_interval_s",
                     "report_timeout_s", "inplace_timeout_s"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value >= 0):
                raise ValueError(f"{flags.get(name, '--' + name.replace('_', '-'))}: expected a finite number >= 0, "
                                 f"got {value}")
        # The allocator's horizon and rescale costs: within them no job the format accepts can overflow it.
        for name in ("tfwd_s", "scale_up_s", "scale_down_s", "inplace_scale_up_s", "inplace_scale_down_s"):
            value = getattr(self, name)
            if value > alloc.MAX_HORIZON_S or (name == "tfwd_s" and value == 0):
                raise ValueError(f"{flags.get(name, '--' + name.replace('_', '-'))}: expected seconds in "
                                 f"{'(0' if name == 'tfwd_s' else '[0'}, {alloc.MAX_HORIZON_S:g}], got {value:g}")
        for flag, port in (("--store-port", self.store_port), ("--report-port", self.report_port)):
            if isinstance(port, bool) or not isinstance(port, int) or not 0 <= port <= 65535:
                raise ValueError(f"{flag}: expected a port in [0, 65535] (0: any free one), got {port}")
        if self.max_jobs < 1:
            raise ValueError("--max-jobs must be >= 1")
        if self.max_retries < 0:
            raise ValueError("--max-retries must be >= 0")
        if not 1 <= self.procs_per_node <= MAX_PROCS_PER_NODE:
            raise ValueError(f"--procs-per-node: expected 1 to {MAX_PROCS_PER_NODE}, got {self.procs_per_node}")


# The most processes a node runs for one job (the largest nodes have 8 GPUs, or 8 dies of 4 GPUs).
MAX_PROCS_PER_NODE = 64
AUTO_PROCS = "auto"


def _device_list(value: str) -> int:
    """The devices a CUDA_VISIBLE_DEVICES or Slurm GPU list names ("0,1,3", "GPU-uuid,...")."""
    return len([d for d in value.split(",") if d.strip()])


def resolve_procs_per_node(text: str, environ: Mapping[str, str] = os.environ,
                           device_count: Optional[Callable[[], int]] = None) -> Tuple[int, str]:
    """``--procs-per-node N|auto`` as (N, how it was found). ``auto``: one process per accelerator
    of the node the manager runs on, the first of: CUDA_VISIBLE_DEVICES (set: its entries, none
    meaning 1), Slurm's allocation (SLURM_GPUS_ON_NODE, then the lists SLURM_STEP_GPUS and
    SLURM_JOB_GPUS), the GPUs torch sees (torch.cuda.device_count()); else 1. ValueError names the
    flag for anything else."""
    if text != AUTO_PROCS:
        try:
            return int(text), f"--procs-per-node {int(text)}"
        except ValueError:
            raise ValueError(f"--procs-per-node: expected a whole number or {AUTO_PROCS}, got {text!r}") from None
    visible = environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        return max(1, _device_list(visible)), f"CUDA_VISIBLE_DEVICES={visible!r}"
    on_node = environ.get("SLURM_GPUS_ON_NODE", "").strip()
    if on_node.isdigit() and int(on_node) > 0:
        return int(on_node), f"SLURM_GPUS_ON_NODE={on_node}"
    for name in ("SLURM_STEP_GPUS", "SLURM_JOB_GPUS"):
        if _device_list(environ.get(name, "")):
            return _device_list(environ[name]), f"{name}={environ[name]!r}"
    if device_count is None:
        def device_count() -> int:
            import torch

            return torch.cuda.device_count()
    count = device_count()
    if count > 0:
        return count, f"torch.cuda.device_count() = {count}"
    return 1, "no accelerator found (CUDA_VISIBLE_DEVICES, Slurm's GPUs and torch.cuda all say none)"


DEFAULTS = ManagerOptions()
# The Prometheus exporter's (bft manager --metrics-*; bft.runtime.ops.metrics).
METRICS_ADDRESS = "127.0.0.1"
METRICS_INTERVAL_S = 5.0
