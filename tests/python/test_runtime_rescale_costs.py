"""The curve book's rescale costs per method, without processes: in-place and relaunch costs are
measured apart, the allocator is charged those of the method the job's next rescale will use, and a
restarted manager (also on a state file of schema version 2) rebuilds the same costs. Fast: no torch."""

from __future__ import annotations

import sqlite3
import time
from typing import List, Tuple

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import runtime_util
from bft.runtime.decide.curvebook import INPLACE, INPLACE_S_PER_BYTE, RELAUNCH, RELAUNCH_S_PER_BYTE, CurveBook
from bft.runtime.jobs.resize import Exit, Stop
from bft.runtime.jobs.runs import JobRun
from bft.runtime.statedb.schema import SCHEMA_VERSION
from bft.runtime.statedb.store import StateStore
from bft.train import protocol
from runtime_util import bft

RATE = 100.0  # samples/s per node
JOB_MAX_NODES = 16
STALLS = {INPLACE: 1.0, RELAUNCH: 12.0}  # seconds without progress after a rescale by each method


def make_run(store: StateStore, resize: str = INPLACE) -> JobRun:
    return runtime_util.make_run(store, max_nodes=JOB_MAX_NODES, resize=resize)


def new_book(store: StateStore) -> CurveBook:
    return CurveBook(store, warmup_s=3.0, scale_up_s=5.0, scale_down_s=4.0, inplace_scale_up_s=0.9,
                     inplace_scale_down_s=0.8)


Step = Tuple[int, str, bool]  # nodes, how the rescale to it is done, whether it fails and is relaunched


def drive(book: CurveBook, run: JobRun, steps: List[Step], stalls=STALLS) -> None:
    """What the lifecycle and the report intake tell the book of a job that rescales through `steps`
    (the first one its start) and reports every 2 s for 60 s at each size: the rescale recorded with
    its method when decided; a failed in-place resize relaunched at once at the same size (launched);
    then its reports. Its clock starts beyond the wall clock's, which the book's own records would use."""
    t = run.advisor_time = 3e9
    for k, (nodes, method, fails) in enumerate(steps):
        if k == 0:
            book.launched(run, nodes)
        else:
            book.record(run, nodes, time_s=t, method=method)
        stall = stalls[method]
        if fails:
            book.launched(run, nodes)
            stall = stalls[RELAUNCH]
        start = t
        while t < start + 60.0:
            run.advisor_samples += RATE * nodes * max(0.0, min(2.0, t + 2.0 - (start + stall)))
            t += 2.0
            book.record(run, nodes, time_s=t)


def test_in_place_and_relaunch_costs_are_measured_apart_and_the_next_method_is_charged(tmp_path):
    store = StateStore(tmp_path / "state.db")
    book = new_book(store)
    run = make_run(store)
    assert book.rescale_costs(run) == (5.0, 4.0)  # not running: its next rescale is a (re)launch
    run.machine.start(["n0"], 1)  # running under --resize inplace: the next rescale is in place
    assert book.rescale_costs(run) == (0.9, 0.8)  # nothing measured: the defaults
    drive(book, run, [(2, RELAUNCH, False), (4, INPLACE, False), (2, INPLACE, False), (4, RELAUNCH, False)])
    # Allocator units: seconds at the old size's rate. In place 2 -> 4 lost 1 s at 400/s = 2 s at 200/s,
    # 4 -> 2 1 s at 200/s = 0.5 s at 400/s; the relaunch 2 -> 4: 12 s at 400/s = 24 s at 200/s.
    up, down = book.rescale_costs(run)
    assert (up, down) == pytest.approx((2.0, 0.5), rel=1e-6)
    assert book.method_costs(run, RELAUNCH) == pytest.approx((24.0, 4.0), rel=1e-6)  # no shrink by relaunch yet
    status = book.cost_status(run)
    assert status["charged"] == INPLACE
    assert (status[INPLACE]["measured_ups"], status[INPLACE]["measured_downs"]) == (1, 1)
    assert (status[RELAUNCH]["measured_ups"], status[RELAUNCH]["measured_downs"]) == (1, 0)
    assert book.allocation_job(run, 16).scale_up_s == pytest.approx(up)
    run.machine.stop(Stop.RESIZE, 0.0)  # being stopped: it will be relaunched
    assert book.rescale_costs(run) == pytest.approx((24.0, 4.0), rel=1e-6)
    store.close()


