"""An in-place worker's membership of its job's generations (``bft manager --resize inplace``): the
protocol :class:`~.elastic.ElasticState` follows to stay in its job across resizes, keeping its process.

The manager publishes each generation's configuration (its member nodes in rank order, the processes
per node) in the keeper's store, and the newest generation's number beside it. A worker, through an
:class:`InPlaceMember`:

- if it is a grow's newcomer (it holds a join ticket), announces itself and waits outside any group for
  the first generation that holds its node (:meth:`~InPlaceMember.announce`);
- joins a generation: marks its arrival, waits for every process of every member, and forms the
  generation's process group at its node-major rank (:meth:`~InPlaceMember.join`); a process whose
  node is not a member exits with EXIT_RESIZE;
- looks for a newer generation at each step boundary without failing when the store stops answering
  (:meth:`~InPlaceMember.poll`), and after a lost generation waits for the next one
  (:meth:`~InPlaceMember.next_generation`), reconnecting to a new keeper's store
  (:meth:`~InPlaceMember.reopen`).

Every wait is bounded by BFT_INPLACE_TIMEOUT_S, and every distributed phase by a watchdog
(:meth:`~InPlaceMember.arm`). What becomes of the training state at a join (kept, sent, received,
saved, or the worker ended for a relaunch) is the state's to decide: ElasticState's ``_sync``,
``_rejoin`` and ``_fail``.
"""

from __future__ import annotations

import datetime
import faulthandler
import json
import os
import threading
import time
from typing import Any, Callable, List, Optional, Tuple

from . import _reporter
from . import protocol as p
from .placement import local_rank, node_major_rank
from .store_link import Heartbeat, inplace_timeout_s, open_store
from .worker import exit_for_resize, stop_requested

# Seconds between two looks at the store's current generation (a lookup is a round trip to the
# store; the step-boundary all-reduce then makes every rank act on the same step).
POLL_S = 0.1


