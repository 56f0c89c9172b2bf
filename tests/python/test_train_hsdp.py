"""A model sharded inside a node and replicated across nodes (HSDP, bft.train.hsdp) resizes by whole
replicas and trains the same model as a fixed run.

Real processes throughout: examples/runtime/hsdp_synthetic.py (FSDP2 fully_shard on a (replicate,
shard) mesh, gloo on CPU, float64, SGD with momentum, a fixed global batch), resized in place by a
real manager with 2 processes per virtual node, and relaunched from its DCP checkpoint by real
torchrun agents with another number of processes per node. Each run's parameters after every step
are compared with a fixed run's, to the tolerance test_train_semantics states and measured.
"""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path
from typing import List

import pytest

from runtime_util import REPO, python_env, write_trace
from test_train_semantics import GLOBAL_BATCH, MICRO_BATCH, TOLERANCE, _max_difference, _read_params, _run_all

HSDP = REPO / "examples" / "runtime" / "hsdp_synthetic.py"
MODEL = ["--hidden", "6", "--layers", "2", "--global-batch", str(GLOBAL_BATCH), "--micro-batch", str(MICRO_BATCH)]
PROCS_PER_NODE = 2


def _fixed(root: Path, steps: int) -> dict:
    """A fixed one-process run of `steps` steps: each step's parameters."""
    return _run_all({"fixed1": ([(1, steps)], [str(HSDP), *MODEL], 0)}, root)["fixed1"]


@pytest.mark.runtime  # a manager, 3 virtual nodes of 2 processes, a paced job of 900 steps: about 2 min here
def test_hsdp_model_resized_in_place_by_whole_nodes_trains_the_same_model_as_a_fixed_one(harness):
    """The manager (in place, 2 processes per node) runs the HSDP example on 2 nodes, grows it to 3
    when a node frees (the newcomer's local rank k receives shard k from local rank k of node 0)
    and shrinks it back to 2 when the node is taken back (whole replica dropped), without a relaunch.
    Equal share gives the job every free node up to its max whatever its measured curve, so the sizes
    are 4 -> 6 -> 4 processes on any machine. Every step's parameters equal a fixed 1-process run's
    to within TOLERANCE."""
    trace = write_trace(harness.root / "trace.csv", [(0, "n0", "idle"), (0, "n1", "idle"), (45, "n2", "idle"),
                                                     (80, "n2", "busy")])
    params = harness.root / "params.txt"
    proc = harness.start("--resize", "inplace", "--policy", "equal_share", "--procs-per-node", str(PROCS_PER_NODE),
                         "--local-trace", str(trace), "--local-nodes", "3", "--local-grace-s", "8", "--grace", "10")
    # Paced at 0.1 s a step at least: the job trains through every event of the trace.
    harness.submit("hs", "--min", "2", "--max", "3", "--samples", str(900 * GLOBAL_BATCH), "--", "--float64",
                   "--dataset", "40", "--step-s", "0.1", "--log-params", str(params), *MODEL, script=HSDP)
    harness.wait(lambda s: s["jobs"][0]["state"] == "finished", 400, "the job to finish")
    assert not harness.events("inplace_failed", "job_failed", job="hs")
    assert len(harness.events("launch", job="hs")) == 1  # every resize was in place
    resized, worlds = _read_params(params)
    sizes = [w for k, w in enumerate(worlds) if k == 0 or worlds[k - 1] != w]
    assert sizes == [4, 6, 4], sizes
    log = harness.job_log("hs")
    assert f"shard transfer to 1 node(s), {PROCS_PER_NODE} side by side" in log, log[-3000:]
    harness.stop(proc)
    assert harness.leftovers() == []
    difference = _max_difference(resized, _fixed(harness.root, len(resized)))
    assert max(difference) <= TOLERANCE, max(difference)
    moved = max(abs(a - b) for a, b in zip(resized[1], resized[len(resized)]))
    assert moved > 1e4 * TOLERANCE, moved


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _torchrun_nodes(nodes: int, procs_per_node: int, samples: int, root: Path) -> None:
    """`nodes` torchrun agents of `procs_per_node` workers each on this host (c10d rendezvous), as the
    manager's relaunch method starts them on real nodes; waits for them to finish."""
    endpoint = f"127.0.0.1:{_free_port()}"
    env = python_env()
    env["BFT_CHECKPOINT_DIR"] = str(root / "checkpoints")
    agents: List[subprocess.Popen] = []
    try:
        for _ in range(nodes):
            agents.append(subprocess.Popen(
                [sys.executable, "-m", "torch.distributed.run", f"--nnodes={nodes}",
                 f"--nproc-per-node={procs_per_node}", "--rdzv-backend=c10d", f"--rdzv-endpoint={endpoint}",
                 "--rdzv-id=hsdp", str(HSDP), *MODEL,
                 "--float64", "--dataset", "40", "--samples", str(samples), "--log-params", str(root / "params.txt")],
                env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
        for agent in agents:
            out, _ = agent.communicate(timeout=240)
            assert agent.returncode == 0, f"{nodes} x {procs_per_node}: exit {agent.returncode}\n{out[-3000:]}"
    finally:
        for agent in agents:
            if agent.poll() is None:
                agent.kill()
                agent.wait()


@pytest.mark.slow  # 2 torchrun agents twice (4 then 2 workers) and a fixed run: about 1 min here
def test_hsdp_model_relaunched_from_its_checkpoint_with_fewer_processes_per_node_trains_the_same_model(tmp_path):
    """2 nodes of 2 processes train 3 steps and save a DCP checkpoint; 2 nodes of 1 process load it
    (each shard now whole on one process: resharded 2 -> 1 per node) and train 3 more. Every step's
    parameters equal a fixed 1-process run's to within TOLERANCE."""
    _torchrun_nodes(2, 2, 3 * GLOBAL_BATCH, tmp_path)
    _torchrun_nodes(2, 1, 6 * GLOBAL_BATCH, tmp_path)
    resized, worlds = _read_params(tmp_path / "params.txt")
    assert worlds == [4, 4, 4, 2, 2, 2], worlds
    difference = _max_difference(resized, _fixed(tmp_path, 6))
    assert max(difference) <= TOLERANCE, difference
