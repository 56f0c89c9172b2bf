"""A sharded model (FSDP2 ``fully_shard``) that grows and shrinks by relaunch from a resharded checkpoint.

    bft manager &
    bft submit examples/runtime/fsdp_synthetic.py --min 1 --max 4 --samples 200000

Each rank holds 1/W of every layer's parameters and optimizer state. At a resize the workers save a
``torch.distributed.checkpoint`` (DCP: each rank writes its own shards) and exit; the relaunched
workers, however many, load it into their own sharding: DCP reshards from the old world size to the
new one. A small pointer file written last by rank 0 (``bt.checkpoint``, atomic) names the complete
DCP directory, so a crash in the middle of a save resumes from the previous one.

Training semantics (docs/runtime.md, "Training semantics"): a fixed global batch (``--global-batch``,
micro-batches of ``--micro-batch``), so the trained model does not depend on the resizes. FSDP
reduce-scatters the gradients itself; every rank runs as many micro-batches (``same_count``) because
each forward and backward is a collective, and the gradients are summed (divide factor 1), each
sample's loss weighted 1 / global batch. Runs unchanged as ``python fsdp_synthetic.py`` (one rank)
and under ``torchrun``.
"""

import argparse
import os
import shutil
import socket
import time

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
import torch.nn.functional as F
from torch import nn
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
from torch.distributed.fsdp import FSDPModule, fully_shard

import bft.train as bt
from bft.train.elastic import backend


def init_process_group(device: torch.device) -> None:
    """torchrun's process group, or a group of one for a plain ``python`` run (FSDP needs a group)."""
    if "RANK" not in os.environ:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        os.environ.update(RANK="0", WORLD_SIZE="1", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group(backend(device), device_id=device if device.type == "cuda" else None)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--samples", type=int, default=bt.target_samples(100_000), help="samples to train in all")
    p.add_argument("--global-batch", type=int, default=256, help="samples per optimizer step, whatever the world size")
    p.add_argument("--micro-batch", type=int, default=64, help="samples per forward and backward on one rank")
    p.add_argument("--dataset", type=int, default=8192, help="samples in the synthetic dataset (one epoch)")
    p.add_argument("--hidden", type=int, default=256, help="width of the hidden layers")
    p.add_argument("--layers", type=int, default=4, help="hidden layers, each sharded on its own")
    p.add_argument("--float64", action="store_true", help="train in float64 (the tests compare runs step by step)")
    p.add_argument("--step-s", type=float, default=0.0,
                   help="seconds a step takes at least: emulates a heavier model at a known pace (default 0)")
    p.add_argument("--log-params", metavar="FILE",
                   help="rank 0 appends the step number and the full parameters after each step to FILE (float.hex)")
    args = p.parse_args()
    if args.float64:
        torch.set_default_dtype(torch.float64)

    device = bt.device()
    if device.type == "cuda":
        torch.cuda.set_device(device)
    init_process_group(device)
    data = torch.randn(args.dataset, 64, generator=torch.Generator().manual_seed(1))
    labels = (data @ torch.randn(64, 10, generator=torch.Generator().manual_seed(7))).argmax(dim=1)
    torch.manual_seed(0)
    widths = [64] + [args.hidden] * args.layers
    model = nn.Sequential(*[m for a, b in zip(widths, widths[1:]) for m in (nn.Linear(a, b), nn.ReLU())],
                          nn.Linear(widths[-1], 10)).to(device)
    for layer in model:
        if isinstance(layer, nn.Linear):
            fully_shard(layer)
    fully_shard(model)
    for module in model.modules():  # each fully_shard call owns its parameters' reduction
        if isinstance(module, FSDPModule):
            module.set_gradient_divide_factor(1.0)  # sum over ranks: each sample's loss is already weighted 1/B
            # In float32 FSDP2 would reduce with PREMUL_SUM, which gloo refuses: plain sums there.
            module.set_force_sum_reduction_for_comms(backend(device) == "gloo")
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    sampler = bt.ElasticSampler(len(data), seed=0)
    semantics = bt.FixedGlobalBatch(args.global_batch, micro_batch=args.micro_batch)
    directory = bt.checkpoint_path().parent
    steps = 0

    pointer = bt.resume()  # {"dcp": the complete DCP directory's name, "sampler": ..., "steps": ...}
    if pointer:
        model_state, optimizer_state = get_state_dict(model, optimizer)  # this world's shards, to fill
        state = {"model": model_state, "optimizer": optimizer_state}
        dcp.load(state, checkpoint_id=str(directory / pointer["dcp"]))
        set_state_dict(model, optimizer, model_state_dict=state["model"], optim_state_dict=state["optimizer"])
        sampler.load_state_dict(pointer["sampler"])
        steps = pointer["steps"]
        if bt.rank() == 0:
            print(f"resumed from {pointer['dcp']} at step {steps} on {bt.world_size()} workers", flush=True)

    def save() -> None:
        name = f"dcp-{steps}"
        model_state, optimizer_state = get_state_dict(model, optimizer)
        dcp.save({"model": model_state, "optimizer": optimizer_state}, checkpoint_id=str(directory / name))
        dist.barrier()  # every rank's shards are written before the pointer names them
        bt.checkpoint({"dcp": name, "sampler": sampler.state_dict(), "steps": steps})
        if bt.rank() == 0:
            for old in directory.glob("dcp-*"):
                if old.name != name:
                    shutil.rmtree(old, ignore_errors=True)

    params = open(args.log_params, "a") if args.log_params and bt.rank() == 0 else None
    loss = torch.zeros((), device=device)
    while sampler.samples < args.samples:
        step_start = time.monotonic()
        micro_batches = semantics.micro_batches(sampler, same_count=True)
        loss = torch.zeros((), device=device)
        for k, index in enumerate(micro_batches):
            model.set_requires_gradient_sync(k == len(micro_batches) - 1)  # reduce-scatter once per step
            x, y = data[index].to(device), labels[index].to(device)
            part = F.cross_entropy(model(x), y, reduction="sum") * semantics.loss_weight()
            part.backward()
            loss += part.detach()
        optimizer.step()
        optimizer.zero_grad()
        steps += 1
        if args.step_s > 0:
            time.sleep(max(0.0, step_start + args.step_s - time.monotonic()))
        if args.log_params:
            full = torch.cat([q.full_tensor().reshape(-1) for q in model.parameters()]).tolist()  # a collective
            if params:
                params.write(f"{steps} {bt.world_size()} {' '.join(map(float.hex, full))}\n")
                params.flush()
        sampler.record(semantics.samples_per_step())
        bt.report(sampler.samples)
        if bt.should_stop():
            save()
            bt.exit_for_resize()
    save()
    dist.all_reduce(loss)  # the last step's loss: each rank's part of its weighted sum
    if bt.rank() == 0:
        print(f"done: {sampler.samples} samples on {bt.world_size()} workers in {steps} steps ({device.type}, "
              f"{backend(device)}, FSDP2), final loss {loss.item():.3f}", flush=True)
    bt.exit_finished()  # the barrier, the group's end, then an exit no gloo thread can abort


if __name__ == "__main__":
    main()
