#!/usr/bin/env python3
"""Latencies of the Slurm node source on the real test cluster (tests/slurm/cluster.sh).

Adoption: a node held by a main job is freed (scancel of that job) -> slurmctld allocates it to
the pending pilot (first seen RUNNING by squeue, polled every 20 ms) -> the pilot's step reports
and the source emits the join -> a command launched with SlurmNodeSource.launch runs on the node
(it writes its own start time). slurmd starts the pilot's batch script only once the previous
job on the node is torn down, which is most of "freed -> join".

Reclaim: a main-partition job is submitted -> it runs, on an idle cluster (no pilots), on nodes
all held by pilots that the manager releases as soon as it is told (reclaim_done on the reclaim
event: nothing to vacate), and on nodes held by pilots that are never released (Slurm enforces
the partition's GraceTime). Where pilots hold the nodes, also submitted -> the source emits the
reclaim (the pilot's own report, which carries the grace time). Medians over --repeat samples;
measurements, never pass/fail.

Load on slurmctld (--sdiag-minutes M, instead of the above): the source with its defaults (poll
every 2 s, 2 pilots pending, no node cap) for M minutes with every node held by a pilot (steady),
then M minutes of churn (one-node main jobs submitted, preempting a pilot the manager releases at
once, and cancelled, a pending pilot then taking the node). `sdiag --reset` before and `sdiag`
after each phase give RPCs per minute by message type; the bench's own squeue/sbatch/scancel calls
are counted and reported beside them. Churn also gives "node freed (scancel) -> join emitted".

    PYTHONPATH=build/dev/python .venv/bin/python bench/slurm_bench.py [--repeat 7] [--cluster-dir DIR]
    PYTHONPATH=build/dev/python .venv/bin/python bench/slurm_bench.py --sdiag-minutes 2
"""

import argparse
import collections
import logging
import os
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from bft.runtime import source_class

ROOT = Path(__file__).resolve().parents[1]
CLUSTER_SH = ROOT / "tests" / "slurm" / "cluster.sh"
SlurmNodeSource = source_class("slurm")  # through the registry, as bft manager finds it


def squeue(*args):
    out = subprocess.run(["squeue", "--noheader", *args, "--format=%i|%T|%N|%j"], check=True,
                         capture_output=True, text=True).stdout
    return [dict(zip(("id", "state", "node", "name"), line.split("|"))) for line in out.splitlines()]


def wait_until(pred, timeout_s, what, step_s=0.02):
    deadline = time.monotonic() + timeout_s
    while True:
        value = pred()
        if value:
            return value
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what}: not within {timeout_s} s")
        time.sleep(step_s)


def sbatch(*args):
    return subprocess.run(["sbatch", "--parsable", "--output=/dev/null", *args], check=True,
                          capture_output=True, text=True).stdout.strip()


def running(job_id):
    return any(r["state"] == "RUNNING" for r in squeue(f"--jobs={job_id}"))


def gone(job_id):
    return not squeue(f"--jobs={job_id}")


class Events:
    def __init__(self):
        self.items, self.cond, self.on_reclaim = [], threading.Condition(), None

    def __call__(self, e):
        with self.cond:
            self.items.append(e)
            self.cond.notify_all()
        if e.kind == "reclaim" and self.on_reclaim:
            self.on_reclaim(e)

    def held(self):
        held = set()
        with self.cond:
            for e in self.items:
                (held.add if e.kind == "join" else held.discard)(e.node)
        return held

    def wait_new(self, kind, since, timeout_s):
        deadline = time.monotonic() + timeout_s
        with self.cond:
            while True:
                found = [e for e in self.items[since:] if e.kind == kind]
                if found:
                    return found[0]
                left = deadline - time.monotonic()
                if left <= 0:
                    raise RuntimeError(f"no {kind} event within {timeout_s} s")
                self.cond.wait(left)


