"""bench/learned_diagnose.py: it replays the five curve modes, its attribution adds up to the learned
replay's shortfall, it writes one row per job, and bad input is one line with exit status 2."""

from __future__ import annotations

import csv
import re
import subprocess
import sys

from bft import sim
from runtime_util import REPO, python_env

SCRIPT = REPO / "bench" / "learned_diagnose.py"


def run_script(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *args], env=python_env(), capture_output=True, text=True,
                          timeout=300)


def test_the_shortfall_is_attributed_and_every_job_gets_a_row(tmp_path):
    trace, jobs = sim.generate_synthetic(seed=2, nodes=96, duration_s=2 * 86400, mean_idle_nodes=30, jobs=12,
                                         mean_interarrival_s=1800)
    trace_path, jobs_path, table = tmp_path / "trace.csv", tmp_path / "jobs.jsonl", tmp_path / "jobs.csv"
    sim.write_trace(trace, trace_path)
    sim.write_jobs(jobs, jobs_path)
    r = run_script("--trace", str(trace_path), "--jobs", str(jobs_path), "--max-jobs", "4", "--jobs-csv", str(table))
    assert r.returncode == 0, r.stderr
    replays = r"oracle|learned|learned_curves|learned_curves, no bonus|learned_costs"
    rows = re.findall(rf"^\| ({replays}) \|.*\| ([0-9.]+) \|$", r.stdout, re.M)
    assert [row[0] for row in rows] == ["oracle", "learned", "learned_curves", "learned_curves, no bonus",
                                        "learned_costs"], r.stdout
    assert all(0.0 <= float(row[1]) <= 1.0 for row in rows), r.stdout  # the idle node-time used
    total = float(re.search(r"learned against oracle: ([-+0-9.]+) %", r.stdout).group(1))
    parts = [float(x) for x in re.findall(r"^  (?:wrong costs|exploration|curves).*:\s+([-+0-9.]+) %$", r.stdout, re.M)]
    assert len(parts) == 3, r.stdout
    assert abs(sum(parts) - total) < 0.02, r.stdout
    with open(table, encoding="utf-8") as f:
        assert [row["job"] for row in csv.DictReader(f)] == [job.name for job in jobs]


def test_bad_input_is_one_line_and_exit_status_2(tmp_path):
    r = run_script("--trace", str(tmp_path / "missing.csv"), "--jobs", str(tmp_path / "missing.jsonl"))
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("learned_diagnose: error: "), r.stderr


def test_advisor_options_are_checked_before_replaying(tmp_path):
    # The trace is missing too: the bad option is reported first, as bft replay reports it.
    r = run_script("--trace", str(tmp_path / "missing.csv"), "--jobs", str(tmp_path / "missing.jsonl"),
                   "--advisor", "fit.extrapolation_limit=0.5")
    assert r.returncode == 2
    expected = "learned_diagnose: error: --advisor fit options: extrapolation_limit 0.5 must be finite and >= 1"
    assert r.stderr.strip() == expected, r.stderr


def test_a_fitted_truth_and_the_oracle_perturbations_are_reported(tmp_path):
    trace, jobs = sim.generate_synthetic(seed=2, nodes=96, duration_s=2 * 86400, mean_idle_nodes=30, jobs=12,
                                         mean_interarrival_s=1800)
    trace_path, jobs_path = tmp_path / "trace.csv", tmp_path / "jobs.jsonl"
    sim.write_trace(trace, trace_path)
    sim.write_jobs(jobs, jobs_path)
    oracles = {}
    for truth in ("workload", "fit", "fit-at-breakpoints"):
        r = run_script("--trace", str(trace_path), "--jobs", str(jobs_path), "--max-jobs", "4", "--truth", truth,
                       "--oracle-perturbations", "2")
        assert r.returncode == 0, r.stderr
        assert f"truth {truth};" in r.stdout, r.stdout
        oracles[truth] = re.search(r"^\| oracle \| ([0-9.e+-]+) \|", r.stdout, re.M).group(1)
        perturbed = re.search(r"perturbed within \+-0.5 %.*seeds 0..1: ([0-9.]+), ([0-9.]+);", r.stdout)
        assert perturbed is not None, r.stdout
        assert all(0.5 < float(x) < 2.0 for x in perturbed.groups()), r.stdout
    # The fitted truths are other workloads: the oracle's figure moves.
    assert oracles["fit"] != oracles["workload"] and oracles["fit-at-breakpoints"] != oracles["workload"], oracles


def test_a_negative_perturbation_count_is_refused(tmp_path):
    r = run_script("--trace", str(tmp_path / "missing.csv"), "--jobs", str(tmp_path / "missing.jsonl"),
                   "--oracle-perturbations", "-1")
    assert r.returncode == 2
    assert r.stderr.strip() == ("learned_diagnose: error: argument --oracle-perturbations: expected a whole number "
                                ">= 0, got -1"), r.stderr
