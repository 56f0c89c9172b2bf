"""The decider: the allocator's problem in, each job's new nodes and configuration out.

It asks ``bft.allocate`` (the same call ``bft replay`` and a C++ scheduler make) for a node-to-job
map over the idle pool, with the jobs as the curve book sees them, and notices when a learned curve
has moved enough since the last decision to decide again. It starts and stops nothing: the job
lifecycle applies what it returns.

A growing job takes the free nodes with a warm standby first, and a shrinking job keeps the nodes
whose workers hold its state: the allocator gives free nodes out lowest id first and a shrinking job
keeps its lowest ids (docs/alloc.md; node_milp chooses its own), so each decision numbers the pool's
nodes members of a running generation first, then warm ones (in the order they first joined
otherwise). A grow's newcomers still on their way come after the members: a shrink decided meanwhile
drops them, not the survivors (keeping newcomers and dropping every member was a relaunch from the
checkpoint: a 9.9-s gap in the chaos replay). A job's grow is charged a cold start where it must take
more nodes than there are free warm ones (:mod:`.growstarts`).
"""

from __future__ import annotations

import collections
import heapq
import time
from dataclasses import dataclass
from typing import Any, Collection, Deque, Dict, Iterable, List, Optional, Sequence, Set, Tuple

from ... import alloc, sim
from ..jobs.resize import Stop
from ..jobs.runs import JobRun
from ..statedb.schema import ACTIVE_STATES
from ..statedb.store import StateStore
from .curvebook import CurveBook, configuration_name
from .growstarts import FreeNodes


@dataclass
class Placement:
    """What the allocator decided for one job."""

    run: JobRun
    nodes: List[str]  # sorted
    configuration: str


