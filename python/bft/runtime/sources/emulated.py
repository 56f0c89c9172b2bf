"""An emulated training job for load tests: the real contract of bft.train, no computing.

A load-testing tool, never a default. Submitted as a job's script under a manager run with
``--source local --local-emulate`` (docs/runtime.md, "Load testing: the emulated launcher")::

    bft submit python/bft/runtime/sources/emulated.py --samples 1.3e8 -- \\
        --curve '{"nodes": [0, 1, 64], "throughput": [0, 7115, 202135]}' --time-scale 100 \\
        --scale-up-s 17.8 --scale-down-s 11.3

One process stands for all nodes of a generation (the source tells it the node count in
WORLD_SIZE). It resumes from its checkpoint, stalls for the job's true rescale cost, then advances
its samples at the true curve's rate at that node count, times the time scale (the manager's clock
is wall time, the curve's is trace time), and reports them with bft.train.report (job secret and
MAC included). On SIGTERM it checkpoints and exits with bft.train.EXIT_RESIZE, as a real script;
at the job's target it exits 0. The manager learns the curve from the reports, as for a real job.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import bft.train as bt
from bft import curve

STEP_S = 0.02  # wall seconds between emulated steps: how soon a SIGTERM is noticed
LAUNCHED_ENV = "BFT_EMULATED_LAUNCH_S"  # wall time the source started this process (set by local.py)


def parse(argv):
    p = argparse.ArgumentParser(prog="bft.runtime.sources.emulated", description=__doc__.splitlines()[0])
    p.add_argument("--curve", required=True, help='true curve: {"nodes": [...], "throughput": [...]} (samples/s)')
    p.add_argument("--time-scale", type=float, default=1.0, help="trace seconds per wall second (default %(default)g)")
    p.add_argument("--scale-up-s", type=float, default=0.0, help="trace seconds stalled when the job grows")
    p.add_argument("--scale-down-s", type=float, default=0.0, help="trace seconds stalled when it shrinks")
    args = p.parse_args(argv)
    try:
        c = json.loads(args.curve)
        args.curve = curve.ThroughputCurve([int(n) for n in c["nodes"]], [float(v) for v in c["throughput"]])
    except (ValueError, KeyError, TypeError) as e:
        p.error(f"--curve: {e}")
    if not args.time_scale > 0 or args.scale_up_s < 0 or args.scale_down_s < 0:
        p.error("--time-scale must be > 0, --scale-up-s and --scale-down-s >= 0")
    return args


def main(argv=None) -> int:
    args = parse(argv)
    world = bt.world_size()
    launched = float(os.environ.get(LAUNCHED_ENV) or time.time())
    state = bt.resume({"samples": 0.0, "world": 0})
    work = bt.target_samples()
    # The stall counts from the launch: the interpreter's own start-up is part of the job's true cost.
    cost = args.scale_up_s if world > state["world"] else args.scale_down_s if world < state["world"] else 0.0
    start = launched + cost / args.time_scale
    rate = float(args.curve.evaluate(world)) * args.time_scale  # samples per wall second
    while True:
        samples = state["samples"] + rate * max(0.0, time.time() - start)
        if work is not None and samples >= work:
            samples = float(work)
        if samples > state["samples"]:
            bt.report(samples)  # the first report marks the first step at this size
        if bt.should_stop() or (work is not None and samples >= work):
            bt.checkpoint({"samples": samples, "world": world})
            if samples >= (work or float("inf")):
                return 0  # bft.train flushes the last report at exit
            bt.exit_for_resize()
        time.sleep(STEP_S)


if __name__ == "__main__":
    sys.exit(main())
