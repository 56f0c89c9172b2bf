"""bench/gpt_replay.py: the GPT jobs join the workload with the measured curve and costs, both replays
report each workload, and a bad curve is one line with exit status 2."""

from __future__ import annotations

import json
import re
import subprocess

from bft import sim
from runtime_util import run_bench_script


def run_script(*args: str) -> subprocess.CompletedProcess:
    return run_bench_script("gpt_replay.py", *args)


def test_gpt_jobs_join_the_workload_with_their_curve_and_each_workload_is_reported(tmp_path):
    trace, jobs = sim.generate_synthetic(seed=2, nodes=64, duration_s=86400, mean_idle_nodes=20, jobs=6,
                                         mean_interarrival_s=1800)
    sim.write_trace(trace, tmp_path / "trace.csv")
    sim.write_jobs(jobs, tmp_path / "jobs.jsonl")
    curve = {"nodes": [0, 1, 2, 4], "throughput": [0.0, 7.0, 12.0, 15.0]}
    (tmp_path / "curve.json").write_text(json.dumps(curve))
    r = run_script("--trace", str(tmp_path / "trace.csv"), "--jobs", str(tmp_path / "jobs.jsonl"), "--gpt-curve",
                   str(tmp_path / "curve.json"), "--gpt-jobs", "3", "--gpt-work", "5000", "--scale-up-s", "3.5",
                   "--scale-down-s", "2", "--out", str(tmp_path / "out"))
    assert r.returncode == 0, r.stderr
    mixed = sim.read_jobs(tmp_path / "out" / "jobs-mixed.jsonl")
    gpt = [j for j in mixed if j.name.endswith("-GPT")]
    assert len(mixed) == len(jobs) + 3 and len(gpt) == 3
    assert all(j.nodes == curve["nodes"] and j.throughput == curve["throughput"] and j.max_nodes == 4
               and (j.scale_up_s, j.scale_down_s, j.work) == (3.5, 2.0, 5000.0) for j in gpt)
    counts = re.findall(r"^  (base|GPT)\s+jobs finished \d+/(\d+),", r.stdout, re.M)
    assert counts == [("base", str(len(jobs))), ("base", str(len(jobs))), ("GPT", "3")], r.stdout


def test_a_bad_curve_is_one_line_and_exit_status_2(tmp_path):
    (tmp_path / "curve.json").write_text(json.dumps({"nodes": [1, 2], "throughput": [5.0]}))
    r = run_script("--trace", str(tmp_path / "t.csv"), "--jobs", str(tmp_path / "j.jsonl"), "--gpt-curve",
                   str(tmp_path / "curve.json"), "--scale-up-s", "1", "--scale-down-s", "1", "--out", str(tmp_path))
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("gpt_replay: error: --gpt-curve"), r.stderr
