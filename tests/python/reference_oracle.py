"""An independent oracle for the replay's reference accounting (`bft.sim.replay(..., accounting="reference")`).

Written from the accounting rules alone, without reading the sim engine: it parses the trace CSV and the
jobs JSONL itself and steps from event to event in plain Python. Only the exact policy's node choice
comes from the library (`bft.allocate`), since that policy *is* the allocator.
"""

import csv
import gzip
import json
from dataclasses import dataclass, field

import numpy as np

import bft

REFERENCE_START_INDEX = 1000  # the window starts at the trace's 1,000th distinct time (1-based)
ALLOCATION_FIELDS = ("name", "min_nodes", "max_nodes", "scale_up_s", "scale_down_s", "nodes", "throughput", "objective")


@dataclass
class CsvTrace:
    times: np.ndarray  # int64, non-decreasing
    nodes: np.ndarray  # node ids: index in order of first appearance
    idle: np.ndarray  # bool: the node becomes idle (else busy)
    node_names: list


def read_trace_csv(path) -> CsvTrace:
    """The `time,node,state` CSV (gzip), with node ids in order of first appearance."""
    ids, times, nodes, idle = {}, [], [], []
    with gzip.open(path, "rt", newline="") as f:
        for row in csv.DictReader(f):
            times.append(int(row["time"]))
            nodes.append(ids.setdefault(row["node"], len(ids)))
            idle.append(row["state"] == "idle")
    return CsvTrace(np.array(times, dtype=np.int64), np.array(nodes, dtype=np.int64), np.array(idle), list(ids))


def read_jobs_jsonl(path) -> list:
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def throughput(job: dict, n: int) -> float:
    """Samples/s on n nodes: piecewise linear, from (0, 0) below the first breakpoint, flat past the last."""
    xs, ys = list(job["nodes"]), list(job["throughput"])
    if xs[0] > 0:
        xs, ys = [0] + xs, [0.0] + ys
    return float(np.interp(n, xs, ys))


@dataclass(eq=False)  # jobs are compared by identity
class JobState:
    spec: dict
    nodes: set = field(default_factory=set)
    rate: float = 0.0
    done: float = 0.0
    finish: float = None
    preemptions: int = 0
    rescales: int = 0

    def charge(self, loss: float):
        # Taken in full: done may go below 0.
        self.done -= loss


@dataclass
class OracleResult:
    summary: dict
    jobs: dict  # name -> {"finish_s": float or None, "done", "preemptions", "rescales"}


def _equal_share_counts(running: list, pool_size: int) -> list:
    """The reference replayer's equal share: floor(N/J) only if it exceeds min_nodes, then FCFS top-ups."""
    share = pool_size // len(running)
    counts = [min(share, j.spec["max_nodes"]) if share > j.spec["min_nodes"] else 0 for j in running]
    leftover = pool_size - sum(counts)
    for k, j in enumerate(running):
        if counts[k] >= j.spec["max_nodes"]:
            continue
        grown = min(j.spec["max_nodes"], counts[k] + leftover)
        if grown < j.spec["min_nodes"]:
            continue
        leftover -= grown - counts[k]
        counts[k] = grown
    return counts


def _apply_equal_share(running: list, idle: set, holder: dict):
    counts = _equal_share_counts(running, len(idle))
    for j, n in zip(running, counts):
        if n < len(j.nodes):
            for node in sorted(j.nodes)[n:]:
                j.nodes.discard(node)
                del holder[node]
    free = sorted(idle - holder.keys())
    for j, n in zip(running, counts):
        if n > len(j.nodes):
            taken, free = free[: n - len(j.nodes)], free[n - len(j.nodes) :]
            j.nodes.update(taken)
            holder.update((node, j) for node in taken)


def _apply_exact(running: list, idle: set, holder: dict, tfwd_s: float):
    jobs = [{k: j.spec[k] for k in ALLOCATION_FIELDS if k in j.spec} for j in running]
    current = {node: j.spec["name"] for node, j in holder.items()}
    result = bft.allocate(jobs, sorted(idle), current, tfwd=tfwd_s, solver="exact")
    by_name = {j.spec["name"]: j for j in running}
    changes = [(by_name[a.id], [int(n) for n in a.released], [int(n) for n in a.added]) for a in result.jobs]
    for j, released, _ in changes:  # every release first, so an added node is never still held
        for node in released:
            j.nodes.discard(node)
            del holder[node]
    for j, _, added in changes:
        j.nodes.update(added)
        holder.update((node, j) for node in added)


