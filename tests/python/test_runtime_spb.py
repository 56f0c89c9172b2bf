"""The runtime with configurations (structured partial backpropagation): submit checks, the state
file's upgrade, and end to end a real manager that restarts a running job in the configuration the
allocator chose (real torchrun, real gloo, bft.train.spb), also across a crash of the manager."""

from __future__ import annotations

import re
import sqlite3

import pytest

from bft.runtime.statedb import jobspec
from bft.runtime.statedb.schema import SCHEMA_VERSION
from bft.runtime.statedb.store import StateStore
from runtime_util import REPO, bft, write_trace

DIGITS = REPO / "examples" / "runtime" / "ddp_digits.py"


@pytest.mark.parametrize("configurations, message", [
    ([{"name": "full", "efficiency": 0.5}], "the name is taken (full backpropagation)"),
    ([{"name": "a", "efficiency": 0.5}, {"name": "a", "efficiency": 0.6}], "--configuration a: the name is taken"),
    ([{"name": "bad name", "efficiency": 0.5}], "is not a configuration name"),
    ([{"name": "a", "efficiency": 0}], "efficiency 0 must be a number in (0, 1]"),
    ([{"name": "a", "efficiency": 1.5}], "efficiency 1.5 must be a number in (0, 1]"),
    ([{"name": "a", "efficiency": True}], "efficiency True"),
    ([{"name": "a", "efficiency": 0.5, "speedup": float("inf")}], "speedup inf must be a number in (0, 1000]"),
    ([{"name": "a", "efficiency": 0.5, "depth": 2}], "expected NAME:EFFICIENCY[:SPEEDUP]"),
    ([{"name": f"c{k}", "efficiency": 0.5} for k in range(17)], "at most 16 configurations"),
    ("spb", "at most 16 configurations"),
])
def test_configurations_are_checked_naming_the_bad_one(configurations, message):
    with pytest.raises(ValueError) as e:
        jobspec.check_configurations(configurations)
    assert message in str(e.value)


def test_configurations_default_to_a_speedup_of_one():
    assert jobspec.check_configurations([{"name": "spb-d2", "efficiency": 0.8}]) == [
        {"name": "spb-d2", "efficiency": 0.8, "speedup": 1.0}]


def test_submit_reports_a_bad_configuration_in_one_line(tmp_path):
    script = tmp_path / "train.py"
    script.write_text("print('hi')\n")
    for arg, needle in (("spb", "expected NAME:EFFICIENCY[:SPEEDUP]"),
                        ("spb:high", "efficiency 'high' is not a number"),
                        ("spb:1.5", "efficiency 1.5 must be"), ("spb:0.5:0", "speedup 0.0 must be")):
        r = bft("submit", str(script), "--state-dir", str(tmp_path / "state"), "--configuration", arg)
        lines = r.stderr.strip().splitlines()
        assert r.returncode == 2 and len(lines) == 1 and needle in lines[0], r.stderr


# The version-1 schema, as libbft wrote it before configurations existed.
V1_SCHEMA = """
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE jobs (
  id TEXT PRIMARY KEY, seq INTEGER NOT NULL UNIQUE, script TEXT NOT NULL, args TEXT NOT NULL,
  cwd TEXT NOT NULL, python TEXT NOT NULL, min_nodes INTEGER NOT NULL, max_nodes INTEGER NOT NULL,
  work REAL, curve TEXT, secret TEXT NOT NULL, state TEXT NOT NULL, reason TEXT NOT NULL DEFAULT '',
  retries INTEGER NOT NULL DEFAULT 0, max_retries INTEGER NOT NULL, generation INTEGER NOT NULL DEFAULT 0,
  samples REAL NOT NULL DEFAULT 0, submitted_s REAL NOT NULL, started_s REAL, finished_s REAL);
CREATE TABLE progress (
  job TEXT NOT NULL, generation INTEGER NOT NULL, time_s REAL NOT NULL, nodes INTEGER NOT NULL,
  samples REAL NOT NULL, advisor_samples REAL NOT NULL);
CREATE INDEX progress_job ON progress (job, time_s);
CREATE TABLE procs (
  id INTEGER PRIMARY KEY, job TEXT NOT NULL, generation INTEGER NOT NULL, node TEXT NOT NULL,
  pid INTEGER, started_s REAL NOT NULL, ended_s REAL, exit_code INTEGER);
CREATE TABLE events (
  id INTEGER PRIMARY KEY, time_s REAL NOT NULL, kind TEXT NOT NULL, job TEXT, node TEXT,
  detail TEXT NOT NULL DEFAULT '{}');
PRAGMA application_id = 1111905362;
PRAGMA user_version = 1;
"""


