"""The manager's parts on their own, without processes: the decider and curve book (probing of
unmeasured jobs, silent jobs, the queue's order) and report intake (resize gaps, dropped datagrams by
kind). Fast: no torch, no manager process."""

from __future__ import annotations

import os
import signal
import time

import pytest

from bft import alloc, curve
from bft.runtime.decide.curvebook import CurveBook
from bft.runtime.decide.decider import Decider, fair_share
from bft.runtime.decide.intake import ReportIntake
from bft.runtime.jobs.resize.gaps import resize_begins, restore_gap_start
from bft.runtime.jobs.runs import JobRun
from bft.runtime.options import ManagerOptions
from bft.runtime.statedb.store import StateStore
from bft.train import protocol
from runtime_util import make_run, reporting_job

NODES = [f"n{k}" for k in range(4)]



def measure(book: CurveBook, run: JobRun, rates: dict, minutes: int = 5) -> None:
    """Feeds the advisor what a job reporting at each size would: `rates` maps nodes -> samples/s."""
    t = run.advisor_time or time.time() - 3600
    profile = book.advisor.profile(run.id) if book.advisor.has_job(run.id) else None
    samples = profile.cumulative_samples if profile is not None else 0.0
    for nodes, rate in rates.items():
        book.advisor.report(run.id, t, nodes, samples)
        for _ in range(minutes * 6):
            t += 10
            samples += 10 * rate
            book.advisor.report(run.id, t, nodes, samples)
    run.advisor_time = t


def decide(decider: Decider, runs, pool=NODES):
    placements = decider.decide(decider.admitted(runs), pool, time.monotonic())
    for p in placements:
        p.run.machine.place(p.nodes)
    return {p.run.id: p.nodes for p in placements}


def test_an_unmeasured_job_is_probed_on_its_fair_share_not_given_every_node(store):
    book = CurveBook(store, warmup_s=0.0, scale_up_s=5.0, scale_down_s=5.0)
    decider = Decider(book, store, policy="exact", tfwd_s=10.0, max_jobs=10, curve_change=0.15)
    measured = make_run(store, "measured")
    # Sublinear: its best per-node rate (1 node) is what the optimistic prior gives a new job at every size.
    measure(book, measured, {1: 1000.0, 2: 1500.0, 4: 2000.0})
    measured.machine.place(list(NODES))
    new = make_run(store, "new", max_nodes=4)
    got = decide(decider, [measured, new])
    assert len(got["new"]) <= fair_share(len(NODES), 2) == 2
    assert len(got["measured"]) >= 2  # the unproven prior never takes every node of a measured job
    assert book.probe_limit(new, 2) == 2


def test_a_probe_grows_as_far_as_the_advisor_extrapolates_until_a_curve_is_fitted(store):
    book = CurveBook(store, warmup_s=0.0, scale_up_s=5.0, scale_down_s=5.0)
    run = make_run(store, "job", max_nodes=64)
    assert book.probe_limit(run, fair_share=3) == 3  # nothing measured: its fair share
    measure(book, run, {2: 500.0})
    assert book.probe_growth == curve.AdvisorOptions().fit.extrapolation_limit > 1
    assert book.probe_limit(run, fair_share=3) == int(2 * book.probe_growth)
    measure(book, run, {4: 900.0, 8: 1500.0, 16: 2200.0})
    assert book.advisor.profile("job").fit.ok
    assert book.probe_limit(run, fair_share=3) is None  # proven: the allocator decides freely


def test_a_speedup_book_values_each_job_over_its_own_one_node_rate_as_the_replay_does(store):
    book = CurveBook(store, warmup_s=0.0, scale_up_s=5.0, scale_down_s=5.0, objective="speedup")
    learned = make_run(store, "learned", max_nodes=8)
    measure(book, learned, {2: 500.0, 4: 900.0, 8: 1500.0})
    job = book.allocation_job(learned, top=8)
    speedup = book.advisor.curves("learned", 8, curve.Objective.SPEEDUP)
    assert list(job.objective.values) == list(speedup.objective.values)
    assert list(job.throughput.values) == list(book.advisor.curves("learned", 8).throughput.values)
    given = make_run(store, "given", max_nodes=4)
    given.row.curve = {"nodes": [1, 2, 4], "throughput": [100.0, 180.0, 300.0]}
    assert list(book.allocation_job(given, top=4).objective.values) == [1.0, 1.8, 3.0]
    with pytest.raises(ValueError, match="objective 'speed': expected throughput or speedup"):
        CurveBook(store, warmup_s=0.0, scale_up_s=5.0, scale_down_s=5.0, objective="speed")


