"""The manager's figures for a centre's dashboards, in Prometheus' text format (prometheus-client).

Two ways out, either or both (docs/runtime.md, "Metrics"):

- a file for node_exporter's textfile collector (``--metrics-textfile``): no listener at all; the
  file is replaced atomically, so node_exporter never reads half of it;
- an HTTP endpoint (``--metrics-port``) on 127.0.0.1, or on the address ``--metrics-address``
  names (the manager's ``--bind`` address, for a central Prometheus); never a wildcard. Its server
  (:mod:`.metrics_http`) is bounded, so that nobody who reaches the port can exhaust the manager.

Jobs appear by a keyed hash of their names unless the operator asks for the names
(``--metrics-job-names``): whoever reads the metrics must not learn which jobs exist.

The figures are taken in the manager's loop thread, every ``--metrics-interval`` seconds, into one
snapshot; the HTTP thread and the file only read the last snapshot, so a scrape never touches the
manager's state. Counters that the state database keeps (node joins, node-seconds of training) count
from the state directory's first manager on, across restarts: Prometheus reads a counter that never
drops as one series.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import sys
import threading
import time
import traceback
from pathlib import Path
from typing import Any, Dict, Iterable, List, Optional, Tuple

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric

from ..._atomic import write_atomically
from ..jobs.resize import ResizeMethod
from ..options import METRICS_ADDRESS, METRICS_INTERVAL_S
from ..statedb.schema import ACTIVE_STATES, JOB_STATES
from ..statedb.store import StateStore
from ..trust.addresses import check_listen_address
from .metrics_http import MetricsServer

# A job's series carry it as `bft_job`: Prometheus gives every scraped series a `job` label of its own
# (the scrape job), which would rename ours to `exported_job`. Its value is the job's name only with
# --metrics-job-names; else a keyed hash of it (the key kept in state.db), stable across restarts, that
# tells whoever can read the metrics nothing about which names exist (docs/security.md, "Metrics").
JOB_LABEL_KEY = "metrics_job_label_key"
JOB_LABEL_HEX = 16
# Upper bounds of the histograms' buckets, in seconds: resize gaps run from half a second (in place)
# to a minute (a relaunch on a loaded machine); decisions from milliseconds to seconds (a MILP).
RESIZE_GAP_BUCKETS_S = (0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0)
DECISION_LATENCY_BUCKETS_S = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)
# Why a job holds no nodes, as a label value: the first words of the manager's own reason
# (bft.runtime.ops.status.waiting_reason, the text `bft status` prints) mapped to a short, stable name.
WAITING_REASONS = (
    ("no progress reports", "no_reports"),
    ("admission cap reached", "admission_cap"),
    ("backing off after a failure", "backoff"),
    ("needs ", "pool_too_small"),
    ("waiting for its nodes to be vacated", "vacating"),
    ("waiting for idle nodes", "idle_nodes"),
)
# Event-log kinds counted as counters: (kind, metric name, help).
EVENT_COUNTERS = (
    ("join", "bft_node_joins", "Idle nodes adopted from the node source (joins)."),
    ("reclaim", "bft_node_reclaims", "Nodes the main scheduler took back."),
    ("preempted", "bft_job_preemptions", "Jobs that lost a node to a reclaim while running on it."),
    ("job_failed", "bft_job_failures", "Job generations that failed (each retry counts)."),
)


class MetricsError(Exception):
    """A metrics option that cannot work (an address, a file): one line."""


def waiting_reason_label(reason: str) -> str:
    for prefix, label in WAITING_REASONS:
        if reason.startswith(prefix):
            return label
    return "other"


def check_address(address: str) -> str:
    """The metrics endpoint listens on one address, never a wildcard (docs/security.md)."""
    try:
        return check_listen_address("--metrics-address", address)
    except ValueError as e:
        raise MetricsError(str(e)) from None


class _Histogram:
    """Cumulative bucket counts and a sum, fed one observation at a time (the loop thread only)."""

    def __init__(self, bounds: Tuple[float, ...]):
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)  # the last: +Inf
        self.sum = 0.0

    def observe(self, value: float) -> None:
        self.sum += value
        for k, bound in enumerate(self.bounds):
            if value <= bound:
                self.counts[k] += 1
                return
        self.counts[-1] += 1

    def buckets(self) -> List[Tuple[str, float]]:
        out, total = [], 0
        for bound, count in zip((*map(repr, self.bounds), "+Inf"), self.counts):
            total += count
            out.append((bound, total))
        return out


class ManagerMetrics:
    """A prometheus-client collector over the last snapshot of the manager's figures."""

    def __init__(self, store: StateStore, *, job_names: bool = False):
        self.store = store
        self.job_names = job_names
        self._label_key: Optional[bytes] = None  # read (or made) by the loop thread, which owns the store
        self._labels: Dict[str, str] = {}  # the active jobs' labels, kept from one snapshot to the next
        self._snapshot: List[Metric] = []
        self._last_event_id = 0
        self._event_counts = {kind: 0 for kind, _, _ in EVENT_COUNTERS}
        self._resize_gaps: Dict[str, _Histogram] = {}  # by resize method
        self._decision_latency = _Histogram(DECISION_LATENCY_BUCKETS_S)
        self._decisions_seen = 0

    def collect(self) -> Iterable[Metric]:
        return list(self._snapshot)

    def job_label(self, job: str) -> str:
        """The `bft_job` label of `job`: its name, or a keyed hash of it (HMAC-SHA256, JOB_LABEL_HEX digits)."""
        if self.job_names:
            return job
        if self._label_key is None:
            key = self.store.meta(JOB_LABEL_KEY)
            if key is None:
                key = secrets.token_hex(32)
                self.store.set_meta(JOB_LABEL_KEY, key)
            self._label_key = bytes.fromhex(key)
        label = self._labels.get(job)
        if label is None:
            label = hmac.new(self._label_key, job.encode(), hashlib.sha256).hexdigest()[:JOB_LABEL_HEX]
        return label

    def _read_events(self) -> None:
        """Counts the event log's new lines since the last update (by id: each line once)."""
        for event in self.store.events(("resize_gap", *self._event_counts), since_id=self._last_event_id):
            self._last_event_id = event["id"]
            if event["kind"] == "resize_gap":
                if event.get("gap") == "resize":  # a restart's gap includes waiting for nodes: not a resize cost
                    method = event.get("method") or ResizeMethod.RELAUNCH.value
                    self._resize_gaps.setdefault(method, _Histogram(RESIZE_GAP_BUCKETS_S)).observe(event["gap_s"])
            else:
                self._event_counts[event["kind"]] += 1

    def update(self, status: Dict[str, Any], *, decision_latencies_s: List[float], decisions: int,
               now: Optional[float] = None) -> None:
        """A new snapshot from the manager's status (Manager.status()) and its decider's latencies
        (the most recent last); called from the manager's loop thread."""
        now = time.time() if now is None else now
        self._read_events()
        new = decisions - self._decisions_seen
        for latency in decision_latencies_s[len(decision_latencies_s) - min(new, len(decision_latencies_s)):]:
            self._decision_latency.observe(latency)
        self._decisions_seen = decisions
        manager = status["manager"]
        out: List[Metric] = []

        def gauge(name: str, doc: str, value: float) -> None:
            g = GaugeMetricFamily(name, doc)
            g.add_metric([], value)
            out.append(g)

        gauge("bft_pool_nodes", "Idle nodes the manager holds now (adopted from its source).",
              len(status["nodes"]["pool"]))
        gauge("bft_training_nodes", "Nodes of the pool that a job's processes run on now.",
              len(status["nodes"]["used"]))
        gauge("bft_standby_nodes", "Idle nodes with a warm standby process.", len(status["nodes"].get("standbys", [])))
        for kind, name, doc in EVENT_COUNTERS:
            c = CounterMetricFamily(name, doc)
            c.add_metric([], self._event_counts[kind])
            out.append(c)
        c = CounterMetricFamily("bft_training_node_seconds", "Node-seconds that jobs' processes have held nodes "
                                "(from their start to their exit), all jobs of this state directory.")
        c.add_metric([], self.store.proc_node_seconds(now))
        out.append(c)
        c = CounterMetricFamily("bft_decisions", "Allocator decisions taken by this manager.")
        c.add_metric([], decisions)
        out.append(c)
        c = CounterMetricFamily("bft_dropped_reports", "Progress datagrams dropped, by why.", labels=["kind"])
        for kind, count in sorted(manager["dropped_reports"].items()):
            c.add_metric([kind], count)
        out.append(c)
        h = HistogramMetricFamily("bft_decision_latency_seconds", "Decisions: first event in -> node map decided.")
        h.add_metric([], self._decision_latency.buckets(), self._decision_latency.sum)
        out.append(h)
        h = HistogramMetricFamily("bft_resize_gap_seconds", "Resizes: last step at the old size -> first step at "
                                  "the new one, by method.", labels=["method"])
        for method, hist in sorted(self._resize_gaps.items()):
            h.add_metric([method], hist.buckets(), hist.sum)
        out.append(h)

        by_state = dict.fromkeys(JOB_STATES, 0)
        waiting: Dict[str, int] = {}
        rate = GaugeMetricFamily("bft_job_samples_per_second", "A running job's recent training rate.",
                                 labels=["bft_job"])
        samples = GaugeMetricFamily("bft_job_samples", "Samples a job has reported (cumulative; a job resumed "
                                    "from an older checkpoint reports fewer).", labels=["bft_job"])
        nodes = GaugeMetricFamily("bft_job_nodes", "Nodes a job's processes run on now.", labels=["bft_job"])
        labels: Dict[str, str] = {}
        for job in status["jobs"]:
            by_state[job["state"]] = by_state.get(job["state"], 0) + 1
            if job["state"] not in ACTIVE_STATES:
                continue  # an ended job's series end with it
            label = labels[job["id"]] = self.job_label(job["id"])
            samples.add_metric([label], job["samples"])
            nodes.add_metric([label], len(job.get("nodes", [])))
            rate.add_metric([label], job.get("rate", 0.0))
            if "waiting" in job:
                label = waiting_reason_label(job["waiting"])
                waiting[label] = waiting.get(label, 0) + 1
        g = GaugeMetricFamily("bft_jobs", "Jobs of this state directory, by state.", labels=["state"])
        for state, count in by_state.items():
            g.add_metric([state], count)
        out.append(g)
        g = GaugeMetricFamily("bft_waiting_jobs", "Queued or running jobs that hold no nodes, by why.",
                              labels=["reason"])
        for _, label in (*WAITING_REASONS, ("", "other")):
            g.add_metric([label], waiting.get(label, 0))
        out.extend([g, rate, samples, nodes])
        self._labels = labels
        self._snapshot = out  # one assignment: a scrape sees the old snapshot or the new one


