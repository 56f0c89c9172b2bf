"""Structured partial backpropagation on this machine (CPU): what a configuration saves and costs,
and the throughput curves and efficiency factors of a measured workload in the jobs format.

The model is the small CNN of examples/runtime/ddp_digits.py in 4 stages; the data is scikit-learn's
8x8 digits (1,500 images to train on, 297 held out; nothing is downloaded). A configuration "spb-dD"
runs half the ranks (rounded up, rank 0 first) at full depth and the others at depth D, each partial
rank taking a batch as much larger as its step is faster (bft.train.spb.balanced_batches), so that
every rank computes for as long as a full one and the job processes more samples per step.

1. Time per step of one worker against its depth at batches 32 and 96 (one thread): medians over
   interleaved rounds. The step time is affine in the batch; the balanced batch of depth D is the one
   whose step takes as long as a full-depth step of 32 samples, and its speedup is that batch over 32.
   The balanced batches are then timed against a full rank's.
2. Samples/s of real 2-rank gloo jobs, full and in each configuration, against the prediction
   (1 + speedup) / 2.
3. Statistical efficiency: 2-rank training to a fixed number of samples, full and in each
   configuration, several seeds; the held-out loss against samples processed (mean over seeds). The
   efficiency of a configuration is the samples full backpropagation needs to reach the loss it has
   after half its samples, over the samples the configuration needs to reach it (capped at 1).
4. With --write-jobs DIR: jobs-digits-spb.jsonl (the digits job: curves measured at 1 and 2
   workers, its configurations with their measured efficiency) and, with --imagenet FILE, that
   workload with the same configurations added (jobs-imagenet-spb.jsonl): each job's configuration
   curve is its own curve times the throughput ratio of the configuration at n nodes,
   (ceil(n/2) + floor(n/2) * speedup) / n (the step time stays the full one's), and the measured
   efficiency.

    python bench/spb_measure.py [--seeds 8] \
        [--write-jobs DIR [--imagenet ../shared/data/jobs-imagenet-throughput-1001.jsonl]]

Prints Markdown tables (docs/spb.md has a run). About 5 minutes on the project's 2-vCPU machine.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F

from bft.jobs import FULL_CONFIGURATION
from bft.train.spb import PartialBackprop, balanced_batches

# The model and data of the runtime example, so that what is measured here is what it runs.
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples" / "runtime"))
from ddp_digits import STAGES, digits, spb_depths, stages  # noqa: E402

BATCH = 32  # per full-depth rank and step in the 2-rank runs
PARTIAL_DEPTHS = (2, 3)  # the configurations measured: spb-d2, spb-d3
# The runtime's measured resize gaps (docs/runtime.md, relaunch: grow 12.6 s, shrink 9.3 s, medians of
# 6 on this machine): the digits job's rescale costs.
SCALE_UP_S, SCALE_DOWN_S = 12.6, 9.3


def config_name(depth: int) -> str:
    return FULL_CONFIGURATION if depth == STAGES else f"spb-d{depth}"


def config_depths(depth: int, world: int) -> list:
    """Half the ranks (rounded up, rank 0 first) at full depth, the others at `depth`: the example's
    configuration spb-d<depth>."""
    return spb_depths(config_name(depth), world)


def step_time(parts, opt, x, y, depth: int, batch: int, steps: int) -> float:
    """Seconds per step (forward, backward through the last `depth` stages, SGD step)."""
    t0 = time.perf_counter()
    for k in range(steps):
        i = (k * batch) % (len(x) - batch)
        h = x[i:i + batch]
        with torch.no_grad():
            for s in parts[:STAGES - depth]:
                h = s(h)
        for s in parts[STAGES - depth:]:
            h = s(h)
        opt.zero_grad()
        F.cross_entropy(h, y[i:i + batch]).backward()
        opt.step()
    return (time.perf_counter() - t0) / steps


def step_times(rounds: int, steps: int, batches: tuple) -> dict:
    """Median seconds per step by (depth, batch), rounds interleaved so that load drifts hit every
    depth and batch alike."""
    torch.set_num_threads(1)
    x, y, _, _ = digits()
    parts = stages()
    opt = torch.optim.SGD([p for s in parts for p in s.parameters()], lr=0.01)
    times = {(d, b): [] for d in range(1, STAGES + 1) for b in batches}
    for _ in range(rounds):
        for key in times:
            times[key].append(step_time(parts, opt, x, y, key[0], key[1], steps))
    return {key: statistics.median(v) for key, v in times.items()}


def balancing_speedups(times: dict, small: int, large: int) -> dict:
    """Per partial depth d, the batch (as a multiple of BATCH) whose step at depth d takes as long as
    a full-depth step of BATCH samples: the step time is affine in the batch, fitted through the
    two batches measured."""
    def affine(d):
        slope = (times[(d, large)] - times[(d, small)]) / (large - small)
        return times[(d, small)] - slope * small, slope

    base, slope = affine(STAGES)
    full_step = base + slope * BATCH
    out = {}
    for d in range(1, STAGES):
        intercept, per_sample = affine(d)
        out[d] = max(1.0, (full_step - intercept) / per_sample / BATCH) if per_sample > 0 else 1.0
    return out


def balanced_times(rounds: int, steps: int, batch: int, speedup: dict) -> dict:
    """Median seconds per step of a full rank at `batch` and of each partial depth at its balanced batch."""
    torch.set_num_threads(1)
    x, y, _, _ = digits()
    parts = stages()
    opt = torch.optim.SGD([p for s in parts for p in s.parameters()], lr=0.01)
    sizes = {d: balanced_batches([STAGES, d], batch, speedup)[1] for d in PARTIAL_DEPTHS}
    sizes[STAGES] = batch
    times = {d: [] for d in sizes}
    for _ in range(rounds):
        for d, b in sizes.items():
            times[d].append(step_time(parts, opt, x, y, d, b, steps))
    return {d: (sizes[d], statistics.median(v)) for d, v in times.items()}


def worker(rank: int, world: int, rendezvous: str, job: dict, queue) -> None:
    """One rank of a 2-rank job: job["mode"] is "throughput" (samples/s over timed steps) or
    "train" (held-out loss and accuracy against samples processed)."""
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method="file://" + rendezvous, rank=rank, world_size=world)
    torch.manual_seed(job["seed"])
    depths, sizes = job["depths"], job["sizes"]
    model = PartialBackprop(stages(), depths, batch_sizes=sizes)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    x, y, test_x, test_y = digits()
    per_step = sum(sizes)
    # Every rank draws from the same shuffled stream: rank r takes its own slice of each step's samples.
    start = sum(sizes[:rank])
    rng = torch.Generator().manual_seed(job["seed"])
    order = torch.randperm(len(x), generator=rng)
    cursor, done, t0, curve = 0, 0, None, []
    steps = job.get("steps", 0)
    for step in range(10 ** 9):
        if job["mode"] == "throughput" and step == job["warmup"]:
            dist.barrier()
            t0 = time.perf_counter()
        if job["mode"] == "throughput" and step == job["warmup"] + steps:
            break
        if job["mode"] == "train" and done >= job["samples"]:
            break
        if cursor + per_step > len(order):
            order, cursor = torch.randperm(len(x), generator=rng), 0
        idx = order[cursor + start:cursor + start + sizes[rank]]
        cursor += per_step
        opt.zero_grad()
        F.cross_entropy(model(x[idx]), y[idx]).backward()
        model.sync_gradients()
        opt.step()
        done += per_step
        if job["mode"] == "train" and rank == 0 and (done // job["every"]) != ((done - per_step) // job["every"]):
            with torch.no_grad():
                out = model(test_x)
                accuracy = (out.argmax(1) == test_y).float().mean().item()
                curve.append((done, F.cross_entropy(out, test_y).item(), accuracy))
    if rank == 0:
        queue.put((per_step * steps) / (time.perf_counter() - t0) if job["mode"] == "throughput" else curve)
    dist.barrier()  # every rank arrives before any tears down (gloo)
    dist.destroy_process_group()


def run_job(world: int, job: dict):
    with tempfile.TemporaryDirectory() as tmp:
        ctx = mp.get_context("spawn")
        queue = ctx.Queue()
        procs = [ctx.Process(target=worker, args=(r, world, os.path.join(tmp, "rdv"), job, queue))
                 for r in range(world)]
        for p in procs:
            p.start()
        try:
            return queue.get(timeout=900)
        finally:
            for p in procs:
                p.join(timeout=60)
                if p.is_alive():
                    p.kill()


def job_sizes(depth: int, world: int, speedup: dict) -> tuple:
    depths = config_depths(depth, world)
    return depths, balanced_batches(depths, BATCH, speedup)


def samples_to_reach(curve: list, loss: float):
    """Samples at which a (samples, loss) curve first reaches `loss`, linearly interpolated."""
    for (s0, l0), (s1, l1) in zip(curve, curve[1:]):
        if l1 <= loss:
            return s0 + (s1 - s0) * (l0 - loss) / (l0 - l1) if l0 > l1 else s1
    return None


def mean_curve(curves: list) -> list:
    """(samples, mean loss, mean accuracy) at the checkpoints all curves share."""
    n = min(len(c) for c in curves)
    return [(curves[0][k][0], statistics.fmean(c[k][1] for c in curves), statistics.fmean(c[k][2] for c in curves))
            for k in range(n)]


def efficiency(full: list, config: list) -> float:
    """Samples full backpropagation needs for the loss the configuration reaches after half its
    samples, over the samples the configuration needs for it (both mean curves)."""
    half = config[len(config) // 2 - 1]
    target = half[1]
    need_full = samples_to_reach([(s, loss) for s, loss, _ in full], target)
    need_config = samples_to_reach([(s, loss) for s, loss, _ in config], target)
    if need_full is None:
        return 1.0  # full never gets there within the budget: the configuration is at least as good
    return need_full / need_config


def configuration_ratio(n: int, speedup: float) -> float:
    """Samples/s of a configuration over full backpropagation's on n nodes: ceil(n/2) full ranks and
    floor(n/2) partial ones taking `speedup` times the batch, in the same step time."""
    return (math.ceil(n / 2) + (n // 2) * speedup) / n if n > 0 else 1.0


def with_configurations(job: dict, speedup: dict, factor: dict) -> dict:
    out = dict(job)
    out["configurations"] = [
        {"name": config_name(d), "efficiency": round(factor[d], 4), "nodes": job["nodes"],
         "throughput": [round(v * configuration_ratio(n, speedup[d]), 3)
                        for n, v in zip(job["nodes"], job["throughput"])]}
        for d in PARTIAL_DEPTHS]
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seeds", type=int, default=8, help="training runs per configuration")
    p.add_argument("--samples", type=int, default=24_000, help="samples each training run processes")
    p.add_argument("--rounds", type=int, default=7, help="interleaved rounds of the timings")
    p.add_argument("--write-jobs", type=Path, metavar="DIR", help="write the measured workloads here")
    p.add_argument("--imagenet", type=Path, metavar="FILE",
                   help="with --write-jobs: a jobs file to add the measured configurations to")
    args = p.parse_args()

    small, large = BATCH, 3 * BATCH
    times = step_times(args.rounds, steps=60, batches=(small, large))
    speedup = balancing_speedups(times, small, large)
    print("Time per step of one worker (forward, backward through the last d stages, SGD step; one thread; "
          "medians of interleaved rounds):\n")
    print(f"| depth d (of 4) | ms per step, batch {small} | vs full | ms per step, batch {large} | vs full | "
          f"balanced batch (full: {BATCH}) |")
    print("|---|---|---|---|---|---|")
    for d in range(STAGES, 0, -1):
        balanced_batch = BATCH if d == STAGES else round(BATCH * speedup[d])
        print(f"| {d} | {times[(d, small)] * 1e3:.2f} | {times[(d, small)] / times[(STAGES, small)]:.2f} | "
              f"{times[(d, large)] * 1e3:.2f} | {times[(d, large)] / times[(STAGES, large)]:.2f} | {balanced_batch} |")
    balanced = balanced_times(args.rounds, steps=60, batch=BATCH, speedup=speedup)
    print(f"\nBalanced batches (a full rank takes {BATCH} samples):\n")
    print("| depth | batch | ms per step | vs the full rank's step |")
    print("|---|---|---|---|")
    for d in (STAGES,) + PARTIAL_DEPTHS:
        b, t = balanced[d]
        print(f"| {d} | {b} | {t * 1e3:.2f} | {t / balanced[STAGES][1]:.2f} |")

    print("\nSamples/s of 2-rank gloo jobs (one thread per rank; median of 3 runs of 150 timed steps):\n")
    print("| configuration | depths | batches | samples/s | vs full | predicted (1 + speedup) / 2 |")
    print("|---|---|---|---|---|---|")
    rates = {}
    for d in (STAGES,) + PARTIAL_DEPTHS:
        depths, sizes = job_sizes(d, 2, speedup)
        job = {"mode": "throughput", "seed": 0, "depths": depths, "sizes": sizes, "warmup": 20, "steps": 150}
        rates[d] = statistics.median(run_job(2, job) for _ in range(3))
        predicted = "-" if d == STAGES else f"{configuration_ratio(2, speedup[d]):.2f}"
        print(f"| {config_name(d)} | {depths} | {sizes} | {rates[d]:.0f} | {rates[d] / rates[STAGES]:.2f} "
              f"| {predicted} |", flush=True)
    one = statistics.median(run_job(1, {"mode": "throughput", "seed": 0, "depths": [STAGES], "sizes": [BATCH],
                                         "warmup": 20, "steps": 150}) for _ in range(3))
    print(f"\n1 rank at full depth: {one:.0f} samples/s")

    every = 750
    curves = {}
    for d in (STAGES,) + PARTIAL_DEPTHS:
        depths, sizes = job_sizes(d, 2, speedup)
        runs = [run_job(2, {"mode": "train", "seed": seed, "depths": depths, "sizes": sizes, "samples": args.samples,
                            "every": every}) for seed in range(args.seeds)]
        curves[d] = runs
    means = {d: mean_curve(c) for d, c in curves.items()}
    factors, intervals = {}, {}
    rng = random.Random(0)
    for d in PARTIAL_DEPTHS:
        factors[d] = efficiency(means[STAGES], means[d])
        # Bootstrap over seeds: resample each configuration's runs with replacement.
        boot = sorted(efficiency(mean_curve([rng.choice(curves[STAGES]) for _ in curves[STAGES]]),
                                 mean_curve([rng.choice(curves[d]) for _ in curves[d]])) for _ in range(200))
        intervals[d] = (boot[10], boot[189])
    print(f"\nTraining on 2 ranks to {args.samples} samples, {args.seeds} seeds (mean held-out loss and accuracy):\n")
    print("| configuration | loss / accuracy at 1/4 | at 1/2 | at the end | efficiency (90 % bootstrap interval) |")
    print("|---|---|---|---|---|")
    for d in (STAGES,) + PARTIAL_DEPTHS:
        m = means[d]
        cells = [f"{m[k][1]:.3f} / {m[k][2]:.3f}" for k in (len(m) // 4 - 1, len(m) // 2 - 1, len(m) - 1)]
        factor = "1" if d == STAGES else f"{factors[d]:.2f} ({intervals[d][0]:.2f}-{intervals[d][1]:.2f})"
        print(f"| {config_name(d)} | {' | '.join(cells)} | {factor} |", flush=True)

    if args.write_jobs is not None:
        args.write_jobs.mkdir(parents=True, exist_ok=True)
        capped = {d: min(1.0, factors[d]) for d in PARTIAL_DEPTHS}
        digits_job = {
            "name": "digits-cnn", "submit": 0, "min_nodes": 1, "max_nodes": 2, "work": 45_000.0,
            "scale_up_s": SCALE_UP_S, "scale_down_s": SCALE_DOWN_S, "nodes": [0, 1, 2],
            "throughput": [0.0, round(one, 1), round(rates[STAGES], 1)],
            "configurations": [{"name": config_name(d), "efficiency": round(capped[d], 4), "nodes": [0, 1, 2],
                                "throughput": [0.0, round(one, 1), round(rates[d], 1)]} for d in PARTIAL_DEPTHS],
        }
        (args.write_jobs / "jobs-digits-spb.jsonl").write_text(json.dumps(digits_job) + "\n")
        written = ["jobs-digits-spb.jsonl"]
        if args.imagenet is not None:
            lines = [json.dumps(with_configurations(json.loads(line), speedup, capped))
                     for line in args.imagenet.read_text().splitlines() if line.strip()]
            (args.write_jobs / "jobs-imagenet-spb.jsonl").write_text("\n".join(lines) + "\n")
            written.append("jobs-imagenet-spb.jsonl")
        print(f"\nwrote {', '.join(written)} to {args.write_jobs}/ (speedups "
              + ", ".join(f"d{d} {speedup[d]:.3f}" for d in PARTIAL_DEPTHS) + "; efficiencies "
              + ", ".join(f"d{d} {capped[d]:.3f}" for d in PARTIAL_DEPTHS) + ")")
    return 0


if __name__ == "__main__":
    sys.exit(main())
