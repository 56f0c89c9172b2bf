"""End to end: jobs that misbehave (a script that never reports, one that exits before its work is
done) and what bft status says of jobs that wait. A real manager and real torchrun, local source."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.runtime

# Never calls bft.train.report(); exits normally after a while.
SILENT = "import time\ntime.sleep(60)\nprint('silent script done', flush=True)\n"


def test_a_silent_job_is_flagged_loses_its_nodes_and_ends_incomplete(harness, tmp_path):
    silent = tmp_path / "silent.py"
    silent.write_text(SILENT)
    # A timeout well above a real job's start-up (torch import, rendezvous, first step) on a busy machine.
    harness.start("--local-nodes", "2", "--report-timeout", "20", "--grace", "5")
    harness.submit("silent", "--min", "1", "--max", "2", "--samples", "1000", script=silent)
    harness.wait(lambda s: s["jobs"][0]["state"] == "running", 60, "the silent job to start")
    # Paced (at most 3,200 samples/s per worker) so that it still runs when the silent job is flagged.
    harness.submit("reporting", "--min", "1", "--max", "2", "--samples", "150000", "--", "--step-s", "0.02")

    def flagged(s):
        j = next(j for j in s["jobs"] if j["id"] == "silent")
        return "bft.train.report()" in (j.get("warning", "") + j.get("waiting", ""))
    harness.wait(flagged, 120, "bft status to flag the silent job")
    # The job that reports gets every node it can use; the silent one only what is left over.
    harness.wait(lambda s: next(j for j in s["jobs"] if j["id"] == "reporting")["state"] == "finished", 180,
                 "the reporting job to finish")
    assert harness.events("no_reports", job="silent")
    silent_sizes = [e["to_nodes"] for e in harness.events("allocate", job="silent")]
    reporting_sizes = [e["to_nodes"] for e in harness.events("allocate", job="reporting")]
    assert max(reporting_sizes) == 2, reporting_sizes
    # Exits normally at 0 of its 1,000 samples: shown as incomplete, with its count, not as finished.
    final = harness.wait(lambda s: s["jobs"][0]["state"] not in ("queued", "running"), 180,
                         "the silent job to end")["jobs"][0]
    assert final["state"] == "incomplete", final
    assert "0 of 1000 samples" in final["reason"], final
    log = harness.job_log("silent")
    assert "silent script done" in log and "Traceback" not in log, log[-3000:]
    if len(silent_sizes) > 1:  # it was stopped at least once: one line for it, not torchrun's stack dumps
        assert "stopped: " in log, log[-3000:]


def test_status_says_why_a_job_waits(harness, tmp_path):
    silent = tmp_path / "silent.py"
    silent.write_text("import time\ntime.sleep(600)\n")
    harness.start("--local-nodes", "1", "--max-jobs", "1", "--report-timeout", "600")
    harness.submit("first", "--min", "1", "--max", "1", script=silent)
    harness.submit("second", "--min", "1", "--max", "1", script=silent)
    status = harness.wait(lambda s: s["jobs"][0]["state"] == "running", 60, "the first job to run")
    second = status["jobs"][1]
    assert second["waiting"].startswith("admission cap reached"), second
    assert second["waiting_s"] >= 0
