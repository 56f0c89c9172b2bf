"""Shared by the Slurm tests: a real Slurm test cluster (tests/slurm/cluster.sh) for the session, a
multi-host one (cluster.sh --hosts) for a module, and small helpers to look at and drive its queue."""

import contextlib
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Sequence

import pytest

from bft.runtime.sources.base import NodeEvent
from runtime_util import ManagerHarness, python_env

ROOT = Path(__file__).resolve().parents[2]
CLUSTER_SH = ROOT / "tests" / "slurm" / "cluster.sh"
GRACE_S = 5.0  # the pilot partition's GraceTime in cluster.sh
HOSTS = 4  # compute hosts of the multi-host cluster


@contextlib.contextmanager
def _cluster(cluster_dir: Path, *options: str):
    """Starts cluster.sh in cluster_dir; the environment it prints (SLURM_CONF, and on a multi-host
    cluster PATH through its login-host wrappers) holds inside the block. Always stopped."""
    if os.geteuid() != 0:
        pytest.skip("the Slurm test cluster runs its daemons as root (SlurmUser=root); not root here")
    r = subprocess.run([str(CLUSTER_SH), "start", str(cluster_dir), *options], capture_output=True, text=True,
                       timeout=600)
    old = {k: os.environ.get(k) for k in ("SLURM_CONF", "PATH")}
    try:
        if r.returncode == 77:
            pytest.skip(f"no Slurm test cluster {' '.join(options)} here: {r.stderr.strip()}")
        assert r.returncode == 0, f"cluster.sh start failed:\n{r.stderr}"
        env = dict(re.findall(r"^export (\w+)=(.*)$", r.stdout, re.M))
        os.environ["SLURM_CONF"] = env["SLURM_CONF"]
        if "BFT_SLURM_BIN" in env:
            os.environ["PATH"] = f"{env['BFT_SLURM_BIN']}{os.pathsep}{os.environ['PATH']}"
        yield env
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        subprocess.run([str(CLUSTER_SH), "stop", str(cluster_dir)], capture_output=True, timeout=120)


@pytest.fixture(scope="session")
def slurm_cluster(tmp_path_factory):
    """A running one-host test cluster; SLURM_CONF points at it for the whole session."""
    cluster_dir = tmp_path_factory.mktemp("slurm")
    with _cluster(cluster_dir):
        yield cluster_dir


@pytest.fixture(scope="module")
def slurm_hosts(tmp_path_factory):
    """A running multi-host test cluster (HOSTS compute hosts and a login host, each a network
    namespace) for one module: its environment (BFT_SLURM_LOGIN_ADDR, BFT_SLURM_BIN, ...); the
    Slurm commands run on its login host meanwhile."""
    missing = [c for c in ("ip", "nsenter", "unshare") if not shutil.which(c)]
    if missing:
        pytest.skip(f"the multi-host test cluster needs {', '.join(missing)} (iproute2, util-linux)")
    with _cluster(tmp_path_factory.mktemp("slurm-hosts"), "--hosts", str(HOSTS)) as env:
        yield env


# `python -m bft` with the Slurm source imported explicitly, so that the tests do not depend on
# which sources bft's command line registers.
MANAGER = "import sys, bft.runtime.sources.slurm; from bft.cli import main; sys.exit(main())"


