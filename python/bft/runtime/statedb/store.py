"""The manager's state: one SQLite database (WAL) under the state directory.

Everything the manager must not lose is written here before the side effect it describes: a job
is stored before ``bft submit`` returns, a process row before the process is started, progress as
it arrives. After ``kill -9`` the next manager reads this file and reconciles with what it finds.

Durability: every commit survives the manager's own crash (``kill -9``): SQLite's WAL with
``synchronous=NORMAL`` has written it to the OS before the commit returns. Only what the manager
tells a person or ends for good (a submitted job, a job's final state) is also forced to the disk
before the answer (:meth:`StateStore.transaction` with ``durable=True``), so it survives a power
loss of the manager's host too; the rest (node events, process rows, progress: a few hundred commits
a second under Summit's load) would be rebuilt from what runs, and an fsync each (up to 9 ms here)
was most of the manager's decision latency tail (bench/README.md, "Load on the real manager").
The file carries an application id and a schema version, so a foreign or corrupt file is refused
with a clear error, never silently reset.
"""

from __future__ import annotations

import json
import sqlite3
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional

from ...jobs import FULL_CONFIGURATION
from ..options import DEFAULTS
from .schema import StateError, check_database, check_header, create_database


@dataclass
class JobRow:
    id: str
    seq: int
    script: str
    args: List[str]
    cwd: str
    python: str
    min_nodes: int
    max_nodes: int
    work: Optional[float]
    curve: Optional[Dict[str, List[float]]]
    secret: str
    state: str
    reason: str = ""
    retries: int = 0
    max_retries: int = DEFAULTS.max_retries  # the manager's --max-retries
    generation: int = 0
    samples: float = 0.0
    submitted_s: float = field(default_factory=time.time)
    started_s: Optional[float] = None
    finished_s: Optional[float] = None
    # Other ways to run the job ({"name", "efficiency", "speedup"} each; jobspec.check_configurations)
    # and the one it runs in now (FULL_CONFIGURATION: full backpropagation).
    configurations: List[Dict[str, Any]] = field(default_factory=list)
    configuration: str = FULL_CONFIGURATION
    # How it changes size (relaunch, membership, inplace): fixed at submit; '' in a job stored by a
    # manager that had one method for all: the manager's.
    resize: str = ""
    procs_per_node: int = 1  # its processes on each node (bft submit --procs-per-node, else the manager's)

    def status(self) -> Dict[str, Any]:
        """What ``bft status`` shows of the job from its row (the manager adds what it knows live)."""
        return {"id": self.id, "state": self.state, "min_nodes": self.min_nodes, "max_nodes": self.max_nodes,
                "samples": self.samples, "work": self.work, "retries": self.retries, "generation": self.generation,
                "reason": self.reason, "submitted_s": self.submitted_s, "finished_s": self.finished_s,
                "configuration": self.configuration, "configurations": [c["name"] for c in self.configurations],
                "resize": self.resize, "procs_per_node": self.procs_per_node}

    @classmethod
    def from_row(cls, row: sqlite3.Row) -> "JobRow":
        d = dict(row)
        d["args"] = json.loads(d["args"])
        d["curve"] = json.loads(d["curve"]) if d["curve"] else None
        d["configurations"] = json.loads(d["configurations"]) if d["configurations"] else []
        return cls(**d)


