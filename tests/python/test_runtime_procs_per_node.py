"""Several processes per node (``bft manager --procs-per-node``, ``bft submit --procs-per-node``;
issue 37): a node's processes are one member of the job, started, stopped, adopted and counted
together; ranks are node-major (a node's processes are neighbours, the survivors keep the lowest).

The end-to-end tests run real managers and real PyTorch workers (gloo on CPU) on the local source,
whose virtual nodes each run N processes. Each runs the manager under ``--policy equal_share``, so
the job takes every node it may whatever its curve measured on a loaded machine (a --curve is only a
prior: the advisor's fitted curve replaces it). The first tests need no torch:
they are the fast suite's part.
"""

from __future__ import annotations

import collections
import subprocess
import sys
import time
from typing import List, Tuple

import pytest

from bft.runtime.jobs.processes import standby_born, tagged_processes
from bft.runtime.jobs.runs import NodeProcs
from bft.runtime.options import resolve_procs_per_node
from bft.runtime.statedb.store import StateStore
from bft.train import EXIT_INPLACE_FAILED, EXIT_RESIZE
from runtime_util import REPO, bft, one_line_error, stream_positions, write_trace

ELASTIC = REPO / "examples" / "runtime" / "elastic_synthetic.py"
DATASET = 4096


# -- without workers (the fast suite) ------------------------------------------------------------


@pytest.mark.parametrize("environ, expected, found", [
    ({"CUDA_VISIBLE_DEVICES": "0,1,2,3", "SLURM_GPUS_ON_NODE": "8"}, 4, "CUDA_VISIBLE_DEVICES"),
    ({"CUDA_VISIBLE_DEVICES": ""}, 1, "CUDA_VISIBLE_DEVICES"),
    ({"SLURM_GPUS_ON_NODE": "6", "SLURM_JOB_GPUS": "0,1"}, 6, "SLURM_GPUS_ON_NODE"),
    ({"SLURM_STEP_GPUS": "2,3", "SLURM_JOB_GPUS": "0,1,2,3"}, 2, "SLURM_STEP_GPUS"),
    ({"SLURM_JOB_GPUS": "0,1,2"}, 3, "SLURM_JOB_GPUS"),
    ({}, 8, "torch.cuda.device_count() = 8"),
])
def test_processes_per_node_auto_counts_the_accelerators_the_node_reports_first_found_first(environ, expected,
                                                                                              found):
    count, how = resolve_procs_per_node("auto", environ, device_count=lambda: 8)
    assert count == expected and found in how, (count, how)


def test_processes_per_node_auto_without_accelerators_is_one_and_a_bad_value_names_the_flag():
    assert resolve_procs_per_node("auto", {}, device_count=lambda: 0)[0] == 1
    assert resolve_procs_per_node("3", {}, device_count=lambda: 8) == (3, "--procs-per-node 3")
    with pytest.raises(ValueError, match="--procs-per-node: expected a whole number or auto, got 'two'"):
        resolve_procs_per_node("two", {})


@pytest.mark.parametrize("value, needle", [("two", "expected a whole number or auto, got 'two'"),
                                           ("0", "expected 1 to 64, got 0")])
def test_manager_processes_per_node_that_is_no_count_is_refused_in_one_line(tmp_path, value, needle):
    r = bft("manager", "--state-dir", str(tmp_path / "state"), "--procs-per-node", value)
    assert r.returncode == 2
    one_line_error(r, "--procs-per-node", needle)


def test_processes_per_node_count_node_seconds_once_per_node(tmp_path):
    """A node's two process rows (local ranks 0 and 1) hold one node: node-seconds count it once."""
    store = StateStore(tmp_path / "state.db")
    rows = [store.add_proc("j", 1, "n0", k) for k in (0, 1)] + [store.add_proc("j", 1, "n1", k) for k in (0, 1)]
    now = time.time()
    for row in rows:
        store.db.execute("UPDATE procs SET started_s = ?, ended_s = ? WHERE id = ?", (now - 10.0, now, row))
    assert store.proc_node_seconds(now) == pytest.approx(20.0)  # 2 nodes x 10 s, not 4 processes
    store.close()


def _sleeper(code: int, after_s: float) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", f"import sys, time; time.sleep({after_s}); sys.exit({code})"],
                            start_new_session=True)


