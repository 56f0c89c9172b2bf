"""End to end: the orders of events that broke resizes (issue 28's repros), each on a real manager with
real worker processes, the local node source and a node trace. Every test is bounded in time and the
harness stops whatever it started, pass or fail.

The state machine behind them is tested alone, against random orders of events, in
test_resize_machine.py.
"""

from __future__ import annotations

import os
import signal
import time

import pytest

from runtime_util import REPO, write_trace

pytest.importorskip("torch", reason="the runtime tests need PyTorch (./dev.sh installs torch==2.13.0)")

pytestmark = pytest.mark.runtime

ELASTIC = REPO / "examples" / "runtime" / "elastic_synthetic.py"


def _script(harness, name: str, body: str):
    path = harness.root / name
    path.write_text(body)
    return path


def _reasons(harness, job: str):
    return [e["reason"] for e in harness.events("generation_ended", job=job)]


def test_a_script_that_always_exits_76_in_place_fails_after_its_retries_with_its_reason(harness):
    """An in-place worker that exits EXIT_INPLACE_FAILED at every start, before any report: each start
    counts as a retry (with a back-off), so the job ends `failed` with the reason, not relaunched for ever."""
    script = _script(harness, "always76.py", "import sys\nsys.exit(76)\n")
    proc = harness.start("--local-nodes", "2", "--max-retries", "1")
    harness.submit("bad", "--min", "1", "--max", "2", "--resize", "inplace", script=script)
    job = harness.wait(lambda s: s["jobs"][0]["state"] == "failed", 120, "the job to fail")["jobs"][0]
    assert "an in-place resize failed (exited with code 76" in job["reason"] and "(2 attempts)" in job["reason"], job
    assert len(harness.events("launch", job="bad")) == 2
    assert [e["retry"] for e in harness.events("job_failed", job="bad")] == [1, 2]
    assert all(_reasons(harness, "bad")), _reasons(harness, "bad")
    assert not harness.status()["nodes"]["used"]  # it holds no node
    harness.stop(proc)
    assert harness.leftovers() == []


def test_an_unasked_exit_75_is_a_departure_and_the_job_goes_on_without_a_retry(harness):
    """A worker that exits EXIT_RESIZE (its node's SIGTERM came before the manager's word) although the
    manager did not ask it to: no failure, no retry; the job is started again and finishes."""
    marker = harness.root / "left-once"
    script = _script(harness, "leaves_once.py", f"""
import pathlib, sys
import bft.train as bt
marker = pathlib.Path({str(marker)!r})
if not marker.exists():
    marker.write_text("1")
    sys.exit(bt.EXIT_RESIZE)
bt.report(100)
""")
    proc = harness.start("--local-nodes", "1", "--max-retries", "0")
    harness.submit("leaver", "--min", "1", "--max", "1", "--samples", "100", "--resize", "inplace", script=script)
    harness.wait(lambda s: s["jobs"][0]["state"] == "finished", 120, "the job to finish")
    assert not harness.events("job_failed", job="leaver")
    assert harness.job("leaver")["retries"] == 0
    assert len(harness.events("launch", job="leaver")) == 2
    harness.stop(proc)
    assert harness.leftovers() == []


def test_a_job_whose_work_is_done_is_finished_when_the_manager_stops_and_never_relaunched(harness):
    """The job has reported all its work but its workers still run when `bft manager stop` comes: it
    ends `finished` (its workers' SIGTERM exit does not queue it again), and the next manager leaves it."""
    script = _script(harness, "done_then_waits.py", """
import time
import bft.train as bt
bt.report(300)
while True:
    time.sleep(0.1)
""")
    proc = harness.start("--local-nodes", "2", "--grace", "2")
    harness.submit("done", "--min", "2", "--max", "2", "--samples", "300", "--resize", "inplace", script=script)
    harness.wait(lambda s: s["jobs"][0]["samples"] >= 300, 60, "the job's last report")
    harness.stop(proc)
    store = harness.store()
    try:
        assert store.job("done").state == "finished"
    finally:
        store.close()
    again = harness.start("--local-nodes", "2")
    time.sleep(3)
    assert harness.job("done")["state"] == "finished"
    assert len(harness.events("launch", job="done")) == 1  # never relaunched
    harness.stop(again)
    assert harness.leftovers() == []


def test_after_the_keeper_is_lost_and_restarted_in_place_resizes_use_the_new_one(harness):
    """kill -9 of the keeper while an in-place job trains: the manager starts a new keeper on the same
    ports and re-forms the job in place in its store (the worker keeps its process: no relaunch), and a
    later grow in place publishes into the new store."""
    trace = write_trace(harness.root / "trace.csv", [(0, "n0", "idle"), (45, "n1", "idle")])
    proc = harness.start("--local-trace", str(trace), "--local-nodes", "2", "--grace", "3")
    harness.submit("el", "--min", "1", "--max", "2", "--samples", "70000", "--", "--step-s", "0.05", script=ELASTIC)
    harness.wait(lambda s: s["jobs"][0]["samples"] > 0, 90, "the job's first report")
    first_keeper = harness.keeper_pid()
    os.kill(first_keeper, signal.SIGKILL)
    harness.wait(lambda s: harness.events("keeper_lost"), 30, "the manager to notice the keeper's death")
    harness.wait(lambda s: s["jobs"][0]["state"] == "finished", 300, "the job to finish")
    lost = harness.events("keeper_lost")[0]["id"]
    grows = [e for e in harness.events("resize_inplace", job="el") if e["id"] > lost and e["joined"] == ["n1"]]
    assert grows, harness.events(job="el")
    assert harness.keeper_pid() not in (None, first_keeper)
    assert not harness.events("job_failed", job="el")  # its store's loss is not its failure
    assert len(harness.events("launch", job="el")) == 1  # re-formed in place, never relaunched
    harness.stop(proc)
    assert harness.leftovers() == []


