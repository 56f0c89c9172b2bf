"""Pilots, the manager's side, for any batch scheduler: a pilot is a job of the scheduler that holds
one node for the manager (the program it runs: :mod:`.pilot`). It reports "start" once it holds the
node and "term" when the scheduler takes it back, each message signed; a node source of a batch
scheduler (:mod:`.slurm`; docs/runtime.md sketches PBS) composes a :class:`PilotReports` and decides
what a report means.

The scheduler supplies only what differs: the names of its environment variables that hold the
pilot's job id and node (``job_var``, ``node_var``), and the commands that submit a pilot and start
its program (``pilot_program()``, inline: compute nodes need only a python3, not libbft).

:class:`PilotReports` is a TCP listener on the manager's address that takes one signed message per
connection (HMAC-SHA256 with the manager's pilot secret, its identity, a fresh timestamp), never
more than ``MAX_CONNECTIONS`` at once, so that a slow or idle client holds up no other. The secret
and the port are kept in a 0600 file of the state directory, so a restarted manager's adopted pilots
keep reporting; a pilot is given that file's path, never the secret, and reads it on its node (the
state directory is shared with the compute nodes): its submission crosses the network in the clear.
"""

from __future__ import annotations

import enum
import hashlib
import hmac
import json
import logging
import secrets
import socket
import threading
import time
from pathlib import Path
from typing import Callable, Dict, Optional

from ..._atomic import write_atomically
from .base import SourceError

log = logging.getLogger(__name__)

_MESSAGE_MAX_BYTES = 4096
_MESSAGE_MAX_AGE_S = 300.0  # older (or replayed) signed reports are ignored; allows for clock skew
MAX_CONNECTIONS = 32  # reports handled at once
MESSAGE_DEADLINE_S = 2.0  # a connection's time to send its one message
EVENTS = ("start", "term")  # a pilot holds its node; the scheduler is taking it back


class PilotState(str, enum.Enum):
    """What a source knows of one of its pilots, whatever the scheduler."""

    PENDING = "pending"  # submitted, waiting for a node
    RUNNING = "running"  # it reported "start": its node joined
    RECLAIMED = "reclaimed"  # it reported "term": its node was announced gone
    CANCELLING = "cancelling"  # the source is cancelling it


# The environment of a pilot (pilot.py reads it).
ENV_SECRET_FILE = "BFT_PILOT_SECRET_FILE"  # the file that holds the secret ({"secret": hex, ...})
ENV_ADDRESS = "BFT_PILOT_ADDR"
ENV_IDENTITY = "BFT_PILOT_IDENTITY"
ENV_JOB_VAR = "BFT_PILOT_JOB_VAR"  # the name of the scheduler's variable that holds the pilot's job id
ENV_NODE_VAR = "BFT_PILOT_NODE_VAR"  # ... and of the one that holds its node's name ("": the host name)


def pilot_program() -> str:
    """The pilot's program (onnode/pilot.py), to be run as ``python3 -c '<it>'``: it holds no single quote."""
    text = (Path(__file__).parents[1] / "onnode" / "pilot.py").read_text()
    assert "'" not in text, "pilot.py must hold no single quote"
    return text


# What a report means to the source: (job, node, event) -> the answer the pilot gets ("hold", "release").
OnReport = Callable[[str, str, str], str]