def replay_reference(trace: CsvTrace, jobs: list, policy: str, node_names: list, max_jobs: int = 10,
                     tfwd_s: float = 10.0, start_s=None, end_s=None) -> OracleResult:
    subset = {trace.node_names.index(name) for name in node_names}
    start = float(start_s) if start_s is not None else float(np.unique(trace.times)[REFERENCE_START_INDEX - 1])
    bound = float(end_s) if end_s is not None else float(trace.times[-1])

    # Initial state: transitions up to the start; a node is busy before its first one.
    idle = set()
    # time -> [(node, becomes idle)] in file order; dicts keep insertion order. Every time in it but the
    # start changes some subset node's state: the published replayer's events, up to the one at which the
    # last job finishes.
    events = {start: []}
    rows = np.isin(trace.nodes, list(subset)) & (trace.times <= bound)
    for t, node, becomes_idle in zip(trace.times[rows].tolist(), trace.nodes[rows].tolist(), trace.idle[rows].tolist()):
        if t <= start:
            (idle.add if becomes_idle else idle.discard)(node)
        else:
            events.setdefault(float(t), []).append((node, becomes_idle))

    in_window = [j for j in jobs if j["submit"] <= bound]
    queue = sorted(in_window, key=lambda j: j["submit"])  # stable: line order breaks ties
    states = {}  # name -> JobState, in admission order
    holder = {}  # node -> JobState holding it
    idle_node_s = used_node_s = ideal = 0.0
    previous = None
    processed = 0  # events looked at, the one that ends the window included
    for t, transitions in events.items():
        processed += 1
        running = [j for j in states.values() if j.finish is None]
        # a. Progress over (previous, t] at the rates decided at the previous event, even past the work.
        if previous is not None:
            dt = t - previous
            for j in running:
                j.done += j.rate * dt
                ideal += j.rate * dt
            idle_node_s += len(idle) * dt
            used_node_s += len(holder) * dt
        previous = t
        # b. Transitions: a reclaimed node leaves its job, which pays scale-down at its old rate.
        preempted = []
        for node, becomes_idle in transitions:
            if becomes_idle:
                idle.add(node)
                continue
            idle.discard(node)
            owner = holder.pop(node, None)
            if owner is not None:
                owner.nodes.discard(node)
                if owner not in preempted:
                    preempted.append(owner)
        for j in preempted:
            j.preemptions += 1
            j.charge(j.spec["scale_down_s"] * j.rate)
        # c. Completions, judged after the charges, free their nodes; what a job made past its work is lost.
        for j in running:
            if j.done >= j.spec["work"]:
                j.done = j.spec["work"]
                j.finish = t
                for node in j.nodes:
                    del holder[node]
                j.nodes.clear()
        # d. Everyone in the window has finished: the window ends here.
        if len(states) == len(in_window) and all(j.finish is not None for j in states.values()):
            break
        # e. Admission, FCFS, up to max_jobs running.
        running = [j for j in states.values() if j.finish is None]
        while len(running) < max_jobs and queue and queue[0]["submit"] <= t:
            spec = queue.pop(0)
            states[spec["name"]] = JobState(spec)
            running.append(states[spec["name"]])
        # f. Allocation over the idle nodes, then g. rescale charges at the old count's throughput.
        if running and idle:
            before = [len(j.nodes) for j in running]
            if policy == "equal_share":
                _apply_equal_share(running, idle, holder)
            elif policy == "exact":
                _apply_exact(running, idle, holder, tfwd_s)
            else:
                raise ValueError(f"the oracle knows no policy {policy!r}")
            for j, c in zip(running, before):
                n = len(j.nodes)
                if c >= j.spec["min_nodes"] and n != c:
                    j.rescales += 1
                    j.charge((j.spec["scale_up_s"] if n > c else j.spec["scale_down_s"]) * throughput(j.spec, c))
        # h. The rate until the next event.
        for j in running:
            n = len(j.nodes)
            j.rate = throughput(j.spec, n) if n >= j.spec["min_nodes"] else 0.0
    end = previous

    samples_done = sum(j.done for j in states.values())
    finished = [j for j in states.values() if j.finish is not None]
    summary = {
        "start_s": start,
        "end_s": end,
        "samples_done": samples_done,
        "samples_without_losses": ideal,
        "overhead_efficiency": samples_done / ideal if ideal > 0 else 1.0,
        "idle_node_hours": idle_node_s / 3600,
        "used_node_hours": used_node_s / 3600,
        "jobs_finished": len(finished),
        "makespan_s": max(j.finish for j in finished) - start if finished else None,
        "mean_turnaround_s": float(np.mean([j.finish - j.spec["submit"] for j in finished])) if finished else None,
        "preemptions": sum(j.preemptions for j in states.values()),
        "rescales": sum(j.rescales for j in states.values()),
        "events": processed,
    }
    per_job = {
        j.spec["name"]: {"finish_s": j.finish, "done": j.done, "preemptions": j.preemptions, "rescales": j.rescales}
        for j in states.values()
    }
    return OracleResult(summary, per_job)