class StateStore:
    """The SQLite state database of one manager (used from the manager's loop thread only)."""

    def __init__(self, path: Path, create: bool = True, read_only: bool = False):
        self._depth = 0  # open transactions (state.transaction nests)
        self._durable = False  # the open transaction must reach the disk before it returns
        self.path = Path(path)
        # An empty file is what a manager killed before its first commit leaves: a new database.
        exists = self.path.exists() and self.path.stat().st_size > 0
        if not exists and not create:
            raise StateError(f"{self.path}: no manager state here")
        if exists:
            check_header(self.path)
        self.read_only = read_only
        uri = f"file:{self.path}?mode=ro" if read_only else f"file:{self.path}"
        try:
            self.db = sqlite3.connect(uri, uri=True, isolation_level=None, timeout=10.0,
                                      check_same_thread=False)
            self.db.row_factory = sqlite3.Row
            if not read_only:
                self.db.execute("PRAGMA journal_mode=WAL")
                self.db.execute("PRAGMA synchronous=NORMAL")  # durable transactions sync (module doc)
            if exists:
                check_database(self.db, self.path, read_only)
            else:
                create_database(self.db)
        except sqlite3.DatabaseError as e:
            raise StateError(f"{self.path}: not a usable libbft state database ({e})") from None

    def close(self) -> None:
        self.db.close()

    # -- transactions ---------------------------------------------------------------------------

    class _Transaction:
        """One commit for everything inside; nested ones join the outermost, which is durable if any
        of them asked to be."""

        def __init__(self, store: "StateStore", durable: bool):
            self.store = store
            self.durable = durable

        def __enter__(self):
            if self.store._depth == 0:
                self.store.db.execute("BEGIN IMMEDIATE")
            self.store._depth += 1
            self.store._durable = self.store._durable or self.durable

        def __exit__(self, kind, value, tb):
            self.store._depth -= 1
            if self.store._depth == 0:
                self.store.db.execute("COMMIT" if kind is None else "ROLLBACK")
                if self.store._durable and kind is None:
                    # Under synchronous=NORMAL a checkpoint syncs the WAL first: the commit is on the disk.
                    self.store.db.execute("PRAGMA wal_checkpoint(PASSIVE)")
                self.store._durable = False

    def transaction(self, durable: bool = False) -> "_Transaction":
        """One commit for everything inside. ``durable``: on the disk before it returns (what a person
        was told, or a job's end), not only safe from the manager's own crash (module doc)."""
        return self._Transaction(self, durable)

    # -- meta -----------------------------------------------------------------------------------

    def meta(self, key: str, default: Optional[str] = None) -> Optional[str]:
        row = self.db.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return row[0] if row else default

    def set_meta(self, key: str, value: str) -> None:
        self.db.execute("INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)", (key, value))

    # -- jobs -----------------------------------------------------------------------------------

    def add_job(self, job: JobRow) -> JobRow:
        with self.transaction(durable=True):  # bft submit answers once it is stored
            if self.db.execute("SELECT 1 FROM jobs WHERE id = ?", (job.id,)).fetchone():
                raise ValueError(f"a job named {job.id!r} exists already (choose another --name)")
            job.seq = self.db.execute("SELECT COALESCE(MAX(seq), 0) + 1 FROM jobs").fetchone()[0]
            d = dict(job.__dict__)
            d["args"] = json.dumps(job.args)
            d["curve"] = json.dumps(job.curve) if job.curve else None
            d["configurations"] = json.dumps(job.configurations) if job.configurations else None
            cols = ", ".join(d)
            self.db.execute(f"INSERT INTO jobs ({cols}) VALUES ({', '.join('?' * len(d))})", tuple(d.values()))
        return job

    def update_job(self, job_id: str, **fields: Any) -> None:
        sets = ", ".join(f"{k} = ?" for k in fields)
        self.db.execute(f"UPDATE jobs SET {sets} WHERE id = ?", (*fields.values(), job_id))

    def jobs(self, states: Optional[tuple] = None) -> List[JobRow]:
        if states:
            rows = self.db.execute(f"SELECT * FROM jobs WHERE state IN ({', '.join('?' * len(states))}) "
                                   "ORDER BY seq", states)
        else:
            rows = self.db.execute("SELECT * FROM jobs ORDER BY seq")
        return [JobRow.from_row(r) for r in rows]

    def job(self, job_id: str) -> Optional[JobRow]:
        row = self.db.execute("SELECT * FROM jobs WHERE id = ?", (job_id,)).fetchone()
        return JobRow.from_row(row) if row else None

    # -- progress -------------------------------------------------------------------------------

    def add_progress(self, job: str, *, generation: int, time_s: float, nodes: int, samples: float,
                     advisor_samples: float, configuration: str = FULL_CONFIGURATION,
                     configuration_samples: Optional[float] = None, method: str = "relaunch") -> None:
        """From time_s on the job runs on `nodes` in `configuration`: its own count (`samples`), the
        monotone count the manager keeps of it (`advisor_samples`), the samples processed in that
        configuration so far (`configuration_samples`; None: all of advisor_samples), and how its
        latest rescale was done (`method`: "relaunch" or "inplace", as the advisor hears it)."""
        with self.transaction():
            self.db.execute("INSERT INTO progress VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                            (job, generation, time_s, nodes, samples, advisor_samples, configuration,
                             configuration_samples, method))
            self.db.execute("UPDATE jobs SET samples = ? WHERE id = ?", (samples, job))

    def set_report_seq(self, job: str, *, rank: int, generation: int, round_: int, seq: int) -> None:
        """The newest report believed of a job's rank: a restarted manager drops any older one."""
        self.db.execute("INSERT OR REPLACE INTO report_seqs VALUES (?, ?, ?, ?, ?)",
                        (job, rank, generation, round_, seq))

    def report_seqs(self, job: str) -> List[sqlite3.Row]:
        return list(self.db.execute("SELECT * FROM report_seqs WHERE job = ?", (job,)))

    def progress(self) -> Iterator[sqlite3.Row]:
        return self.db.execute("SELECT * FROM progress ORDER BY rowid")

    # -- processes ------------------------------------------------------------------------------

    def add_proc(self, job: str, generation: int, node: str, local_rank: int = 0) -> int:
        """Records a process about to be started (before it exists), the `local_rank`-th of the node's;
        returns its row id."""
        cur = self.db.execute("INSERT INTO procs (job, generation, node, started_s, local_rank) VALUES (?, ?, ?, ?, ?)",
                              (job, generation, node, time.time(), local_rank))
        return int(cur.lastrowid)

    def set_proc_pid(self, row: int, pid: int) -> None:
        self.db.execute("UPDATE procs SET pid = ? WHERE id = ?", (pid, row))

    def end_proc(self, row: int, exit_code: Optional[int]) -> None:
        self.db.execute("UPDATE procs SET ended_s = ?, exit_code = ? WHERE id = ?", (time.time(), exit_code, row))

    def open_procs(self) -> List[sqlite3.Row]:
        return list(self.db.execute("SELECT * FROM procs WHERE ended_s IS NULL"))

    def proc_node_seconds(self, now: float) -> float:
        """Node-seconds that jobs' processes have held nodes: each process row from its start to its
        end (to `now` while it runs). The rows of a node's first process (local rank 0), one per node and
        generation, so this is the nodes' time whatever the processes per node."""
        row = self.db.execute("SELECT TOTAL(MAX(COALESCE(ended_s, ?) - started_s, 0)) FROM procs WHERE local_rank = 0",
                              (now,)).fetchone()
        return float(row[0])

    # -- events ---------------------------------------------------------------------------------

    def log_event(self, kind: str, job: Optional[str] = None, node: Optional[str] = None, **detail: Any) -> None:
        self.db.execute("INSERT INTO events (time_s, kind, job, node, detail) VALUES (?, ?, ?, ?, ?)",
                        (time.time(), kind, job, node, json.dumps(detail)))

    def events(self, kinds: Optional[tuple] = None, job: Optional[str] = None,
               since_id: int = 0) -> List[Dict[str, Any]]:
        """The event log's lines (of `kinds`, of `job`) after the line `since_id`, oldest first."""
        query, args = "SELECT * FROM events WHERE id > ?", [since_id]
        if kinds:
            query += f" AND kind IN ({', '.join('?' * len(kinds))})"
            args += list(kinds)
        if job is not None:
            query += " AND job = ?"
            args.append(job)
        out = []
        for r in self.db.execute(query + " ORDER BY id", args):
            d = dict(r)
            d.update(json.loads(d.pop("detail")))
            out.append(d)
        return out
