"""The state an in-place grow sends to its newcomers: broadcast from the lowest rank that holds it,
the structure pickled and the tensors in buckets (:func:`broadcast_state`), and its size in bytes
(:func:`state_bytes`, what the manager charges a resize for)."""

from __future__ import annotations

import collections
import sys
from typing import Any, Dict, List, Tuple

# Tensors are broadcast in buckets of at most this many bytes (one tensor larger than it alone): few
# collectives, and a bounded extra copy on the sender.
_BUCKET_BYTES = 64 << 20


class _Slot:
    """Where the k-th broadcast tensor goes back into the state's structure."""

    def __init__(self, index: int) -> None:
        self.index = index


def broadcast_state(state: Any, src: int, device: Any, group: Any = None) -> Any:
    """``state`` (given on rank ``src``, None elsewhere) on every rank of ``group`` (default: the current
    process group; ``src`` is a global rank).

    The structure (dicts, lists, tuples and every non-tensor value) goes by one pickled broadcast,
    the tensors by ``dist.broadcast`` of flat buffers per dtype: the bytes cross the network once,
    without the two serialisations of ``torch.save`` and pickle that made the transfer 6 times a raw
    broadcast of the same bytes (bench/README.md, "Resize cost against the state's size"). The
    receivers' tensors are on ``device`` (the process group's); ``src`` gets its own object back."""
    import torch
    import torch.distributed as dist

    tensors: List[Any] = []
    header: List[Any] = [None]
    if dist.get_rank() == src:
        skeleton = _take_tensors(state, tensors, {})
        header = [(skeleton, [(tuple(t.shape), t.dtype) for t in tensors])]
    dist.broadcast_object_list(header, src=src, group=group, device=device)
    skeleton, shapes = header[0]
    sending = dist.get_rank() == src
    for bucket in _buckets(shapes):
        dtype = shapes[bucket[0]][1]
        sizes = [_numel(shapes[k][0]) for k in bucket]
        if sending:
            parts = [tensors[k].detach().reshape(-1).to(device) for k in bucket]
            flat = parts[0].contiguous() if len(parts) == 1 else torch.cat(parts)
        else:
            flat = torch.empty(sum(sizes), dtype=dtype, device=device)
        dist.broadcast(flat, src, group=group)
        if not sending:
            offset = 0
            for k, n in zip(bucket, sizes):
                tensors.append(flat[offset:offset + n].view(shapes[k][0]))
                offset += n
    if sending:
        return state
    return _put_tensors(skeleton, tensors)


def _numel(shape: Tuple[int, ...]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


def _buckets(shapes: List[Tuple[Tuple[int, ...], Any]]) -> List[List[int]]:
    """The tensors' indices in broadcast order, grouped by dtype into buckets of up to _BUCKET_BYTES."""
    out: List[List[int]] = []
    size = 0
    for k, (shape, dtype) in enumerate(shapes):
        nbytes = _numel(shape) * dtype.itemsize
        if out and shapes[out[-1][0]][1] == dtype and size + nbytes <= _BUCKET_BYTES:
            out[-1].append(k)
            size += nbytes
        else:
            out.append([k])
            size = nbytes
    return out


def _take_tensors(item: Any, tensors: List[Any], seen: Dict[int, int]) -> Any:
    """`item` with each tensor replaced by a _Slot into `tensors` (a tensor met twice, e.g. tied
    weights, is sent once). Values of other types stay, and are pickled with the structure."""
    torch = sys.modules["torch"]
    if isinstance(item, torch.Tensor):
        if id(item) not in seen:
            seen[id(item)] = len(tensors)
            tensors.append(item)
        return _Slot(seen[id(item)])
    if type(item) in (dict, collections.OrderedDict):
        return type(item)((key, _take_tensors(value, tensors, seen)) for key, value in item.items())
    if type(item) in (list, tuple):
        return type(item)(_take_tensors(value, tensors, seen) for value in item)
    return item


def _put_tensors(item: Any, tensors: List[Any]) -> Any:
    if isinstance(item, _Slot):
        return tensors[item.index]
    if type(item) in (dict, collections.OrderedDict):
        return type(item)((key, _put_tensors(value, tensors)) for key, value in item.items())
    if type(item) in (list, tuple):
        return type(item)(_put_tensors(value, tensors) for value in item)
    return item


def state_bytes(state: Any) -> int:
    """The bytes of the tensors in a state (nested dicts, lists and tuples; each storage once): what a
    resize moves, in place or through a checkpoint."""
    seen = set()
    total = 0
    pending = [state]
    while pending:
        item = pending.pop()
        if isinstance(item, dict):
            pending.extend(item.values())
        elif isinstance(item, (list, tuple)):
            pending.extend(item)
        elif hasattr(item, "untyped_storage"):
            storage = item.untyped_storage()
            key = (storage.data_ptr(), storage.device)
            if key not in seen:
                seen.add(key)
                total += storage.nbytes()
    return total