def test_a_new_job_of_a_script_starts_from_the_shape_its_predecessor_measured(store):
    book = CurveBook(store, warmup_s=0.0, scale_up_s=5.0, scale_down_s=5.0)
    first = make_run(store, "first", max_nodes=8)
    book.update_priors([first])
    measure(book, first, {1: 1000.0, 2: 1600.0, 4: 2400.0})
    second = make_run(store, "second", max_nodes=8)  # the same script (runtime_util.make_run)
    book.update_priors([first, second])
    assert book.advisor.profile("second").model == first.row.script
    # Nothing measured of its own: its siblings' sublinear curve, not the linear prior.
    estimate = book.advisor.throughput_estimate("second", 4)
    assert estimate(4) / estimate(1) < 3.0


def test_a_silent_job_gets_only_nodes_no_other_job_can_use(store):
    book = CurveBook(store, warmup_s=0.0, scale_up_s=5.0, scale_down_s=5.0)
    decider = Decider(book, store, policy="exact", tfwd_s=10.0, max_jobs=10, curve_change=0.15)
    silent = make_run(store, "silent", max_nodes=4)
    silent.silent = True
    silent.machine.place(list(NODES))  # it held every node when it was found silent
    reporting = make_run(store, "reporting", max_nodes=3)
    measure(book, reporting, {1: 100.0, 2: 190.0, 3: 270.0})
    got = decide(decider, [silent, reporting])
    assert len(got["reporting"]) == 3
    assert len(got["silent"]) <= 1  # what is left over
    assert book.curve_source(silent) == "silent"
    # Behind every reporting job for admission, whatever its age.
    decider = Decider(book, store, policy="exact", tfwd_s=10.0, max_jobs=1, curve_change=0.15)
    assert [r.id for r in decider.admitted([silent, reporting])] == ["reporting"]


def test_the_queue_keeps_its_order_after_a_restart(tmp_path):
    path = tmp_path / "state.db"
    store = StateStore(path)
    for name in ("first", "second", "third"):
        make_run(store, name)
    store.close()
    store = StateStore(path)  # a restarted manager
    runs = [JobRun(row) for row in reversed(store.jobs())]
    book = CurveBook(store, warmup_s=0.0, scale_up_s=5.0, scale_down_s=5.0)
    decider = Decider(book, store, policy="exact", tfwd_s=10.0, max_jobs=2, curve_change=0.15)
    assert [r.id for r in decider.admitted(runs)] == ["first", "second"]
    store.close()


def test_a_submitted_job_is_forced_to_the_disk_and_bookkeeping_is_not(store):
    """Bookkeeping commits survive the manager's crash without an fsync each; what bft submit
    acknowledges is synced before the answer (statedb/store.py's durability rule)."""
    statements = []
    store.db.set_trace_callback(statements.append)
    with store.transaction():
        store.log_event("join", node="n0")
    assert not any("wal_checkpoint" in s for s in statements)
    make_run(store, "job")
    commit = max(i for i, s in enumerate(statements) if s == "COMMIT")
    assert "wal_checkpoint" in statements[commit + 1]
    assert store.db.execute("PRAGMA synchronous").fetchone()[0] == 1  # NORMAL


def _book(store: StateStore) -> CurveBook:
    return CurveBook(store, warmup_s=0.0, scale_up_s=5.0, scale_down_s=5.0)


def test_a_resize_gap_leaves_out_the_time_the_job_held_no_nodes(store):
    intake, run, send = reporting_job(store, _book(store), "relaunch")
    t0 = time.time()

    def next_generation() -> None:  # as the job lifecycle starts one
        run.row.generation += 1
        run.last_seq.clear()

    send(1, 1, 2, 100.0, t0)
    resize_begins(run, store)
    run.nodeless_s = 30.0  # stopped, then no nodes for 30 s (the job lifecycle measures this)
    next_generation()
    send(2, 1, 1, 150.0, t0 + 34.0)
    (gap,) = store.events(("resize_gap",))
    assert gap["gap"] == "restart" and gap["gap_s"] == pytest.approx(4.0) and gap["nodeless_s"] == 30.0
    resize_begins(run, store)
    next_generation()
    send(3, 1, 2, 200.0, t0 + 40.0)
    assert store.events(("resize_gap",))[-1]["gap"] == "resize"
    assert store.events(("resize_gap",))[-1]["gap_s"] == pytest.approx(6.0)


