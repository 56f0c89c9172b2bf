"""A report captured before a manager restart and replayed after it is dropped (issue 31): the last
sequence number believed of each rank is stored, and the keeper holds, while no manager is attached,
only the newest believable report of each sender, so a flood pushes out nothing."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time

import pytest

from bft.runtime.decide.curvebook import CurveBook
from bft.runtime.decide.intake import ReportIntake
from bft.runtime.jobs.runs import JobRun
from bft.runtime.statedb.store import StateStore
from bft.train import protocol
from runtime_util import REPO, make_run

EMULATED = REPO / "python" / "bft" / "runtime" / "sources" / "emulated.py"


def test_a_report_replayed_after_a_restart_is_dropped(tmp_path):
    store = StateStore(tmp_path / "state.db")
    run = make_run(store, "job")
    run.row.secret = "ab" * 32
    run.row.generation = 3
    key = bytes.fromhex(run.row.secret)

    def datagram(seq: int, samples: float, round_: int = 1) -> bytes:
        return protocol.encode(protocol.Report("job", 3, round_, seq, 0, 1, False, samples, time.time()), key)

    captured = datagram(2, 200.0)
    first = ReportIntake(store, CurveBook(store, warmup_s=0.0, scale_up_s=5.0, scale_down_s=5.0))
    for seq in (1, 2, 3):
        first.on_datagram(datagram(seq, 100.0 * seq), {"job": run}.get)
    assert run.row.samples == 300.0
    # The manager restarts: a new intake and a new run of the same stored job, nothing in memory.
    restarted = JobRun(store.job("job"))
    restarted.row.secret, restarted.row.generation = run.row.secret, 3
    second = ReportIntake(store, CurveBook(store, warmup_s=0.0, scale_up_s=5.0, scale_down_s=5.0))
    second.on_datagram(captured, {"job": restarted}.get)
    second.on_datagram(datagram(9, 900.0, round_=0), {"job": restarted}.get)  # an older round of workers
    assert second.dropped["replay"] == 1 and second.dropped["stale_generation"] == 1
    assert restarted.row.samples == 300.0  # nothing believed: the stored count stands
    second.on_datagram(datagram(4, 400.0), {"job": restarted}.get)  # the workers' next report
    assert restarted.row.samples == 400.0 and second.dropped_total == 2


@pytest.mark.runtime
@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("setpriv"), reason="playing another user needs root")
def test_a_flood_of_a_captured_report_as_nobody_across_a_restart_changes_nothing(harness):
    """The issue's repro: a valid report captured, the manager killed (-9), the report sent 80,000 times
    by `nobody` to the report port, the manager restarted: no progress row with the old count."""
    proc = harness.start("--local-nodes", "1", "--local-emulate", "--resize", "relaunch")
    harness.submit("victim", "--min", "1", "--max", "1", "--samples", "1e12", "--",
                   "--curve", '{"nodes": [0, 1], "throughput": [0, 1000]}', script=EMULATED)
    harness.wait(lambda s: harness.job("victim")["samples"] > 0, 60, "the job's first reports")
    store = harness.store()
    try:
        row = store.job("victim")
        port = int(store.events(("manager_started",))[-1]["reports"].rsplit(":", 1)[1])
    finally:
        store.close()
    # What the job's first report was: generation, round 0, sequence number 1, rank 0 of 1, a small count.
    captured = protocol.encode(protocol.Report("victim", row.generation, 0, 1, 0, 1, False, 1.0, time.time()),
                               bytes.fromhex(row.secret))
    harness.kill9(proc)
    recorded = _progress(harness)  # in the order of recording
    before = max(p["samples"] for p in recorded)
    flood = ("import socket, sys\n"
             "s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n"
             "data = bytes.fromhex(sys.argv[2])\n"
             "for _ in range(80000):\n"
             "    s.sendto(data, ('127.0.0.1', int(sys.argv[1])))\n")
    r = subprocess.run(["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups", sys.executable, "-c", flood,
                        str(port), captured.hex()], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    proc = harness.start("--local-nodes", "1", "--local-emulate", "--resize", "relaunch")
    harness.wait(lambda s: harness.job("victim")["samples"] > before, 60, "the job's reports after the restart")
    after = [p["samples"] for p in _progress(harness)[len(recorded):]]  # recorded by the restarted manager
    assert after and min(after) >= before, (before, sorted(after)[:5])
    harness.stop(proc)
    assert "Traceback" not in harness.manager_log()


def _progress(harness):
    store = harness.store()
    try:
        return [dict(p) for p in store.progress()]  # by rowid: the order of recording
    finally:
        store.close()
