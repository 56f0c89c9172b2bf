"""The manager's control socket: ``bft submit``, ``status``, ``cancel`` and ``manager stop`` talk to it.

A Unix stream socket in the state directory. The directory is private (0700) and every
connection's peer credentials are checked (SO_PEERCRED): only the user who runs the manager may
submit, cancel or stop. One request per connection, one JSON object per line each way.
"""

from __future__ import annotations

import fcntl
import json
import math
import os
import re
import socket
import socketserver
import struct
import threading
import time
from pathlib import Path
from typing import Any, Callable, Dict, Optional

from ...train import protocol
from ..jobs.resize import check_resize_choice
from ..statedb.jobspec import JOB_NAME, MAX_NODES, check_configurations, check_curve, check_rates
from ..statedb.schema import JobState
from ..statedb.store import JobRow

SOCKET_NAME = "manager.sock"  # in the state directory
LOCK_NAME = "manager.lock"  # held (flock) by the running manager, from before its socket exists
STARTUP_WAIT_S = 60.0  # how long a request waits for a manager that holds the lock but is still starting
# How long `bft submit` waits for a manager to appear at all: `bft manager &` followed at once by
# `bft submit` (the README's quick start) must not depend on which process is faster to import.
SUBMIT_WAIT_S = 10.0
CONNECT_WAIT_S = 60.0  # how long a request without a timeout (a stop) waits for room in the backlog
MAX_REQUEST = 1 << 20
# A request is a flat object with a curve and a few lists inside: 32 levels is plenty, and far below
# the depth at which Python's json parser recurses out of its stack.
MAX_REQUEST_DEPTH = 32
# A client has this long to send its whole request (one deadline for the connection).
REQUEST_DEADLINE_S = 10.0


class ControlError(Exception):
    """The manager is unreachable or refused a request: one clear line."""


Handler = Callable[[Dict[str, Any], Callable[[Dict[str, Any]], None]], None]


def same_user(conn: socket.socket) -> bool:
    """True if the process at the other end of a Unix socket runs as this process's user (SO_PEERCRED)."""
    creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    return struct.unpack("3i", creds)[1] == os.getuid()


