"""What authenticating the rendezvous store costs (bft.train.rendezvous): a plain TCPStore on
loopback (the runtime before) against gateway -> relay -> store in a private namespace (now).

    python bench/rendezvous_bench.py [--ops 2000] [--rounds 15]

Both stores run in one process (the keeper's role); each client process (an agent's role) connects
either straight to the plain store or to the hosted one through a gateway of its own. Two measurements, both
modes in the same run, medians:
  - one store round trip (``get`` of a small key) from one client;
  - a c10d rendezvous of two agents (torchrun's DynamicRendezvousHandler, min = max = 2 nodes), with
    torch's random 0-0.3 s start-up skew switched off, each round a fresh run id; a round's time is
    the faster agent's (the slower one's includes waiting for the other to arrive).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import socket
import statistics
import subprocess
import sys
import time

JOB, SECRET = "bench", b"\x01" * 32


def serve() -> None:
    """The keeper's role: a plain store and a hosted one; prints their ports, runs until stdin closes."""
    import torch.distributed as dist

    from bft.train import rendezvous

    plain = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)
    hosted = rendezvous.HostedStore(socket.create_server(("127.0.0.1", 0), backlog=512),
                                    lambda job: SECRET if job == JOB else None, wait_for_workers=False)
    for store in (plain, hosted.store):
        store.set("k", "v")
    print(json.dumps({"store": plain.port, "relay": hosted.port, "private": hosted.private}), flush=True)
    sys.stdin.read()


def _endpoint(mode: str, ports: dict):
    from bft.train import rendezvous

    if mode == "direct":
        return ("127.0.0.1", ports["store"]), None
    gateway = rendezvous.open_gateway(("127.0.0.1", ports["relay"]), JOB, SECRET)
    return gateway.address, gateway


def ops(mode: str, ports: dict, n: int) -> None:
    import torch.distributed as dist

    address, _gateway = _endpoint(mode, ports)
    c = dist.TCPStore(*address, is_master=False, timeout=datetime.timedelta(seconds=30))
    times = []
    for _ in range(n):
        t = time.perf_counter()
        c.get("k")
        times.append(time.perf_counter() - t)
    print(json.dumps(times))


def rendezvous_rounds(mode: str, ports: dict, rounds: int) -> None:
    from torch.distributed.elastic.rendezvous import RendezvousParameters, dynamic_rendezvous
    from torch.distributed.elastic.rendezvous.registry import get_rendezvous_handler

    dynamic_rendezvous._delay = lambda seconds: None  # torch's random start-up skew: not what is measured
    address, _gateway = _endpoint(mode, ports)
    times, handlers = [], []
    for r in range(rounds):
        params = RendezvousParameters(backend="c10d", endpoint="%s:%d" % address, run_id=f"{mode}-{r}", min_nodes=2,
                                      max_nodes=2, is_host=False, join_timeout=60, last_call_timeout=1)
        handler = get_rendezvous_handler(params)
        t = time.perf_counter()
        handler.next_rendezvous()
        times.append(time.perf_counter() - t)
        handlers.append(handler)  # not shut down: that would close the round under the other agent
    print(json.dumps(times))


def _children(what: str, mode: str, ports: dict, n: int, count: int) -> list:
    env_ports = json.dumps(ports)
    procs = [subprocess.Popen([sys.executable, __file__, "--role", what, "--mode", mode, "--ports", env_ports,
                               "--n", str(n)], stdout=subprocess.PIPE, text=True,
                              env={**os.environ, "TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1"})
             for _ in range(count)]
    return [json.loads(p.communicate(timeout=600)[0]) for p in procs]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ops", type=int, default=2000)
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--role", choices=["serve", "ops", "rendezvous"], help=argparse.SUPPRESS)
    ap.add_argument("--mode", help=argparse.SUPPRESS)
    ap.add_argument("--ports", help=argparse.SUPPRESS)
    ap.add_argument("--n", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.role == "serve":
        serve()
        return 0
    if args.role == "ops":
        ops(args.mode, json.loads(args.ports), args.n)
        return 0
    if args.role == "rendezvous":
        rendezvous_rounds(args.mode, json.loads(args.ports), args.n)
        return 0
    server = subprocess.Popen([sys.executable, __file__, "--role", "serve"], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    try:
        ports = json.loads(server.stdout.readline())
        result = {}
        for mode in ("direct", "gateway"):
            (op_times,) = _children("ops", mode, ports, args.ops, 1)
            a, b = _children("rendezvous", mode, ports, args.rounds, 2)
            result[mode] = {"store_op_us": statistics.median(op_times) * 1e6,
                            "rendezvous_ms": statistics.median(min(x, y) for x, y in zip(a, b)) * 1e3}
        for key in ("store_op_us", "rendezvous_ms"):
            result[key + "_ratio"] = result["gateway"][key] / result["direct"][key]
        result["private_namespace"] = ports["private"]
        print(json.dumps(result, indent=1))
    finally:
        server.stdin.close()
        server.wait(30)
    return 0


if __name__ == "__main__":
    sys.exit(main())