class PilotReports:
    def __init__(self, *, scheduler: str, identity: str, on_report: OnReport):
        """`scheduler` names the source in messages; `on_report` is called from the listener's threads."""
        self.scheduler = scheduler
        self.identity = identity
        self.on_report = on_report
        self.port = 0
        self._secret = b""
        self._state_path: Optional[Path] = None
        self._listener: Optional[socket.socket] = None
        self._thread: Optional[threading.Thread] = None
        self._connections = threading.BoundedSemaphore(MAX_CONNECTIONS)

    def open(self, state_path: Path, address: str, port: int) -> None:
        """Binds `address`:`port` (0: the port kept in `state_path`, else any) with the secret kept
        there (a new one on a first start), and keeps both there for the next manager. Reports wait
        in the socket's backlog until serve()."""
        saved = {}
        if state_path.exists():
            try:
                saved = json.loads(state_path.read_text())
            except (OSError, ValueError) as e:
                raise SourceError(f"{self.scheduler}: cannot read {state_path}: {e}") from None
        self._secret = bytes.fromhex(saved.get("secret", "")) or secrets.token_bytes(32)
        self._state_path = state_path.absolute()
        self._listener = self._bind(address, port or int(saved.get("port", 0)))
        self.port = self._listener.getsockname()[1]
        state_path.parent.mkdir(parents=True, exist_ok=True)
        write_atomically(state_path, json.dumps({"secret": self._secret.hex(), "port": self.port}).encode())

    def serve(self) -> None:
        """Answers reports, from a thread of its own, until close()."""
        self._thread = threading.Thread(target=self._listen_loop, args=(self._listener,),
                                        name=f"bft-{self.scheduler}-listen", daemon=True)
        self._thread.start()

    def close(self) -> None:
        """Stops listening (the listening thread ends within its accept timeout)."""
        if self._listener is not None:
            self._listener.close()
            self._listener = None
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def pilot_environment(self, *, manager_address: str, job_var: str, node_var: str) -> Dict[str, str]:
        """What a pilot needs in its environment: where to report, where to read the key it signs
        with (open() first), and which of the scheduler's variables name its job and node."""
        return {ENV_SECRET_FILE: str(self._state_path), ENV_ADDRESS: f"{manager_address}:{self.port}",
                ENV_IDENTITY: self.identity, ENV_JOB_VAR: job_var, ENV_NODE_VAR: node_var}

    def _bind(self, address: str, port: int) -> socket.socket:
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((address, port))
        except OSError as e:
            if port == 0:
                s.close()
                raise SourceError(f"{self.scheduler}: cannot listen for pilot reports: {e}") from None
            # The previous manager's port is taken: its adopted pilots now reach us only by poll.
            log.warning("%s: port %d unavailable (%s); listening on a new one", self.scheduler, port, e)
            s.bind((address, 0))
        s.listen(64)
        s.settimeout(0.5)
        return s

    def handle_message(self, line: bytes) -> str:
        """One message, checked; the answer to send back."""
        try:
            mac, body = line.decode().strip().split(" ", 1)
        except (UnicodeDecodeError, ValueError):
            return "error malformed"
        want = hmac.new(self._secret, body.encode(), hashlib.sha256).hexdigest()
        if not hmac.compare_digest(mac, want):
            log.warning("%s: pilot report with a bad signature ignored", self.scheduler)
            return "error signature"
        try:
            msg = json.loads(body)
            job, node, event, sent_s = str(msg["job"]), str(msg["node"]), msg["event"], float(msg["time"])
        except (ValueError, KeyError, TypeError):
            return "error malformed"
        if msg.get("identity") != self.identity or event not in EVENTS:
            return "error unknown"
        if abs(time.time() - sent_s) > _MESSAGE_MAX_AGE_S:
            log.warning("%s: report of pilot %s sent %.0f s ago ignored", self.scheduler, job, time.time() - sent_s)
            return "error stale"
        return self.on_report(job, node, event)

    def _listen_loop(self, listener: socket.socket) -> None:
        while True:  # until close() closes the socket
            try:
                conn, _ = listener.accept()
            except socket.timeout:
                continue
            except OSError:
                return
            if not self._connections.acquire(blocking=False):
                conn.close()  # flooded: the pilot retries, and the source's poll is the safety net
                continue
            threading.Thread(target=self._serve, args=(conn,), name=f"bft-{self.scheduler}-report",
                             daemon=True).start()

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
                conn.sendall((self.handle_message(data) + "\n").encode())
        except OSError:
            pass
        finally:
            self._connections.release()