def _member(*procs: subprocess.Popen) -> NodeProcs:
    return NodeProcs(job="j", node="n0", procs=list(procs), rows=list(range(len(procs))))


def _poll_until_exit(agent: NodeProcs, timeout_s: float = 30.0) -> int:
    deadline = time.monotonic() + timeout_s
    while (code := agent.poll()) is None:
        assert time.monotonic() < deadline, "the member did not exit"
        time.sleep(0.02)
    return code


def test_a_nodes_processes_per_node_exit_as_one_member_and_a_crash_ends_its_siblings():
    """Real processes: the member runs while any of them does, its status is the most telling of
    theirs; a crash (status 1) while a sibling runs is the member's status at once, and the sibling
    is killed (its node's share of the world is gone)."""
    quick, slow = _sleeper(EXIT_RESIZE, 0.0), _sleeper(EXIT_INPLACE_FAILED, 0.5)
    member = _member(quick, slow)
    assert _poll_until_exit(member) == EXIT_INPLACE_FAILED and slow.returncode == EXIT_INPLACE_FAILED
    done = _member(_sleeper(0, 0.0), _sleeper(EXIT_RESIZE, 0.2))
    assert _poll_until_exit(done) == EXIT_RESIZE
    crashed, hanging = _sleeper(1, 0.0), _sleeper(0, 600.0)
    try:
        member = _member(hanging, crashed)
        assert _poll_until_exit(member) == 1
        assert hanging.wait(10) == -9  # SIGKILLed by the member's poll, not after its 600 s
    finally:
        for proc in (quick, slow, crashed, hanging):
            if proc.poll() is None:
                proc.kill()
            proc.wait()


def test_submit_with_more_processes_per_node_than_the_manager_gives_is_refused_in_one_line(harness):
    """A manager whose nodes give 2 processes refuses a job asking for 3 (and one asking for 0), in one
    line naming the flag; its status says what a node gives."""
    proc = harness.start("--local-nodes", "1", "--procs-per-node", "2", "--no-standby")
    r = bft("submit", str(ELASTIC), "--state-dir", str(harness.state_dir), "--name", "big", "--procs-per-node", "3",
            cwd=harness.root)
    assert r.returncode == 2
    one_line_error(r, "--procs-per-node 3", "at most 2 processes", "--procs-per-node 2")
    r = bft("submit", str(ELASTIC), "--state-dir", str(harness.state_dir), "--name", "none", "--procs-per-node", "0",
            cwd=harness.root)
    assert r.returncode == 2
    one_line_error(r, "--procs-per-node", "got 0")
    assert harness.status()["jobs"] == []
    text = bft("status", "--state-dir", str(harness.state_dir)).stdout
    assert "2 processes per node" in text and "PROCS" in text, text
    harness.stop(proc)


# -- end to end, with real workers ---------------------------------------------------------------


def _rows(harness, job: str) -> List[Tuple[str, int, int, int]]:
    """The job's process rows: (node, generation, local rank, pid), in the order they were written."""
    store = harness.store()
    try:
        return [tuple(r) for r in store.db.execute(
            "SELECT node, generation, local_rank, pid FROM procs WHERE job = ? ORDER BY id", (job,))]
    finally:
        store.close()


