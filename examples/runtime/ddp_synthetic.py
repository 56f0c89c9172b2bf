"""A small data-parallel model on synthetic data (gloo, CPU), elastic under ``bft manager``.

    bft submit examples/runtime/ddp_synthetic.py --min 1 --max 4 --samples 200000

Runs unchanged as ``python ddp_synthetic.py`` or ``torchrun --nproc-per-node 2 ddp_synthetic.py``.
The four bft.train calls are the whole elasticity contract (docs/runtime.md).
"""

import argparse
import os
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

import bft.train as bt


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--samples", type=int, default=bt.target_samples(100_000), help="samples to train in all")
    p.add_argument("--batch", type=int, default=128, help="samples per worker per step")
    p.add_argument("--hidden", type=int, default=512, help="width of the hidden layers")
    p.add_argument("--checkpoint-every-s", type=float, default=5.0, help="periodic checkpoint interval")
    p.add_argument("--step-s", type=float, default=0.0,
                   help="seconds a step takes at least: emulates a heavier model at a known pace (default 0)")
    args = p.parse_args()

    if "RANK" in os.environ:  # under torchrun (and so under the manager)
        dist.init_process_group("gloo")
    rank, world = bt.rank(), bt.world_size()
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, args.hidden), nn.ReLU(), nn.Linear(args.hidden, args.hidden), nn.ReLU(),
                          nn.Linear(args.hidden, 10))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    state = bt.resume()
    samples = 0
    if state is not None:
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        samples = state["samples"]
        if rank == 0:
            print(f"resumed from checkpoint at {samples} samples on {world} workers", flush=True)
    ddp = nn.parallel.DistributedDataParallel(model) if dist.is_initialized() else model
    # Each rank draws its own batches; the seed depends on the progress so a resumed job sees new data.
    gen = torch.Generator().manual_seed(1000 * rank + samples)
    teacher = torch.Generator().manual_seed(7)
    w_true = torch.randn(64, 10, generator=teacher)

    def save() -> None:
        bt.checkpoint({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "samples": samples})

    last_save = time.monotonic()
    loss = torch.tensor(0.0)
    while samples < args.samples:
        step_start = time.monotonic()
        x = torch.randn(args.batch, 64, generator=gen)
        y = (x @ w_true).argmax(dim=1)
        loss = F.cross_entropy(ddp(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if args.step_s > 0:
            time.sleep(max(0.0, step_start + args.step_s - time.monotonic()))
        samples += args.batch * world
        bt.report(samples)
        if bt.should_stop():
            save()
            bt.exit_for_resize()
        if time.monotonic() - last_save > args.checkpoint_every_s:
            save()
            last_save = time.monotonic()
    save()
    if rank == 0:
        print(f"done: {samples} samples on {world} workers, final loss {loss.item():.3f}", flush=True)
    bt.exit_finished()  # the barrier, the group's end, then an exit no gloo thread can abort


if __name__ == "__main__":
    main()
