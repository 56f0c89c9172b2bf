"""The Slurm demo (``./dev.sh slurm-demo``): training on the holes a main-queue workload leaves.

Starts the 8-node Slurm test cluster (tests/slurm/cluster.sh; with ``--hosts N``, the multi-host one:
N compute hosts and a login host, each a network namespace, the manager on the login host and the
workload scaled to N nodes), plays a scripted main-queue workload twice — once alone, once while
``bft manager --source slurm`` keeps pilot jobs in the preemptible partition and trains two DDP jobs
submitted with no curve — and prints the idle node-time the main queue left, the share of it used by
training, the samples trained, and how much longer each main job waited because of the pilots.
``--resize inplace`` resizes the jobs in place (examples/runtime/elastic_synthetic.py, an
ElasticState loop) instead of relaunching them (examples/runtime/ddp_synthetic.py). ``--step-s S``
paces the training steps (each takes at least S seconds): on one host all nodes share its cores, so
an unpaced job trains no faster on more nodes, its learned curve is flat and the allocator leaves
joining nodes idle by choice; a paced job scales as it would on nodes with cores of their own.
Everything it starts is stopped at the end.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path
from typing import Dict, List, Tuple

REPO = Path(__file__).resolve().parents[2]
ACTIVE = ("PENDING", "RUNNING", "CONFIGURING", "COMPLETING")
CLUSTER = REPO / "tests" / "slurm" / "cluster.sh"
NODES = 8  # of the one-host cluster
# Main-queue jobs on 8 nodes: (submit offset s, nodes, run time s). They leave holes of various sizes
# and lengths. On N hosts each job asks for its share of N (scaled(), rounded half up, at least 1).
WORKLOAD = [(0, 4, 60), (0, 2, 40), (20, 3, 50), (60, 6, 40), (80, 1, 60), (110, 8, 30), (150, 3, 30),
            (150, 2, 40), (175, 5, 25)]


def scaled(nodes: int, hosts: int) -> int:
    return max(1, (nodes * hosts + NODES // 2) // NODES)


def sh(*args: str, env=None, check=True) -> str:
    return subprocess.run(list(args), env=env, check=check, capture_output=True, text=True).stdout


def job_times(job_id: str) -> Dict[str, float]:
    """A job's state and, once it has ended, its submit, start and end times (whole seconds, local time)."""
    out = sh("scontrol", "show", "job", "--oneliner", job_id)
    times: Dict[str, float] = {"state": re.search(r"\bJobState=(\S+)", out).group(1)}
    if times["state"] not in ACTIVE:
        for key in ("SubmitTime", "StartTime", "EndTime"):
            value = re.search(rf"\b{key}=(\S+)", out).group(1)
            times[key] = datetime.strptime(value, "%Y-%m-%dT%H:%M:%S").timestamp()
    return times


def play_workload(hosts: int) -> List[Dict[str, float]]:
    """Submits WORKLOAD to the main partition on schedule; returns each job's times once it ended
    (read while Slurm still shows the job: it forgets ended jobs after MinJobAge)."""
    t0 = time.time()
    ids: List[str] = []
    ended: Dict[str, Dict[str, float]] = {}
    while len(ended) < len(WORKLOAD):
        while len(ids) < len(WORKLOAD) and time.time() >= t0 + WORKLOAD[len(ids)][0]:
            _, nodes, seconds = WORKLOAD[len(ids)]
            nodes = scaled(nodes, hosts)
            ids.append(sh("sbatch", "--parsable", "--partition=main", f"--nodes={nodes}", "--output=/dev/null",
                          f"--wrap=sleep {seconds}").strip())
        for k, job_id in enumerate(ids):
            if job_id not in ended:
                t = job_times(job_id)
                if t["state"] not in ACTIVE:
                    t["nodes"] = scaled(WORKLOAD[k][1], hosts)
                    t["job"] = int(job_id)
                    ended[job_id] = t
        time.sleep(1)
    return [ended[i] for i in ids]


def window(jobs) -> Tuple[float, float]:
    return min(j["SubmitTime"] for j in jobs), max(j["EndTime"] for j in jobs)


def idle_node_s(jobs, hosts: int) -> float:
    start, end = window(jobs)
    return hosts * (end - start) - sum(j["nodes"] * (j["EndTime"] - j["StartTime"]) for j in jobs)


def _samples_at(counts: List[Tuple[float, float]], t: float) -> float:
    """The samples a job had trained by time t, from its (time_s, samples) progress records."""
    return max([s for when, s in counts if when <= t], default=0.0)


