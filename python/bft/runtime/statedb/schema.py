"""What a state file holds and how one is checked: its tables (``SCHEMA``), its versions and their
upgrades, the job states, and the checks that refuse a foreign, corrupt or unknown file with one
clear line (:class:`StateError`). The store that reads and writes it is :mod:`.state`."""

from __future__ import annotations

import enum
import json
import math
import sqlite3
from pathlib import Path
from typing import Dict, List

from ...jobs import FULL_CONFIGURATION
from .jobspec import check_configurations, check_curve

APPLICATION_ID = 0x42465452  # "BFTR"
SCHEMA_VERSION = 6



class JobState(str, enum.Enum):
    """A job's state as stored (the jobs table's state column)."""

    QUEUED = "queued"
    RUNNING = "running"
    FINISHED = "finished"
    INCOMPLETE = "incomplete"  # the script exited normally before its --samples were reported
    FAILED = "failed"
    CANCELLED = "cancelled"

    def __str__(self) -> str:  # its value in messages and f-strings, as the bare string was
        return self.value


JOB_STATES = tuple(state.value for state in JobState)
ACTIVE_STATES = (JobState.QUEUED.value, JobState.RUNNING.value)

SCHEMA = f"""
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE jobs (
  id TEXT PRIMARY KEY, seq INTEGER NOT NULL UNIQUE, script TEXT NOT NULL, args TEXT NOT NULL,
  cwd TEXT NOT NULL, python TEXT NOT NULL, min_nodes INTEGER NOT NULL, max_nodes INTEGER NOT NULL,
  work REAL, curve TEXT, secret TEXT NOT NULL, state TEXT NOT NULL, reason TEXT NOT NULL DEFAULT '',
  retries INTEGER NOT NULL DEFAULT 0, max_retries INTEGER NOT NULL, generation INTEGER NOT NULL DEFAULT 0,
  samples REAL NOT NULL DEFAULT 0, submitted_s REAL NOT NULL, started_s REAL, finished_s REAL,
  configurations TEXT, configuration TEXT NOT NULL DEFAULT '{FULL_CONFIGURATION}', resize TEXT NOT NULL DEFAULT '',
  procs_per_node INTEGER NOT NULL DEFAULT 1);
CREATE TABLE progress (
  job TEXT NOT NULL, generation INTEGER NOT NULL, time_s REAL NOT NULL, nodes INTEGER NOT NULL,
  samples REAL NOT NULL, advisor_samples REAL NOT NULL, configuration TEXT NOT NULL DEFAULT '{FULL_CONFIGURATION}',
  configuration_samples REAL, method TEXT NOT NULL DEFAULT 'relaunch');
CREATE INDEX progress_job ON progress (job, time_s);
CREATE TABLE procs (
  id INTEGER PRIMARY KEY, job TEXT NOT NULL, generation INTEGER NOT NULL, node TEXT NOT NULL,
  pid INTEGER, started_s REAL NOT NULL, ended_s REAL, exit_code INTEGER, local_rank INTEGER NOT NULL DEFAULT 0);
CREATE TABLE events (
  id INTEGER PRIMARY KEY, time_s REAL NOT NULL, kind TEXT NOT NULL, job TEXT, node TEXT,
  detail TEXT NOT NULL DEFAULT '{{}}');
CREATE TABLE report_seqs (
  job TEXT NOT NULL, rank INTEGER NOT NULL, generation INTEGER NOT NULL, round INTEGER NOT NULL,
  seq INTEGER NOT NULL, PRIMARY KEY (job, rank));
"""
# Version 1 lacked the jobs' configurations (structured partial backpropagation), version 2 the
# progress records' rescale method (every rescale was a relaunch), version 3 the jobs' own resize
# method ('': the manager's), version 4 the last sequence number believed of each job's ranks (so a
# restarted manager drops a replayed report), version 5 the jobs' processes per node and each process
# row's local rank (every job ran one process per node): their files are upgraded in place, in one
# transaction.
MIGRATIONS = {
    1: f"""
ALTER TABLE jobs ADD COLUMN configurations TEXT;
ALTER TABLE jobs ADD COLUMN configuration TEXT NOT NULL DEFAULT '{FULL_CONFIGURATION}';
ALTER TABLE progress ADD COLUMN configuration TEXT NOT NULL DEFAULT '{FULL_CONFIGURATION}';
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
    5: """
ALTER TABLE jobs ADD COLUMN procs_per_node INTEGER NOT NULL DEFAULT 1;
ALTER TABLE procs ADD COLUMN local_rank INTEGER NOT NULL DEFAULT 0;
""",
}


def _schema_columns() -> Dict[str, List[tuple]]:
    """table -> its columns in order, (name, declared type, NOT NULL), as SCHEMA (the one definition)
    makes them."""
    db = sqlite3.connect(":memory:")
    try:
        db.executescript(SCHEMA)
        tables = [r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
        return {t: [(r[1], r[2], bool(r[3])) for r in db.execute(f"PRAGMA table_info({t})")] for t in tables}
    finally:
        db.close()


# What a value of each declared type must be in Python (SQLite keeps whatever it is given).
_COLUMN_TYPES = {"TEXT": (str,), "INTEGER": (int,), "REAL": (int, float)}


class StateError(Exception):
    """The state file is corrupt, foreign, or of another schema version: one clear line."""


def create_database(db: sqlite3.Connection) -> None:
    # One transaction: a manager killed half-way leaves an empty file, which is created anew.
    db.executescript(f"BEGIN IMMEDIATE; {SCHEMA} PRAGMA application_id={APPLICATION_ID}; "
                     f"PRAGMA user_version={SCHEMA_VERSION}; COMMIT;")


def check_database(db: sqlite3.Connection, path: Path, read_only: bool) -> None:
    """Refuses a foreign, corrupt or unknown-version file (one line naming what is wrong) and upgrades
    an older version in place, in one transaction."""
    app = db.execute("PRAGMA application_id").fetchone()[0]
    if app != APPLICATION_ID:
        raise StateError(f"{path}: an SQLite database of another program (application id {app:#x}), "
                         "not a libbft state file; choose another --state-dir")
    version = db.execute("PRAGMA user_version").fetchone()[0]
    if version != SCHEMA_VERSION and version not in MIGRATIONS:
        raise StateError(f"{path}: state schema version {version}, this libbft reads {SCHEMA_VERSION}")
    check = db.execute("PRAGMA quick_check").fetchone()[0]
    if check != "ok":
        raise StateError(f"{path}: the state database is corrupt ({check})")
    if version != SCHEMA_VERSION:
        if read_only:
            raise StateError(f"{path}: state schema version {version}: start a manager (bft manager) "
                             f"to upgrade it to version {SCHEMA_VERSION}")
        steps = "".join(MIGRATIONS[v] for v in range(version, SCHEMA_VERSION))
        db.executescript(f"BEGIN IMMEDIATE; {steps} PRAGMA user_version={SCHEMA_VERSION}; COMMIT;")
    _check_tables(db, path)
    _check_jobs(db, path)


def _check_tables(db: sqlite3.Connection, path: Path) -> None:
    """Each table with exactly the columns SCHEMA gives it (a file that passes quick_check may still
    have lost a table or gained a column), and no view or trigger: SQL that would run whenever a table
    is read or written (a view named like a table passes PRAGMA table_info; docs/security.md)."""
    code = db.execute("SELECT type, name FROM sqlite_master WHERE type IN ('view', 'trigger') LIMIT 1").fetchone()
    if code is not None:
        raise StateError(f"{path}: holds a {code[0]} ({str(code[1])[:64]!r}), which no manager creates: "
                         "not a usable libbft state file")
    for table, schema in _schema_columns().items():
        columns = [name for name, _, _ in schema]
        have = [r[1] for r in db.execute(f"PRAGMA table_info({table})")]
        if not have:
            raise StateError(f"{path}: table {table!r} is missing: not a usable libbft state file")
        if have != columns:
            extra, missing = sorted(set(have) - set(columns)), sorted(set(columns) - set(have))
            raise StateError(f"{path}: table {table!r} has columns it should not ({', '.join(extra) or '-'}) "
                             f"or lacks some ({', '.join(missing) or '-'}): not a usable libbft state file")


def _check_jobs(db: sqlite3.Connection, path: Path) -> None:
    """Every job row is one a manager can take back: each column of its declared type, its JSON
    columns what a submit checks (jobspec.check_curve, check_configurations), its state one of
    JOB_STATES. A wrong one is named by table, row and column, never a traceback later."""

    schema = _schema_columns()["jobs"]
    for row in db.execute("SELECT * FROM jobs"):
        where = f"{path}: table 'jobs', row {str(row['id'])[:64]!r}"
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


def check_header(path: Path) -> None:
    """Refuses a file that is not an SQLite database at all (SQLite would say 'file is not a database'
    only at the first query, after WAL files were created beside it)."""
    try:
        with open(path, "rb") as f:
            head = f.read(16)
    except OSError as e:
        raise StateError(f"{path}: cannot read the state file ({e.strerror})") from None
    if head and head != b"SQLite format 3\x00":
        raise StateError(f"{path}: not a libbft state database (not SQLite); refusing to touch it")
