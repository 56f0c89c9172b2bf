"""End to end: in-place resizes (``--resize inplace``) with a real manager, real PyTorch (gloo on CPU;
NCCL on a GPU), the local node source and examples/runtime/elastic_synthetic.py.

Each test is bounded in time, and the harness stops every process it started (by pid, and by the
manager's identity tag) even when it fails.
"""

from __future__ import annotations

import collections
import os
import signal
import time
from pathlib import Path
from typing import Dict, List

import pytest

from runtime_util import REPO, write_trace

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


def _positions(log_dir: Path) -> Dict[int, List[int]]:
    """Stream position -> the sample indices processed there, from the workers' index logs (rank r of
    a world of W at position p takes positions p + r, p + r + W, ...)."""
    seen: Dict[int, List[int]] = collections.defaultdict(list)
    for path in log_dir.glob("*.txt"):
        for line in path.read_text().splitlines():
            position, rank, world, *index = map(int, line.split())
            for k, i in enumerate(index):
                seen[position + rank + k * world].append(i)
    return seen


def _submit(harness, name: str, work: int, *args: str) -> None:
    harness.submit(name, "--min", "1", "--max", "4", "--samples", str(work), *args, script=ELASTIC)


def test_grow_and_shrink_in_place_keep_survivors_and_cover_the_epoch_once(harness):
    """1 -> 2 -> 1 nodes in place: the worker on n0 keeps its process throughout, n1's worker joins
    (gets the state by broadcast) and leaves; every index of the first epoch is processed once."""
    trace = write_trace(harness.root / "trace.csv", [(0, "n0", "idle"), (14, "n1", "idle"), (32, "n1", "busy")])
    logs = harness.root / "indices"
    logs.mkdir()
    proc = harness.start("--resize", "inplace", "--local-trace", str(trace), "--local-nodes", "2",
                         "--local-grace-s", "8", "--grace", "10")
    # Paced (64 samples per worker every 0.05 s): the first epoch spans both resizes on any machine.
    _submit(harness, "el", 90_000, "--", "--step-s", "0.05", "--dataset", str(DATASET), "--log-indices", str(logs))
    harness.wait(lambda s: s["jobs"][0]["state"] == "finished", 240, "the job to finish")

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

    seen = _positions(logs)
    assert sorted(seen) == list(range(len(seen))), "a stream position was skipped"
    assert all(len(v) == 1 for v in seen.values()), "a stream position was processed twice"
    assert len(seen) >= DATASET, len(seen)
    first_epoch = [seen[p][0] for p in range(DATASET)]
    assert sorted(first_epoch) == list(range(DATASET))
    harness.stop(proc)
    assert harness.leftovers() == []
