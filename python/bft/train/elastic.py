"""The state object of an elastic training loop, in the style of Elastic Horovod's.

::

    state = bt.ElasticState(model=model, optimizer=optimizer, sampler=sampler, samples=0)
    while state.samples < bt.target_samples(default=100_000):
        ...one step with state.ddp_model...
        state.samples += batch * bt.world_size()
        bt.report(state.samples)
        if state.commit():                    # the world changed size: re-iterate the data
            batches = iter(loader)

The constructor sets up torch.distributed (CUDA and NCCL when a GPU is present, device
``cuda:LOCAL_RANK``; CPU and gloo otherwise) and restores the state: from a surviving peer, else from
the last checkpoint. :meth:`ElasticState.commit` is the step boundary: it agrees with every rank on
whether to stop (SIGTERM: checkpoint and exit, as :func:`bft.train.should_stop`) or to resize, and
checkpoints every ``checkpoint_every_s``.

Under ``bft manager --resize inplace`` the manager starts the script directly (no torchrun) and
writes each generation's configuration (its member nodes, in rank order) into the rendezvous store.
At a step boundary after a new configuration appears, the workers that stay leave their process
group and join the new generation's (a fresh store prefix), keeping their process, model and
optimizer; the workers that leave exit with :data:`EXIT_RESIZE`. A grow's newcomers first start
and announce themselves while the members train on; the manager publishes the generation that holds
them (the switch) only once all have, and they receive the state by broadcast from the lowest rank
that holds it (rank 0, a survivor). If a peer vanishes or the new
group does not form within ``BFT_INPLACE_TIMEOUT_S`` (default 30 s), every worker exits with
:data:`EXIT_INPLACE_FAILED` and the manager relaunches the job from its last checkpoint. The
membership itself (announcing, joining a generation, watching for the next one) is
:class:`bft.train.inplace.InPlaceMember`'s; what becomes of the state at a join is this object's.
Under plain ``python`` or ``torchrun`` the same object resumes from and writes checkpoints.
"""

from __future__ import annotations

import gc
import os
import sys
import time
from typing import Any, Dict, Optional

from . import _reporter, rendezvous
from . import protocol as p
from .inplace import InPlaceMember
from .placement import backend, device, node_major_rank
from .state_transfer import broadcast_state, state_bytes
from .store_link import open_store
from .worker import (
    EXIT_INPLACE_FAILED,
    checkpoint,
    exit_for_resize,
    exit_now,
    grace_s,
    install_handler,
    resume,
    stop_requested,
)


