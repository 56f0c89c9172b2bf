"""The curve book: everything the manager knows of how fast each job trains.

It owns the profiling advisor (``curve.ProfilingAdvisor``, the same one ``bft replay`` learns with)
and its keys (one per job and configuration), the priors of jobs that have measured nothing yet, and
the progress records in the state database from which a restarted manager rebuilds the advisor
exactly. It answers one question for the decider: the job as the allocator should see it.

Unproven curves are probed, not trusted (MalleTrain's job profiling): until the advisor has fitted
a job's curve, the allocator may give it at most its fair share of the pool while it has measured
nothing, then at most twice the largest size it has measured. So an optimistic prior never takes
every node of a job whose curve is measured. A silent job (running without any progress report for
``report_timeout_s``) loses its prior: it is valued at a nominal rate with the lowest weight, so it
only gets nodes no other job can use.

Rescale costs are measured per method (``RESCALE_METHODS``): the lifecycle says how each rescale
was done (in place, or a relaunch: also an in-place resize that failed and fell back), the advisor
averages each method's costs apart, and the allocator is charged the costs of the method the job's
next rescale will use (in place for a running job whose method is ``inplace``, else a relaunch);
each method's defaults stand until the advisor has measured the job's own. Those defaults grow with
the job's state, as its workers report it (``bt.ElasticState.state_bytes``): a newcomer of an in-place
grow receives the whole state, and a relaunch writes it to a checkpoint and reads it back. An in-place
grow that must take a node without a warm standby is charged, on top, what a cold newcomer costs
beyond a warm one (:mod:`.growstarts`: measured, else a default).
"""

from __future__ import annotations

import time
from typing import Any, Dict, Iterable, Optional, Tuple

from ... import Error, alloc, curve
from ...jobs import FULL_CONFIGURATION
from ..jobs.resize.methods import METHODS, ResizeMethod
from ..jobs.runs import JobRun
from ..options import DEFAULTS
from ..statedb.store import StateStore
from .growstarts import COLD, WARM, FreeNodes, GrowStarts

SILENT_RATE = 1.0  # samples/s per node the allocator assumes for a silent job
SILENT_WEIGHT = 1e-6  # its weight: below every job that reports
# The advisor's two rescale methods, named as the resize methods they measure (membership restarts
# every worker: the advisor counts it as a relaunch).
RELAUNCH, INPLACE = ResizeMethod.RELAUNCH.value, ResizeMethod.INPLACE.value
RESCALE_METHODS = {name: curve.rescale_method_from_string(name) for name in (RELAUNCH, INPLACE)}
# Seconds per byte of state a resize adds to ManagerOptions' cost defaults, measured with bench/runtime_statesize.py
# at 1 GB on the project's VM (bench/README.md, "Resize cost against the state's size"): an
# in-place grow's transfer to a newcomer (bft.train.state_transfer.broadcast_state), 2.17 s; a relaunch's
# checkpoint write and read, 3.62 s + 1.21 s.
INPLACE_S_PER_BYTE = 2.2e-9
RELAUNCH_S_PER_BYTE = 4.8e-9


