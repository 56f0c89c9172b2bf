"""The Slurm commands the Slurm node source runs (sbatch, squeue, scancel, scontrol, sinfo,
sacctmgr), each with a time limit and Slurm's own first line as the error, and the pilot job's
batch script: what Slurm supplies to the scheduler-neutral pilot (:mod:`.pilots`). The source
composes one :class:`SlurmCommands`, built from the pilots' options alone.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import subprocess
from typing import Dict, List, Mapping, NamedTuple, Optional, Sequence

from .base import SourceError
from .pilot_reports import pilot_program

log = logging.getLogger(__name__)

_COMMAND_TIMEOUT_S = 30.0

# The pilot program travels inline in single quotes: compute nodes need only a python3. The batch
# shell only starts it as step 0 (Slurm does not signal the shell at preemption).
PILOT_SCRIPT = f"""#!/bin/sh
# libbft pilot job: holds this node for a bft manager (see docs/slurm.md).
exec srun --overlap --nodes=1 --ntasks=1 --quiet --export=ALL python3 -c '{pilot_program()}'
"""
# Slurm's variables that name a pilot's job and node (pilot.py reads them by these names).
JOB_VAR, NODE_VAR = "SLURM_JOB_ID", "SLURMD_NODENAME"
PILOT_PREFIX = "bft-pilot."  # every manager's pilots are named bft-pilot.<identity>


class Queued(NamedTuple):
    """One of the manager's pilot jobs as squeue shows it."""

    state: str  # squeue's state: PENDING, RUNNING, COMPLETING, ...
    node: str
    preempted: bool  # Slurm has preempted it (PreemptTime set): its node is being taken back
    held: bool  # pending and held by its user (scontrol uhold)


def _first_line(text: str) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return lines[0] if lines else ""


_IDENTITY_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._@:+-]{0,100}$")
_GPUS_RE = re.compile(r"^(?:[A-Za-z0-9_.-]+:)?[1-9][0-9]{0,3}$")  # --slurm-gpus-per-node: [TYPE:]N


