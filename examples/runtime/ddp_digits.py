"""A small CNN on a real dataset that ships inside scikit-learn (8x8 handwritten digits, 1,797
images; no download), data-parallel over gloo on CPU, elastic under ``bft manager``.

    bft submit examples/runtime/ddp_digits.py --min 1 --max 4 --samples 300000

Each step takes the next images of the job's shuffled epochs (bft.train.ElasticSampler), each rank its
own share, so across resizes every training image is used once per epoch; the test split's accuracy
is printed at the end. Runs unchanged as ``python ddp_digits.py`` or under plain ``torchrun``.

It also runs in configurations of structured partial backpropagation (docs/spb.md), which the
manager chooses when the job declares them:

    bft submit examples/runtime/ddp_digits.py --min 1 --max 4 --samples 300000 \
        --configuration spb-d2:0.6:1.9 --configuration spb-d3:0.97:1.25

In "spb-dD" half the ranks (rounded up) back-propagate through all 4 stages and the others through
the last D, taking larger batches in the time they save (bft.train.spb.balanced_batches).
"""

import argparse
import os
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F
from sklearn.datasets import load_digits
from torch import nn

import bft.train as bt
from bft.train.spb import PartialBackprop, balanced_batches

STAGES = 4
# A partial rank's balanced batch over a full rank's, by depth: the batch whose step takes as long as a
# full rank's step of 32 samples, measured on the project's machine by bench/spb_measure.py (docs/spb.md).
SPB_SPEEDUP = {1: 3.0, 2: 2.65, 3: 1.5}


def digits():
    """(train x, train y, test x, test y): the first 1,500 images train, the rest test."""
    data = load_digits()
    x = torch.tensor(data.images, dtype=torch.float32).unsqueeze(1) / 16.0
    y = torch.tensor(data.target, dtype=torch.long)
    return x[:1500], y[:1500], x[1500:], y[1500:]


def stages() -> list:
    """The CNN as the stages structured partial backpropagation works on."""
    return [nn.Sequential(nn.Conv2d(1, 16, 3, padding=1), nn.ReLU()),
            nn.Sequential(nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2)),
            nn.Sequential(nn.Flatten(), nn.Linear(32 * 4 * 4, 64), nn.ReLU()),
            nn.Linear(64, 10)]


def spb_depths(configuration: str, world: int) -> list:
    """Each rank's backpropagation depth in a configuration: "full", or "spb-dD" (half the ranks,
    rounded up, at full depth; the others through the last D stages)."""
    if configuration == "full":
        return [STAGES] * world
    prefix, _, depth = configuration.partition("-d")
    if prefix != "spb" or not depth.isdigit() or not 1 <= int(depth) < STAGES:
        raise SystemExit(f"ddp_digits.py: unknown configuration {configuration!r} (full or spb-d1..spb-d{STAGES - 1})")
    full = (world + 1) // 2
    return [STAGES] * full + [int(depth)] * (world - full)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--samples", type=int, default=bt.target_samples(150_000), help="samples to train in all")
    p.add_argument("--batch", type=int, default=32, help="samples per worker per step")
    p.add_argument("--checkpoint-every-s", type=float, default=5.0)
    args = p.parse_args()

    if "RANK" in os.environ:
        dist.init_process_group("gloo")
    rank, world = bt.rank(), bt.world_size()
    train_x, train_y, test_x, test_y = digits()
    torch.manual_seed(0)
    net = nn.Sequential(*stages())
    depths = spb_depths(bt.configuration(), world)
    sizes = balanced_batches(depths, args.batch, SPB_SPEEDUP)
    optimizer = torch.optim.SGD(net.parameters(), lr=0.05, momentum=0.9)
    state = bt.resume()
    sampler = bt.ElasticSampler(len(train_x), seed=0)
    if state is not None:
        net.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        sampler.load_state_dict(state["sampler"])
        if rank == 0:
            print(f"resumed from checkpoint at {sampler.samples} samples on {world} workers", flush=True)
    samples = sampler.samples
    if rank == 0:
        print(f"configuration {bt.configuration()}: depths {depths}, batches {sizes}", flush=True)
    if min(depths) < STAGES:  # the stages share net's parameters: checkpoints are alike in every configuration
        spb = PartialBackprop(list(net), depths, batch_sizes=sizes)
        ddp = spb
    else:
        spb = None
        ddp = nn.parallel.DistributedDataParallel(net) if dist.is_initialized() else net

    def save() -> None:
        bt.checkpoint({"model": net.state_dict(), "optimizer": optimizer.state_dict(), "sampler": sampler.state_dict()})

    last_save = time.monotonic()
    while samples < args.samples:
        # The step takes the job's next sum(sizes) images, each rank its slice (ranks may take batches
        # of different sizes in spb configurations); a resumed job goes on where it stopped, whatever
        # the new world size.
        start = sum(sizes[:rank])
        idx = torch.tensor(sampler.indices(samples, samples + sum(sizes))[start:start + sizes[rank]])
        loss = F.cross_entropy(ddp(train_x[idx]), train_y[idx])
        optimizer.zero_grad()
        loss.backward()
        if spb is not None:
            spb.sync_gradients()
        optimizer.step()
        sampler.record(sum(sizes))
        samples = sampler.samples
        bt.report(samples)
        if bt.should_stop():
            save()
            bt.exit_for_resize()
        if time.monotonic() - last_save > args.checkpoint_every_s:
            save()
            last_save = time.monotonic()
    save()
    if rank == 0:
        with torch.no_grad():
            accuracy = (net(test_x).argmax(1) == test_y).float().mean().item()
        print(f"done: {samples} samples on {world} workers, test accuracy {accuracy:.3f}", flush=True)
    bt.exit_finished()


if __name__ == "__main__":
    main()
