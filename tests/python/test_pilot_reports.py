"""The pilots' report listener (bft.runtime.sources.pilot_reports), which a batch scheduler's node source composes,
on its own, no cluster needed: one deadline per connection, so clients trickling bytes cannot hold
its slots (issue 31); and the pilot program itself, run as a scheduler would run it."""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

from bft.runtime.sources.pilot_reports import (
    ENV_SECRET_FILE,
    MAX_CONNECTIONS,
    MESSAGE_DEADLINE_S,
    PilotReports,
    pilot_program,
)


class _Listener:
    """The listener as a node source composes it, its reports recorded."""

    def __init__(self, state_path: Path):
        self.reports = []
        self.server = PilotReports(scheduler="test", identity="bft-test", on_report=self._on_report)
        self.server.open(state_path, "127.0.0.1", 0)
        self.server.serve()
        self.address = ("127.0.0.1", self.server.port)

    def _on_report(self, job, node, event):
        self.reports.append((job, node, event))
        return "ok"

    def report(self, job: str) -> str:
        body = json.dumps({"job": job, "node": "n0", "event": "start", "time": time.time(), "identity": "bft-test"})
        path = self.server.pilot_environment(manager_address="", job_var="", node_var="")[ENV_SECRET_FILE]
        secret = bytes.fromhex(json.loads(Path(path).read_text())["secret"])
        mac = hmac.new(secret, body.encode(), hashlib.sha256).hexdigest()
        with socket.create_connection(self.address, timeout=10) as s:
            s.sendall(f"{mac} {body}\n".encode())
            return s.makefile("rb").readline().decode().strip()


def _cut_off(s: socket.socket, bytes_to_send: int) -> bool:
    """Trickles a byte every 0.25 s; True if the listener closed the connection before all were sent."""
    for _ in range(bytes_to_send):
        try:
            s.sendall(b"x")
            s.settimeout(0.25)
            if s.recv(1) == b"":
                return True
        except socket.timeout:
            continue
        except OSError:
            return True
    return False


def test_trickling_clients_are_cut_off_and_hold_no_slot(tmp_path):
    listener = _Listener(tmp_path / "pilots.json")
    try:
        trickling = [socket.create_connection(listener.address, timeout=10) for _ in range(MAX_CONNECTIONS)]
        # Every slot taken by a client that sends a byte every 0.25 s, for three deadlines' worth of bytes.
        done = []
        threads = [threading.Thread(target=lambda s=s: done.append(_cut_off(s, int(MESSAGE_DEADLINE_S * 12))))
                   for s in trickling]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert done == [True] * MAX_CONNECTIONS
        assert listener.report("pilot-1") == "ok" and listener.reports == [("pilot-1", "n0", "start")]
    finally:
        for s in trickling:
            s.close()
        listener.server.close()


def test_the_pilot_knows_no_scheduler_it_reads_the_variables_the_scheduler_names(tmp_path):
    """A PBS-like scheduler: its job id in PBS_JOBID, no node variable (the host name). The pilot
    reports start, then term on SIGTERM, and exits at once when the source answers release."""
    listener = _Listener(tmp_path / "pilots.json")
    answers = {"start": "hold", "term": "release"}
    listener.server.on_report = lambda job, node, event: listener.reports.append((job, node, event)) or answers[event]
    pilot_env = listener.server.pilot_environment(manager_address="127.0.0.1", job_var="PBS_JOBID", node_var="")
    # What the submission carries (over the network, in the clear) is the secret's path, not the secret.
    secret = json.loads((tmp_path / "pilots.json").read_text())["secret"]
    assert not any(secret in value for value in pilot_env.values()), pilot_env
    assert pilot_env[ENV_SECRET_FILE] == str(tmp_path / "pilots.json")
    env = {**os.environ, "PBS_JOBID": "42.pbs-server", **pilot_env}
    pilot = subprocess.Popen([sys.executable, "-c", pilot_program()], env=env)
    try:
        deadline = time.monotonic() + 30
        while not listener.reports and time.monotonic() < deadline:
            time.sleep(0.05)
        assert listener.reports == [("42.pbs-server", socket.gethostname(), "start")]
        pilot.send_signal(signal.SIGTERM)
        assert pilot.wait(30) == 0
        assert listener.reports[-1] == ("42.pbs-server", socket.gethostname(), "term")
    finally:
        if pilot.poll() is None:
            pilot.kill()
            pilot.wait()
        listener.server.close()
