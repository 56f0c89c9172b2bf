"""A model sharded inside a node and replicated across nodes (HSDP, bft.train.hsdp) resizes by whole
replicas and trains the same model as a fixed run.

Real processes throughout: examples/runtime/hsdp_synthetic.py (FSDP2 fully_shard on a (replicate,
shard) mesh, gloo on CPU, float64, SGD with momentum, a fixed global batch), resized in place by a
real manager with 2 processes per virtual node, and relaunched from its DCP checkpoint by real
torchrun agents with another number of processes per node. Each run's parameters after every step
are compared with a fixed run's, to the tolerance test_train_semantics states and measured.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import List

import pytest

from runtime_util import REPO, free_port, python_env, write_trace
from test_train_semantics import GLOBAL_BATCH, MICRO_BATCH, TOLERANCE, _max_difference, _read_params, _run_all

HSDP = REPO / "examples" / "runtime" / "hsdp_synthetic.py"
MODEL = ["--hidden", "6", "--layers", "2", "--global-batch", str(GLOBAL_BATCH), "--micro-batch", str(MICRO_BATCH)]
PROCS_PER_NODE = 2


# One of 2 nodes of 2 processes: both replicas take a step of SGD with momentum, then node 1's
# replica is made another (its weights halved, its momentum zeroed); node 1 receives node 0's shards,
# then every rank takes a step on its own data. Prints each rank's local shards after each phase.
_TRANSFER_WORKER = """
import os, torch, torch.distributed as dist
from torch import nn
from torch.distributed.fsdp import fully_shard
from bft.train import exit_finished
from bft.train.hsdp import hsdp_mesh, local_shards, on_mesh, transfer_shards
dist.init_process_group("gloo")
rank, device = dist.get_rank(), torch.device("cpu")
node = rank // 2
torch.set_default_dtype(torch.float64)
mesh = hsdp_mesh(device)
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(4, 5), nn.Linear(5, 3))
for layer in model:
    fully_shard(layer, mesh=mesh)
fully_shard(model, mesh=mesh)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
def step(seed):
    model(torch.randn(2, 4, generator=torch.Generator().manual_seed(seed))).sum().backward()
    optimizer.step()
    optimizer.zero_grad()
    return [p.to_local().reshape(-1).tolist() for p in model.parameters()]
step(100)  # every rank (a step is a collective over the mesh): the momentum is not zero
if node == 1:  # a replica that is not node 0's: other weights, no momentum
    with torch.no_grad():
        for p in model.parameters():
            p.to_local().mul_(0.5)
            optimizer.state[p]["momentum_buffer"].to_local().zero_()
local = local_shards({"model": model.state_dict(), "optimizer": optimizer.state_dict()})
local = transfer_shards(local if node == 0 else None, 0, [1], device)
placed = on_mesh(local, mesh, device)
model.load_state_dict(placed["model"])
optimizer.load_state_dict(placed["optimizer"])
print("loaded", rank, [p.to_local().reshape(-1).tolist() for p in model.parameters()], flush=True)
print("stepped", rank, step(rank), flush=True)
exit_finished()  # barrier, group's end, an exit gloo cannot abort
"""


def test_hsdp_newcomer_node_receives_shard_k_from_local_rank_k_of_a_survivor():
    """bft.train.hsdp.transfer_shards on 4 gloo processes as 2 nodes of 2: the newcomer node's local
    rank k holds local rank k's shard of the surviving node afterwards (the two shards differ), and
    a step on each rank's own data leaves both replicas equal, so the optimizer's momentum came too."""
    outs = _four_processes_as_two_nodes(_TRANSFER_WORKER)
    shards = {}
    for out in outs:
        for line in out.splitlines():
            if line.startswith(("loaded", "stepped")):
                phase, rank, values = line.split(" ", 2)
                shards[phase, int(rank)] = values
    for phase in ("loaded", "stepped"):
        assert shards[phase, 2] == shards[phase, 0] != shards[phase, 1] == shards[phase, 3], phase
    assert shards["loaded", 0] != shards["stepped", 0]


# 2 nodes of 2 processes under HSDPState: one step, then node 1's replica is made another (weights
# halved, momentum zeroed, its own step count) as a torn step could leave it; the state's re-formation
# after a lost peer (which only rank 2 saw) runs on every rank. Prints each rank's shards and steps.
_LOST_PEER_WORKER = """
import torch
from torch import nn
from torch.distributed.fsdp import fully_shard
import bft.train as bt
torch.set_default_dtype(torch.float64)
def build(mesh):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 5), nn.Linear(5, 3))
    for layer in model:
        fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    return model, torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