def test_a_resize_gap_counts_from_the_old_sizes_last_step_not_from_the_decision(store):
    """The old generation trains on between the decision and its stop; its steps then are progress,
    not part of what the resize costs."""
    _, run, send = reporting_job(store, _book(store), "relaunch")
    t0 = time.time()
    send(1, 1, 2, 100.0, t0)
    resize_begins(run, store)  # decided at t0 + 0.4 s, say
    send(1, 2, 2, 110.0, t0 + 0.5)  # still training at the old size
    send(1, 3, 2, 115.0, t0 + 0.7)  # its last step, flushed as it exits
    run.row.generation += 1
    run.last_seq.clear()
    send(2, 1, 4, 120.0, t0 + 3.0)
    (gap,) = store.events(("resize_gap",))
    assert gap["from_nodes"] == 2 and gap["to_nodes"] == 4
    assert gap["gap_s"] == pytest.approx(2.3)


def test_a_resize_that_ends_at_the_size_it_began_still_has_its_gap_counted(store):
    """A node given and taken back within one resize (a burst): the job is back at its old size in a new
    generation, and the steps it missed meanwhile are a resize's cost like any other."""
    _, run, send = reporting_job(store, _book(store), "inplace")
    t0 = time.time()
    send(1, 1, 2, 100.0, t0)
    resize_begins(run, store)
    run.row.generation += 1
    run.last_seq.clear()
    send(2, 1, 2, 120.0, t0 + 1.5)
    (gap,) = store.events(("resize_gap",))
    assert (gap["from_nodes"], gap["to_nodes"], gap["gap"]) == (2, 2, "resize")
    assert gap["gap_s"] == pytest.approx(1.5)


def test_a_resize_gap_cut_by_a_manager_kill_is_measured_by_the_manager_that_adopts_the_job(store):
    """kill -9 between a resize's decision and its first step at the new size: the next manager knows
    the job from the store only, adopts its workers and measures the gap from the start the killed one
    logged. A gap already measured is not started again."""
    _, run, send = reporting_job(store, _book(store), "inplace")
    t0 = time.time()
    send(1, 1, 2, 100.0, t0)
    resize_begins(run, store)
    store.update_job(run.id, generation=2)
    # The manager dies here. Its successor:
    adopted = JobRun(store.job("job"))
    adopted.row.secret = run.row.secret
    restore_gap_start(adopted, store)
    intake = ReportIntake(store, _book(store))
    first = protocol.Report("job", 2, 0, 1, 0, 4, False, 130.0, t0 + 2.0)
    intake.on_datagram(protocol.encode(first, bytes.fromhex(adopted.row.secret)), {"job": adopted}.get)
    (gap,) = store.events(("resize_gap",))
    assert (gap["from_nodes"], gap["to_nodes"], gap["gap"]) == (2, 4, "resize")
    assert gap["gap_s"] == pytest.approx(2.0)
    again = JobRun(store.job("job"))
    restore_gap_start(again, store)
    assert not again.resize_pending and again.gap_start is None


def test_a_gap_made_unmeasurable_by_a_second_resize_is_not_restored_after_a_manager_kill(store):
    """Two resizes by relaunch before the first step at the new size: the first one's gap is not
    measured, and a manager killed then leaves nothing to restore (not the first resize's start)."""
    _, run, send = reporting_job(store, _book(store), "relaunch")
    send(1, 1, 2, 100.0, time.time())
    resize_begins(run, store)
    resize_begins(run, store)
    assert run.gap_start is None
    adopted = JobRun(store.job("job"))
    restore_gap_start(adopted, store)
    assert not adopted.resize_pending and adopted.gap_start is None


def test_an_in_place_gap_starts_at_the_survivors_last_step_at_the_old_size(store):
    """In place, the survivors train on in the old generation while the newcomers start: their last
    report of it starts the gap; it is no dropped datagram, and it is the job's count (a script whose
    work ends before the newcomers arrive is finished, not incomplete)."""
    intake, run, send = reporting_job(store, _book(store), "inplace")
    t0 = time.time()

    send(1, 1, 1, 100.0, t0)
    resize_begins(run, store)
    run.row.generation = 2  # published: the survivor still trains in generation 1 for a while
    run.last_seq.clear()
    send(1, 2, 1, 160.0, t0 + 3.0)
    send(1, 3, 1, 220.0, t0 + 6.0)
    assert run.row.samples == 220.0 and intake.dropped_total == 0
    send(2, 4, 2, 260.0, t0 + 6.5)
    (gap,) = store.events(("resize_gap",))
    assert gap["method"] == "inplace" and gap["gap_s"] == pytest.approx(0.5)
    assert run.row.samples == 260.0
    send(1, 5, 1, 230.0, t0 + 7.0)  # a late one of the old generation, now the resize is over
    assert intake.dropped["stale_generation"] == 1


