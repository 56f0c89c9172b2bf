"""The keeper: what running jobs need from the manager while they train, in a process that outlives it.

The rendezvous store (TCPStore) and the progress-report socket (UDP) live here, not in the manager,
so ``kill -9`` of the manager stops no training: torchrun agents keep their store, workers keep
reporting. The store listens on a loopback only the keeper reaches; what the agents reach on
``BIND:STORE_PORT`` is an authenticating relay (bft.train.rendezvous) that lets through only a
connection proving the secret of a job that is queued or running in ``state.db``.

The keeper relays every report datagram to the manager over a private Unix socket (``keeper.sock``
in the state directory, the manager's user only) and, while no manager is attached, holds the
first and the newest believable one of each worker (the newest says how far it got, reports being
cumulative; the first, where a resize's gap ended; see _hold). A restarted manager attaches again
and re-adopts the running jobs instead of relaunching them.

The keeper ends when the manager says so (``bft manager stop``), never by itself while jobs may
still need it. ``keeper.json`` in the state directory says where it listens and its pid.

    python -m bft.runtime.keeper STATE_DIR BIND STORE_PORT REPORT_PORT
"""

from __future__ import annotations

import json
import os
import select
import signal
import socket
import sqlite3
import struct
import sys
import threading
import time
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional, Tuple

from ..._atomic import write_atomically
from ...train import protocol, rendezvous
from ..jobs.processes import is_tagged
from ..statedb.schema import ACTIVE_STATES, StateError
from ..statedb.store import StateStore
from .control import same_user

INFO_NAME = "keeper.json"
SOCKET_NAME = "keeper.sock"
ENV_KEEPER = "BFT_KEEPER_OF"  # the keeper's tag: the state directory it serves
HELD_DATAGRAMS = 65536  # most senders held for while no manager is attached (job, rank, generation, round)
SECRET_CACHE_S = 5.0  # how long a looked-up job secret (or its absence) is reused while holding reports
_FRAME = struct.Struct("!H")  # a datagram's length, before it on the relay stream


class KeeperError(Exception):
    """The keeper could not be started or reached: one clear line."""


# -- the keeper process ---------------------------------------------------------------------------

