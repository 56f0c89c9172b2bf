"""End to end: a real manager, real torchrun, real PyTorch DDP (gloo, CPU), the local node source.

Nothing of torch or of the process table is mocked. Each test is bounded in time, and the harness
stops every process it started (by pid, and by the manager's identity tag) even when it fails.
"""

from __future__ import annotations

import re
import time

import pytest

from runtime_util import write_trace

pytestmark = pytest.mark.runtime


def _sizes(events, job):
    return [e["to_nodes"] for e in events if e["job"] == job]


def test_jobs_grow_shrink_survive_kill9_and_finish(harness):
    """Two DDP jobs without curves on 4 virtual nodes; nodes are reclaimed and come back during training;
    the manager is killed with SIGKILL half-way and restarted. Every job reaches its sample count."""
    trace = write_trace(harness.root / "trace.csv", [
        (0, "n0", "idle"), (0, "n1", "idle"), (0, "n2", "idle"), (0, "n3", "idle"),
        (35, "n3", "busy"), (45, "n2", "busy"), (80, "n2", "idle"), (80, "n3", "idle")])
    work = 300_000
    first = harness.start("--local-trace", str(trace), "--local-nodes", "4", "--local-grace-s", "8", "--grace", "10")
    # Paced (at most 64 samples per worker every 0.04 s): still running when the trace takes nodes
    # and when the manager is killed, also on a fast, quiet machine.
    harness.submit("a", "--min", "1", "--max", "4", "--samples", str(work), "--", "--step-s", "0.04")
    harness.submit("b", "--min", "1", "--max", "4", "--samples", str(work), "--", "--step-s", "0.04")

    # Both report progress, then nodes go away (the trace) and the jobs shrink.
    harness.wait(lambda s: sum(j["samples"] > 0 for j in s["jobs"]) >= 1, 90, "a first progress report")
    harness.wait(lambda s: len(s["nodes"]["pool"]) == 2, 60, "the trace to reclaim n2 and n3")
    before = {j["id"]: j["samples"] for j in harness.status()["jobs"]}
    harness.kill9(first)

    # Nothing reported is lost: the state file holds at least what status showed before the kill.
    store = harness.store()
    saved = {j.id: j.samples for j in store.jobs()}
    store.close()
    assert all(saved[k] >= v for k, v in before.items()), (before, saved)

    second = harness.start("--local-trace", str(trace), "--local-nodes", "4", "--local-grace-s", "8", "--grace", "10")
    harness.wait(lambda s: all(j["state"] == "finished" for j in s["jobs"]), 240, "both jobs to finish")

    final = {j["id"]: j for j in harness.status()["jobs"]}
    for name in ("a", "b"):
        assert final[name]["samples"] >= work
        done = re.findall(r"done: (\d+) samples", harness.job_log(name))
        assert done and int(done[-1]) >= work, harness.job_log(name)[-2000:]
        assert final[name]["samples"] >= before[name]
        # Resizes, preemptions and the restart are planned stops: one line each, no stack dump.
        assert "Traceback" not in harness.job_log(name), harness.job_log(name)[-3000:]
    # (A job may finish before the trace takes its nodes: on a quiet machine it never stops.)
    assert any("stopped: " in harness.job_log(name) for name in ("a", "b")), [harness.job_log(n) for n in "ab"]
    allocations = harness.events("allocate")
    sizes = {name: _sizes(allocations, name) for name in ("a", "b")}
    # Grown and shrunk as the allocator decided: every launch ran on the nodes of the last decision.
    assert any(b > a for n in sizes for a, b in zip(sizes[n], sizes[n][1:])) or any(
        s[0] > 1 for s in sizes.values()), sizes
    assert any(b < a for n in sizes for a, b in zip(sizes[n], sizes[n][1:])), sizes
    for launch in harness.events("launch"):
        decided = [e for e in allocations if e["job"] == launch["job"] and e["id"] < launch["id"]][-1]
        assert launch["nodes"] == decided["nodes"]
    # Resumed from checkpoints after resizes and after the crash.
    assert any("resumed from checkpoint" in harness.job_log(n) for n in ("a", "b"))
    # Reports arrived and the allocator used what the advisor learned from them.
    store = harness.store()
    reports = {n: sum(1 for p in store.progress() if p["job"] == n) for n in ("a", "b")}
    store.close()
    assert min(reports.values()) > 5, reports
    assert any(e["curve"] in ("measured", "fitted") for e in allocations), allocations
    # The restarted manager stopped the first one's processes; nothing is left behind at the end.
    assert harness.events("recovered")
    harness.stop(second)
    assert harness.leftovers() == []