def test_stopping_a_job_is_charged_its_relaunch_whatever_its_method(tmp_path):
    """A job taken off all its nodes comes back by a relaunch: the allocator is charged that relaunch's
    write and cold start (measured by the advisor) on top of the shrink it is charged anyway."""
    store = StateStore(tmp_path / "state.db")
    book = new_book(store)
    run = make_run(store)
    run.machine.start(["n0"], 1)  # in place: a shrink costs 0.8 s, a stop 4 + 5 s by the defaults
    job = book.allocation_job(run, 16)
    assert (job.scale_down_s, job.restart_s) == pytest.approx((0.8, 4.0 + 5.0 - 0.8))
    drive(book, run, [(2, RELAUNCH, False), (4, INPLACE, False), (2, INPLACE, False), (4, RELAUNCH, False)])
    # Measured: the relaunch's cold start 24 s (the shrink by relaunch still the default 4 s), in place 0.5 s.
    assert book.allocation_job(run, 16).restart_s == pytest.approx(24.0 + 4.0 - 0.5, rel=1e-6)
    assert book.cost_status(run)["restart_s"] == pytest.approx(24.0 + 4.0 - 0.5, rel=1e-6)
    relaunched = runtime_util.make_run(store, "other", max_nodes=JOB_MAX_NODES, resize=RELAUNCH)
    relaunched.machine.start(["n1"], 1)
    assert book.allocation_job(relaunched, 16).restart_s == pytest.approx(5.0)  # its shrink already writes
    store.close()


def test_under_resize_relaunch_a_running_job_is_charged_the_relaunch_costs(tmp_path):
    store = StateStore(tmp_path / "state.db")
    book = new_book(store)
    run = make_run(store, RELAUNCH)
    drive(book, run, [(2, RELAUNCH, False), (4, RELAUNCH, False)])
    run.machine.start(["n0"], 1)
    assert book.cost_status(run)["charged"] == RELAUNCH
    assert book.rescale_costs(run) == pytest.approx((24.0, 4.0), rel=1e-6)
    store.close()


def test_a_failed_in_place_resize_counts_as_a_relaunch(tmp_path):
    store = StateStore(tmp_path / "state.db")
    book = new_book(store)
    run = make_run(store)
    drive(book, run, [(2, RELAUNCH, False), (4, INPLACE, True)])
    status = book.cost_status(run)
    assert status[INPLACE]["measured_ups"] == 0 and status[RELAUNCH]["measured_ups"] == 1
    assert book.method_costs(run, INPLACE) == (0.9, 0.8)
    store.close()


steps_strategy = st.lists(st.tuples(st.integers(1, 8), st.sampled_from([INPLACE, RELAUNCH]), st.booleans()),
                          min_size=2, max_size=8)


def distinct(steps: List[Step]) -> List[Step]:
    """Every step a rescale (a repeated size is no rescale: it would stall a steady run here)."""
    out: List[Step] = []
    for nodes, method, fails in steps:
        if not out or nodes != out[-1][0]:
            out.append((nodes, method, fails and method == INPLACE))
    return out


def costs(tmp_path, name: str, steps: List[Step], stalls) -> dict:
    store = StateStore(tmp_path / f"{name}.db")
    book = new_book(store)
    run = make_run(store)
    drive(book, run, steps, stalls)
    out = {m: book.method_costs(run, m) for m in (INPLACE, RELAUNCH)}
    out["counts"] = {m: (book.cost_status(run)[m]["measured_ups"], book.cost_status(run)[m]["measured_downs"])
                     for m in (INPLACE, RELAUNCH)}
    store.close()
    return out


