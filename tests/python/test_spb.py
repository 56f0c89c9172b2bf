"""bft.train.spb (structured partial backpropagation) in real gloo process groups on CPU: with every
rank at full depth it is data-parallel training, step for step, as DistributedDataParallel does it;
with partial depths each stage's gradient is the mean over exactly the ranks that computed it."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

torch = pytest.importorskip("torch")

from bft.train.spb import balanced_batches, check_depths, structured_depths  # noqa: E402
from runtime_util import python_env  # noqa: E402

# One rank of a world of 3; every rank runs each mode given on its command line in turn, in one process
# group (starting torch once per rank, not once per mode), and prints "<mode> ok" or "<mode> FAIL <why>".
# Every check of a mode comes after its collectives, so that a failing rank cannot leave the others
# waiting in one: the next modes still run and report.
WORKER = """
import copy, os, sys, traceback
import torch, torch.distributed as dist
from torch import nn
from bft.train import exit_finished
from bft.train.spb import PartialBackprop

rank, world, rendezvous, modes = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4:]
dist.init_process_group("gloo", init_method="file://" + rendezvous, rank=rank, world_size=world)
def stages():
    return [nn.Sequential(nn.Linear(6, 8), nn.Tanh()), nn.Sequential(nn.Linear(8, 8), nn.Tanh()), nn.Linear(8, 3)]
def batch(r, step, size=5):  # each rank's own data, reproducible anywhere
    g = torch.Generator().manual_seed(1000 * r + step)
    return torch.randn(size, 6, generator=g), torch.randint(0, 3, (size,), generator=g)
loss_fn = nn.CrossEntropyLoss()

def ddp():
    base = stages()
    spb = PartialBackprop(copy.deepcopy(base), depths=[3] * world)
    ddp = nn.parallel.DistributedDataParallel(nn.Sequential(*base))
    opts = [torch.optim.SGD(m.parameters(), lr=0.5) for m in (spb, ddp)]
    for step in range(4):
        x, y = batch(rank, step)
        for model, opt in zip((spb, ddp), opts):
            opt.zero_grad()
            loss_fn(model(x), y).backward()
            if model is spb:
                spb.sync_gradients()
            opt.step()
    return lambda: [torch.allclose(a, b, rtol=1e-6, atol=1e-7) or (a - b).abs().max()
                    for a, b in zip(spb.parameters(), ddp.parameters())]

def partial(mode):
    # "3,2,1": depths, equal batches; "3,2,1/4,7,9": depths and per-rank batch sizes.
    spec, _, sizes = mode.partition("/")
    depths = [int(d) for d in spec.split(",")]
    sizes = [int(b) for b in sizes.split(",")] if sizes else None
    model = PartialBackprop(stages(), depths=depths, batch_sizes=sizes)
    size = (lambda r: sizes[r]) if sizes else (lambda r: 5)
    reference = stages()  # the same initial weights (same seed): full backprop of each rank's batch
    for p, q in zip(model.parameters(), [p for s in reference for p in s.parameters()]):
        q.data.copy_(p.data)
    x, y = batch(rank, 0, size(rank))
    loss_fn(model(x), y).backward()
    # A rank computes gradients only for its suffix of stages.
    computed = [all(p.grad is not None for p in stage.parameters()) for stage in model.stages]
    model.sync_gradients()

    def check():
        assert computed == [s >= 3 - model.depth for s in range(3)], (rank, computed)
        expected = []
        for r in range(world):
            for q in [p for s in reference for p in s.parameters()]:
                q.grad = None
            xr, yr = batch(r, 0, size(r))
            loss_fn(nn.Sequential(*reference)(xr), yr).backward()
            expected.append([[q.grad.clone() for q in s.parameters()] for s in reference])
        for s, stage in enumerate(model.stages):
            ranks = [r for r in range(world) if depths[r] >= 3 - s]
            assert model.contributors[s] == len(ranks), (s, model.contributors)
            weight = {r: size(r) for r in ranks}  # each rank's mean gradient counts its samples
            for k, p in enumerate(stage.parameters()):
                mean = sum(weight[r] * expected[r][s][k] for r in ranks) / sum(weight.values())
                assert torch.allclose(p.grad, mean, rtol=1e-5, atol=1e-7), (s, (p.grad - mean).abs().max())
    return check

