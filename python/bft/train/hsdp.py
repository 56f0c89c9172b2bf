"""A model sharded inside a node and replicated across nodes (HSDP) that resizes in place by whole replicas.

::

    def build(mesh):                          # the model and optimizer on a (replicate, shard) mesh
        model = Net().to(bt.device())
        for layer in model.layers:
            fully_shard(layer, mesh=mesh)
        fully_shard(model, mesh=mesh)
        return model, torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)

    state = bt.HSDPState(build, sampler=sampler, steps=0)
    while sampler.samples < bt.target_samples(default=100_000):
        ...one step with state.model and state.optimizer...
        if state.commit():                    # resized: state.model and state.optimizer are new objects
            ...

The mesh is 2-D: dimension 0 (``replicate``) the nodes, dimension 1 (``shard``) a node's
``LOCAL_WORLD_SIZE`` processes, ranks node-major (rank = node * N + local rank). FSDP2 shards each
parameter and its optimizer state over a node's processes and all-reduces the gradients across nodes.

Local rank k of every node holds the same shard k, so a resize by whole nodes moves no shard between
local ranks: at an in-place resize every worker rebuilds the model and optimizer on the new
generation's mesh (``build``; FSDP2 binds its process groups when it shards) and loads its shard
into them. A survivor keeps the shard it held; a newcomer node's local rank k receives shard k from
local rank k of the lowest surviving node, in a process group of those ranks only, so a node's N
transfers run side by side, each 1/N of the state. A shrink drops whole replicas and moves nothing.
The replicated rest (the sampler, the user fields) comes from the surviving node's rank by broadcast.

Checkpoints are ``torch.distributed.checkpoint`` (DCP) directories, each rank writing its shards,
named by a pointer file that rank 0 writes last (``bt.checkpoint``, atomic); a relaunch loads them
into whatever mesh it has, resharding to another number of processes per node or of nodes. A failed
in-place resize relaunches from the last periodic checkpoint: a sharded checkpoint needs every rank.
"""

from __future__ import annotations

import gc
import os
import shutil
import socket
import sys
import time
import uuid
from typing import Any, Callable, Dict, List, Optional, Tuple

from .elastic import ElasticState, broadcast_state, state_bytes
from .worker import checkpoint, checkpoint_path, rank, resume

REPLICATE, SHARD = "replicate", "shard"  # the mesh's dimension names
# A DTensor taken apart for a transfer: its local shard, and what rebuilds it on another mesh.
_LOCAL, _SHAPE, _STRIDE, _PLACEMENTS = "_hsdp_local", "_hsdp_shape", "_hsdp_stride", "_hsdp_placements"

Build = Callable[[Any], Tuple[Any, Any]]  # mesh -> (model, optimizer)


def procs_per_node() -> int:
    """The processes of this node (LOCAL_WORLD_SIZE, as torchrun and the in-place method set it; 1 alone)."""
    return max(1, int(os.environ.get("LOCAL_WORLD_SIZE", "1")))


