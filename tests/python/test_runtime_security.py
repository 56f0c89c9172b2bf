"""End to end: what another user on the same host can reach of a running manager (docs/security.md).

A real manager with a real two-node DDP job; listening sockets are read from `ss`, another user is
played by `nobody` (setpriv), so the user tests need root and skip without it."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from bft.runtime import tagged_processes
from runtime_util import ManagerHarness, listening_sockets, python_env

pytestmark = pytest.mark.runtime

WILDCARDS = ("*", "0.0.0.0", "[::]", "::")


@pytest.fixture
def shared_harness():
    """A harness whose directory other users may traverse (as a home directory would be), so that only
    the state directory's own 0700 keeps them out."""
    pytest.importorskip("torch", reason="the runtime tests need PyTorch")
    root = Path(tempfile.mkdtemp(prefix="bft-security-"))
    root.chmod(0o711)
    h = ManagerHarness(root)
    try:
        yield h
    finally:
        h.close()
        shutil.rmtree(root, ignore_errors=True)


def test_no_socket_of_the_manager_or_its_jobs_listens_on_a_wildcard_address(harness):
    proc = harness.start("--local-nodes", "2")
    harness.submit("ddp", "--min", "2", "--max", "2", "--samples", "100000000")  # rank 0's agent hosts a store
    harness.wait(lambda s: s["jobs"][0]["samples"] > 0, 120, "the job to report")
    keeper = harness.keeper_pid()
    agents = set(tagged_processes(harness.identity))
    sockets = listening_sockets({proc.pid, keeper, *agents})
    # The store and the report socket (in the keeper) and the store of the job's rank-0 agent are seen.
    assert {proto for proto, _, pid in sockets if pid == keeper} == {"tcp", "udp"}, sockets
    assert any(pid in agents for _, _, pid in sockets), sockets
    assert [s for s in sockets if s[1] in WILDCARDS] == [], sockets


def test_state_and_checkpoints_are_owner_only_whatever_the_umask(harness):
    old = os.umask(0)  # the manager (and so its jobs) inherit the most permissive umask
    try:
        harness.start("--local-nodes", "1")
    finally:
        os.umask(old)
    harness.submit("ckpt", "--min", "1", "--max", "1", "--samples", "3000")
    harness.wait(lambda s: s["jobs"][0]["state"] == "finished", 120, "the job to finish")
    paths = [p for p in harness.state_dir.rglob("*") if not p.is_socket()]
    assert any(p.name == "checkpoint.pt" for p in paths) and any(p.name == "state.db" for p in paths), paths
    for p in [harness.state_dir, *paths]:
        mode = stat.S_IMODE(p.stat().st_mode)
        assert mode & 0o077 == 0, f"{p} is {oct(mode)}"


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("setpriv"), reason="playing another user needs root")
def test_another_user_gets_one_line_refusals_from_every_verb(shared_harness):
    h = shared_harness
    h.start("--local-nodes", "1")
    h.submit("mine", "--min", "1", "--max", "1", "--samples", "100000000")
    state = str(h.state_dir)
    env = python_env()
    script = Path(__file__).resolve().parents[2] / "examples" / "runtime" / "ddp_synthetic.py"
    for verb in (["status"], ["status", "--json"], ["logs", "mine"], ["cancel", "mine"], ["manager", "stop"],
                 ["submit", str(script), "--min", "1", "--max", "1"]):
        r = subprocess.run(["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups", sys.executable, "-m",
                            "bft", *verb, "--state-dir", state], env=env, capture_output=True, text=True, timeout=60,
                           cwd="/")
        assert r.returncode == 2, (verb, r.stdout, r.stderr)
        lines = r.stderr.strip().splitlines()
        assert len(lines) == 1 and "Traceback" not in r.stderr and "permission denied" in lines[0], (verb, r.stderr)
    assert h.job("mine")["state"] in ("queued", "running")  # untouched
