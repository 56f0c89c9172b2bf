"""A job's files under the state directory: its directory, its output log (the manager's lines and
the workers' output) and the tails of both that a failure's reason quotes, and its secret's file,
which the job's processes read on their nodes (bft.train.protocol.resolve_job_secret)."""

from __future__ import annotations

import os
import time
from pathlib import Path

from ..._atomic import write_atomically
from .launcher import AGENTS_DIR, worker_log_tail

SECRET_NAME = "secret"

LOG_TAIL_LINES = 20
OUTPUT_TAIL_BYTES = 64 * 1024


class JobFiles:
    def __init__(self, state_dir: Path):
        self.state_dir = state_dir
        self._made: set = set()  # jobs whose directories exist

    def job_dir(self, job: str) -> Path:
        d = self.state_dir / "jobs" / job
        if job not in self._made:  # made once per manager: every launch and log line asks
            d.mkdir(parents=True, exist_ok=True)
            (d / AGENTS_DIR).mkdir(exist_ok=True)
            self._made.add(job)
        return d

    def write_secret(self, job: str, secret: str) -> Path:
        """The job's secret in a 0600 file of its directory (on a cluster, a shared file system): its
        launches carry this path, not the secret (docs/security.md, "What crosses the network")."""
        path = self.job_dir(job) / SECRET_NAME
        write_atomically(path, secret.encode())
        return path

    def log_line(self, job: str, line: str) -> None:
        with open(self.job_dir(job) / "output.log", "a") as f:
            f.write(f"{time.strftime('%Y-%m-%d %H:%M:%S')} {line}\n")

    def log_tail(self, job: str, lines: int = LOG_TAIL_LINES) -> str:
        """What the job's workers printed last, else the end of the job's output log."""
        workers = worker_log_tail(self.job_dir(job) / "workers", lines)
        return workers or "\n".join(self.output_tail(job).splitlines()[-lines:])

    def output_tail(self, job: str, size: int = OUTPUT_TAIL_BYTES) -> str:
        """The last `size` bytes of the job's output log (a seek: the log may be large)."""
        try:
            with open(self.job_dir(job) / "output.log", "rb") as f:
                f.seek(0, os.SEEK_END)
                f.seek(max(0, f.tell() - size))
                return f.read().decode("utf-8", "replace")
        except OSError:
            return ""
