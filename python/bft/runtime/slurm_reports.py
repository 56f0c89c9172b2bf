"""How the Slurm node source hears from its pilots: a TCP listener on the manager's address that
takes one signed message per connection (HMAC-SHA256 with the manager's pilot secret, its
identity, a fresh timestamp), never more than ``MAX_CONNECTIONS`` at once, so that a slow or idle
client holds up no other. A mixin of :class:`bft.runtime.slurm.SlurmNodeSource`, which holds the
secret, the identity, the port and the connection semaphore, and decides what a report means
(``_on_pilot_report``).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import socket
import threading
import time

from .nodes import SourceError

log = logging.getLogger(__name__)

_MESSAGE_MAX_BYTES = 4096
_MESSAGE_MAX_AGE_S = 300.0  # older (or replayed) signed reports are ignored; allows for clock skew
MAX_CONNECTIONS = 32  # reports handled at once
MESSAGE_DEADLINE_S = 2.0  # a connection's time to send its one message


class PilotReportServer:
    def _bind(self) -> socket.socket:
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((self.listen_address(), self.port))
        except OSError as e:
            if self.port == 0:
                s.close()
                raise SourceError(f"slurm: cannot listen for pilot reports: {e}") from None
            # The previous manager's port is taken: its adopted pilots now reach us only by poll.
            log.warning("slurm: port %d unavailable (%s); listening on a new one", self.port, e)
            s.bind((self.listen_address(), 0))
        s.listen(64)
        s.settimeout(0.5)
        return s

    def _handle_message(self, line: bytes) -> str:
        try:
            mac, body = line.decode().strip().split(" ", 1)
        except (UnicodeDecodeError, ValueError):
            return "error malformed"
        want = hmac.new(self._secret, body.encode(), hashlib.sha256).hexdigest()
        if not hmac.compare_digest(mac, want):
            log.warning("slurm: pilot report with a bad signature ignored")
            return "error signature"
        try:
            msg = json.loads(body)
            job, node, event, sent_s = str(msg["job"]), str(msg["node"]), msg["event"], float(msg["time"])
        except (ValueError, KeyError, TypeError):
            return "error malformed"
        if msg.get("identity") != self.identity or event not in ("start", "term"):
            return "error unknown"
        if abs(time.time() - sent_s) > _MESSAGE_MAX_AGE_S:
            log.warning("slurm: report of pilot %s sent %.0f s ago ignored", job, time.time() - sent_s)
            return "error stale"
        return self._on_pilot_report(job, node, event)

    def _listen_loop(self) -> None:
        listener = self._listener
        while True:  # until stop() closes the socket: it answers "release" while stop cancels
            try:
                conn, _ = listener.accept()
            except socket.timeout:
                continue
            except OSError:
                return
            if not self._connections.acquire(blocking=False):
                conn.close()  # flooded: the pilot retries, and the poll is the safety net
                continue
            threading.Thread(target=self._serve, args=(conn,), name="bft-slurm-report", daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        try:
            with conn:
                # One deadline for the whole message, not a timeout per read: a client trickling a byte
                # at a time would otherwise hold one of the MAX_CONNECTIONS slots for as long as it likes.
                deadline = time.monotonic() + MESSAGE_DEADLINE_S
                data = b""
                while not data.endswith(b"\n") and len(data) < _MESSAGE_MAX_BYTES:
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        return
                    conn.settimeout(remaining)
                    chunk = conn.recv(_MESSAGE_MAX_BYTES)
                    if not chunk:
                        break
                    data += chunk
                conn.sendall((self._handle_message(data) + "\n").encode())
        except OSError:
            pass
        finally:
            self._connections.release()
