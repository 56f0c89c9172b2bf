"""`bft report` (docs/runtime.md, "Accounting") on the state directory of a real run: a manager driven
by an idle-node trace, a job (the emulated launcher's real processes and signed reports) that grows,
loses a node to a reclaim and finishes."""

from __future__ import annotations

import csv
import io
import os
import pwd
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from bft.runtime.ops import accounting as report
from bft.runtime.statedb.store import StateStore
from runtime_util import REPO, ManagerHarness, bft, one_line_error, python_env, write_trace

pytestmark = pytest.mark.runtime

EMULATED = REPO / "python" / "bft" / "runtime" / "sources" / "emulated.py"
WORK = 4000


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory):
    """The state directory of a finished run: n0 and n1 idle from the start, n2 from 6 s, n1 taken
    back at 14 s (grace 2 s); one job of 100 samples/s per node until 4,000 samples. Also, in
    `root/"snapshot"`, a copy of its state.db taken while the job ran (SQLite's backup: consistent).
    One run for the module's tests (CI's time)."""
    pytest.importorskip("torch", reason="the runtime tests need PyTorch (./dev.sh installs torch==2.13.0)")
    harness = ManagerHarness(tmp_path_factory.mktemp("report"))
    try:
        trace = write_trace(harness.root / "trace.csv", [(0, "n0", "idle"), (0, "n1", "idle"), (6, "n2", "idle"),
                                                         (14, "n1", "busy")])
        # equal_share gives the one job every idle node whatever its curve measures on a loaded
        # machine: the grow at 6 s and the reclaim at 14 s happen, which is what the report accounts.
        proc = harness.start("--local-trace", str(trace), "--local-nodes", "3", "--local-grace-s", "2",
                             "--grace", "5", "--local-emulate", "--resize", "relaunch", "--policy", "equal_share")
        harness.submit("emu", "--min", "1", "--max", "3", "--samples", str(WORK), "--",
                       "--curve", '{"nodes": [0, 1, 2, 3], "throughput": [0, 100, 200, 300]}', script=EMULATED)
        harness.wait(lambda s: harness.job("emu")["samples"] >= WORK / 4, 120, "a quarter of the job")
        (harness.root / "snapshot").mkdir(mode=0o700)
        with sqlite3.connect(harness.state_dir / "state.db") as src, \
                sqlite3.connect(harness.root / "snapshot" / "state.db") as dst:
            src.backup(dst)
        harness.wait(lambda s: harness.job("emu")["state"] in ("finished", "failed"), 120, "the job to finish")
        assert harness.job("emu")["state"] == "finished"
        harness.stop(proc)
        yield harness
    finally:
        harness.close()


def _run_report(harness, *args):
    r = bft("report", "--state-dir", str(harness.state_dir), *args)
    assert r.returncode == 0 and not r.stderr, r.stderr
    return r.stdout


