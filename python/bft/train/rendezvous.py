"""Authenticated connections to a job's rendezvous store.

torch's TCPStore authenticates nobody: whoever reaches its port can read, write and list keys, or
hold a rendezvous up. So no store of a job listens where anyone else can reach it: a
:class:`HostedStore` listens on 127.0.0.1 of a private network namespace of its process (bft.train.
_loopback), behind a **relay** on the reachable address, and every process of the job connects
through a **gateway** on its own host's loopback:

    worker/agent -> gateway 127.0.0.1 (same user only) -> relay BIND:PORT (job secret) -> store (private)

Each TCP connection to a relay first proves knowledge of the job's secret (``BFT_JOB_SECRET``, the
key its reports are signed with), and the relay proves it back, before a single store byte passes:

    client: BFTRDZV1 <job> <client nonce>\\n
    relay:  <relay nonce> HMAC(secret, "relay" job cnonce rnonce)\\n
    client: HMAC(secret, "client" job cnonce rnonce)\\n        then the store's own bytes, both ways

A handshake must finish within HANDSHAKE_TIMEOUT_S and runs in its own thread, so a slow or silent
peer holds up nobody else; of more than MAX_PENDING unfinished handshakes the oldest is dropped, so a
flood of silent connections costs bounded threads, and a peer that answers at once gets through
unless the flood opens MAX_PENDING connections within its round trip. The gateway listens on
127.0.0.1 and serves only connections whose socket belongs to its own user (``/proc/net/tcp``), so
another user of a compute node cannot borrow it.

:func:`open_gateway` is what any process of a job calls to reach its store, torchrun or not.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
import socket
import struct
import threading
import time
from collections import OrderedDict
from typing import Any, Callable, Optional, Tuple

from ._loopback import PrivateLoopback

HANDSHAKE_TIMEOUT_S = 5.0
PROBE_S = 0.25  # between two tries to reach a relay that does not answer (yet)
MAX_PENDING = 256  # unfinished handshakes at once on one relay or gateway; beyond, the oldest is dropped
_HELLO = b"BFTRDZV1"
_NONCE = 16
_MAX_LINE = 256

Address = Tuple[str, int]


class HandshakeError(Exception):
    """The other end did not prove the job's secret (or did not follow the protocol in time)."""


def _proof(secret: bytes, role: bytes, job: str, cnonce: bytes, rnonce: bytes) -> bytes:
    return hmac.new(secret, role + b"\0" + job.encode() + b"\0" + cnonce + rnonce, hashlib.sha256).hexdigest().encode()


def _read_line(conn: socket.socket, deadline: float) -> bytes:
    """One line, read a byte at a time so that nothing after it (the store's bytes) is consumed; the
    whole handshake has one deadline, so a peer trickling bytes cannot stretch it."""
    line = b""
    while not line.endswith(b"\n"):
        conn.settimeout(max(deadline - time.monotonic(), 0.001))
        byte = conn.recv(1)
        if not byte or len(line) >= _MAX_LINE:
            raise HandshakeError("the connection closed or sent too long a line during the handshake")
        line += byte
    return line[:-1]


def client_handshake(conn: socket.socket, job: str, secret: bytes, timeout_s: float = HANDSHAKE_TIMEOUT_S) -> None:
    """Proves `secret` for `job` on a fresh connection to a relay, and checks the relay's proof."""
    deadline = time.monotonic() + timeout_s
    cnonce = secrets.token_bytes(_NONCE)
    conn.sendall(b"%s %s %s\n" % (_HELLO, job.encode(), cnonce.hex().encode()))
    try:
        rnonce_hex, proof = _read_line(conn, deadline).split(b" ")
        rnonce = bytes.fromhex(rnonce_hex.decode())
    except ValueError:
        raise HandshakeError("the relay's answer is malformed") from None
    if not hmac.compare_digest(proof, _proof(secret, b"relay", job, cnonce, rnonce)):
        raise HandshakeError(f"the relay does not know the secret of job {job}")
    conn.sendall(_proof(secret, b"client", job, cnonce, rnonce) + b"\n")


def _server_handshake(conn: socket.socket, secret_of: Callable[[str], Optional[bytes]]) -> None:
    deadline = time.monotonic() + HANDSHAKE_TIMEOUT_S
    try:
        hello, job_b, cnonce_hex = _read_line(conn, deadline).split(b" ")
        job, cnonce = job_b.decode(), bytes.fromhex(cnonce_hex.decode())
    except ValueError:
        raise HandshakeError("malformed hello") from None
    if hello != _HELLO:
        raise HandshakeError("malformed hello")
    # A job that is not running is answered as one that is, with a proof under a key nobody holds, and
    # refused only after the client's proof: the relay is no oracle of which job names exist.
    secret = secret_of(job)
    key = secret if secret is not None else secrets.token_bytes(32)
    rnonce = secrets.token_bytes(_NONCE)
    conn.sendall(rnonce.hex().encode() + b" " + _proof(key, b"relay", job, cnonce, rnonce) + b"\n")
    if not hmac.compare_digest(_read_line(conn, deadline), _proof(key, b"client", job, cnonce, rnonce)):
        raise HandshakeError(f"no running job {job!r}, or a wrong secret")


