"""The manager's Prometheus metrics (docs/runtime.md, "Metrics"): the figures, their names, the
textfile for node_exporter, and a real Prometheus server scraping a real manager's endpoint."""

from __future__ import annotations

import json
import os
import re
import select
import shutil
import signal
import socket
import stat
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

prometheus_client = pytest.importorskip("prometheus_client", reason="./dev.sh installs prometheus-client")
from prometheus_client.parser import text_string_to_metric_families  # noqa: E402

from bft.runtime.ops import metrics_http  # noqa: E402
from bft.runtime.ops.metrics import MetricsError, MetricsExporter  # noqa: E402
from bft.runtime.statedb.store import StateStore  # noqa: E402
from runtime_util import REPO, bft, free_port, listening_sockets  # noqa: E402

EMULATED = REPO / "python" / "bft" / "runtime" / "sources" / "emulated.py"


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
    exporter = MetricsExporter(store, job_names=True)
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
    from bft.runtime.ops.metrics import waiting_reason_label

    # The texts of bft.runtime.ops.status.waiting_reason, as bft status prints them.
    reasons = {"no progress reports: does the script call bft.train.report()?": "no_reports",
               "admission cap reached (10 jobs admitted, --max-jobs)": "admission_cap",
               "backing off after a failure (retry 1 of 2)": "backoff",
               "needs 4 nodes; the pool has never had more than 2": "pool_too_small",
               "waiting for its nodes to be vacated": "vacating", "waiting for idle nodes": "idle_nodes"}
    source = (REPO / "python" / "bft" / "runtime" / "ops" / "status.py").read_text()
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


def test_jobs_are_labelled_by_a_keyed_hash_unless_the_operator_asks_for_their_names(tmp_path):
    jobs = [{"id": "secret-project-x", "state": "running", "samples": 5.0, "nodes": ["n0"], "rate": 2.0}]

    def labels(state_dir: Path, **options):
        exporter = MetricsExporter(StateStore(state_dir / "state.db"), **options)
        exporter.metrics.update(_status(["n0"], {"n0": "secret-project-x"}, jobs), decision_latencies_s=[],
                                decisions=0)
        text, families = _families(exporter)
        return text, {s.labels["bft_job"] for s in families["bft_job_samples"].samples}

    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    text, hashed = labels(tmp_path / "a")
    assert "secret-project-x" not in text and len(hashed) == 1 and re.fullmatch("[0-9a-f]{16}", next(iter(hashed)))
    assert labels(tmp_path / "a")[1] == hashed  # stable across managers of the state directory (its key)
    assert labels(tmp_path / "b")[1] != hashed  # another directory's key: no dictionary of names to compare
    assert labels(tmp_path / "a", job_names=True)[1] == {"secret-project-x"}


def test_the_textfile_is_written_through_no_planted_symlink(tmp_path):
    """A user who can write the textfile's directory plants links where the temporary file used to be
    (.NAME.PID.tmp) and at the file itself: neither target is touched, the file becomes a real one."""
    victims = {}
    for name in ("victim-tmp", "victim-target"):
        victims[name] = tmp_path / name
        victims[name].write_text("root's own\n")
        victims[name].chmod(0o600)
    path = tmp_path / "bft.prom"
    (tmp_path / f".bft.prom.{os.getpid()}.tmp").symlink_to(victims["victim-tmp"])
    path.symlink_to(victims["victim-target"])
    exporter = MetricsExporter(StateStore(tmp_path / "state.db"), textfile=path)
    exporter.start()
    exporter.update(_status(["n0"], {}, []), decision_latencies_s=[], decisions=0)
    exporter.stop()
    for victim in victims.values():
        assert victim.read_text() == "root's own\n" and stat.S_IMODE(victim.stat().st_mode) == 0o600, victim
    assert not path.is_symlink() and stat.S_IMODE(path.lstat().st_mode) == 0o644
    assert "bft_pool_nodes 1.0" in path.read_text()


