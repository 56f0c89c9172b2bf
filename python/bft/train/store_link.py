"""An in-place worker's link to its job's rendezvous store (the keeper's, behind its relay): the
connection the worker's group and generations go through (:func:`open_store`), and the heartbeat a
thread of its own writes there for the manager (:class:`Heartbeat`)."""

from __future__ import annotations

import os
import threading
import time
from typing import Optional

from . import protocol as p
from . import rendezvous

# Seconds between two heartbeats of an in-place worker (the manager finds hung workers by them).
BEAT_S = 0.5


class Heartbeat:
    """An in-place worker's heartbeat, written into its job's store by a daemon thread through a
    connection of its own: "<beats> <steps> <waiting>". `beats` grows while the process runs (a
    stopped or frozen process stops it), `steps` counts its step boundaries, `waiting` is 1 while it
    waits for its peers at one (or re-forms its group). A worker that hangs between two boundaries
    keeps beating but its steps stop while its peers wait: the manager tells the two apart."""

    def __init__(self, node: str, local_rank: int) -> None:
        self.steps = 0
        self.waiting = False
        self._node, self._local_rank = node, local_rank
        threading.Thread(target=self._run, name="bft-heartbeat", daemon=True).start()

    def _run(self) -> None:
        beats, store, gateway = 0, None, None
        while True:
            try:
                if store is None:
                    if gateway is not None:
                        gateway.close()  # the lost connection's: each reconnection opens a gateway of its own
                        gateway = None
                    store, gateway = _store_client(inplace_timeout_s())
                beats += 1
                store.set(p.beat_key(os.environ[p.ENV_JOB_ID], self._node, self._local_rank),
                          f"{beats} {self.steps} {int(self.waiting)}")
            except Exception:  # noqa: BLE001 - the keeper is gone: a new connection at the next beat
                store = None
            time.sleep(BEAT_S)


_gateway = None  # this process's gateway to the keeper's relay, open while the process lives


def open_store(timeout_s: float, reach_within_s: Optional[float] = None):
    """The worker's connection to its job's rendezvous store: through a gateway on this node that
    proves the job's secret to the keeper's relay (bft.train.rendezvous), which must answer within
    `reach_within_s` (default `timeout_s`; else rendezvous.RelayUnreachable)."""
    global _gateway
    store, gateway = _store_client(timeout_s, reach_within_s)
    if _gateway is not None:
        _gateway.close()  # a store of an earlier connection: its connections stay up
    _gateway = gateway
    return store


def _store_client(timeout_s: float, reach_within_s: Optional[float] = None):
    """A new (store, gateway) of the job named in this process's environment (rendezvous.store_client)."""
    p.resolve_job_secret()
    return rendezvous.store_client(p.parse_address(os.environ[p.ENV_STORE_ADDR]), os.environ[p.ENV_JOB_ID],
                                   bytes.fromhex(os.environ[p.ENV_JOB_SECRET]), timeout_s, reach_within_s)


def inplace_timeout_s() -> float:
    """BFT_INPLACE_TIMEOUT_S, the bound of every in-place wait (at least 1 s; the default when unset or bad)."""
    try:
        return max(1.0, float(os.environ.get(p.ENV_INPLACE_TIMEOUT_S, p.DEFAULT_INPLACE_TIMEOUT_S)))
    except ValueError:
        return p.DEFAULT_INPLACE_TIMEOUT_S