class Keeper:
    def __init__(self, state_dir: Path, *, bind: str, store_port: int, report_port: int):
        self.state_dir = state_dir
        self.store = rendezvous.HostedStore(socket.create_server((bind, store_port), backlog=512), self._secret_of,
                                            wait_for_workers=False)
        if not self.store.private:
            print("bft keeper: no private network namespace here (unprivileged user namespaces are off): the "
                  "rendezvous store listens on this host's 127.0.0.1, open to its other users (docs/security.md)",
                  file=sys.stderr, flush=True)
        self.report_sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.report_sock.bind((bind, report_port))
        path = state_dir / SOCKET_NAME
        if path.exists() or path.is_symlink():
            path.unlink()
        self.relay = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        old = os.umask(0o177)
        try:
            self.relay.bind(str(path))
        finally:
            os.umask(old)
        self.relay.listen(4)
        # While no manager is attached: the first and the newest believable report of each (job,
        # generation, round, rank), by sequence number. A flood of garbage, forgeries or replays holds
        # nothing and pushes out nothing (it used to fill a 65,536-datagram queue and push out the
        # genuine reports).
        self.held: Dict[Tuple[str, int, int, int], List[Tuple[int, bytes]]] = {}
        self._secrets: Dict[str, Tuple[float, Optional[bytes]]] = {}  # job -> (looked up at, secret)
        self.manager: Optional[socket.socket] = None
        self.info = {"pid": os.getpid(), "bind": bind, "store_port": self.store.port,
                     "report_port": self.report_sock.getsockname()[1]}
        write_atomically(state_dir / INFO_NAME, json.dumps(self.info).encode())

    def _secret_of(self, job: str) -> Optional[bytes]:
        """The secret of `job` if it is queued or running (state.db is the one place secrets are kept)."""
        try:
            db = StateStore(self.state_dir / "state.db", create=False, read_only=True)
        except StateError:
            return None
        try:
            row = db.job(job)
        except sqlite3.Error:
            return None
        finally:
            db.close()
        return bytes.fromhex(row.secret) if row is not None and row.state in ACTIVE_STATES else None

    def serve(self) -> None:
        stop = threading.Event()
        signal.signal(signal.SIGTERM, lambda *_: stop.set())
        while not stop.is_set():
            sockets = [self.report_sock, self.relay] + ([self.manager] if self.manager else [])
            readable, _, _ = select.select(sockets, [], [], 0.5)
            for s in readable:
                if s is self.report_sock:
                    self._relay_datagram(self.report_sock.recv(protocol.MAX_DATAGRAM + 1))
                elif s is self.relay:
                    self._attach()
                elif s is self.manager and self._manager_says() == "stop":  # (not one replaced meanwhile)
                    stop.set()
        self._close()

    def _attach(self) -> None:
        conn, _ = self.relay.accept()
        if not same_user(conn):
            conn.close()  # (the socket is 0600 in a 0700 directory; this is the second lock)
            return
        if self.manager is not None:
            self.manager.close()  # a new manager replaces one that died
        self.manager = conn
        conn.sendall(json.dumps(self.info).encode() + b"\n")
        held = sorted(self.held.items())  # by job, generation, round: a job's older generations first
        self.held.clear()
        for _, reports in held:
            for _, data in reports:
                if self.manager is None:
                    self._hold(data)
                else:
                    self._send(data)

    def _relay_datagram(self, data: bytes) -> None:
        if len(data) > protocol.MAX_DATAGRAM:
            data = data[: protocol.MAX_DATAGRAM + 1]  # the manager drops and counts it as malformed
        if self.manager is None:
            self._hold(data)
        else:
            self._send(data)

    def _send(self, data: bytes) -> None:
        try:
            self.manager.sendall(_FRAME.pack(len(data)) + data)
        except OSError:  # the manager is gone: hold what comes until the next one attaches
            self.manager.close()
            self.manager = None
            self._hold(data)

    def _hold(self, data: bytes) -> None:
        """Keeps a report for the next manager if it is believable (signed by an active job's secret)
        and newer than what is held for its sender: the sender's first (where a resize's gap ends:
        the first step at a new size) and its newest (counts are cumulative: how far it got). What
        is not is dropped here, uncounted: the manager counts only what reaches it."""
        job = protocol.peek_job(data)
        secret = self._cached_secret(job) if job else None
        if secret is None:
            return
        try:
            r = protocol.decode(data, secret)
        except ValueError:
            return
        key = (r.job, r.generation, r.round, r.rank)
        held = self.held.get(key)
        if held is None:
            if len(self.held) < HELD_DATAGRAMS:
                self.held[key] = [(r.seq, data)]
        elif r.seq > held[-1][0]:
            self.held[key] = [held[0], (r.seq, data)]

    def _cached_secret(self, job: str) -> Optional[bytes]:
        """_secret_of, reused for SECRET_CACHE_S: a flood must not open state.db once per datagram."""
        now = time.monotonic()
        cached = self._secrets.get(job)
        if cached is not None and now - cached[0] < SECRET_CACHE_S:
            return cached[1]
        if len(self._secrets) >= HELD_DATAGRAMS:  # a flood of made-up job names
            self._secrets.clear()
        secret = self._secret_of(job)
        self._secrets[job] = (now, secret)
        return secret

    def _manager_says(self) -> str:
        try:
            line = self.manager.recv(64)
        except OSError:
            line = b""
        if not line:
            self.manager.close()
            self.manager = None
            return ""
        return line.decode(errors="replace").strip()

    def _close(self) -> None:
        for name in (INFO_NAME, SOCKET_NAME):
            try:
                (self.state_dir / name).unlink()
            except FileNotFoundError:
                pass
        if self.manager is not None:
            self.manager.close()


def main(argv: list) -> int:
    try:
        state_dir, bind, store_port, report_port = Path(argv[0]), argv[1], int(argv[2]), int(argv[3])
        if len(argv) != 4:
            raise ValueError
    except (IndexError, ValueError):
        print("bft keeper: usage: python -m bft.runtime.keeper STATE_DIR BIND STORE_PORT REPORT_PORT "
              "(started by bft manager)", file=sys.stderr, flush=True)
        return 2
    try:
        keeper = Keeper(state_dir, bind=bind, store_port=store_port, report_port=report_port)
    except (OSError, OverflowError) as e:
        print(f"bft keeper: cannot listen on {bind} (store port {store_port}, report port {report_port}): {e}",
              file=sys.stderr, flush=True)
        return 2
    keeper.serve()
    return 0


