"""``bft report``: what the idle nodes produced over a period, per job and per user, from state.db.

Every figure is read from the manager's state database (docs/runtime.md, "Accounting"):

- *harvested* node-hours: the time each node spent in the manager's pool, from its ``join`` to its
  ``reclaim`` (or to the manager's stop: a stopped manager gives its nodes back; after a crash, to the
  next manager's start, which is when the source announces its nodes again);
- *used* node-hours: the time jobs' processes held nodes, one process row per node and generation,
  from its start to its exit;
- *samples*: the growth of a job's monotone sample count (the advisor's) within the period;
- *losses*: resizes and their gaps (``resize_gap`` events: the time between the last step at the old
  size and the first at the new one, times the nodes then held), preemptions (a node reclaimed under a
  running job) and failed generations;
- the main jobs' *added wait*: for a Slurm manager whose accounting sacct can give, measured from
  sacct's records (:mod:`.sacct_wait`); otherwise the grace time granted at each reclaim, before which
  the main job's node is vacated (an upper bound: a job that exits sooner frees it sooner).

Only the manager's user can submit to it (its control socket checks peer credentials), so every job
of a state directory is its owner's. A centre's per-user accounting reads several users' state
directories: each is accounted on its own over one common period, and :func:`combine` adds them up
(a job is keyed by its user and name: two users may both have a job ``train``).
"""

from __future__ import annotations

import csv
import io
import json
import sqlite3
import time
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

from ..statedb.schema import StateError
from ..statedb.store import StateStore
from .sacct_wait import MainWait

Interval = Tuple[float, float]


@dataclass
class JobAccount:
    job: str
    user: str
    state: str
    node_hours: float = 0.0  # held by the job's processes within the period
    samples: float = 0.0  # trained within the period
    resizes: int = 0
    resize_gap_node_hours: float = 0.0  # nodes held while no step was taken, in resizes
    preemptions: int = 0
    failures: int = 0


_SUMMED = ("node_hours", "samples", "resizes", "resize_gap_node_hours", "preemptions", "failures")


@dataclass
class Report:
    since_s: float
    until_s: float
    harvested_node_hours: float  # in the pool
    used_node_hours: float  # held by jobs
    reclaims: int
    added_wait_s: float  # grace granted to vacate reclaimed nodes (upper bound of the main jobs' wait)
    jobs: List[JobAccount]
    # Step functions over the period, for the plot: (time_s, nodes in the pool), (time_s, nodes used).
    pool_steps: List[Tuple[float, int]]
    used_steps: List[Tuple[float, int]]
    # The main jobs' added wait measured from sacct (None: not measured, only the grace bound above).
    main_wait: Optional[MainWait] = None

    def total(self) -> JobAccount:
        """Every job's figures added up (`job` says how many jobs)."""
        return _sum_accounts(self.jobs, user="", state="")

    def by_user(self) -> List[JobAccount]:
        """One row per user, its jobs' figures added up (`job` says how many jobs)."""
        users: Dict[str, List[JobAccount]] = {}
        for j in self.jobs:
            users.setdefault(j.user, []).append(j)
        return [_sum_accounts(jobs, user=user, state="-") for user, jobs in sorted(users.items())]


def _sum_accounts(jobs: List[JobAccount], *, user: str, state: str) -> JobAccount:
    """One row of `jobs`' figures added up, `job` saying how many they are."""
    t = JobAccount(job=_count(len(jobs), "job"), user=user, state=state)
    for j in jobs:
        for f in _SUMMED:
            setattr(t, f, getattr(t, f) + getattr(j, f))
    return t


def _count(n: int, what: str) -> str:
    return f"{n} {what}{'s' if n != 1 else ''}"


def _overlap(a: Interval, b: Interval) -> float:
    return max(0.0, min(a[1], b[1]) - max(a[0], b[0]))


def _steps(intervals: List[Interval], since: float, until: float) -> List[Tuple[float, int]]:
    changes: Dict[float, int] = {}
    for a, b in intervals:
        a, b = max(a, since), min(b, until)
        if b > a:
            changes[a] = changes.get(a, 0) + 1
            changes[b] = changes.get(b, 0) - 1
    out, level = [(since, 0)], 0
    for t in sorted(changes):
        level += changes[t]
        out.append((t, level))
    return out


# The events the report reads, and the most nesting it accepts in one's detail (a manager's is 2 deep).
_KINDS = ("join", "reclaim", "manager_started", "manager_stopped", "resize_gap", "preempted", "job_failed")
MAX_DETAIL_DEPTH = 8


def _detail(row: sqlite3.Row, path: Path) -> Dict[str, Any]:
    """An event's detail: a JSON object at most MAX_DETAIL_DEPTH deep, else StateError naming the row."""
    where = f"{path}: table 'events', row {row['id']}"
    try:
        detail = json.loads(row["detail"])
    except (ValueError, TypeError, RecursionError):
        raise StateError(f"{where}: detail is not JSON (or nested too deeply)") from None
    if not isinstance(detail, dict):
        raise StateError(f"{where}: detail is a JSON {type(detail).__name__}, not an object")
    level, depth = [detail], 1
    while level:
        level = [v for x in level for v in (x.values() if isinstance(x, dict) else x)
                 if isinstance(v, (dict, list))]
        depth += bool(level)
        if depth > MAX_DETAIL_DEPTH:
            raise StateError(f"{where}: detail nested more than {MAX_DETAIL_DEPTH} deep")
    return detail


