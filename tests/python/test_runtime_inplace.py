"""End to end: in-place resizes (``--resize inplace``) with a real manager, real PyTorch (gloo on CPU;
NCCL on a GPU), the local node source and examples/runtime/elastic_synthetic.py.

Each test is bounded in time, and the harness stops every process it started (by pid, and by the
manager's identity tag) even when it fails.
"""

from __future__ import annotations

import collections
import json
import os
import signal
import time
from pathlib import Path
from typing import Dict, List

import pytest

from runtime_util import REPO, bft, stream_positions, write_trace

torch = pytest.importorskip("torch", reason="the runtime tests need PyTorch (./dev.sh installs torch==2.13.0)")

pytestmark = pytest.mark.runtime

ELASTIC = REPO / "examples" / "runtime" / "elastic_synthetic.py"
DATASET = 65536


def _pids_by_node(harness, job: str) -> Dict[str, List[int]]:
    """node -> the pids of the job's process rows there, in order (one row per generation)."""
    store = harness.store()
    try:
        rows = store.db.execute("SELECT node, pid FROM procs WHERE job = ? ORDER BY id", (job,)).fetchall()
    finally:
        store.close()
    out: Dict[str, List[int]] = collections.defaultdict(list)
    for node, pid in rows:
        out[node].append(pid)
    return out


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"


def _submit(harness, name: str, work: int, *args: str) -> None:
    harness.submit(name, "--min", "1", "--max", "4", "--samples", str(work), *args, script=ELASTIC)


def test_grow_and_shrink_in_place_keep_survivors_and_cover_each_epoch_once(harness):
    """1 -> 2 -> 1 nodes in place: the worker on n0 keeps its process throughout, n1's worker joins
    (gets the state by broadcast) and leaves; every index of every epoch is processed exactly once."""
    assert "(cpu, gloo)" in _grow_and_shrink(harness)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_grow_and_shrink_in_place_on_gpus(harness):
    """The same resizes on GPUs, survivors keeping their model on the device: with two GPUs or more
    each virtual node gets its own (--local-gpus) and the workers use NCCL; with one, both nodes
    share it and use gloo on CUDA tensors (NCCL refuses two ranks on one device)."""
    gpus = torch.cuda.device_count()
    expected = "(cuda, nccl)" if gpus >= 2 else "(cuda, gloo)"
    assert expected in _grow_and_shrink(harness, "--local-gpus", str(gpus))


def _grow_and_shrink(harness, *manager_args: str) -> str:
    """Grows a job 1 -> 2 -> 1 in place, checks the survivor and the epochs; returns the job's log.
    The manager runs with its default method (auto): the script uses ElasticState, so in place."""
    trace = write_trace(harness.root / "trace.csv", [(0, "n0", "idle"), (30, "n1", "idle"), (60, "n1", "busy")])
    logs = harness.root / "indices"
    logs.mkdir()
    proc = harness.start("--local-trace", str(trace), "--local-nodes", "2", "--local-grace-s", "8", "--grace", "10",
                         *manager_args)
    # Paced (64 samples per worker every 0.05 s): still running when the trace takes n1 back, also on
    # a fast, quiet machine. Two epochs of 65,536 samples: together they span both resizes.
    _submit(harness, "el", 2 * DATASET, "--", "--step-s", "0.05", "--dataset", str(DATASET), "--log-indices",
            str(logs))
    harness.wait(lambda s: s["jobs"][0]["state"] == "finished", 300, "the job to finish")

    resizes = harness.events("resize_inplace", job="el")
    assert [r["joined"] for r in resizes] == [["n1"], []], resizes
    assert [r["left"] for r in resizes] == [[], ["n1"]], resizes
    assert [r["nodes"] for r in resizes] == [["n0", "n1"], ["n0"]], resizes
    assert not harness.events("inplace_failed", "job_failed", job="el")
    assert len(harness.events("launch", job="el")) == 1  # no relaunch: one start of the job
    pids = _pids_by_node(harness, "el")
    assert len(pids["n0"]) == 3 and len(set(pids["n0"])) == 1, pids  # one process, three generations
    log = harness.job_log("el")
    assert "done: " in log and "Traceback" not in log, log[-3000:]
    gaps = harness.events("resize_gap", job="el")
    assert {(g["from_nodes"], g["to_nodes"], g["method"]) for g in gaps} == {(1, 2, "inplace"), (2, 1, "inplace")}

    seen = stream_positions(logs)
    worlds = {int(line.split()[2]) for f in logs.glob("*.txt") for line in f.read_text().splitlines()}
    assert worlds == {1, 2}, worlds  # the data was read at both sizes
    assert sorted(seen) == list(range(len(seen))), "a stream position was skipped"
    assert all(len(v) == 1 for v in seen.values()), "a stream position was processed twice"
    assert len(seen) >= 2 * DATASET, len(seen)
    for epoch in range(2):
        indices = [seen[p][0] for p in range(epoch * DATASET, (epoch + 1) * DATASET)]
        assert sorted(indices) == list(range(DATASET)), f"epoch {epoch} repeats or misses samples"
    harness.stop(proc)
    assert harness.leftovers() == []
    return log


