"""The Slurm node source on a real 8-node Slurm cluster started on this host (tests/slurm/cluster.sh).

Partition `main` (PriorityTier 10) preempts partition `pilot` (PriorityTier 1, PreemptMode=CANCEL,
GraceTime=5 s). Every test tags its pilots with an identity of its own and leaves the queue empty.
Nothing here passes or fails on how long something took: the tests assert what happened in which
order, and every wait is a bounded wait on a condition. bench/slurm_bench.py measures the latencies.
"""

import hashlib
import hmac
import json
import os
import re
import socket
import subprocess
import time
from pathlib import Path

import pytest

from bft.runtime.sources.base import SourceError
from bft.runtime.sources.slurm import SlurmNodeSource

pytest.register_assert_rewrite("slurm_util")  # it is also a plugin (below), loaded after this import
from runtime_util import listening_sockets  # noqa: E402
from slurm_util import (  # noqa: E402
    GRACE_S,
    Events,
    Polls,
    cancel_and_wait_empty,
    ended_state,
    pilots_of,
    reason_of,
    state_of,
    submit_main,
    wait_running,
    wait_until,
)

pytest_plugins = ["slurm_util"]  # the session's one test cluster (the slurm_cluster fixture), shared by the Slurm tests

pytestmark = pytest.mark.slurm

POLL_S = 1.0


@pytest.fixture
def make_source(slurm_cluster, tmp_path):
    """Builds sources with test defaults; stops (releasing) every one and empties the queue after."""
    made = []

    def make(identity, **kw):
        kw.setdefault("partition", "pilot")
        kw.setdefault("manager_address", "127.0.0.1")
        kw.setdefault("poll_s", POLL_S)
        kw.setdefault("pilot_output", str(slurm_cluster / "pilot-%j.out"))
        s = SlurmNodeSource(identity, kw.pop("state_dir", tmp_path / identity), **kw)
        made.append(s)
        return s

    yield make
    for s in made:
        s.stop(release=True)
    cancel_and_wait_empty()


def fill_all_nodes(make_source, identity, **kw):
    src = make_source(identity, pending=8, max_nodes=8, **kw)
    ev = Events()
    src.start(ev)
    wait_until(lambda: len(ev.held()) == 8, 30, "8 pilots joined")
    return src, ev


def test_pilots_start_and_the_source_announces_their_nodes(make_source):
    src = make_source("joins", pending=2, max_nodes=3)
    polls = Polls(src)
    ev = Events()
    src.start(ev)
    held = wait_until(lambda: ev.held() if len(ev.held()) == 3 else None, 20, "3 joins")
    assert sorted(held) == src.nodes()
    polls.wait_more(2, 10 * POLL_S + 10)  # a whole poll since: the cap holds, no fourth pilot, none pending
    rows = pilots_of(src)
    assert sorted(r["node"] for r in rows if r["state"] == "RUNNING") == sorted(held)
    assert len(rows) == 3, rows
    assert all(r["comment"] == "bft-manager=joins" for r in rows)
    assert len([e for e in ev.items if e.kind == "join"]) == 3  # each node announced once


def test_stop_with_release_leaves_no_pilot(make_source):
    src = make_source("release", pending=3, max_nodes=2)
    ev = Events()
    src.start(ev)
    wait_until(lambda: len(ev.held()) == 2, 20, "2 joins")
    src.stop(release=True)
    assert pilots_of(src) == []
    assert src.nodes() == []


def test_preemption_is_announced_by_the_pilot_with_the_grace_time(make_source):
    src, ev = fill_all_nodes(make_source, "preempt")
    job = submit_main()
    reclaim = ev.wait(lambda e: e.kind == "reclaim", 10, "reclaim")[0]
    assert reclaim.grace_s == GRACE_S  # from the pilot's own message, not the poll (which says 0)
    # In time for the training to use the grace time: the main job still waits for the node.
    assert state_of(job) == "PENDING"
    (pilot,) = [r for r in pilots_of(src) if r["node"] == reclaim.node]
    src.reclaim_done(reclaim.node)  # nothing of ours runs there: give the node back at once
    assert wait_running(job, GRACE_S + 10) == reclaim.node
    # Released early: the source cancelled the pilot (had the grace time run out, Slurm would say PREEMPTED).
    assert ended_state(pilot["id"]) == "CANCELLED"


