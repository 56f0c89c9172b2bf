"""End to end: warm standbys (``bft manager --resize inplace``, on by default there) with a real
manager, real PyTorch processes and the local node source.

Each test is bounded in time, and the harness stops every process it started (by pid, and by the
manager's identity tag, which standbys carry too) even when it fails.
"""

from __future__ import annotations

import os
import secrets
import signal
import stat
import subprocess
import sys
import time
from typing import Dict, List, Optional

import pytest

from bft.runtime import tagged_processes
from bft.runtime.jobs.files import JobFiles
from bft.runtime.jobs.launcher import job_environment
from bft.runtime.jobs.processes import standby_born
from bft.runtime.jobs.standbys import Standbys
from runtime_util import REPO, python_env, write_trace

pytestmark = pytest.mark.runtime

ELASTIC = REPO / "examples" / "runtime" / "elastic_synthetic.py"


def _standbys(harness, nodes: List[str]) -> Dict[str, int]:
    """node -> the pid of the manager's standby waiting there (nodes without one left out): a process
    started as a standby whose pid is in no job's process row yet."""
    store = harness.store()
    try:
        assigned = {pid for (pid,) in store.db.execute("SELECT pid FROM procs WHERE pid IS NOT NULL")}
    finally:
        store.close()
    pids = [pid for pid in tagged_processes(harness.identity) if pid not in assigned]
    return {node: pid for node in nodes for pid in pids if standby_born(pid, harness.identity, node)}


def _every_standby(harness, nodes: List[str]) -> Optional[Dict[str, int]]:
    """_standbys once every one of `nodes` has one, else None."""
    found = _standbys(harness, nodes)
    return found if len(found) == len(nodes) else None


def _job_pids(harness, job: str) -> Dict[str, List[int]]:
    store = harness.store()
    try:
        rows = store.db.execute("SELECT node, pid FROM procs WHERE job = ? ORDER BY id", (job,)).fetchall()
    finally:
        store.close()
    out: Dict[str, List[int]] = {}
    for node, pid in rows:
        out.setdefault(node, []).append(pid)
    return out


def _wait_for(predicate, timeout_s: float, what: str):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.1)
    pytest.fail(f"timed out after {timeout_s} s waiting for {what}")


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[0] != b"Z"
    except OSError:
        return False


def test_a_job_launched_on_nodes_with_standbys_runs_in_their_processes_and_none_outlives_the_manager(harness):
    """Both nodes have a standby before the job comes: the job's workers are those processes (their
    pids are its process rows), its output reaches its log, the standbys are no job's nodes, the
    nodes get new standbys once the job has finished, and `bft manager stop` leaves none behind."""
    nodes = ["local-0", "local-1"]
    proc = harness.start("--resize", "inplace", "--local-nodes", "2")
    status = harness.wait(lambda s: s["nodes"]["standbys"] == nodes, 60, "a standby on each node")
    assert status["nodes"]["used"] == {}  # a standby holds no node
    warm = _wait_for(lambda: _every_standby(harness, nodes), 30, "the standbys' pids")
    harness.submit("el", "--min", "2", "--max", "2", "--samples", "20000", "--", "--step-s", "0.02",
                   script=ELASTIC)
    harness.wait(lambda s: s["jobs"][0]["state"] == "finished", 180, "the job to finish")
    assert _job_pids(harness, "el") == {node: [warm[node]] for node in nodes}  # the standbys' own processes
    assert len(harness.events("launch", job="el")) == 1
    log = harness.job_log("el")
    assert "done: " in log and "Traceback" not in log, log[-3000:]
    again = harness.wait(lambda s: s["nodes"]["standbys"] == nodes, 60, "new standbys after the job")
    assert again["nodes"]["used"] == {}
    fresh = _wait_for(lambda: _every_standby(harness, nodes), 30, "the new pids")
    assert not set(fresh.values()) & set(warm.values())
    harness.stop(proc)
    assert harness.leftovers() == []


def test_reclaim_of_a_node_with_a_standby_ends_the_standby_at_once(harness):
    """The main scheduler takes back a node whose standby waits for a job: the standby ends at once,
    long before the grace time after which the source would kill it, and the node gets no new one."""
    trace = write_trace(harness.root / "trace.csv", [(0, "n0", "idle"), (0, "n1", "idle"), (15, "n1", "busy")])
    proc = harness.start("--resize", "inplace", "--local-trace", str(trace), "--local-nodes", "2",
                         "--local-grace-s", "120")
    harness.wait(lambda s: s["nodes"]["standbys"] == ["n0", "n1"], 60, "a standby on each node")
    pid = _wait_for(lambda: _standbys(harness, ["n1"]).get("n1"), 30, "n1's standby")
    harness.wait(lambda s: s["nodes"]["pool"] == ["n0"], 60, "n1 reclaimed")
    _wait_for(lambda: not _alive(pid), 30, "n1's standby to end (the grace time is 120 s)")
    status = harness.status()
    assert status["nodes"]["standbys"] == ["n0"], status["nodes"]
    assert not _standbys(harness, ["n1"])
    harness.stop(proc)
    assert harness.leftovers() == []


