"""Report intake: progress datagrams from the jobs' workers, authenticated, deduplicated and turned
into samples the curve book records. Also measures each resize's gap (last step at the old size ->
first step at the new one) from the reports around it.

Every datagram that is not believed is dropped and counted by kind (``DROP_KINDS``), which
``bft status --json`` shows: a flood of one kind says who is misbehaving.
"""

from __future__ import annotations

import collections
import time
from typing import Callable, Dict, Optional, Set

from ...train import protocol
from ..jobs.runs import JobRun
from ..statedb.store import StateStore
from .curvebook import CurveBook

# unknown_job: not ours or no such active job; bad_mac: forged or tampered; malformed: signed but
# unreadable or out of range; stale_generation: from a launch or worker round that has ended;
# replay: a sequence number already seen.
DROP_KINDS = ("unknown_job", "bad_mac", "malformed", "stale_generation", "replay")


class ReportIntake:
    def __init__(self, store: StateStore, book: CurveBook):
        self.store = store
        self.book = book
        self.dropped: Dict[str, int] = collections.Counter({kind: 0 for kind in DROP_KINDS})
        self._restored: Set[str] = set()  # jobs whose stored sequence numbers this intake has read

    @property
    def dropped_total(self) -> int:
        return sum(self.dropped.values())

    def _drop(self, kind: str) -> None:
        self.dropped[kind] += 1

    def on_datagram(self, data: bytes, find: Callable[[str], Optional[JobRun]]) -> None:
        """Takes one datagram; `find` maps a job id to its active run."""
        job = protocol.peek_job(data)
        run = find(job) if job else None
        if run is None:
            self._drop("unknown_job")
            return
        if run.id not in self._restored:
            self._restore(run)
        try:
            r = protocol.decode(data, bytes.fromhex(run.row.secret))
        except protocol.BadSignature:
            self._drop("bad_mac")
            return
        except ValueError:
            self._drop("malformed")
            return
        if r.job != job or (not r.all_ranks and r.rank != 0):
            self._drop("malformed")  # signed, yet inconsistent: not what our sender writes
            return
        if r.generation != run.row.generation or r.round < run.round:
            if run.resize_pending and r.generation < run.row.generation and not r.all_ranks:
                # The survivors' count while newcomers start (cumulative, never lowered): a script whose
                # work ends before they arrive is finished, not incomplete.
                run.row.samples = max(run.row.samples, r.samples)
            if not self._moves_gap_start(run, r):
                self._drop("stale_generation")  # a late datagram of a previous launch or of restarted workers
            return
        if r.round > run.round:  # torchrun restarted the workers (membership change): new processes
            run.round = r.round
            run.last_seq.clear()
            run.rank_samples.clear()
        if r.seq <= run.last_seq.get(r.rank, 0):
            self._drop("replay")
            return
        self._accept(run, r)

    def _moves_gap_start(self, run: JobRun, r: protocol.Report) -> bool:
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
            self.store.log_event("resize_gap", job=run.id, from_nodes=_nodes(run, start.world),
                                 to_nodes=_nodes(run, r.world), method=run.method, gap="resize",
                                 gap_s=r.time_s - start.time_s, nodeless_s=0.0, generation=r.generation)
        run.gap_start = r
        return True

    def _restore(self, run: JobRun) -> None:
        """What a previous manager believed of the job's current generation: its round and each rank's
        last sequence number. Without it, a report captured before a restart and replayed after it
        (sequence numbers were kept only in memory) was believed again."""
        self._restored.add(run.id)
        for row in self.store.report_seqs(run.id):
            if row["generation"] != run.row.generation or row["round"] < run.round:
                continue  # a generation or round that has ended: its reports are stale anyway
            if row["round"] > run.round:
                run.round = row["round"]
                run.last_seq.clear()
            run.last_seq[row["rank"]] = max(run.last_seq.get(row["rank"], 0), row["seq"])

    def _accept(self, run: JobRun, r: protocol.Report) -> None:
        run.reported_at = time.monotonic()
        run.silent = False
        run.last_seq[r.rank] = r.seq
        self.store.set_report_seq(run.id, rank=r.rank, generation=r.generation, round_=r.round, seq=r.seq)
        run.rank_samples[r.rank] = r.samples
        if r.state_bytes:
            self.book.state_bytes[run.id] = r.state_bytes
        samples = sum(v for k, v in run.rank_samples.items() if k < r.world) if r.all_ranks else r.samples
        prev = run.last_report
        start = run.gap_start
        if run.resize_pending and start is not None and (start.generation, start.round) == (r.generation, r.round):
            # The old size trains on until its processes stop (a checkpoint at the next step, the last
            # report at exit): the gap is counted from its last step, not from the decision.
            run.gap_start = r
        elif run.resize_pending and prev is not None and (prev.generation, prev.round) != (r.generation, r.round):
            start, run.gap_start, run.resize_pending = run.gap_start, None, False
            nodeless_s, run.nodeless_s = run.nodeless_s, 0.0
            grow = self.book.grows.first_step(run.id, r.time_s)  # its newcomers' start, warm or cold
            if start is not None:
                # "resize": straight from the old size to the new (the same size too: a node given and
                # taken back within one resize costs a gap all the same); "restart": the job held no
                # nodes for a while in between, which is waiting, not the resize's cost, left out of gap_s.
                self.store.log_event("resize_gap", job=run.id, from_nodes=_nodes(run, start.world),
                                     to_nodes=_nodes(run, r.world), method=run.method,
                                     gap="restart" if nodeless_s > 0 else "resize",
                                     gap_s=r.time_s - start.time_s - nodeless_s, nodeless_s=nodeless_s, **grow)
        run.last_report = r
        now = max(r.time_s, run.advisor_time)
        if samples + run.advisor_offset < run.advisor_samples:
            # Resumed from a checkpoint older than the last report: the advisor's count stays monotone.
            run.advisor_offset = run.advisor_samples - samples
        run.advisor_samples = samples + run.advisor_offset
        run.recent.append((now, samples))
        run.row.samples = samples
        # Every report is stored (those that arrive together in one commit): after kill -9 the next
        # manager knows every count a job reported, or gets the rest from the keeper. A resize told
        # the advisor the new size when it was decided: the last reports of a generation being
        # stopped, and those that come while leavers of an in-place shrink exit, do not undo it.
        run.machine.progress(r.generation, time.monotonic())
        if run.machine.retries < run.row.retries:  # healthy training forgave a counted failure
            run.row.retries = run.machine.retries
            self.store.update_job(run.id, retries=run.row.retries)
            self.store.log_event("retry_forgiven", job=run.id, retries=run.row.retries)
        live = len(run.machine.live)
        self.book.record(run, self.book.advisor_nodes(run) if run.stop_reason else live or _nodes(run, r.world),
                         time_s=now)


def _nodes(run: JobRun, world: int) -> int:
    """The nodes a report's world size spans: a node runs the job's processes per node (the allocator,
    the advisor and the gap events count nodes)."""
    return world // max(1, run.row.procs_per_node)


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