class InPlaceMember:
    """This worker's place in its job's generations: the store's connection, the generation it is in
    (or forming), that generation's member nodes, and its heartbeat. `backend` and `device_id` form
    each generation's process group; `save` checkpoints the state (a survivor asked to stop while it
    waits between generations saves before it exits)."""

    def __init__(self, backend: str, device_id: Any, save: Callable[[], None]) -> None:
        import torch.distributed as dist

        self._dist = dist
        self.backend, self.device_id = backend, device_id
        self._save = save
        self.timeout_s = inplace_timeout_s()
        self.generation = int(os.environ.get(p.ENV_GENERATION, "0"))
        self.store: Any = None
        self.nodes: List[str] = []  # the current generation's members, in rank order
        self.beat = Heartbeat(os.environ.get(p.ENV_NODE, ""), local_rank())
        self._next_poll = 0.0
        self._reconnecting: Optional[threading.Thread] = None

    @property
    def job(self) -> str:
        return os.environ.get(p.ENV_JOB_ID, "")

    def connect(self) -> None:
        """Opens the connection to the store (rendezvous.RelayUnreachable if no keeper answers)."""
        self.store = open_store(self.timeout_s)

    def join(self, generation: int) -> None:
        """Joins the process group of `generation` or of a newer one published meanwhile, or exits if
        this node is not a member of it. Ranks are node-major: the node at position i of the
        configuration holds ranks i*N .. i*N+N-1 (N processes per node, this one LOCAL_RANK of them),
        so a node's processes are neighbours and the survivors, listed first, keep the lowest ranks."""
        dist = self._dist
        generation, nodes, per_node = self._await_members(generation)
        rank, world = node_major_rank(nodes, os.environ.get(p.ENV_NODE, ""), local_rank(), per_node)
        os.environ.update(RANK=str(rank), WORLD_SIZE=str(world), LOCAL_WORLD_SIZE=str(per_node))
        store = dist.PrefixStore(p.group_prefix(self.job, generation), self.store)
        dist.init_process_group(self.backend, store=store, rank=rank, world_size=world,
                                timeout=datetime.timedelta(seconds=self.timeout_s),
                                device_id=self.device_id)
        _reporter.REPORTER.reconfigure(generation, rank, world)

    def leave(self) -> None:
        """Tears down this worker's process group, if it has one."""
        try:
            if self._dist.is_initialized():
                self._dist.destroy_process_group()
        except Exception:  # noqa: BLE001 - its peer is gone: nothing left to tear down cleanly
            pass

    def configuration(self, generation: int) -> Tuple[List[str], int]:
        """A published generation's member nodes (rank order) and processes per node."""
        config = json.loads(self.store.get(p.config_key(self.job, generation)).decode())
        return config["nodes"], int(config.get("procs_per_node", 1))

    def latest_generation(self) -> int:
        """The newest published generation. The manager publishes a grow's switch only once every
        newcomer has announced itself, so the members never wait for one that is still starting
        (Python, torch, the model: seconds): they train on meanwhile."""
        return int(self.store.get(p.generation_key(self.job)).decode())

    def announce(self, ticket: str) -> int:
        """A newcomer of an in-place grow: announces itself with its ticket, then waits, outside any
        group, for the manager's switch (the first generation that holds this node); the members train
        on meanwhile. A store that stops answering (the keeper lost) is reconnected to and announced in
        again. Raises TimeoutError after BFT_INPLACE_TIMEOUT_S (the manager dismisses it before)."""
        job, node = self.job, os.environ.get(p.ENV_NODE, "")
        deadline = time.monotonic() + self.timeout_s
        announced = False
        self.beat.waiting = True
        while True:
            try:
                if not announced:
                    self.store.set(p.newcomer_key(job, node, local_rank()), ticket)
                    announced = True
                latest = self.latest_generation()
                if node in self.configuration(latest)[0]:
                    return latest
            except Exception:  # noqa: BLE001 - the store is gone: a new keeper's, announced in again
                announced = False
                try:
                    self.store = open_store(self.timeout_s)
                except Exception:  # noqa: BLE001 - not back yet
                    time.sleep(0.2)
            if stop_requested.is_set():  # its node taken back before it joined: nothing to save
                exit_for_resize()
            if time.monotonic() > deadline:
                raise TimeoutError(f"no generation with {node} within {self.timeout_s:g} s of its announcement")
            time.sleep(0.01)

    def _await_members(self, generation: int) -> Tuple[int, List[str], int]:
        """Waits until every process of every member of the generation has arrived, so that the process
        group forms at once; moves on to a newer generation if the manager publishes one meanwhile (a
        member that will never come: a reclaimed newcomer). Raises TimeoutError after
        BFT_INPLACE_TIMEOUT_S. Returns the generation, its nodes and its processes per node."""
        store, job, node = self.store, self.job, os.environ.get(p.ENV_NODE, "")
        deadline = time.monotonic() + self.timeout_s
        while True:
            nodes, per_node = self.configuration(generation)
            self.generation = generation
            if node not in nodes:
                exit_for_resize()  # this node leaves the job
            store.set(p.arrived_key(job, generation, node, local_rank()), "1")
            keys = [p.arrived_key(job, generation, n, k) for n in nodes for k in range(per_node)]
            while True:
                if store.check(keys):  # (formed even if a newer one exists: the next step boundary moves on)
                    self.nodes = nodes
                    return generation, nodes, per_node
                latest = int(store.get(p.generation_key(job)).decode())
                if latest > generation:
                    generation = latest
                    break
                if stop_requested.is_set():  # stopped while waiting (SIGTERM): no need to wait on
                    self._exit_stopped()
                if time.monotonic() > deadline:
                    missing = sorted({n for n in nodes for k in range(per_node)
                                      if not store.check([p.arrived_key(job, generation, n, k)])})
                    raise TimeoutError(f"{', '.join(missing)} did not join within {self.timeout_s:g} s")
                time.sleep(0.01)

    def next_generation(self, after: int, deadline: float) -> int:
        """The generation to re-form in after generation `after` failed: the newest one published since
        (the one that drops the lost peer, or a newer one: every newcomer of a published generation has
        announced itself, so none holds the survivors up). TimeoutError after the deadline; a stop
        asked meanwhile (SIGTERM) saves the state and exits."""
        while True:
            latest = self.latest_generation()
            if latest > after:
                return latest
            if stop_requested.is_set():
                self._exit_stopped()
            if time.monotonic() > deadline:
                raise TimeoutError(f"no generation after {after} within {self.timeout_s:g} s")
            time.sleep(0.02)

    def _exit_stopped(self) -> None:
        """Exits for a stop asked between generations; a survivor first saves the state of its last step."""
        if self.nodes:
            self._save()
        exit_for_resize()

    def poll(self, now: float) -> int:
        """The newest generation, looked up at most every POLL_S (else the current one). A store that
        stopped answering (the keeper died) is not this worker's failure: its group, formed, needs no
        store. It trains on and reconnects in the background; the manager re-forms the job in the new
        keeper's store."""
        if self.store is None or now < self._next_poll:
            return self.generation
        self._next_poll = now + POLL_S
        if self._reconnecting is not None:
            if self._reconnecting.is_alive():
                return self.generation
            self._reconnecting = None
        try:
            return self.latest_generation()
        except Exception:  # noqa: BLE001 - the store is gone
            self._reconnecting = threading.Thread(target=self._reconnect, name="bft-reconnect", daemon=True)
            self._reconnecting.start()
            return self.generation

    def _reconnect(self) -> None:
        while True:
            try:
                self.store = open_store(self.timeout_s)
                return
            except Exception:  # noqa: BLE001 - not back yet
                time.sleep(0.5)

    def reopen(self, deadline: float) -> None:
        """Reconnects to the store after a generation was lost: it may be the store that was (a keeper
        that answers no sooner than `deadline` is none). Returns at once if none answers yet."""
        try:
            self.store = open_store(self.timeout_s, max(deadline - time.monotonic(), 0.01))
        except Exception:  # noqa: BLE001 - not back yet: tried again
            time.sleep(0.2)

    def arm(self) -> None:
        """The next distributed phase (the step-boundary check, joining, the state's broadcast) must
        end within the timeout plus a margin over the timeouts torch applies itself; else the stacks
        are dumped and the worker exits (status 1): never a hung job. faulthandler's watchdog is a C
        thread: it works even when a call stuck in torch holds the GIL."""
        faulthandler.dump_traceback_later(self.timeout_s + 10.0, exit=True)

    @staticmethod
    def disarm() -> None:
        """The distributed phase :meth:`arm` bounded is over."""
        faulthandler.cancel_dump_traceback_later()


__all__ = ["POLL_S", "InPlaceMember"]
