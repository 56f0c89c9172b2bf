"""One node's agent: torchrun (``torch.distributed.run``) with the manager's planned stops kept quiet.

The manager stops agents with SIGTERM for every resize, preemption, cancel and shutdown. Plain
torchrun answers each with warnings and a ``SignalException`` traceback, and a worker that exits for
a resize (``bft.train.EXIT_RESIZE``) with a ``ChildFailedError`` report: a job's log filled with stack
dumps that are not errors. This wrapper runs the same torchrun and says nothing for a planned stop
(the manager writes one line to the job's log instead); a real failure keeps torchrun's own report,
whose ``exitcode`` line the manager reads.

It also puts both stores a job uses behind the job's secret (bft.train.rendezvous): torchrun reaches
the keeper's rendezvous store, and the workers the store that rank 0's agent hosts for them, each
through a gateway on this node's loopback; rank 0's worker store listens on a loopback only its
agent reaches, behind a relay on the node's own address (--local-addr), never on a wildcard.

    python -m bft.runtime.agent <torchrun arguments>
"""

from __future__ import annotations

import logging
import os
import socket
import sys
from typing import Dict, List, Tuple

from ...train import protocol, rendezvous
from ...train._netif import gloo_on_the_node_address
from ...train.worker import leave_exit_status


def _quiet_torchrun_warnings() -> None:
    """torch's elastic loggers each set their level from LOGLEVEL (default WARNING) when created."""
    for name, logger in list(logging.Logger.manager.loggerDict.items()):
        if name.startswith("torch.distributed") and isinstance(logger, logging.Logger):
            logger.setLevel(logging.ERROR)


def _authenticate_worker_store(job: str, secret: bytes) -> None:
    """Rank 0's agent hosts the store its job's workers bootstrap from (torch binds it to every
    address): here it is a HostedStore behind a relay on the node's address, and every node's
    workers reach it through a gateway of their agent (MASTER_ADDR/MASTER_PORT point there)."""
    from torch.distributed.elastic.agent.server.local_elastic_agent import LocalElasticAgent
    from torch.distributed.elastic.rendezvous.dynamic_rendezvous import DynamicRendezvousHandler

    def create_tcp_store_server(handler, master_addr, master_port):  # torch reads its .port
        return rendezvous.HostedStore(socket.create_server((master_addr, master_port), backlog=512),
                                      lambda j: secret if j == job else None, multi_tenant=True)

    gateways: Dict[Tuple[str, int], "rendezvous._Server"] = {}
    start_workers = LocalElasticAgent._start_workers

    def start_workers_through_gateway(agent, worker_group):
        upstream = (worker_group.master_addr, int(worker_group.master_port))
        if upstream in [g.address for g in gateways.values()]:  # no new rendezvous since: already ours
            return start_workers(agent, worker_group)
        if upstream not in gateways:  # a new rank 0: the old store is gone with its agent
            for old in gateways.values():
                old.close()
            gateways.clear()
            gateways[upstream] = rendezvous.open_gateway(upstream, job, secret)
        worker_group.master_addr, worker_group.master_port = gateways[upstream].address
        return start_workers(agent, worker_group)

    DynamicRendezvousHandler._create_tcp_store_server = create_tcp_store_server
    LocalElasticAgent._start_workers = start_workers_through_gateway


def _through_gateway(argv: List[str], job: str, secret: bytes) -> Tuple[List[str], "rendezvous._Server"]:
    """torchrun's --rdzv-endpoint (the keeper's relay) replaced by a gateway to it on this node."""
    out, gateway = [], None
    for arg in argv:
        if arg.startswith("--rdzv-endpoint=") and gateway is None:
            host, _, port = arg.split("=", 1)[1].rpartition(":")
            gateway = rendezvous.open_gateway((host, int(port)), job, secret)
            arg = "--rdzv-endpoint=%s:%d" % gateway.address
        out.append(arg)
    return out, gateway


def main(argv: List[str]) -> int:
    if not os.environ.get(protocol.ENV_JOB_ID):
        print(f"bft.runtime.agent: {protocol.ENV_JOB_ID} is not set: the agent is started by bft manager, "
              "with its job's environment", file=sys.stderr, flush=True)
        return 2
    had_level = "LOGLEVEL" in os.environ
    os.environ.setdefault("LOGLEVEL", "ERROR")  # loggers created while torchrun is imported
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.run import parse_args, run

    from ...train import EXIT_RESIZE

    if not had_level:
        del os.environ["LOGLEVEL"]  # the workers inherit this environment: theirs stays the user's
    _quiet_torchrun_warnings()
    try:
        protocol.resolve_job_secret()  # into this environment, which torchrun's workers inherit
    except ValueError as e:
        print(f"bft.runtime.agent: {e}", file=sys.stderr, flush=True)
        return 2
    job, secret = os.environ[protocol.ENV_JOB_ID], bytes.fromhex(os.environ[protocol.ENV_JOB_SECRET])
    _authenticate_worker_store(job, secret)
    argv, _gateway = _through_gateway(argv, job, secret)  # open as long as torchrun runs
    args = parse_args(argv)
    gloo_on_the_node_address(args.local_addr or "")
    try:
        run(args)
    except SignalException as e:  # the manager stopped this agent: a planned stop
        return 128 + int(e.sigval)
    except ChildFailedError as e:
        if all(f.exitcode == EXIT_RESIZE for f in e.failures.values()):
            return EXIT_RESIZE  # every worker stopped for a resize, as asked
        print(e, file=sys.stderr, flush=True)  # a real failure: torchrun's report, with its exitcode line
        return 1
    return 0


def _exit(code: int) -> None:
    """Exits, first leaving the status where a restarted manager (not this process's parent) reads it."""
    leave_exit_status(code)
    sys.exit(code)


if __name__ == "__main__":
    _exit(main(sys.argv[1:]))
