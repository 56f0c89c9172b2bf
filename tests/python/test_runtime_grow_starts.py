"""Churn only where it pays (issue 28, item 5): a growing job takes the free nodes with a warm standby
first; a grow's newcomers are timed (decision -> first step at the new size) apart, warm and cold,
per method; and a grow that must take a node without a standby is charged what a cold start costs
beyond a warm one. Without processes: fast, no torch."""

from __future__ import annotations

import time

import pytest

from bft import alloc
from bft.jobs import FULL_CONFIGURATION
from bft.runtime.decide.curvebook import INPLACE, RELAUNCH, CurveBook
from bft.runtime.decide.decider import Decider
from bft.runtime.decide.growstarts import COLD, COLD_EXTRA_S, WARM, FreeNodes, GrowStarts
from bft.runtime.jobs.resize.gaps import resize_begins
from bft.runtime.jobs.runs import NodeProcs
from bft.runtime.ops.status import unused_nodes
from bft.runtime.options import DEFAULTS
from bft.runtime.statedb.store import StateStore
from runtime_util import make_run, reporting_job

NODES = [f"n{k}" for k in range(6)]


def new_book(store: StateStore) -> CurveBook:
    return CurveBook(store, warmup_s=0.0, scale_up_s=5.0, scale_down_s=5.0)


def running_in_place(store: StateStore, nodes, max_nodes: int = 4):
    """A job resized in place, running generation 1 on `nodes`, as the lifecycle leaves it."""
    run = make_run(store, "job", max_nodes=max_nodes, resize=INPLACE)
    run.machine.start(list(nodes), 1)
    for n in nodes:
        run.machine.attach(n, NodeProcs(job="job", node=n, procs=[], rows=[]))
    return run


def test_a_growing_job_takes_the_free_nodes_with_a_warm_standby_first(store):
    book = new_book(store)
    decider = Decider(book, store, policy="exact", tfwd_s=100.0, max_jobs=10, curve_change=0.15)
    run = make_run(store, "job", max_nodes=3)
    run.row.curve = {"nodes": [1, 2, 3], "throughput": [100.0, 200.0, 300.0]}
    run.machine.place(["n0"])
    (placement,) = decider.decide([run], NODES, time.monotonic(), warm=["n5", "n3"])
    # (The allocator gives free nodes out lowest id first: without the warm ones first, n1 and n2.)
    assert placement.nodes == ["n0", "n3", "n5"]
    run.machine.place(placement.nodes)
    # A shrink keeps the nodes that joined first, as it did before standbys had any say.
    run.row.max_nodes = 2
    (placement,) = decider.decide([run], NODES, time.monotonic(), warm=["n1", "n2"])
    assert placement.nodes == ["n0", "n3"]


def test_a_shrink_decided_while_newcomers_start_keeps_the_members_that_hold_the_state(store):
    """A job trains on n4 and n5 and grows onto n0 and n1 (newcomers on their way, not yet members);
    a shrink to 2 decided meanwhile keeps n4 and n5, although n0 and n1 joined the pool first: the
    other way every member would leave, a relaunch from the checkpoint instead of a plain shrink."""
    decider = Decider(new_book(store), store, policy="exact", tfwd_s=100.0, max_jobs=10, curve_change=0.15)
    run = running_in_place(store, ["n4", "n5"], max_nodes=2)
    run.row.curve = {"nodes": [1, 2], "throughput": [100.0, 200.0]}
    run.machine.resize(["n4", "n5", "n0", "n1"], time.monotonic(), in_place=True)
    assert run.machine.members == ["n4", "n5"]
    (placement,) = decider.decide([run], NODES, time.monotonic())
    assert placement.nodes == ["n4", "n5"]


def test_while_a_grows_newcomers_start_the_advisor_hears_the_members_size(store):
    """Arrive first, then switch: while the newcomer on n1 starts, the member on n0 trains on alone, and
    its reports are progress at 1 node, not at the 2 the decision aims at (which made a grow look
    free and its two nodes as fast as one)."""
    book = new_book(store)
    intake, run, send = reporting_job(store, book, INPLACE)
    run.machine.start(["n0"], 1)
    t0 = time.time()
    send(1, 1, 1, 64.0, t0)
    run.machine.resize(["n0", "n1"], time.monotonic(), in_place=True)
    assert run.machine.pending == ["n1"] and run.training_nodes == 1
    book.rescale_begins(run, run.training_nodes, method=INPLACE)
    send(1, 2, 1, 128.0, t0 + 0.5)
    assert [p["nodes"] for p in store.progress()] == [1, 1, 1]


@pytest.mark.parametrize("free, warm, start", [(2, 0, COLD), (2, 1, COLD), (2, 2, WARM), (5, 3, WARM), (5, 2, COLD)])
def test_a_grow_that_needs_more_than_the_free_warm_nodes_is_charged_a_cold_start(store, free, warm, start):
    book = new_book(store)
    run = running_in_place(store, ["n0"], max_nodes=4)  # grows by 3 at most
    job = book.allocation_job(run, 6, 6, free=FreeNodes(count=free, warm=warm))
    extra = COLD_EXTRA_S if start == COLD else 0.0  # the default: nothing measured yet
    assert job.scale_up_s == pytest.approx(DEFAULTS.inplace_scale_up_s + extra)
    costs = book.cost_status(run)
    assert costs["charged"] == INPLACE and costs["grow_start"] == start
    assert costs["cold_extra_s"] == pytest.approx(extra)
    assert book.seen_by_allocator(run, FULL_CONFIGURATION)["grow_start"] == start  # the allocate event's
    assert costs["cold_start"] == {"extra_s": COLD_EXTRA_S, "measured": False, "grows": {WARM: 0, COLD: 0}}
    # A decision without a say on the free nodes (the curve check) keeps what the last one charged.
    assert book.allocation_job(run, 6, 6).scale_up_s == pytest.approx(job.scale_up_s)