def _pipe(a: socket.socket, b: socket.socket) -> None:
    """Copies bytes both ways until either side closes; closes both."""

    def one_way(src: socket.socket, dst: socket.socket) -> None:
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                dst.sendall(data)
        except OSError:
            pass
        for s in (src, dst):  # either side gone: the store connection is over for both
            _shutdown(s)

    back = threading.Thread(target=one_way, args=(b, a), daemon=True)
    back.start()
    one_way(a, b)
    back.join()
    a.close()
    b.close()


def _shutdown(conn: socket.socket) -> None:
    try:
        conn.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass


def _nodelay(conn: socket.socket) -> socket.socket:
    conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # store ops are small request/answer pairs
    return conn


class _Server:
    """A listening socket whose connections are each served in a thread of their own."""

    def __init__(self, listener: socket.socket, serve: Callable[[socket.socket], None], name: str):
        self.listener = listener
        self.address: Address = listener.getsockname()[:2]
        self._serve = serve
        self._pending: "OrderedDict[socket.socket, None]" = OrderedDict()  # unfinished handshakes, oldest first
        self._lock = threading.Lock()
        self._closed = threading.Event()
        threading.Thread(target=self._accept, name=name, daemon=True).start()

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return  # closed
            with self._lock:
                self._pending[conn] = None
                if len(self._pending) > MAX_PENDING:
                    oldest, _ = self._pending.popitem(last=False)
                    _shutdown(oldest)  # its handshake thread fails and closes it
            threading.Thread(target=self._handle, args=(conn,), daemon=True).start()

    def _handle(self, conn: socket.socket) -> None:
        try:
            upstream = self._serve(_nodelay(conn))
        except (OSError, HandshakeError):
            conn.close()
            return
        finally:
            with self._lock:
                self._pending.pop(conn, None)
        conn.settimeout(None)
        upstream.settimeout(None)
        _pipe(conn, upstream)

    def close(self) -> None:
        self._closed.set()
        _shutdown(self.listener)  # wakes the accept
        self.listener.close()


def start_relay(listener: socket.socket, connect: Callable[[], socket.socket],
                secret_of: Callable[[str], Optional[bytes]]) -> _Server:
    """Serves `listener` (bound and listening): each connection that proves the secret of a job
    (``secret_of(job)``; None for no such job) is piped to a new connection to the store (`connect`)."""

    def serve(conn: socket.socket) -> socket.socket:
        _server_handshake(conn, secret_of)
        return _nodelay(connect())

    return _Server(listener, serve, "bft-rdzv-relay")


def _same_user(conn: socket.socket) -> None:
    if peer_uid(conn) != os.getuid():
        raise HandshakeError("a process of another user")


def open_gateway(relay: Address, job: str, secret: bytes) -> _Server:
    """A gateway to `job`'s store behind `relay`, on 127.0.0.1 of this host, for this user's processes.
    Connect a TCPStore client (or torchrun's rendezvous endpoint) to ``gateway.address``; close it
    with ``gateway.close()`` (connections already made stay up)."""

    def serve(conn: socket.socket) -> socket.socket:
        _same_user(conn)
        upstream = _nodelay(socket.create_connection(relay, timeout=HANDSHAKE_TIMEOUT_S))
        try:
            client_handshake(upstream, job, secret)
        except (OSError, HandshakeError):
            upstream.close()
            raise
        return upstream

    return _Server(socket.create_server(("127.0.0.1", 0), backlog=512), serve, "bft-rdzv-gateway")


class RelayUnreachable(TimeoutError):
    """No relay answered the job's handshake at an address within the time given."""


def await_relay(relay: Address, job: str, secret: bytes, within_s: float,
                gone: Optional[Callable[[], bool]] = None) -> None:
    """Returns once the relay at `relay` answers `job`'s handshake, tried every PROBE_S; RelayUnreachable
    after `within_s`, or as soon as `gone()` says no relay will come back. A keeper that starts late
    answers late: TCPStore's own connect retries back off exponentially (gaps of up to 8 s here, and
    36 s spent for a timeout of 30), so a client would find a keeper seconds after it came back."""
    deadline = time.monotonic() + within_s
    while True:
        bound = max(min(HANDSHAKE_TIMEOUT_S, deadline - time.monotonic()), 0.01)
        try:
            with socket.create_connection(relay, timeout=bound) as conn:
                client_handshake(conn, job, secret, bound)
            return
        except (OSError, HandshakeError) as e:
            error = e
        if gone is not None and gone():
            raise RelayUnreachable(f"the rendezvous store's relay {relay[0]}:{relay[1]} is gone ({error})")
        if time.monotonic() + PROBE_S > deadline:
            raise RelayUnreachable(f"the rendezvous store's relay {relay[0]}:{relay[1]} did not answer within "
                                   f"{within_s:g} s ({error})")
        time.sleep(PROBE_S)


