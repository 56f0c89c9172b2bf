"""Structured partial backpropagation on this machine (CPU): what a configuration saves and costs.

1. Time per training step of one worker against its backpropagation depth (the small CNN of
   examples/runtime/ddp_digits.py in 4 stages, batch 64): medians over interleaved rounds, and the
   ratio to full depth measured in the same run.
2. Accuracy on the held-out digits after a fixed number of epochs, 2 ranks over gloo, one rank at
   full depth and the other at depth d, against both at full depth; the epochs each needs to reach a
   target accuracy give its statistical efficiency (epochs at full depth / epochs at depth d).

    python bench/spb_measure.py [--epochs 12] [--seeds 3]

The dataset ships inside scikit-learn (8x8 digits, 1,797 images): nothing is downloaded. Prints
Markdown tables (docs/spb.md has a run).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F
from sklearn.datasets import load_digits
from torch import nn

from bft.train.spb import PartialBackprop

STAGES = 4


def digits():
    data = load_digits()
    x = torch.tensor(data.images, dtype=torch.float32).unsqueeze(1) / 16.0
    y = torch.tensor(data.target, dtype=torch.long)
    return x[:1500], y[:1500], x[1500:], y[1500:]


def stages():
    return [nn.Sequential(nn.Conv2d(1, 16, 3, padding=1), nn.ReLU()),
            nn.Sequential(nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2)),
            nn.Sequential(nn.Flatten(), nn.Linear(32 * 4 * 4, 64), nn.ReLU()),
            nn.Linear(64, 10)]


def step_times(rounds: int, steps: int, batch: int) -> dict:
    """Median seconds per step (forward, backward through the last d stages, SGD step) by depth d."""
    torch.set_num_threads(1)
    x, y, _, _ = digits()
    parts = stages()
    opt = torch.optim.SGD([p for s in parts for p in s.parameters()], lr=0.01)
    times = {d: [] for d in range(1, STAGES + 1)}
    for _ in range(rounds):
        for d in range(1, STAGES + 1):  # interleaved, so that load drifts hit every depth alike
            t0 = time.perf_counter()
            for k in range(steps):
                i = (k * batch) % (len(x) - batch)
                h = x[i:i + batch]
                with torch.no_grad():
                    for s in parts[:STAGES - d]:
                        h = s(h)
                for s in parts[STAGES - d:]:
                    h = s(h)
                opt.zero_grad()
                F.cross_entropy(h, y[i:i + batch]).backward()
                opt.step()
            times[d].append((time.perf_counter() - t0) / steps)
    return {d: statistics.median(v) for d, v in times.items()}


def train(rank: int, world: int, rendezvous: str, depths: list, seed: int, epochs: int, queue) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method="file://" + rendezvous, rank=rank, world_size=world)
    torch.manual_seed(seed)
    model = PartialBackprop(stages(), depths)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    x, y, test_x, test_y = digits()
    accuracy = []
    for epoch in range(epochs):
        order = torch.randperm(len(x), generator=torch.Generator().manual_seed(seed * 1000 + epoch))
        shard = order[rank::world]
        for i in range(0, len(shard) - 31, 32):
            idx = shard[i:i + 32]
            opt.zero_grad()
            F.cross_entropy(model(x[idx]), y[idx]).backward()
            model.sync_gradients()
            opt.step()
        with torch.no_grad():
            accuracy.append((model(test_x).argmax(1) == test_y).float().mean().item())
    if rank == 0:
        queue.put(accuracy)
    dist.barrier()
    dist.destroy_process_group()


def accuracy_curve(depths: list, seed: int, epochs: int) -> list:
    with tempfile.TemporaryDirectory() as tmp:
        ctx = mp.get_context("spawn")
        queue = ctx.Queue()
        procs = [ctx.Process(target=train, args=(r, len(depths), os.path.join(tmp, "rdv"), depths, seed, epochs, queue))
                 for r in range(len(depths))]
        for p in procs:
            p.start()
        result = queue.get(timeout=600)
        for p in procs:
            p.join(timeout=60)
        return result


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--epochs", type=int, default=12)
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--target", type=float, default=0.95, help="accuracy for the epochs-to-target column")
    args = p.parse_args()

    times = step_times(args.rounds, steps=60, batch=64)
    print("| depth (stages back-propagated, of 4) | ms per step (median) | vs full depth |")
    print("|---|---|---|")
    for d in range(STAGES, 0, -1):
        print(f"| {d} | {times[d] * 1e3:.2f} | {times[d] / times[STAGES]:.2f} |")
    print()

    print(f"| depths (rank 0, rank 1) | test accuracy after {args.epochs // 2} / {args.epochs} epochs "
          f"(median of {args.seeds} seeds) | epochs to {args.target:.0%} (median) | efficiency |")
    print("|---|---|---|---|")
    full_epochs = None
    for d in range(STAGES, 0, -1):
        curves = [accuracy_curve([STAGES, d], seed, args.epochs) for seed in range(args.seeds)]
        half = statistics.median(c[args.epochs // 2 - 1] for c in curves)
        end = statistics.median(c[-1] for c in curves)
        reach = [next((e + 1 for e, a in enumerate(c) if a >= args.target), None) for c in curves]
        reached = [r for r in reach if r is not None]
        epochs = statistics.median(reached) if len(reached) == len(reach) else None
        if d == STAGES:
            full_epochs = epochs
        factor = f"{full_epochs / epochs:.2f}" if epochs and full_epochs else "-"
        print(f"| ({STAGES}, {d}) | {half:.3f} / {end:.3f} | {epochs if epochs else 'not reached'} | {factor} |",
              flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