# Reports come every 0.4-0.6 s while a job steps; a longer pause between two is not training.
STEPPING_GAP_S = 2.0


def training(state_dir: Path, start: float, end: float) -> Tuple[float, float, float]:
    """Within [start, end]: (node-seconds the training jobs' processes ran, node-seconds they were
    stepping, samples trained). Stepping: between two progress records of one generation at the
    same size, at most STEPPING_GAP_S apart, with samples trained in between; so a process's
    start-up, a restore and a resize count as running but not as stepping."""
    from bft.runtime.statedb.store import StateStore

    store = StateStore(state_dir / "state.db", create=False, read_only=True)
    node_s = 0.0
    for p in store.db.execute("SELECT started_s, ended_s FROM procs WHERE local_rank = 0"):  # a node once
        lo, hi = max(start, p["started_s"]), min(end, p["ended_s"] or end)
        node_s += max(0.0, hi - lo)
    stepping_s = samples = 0.0
    progress = list(store.progress())
    for job in store.jobs():
        records = [r for r in progress if r["job"] == job.id]
        for a, b in zip(records, records[1:]):
            if (a["generation"] == b["generation"] and a["nodes"] == b["nodes"] and b["samples"] > a["samples"]
                    and b["time_s"] - a["time_s"] <= STEPPING_GAP_S):
                stepping_s += b["nodes"] * max(0.0, min(end, b["time_s"]) - max(start, a["time_s"]))
        counts = [(r["time_s"], r["samples"]) for r in records]
        samples += _samples_at(counts, end) - _samples_at(counts, start)
    store.close()
    return node_s, stepping_s, samples


def pilot_caused_waits(shared: List[Dict[str, float]], start: float, end: float) -> List[float]:
    """Each main job's wait caused by the pilots, as `bft report` measures it from Slurm's records
    (bft.runtime.ops.sacct_wait: time in [Eligible, Start) while a pilot held one of its nodes and no
    other main job did); read once every pilot has ended (the test cluster's job-completion log
    has ended jobs only)."""
    from bft.runtime.ops import sacct_wait
    from bft.runtime.sources.slurm_commands import PILOT_PREFIX

    jobs, source = sacct_wait.read(start - 60, end + 60)
    pilots = {j.name for j in jobs if j.name.startswith(PILOT_PREFIX)}
    measured = sacct_wait.added_wait(jobs, pilots, since_s=start, until_s=end)
    missing = [j["job"] for j in shared if str(j["job"]) not in measured.per_job]
    if missing:
        raise SystemExit(f"slurm_demo: {source} has no record of main jobs {missing}")
    return [measured.per_job[str(j["job"])] for j in shared]


