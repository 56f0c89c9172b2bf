"""End to end on the real Slurm test cluster: `bft manager --source slurm`, real torchrun and PyTorch
DDP inside pilot jobs, a main-queue workload that preempts pilots, and a `kill -9` of the manager.

Nothing of Slurm, torch or the process table is mocked. The harness stops every process it started
and `bft manager stop` must leave no pilot in the queue.
"""

from __future__ import annotations

import os
import re
import subprocess

import pytest

pytest.register_assert_rewrite("slurm_util")  # it is also a plugin (below), loaded after this import
from runtime_util import bft  # noqa: E402
from slurm_util import GRACE_S, slurm_manager, squeue, submit_main, wait_running  # noqa: E402

pytest_plugins = ["slurm_util"]  # the session's one test cluster (the slurm_cluster fixture), shared by the Slurm tests

pytestmark = [pytest.mark.runtime, pytest.mark.slurm]

@pytest.fixture
def manager(slurm_cluster, tmp_path):
    with slurm_manager(tmp_path) as h:
        yield h


def test_training_fills_pilots_shrinks_for_main_jobs_survives_kill9_leaves_nothing_and_reports_the_added_wait(
        manager):
    # n5..n8 busy with the main queue for the whole test: the pilots get n1..n4.
    background = subprocess.run(["sbatch", "--parsable", "--partition=main", "--nodes=4", "--nodelist=n[5-8]",
                                 "--output=/dev/null", "--wrap=sleep 600"], check=True, capture_output=True,
                                text=True).stdout.strip()
    wait_running(background, 10)
    options = ("--slurm-partition", "pilot", "--slurm-manager-address", "127.0.0.1", "--slurm-pending", "2",
               "--slurm-max-nodes", "4", "--slurm-poll-s", "1", "--grace", "4")
    first = manager.start(*options)
    work = 200_000
    manager.submit("a", "--min", "1", "--max", "4", "--samples", str(work))
    manager.submit("b", "--min", "1", "--max", "4", "--samples", str(work))
    manager.wait(lambda s: len(s["nodes"]["pool"]) == 4 and sum(j["samples"] > 0 for j in s["jobs"]) >= 1, 120,
                 "4 pilots adopted and a first progress report")
    job_name = f"bft-pilot.{manager.identity}"

    # A main job arrives and takes two nodes from the pilots; the training jobs shrink to two nodes.
    main_job = submit_main(nodes=2, seconds=25)
    main_nodes = wait_running(main_job, GRACE_S + 15)
    manager.wait(lambda s: len(s["nodes"]["pool"]) == 2, 30, "the pool to shrink to 2 nodes")
    before = {j["id"]: j["samples"] for j in manager.status()["jobs"]}

    # kill -9 while pilots hold nodes and training runs; the restart adopts the pilots.
    manager.kill9(first)
    running_pilots = sorted(r["node"] for r in squeue(f"--name={job_name}") if r["state"] == "RUNNING")
    assert len(running_pilots) == 2, squeue()
    second = manager.start(*options)
    manager.wait(lambda s: set(running_pilots) <= set(s["nodes"]["pool"]), 30, "the pilots adopted again")
    assert manager.status()["manager"]["identity"] == manager.identity

    # The main job ends; its nodes are adopted again; both jobs finish with their full sample count.
    manager.wait(lambda s: len(s["nodes"]["pool"]) == 4, 60, "the freed nodes adopted again")
    manager.wait(lambda s: all(j["state"] == "finished" for j in s["jobs"]), 300, "both jobs to finish")
    final = {j["id"]: j for j in manager.status()["jobs"]}
    for name in ("a", "b"):
        assert final[name]["samples"] >= max(work, before[name])
        done = re.findall(r"done: (\d+) samples", manager.job_log(name))
        assert done and int(done[-1]) >= work, manager.job_log(name)[-2000:]
    # The training on the main job's nodes was stopped because of the preemption.
    taken = set(subprocess.run(["scontrol", "show", "hostnames", main_nodes], check=True, capture_output=True,
                               text=True).stdout.split())
    assert taken & {e["node"] for e in manager.events("preempted")}, manager.events("preempted")
    assert manager.events("recovered")

    # `bft manager stop` gives every node back: no pilot in the queue, no process left.
    manager.stop(second)
    assert squeue(f"--name={job_name}") == []
    assert manager.leftovers() == []

    # `bft report` measures the main job's added wait from sacct (here the cluster's job-completion log:
    # no accounting database): the time from its eligibility to its start during which this manager's
    # pilots held one of its nodes (no other main job ran on n1..n4).
    records = subprocess.run(["sacct", "--completion", "--allusers", "--parsable2",
                              "--format=JobID,JobName,Eligible,Start,End,NodeList"], check=True, capture_output=True,
                             text=True, env={**os.environ, "SLURM_TIME_FORMAT": "%s"}).stdout.splitlines()
    rows = [dict(zip(records[0].split("|"), line.split("|"))) for line in records[1:] if line]
    (main,) = [r for r in rows if r["JobID"] == main_job]
    eligible, start = int(main["Eligible"]), int(main["Start"])
    held = sorted((max(int(r["Start"]), eligible), min(int(r["End"]), start)) for r in rows
                  if r["JobName"] == job_name and r["NodeList"] in taken)
    expected, reach = 0, eligible
    for a, b in held:  # the length of the union of the pilots' holds within the wait
        expected += max(0, b - max(a, reach))
        reach = max(reach, b)
    # How long the pilots held it up is Slurm's timing (a pilot may be gone within the second the main
    # job became eligible: 0 s, seen here once); what must hold is that the report says what sacct does.
    r = bft("report", "--state-dir", str(manager.state_dir))
    assert r.returncode == 0 and not r.stderr, r.stderr
    waited = 1 if expected > 0 else 0
    assert re.search(rf"added wait measured from sacct --completion \(ended jobs only\): {expected} s; {waited} of "
                     r"the", r.stdout), (expected, main, held, r.stdout)
