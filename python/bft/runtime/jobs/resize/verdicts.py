"""The resize machine's verdicts (a part of ``Machine``, :mod:`.machine`): when a generation that
ended may be judged, what becomes of its job (``Outcome``: relaunched, queued, backing off,
finished, failed, cancelled), and how failures are counted: a counted failure spends one of the
job's --max-retries and backs it off; healthy training forgives them."""

from __future__ import annotations

from .states import USER_STOPS, Exit, Outcome, Phase, Stop

# A failure is judged this long after it happened: the batch scheduler's word that it took the node
# (which explains the failure) may come a moment after the worker died.
FAILURE_SETTLE_S = 5.0
# Back-off before the relaunch that follows the n-th counted failure: BACKOFF_BASE_S * 2^(n-1), at most
# BACKOFF_MAX_S. A script that always fails spends its --max-retries in seconds, not for ever.
BACKOFF_BASE_S = 2.0
BACKOFF_MAX_S = 60.0
# Counted failures decay with healthy training: one is forgiven for every FORGIVE_AFTER_S of progress
# (reports) since the last counted one, so a long job is not failed for losses spread over its life.
# Only the time between reports at most HEALTHY_GAP_S apart counts as training.
FORGIVE_AFTER_S = 3600.0
HEALTHY_GAP_S = 60.0


class Verdicts:
    """The part of ``Machine`` that judges its generations and counts its failures (the machine's
    fields, :mod:`.machine`)."""

    def progress(self, generation: int, now: float) -> None:
        """A progress report of `generation` at `now`: the job trains, so an in-place failure after it is
        not counted as a retry (the outcome's rule), and its healthy training time grows (a counted
        failure is forgiven, and a lost worker forgotten, every `forgive_after_s` of it)."""
        if generation == self.generation:
            self.reported = True
            if self.progress_at is not None and 0.0 < now - self.progress_at <= HEALTHY_GAP_S:
                self.healthy_s += now - self.progress_at
            self.progress_at = now
            if self.healthy_s >= self.forgive_after_s:
                self.healthy_s, self.lost = 0.0, None
                if self.retries > 0:
                    self.retries -= 1
                    self.forgiven += 1

    def judgeable(self, now: float) -> bool:
        """True once every worker is gone and a failure (if any) has settled: `outcome` may be asked."""
        if self.workers or self.phase not in (Phase.STOPPING, Phase.STEADY, Phase.RESIZING):
            return False
        f = self.failure
        return (f is None or self.disturbed or self.completed or self.reason in USER_STOPS
                or now >= f.at + FAILURE_SETTLE_S)

    def outcome(self, now: float, work_done: bool) -> Outcome:
        """The verdict on the generation that has ended. `work_done`: the job reported all its work (it
        is finished, however its workers exited: it is never queued again)."""
        if self.workers:
            raise RuntimeError("outcome asked while workers run")
        reason, f = self.reason, self.failure
        self.phase, self.members = Phase.IDLE, []
        if self.completed or work_done:
            return self._end(Outcome.FINISHED, "the script finished" if self.completed else "its work is done")
        if reason is Stop.CANCEL:
            return self._end(Outcome.CANCELLED, "cancelled by the user")
        if f is not None and not self.disturbed and reason not in USER_STOPS:
            self.last_failure = f
            counted = f.kind is Exit.CRASHED or not self.reported
            what = f"exited with code {f.code}" if f.code is not None else f.detail or "failed"
            what = (f"the script {what}" if f.kind is Exit.CRASHED
                    else f"an in-place resize failed ({what} on {f.node})")
            if counted:
                self.retries += 1
                self.healthy_s = 0.0
                if self.retries > self.max_retries:
                    return self._end(Outcome.FAILED, f"{what} ({self.retries} attempts)")
                self.phase = Phase.BACKOFF
                self.deadline = now + min(BACKOFF_MAX_S, BACKOFF_BASE_S * 2 ** (self.retries - 1))
                return self._outcome(Outcome.BACKOFF, f"{what}; retry {self.retries} of {self.max_retries} "
                                                      f"in {self.deadline - now:g} s")
            return self._outcome(Outcome.RELAUNCH, f"{what}; relaunched from the last checkpoint (it had "
                                                   "trained: not counted)")
        if reason is Stop.SHUTDOWN:
            return self._outcome(Outcome.QUEUED, "the manager stops: queued for the next one")
        if not self.target:
            return self._outcome(Outcome.QUEUED, "preempted: its nodes were reclaimed" if self.disturbed
                                 else "the allocator gave its nodes to other jobs")
        if reason is Stop.RESIZE or reason is None:
            return self._outcome(Outcome.RELAUNCH, f"resize to {len(self.target)} nodes")
        detail = f" ({f.kind.value} on {f.node}, after a reclaim)" if f is not None else ""
        return self._outcome(Outcome.RELAUNCH, f"{reason.value}{detail}: relaunched on {len(self.target)} nodes")

    def may_start(self, now: float) -> bool:
        """Whether a new generation may start (its nodes aside)."""
        if self.phase is Phase.BACKOFF and self.deadline is not None and now >= self.deadline:
            self.phase, self.deadline = Phase.IDLE, None
        return self.phase is Phase.IDLE and not self.workers and self.reason not in USER_STOPS

    def _outcome(self, outcome: Outcome, words: str) -> Outcome:
        self.last_outcome, self.last_reason = outcome, words
        self.reason, self.failure = None, None
        self.completed = self.disturbed = self.reported = False
        return outcome

    def _end(self, outcome: Outcome, words: str) -> Outcome:
        self._outcome(outcome, words)
        self.phase = Phase.ENDED
        return outcome
