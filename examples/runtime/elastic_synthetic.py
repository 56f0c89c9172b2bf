"""A data-parallel model that grows and shrinks in place (gloo on CPU, NCCL on GPUs).

    bft manager &
    bft submit examples/runtime/elastic_synthetic.py --min 1 --max 4 --samples 200000

One state object carries the model, the optimizer and the elastic sampler across resizes. Resized
in place (the manager's default for a script that uses ElasticState), the workers that stay keep
their process and their model in memory; newcomers get the state from them by broadcast
(docs/runtime.md, "In-place resizes"). Runs unchanged under ``bft submit --resize relaunch``, as
``python elastic_synthetic.py`` and under ``torchrun``.

Training semantics (docs/runtime.md, "Training semantics"): by default each worker takes ``--batch``
samples per step, so a resize changes the global batch and the trained model depends on when the
job was resized (``--lr-rule linear`` scales the learning rate with the world size). With
``--global-batch B`` every optimizer step takes the same B samples at any world size (micro-batches
of ``--batch`` and gradient accumulation): the model is the one a fixed allocation would train.
``--ddp`` trains through ``state.ddp_model`` (DistributedDataParallel) instead of the bare model.
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
    p.add_argument("--global-batch", type=int, metavar="B",
                   help="fixed global batch: every step takes B samples whatever the world size, each worker "
                        "in micro-batches of --batch (default: fixed per-worker batch --batch)")
    p.add_argument("--lr-rule", choices=("constant", "linear"), default="constant",
                   help="with a fixed per-worker batch: keep the learning rate, or scale it with the world size "
                        "(linear: 0.05 x workers)")
    p.add_argument("--ddp", action="store_true",
                   help="train through state.ddp_model (DistributedDataParallel averages the gradients in "
                        "backward) instead of the bare model and reduce_gradients; a fixed per-worker batch")
    p.add_argument("--hidden", type=int, default=256, help="width of the hidden layers")
    p.add_argument("--float64", action="store_true", help="train in float64 (the tests compare runs step by step)")
    p.add_argument("--step-s", type=float, default=0.0,
                   help="seconds a step takes at least: emulates a heavier model at a known pace (default 0)")
    p.add_argument("--log-indices", metavar="DIR",
                   help="append each step's sample indices to DIR/<pid>.txt (the tests check the epochs)")
    p.add_argument("--log-params", metavar="FILE",
                   help="rank 0 appends the step number and the parameters after each step to FILE (float.hex)")
    args = p.parse_args()
    if args.ddp and args.global_batch is not None:
        p.error("--ddp trains one batch per worker and step; --global-batch needs micro-batches")
    if args.global_batch is not None and args.lr_rule != "constant":
        p.error("--lr-rule applies to a fixed per-worker batch; a fixed global batch keeps the learning rate")
    if args.float64:
        torch.set_default_dtype(torch.float64)
    if args.global_batch is not None:
        semantics = bt.FixedGlobalBatch(args.global_batch, micro_batch=args.batch)
    else:
        rule = bt.linear_scaling(1) if args.lr_rule == "linear" else None
        semantics = bt.FixedPerWorkerBatch(args.batch, lr_rule=rule)

    device = bt.device()
    data = torch.randn(args.dataset, 64, generator=torch.Generator().manual_seed(1))
    labels = (data @ torch.randn(64, 10, generator=torch.Generator().manual_seed(7))).argmax(dim=1)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, args.hidden), nn.ReLU(), nn.Linear(args.hidden, 10)).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    sampler = bt.ElasticSampler(len(data), seed=0)
    # The one call in-place resizing needs: sets up torch.distributed, restores the state (from a
    # surviving peer, else the last checkpoint); state.commit() below is the step boundary.
    state = bt.ElasticState(model=model, optimizer=optimizer, sampler=sampler, steps=0)
    semantics.apply_learning_rate(optimizer)
    log = open(os.path.join(args.log_indices, f"{os.getpid()}.txt"), "a") if args.log_indices else None
    params = open(args.log_params, "a") if args.log_params else None  # rank 0 of each step writes
    loss = torch.zeros(())
    while sampler.samples < args.samples:
        step_start = time.monotonic()
        micro_batches = semantics.micro_batches(sampler)
        loss = torch.zeros((), device=device)
        if args.ddp:  # one batch: DistributedDataParallel averages the workers' mean gradients
            (index,) = micro_batches
            part = F.cross_entropy(state.ddp_model(data[index].to(device)), labels[index].to(device))
            part.backward()
            loss += part.detach() / bt.world_size()  # (the all-reduce below sums the workers' parts)
        else:
            # The model used bare: ranks may run different numbers of micro-batches in a step;
            # reduce_gradients sums the gradients once per step instead of DDP's all-reduce in backward.
            for index in micro_batches:
                x, y = data[index].to(device), labels[index].to(device)
                part = F.cross_entropy(model(x), y, reduction="sum") * semantics.loss_weight()
                part.backward()
                loss += part.detach()
            semantics.reduce_gradients(model.parameters())
        optimizer.step()
        optimizer.zero_grad()
        state.steps += 1
        if args.step_s > 0:
            time.sleep(max(0.0, step_start + args.step_s - time.monotonic()))
        if log:
            index = [i for batch in micro_batches for i in batch]
            log.write(f"{sampler.samples} {bt.rank()} {bt.world_size()} {' '.join(map(str, index))}\n")
            log.flush()
        if params and bt.rank() == 0:
            flat = torch.cat([q.detach().reshape(-1) for q in model.parameters()]).tolist()
            params.write(f"{state.steps} {bt.world_size()} {' '.join(map(float.hex, flat))}\n")
            params.flush()
        sampler.record(semantics.samples_per_step())
        bt.report(sampler.samples)
        if state.commit():  # resized in place: this rank's share of each step changed
            semantics.apply_learning_rate(optimizer)
    state.save()
    if torch.distributed.is_initialized():
        torch.distributed.all_reduce(loss)  # the last step's loss: each rank's part of its weighted sum
    if bt.rank() == 0:
        print(f"done: {sampler.samples} samples on {bt.world_size()} workers in {state.steps} steps ({device.type}, "
              f"{state.backend}), final loss {loss.item():.3f}", flush=True)
    bt.exit_finished()


if __name__ == "__main__":
    main()
