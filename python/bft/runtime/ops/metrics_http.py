"""The metrics endpoint's HTTP server (``bft manager --metrics-port``): bounded in everything a client
can make it hold, so that nobody who reaches the port can take the manager's descriptors, threads or
memory (docs/security.md, "Metrics").

One thread runs one selector over the listening socket and at most ``MAX_CONNECTIONS`` connections.
Each connection has one deadline (``REQUEST_DEADLINE_S`` from its accept to the last byte of the
answer, so trickling bytes does not stretch it) and at most ``MAX_REQUEST_BYTES`` of request; then it
is closed. A connection accepted while all the slots are taken pushes out the oldest one (as the
rendezvous relay drops its oldest unfinished handshake), so a flood of idle connections neither
grows the manager's descriptors nor keeps a scrape out: the manager holds at most
``MAX_CONNECTIONS`` + 4 descriptors for the endpoint (the listener, the selector, the wake-up pair),
however many clients connect. prometheus-client's own server (a thread per connection, no timeout)
let 1,000 idle connections exhaust a manager's 1,024 descriptors.

A request is ``GET`` or ``HEAD`` of ``/metrics`` (or ``/``); the answer is the text the exporter
renders from its last snapshot, ``Connection: close``.
"""

from __future__ import annotations

import selectors
import socket
import sys
import threading
import time
import traceback
from typing import Callable, Dict, Optional

MAX_CONNECTIONS = 32
REQUEST_DEADLINE_S = 5.0
MAX_REQUEST_BYTES = 8192
BACKLOG = 64
ACCEPT_PAUSE_S = 1.0  # after an accept failed for want of descriptors
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"  # Prometheus' text format
PATHS = ("/metrics", "/")


class _Connection:
    def __init__(self, sock: socket.socket, deadline: float):
        self.sock = sock
        self.deadline = deadline
        self.request = bytearray()
        self.answer: Optional[memoryview] = None  # set once the request is complete


def _answer(status: str, body: bytes, *, head: bool = False, content_type: str = "text/plain") -> bytes:
    header = (f"HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {len(body)}\r\n"
              "Connection: close\r\n\r\n").encode()
    return header if head else header + body


class MetricsServer:
    def __init__(self, address: str, port: int, render: Callable[[], bytes]):
        """Listens on `address`:`port` (0: a free one) and serves `render()`; OSError if it cannot bind."""
        family = socket.AF_INET6 if ":" in address else socket.AF_INET
        self._listener = socket.create_server((address, port), family=family, backlog=BACKLOG)
        self._listener.setblocking(False)
        self.server_port: int = self._listener.getsockname()[1]
        self._render = render
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._selector = selectors.DefaultSelector()
        self._selector.register(self._listener, selectors.EVENT_READ)
        self._selector.register(self._wake_r, selectors.EVENT_READ)
        self._connections: Dict[socket.socket, _Connection] = {}
        self._stopping = False
        self._paused_until: Optional[float] = None  # accepting again after a failed accept
        self._thread = threading.Thread(target=self._serve, name="bft-metrics-http", daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._stopping = True
        try:
            self._wake_w.send(b"x")
        except OSError:
            pass
        self._thread.join(10)
        for conn in list(self._connections.values()):
            self._drop(conn)
        self._selector.close()
        for s in (self._listener, self._wake_r, self._wake_w):
            s.close()

    def _serve(self) -> None:
        failed = False
        while not self._stopping:
            try:
                self._serve_once()
            except Exception:  # noqa: BLE001 - a bug here must not end the endpoint, nor flood the log
                if not failed:
                    print(f"bft manager: internal error in the metrics endpoint (said once):\n"
                          f"{traceback.format_exc()}", file=sys.stderr, flush=True)
                failed = True
                time.sleep(0.1)

    def _serve_once(self) -> None:
        """One turn: waits for the next event or deadline, serves what is ready, drops what is overdue."""
        now = time.monotonic()
        if self._paused_until is not None and now >= self._paused_until:
            self._paused_until = None
            self._selector.register(self._listener, selectors.EVENT_READ)
        soonest = min((c.deadline for c in self._connections.values()), default=self._paused_until)
        timeout = None if soonest is None else max(0.0, soonest - now)
        for key, mask in self._selector.select(timeout):
            if key.fileobj is self._listener:
                self._accept()
            elif key.fileobj is not self._wake_r:
                conn = self._connections.get(key.fileobj)
                if conn is not None:
                    self._step(conn, mask)
        now = time.monotonic()
        for conn in [c for c in self._connections.values() if c.deadline <= now]:
            self._drop(conn)  # idle, trickling, or not reading its answer

    def _accept(self) -> None:
        for _ in range(BACKLOG):  # what the backlog holds, then back to the connections
            try:
                sock, _ = self._listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError:  # out of descriptors (the manager's other work): not a busy loop meanwhile
                self._selector.unregister(self._listener)
                self._paused_until = time.monotonic() + ACCEPT_PAUSE_S
                return
            if len(self._connections) >= MAX_CONNECTIONS:
                # Full: the oldest goes (dicts keep insertion order). A scrape sends its request at once
                # and is answered within a round trip; only an idle flood's connections grow old.
                self._drop(next(iter(self._connections.values())))
            sock.setblocking(False)
            conn = _Connection(sock, time.monotonic() + REQUEST_DEADLINE_S)
            self._connections[sock] = conn
            self._selector.register(sock, selectors.EVENT_READ)

    def _step(self, conn: _Connection, mask: int) -> None:
        try:
            if conn.answer is None and mask & selectors.EVENT_READ:
                chunk = conn.sock.recv(4096)
                if not chunk:
                    self._drop(conn)
                    return
                conn.request += chunk
                if b"\r\n\r\n" in conn.request or b"\n\n" in conn.request:
                    conn.answer = memoryview(self._respond(bytes(conn.request)))
                elif len(conn.request) > MAX_REQUEST_BYTES:
                    conn.answer = memoryview(_answer("431 Request Header Fields Too Large", b"request too large\n"))
                else:
                    return
                self._selector.modify(conn.sock, selectors.EVENT_WRITE)
            if conn.answer is not None and mask & selectors.EVENT_WRITE:
                sent = conn.sock.send(conn.answer)
                conn.answer = conn.answer[sent:]
                if not conn.answer:
                    self._drop(conn)
        except (BlockingIOError, InterruptedError):
            pass
        except OSError:
            self._drop(conn)

    def _respond(self, request: bytes) -> bytes:
        line = request.split(b"\n", 1)[0].decode("latin-1").split()
        if len(line) != 3 or not line[2].startswith("HTTP/"):
            return _answer("400 Bad Request", b"bad request\n")
        method, target = line[0], line[1].split("?", 1)[0]
        if method not in ("GET", "HEAD"):
            return _answer("405 Method Not Allowed", b"GET or HEAD only\n")
        if target not in PATHS:
            return _answer("404 Not Found", b"the metrics are at /metrics\n")
        try:
            body = self._render()
        except Exception:  # noqa: BLE001 - a rendering bug must not end the server's thread
            return _answer("500 Internal Server Error", b"the metrics could not be rendered\n")
        return _answer("200 OK", body, head=method == "HEAD", content_type=CONTENT_TYPE)

    def _drop(self, conn: _Connection) -> None:
        self._connections.pop(conn.sock, None)
        try:
            self._selector.unregister(conn.sock)
        except (KeyError, ValueError):
            pass
        conn.sock.close()
