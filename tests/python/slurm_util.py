"""Shared by the Slurm tests: a real Slurm test cluster (tests/slurm/cluster.sh) for the session,
and small helpers to look at and drive its queue."""

import os
import re
import subprocess
import threading
import time
from pathlib import Path

import pytest

from bft.runtime.nodes import NodeEvent

ROOT = Path(__file__).resolve().parents[2]
CLUSTER_SH = ROOT / "tests" / "slurm" / "cluster.sh"
GRACE_S = 5.0  # the pilot partition's GraceTime in cluster.sh


@pytest.fixture(scope="session")
def slurm_cluster(tmp_path_factory):
    """A running test cluster; SLURM_CONF points at it for the whole session. Always stopped."""
    if os.geteuid() != 0:
        pytest.skip("the Slurm test cluster runs its daemons as root (SlurmUser=root); not root here")
    cluster_dir = tmp_path_factory.mktemp("slurm")
    r = subprocess.run([str(CLUSTER_SH), "start", str(cluster_dir)], capture_output=True, text=True, timeout=600)
    try:
        if r.returncode == 77:
            pytest.skip(f"Slurm cannot be installed here: {r.stderr.strip()}")
        assert r.returncode == 0, f"cluster.sh start failed:\n{r.stderr}"
        env = dict(re.findall(r"^export (\w+)=(.*)$", r.stdout, re.M))
        old = os.environ.get("SLURM_CONF")
        os.environ["SLURM_CONF"] = env["SLURM_CONF"]
        try:
            yield cluster_dir
        finally:
            if old is None:
                os.environ.pop("SLURM_CONF", None)
            else:
                os.environ["SLURM_CONF"] = old
    finally:
        subprocess.run([str(CLUSTER_SH), "stop", str(cluster_dir)], capture_output=True, timeout=120)


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
