"""What the runtime benches (bench/runtime_*.py) share: a real ``bft manager`` on the local source
driven by a trace, stopped with everything it started; the trace file; a free port; the methods a
manager is run with."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

# What each method of `resize` runs the manager with: inplace-cold is inplace without warm standbys.
METHODS = {"inplace": ("--resize", "inplace", "--standby"), "inplace-cold": ("--resize", "inplace", "--no-standby"),
           "relaunch": ("--resize", "relaunch"), "membership": ("--resize", "membership")}


@contextlib.contextmanager
def local_manager(state: Path, trace: Path, nodes: int, method: str, *options: str,
                  script: str = "examples/runtime/ddp_synthetic.py"):
    """A real ``bft manager`` on the local source driven by ``trace``; stopped (and everything it
    started) on exit. Yields a function that submits `script` with no end."""
    from bft.runtime import terminate_tagged
    from bft.runtime.ops import control

    env = dict(os.environ, OMP_NUM_THREADS="1")
    manager = subprocess.Popen([sys.executable, "-m", "bft", "manager", "--state-dir", str(state), *METHODS[method],
                                "--local-trace", str(trace), "--local-nodes", str(nodes), "--local-grace-s", "10",
                                *options], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                               start_new_session=True)
    identity = None

    def submit(name: str, *args: str) -> None:
        subprocess.run([sys.executable, "-m", "bft", "submit", str(REPO / script),
                        "--state-dir", str(state), "--name", name, "--min", "1", "--max", str(nodes),
                        "--samples", "1e12", *args], env=env, check=True, capture_output=True)

    try:
        for _ in range(300):
            try:
                identity = control.request(state, {"op": "status"})["status"]["manager"]["identity"]
                break
            except control.ControlError:
                time.sleep(0.2)
        yield submit
    finally:
        manager.send_signal(signal.SIGTERM)
        try:
            manager.wait(60)
        except subprocess.TimeoutExpired:
            manager.kill()
        if identity:
            terminate_tagged(identity, 5.0)


def write_trace(path: Path, rows) -> Path:
    path.write_text("time,node,state\n" + "".join(f"{t:g},{n},{s}\n" for t, n, s in rows))
    return path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
