"""The gap meter: what each resize costs the job in training time, measured from its reports (the
last step at the old size -> the first step at the new one) and logged as ``resize_gap`` events (the
accounting report's and the advisor's measured costs read them). The report intake hands it each
report it believes (:func:`report_accepted`) and each late one of an older generation
(:func:`moves_gap_start`); the lifecycle tells it when a resize begins (:func:`resize_begins`), when
a generation starts and when the job is left without nodes (waiting, which is no part of a gap).

It owns the job's ``gap_start``, ``resize_pending``, ``nodeless_since``, ``nodeless_s`` and
``last_report`` (jobs/runs.py OWNERS)."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, Dict

from ....train import protocol

if TYPE_CHECKING:  # the run's record imports this package (its resize machine)
    from ...statedb.store import StateStore
    from ..runs import JobRun


def resize_begins(run: JobRun, store: StateStore, *, in_place: bool = False) -> None:
    """Marks the start of a resize, so the intake measures its gap from the reports around it. In
    place, a second resize before the first step at the new size (two nodes reclaimed one after the
    other) is one gap: from the last step at the first size to the first step at the last. The start
    is logged too (a ``gap_start`` event): a manager killed before the first step at the new size
    leaves it to the one that adopts the job (``restore_gap_start``)."""
    if in_place and run.resize_pending:
        return
    last = run.last_report
    current = last is not None and (last.generation, last.round) == (run.row.generation, run.round)
    # A second resize before the first step at the new size makes the first one unmeasurable.
    run.gap_start = last if current and not run.resize_pending else None
    run.resize_pending = True
    run.nodeless_s = 0.0
    start = run.gap_start
    if start is None:
        store.log_event("gap_start", job=run.id, measured=False)
    else:
        store.log_event("gap_start", job=run.id, measured=True, generation=start.generation, round=start.round,
                        rank=start.rank, seq=start.seq, world=start.world, last_step_s=start.time_s)


def restore_gap_start(run: JobRun, store: StateStore) -> None:
    """For a job a restarted manager adopted: the start of a resize gap that the previous manager logged
    and had not closed with a ``resize_gap`` (it was killed between the decision and the first step at
    the new size), so that the first report at the new size measures it as if nothing had happened."""
    logged = store.events(("gap_start", "resize_gap"), job=run.id)
    if not logged or logged[-1]["kind"] != "gap_start" or not logged[-1]["measured"]:
        return
    e = logged[-1]
    run.gap_start = run.last_report = protocol.Report(
        job=run.id, generation=e["generation"], round=e["round"], seq=e["seq"], rank=e["rank"], world=e["world"],
        all_ranks=False, samples=0.0, time_s=e["last_step_s"])
    run.resize_pending = True


def moves_gap_start(run: JobRun, r: protocol.Report, store: StateStore) -> bool:
    """In place, the survivors train on at the old size until the newcomers are ready: a later report
    of the old generation marks where the resize's gap begins. It is not progress for the advisor
    (counts are cumulative: the next report of the new generation carries it). So does the first step of a
    generation published since (the survivors of a lost worker train in the shrink's generation
    while the grow that followed it starts its newcomers): that generation's own gap is logged."""
    start = run.gap_start
    if not (run.resize_pending and start is not None and r.round == start.round
            and start.generation <= r.generation < run.row.generation):
        return False
    if r.generation == start.generation:
        if r.rank != start.rank or r.seq <= start.seq:
            return False
    else:
        store.log_event("resize_gap", job=run.id, from_nodes=run.nodes_spanned(start.world),
                        to_nodes=run.nodes_spanned(r.world), method=run.method, gap="resize",
                        gap_s=r.time_s - start.time_s, nodeless_s=0.0, generation=r.generation)
    run.gap_start = r
    return True


def report_accepted(run: JobRun, r: protocol.Report, store: StateStore, first_step: Any) -> None:
    """A report of the job's current generation was believed: the old size's later steps move the
    gap's start; the first step at the new size closes the gap and logs it. `first_step(job, time_s)`
    is the grow-start timer's (its newcomers' start, warm or cold: fields of the event)."""
    prev = run.last_report
    start = run.gap_start
    if run.resize_pending and start is not None and (start.generation, start.round) == (r.generation, r.round):
        # The old size trains on until its processes stop (a checkpoint at the next step, the last
        # report at exit): the gap is counted from its last step, not from the decision.
        run.gap_start = r
    elif run.resize_pending and prev is not None and (prev.generation, prev.round) != (r.generation, r.round):
        start, run.gap_start, run.resize_pending = run.gap_start, None, False
        nodeless_s, run.nodeless_s = run.nodeless_s, 0.0
        grow: Dict[str, Any] = first_step(run.id, r.time_s)  # its newcomers' start, warm or cold
        if start is not None:
            # "resize": straight from the old size to the new (the same size too: a node given and
            # taken back within one resize costs a gap all the same); "restart": the job held no
            # nodes for a while in between, which is waiting, not the resize's cost, left out of gap_s.
            store.log_event("resize_gap", job=run.id, from_nodes=run.nodes_spanned(start.world),
                            to_nodes=run.nodes_spanned(r.world), method=run.method,
                            gap="restart" if nodeless_s > 0 else "resize",
                            gap_s=r.time_s - start.time_s - nodeless_s, nodeless_s=nodeless_s, **grow)
    run.last_report = r


def generation_starts(run: JobRun) -> None:
    """A new generation starts: the time the job held no nodes before it is left out of its gap."""
    if run.nodeless_since is not None:
        run.nodeless_s += time.time() - run.nodeless_since
        run.nodeless_since = None


def nodeless(run: JobRun) -> None:
    """The job's generation ended and it holds no nodes: it waits from now (wall clock)."""
    run.nodeless_since = time.time()
