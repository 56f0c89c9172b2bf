"""bench/learned_crossval.py: it chooses among the candidates on the first node sets only, reports every
cell (node set, objective, policy, accounting) with the held-out sets marked, and bad input is one line
with exit status 2."""

from __future__ import annotations

import re
import subprocess

from bft import sim
from runtime_util import run_bench_script


def run_script(*args: str) -> subprocess.CompletedProcess:
    return run_bench_script("learned_crossval.py", *args)


def tiny_workload(tmp_path):
    trace, jobs = sim.generate_synthetic(seed=2, nodes=96, duration_s=86400, mean_idle_nodes=40, jobs=8,
                                         mean_interarrival_s=1800)
    trace_path, jobs_path = tmp_path / "trace.csv", tmp_path / "jobs.jsonl"
    sim.write_trace(trace, trace_path)
    sim.write_jobs(jobs, jobs_path)
    return str(trace_path), str(jobs_path)


def test_options_are_chosen_on_the_first_sets_and_every_cell_is_reported(tmp_path):
    trace, jobs = tiny_workload(tmp_path)
    r = run_script("--trace", trace, "--jobs", jobs, "--node-sets", "0:32,32:64,64:96", "--choose-on", "1",
                   "--candidate", "exploration_bonus=1", "--candidate", "exploration_bonus=0.5",
                   "--seeds", "2", "--policies", "exact", "--max-jobs", "3", "--start", "0")
    assert r.returncode == 0, r.stderr
    assert "choosing on 0:32; held out: 32:64, 64:96" in r.stdout, r.stdout
    assert len(re.findall(r"\(chosen\)", r.stdout)) == 1, r.stdout
    rows = re.findall(r"^\| (\d+:\d+) \| (choosing|held out) \| (\w+) \| exact \| (\w+) \| ([0-9.]+)", r.stdout, re.M)
    cells = {(s, objective, accounting) for s, _, objective, accounting, _ in rows}
    assert cells == {(s, o, a) for s in ("0:32", "32:64", "64:96") for o in ("throughput", "speedup")
                     for a in ("continuous", "reference")}, r.stdout
    assert all((group == "choosing") == (s == "0:32") for s, group, *_ in rows), r.stdout
    assert re.search(r"^held out: \d+ of 8 cells", r.stdout, re.M), r.stdout


def test_overlapping_node_sets_are_one_line_and_exit_status_2(tmp_path):
    trace, jobs = tiny_workload(tmp_path)
    r = run_script("--trace", trace, "--jobs", jobs, "--node-sets", "0:48,32:96", "--choose-on", "1")
    assert r.returncode == 2
    assert r.stderr.strip() == ("learned_crossval: error: --node-sets: 32:96 overlaps an earlier set "
                                "(the sets must be disjoint)"), r.stderr


def test_a_bad_candidate_is_named_before_replaying(tmp_path):
    r = run_script("--trace", str(tmp_path / "missing.csv"), "--jobs", str(tmp_path / "missing.jsonl"),
                   "--node-sets", "0:8,8:16", "--candidate", "exploration_bonus=x")
    assert r.returncode == 2
    assert r.stderr.strip() == "learned_crossval: error: --advisor exploration_bonus: 'x' is not a number", r.stderr
