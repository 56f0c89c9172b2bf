"""Runtime bench: a resize's state transfer (in place) and checkpoint write/read at 10 MB, 100 MB and
1 GB against a raw broadcast and a raw file write/read of the same bytes; medians, never pass/fail
(bench/README.md, "Resize cost against the state's size").

    python bench/runtime_statesize.py [--mb 10 --mb 100 ...] [--repeats 5]

Run with the build on PYTHONPATH (``PYTHONPATH=build/dev/python .venv/bin/python bench/runtime_statesize.py ...``).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile

from runtime_shared import free_port

STATESIZE_WORKER = r"""
import os, statistics, sys, tempfile, time
from pathlib import Path
import torch, torch.distributed as dist
import bft.train as bt
from bft.train.elastic import broadcast_state, state_bytes

size_mb, repeats, directory = float(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
dist.init_process_group("gloo")
rank = dist.get_rank()
# A model-like state: float32 tensors of at most 16 MB (a large model's layers), size_mb in all.
total = int(size_mb * 1e6) // 4
state = {"model": {f"layer{k}": torch.randn(min(4_000_000, total - k * 4_000_000))
                   for k in range(-(-total // 4_000_000))}, "samples": 0} if rank == 0 else None
nbytes = state_bytes(state) if rank == 0 else 0
raw = torch.empty(total * 4, dtype=torch.uint8)
if rank == 0:
    raw.copy_(torch.cat([t.view(-1) for t in state["model"].values()]).view(torch.uint8))
os.environ["BFT_CHECKPOINT_DIR"] = directory
times = {k: [] for k in ("inplace", "broadcast", "ckpt_write", "file_write", "ckpt_read", "file_read")}


def timed(key, fn):
    dist.barrier()
    t = time.perf_counter()
    out = fn()
    dist.barrier()
    times[key].append(time.perf_counter() - t)
    return out


def evict(path):
    # Out of the page cache: the read measures the disk, as a relaunch on another node would.
    fd = os.open(path, os.O_RDONLY)
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    os.close(fd)


def raw_write(path, data):
    with open(path, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


for _ in range(repeats):
    got = timed("inplace", lambda: broadcast_state(state, 0, torch.device("cpu")))
    del got
    buf = raw.clone() if rank == 0 else torch.empty_like(raw)
    timed("broadcast", lambda: dist.broadcast(buf, 0))
    del buf
    if rank == 0:
        path = timed("ckpt_write", lambda: bt.checkpoint(state))
        evict(path)
        timed("ckpt_read", lambda: bt.resume())
        plain = Path(directory) / "raw.bin"
        timed("file_write", lambda: raw_write(plain, raw.numpy().tobytes()))
        evict(plain)
        timed("file_read", lambda: plain.read_bytes())
    else:
        for key in ("ckpt_write", "ckpt_read", "file_write", "file_read"):
            dist.barrier(); dist.barrier()
if rank == 0:
    print("RESULT", nbytes, " ".join(f"{k}={statistics.median(v)!r}" for k, v in times.items()), flush=True)
dist.barrier()
dist.destroy_process_group()
"""


def bench_statesize(sizes_mb: list, repeats: int) -> None:
    """A resize's cost against the state's size: the in-place transfer (bft.train.elastic.broadcast_state,
    what newcomers receive) against a raw torch.distributed broadcast of the same bytes, and a checkpoint
    write and read (bt.checkpoint, bt.resume: what a relaunch does) against a raw write (fsync) and read
    of the same bytes; two gloo ranks on this host, every figure a median of `repeats`."""
    for size_mb in sizes_mb:
        n = repeats if size_mb < 1000 else 1
        with tempfile.TemporaryDirectory(prefix="bft-statesize-") as directory:
            env = dict(os.environ, OMP_NUM_THREADS="1", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()),
                       WORLD_SIZE="2", CUDA_VISIBLE_DEVICES="")
            procs = [subprocess.Popen([sys.executable, "-c", STATESIZE_WORKER, str(size_mb), str(n), directory],
                                      env=dict(env, RANK=str(rank), LOCAL_RANK="0"), stdout=subprocess.PIPE,
                                      text=True) for rank in range(2)]
            outs = [proc.communicate(timeout=1800)[0] for proc in procs]
        line = next(line for line in outs[0].splitlines() if line.startswith("RESULT"))
        _, nbytes, *fields = line.split()
        t = {k: float(v) for k, v in (f.split("=") for f in fields)}
        mb = int(nbytes) / 1e6
        target = 2 * t["broadcast"] + 0.5
        print(f"{mb:7.0f} MB ({n} runs): in place {t['inplace']:.3f} s vs broadcast {t['broadcast']:.3f} s "
              f"({mb / 1e3 / t['broadcast']:.2f} GB/s), ratio {t['inplace'] / t['broadcast']:.2f}, "
              f"target 2 x broadcast + 0.5 s = {target:.3f} s ({'met' if t['inplace'] <= target else 'missed'}); "
              f"checkpoint write {t['ckpt_write']:.3f} s vs file write {t['file_write']:.3f} s "
              f"(ratio {t['ckpt_write'] / t['file_write']:.2f}); read {t['ckpt_read']:.3f} s vs "
              f"{t['file_read']:.3f} s (ratio {t['ckpt_read'] / t['file_read']:.2f})", flush=True)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--mb", type=float, action="append", help="state size in MB, repeatable (default 10, 100, 1000; "
                   "1000 MB and more measured once)")
    p.add_argument("--repeats", type=int, default=5)
    a = p.parse_args()
    bench_statesize(a.mb or [10, 100, 1000], a.repeats)


if __name__ == "__main__":
    main()
