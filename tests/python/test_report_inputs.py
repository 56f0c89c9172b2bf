"""`bft report` reads other users' state directories as untrusted data (bft.runtime.ops.accounting_input,
docs/security.md): a hostile state.db is one line naming it and the other directories are still
reported (exit 2); links are not followed; what the report writes is never one of its inputs."""

from __future__ import annotations

import csv
import io
import json
import os
import pwd
import sqlite3
import subprocess
import sys

import pytest

from bft.runtime.ops import accounting as report
from bft.runtime.ops import accounting_input as report_input
from bft.runtime.statedb.schema import StateError
from bft.runtime.statedb.store import StateStore
from runtime_util import REPO, bft, one_line_error, python_env

T0 = 1_700_000_000.0


def _state_dir(path, *, job="train"):
    """A state directory with one job that held a node for an hour from T0, which the pool offered for two."""
    path.mkdir()
    store = StateStore(path / "state.db")
    store.close()
    db = sqlite3.connect(path / "state.db")
    with db:
        db.execute("INSERT INTO jobs (id, seq, script, args, cwd, python, min_nodes, max_nodes, secret, state, "
                   "max_retries, submitted_s) VALUES (?, 1, 's.py', '[]', '/', 'python3', 1, 1, '00', 'finished', "
                   "2, ?)", (job, T0))
        db.executemany("INSERT INTO events (time_s, kind, job, node, detail) VALUES (?, ?, ?, ?, ?)",
                       [(T0, "manager_started", None, None, '{"source": {"source": "local"}}'),
                        (T0, "join", None, "n0", "{}"), (T0 + 7200, "reclaim", None, "n0", '{"grace_s": 5}')])
        db.execute("INSERT INTO procs (job, generation, node, started_s, ended_s) VALUES (?, 1, 'n0', ?, ?)",
                   (job, T0, T0 + 3600))
    db.close()
    return path


def _sql(path, *statements):
    db = sqlite3.connect(path / "state.db")
    with db:
        for s in statements:
            db.execute(*s) if isinstance(s, tuple) else db.execute(s)
    db.close()


def _report(*dirs, extra=()):
    args = [a for d in dirs for a in ("--state-dir", str(d))]
    return bft("report", *args, "--since", str(T0), "--until", str(T0 + 7200), *extra)


HOSTILE = {
    "a view with an endless recursive query in place of events": (
        ["DROP TABLE events",
         "CREATE VIEW events AS WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r) SELECT n AS id, "
         "0.0 AS time_s, 'join' AS kind, NULL AS job, 'x' AS node, '{}' AS detail FROM r"], "holds a view"),
    "a trigger": (["CREATE TRIGGER t AFTER INSERT ON jobs BEGIN DELETE FROM jobs; END"], "holds a trigger"),
    "a detail nested 100,000 deep": ([("UPDATE events SET detail = ? WHERE kind = 'join'",
                                       ("[" * 100_000 + "]" * 100_000,))], "column detail"),
    "a detail of 1": (["UPDATE events SET detail = '1' WHERE kind = 'join'"], "column detail"),
    "a detail nested 20 deep": ([("UPDATE events SET detail = ? WHERE kind = 'join'",
                                  ('{"a":' * 20 + "1" + "}" * 20,))], "nested more than"),
    "an event at -1e18": (["UPDATE events SET time_s = -1e18 WHERE kind = 'join'"], "column time_s"),
    "an event time as text": (["UPDATE events SET time_s = 'soon' WHERE kind = 'join'"], "column time_s"),
    "a process time as text": (["UPDATE procs SET started_s = 'then'"], "table 'procs'"),
    "a progress row of text samples": ([f"INSERT INTO progress VALUES ('train', 1, {T0}, 1, 0, 'many', 'full', "
                                        "NULL, 'relaunch')"], "table 'progress'"),
    "a resize gap without gap_s": ([f"INSERT INTO events (time_s, kind, job, detail) VALUES ({T0 + 10}, "
                                    "'resize_gap', 'other', '{\"gap\": \"resize\", \"to_nodes\": 1}')"], "gap_s holds"),
"a resize gap of NaN": ([f"INSERT INTO events (time_s, kind, job, detail) VALUES ({T0 + 10}, 'resize_gap', "
                             "'other', '{\"gap\": \"resize\", \"gap_s\": NaN, \"to_nodes\": 1}')"], "column detail"),
    "a grace of text": ([f"INSERT INTO events (time_s, kind, node, detail) VALUES ({T0 + 10}, 'reclaim', 'n1', "
                         "'{\"grace_s\": \"long\"}')"], "grace_s holds"),
}


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_a_hostile_state_db_is_one_line_naming_it_and_the_other_directories_are_still_reported(tmp_path, case):
    statements, needle = HOSTILE[case]
    good, bad = _state_dir(tmp_path / "good"), _state_dir(tmp_path / "bad", job="other")
    _sql(bad, *statements)
    r = _report(good, bad, extra=("--csv", "-"))
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    (line,) = r.stderr.splitlines()
    assert str(bad / "state.db") in line and needle in line and "left out of the report" in line, line
    assert [row["job"] for row in csv.DictReader(io.StringIO(r.stdout))] == ["train"]


