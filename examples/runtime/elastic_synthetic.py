"""A data-parallel model that grows and shrinks in place (gloo on CPU, NCCL on GPUs).

    bft manager &
    bft submit examples/runtime/elastic_synthetic.py --min 1 --max 4 --samples 200000

One state object carries the model, the optimizer and the elastic sampler across resizes. Resized
in place (the manager's default for a script that uses ElasticState), the workers that stay keep
their process and their model in memory; newcomers get the state from them by broadcast
(docs/runtime.md, "In-place resizes"). Runs unchanged under ``bft submit --resize relaunch``, as
``python elastic_synthetic.py`` and under ``torchrun``.
"""

import argparse
import os
import time

import torch
import torch.nn.functional as F
from torch import nn

import bft.train as bt


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--samples", type=int, default=bt.target_samples(100_000), help="samples to train in all")
    p.add_argument("--batch", type=int, default=64, help="samples per worker per step")
    p.add_argument("--dataset", type=int, default=8192, help="samples in the synthetic dataset (one epoch)")
    p.add_argument("--hidden", type=int, default=256, help="width of the hidden layers")
    p.add_argument("--step-s", type=float, default=0.0,
                   help="seconds a step takes at least: emulates a heavier model at a known pace (default 0)")
    p.add_argument("--log-indices", metavar="DIR",
                   help="append each step's sample indices to DIR/<pid>.txt (the tests check the epochs)")
    args = p.parse_args()

    device = bt.device()
    data = torch.randn(args.dataset, 64, generator=torch.Generator().manual_seed(1))
    labels = (data @ torch.randn(64, 10, generator=torch.Generator().manual_seed(7))).argmax(dim=1)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, args.hidden), nn.ReLU(), nn.Linear(args.hidden, 10)).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    sampler = bt.ElasticSampler(len(data), seed=0)
    # The one call in-place resizing needs: sets up torch.distributed, restores the state (from a
    # surviving peer, else the last checkpoint); state.commit() below is the step boundary.
    state = bt.ElasticState(model=model, optimizer=optimizer, sampler=sampler)
    log = open(os.path.join(args.log_indices, f"{os.getpid()}.txt"), "a") if args.log_indices else None
    batches = iter(sampler)
    loss = torch.tensor(0.0)
    while sampler.samples < args.samples:
        step_start = time.monotonic()
        index = [next(batches) for _ in range(args.batch)]
        x, y = data[index].to(device), labels[index].to(device)
        loss = F.cross_entropy(state.ddp_model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if args.step_s > 0:
            time.sleep(max(0.0, step_start + args.step_s - time.monotonic()))
        if log:
            log.write(f"{sampler.samples} {bt.rank()} {bt.world_size()} {' '.join(map(str, index))}\n")
            log.flush()
        sampler.record(args.batch * bt.world_size())
        bt.report(sampler.samples)
        if state.commit():  # resized in place: this rank's share of the data changed
            batches = iter(sampler)
    state.save()
    if bt.rank() == 0:
        print(f"done: {sampler.samples} samples on {bt.world_size()} workers ({device.type}, {state.backend}), "
              f"final loss {loss.item():.3f}", flush=True)
    if torch.distributed.is_initialized():
        torch.distributed.barrier()  # every rank arrives before any tears down
        torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main()