def test_pending_pilots_are_held_while_a_main_job_preempts_and_released_after(make_source):
    """A main job that preempts is not given the nodes that free up meanwhile: a pending pilot could
    start there and cost it a second preemption, KillWait + MessageTimeout later (docs/slurm.md, "The
    main queue's wait"). So the source holds its pending pilots while a preemption of its pilots is
    under way, and releases them once it is over."""
    src, ev = fill_all_nodes(make_source, "standback")
    src.pending, src.max_nodes = 1, 0  # one pilot waits for a node from now on
    (waiting,) = wait_until(lambda: [r["id"] for r in pilots_of(src) if r["state"] == "PENDING"] or None, 20,
                            "a pending pilot")
    job = submit_main()
    reclaim = ev.wait(lambda e: e.kind == "reclaim", 10, "reclaim")[0]
    (preempted,) = [r["id"] for r in pilots_of(src) if r["node"] == reclaim.node]
    # Not released: the preemption stays under way for the grace time, and the waiting pilot is held.
    wait_until(lambda: reason_of(waiting) == "JobHeldUser", 10, "the pending pilot held")
    assert state_of(preempted) == "RUNNING" and state_of(job) == "PENDING"
    assert wait_running(job, GRACE_S + 15) == reclaim.node
    wait_until(lambda: state_of(preempted) == "", 30, "the preempted pilot gone")
    wait_until(lambda: reason_of(waiting) != "JobHeldUser", 10 * POLL_S + 10, "the pending pilot released")
    assert state_of(waiting) == "PENDING"  # every node is taken: it waits, as before, for the next hole


def test_the_poll_catches_a_reclaim_whose_message_is_lost(make_source):
    src = make_source("lost", pending=1, max_nodes=1)
    ev = Events()
    src.start(ev)
    join = ev.wait(lambda e: e.kind == "join", 20, "join")[0]
    (pilot,) = [r for r in pilots_of(src) if r["state"] == "RUNNING"]
    # SIGKILL to the pilot itself (step 0): it cannot say anything, and its job ends with it.
    subprocess.run(["scancel", "--signal=KILL", f"{pilot['id']}.0"], check=True)
    reclaim = ev.wait(lambda e: e.kind == "reclaim", 3 * POLL_S + 10, "reclaim by poll")[0]
    assert reclaim.node == join.node and reclaim.grace_s == 0.0  # the poll's: it cannot know of a grace time
    assert join.node not in src.nodes()


def test_launch_runs_inside_the_pilot_and_dies_with_it(make_source, tmp_path):
    src, ev = fill_all_nodes(make_source, "launch")
    node = src.nodes()[0]
    (pilot,) = [r for r in pilots_of(src) if r["node"] == node and r["state"] == "RUNNING"]
    log = tmp_path / "cmd.log"
    script = ('echo "job=$SLURM_JOB_ID node=$SLURMD_NODENAME answer=$BFT_TEST_ANSWER cwd=$PWD pid=$$"; '
              'trap \'echo got SIGTERM; exit 0\' TERM; while :; do sleep 0.1; done')
    proc = src.launch(node, ["bash", "-c", script], {"BFT_TEST_ANSWER": "42"}, log, cwd=tmp_path)
    wait_until(lambda: "pid=" in log.read_text() if log.exists() else False, 10, "launched command output")
    first = log.read_text().splitlines()[0]
    assert first.startswith(f"job={pilot['id']} node={node} answer=42 cwd={tmp_path} pid=")
    pid = int(first.rsplit("pid=", 1)[1])
    steps = subprocess.run(["squeue", "--noheader", "--steps", f"--jobs={pilot['id']}", "--format=%i"],
                           capture_output=True, text=True, check=True).stdout.split()
    assert len(steps) >= 2, steps  # the pilot's own step and ours, both accounted to the pilot job
    # Preempt exactly that node; the manager does not release it, so Slurm enforces the grace time.
    held_before = ev.held()
    job = submit_main(seconds=60, nodelist=node)
    proc.wait(timeout=GRACE_S + 15)
    assert "got SIGTERM" in log.read_text()  # Slurm's SIGTERM reached it at the start of the grace time
    assert not Path(f"/proc/{pid}").exists()
    assert state_of(job) == "PENDING"  # it ended before the main job took the node: the grace time was ours
    assert wait_running(job, GRACE_S + 10) == node
    assert ended_state(pilot["id"]) == "PREEMPTED"  # held to the end of the grace time, which Slurm enforced
    assert node in held_before and node not in src.nodes()
    with pytest.raises(SourceError, match="not held"):
        src.launch(node, ["true"], {}, log)