def adoption(repeat, state_dir, out_dir):
    """Node freed -> pilot running -> join emitted -> launched command running, on one node."""
    rest = sbatch("--partition=main", "--nodes=7", "--exclude=n8", "--wrap=sleep 3600")  # only n8 moves
    wait_until(lambda: running(rest), 10, "7-node main job running")
    src = SlurmNodeSource("bench-adopt", state_dir / "adopt", partition="pilot", manager_address="127.0.0.1",
                          pending=1, max_nodes=1, poll_s=2.0, pilot_output="/dev/null")
    ev = Events()
    ev.on_reclaim = lambda e: src.reclaim_done(e.node)
    samples = []
    try:
        src.start(ev)
        for i in range(repeat):
            # n8 busy with a main job (preempting the pilot of the previous round), a pilot pending.
            hold = sbatch("--partition=main", "--nodes=1", "--nodelist=n8", "--wrap=sleep 3600")
            wait_until(lambda hold=hold: running(hold), 20, "main job on n8")
            wait_until(lambda: any(r["state"] == "PENDING" for r in squeue(f"--name={src.job_name}")), 10,
                       "a pending pilot")
            since = len(ev.items)
            t_free = time.time()
            subprocess.run(["scancel", hold], check=True)
            pilot_rows = wait_until(lambda: [r for r in squeue(f"--name={src.job_name}") if r["state"] == "RUNNING"],
                                    20, "pilot running")
            t_pilot = time.time()
            join = ev.wait_new("join", since, 20)
            marker = out_dir / f"started-{i}"
            t_launch = time.time()
            command = f"date +%s.%N > {marker}.tmp && mv {marker}.tmp {marker}; exec sleep 3600"
            proc = src.launch(join.node, ["bash", "-c", command], {}, out_dir / f"cmd-{i}.log")
            wait_until(marker.exists, 20, "launched command")
            t_cmd = float(marker.read_text())
            samples.append((t_pilot - t_free, join.time_s - t_free, t_cmd - join.time_s, t_cmd - t_launch,
                            t_cmd - t_free))
            print(f"  adoption {i + 1}: freed->pilot running {samples[-1][0]:.2f} s, ->join {samples[-1][1]:.2f} s, "
                  f"join->command running {samples[-1][2]:.2f} s (pilot {pilot_rows[0]['id']})", flush=True)
            os.killpg(proc.pid, 15)
            proc.wait(timeout=30)
    finally:
        src.stop(release=True)
        subprocess.run(["scancel", rest], check=True)
        wait_until(lambda: not squeue(), 30, "empty queue", step_s=0.2)
    return samples


def main_job_waits(repeat, ev=None):
    """Submitted -> running for each main job; with pilots (ev), also submitted -> reclaim emitted."""
    waits, announced = [], []
    for _ in range(repeat):
        if ev is not None:  # every node held by a pilot, so that the main job has to preempt one
            wait_until(lambda: len(ev.held()) == 8, 30, "8 nodes held", step_s=0.1)
            since = len(ev.items)
        t = time.time()
        job = sbatch("--partition=main", "--nodes=1", "--wrap=sleep 3600")
        wait_until(lambda job=job: running(job), 60, "main job running")
        waits.append(time.time() - t)
        if ev is not None:
            announced.append(ev.wait_new("reclaim", since, 30).time_s - t)
        subprocess.run(["scancel", job], check=True)
        wait_until(lambda job=job: gone(job), 30, "main job gone")
    return waits, announced