def test_a_relaunch_is_never_charged_a_cold_start_on_top_its_costs_are_all_cold(store):
    book = new_book(store)
    run = make_run(store, "job", max_nodes=4, resize=RELAUNCH)
    run.machine.place(["n0"])
    assert book.allocation_job(run, 6, 6, free=FreeNodes(count=3, warm=0)).scale_up_s == pytest.approx(5.0)


def test_warm_and_cold_grows_are_measured_apart_per_method_and_their_difference_charged():
    grows = GrowStarts()
    for job, warm_flags, seconds in [("a", [True], 0.3), ("b", [True, False], 4.3), ("c", [False], 6.3),
                                     ("d", [True, True], 0.5)]:
        grows.begins(job, method=INPLACE, newcomers_warm=warm_flags, decided_s=100.0)
        assert grows.first_step(job, 100.0 + seconds)["start"] == (WARM if all(warm_flags) else COLD)
    assert grows.counts(INPLACE) == {WARM: 2, COLD: 2}
    assert grows.cold_extra_s(INPLACE) == (pytest.approx(5.3 - 0.4), True)
    assert grows.cold_extra_s(RELAUNCH) == (COLD_EXTRA_S, False)  # not measured for that method
    # A resize without newcomers (a shrink) measures nothing; a second resize before the first step
    # at the new size makes the first grow unmeasurable.
    grows.begins("e", method=INPLACE, newcomers_warm=[], decided_s=0.0)
    assert grows.first_step("e", 1.0) == {}
    grows.begins("f", method=INPLACE, newcomers_warm=[True], decided_s=0.0)
    grows.begins("f", method=INPLACE, newcomers_warm=[False], decided_s=1.0)
    assert grows.first_step("f", 9.0) == {}
    assert grows.counts(INPLACE) == {WARM: 2, COLD: 2}


def test_a_grows_start_is_in_its_resize_gap_event_and_a_restarted_manager_reads_it_back(store):
    book = new_book(store)
    intake, run, send = reporting_job(store, book, INPLACE)
    run.machine.start(["n0"], 1)
    run.machine.attach("n0", NodeProcs(job="job", node="n0", procs=[], rows=[]))
    t0 = time.time()
    send(1, 1, 1, 100.0, t0 - 1.0)
    for generation, node, standby in [(2, "n1", False), (3, "n2", True)]:
        resize_begins(run, store, in_place=True)  # the decision (the lifecycle's apply)
        run.machine.resize(sorted(run.node_procs) + [node], time.monotonic(), in_place=True)
        run.machine.attach(node, NodeProcs(job="job", node=node, procs=[], rows=[], standby=standby))
        book.rescale_begins(run, len(run.machine.target), method=INPLACE)
        run.machine.arrived(node)
        plan = run.machine.switch(time.monotonic())  # published once the newcomer has announced itself
        run.row.generation = plan.generation
        send(generation, generation, len(plan.members), 100.0 * generation, time.time() + 2.0)
    gaps = store.events(("resize_gap",))
    assert [g["start"] for g in gaps] == [COLD, WARM]
    assert all(g["start_s"] == pytest.approx(2.0, abs=0.5) for g in gaps)
    assert new_book(store).grows.counts(INPLACE) == {WARM: 1, COLD: 1}


def test_a_grow_that_falls_back_to_a_relaunch_is_not_measured_as_a_newcomers_start(store):
    book = new_book(store)
    run = running_in_place(store, ["n0"])
    run.machine.resize(["n0", "n1"], time.monotonic(), in_place=True)
    run.machine.attach("n1", NodeProcs(job="job", node="n1", procs=[], rows=[]))
    book.rescale_begins(run, 2, method=INPLACE)
    book.launched(run, 2)  # the in-place resize failed: every process starts anew
    assert book.grows.first_step("job", time.time()) == {}


def test_bft_status_says_an_idle_node_is_left_unused_where_the_grow_would_start_cold(store):
    book = new_book(store)
    run = running_in_place(store, ["n0"])
    book.allocation_job(run, 3, 3, free=FreeNodes(count=2, warm=0))
    why = unused_nodes(["n0", "n1", "n2"], {"n0"}, [run], decision_pending=False, tfwd_s=60.0, book=book)["why"]
    assert why.endswith("against its rescale cost (a cold start for job: more nodes than have a warm standby)")
    book.allocation_job(run, 3, 3, free=FreeNodes(count=2, warm=2))
    why = unused_nodes(["n0", "n1", "n2"], {"n0"}, [run], decision_pending=False, tfwd_s=60.0, book=book)["why"]
    assert why.endswith("against its rescale cost")


def test_a_cold_start_measured_in_a_hang_never_takes_the_charge_past_the_allocators_horizon(store):
    book = new_book(store)
    book.grows = GrowStarts([{"method": INPLACE, "start": WARM, "start_s": 0.2},
                             {"method": INPLACE, "start": COLD, "start_s": 5000.0}])
    run = running_in_place(store, ["n0"])
    job = book.allocation_job(run, 3, 3, free=FreeNodes(count=2, warm=0))
    assert job.scale_up_s == alloc.MAX_HORIZON_S
    assert alloc.allocate([job], ["n0", "n1", "n2"], {"n0": "job"}, tfwd=100.0).map  # not refused