class MetricsExporter:
    """Writes the snapshot to a textfile and/or serves it over HTTP; owned by the manager's loop."""

    def __init__(self, store: StateStore, *, textfile: Optional[Path] = None, port: Optional[int] = None,
                 address: str = METRICS_ADDRESS, interval_s: float = METRICS_INTERVAL_S, job_names: bool = False):
        if textfile is not None and textfile.suffix != ".prom":
            raise MetricsError(f"--metrics-textfile {textfile}: node_exporter reads only files ending in .prom")
        if port is not None and not 0 <= port <= 65535:
            raise MetricsError(f"--metrics-port: {port} is not a port")
        self.metrics = ManagerMetrics(store, job_names=job_names)
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(self.metrics)
        self.textfile = textfile
        self.port = port
        self.address = check_address(address)
        self.interval_s = interval_s
        self._server = None
        self._next_update = 0.0
        # The text is generated and written by a thread of its own: it is most of a snapshot's cost
        # (bench/metrics_bench.py), and the loop only has to say a new snapshot is there.
        self._snapshot_taken = threading.Event()
        self._stopping = False
        self._writer: Optional[threading.Thread] = None
        self._snapshot_failed = False
        self._rendered: Tuple[Optional[List[Metric]], bytes] = (None, b"")  # (snapshot, its text)

    @property
    def enabled(self) -> bool:
        return self.textfile is not None or self.port is not None

    def start(self) -> Optional[str]:
        """Starts the HTTP endpoint if asked (bounded: .metrics_http); returns its URL (port 0: a free
        one was chosen)."""
        if self.textfile is not None:
            self._write_textfile()  # a directory that cannot take the file fails now, not in the loop
            self._writer = threading.Thread(target=self._write_textfiles, name="bft-metrics-textfile", daemon=True)
            self._writer.start()
        if self.port is None:
            return None
        try:
            self._server = MetricsServer(self.address, self.port, self.render)
        except OSError as e:
            raise MetricsError(f"--metrics-port {self.port} on {self.address}: {e.strerror or e}") from None
        host = f"[{self.address}]" if ":" in self.address else self.address
        return f"http://{host}:{self._server.server_port}/metrics"

    def due(self, now: float) -> bool:
        return self.enabled and now >= self._next_update

    def update(self, status: Dict[str, Any], *, decision_latencies_s: List[float], decisions: int) -> None:
        self._next_update = time.monotonic() + self.interval_s
        try:
            self.metrics.update(status, decision_latencies_s=decision_latencies_s, decisions=decisions)
        except Exception:  # noqa: BLE001 - a metrics bug must not stop the jobs: the old snapshot stays
            if not self._snapshot_failed:
                print(f"bft manager: internal error in a metrics snapshot (said once):\n{traceback.format_exc()}",
                      file=sys.stderr, flush=True)
            self._snapshot_failed = True
            return
        self._snapshot_taken.set()

    def render(self) -> bytes:
        """The last snapshot in Prometheus' text format, rendered once per snapshot: however often it
        is scraped, the manager's process spends the rendering's time once per --metrics-interval."""
        snapshot, text = self._rendered
        if snapshot is not self.metrics._snapshot:
            snapshot = self.metrics._snapshot
            text = generate_latest(self.registry)  # may render a newer snapshot: then it is rendered again
            self._rendered = (snapshot, text)
        return text

    def _write_textfiles(self) -> None:
        """The writer thread: the textfile again after each snapshot (the newest, if several came), and
        once more when the exporter stops, so the file ends with the last snapshot."""
        failing = False
        while True:
            self._snapshot_taken.wait()
            self._snapshot_taken.clear()
            try:
                self._write_textfile()
            except MetricsError as e:  # a full disk must not stop the jobs: said once, tried again each time
                if not failing:
                    print(f"bft manager: {e}", file=sys.stderr, flush=True)
                failing = True
            else:
                failing = False
            if self._stopping:
                return

    def _write_textfile(self) -> None:
        path = self.textfile
        try:
            # node_exporter runs as its own user: the file is world-readable (the manager's umask is 077).
            # The temporary file (a name node_exporter skips: not ending .prom) is created exclusively
            # under a random name, and the rename replaces a link at `path` instead of following it: a
            # link planted in a directory others can write is never written through.
            write_atomically(path, self.render(), mode=0o644, sync=False)
        except OSError as e:
            raise MetricsError(f"--metrics-textfile {path}: {e.strerror or e}") from None

    def stop(self) -> None:
        if self._writer is not None:
            self._stopping = True
            self._snapshot_taken.set()
            self._writer.join(10)
            self._writer = None
        if self._server is not None:
            self._server.close()
            self._server = None