def reclaim(repeat, state_dir):
    """Main-job waits per mode, and the reclaim announcement latencies of the pilot modes."""
    result, announced = {"no pilots": main_job_waits(repeat)[0]}, {}
    for mode, release in (("pilots, released at once", True), ("pilots, held for the grace time", False)):
        src = SlurmNodeSource(f"bench-{'release' if release else 'hold'}", state_dir / mode.replace(" ", "_"),
                              partition="pilot", manager_address="127.0.0.1", pending=8, max_nodes=8,
                              poll_s=2.0, pilot_output="/dev/null")
        ev = Events()
        if release:
            ev.on_reclaim = lambda e, s=src: s.reclaim_done(e.node)
        try:
            src.start(ev)
            result[mode], announced[mode] = main_job_waits(repeat, ev)
        finally:
            src.stop(release=True)
            wait_until(lambda: not squeue(), 30, "empty queue", step_s=0.2)
    return result, announced


def sdiag_rpcs():
    """sdiag's RPC counts: ({message type: count}, {user: count})."""
    out = subprocess.run(["sdiag"], check=True, capture_output=True, text=True).stdout
    by_type, by_user, section = {}, {}, None
    for line in out.splitlines():
        if "statistics by message type" in line:
            section = by_type
        elif "statistics by user" in line:
            section = by_user
        elif "Pending RPC" in line:
            section = None
        m = re.match(r"\s+(\S+)\s+\(\s*\d+\)\s+count:(\d+)", line)
        if m and section is not None:
            section[m.group(1)] = int(m.group(2))
    return by_type, by_user


class Counted:
    """The bench's own Slurm commands, by command, so that they can be told from the source's RPCs."""

    def __init__(self):
        self.calls = collections.Counter()

    def squeue(self, *args):
        self.calls["squeue"] += 1
        return squeue(*args)

    def sbatch(self, *args):
        self.calls["sbatch"] += 1
        return sbatch(*args)

    def scancel(self, job):
        self.calls["scancel"] += 1
        subprocess.run(["scancel", job], check=True)


def sdiag_load(minutes, state_dir):
    """RPCs per minute on slurmctld with pilots holding every node (steady), then with churn."""
    src = SlurmNodeSource("bench-sdiag", state_dir / "sdiag", partition="pilot", manager_address="127.0.0.1",
                          pilot_output="/dev/null")  # default poll (2 s), pending (2), no node cap
    ev = Events()
    ev.on_reclaim = lambda e: src.reclaim_done(e.node)
    phases, freed_join = {}, []
    try:
        src.start(ev)
        wait_until(lambda: len(ev.held()) == 8, 60, "8 nodes held", step_s=0.1)
        time.sleep(5)  # the start-up submissions settle
        for phase in ("steady", "churn"):
            own = Counted()
            subprocess.run(["sdiag", "--reset"], check=True, capture_output=True)
            t0 = time.monotonic()
            end = t0 + minutes * 60
            if phase == "steady":
                time.sleep(minutes * 60)  # the bench itself sends nothing to slurmctld
            while phase == "churn" and time.monotonic() < end:
                wait_until(lambda: len(ev.held()) == 8, 30, "8 nodes held", step_s=0.1)
                since = len(ev.items)
                job = own.sbatch("--partition=main", "--nodes=1", "--wrap=sleep 3600")
                ev.wait_new("reclaim", since, 30)
                wait_until(lambda job=job, own=own: any(r["state"] == "RUNNING" for r in own.squeue(f"--jobs={job}")),
                           30, "main job running", step_s=0.5)
                time.sleep(2)
                since = len(ev.items)
                t_free = time.time()
                own.scancel(job)
                freed_join.append(ev.wait_new("join", since, 30).time_s - t_free)
            by_type, by_user = sdiag_rpcs()
            phases[phase] = (time.monotonic() - t0, by_type, by_user, dict(own.calls))
    finally:
        src.stop(release=True)
        wait_until(lambda: not squeue(), 30, "empty queue", step_s=0.2)
    return phases, freed_join