class Decider:
    def __init__(self, book: CurveBook, store: StateStore, *, policy: str, tfwd_s: float, max_jobs: int,
                 curve_change: float):
        self.book = book
        self.store = store
        self.policy = policy
        self.tfwd_s = tfwd_s
        self.max_jobs = max_jobs
        self.curve_change = curve_change
        self.joined = alloc.NodeNames()  # node -> its place in the order the nodes first joined
        self.latencies_s: Deque[float] = collections.deque(maxlen=1000)  # event arrival -> map decided
        self.compute_s: Deque[float] = collections.deque(maxlen=1000)  # of which deciding (curves, allocator)
        self.decisions = 0
        # The jobs the last decision left out, and why: the allocator refuses each on its own (a learned
        # curve or a measured rescale cost beyond its limits). The manager fails those without agents.
        self.refused: List[Tuple[JobRun, str]] = []

    def admitted(self, runs: Iterable[JobRun]) -> List[JobRun]:
        """The jobs the allocator may give nodes: the oldest `max_jobs` active ones, silent jobs last
        (submission order otherwise, also after a restart: `seq` is stored)."""
        active = (r for r in runs if r.row.state in ACTIVE_STATES and r.machine.reason is not Stop.CANCEL)
        return heapq.nsmallest(self.max_jobs, active, key=lambda r: (r.silent, r.row.seq))  # of 1,000 queued

    def decide(self, runs: Sequence[JobRun], pool: Iterable[str], arrived: float, *,
               warm: Collection[str] = ()) -> Optional[List[Placement]]:
        """A new placement of every admitted job in `runs` on the idle `pool`, or None if the allocator
        failed (the current map then stays). `arrived` (monotonic) is when the first event behind
        this decision came in: the latency counts from there. `warm`: the nodes with a warm standby."""
        self.refused = []
        if not runs:
            return []
        began = time.monotonic()
        pool = list(pool)
        self.book.update_priors(runs)
        top = max(1, len(pool))
        share = fair_share(len(pool), len(runs))
        in_pool, with_standby = set(pool), set(warm)
        free = in_pool.difference(n for run in runs for n in run.target)
        free_nodes = FreeNodes(count=len(free), warm=len(free & with_standby))
        jobs = [self.book.allocation_job(run, top, share, free=free_nodes) for run in runs]
        holding = {n for run in runs for n in run.machine.members}
        names = self._numbered(pool, with_standby, holding)
        ids = [names.find(n) for n in pool]
        current = {names.find(n): run.id for run in runs for n in run.target if n in in_pool}
        # completion_aware reads what each job still has to do (0: a job submitted without --samples).
        remaining = [max(run.row.work - run.row.samples, 1.0) if run.row.work else 0.0 for run in runs]
        try:
            result = self._allocate(jobs, ids, current, remaining)
        except ValueError:
            self.refused = self._refused_alone(runs, jobs)
            if not self.refused:
                raise  # not one job's fault: the manager logs it and the current map stays
            out = {run.id for run, _ in self.refused}
            keep = [k for k, run in enumerate(runs) if run.id not in out]
            runs, jobs, remaining = [runs[k] for k in keep], [jobs[k] for k in keep], [remaining[k] for k in keep]
            current = {node: job for node, job in current.items() if job not in out}
            result = self._allocate(jobs, ids, current, remaining)
        if result.status == alloc.AllocationStatus.FAILED:
            self.store.log_event("allocation_failed", policy=self.policy, message=result.message)
            return None
        targets: Dict[str, List[str]] = {run.id: [] for run in runs}
        for node_id, job in result.map.items():
            targets[job].append(names.name(node_id))
        placements = [Placement(run, [], run.row.configuration) for run, _ in self.refused]  # stopped if running
        for k, (run, job) in enumerate(zip(runs, jobs)):
            job.configuration = int(result.configuration[k])
            run.decided_curve = _decided_values(job)
            placements.append(Placement(run, sorted(targets[run.id]), configuration_name(run, job.configuration)))
        self.decisions += 1
        self.latencies_s.append(time.monotonic() - arrived)
        self.compute_s.append(time.monotonic() - began)
        return placements

    def _numbered(self, pool: List[str], warm: Set[str], holding: Set[str]) -> Any:
        """The allocator's ids of the pool's nodes for one decision: the members of a running generation
        first (a shrinking job keeps them before its newcomers), then those with a warm standby (a
        growing job takes them first; no node a job runs on has one), then the others; each group in
        the order its nodes first joined (among its members a shrinking job keeps those, as it always
        did)."""
        for node in pool:
            self.joined.intern(node)
        names = alloc.NodeNames()
        for node in sorted(pool, key=lambda n: (n not in holding, n not in warm, self.joined.find(n))):
            names.intern(node)
        return names

    def _allocate(self, jobs: List[Any], ids: List[int], current: Dict[int, str], remaining: List[float]) -> Any:
        # A MILP policy solves in a child process under a time limit: a solver crash or a hard instance
        # costs one decision, never the manager.
        milp = self.policy in alloc.MILP_SOLVERS
        # Of the inputs the policy declares, the manager supplies each job's remaining samples; it does
        # not predict how long its nodes stay idle, so a policy reading that decides as if it were
        # unknown (lifetime_aware as exact): the event log says so at the first decision.
        missing = [name for name in alloc.policy_inputs(self.policy) if name != "remaining_samples"]
        if missing and self.decisions == 0:
            self.store.log_event("policy_inputs_missing", policy=self.policy, inputs=missing)
        return alloc.allocate(jobs, ids, current, tfwd=self.tfwd_s, solver=self.policy, isolate=milp,
                              time_limit_s=sim.DEFAULT_MILP_TIME_LIMIT_S if milp else None,
                              remaining_samples=remaining)

    def _refused_alone(self, runs: Sequence[JobRun], jobs: List[Any]) -> List[Tuple[JobRun, str]]:
        """The jobs the allocator refuses even alone, each with its reason (logged): what Problem::IsValid
        checks needs no solver, so each is tried on an empty pool with the cheapest one. None if the
        problem fails without any job (its horizon): that is no job's fault."""
        try:
            alloc.allocate([], [], {}, tfwd=self.tfwd_s, solver="equal_share")
        except ValueError:
            return []
        refused = []
        for run, job in zip(runs, jobs):
            try:
                alloc.allocate([job], [], {}, tfwd=self.tfwd_s, solver="equal_share")
            except ValueError as e:
                reason = f"the allocator refuses the job as the manager sees it now: {e}"
                self.store.log_event("job_refused", job=run.id, reason=reason)
                refused.append((run, reason))
        return refused

    def curve_moved(self, runs: Sequence[JobRun], pool_size: int, now: float) -> Optional[str]:
        """The first of the admitted `runs` whose curve, as the allocator would see it now, moved by
        more than `curve_change` since its last decision (a new decision is due), else None."""
        self.book.update_priors(runs)
        top = max(1, pool_size)
        share = fair_share(pool_size, len(runs))
        for run in runs:
            if run.decided_curve is None or run.resize_pending or now - run.last_curve_check_s < 1.0:
                continue  # (a job in the middle of a resize has no steady rate to compare yet)
            run.last_curve_check_s = now
            values = _decided_values(self.book.allocation_job(run, top, share))
            if len(values) != len(run.decided_curve) or any(
                    abs(a - b) > self.curve_change * max(abs(b), 1e-9) for a, b in zip(values, run.decided_curve)):
                return run.id
        return None

    def latency_p50_s(self) -> Optional[float]:
        lat = sorted(self.latencies_s)
        return lat[len(lat) // 2] if lat else None

    def latency_summary_s(self) -> Dict[str, Optional[float]]:
        """p50, p99 and max of the last 1,000 decisions' latencies, and the p99 and max of the time spent
        deciding itself (curves, allocator), apart from waiting behind other events (bench/load_bench.py
        reads them)."""
        lat, compute = sorted(self.latencies_s), sorted(self.compute_s)
        return {"p50": self.latency_p50_s(), "p99": _p99(lat), "max": lat[-1] if lat else None, "count": len(lat),
                "compute_p99": _p99(compute), "compute_max": compute[-1] if compute else None}


def _p99(ordered: List[float]) -> Optional[float]:
    return ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))] if ordered else None


def fair_share(pool_size: int, jobs: int) -> int:
    """The nodes of the pool per admitted job (at least 1): an unproven job's first probe size."""
    return max(1, pool_size // max(1, jobs))


def _decided_values(job: Any) -> List[float]:
    """The throughput curve of the configuration a job runs in, as the allocator saw it: a decision
    is taken again once it moves by more than curve_change."""
    c = job.configuration
    return list((job.throughput if c == 0 else job.configurations[c - 1].throughput).values)