def _launch_environment(src, node, tmp_path, name):
    """The GPU variables Slurm gives a command the source launches on `node`."""
    log = tmp_path / f"{name}.log"
    proc = src.launch(node, ["sh", "-c", "env | grep -E '^(CUDA_VISIBLE_DEVICES|SLURM_GPUS_ON_NODE|SLURM_STEP_GPUS)='; "
                                         "echo done"], {}, log)
    assert proc.wait(30) == 0, log.read_text()
    return dict(line.split("=", 1) for line in log.read_text().splitlines() if "=" in line)


def test_pilots_with_gpus_per_node_hold_the_gpus_and_their_launches_see_them(make_source, tmp_path):
    """cluster.sh declares 2 GPUs per node (gres.conf). An --exclusive pilot holds them all, but only a
    pilot that asks for them (--slurm-gpus-per-node) gives them to the commands it runs, as a site's
    ConstrainDevices would enforce: the allocation reaches the workers through their environment."""
    src = make_source("gpus", pending=1, max_nodes=1, gpus_per_node="2")
    plain = make_source("nogpus", pending=1, max_nodes=1)
    jobs = {}
    for s in (src, plain):
        ev = Events()
        s.start(ev)
        ev.wait(lambda e: e.kind == "join", 20, f"a join of {s.identity}")
        (pilot,) = [r for r in pilots_of(s) if r["state"] == "RUNNING"]
        jobs[s] = subprocess.run(["scontrol", "show", "job", "--details", pilot["id"]], capture_output=True,
                                 text=True, check=True).stdout
    assert re.search(r"\bTresPerNode=gres:gpu:2\b", jobs[src]), jobs[src]  # what the pilot asked for
    assert re.search(r"\bGRES=gpu:2\(IDX:0-1\)", jobs[src]), jobs[src]  # what its node gave it
    assert _launch_environment(src, src.nodes()[0], tmp_path, "gpus") == {
        "CUDA_VISIBLE_DEVICES": "0,1", "SLURM_GPUS_ON_NODE": "2", "SLURM_STEP_GPUS": "0,1"}
    # Without the option the node's GPUs are the pilot's all the same, and its workers get none.
    assert "TresPerNode" not in jobs[plain] and re.search(r"\bGRES=gpu:2\(IDX:0-1\)", jobs[plain]), jobs[plain]
    assert _launch_environment(plain, plain.nodes()[0], tmp_path, "nogpus") == {}


