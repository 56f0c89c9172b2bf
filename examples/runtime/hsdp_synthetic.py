"""A model sharded inside each node and replicated across nodes (HSDP) that resizes in place by whole nodes.

    bft manager --resize inplace --procs-per-node 2 &
    bft submit examples/runtime/hsdp_synthetic.py --min 1 --max 4 --samples 200000

FSDP2 ``fully_shard`` on a 2-D mesh (bft.train.hsdp): each of a node's N processes holds 1/N of every
layer's parameters and optimizer state, and every node holds a whole replica. An in-place resize
moves whole replicas: a new node's local rank k receives shard k from local rank k of a surviving node
(the N transfers side by side), a shrink drops nodes and moves nothing. A relaunch (``--resize
relaunch``, a failed in-place resize, a stop and restart) loads the DCP checkpoint into whatever mesh
it gets, with another number of nodes or of processes per node.

Training semantics (docs/runtime.md, "Training semantics"): a fixed global batch over all the job's
processes, as examples/runtime/fsdp_synthetic.py: every rank runs as many micro-batches, gradients
are summed (divide factor 1), each sample's loss weighted 1 / global batch. Runs unchanged as
``python hsdp_synthetic.py`` (one process) and under ``torchrun``.
"""

import argparse
import time

import torch
import torch.nn.functional as F
from torch import nn
from torch.distributed.fsdp import FSDPModule, fully_shard

import bft.train as bt
from bft.train.elastic import backend


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
    on_gloo = backend(device) == "gloo"
    data = torch.randn(args.dataset, 64, generator=torch.Generator().manual_seed(1))
    labels = (data @ torch.randn(64, 10, generator=torch.Generator().manual_seed(7))).argmax(dim=1)
    widths = [64] + [args.hidden] * args.layers

    def build(mesh):
        """The model and its optimizer on `mesh`: called at the start and after each in-place resize,
        whose shards then replace these initial values."""
        torch.manual_seed(0)
        model = nn.Sequential(*[m for a, b in zip(widths, widths[1:]) for m in (nn.Linear(a, b), nn.ReLU())],
                              nn.Linear(widths[-1], 10)).to(device)
        for layer in model:
            if isinstance(layer, nn.Linear):
                fully_shard(layer, mesh=mesh)
        fully_shard(model, mesh=mesh)
        for module in model.modules():  # each fully_shard call owns its parameters' reduction
            if isinstance(module, FSDPModule):
                module.set_gradient_divide_factor(1.0)  # sum over ranks: each sample's loss is already weighted 1/B
                # In float32 FSDP2 would reduce with PREMUL_SUM, which gloo refuses: plain sums there.
                module.set_force_sum_reduction_for_comms(on_gloo)
        return model, torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)

    sampler = bt.ElasticSampler(len(data), seed=0)
    semantics = bt.FixedGlobalBatch(args.global_batch, micro_batch=args.micro_batch)
    # Joins the job (in place: the current generation's group), builds the model on the mesh and
    # restores its state: shards from a surviving node, else the last DCP checkpoint.
    state = bt.HSDPState(build, sampler=sampler, steps=0)
    if bt.rank() == 0 and state.steps:
        print(f"resumed at step {state.steps} on {bt.world_size()} workers", flush=True)
    params = open(args.log_params, "a") if args.log_params and bt.rank() == 0 else None
    loss = torch.zeros((), device=device)
    while sampler.samples < args.samples:
        step_start = time.monotonic()
        model, optimizer = state.model, state.optimizer  # new objects after a resize
        micro_batches = semantics.micro_batches(sampler, same_count=True)
        loss = torch.zeros((), device=device)
        for k, index in enumerate(micro_batches):
            model.set_requires_gradient_sync(k == len(micro_batches) - 1)  # reduce once per step
            x, y = data[index].to(device), labels[index].to(device)
            part = F.cross_entropy(model(x), y, reduction="sum") * semantics.loss_weight()
            part.backward()
            loss += part.detach()
        optimizer.step()
        optimizer.zero_grad()
        state.steps += 1
        if args.step_s > 0:
            time.sleep(max(0.0, step_start + args.step_s - time.monotonic()))
        if args.log_params:
            full = torch.cat([q.full_tensor().reshape(-1) for q in model.parameters()]).tolist()  # a collective
            if params:
                params.write(f"{state.steps} {bt.world_size()} {' '.join(map(float.hex, full))}\n")
                params.flush()
        sampler.record(semantics.samples_per_step())
        bt.report(sampler.samples)
        state.commit()
    state.save()
    dist = torch.distributed
    dist.all_reduce(loss)  # the last step's loss: each rank's part of its weighted sum
    if bt.rank() == 0:
        print(f"done: {sampler.samples} samples on {bt.world_size()} workers ({state.mesh.shape[0]} nodes of "
              f"{state.mesh.shape[1]}) in {state.steps} steps ({device.type}, {state.backend}, HSDP), final loss "
              f"{loss.item():.3f}", flush=True)
    bt.exit_finished()  # the barrier, the group's end, then an exit no gloo thread can abort


if __name__ == "__main__":
    main()