def test_the_endpoint_holds_a_bounded_number_of_connections_and_still_answers_a_scrape(tmp_path, monkeypatch):
    """More idle connections than its slots: the server holds at most MAX_CONNECTIONS (the oldest are
    closed first), a scrape is still answered, and an idle connection is closed at its deadline."""
    monkeypatch.setattr(metrics_http, "REQUEST_DEADLINE_S", 2.0)
    exporter = MetricsExporter(StateStore(tmp_path / "state.db"), port=0)
    url = exporter.start()
    exporter.update(_status(["n0"], {}, []), decision_latencies_s=[], decisions=0)
    port = int(url.rsplit(":", 1)[1].split("/")[0])
    idle = [socket.create_connection(("127.0.0.1", port), timeout=10) for _ in range(metrics_http.MAX_CONNECTIONS + 20)]
    try:
        server = exporter._server
        with urllib.request.urlopen(url, timeout=10) as r:
            assert b"bft_pool_nodes 1.0" in r.read()
        assert len(server._connections) <= metrics_http.MAX_CONNECTIONS
        assert idle[0].recv(1) == b""  # the oldest was pushed out (closed: end of stream)
        deadline = time.monotonic() + 30
        while server._connections and time.monotonic() < deadline:  # the rest end at their deadline
            time.sleep(0.1)
        assert not server._connections
        assert idle[-1].recv(1) == b""
        with urllib.request.urlopen(url, timeout=10) as r:
            assert r.status == 200
        for request, status in ((b"POST /metrics HTTP/1.1\r\n\r\n", b"405"), (b"GET /x HTTP/1.1\r\n\r\n", b"404"),
                                (b"garbage\r\n\r\n", b"400")):
            with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
                s.sendall(request)
                assert s.makefile("rb").readline().split()[1] == status, request[:20]
        assert exporter.render() is exporter.render()  # rendered once per snapshot, however often scraped
    finally:
        for s in idle:
            s.close()
        exporter.stop()


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
        port = free_port()
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
                         "--metrics-interval", "0.5", "--metrics-textfile", str(textfile), "--metrics-job-names")
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


AS_NOBODY = ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups"]
# Holds N idle connections to 127.0.0.1:PORT (non-blocking connects, so a full backlog holds up
# nothing), says "ready" once every one is established (writable), and holds them until killed.
FLOOD = """
import select, socket, sys, time
port, n = int(sys.argv[1]), int(sys.argv[2])
flood = []
for _ in range(n):
    s = socket.socket()
    s.setblocking(False)
    s.connect_ex(("127.0.0.1", port))
    flood.append(s)
poll = select.poll()
for s in flood:
    poll.register(s, select.POLLOUT)
deadline = time.monotonic() + 60
while len([fd for fd, ev in poll.poll(0) if ev & select.POLLOUT]) < n and time.monotonic() < deadline:
    time.sleep(0.2)
if len([fd for fd, ev in poll.poll(0) if ev & select.POLLOUT]) == n:
    print("ready", flush=True)
time.sleep(3600)
"""


def _open_descriptors(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


@pytest.mark.runtime
def test_1100_idle_connections_at_1024_open_files_stop_neither_the_manager_nor_its_jobs(harness):
    """The issue's attack: the manager at the usual 1,024 open files, 1,100 idle connections held against
    its metrics port by another user (nobody, where the test runs as root). Its descriptors stay within
    the endpoint's bound, a second job (new files, new processes) starts and trains meanwhile, the
    first trains on, and a scrape is still answered."""
    proc = harness.start("--local-nodes", "2", "--local-emulate", "--resize", "relaunch", "--metrics-port", "0",
                         "--metrics-interval", "0.5")
    url = _wait(lambda: re.search(r"metrics on (http://127\.0\.0\.1:(\d+)/metrics)", harness.manager_log()), 30,
                "the manager's metrics line", harness.root / "manager-0.log")
    resource = pytest.importorskip("resource")
    resource.prlimit(proc.pid, resource.RLIMIT_NOFILE, (1024, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
    curve = '{"nodes": [0, 1], "throughput": [0, 100]}'
    harness.submit("first", "--min", "1", "--max", "1", "--samples", "1e12", "--", "--curve", curve, script=EMULATED)
    harness.wait(lambda s: s["jobs"][0]["samples"] > 0, 120, "the first job to train", proc=proc)
    before = _open_descriptors(proc.pid)
    # Another user where the test can play one (root: nobody), else this one; stopped by pid.
    as_nobody = AS_NOBODY if os.geteuid() == 0 and shutil.which("setpriv") else []
    flood = subprocess.Popen([*as_nobody, sys.executable, "-c", FLOOD, url.group(2), "1100"], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, cwd="/")
    try:
        ready, _, _ = select.select([flood.stdout], [], [], 90)
        assert ready and flood.stdout.readline() == b"ready\n", "the flood's connections were not established"
        first_samples = harness.job("first")["samples"]
        harness.submit("second", "--min", "1", "--max", "1", "--samples", "1e12", "--", "--curve", curve,
                       script=EMULATED)
        most = [before]

        def both_train(status) -> bool:
            most[0] = max(most[0], _open_descriptors(proc.pid))
            jobs = {j["id"]: j for j in status["jobs"]}
            return jobs["second"]["samples"] > 0 and jobs["first"]["samples"] > first_samples

        harness.wait(both_train, 120, "both jobs to train beside the flood", proc=proc)
        # The endpoint's bound, and a few descriptors of the second job's launch (its log, its pipes).
        assert most[0] <= before + metrics_http.MAX_CONNECTIONS + 16, (before, most[0])
        with urllib.request.urlopen(url.group(1), timeout=10) as r:
            assert b"bft_job_samples" in r.read()
    finally:
        flood.kill()
        flood.wait(30)
    harness.stop(proc)
    log = harness.manager_log()
    assert "Too many open files" not in log and "Traceback" not in log, log[-3000:]