class ElasticState:
    """Model, optimizer, sampler and user fields (``state.samples``...) that survive resizes."""

    def __init__(self, model: Any = None, optimizer: Any = None, sampler: Any = None, *,
                 checkpoint_every_s: float = 5.0, **user: Any) -> None:
        import torch
        import torch.distributed as dist

        object.__setattr__(self, "_user", dict(user))
        self.model, self.optimizer, self.sampler = model, optimizer, sampler
        self.checkpoint_every_s = checkpoint_every_s
        self._dist = dist
        self._torch = torch
        install_handler()
        self.device = device()
        if self.device.type == "cuda":
            torch.cuda.set_device(self.device)
        self.backend = backend(self.device)
        self._ddp: Any = None
        self._ddp_used = False  # the script trains through ddp_model: rebuilt inside each join (_formed)
        self._last_save = time.monotonic()
        self._partial_stop_since: Optional[float] = None  # since when some ranks, not all, ask to stop
        self._size_reported = False  # the state's size goes to the manager after the first step
        self._launch_generation = int(os.environ.get(p.ENV_GENERATION, "0"))
        # Resized in place: this worker's membership of the job's generations (None otherwise).
        self._member: Optional[InPlaceMember] = None
        if os.environ.get(p.ENV_RESIZE) == p.RESIZE_INPLACE and p.ENV_STORE_ADDR in os.environ:
            member = self._member = InPlaceMember(self.backend, self._bound_device(), save=self.save)
            member.arm()
            os.environ.setdefault("LOCAL_RANK", "0")
            try:
                try:
                    member.connect()
                except rendezvous.RelayUnreachable as e:  # no keeper answered for the whole timeout
                    self._fail(e)
                ticket = os.environ.get(p.ENV_JOIN_TICKET)  # a newcomer of a grow: it waits for the switch
                generation = member.announce(ticket) if ticket else member.latest_generation()
                member.arm()
                member.join(generation)
                self._formed(has_state=False)
            except Exception as e:  # noqa: BLE001 - a peer or the store was lost while the group formed
                self._rejoin(e, has_state=False)
            member.disarm()
            return
        if "RANK" in os.environ and "MASTER_ADDR" in os.environ and not dist.is_initialized():  # torchrun
            dist.init_process_group(self.backend, device_id=self._bound_device())
        self._load(resume())

    # -- user fields: state.samples etc. --------------------------------------------------------

    def __getattr__(self, name: str) -> Any:
        user = self.__dict__.get("_user", {})
        if name in user:
            return user[name]
        raise AttributeError(name)

    def __setattr__(self, name: str, value: Any) -> None:
        if name in self.__dict__.get("_user", {}):
            self._user[name] = value
        else:
            object.__setattr__(self, name, value)

    @property
    def generation(self) -> int:
        """The job's generation this worker is in (resized in place), or the one it was started in."""
        return self._member.generation if self._member is not None else self._launch_generation

    @property
    def ddp_model(self) -> Any:
        """The model wrapped in DistributedDataParallel for the current world, or the model itself when
        training alone. Once a script has used it, each in-place join rebuilds it for the new group
        (_formed); only its very first construction runs in the script's step."""
        self._ddp_used = True
        if self._ddp is None:
            self._ddp = self._wrapped()
        return self._ddp

    def _wrapped(self) -> Any:
        dist = self._dist
        if not (dist.is_initialized() and dist.get_world_size() > 1):
            return self.model
        ids = [self.device] if self.device.type == "cuda" else None
        ddp = self._torch.nn.parallel.DistributedDataParallel(self.model, device_ids=ids)
        if self._member is not None:  # a peer lost mid-backward must not end this worker (the hook)
            ddp.register_comm_hook(dist.group.WORLD, _allreduce_or_zero)
        return ddp

    # -- the step boundary ----------------------------------------------------------------------

    def commit(self) -> bool:
        """Call once per step, after the step. Stops (checkpoint and exit) when the job is being
        stopped, resizes in place when the manager published a new generation (True: rank and world
        size changed, re-iterate the data), checkpoints every ``checkpoint_every_s``."""
        try:
            return self._boundary()
        finally:
            if self._member is not None:
                self._member.beat.waiting = False

    def _boundary(self) -> bool:
        torch, dist, member = self._torch, self._dist, self._member
        if not self._size_reported:
            # After a step, not at construction: an optimizer's state (momentum, Adam's moments) exists
            # only once it has stepped.
            _reporter.REPORTER.state_bytes = self.state_bytes
            self._size_reported = True
        stop = stop_requested.is_set()
        seen = self.generation
        now = time.monotonic()
        due = self.checkpoint_every_s >= 0 and now - self._last_save >= self.checkpoint_every_s
        if member is not None:
            member.beat.steps += 1
            member.beat.waiting = True  # (until the boundary is passed)
            member.arm()
        try:
            if member is not None:
                seen = member.poll(now)
            if dist.is_initialized() and dist.get_world_size() > 1:
                rank, world = dist.get_rank(), dist.get_world_size()
                # Each rank's stop request, the newest generation seen, whether a checkpoint is due (by
                # any rank's clock: a sharded checkpoint is a collective, every rank saves or none).
                flags = [0] * world + [seen, int(due)]
                flags[rank] = int(stop)
                agreed = torch.tensor(flags, dtype=torch.int64, device=self.device)
                dist.all_reduce(agreed, op=dist.ReduceOp.MAX)
                *stops, seen, due = agreed.tolist()
                stop = self._stop_agreed(sum(stops), world, now)
        except Exception as e:  # noqa: BLE001 - a peer vanished
            if member is not None:
                self._rejoin(e, has_state=True)
                member.disarm()
                return True
            stop = True  # under torchrun: stop, as should_stop() does
        if stop:
            self.save()
            exit_for_resize()
        if seen > self.generation:  # (in place only: torchrun's ranks all start in one generation)
            # The last step at the old size, sent before the group is torn down: the manager's resize gap
            # starts there, not at the report before it (up to a report interval earlier).
            _reporter.REPORTER.flush()
            try:
                self._ddp = None  # first: its reducer holds the old group
                gc.collect()
                dist.destroy_process_group()
                member.arm()
                member.join(seen)
                member.arm()
                self._formed(has_state=True)
            except Exception as e:  # noqa: BLE001 - a peer vanished or the new group did not form in time
                self._rejoin(e, has_state=True)
            member.disarm()
            return True
        if member is not None:
            member.disarm()
        if due:
            self.save()
        return False

    def _stop_agreed(self, stopping: int, world: int, now: float) -> bool:
        """Whether the job stops, when `stopping` of its `world` ranks were asked to. Under torchrun
        any one stops all (its agent stops the others anyway). In place, the manager stops a job by
        signalling every rank; a stop only some ranks got is their node being taken back (Slurm
        signals a preempted job's steps, often before the manager hears of it), which the manager
        answers with a generation without them: the others must not stop for it. Unless no answer
        comes within half the grace time: then all stop while there is time to save."""
        if not stopping or stopping == world or self._member is None:
            self._partial_stop_since = None
            return bool(stopping)
        if self._partial_stop_since is None:
            self._partial_stop_since = now
        return now - self._partial_stop_since >= grace_s() / 2

    @property
    def state_bytes(self) -> int:
        """The bytes of the state's tensors (model, optimizer, user fields): what a resize moves."""
        return state_bytes(self.state_dict())

    def save(self) -> None:
        """Checkpoints the state now (rank 0 writes)."""
        checkpoint(self.state_dict())
        self._last_save = time.monotonic()

    def state_dict(self) -> Dict[str, Any]:
        out: Dict[str, Any] = {"user": dict(self._user)}
        for name in ("model", "optimizer", "sampler"):
            part = getattr(self, name)
            if part is not None:
                out[name] = part.state_dict()
        return out

    def _load(self, state: Optional[Dict[str, Any]]) -> None:
        if not state:
            return
        for name in ("model", "optimizer", "sampler"):
            part = getattr(self, name)
            if part is not None and name in state:
                part.load_state_dict(state[name])
        self._user.update(state.get("user", {}))

    def _bound_device(self) -> Any:
        """The device NCCL binds its communicator to (formed at once); none for gloo."""
        return self.device if self.backend == "nccl" else None

    # -- in place: the state at a join (the membership itself: .inplace) ----------------------------

    def _formed(self, has_state: bool, lost_peer: bool = False) -> None:
        """The group of a generation has formed: the state is agreed (_sync), and the DistributedDataParallel
        wrapper a script trains through is rebuilt for the new group here, inside the guarded join, not
        lazily in the script's next step: its construction broadcasts the parameters, and a peer lost
        there must be a lost generation (rejoined) for the survivors, not an exception in their step."""
        self._sync(has_state, lost_peer)
        if self._ddp_used:
            self._ddp = self._wrapped()

    def _sync(self, has_state: bool, lost_peer: bool = False) -> None:
        """Newcomers get the state from the lowest rank that holds it; without one (a first start,
        a relaunch), every rank reads the last checkpoint. After a lost peer (`lost_peer` on any rank)
        every other rank takes it too: the survivors may have ended the torn step apart."""
        torch, dist = self._torch, self._dist
        rank, world = dist.get_rank(), dist.get_world_size()
        src = rank if has_state else world
        if world > 1:
            flags = torch.tensor([src, -int(lost_peer)], dtype=torch.int64, device=self.device)
            dist.all_reduce(flags, op=dist.ReduceOp.MIN)
            src, lost_peer = int(flags[0].item()), bool(flags[1].item())
        if src == world:
            self._load(resume())
            return
        if world == 1:
            return
        received = broadcast_state(self.state_dict() if rank == src else None, src, self.device)
        if not has_state or (lost_peer and rank != src):
            self._load(received)

    def _rejoin(self, error: BaseException, has_state: bool) -> None:
        """Generation G could not form or broke: a collective failed (a peer died, was killed, or hung
        and was killed) or the store was lost (the keeper died). A worker that holds the state of its
        last step keeps it: the manager publishes a generation without the lost peer (a shrink), or
        the same members in a new keeper's store, and this worker joins the first such generation
        after G, reconnecting to the store as needed, and resumes from its state (`has_state`) or
        receives it. Exits for a relaunch (_fail) if none forms within the timeout."""
        member = self._member
        failed = member.generation
        print(f"bft.train: generation {failed} was lost ({error}); waiting for the next one",
              file=sys.stderr, flush=True)
        self._ddp = None
        gc.collect()
        deadline = time.monotonic() + member.timeout_s
        while True:
            member.leave()
            member.arm()
            try:
                member.join(member.next_generation(failed, deadline))
                member.arm()
                self._formed(has_state=has_state, lost_peer=has_state)
                return
            except Exception as e:  # noqa: BLE001 - the next one broke too, or the store is gone
                if time.monotonic() > deadline:
                    self._fail(e, save=has_state)
                failed = max(failed, member.generation)  # one that broke while forming is not retried
                member.reopen(deadline)

    def _fail(self, error: BaseException, save: bool = False) -> None:
        """Ends this worker for a relaunch; one that holds the state of the step just done saves it
        first (rank 0 writes), so the relaunch loses nothing."""
        if save:
            try:
                self.save()
            except Exception:  # noqa: BLE001 - the last periodic checkpoint stays
                pass
        print(f"bft.train: in-place resize failed at generation {self.generation} ({error}); exiting for a "
              "relaunch from the last checkpoint", file=sys.stderr, flush=True)
        exit_now(EXIT_INPLACE_FAILED)

def _allreduce_or_zero(group, bucket):  # no annotations: DDP refuses a hook annotated other than GradBucket
    """DDP's gradient all-reduce (average over the group, as its default hook), except that a failed
    one (a peer lost mid-backward) leaves zero gradients instead of raising in the script: the step
    is then a step on no data, the step boundary that follows fails too, and the survivors re-form
    without the lost peer from their own state (ElasticState._rejoin). Never a partial sum."""
    import torch
    import torch.distributed as dist

    tensor = bucket.buffer()
    tensor.div_(dist.get_world_size(group))
    try:
        fut = dist.all_reduce(tensor, group=group, async_op=True).get_future()
    except Exception:  # noqa: BLE001 - the group is already broken
        done = torch.futures.Future()
        done.set_result(tensor.zero_())
        return done

    def reduced(f: Any) -> Any:
        try:
            return f.value()[0]
        except Exception:  # noqa: BLE001 - the peer is gone: no gradient this step
            return tensor.zero_()

    return fut.then(reduced)


__all__ = ["ElasticState", "broadcast_state", "device", "node_major_rank", "open_store", "state_bytes"]
