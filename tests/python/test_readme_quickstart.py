"""The README's runtime quick start, run literally: the block in README.md is the test's script, so
the two cannot drift apart."""

from __future__ import annotations

import os
import re
import signal
import subprocess
from pathlib import Path

import pytest

from bft.runtime import tagged_processes
from bft.runtime.statedb.store import StateStore

pytestmark = pytest.mark.runtime

REPO = Path(__file__).resolve().parents[2]


def runtime_quick_start() -> str:
    """The first ```sh block under README.md's runtime heading."""
    text = (REPO / "README.md").read_text()
    section = text[text.index("## Running training on idle nodes"):]
    match = re.search(r"```sh\n(.*?)```", section, re.S)
    assert match, "README.md: no ```sh block under the runtime heading"
    return match.group(1)


def test_the_readme_runtime_quick_start_works_as_written(tmp_path):
    pytest.importorskip("torch", reason="the runtime needs PyTorch (./dev.sh installs torch==2.13.0)")
    if not (REPO / ".venv" / "bin" / "bft").exists():
        pytest.skip(".venv/bin/bft is missing: `./dev.sh build` (or test) writes it")
    block = runtime_quick_start()
    assert "bft manager stop" in block and "bft submit" in block
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "BFT_STATE_DIR")}
    env["BFT_STATE_DIR"] = str(tmp_path / "state")  # not the user's own ~/.local/state/bft
    env["PATH"] = "/usr/bin:/bin"  # the block's own export must be what finds bft
    # `wait`: the block starts the manager in the background; it must exit after `bft manager stop`.
    proc = subprocess.Popen(["bash", "-e", "-c", block + "\nwait\n"], cwd=REPO, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=240)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        pytest.fail(f"the quick start did not finish in 240 s:\n{out}")
    assert proc.returncode == 0, out
    assert "manager stopped" in out, out
    store = StateStore(tmp_path / "state" / "state.db", create=False, read_only=True)
    identity = store.meta("identity")
    jobs = store.jobs()
    store.close()
    assert len(jobs) == 1 and jobs[0].script.endswith("ddp_synthetic.py"), jobs
    assert re.search(rf"^{re.escape(jobs[0].id)}\s", out, re.M), out  # `bft status` listed it
    assert not (tmp_path / "state" / "manager.sock").exists()  # no stale socket
    assert not (tmp_path / "state" / "keeper.json").exists()  # the keeper stopped with the manager
    assert tagged_processes(identity) == []
