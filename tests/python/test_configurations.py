"""Configurations (structured partial backpropagation) in the job format, bft.allocate and bft replay."""

import json
import re
from pathlib import Path

import pytest

import bft
from bft import cli, sim

TRACE = "time,node,state\n0,a,idle\n0,b,idle\n100,b,busy\n200,b,idle\n"
# 10/s on 1 node, 18 on 2; "spb" processes 12 and 40 at efficiency 0.5: worth 6 and 20.
JOB = {
    "name": "j", "submit": 0, "min_nodes": 1, "max_nodes": 2, "work": 1e6, "scale_up_s": 5.0,
    "scale_down_s": 3.0, "nodes": [0, 1, 2], "throughput": [0.0, 10.0, 18.0],
    "configurations": [{"name": "spb", "efficiency": 0.5, "throughput": [0.0, 12.0, 40.0]}],
}


def write_inputs(tmp_path, job=JOB):
    (tmp_path / "t.csv").write_text(TRACE)
    (tmp_path / "j.jsonl").write_text(json.dumps(job) + "\n")
    return tmp_path / "t.csv", tmp_path / "j.jsonl"


def test_the_jobs_format_carries_configurations_both_ways(tmp_path):
    _, path = write_inputs(tmp_path)
    jobs = sim.read_jobs(path)
    (c,) = jobs[0].configurations
    assert (c.name, c.efficiency) == ("spb", 0.5)
    assert list(c.throughput.values) == [0.0, 12.0, 40.0]
    sim.write_jobs(jobs, tmp_path / "back.jsonl")
    back = json.loads((tmp_path / "back.jsonl").read_text())
    assert back["configurations"] == [{"name": "spb", "efficiency": 0.5, "nodes": [0, 1, 2],
                                       "throughput": [0, 12, 40], "objective": [0, 12, 40]}]
    assert [f[0] for f in sim.configuration_fields()] == ["name", "efficiency", "nodes", "throughput", "objective"]


def test_replay_chooses_configurations_or_keeps_full_backpropagation(tmp_path):
    trace_path, jobs_path = write_inputs(tmp_path)
    trace, jobs = sim.read_trace(trace_path), sim.read_jobs(jobs_path)
    spb = sim.replay(trace, jobs, end_s=300)
    full = sim.replay(trace, jobs, end_s=300, configurations="full")
    # Computed by hand in tests/cpp/sim/test_sim_configurations.cpp.
    assert spb.summary["samples_done"] == pytest.approx(5000 - 140)
    assert spb.summary["configuration_switches"] == 2
    assert spb.summary["partial_node_hours"] == pytest.approx(400 / 3600)
    assert list(spb.jobs["partial_node_seconds"]) == [400.0]
    assert full.summary["samples_done"] == pytest.approx(1800 - 54 + 1000 - 50 + 1800)
    assert full.summary["configurations"] == "full" and full.label == "exact/full"
    with pytest.raises(ValueError, match='configurations: unknown mode "partial"'):
        sim.replay(trace, jobs, configurations="partial")


def test_allocate_takes_configurations_in_job_dicts():
    a = bft.allocate([JOB], pool=[0, 1], tfwd=10)
    assert list(a.configuration) == [1] and list(a.nodes_after) == [2]
    assert a.rate[0] == pytest.approx(40.0)  # samples/s processed; the value counts them at 0.5
    assert a.jobs[0].value == pytest.approx(20.0)
    one = bft.allocate([JOB], pool=[0], tfwd=10)
    assert list(one.configuration) == [0]


@pytest.mark.parametrize("configurations, message", [
    ([{"name": "s", "throughput": [0, 1, 2]}], 'jobs[0]: job "j": "configurations"[0]: missing field "efficiency"'),
    ([{"name": "s", "efficiency": 0.5, "throughput": [0, 1, 2], "speed": 2}],
     'jobs[0]: job "j": "configurations"[0]: unknown field "speed" (known: name, efficiency, nodes'),
    ([{"name": "s", "efficiency": 0.5, "throughput": [0, 1]}],
     'jobs[0]: job "j": "configurations"[0]: "throughput" has 2 values but "nodes" has 3'),
    ([{"name": "s", "efficiency": "high", "throughput": [0, 1, 2]}],
     'jobs[0]: job "j": "configurations"[0]: "efficiency": expected a number, found "high"'),
    ([{"name": "s", "efficiency": 2.0, "throughput": [0, 1, 2]}], "efficiency 2 must be in (0, 1]"),
    ({"name": "s"}, 'jobs[0]: job "j": "configurations": expected an array of objects, found {\'name\': \'s\'}'),
    (["spb"], 'jobs[0]: job "j": "configurations": expected an array of objects, found [\'spb\']'),
])
def test_bad_configurations_in_job_dicts_name_the_job_and_the_entry(configurations, message):
    # The workload reader's messages: job dicts go through its validator.
    with pytest.raises(ValueError, match=re.escape(message)):
        bft.allocate([dict(JOB, configurations=configurations)], pool=[0, 1])


def test_bft_replay_compares_the_spb_aware_policy_with_the_plain_one(tmp_path, capsys):
    trace_path, jobs_path = write_inputs(tmp_path)
    rc = cli.main(["replay", "--trace", str(trace_path), "--jobs", str(jobs_path), "--policy", "exact",
                   "--configurations", "both", "--end", "300", "-q", "--out", str(tmp_path / "o"), "--no-plots"])
    assert rc == 0
    out = capsys.readouterr().out
    assert "partial-backprop node-hours" in out and "configuration switches" in out
    assert "exact/full" in out
    choose = json.loads((tmp_path / "o" / "summary-exact.json").read_text())
    full = json.loads((tmp_path / "o" / "summary-exact_full.json").read_text())
    assert choose["samples_done"] > full["samples_done"]
    assert (tmp_path / "o" / "jobs-exact.csv").read_text().splitlines()[0].count("partial_node_seconds") == 1


def test_bft_replay_reports_a_bad_configuration_as_one_line(tmp_path, capsys):
    bad = dict(JOB, configurations=[{"name": "full", "efficiency": 1, "throughput": [0, 1, 2]}])
    trace_path, jobs_path = write_inputs(tmp_path, bad)
    assert cli.main(["replay", "--trace", str(trace_path), "--jobs", str(jobs_path), "-q"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "j.jsonl:1: job \"j\": configurations[0]: name 'full' is taken" in err[0]


def test_the_measured_digits_workload_reads_and_prefers_partial_backpropagation_on_two_nodes():
    """examples/workloads/jobs-digits-spb.jsonl (written by bench/spb_measure.py): valid, and on two
    idle nodes the allocator runs it in a configuration whose measured value beats full's."""
    path = Path(__file__).resolve().parents[2] / "examples" / "workloads" / "jobs-digits-spb.jsonl"
    (job,) = sim.read_jobs(path)
    assert [c.name for c in job.configurations] == ["spb-d2", "spb-d3"]
    full_two = job.throughput_at(2)
    values = [c.efficiency * c.throughput.evaluate(2) for c in job.configurations]
    trace = sim.parse_trace("time,node,state\n0,a,idle\n0,b,idle\n")
    r = sim.replay(trace, [job], end_s=5)
    assert (r.summary["partial_node_hours"] > 0) == (max(values) > full_two)