def _grow_to_a_newcomer(harness, grace_s: float, inplace_timeout_s: float):
    """A manager whose job grows in place from n0 to n0+n1: (the manager's process, the newcomer's pid
    on n1) once the newcomer has been started."""
    # n1 comes at 20 s: the job has reported by then even on a loaded machine, so a failed resize is
    # not one before its first report (which would count as a retry).
    trace = write_trace(harness.root / "trace.csv", [(0, "n0", "idle"), (20, "n1", "idle")])
    proc = harness.start("--resize", "inplace", "--local-trace", str(trace), "--local-nodes", "2",
                         "--grace", f"{grace_s:g}", "--inplace-timeout", f"{inplace_timeout_s:g}")
    _submit(harness, "el", 60_000, "--", "--step-s", "0.05")
    harness.wait(lambda s: harness.events("newcomers_starting", job="el"), 120, "the grow in place")
    deadline = time.monotonic() + 30
    while not (pid := harness.open_pid("el", "n1")) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert pid, "the newcomer on n1 was not started"
    return proc, pid


def test_a_newcomer_killed_mid_grow_is_dropped_and_the_survivor_trains_on(harness):
    """The newcomer of a grow is SIGKILLed before it has arrived (the survivor trains on meanwhile): a
    lost worker, dropped in place; the survivor keeps its process and trains on, the job grows back
    once the node has rested, nothing is relaunched or failed, and the job finishes."""
    # The default --inplace-timeout (30 s): the newcomer dies before it arrives, so no wait is bounded
    # by it here; what it does bound is the hung-worker check once the job has grown back (capped at
    # it), and 5 s there is what a healthy worker's heartbeat may be late on a loaded machine.
    proc, pid = _grow_to_a_newcomer(harness, grace_s=5, inplace_timeout_s=30)
    survivor = harness.open_pid("el", "n0")
    os.kill(pid, signal.SIGKILL)
    harness.wait(lambda s: s["jobs"][0]["state"] == "finished", 240, "the job to finish after the loss")
    events = harness.events(job="el")  # (named in each message: what the job went through)
    assert [e["node"] for e in harness.events("worker_lost", job="el")] == ["n1"], events
    assert len(harness.events("launch", job="el")) == 1, events  # never relaunched
    assert not harness.events("job_failed", "inplace_failed", job="el"), events
    assert set(_pids_by_node(harness, "el")["n0"]) == {survivor}, events
    assert harness.job("el")["samples"] >= 60_000
    harness.stop(proc)
    assert harness.leftovers() == []


def test_in_place_training_outlives_a_killed_manager_and_resizes_after_adoption(harness):
    """kill -9 of the manager while the job trains in place on 2 nodes: the workers train on (the
    keeper keeps the store), the restarted manager adopts them and then shrinks the job in place."""
    trace = write_trace(harness.root / "trace.csv", [(0, "n0", "idle"), (0, "n1", "idle"), (50, "n1", "busy")])
    # equal_share keeps the job on both nodes until the trace takes n1, whatever its curve measures on
    # a loaded machine: the one shrink is the trace's, decided by the second manager.
    args = ("--resize", "inplace", "--local-trace", str(trace), "--local-nodes", "2", "--local-grace-s", "8",
            "--grace", "10", "--policy", "equal_share")
    first = harness.start(*args)
    _submit(harness, "el", 120_000, "--", "--step-s", "0.05")
    harness.wait(lambda s: s["jobs"][0]["samples"] > 0 and len(s["jobs"][0]["nodes"]) == 2, 120, "training on 2")
    before = _pids_by_node(harness, "el")
    harness.kill9(first)
    time.sleep(2)
    second = harness.start(*args)
    harness.wait(lambda s: s["jobs"][0]["state"] == "finished", 240, "the job to finish")
    assert [e["adopted"] for e in harness.events("recovered")] == [["el"]]
    resizes = harness.events("resize_inplace", job="el")
    assert [r["nodes"] for r in resizes] == [["n0"]], resizes  # the shrink, by the second manager
    assert len(harness.events("launch", job="el")) == 1  # never relaunched
    after = _pids_by_node(harness, "el")
    assert set(after["n0"]) == set(before["n0"]), (before, after)  # the same process throughout
    harness.stop(second)
    assert harness.leftovers() == []