def test_nodes_given_and_taken_back_at_once_and_a_shrink_before_a_grows_deadline_cost_no_failure(harness):
    """Two orders of events from a busy machine: a shrink (n1 reclaimed) 9.9 s after a grow onto n2
    with a 10 s in-place timeout (the grow's deadline must not fire against the new generation), then
    a node given and taken back within 0.1 s, twice. No in-place failure, no job failure, no hang, and
    every generation that ended says why."""
    # Trace seconds, played 10 times faster: the grow at 20 s, the shrink at 29.9 s, n3 held 0.1 s.
    rows = [(0, "n0", "idle"), (0, "n1", "idle"), (200, "n2", "idle"), (299, "n1", "busy")]
    rows += [(t, "n3", s) for t0 in (450, 550) for t, s in ((t0, "idle"), (t0 + 1, "busy"))]
    trace = write_trace(harness.root / "trace.csv", rows)
    proc = harness.start("--local-trace", str(trace), "--local-nodes", "4", "--local-time-scale", "10",
                         "--inplace-timeout", "10", "--grace", "3")
    harness.submit("el", "--min", "1", "--max", "4", "--samples", "150000", "--", "--step-s", "0.05",
                   script=ELASTIC)
    harness.wait(lambda s: s["jobs"][0]["state"] == "finished", 400, "the job to finish")
    events = harness.events(job="el")
    assert not harness.events("inplace_failed", "job_failed", job="el"), events
    assert harness.events("resize_inplace", job="el")
    assert all(_reasons(harness, "el")), _reasons(harness, "el")
    harness.stop(proc)
    assert harness.leftovers() == []


def test_a_worker_killed_while_a_job_trains_at_its_min_is_relaunched_without_a_retry(harness):
    """SIGKILL of one in-place worker of a steady two-node job with --min 2 (no resize under way, no
    reclaim): the survivor alone is below the job's --min, so the job is relaunched on its two nodes
    from the checkpoint, charged as a resize, not a retry (docs/runtime.md, "A lost worker")."""
    proc = harness.start("--local-nodes", "2", "--grace", "3", "--max-retries", "2")
    harness.submit("el", "--min", "2", "--max", "2", "--samples", "10000000", "--", "--step-s", "0.05",
                   script=ELASTIC)
    harness.wait(lambda s: s["jobs"][0]["samples"] > 0 and harness.open_pid("el", "local-1"), 90,
                 "the job's first report")
    pid = harness.open_pid("el", "local-1")
    assert pid > 0  # (os.kill(0, ...) would signal this test's own process group)
    os.kill(pid, signal.SIGKILL)
    harness.wait(lambda s: len(harness.events("launch", job="el")) == 2, 120, "the relaunch")
    samples = harness.job("el")["samples"]
    harness.wait(lambda s: s["jobs"][0]["samples"] > samples, 120, "training after the relaunch")
    (lost,) = harness.events("worker_lost", job="el")
    assert lost["node"] == "local-1" and lost["exit_code"] == -signal.SIGKILL
    assert not harness.events("job_failed", job="el"), harness.events(job="el")
    assert [e["outcome"] for e in harness.events("generation_ended", job="el")] == ["relaunch"]
    assert harness.job("el")["retries"] == 0
    harness.stop(proc)
    assert harness.leftovers() == []


def test_a_reclaim_and_a_grow_published_in_the_same_millisecond_cost_no_relaunch(harness):
    """The trace that broke a survivor (issue 38): n2 joins at 50 s, n1 is reclaimed at 59.9 s (played
    10 times faster, --inplace-timeout 10). Whatever order the survivor sees the generations in, a
    collective torn by the leaver is a lost peer it re-forms without: nothing is relaunched or failed."""
    trace = write_trace(harness.root / "trace.csv", [(0, "n0", "idle"), (0, "n1", "idle"), (500, "n2", "idle"),
                                                     (599, "n1", "busy")])
    proc = harness.start("--local-trace", str(trace), "--local-nodes", "3", "--local-time-scale", "10",
                         "--inplace-timeout", "10", "--grace", "3")
    harness.submit("el", "--min", "1", "--max", "4", "--samples", "10000000", "--", "--step-s", "0.05",
                   script=ELASTIC)
    harness.wait(lambda s: harness.events("reclaim"), 120, "n1's reclaim")
    samples = harness.job("el")["samples"]
    harness.wait(lambda s: s["jobs"][0]["samples"] > samples and s["jobs"][0]["phase"] == "steady", 120,
                 "training after the reclaim")
    events = harness.events(job="el")
    assert len(harness.events("launch", job="el")) == 1, events  # never relaunched
    assert not harness.events("inplace_failed", "job_failed", "generation_ended", job="el"), events
    harness.stop(proc)
    assert harness.leftovers() == []