state = bt.HSDPState(build, steps=0, checkpoint_every_s=-1)
rank = bt.rank()
state.model(torch.randn(2, 4, generator=torch.Generator().manual_seed(100))).sum().backward()
state.optimizer.step()
state.steps = 1
if rank // 2 == 1:
    with torch.no_grad():
        for p in state.model.parameters():
            p.to_local().mul_(0.5)
            state.optimizer.state[p]["momentum_buffer"].to_local().zero_()
    state.steps = 7
state._sync(has_state=True, lost_peer=rank == 2)
params = list(state.model.parameters())
momentum = [state.optimizer.state[p]["momentum_buffer"].to_local().reshape(-1).tolist() for p in params]
print("synced", rank, state.steps, [p.to_local().reshape(-1).tolist() for p in params], momentum, flush=True)
bt.exit_finished()  # barrier, group's end, an exit gloo cannot abort
"""


def _four_processes_as_two_nodes(worker: str) -> List[str]:
    """Runs `worker` (python -c) as ranks 0-3 of one gloo group, 2 per node; each rank's output."""
    env = dict(python_env(), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()), WORLD_SIZE="4",
               LOCAL_WORLD_SIZE="2")
    procs = [subprocess.Popen([sys.executable, "-c", worker],
                              env=dict(env, RANK=str(r), LOCAL_RANK=str(r % 2)), stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True) for r in range(4)]
    try:
        outs = [proc.communicate(timeout=180)[0] for proc in procs]
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    assert [proc.returncode for proc in procs] == [0] * 4, outs
    return outs


def test_hsdp_replicas_take_the_lowest_holders_state_after_a_lost_peer():
    """HSDPState's re-formation after a lost peer (the in-place path that drops a lost node): every
    node takes the lowest holding node's shards, momentum and fields, so the replicas agree again
    although node 1's had drifted; one rank's word that a peer was lost is enough. (It raised a
    TypeError before, caught by the rejoin loop: an HSDP job that lost a node waited out the in-place
    timeout and was relaunched.)"""
    outs = _four_processes_as_two_nodes(_LOST_PEER_WORKER)
    synced = {}
    for out in outs:
        for line in out.splitlines():
            if line.startswith("synced"):
                _, rank, steps, values = line.split(" ", 3)
                synced[int(rank)] = (int(steps), values)
    assert sorted(synced) == [0, 1, 2, 3], outs
    assert {steps for steps, _ in synced.values()} == {1}
    assert synced[2][1] == synced[0][1] != synced[1][1] == synced[3][1]


def _fixed(root: Path, steps: int) -> dict:
    """A fixed one-process run of `steps` steps: each step's parameters."""
    return _run_all({"fixed1": ([(1, steps)], [str(HSDP), *MODEL], 0)}, root)["fixed1"]


@pytest.mark.runtime  # a manager, 3 virtual nodes of 2 processes, a paced job of 900 steps: 3.5-4 min on the shared VM
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
    print("steps", len(resized), "sizes", sizes, "max difference", max(difference))
    moved = max(abs(a - b) for a, b in zip(resized[1], resized[len(resized)]))
    assert moved > 1e4 * TOLERANCE, moved


def _torchrun_nodes(nodes: int, procs_per_node: int, samples: int, root: Path) -> None:
    """`nodes` torchrun agents of `procs_per_node` workers each on this host (c10d rendezvous), as the
    manager's relaunch method starts them on real nodes; waits for them to finish."""
    endpoint = f"127.0.0.1:{free_port()}"
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


@pytest.mark.slow  # 2 torchrun agents twice (4 then 2 workers) and a fixed run: about 1.5 min on the shared VM
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
    print("max difference", max(difference))
