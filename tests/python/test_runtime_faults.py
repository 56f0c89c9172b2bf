"""End to end: faults of an in-place job's workers, with a real manager, real PyTorch (gloo on CPU),
the local node source and examples/runtime/elastic_synthetic.py. A lost worker (killed, or hung and
killed by the manager) is a shrink: the survivors train on from their own state, nothing is
relaunched and no retry is counted (docs/runtime.md, "The resize machine").

Each test is bounded in time, and the harness stops every process it started (by pid, and by the
manager's identity tag) even when it fails.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from runtime_util import REPO, listening_sockets, write_trace

pytest.importorskip("torch", reason="the runtime tests need PyTorch (./dev.sh installs torch==2.13.0)")

pytestmark = pytest.mark.runtime

ELASTIC = REPO / "examples" / "runtime" / "elastic_synthetic.py"


def _training_on_two(harness, *manager_args: str, script_args=()):
    """A manager whose job `el` (elastic_synthetic.py with `script_args`) trains in place on n0 and n1;
    (the manager, the pid on n0, on n1)."""
    trace = write_trace(harness.root / "trace.csv", [(0, "n0", "idle"), (0, "n1", "idle")])
    # equal_share: the job takes both nodes whenever it may, whatever its curve measured on a loaded machine.
    proc = harness.start("--resize", "inplace", "--local-trace", str(trace), "--local-nodes", "2", "--grace", "5",
                         "--policy", "equal_share", *manager_args)
    harness.submit("el", "--min", "1", "--max", "2", "--samples", "10000000", "--", "--step-s", "0.3",
                   *script_args, script=ELASTIC)
    harness.wait(lambda s: s["jobs"][0]["samples"] > 0 and len(s["jobs"][0]["nodes"]) == 2, 120, "training on 2")
    return proc, harness.open_pid("el", "n0"), harness.open_pid("el", "n1")


def _survivor_trained_on(harness, survivor: int, lost_node: str = "n1") -> None:
    """After the loss: the survivor's process trained on alone (a first step at 1 node), the node
    rested, and the allocator grew the job back onto it in place (a first step at 2 nodes); nothing
    was relaunched, nothing failed, no retry was counted."""
    harness.wait(lambda s: [g["to_nodes"] for g in harness.events("resize_gap", job="el")] == [1, 2], 120,
                 "a step at 1 node, then at 2 again")
    (lost,) = harness.events("worker_lost", job="el")
    assert lost["node"] == lost_node
    assert [e["node"] for e in harness.events("node_resting")] == [lost_node]
    resizes = [r["nodes"] for r in harness.events("resize_inplace", job="el")]
    assert resizes == [["n0"], ["n0", "n1"]], resizes  # dropped, then grown back
    assert harness.open_pid("el", "n0") == survivor  # the same process, never restarted
    assert len(harness.events("launch", job="el")) == 1  # never relaunched
    assert not harness.events("job_failed", "inplace_failed", "generation_ended", job="el")
    assert harness.job("el")["retries"] == 0


@pytest.mark.parametrize("script_args", [(), ("--ddp",)], ids=["bare-model", "ddp-model"])
def test_a_killed_worker_is_dropped_and_the_survivor_trains_on_without_a_relaunch(harness, script_args):
    """Also for a script that trains through state.ddp_model (DistributedDataParallel, as docs/runtime.md
    shows): the survivor finds its peer gone (at its step boundary, or in backward, where the in-place
    hook gives it zeros), rejoins, and each join rebuilds the wrapper for its group (of 1, then of 2)."""
    proc, survivor, victim = _training_on_two(harness, script_args=script_args)
    os.kill(victim, signal.SIGKILL)
    harness.wait(lambda s: harness.events("worker_lost", job="el"), 60, "the lost worker to be dropped")
    _survivor_trained_on(harness, survivor)
    harness.stop(proc)
    assert harness.leftovers() == []


def test_a_stopped_worker_is_found_hung_by_its_heartbeats_killed_and_dropped(harness):
    """SIGSTOP of one worker: its heartbeats stop while its peer's go on; after the job's bound (20 of
    its steps here, well under --inplace-timeout) the manager kills it and drops it as a lost worker,
    its node rests, and the job grows back onto it."""
    proc, survivor, victim = _training_on_two(harness, "--inplace-timeout", "60")
    os.kill(victim, signal.SIGSTOP)
    harness.wait(lambda s: harness.events("worker_hung", job="el"), 60, "the stopped worker to be found hung")
    (hung,) = harness.events("worker_hung", job="el")
    assert hung["node"] == "n1" and hung["bound_s"] < 60, hung
    _survivor_trained_on(harness, survivor)
    assert harness.events("worker_lost", job="el")[0]["exit_code"] == -signal.SIGKILL
    shrink = harness.events("resize_gap", job="el")[0]  # the survivor's last step at 2 nodes to its first at 1
    print("bound_s", hung["bound_s"], "without training", round(shrink["gap_s"], 2), "s")
    harness.stop(proc)
    assert harness.leftovers() == []



def test_the_keepers_loss_before_the_first_report_costs_no_retry_and_no_relaunch(harness):
    """kill -9 of the keeper as soon as an in-place job is launched (before its first report): the
    manager starts a new keeper on the same ports and re-forms the job in place in its store; the
    workers reconnect and train in their processes: no retry, no relaunch."""
    trace = write_trace(harness.root / "trace.csv", [(0, "n0", "idle"), (0, "n1", "idle")])
    # Without standbys the workers start cold (seconds): the keeper dies before they report.
    proc = harness.start("--resize", "inplace", "--local-trace", str(trace), "--local-nodes", "2", "--grace", "5",
                         "--no-standby")
    harness.submit("el", "--min", "1", "--max", "2", "--samples", "10000000", "--", "--step-s", "0.3",
                   script=ELASTIC)
    harness.wait(lambda s: len(harness.events("launch", job="el")) == 1, 60, "the launch")
    first = harness.keeper_pid()
    os.kill(first, signal.SIGKILL)
    harness.wait(lambda s: harness.events("keeper_lost"), 30, "the manager to notice the keeper's death")
    assert harness.job("el")["samples"] == 0  # (lost before the first report)
    harness.wait(lambda s: s["jobs"][0]["samples"] > 0, 120, "training in the new keeper's store")
    assert harness.keeper_pid() not in (None, first)
    lost = harness.events("keeper_lost")[0]["id"]
    assert [e["nodes"] for e in harness.events("resize_inplace", job="el") if e["id"] > lost] == [["n0", "n1"]]
    assert len(harness.events("launch", job="el")) == 1  # never relaunched
    assert not harness.events("job_failed", "inplace_failed", "generation_ended", "worker_lost", job="el")
    assert harness.job("el")["retries"] == 0
    harness.stop(proc)
    assert harness.leftovers() == []



def _started_keeper(manager_pid: int, old: int, timeout_s: float) -> int:
    """The pid of the keeper the manager started after `old` died, once it listens on its store port (it
    has bound it and not yet served it)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for entry in Path("/proc").iterdir():
            try:
                pid = int(entry.name)
                cmdline = (entry / "cmdline").read_bytes()
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (ValueError, OSError, IndexError):
                continue
            if pid != old and ppid == manager_pid and b"bft.runtime.keeper" in cmdline and \
                    any(proto == "tcp" for proto, _, _ in listening_sockets([pid])):
                return pid
        time.sleep(0.005)
    pytest.fail(f"no new keeper listened within {timeout_s} s")


