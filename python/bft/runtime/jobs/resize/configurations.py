"""In-place jobs' configurations in the keeper's rendezvous store (``--resize inplace``).

The manager writes every generation's configuration (its member nodes, in rank order, and the
processes each runs) and then the
job's current generation (key layout: bft.train.protocol). The workers that stay notice a new
generation at their next step boundary and re-form their process group on its prefix
(bft.train.inplace); those that leave exit with EXIT_RESIZE. Newcomers announce themselves before
any generation holds them (``announced``): the manager publishes the switch once all have.
"""

from __future__ import annotations

import json
from typing import Any, Callable, Dict, List, Optional, Tuple

from ....train import protocol, rendezvous


class Configurations:
    """The generations' configurations in the rendezvous store, written through one authenticated
    connection per job (the keeper's relay admits a connection only with the job's secret)."""

    def __init__(self, store_address: str, timeout_s: float, secret_of: Callable[[str], bytes],
                 keeper_gone: Callable[[], bool] = lambda: False):
        """`keeper_gone()`: the keeper died. The manager's loop waits on these connections: one to a
        dead keeper gives up at once (its successor, which only the manager starts, gets the
        generations), not after `timeout_s`."""
        self.relay = protocol.parse_address(store_address)
        self.timeout_s = timeout_s
        self.secret_of = secret_of
        self.keeper_gone = keeper_gone
        self._clients: Dict[str, Tuple[Any, Any]] = {}  # job -> (store client, its gateway)

    def _client(self, job: str):
        if job not in self._clients:
            self._clients[job] = rendezvous.store_client(self.relay, job, self.secret_of(job), self.timeout_s,
                                                         gone=self.keeper_gone)
        return self._clients[job][0]

    def forget(self, job: str) -> None:
        """Closes a job's connection (it has ended)."""
        client = self._clients.pop(job, None)
        if client is not None:
            client[1].close()

    def close(self) -> None:
        """Closes every connection (the keeper they went to is gone)."""
        for job in list(self._clients):
            self.forget(job)

    def publish(self, job: str, generation: int, nodes: List[str], procs_per_node: int = 1,
                regroup: bool = False) -> None:
        """Generation `generation` of `job` runs on `nodes` (rank order), `procs_per_node` processes
        each: the configuration first, then the current generation, so a worker that sees the number
        finds its configuration. `regroup`: the members re-form their process group even if they are
        the same (a new store)."""
        store = self._client(job)
        config: Dict[str, Any] = {"nodes": nodes, "procs_per_node": procs_per_node,
                                  **({"regroup": True} if regroup else {})}
        store.set(protocol.config_key(job, generation), json.dumps(config))
        store.set(protocol.generation_key(job), str(generation))

    def announced(self, job: str, node: str, tickets: List[str]) -> bool:
        """True once every newcomer process on `node` (local rank k started with ticket `tickets[k]`) has
        announced itself: started, connected and ready to join (bft.train.inplace)."""
        store = self._client(job)
        keys = [protocol.newcomer_key(job, node, k) for k in range(len(tickets))]
        return store.check(keys) and [v.decode() for v in store.multi_get(keys)] == tickets

    def members(self, job: str, generation: int) -> Optional[List[str]]:
        """The nodes of a published generation in rank order, or None if it was never published."""
        store = self._client(job)
        key = protocol.config_key(job, generation)
        if not store.check([key]):
            return None
        return list(json.loads(store.get(key).decode())["nodes"])

    def beats(self, job: str, processes: List[Tuple[str, int]]) -> Dict[Tuple[str, int], str]:
        """The heartbeats the worker processes (node, local rank) wrote (bft.train.store_link), for those
        that wrote one."""
        store = self._client(job)
        keys = {proc: protocol.beat_key(job, *proc) for proc in processes}
        present = [proc for proc in processes if store.check([keys[proc]])]
        values = store.multi_get([keys[proc] for proc in present]) if present else []
        return {proc: v.decode(errors="replace") for proc, v in zip(present, values)}
