"""The Slurm source's pilot-report listener (bft.runtime.slurm_reports) on its own, no cluster needed:
one deadline per connection, so clients trickling bytes cannot hold its slots (issue 31)."""

from __future__ import annotations

import hashlib
import hmac
import json
import socket
import threading
import time

from bft.runtime.slurm_reports import MAX_CONNECTIONS, MESSAGE_DEADLINE_S, PilotReportServer


class _Listener(PilotReportServer):
    """The listener as SlurmNodeSource hosts it: its address, secret, identity and slots."""

    def __init__(self):
        self.port = 0
        self._secret = b"k" * 32
        self.identity = "bft-test"
        self._connections = threading.BoundedSemaphore(MAX_CONNECTIONS)
        self.reports = []
        self._listener = self._bind()
        self.address = self._listener.getsockname()
        threading.Thread(target=self._listen_loop, daemon=True).start()

    def listen_address(self) -> str:
        return "127.0.0.1"

    def _on_pilot_report(self, job, node, event):
        self.reports.append((job, node, event))
        return "ok"

    def report(self, job: str) -> str:
        body = json.dumps({"job": job, "node": "n0", "event": "start", "time": time.time(), "identity": self.identity})
        mac = hmac.new(self._secret, body.encode(), hashlib.sha256).hexdigest()
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


def test_trickling_clients_are_cut_off_and_hold_no_slot():
    listener = _Listener()
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
        listener._listener.close()