def _number(detail: Dict[str, Any], key: str, row: sqlite3.Row, path: Path, *, default: Any = None,
            whole: bool = False) -> float:
    """detail[key]: a finite number >= 0 (a whole one if `whole`), else StateError naming the row."""
    value = detail.get(key, default)
    if isinstance(value, bool) or not isinstance(value, (int, float) if not whole else int) or \
            not 0 <= value <= 1e12:
        raise StateError(f"{path}: table 'events', row {row['id']}: {key} holds {str(value)[:32]!r}, "
                         f"not a{' whole' if whole else ''} number >= 0")
    return float(value)


def first_record_s(store: StateStore) -> Optional[float]:
    """When the state directory's history begins (None: no record yet)."""
    return store.db.execute("SELECT MIN(time_s) FROM events").fetchone()[0]


def pilot_job_name(store: StateStore) -> Optional[str]:
    """The Slurm job name of the manager's pilots, from its last start (None: not a Slurm manager)."""
    row = store.db.execute("SELECT id, detail FROM events WHERE kind = 'manager_started' ORDER BY id DESC "
                           "LIMIT 1").fetchone()
    source = _detail(row, store.path).get("source") if row is not None else None
    if isinstance(source, dict) and source.get("source") == "slurm" and source.get("job_name"):
        name = source["job_name"]
        if not isinstance(name, str) or len(name) > 256:
            raise StateError(f"{store.path}: table 'events', row {row['id']}: job_name is not a pilot's job name")
        return name
    return None


def account(store: StateStore, owner: str, *, since: Optional[float] = None, until: Optional[float] = None,
            now: Optional[float] = None) -> Report:
    """The report of the state database `store` over [since, until] (default: all of its history).
    Only the period's events are read (the pool at its start is found in SQL), one at a time."""
    now = time.time() if now is None else now
    if since is None:
        first = first_record_s(store)
        since = first if first is not None else now
    until = now if until is None else until
    if until <= since:
        raise ValueError(f"--until must be after --since (the period is [{since:.0f}, {until:.0f}])")
    period = (since, until)
    db, path = store.db, store.path
    # The nodes in the pool when the period begins: those whose last join or reclaim before it, since
    # the last manager start or stop (every node given back or announced again), is a join.
    joined: Dict[str, float] = {
        node: since for node, kind, _ in db.execute(
            "SELECT node, kind, MAX(id) FROM events WHERE kind IN ('join', 'reclaim') AND node IS NOT NULL "
            "AND time_s < :since AND id > (SELECT COALESCE(MAX(id), 0) FROM events WHERE kind IN "
            "('manager_started', 'manager_stopped') AND time_s < :since) GROUP BY node", {"since": since})
        if kind == "join"}
    pool: List[Interval] = []
    accounts = {job: JobAccount(job=job, user=owner, state=state)
                for job, state in db.execute("SELECT id, state FROM jobs ORDER BY seq")}
    reclaims, added_wait_s = 0, 0.0
    rows = db.execute(f"SELECT * FROM events WHERE time_s BETWEEN ? AND ? AND kind IN ({', '.join('?' * len(_KINDS))}) "
                      "ORDER BY id", (since, until, *_KINDS))
    for row in rows:
        kind, t, node = row["kind"], row["time_s"], row["node"]
        detail = _detail(row, path)
        if kind == "join" and node is not None:
            joined.setdefault(node, t)
        elif kind == "reclaim":
            if node in joined:
                pool.append((joined.pop(node), t))
            reclaims += 1
            added_wait_s += _number(detail, "grace_s", row, path, default=0.0)
        elif kind in ("manager_stopped", "manager_started"):  # every node is given back or announced again
            pool += [(a, t) for a in joined.values()]
            joined.clear()
        a = accounts.get(row["job"] or "")
        if a is None:
            continue
        if kind == "resize_gap":
            a.resizes += 1
            if detail.get("gap") == "resize":  # a restart's gap includes waiting for nodes, which held none
                a.resize_gap_node_hours += (_number(detail, "gap_s", row, path) *
                                            _number(detail, "to_nodes", row, path, whole=True) / 3600.0)
        elif kind == "preempted":
            a.preemptions += 1
        elif kind == "job_failed":
            a.failures += 1
    pool += [(a, now) for a in joined.values()]
    procs = [(r[0], r[1], r[2]) for r in db.execute(
        "SELECT job, started_s, COALESCE(ended_s, :now) FROM procs WHERE local_rank = 0 AND started_s <= :until AND "
        "COALESCE(ended_s, :now) >= :since", {"now": now, "since": since, "until": until})]
    for job, a, b in procs:
        if job in accounts:
            accounts[job].node_hours += _overlap((a, b), period) / 3600.0
    # Samples: the monotone count at the period's end minus the one at its start (0 before a first report).
    for job, account_ in accounts.items():
        before = db.execute("SELECT MAX(advisor_samples) FROM progress WHERE job = ? AND time_s <= ?",
                            (job, since)).fetchone()[0] or 0.0
        at_end = db.execute("SELECT MAX(advisor_samples) FROM progress WHERE job = ? AND time_s <= ?",
                            (job, until)).fetchone()[0] or 0.0
        account_.samples = max(0.0, at_end - before)
    jobs = [a for a in accounts.values() if a.node_hours > 0 or a.samples > 0 or a.resizes or a.failures]
    return Report(since_s=since, until_s=until,
                  harvested_node_hours=sum(_overlap(i, period) for i in pool) / 3600.0,
                  used_node_hours=sum(_overlap((a, b), period) for _, a, b in procs) / 3600.0,
                  reclaims=reclaims, added_wait_s=added_wait_s, jobs=jobs,
                  pool_steps=_steps(pool, since, until),
                  used_steps=_steps([(a, b) for _, a, b in procs], since, until))


