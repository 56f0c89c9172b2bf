"""HSDP benchmarks (medians; never pass/fail). Results and the machine: bench/README.md.

    python bench/hsdp_bench.py transfer   # a newcomer node's shard transfer (bft.train.hsdp.transfer_shards)
                                          # against N processes per node, the same state (default 100 MB)
    python bench/hsdp_bench.py resize     # examples/runtime/hsdp_synthetic.py under a real manager, 2
                                          # processes per node, 1 <-> 2 nodes: in place against relaunch
                                          # from DCP, in one run (the manager's resize_gap events)

Run with the build on PYTHONPATH (``PYTHONPATH=build/dev/python .venv/bin/python bench/hsdp_bench.py ...``).
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _hidden_for(mb: float, layers: int) -> int:
    """The width at which hsdp_synthetic's MLP (64 -> hidden x layers -> 10) holds `mb` MB of float32
    parameters and as much SGD momentum."""
    target = mb * 1e6 / 8  # parameters: 4 bytes each, twice (momentum)
    hidden = 1
    while 74 * hidden + (layers - 1) * hidden * hidden < target:
        hidden += 1
    return hidden


def _transfer_worker(rank: int, per_node: int, mb: float, repeats: int, port: int, results) -> None:
    """Rank `rank` of 2 nodes of `per_node` processes: node 0 holds the state, node 1 receives it."""
    os.environ.update(RANK=str(rank), WORLD_SIZE=str(2 * per_node), LOCAL_RANK=str(rank % per_node),
                      LOCAL_WORLD_SIZE=str(per_node), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
                      OMP_NUM_THREADS="1")
    import torch
    import torch.distributed as dist
    from torch import nn
    from torch.distributed.fsdp import fully_shard

    from bft.train.elastic import state_bytes
    from bft.train.hsdp import hsdp_mesh, local_shards, transfer_shards

    device = torch.device("cpu")
    dist.init_process_group("gloo")
    mesh = hsdp_mesh(device)
    hidden = _hidden_for(mb, 2)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, hidden), nn.Linear(hidden, hidden), nn.Linear(hidden, 10))
    for layer in model:
        fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    model(torch.randn(2, 64)).sum().backward()
    optimizer.step()  # the momentum exists
    local = local_shards({"model": model.state_dict(), "optimizer": optimizer.state_dict()})
    times = []
    for _ in range(repeats):
        dist.barrier()
        start = time.monotonic()
        transfer_shards(local if rank < per_node else None, 0, [1], device)
        dist.barrier()
        times.append(time.monotonic() - start)
    if rank == 0:
        results.put((per_node, state_bytes(local), times))
    dist.destroy_process_group()


def bench_transfer(mb: float, procs: list, repeats: int) -> None:
    import torch.multiprocessing as mp

    results = mp.get_context("spawn").SimpleQueue()
    medians = {}
    for per_node in procs:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        mp.spawn(_transfer_worker, args=(per_node, mb, repeats, port, results), nprocs=2 * per_node)
        _, shard_bytes, times = results.get()
        medians[per_node] = statistics.median(times)
        print(f"{per_node} process(es) per node: {shard_bytes / 1e6:.1f} MB per process, transfer median "
              f"{medians[per_node]:.3f} s of {repeats}: {', '.join(f'{t:.3f}' for t in times)}", flush=True)
    first = procs[0]
    for per_node in procs[1:]:
        print(f"ratio {per_node} / {first} processes per node: {medians[per_node] / medians[first]:.3f} "
              f"(1/N would be {first / per_node:.3f})", flush=True)


def bench_resize(mb: float, cycles: int, period_s: float, per_node: int) -> None:
    sys.path.insert(0, str(Path(__file__).parent))
    from runtime_resize import run_resize_cycles

    script = ("examples/runtime/hsdp_synthetic.py", "--hidden", str(_hidden_for(mb, 2)), "--layers", "2",
              "--global-batch", "8", "--micro-batch", "2", "--step-s", "0.05")
    medians = {}
    for method in ("inplace", "relaunch"):
        r = run_resize_cycles(method, cycles, 2, period_s, ("--procs-per-node", str(per_node)), script)
        for kind in ("grow", "shrink"):
            gaps = r[kind]
            medians[method, kind] = statistics.median(gaps) if gaps else float("nan")
            print(f"{method:8s} {kind:6s} (1 <-> 2 nodes of {per_node}): median {medians[method, kind]:.2f} s, "
                  f"{len(gaps)} of {cycles}{r['left_out'][kind]}: {', '.join(f'{g:.2f}' for g in gaps)}", flush=True)
    for kind in ("grow", "shrink"):
        print(f"ratio inplace / relaunch, {kind}: {medians['inplace', kind] / medians['relaunch', kind]:.3f}",
              flush=True)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="what", required=True)
    t = sub.add_parser("transfer")
    t.add_argument("--mb", type=float, default=100.0, help="the state: parameters and momentum, MB (default 100)")
    t.add_argument("--procs", type=int, action="append", help="processes per node, repeatable (default 1, 2, 4)")
    t.add_argument("--repeats", type=int, default=5)
    r = sub.add_parser("resize")
    r.add_argument("--mb", type=float, default=100.0, help="the state: parameters and momentum, MB (default 100)")
    r.add_argument("--cycles", type=int, default=3)
    r.add_argument("--period", type=float, default=100.0,
                   help="seconds per cycle (default 100: a step of 100 MB takes seconds on a loaded 2-vCPU host)")
    r.add_argument("--procs-per-node", type=int, default=2)
    a = p.parse_args()
    if a.what == "transfer":
        bench_transfer(a.mb, a.procs or [1, 2, 4], a.repeats)
    else:
        bench_resize(a.mb, a.cycles, a.period, a.procs_per_node)


if __name__ == "__main__":
    main()