def test_a_worker_born_of_a_standby_is_adopted_after_kill_9_of_the_manager(harness):
    """kill -9 of the manager while a job trains in the processes of two standbys and a third node's
    standby waits: that standby ends (its pipe closed), the restarted manager adopts the job's
    workers by their pids (their environment has no job tag), gives the third node a new standby,
    and shrinks the job in place when n1 is reclaimed."""
    trace = write_trace(harness.root / "trace.csv", [(0, "n0", "idle"), (0, "n1", "idle"), (20, "n2", "idle"),
                                                     (60, "n1", "busy")])
    args = ("--resize", "inplace", "--local-trace", str(trace), "--local-nodes", "3", "--local-grace-s", "8",
            "--grace", "10")
    first = harness.start(*args)
    harness.wait(lambda s: s["nodes"]["standbys"] == ["n0", "n1"], 60, "a standby on n0 and n1")
    warm = _wait_for(lambda: _every_standby(harness, ["n0", "n1"]), 30, "their pids")
    harness.submit("el", "--min", "2", "--max", "2", "--samples", "200000", "--", "--step-s", "0.05",
                   script=ELASTIC)
    harness.wait(lambda s: s["jobs"][0]["samples"] > 0, 120, "training on n0 and n1")
    before = _job_pids(harness, "el")
    assert before == {"n0": [warm["n0"]], "n1": [warm["n1"]]}, (before, warm)
    harness.wait(lambda s: s["nodes"]["standbys"] == ["n2"], 60, "a standby on n2, which joins later")
    idle = _wait_for(lambda: _standbys(harness, ["n2"]).get("n2"), 30, "n2's standby pid")
    harness.kill9(first)
    _wait_for(lambda: not _alive(idle), 30, "n2's standby to end with its manager")
    second = harness.start(*args)
    harness.wait(lambda s: s["nodes"]["standbys"] == ["n2"], 60, "a new standby on n2")
    harness.wait(lambda s: s["jobs"][0]["state"] == "finished", 240, "the job to finish")
    assert [e["adopted"] for e in harness.events("recovered")] == [["el"]]
    assert len(harness.events("launch", job="el")) == 1  # never relaunched
    assert harness.events("resize_inplace", job="el")[0]["nodes"] == ["n0"]  # n1 reclaimed: shrunk in place
    after = _job_pids(harness, "el")
    assert set(after["n0"]) == {warm["n0"]}, (before, after)  # the standby's process throughout
    assert not harness.events("inplace_failed", "job_failed", job="el")
    harness.stop(second)
    assert harness.leftovers() == []


def _standby(stdin: bytes) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "bft.train.standby"], input=stdin, capture_output=True,
                          env=python_env(), timeout=120)


def test_a_standby_without_an_assignment_exits_0_and_a_malformed_one_is_refused_in_one_line():
    done = _standby(b"")
    assert done.returncode == 0, done.stderr
    bad = _standby(b'{"argv": ["python", "train.py"], "env": {}, "cwd": "/", "log": "/dev/null"}\n')
    assert bad.returncode == 2
    assert bad.stderr.decode().strip().splitlines() == [
        "bft.train.standby: assignment: argv must be [python, '-m', 'bft.train.run', SCRIPT, ARGS...]"]


def test_the_assignment_carries_the_secrets_path_not_the_secret_and_the_standby_resolves_it(tmp_path):
    """The assignment line crosses the network with Slurm (srun forwards standard input unencrypted):
    the bytes on the channel (recorded by a `tee` in front of a real standby, where srun would be)
    hold the path of the job's 0600 secret file, not the secret, and the standby's job reads the
    secret from that file."""
    secret = secrets.token_hex(32)
    files = JobFiles(tmp_path / "state")
    secret_file = files.write_secret("j1", secret)
    assert stat.S_IMODE(secret_file.stat().st_mode) == 0o600
    env = job_environment(job="j1", generation=1, node="n0", identity="test", report_address="127.0.0.1:9",
                          secret_file=secret_file, checkpoint_dir=tmp_path / "ckpt", work=None, checkpoint_grace_s=5.0)
    script = tmp_path / "job.py"
    script.write_text("import os, sys\nopen(sys.argv[1], 'w').write(os.environ['BFT_JOB_SECRET'])\n")
    channel, seen = tmp_path / "channel.bin", tmp_path / "seen.txt"
    proc = subprocess.Popen(["sh", "-c", 'tee "$0" | exec "$1" -m bft.train.standby', str(channel), sys.executable],
                            stdin=subprocess.PIPE, env=python_env(), start_new_session=True)
    try:
        assert Standbys.assign(proc, argv=[sys.executable, "-m", "bft.train.run", str(script), str(seen)], env=env,
                               cwd=tmp_path, log_path=tmp_path / "output.log")
        assert proc.wait(120) == 0, (tmp_path / "output.log").read_text(errors="replace")
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    sent = channel.read_bytes()
    assert str(secret_file).encode() in sent and secret.encode() not in sent
    assert seen.read_text() == secret