def test_a_manager_killed_mid_grow_leaves_the_grow_and_its_gap_to_the_manager_that_adopts_the_job(harness):
    """kill -9 of the manager while a grow's newcomer is held before it joins (SIGSTOP): the restarted
    manager adopts both workers, the newcomer resumes and joins, and the grow's gap (kept only in the
    killed manager's memory before) is measured by the successor; nothing is relaunched and nothing
    fails."""
    proc, pid = _grow_to_a_newcomer(harness, grace_s=5, inplace_timeout_s=60)
    os.kill(pid, signal.SIGSTOP)
    harness.kill9(proc)
    time.sleep(2)
    second = harness.start("--resize", "inplace", "--local-trace", str(harness.root / "trace.csv"), "--local-nodes",
                           "2", "--grace", "5", "--inplace-timeout", "60")
    harness.wait(lambda s: harness.events("recovered"), 60, "the restarted manager's recovery")
    os.kill(pid, signal.SIGCONT)
    harness.wait(lambda s: harness.events("resize_gap", job="el"), 120, "the grow's first step at 2 nodes")
    assert [e["adopted"] for e in harness.events("recovered")] == [["el"]]
    (gap,) = harness.events("resize_gap", job="el")
    assert (gap["from_nodes"], gap["to_nodes"], gap["method"]) == (1, 2, "inplace"), gap
    (recovered,) = harness.events("recovered")
    assert gap["id"] > recovered["id"], gap  # measured by the successor
    # From the survivor's last step at 1 node, which it kept taking while the newcomer was held.
    assert 0.0 < gap["gap_s"] < 30.0, gap
    assert not harness.events("inplace_failed", "job_failed", job="el")
    assert len(harness.events("launch", job="el")) == 1
    harness.stop(second)
    assert harness.leftovers() == []


def test_a_newcomer_hung_mid_grow_is_dismissed_at_its_deadline_and_the_survivor_never_waits(harness):
    """The newcomer of a grow hangs (SIGSTOP) before it joins: the survivor trains on meanwhile; after
    --inplace-timeout the manager dismisses it (SIGKILL at once, no grace: it holds nothing) and the
    job goes on without it (the survivor in its own process group): nothing is relaunched, nothing
    fails, and the job finishes."""
    proc, pid = _grow_to_a_newcomer(harness, grace_s=3, inplace_timeout_s=4)
    survivor = harness.open_pid("el", "n0")
    os.kill(pid, signal.SIGSTOP)
    harness.wait(lambda s: harness.events("newcomer_dismissed", job="el"), 60, "the newcomer's dismissal")
    dismissed = harness.events("newcomer_dismissed", job="el")
    assert dismissed[0]["node"] == "n1", harness.events(job="el")
    harness.wait(lambda s: not _alive(pid), 10, "the dismissed newcomer to be killed")
    harness.wait(lambda s: s["jobs"][0]["state"] == "finished", 240, "the job to finish")
    assert not harness.events("inplace_failed", "job_failed", "worker_lost", job="el")
    assert len(harness.events("launch", job="el")) == 1  # never relaunched
    assert set(_pids_by_node(harness, "el")["n0"]) == {survivor}
    harness.stop(proc)
    assert harness.leftovers() == []


def test_reclaim_during_a_grow_frees_the_node_within_its_grace_and_the_survivor_goes_on(harness):
    """The newcomer's node is reclaimed while the job grows onto it, 1 s after the grow (before the cold
    newcomer has arrived): it is dismissed and killed at once, no generation is published (the survivor
    never leaves its group), the node is vacated within its grace time, and the job is never relaunched."""
    grace = 4
    trace = write_trace(harness.root / "trace.csv", [(0, "n0", "idle"), (12, "n1", "idle"), (13, "n1", "busy")])
    proc = harness.start("--resize", "inplace", "--local-trace", str(trace), "--local-nodes", "2",
                         "--local-grace-s", str(grace), "--grace", "10")
    _submit(harness, "el", 60_000, "--", "--step-s", "0.05")
    harness.wait(lambda s: s["jobs"][0]["state"] == "finished", 240, "the job to finish")
    assert [e["nodes"] for e in harness.events("newcomers_starting", job="el")] == [["n1"]]
    assert harness.events("resize_inplace", job="el") == []  # the survivor trained on in generation 1
    assert len(harness.events("launch", job="el")) == 1
    assert not harness.events("inplace_failed", "job_failed", job="el")
    assert len(set(_pids_by_node(harness, "el")["n0"])) == 1
    reclaimed = harness.events("preempted", job="el")[0]["time_s"]
    store = harness.store()
    try:
        (ended,) = store.db.execute("SELECT ended_s FROM procs WHERE job = 'el' AND node = 'n1'").fetchone()
    finally:
        store.close()
    assert ended - reclaimed <= grace + 1.0, ended - reclaimed  # (+ the manager's poll interval)
    harness.stop(proc)
    assert harness.leftovers() == []