class CurveBook:
    def __init__(self, store: StateStore, *, warmup_s: float, scale_up_s: float, scale_down_s: float,
                 inplace_scale_up_s: float = DEFAULTS.inplace_scale_up_s,
                 inplace_scale_down_s: float = DEFAULTS.inplace_scale_down_s, objective: str = DEFAULTS.objective):
        """The costs of a relaunch (scale_*_s) and of an in-place rescale (inplace_scale_*_s) charged
        until the advisor has measured the job's own. `objective` ("throughput" or "speedup",
        curve.Objective): what the allocator maximises for every job, as the replay learns it: a speedup
        is over the job's own one-node rate, learned (the advisor's estimate at 1 node) or, for a job
        judged on its --curve, that curve's; a job with configurations is valued in throughput (their
        curves have no common one-node unit), as in the replay."""
        self.store = store
        self.objective = curve.objective_from_string(objective)
        advisor_options = curve.AdvisorOptions()
        advisor_options.warmup_s = warmup_s
        self.advisor = curve.ProfilingAdvisor(advisor_options)
        # An unproven job may grow as far as the advisor's curve extends its largest measurement in
        # full: further, its throughput would be a guess the allocator should not trust yet.
        self.probe_growth = advisor_options.fit.extrapolation_limit
        self.default_costs = {RELAUNCH: (scale_up_s, scale_down_s), INPLACE: (inplace_scale_up_s, inplace_scale_down_s)}
        self.methods: Dict[str, str] = {}  # job -> how its latest rescale was done (as the advisor heard it)
        self.models: Dict[str, str] = {}  # job -> the model declared to the advisor (its script)
        self.state_bytes: Dict[str, int] = {}  # job -> the bytes of state its resizes move, as it reported
        self.grows = GrowStarts(store.events(("resize_gap",)))  # warm and cold newcomers' starts, measured
        self.charged_starts: Dict[str, str] = {}  # job -> how its grow starts (WARM, COLD), as last charged

    # -- keys and records -------------------------------------------------------------------------

    @staticmethod
    def key(run: JobRun, configuration: Optional[str] = None) -> str:
        """The advisor's name for a job in a configuration (default: the one it runs in): each
        configuration's curve is learned apart (job names cannot hold '/')."""
        configuration = run.running if configuration is None else configuration
        return run.id if configuration == FULL_CONFIGURATION else f"{run.id}/{configuration}"

    def _profile(self, key: str) -> Optional[Any]:
        return self.advisor.profile(key) if self.advisor.has_job(key) else None

    def advisor_nodes(self, run: JobRun) -> int:
        """The size the advisor believes the job runs at in its current configuration (0: stopped)."""
        profile = self._profile(self.key(run))
        return profile.current_nodes if profile is not None else 0

    def record(self, run: JobRun, nodes: int, *, time_s: Optional[float] = None, method: Optional[str] = None) -> None:
        """Tells the advisor that from `time_s` (a report's; a decision's: the job's last reported step,
        or now for a job without nodes) the job runs on `nodes` nodes (0: stopped) in the
        configuration it runs in, at its current count, and stores the same record, so a restarted
        manager rebuilds the advisor exactly. `method` (RESCALE_METHODS): how the rescale this record
        starts is done; None: as the job's latest (a report does not change it)."""
        if method is not None:
            self.methods[run.id] = method
        if time_s is None:
            # A decision, not a report. A running job changes size at its last reported step: the time
            # since then is the resize's (the next report carries what the old size did meanwhile), not
            # time at the old size without progress, which made a short segment's rate look a fraction
            # of what it was. A job that had no nodes starts now.
            time_s = run.advisor_time if self.advisor_nodes(run) > 0 else time.time()
        now = max(time_s, run.advisor_time)
        # The samples since the last record were processed in the configuration the job ran in.
        if run.advisor_samples > run.credited:
            run.configuration_samples[run.running] = (run.configuration_samples.get(run.running, 0.0)
                                                      + run.advisor_samples - run.credited)
            run.credited = run.advisor_samples
        count = run.configuration_samples.get(run.running, 0.0)
        method = self.methods.get(run.id, RELAUNCH)
        self._report(run, now, nodes, count, run.running, method)
        self.store.add_progress(run.id, generation=run.row.generation, time_s=now, nodes=nodes,
                                samples=run.row.samples, advisor_samples=run.advisor_samples,
                                configuration=run.running, configuration_samples=count, method=method)

    def counted(self, run: JobRun, samples: float, time_s: float) -> float:
        """A believed report says the job has processed `samples` (its own count, which a restart from
        a checkpoint may lower) at `time_s`: the advisor's count of it, kept monotone, and its recent
        rate. Returns the time the advisor records it at (never before its last record)."""
        now = max(time_s, run.advisor_time)
        if samples + run.advisor_offset < run.advisor_samples:
            # Resumed from a checkpoint older than the last report: the advisor's count stays monotone.
            run.advisor_offset = run.advisor_samples - samples
        run.advisor_samples = samples + run.advisor_offset
        run.recent.append((now, samples))
        return now

    def configuration_starts(self, run: JobRun, configuration: str) -> None:
        """A generation of the job starts in `configuration`: if the last one ran in another, the advisor
        hears that one stopped, and the reports from now on are progress in this one."""
        if run.running != configuration:
            self.record(run, 0)
            run.running = configuration

    def rescale_begins(self, run: JobRun, nodes: int, *, method: str) -> None:
        """A rescale of the job to `nodes` nodes by `method` (RESCALE_METHODS) is decided and under way:
        the advisor measures what it costs, and the newcomers it started (the machine's, not yet
        arrived) are timed, warm or cold, to the first step at the new size (:mod:`.growstarts`)."""
        self.record(run, nodes, method=method)
        newcomers = [run.node_procs[node] for node in run.machine.pending if node in run.node_procs]
        self.grows.begins(run.id, method=method, newcomers_warm=[a.standby for a in newcomers],
                          decided_s=time.time())

    def launched(self, run: JobRun, nodes: int) -> None:
        """A generation of the job starts on `nodes` nodes, every process new: a start if the advisor
        has it stopped; the relaunch of a rescale recorded when it was decided; or the fallback of an
        in-place resize that failed, which counts as a relaunch."""
        self.grows.forget(run.id)  # every process is new: not a grow's newcomers
        if self.advisor_nodes(run) != nodes or self.methods.get(run.id, RELAUNCH) != RELAUNCH:
            self.record(run, nodes, method=RELAUNCH)

    def replay_record(self, run: JobRun, progress: Any) -> None:
        """Rebuilds the advisor from one stored progress record (a restart)."""
        configuration = progress["configuration"]
        count = progress["advisor_samples"] if progress["configuration_samples"] is None \
            else progress["configuration_samples"]
        self.methods[run.id] = progress["method"]
        self._report(run, progress["time_s"], progress["nodes"], count, configuration, progress["method"])
        run.advisor_offset = progress["advisor_samples"] - progress["samples"]
        run.advisor_samples = run.credited = progress["advisor_samples"]
        run.configuration_samples[configuration] = count
        run.running = configuration

    def _report(self, run: JobRun, time_s: float, nodes: int, samples: float, configuration: str,
                method: str) -> None:
        run.advisor_time = max(run.advisor_time, time_s)
        try:
            self.advisor.report(self.key(run, configuration), run.advisor_time, nodes, samples,
                                RESCALE_METHODS[method])
        except (ValueError, Error) as e:  # never let one odd report stop the manager
            self.store.log_event("advisor_rejected", job=run.id, error=str(e))

    def forget(self, run: JobRun) -> None:
        """Drops every curve of a job that has ended."""
        for configuration in [FULL_CONFIGURATION] + [c["name"] for c in run.row.configurations]:
            self.advisor.forget(self.key(run, configuration))
        self.state_bytes.pop(run.id, None)
        self.grows.forget(run.id)
        self.charged_starts.pop(run.id, None)
        self.methods.pop(run.id, None)
        self.models.pop(run.id, None)

    # -- priors -----------------------------------------------------------------------------------

    def set_prior(self, run: JobRun) -> None:
        """The user's curve (``--curve``) as the job's prior: its best per-node rate."""
        c = run.row.curve
        per_node = max(v / n for n, v in zip(c["nodes"], c["throughput"]) if n > 0)
        if per_node > 0:
            self.advisor.set_prior(run.id, per_node)

    def update_priors(self, runs: Iterable[JobRun]) -> None:
        """A job with no measurement yet is assumed to scale linearly at the best per-node rate measured
        so far on this machine: optimistic, so the allocator gives it nodes and the advisor learns it.
        Jobs that run one script are declared one model (curve.ProfilingAdvisor.set_model), so a new
        one starts from the shape its predecessors measured, as the replay's jobs of one model do
        (docs/curve.md, "The rule"); a job whose own sizes disagree with that shape drops it."""
        best, unmeasured = 0.0, []
        for run in runs:
            if self.models.get(run.id) != run.row.script:
                self.advisor.set_model(run.id, run.row.script)
                self.models[run.id] = run.row.script
            profile = self._profile(run.id)
            if profile is not None and profile.sizes:
                best = max(best, max(s.samples_per_s / s.nodes for s in profile.sizes))
            elif not run.row.curve:
                unmeasured.append(run.id)
        if best > 0:
            for job in unmeasured:
                self.advisor.set_prior(job, best)

    # -- what the allocator sees ------------------------------------------------------------------

    def curve_source(self, run: JobRun, configuration: str = FULL_CONFIGURATION) -> str:
        """Which curve the allocator sees for a job in a configuration: "silent" (no reports: a nominal
        curve at the lowest weight), "fitted" (the advisor fitted a model to its reports), "measured"
        (the advisor's per-size measurements and the prior between them), and otherwise for full
        backpropagation "user" (its --curve) or "prior" (nothing measured yet), for another
        configuration "guess" (full's times the declared speedup)."""
        if run.silent:
            return "silent"
        profile = self._profile(self.key(run, configuration))
        if profile is not None and profile.fit.ok:
            return "fitted"
        if configuration == FULL_CONFIGURATION and run.row.curve:
            return "user"
        if profile is not None and profile.sizes:
            return "measured"
        return "prior" if configuration == FULL_CONFIGURATION else "guess"

    def seen_by_allocator(self, run: JobRun, configuration: str) -> Dict[str, Any]:
        """What the ``allocate`` event records of how the allocator saw the job: its curve's source, that of
        the configuration it was given, and how its grow's start was charged (WARM, COLD)."""
        return {"curve": self.curve_source(run), "configuration_curve": self.curve_source(run, configuration),
                "grow_start": self.charged_starts.get(run.id, WARM)}

    def _curves(self, run: JobRun, top: int) -> Tuple[Any, Any]:
        """(throughput, objective) of full backpropagation: the advisor's once it has fitted a curve,
        else the user's curve if one was given, else the advisor's optimistic prior; the objective in
        the units of the book's objective."""
        objective = curve.Objective.THROUGHPUT if run.row.configurations else self.objective
        if self.curve_source(run) == "user":
            c = curve.ThroughputCurve([int(n) for n in run.row.curve["nodes"]],
                                      [float(v) for v in run.row.curve["throughput"]])
            if objective == curve.Objective.SPEEDUP and c(1) > 0:
                return c, curve.ThroughputCurve(list(c.nodes), [v / c(1) for v in c.values])
            return c, c
        both = self.advisor.curves(run.id, top, objective)
        return both.throughput, both.objective

    def _configuration_curves(self, run: JobRun, configuration: Dict[str, Any], top: int,
                              full: Any) -> Tuple[Any, Any]:
        """(throughput, objective) of a configuration: the advisor's once it has measured the job in it,
        else full backpropagation's throughput times the declared speedup from 2 nodes on (on one node
        a configuration of structured partial backpropagation has no partial rank: it is full)."""
        key = self.key(run, configuration["name"])
        profile = self._profile(key)
        if profile is not None and profile.sizes:
            both = self.advisor.curves(key, top)
            return both.throughput, both.objective
        values = [v * (configuration["speedup"] if n >= 2 else 1.0) for n, v in zip(full.nodes, full.values)]
        guess = curve.ThroughputCurve(list(full.nodes), values)
        return guess, guess

    def next_method(self, run: JobRun) -> str:
        """How the job's next rescale will be done: in place if its method is inplace (its processes
        stay), else a relaunch (a stopped job starts anew)."""
        kind = METHODS[run.method].advisor_kind if run.method in METHODS else RELAUNCH  # ('': not yet recovered)
        return kind if run.machine.running and not run.stop_reason else RELAUNCH

    def state_costs(self, run: JobRun, method: str) -> Tuple[float, float]:
        """(scale_up_s, scale_down_s) of a rescale by `method` before the advisor has measured the job's
        own: the manager's defaults for that method plus what moving the job's state costs (in place, a
        grow sends it to the newcomers and a shrink moves nothing; a relaunch writes and reads it)."""
        up, down = self.default_costs[method]
        size = self.state_bytes.get(run.id, 0)
        if method == INPLACE:
            return up + size * INPLACE_S_PER_BYTE, down
        return up + size * RELAUNCH_S_PER_BYTE, down + size * RELAUNCH_S_PER_BYTE

    def method_costs(self, run: JobRun, method: str) -> Tuple[float, float]:
        """(scale_up_s, scale_down_s) of a rescale by `method`: measured by the advisor, else
        :meth:`state_costs`."""
        up, down = self.state_costs(run, method)
        profile = self._profile(self.key(run))
        if profile is None:
            return up, down
        return curve.measured_rescale_costs(profile, up, down, RESCALE_METHODS[method])

    def rescale_costs(self, run: JobRun) -> Tuple[float, float]:
        """(scale_up_s, scale_down_s) the allocator is charged: those of the next rescale's method, the
        grow's plus what a cold newcomer costs beyond a warm one (:meth:`cold_extra_s`)."""
        method = self.next_method(run)
        up, down = self.method_costs(run, method)
        return self.with_cold_start(run, method, up), down

    def with_cold_start(self, run: JobRun, method: str, scale_up_s: float) -> float:
        """`scale_up_s` plus :meth:`cold_extra_s`, which never takes it past alloc.MAX_HORIZON_S (a cost
        the allocator refuses: a newcomer's start measured in a hang must not fail the job)."""
        return max(scale_up_s, min(scale_up_s + self.cold_extra_s(run, method), alloc.MAX_HORIZON_S))

    def cold_extra_s(self, run: JobRun, method: str) -> float:
        """What the job's next grow by `method` is charged for starting a newcomer cold: in place, when
        the last decision found that grow needs a node without a warm standby (:meth:`charge_start`);
        0 otherwise (a relaunch starts every process anew: its measured costs are all cold)."""
        if method != INPLACE or self.charged_starts.get(run.id) != COLD:
            return 0.0
        return self.grows.cold_extra_s(method)[0]

    def charge_start(self, run: JobRun, free: FreeNodes, max_nodes: int) -> None:
        """How the job's next grow starts, as the decision about to be taken will charge it: cold if its
        largest grow within the free nodes (up to `max_nodes`) takes more than the free warm ones."""
        self.charged_starts[run.id] = free.grow_start(current=len(run.target), max_nodes=max_nodes)

    def restart_cost(self, run: JobRun, scale_down_s: float) -> float:
        """What taking the job off all its nodes costs beyond the `scale_down_s` it is charged: a stopped
        job, whatever its method, comes back by a relaunch (its checkpoint written, then a cold start
        read it), so the allocator stops a job only where that pays (alloc.Job.restart_s). The stop's
        whole charge stays within alloc.MAX_HORIZON_S, as each cost the manager accepts does, so that
        no job it accepts makes the allocator refuse it."""
        up, down = self.method_costs(run, RELAUNCH)
        return max(0.0, min(up + down, alloc.MAX_HORIZON_S) - scale_down_s)

    def cost_status(self, run: JobRun) -> Dict[str, Any]:
        """What ``bft status --json`` shows of a job's rescale costs: each method's (measured or the
        default, and how many rescales measured them), the method whose costs it is charged and what a
        stop costs on top of its shrink (:meth:`restart_cost`)."""
        profile = self._profile(self.key(run))
        method = self.next_method(run)
        extra_s, measured_extra = self.grows.cold_extra_s(method)
        out: Dict[str, Any] = {"charged": method,
                               "restart_s": self.restart_cost(run, self.rescale_costs(run)[1]),
                               # The grow's start as charged (cold: cold_extra_s on top of its scale-up).
                               "grow_start": self.charged_starts.get(run.id, WARM),
                               "cold_extra_s": self.cold_extra_s(run, method),
                               "cold_start": {"extra_s": extra_s, "measured": measured_extra,
                                              "grows": self.grows.counts(method)}}
        for name, method in RESCALE_METHODS.items():
            up, down = self.method_costs(run, name)
            measured = profile.method_costs(method) if profile is not None else None
            out[name] = {"scale_up_s": up, "scale_down_s": down,
                         "measured_ups": measured.scale_ups if measured else 0,
                         "measured_downs": measured.scale_downs if measured else 0}
        return out

    def probe_limit(self, run: JobRun, fair_share: int) -> Optional[int]:
        """The most nodes the allocator may give a job whose curve is not proven yet (None: no limit):
        its fair share of the pool while it has measured nothing, then its largest measured size
        times `probe_growth` (the advisor's extrapolation limit, 8 by default), until the advisor has
        fitted its curve. Never below its --min."""
        profile = self._profile(run.id)
        if profile is not None and profile.fit.ok and not run.silent:
            return None
        measured = [s.nodes for s in profile.sizes] if profile is not None else []
        limit = int(self.probe_growth * max(measured)) if measured and not run.silent else fair_share
        return max(run.row.min_nodes, min(run.row.max_nodes, limit))

    def allocation_job(self, run: JobRun, top: int, fair_share: Optional[int] = None, *,
                       free: Optional[FreeNodes] = None) -> Any:
        """The job as the allocator sees it: learned (or given) curves, measured rescale costs, and its
        configurations with the one it runs in now; limited to its probe size while its curve is
        unproven (`fair_share`: the pool's nodes per admitted job; None: no limit). `free`: the nodes
        no job holds, for a decision (its grow is charged a cold start where it must take a cold
        node); None: as the last decision charged it."""
        limit = self.probe_limit(run, fair_share) if fair_share is not None else None
        max_nodes = run.row.max_nodes if limit is None else limit
        if free is not None:
            self.charge_start(run, free, max_nodes)
        if run.silent:
            n = max(1, min(max_nodes, top))
            nominal = curve.ThroughputCurve(list(range(1, n + 1)), [SILENT_RATE * k for k in range(1, n + 1)])
            method = self.next_method(run)
            up, down = self.state_costs(run, method)
            up = self.with_cold_start(run, method, up)
            return alloc.Job(run.id, run.row.min_nodes, max_nodes, nominal, nominal, up, down, SILENT_WEIGHT,
                             restart_s=self.restart_cost(run, down))
        throughput, objective = self._curves(run, min(max_nodes, top))
        up, down = self.rescale_costs(run)
        job = alloc.Job(run.id, run.row.min_nodes, max_nodes, objective, throughput, up, down, 1.0,
                        restart_s=self.restart_cost(run, down))
        if run.row.configurations:
            configurations = []
            for c in run.row.configurations:
                rate, value = self._configuration_curves(run, c, min(max_nodes, top), throughput)
                configurations.append(alloc.Configuration(c["name"], value, rate, c["efficiency"]))
            job.configurations = configurations
            job.configuration = configuration_index(run, run.row.configuration)
        return job


def configuration_index(run: JobRun, name: str) -> int:
    """0 for full backpropagation, k for the job's k-th configuration (alloc.Job.configuration)."""
    names = [c["name"] for c in run.row.configurations]
    return names.index(name) + 1 if name in names else 0


def configuration_name(run: JobRun, index: int) -> str:
    """The inverse of configuration_index."""
    return run.row.configurations[index - 1]["name"] if index else FULL_CONFIGURATION
