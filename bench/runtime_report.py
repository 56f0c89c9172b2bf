"""Runtime bench: bft.train.report()'s cost per call, outside a manager (no-op) and under one (a UDP
receiver); medians, never pass/fail (bench/README.md, "Runtime").

    python bench/runtime_report.py [--repeats 7] [--calls 200000]

Run with the build on PYTHONPATH (``PYTHONPATH=build/dev/python .venv/bin/python bench/runtime_report.py ...``).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys


def bench_report(repeats: int, calls: int) -> None:
    """Per-call cost of bft.train.report, outside a manager (no-op) and under one (a UDP receiver)."""
    code = f"""
import os, socket, statistics, sys, time, timeit
mode = sys.argv[1]
if mode == "manager":
    rx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); rx.bind(("127.0.0.1", 0))
    os.environ.update(BFT_JOB_ID="bench", BFT_JOB_SECRET="ab" * 32, BFT_GENERATION="1",
                      BFT_REPORT_ADDR="127.0.0.1:%d" % rx.getsockname()[1], BFT_REPORT_INTERVAL_S="0.5")
import bft.train as bt
bt.report(0)
per_call = []
for r in range({repeats}):
    n = [r * {calls}]
    def step():
        n[0] += 1
        bt.report(n[0])
    t = timeit.timeit(step, number={calls})
    base = timeit.timeit(lambda: n.__setitem__(0, n[0] + 1), number={calls})
    per_call.append((t - base) / {calls})
print(statistics.median(per_call) * 1e9)
"""
    env = dict(os.environ)
    for mode in ("plain", "manager"):
        out = subprocess.run([sys.executable, "-c", code, mode], env=env, capture_output=True, text=True, check=True)
        print(f"report() {mode:8s}: median {float(out.stdout.split()[-1]):.0f} ns per call "
              f"({repeats} runs of {calls:,} calls, loop overhead subtracted)")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=7)
    p.add_argument("--calls", type=int, default=200_000)
    a = p.parse_args()
    bench_report(a.repeats, a.calls)


if __name__ == "__main__":
    main()
