"""The manager's Prometheus metrics (docs/runtime.md, "Metrics"): the figures, their names, the
textfile for node_exporter, and a real Prometheus server scraping a real manager's endpoint."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import stat
import subprocess
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

prometheus_client = pytest.importorskip("prometheus_client", reason="./dev.sh installs prometheus-client")
from prometheus_client.parser import text_string_to_metric_families  # noqa: E402

from bft.runtime.metrics import MetricsError, MetricsExporter  # noqa: E402
from bft.runtime.state import StateStore  # noqa: E402
from runtime_util import REPO, bft, listening_sockets  # noqa: E402

EMULATED = REPO / "python" / "bft" / "runtime" / "emulated.py"


def _status(pool, used, jobs, dropped=None):
    """What Manager.status() answers, reduced to what the metrics read."""
    return {"manager": {"dropped_reports": dropped or {"bad_mac": 0, "replay": 0}},
            "nodes": {"pool": pool, "used": used, "standbys": []}, "jobs": jobs}


def _families(exporter: MetricsExporter):
    text = prometheus_client.generate_latest(exporter.registry).decode()
    return text, {f.name: f for f in text_string_to_metric_families(text)}


def _value(families, name, sample_name=None, **labels):
    for s in families[name].samples:
        if s.name == (sample_name or name) and all(s.labels.get(k) == v for k, v in labels.items()):
            return s.value
    raise AssertionError(f"no sample {sample_name or name} {labels}")


def test_the_figures_follow_prometheus_naming_and_come_from_the_state(tmp_path):
    store = StateStore(tmp_path / "state.db")
    store.log_event("join", node="n0")
    store.log_event("join", node="n1")
    store.log_event("reclaim", node="n1")
    store.log_event("resize_gap", bft_job="a", method="inplace", gap="resize", gap_s=0.7)
    store.log_event("resize_gap", bft_job="a", method="relaunch", gap="restart", gap_s=40.0)  # waiting: not counted
    row = store.add_proc("a", 1, "n0")
    store.db.execute("UPDATE procs SET started_s = 100.0 WHERE id = ?", (row,))
    exporter = MetricsExporter(store)
    jobs = [{"id": "a", "state": "running", "samples": 5000.0, "nodes": ["n0"], "rate": 250.0},
            {"id": "b", "state": "queued", "samples": 0.0, "waiting": "admission cap reached (1 jobs admitted, "
             "--max-jobs)"},
            {"id": "c", "state": "finished", "samples": 9.0}]
    exporter.metrics.update(_status(["n0"], {"n0": "a"}, jobs, {"bad_mac": 3, "replay": 1}),
                            decision_latencies_s=[0.004, 0.2], decisions=2,
                            now=130.0)
    text, families = _families(exporter)
    # Counters end in _total, units are in the names (seconds), no name without the bft_ prefix.
    assert _value(families, "bft_node_joins", "bft_node_joins_total") == 2
    assert _value(families, "bft_node_reclaims", "bft_node_reclaims_total") == 1
    assert _value(families, "bft_training_node_seconds", "bft_training_node_seconds_total") == 30.0
    assert _value(families, "bft_dropped_reports", "bft_dropped_reports_total", kind="bad_mac") == 3
    assert _value(families, "bft_decisions", "bft_decisions_total") == 2
    assert _value(families, "bft_pool_nodes") == 1 and _value(families, "bft_training_nodes") == 1
    assert _value(families, "bft_job_samples_per_second", bft_job="a") == 250.0
    assert _value(families, "bft_job_samples", bft_job="a") == 5000.0
    assert _value(families, "bft_jobs", state="finished") == 1
    assert _value(families, "bft_waiting_jobs", reason="admission_cap") == 1
    assert not any(s.labels.get("bft_job") == "c" for f in families.values() for s in f.samples)  # ended: no series
    assert _value(families, "bft_resize_gap_seconds", "bft_resize_gap_seconds_count", method="inplace") == 1
    assert _value(families, "bft_resize_gap_seconds", "bft_resize_gap_seconds_bucket", method="inplace",
                  le="0.5") == 0
    assert _value(families, "bft_resize_gap_seconds", "bft_resize_gap_seconds_bucket", method="inplace",
                  le="1.0") == 1
    assert not any(s.labels.get("method") == "relaunch" for s in families["bft_resize_gap_seconds"].samples)
    assert _value(families, "bft_decision_latency_seconds", "bft_decision_latency_seconds_count") == 2
    for line in text.splitlines():
        if line.startswith("# TYPE"):
            _, _, name, kind = line.split()
            assert name.startswith("bft_")
            assert kind != "counter" or name.endswith("_total")
    # The next snapshot counts only what is new: the same event lines and decisions are not counted twice.
    store.log_event("join", node="n2")
    exporter.metrics.update(_status(["n0"], {}, []), decision_latencies_s=[0.004, 0.2, 0.01], decisions=3,
                            now=140.0)
    _, families = _families(exporter)
    assert _value(families, "bft_node_joins", "bft_node_joins_total") == 3
    assert _value(families, "bft_decision_latency_seconds", "bft_decision_latency_seconds_count") == 3
    assert _value(families, "bft_resize_gap_seconds", "bft_resize_gap_seconds_count", method="inplace") == 1


def test_every_waiting_reason_of_the_manager_has_its_own_label():
    from bft.runtime.metrics import waiting_reason_label

    # The texts of bft.runtime.status.waiting_reason, as bft status prints them.
    reasons = {"no progress reports: does the script call bft.train.report()?": "no_reports",
               "admission cap reached (10 jobs admitted, --max-jobs)": "admission_cap",
               "backing off after a failure (retry 1 of 2)": "backoff",
               "needs 4 nodes; the pool has never had more than 2": "pool_too_small",
               "waiting for its nodes to be vacated": "vacating", "waiting for idle nodes": "idle_nodes"}
    source = (REPO / "python" / "bft" / "runtime" / "status.py").read_text()
    body = source[source.index("def waiting_reason"):source.index("def unused_nodes(")]
    assert len(re.findall(r"^\s+return ", body, re.M)) == len(reasons)
    for text, label in reasons.items():
        assert waiting_reason_label(text) == label


def test_the_textfile_is_replaced_whole_and_readable_by_node_exporter(tmp_path):
    store = StateStore(tmp_path / "state.db")
    path = tmp_path / "bft.prom"
    old = os.umask(0o077)  # the manager's
    try:
        exporter = MetricsExporter(store, textfile=path)
        exporter.start()
        exporter.update(_status(["n0", "n1"], {}, []), decision_latencies_s=[], decisions=0)
        exporter.stop()  # the writer thread writes the last snapshot before it ends
    finally:
        os.umask(old)
    assert stat.S_IMODE(path.stat().st_mode) == 0o644
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # no temporary file left
    families = {f.name: f for f in text_string_to_metric_families(path.read_text())}
    assert _value(families, "bft_pool_nodes") == 2


def test_a_bad_metrics_option_is_refused_in_one_line(tmp_path):
    store = StateStore(tmp_path / "state.db")
    with pytest.raises(MetricsError, match="wildcard"):
        MetricsExporter(store, port=0, address="0.0.0.0")
    with pytest.raises(MetricsError, match=r"\.prom"):
        MetricsExporter(store, textfile=tmp_path / "bft.txt")
    with pytest.raises(MetricsError, match="No such file"):
        MetricsExporter(store, textfile=tmp_path / "missing" / "bft.prom").start()
    r = bft("manager", "--state-dir", str(tmp_path / "s"), "--metrics-port", "0", "--metrics-address", "::")
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "wildcard" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr


# -- a real Prometheus server ----------------------------------------------------------------------


def _prometheus_binary() -> str:
    path = shutil.which("prometheus")
    if path is None:  # the project's own script installs it (Debian's package), as for the Slurm tests
        subprocess.run([str(REPO / "dev.sh"), "test-packages"], capture_output=True, timeout=600)
        path = shutil.which("prometheus")
    if path is None:
        pytest.skip("no prometheus binary and `./dev.sh test-packages` could not install Debian's prometheus")
    return path


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait(predicate, timeout_s: float, what: str, log: Path):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.5)
    pytest.fail(f"timed out after {timeout_s} s waiting for {what}; log:\n{log.read_text(errors='replace')[-3000:]}")


def _query(port: int, expr: str):
    url = f"http://127.0.0.1:{port}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            answer = json.load(r)
    except OSError:
        return None
    assert answer["status"] == "success", answer
    return answer["data"]["result"]


@pytest.fixture
def prometheus_server(tmp_path):
    """Starts a real Prometheus on a free loopback port, scraping the targets written into its
    configuration by the test (`configure(target)`); stopped by pid afterwards, pass or fail."""
    binary = _prometheus_binary()
    started = {}

    def configure(target: str) -> int:
        port = _free_port()
        config = tmp_path / "prometheus.yml"
        config.write_text("global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
                          f"scrape_configs:\n  - job_name: bft\n    static_configs:\n      - targets: ['{target}']\n")
        log = tmp_path / "prometheus.log"
        started["proc"] = subprocess.Popen(
            [binary, f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'tsdb'}",
             f"--web.listen-address=127.0.0.1:{port}"], stdout=open(log, "wb"), stderr=subprocess.STDOUT,
            start_new_session=True)
        started["log"] = log
        return port

    try:
        yield configure
    finally:
        proc = started.get("proc")
        if proc is not None and proc.poll() is None:
            os.kill(proc.pid, signal.SIGTERM)
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                os.kill(proc.pid, signal.SIGKILL)
                proc.wait(10)


@pytest.mark.runtime
def test_a_real_prometheus_scrapes_the_managers_endpoint(harness, prometheus_server, tmp_path):
    textfile = tmp_path / "bft.prom"
    proc = harness.start("--local-nodes", "2", "--local-emulate", "--resize", "relaunch", "--metrics-port", "0",
                         "--metrics-interval", "0.5", "--metrics-textfile", str(textfile))
    m = _wait(lambda: re.search(r"metrics on http://127\.0\.0\.1:(\d+)/metrics", harness.manager_log()), 30,
              "the manager's metrics line", harness.root / "manager-0.log")
    target = f"127.0.0.1:{m.group(1)}"
    # The endpoint is one more listener of the manager's: on loopback, never a wildcard.
    assert ("tcp", target, proc.pid) in listening_sockets([proc.pid], with_port=True)
    harness.submit("emu", "--min", "1", "--max", "2", "--samples", "1e12", "--",  # runs until stopped
                   "--curve", '{"nodes": [0, 1, 2], "throughput": [0, 100, 190]}', script=EMULATED)
    port = prometheus_server(target)
    log = tmp_path / "prometheus.log"
    _wait(lambda: _query(port, "up") is not None, 60, "Prometheus to answer its HTTP API", log)
    # What Prometheus answers is what it scraped: the pool of 2, and the job's rate once it reported.
    pool = _wait(lambda: _query(port, 'bft_pool_nodes{job="bft"}'), 60, "a scraped bft_pool_nodes", log)
    assert pool[0]["value"][1] == "2"
    rate = _wait(lambda: _query(port, 'bft_job_samples_per_second{job="bft", bft_job="emu"} > 0'), 90,
                 "a positive samples/s of the job", log)
    assert float(rate[0]["value"][1]) > 0
    seconds = _wait(lambda: _query(port, "bft_training_node_seconds_total > 0"), 60, "node-seconds of training", log)
    assert float(seconds[0]["value"][1]) > 0
    assert _query(port, "bft_dropped_reports_total") is not None
    families = {f.name: f for f in text_string_to_metric_families(textfile.read_text())}
    assert _value(families, "bft_pool_nodes") == 2
    harness.stop(proc)
    assert "Traceback" not in harness.manager_log()


def test_a_failing_snapshot_is_said_once_and_keeps_the_last_one(tmp_path, capsys):
    exporter = MetricsExporter(StateStore(tmp_path / "state.db"))
    exporter.update(_status(["n0"], {}, []), decision_latencies_s=[], decisions=0)
    for _ in range(2):
        # not what Manager.status() answers: the snapshot fails
        exporter.update({"manager": {}}, decision_latencies_s=[], decisions=0)
    _, families = _families(exporter)
    assert _value(families, "bft_pool_nodes") == 1
    assert capsys.readouterr().err.count("internal error in a metrics snapshot") == 1
