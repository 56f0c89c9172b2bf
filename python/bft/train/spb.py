"""Structured partial backpropagation (JigSaw, arXiv 2111.10672) for data-parallel training with
``torch.distributed`` (gloo on CPU, or any backend).

A model is an ordered list of *stages* (modules applied one after the other). A configuration gives
each rank a *depth*: the number of trailing stages it back-propagates through. A rank of depth d
runs the first S - d stages without autograd (no activations kept, no backward through them) and
computes gradients only for the last d. At least one rank must have the full depth S, so that
every stage gets a gradient every step. Each stage's gradient is the mean over exactly the ranks
that computed it, and every rank applies that same mean, so the replicas stay identical::

    import torch.distributed as dist
    from bft.train.spb import PartialBackprop

    model = PartialBackprop([features, middle, head], depths=[3, 1, 1, 1])  # one rank in full
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for x, y in loader:
        opt.zero_grad()
        loss_fn(model(x), y).backward()
        model.sync_gradients()          # instead of DistributedDataParallel's all-reduce
        opt.step()

A rank that skips stages finishes its step early. With ``batch_sizes`` the ranks may take batches of
different sizes (``balanced_batches``: a partial rank takes as many more samples as its step is
faster, so that every rank computes for as long as a full one): each stage's gradient is then the
mean over the samples of the ranks that computed it, and the job processes more samples per step
than with full backpropagation everywhere, in the same time.

With every depth equal to S (and equal batches) this is plain data-parallel training: the gradients
are the all-reduced mean, as DistributedDataParallel computes them. The ranks that skip a stage take part
in the all-reduce with zeros, so every rank receives every stage's mean. This saves backward
compute and activation memory, not gradient communication (one all-reduce of all parameters per
step). docs/spb.md has the measurements.
"""

from __future__ import annotations

import math
from typing import List, Mapping, Optional, Sequence

import torch
import torch.distributed as dist
from torch import nn

__all__ = ["PartialBackprop", "check_depths", "structured_depths", "balanced_batches"]


def check_depths(depths: Sequence[int], stages: int, world_size: int) -> List[int]:
    """The depths as a list, or ValueError naming what is wrong."""
    if stages < 1:
        raise ValueError("stages: a model needs at least one stage")
    out = []
    for rank, d in enumerate(depths):
        if isinstance(d, bool) or not isinstance(d, int):
            raise ValueError(f"depths[{rank}]: expected a whole number of stages, got {d!r}")
        if not 1 <= d <= stages:
            raise ValueError(f"depths[{rank}]: {d} is outside 1..{stages} (the model's stages)")
        out.append(d)
    if len(out) != world_size:
        raise ValueError(f"depths: {len(out)} depths for a world of {world_size} ranks (one per rank)")
    if max(out) != stages:
        raise ValueError(f"depths: no rank back-propagates through all {stages} stages, so the first stage "
                         "would get no gradient (give at least one rank the full depth)")
    return out


def structured_depths(world_size: int, stages: int, depth: int, full_ranks: int = 1) -> List[int]:
    """A configuration: ``full_ranks`` ranks (the first) at the full depth, the others at ``depth``."""
    if not 1 <= full_ranks <= world_size:
        raise ValueError(f"full_ranks: {full_ranks} is outside 1..{world_size}")
    return check_depths([stages] * full_ranks + [depth] * (world_size - full_ranks), stages, world_size)


def balanced_batches(depths: Sequence[int], batch: int, speedup: Mapping[int, float]) -> List[int]:
    """Per-rank batch sizes that balance a configuration's step: a full-depth rank takes ``batch``
    samples, a rank of depth d takes ``round(batch * speedup[d])`` (at least 1), where ``speedup[d]``
    is the time per sample at full depth over the time per sample at depth d (measured:
    bench/spb_measure.py)."""
    if isinstance(batch, bool) or not isinstance(batch, int) or batch < 1:
        raise ValueError(f"batch: expected a whole number of samples >= 1, got {batch!r}")
    full = max(depths)
    out = []
    for rank, d in enumerate(depths):
        if d == full:
            out.append(batch)
            continue
        factor = speedup.get(d)
        if factor is None or not math.isfinite(factor) or factor <= 0:
            raise ValueError(f"speedup: no positive finite speedup for depth {d} (rank {rank})")
        out.append(max(1, round(batch * factor)))
    return out


class PartialBackprop(nn.Module):
    """The stages of a model run with this rank's depth of backpropagation (see the module's doc)."""

    def __init__(self, stages: Sequence[nn.Module], depths: Sequence[int],
                 process_group: Optional[dist.ProcessGroup] = None, batch_sizes: Optional[Sequence[int]] = None):
        super().__init__()
        if not dist.is_available() or not dist.is_initialized():
            raise RuntimeError("PartialBackprop needs torch.distributed to be initialised (init_process_group)")
        self.stages = nn.ModuleList(stages)
        self.process_group = process_group
        world = dist.get_world_size(process_group)
        self.depths = check_depths(list(depths), len(self.stages), world)
        self.depth = self.depths[dist.get_rank(process_group)]
        if batch_sizes is None:
            batch_sizes = [1] * world  # every rank's mean gradient weighs the same
        batch_sizes = list(batch_sizes)
        if len(batch_sizes) != world or any(isinstance(b, bool) or not isinstance(b, int) or b < 1
                                            for b in batch_sizes):
            raise ValueError(f"batch_sizes: expected {world} whole numbers >= 1 (one per rank), got {batch_sizes!r}")
        self.batch_sizes = batch_sizes
        self.batch_size = batch_sizes[dist.get_rank(process_group)]
        # Stage s gets gradients from the ranks whose suffix reaches it: depth >= S - s.
        count = len(self.stages)
        self.contributors = [sum(1 for d in self.depths if d >= count - s) for s in range(count)]
        self.stage_samples = [sum(b for d, b in zip(self.depths, batch_sizes) if d >= count - s) for s in range(count)]

    def forward(self, x):
        frozen = len(self.stages) - self.depth
        with torch.no_grad():
            for stage in self.stages[:frozen]:
                x = stage(x)
        for stage in self.stages[frozen:]:
            x = stage(x)
        return x

    def sync_gradients(self) -> None:
        """Replaces each parameter's gradient by its stage's mean over the ranks that computed it,
        weighted by their batch sizes (the mean over their samples, for a loss that is a mean over
        the batch). Call it on every rank after ``backward()`` and before the optimizer's step."""
        params = [(s, p) for s, stage in enumerate(self.stages) for p in stage.parameters() if p.requires_grad]
        if not params:
            return
        flat = torch.cat([(p.grad if p.grad is not None else torch.zeros_like(p)).reshape(-1) for _, p in params])
        if self.batch_size != 1:
            flat.mul_(self.batch_size)
        dist.all_reduce(flat, op=dist.ReduceOp.SUM, group=self.process_group)
        offset = 0
        for s, p in params:
            n = p.numel()
            mean = flat[offset:offset + n].view_as(p) / self.stage_samples[s]
            if p.grad is None:
                p.grad = mean.clone()
            else:
                p.grad.copy_(mean)
            offset += n