def test_node_reclaimed_mid_step_job_goes_on(harness):
    """A node vanishes without grace (its processes are SIGKILLed mid-step): the job goes on with the
    other nodes and completes."""
    trace = write_trace(harness.root / "trace.csv", [
        (0, "n0", "idle"), (0, "n1", "idle"), (0, "n2", "idle"), (25, "n2", "busy")])
    # Paced steps (at most 7,680 samples/s on 3 workers) keep the job running past t=25 s on any
    # machine, so the reclaim always finds it on n2.
    work = 300_000
    proc = harness.start("--local-trace", str(trace), "--local-nodes", "3", "--local-grace-s", "0")
    harness.submit("solo", "--min", "1", "--max", "3", "--samples", str(work), "--", "--step-s", "0.05")
    harness.wait(lambda s: s["jobs"][0]["state"] == "finished", 180, "the job to finish")
    assert harness.events("preempted", job="solo"), "n2 was not running the job when it was reclaimed"
    assert harness.job("solo")["samples"] >= work
    assert re.search(r"done: \d+ samples on [12] workers", harness.job_log("solo"))
    harness.stop(proc)
    assert harness.leftovers() == []


def test_training_outlives_a_killed_manager_and_is_adopted_without_a_relaunch(harness):
    """kill -9 of the manager: the job trains on (its store lives in the keeper), and the restarted
    manager adopts its agents instead of relaunching them; the reports sent meanwhile arrive."""
    work = 400_000
    first = harness.start("--local-nodes", "2", "--grace", "10")
    # Paced (at most 2 x 64 / 0.02 = 6,400 samples/s) so that it is still running after the restart.
    harness.submit("long", "--min", "2", "--max", "2", "--samples", str(work), "--", "--step-s", "0.02",
                   "--checkpoint-every-s", "1")
    harness.wait(lambda s: s["jobs"][0]["samples"] > 0 and len(s["jobs"][0]["nodes"]) == 2, 120, "the job to train")
    launches = len(harness.events("launch", job="long"))
    harness.kill9(first)
    at_kill = max(harness.checkpointed_samples("long"), 1)
    # The manager is down; its job checkpoints progress beyond what it had when the manager died.
    deadline = time.monotonic() + 60
    while harness.checkpointed_samples("long") <= at_kill:
        assert time.monotonic() < deadline, "the job stopped training when the manager died"
        time.sleep(0.5)
    assert harness.keeper_pid() is not None
    down = harness.checkpointed_samples("long")

    second = harness.start("--local-nodes", "2", "--grace", "10")
    # The reports sent while it was down (relayed by the keeper) and after: samples at least what
    # the job checkpointed meanwhile, with no relaunch.
    harness.wait(lambda s: s["jobs"][0]["samples"] >= down, 60, "the reports of the adopted job")
    recovered = harness.events("recovered")[-1]
    assert recovered["adopted"] == ["long"], recovered
    harness.wait(lambda s: s["jobs"][0]["state"] == "finished", 240, "the job to finish")
    assert len(harness.events("launch", job="long")) == launches  # adopted, never relaunched
    assert "resumed from checkpoint" not in harness.job_log("long")
    harness.stop(second)
    assert harness.leftovers() == []  # the keeper included