@pytest.mark.runtime  # 2 virtual nodes of 2 gloo workers each, 1 -> 2 -> 1 nodes: 2-3 min on the shared VM
def test_processes_per_node_grow_and_shrink_in_place_as_whole_nodes_and_cover_each_epoch_once(harness):
    """Two processes per node, 1 -> 2 -> 1 nodes in place: n0's two processes keep their pids (and
    ranks 0 and 1) throughout, n1's two join and leave together; the data is read at worlds 2 and 4
    and every index of every epoch exactly once; status counts nodes and processes."""
    # 50 s on 2 nodes: time for n1's two cold newcomers to start on a loaded machine; a job of 12 epochs at
    # 0.1 s a step at least (32 or 64 samples a step) still runs when n1 is taken back, also on a fast one.
    trace = write_trace(harness.root / "trace.csv", [(0, "n0", "idle"), (20, "n1", "idle"), (70, "n1", "busy")])
    logs = harness.root / "indices"
    logs.mkdir()
    proc = harness.start("--resize", "inplace", "--local-trace", str(trace), "--local-nodes", "2",
                         "--local-grace-s", "8", "--grace", "10", "--procs-per-node", "2", "--policy", "equal_share")
    harness.submit("el", "--min", "1", "--max", "2", "--samples", str(12 * DATASET), "--", "--step-s", "0.1",
                   "--batch", "16",
                   "--hidden", "16", "--dataset", str(DATASET), "--log-indices", str(logs), script=ELASTIC)
    status = harness.wait(lambda s: len(s["jobs"][0]["nodes"]) == 2 and not s["jobs"][0]["resizing"], 150,
                          "the job on 2 nodes")
    assert status["jobs"][0]["world_size"] == 4 and status["jobs"][0]["procs_per_node"] == 2, status["jobs"][0]
    harness.wait(lambda s: s["jobs"][0]["state"] == "finished", 400, "the job to finish")

    resizes = harness.events("resize_inplace", job="el")
    assert [(r["joined"], r["left"], r["nodes"]) for r in resizes] == [(["n1"], [], ["n0", "n1"]),
                                                                       ([], ["n1"], ["n0"])], resizes
    assert not harness.events("inplace_failed", "job_failed", job="el")
    assert len(harness.events("launch", job="el")) == 1
    # The gaps count nodes, as the allocator does, not the processes the reports' world sizes count.
    gaps = harness.events("resize_gap", job="el")
    assert {(g["from_nodes"], g["to_nodes"]) for g in gaps} == {(1, 2), (2, 1)}, gaps
    rows = _rows(harness, "el")
    n0 = [(g, k, pid) for node, g, k, pid in rows if node == "n0"]
    assert sorted({(g, k) for g, k, _ in n0}) == [(g, k) for g in (1, 2, 3) for k in (0, 1)], rows
    assert len({pid for _, k, pid in n0 if k == 0}) == 1 and len({pid for _, k, pid in n0 if k == 1}) == 1, rows
    # n1's processes started while generation 1 trained on (arrive first), then switched into generation 2.
    n1 = [(g, k, pid) for node, g, k, pid in rows if node == "n1"]
    assert sorted((g, k) for g, k, _ in n1) == [(1, 0), (1, 1), (2, 0), (2, 1)], rows
    assert len({pid for _, k, pid in n1 if k == 0}) == 1 and len({pid for _, k, pid in n1 if k == 1}) == 1, rows
    log = harness.job_log("el")
    assert "done: " in log and "Traceback" not in log, log[-3000:]

    seen = stream_positions(logs)
    ranks = collections.defaultdict(set)  # world size -> the ranks that read at it
    for f in logs.glob("*.txt"):
        for line in f.read_text().splitlines():
            _, rank, world, *_ = map(int, line.split())
            ranks[world].add(rank)
    assert dict(ranks) == {2: {0, 1}, 4: {0, 1, 2, 3}}, dict(ranks)
    # Node-major, survivors first: n0's processes (the survivors) hold ranks 0 and 1 at every size,
    # n1's (the newcomers) ranks 2 and 3; local rank k of a node is rank i*2 + k.
    for node, expected in (("n0", {0: {0}, 1: {1}}), ("n1", {0: {2}, 1: {3}})):
        for k in (0, 1):
            (pid,) = {p for n, _, local, p in rows if n == node and local == k}
            seen_ranks = {int(line.split()[1]) for line in (logs / f"{pid}.txt").read_text().splitlines()}
            assert seen_ranks == expected[k], (node, k, seen_ranks)
    assert sorted(seen) == list(range(len(seen))) and all(len(v) == 1 for v in seen.values())
    for epoch in range(len(seen) // DATASET):
        assert sorted(seen[p][0] for p in range(epoch * DATASET, (epoch + 1) * DATASET)) == list(range(DATASET))
    harness.stop(proc)
    assert harness.leftovers() == []


def _standby_pids(harness, node: str) -> List[int]:
    """The pids of the manager's standbys waiting on `node` (started as standbys, in no process row)."""
    assigned = {pid for _, _, _, pid in _rows(harness, "el")}
    return sorted(pid for pid in tagged_processes(harness.identity)
                  if pid not in assigned and standby_born(pid, harness.identity, node))


@pytest.mark.runtime  # 2 virtual nodes of 2 gloo workers each, two managers: about 3 min on the shared VM
def test_processes_per_node_born_of_standbys_are_adopted_after_kill_9_and_shrink_in_place_together(harness):
    """Each node gets two standbys; the job's two processes per node are those standbys' processes.
    kill -9 of the manager while they train: the restarted manager adopts all four by their rows,
    and when n1 is reclaimed shrinks the job in place to n0, whose two processes train on to the end."""
    trace = write_trace(harness.root / "trace.csv", [(0, "n0", "idle"), (0, "n1", "idle"), (50, "n1", "busy")])
    args = ("--resize", "inplace", "--local-trace", str(trace), "--local-nodes", "2", "--local-grace-s", "8",
            "--grace", "10", "--procs-per-node", "2", "--policy", "equal_share")
    first = harness.start(*args)
    harness.wait(lambda s: s["nodes"]["standbys"] == ["n0", "n1"], 60, "standbys on n0 and n1")
    deadline = time.monotonic() + 60
    while any(len(_standby_pids(harness, n)) < 2 for n in ("n0", "n1")) and time.monotonic() < deadline:
        time.sleep(0.2)
    warm = {n: _standby_pids(harness, n) for n in ("n0", "n1")}
    assert all(len(pids) == 2 for pids in warm.values()), warm
    # 0.05 s a step at least, 16 samples a worker: still training when n1 is taken back, also on a fast machine.
    harness.submit("el", "--min", "1", "--max", "2", "--samples", "100000", "--", "--step-s", "0.05", "--batch", "16",
                   script=ELASTIC)
    harness.wait(lambda s: s["jobs"][0]["samples"] > 0 and s["jobs"][0]["world_size"] == 4, 150, "training on 4")
    before = {n: sorted(pid for node, _, _, pid in _rows(harness, "el") if node == n) for n in ("n0", "n1")}
    assert before == warm, (before, warm)  # the standbys' own processes
    harness.kill9(first)
    time.sleep(2)
    second = harness.start(*args)
    harness.wait(lambda s: s["jobs"][0]["state"] == "finished", 300, "the job to finish")
    assert [e["adopted"] for e in harness.events("recovered")] == [["el"]]
    assert len(harness.events("launch", job="el")) == 1  # never relaunched
    assert [r["nodes"] for r in harness.events("resize_inplace", job="el")] == [["n0"]]
    assert not harness.events("inplace_failed", "job_failed", job="el")
    after = {pid for node, _, _, pid in _rows(harness, "el") if node == "n0"}
    assert after == set(warm["n0"]), (warm, after)  # n0's two processes throughout
    log = harness.job_log("el")
    assert "done: " in log and "Traceback" not in log, log[-3000:]
    harness.stop(second)
    assert harness.leftovers() == []


@pytest.mark.runtime  # torchrun with 2 workers on each of 2 virtual nodes: about 30 s here
def test_processes_per_node_relaunch_runs_one_torchrun_per_node_with_n_workers(harness):
    """--resize relaunch at 2 processes per node: one torchrun agent per node (one process row
    each), started with --nproc-per-node=2; the job trains at world size 4 and finishes."""
    logs = harness.root / "indices"
    logs.mkdir()
    proc = harness.start("--resize", "relaunch", "--local-nodes", "2", "--procs-per-node", "2")
    harness.submit("el", "--min", "2", "--max", "2", "--samples", "20000", "--", "--step-s", "0.02",
                   "--log-indices", str(logs), script=ELASTIC)
    harness.wait(lambda s: s["jobs"][0]["state"] == "finished", 240, "the job to finish")
    rows = _rows(harness, "el")
    assert sorted((node, k) for node, _, k, _ in rows) == [("local-0", 0), ("local-1", 0)], rows
    worlds = {int(line.split()[2]) for f in logs.glob("*.txt") for line in f.read_text().splitlines()}
    assert worlds == {4}, worlds
    assert len(list(logs.glob("*.txt"))) == 4  # four workers, one index log each
    log = harness.job_log("el")
    assert "done: " in log and "on 4 workers" in log, log[-3000:]
    harness.stop(proc)
    assert harness.leftovers() == []