def test_every_dropped_report_is_counted_by_kind(store):
    intake = ReportIntake(store, CurveBook(store, warmup_s=0.0, scale_up_s=5.0, scale_down_s=5.0))
    run = make_run(store, "job")
    run.row.secret = "ab" * 32
    run.row.generation = 2
    key = bytes.fromhex(run.row.secret)
    find = {"job": run}.get

    def report(generation: int = 2, seq: int = 1, samples: float = 1.0) -> bytes:
        return protocol.encode(protocol.Report("job", generation, 0, seq, 0, 1, False, samples, time.time()), key)

    datagrams = {
        "unknown_job": [b"not ours", protocol.encode(protocol.Report("other", 1, 0, 1, 0, 1, False, 1.0, 1e9), key)],
        "bad_mac": [report()[:-4] + b"beef", protocol.encode(protocol.Report("job", 2, 0, 1, 0, 1, False, 1.0, 1e9),
                                                             b"guessed")],
        "malformed": [protocol.encode(protocol.Report("job", 2, 0, 1, 0, 1, False, -5.0, 1e9), key)],
        "stale_generation": [report(generation=1)],
    }
    for d in [d for ds in datagrams.values() for d in ds]:
        intake.on_datagram(d, find)
    intake.on_datagram(report(seq=1), find)  # believed
    intake.on_datagram(report(seq=1, samples=99.0), find)  # the same sequence number again
    want = {kind: len(ds) for kind, ds in datagrams.items()}
    want["replay"] = 1
    assert dict(intake.dropped) == want and intake.dropped_total == sum(want.values())
    assert run.row.samples == 1.0


def test_the_keeper_holds_reports_while_no_manager_is_attached_and_outlives_it(tmp_path):
    """The keeper process on its own: the first and the newest report of each sender sent while no
    manager is attached reach the next one (garbage does not: the first marks where a resize's gap
    ended); the store stays up between managers; `stop` ends it and leaves nothing behind."""
    pytest.importorskip("torch", reason="the keeper hosts a torch TCPStore")
    import socket

    from bft.runtime.ops.keeper import INFO_NAME, SOCKET_NAME, KeeperLink, keeper_alive

    tmp_path.chmod(0o700)
    store = StateStore(tmp_path / "state.db")
    run = make_run(store, "job")
    store.update_job("job", secret="ab" * 32)
    store.close()
    first = KeeperLink(tmp_path, bind="127.0.0.1", store_port=0, report_port=0)
    assert not first.adopted
    pid, port = first.info["pid"], first.info["report_port"]
    try:
        first.conn.close()  # the manager dies
        time.sleep(1.0)  # the keeper's loop wakes on the close: what follows is held, not relayed

        def report(seq: int) -> bytes:
            return protocol.encode(protocol.Report(run.id, 0, 0, seq, 0, 1, False, 100.0 * seq, time.time()),
                                   bytes.fromhex("ab" * 32))

        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            for k in range(1, 4):
                s.sendto(report(k), ("127.0.0.1", port))
                s.sendto(b"garbage", ("127.0.0.1", port))
        time.sleep(1.0)  # the keeper reads them before the next manager attaches: held, not relayed
        second = KeeperLink(tmp_path, bind="127.0.0.1", store_port=0, report_port=0)
        assert second.adopted and second.info["pid"] == pid  # the same keeper, the same store
        received = second.datagrams()  # held: the first and the newest (all, if one came late and was relayed)
        seen = []
        while not seen or seen[-1] != b"3":  # the sequence number, the datagram's fifth field
            data = next(received)
            if data != b"garbage":  # relayed as it arrived: the manager drops and counts it
                seen.append(data.split(b" ")[4])
        assert seen == sorted(seen) and seen[0] == b"1" and seen[-1] == b"3"
        second.stop_keeper()
        assert not keeper_alive(pid, tmp_path)
    finally:  # a failed assertion must not leave the keeper running (it outlives managers on purpose)
        if keeper_alive(pid, tmp_path):
            os.kill(pid, signal.SIGKILL)
    assert not (tmp_path / INFO_NAME).exists() and not (tmp_path / SOCKET_NAME).exists()