def hsdp_mesh(device: Any) -> Any:
    """The (replicate, shard) DeviceMesh of the current process group: nodes by their processes."""
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh

    world, per_node = dist.get_world_size(), procs_per_node()
    if world % per_node:
        raise ValueError(f"LOCAL_WORLD_SIZE={per_node} does not divide WORLD_SIZE={world}: "
                         "HSDP needs as many processes on every node")
    return init_device_mesh(device.type, (world // per_node, per_node), mesh_dim_names=(REPLICATE, SHARD))


def local_shards(state: Any) -> Any:
    """`state` (a model's or optimizer's state dict) with each DTensor replaced by its local shard and
    what places it on a mesh again: plain tensors and nested containers, what broadcast_state moves."""
    from torch.distributed.tensor import DTensor

    if isinstance(state, DTensor):
        return {_LOCAL: state.to_local(), _SHAPE: tuple(state.shape), _STRIDE: tuple(state.stride()),
                _PLACEMENTS: tuple(state.placements)}
    if isinstance(state, dict):
        return type(state)((key, local_shards(value)) for key, value in state.items())
    if isinstance(state, (list, tuple)):
        return type(state)(local_shards(value) for value in state)
    return state


def on_mesh(state: Any, mesh: Any, device: Any) -> Any:
    """The inverse of :func:`local_shards`: each local shard a DTensor on `mesh` again (no
    communication: every rank holds its own shard)."""
    import torch
    from torch.distributed.tensor import DTensor

    if isinstance(state, dict) and _LOCAL in state:
        return DTensor.from_local(state[_LOCAL].to(device), mesh, state[_PLACEMENTS], run_check=False,
                                  shape=torch.Size(state[_SHAPE]), stride=state[_STRIDE])
    if isinstance(state, dict):
        return type(state)((key, on_mesh(value, mesh, device)) for key, value in state.items())
    if isinstance(state, (list, tuple)):
        return type(state)(on_mesh(value, mesh, device) for value in state)
    return state


def transfer_shards(local: Optional[Dict[str, Any]], source: int, newcomers: List[int], device: Any) -> Any:
    """Shard k from local rank k of node `source` to local rank k of each node in `newcomers`, all k
    at once: one process group per local rank, so a node's N transfers go side by side, each 1/N of
    the state. `local` is this rank's shards (:func:`local_shards`) on the source node; returns what
    this rank holds after (received on a newcomer, its own elsewhere). Every rank of the current
    process group calls it (each creates every group)."""
    import torch.distributed as dist

    me, per_node = dist.get_rank(), procs_per_node()
    node, k = divmod(me, per_node)
    groups = [dist.new_group([source * per_node + j] + [n * per_node + j for n in newcomers]) for j in range(per_node)]
    try:
        if node in newcomers or node == source:
            start = time.monotonic()
            local = broadcast_state(local if node == source else None, source * per_node + k, device, group=groups[k])
            if k == 0 and node == source:
                print(f"bft.train.hsdp: shard transfer to {len(newcomers)} node(s), {per_node} side by side: "
                      f"{state_bytes(local) / 1e6:.1f} MB each in {time.monotonic() - start:.3f} s",
                      file=sys.stderr, flush=True)
    finally:
        for group in groups:
            dist.destroy_process_group(group)
    return local


class HSDPState(ElasticState):
    """An :class:`ElasticState` whose model and optimizer ``build(mesh)`` makes on the job's
    (replicate, shard) mesh, and makes again after each in-place resize: read ``state.model`` and
    ``state.optimizer`` after :meth:`commit` returns True, not references kept from before."""

    def __init__(self, build: Build, sampler: Any = None, *, checkpoint_every_s: float = 5.0, **user: Any) -> None:
        object.__setattr__(self, "_build", build)
        object.__setattr__(self, "mesh", None)
        super().__init__(model=None, optimizer=None, sampler=sampler, checkpoint_every_s=checkpoint_every_s, **user)

    @property
    def ddp_model(self) -> Any:
        """The model itself: FSDP2 reduces the gradients (reduce-scatter in a node, all-reduce across)."""
        return self.model

    @property
    def state_bytes(self) -> int:
        """The bytes of this rank's shards and the replicated fields: what one of a node's N side-by-side
        transfers moves at an in-place resize."""
        return state_bytes(self._local_state())

    def _local_state(self) -> Dict[str, Any]:
        return local_shards({"model": self.model.state_dict(), "optimizer": self.optimizer.state_dict()})

    def _replicated(self) -> Dict[str, Any]:
        return {"user": dict(self._user), "sampler": self.sampler.state_dict() if self.sampler is not None else None}

    def _set_replicated(self, fields: Dict[str, Any]) -> None:
        self._user.update(fields["user"])
        if self.sampler is not None and fields["sampler"] is not None:
            self.sampler.load_state_dict(fields["sampler"])

    def _rebuild(self) -> None:
        """The model and optimizer on this generation's mesh, freshly built (their old process groups
        are gone with the old generation)."""
        self.model = self.optimizer = None
        gc.collect()
        self.mesh = hsdp_mesh(self.device)
        self.model, self.optimizer = self._build(self.mesh)

    def _load_local(self, local: Dict[str, Any]) -> None:
        placed = on_mesh(local, self.mesh, self.device)
        self.model.load_state_dict(placed["model"])
        self.optimizer.load_state_dict(placed["optimizer"])

    def _sync(self, has_state: bool, lost_peer: bool = False) -> None:
        """Every rank rebuilds on the new mesh; survivors reload their own shards, each newcomer node's
        local rank k receives shard k from local rank k of the lowest node that holds the state (a
        process group per local rank: the N transfers go side by side); without a holder (a first
        start, a relaunch) every rank reads the last checkpoint. After a lost peer (`lost_peer` on any
        rank) every other node receives the lowest holder's too: the replicas may have ended the torn
        step apart."""
        torch, dist = self._torch, self._dist
        me, world, per_node = dist.get_rank(), dist.get_world_size(), procs_per_node()
        held = torch.zeros(world + 1, dtype=torch.int64, device=self.device)
        held[me] = int(has_state)
        held[world] = int(lost_peer)
        if world > 1:
            dist.all_reduce(held)  # each rank fills its own slot; the last counts the ranks that lost a peer
        *flags, lost = held.tolist()
        holding = [all(flags[node * per_node:(node + 1) * per_node]) for node in range(world // per_node)]
        local = self._local_state() if has_state else None  # before the rebuild drops the old model
        self._rebuild()
        if not any(holding):
            self._load(resume())
            return
        source = holding.index(True)
        newcomers = [node for node, held_all in enumerate(holding) if not held_all or (lost and node != source)]
        if newcomers:
            fields = broadcast_state(self._replicated() if me == source * per_node else None, source * per_node,
                                     self.device)
            local = transfer_shards(local, source, newcomers, self.device)
            self._set_replicated(fields)
        self._load_local(local)

    def _load(self, pointer: Optional[Dict[str, Any]]) -> None:
        """The model built on this world's mesh (a group of one for a plain ``python`` run), then
        filled from the DCP checkpoint `pointer` names, resharded to this mesh."""
        dist = self._dist
        if self.model is None:
            if not dist.is_initialized():
                _group_of_one(self.backend, self._bound_device())
            self._rebuild()
        if not pointer:
            return
        import torch.distributed.checkpoint as dcp
        from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

        model_state, optimizer_state = get_state_dict(self.model, self.optimizer)  # this mesh's shards, to fill
        state = {"model": model_state, "optimizer": optimizer_state}
        dcp.load(state, checkpoint_id=str(checkpoint_path().parent / pointer["dcp"]))
        set_state_dict(self.model, self.optimizer, model_state_dict=state["model"],
                       optim_state_dict=state["optimizer"])
        self._set_replicated(pointer)

    def save(self) -> None:
        """A DCP checkpoint (every rank writes its shards), then the pointer to it (rank 0, atomic). A
        collective: every rank calls it at the same step (commit agrees on it). Between generations,
        without a process group, nothing is written: the last checkpoint stays."""
        dist = self._dist
        if not dist.is_initialized():
            return
        import torch.distributed.checkpoint as dcp
        from torch.distributed.checkpoint.state_dict import get_state_dict

        name = [f"dcp-{uuid.uuid4().hex[:12]}"]
        dist.broadcast_object_list(name, src=0, device=self.device)
        directory = checkpoint_path().parent
        model_state, optimizer_state = get_state_dict(self.model, self.optimizer)
        dcp.save({"model": model_state, "optimizer": optimizer_state}, checkpoint_id=str(directory / name[0]))
        dist.barrier()  # every rank's shards are written before the pointer names them
        checkpoint({"dcp": name[0], **self._replicated()})
        if rank() == 0:
            for old in directory.glob("dcp-*"):
                if old.name != name[0]:
                    shutil.rmtree(old, ignore_errors=True)
        self._last_save = time.monotonic()

    def _fail(self, error: BaseException, save: bool = False) -> None:
        """As ElasticState's, without the last save: a sharded checkpoint needs every rank, and a
        peer is gone. The relaunch resumes from the last periodic checkpoint."""
        super()._fail(error, save=False)


def _group_of_one(backend: str, device_id: Any) -> None:
    """A process group of this process alone, for a plain ``python`` run (FSDP2 needs a group)."""
    import torch.distributed as dist

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    os.environ.update(RANK="0", WORLD_SIZE="1", LOCAL_RANK="0", LOCAL_WORLD_SIZE="1", MASTER_ADDR="127.0.0.1",
                      MASTER_PORT=str(port))
    dist.init_process_group(backend, device_id=device_id)


__all__ = ["HSDPState", "hsdp_mesh", "local_shards", "on_mesh", "procs_per_node", "transfer_shards"]