@settings(max_examples=25, deadline=None)
@given(steps=steps_strategy)
def test_a_jobs_in_place_costs_never_mix_with_its_relaunch_costs(tmp_path_factory, steps):
    """Differential: runs of one sequence of rescales that differ only in how long one method's
    rescales stall measure the other method's costs alike. (Stalls stay within the warm-up.)"""
    steps = distinct(steps)
    tmp = tmp_path_factory.mktemp("mix")
    base = costs(tmp, "base", steps, {INPLACE: 0.5, RELAUNCH: 1.0})
    slow_relaunch = costs(tmp, "slow_relaunch", steps, {INPLACE: 0.5, RELAUNCH: 2.5})
    slow_inplace = costs(tmp, "slow_inplace", steps, {INPLACE: 2.5, RELAUNCH: 1.0})
    assert base["counts"] == slow_relaunch["counts"] == slow_inplace["counts"]
    assert slow_relaunch[INPLACE] == pytest.approx(base[INPLACE], rel=1e-9)
    assert slow_inplace[RELAUNCH] == pytest.approx(base[RELAUNCH], rel=1e-9)
    if base["counts"][RELAUNCH][0]:  # ... while the slowed method's own measured costs grow
        assert slow_relaunch[RELAUNCH][0] > base[RELAUNCH][0]
    if base["counts"][INPLACE][0]:
        assert slow_inplace[INPLACE][0] > base[INPLACE][0]


def rebuilt(path) -> Tuple[CurveBook, JobRun, StateStore]:
    """What a restarted manager does (Manager._recover): the advisor rebuilt from the stored progress."""
    store = StateStore(path, create=False)
    book = new_book(store)
    (row,) = store.jobs()
    run = JobRun(row, running=row.configuration)
    for p in store.progress():
        book.replay_record(run, p)
    return book, run, store


@settings(max_examples=10, deadline=None)
@given(steps=steps_strategy, cut=st.integers(0, 3))
def test_a_restarted_manager_rebuilds_the_same_costs(tmp_path_factory, steps, cut):
    steps = distinct(steps)
    path = tmp_path_factory.mktemp("restart") / "state.db"
    store = StateStore(path)
    book = new_book(store)
    run = make_run(store)
    drive(book, run, steps)
    if cut:  # killed during a rescale: its overhead not measured yet
        book.record(run, steps[-1][0] + cut, time_s=run.advisor_time + 1.0, method=INPLACE)
    run.machine.start(["n0"], 1)
    before = (book.advisor.save(), book.cost_status(run), book.methods)
    store.close()
    book2, run2, store2 = rebuilt(path)
    run2.machine.start(["n0"], 1)
    assert (book2.advisor.save(), book2.cost_status(run2), book2.methods) == before
    store2.close()


# Schema version 2, as libbft wrote it before progress records carried the rescale method.
V2_SCHEMA = """
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE jobs (
  id TEXT PRIMARY KEY, seq INTEGER NOT NULL UNIQUE, script TEXT NOT NULL, args TEXT NOT NULL,
  cwd TEXT NOT NULL, python TEXT NOT NULL, min_nodes INTEGER NOT NULL, max_nodes INTEGER NOT NULL,
  work REAL, curve TEXT, secret TEXT NOT NULL, state TEXT NOT NULL, reason TEXT NOT NULL DEFAULT '',
  retries INTEGER NOT NULL DEFAULT 0, max_retries INTEGER NOT NULL, generation INTEGER NOT NULL DEFAULT 0,
  samples REAL NOT NULL DEFAULT 0, submitted_s REAL NOT NULL, started_s REAL, finished_s REAL,
  configurations TEXT, configuration TEXT NOT NULL DEFAULT 'full');
CREATE TABLE progress (
  job TEXT NOT NULL, generation INTEGER NOT NULL, time_s REAL NOT NULL, nodes INTEGER NOT NULL,
  samples REAL NOT NULL, advisor_samples REAL NOT NULL, configuration TEXT NOT NULL DEFAULT 'full',
  configuration_samples REAL);
CREATE INDEX progress_job ON progress (job, time_s);
CREATE TABLE procs (
  id INTEGER PRIMARY KEY, job TEXT NOT NULL, generation INTEGER NOT NULL, node TEXT NOT NULL,
  pid INTEGER, started_s REAL NOT NULL, ended_s REAL, exit_code INTEGER);
CREATE TABLE events (
  id INTEGER PRIMARY KEY, time_s REAL NOT NULL, kind TEXT NOT NULL, job TEXT, node TEXT,
  detail TEXT NOT NULL DEFAULT '{}');
PRAGMA application_id = 1111905362;
PRAGMA user_version = 2;
"""