def print_sdiag(phases, freed_join):
    picks = ("REQUEST_JOB_INFO", "REQUEST_JOB_INFO_SINGLE", "REQUEST_JOB_USER_INFO", "REQUEST_PARTITION_INFO",
             "REQUEST_SUBMIT_BATCH_JOB", "REQUEST_CANCEL_JOB", "REQUEST_KILL_JOB", "REQUEST_JOB_STEP_CREATE")
    print("\n| RPCs per minute (sdiag) | " + " | ".join(phases) + " |\n|---|" + "---:|" * len(phases))
    rows = [("total", lambda t: sum(t.values()))] + [(k, lambda t, k=k: t.get(k, 0)) for k in picks]
    for name, get in rows:
        print(f"| {name} | " + " | ".join(f"{get(bt) / (secs / 60):.1f}" for secs, bt, _, _ in phases.values()) + " |")
    for phase, (secs, by_type, by_user, own) in phases.items():
        print(f"\n{phase}: {secs:.0f} s; bench's own commands {own or 'none'}; by user {by_user}")
        print("  all types: " + ", ".join(f"{k} {v}" for k, v in sorted(by_type.items(), key=lambda kv: -kv[1])))
    if freed_join:
        print(f"\nnode freed (scancel of the main job) -> join emitted, during churn ({len(freed_join)} samples): "
              f"{fmt(freed_join)}")


def fmt(xs):
    return f"{statistics.median(xs):.2f} s (min {min(xs):.2f}, max {max(xs):.2f})"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=7, help="samples per measurement (default %(default)s)")
    ap.add_argument("--sdiag-minutes", type=float, default=0,
                    help="instead of the latencies: slurmctld's load (sdiag) over this many minutes per phase")
    ap.add_argument("--cluster-dir", type=Path, help="use (or start) the test cluster here; default: a temporary one")
    args = ap.parse_args()
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s: %(message)s")
    with tempfile.TemporaryDirectory(prefix="bft-slurm-bench-") as tmp:
        tmp = Path(tmp)
        cluster = args.cluster_dir or tmp / "cluster"
        r = subprocess.run([str(CLUSTER_SH), "start", str(cluster)], capture_output=True, text=True)
        if r.returncode != 0:
            sys.exit(f"cluster.sh start failed:\n{r.stderr}")
        os.environ.update(re.findall(r"^export (\w+)=(.*)$", r.stdout, re.M))
        try:
            grace = re.search(r"GraceTime=(\d+)", subprocess.run(["scontrol", "show", "partition", "pilot"],
                              capture_output=True, text=True).stdout).group(1)
            if args.sdiag_minutes > 0:
                print(f"Slurm test cluster: 8 nodes, pilot partition GraceTime={grace} s, sdiag over "
                      f"{args.sdiag_minutes} min per phase", flush=True)
                sdiag_result = sdiag_load(args.sdiag_minutes, tmp / "state")
            else:
                print(f"Slurm test cluster: 8 nodes, pilot partition GraceTime={grace} s, {args.repeat} samples "
                      "each", flush=True)
                adopt = adoption(args.repeat, tmp / "state", tmp)
                waits, announced = reclaim(args.repeat, tmp / "state")
        finally:
            if args.cluster_dir is None:
                subprocess.run([str(CLUSTER_SH), "stop", str(cluster)], capture_output=True)
    if args.sdiag_minutes > 0:
        print_sdiag(*sdiag_result)
        return
    cols = list(zip(*adopt))
    print("\n| measurement | median (min, max) |\n|---|---|")
    print(f"| node freed -> pilot allocated (squeue RUNNING) | {fmt(cols[0])} |")
    print(f"| node freed -> join emitted | {fmt(cols[1])} |")
    print(f"| join emitted -> launched command running | {fmt(cols[2])} |")
    print(f"| launch() called -> command running | {fmt(cols[3])} |")
    print(f"| node freed -> command running | {fmt(cols[4])} |")
    for mode, w in waits.items():
        print(f"| main job submitted -> running, {mode} | {fmt(w)} |")
    for mode, w in announced.items():
        print(f"| main job submitted -> reclaim emitted (pilot's report), {mode} | {fmt(w)} |")


if __name__ == "__main__":
    main()
