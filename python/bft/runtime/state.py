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
import math
import sqlite3
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional

APPLICATION_ID = 0x42465452  # "BFTR"
SCHEMA_VERSION = 5

# incomplete: the script exited normally before its --samples were reported.
JOB_STATES = ("queued", "running", "finished", "incomplete", "failed", "cancelled")
ACTIVE_STATES = ("queued", "running")

_SCHEMA = """
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE jobs (
  id TEXT PRIMARY KEY, seq INTEGER NOT NULL UNIQUE, script TEXT NOT NULL, args TEXT NOT NULL,
  cwd TEXT NOT NULL, python TEXT NOT NULL, min_nodes INTEGER NOT NULL, max_nodes INTEGER NOT NULL,
  work REAL, curve TEXT, secret TEXT NOT NULL, state TEXT NOT NULL, reason TEXT NOT NULL DEFAULT '',
  retries INTEGER NOT NULL DEFAULT 0, max_retries INTEGER NOT NULL, generation INTEGER NOT NULL DEFAULT 0,
  samples REAL NOT NULL DEFAULT 0, submitted_s REAL NOT NULL, started_s REAL, finished_s REAL,
  configurations TEXT, configuration TEXT NOT NULL DEFAULT 'full', resize TEXT NOT NULL DEFAULT '');
CREATE TABLE progress (
  job TEXT NOT NULL, generation INTEGER NOT NULL, time_s REAL NOT NULL, nodes INTEGER NOT NULL,
  samples REAL NOT NULL, advisor_samples REAL NOT NULL, configuration TEXT NOT NULL DEFAULT 'full',
  configuration_samples REAL, method TEXT NOT NULL DEFAULT 'relaunch');
CREATE INDEX progress_job ON progress (job, time_s);
CREATE TABLE procs (
  id INTEGER PRIMARY KEY, job TEXT NOT NULL, generation INTEGER NOT NULL, node TEXT NOT NULL,
  pid INTEGER, started_s REAL NOT NULL, ended_s REAL, exit_code INTEGER);
CREATE TABLE events (
  id INTEGER PRIMARY KEY, time_s REAL NOT NULL, kind TEXT NOT NULL, job TEXT, node TEXT,
  detail TEXT NOT NULL DEFAULT '{}');
CREATE TABLE report_seqs (
  job TEXT NOT NULL, rank INTEGER NOT NULL, generation INTEGER NOT NULL, round INTEGER NOT NULL,
  seq INTEGER NOT NULL, PRIMARY KEY (job, rank));
"""
# Version 1 lacked the jobs' configurations (structured partial backpropagation), version 2 the
# progress records' rescale method (every rescale was a relaunch), version 3 the jobs' own resize
# method ('': the manager's), version 4 the last sequence number believed of each job's ranks (so a
# restarted manager drops a replayed report): their files are upgraded in place, in one transaction.
_MIGRATIONS = {
    1: """
ALTER TABLE jobs ADD COLUMN configurations TEXT;
ALTER TABLE jobs ADD COLUMN configuration TEXT NOT NULL DEFAULT 'full';
ALTER TABLE progress ADD COLUMN configuration TEXT NOT NULL DEFAULT 'full';
ALTER TABLE progress ADD COLUMN configuration_samples REAL;
""",
    2: """
ALTER TABLE progress ADD COLUMN method TEXT NOT NULL DEFAULT 'relaunch';
""",
    3: """
ALTER TABLE jobs ADD COLUMN resize TEXT NOT NULL DEFAULT '';
""",
    4: """
CREATE TABLE report_seqs (
  job TEXT NOT NULL, rank INTEGER NOT NULL, generation INTEGER NOT NULL, round INTEGER NOT NULL,
  seq INTEGER NOT NULL, PRIMARY KEY (job, rank));
""",
}


