"""One node's agent: torchrun (``torch.distributed.run``) with the manager's planned stops kept quiet.

The manager stops agents with SIGTERM for every resize, preemption, cancel and shutdown. Plain
torchrun answers each with warnings and a ``SignalException`` traceback, and a worker that exits for
a resize (``bft.train.EXIT_RESIZE``) with a ``ChildFailedError`` report: a job's log filled with stack
dumps that are not errors. This wrapper runs the same torchrun and says nothing for a planned stop
(the manager writes one line to the job's log instead); a real failure keeps torchrun's own report,
whose ``exitcode`` line the manager reads. It also keeps the store that rank 0's agent hosts for
its workers on the node's own address, not on every address of the host.

    python -m bft.runtime.agent <torchrun arguments>
"""

from __future__ import annotations

import logging
import os
import socket
import sys
from typing import List

from ..train.protocol import ENV_EXIT_FILE as ENV_AGENT_EXIT_FILE  # where the agent leaves its exit status


def _quiet_torchrun_warnings() -> None:
    """torch's elastic loggers each set their level from LOGLEVEL (default WARNING) when created."""
    for name, logger in list(logging.Logger.manager.loggerDict.items()):
        if name.startswith("torch.distributed") and isinstance(logger, logging.Logger):
            logger.setLevel(logging.ERROR)


def _bind_worker_store_to_the_node_address() -> None:
    """Rank 0's agent hosts the store its job's workers bootstrap from; torch binds it to every address
    of the host. Bound here to the node's own address (--local-addr) instead: never a wildcard."""
    import torch.distributed as dist
    from torch.distributed.elastic.rendezvous.dynamic_rendezvous import DynamicRendezvousHandler

    def create_tcp_store_server(handler, master_addr, master_port):
        sock = socket.create_server((master_addr, master_port), backlog=512)
        store = dist.TCPStore(master_addr, sock.getsockname()[1], is_master=True, multi_tenant=True,
                              master_listen_fd=sock.fileno())
        handler._bft_store_socket = sock  # open as long as the store
        return store

    DynamicRendezvousHandler._create_tcp_store_server = create_tcp_store_server


def main(argv: List[str]) -> int:
    had_level = "LOGLEVEL" in os.environ
    os.environ.setdefault("LOGLEVEL", "ERROR")  # loggers created while torchrun is imported
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.run import parse_args, run

    from ..train import EXIT_RESIZE

    if not had_level:
        del os.environ["LOGLEVEL"]  # the workers inherit this environment: theirs stays the user's
    _quiet_torchrun_warnings()
    _bind_worker_store_to_the_node_address()
    try:
        run(parse_args(argv))
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
    path = os.environ.get(ENV_AGENT_EXIT_FILE)
    if path:
        try:
            with open(path, "w") as f:
                f.write(str(code))
        except OSError:
            pass
    sys.exit(code)


if __name__ == "__main__":
    _exit(main(sys.argv[1:]))