class SlurmCommands:
    def __init__(self, *, identity: str, job_name: str, user: str, partition: str, qos: str, account: str,
                 time_limit: str, time_min: str, pilot_output: str, gpus_per_node: str = ""):
        """Refuses what cannot go into a pilot's sbatch line (its job name, its --gres)."""
        if not _IDENTITY_RE.match(identity):
            raise SourceError(f"slurm: manager identity {identity!r} is not usable in a Slurm job name "
                              "(letters, digits and . _ @ : + - only, at most 101 characters)")
        if gpus_per_node and not _GPUS_RE.match(gpus_per_node):
            raise SourceError(f"slurm: --slurm-gpus-per-node takes N or TYPE:N (N from 1 to 9999), "
                              f"got {gpus_per_node!r}")
        self.identity, self.job_name, self.user = identity, job_name, user
        self.partition, self.qos, self.account = partition, qos, account
        self.time_limit, self.time_min, self.pilot_output = time_limit, time_min, pilot_output
        self.gpus_per_node = gpus_per_node

    def run(self, argv: Sequence[str], stdin: Optional[str] = None, env: Optional[Mapping[str, str]] = None) -> str:
        """Runs a Slurm command; its stdout, or SourceError with Slurm's own first line."""
        try:
            r = subprocess.run(
                list(argv), input=stdin, capture_output=True, text=True, timeout=_COMMAND_TIMEOUT_S,
                env=dict(env) if env is not None else None,
            )
        except FileNotFoundError:
            raise SourceError(f"slurm: {argv[0]} not found on PATH (is the Slurm client installed?)") from None
        except subprocess.TimeoutExpired:
            raise SourceError(f"slurm: '{' '.join(argv[:2])}' got no answer in {_COMMAND_TIMEOUT_S:.0f} s "
                              "(slurmctld down or unreachable?)") from None
        if r.returncode != 0:
            why = _first_line(r.stderr) or _first_line(r.stdout) or f"exit status {r.returncode}"
            raise SourceError(f"slurm: {argv[0]} failed: {why}")
        return r.stdout

    def _pilot_options(self) -> List[str]:
        opts = ["--nodes=1", "--exclusive", "--no-requeue", f"--job-name={self.job_name}",
                f"--comment=bft-manager={self.identity}", f"--time={self.time_limit}"]
        # An --exclusive job holds all of its node's GPUs, but its steps get only those it asked for
        # (none: no CUDA_VISIBLE_DEVICES, and no access under ConstrainDevices). --gres, unlike
        # --gpus-per-node, needs no select/cons_tres.
        gres = f"gpu:{self.gpus_per_node}" if self.gpus_per_node else ""
        for flag, value in (("--time-min", self.time_min), ("--partition", self.partition),
                            ("--qos", self.qos), ("--account", self.account), ("--gres", gres)):
            if value:
                opts.append(f"{flag}={value}")
        return opts

    def check(self) -> float:
        """Everything a pilot submission needs, checked without submitting one; the grace time a
        pilot's node has between Slurm's SIGTERM and its SIGKILL."""
        missing = [c for c in ("sbatch", "squeue", "scancel", "scontrol", "srun") if shutil.which(c) is None]
        if missing:
            raise SourceError(f"slurm: {', '.join(missing)} not found on PATH (is the Slurm client installed?)")
        conf = os.environ.get("SLURM_CONF")
        if conf and not os.path.isfile(conf):
            # Slurm's own clients would retry for a minute before saying so.
            raise SourceError(f"slurm: SLURM_CONF={conf} does not exist")
        # --test-only validates partition, QOS, account, time limits and the user's rights on them
        # exactly as a submission would, and submits nothing.
        try:
            self.run(["sbatch", "--test-only", *self._pilot_options(), "--output=/dev/null", "--wrap=true"])
        except SourceError as e:
            what = ", ".join(f"{k} {v}" for k, v in (("partition", self.partition), ("qos", self.qos),
                                                      ("account", self.account), ("time", self.time_limit),
                                                      ("gpus per node", self.gpus_per_node)) if v)
            raise SourceError(f"slurm: cannot submit pilot jobs as user {self.user} ({what}): "
                              f"{str(e).split(' failed: ', 1)[-1]}") from None
        part = self.partition or self._default_partition()
        out = self.run(["scontrol", "show", "partition", "--oneliner", part])
        m = re.search(r"\bGraceTime=(\d+)", out)
        grace_s = float(m.group(1)) if m else 0.0
        if self.qos:
            grace_s = max(grace_s, self._qos_grace_s())
        if grace_s == 0:
            # No preemption grace (e.g. backfill-only pilots): a time limit or a cancellation
            # still leaves KillWait between SIGTERM and SIGKILL.
            m = re.search(r"^KillWait\s*=\s*(\d+)", self.run(["scontrol", "show", "config"]), re.M)
            grace_s = float(m.group(1)) if m else 0.0
        return grace_s

    def _qos_grace_s(self) -> float:
        """The QOS's GraceTime (preempt/qos); 0 where there is no accounting database to ask."""
        try:
            r = subprocess.run(["sacctmgr", "--noheader", "--parsable2", "show", "qos", self.qos, "format=GraceTime"],
                               capture_output=True, text=True, timeout=_COMMAND_TIMEOUT_S)
        except (OSError, subprocess.TimeoutExpired):
            return 0.0
        m = re.fullmatch(r"(?:(\d+)-)?(?:(\d+):)?(\d+):(\d+)", r.stdout.strip()) if r.returncode == 0 else None
        if not m:
            return 0.0
        d, h, mi, sec = (int(x) if x else 0 for x in m.groups())
        return float(((d * 24 + h) * 60 + mi) * 60 + sec)

    def _default_partition(self) -> str:
        out = self.run(["sinfo", "--noheader", "--format=%P"])
        for p in out.split():
            if p.endswith("*"):
                return p[:-1]
        raise SourceError("slurm: no --slurm-partition given and the cluster has no default partition")

    def squeue(self, job_ids: Sequence[str] = ()) -> Dict[str, Queued]:
        """This manager's pilot jobs (or those of `job_ids` among them), by job id."""
        which = [f"--jobs={','.join(job_ids)}"] if job_ids else []
        out = self.run(["squeue", "--noheader", f"--user={self.user}", f"--name={self.job_name}", *which,
                        "--Format=JobID:|,State:|,NodeList:|,PreemptTime:|,Reason:|"])
        jobs = {}
        for line in out.splitlines():
            parts = line.strip().split("|")
            if len(parts) >= 5:
                preempted = parts[3] not in ("", "N/A", "None", "Unknown")
                jobs[parts[0]] = Queued(parts[1], parts[2], preempted, parts[4] == "JobHeldUser")
        return jobs

    def hold(self, job_ids: Sequence[str], hold: bool) -> None:
        """Holds (scontrol uhold) or releases pending pilots; a job gone meanwhile is a log line."""
        if job_ids:
            try:
                self.run(["scontrol", "uhold" if hold else "release", ",".join(job_ids)])
            except SourceError as e:
                log.warning("%s", e)

    def submit(self, pilot_env: Mapping[str, str]) -> str:
        """Submits one pilot with `pilot_env` (PilotReports.pilot_environment); its job id."""
        env = {**os.environ, **pilot_env}
        # Only these variables reach the pilot (the secret's path: the secret itself stays in the
        # state directory); Slurm adds its own SLURM_* variables.
        out = self.run(["sbatch", "--parsable", *self._pilot_options(), f"--output={self.pilot_output}",
                        f"--export={','.join(['PATH', *pilot_env])}"], stdin=PILOT_SCRIPT, env=env)
        return out.strip().split(";")[0]

    def cancel(self, job_ids: Sequence[str]) -> None:
        if job_ids:
            try:
                self.run(["scancel", *job_ids])
            except SourceError as e:  # a job that ended meanwhile is not an error worth more than a log line
                log.warning("%s", e)