def test_a_job_the_allocator_refuses_is_placed_nowhere_and_the_others_are_decided(store):
    # Issue 29: a curve at 9e14 samples/s (stored before submit capped it at the job format's limit)
    # and a learned one at 2e14 make tfwd_s x rate exceed the allocator's 1e15; the whole decision
    # used to fail with a ValueError that killed the manager.
    book = CurveBook(store, warmup_s=0.0, scale_up_s=5.0, scale_down_s=5.0)
    decider = Decider(book, store, policy="exact", tfwd_s=10.0, max_jobs=10, curve_change=0.15)
    given = make_run(store, "given")
    given.row.curve = {"nodes": [1, 4], "throughput": [9e14, 9e14]}
    book.set_prior(given)
    learned = make_run(store, "learned")
    measure(book, learned, {1: 2e14})
    good = make_run(store, "good")
    measure(book, good, {1: 100.0, 2: 190.0})
    got = decide(decider, [given, learned, good])
    assert got["given"] == [] and got["learned"] == [] and len(got["good"]) >= 1
    assert [(run.id, "9e+14" in reason) for run, reason in decider.refused] == [("given", True), ("learned", False)]
    assert all(reason.startswith("the allocator refuses the job as the manager sees it now: ")
               and "exceeds 1e+15" in reason for _, reason in decider.refused), decider.refused
    assert [e["job"] for e in store.events(["job_refused"])] == ["given", "learned"]
    # The next decision without them is an ordinary one: nothing is refused.
    decide(decider, [good])
    assert decider.refused == []


def test_a_decision_no_single_job_explains_still_raises_for_the_manager_to_log(store):
    book = CurveBook(store, warmup_s=0.0, scale_up_s=5.0, scale_down_s=5.0)
    decider = Decider(book, store, policy="exact", tfwd_s=0.0, max_jobs=10, curve_change=0.15)  # every job is fine
    with pytest.raises(ValueError, match="tfwd_s must be a finite number > 0"):
        decide(decider, [make_run(store, "a")])
    assert decider.refused == []


@pytest.mark.parametrize("field, value, flag", [
    ("tfwd_s", 0.0, "--tfwd: expected seconds in (0, 1000], got 0"),
    ("tfwd_s", 1e4, "--tfwd: expected seconds in (0, 1000], got 10000"),
    ("scale_up_s", 1e13, "--scale-up-s: expected seconds in [0, 1000], got 1e+13"),
    ("inplace_scale_down_s", 1001.0, "--inplace-scale-down-s: expected seconds in [0, 1000]"),
    ("report_timeout_s", float("nan"), "--report-timeout: expected a finite number >= 0"),
])
def test_manager_options_the_allocator_would_refuse_are_refused_naming_the_flag(field, value, flag):
    with pytest.raises(ValueError) as e:
        ManagerOptions(**{field: value}).check()
    assert str(e.value).startswith(flag), str(e.value)
    ManagerOptions(tfwd_s=alloc.MAX_HORIZON_S, scale_up_s=alloc.MAX_HORIZON_S).check()  # the limit itself is fine


def test_a_survivor_that_becomes_rank_0_in_place_is_believed_from_its_first_report(store):
    """An in-place shrink that drops rank 0: the survivor that takes rank 0 in the new generation has
    sent nothing as rank 1 (only rank 0 reports), so its sequence numbers start low. They are the new
    generation's, not replays of the old rank 0's: believed at once (they were dropped until they
    passed the old count, about 20 s in the chaos replay), while a repeat within the generation and
    the old generation's datagrams stay refused."""
    book = CurveBook(store, warmup_s=0.0, scale_up_s=5.0, scale_down_s=5.0)
    intake, run, send = reporting_job(store, book, "inplace")
    t0 = time.time()
    for seq in range(1, 40):  # generation 1's rank 0 (the node that leaves)
        send(1, seq, 2, 10.0 * seq, t0 + 0.5 * seq)
    run.row.generation = 2  # published in place: the survivor is rank 0 of a world of 1
    send(2, 1, 1, 400.0, t0 + 21.0)
    assert run.row.samples == 400.0 and intake.dropped["replay"] == 0
    send(2, 1, 1, 999.0, t0 + 21.5)  # the same datagram again
    send(1, 40, 2, 999.0, t0 + 22.0)  # the leaver's, late
    assert run.row.samples == 400.0
    assert intake.dropped["replay"] == 1 and intake.dropped["stale_generation"] == 1
