"""Another user's state database, read by ``bft report`` as untrusted data (docs/security.md, "bft report").

A centre's accounting runs ``bft report`` as an administrator over users' state directories, whose
owners may have left anything there. So each ``state.db``:

- is opened without following a symbolic link (``O_NOFOLLOW``, relative to the directory's own
  descriptor), and must be a regular file owned by its directory's owner: a link to, or a hard link
  of, a file its owner could not read is refused, never read with the administrator's rights;
- is copied, with its write-ahead log (checked the same way), into a private temporary directory
  before SQLite sees it: SQLite opens the ``-wal`` and ``-shm`` files beside a database by name, and
  as root would truncate whatever a planted ``state.db-shm`` link points at;
- is read with a time budget (a progress handler interrupts SQLite after :data:`READ_BUDGET_S`),
  values of at most :data:`MAX_VALUE_BYTES` each, and SQLite's heap capped (:data:`HEAP_LIMIT_BYTES`);
- must hold the schema's tables and nothing else that runs code (no view, no trigger:
  :func:`.state_schema.check_database`), and every row the report reads must pass :func:`check_rows`
  (each time a finite number in [0, :data:`MAX_TIME_S`], each event's detail a JSON object).

The same file given under two names (a hard link, another path to one directory) is found by its
device and inode (:attr:`ReportInput.key`), so its jobs are not counted twice.
"""

from __future__ import annotations

import errno
import os
import pwd
import shutil
import sqlite3
import stat
import tempfile
import time
from pathlib import Path
from typing import Optional, Tuple

from ..statedb.schema import StateError, check_database, check_header

# A state file and its log together: a year of a busy manager is a few hundred MiB.
MAX_STATE_BYTES = 4 << 30
# The longest a report may spend in SQLite on one state file.
READ_BUDGET_S = 120.0
# The largest value SQLite hands over (a manager's event detail is under 1 KiB).
MAX_VALUE_BYTES = 1 << 20
# SQLite's heap, for the whole process (the report reads one file at a time).
HEAP_LIMIT_BYTES = 1 << 30
# Times the report accepts: from the epoch to the year 2286 (anything later is not a clock's reading).
MAX_TIME_S = 1e10

# What each table's rows must be, as SQL conditions on the columns the report reads.
_NUMBER = "typeof({c}) IN ('integer', 'real') AND {c} BETWEEN 0 AND {hi}"
_TIME = _NUMBER.replace("{hi}", repr(MAX_TIME_S))
_ROW_CHECKS = {
    "events": [("time_s", _TIME), ("kind", "typeof(kind) = 'text'"),
               ("job", "job IS NULL OR typeof(job) = 'text'"), ("node", "node IS NULL OR typeof(node) = 'text'"),
               ("detail", "CASE WHEN typeof(detail) = 'text' AND json_valid(detail) THEN json_type(detail) = 'object' "
                          "ELSE 0 END")],
    "procs": [("job", "typeof(job) = 'text'"), ("started_s", _TIME),
              ("ended_s", "ended_s IS NULL OR (" + _TIME.format(c="ended_s") + ")")],
    "progress": [("job", "typeof(job) = 'text'"), ("time_s", _TIME),
                 ("advisor_samples", _NUMBER.replace("{hi}", "1e18"))],
}


# What reading a state file's rows may raise, beside a StateError: SQLite refusing (the time budget, a
# value over MAX_VALUE_BYTES, the heap cap) or a row found bad.
READ_ERRORS = (StateError, sqlite3.DatabaseError, MemoryError)


def read_error(state_dir: Path, e: BaseException) -> str:
    """One line for a READ_ERRORS exception met reading `state_dir`'s database."""
    if isinstance(e, StateError):
        return str(e)
    path = Path(state_dir) / "state.db"
    if "interrupted" in str(e):
        return f"{path}: not read within {READ_BUDGET_S:.0f} s"
    return f"{path}: not read ({str(e) or type(e).__name__})"


class ReportInput:
    """One state directory's database, copied and opened for reading (the module's rules)."""

    def __init__(self, state_dir: Path):
        self.path = Path(state_dir) / "state.db"  # for messages: the user's file, not the copy
        self._tmp = Path(tempfile.mkdtemp(prefix="bft-report-"))
        try:
            self.uid, self.key = _copy(Path(state_dir), self._tmp)
            self.db = _connect(self._tmp / "state.db", self.path)
        except BaseException:
            shutil.rmtree(self._tmp, ignore_errors=True)
            raise

    @property
    def owner(self) -> str:
        try:
            return pwd.getpwuid(self.uid).pw_name
        except KeyError:
            return str(self.uid)

    def close(self) -> None:
        self.db.close()
        shutil.rmtree(self._tmp, ignore_errors=True)


