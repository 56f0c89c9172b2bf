"""The replay's reference accounting (`accounting="reference"`) against an independent Python oracle
(reference_oracle.py) on Summit slices and on a hand-made trace."""

import gzip
import json

import pytest

from bft import sim
from reference_oracle import read_jobs_jsonl, read_trace_csv, replay_reference

TRACE_FILE = "summit-idle-nodes-2021-02.csv.gz"
JOBS_FILE = "jobs-imagenet-throughput-1001.jsonl"
DAY_S = 86400
SUMMIT_START_S = 72743  # the trace's 1,000th distinct time, the reference window's default start
AMOUNTS = ("samples_done", "samples_without_losses", "overhead_efficiency", "idle_node_hours", "used_node_hours",
           "makespan_s", "mean_turnaround_s")
EXACTLY = ("start_s", "end_s", "jobs_finished", "preemptions", "rescales", "events")


def close(value):
    return pytest.approx(value, rel=1e-9, abs=1e-6)


def write_jobs(path, jobs):
    path.write_text("".join(json.dumps(j) + "\n" for j in jobs))
    return path


def read_both(trace_path):
    """The trace as the engine reads it and as the oracle does."""
    return sim.read_trace(trace_path), read_trace_csv(trace_path)


def replay_both(traces, jobs, jobs_path, policy, node_names, **window):
    """(engine result, oracle result) for one replay; the engine reads the jobs from jobs_path."""
    engine_trace, oracle_trace = traces
    engine = sim.replay(engine_trace, jobs_path, policy, accounting="reference", nodes=node_names, max_jobs=10,
                        tfwd_s=10.0, **window)
    oracle = replay_reference(oracle_trace, jobs, policy, node_names, max_jobs=10, tfwd_s=10.0, **window)
    return engine, oracle


def assert_agree(engine, oracle):
    summary = engine.summary
    for key in EXACTLY:
        assert summary[key] == oracle.summary[key], key
    for key in AMOUNTS:
        if oracle.summary[key] is not None:  # makespan and turnaround need a finished job
            assert summary[key] == close(oracle.summary[key]), key
    # The engine lists every job; the oracle only those it admitted (the rest did nothing).
    assert set(oracle.jobs) <= set(engine.jobs["name"])
    not_admitted = {"finish_s": None, "done": 0.0, "preemptions": 0, "rescales": 0}
    for k, name in enumerate(engine.jobs["name"]):
        expected = oracle.jobs.get(name, not_admitted)
        finish = engine.jobs["finish_s"][k]
        assert (None if finish == -1 else finish) == expected["finish_s"], name
        assert engine.jobs["done"][k] == close(expected["done"]), name
        assert engine.jobs["preemptions"][k] == expected["preemptions"], name
        assert engine.jobs["rescales"][k] == expected["rescales"], name


@pytest.fixture(scope="module")
def summit(shared_data):
    """Both readings of the Summit trace, and the workload's jobs."""
    return read_both(shared_data / TRACE_FILE), read_jobs_jsonl(shared_data / JOBS_FILE)


@pytest.mark.parametrize("policy", ["equal_share", "exact"])
@pytest.mark.parametrize(
    "n_nodes, n_jobs, window",
    [
        (64, 20, dict(end_s=SUMMIT_START_S + DAY_S)),
        (256, 40, dict(end_s=SUMMIT_START_S + 2 * DAY_S)),
        (64, 30, dict(start_s=SUMMIT_START_S + 3600)),  # to the end of the trace or the last finish
    ],
)
def test_summit_slice_matches_the_oracle(summit, tmp_path, policy, n_nodes, n_jobs, window):
    traces, jobs = summit
    jobs = jobs[:n_jobs]
    node_names = traces[1].node_names[:n_nodes]  # the oracle's own order of first appearance
    engine, oracle = replay_both(traces, jobs, write_jobs(tmp_path / "jobs.jsonl", jobs), policy, node_names,
                                 **window)
    assert oracle.summary["jobs_finished"] > 0 and oracle.summary["preemptions"] > 0
    assert_agree(engine, oracle)


# Five subset nodes and one other (x). n3's line at the start is applied before the first event; x's lines
# are no events; n4 appears last, so its id is the highest.
HAND_TRACE = """time,node,state
0,n0,idle
0,n1,idle
3,x,idle
5,n2,idle
10,n3,idle
20,x,busy
30,n1,busy
40,n1,idle
50,n2,busy
60,n3,busy
70,n2,idle
80,n3,idle
100,n4,idle
300,n0,busy
"""
HAND_NODES = ["n0", "n1", "n2", "n3", "n4"]


def linear_job(name, submit, min_nodes, max_nodes, work, scale_down_s, nodes, throughput):
    return {"name": name, "submit": submit, "min_nodes": min_nodes, "max_nodes": max_nodes, "work": work,
            "scale_up_s": 1.0, "scale_down_s": scale_down_s, "nodes": nodes, "throughput": throughput,
            "objective": throughput}


# In file order B, A, C: FCFS admits A first; C arrives after end_s, outside the window.
HAND_JOBS = [
    linear_job("B", 15, 2, 4, 800.0, 15.0, [2, 4], [20.0, 30.0]),
    linear_job("A", 0, 1, 4, 900.0, 2.0, [1, 4], [10.0, 40.0]),
    linear_job("C", 200, 1, 4, 100.0, 1.0, [1, 4], [10.0, 40.0]),
]
HAND_WINDOW = dict(start_s=10, end_s=150)


@pytest.fixture
def hand_made(tmp_path):
    trace_path = tmp_path / "trace.csv.gz"
    with gzip.open(trace_path, "wt") as f:
        f.write(HAND_TRACE)
    return read_both(trace_path), write_jobs(tmp_path / "jobs.jsonl", HAND_JOBS)


def test_hand_made_equal_share_matches_the_oracle_and_a_hand_count(hand_made):
    traces, jobs_path = hand_made
    engine, oracle = replay_both(traces, HAND_JOBS, jobs_path, "equal_share", HAND_NODES, **HAND_WINDOW)
    # Counted by hand: A runs on 4 nodes from 10 (800 by 30), loses n1 at 30 (charge 2 s x 40/s), makes 300
    # more on 3 and finishes at 40 (1,020 of its 900: 120 lost). B then runs on 4 (300 by 50), loses n2 and n3
    # (charges of 15 s x 30/s and 15 s x 25/s take it to -150 and, after 250 more, -275), grows back at 70
    # and 80 (200 and 250 more; charges of 1 s x 20/s and 1 s x 25/s: 130 at 80) and has 730 of its 800 at
    # 100, the last event before end_s (had its losses stopped at 0 it would have 1,005 and be done).
    # Events: the start and the subset's 7 changes up to end_s.
    assert oracle.summary == {
        "start_s": 10.0, "end_s": 100.0, "samples_done": 1630.0, "samples_without_losses": 2700.0,
        "overhead_efficiency": 1630 / 2700, "idle_node_hours": 310 / 3600, "used_node_hours": 310 / 3600,
        "jobs_finished": 1, "makespan_s": 30.0, "mean_turnaround_s": 40.0, "preemptions": 3, "rescales": 2,
        "events": 8,
    }
    assert {name: job["finish_s"] for name, job in oracle.jobs.items()} == {"A": 40.0, "B": None}
    assert_agree(engine, oracle)


def test_hand_made_exact_matches_the_oracle(hand_made):
    traces, jobs_path = hand_made
    assert_agree(*replay_both(traces, HAND_JOBS, jobs_path, "exact", HAND_NODES, **HAND_WINDOW))