def test_the_srun_of_a_launch_listens_only_in_srun_port_range_and_on_no_wildcard(make_source, tmp_path):
    """docs/security.md: a centre's `SrunPortRange` and `CommunicationParameters=NoInAddrAny`
    (tests/slurm/cluster.sh sets both) hold for the srun the source starts on the manager's host."""
    config = subprocess.run(["scontrol", "show", "config"], capture_output=True, text=True, check=True).stdout
    lo, hi = map(int, re.search(r"^SrunPortRange\s*=\s*(\d+)-(\d+)", config, re.M).groups())
    assert re.search(r"^CommunicationParameters\s*=.*\bNoInAddrAny\b", config, re.M), config
    src = make_source("srunports", pending=1, max_nodes=1)
    ev = Events()
    src.start(ev)
    (node,) = wait_until(lambda: ev.held() or None, 20, "a join")
    proc = src.launch(node, ["sleep", "60"], {}, tmp_path / "cmd.log")
    try:
        # srun opens its listeners (step control, I/O) before it asks slurmctld for the step.
        sockets = wait_until(lambda: listening_sockets({proc.pid}, with_port=True) or None, 10, "srun's listeners")
        ports = [int(address.rsplit(":", 1)[1]) for _, address, _ in sockets]
        assert all(lo <= port <= hi for port in ports), (lo, hi, sockets)
        assert not [a for _, a, _ in sockets if a.rsplit(":", 1)[0] in ("*", "0.0.0.0", "[::]")], sockets
    finally:
        proc.terminate()
        proc.wait(10)


def test_a_restarted_source_adopts_running_pilots_and_cancels_the_surplus(make_source, tmp_path):
    main_job = submit_main(nodes=6, seconds=300)  # 2 nodes stay idle for pilots
    wait_running(main_job, 10)
    first = make_source("adopt", pending=3, state_dir=tmp_path / "state")
    ev1 = Events()
    first.start(ev1)
    wait_until(lambda: len(ev1.held()) == 2, 20, "2 joins")
    wait_until(lambda: len([r for r in pilots_of(first) if r["state"] == "PENDING"]) == 3, 10, "3 pending pilots")
    held = sorted(ev1.held())
    first.stop(release=False)  # what a manager crash or restart leaves behind
    assert sorted(r["node"] for r in pilots_of(first) if r["state"] == "RUNNING") == held

    second = make_source("adopt", pending=1, state_dir=tmp_path / "state")
    ev2 = Events()
    second.start(ev2)
    assert second.nodes() == held  # found again before start() returns
    assert sorted(e.node for e in ev2.items if e.kind == "join") == held
    pending = [r for r in pilots_of(second) if r["state"] == "PENDING"]
    assert len(pending) == 1, pending  # the surplus was cancelled
    # The adopted pilots still report to the new source (same secret and port, kept in state_dir).
    subprocess.run(["scancel", main_job], check=True)  # let the queue move, then preempt an adopted one
    ev2.wait(lambda e: e.kind == "join" and e.node not in held, 20, "join of a new pilot")
    job = submit_main(nodes=8, seconds=5)
    reclaims = ev2.wait(lambda e: e.kind == "reclaim" and e.node in held, 10, "reclaim of an adopted pilot")
    assert reclaims[0].grace_s == GRACE_S  # told by the adopted pilot itself
    wait_running(job, GRACE_S + 15)


