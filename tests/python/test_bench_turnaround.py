"""bench/turnaround_bound.py and bench/turnaround_probes.py: the fluid-LP bound is a lower bound (no
replay of the exact policy beats it), the probes run, and bad input is reported in one line with exit
status 2."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from bft import sim
from runtime_util import REPO, python_env

pytest.importorskip("scipy")

BOUND = REPO / "bench" / "turnaround_bound.py"
PROBES = REPO / "bench" / "turnaround_probes.py"


def run_script(script, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(script), *args], env=python_env(), capture_output=True, text=True,
                          timeout=300)


def write_synthetic(tmp_path, seed: int):
    trace, jobs = sim.generate_synthetic(seed=seed, nodes=96, duration_s=4 * 86400, mean_idle_nodes=30, jobs=12,
                                         mean_interarrival_s=1800)
    trace_path, jobs_path = tmp_path / f"trace{seed}.csv", tmp_path / f"jobs{seed}.jsonl"
    sim.write_trace(trace, trace_path)
    sim.write_jobs(jobs, jobs_path)
    return trace_path, jobs_path


@pytest.mark.parametrize("seed", [1, 2])
def test_no_replay_of_the_exact_policy_beats_the_bound(tmp_path, seed):
    trace_path, jobs_path = write_synthetic(tmp_path, seed)
    r = run_script(BOUND, "--trace", str(trace_path), "--jobs", str(jobs_path), "--max-jobs", "4", "--interval", "3600")
    assert r.returncode == 0, r.stderr
    assert "can finish within the trace" not in r.stdout, r.stdout  # every job finishes: the bound is whole
    ratios = {acc: float(x) for acc, x in re.findall(r"exact, (\w+) accounting: .* \(bound = ([0-9.]+) x\)", r.stdout)}
    assert set(ratios) == {"continuous", "reference"}, r.stdout
    assert all(0 < x <= 1 for x in ratios.values()), r.stdout


def test_the_probes_compare_each_variant_with_exact_as_given(tmp_path):
    trace_path, jobs_path = write_synthetic(tmp_path, 1)
    r = run_script(PROBES, "--trace", str(trace_path), "--jobs", str(jobs_path), "--max-jobs", "4")
    assert r.returncode == 0, r.stderr
    rows = [line for line in r.stdout.splitlines() if line.startswith("| ") and " d (" in line]
    assert len(rows) == 10, r.stdout
    assert rows[0].startswith("| exact | as given | ") and rows[0].count("(1.000)") == 2, r.stdout
    # Without rescale costs nothing is lost in continuous accounting: overhead efficiency 100 %. Reference
    # accounting still loses what a job makes between being done and the event that notices it.
    free = [row.split("|")[3:5] for row in rows if "no rescale costs" in row]
    assert len(free) == 2, r.stdout
    assert all(continuous.strip().endswith(", 100.0%") for continuous, _ in free), r.stdout
    assert not any(reference.strip().endswith(", 100.0%") for _, reference in free), r.stdout


def test_the_probes_replay_with_the_rescale_costs_given(tmp_path):
    """--rescale-costs 0 0 is the "no rescale costs" variant under another name: the same figures."""
    trace_path, jobs_path = write_synthetic(tmp_path, 1)
    r = run_script(PROBES, "--trace", str(trace_path), "--jobs", str(jobs_path), "--max-jobs", "4",
                   "--rescale-costs", "0", "0")
    assert r.returncode == 0, r.stderr
    rows = [line.split("|") for line in r.stdout.splitlines() if line.startswith("| ") and " d (" in line]
    free = {row[1]: row[3:] for row in rows if row[2].strip() == "no rescale costs"}
    given = {row[1]: row[3:] for row in rows if row[2].strip() == "rescale costs 0 s / 0 s"}
    assert len(free) == 2 and given == free, r.stdout


@pytest.mark.parametrize("script, extra, message", [
    (BOUND, ["--nodes", "0:500"], "--nodes 0:500: positions A:B need A < B <= 96"),
    (BOUND, ["--nodes", "n-nowhere"], 'node "n-nowhere" is not in the trace'),
    (BOUND, ["--max-jobs", "0"], "max_jobs must be >= 1"),
    (BOUND, ["--interval", "0"], "--interval 0: must be > 0 seconds"),
    (PROBES, ["--nodes", "0:500"], "--nodes 0:500: positions A:B need A < B <= 96"),
    (PROBES, ["--max-jobs", "0"], "max_jobs must be >= 1"),
])
def test_bad_options_are_one_line_and_exit_2(tmp_path, script, extra, message):
    trace_path, jobs_path = write_synthetic(tmp_path, 1)
    r = run_script(script, "--trace", str(trace_path), "--jobs", str(jobs_path), *extra)
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert message in r.stderr.strip().splitlines()[-1], r.stderr


@pytest.mark.parametrize("script", [BOUND, PROBES])
def test_a_bad_jobs_file_is_reported_with_its_line(tmp_path, script):
    trace_path, jobs_path = write_synthetic(tmp_path, 1)
    jobs_path.write_text(jobs_path.read_text().replace('"max_nodes": ', '"max_nodes": -', 1))
    r = run_script(script, "--trace", str(trace_path), "--jobs", str(jobs_path))
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert re.search(r"jobs1\.jsonl:1: ", r.stderr), r.stderr