class ControlServer(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    # server_close() joins the request threads, so `bft manager stop` gets its answer before exit.
    daemon_threads = False
    block_on_close = True
    # socketserver's default backlog is 5: a burst of connections (2,000 at once) made `bft status`
    # beside it fail to connect. Not the system's largest either: a full queue of 4,096 took seconds to
    # drain here, and the client waits for room in the queue (`_connect`) rather than behind all of it
    # (status during an endless burst: median 3.06 s with 4,096, 0.34 s with 128).
    request_queue_size = 128

    def __init__(self, path: Path, handler: Handler):
        self.handler = handler
        if path.exists() or path.is_symlink():
            path.unlink()  # a dead manager's socket; the state lock says no other manager runs
        self.path = path
        old = os.umask(0o177)
        try:
            super().__init__(str(path), _RequestHandler)
        finally:
            os.umask(old)

    def server_close(self) -> None:
        super().server_close()
        try:
            self.path.unlink()  # no stale socket once the manager has stopped
        except FileNotFoundError:
            pass


class _RequestHandler(socketserver.BaseRequestHandler):
    def handle(self) -> None:
        if not same_user(self.request):
            self._send({"ok": False, "error": "permission denied: only the manager's user may control it"})
            return
        try:
            line = _read_line(self.request, time.monotonic() + REQUEST_DEADLINE_S)
            request = parse_request(line)
        except ValueError as e:
            self._send({"ok": False, "error": f"malformed request ({e})"})
            return
        except OSError:  # the client left, or sent no whole line within the deadline: nobody to answer
            return
        done = threading.Event()
        answer: Dict[str, Any] = {}

        def reply(result: Dict[str, Any]) -> None:
            answer.update(result)
            done.set()

        self.server.handler(request, reply)
        wait_s = None if request.get("op") == "stop" else 60
        if not done.wait(wait_s):
            answer = {"ok": False, "error": "the manager did not answer in time"}
        self._send(answer)

    def _send(self, obj: Dict[str, Any]) -> None:
        try:
            self.request.settimeout(REQUEST_DEADLINE_S)  # a client that does not read is not waited for
            self.request.sendall((json.dumps(obj) + "\n").encode())
        except OSError:
            pass


def _read_line(conn: socket.socket, deadline: float) -> bytes:
    """One line of at most MAX_REQUEST bytes by `deadline` (one for the whole request, so a client
    that trickles bytes gets no more time than a silent one); raises TimeoutError past it."""
    data = bytearray()
    while b"\n" not in data:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError("no whole request within the deadline")
        conn.settimeout(remaining)
        chunk = conn.recv(65536)
        if not chunk:
            break
        data += chunk
        if len(data) > MAX_REQUEST and b"\n" not in data:
            raise ValueError(f"longer than {MAX_REQUEST} bytes")
    return bytes(data.split(b"\n", 1)[0])


def parse_request(line: bytes) -> Dict[str, Any]:
    """A request line as a JSON object; ValueError names what is wrong. The nesting is checked before
    parsing: Python's json recurses once per level, so a deep enough document is a RecursionError."""
    depth = _nesting_depth(line, MAX_REQUEST_DEPTH)
    if depth > MAX_REQUEST_DEPTH:
        raise ValueError(f"nested deeper than {MAX_REQUEST_DEPTH} levels")
    request = json.loads(line)
    if not isinstance(request, dict):
        raise ValueError("not an object")
    return request


_BRACKETS_AND_STRINGS = re.compile(rb'"(?:[^"\\]|\\.)*"|[\[\]{}]')


def _nesting_depth(text: bytes, limit: int) -> int:
    """The deepest nesting of arrays and objects in a JSON text (strings skipped), or limit + 1 as
    soon as it passes `limit`. Unbalanced text is left to the parser to refuse."""
    depth = deepest = 0
    for m in _BRACKETS_AND_STRINGS.finditer(text):
        token = m.group()
        if token in (b"[", b"{"):
            depth += 1
            if depth > limit:
                return limit + 1
            deepest = max(deepest, depth)
        elif token in (b"]", b"}"):
            depth -= 1
    return deepest


def manager_starting(state_dir: Path) -> bool:
    """True while a manager holds the state directory's lock (it may not listen yet)."""
    try:
        with open(state_dir / LOCK_NAME, "rb") as lock:
            fcntl.flock(lock, fcntl.LOCK_SH | fcntl.LOCK_NB)
            return False  # nobody holds it
    except BlockingIOError:
        return True
    except OSError:
        return False  # no lock file (never started), or not ours to read


def request(state_dir: Path, obj: Dict[str, Any], *, timeout_s: Optional[float] = 60.0,
            appear_s: float = 0.0) -> Dict[str, Any]:
    """Sends one request to the manager of ``state_dir``; raises ControlError if none answers. A
    manager that is still starting (it holds the lock, its socket is not up yet) is waited for, and
    for `appear_s` seconds one that has not taken the lock yet, so `bft manager &` followed at once
    by `bft submit` works."""
    path = state_dir / SOCKET_NAME
    start = time.monotonic()
    while not path.exists():
        waited = time.monotonic() - start
        if not (waited < appear_s or (waited < STARTUP_WAIT_S and manager_starting(state_dir))):
            break
        time.sleep(0.1)
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(timeout_s)
    try:
        _connect(s, str(path), time.monotonic() + (timeout_s if timeout_s is not None else CONNECT_WAIT_S))
        s.sendall((json.dumps(obj) + "\n").encode())
        data = b""
        while not data.endswith(b"\n"):
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
    except FileNotFoundError:
        raise ControlError(f"no manager is running for {state_dir} (start one with: bft manager)") from None
    except ConnectionRefusedError:
        raise ControlError(f"no manager is running for {state_dir} (a stale socket; start one with: bft manager)"
                           ) from None
    except PermissionError:
        raise ControlError(f"permission denied on {path}: the manager belongs to another user") from None
    except socket.timeout:
        raise ControlError("the manager did not answer in time") from None
    except OSError as e:  # reset, a full backlog past the deadline, ...: one line, not a traceback
        raise ControlError(f"the manager's socket {path}: {e.strerror or e}") from None
    finally:
        s.close()
    try:
        answer = json.loads(data)
    except ValueError:
        raise ControlError("the manager closed the connection without an answer") from None
    if not answer.get("ok"):
        raise ControlError(answer.get("error", "the manager refused the request"))
    return answer


def _connect(s: socket.socket, path: str, deadline: float) -> None:
    """Connects, waiting while the manager's backlog is full: with a timeout set, a Unix socket's
    connect fails at once (EAGAIN) instead of waiting for room in the backlog."""
    while True:
        try:
            s.connect(path)
            return
        except BlockingIOError:
            if time.monotonic() >= deadline:
                raise
            time.sleep(0.01)


def job_from_request(r: Dict[str, Any], default_max_retries: int) -> JobRow:
    """Validates a submit request; raises ValueError naming the offending field."""
    name = r.get("name")
    if not isinstance(name, str) or not JOB_NAME.fullmatch(name):
        raise ValueError(f"--name: {name!r} is not a job name (letters, digits, '_', '.', '-'; at most 64; "
                         "starting with a letter or digit)")
    script = r.get("script")
    if not isinstance(script, str) or not os.path.isabs(script):
        raise ValueError("script: expected an absolute path")
    if not os.path.isfile(script) or not os.access(script, os.R_OK):
        raise ValueError(f"script: {script} is not a readable file")
    cwd = r.get("cwd")
    if not isinstance(cwd, str) or not os.path.isdir(cwd):
        raise ValueError(f"cwd: {cwd!r} is not a directory")
    args = r.get("args", [])
    if not isinstance(args, list) or not all(isinstance(a, str) and "\0" not in a for a in args):
        raise ValueError("args: expected a list of strings")
    python = r.get("python")
    if not isinstance(python, str) or not os.path.isfile(python) or not os.access(python, os.X_OK):
        raise ValueError(f"--python: {python!r} is not an executable file")  # a directory is X_OK too
    lo, hi = _int(r, "min_nodes", "--min"), _int(r, "max_nodes", "--max")
    if lo < 1:
        raise ValueError(f"--min: must be >= 1, got {lo}")
    if hi < lo:
        raise ValueError(f"--max: must be >= --min ({lo}), got {hi}")
    work = r.get("work")
    if work is not None and (isinstance(work, bool) or not isinstance(work, (int, float))
                             or not math.isfinite(work) or work <= 0 or work > protocol.MAX_SAMPLES):
        raise ValueError(f"--samples: expected a positive number of samples, got {work!r}")
    retries = r.get("max_retries", default_max_retries)
    if isinstance(retries, bool) or not isinstance(retries, int) or not 0 <= retries <= 100:
        raise ValueError(f"--retries: expected an integer in [0, 100], got {retries!r}")
    resize = r.get("resize", "")  # "": the manager's --resize
    if resize:
        check_resize_choice(resize)
    procs_per_node = r.get("procs_per_node")  # none: the manager's --procs-per-node (0 until it resolves it)
    if procs_per_node is not None and (isinstance(procs_per_node, bool) or not isinstance(procs_per_node, int)
                                       or not 1 <= procs_per_node <= MAX_NODES):
        raise ValueError(f"--procs-per-node: expected a number of processes >= 1, got {procs_per_node!r}")
    curve = check_curve(r.get("curve"), "--curve")
    configurations = check_configurations(r.get("configurations", []))
    check_rates(curve, configurations, hi)
    return JobRow(id=name, seq=0, script=script, args=args, cwd=cwd, python=python, min_nodes=lo, max_nodes=hi,
                  work=float(work) if work is not None else None, curve=curve, secret="", state=JobState.QUEUED,
                  max_retries=retries, configurations=configurations, resize=resize, procs_per_node=procs_per_node or 0)


def _int(r: Dict[str, Any], key: str, flag: str) -> int:
    v = r.get(key)
    if isinstance(v, bool) or not isinstance(v, int) or not -MAX_NODES <= v <= MAX_NODES:
        raise ValueError(f"{flag}: expected a node count, got {v!r}")
    return v