class SlurmManager(ManagerHarness):
    """`bft manager --source slurm`, started through ``prefix`` (on a multi-host cluster: its login host)."""

    def __init__(self, root: Path, prefix: Sequence[str] = ()):
        super().__init__(root)
        self.prefix = list(prefix)

    def start(self, *args: str) -> subprocess.Popen:
        log = open(self.root / f"manager-{len(self.procs)}.log", "wb")
        proc = subprocess.Popen([*self.prefix, sys.executable, "-c", MANAGER, "manager", "--state-dir",
                                 str(self.state_dir), "--source", "slurm", *args], env=python_env(), stdout=log,
                                stderr=subprocess.STDOUT, start_new_session=True)
        self.procs.append(proc)
        self.wait(lambda s: True, 60, "the manager to answer", proc=proc)
        self.identity = self.status()["manager"]["identity"]
        return proc

    def stop(self, proc: subprocess.Popen) -> None:
        r = subprocess.run([sys.executable, "-c", MANAGER, "manager", "stop", "--state-dir", str(self.state_dir)],
                           env=python_env(), capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr
        assert proc.wait(60) == 0


@contextlib.contextmanager
def slurm_manager(root: Path, prefix: Sequence[str] = ()):
    """A SlurmManager harness; afterwards every process it started is stopped and the queue emptied."""
    pytest.importorskip("torch", reason="the runtime tests need PyTorch (./dev.sh installs torch==2.13.0)")
    h = SlurmManager(root, prefix)
    try:
        yield h
    finally:
        h.close()
        cancel_and_wait_empty()


class Events:
    """Collects a source's events; waits for them."""

    def __init__(self):
        self.items = []
        self.cond = threading.Condition()
        self.on_reclaim = None

    def __call__(self, e: NodeEvent):
        with self.cond:
            self.items.append(e)
            self.cond.notify_all()
        if e.kind == "reclaim" and self.on_reclaim:
            self.on_reclaim(e)

    def wait(self, pred, timeout_s, what):
        deadline = time.monotonic() + timeout_s
        with self.cond:
            while True:
                found = [e for e in self.items if pred(e)]
                if found:
                    return found
                left = deadline - time.monotonic()
                assert left > 0, f"no {what} within {timeout_s} s; events: {self.items}"
                self.cond.wait(left)

    def held(self):
        """Nodes joined and not reclaimed since, by the events alone."""
        held = set()
        with self.cond:
            for e in self.items:
                (held.add if e.kind == "join" else held.discard)(e.node)
        return held


class Polls:
    """Counts the squeue polls a source has completed, so that a test can wait until the source has
    looked at the queue again (instead of sleeping for a few poll periods)."""

    def __init__(self, source):
        self.count = 0
        self.cond = threading.Condition()
        reconcile = source._reconcile  # the last step of each poll

        def counted(*args, **kwargs):
            try:
                return reconcile(*args, **kwargs)
            finally:
                with self.cond:
                    self.count += 1
                    self.cond.notify_all()

        source._reconcile = counted

    def wait_more(self, n, timeout_s):
        """Returns once n more polls have completed; so with n >= 2 at least one began after the call."""
        with self.cond:
            target = self.count + n
            assert self.cond.wait_for(lambda: self.count >= target, timeout_s), f"no {n} polls within {timeout_s} s"


def wait_until(pred, timeout_s, what, step_s=0.1):
    deadline = time.monotonic() + timeout_s
    while True:
        value = pred()
        if value:
            return value
        assert time.monotonic() < deadline, f"{what}: not within {timeout_s} s"
        time.sleep(step_s)


def squeue(*args):
    out = subprocess.run(["squeue", "--noheader", *args, "--format=%i|%T|%N|%j|%k"], check=True,
                         capture_output=True, text=True).stdout
    return [dict(zip(("id", "state", "node", "name", "comment"), line.split("|"))) for line in out.splitlines()]


def pilots_of(source):
    return squeue(f"--name={source.job_name}")


def submit_main(nodes=1, seconds=120, nodelist=None):
    """A main-queue job (on nodelist, if given); returns its id."""
    where = [f"--nodelist={nodelist}"] if nodelist else []
    out = subprocess.run(["sbatch", "--parsable", "--partition=main", f"--nodes={nodes}", *where,
                          "--job-name=main-load", "--output=/dev/null", f"--wrap=sleep {seconds}"],
                         check=True, capture_output=True, text=True)
    return out.stdout.strip()


def state_of(job_id):
    """The job's squeue state, "" once it has left the queue."""
    rows = squeue(f"--jobs={job_id}")
    return rows[0]["state"] if rows else ""


def reason_of(job_id):
    """Why squeue says the job waits (JobHeldUser, Resources, ...), "" once it has left the queue."""
    out = subprocess.run(["squeue", "--noheader", f"--jobs={job_id}", "--format=%r"], capture_output=True,
                         text=True).stdout.strip()
    return out


def wait_running(job_id, timeout_s):
    """The job's node list, once it runs."""
    rows = wait_until(lambda: [r for r in squeue(f"--jobs={job_id}") if r["state"] == "RUNNING"], timeout_s,
                      f"main job {job_id} running", step_s=0.05)
    return rows[0]["node"]


def ended_state(job_id, timeout_s=30):
    """The final state of a job once it has left the queue (slurmctld keeps it for MinJobAge, 60 s in
    cluster.sh): CANCELLED for a pilot the source cancelled, PREEMPTED for one killed at the end of
    the grace time."""

    def final():
        out = subprocess.run(["scontrol", "show", "job", job_id], check=True, capture_output=True, text=True).stdout
        state = re.search(r"JobState=(\w+)", out).group(1)
        return None if state in ("PENDING", "RUNNING", "COMPLETING", "CONFIGURING") else state

    return wait_until(final, timeout_s, f"job {job_id} ended", step_s=0.2)


def cancel_and_wait_empty(timeout_s=30):
    ids = [r["id"] for r in squeue()]
    if ids:
        subprocess.run(["scancel", *ids], capture_output=True)
    wait_until(lambda: not squeue(), timeout_s, "empty queue", step_s=0.2)