def _schema_columns() -> Dict[str, List[tuple]]:
    """table -> its columns in order, (name, declared type, NOT NULL), as _SCHEMA (the one definition)
    makes them."""
    db = sqlite3.connect(":memory:")
    try:
        db.executescript(_SCHEMA)
        tables = [r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
        return {t: [(r[1], r[2], bool(r[3])) for r in db.execute(f"PRAGMA table_info({t})")] for t in tables}
    finally:
        db.close()


# What a value of each declared type must be in Python (SQLite keeps whatever it is given).
_COLUMN_TYPES = {"TEXT": (str,), "INTEGER": (int,), "REAL": (int, float)}


class StateError(Exception):
    """The state file is corrupt, foreign, or of another schema version: one clear line."""


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
    max_retries: int = 2
    generation: int = 0
    samples: float = 0.0
    submitted_s: float = field(default_factory=time.time)
    started_s: Optional[float] = None
    finished_s: Optional[float] = None
    # Other ways to run the job ({"name", "efficiency", "speedup"} each; control.check_configurations)
    # and the one it runs in now ("full": full backpropagation).
    configurations: List[Dict[str, Any]] = field(default_factory=list)
    configuration: str = "full"
    # How it changes size (relaunch, membership, inplace): fixed at submit; '' in a job stored by a
    # manager that had one method for all: the manager's.
    resize: str = ""

    def status(self) -> Dict[str, Any]:
        """What ``bft status`` shows of the job from its row (the manager adds what it knows live)."""
        return {"id": self.id, "state": self.state, "min_nodes": self.min_nodes, "max_nodes": self.max_nodes,
                "samples": self.samples, "work": self.work, "retries": self.retries, "generation": self.generation,
                "reason": self.reason, "submitted_s": self.submitted_s, "finished_s": self.finished_s,
                "configuration": self.configuration, "configurations": [c["name"] for c in self.configurations],
                "resize": self.resize}

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
            _check_header(self.path)
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
                self._check()
            else:
                self._create()
        except sqlite3.DatabaseError as e:
            raise StateError(f"{self.path}: not a usable libbft state database ({e})") from None

    def _create(self) -> None:
        # One transaction: a manager killed half-way leaves an empty file, which is created anew.
        self.db.executescript(f"BEGIN IMMEDIATE; {_SCHEMA} PRAGMA application_id={APPLICATION_ID}; "
                              f"PRAGMA user_version={SCHEMA_VERSION}; COMMIT;")

    def _check(self) -> None:
        app = self.db.execute("PRAGMA application_id").fetchone()[0]
        if app != APPLICATION_ID:
            raise StateError(f"{self.path}: an SQLite database of another program (application id {app:#x}), "
                             "not a libbft state file; choose another --state-dir")
        version = self.db.execute("PRAGMA user_version").fetchone()[0]
        if version != SCHEMA_VERSION and version not in _MIGRATIONS:
            raise StateError(f"{self.path}: state schema version {version}, this libbft reads {SCHEMA_VERSION}")
        check = self.db.execute("PRAGMA quick_check").fetchone()[0]
        if check != "ok":
            raise StateError(f"{self.path}: the state database is corrupt ({check})")
        if version != SCHEMA_VERSION:
            if self.read_only:
                raise StateError(f"{self.path}: state schema version {version}: start a manager (bft manager) "
                                 f"to upgrade it to version {SCHEMA_VERSION}")
            steps = "".join(_MIGRATIONS[v] for v in range(version, SCHEMA_VERSION))
            self.db.executescript(f"BEGIN IMMEDIATE; {steps} PRAGMA user_version={SCHEMA_VERSION}; COMMIT;")
        self._check_tables()
        self._check_jobs()

    def _check_tables(self) -> None:
        """Each table with exactly the columns _SCHEMA gives it (a file that passes quick_check may still
        have lost a table or gained a column)."""
        for table, schema in _schema_columns().items():
            columns = [name for name, _, _ in schema]
            have = [r[1] for r in self.db.execute(f"PRAGMA table_info({table})")]
            if not have:
                raise StateError(f"{self.path}: table {table!r} is missing: not a usable libbft state file")
            if have != columns:
                extra, missing = sorted(set(have) - set(columns)), sorted(set(columns) - set(have))
                raise StateError(f"{self.path}: table {table!r} has columns it should not ({', '.join(extra) or '-'}) "
                                 f"or lacks some ({', '.join(missing) or '-'}): not a usable libbft state file")

    def _check_jobs(self) -> None:
        """Every job row is one a manager can take back: each column of its declared type, its JSON
        columns what a submit checks (control.check_curve, check_configurations), its state one of
        JOB_STATES. A wrong one is named by table, row and column, never a traceback later."""
        from .control import check_configurations, check_curve  # control builds on this module

        schema = _schema_columns()["jobs"]
        for row in self.db.execute("SELECT * FROM jobs"):
            where = f"{self.path}: table 'jobs', row {str(row['id'])[:64]!r}"
            for name, kind, not_null in schema:
                value = row[name]
                if not (value is None and not not_null) and not (
                        isinstance(value, _COLUMN_TYPES[kind]) and not isinstance(value, bool)):
                    raise StateError(f"{where}: column {name} holds {str(value)[:32]!r}, not {kind}")
            try:
                args = json.loads(row["args"])
                curve = json.loads(row["curve"]) if row["curve"] else None
                configurations = json.loads(row["configurations"]) if row["configurations"] else []
            except (ValueError, RecursionError) as e:
                raise StateError(f"{where}: a JSON column is not JSON ({e})") from None
            try:
                if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
                    raise ValueError("args: expected an array of strings")
                check_curve(curve, "curve", max_rate=math.inf)
                check_configurations(configurations)
            except ValueError as e:
                raise StateError(f"{where}: {e}") from None
            if row["state"] not in JOB_STATES:
                raise StateError(f"{where}: column state {row['state'][:32]!r} is not one of "
                                 f"{', '.join(JOB_STATES)}")

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

    def add_progress(self, job: str, generation: int, time_s: float, nodes: int, samples: float,
                     advisor_samples: float, configuration: str = "full",
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

    def set_report_seq(self, job: str, rank: int, generation: int, round_: int, seq: int) -> None:
        """The newest report believed of a job's rank: a restarted manager drops any older one."""
        self.db.execute("INSERT OR REPLACE INTO report_seqs VALUES (?, ?, ?, ?, ?)",
                        (job, rank, generation, round_, seq))

    def report_seqs(self, job: str) -> List[sqlite3.Row]:
        return list(self.db.execute("SELECT * FROM report_seqs WHERE job = ?", (job,)))

    def progress(self) -> Iterator[sqlite3.Row]:
        return self.db.execute("SELECT * FROM progress ORDER BY rowid")

    # -- processes ------------------------------------------------------------------------------

    def add_proc(self, job: str, generation: int, node: str) -> int:
        """Records a process about to be started (before it exists); returns its row id."""
        cur = self.db.execute("INSERT INTO procs (job, generation, node, started_s) VALUES (?, ?, ?, ?)",
                              (job, generation, node, time.time()))
        return int(cur.lastrowid)

    def set_proc_pid(self, row: int, pid: int) -> None:
        self.db.execute("UPDATE procs SET pid = ? WHERE id = ?", (pid, row))

    def end_proc(self, row: int, exit_code: Optional[int]) -> None:
        self.db.execute("UPDATE procs SET ended_s = ?, exit_code = ? WHERE id = ?", (time.time(), exit_code, row))

    def open_procs(self) -> List[sqlite3.Row]:
        return list(self.db.execute("SELECT * FROM procs WHERE ended_s IS NULL"))

    def proc_node_seconds(self, now: float) -> float:
        """Node-seconds that jobs' processes have held nodes: each process row from its start to its
        end (to `now` while it runs). One row per node and generation, so this is the nodes' time."""
        row = self.db.execute("SELECT TOTAL(MAX(COALESCE(ended_s, ?) - started_s, 0)) FROM procs", (now,)).fetchone()
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


def _check_header(path: Path) -> None:
    """Refuses a file that is not an SQLite database at all (SQLite would say 'file is not a database'
    only at the first query, after WAL files were created beside it)."""
    try:
        with open(path, "rb") as f:
            head = f.read(16)
    except OSError as e:
        raise StateError(f"{path}: cannot read the state file ({e.strerror})") from None
    if head and head != b"SQLite format 3\x00":
        raise StateError(f"{path}: not a libbft state database (not SQLite); refusing to touch it")