def store_client(relay: Address, job: str, secret: bytes, timeout_s: float, reach_within_s: Optional[float] = None,
                 gone: Optional[Callable[[], bool]] = None) -> Tuple[Any, _Server]:
    """A TCPStore client of `job`'s store behind `relay`, through a gateway of this process: (client,
    gateway). Keep the gateway as long as the client is used; close it after. `timeout_s` is the
    client's operations'; the relay must answer within `reach_within_s` (default `timeout_s`; see
    await_relay for `gone`), else RelayUnreachable."""
    import datetime

    import torch.distributed as dist

    await_relay(relay, job, secret, timeout_s if reach_within_s is None else reach_within_s, gone)
    gateway = open_gateway(relay, job, secret)
    host, port = gateway.address
    try:
        # The relay just answered: a connection that fails now is a keeper lost meanwhile, not one to
        # retry for the whole timeout (the manager's loop waits on it).
        store = dist.TCPStore(host, port, is_master=False, timeout=datetime.timedelta(seconds=HANDSHAKE_TIMEOUT_S))
        store.set_timeout(datetime.timedelta(seconds=timeout_s))
        return store, gateway
    except BaseException:
        gateway.close()
        raise


class HostedStore:
    """A TCPStore server of this process that only its relay (on `listener`, for the jobs whose
    secret ``secret_of`` knows) can reach; ``port`` is the relay's. ``private`` is False where the
    kernel allows no private namespace: the store is then on this host's 127.0.0.1."""

    def __init__(self, listener: socket.socket, secret_of: Callable[[str], Optional[bytes]], **store_options: Any):
        import torch.distributed as dist

        self.loopback = PrivateLoopback()
        self.private = self.loopback.private
        own = socket.create_server(("127.0.0.1", 0), backlog=16)
        self._store_port = own.getsockname()[1]
        self._own: Optional[_Server] = None
        store_sock = own
        if self.private:
            # TCPStore's server also connects a client of its own, to 127.0.0.1:<its port> of this
            # host's namespace: that port forwards this user's connections into the private one.
            self._own = _Server(own, self._own_client, "bft-store-own")
            store_sock = self.loopback.listener(self._store_port)
        self._store_sock = store_sock  # open as long as the store
        self.store = dist.TCPStore("127.0.0.1", self._store_port, is_master=True, use_libuv=True,
                                   master_listen_fd=store_sock.fileno(), **store_options)
        self.relay = start_relay(listener, self._connect, secret_of)
        self.port = self.relay.address[1]

    def _connect(self) -> socket.socket:
        return _nodelay(self.loopback.connect(self._store_port, HANDSHAKE_TIMEOUT_S))

    def _own_client(self, conn: socket.socket) -> socket.socket:
        _same_user(conn)
        return self._connect()

    def close(self) -> None:
        self.relay.close()
        if self._own is not None:
            self._own.close()
        self.loopback.close()


def _proc_net_address(raw_ip: bytes, port: int) -> str:
    words = struct.unpack("=%dI" % (len(raw_ip) // 4), raw_ip)  # as /proc/net/tcp{,6} write them
    return "".join("%08X" % w for w in words) + ":%04X" % port


def peer_uid(conn: socket.socket) -> Optional[int]:
    """The user owning the other end of a loopback TCP connection, None if unknown. From /proc/net/tcp,
    or /proc/net/tcp6 where the peer's socket is a dual-stack one (as torch's TCPStore client makes)."""
    (peer_ip, peer_port), (our_ip, our_port) = conn.getpeername()[:2], conn.getsockname()[:2]
    peer_v4, our_v4 = socket.inet_aton(peer_ip), socket.inet_aton(our_ip)
    mapped = b"\0" * 10 + b"\xff\xff"
    for table, prefix in (("/proc/net/tcp", b""), ("/proc/net/tcp6", mapped)):
        theirs, ours = _proc_net_address(prefix + peer_v4, peer_port), _proc_net_address(prefix + our_v4, our_port)
        with open(table) as f:
            next(f)
            for line in f:
                fields = line.split()
                if fields[1] == theirs and fields[2] == ours:
                    return int(fields[7])
    return None