def test_a_state_db_read_in_the_period_only_adds_up_to_the_hand_computed_figures(tmp_path):
    """n0 joined before the period (found in SQL, not by loading the history), the job's process ran
    in its first hour: the second half of the pool's two hours and the process's half hour in it."""
    d = _state_dir(tmp_path / "s")
    store = report_input.ReportInput(d)
    try:
        r = report.account(store, store.owner, since=T0 + 1800, until=T0 + 7200, now=T0 + 9000)
    finally:
        store.close()
    assert r.harvested_node_hours == pytest.approx(1.5) and r.used_node_hours == pytest.approx(0.5)
    assert r.reclaims == 1 and r.added_wait_s == 5 and [j.node_hours for j in r.jobs] == [pytest.approx(0.5)]
    assert r.pool_steps == [(T0 + 1800, 0), (T0 + 1800, 1), (T0 + 7200, 0)]


def test_the_read_budget_interrupts_sqlite_with_one_line(tmp_path, monkeypatch):
    d = _state_dir(tmp_path / "s")
    _sql(d, "INSERT INTO events (time_s, kind, detail) WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 "
            f"FROM r WHERE n < 20000) SELECT {T0}, 'note', '{{}}' FROM r")
    monkeypatch.setattr(report_input, "READ_BUDGET_S", -1.0)
    with pytest.raises(StateError, match=r"state\.db: not read within"):
        report_input.ReportInput(d)


def test_links_are_not_followed_and_files_must_be_their_directorys_owners(tmp_path):
    theirs = _state_dir(tmp_path / "theirs")
    linked = tmp_path / "linked"
    linked.mkdir()
    (linked / "state.db").symlink_to(theirs / "state.db")
    one_line_error(_report(linked), f"{linked / 'state.db'}: a symbolic link: not followed")
    # A log planted as a link is refused the same way.
    wal = _state_dir(tmp_path / "wal")
    (wal / "state.db-wal").symlink_to(theirs / "state.db")
    one_line_error(_report(wal), "state.db-wal: a symbolic link")
    if os.geteuid() != 0:
        return  # the rest needs files of two owners
    nobody = pwd.getpwnam("nobody")
    os.chown(theirs / "state.db", nobody.pw_uid, nobody.pw_gid)  # a hard link of it, in root's directory
    hard = tmp_path / "hard"
    hard.mkdir()
    os.link(theirs / "state.db", hard / "state.db")
    one_line_error(_report(hard), f"owned by uid {nobody.pw_uid}, not by the directory's owner")


def test_a_planted_shm_link_is_never_opened(tmp_path):
    """SQLite opens (and as root truncates) the -shm file beside a database it reads: the report reads
    a private copy, so a link planted there leaves its target as it was."""
    d = _state_dir(tmp_path / "s")
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    (d / "state.db-shm").symlink_to(victim)
    r = _report(d, extra=("--csv", "-"))
    assert r.returncode == 0, r.stderr
    assert victim.read_text() == "precious\n"


def test_the_same_state_file_under_two_names_is_counted_once(tmp_path):
    d = _state_dir(tmp_path / "s")
    alias = tmp_path / "alias"
    alias.symlink_to(d)
    r = _report(d, alias, extra=("--csv", "-"))
    assert r.returncode == 0 and "counted once" in r.stderr and r.stderr.count("\n") == 1, r.stderr
    assert [row["job"] for row in csv.DictReader(io.StringIO(r.stdout))] == ["train"]


