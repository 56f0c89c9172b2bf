"""What one optimizer step consumes when the world size changes: the job's training semantics.

A resize changes the number of data-parallel ranks. What that does to the model depends on what the
script keeps fixed, and a script says which by the object it builds:

- ``FixedGlobalBatch(batch=B, micro_batch=m)``: every optimizer step consumes exactly the next B
  samples of the sampler's stream, whatever the world size. Rank r of W takes the step's stream
  positions r, r + W, r + 2W, ... below B, in micro-batches of at most m (gradient accumulation);
  each sample's loss is weighted 1/B and the gradients are summed over the ranks. The step's gradient
  is then the mean over the same B samples at any world size, so an elastic run trains the same
  model as a fixed-size one, up to the order in which floating-point sums are taken. A resize
  changes the throughput, never the optimisation.
- ``FixedPerWorkerBatch(batch=b, lr_rule=...)``: each rank takes b samples per step (the global batch
  is b·W and changes with every resize), the loss weighted 1/(b·W) as DistributedDataParallel's mean
  of means. The learning rate follows ``lr_rule(base_lr, world_size)`` (default: unchanged;
  :func:`linear_scaling` is Goyal et al.'s rule). The trained model depends on when the job was
  resized: the weak-scaling semantics of BFTrainer and of the examples before this option.

Both share one step loop (docs/runtime.md, "Training semantics")::

    semantics = bt.FixedGlobalBatch(batch=256, micro_batch=32)
    state = bt.ElasticState(model=model, optimizer=optimizer, sampler=sampler)
    semantics.apply_learning_rate(optimizer)
    while sampler.samples < target:
        for index in semantics.micro_batches(sampler):
            loss = F.cross_entropy(model(x[index]), y[index], reduction="sum") * semantics.loss_weight()
            loss.backward()                        # accumulates into .grad
        semantics.reduce_gradients(model.parameters())
        optimizer.step()
        optimizer.zero_grad()
        sampler.record(semantics.samples_per_step())
        if state.commit():                         # resized in place
            semantics.apply_learning_rate(optimizer)

The model is used bare (not DistributedDataParallel): ranks may run different numbers of
micro-batches in a step, which DDP's per-backward all-reduce cannot follow; ``reduce_gradients``
all-reduces once per step instead. The rank and world size default to ``bt.rank()`` and
``bt.world_size()``, which ``ElasticState`` updates at each in-place resize.
"""

from __future__ import annotations

import abc
import os
from typing import Any, Callable, Iterable, List, Optional

from . import protocol
from .worker import rank as worker_rank
from .worker import world_size as worker_world_size

__all__ = ["FixedGlobalBatch", "FixedPerWorkerBatch", "linear_scaling"]

# Gradients are summed in buckets of this many bytes: one all-reduce per bucket bounds the extra
# memory of a flattened copy for a large model while keeping the number of collectives small.
_BUCKET_BYTES = 32 << 20

# The key under which apply_learning_rate keeps a parameter group's learning rate as first given: it
# travels in optimizer.state_dict() with the group, so a relaunch at another size rescales from it.
BASE_LR_KEY = "bft_base_lr"

LrRule = Callable[[float, int], float]


def _positive(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name}: expected a whole number of at least 1, got {value!r}")
    return value




def linear_scaling(reference_world: int) -> LrRule:
    """Goyal et al.'s linear scaling rule for a fixed per-worker batch: the learning rate given for a
    world of ``reference_world`` ranks, scaled by ``world / reference_world``."""
    _positive("reference_world", reference_world)
    return lambda base_lr, world: base_lr * world / reference_world


