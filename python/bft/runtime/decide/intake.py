"""Report intake: progress datagrams from the jobs' workers, authenticated, deduplicated and turned
into samples the curve book records; each resize's gap is measured from the reports it believes by
the gap meter (:mod:`..jobs.resize.gaps`). It owns a job's report sequence (``round``, ``last_seq`` and its
``seq_generation``, ``rank_samples``) and whether it reports (``reported_at``, ``silent``): jobs/runs.py OWNERS.

Every datagram that is not believed is dropped and counted by kind (``DROP_KINDS``), which
``bft status --json`` shows: a flood of one kind says who is misbehaving.
"""

from __future__ import annotations

import collections
import time
from typing import Callable, Dict, Optional, Set

from ...train import protocol
from ..jobs.resize import gaps
from ..jobs.runs import JobRun, commit_retries
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
            if not gaps.moves_gap_start(run, r, self.store):
                self._drop("stale_generation")  # a late datagram of a previous launch or of restarted workers
            return
        if r.round > run.round:  # torchrun restarted the workers (membership change): new processes
            run.round = r.round
            run.last_seq.clear()
            run.rank_samples.clear()
        if r.generation != run.seq_generation:
            # Published in place, a generation keeps its processes but not their ranks: a survivor that
            # takes rank 0 sends with a count of its own, lower than the old rank 0's. Its sequence
            # numbers start afresh (the old generation's datagrams are stale by their generation).
            run.seq_generation = r.generation
            run.last_seq.clear()
        if r.seq <= run.last_seq.get(r.rank, 0):
            self._drop("replay")
            return
        self._accept(run, r)

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
            run.seq_generation = row["generation"]
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
        gaps.report_accepted(run, r, self.store, self.book.grows.first_step)
        now = self.book.counted(run, samples, r.time_s)
        run.row.samples = samples
        # Every report is stored (those that arrive together in one commit): after kill -9 the next
        # manager knows every count a job reported, or gets the rest from the keeper. A resize told
        # the advisor the new size when it was decided: the last reports of a generation being
        # stopped, and those that come while leavers of an in-place shrink exit, do not undo it.
        run.machine.progress(r.generation, time.monotonic())
        if run.machine.retries < run.row.retries:  # healthy training forgave a counted failure
            commit_retries(run, self.store)
            self.store.log_event("retry_forgiven", job=run.id, retries=run.row.retries)
        training = len(run.machine.training)  # (a grow's newcomers on their way are not, yet)
        nodes = self.book.advisor_nodes(run) if run.stop_reason else training or run.nodes_spanned(r.world)
        self.book.record(run, nodes, time_s=now)


def generation_starts(run: JobRun) -> None:
    """A new generation of the job starts (every process new): its reports start a new round and new
    sequence numbers."""
    run.round = 0
    run.last_seq.clear()
    run.rank_samples.clear()


def judged_silent(run: JobRun) -> None:
    """The job ran too long without a report (the lifecycle judges it): silent until its next one."""
    run.silent = True
