"""Where a training process sits: which of its node's processes it is, its rank in a generation
(node-major), its device and its process-group backend."""

from __future__ import annotations

import os
from typing import Any, List, Tuple

from . import protocol as p


def local_rank() -> int:
    """Which of its node's processes this one is (LOCAL_RANK: the manager's or torchrun's; 0 alone)."""
    return int(os.environ.get("LOCAL_RANK", "0"))


def node_major_rank(nodes: List[str], node: str, local_rank: int, procs_per_node: int) -> Tuple[int, int]:
    """(rank, world size) of process `local_rank` of `node` in a generation of `nodes` (rank order,
    survivors first) with `procs_per_node` processes each: node i holds ranks i*N .. i*N+N-1."""
    if not 0 <= local_rank < procs_per_node:
        raise ValueError(f"LOCAL_RANK {local_rank} is outside 0..{procs_per_node - 1} (the job's processes per node)")
    return nodes.index(node) * procs_per_node + local_rank, len(nodes) * procs_per_node


def device() -> Any:
    """This worker's device: ``cuda:LOCAL_RANK`` when a GPU is present (a node's N processes bind its
    devices 0..N-1), else the CPU."""
    import torch

    if torch.cuda.is_available():
        return torch.device(f"cuda:{local_rank()}")
    return torch.device("cpu")


def backend(device: Any) -> str:
    """The process-group backend for `device`: NCCL on CUDA, gloo on the CPU, unless BFT_DIST_BACKEND
    names one (gloo on CUDA: where ranks share a GPU, which NCCL refuses; gloo carries CUDA tensors
    through host memory)."""
    chosen = os.environ.get(p.ENV_DIST_BACKEND, "").strip().lower()
    if not chosen:
        return "nccl" if device.type == "cuda" else "gloo"
    if chosen not in ("gloo", "nccl") or (chosen == "nccl" and device.type != "cuda"):
        raise ValueError(f"{p.ENV_DIST_BACKEND}={chosen!r}: expected gloo, or nccl on a CUDA device "
                         f"(this worker's device: {device})")
    return chosen