def stop_tagged(state_dir: Path) -> None:
    """Ends what a killed manager left on this host (found by its identity tag)."""
    from bft.runtime import terminate_tagged
    from bft.runtime.statedb.store import StateStore

    store = StateStore(state_dir / "state.db", create=False, read_only=True)
    identity = store.meta("identity")
    store.close()
    if identity:
        terminate_tagged(identity, 5.0)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--keep", action="store_true", help="keep the working directory (logs, state)")
    p.add_argument("--hosts", type=int, default=0,
                   help="run on the multi-host test cluster with this many compute hosts (needs root and ip netns)")
    p.add_argument("--resize", choices=("relaunch", "inplace"), default="relaunch",
                   help="how the manager resizes the training jobs (default relaunch)")
    p.add_argument("--procs-per-node", type=int, default=1, metavar="N",
                   help="training processes on each node (bft manager --procs-per-node; default 1)")
    p.add_argument("--step-s", type=float, default=0.0,
                   help="seconds each training step takes at least (default 0: as fast as the cores allow)")
    args = p.parse_args()
    if not 0 <= args.step_s <= 60:
        p.error(f"--step-s must be in 0..60 seconds, got {args.step_s}")
    if not 1 <= args.procs_per_node <= 8:
        p.error(f"--procs-per-node must be in 1..8, got {args.procs_per_node}")
    script = {"relaunch": "ddp_synthetic.py", "inplace": "elastic_synthetic.py"}[args.resize]
    if not 0 <= args.hosts <= 99:
        p.error(f"--hosts must be in 1..99, got {args.hosts}")
    hosts = args.hosts or NODES
    work = Path(tempfile.mkdtemp(prefix="bft-slurm-demo-"))
    where = f"{args.hosts} compute hosts and a login host" if args.hosts else "8 nodes on this host"
    print(f"starting the Slurm test cluster ({where}) in {work}/cluster ...", flush=True)
    out = sh(str(CLUSTER), "start", str(work / "cluster"), *(["--hosts", str(args.hosts)] if args.hosts else []))
    env = dict(re.findall(r"^export (\w+)=(.*)$", out, re.M))
    os.environ["SLURM_CONF"] = env["SLURM_CONF"]
    on_login: List[str] = []  # the manager's command prefix: on the login host of a multi-host cluster
    bind: List[str] = []
    if args.hosts:
        os.environ["PATH"] = f"{env['BFT_SLURM_BIN']}{os.pathsep}{os.environ['PATH']}"  # commands run on login
        on_login = [os.path.join(env["BFT_SLURM_BIN"], "on-host"), "login"]
        bind = ["--bind", env["BFT_SLURM_LOGIN_ADDR"]]
    manager = None
    try:
        print(f"1/2: the main-queue workload alone ({len(WORKLOAD)} jobs) ...", flush=True)
        alone = play_workload(hosts)
        print(f"2/2: the same workload with bft manager --source slurm and two training jobs (resize "
              f"{args.resize}, {args.procs_per_node} process(es) per node"
              f"{f', steps of {args.step_s:g} s' if args.step_s else ''}) ...", flush=True)
        state = work / "state"
        manager = subprocess.Popen(
            [*on_login, sys.executable, "-m", "bft", "manager", "--state-dir", str(state), "--source", "slurm",
             *bind, "--slurm-partition", "pilot", "--slurm-pending", "2", "--slurm-poll-s", "1", "--grace", "4",
             "--resize", args.resize, "--procs-per-node", str(args.procs_per_node)],
            stdout=open(work / "manager.log", "wb"), stderr=subprocess.STDOUT, start_new_session=True)
        for _ in range(300):
            if subprocess.run([sys.executable, "-m", "bft", "status", "--state-dir", str(state)],
                              capture_output=True).returncode == 0:
                break
            time.sleep(0.2)
        for name in ("train-a", "train-b"):
            sh(sys.executable, "-m", "bft", "submit", str(REPO / "examples/runtime" / script),
               "--state-dir", str(state), "--name", name, "--min", "1", "--max", str(hosts), "--samples", "1e12",
               *(["--", "--step-s", str(args.step_s)] if args.step_s else []))
        time.sleep(20)  # pilots adopt the idle machine and the jobs start, as on a machine in service
        shared = play_workload(hosts)
        print(sh(sys.executable, "-m", "bft", "status", "--state-dir", str(state)))
        sh(sys.executable, "-m", "bft", "manager", "stop", "--state-dir", str(state))
        manager.wait(120)
        manager = None
        start, end = window(shared)
        idle = idle_node_s(shared, hosts)
        used, stepping, samples = training(state, start, end)
        added = [(b["StartTime"] - b["SubmitTime"]) - (a["StartTime"] - a["SubmitTime"]) for a, b in zip(alone, shared)]
        caused = pilot_caused_waits(shared, start, end)
        print(f"window: {end - start:.0f} s on {hosts} nodes; main jobs completed: "
              f"{sum(j['state'] == 'COMPLETED' for j in shared)}/{len(shared)}")
        print(f"idle node-time left by the main queue: {idle:.0f} node-s "
              f"({idle / (hosts * (end - start)):.0%} of the machine)")
        print(f"used by training: {used:.0f} node-s = {used / idle:.0%} of the idle node-time "
              f"(stepping: {stepping:.0f} node-s = {stepping / idle:.0%}; the rest start-ups, restores, resizes)")
        print(f"samples trained in the window: {samples:,.0f}")
        print(f"main jobs' added wait (with pilots - alone), s: median {statistics.median(added):+.0f}, "
              f"max {max(added):+.0f}, per job {', '.join(f'{a:+.0f}' for a in added)}")
        print(f"main jobs' wait caused by the pilots (sacct, as bft report measures it), s: median "
              f"{statistics.median(caused):.0f}, max {max(caused):.0f}, "
              f"per job {', '.join(f'{c:.0f}' for c in caused)}")
        return 0
    finally:
        if manager is not None and manager.poll() is None:
            manager.kill()
            manager.wait(10)
            stop_tagged(work / "state")
        ids = sh("squeue", "--noheader", "--format=%i", check=False).split()
        if ids:
            sh("scancel", *ids, check=False)
        sh(str(CLUSTER), "stop", str(work / "cluster"), check=False)
        if not args.keep:
            subprocess.run(["rm", "-rf", str(work)])
        else:
            print(f"kept {work}")


if __name__ == "__main__":
    sys.exit(main())