@pytest.mark.parametrize("how", ["itself", "hard link", "symlink"])
def test_an_output_that_is_an_input_is_refused_and_the_input_kept(tmp_path, how):
    d = _state_dir(tmp_path / "s")
    before = (d / "state.db").read_bytes()
    out = d / "state.db"
    if how == "hard link":
        out = tmp_path / "out.csv"
        os.link(d / "state.db", out)
    elif how == "symlink":
        out = tmp_path / "out.png"
        out.symlink_to(d / "state.db")
    flag = "--png" if str(out).endswith(".png") else "--csv"
    one_line_error(_report(d, extra=(flag, str(out))), f"{flag} {out}: the same file as the input")
    assert (d / "state.db").read_bytes() == before


def test_a_csv_naming_the_sacct_input_is_refused(tmp_path):
    d = _state_dir(tmp_path / "s")
    log = tmp_path / "jobs.sacct"
    log.write_text("JobID|JobName|Eligible|Start|End|NodeList\n")
    one_line_error(_report(d, extra=("--sacct", str(log), "--csv", str(log))), "the same file as the input")
    assert log.read_text() == "JobID|JobName|Eligible|Start|End|NodeList\n"


def test_png_names_are_checked_and_the_file_written_is_the_one_named(tmp_path):
    d = _state_dir(tmp_path / "s")
    one_line_error(_report(d, extra=("--png", str(tmp_path / "plot"))), "must end in .png")
    one_line_error(_report(d, extra=("--png", str(tmp_path / "x.txt"))), "must end in .png")
    (tmp_path / "dir.png").mkdir()
    one_line_error(_report(d, extra=("--png", str(tmp_path / "dir.png"))), "a directory")
    r = _report(d, extra=("--png", str(tmp_path / "p.png")))
    assert r.returncode == 0 and f"wrote {tmp_path / 'p.png'}" in r.stdout, r.stderr
    assert (tmp_path / "p.png").read_bytes()[:4] == b"\x89PNG"


@pytest.mark.parametrize("flag,value", [("--since", "nan"), ("--until", "nan"), ("--until", "inf"),
                                        ("--until", "1e20"), ("--since", "-1e30")])
def test_report_times_out_of_range_are_one_line(tmp_path, flag, value):
    d = _state_dir(tmp_path / "s")
    one_line_error(bft("report", "--state-dir", str(d), f"{flag}={value}"), flag)


def test_standard_output_on_a_full_device_is_one_line(tmp_path):
    d = _state_dir(tmp_path / "s")
    with open("/dev/full", "w") as full:
        r = subprocess.run([sys.executable, "-m", "bft", "report", "--state-dir", str(d)], stdout=full,
                           stderr=subprocess.PIPE, text=True, env=python_env(), cwd=REPO, timeout=60)
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "No space left" in r.stderr, r.stderr


def test_event_detail_written_by_a_manager_passes_the_checks(tmp_path):
    """The checks refuse only what a manager never writes: a real event log (store.log_event) passes."""
    d = _state_dir(tmp_path / "s")
    store = StateStore(d / "state.db", create=False)
    store.log_event("resize_gap", job="train", from_nodes=1, to_nodes=2, method="relaunch", gap="resize",
                    gap_s=1.5, nodeless_s=0.0)
    store.log_event("manager_started", source={"source": "slurm", "job_name": "bft-pilot.x", "nodes": [1, 2]})
    store.close()
    r = bft("report", "--state-dir", str(d), "--csv", "-")
    assert r.returncode == 0 and json.dumps("train")[1:-1] in r.stdout, r.stderr


@pytest.mark.runtime
def test_a_running_managers_state_is_reported_with_what_its_log_holds(harness):
    """A live manager's commits sit in state.db-wal until a checkpoint: the copy takes the log too, so
    the nodes that joined are in the report."""
    proc = harness.start("--local-nodes", "2")
    harness.wait(lambda s: len(s["nodes"]["pool"]) == 2, 60, "the 2 local nodes")
    assert (harness.state_dir / "state.db-wal").stat().st_size > 0
    r = bft("report", "--state-dir", str(harness.state_dir))
    assert r.returncode == 0 and not r.stderr and "harvested: " in r.stdout, r.stderr
    store = report_input.ReportInput(harness.state_dir)
    try:
        assert report.account(store, store.owner).harvested_node_hours > 0
    finally:
        store.close()
    harness.stop(proc)
