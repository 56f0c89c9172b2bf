"""Progress reports: the wire format (one UDP datagram) and the sender inside a training process.

The format lives here, beside its only sender, and the manager decodes with the same functions::

    BFT1 <job> <generation> <round> <seq> <rank> <world> <all_ranks 0|1> <samples> <time_s> <hmac>

``hmac`` is HMAC-SHA256 (hex) of everything before it, keyed with the job's secret, which the
manager hands to the job in its environment (BFT_JOB_SECRET) and nobody else sees. ``generation``
counts the manager's launches of the job, ``round`` torchrun's restarts of its workers within one
launch (TORCHELASTIC_RESTART_COUNT), and ``seq`` the datagrams of one worker process: so a
replayed or stale datagram is recognised and dropped.
"""

from __future__ import annotations

import atexit
import hashlib
import hmac
import os
import socket
import sys
import threading
import time
from dataclasses import dataclass
from typing import Optional, Tuple

MAGIC = "BFT1"
MAX_DATAGRAM = 512
_FIELDS = 11


@dataclass(frozen=True)
class Report:
    job: str
    generation: int
    round: int
    seq: int
    rank: int
    world: int
    all_ranks: bool
    samples: float
    time_s: float


def _mac(secret: bytes, body: bytes) -> str:
    return hmac.new(secret, body, hashlib.sha256).hexdigest()


def encode(report: Report, secret: bytes) -> bytes:
    body = (f"{MAGIC} {report.job} {report.generation} {report.round} {report.seq} {report.rank} {report.world} "
            f"{1 if report.all_ranks else 0} {report.samples!r} {report.time_s!r}").encode()
    return body + b" " + _mac(secret, body).encode()


def peek_job(datagram: bytes) -> Optional[str]:
    """The job id a datagram claims to come from (unauthenticated), or None if it is not ours."""
    parts = datagram.split(b" ", 2)
    if len(parts) < 3 or parts[0] != MAGIC.encode():
        return None
    try:
        return parts[1].decode("ascii")
    except UnicodeDecodeError:
        return None


def decode(datagram: bytes, secret: bytes) -> Report:
    """Parses and authenticates one datagram. Raises ValueError saying what is wrong."""
    if len(datagram) > MAX_DATAGRAM:
        raise ValueError(f"datagram of {len(datagram)} bytes (at most {MAX_DATAGRAM})")
    body, _, mac = datagram.rpartition(b" ")
    if not hmac.compare_digest(_mac(secret, body).encode(), mac):
        raise ValueError("bad signature")
    try:
        parts = body.decode("ascii").split(" ")
    except UnicodeDecodeError:
        raise ValueError("not ASCII") from None
    if len(parts) != _FIELDS - 1 or parts[0] != MAGIC:
        raise ValueError(f"expected {_FIELDS} fields starting with {MAGIC}")
    try:
        r = Report(parts[1], int(parts[2]), int(parts[3]), int(parts[4]), int(parts[5]), int(parts[6]),
                   parts[7] == "1", float(parts[8]), float(parts[9]))
    except ValueError as e:
        raise ValueError(f"bad field: {e}") from None
    if not (r.samples >= 0 and r.samples < 1e18 and 0 <= r.rank < r.world <= 1_000_000 and r.time_s > 0
            and r.time_s < 1e11):
        raise ValueError("a field is out of range")
    return r


def _address(spec: str) -> Tuple[str, int]:
    host, _, port = spec.rpartition(":")
    return host.strip("[]"), int(port)


class Reporter:
    """Keeps the latest cumulative samples; a daemon thread sends them every ``interval_s``."""

    def __init__(self) -> None:
        self.samples = -1.0
        self.time_s = 0.0
        self.all_ranks = False
        self._sent = (-1.0, 0.0)
        self._seq = 0
        self._thread: Optional[threading.Thread] = None
        self._wake = threading.Event()
        self._lock = threading.Lock()
        self._sock: Optional[socket.socket] = None
        self._configured = False
        self._enabled = False

    def _configure(self) -> None:
        self._configured = True
        env = os.environ
        if not env.get("BFT_REPORT_ADDR") or not env.get("BFT_JOB_SECRET") or not env.get("BFT_JOB_ID"):
            if env.get("RANK", "0") == "0":
                print("bft.train: not launched by bft manager; progress reports are not sent",
                      file=sys.stderr, flush=True)
            return
        try:
            self._addr = _address(env["BFT_REPORT_ADDR"])
            self._secret = bytes.fromhex(env["BFT_JOB_SECRET"])
            self._job = env["BFT_JOB_ID"]
            self._generation = int(env.get("BFT_GENERATION", "0"))
            self._round = int(env.get("TORCHELASTIC_RESTART_COUNT", "0"))
            self._rank = int(env.get("RANK", "0"))
            self._world = max(1, int(env.get("WORLD_SIZE", "1")))
            self._interval_s = max(0.05, float(env.get("BFT_REPORT_INTERVAL_S", "0.5")))
            family = socket.AF_INET6 if ":" in self._addr[0] else socket.AF_INET
            self._sock = socket.socket(family, socket.SOCK_DGRAM)
            self._sock.setblocking(False)
        except (ValueError, OSError) as e:
            print(f"bft.train: progress reports disabled ({e})", file=sys.stderr, flush=True)
            return
        self._enabled = True

    def record(self, samples: float, all_ranks: bool) -> None:
        self.samples = samples
        self.time_s = time.time()
        if self._thread is None:
            self._start(all_ranks)

    def _start(self, all_ranks: bool) -> None:
        with self._lock:
            if self._thread is not None:
                return
            if not self._configured:
                self._configure()
            self.all_ranks = all_ranks
            self._thread = threading.Thread(target=self._run, name="bft-report", daemon=True)
            if self._enabled and (all_ranks or self._rank == 0):
                self._thread.start()  # the first send marks the first step of this process
                atexit.register(self.flush)  # the final count of a job that ends normally

    def _run(self) -> None:
        while True:
            self.flush()
            self._wake.wait(self._interval_s)

    def flush(self) -> None:
        """Sends the latest value now if it was not sent yet (never raises, never blocks)."""
        if not self._enabled or not (self.all_ranks or self._rank == 0):
            return
        with self._lock:
            latest = (self.samples, self.time_s)
            if latest == self._sent or latest[0] < 0:
                return
            self._seq += 1
            datagram = encode(Report(self._job, self._generation, self._round, self._seq, self._rank, self._world,
                                     self.all_ranks, float(latest[0]), latest[1]), self._secret)
            try:
                self._sock.sendto(datagram, self._addr)
            except OSError:
                return  # loss-tolerant: the next send carries the cumulative count anyway
            self._sent = latest


REPORTER = Reporter()