for mode in modes:
    torch.manual_seed(0)  # every rank starts each mode from the same weights
    check = ddp() if mode == "ddp" else partial(mode)
    try:
        result = check()
        if mode == "ddp":
            assert all(r is True for r in result), ("parameters differ from DDP's by", result)
        print(mode, "ok", flush=True)
    except AssertionError as e:
        print(mode, "FAIL", repr(e.args), flush=True)
    dist.barrier()
exit_finished()  # barrier, group's end, an exit gloo cannot abort
"""
MODES = ("ddp", "3,2,1", "1,3,1", "3,2,1/4,7,9")


@pytest.fixture(scope="module")
def world_results(tmp_path_factory):
    """Each mode's line from each of 3 ranks: {mode: [rank 0's, rank 1's, rank 2's]}."""
    tmp = tmp_path_factory.mktemp("spb")
    script = tmp / "worker.py"
    script.write_text(textwrap.dedent(WORKER))
    world = 3
    procs = [subprocess.Popen([sys.executable, str(script), str(r), str(world), str(tmp / "rendezvous"), *MODES],
                              env=python_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for r in range(world)]
    try:
        outs = [p.communicate(timeout=180) for p in procs]
    finally:
        for p in procs:  # a rank stuck in a collective after another failed
            if p.poll() is None:
                p.kill()
                p.wait()
    for r, (p, (_, err)) in enumerate(zip(procs, outs)):
        assert p.returncode == 0, f"rank {r}: {err[-2000:]}"
    lines = [dict(line.split(" ", 1) for line in out.splitlines()) for out, _ in outs]
    return {mode: [rank.get(mode, "missing") for rank in lines] for mode in MODES}


def test_full_depth_everywhere_is_data_parallel_training_step_for_step(world_results):
    assert world_results["ddp"] == ["ok"] * 3


def test_each_stage_gets_the_mean_over_exactly_the_ranks_that_computed_it(world_results):
    assert world_results["3,2,1"] == ["ok"] * 3
    assert world_results["1,3,1"] == ["ok"] * 3


def test_with_batch_sizes_each_stage_gets_the_mean_over_the_samples_that_reached_it(world_results):
    # Rank 0 at full depth with 4 samples; the partial ranks take 7 and 9 (their steps are faster).
    assert world_results["3,2,1/4,7,9"] == ["ok"] * 3


def test_balanced_batches_give_the_faster_ranks_more_samples():
    assert balanced_batches([3, 2, 1, 1], 32, {2: 1.1, 1: 2.04}) == [32, 35, 65, 65]
    with pytest.raises(ValueError, match="no positive finite speedup for depth 1"):
        balanced_batches([3, 1], 32, {2: 1.1})
    with pytest.raises(ValueError, match="batch: expected a whole number"):
        balanced_batches([3, 1], 0, {1: 2.0})


def test_configurations_are_checked_naming_the_rank():
    assert structured_depths(4, stages=3, depth=1) == [3, 1, 1, 1]
    assert structured_depths(4, stages=3, depth=2, full_ranks=2) == [3, 3, 2, 2]
    with pytest.raises(ValueError, match="no rank back-propagates through all 3 stages"):
        check_depths([2, 1], 3, 2)
    with pytest.raises(ValueError, match=r"depths\[1\]: 4 is outside 1..3"):
        check_depths([3, 4], 3, 2)
    with pytest.raises(ValueError, match=r"depths\[0\]: expected a whole number of stages, got 2.5"):
        check_depths([2.5, 3], 3, 2)
    with pytest.raises(ValueError, match="depths: 1 depths for a world of 2 ranks"):
        check_depths([3], 3, 2)
    with pytest.raises(ValueError, match="full_ranks: 0 is outside 1..4"):
        structured_depths(4, stages=3, depth=1, full_ranks=0)
