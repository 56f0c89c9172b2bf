"""Runtime bench: examples/runtime/gpt_synthetic.py's throughput at 1, 2 and 4 workers, fixed global
batch against fixed per-worker batch, interleaved rounds; medians, never pass/fail (bench/README.md).

    python bench/runtime_gpt.py [--world N ...] [--rounds 5] [--curve-out PREFIX]

Run with the build on PYTHONPATH (``PYTHONPATH=build/dev/python .venv/bin/python bench/runtime_gpt.py ...``).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from runtime_shared import REPO, free_port

GPT_SEMANTICS = ("fixed global batch", "fixed per-worker batch")


def _gpt_run(world: int, semantics: str, steps: int, batch: int, global_batch: int) -> dict:
    """One run of examples/runtime/gpt_synthetic.py on `world` workers started as torchrun would (one
    thread each): its median step time (the example leaves out the first 3 steps) and the load average
    when it started."""
    script = REPO / "examples" / "runtime" / "gpt_synthetic.py"
    per_step = global_batch if semantics == GPT_SEMANTICS[0] else batch * world
    args = ["--global-batch", str(global_batch)] if semantics == GPT_SEMANTICS[0] else []
    load = float(Path("/proc/loadavg").read_text().split()[0])
    with tempfile.TemporaryDirectory(prefix="bft-gpt-") as directory:
        env = dict(os.environ, OMP_NUM_THREADS="1", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()),
                   WORLD_SIZE=str(world), CUDA_VISIBLE_DEVICES="", BFT_CHECKPOINT_DIR=directory)
        command = [sys.executable, str(script), "--batch", str(batch), "--samples", str(steps * per_step), *args]
        procs = [subprocess.Popen(command, env=dict(env, RANK=str(rank), LOCAL_RANK="0"),
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
                 for rank in range(world)]
        outs = [proc.communicate(timeout=1800)[0] for proc in procs]
    found = re.search(r"median step ([0-9.]+) s over ([0-9]+) steps", outs[0])
    if not found:
        raise RuntimeError(f"{world} worker(s), {semantics}: no median step in the output: {outs[0][-2000:]}")
    step_s = float(found.group(1))
    return {"step_s": step_s, "samples_per_s": per_step / step_s, "measured_steps": int(found.group(2)),
            "load": load}


def bench_gpt(worlds: list, rounds: int, steps: int, batch: int, global_batch: int, curve_out: str) -> None:
    """Throughput of examples/runtime/gpt_synthetic.py at each world size, fixed global batch
    (`global_batch` in micro-batches of `batch`) against fixed per-worker batch (`batch`), measured
    interleaved: `rounds` rounds per world size, each one run of either, the order alternating (A B,
    B A, ...) so that a load that drifts through the run weighs on both alike. Per world size: the
    median over rounds of each run's median step time, the samples/s it gives, the ratio of those
    medians, and each round's ratio (its two runs back to back) with their median. With
    `curve_out`, each semantics' samples/s by world size is written as a curve ({"nodes": [...],
    "throughput": [...]}, the format of bft submit --curve) to CURVE_OUT-global.json and
    CURVE_OUT-per-worker.json."""
    print(f"uptime before: {subprocess.run(['uptime'], capture_output=True, text=True).stdout.strip()}", flush=True)
    start = time.monotonic()
    medians = {name: {} for name in GPT_SEMANTICS}
    for world in worlds:
        runs = {name: [] for name in GPT_SEMANTICS}
        for r in range(rounds):
            for name in (GPT_SEMANTICS if r % 2 == 0 else GPT_SEMANTICS[::-1]):
                run = _gpt_run(world, name, steps, batch, global_batch)
                runs[name].append(run)
                print(f"{world} worker(s), round {r + 1}, {name}: median step {run['step_s']:.3f} s over "
                      f"{run['measured_steps']} steps, {run['samples_per_s']:.2f} samples/s (load average "
                      f"{run['load']:.2f} at its start; {time.monotonic() - start:.0f} s into the bench)", flush=True)
        for name in GPT_SEMANTICS:
            step = statistics.median(run["step_s"] for run in runs[name])
            rate = statistics.median(run["samples_per_s"] for run in runs[name])
            medians[name][world] = rate
            print(f"{world} worker(s), {name}: median step {step:.3f} s, {rate:.2f} samples/s "
                  f"(medians of {rounds} runs)", flush=True)
        # Each round's two runs are back to back: their ratio is less moved by a load that changes between rounds.
        paired = [a["samples_per_s"] / b["samples_per_s"]
                  for a, b in zip(runs[GPT_SEMANTICS[0]], runs[GPT_SEMANTICS[1]])]
        print(f"{world} worker(s), ratio fixed global / fixed per-worker throughput: "
              f"{medians[GPT_SEMANTICS[0]][world] / medians[GPT_SEMANTICS[1]][world]:.3f} (of the medians); per "
              f"round {', '.join(f'{x:.3f}' for x in paired)}, median {statistics.median(paired):.3f}", flush=True)
    if curve_out:
        for name, suffix in zip(GPT_SEMANTICS, ("global", "per-worker")):
            path = Path(f"{curve_out}-{suffix}.json")
            worlds_measured = sorted(medians[name])
            path.write_text(json.dumps({"nodes": [0, *worlds_measured],
                                        "throughput": [0.0, *(round(medians[name][w], 4) for w in worlds_measured)]})
                            + "\n")
            print(f"curve of the {name}: {path}", flush=True)
    print(f"uptime after: {subprocess.run(['uptime'], capture_output=True, text=True).stdout.strip()} "
          f"({time.monotonic() - start:.0f} s)", flush=True)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--world", type=int, action="append", help="world sizes, repeatable (default 1, 2 and 4)")
    p.add_argument("--rounds", type=int, default=5, help="runs of each semantics per world size, interleaved "
                   "(default 5)")
    p.add_argument("--steps", type=int, default=6, help="steps per run, the first 3 left out (default 6)")
    p.add_argument("--batch", type=int, default=8, help="per-worker batch, and the micro-batch (default 8)")
    p.add_argument("--global-batch", type=int, default=32)
    p.add_argument("--curve-out", metavar="PREFIX", help="write each semantics' curve to PREFIX-global.json and "
                   "PREFIX-per-worker.json (bft submit --curve's format; bench/gpt_replay.py reads them)")
    a = p.parse_args()
    bench_gpt(a.world or [1, 2, 4], a.rounds, a.steps, a.batch, a.global_batch, a.curve_out)


if __name__ == "__main__":
    main()