def test_a_version_2_state_file_is_upgraded_and_its_rescales_count_as_relaunches(tmp_path):
    # The progress of a job that grew 2 -> 4 under a version-2 manager (every rescale a relaunch).
    reference = StateStore(tmp_path / "reference.db")
    book = new_book(reference)
    drive(book, make_run(reference, RELAUNCH), [(2, RELAUNCH, False), (4, RELAUNCH, False)])
    rows = [tuple(p)[:-1] for p in reference.progress()]  # without the method column
    reference.close()
    path = tmp_path / "state.db"
    db = sqlite3.connect(path)
    db.executescript(V2_SCHEMA)
    db.execute("INSERT INTO jobs (id, seq, script, args, cwd, python, min_nodes, max_nodes, secret, state, "
               "max_retries, submitted_s) VALUES ('job', 1, '/s.py', '[]', '/', '/py', 1, 16, '00', 'queued', 2, 0)")
    db.executemany("INSERT INTO progress VALUES (?, ?, ?, ?, ?, ?, ?, ?)", rows)
    db.commit()
    db.close()
    book, run, store = rebuilt(path)
    assert store.db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION == 6
    assert store.job("job").resize == ""  # the manager's method (it fixes it when it starts)
    assert {p["method"] for p in store.progress()} == {RELAUNCH}
    assert book.method_costs(run, RELAUNCH) == pytest.approx((24.0, 4.0), rel=1e-6)
    assert book.cost_status(run)[INPLACE]["measured_ups"] == 0
    store.close()


def _intake_run(store: StateStore, resize: str):
    """(book, run, send): a job whose reports reach `book` through a ReportIntake (runtime_util)."""
    book = new_book(store)
    _, run, send = runtime_util.reporting_job(store, book, resize, max_nodes=JOB_MAX_NODES)
    return book, run, send


def test_a_relaunch_is_measured_though_the_stopping_generation_reports_at_its_old_size(tmp_path):
    """The old generation's last reports (a checkpoint at the next step, the last count at exit) come
    after the decision recorded the new size: they are progress, not a rescale back to the old size,
    which left every relaunch unmeasured (a rescale before the previous one was measured is not)."""
    store = StateStore(tmp_path / "state.db")
    book, run, send = _intake_run(store, RELAUNCH)
    run.machine.start(["n0", "n1"], 1)
    t = time.time()
    book.launched(run, 2)
    seq, samples = 0, 0.0
    for _ in range(30):  # 2 nodes, 200 samples/s
        seq, t, samples = seq + 1, t + 2.0, samples + 400.0
        send(1, seq, 2, samples, t)
    run.machine.resize(["n0", "n1", "n2", "n3"], 0.0, in_place=False)  # grow to 4 by relaunch (JobLifecycle.apply)
    book.record(run, 4, time_s=t, method=RELAUNCH)
    send(1, seq + 1, 2, samples + 100.0, t + 0.5)  # its last step, flushed as it exits
    for node in ("n0", "n1"):
        run.machine.exited(node, Exit.LEFT, code=75, now=1.0)
    run.machine.outcome(1.0, work_done=False)
    run.machine.start([f"n{k}" for k in range(4)], 2)
    run.row.generation, seq, samples = 2, 0, samples + 100.0
    run.last_seq.clear()
    book.launched(run, 4)
    t += 10.0  # the relaunch: no step for 10 s
    for _ in range(30):  # 4 nodes, 400 samples/s
        seq, t, samples = seq + 1, t + 2.0, samples + 800.0
        send(2, seq, 4, samples, t)
    costs = book.cost_status(run)[RELAUNCH]
    assert costs["measured_ups"] == 1
    assert 0.0 < costs["scale_up_s"] < 30.0
    store.close()


