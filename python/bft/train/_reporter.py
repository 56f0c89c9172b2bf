"""The sender of progress reports inside a training process (the format: bft.train.protocol)."""

from __future__ import annotations

import atexit
import os
import socket
import sys
import threading
import time
from typing import Optional

from .protocol import (
    DEFAULT_REPORT_INTERVAL_S,
    ENV_GENERATION,
    ENV_JOB_ID,
    ENV_JOB_SECRET,
    ENV_REPORT_ADDR,
    ENV_REPORT_INTERVAL_S,
    MIN_REPORT_INTERVAL_S,
    Report,
    encode,
    parse_address,
    resolve_job_secret,
)


class Reporter:
    """Keeps the latest cumulative samples; a daemon thread sends them every ``interval_s``."""

    def __init__(self) -> None:
        self.samples = -1.0
        self.time_s = 0.0
        self.all_ranks = False
        self.state_bytes = 0  # what a resize of this job moves, once the script's ElasticState says
        self._sent = (-1.0, 0.0)
        self._seq = 0
        self._thread: Optional[threading.Thread] = None
        self._wake = threading.Event()
        # Set by an in-place resize: the new generation's first step is sent at once, not at the next
        # interval, so that the manager's resize gap ends at that step (not up to an interval later).
        self._send_next_step = False
        self._lock = threading.Lock()
        self._sock: Optional[socket.socket] = None
        self._configured = False
        self._enabled = False

    def _configure(self) -> None:
        self._configured = True
        env = os.environ
        try:
            resolve_job_secret(env)  # a process the manager started without the agent or bft.train.run
        except ValueError as e:
            print(f"bft.train: {e}; progress reports are not sent", file=sys.stderr, flush=True)
            return
        if not env.get(ENV_REPORT_ADDR) or not env.get(ENV_JOB_SECRET) or not env.get(ENV_JOB_ID):
            if env.get("RANK", "0") == "0":
                print("bft.train: not launched by bft manager; progress reports are not sent",
                      file=sys.stderr, flush=True)
            return
        try:
            self._addr = parse_address(env[ENV_REPORT_ADDR])
            self._secret = bytes.fromhex(env[ENV_JOB_SECRET])
            self._job = env[ENV_JOB_ID]
            self._generation = int(env.get(ENV_GENERATION, "0"))
            self._round = int(env.get("TORCHELASTIC_RESTART_COUNT", "0"))
            self._rank = int(env.get("RANK", "0"))
            self._world = max(1, int(env.get("WORLD_SIZE", "1")))
            self._interval_s = max(MIN_REPORT_INTERVAL_S,
                                   float(env.get(ENV_REPORT_INTERVAL_S, DEFAULT_REPORT_INTERVAL_S)))
            family = socket.AF_INET6 if ":" in self._addr[0] else socket.AF_INET
            self._sock = socket.socket(family, socket.SOCK_DGRAM)
            # Connected: bound to the address that reaches the manager, not a wildcard, and it takes
            # datagrams from the manager's address only.
            self._sock.connect(self._addr)
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
        elif self._send_next_step:
            self._send_next_step = False
            self._wake.set()

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

    def reconfigure(self, generation: int, rank: int, world: int) -> None:
        """An in-place resize moved this process to another generation, rank and world size: its
        reports say so from now on (rank 0's are the job's; a new rank 0 starts sending)."""
        with self._lock:
            if not self._configured:
                self._configure()
            self._generation, self._rank, self._world = generation, rank, world
            # What the old generation did is not progress of the new one: its first report marks its first step.
            self._sent = (self.samples, self.time_s)
            self._send_next_step = True
            thread = self._thread
        if thread is not None and not thread.is_alive() and self._enabled and rank == 0:
            self._thread = None
            self._start(self.all_ranks)

    def _run(self) -> None:
        while True:
            self.flush()
            self._wake.wait(self._interval_s)
            self._wake.clear()

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
                                     self.all_ranks, float(latest[0]), latest[1], self.state_bytes), self._secret)
            try:
                self._sock.send(datagram)
            except OSError:
                return  # loss-tolerant: the next send carries the cumulative count anyway
            self._sent = latest


REPORTER = Reporter()