def _open_checked(dir_fd: int, name: str, dir_uid: int, state_dir: Path) -> Optional[int]:
    """A descriptor of `name` in the directory (None if it is absent), refused unless a regular file
    owned by the directory's owner, reached without following a link."""
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dir_fd)
    except OSError as e:
        if e.errno == errno.ENOENT and name != "state.db":
            return None
        if e.errno == errno.ELOOP:
            raise StateError(f"{state_dir / name}: a symbolic link: not followed") from None
        if e.errno == errno.ENOENT:
            raise StateError(f"no manager state in {state_dir} (--state-dir)") from None
        raise StateError(f"{state_dir / name}: {e.strerror}") from None
    st = os.fstat(fd)
    why = ("not a regular file" if not stat.S_ISREG(st.st_mode) else
           f"owned by uid {st.st_uid}, not by the directory's owner (uid {dir_uid})" if st.st_uid != dir_uid else "")
    if why:
        os.close(fd)
        raise StateError(f"{state_dir / name}: {why}: not read")
    return fd


def _copy_fd(fd: int, dst: Path, budget: int, what: Path) -> int:
    """Copies the file behind `fd` to `dst`, at most `budget` bytes; returns how many it took."""
    size = 0
    os.lseek(fd, 0, os.SEEK_SET)
    with open(dst, "wb") as out:
        while True:
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                return size
            size += len(chunk)
            if size > budget:
                raise StateError(f"{what}: larger than {MAX_STATE_BYTES >> 30} GiB with its log: not read")
            out.write(chunk)


def _wal_header(fd: Optional[int]) -> bytes:
    return os.pread(fd, 32, 0) if fd is not None else b""


def _copy(state_dir: Path, into: Path) -> Tuple[int, Tuple[int, int]]:
    """Copies state.db and its log into `into`; returns the directory owner's uid and the database's
    (device, inode). A log restarted while the database was copied (a manager's checkpoint) would
    pair pages of two moments: then the copy is taken again."""
    try:
        dir_fd = os.open(state_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as e:
        if e.errno == errno.ENOENT:
            raise StateError(f"no manager state in {state_dir} (--state-dir)") from None
        raise StateError(f"--state-dir {state_dir}: {e.strerror}") from None
    fds = []
    try:
        uid = os.fstat(dir_fd).st_uid
        db = _open_checked(dir_fd, "state.db", uid, state_dir)
        fds.append(db)
        wal = _open_checked(dir_fd, "state.db-wal", uid, state_dir)
        if wal is not None:
            fds.append(wal)
        for _ in range(3):
            before = _wal_header(wal)
            size = _copy_fd(db, into / "state.db", MAX_STATE_BYTES, state_dir / "state.db")
            if wal is None:
                break
            if _wal_header(wal) == before:
                _copy_fd(wal, into / "state.db-wal", MAX_STATE_BYTES - size, state_dir / "state.db")
                if _wal_header(wal) == before:
                    break
        else:
            raise StateError(f"{state_dir / 'state.db'}: changed under every copy of it (a manager checkpointing "
                             "without pause): report again")
        st = os.fstat(db)
        return uid, (st.st_dev, st.st_ino)
    finally:
        for fd in fds:
            os.close(fd)
        os.close(dir_fd)


def _connect(copy: Path, shown: Path) -> sqlite3.Connection:
    """The copy opened under the module's budget, checked as a state file (messages name `shown`)."""
    check_header(copy)
    db = sqlite3.connect(copy, isolation_level=None)
    try:
        db.row_factory = sqlite3.Row
        db.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, MAX_VALUE_BYTES)
        db.execute(f"PRAGMA hard_heap_limit = {HEAP_LIMIT_BYTES}")
        db.execute("PRAGMA trusted_schema = OFF")
        deadline = time.monotonic() + READ_BUDGET_S
        db.set_progress_handler(lambda: int(time.monotonic() > deadline), 1000)
        try:
            check_database(db, shown, read_only=True)
            db.execute("PRAGMA query_only = ON")
            check_rows(db, shown)
        except sqlite3.OperationalError as e:
            if "interrupted" in str(e):
                raise StateError(f"{shown}: not read within {READ_BUDGET_S:.0f} s") from None
            raise
    except sqlite3.DatabaseError as e:
        db.close()
        raise StateError(f"{shown}: not a usable libbft state database ({e})") from None
    except BaseException:
        db.close()
        raise
    return db


def check_rows(db: sqlite3.Connection, path: Path) -> None:
    """Every row of the tables the report reads holds what the report expects (_ROW_CHECKS): the first
    that does not is named by table, row and column."""
    for table, checks in _ROW_CHECKS.items():
        for column, condition in checks:
            where = f"NOT COALESCE(({condition.format(c=column)}), 0)"
            bad = db.execute(f"SELECT rowid, {column} FROM {table} WHERE {where} LIMIT 1").fetchone()
            if bad is not None:
                raise StateError(f"{path}: table {table!r}, row {bad[0]}: column {column} holds "
                                 f"{str(bad[1])[:32]!r}, not what a manager writes")
