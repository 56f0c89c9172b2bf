"""An elastic data sampler: every sample of every epoch exactly once, whatever the resizes.

The job reads one endless *stream* of sample indices: epoch 0's shuffled permutation of
``range(size)``, then epoch 1's, and so on (each seeded by ``(seed, epoch)``, so every rank of every
generation computes the same stream without talking). The job's position in the stream is the
number of samples it has processed in all (the cumulative count a script reports with
``bt.report``). At each step a world of W ranks with batches of b takes the next ``W * b`` indices
of the stream, strided by rank (rank r takes positions ``p + r``, ``p + r + W``, ...). After a resize
the new world starts where the old one stopped, so across any sequence of world sizes each index
of an epoch is processed exactly once. An epoch's tail does not make a short step: the step that
reaches the end of an epoch fills up from the next epoch's permutation, so every rank takes full
batches on every step and data-parallel ranks keep equal step counts without padding.

::

    sampler = bt.ElasticSampler(len(dataset), seed=0)
    state = bt.resume()
    if state:
        sampler.load_state_dict(state["sampler"])
    loader = torch.utils.data.DataLoader(dataset, batch_size=b, sampler=sampler)
    for x, y in loader:                  # endless: the loop ends at the job's target
        ...one step...
        sampler.record(b * bt.world_size())
        bt.report(sampler.samples)
        if bt.should_stop():
            bt.checkpoint({"sampler": sampler.state_dict(), "model": model.state_dict()})
            bt.exit_for_resize()

The sampler imports nothing beyond the standard library: DataLoader takes any iterable of indices
as its ``sampler``, so ``import bft.train`` stays free of torch.
"""

from __future__ import annotations

import random
from typing import Any, Dict, Iterator, List, Mapping, Optional

from .worker import rank as worker_rank
from .worker import world_size as worker_world_size

__all__ = ["ElasticSampler"]


def _whole(name: str, value: Any, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{name}: expected a whole number, got {value!r}")
    if value < minimum:
        raise ValueError(f"{name}: {value} is below {minimum}")
    return value


class ElasticSampler:
    """This rank's indices of the job's sample stream, from the job's current position on.

    ``size`` is the dataset's length; ``samples`` the job's position (samples processed in all, by
    every rank together). ``rank`` and ``world_size`` default to ``bt.rank()`` and
    ``bt.world_size()``, read when an iteration starts: a new iteration (a new DataLoader iterator)
    re-partitions the rest of the stream over the world of that moment.
    """

    def __init__(self, size: int, *, seed: int = 0, shuffle: bool = True, samples: int = 0,
                 rank: Optional[int] = None, world_size: Optional[int] = None) -> None:
        self.size = _whole("size", size, 1)
        self.seed = _whole("seed", seed, -(2**63))
        self.shuffle = bool(shuffle)
        self.samples = _whole("samples", samples, 0)
        self.rank = rank
        self.world_size = world_size
        self._cached: Dict[int, List[int]] = {}

    @property
    def epoch(self) -> int:
        """The epoch of the next sample the job will process."""
        return self.samples // self.size

    def record(self, samples: int) -> None:
        """Advances the job's position by the samples of the step just done, summed over all ranks
        (``batch * world_size`` with equal batches). Every rank calls it with the same number."""
        self.samples += _whole("samples", samples, 0)

    def state_dict(self) -> Dict[str, Any]:
        """What a checkpoint needs to go on at any world size: the stream and the position in it."""
        return {"size": self.size, "seed": self.seed, "shuffle": self.shuffle, "samples": self.samples}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Goes on from a :meth:`state_dict`. A checkpoint of another dataset size is an error: its
        epochs would not cover this dataset."""
        for key in ("size", "seed", "shuffle", "samples"):
            if key not in state:
                raise ValueError(f"sampler state: missing field {key!r}")
        if state["size"] != self.size:
            raise ValueError(f"sampler state: size {state['size']!r} was checkpointed for a dataset "
                             f"of another length than this one ({self.size})")
        self.seed = _whole("sampler state: seed", state["seed"], -(2**63))
        self.shuffle = bool(state["shuffle"])
        self.samples = _whole("sampler state: samples", state["samples"], 0)
        self._cached.clear()

    def permutation(self, epoch: int) -> List[int]:
        """Epoch ``epoch``'s order of ``range(size)``: the same on every rank and in every process."""
        order = self._cached.get(epoch)
        if order is None:
            order = list(range(self.size))
            if self.shuffle:
                # A str seed is hashed with SHA-512: stable across processes and Python versions.
                random.Random(f"bft.ElasticSampler:{self.seed}:{epoch}").shuffle(order)
            self._cached = {epoch: order}  # one epoch at a time: a large dataset's order is big
        return order

    def indices(self, begin: int, end: int) -> List[int]:
        """The stream's indices at positions ``begin`` (inclusive) to ``end`` (exclusive). For loops
        that cut a global step themselves, e.g. ranks with batches of different sizes: the step takes
        ``indices(samples, samples + sum(sizes))`` and rank r its own slice of it."""
        _whole("begin", begin, 0)
        _whole("end", end, begin)
        out: List[int] = []
        while begin < end:
            epoch, offset = divmod(begin, self.size)
            take = min(end - begin, self.size - offset)
            out.extend(self.permutation(epoch)[offset:offset + take])
            begin += take
        return out

    def __iter__(self) -> Iterator[int]:
        world = _whole("world_size", worker_world_size() if self.world_size is None else self.world_size, 1)
        rank = worker_rank() if self.rank is None else self.rank
        if isinstance(rank, bool) or not isinstance(rank, int) or not 0 <= rank < world:
            raise ValueError(f"rank: {rank!r} is outside 0..{world - 1} (world_size {world})")
        return self._stream(self.samples + rank, world)

    def _stream(self, position: int, stride: int) -> Iterator[int]:
        while True:
            epoch, offset = divmod(position, self.size)
            order = self.permutation(epoch)
            yield from order[offset::stride]
            # The first position of this progression in the next epoch.
            position += -(-(self.size - offset) // stride) * stride