def _sum_steps(steps: Sequence[List[Tuple[float, int]]]) -> List[Tuple[float, int]]:
    """The step function that is the sum of `steps` (each 0 before its first point)."""
    changes: Dict[float, int] = {}
    for s in steps:
        level = 0
        for t, v in s:
            changes[t] = changes.get(t, 0) + v - level
            level = v
    out, level = [], 0
    for t in sorted(changes):
        level += changes[t]
        out.append((t, level))
    return out


def combine(reports: Sequence[Report], main_wait: Optional[MainWait] = None) -> Report:
    """The reports of one or more state directories over one period, added up: their jobs side by
    side, each under its owner. `main_wait`: the main jobs' added wait over the period, measured for
    all the managers' pilots at once (:mod:`.sacct_wait`: a wait that several managers' pilots caused
    at once counts once)."""
    if len({(r.since_s, r.until_s) for r in reports}) != 1:
        raise ValueError("the reports to combine must cover the same period")
    first = reports[0]
    return Report(since_s=first.since_s, until_s=first.until_s,
                  harvested_node_hours=sum(r.harvested_node_hours for r in reports),
                  used_node_hours=sum(r.used_node_hours for r in reports),
                  reclaims=sum(r.reclaims for r in reports), added_wait_s=sum(r.added_wait_s for r in reports),
                  jobs=sorted((j for r in reports for j in r.jobs), key=lambda j: (j.user, j.job)),
                  pool_steps=_sum_steps([r.pool_steps for r in reports]),
                  used_steps=_sum_steps([r.used_steps for r in reports]), main_wait=main_wait)


def _when(t: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t))


def format_table(report: Report, by: str) -> str:
    span_h = (report.until_s - report.since_s) / 3600.0
    used_share = report.used_node_hours / report.harvested_node_hours if report.harvested_node_hours else 0.0
    lines = [f"period: {_when(report.since_s)} .. {_when(report.until_s)} ({span_h:.2f} h)",
             f"harvested: {report.harvested_node_hours:.3f} node-hours in the pool; used by jobs "
             f"{report.used_node_hours:.3f} ({used_share:.1%})",
             f"main jobs: {report.reclaims} nodes reclaimed, added wait at most {report.added_wait_s:.0f} s "
             "(grace granted)"]
    if report.main_wait is not None:
        w = report.main_wait
        lines.append(f"main jobs' added wait measured from {w.source}: {w.wait_s:.0f} s; {w.jobs} of the "
                     f"{_count(w.main_jobs, 'main job')} that started waited on a pilot")
    total = report.total()
    rows = _rows(report, by) + [total]  # the CSV has no total row: a spreadsheet sums its columns
    header = ("USER", "JOBS") if by == "user" else ("JOB", "USER", "STATE")
    header += ("NODE-HOURS", "SAMPLES", "RESIZES", "GAP NODE-HOURS", "PREEMPTIONS", "FAILURES")
    table = [header]
    for a in rows:
        if a is total:
            key = ("total", a.job) if by == "user" else ("total", _count(len(report.by_user()), "user"), a.job)
        else:
            key = (a.user, a.job) if by == "user" else (a.job, a.user, a.state)
        table.append(key + (f"{a.node_hours:.3f}", f"{a.samples:.0f}", str(a.resizes),
                            f"{a.resize_gap_node_hours:.4f}", str(a.preemptions), str(a.failures)))
    widths = [max(len(r[k]) for r in table) for k in range(len(header))]
    lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in table]
    return "\n".join(lines)


def _rows(report: Report, by: str) -> List[JobAccount]:
    return report.by_user() if by == "user" else sorted(report.jobs, key=lambda j: (j.user, j.job))


def to_csv(report: Report, by: str) -> str:
    out = io.StringIO()
    rows = _rows(report, by)
    names = [f.name for f in fields(JobAccount)]
    writer = csv.DictWriter(out, fieldnames=["since_s", "until_s", *names], lineterminator="\n")
    writer.writeheader()
    for a in rows:
        writer.writerow({"since_s": report.since_s, "until_s": report.until_s, **asdict(a)})
    return out.getvalue()
