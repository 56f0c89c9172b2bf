"""The benches a centre runs are tools too (bench/README.md): every bad argument is one line naming the
flag, exit status 2, before anything long runs; no output is written over an input; and the commands
bench/README.md documents run on a small case."""

from __future__ import annotations

import importlib
import json
import sys

import pytest

from bft import sim
from runtime_util import REPO, run_bench_script


@pytest.fixture(scope="module")
def workload(tmp_path_factory):
    """A small synthetic trace, workload and curve (what the benches read)."""
    root = tmp_path_factory.mktemp("bench-inputs")
    trace, jobs = sim.generate_synthetic(seed=2, nodes=64, duration_s=86400, mean_idle_nodes=20, jobs=6,
                                         mean_interarrival_s=1800)
    sim.write_trace(trace, root / "trace.csv")
    sim.write_jobs(jobs, root / "jobs.jsonl")
    (root / "curve.json").write_text(json.dumps({"nodes": [0, 1, 2, 4], "throughput": [0.0, 7.0, 12.0, 15.0]}))
    return root


def one_line(r, script: str, *needles: str) -> None:
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"{script}: error: ") and "Traceback" not in r.stderr, r.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]


GPT = ("--scale-up-s", "3", "--scale-down-s", "2")


@pytest.mark.parametrize("args,needle", [
    (("--policy", "bogus"), "argument --policy: unknown policy 'bogus'"),
    (("--max-jobs", "0"), "argument --max-jobs: expected a whole number >= 1, got 0"),
    (("--tfwd", "-1"), "argument --tfwd"), (("--tfwd", "nan"), "argument --tfwd"),
    (("--scale-up-s", "1e300"), "argument --scale-up-s"),
    (("--gpt-jobs", "-5"), "argument --gpt-jobs: expected a whole number >= 1, got -5"),
])
def test_gpt_replay_bad_arguments_are_one_line_naming_the_flag(workload, args, needle):
    r = run_bench_script("gpt_replay.py", "--trace", str(workload / "trace.csv"), "--jobs",
                         str(workload / "jobs.jsonl"), "--gpt-curve", str(workload / "curve.json"), "--out",
                         str(workload / "out"), *GPT, *args)
    one_line(r, "gpt_replay", needle)


def test_gpt_replay_never_writes_its_output_over_its_input(workload, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    mixed = out / "jobs-mixed.jsonl"
    mixed.write_bytes((workload / "jobs.jsonl").read_bytes())
    before = mixed.read_bytes()
    r = run_bench_script("gpt_replay.py", "--trace", str(workload / "trace.csv"), "--jobs", str(mixed),
                         "--gpt-curve", str(workload / "curve.json"), "--out", str(out), *GPT)
    one_line(r, "gpt_replay", "would be written over the --jobs input")
    assert mixed.read_bytes() == before


@pytest.mark.parametrize("args,needle", [
    (("--max-jobs", "0"), "argument --max-jobs"), (("--first-jobs", "0"), "argument --first-jobs"),
    (("--start", "-1"), "argument --start"), (("--policy", "bogus"), "argument --policy"),
    (("--start", "10", "--end", "5"), "--end (5) must be after --start (10)"),
])
def test_learned_diagnose_bad_arguments_are_one_line_naming_the_flag(workload, args, needle):
    r = run_bench_script("learned_diagnose.py", "--trace", str(workload / "trace.csv"), "--jobs",
                         str(workload / "jobs.jsonl"), *args)
    one_line(r, "learned_diagnose", needle)


def test_learned_diagnose_jobs_csv_is_checked_before_the_replays_and_never_the_workload(workload, tmp_path):
    common = ("--trace", str(workload / "trace.csv"), "--jobs", str(workload / "jobs.jsonl"))
    before = (workload / "jobs.jsonl").read_bytes()
    one_line(run_bench_script("learned_diagnose.py", *common, "--jobs-csv", str(workload / "jobs.jsonl")),
             "learned_diagnose", "would be written over the --jobs input")
    assert (workload / "jobs.jsonl").read_bytes() == before
    one_line(run_bench_script("learned_diagnose.py", *common, "--jobs-csv", str(tmp_path / "no" / "such.csv")),
             "learned_diagnose", "--jobs-csv", "cannot be written")


@pytest.mark.parametrize("args,needle", [
    (("--node-sets", "0:32,0:32"), "--node-sets: 0:32 is given twice"),
    (("--node-sets", "0:32,32:64", "--seeds", "0"), "argument --seeds"),
    (("--node-sets", "0:32,32:64", "--max-jobs", "-3"), "argument --max-jobs"),
])
def test_learned_crossval_bad_arguments_are_one_line(workload, args, needle):
    r = run_bench_script("learned_crossval.py", "--trace", str(workload / "trace.csv"), "--jobs",
                         str(workload / "jobs.jsonl"), *args)
    one_line(r, "learned_crossval", needle)


def test_learned_crossval_scores_a_cell_where_no_job_finished_without_dividing_by_zero():
    """A learned replay that finished no job (mean turnaround 0) against an oracle that did: the jobs
    ratio (0) is the cell's score, not a ZeroDivisionError after every replay ran."""
    sys.path.insert(0, str(REPO / "bench"))
    try:
        crossval = importlib.import_module("learned_crossval")
    finally:
        sys.path.remove(str(REPO / "bench"))

    class Replay:
        def __init__(self, samples, finished, turnaround):
            self.summary = {"samples_done": samples, "jobs_finished": finished, "mean_turnaround_s": turnaround}

    ratios = crossval._ratios(Replay(10.0, 0, 0.0), Replay(20.0, 2, 100.0))
    assert ratios == (0.5, 0.0, 0.0) and crossval._worst(ratios) == 0.0
    assert crossval._ratios(Replay(0.0, 0, 0.0), Replay(0.0, 0, 0.0)) == (1.0, 1.0, 1.0)


@pytest.mark.parametrize("args,needle", [
    (("--time-scale", "0"), "argument --time-scale"), (("--nodes", "0"), "argument --nodes"),
    (("--jobs", "0"), "argument --jobs"), (("--kills", "-1"), "argument --kills"),
])
def test_chaos_bench_arguments_are_checked_before_anything_runs(args, needle):
    one_line(run_bench_script("chaos_bench.py", *args), "chaos_bench", needle)


@pytest.mark.slow
@pytest.mark.runtime
def test_runtime_resize_bench_as_documented_prints_each_methods_costs():
    """bench/README.md's `runtime_resize.py --cycles 3`, on the smallest case (one cycle of 2 nodes,
    one method): it ended in KeyError 'scale_up_s' after its first method's cycles (the cost status's
    cold_start entry has no such key)."""
    pytest.importorskip("torch", reason="the resize bench runs a real manager (torch==2.13.0)")
    r = run_bench_script("runtime_resize.py", "--cycles", "1", "--nodes", "2", "--method", "relaunch",
                         "--period", "10", "--launches", "0")
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr[-2000:]
    assert "advisor's measured costs, relaunch" in r.stdout and "inplace up" in r.stdout, r.stdout