class _Semantics(abc.ABC):
    """The step loop's parts both semantics share; a subclass says how many samples a step takes."""

    def __init__(self, micro_batch: Optional[int]) -> None:
        self.micro_batch = None if micro_batch is None else _positive("micro_batch", micro_batch)

    @abc.abstractmethod
    def samples_per_step(self, world: Optional[int] = None) -> int:
        """The samples one optimizer step consumes, all ranks together, at ``world`` ranks."""

    def learning_rate(self, base_lr: float, world: Optional[int] = None) -> float:
        """The learning rate at ``world`` ranks of a parameter group given ``base_lr``."""
        return base_lr

    def loss_weight(self, world: Optional[int] = None) -> float:
        """The factor for the *sum* of a micro-batch's per-sample losses: 1 / samples per step, so
        that the gradients summed over all ranks are the mean over the step's samples."""
        return 1.0 / self.samples_per_step(world)

    def positions(self, position: int, rank: Optional[int] = None, world: Optional[int] = None) -> List[int]:
        """The stream positions rank ``rank`` of ``world`` processes in the step that starts at
        ``position``: ``position + rank``, ``position + rank + world``, ... below the step's end."""
        world = worker_world_size() if world is None else _positive("world", world)
        rank = worker_rank() if rank is None else rank
        if isinstance(rank, bool) or not isinstance(rank, int) or not 0 <= rank < world:
            raise ValueError(f"rank: {rank!r} is outside 0..{world - 1} (world {world})")
        return list(range(position + rank, position + self.samples_per_step(world), world))

    def micro_batches(self, sampler: Any, rank: Optional[int] = None, world: Optional[int] = None, *,
                      same_count: bool = False) -> List[List[int]]:
        """This rank's sample indices of the sampler's next step, cut into micro-batches (one
        micro-batch holding them all without ``micro_batch``; none when the rank has no sample).
        ``same_count``: as many on every rank, the short ones padded with empty micro-batches, for
        models whose forward and backward are collectives (FSDP's all-gathers and reduce-scatters)."""
        world = worker_world_size() if world is None else world
        start = sampler.samples
        mine = self.positions(start, rank, world)
        step = sampler.indices(start, start + self.samples_per_step(world)) if mine else []
        index = [step[q - start] for q in mine]
        size = self.micro_batch or max(1, len(index))
        out = [index[i:i + size] for i in range(0, len(index), size)]
        if same_count:
            # Rank 0 has the most samples (the step's positions are dealt out from it): the most micro-batches.
            first = len(self.positions(start, 0, world))
            most = -(-first // (self.micro_batch or first)) if first else 0
            out += [[] for _ in range(most - len(out))]
        return out

    def reduce_gradients(self, parameters: Iterable[Any]) -> None:
        """Sums every parameter's gradient over the ranks of the current process group (nothing to do
        without one). A gradient that is None (a rank without samples this step) counts as zeros.
        Resized in place, a sum that fails (a peer lost mid-step) leaves every gradient zero instead
        of raising: a step on no data, never a partial sum; the step boundary that follows re-forms
        the group without the lost peer (bft.train.ElasticState)."""
        import torch
        import torch.distributed as dist

        params = [p for p in parameters if p.requires_grad]
        for p in params:
            if p.grad is None:
                p.grad = torch.zeros_like(p)
        if not dist.is_initialized() or dist.get_world_size() == 1:
            return
        try:
            bucket: List[Any] = []
            size = 0
            for p in params:
                if bucket and (size + p.grad.numel() * p.grad.element_size() > _BUCKET_BYTES
                               or p.grad.dtype != bucket[0].dtype or p.grad.device != bucket[0].device):
                    _all_reduce_sum(bucket)
                    bucket, size = [], 0
                bucket.append(p.grad)
                size += p.grad.numel() * p.grad.element_size()
            if bucket:
                _all_reduce_sum(bucket)
        except Exception:
            if os.environ.get(protocol.ENV_RESIZE) != protocol.RESIZE_INPLACE:
                raise
            for p in params:
                p.grad.zero_()

    def apply_learning_rate(self, optimizer: Any, world: Optional[int] = None) -> None:
        """Sets each parameter group's learning rate for ``world`` ranks from the rate it had when this
        was first called (kept in the group, so it survives checkpoints). Call it after building or
        restoring the optimizer and after each resize."""
        world = worker_world_size() if world is None else world
        for group in optimizer.param_groups:
            group.setdefault(BASE_LR_KEY, group["lr"])
            group["lr"] = self.learning_rate(group[BASE_LR_KEY], world)


def _all_reduce_sum(tensors: List[Any]) -> None:
    import torch
    import torch.distributed as dist

    if len(tensors) == 1:
        dist.all_reduce(tensors[0], op=dist.ReduceOp.SUM)
        return
    flat = torch.cat([t.reshape(-1) for t in tensors])
    dist.all_reduce(flat, op=dist.ReduceOp.SUM)
    offset = 0
    for t in tensors:
        t.copy_(flat[offset:offset + t.numel()].view_as(t))
        offset += t.numel()


class FixedGlobalBatch(_Semantics):
    """Every optimizer step takes the next ``batch`` samples of the stream whatever the world size:
    the model does not depend on the resizes (up to floating-point reassociation)."""

    def __init__(self, batch: int, micro_batch: Optional[int] = None) -> None:
        super().__init__(micro_batch)
        self.batch = _positive("batch", batch)

    def samples_per_step(self, world: Optional[int] = None) -> int:
        return self.batch


class FixedPerWorkerBatch(_Semantics):
    """Every rank takes ``batch`` samples per step: the global batch, and so the optimisation, changes
    with the world size; ``lr_rule(base_lr, world)`` sets the learning rate for each world."""

    def __init__(self, batch: int, micro_batch: Optional[int] = None, lr_rule: Optional[LrRule] = None) -> None:
        super().__init__(micro_batch)
        self.batch = _positive("batch", batch)
        self.lr_rule = lr_rule

    def samples_per_step(self, world: Optional[int] = None) -> int:
        return self.batch * (worker_world_size() if world is None else _positive("world", world))

    def learning_rate(self, base_lr: float, world: Optional[int] = None) -> float:
        if self.lr_rule is None:
            return base_lr
        return float(self.lr_rule(base_lr, worker_world_size() if world is None else world))
