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
:data:`EXIT_INPLACE_FAILED` and the manager relaunches the job from its last checkpoint.
Under plain ``python`` or ``torchrun`` the same object resumes from and writes checkpoints.
"""

from __future__ import annotations

import datetime
import faulthandler
import gc
import json
import os
import sys
import threading
import time
from typing import Any, Dict, List, Optional, Tuple

from . import _reporter, rendezvous
from . import protocol as p
from .placement import backend, device, local_rank, node_major_rank
from .state_transfer import broadcast_state, state_bytes
from .store_link import Heartbeat, inplace_timeout_s, open_store
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

# Seconds between two looks at the store's current generation (a lookup is a round trip to the
# store; the step-boundary all-reduce then makes every rank act on the same step).
POLL_S = 0.1

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
        self._last_save = time.monotonic()
        self._next_poll = 0.0
        self._partial_stop_since: Optional[float] = None  # since when some ranks, not all, ask to stop
        self._size_reported = False  # the state's size goes to the manager after the first step
        self._inplace = os.environ.get(p.ENV_RESIZE) == p.RESIZE_INPLACE and p.ENV_STORE_ADDR in os.environ
        self._timeout_s = inplace_timeout_s()
        self.generation = int(os.environ.get(p.ENV_GENERATION, "0"))
        self._store = None
        self._nodes: List[str] = []  # the current generation's members, in rank order
        self._beat: Optional[Heartbeat] = None
        self._reconnecting: Optional[threading.Thread] = None
        if self._inplace:
            self._beat = Heartbeat(os.environ.get(p.ENV_NODE, ""), local_rank())
            self._arm()
            os.environ.setdefault("LOCAL_RANK", "0")
            try:
                try:
                    self._store = open_store(self._timeout_s)
                except rendezvous.RelayUnreachable as e:  # no keeper answered for the whole timeout
                    self._fail(e)
                ticket = os.environ.get(p.ENV_JOIN_TICKET)  # a newcomer of a grow: it waits for the switch
                generation = self._announce(ticket) if ticket else self._latest_generation()
                self._arm()
                self._join(generation)
                self._sync(has_state=False)
            except Exception as e:  # noqa: BLE001 - a peer or the store was lost while the group formed
                self._rejoin(e, has_state=False)
            faulthandler.cancel_dump_traceback_later()
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
    def _job(self) -> str:
        return os.environ.get(p.ENV_JOB_ID, "")

    @property
    def ddp_model(self) -> Any:
        """The model wrapped in DistributedDataParallel for the current world (rebuilt after each
        resize), or the model itself when training alone."""
        if self._ddp is None:
            dist = self._dist
            if dist.is_initialized() and dist.get_world_size() > 1:
                ids = [self.device] if self.device.type == "cuda" else None
                self._ddp = self._torch.nn.parallel.DistributedDataParallel(self.model, device_ids=ids)
                if self._inplace:  # a peer lost mid-backward must not end this worker (see _allreduce_or_zero)
                    self._ddp.register_comm_hook(dist.group.WORLD, _allreduce_or_zero)
            else:
                self._ddp = self.model
        return self._ddp

    # -- the step boundary ----------------------------------------------------------------------

    def commit(self) -> bool:
        """Call once per step, after the step. Stops (checkpoint and exit) when the job is being
        stopped, resizes in place when the manager published a new generation (True: rank and world
        size changed, re-iterate the data), checkpoints every ``checkpoint_every_s``."""
        try:
            return self._boundary()
        finally:
            if self._beat is not None:
                self._beat.waiting = False

    def _boundary(self) -> bool:
        torch, dist = self._torch, self._dist
        if not self._size_reported:
            # After a step, not at construction: an optimizer's state (momentum, Adam's moments) exists
            # only once it has stepped.
            _reporter.REPORTER.state_bytes = self.state_bytes
            self._size_reported = True
        stop = stop_requested.is_set()
        seen = self.generation
        now = time.monotonic()
        due = self.checkpoint_every_s >= 0 and now - self._last_save >= self.checkpoint_every_s
        if self._beat is not None:
            self._beat.steps += 1
            self._beat.waiting = True  # (until the boundary is passed)
        if self._inplace:
            self._arm()
        try:
            if self._store is not None and now >= self._next_poll:
                self._next_poll = now + POLL_S
                seen = self._poll_generation()
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
            if self._inplace:
                self._rejoin(e, has_state=True)
                faulthandler.cancel_dump_traceback_later()
                return True
            stop = True  # under torchrun: stop, as should_stop() does
        if stop:
            self.save()
            exit_for_resize()
        if seen > self.generation:
            # The last step at the old size, sent before the group is torn down: the manager's resize gap
            # starts there, not at the report before it (up to a report interval earlier).
            _reporter.REPORTER.flush()
            try:
                self._ddp = None  # first: its reducer holds the old group
                gc.collect()
                dist.destroy_process_group()
                self._arm()
                self._join(seen)
                self._arm()
                self._sync(has_state=True)
            except Exception as e:  # noqa: BLE001 - a peer vanished or the new group did not form in time
                self._rejoin(e, has_state=True)
            faulthandler.cancel_dump_traceback_later()
            return True
        if self._inplace:
            faulthandler.cancel_dump_traceback_later()
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
        if not stopping or stopping == world or not self._inplace:
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

    # -- in place -------------------------------------------------------------------------------

    def _join(self, generation: int) -> None:
        """Joins the process group of `generation` or of a newer one published meanwhile, or exits if
        this node is not a member of it. Ranks are node-major: the node at position i of the
        configuration holds ranks i*N .. i*N+N-1 (N processes per node, this one LOCAL_RANK of them),
        so a node's processes are neighbours and the survivors, listed first, keep the lowest ranks."""
        dist = self._dist
        generation, nodes, per_node = self._await_members(generation)
        rank, world = node_major_rank(nodes, os.environ.get(p.ENV_NODE, ""), local_rank(), per_node)
        os.environ.update(RANK=str(rank), WORLD_SIZE=str(world), LOCAL_WORLD_SIZE=str(per_node))
        store = dist.PrefixStore(p.group_prefix(self._job, generation), self._store)
        dist.init_process_group(self.backend, store=store, rank=rank, world_size=world,
                                timeout=datetime.timedelta(seconds=self._timeout_s),
                                device_id=self._bound_device())
        _reporter.REPORTER.reconfigure(generation, rank, world)

    def _configuration(self, generation: int) -> Tuple[List[str], int]:
        """A published generation's member nodes (rank order) and processes per node."""
        config = json.loads(self._store.get(p.config_key(self._job, generation)).decode())
        return config["nodes"], int(config.get("procs_per_node", 1))

    def _latest_generation(self) -> int:
        """The newest published generation. The manager publishes a grow's switch only once every
        newcomer has announced itself, so the members never wait for one that is still starting
        (Python, torch, the model: seconds): they train on meanwhile."""
        return int(self._store.get(p.generation_key(self._job)).decode())

    def _announce(self, ticket: str) -> int:
        """A newcomer of an in-place grow: announces itself with its ticket, then waits, outside any
        group, for the manager's switch (the first generation that holds this node); the members train
        on meanwhile. A store that stops answering (the keeper lost) is reconnected to and announced in
        again. Raises TimeoutError after BFT_INPLACE_TIMEOUT_S (the manager dismisses it before)."""
        job, node = self._job, os.environ.get(p.ENV_NODE, "")
        deadline = time.monotonic() + self._timeout_s
        announced = False
        if self._beat is not None:
            self._beat.waiting = True
        while True:
            try:
                if not announced:
                    self._store.set(p.newcomer_key(job, node, local_rank()), ticket)
                    announced = True
                latest = self._latest_generation()
                if node in self._configuration(latest)[0]:
                    return latest
            except Exception:  # noqa: BLE001 - the store is gone: a new keeper's, announced in again
                announced = False
                try:
                    self._store = open_store(self._timeout_s)
                except Exception:  # noqa: BLE001 - not back yet
                    time.sleep(0.2)
            if stop_requested.is_set():  # its node taken back before it joined: nothing to save
                exit_for_resize()
            if time.monotonic() > deadline:
                raise TimeoutError(f"no generation with {node} within {self._timeout_s:g} s of its announcement")
            time.sleep(0.01)

    def _await_members(self, generation: int) -> Tuple[int, List[str], int]:
        """Waits until every process of every member of the generation has arrived, so that the process
        group forms at once; moves on to a newer generation if the manager publishes one meanwhile (a
        member that will never come: a reclaimed newcomer). Raises TimeoutError after
        BFT_INPLACE_TIMEOUT_S. Returns the generation, its nodes and its processes per node."""
        store, job, node = self._store, self._job, os.environ.get(p.ENV_NODE, "")
        deadline = time.monotonic() + self._timeout_s
        while True:
            nodes, per_node = self._configuration(generation)
            self.generation = generation
            if node not in nodes:
                exit_for_resize()  # this node leaves the job
            store.set(p.arrived_key(job, generation, node, local_rank()), "1")
            keys = [p.arrived_key(job, generation, n, k) for n in nodes for k in range(per_node)]
            while True:
                if store.check(keys):  # (formed even if a newer one exists: the next step boundary moves on)
                    self._nodes = nodes
                    return generation, nodes, per_node
                latest = int(store.get(p.generation_key(job)).decode())
                if latest > generation:
                    generation = latest
                    break
                if stop_requested.is_set():  # stopped while waiting (SIGTERM): no need to wait on
                    if self._nodes:  # a survivor: it holds the state of its last step
                        self.save()
                    exit_for_resize()
                if time.monotonic() > deadline:
                    missing = sorted({n for n in nodes for k in range(per_node)
                                      if not store.check([p.arrived_key(job, generation, n, k)])})
                    raise TimeoutError(f"{', '.join(missing)} did not join within {self._timeout_s:g} s")
                time.sleep(0.01)

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
        dist = self._dist
        failed = self.generation
        print(f"bft.train: generation {failed} was lost ({error}); waiting for the next one",
              file=sys.stderr, flush=True)
        self._ddp = None
        gc.collect()
        deadline = time.monotonic() + self._timeout_s
        while True:
            try:
                if dist.is_initialized():
                    dist.destroy_process_group()
            except Exception:  # noqa: BLE001 - its peer is gone: nothing left to tear down cleanly
                pass
            self._arm()
            try:
                self._join(self._next_generation(failed, deadline))
                self._arm()
                self._sync(has_state=has_state, lost_peer=has_state)
                return
            except Exception as e:  # noqa: BLE001 - the next one broke too, or the store is gone
                if time.monotonic() > deadline:
                    self._fail(e, save=has_state)
                failed = max(failed, self.generation)  # one that broke while forming is not retried
                try:
                    # It may be the store that was lost; a keeper that answers no sooner is none.
                    self._store = open_store(self._timeout_s, max(deadline - time.monotonic(), 0.01))
                except Exception:  # noqa: BLE001 - not back yet: tried again
                    time.sleep(0.2)

    def _next_generation(self, after: int, deadline: float) -> int:
        """The generation to re-form in after generation `after` failed: the newest one published since
        (the one that drops the lost peer, or a newer one: every newcomer of a published generation has
        announced itself, so none holds the survivors up). TimeoutError after the deadline; a stop
        asked meanwhile (SIGTERM) saves the state and exits."""
        while True:
            latest = self._latest_generation()
            if latest > after:
                return latest
            if stop_requested.is_set():
                if self._nodes:
                    self.save()
                exit_for_resize()
            if time.monotonic() > deadline:
                raise TimeoutError(f"no generation after {after} within {self._timeout_s:g} s")
            time.sleep(0.02)

    def _poll_generation(self) -> int:
        """_latest_generation, except that a store that stopped answering (the keeper died) is not this
        worker's failure: its group, formed, needs no store. It trains on and reconnects in the
        background; the manager re-forms the job in the new keeper's store."""
        if self._reconnecting is not None:
            if self._reconnecting.is_alive():
                return self.generation
            self._reconnecting = None
        try:
            return self._latest_generation()
        except Exception:  # noqa: BLE001 - the store is gone
            self._reconnecting = threading.Thread(target=self._reconnect, name="bft-reconnect", daemon=True)
            self._reconnecting.start()
            return self.generation

    def _reconnect(self) -> None:
        while True:
            try:
                self._store = open_store(self._timeout_s)
                return
            except Exception:  # noqa: BLE001 - not back yet
                time.sleep(0.5)

    def _arm(self) -> None:
        """The next distributed phase (the step-boundary check, joining, the state's broadcast) must
        end within the timeout plus a margin over the timeouts torch applies itself; else the stacks
        are dumped and the worker exits (status 1): never a hung job. faulthandler's watchdog is a C
        thread: it works even when a call stuck in torch holds the GIL."""
        faulthandler.dump_traceback_later(self._timeout_s + 10.0, exit=True)

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