def test_a_version_1_state_file_is_upgraded_keeping_its_jobs_and_progress(tmp_path):
    path = tmp_path / "state.db"
    db = sqlite3.connect(path)
    db.executescript(V1_SCHEMA)
    db.execute("INSERT INTO jobs (id, seq, script, args, cwd, python, min_nodes, max_nodes, secret, state, "
               "max_retries, submitted_s) VALUES ('old', 1, '/s.py', '[]', '/', '/py', 1, 4, 'ab', 'queued', 2, 0)")
    db.execute("INSERT INTO progress VALUES ('old', 1, 10.0, 2, 500.0, 500.0)")
    db.commit()
    db.close()
    # A reader does not upgrade (it may not write): it says what to do.
    with pytest.raises(Exception, match="start a manager"):
        StateStore(path, create=False, read_only=True)
    store = StateStore(path, create=False)
    (job,) = store.jobs()
    assert (job.id, job.configuration, job.configurations) == ("old", "full", [])
    (row,) = list(store.progress())
    assert (row["samples"], row["configuration"], row["configuration_samples"]) == (500.0, "full", None)
    assert store.db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    store.close()
    StateStore(path, create=False, read_only=True).close()  # now current


LEARNING = ("prior", "measured", "fitted")  # what the allocator sees of a curve, in the order it is learned


@pytest.mark.runtime
def test_a_running_job_is_restarted_in_the_configuration_the_allocator_chooses(harness):
    """On one node partial backpropagation has no partial rank, so the job starts in full; when a
    second node joins, the allocator grows it and switches it to spb-d2 (worth 0.9 x 1.8 of full until
    measured), and the manager restarts its workers in that configuration from the checkpoint. The
    manager is killed with SIGKILL and restarted: it adopts the running job and rebuilds what it
    learned of each configuration from the state file. The job finishes its samples."""
    # n1 comes at 60 s: the job has started and reported in full on one node by then, also when a
    # loaded machine takes 15 s to start the manager and the job (seen at load 8-16).
    trace = write_trace(harness.root / "trace.csv", [(0, "n0", "idle"), (60, "n1", "idle")])
    # Still running when n1 comes at 60 s on a quiet machine (300,000 samples took 36 s on one node in
    # CI): measured in full, then switched; on a busy one the finish takes minutes (waited for below).
    work = 1_000_000
    args = ("--local-trace", str(trace), "--local-nodes", "2", "--grace", "10")
    first = harness.start(*args)
    harness.submit("cnn", "--min", "1", "--max", "2", "--samples", str(work), "--configuration", "spb-d2:0.9:1.8",
                   script=DIGITS)
    harness.wait(lambda s: s["jobs"][0]["configuration"] == "spb-d2" and s["jobs"][0]["samples"] > 0
                 and not s["jobs"][0].get("resizing"), 120, "the job to run in spb-d2")
    changes = harness.events("configuration_changed", job="cnn")
    assert changes[0]["previous"] == "full" and changes[0]["configuration"] == "spb-d2", changes
    # Measured in spb-d2 before the crash: wait for a few progress records of it.
    harness.wait(lambda s: _progress_in(harness, "spb-d2") >= 5, 60, "progress reports in spb-d2")
    # What the first manager knew of full backpropagation when it was killed: usually measured on one
    # node before n1 came, but on a loaded machine the job may not have reported at full by then.
    learned = harness.wait(lambda s: s["jobs"][0]["samples"] > 0, 10, "the status before the crash")["jobs"][0]
    harness.kill9(first)

    second = harness.start(*args)
    # The keeper kept the job's store: the restarted manager adopts it (no relaunch), knowing at least
    # what the first knew of full backpropagation (measured from one node: not back to the prior).
    after = harness.wait(lambda s: s["jobs"][0]["samples"] > 0, 60, "the restarted manager's status")["jobs"][0]
    assert LEARNING.index(after["curve"]) >= LEARNING.index(learned["curve"]), (learned["curve"], after["curve"])
    harness.wait(lambda s: s["jobs"][0]["state"] == "finished", 600, "the job to finish")
    log = harness.job_log("cnn")
    assert "configuration full: depths [4], batches [32]" in log, log[-3000:]
    assert re.search(r"configuration spb-d2: depths \[4, 2\], batches \[32, \d+\]", log), log[-3000:]
    assert "resumed from checkpoint" in log
    done = re.findall(r"done: (\d+) samples", log)
    assert done and int(done[-1]) >= work, log[-2000:]
    launches = harness.events("launch", job="cnn")
    assert {e["configuration"] for e in launches} >= {"full", "spb-d2"}, launches
    # Adopted, or (had an agent died meanwhile) relaunched with what the first manager had learned:
    # then its first decision used the advisor's curve of the configuration it chose, not the guess.
    recovered = harness.events("recovered")[0]
    if recovered["adopted"] != ["cnn"]:
        first_after = next(e for e in harness.events("allocate", job="cnn") if e["id"] > recovered["id"])
        assert first_after["configuration_curve"] in ("measured", "fitted"), first_after
    harness.stop(second)
    assert harness.leftovers() == []


def _progress_in(harness, configuration: str) -> int:
    store = harness.store()
    try:
        return sum(1 for p in store.progress() if p["configuration"] == configuration and p["nodes"] > 0)
    finally:
        store.close()
