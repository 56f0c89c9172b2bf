"""The control socket answers whatever arrives (issue 31): a request nested 100,000 deep, 300 idle
connections, bursts of 2,000 connects. During each, the manager answers `status`, and its log has no
traceback."""

from __future__ import annotations

import json
import socket
import threading
import time

import pytest

from bft.runtime.ops import control
from runtime_util import bft

pytestmark = pytest.mark.runtime


def _connect(harness) -> socket.socket:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(str(harness.state_dir / control.SOCKET_NAME))  # blocking: waits for room in the backlog
    s.settimeout(30)
    return s


def _answers_status(harness) -> None:
    """The manager answers within 2 s (a bound on the wait, the issue's criterion)."""
    assert control.request(harness.state_dir, {"op": "status"}, timeout_s=2.0)["status"]["manager"]


def test_a_deeply_nested_request_gets_a_one_line_error(harness):
    proc = harness.start("--local-nodes", "1")
    for depth in (100_000, 33):
        s = _connect(harness)
        s.sendall(b"[" * depth + b"]" * depth + b"\n")
        answer = json.loads(s.makefile("rb").readline())
        s.close()
        assert answer == {"ok": False, "error": "malformed request (nested deeper than 32 levels)"}
    s = _connect(harness)  # within the limit: parsed, and refused as what it is
    s.sendall(b'{"op": "status", "x": ' + b"[" * 30 + b"]" * 30 + b"}\n")
    assert json.loads(s.makefile("rb").readline())["ok"] is True
    s.close()
    _answers_status(harness)
    harness.stop(proc)
    assert "Traceback" not in harness.manager_log() and "RecursionError" not in harness.manager_log()


def test_idle_connections_are_closed_at_the_deadline_without_a_traceback(harness):
    proc = harness.start("--local-nodes", "1")
    idle = [_connect(harness) for _ in range(300)]
    trickler = _connect(harness)
    try:
        _answers_status(harness)
        deadline = time.monotonic() + control.REQUEST_DEADLINE_S + 5
        # A client that trickles a byte a second gets the same one deadline as a silent one.
        closed_early = False
        while time.monotonic() < deadline:
            try:
                trickler.sendall(b" ")
            except OSError:
                closed_early = True
                break
            _answers_status(harness)
            time.sleep(1.0)
        assert closed_early, "a trickling client was not cut off at the deadline"
        for s in idle:  # each was closed by the manager: end of file, no answer to a request never sent
            s.settimeout(10)
            assert s.recv(1) == b""
    finally:
        for s in idle:
            s.close()
        trickler.close()
    _answers_status(harness)
    harness.stop(proc)
    assert "Traceback" not in harness.manager_log()


def test_status_beside_a_burst_of_connects_never_fails(harness):
    proc = harness.start("--local-nodes", "1")
    path = str(harness.state_dir / control.SOCKET_NAME)
    stop = threading.Event()
    connected = [0]

    def burst() -> None:
        """Connects as fast as they go, each closed at once, in bursts of 2,000 (the issue's repro), until
        the status calls are done."""
        while not stop.is_set():
            for _ in range(2000):
                s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                s.setblocking(False)
                try:
                    s.connect(path)
                    connected[0] += 1
                except OSError:
                    pass  # the backlog is full: the burst is the point, not its connections
                finally:
                    s.close()

    thread = threading.Thread(target=burst)
    thread.start()
    try:
        results = []
        for _ in range(12):
            results.append(bft("status", "--state-dir", str(harness.state_dir), timeout=60))
            _answers_status(harness)
    finally:
        stop.set()
        thread.join(60)
    assert connected[0] >= 2000
    for r in results:
        assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr
    harness.stop(proc)
    assert "Traceback" not in harness.manager_log()
