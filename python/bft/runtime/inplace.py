"""In-place resizes (``--resize inplace``): the manager's side.

Each node runs the job's script directly (one process per node, no torchrun). The manager writes
every generation's configuration (its member nodes, in rank order) into the keeper's rendezvous
store and then the job's current generation (key layout: bft.train.protocol). A resize publishes
generation g+1 and starts only the newcomers; the workers that stay notice it at their next step
boundary and re-form their process group on g+1's prefix (bft.train.elastic), those that leave
exit with EXIT_RESIZE. The survivors' processes stay: their process rows are carried over to g+1.
"""

from __future__ import annotations

import json
import time
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Optional, Tuple

from ..train import protocol, rendezvous

if TYPE_CHECKING:
    from .lifecycle import JobLifecycle
    from .runs import JobRun


class Configurations:
    """The generations' configurations in the rendezvous store, written through one authenticated
    connection per job (the keeper's relay admits a connection only with the job's secret)."""

    def __init__(self, store_address: str, timeout_s: float, secret_of: Callable[[str], bytes]):
        self.relay = protocol.parse_address(store_address)
        self.timeout_s = timeout_s
        self.secret_of = secret_of
        self._clients: Dict[str, Tuple[Any, Any]] = {}  # job -> (store client, its gateway)

    def _client(self, job: str):
        if job not in self._clients:
            self._clients[job] = rendezvous.store_client(self.relay, job, self.secret_of(job), self.timeout_s)
        return self._clients[job][0]

    def forget(self, job: str) -> None:
        """Closes a job's connection (it has ended)."""
        client = self._clients.pop(job, None)
        if client is not None:
            client[1].close()

    def publish(self, job: str, generation: int, nodes: List[str]) -> None:
        """Generation `generation` of `job` runs on `nodes` (rank order): the configuration first,
        then the current generation, so a worker that sees the number finds its configuration."""
        store = self._client(job)
        store.set(protocol.config_key(job, generation), json.dumps({"nodes": nodes}))
        store.set(protocol.generation_key(job), str(generation))

    def arrived(self, job: str, generation: int, node: str) -> bool:
        """True once the worker on `node` has come to generation `generation`'s rendezvous."""
        return self._client(job).check([protocol.arrived_key(job, generation, node)])

    def members(self, job: str, generation: int) -> Optional[List[str]]:
        """The nodes of a published generation in rank order, or None if it was never published."""
        store = self._client(job)
        key = protocol.config_key(job, generation)
        if not store.check([key]):
            return None
        return list(json.loads(store.get(key).decode())["nodes"])


def resize(lc: "JobLifecycle", run: "JobRun", target: List[str]) -> bool:
    """Moves a running job to `target` in place: publishes the next generation, starts the newcomers,
    lets the leavers exit. False (nothing done) when it cannot: no live worker would stay, or a node
    of `target` still runs a leaver of an earlier resize."""
    row = run.row
    live = {n for n, a in run.agents.items() if not a.stopping}  # leavers of an earlier resize may still run
    if run.stop_reason or any(n in run.agents and n not in live for n in target):
        return False  # stopping, or a node of the target is still being vacated
    survivors = [n for n in run.members if n in target and n in live]
    if not survivors:
        return False
    newcomers = sorted(n for n in target if n not in run.agents)
    leavers = [n for n in run.members if n in live and n not in target]
    nodes = survivors + newcomers  # rank 0 of the new group is a survivor: it holds the state
    row.generation += 1
    lc.store.update_job(row.id, generation=row.generation)
    try:
        lc.configurations.publish(row.id, row.generation, nodes)
    except Exception as e:  # noqa: BLE001 - the store is unreachable: relaunch instead
        lc.store.log_event("inplace_failed", job=row.id, generation=row.generation, error=str(e))
        return False
    now = time.monotonic()
    with lc.store.transaction():
        for node in survivors:  # the same process, now of the new generation
            agent = run.agents[node]
            lc.store.end_proc(agent.row, None)
            agent.row = lc.store.add_proc(row.id, row.generation, node)
            lc.store.set_proc_pid(agent.row, agent.proc.pid)
            agent.generation = row.generation
        for node in leavers:  # they exit at their next step boundary; killed if not gone by then
            agent = run.agents[node]
            agent.stopping = True
            agent.stop_deadline = now + lc.inplace_timeout_s + lc.grace_s
    run.members = nodes
    run.disturbed = False  # a reclaim that led here has been answered
    run.last_seq.clear()
    run.rank_samples.clear()
    lc.log_line(row.id, f"=== generation {row.generation} in place: {len(nodes)} nodes ({', '.join(nodes)}); "
                        f"joining {', '.join(newcomers) or 'none'}, leaving {', '.join(leavers) or 'none'} ===")
    lc.store.log_event("resize_inplace", job=row.id, generation=row.generation, nodes=nodes, joined=newcomers,
                       left=leavers)
    lc.launch_agents(run, newcomers)
    for node in newcomers:
        if node in run.agents:
            run.agents[node].arrive_by = now + lc.inplace_timeout_s
    return True


def overdue(lc: "JobLifecycle", run: "JobRun", now: float) -> bool:
    """True if a newcomer has not come to its generation's rendezvous within the in-place timeout
    (hung, or stuck starting): the survivors train on meanwhile, so only the manager can notice."""
    for agent in run.agents.values():
        if agent.arrive_by is None or agent.stopping or now < agent.arrive_by:
            continue
        try:
            if lc.configurations.arrived(run.id, run.row.generation, agent.node):
                agent.arrive_by = None
                continue
        except Exception:  # noqa: BLE001 - the store is unreachable: the resize cannot complete either
            pass
        lc.store.log_event("inplace_failed", job=run.id, node=agent.node, generation=run.row.generation,
                           error=f"not joined within {lc.inplace_timeout_s:g} s")
        return True
    return False