# -- the manager's side ---------------------------------------------------------------------------

class KeeperLink:
    """The manager's connection to its keeper: started if none runs, attached to if one does."""

    def __init__(self, state_dir: Path, *, bind: str, store_port: int, report_port: int, wait_s: float = 60.0):
        self.state_dir = state_dir
        self.adopted = self._alive_info() is not None  # a previous manager's keeper: its jobs may run on
        if not self.adopted:
            self._start(bind, store_port, report_port, wait_s)
        self.conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._buffer = b""  # what the keeper sent that is not handed out yet
        try:
            self.conn.connect(str(state_dir / SOCKET_NAME))
            while b"\n" not in self._buffer:  # its first line: where it listens; frames follow at once
                chunk = self.conn.recv(65536)
                if not chunk:
                    raise OSError("it closed the connection")
                self._buffer += chunk
            line, self._buffer = self._buffer.split(b"\n", 1)
            self.info: Dict[str, Any] = json.loads(line)
        except (OSError, ValueError) as e:
            raise KeeperError(f"cannot attach to the keeper in {state_dir}: {e}") from None

    def _alive_info(self) -> Optional[Dict[str, Any]]:
        try:
            info = json.loads((self.state_dir / INFO_NAME).read_text())
            pid = int(info["pid"])
        except (OSError, ValueError, KeyError, TypeError):
            return None
        return info if keeper_alive(pid, self.state_dir) else None

    def _start(self, bind: str, store_port: int, report_port: int, wait_s: float) -> None:
        import subprocess

        for name in (INFO_NAME, SOCKET_NAME):  # a dead keeper's
            try:
                (self.state_dir / name).unlink()
            except FileNotFoundError:
                pass
        log = open(self.state_dir / "keeper.log", "ab")
        env = {**os.environ, ENV_KEEPER: str(self.state_dir.resolve())}
        proc = subprocess.Popen([sys.executable, "-m", "bft.runtime.keeper", str(self.state_dir), bind,
                                 str(store_port), str(report_port)], env=env, stdin=subprocess.DEVNULL, stdout=log,
                                stderr=subprocess.STDOUT, start_new_session=True)  # it must outlive the manager
        log.close()
        deadline = time.monotonic() + wait_s
        while self._alive_info() is None or not (self.state_dir / SOCKET_NAME).exists():
            if proc.poll() is not None:
                tail = (self.state_dir / "keeper.log").read_text(errors="replace").strip().splitlines()[-1:]
                raise KeeperError(tail[0] if tail else f"the keeper exited with status {proc.returncode}")
            if time.monotonic() > deadline:
                raise KeeperError(f"the keeper did not start in {wait_s:.0f} s")
            time.sleep(0.05)

    def datagrams(self) -> Iterator[bytes]:
        """The report datagrams the keeper relays, as they come (ends when the keeper goes away)."""
        while True:
            while len(self._buffer) >= _FRAME.size:
                (n,) = _FRAME.unpack_from(self._buffer)
                if len(self._buffer) < _FRAME.size + n:
                    break
                yield self._buffer[_FRAME.size:_FRAME.size + n]
                self._buffer = self._buffer[_FRAME.size + n:]
            try:
                chunk = self.conn.recv(65536)
            except OSError:
                return
            if not chunk:
                return
            self._buffer += chunk

    def alive(self) -> bool:
        """Whether this keeper still runs (False at once once it died: a store that does not answer
        then will not answer again; the manager starts a new keeper on hearing keeper_lost)."""
        return keeper_alive(int(self.info["pid"]), self.state_dir)

    def stop_keeper(self) -> None:
        """Ends the keeper (bft manager stop): the jobs are stopped, nothing needs the store any more."""
        pid = self.info.get("pid")
        try:
            self.conn.sendall(b"stop\n")
        except OSError:
            pass
        deadline = time.monotonic() + 10
        while pid and keeper_alive(int(pid), self.state_dir) and time.monotonic() < deadline:
            time.sleep(0.05)
        self.conn.close()


def keeper_alive(pid: int, state_dir: Path) -> bool:
    """True if `pid` is a live keeper of `state_dir` (its environment tag says so)."""
    return is_tagged(pid, {ENV_KEEPER: str(state_dir.resolve())})


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