def test_a_reclaimed_nodes_own_sigterm_stops_only_its_worker(harness):
    """A batch scheduler signals the processes of a node it takes back (Slurm: SIGTERM to the pilot
    job's steps at preemption), often before the manager hears of the reclaim. That worker's stop
    must not stop its peers at the next step boundary: the job shrinks in place once the manager
    answers the reclaim, the survivor keeps its process, and nothing is judged a failure."""
    reclaim_s = 30
    trace = write_trace(harness.root / "trace.csv", [(0, "n0", "idle"), (0, "n1", "idle"), (reclaim_s, "n1", "busy")])
    proc = harness.start("--resize", "inplace", "--local-trace", str(trace), "--local-nodes", "2",
                         "--local-grace-s", "8", "--grace", "10")
    _submit(harness, "el", 150_000, "--", "--step-s", "0.05")
    harness.wait(lambda s: s["jobs"][0]["samples"] > 0 and len(s["jobs"][0]["nodes"]) == 2, 120, "training on 2")
    t0 = json.loads((harness.state_dir / "local-source.json").read_text())["t0"]
    assert time.time() < t0 + reclaim_s - 3, "too slow to signal the node before its reclaim"
    time.sleep(t0 + reclaim_s - 1.5 - time.time())
    pid = harness.open_pid("el", "n1")
    assert pid > 0, _pids_by_node(harness, "el")
    os.kill(pid, signal.SIGTERM)  # 1.5 s before the manager hears of it
    harness.wait(lambda s: s["jobs"][0]["state"] == "finished", 240, "the job to finish")
    events = [(e["kind"], e.get("node"), e.get("nodes")) for e in harness.events(job="el")]
    assert [r["nodes"] for r in harness.events("resize_inplace", job="el")] == [["n0"]], events
    assert not harness.events("inplace_failed", "job_failed", job="el"), events
    assert len(harness.events("launch", job="el")) == 1, events  # never relaunched
    assert len(set(_pids_by_node(harness, "el")["n0"])) == 1
    harness.stop(proc)
    assert harness.leftovers() == []


@pytest.mark.parametrize("manager_method, asked, script, expected", [
    ("auto", None, ELASTIC, "inplace"),  # the default: the script holds its state in ElasticState
    ("auto", None, REPO / "examples" / "runtime" / "ddp_synthetic.py", "relaunch"),  # a script of its own
    ("auto", "relaunch", ELASTIC, "relaunch"),  # a job's own choice wins
    ("relaunch", None, ELASTIC, "relaunch"),
    ("relaunch", "inplace", ELASTIC, "inplace"),
])
def test_each_job_gets_its_resize_method_at_submit_and_keeps_it(harness, manager_method, asked, script, expected):
    """A job's method is fixed when it is submitted (bft submit --resize, else the manager's --resize,
    auto resolved from the script) and kept by a restarted manager started with another default."""
    trace = write_trace(harness.root / "trace.csv", [(3600, "n0", "idle")])  # busy for an hour: nothing runs
    args = ("--local-trace", str(trace), "--local-nodes", "1", "--no-standby")
    proc = harness.start("--resize", manager_method, *args)
    harness.submit("j", *(("--resize", asked) if asked else ()), script=script)
    assert harness.job("j")["resize"] == expected
    harness.kill9(proc)
    other = "inplace" if expected == "relaunch" else "relaunch"
    proc = harness.start("--resize", other, *args)
    assert harness.job("j")["resize"] == expected
    r = bft("submit", str(ELASTIC), "--state-dir", str(harness.state_dir), "--resize", "sideways")
    assert r.returncode == 2 and "--resize" in r.stderr and "Traceback" not in r.stderr, r.stderr
    harness.stop(proc)
    assert harness.leftovers() == []