def test_the_report_of_a_real_run_adds_up(finished_run, tmp_path):
    h = finished_run
    store = h.store()
    try:
        whole = report.account(store, "someone")
        joined = {e["node"]: e["time_s"] for e in store.events(("join",))}
        stopped = store.events(("manager_stopped",))[-1]["time_s"]
        reclaimed = store.events(("reclaim",))
        final_samples = store.job("emu").samples
        middle = (whole.since_s + whole.until_s) / 2
        halves = [report.account(store, "someone", since=whole.since_s, until=middle),
                  report.account(store, "someone", since=middle, until=whole.until_s)]
    finally:
        store.close()
    (job,) = whole.jobs
    # The samples are the job's own count; the node-hours are within what the pool offered.
    assert job.samples == pytest.approx(final_samples) and final_samples >= WORK
    assert 0 < job.node_hours == pytest.approx(whole.used_node_hours)
    assert whole.used_node_hours < whole.harvested_node_hours
    # The trace's offer: n0 and n2 from their joins until the manager stopped, n1 until its reclaim.
    assert [e["node"] for e in reclaimed] == ["n1"] and whole.reclaims == 1 and whole.added_wait_s == 2.0
    offered_s = (stopped - joined["n0"]) + (reclaimed[0]["time_s"] - joined["n1"]) + (stopped - joined["n2"])
    assert whole.harvested_node_hours * 3600 == pytest.approx(offered_s)
    assert job.resizes >= 1 and job.preemptions == 1
    # Two halves of the period add up to the whole.
    for name in ("harvested_node_hours", "used_node_hours"):
        assert sum(getattr(r, name) for r in halves) == pytest.approx(getattr(whole, name))
    assert sum(j.samples for r in halves for j in r.jobs) == pytest.approx(job.samples)

    table = _run_report(h)
    assert "emu" in table and f"{job.samples:.0f}" in table and f"{whole.harvested_node_hours:.3f}" in table
    rows = list(csv.DictReader(io.StringIO(_run_report(h, "--csv", "-"))))
    assert [r["job"] for r in rows] == ["emu"] and float(rows[0]["samples"]) == pytest.approx(job.samples)
    users = list(csv.DictReader(io.StringIO(_run_report(h, "--csv", "-", "--by", "user"))))
    assert len(users) == 1 and users[0]["job"] == "1 job" and float(users[0]["node_hours"]) == pytest.approx(
        job.node_hours, rel=1e-6)
    png = tmp_path / "harvest.png"
    _run_report(h, "--png", str(png))
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_report_over_two_users_state_directories_keeps_each_job_under_its_owner(finished_run, tmp_path):
    """The finished run's directory (this user's) and the mid-run snapshot chowned to `nobody`: both
    have a job `emu`, with different figures, so rows given to the wrong user fail the test."""
    if os.getuid() != 0:
        pytest.skip("chowning a state directory to another user needs root")
    h = finished_run
    me, other = pwd.getpwuid(os.getuid()).pw_name, "nobody"
    theirs = tmp_path / "theirs"
    shutil.copytree(h.root / "snapshot", theirs)
    nobody = pwd.getpwnam(other)
    for path in (theirs, theirs / "state.db"):
        os.chown(path, nobody.pw_uid, nobody.pw_gid)
    until = time.time()  # after both directories' last records: fixed figures from here on
    stores = {me: h.store(), other: StateStore(theirs / "state.db", create=False, read_only=True)}
    try:
        since = min(report.first_record_s(s) for s in stores.values())
        alone = {user: report.account(s, user, since=since, until=until, now=until) for user, s in stores.items()}
    finally:
        for s in stores.values():
            s.close()
    (mine,), (snap,) = alone[me].jobs, alone[other].jobs
    # The two rows can be told apart (the snapshot's processes still run: they count up to --until).
    assert snap.samples < mine.samples and snap.preemptions == 0 < mine.preemptions
    more = ["--state-dir", str(theirs), "--until", str(until)]  # _run_report gives the finished run's first

    rows = list(csv.DictReader(io.StringIO(_run_report(h, *more, "--csv", "-"))))
    assert [(r["job"], r["user"]) for r in rows] == sorted([("emu", me), ("emu", other)], key=lambda k: k[1])
    for r in rows:
        expected = mine if r["user"] == me else snap
        assert float(r["samples"]) == pytest.approx(expected.samples)
        assert float(r["node_hours"]) == pytest.approx(expected.node_hours, rel=1e-6)
    users = {r["user"]: r for r in csv.DictReader(io.StringIO(_run_report(h, *more, "--csv", "-", "--by",
                                                                         "user")))}
    assert set(users) == {me, other} and all(r["job"] == "1 job" for r in users.values())
    assert float(users[other]["samples"]) == pytest.approx(snap.samples)
    assert int(users[me]["preemptions"]) == mine.preemptions and int(users[other]["preemptions"]) == 0
    table = _run_report(h, *more, "--by", "user")
    harvested = alone[me].harvested_node_hours + alone[other].harvested_node_hours
    assert f"harvested: {harvested:.3f} node-hours" in table
    total = next(line.split() for line in table.splitlines() if line.startswith("total"))
    assert total[1:5] == ["2", "jobs", f"{mine.node_hours + snap.node_hours:.3f}", f"{mine.samples + snap.samples:.0f}"]


def test_report_errors_are_one_line(tmp_path):
    r = bft("report", "--state-dir", str(tmp_path / "none"))
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "no manager state" in r.stderr, r.stderr
    # Each directory that cannot be reported is one line naming it (test_report_inputs.py: the others are reported).
    r = bft("report", "--state-dir", str(tmp_path), "--state-dir", str(tmp_path / "none"))
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert [line.split(": ")[1] for line in r.stderr.splitlines()] == [f"no manager state in {d} (--state-dir)"
                                                                       + " (left out of the report)"
                                                                       for d in (tmp_path, tmp_path / "none")]
    r = bft("report", "--state-dir", str(tmp_path), "--since", "yesterday")
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "not a time: 'yesterday'" in r.stderr, r.stderr


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("setpriv"), reason="playing another user needs root")
def test_report_of_state_directories_another_user_cannot_read_is_one_line_naming_the_directory():
    root = Path(tempfile.mkdtemp(prefix="bft-report-"))
    try:
        root.chmod(0o711)  # traversable, as a home directory would be
        closed, open_dir = root / "closed", root / "open"
        for d, mode in ((closed, 0o700), (open_dir, 0o755)):
            d.mkdir(mode=mode)
            d.chmod(mode)
            StateStore(d / "state.db").close()
            (d / "state.db").chmod(0o600)
        for d in (closed, open_dir):
            r = subprocess.run(["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups", sys.executable, "-m",
                                "bft", "report", "--state-dir", str(d)], env=python_env(), capture_output=True,
                               text=True, timeout=60, cwd="/")
            one_line_error(r, str(d))  # the directory, or its state.db
            assert "permission denied" in r.stderr.lower(), r.stderr
    finally:
        shutil.rmtree(root, ignore_errors=True)