def test_an_in_place_shrink_is_measured_though_the_leaver_has_not_exited_yet(tmp_path):
    store = StateStore(tmp_path / "state.db")
    book, run, send = _intake_run(store, INPLACE)
    run.machine.start(["n0", "n1"], 1)
    t = time.time()
    book.launched(run, 2)
    seq, samples = 0, 0.0
    for _ in range(30):
        seq, t, samples = seq + 1, t + 2.0, samples + 400.0
        send(1, seq, 2, samples, t)
    run.machine.resize(["n0"], 0.0, in_place=True)  # shrunk in place to n0: n1 leaves at its next step
    run.row.generation = 2
    run.last_seq.clear()
    book.record(run, 1, time_s=t, method=INPLACE)
    for _ in range(30):  # the survivor reports in generation 2 while the leaver is still being reaped
        seq, t, samples = seq + 1, t + 2.0, samples + 200.0
        send(2, seq, 1, samples, t)
    assert book.cost_status(run)[INPLACE]["measured_downs"] == 1
    store.close()


@pytest.mark.parametrize("option", ["--inplace-scale-up-s", "--inplace-scale-down-s"])
def test_a_bad_in_place_default_cost_is_one_line_naming_the_option(tmp_path, option):
    r = bft("manager", "--state-dir", str(tmp_path / "state"), option, "-1")
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 2 and len(lines) == 1 and "Traceback" not in r.stderr, r.stderr
    assert f"{option}: expected a finite number >= 0, got -1" in lines[0], lines[0]


def test_costs_before_any_measurement_grow_with_the_state_the_job_reports(tmp_path):
    """A job that reports 1 GB of state is charged, until its own rescales are measured, the defaults
    plus what moving 1 GB costs: an in-place grow sends it to newcomers (a shrink moves nothing), a
    relaunch writes and reads it either way. A job that reports no size keeps the defaults."""
    store = StateStore(tmp_path / "state.db")
    book = new_book(store)
    intake, run, send = runtime_util.reporting_job(store, book, INPLACE)
    send(1, 1, 1, 10.0, 1e9)
    assert book.method_costs(run, INPLACE) == (0.9, 0.8) and book.method_costs(run, RELAUNCH) == (5.0, 4.0)
    report = protocol.Report("job", 1, 0, 2, 0, 1, False, 20.0, 1e9 + 1, state_bytes=10**9)
    intake.on_datagram(protocol.encode(report, bytes.fromhex(run.row.secret)), {"job": run}.get)
    assert book.method_costs(run, INPLACE) == pytest.approx((0.9 + 1e9 * INPLACE_S_PER_BYTE, 0.8))
    assert book.method_costs(run, RELAUNCH) == pytest.approx((5.0 + 1e9 * RELAUNCH_S_PER_BYTE,
                                                              4.0 + 1e9 * RELAUNCH_S_PER_BYTE))
    assert INPLACE_S_PER_BYTE > 0 and RELAUNCH_S_PER_BYTE > 0
    book.forget(run)
    assert book.method_costs(run, INPLACE) == (0.9, 0.8)


@pytest.mark.parametrize("next_nodes", [1, 0])
def test_a_resize_decided_between_two_reports_leaves_the_old_sizes_rate_as_measured(tmp_path, next_nodes):
    # Reports come every 0.5 s; a resize (or a stop) decided later than the last one must not count the
    # time since that report as time at the old size without progress: the next report carries what the
    # old size did meanwhile. In the chaos replay (bench/README.md) 0.45 s counted so, after 0.06 s of
    # steady steps, put a job's only measured size at an eighth of its rate, and it never ran again.
    store = StateStore(tmp_path / "state.db")
    run, book = make_run(store), new_book(store)
    start = time.time() - 60.0  # reports from the past, so that the decision's own clock is later
    book.record(run, 2, time_s=start, method=RELAUNCH)  # launched then
    for k in range(1, 21):
        run.advisor_samples = 2 * RATE * 0.5 * k
        book.record(run, 2, time_s=start + 0.5 * k)
    book.record(run, next_nodes, method=INPLACE)  # decided 50 s after the last report
    sizes = {s.nodes: s.samples_per_s for s in book.advisor.profile(run.id).sizes}
    assert sizes[2] == pytest.approx(2 * RATE, rel=0.01)