def test_unsigned_stale_or_replayed_reports_change_nothing(make_source, tmp_path):
    src = make_source("forged", pending=1, max_nodes=1, state_dir=tmp_path / "state")
    polls = Polls(src)
    ev = Events()
    src.start(ev)
    join = ev.wait(lambda e: e.kind == "join", 20, "join")[0]
    (pilot,) = [r for r in pilots_of(src) if r["state"] == "RUNNING"]
    secret = bytes.fromhex(json.loads((tmp_path / "state" / "slurm-source.json").read_text())["secret"])
    assert (tmp_path / "state" / "slurm-source.json").stat().st_mode & 0o077 == 0

    def send(event, job, sent_s, key=secret):
        body = json.dumps({"identity": "forged", "job": job, "node": join.node, "event": event, "time": sent_s})
        mac = hmac.new(key, body.encode(), hashlib.sha256).hexdigest()
        with socket.create_connection(("127.0.0.1", src.port), timeout=5) as s:
            s.sendall(f"{mac} {body}\n".encode())
            return s.makefile().readline().strip()

    assert send("term", pilot["id"], time.time(), key=b"not the secret") == "error signature"
    assert send("term", pilot["id"], time.time() - 3600) == "error stale"
    with socket.create_connection(("127.0.0.1", src.port), timeout=5) as idle:  # an idle client holds nothing up
        assert send("start", "999999", time.time(), key=b"x") == "error signature"
        # Answered while the idle client's connection was still open and unanswered: a serial server
        # would have served the idle client first, answering and closing it at its read timeout.
        idle.setblocking(False)
        with pytest.raises(BlockingIOError):
            idle.recv(1)
    assert [e.kind for e in ev.items] == ["join"] and src.nodes() == [join.node]
    # A pilot that has ended cannot be brought back by replaying its (signed, fresh) start report.
    # The main queue takes every node, so no new pilot can start meanwhile.
    job = submit_main(nodes=8, seconds=60)
    ev.wait(lambda e: e.kind == "reclaim", 10, "reclaim")
    src.reclaim_done(join.node)
    wait_running(job, GRACE_S + 15)
    wait_until(lambda: state_of(pilot["id"]) == "", 30, "the pilot gone from the queue")
    polls.wait_more(2, 10 * POLL_S + 10)  # the source has polled since: it knows the pilot ended
    assert send("start", pilot["id"], time.time()) == "error ended"
    assert src.nodes() == [] and ev.items[-1].kind == "reclaim"


def test_bad_partition_is_a_clear_error_and_submits_nothing(make_source):
    src = make_source("badpart", partition="no-such-partition")
    with pytest.raises(SourceError, match="partition no-such-partition.*invalid partition specified: no-such-part"):
        src.start(Events())
    assert pilots_of(src) == []


def test_more_gpus_than_a_node_has_is_a_clear_error_and_submits_nothing(make_source):
    src = make_source("toomanygpus", gpus_per_node="3")  # cluster.sh's nodes have 2
    with pytest.raises(SourceError, match=r"gpus per node 3\): .*Requested node configuration is not available"):
        src.start(Events())
    assert pilots_of(src) == []


def test_a_partition_without_rights_is_a_clear_error_and_submits_nothing(make_source):
    src = make_source("norights", partition="noroot")  # DisableRootJobs=YES, and we are root
    with pytest.raises(SourceError, match=r"pilot jobs as user root \(partition noroot.*: .*Invalid user id"):
        src.start(Events())
    assert pilots_of(src) == []


def test_unreachable_controller_is_a_clear_error_and_submits_nothing(make_source, tmp_path, monkeypatch):
    conf = Path(os.environ["SLURM_CONF"]).read_text()
    bogus = tmp_path / "slurm.conf"
    bogus.write_text(re.sub(r"^SlurmctldPort=\d+", "SlurmctldPort=1", conf, flags=re.M))
    src = make_source("unreach")
    monkeypatch.setenv("SLURM_CONF", str(bogus))
    with pytest.raises(SourceError, match="Unable to contact slurm controller"):
        src.start(Events())
    monkeypatch.setenv("SLURM_CONF", str(tmp_path / "missing.conf"))
    with pytest.raises(SourceError, match="missing.conf does not exist"):
        src.start(Events())
    monkeypatch.undo()
    assert pilots_of(src) == []


def test_missing_slurm_commands_are_a_clear_error(make_source, monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))  # no sbatch here
    with pytest.raises(SourceError, match="sbatch.* not found on PATH"):
        make_source("nopath").start(Events())


def test_backfill_only_pilots_report_killwait_as_their_grace(make_source):
    """A partition without preemption (the fallback of docs/slurm.md): SIGTERM comes only at the
    time limit or a cancellation, KillWait (3 s in cluster.sh) before SIGKILL."""
    src = make_source("backfill", partition="main", time_min="0:30", pending=0)
    src.start(Events())
    assert src.describe()["grace_s"] == 3.0
    assert pilots_of(src) == []