def test_a_keeper_that_answers_late_and_dies_during_the_launch_costs_no_retry(harness):
    """A loaded host's keeper answers late: here it is held (SIGSTOP) while the manager launches an
    in-place job and writes its first generation, then killed (kill -9), and its replacement is held
    too for 10 s once it has bound its store port (a loaded host took 10-17 s to start one). The
    manager gives up on the dead store at once instead of blocking its loop in TCPStore's connect
    retries for 36 s (which made the launch fail: no worker started, retry 1 counted, a cold relaunch;
    over 100 s without training at load 12-15); the workers start, reach the new keeper within a probe
    interval of its answer and train in its store within 10 s: no retry, no relaunch."""
    trace = write_trace(harness.root / "trace.csv", [(0, "n0", "idle"), (0, "n1", "idle")])
    proc = harness.start("--resize", "inplace", "--local-trace", str(trace), "--local-nodes", "2", "--grace", "5",
                         "--no-standby")
    first = harness.keeper_pid()
    os.kill(first, signal.SIGSTOP)
    try:
        harness.submit("el", "--min", "1", "--max", "2", "--samples", "10000000", "--", "--step-s", "0.3",
                       script=ELASTIC)
        deadline = time.monotonic() + 60  # (read from state.db: the manager's loop is writing to the held store)
        while not harness.events("launch", job="el") and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        os.kill(first, signal.SIGKILL)
    late = _started_keeper(proc.pid, first, 60)
    os.kill(late, signal.SIGSTOP)
    try:
        time.sleep(10)  # the fault's length (under --inplace-timeout, 30 s): nothing to wait for
    finally:
        os.kill(late, signal.SIGCONT)
    answered = time.monotonic()
    harness.wait(lambda s: s["jobs"][0]["samples"] > 0, 60, "training in the late keeper's store")
    trained_after_s = time.monotonic() - answered
    print(f"first report {trained_after_s:.1f} s after the late keeper was continued")
    assert not harness.events("launch_failed", "job_failed", "inplace_failed", "generation_ended", "worker_lost",
                              job="el")
    assert len(harness.events("launch", job="el")) == 1  # never relaunched
    assert harness.job("el")["retries"] == 0
    assert trained_after_s < 10, trained_after_s
    assert harness.keeper_pid() == late
    lost = harness.events("keeper_lost")[0]["id"]
    assert [e["nodes"] for e in harness.events("resize_inplace", job="el") if e["id"] > lost] == [["n0", "n1"]]
    harness.stop(proc)
    assert harness.leftovers() == []
