"""End to end across hosts: the multi-host Slurm test cluster (tests/slurm/cluster.sh --hosts 4), one
network namespace with its own address and hostname per host. slurmctld and `bft manager --source
slurm --bind <login address>` run on the login host; pilots, torchrun agents and workers on the
compute hosts, which reach the manager's store and report port over the bridge only.

One cluster for the module; each test's manager, jobs and pilots are stopped after it, also when it
fails (slurm_util.slurm_manager), and the cluster removes its namespaces when the module ends.
"""

from __future__ import annotations

import os
import subprocess
from typing import Dict, Set

import pytest

from bft.runtime import tagged_processes
from runtime_util import bft

pytest.register_assert_rewrite("slurm_util")  # it is also a plugin (below), loaded after this import
from slurm_util import slurm_manager, squeue, submit_main, wait_running, wait_until  # noqa: E402

pytest_plugins = ["slurm_util"]

pytestmark = [pytest.mark.runtime, pytest.mark.slurm]

# Paced steps (at most 3 x 64 / 0.1 = 1,920 samples/s): the jobs are still running when the test acts,
# and their rate grows with their nodes even on a busy 2-core machine.
PACED = ("--", "--batch", "64", "--step-s", "0.1", "--checkpoint-every-s", "1")


@pytest.fixture
def manager(slurm_hosts, tmp_path):
    with slurm_manager(tmp_path, prefix=[os.path.join(slurm_hosts["BFT_SLURM_BIN"], "on-host"), "login"]) as h:
        h.options = ("--bind", slurm_hosts["BFT_SLURM_LOGIN_ADDR"], "--slurm-partition", "pilot",
                     "--slurm-pending", "2", "--slurm-max-nodes", "4", "--slurm-poll-s", "1", "--grace", "4")
        h.netns_prefix = slurm_hosts["BFT_SLURM_NETNS_PREFIX"]
        yield h


def _netns(pid: int) -> str:
    return subprocess.run(["ip", "netns", "identify", str(pid)], capture_output=True, text=True).stdout.strip()


def _job_hosts(manager, job: str) -> Dict[str, Set[str]]:
    """The hostnames of the job's processes on each host (network namespace) other than the login host."""
    hosts: Dict[str, Set[str]] = {}
    for pid in tagged_processes(manager.identity):
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                if f"BFT_JOB_ID={job}".encode() not in f.read().split(b"\0"):
                    continue
        except OSError:
            continue  # ended meanwhile
        ns = _netns(pid)
        if ns and ns != f"{manager.netns_prefix}login":
            name = subprocess.run(["nsenter", "-t", str(pid), "--uts", "hostname"], capture_output=True,
                                  text=True).stdout.strip()
            hosts.setdefault(ns, set()).add(name)
    return hosts


def _compute_host_processes(manager) -> Dict[str, Set[str]]:
    """The process names in each compute host's namespace (slurmd's own included)."""
    out = {}
    for ns in subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout.split("\n"):
        ns = ns.split(" ")[0]
        if ns.startswith(manager.netns_prefix) and ns != f"{manager.netns_prefix}login":
            pids = subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True).stdout.split()
            out[ns] = {name for name in map(_comm, pids) if name}
    return out


def _comm(pid: str) -> str:
    try:
        with open(f"/proc/{pid}/comm") as f:
            return f.read().strip()
    except OSError:
        return ""  # ended meanwhile


def _samples(manager, job: str) -> int:
    return manager.job(job)["samples"]


def test_a_job_grows_across_three_hosts_and_shrinks_when_a_main_job_takes_one(manager):
    # n4 busy with the main queue: the pilots get n1..n3.
    wait_running(submit_main(nodes=1, seconds=600, nodelist="n4"), 20)
    # equal_share: the one job gets every node of the pool, whatever its measured curve says on this
    # busy machine (what this test is about is where its processes run, not the allocator's choice).
    manager.start(*manager.options, "--policy", "equal_share")
    manager.submit("wide", "--min", "1", "--max", "3", "--samples", "1e9", *PACED)
    status = manager.wait(lambda s: len(s["jobs"][0]["nodes"]) == 3 and s["jobs"][0]["samples"] > 0, 180,
                          "the job on three hosts, training")
    nodes = set(status["jobs"][0]["nodes"])
    # Its processes run on three hosts: three network namespaces, each with the node's hostname.
    hosts = wait_until(lambda: (lambda h: h if len(h) == 3 else None)(_job_hosts(manager, "wide")), 30,
                       "the job's processes on three hosts")
    assert sorted(name for names in hosts.values() for name in names) == sorted(nodes), hosts

    # A main job takes one of them: the job shrinks to the other two and goes on training.
    taken = sorted(nodes)[0]
    wait_running(submit_main(nodes=1, seconds=600, nodelist=taken), 30)
    manager.wait(lambda s: set(s["jobs"][0]["nodes"]) == nodes - {taken}, 90, f"the job to leave {taken}")
    shrunk = _samples(manager, "wide")
    manager.wait(lambda s: s["jobs"][0]["samples"] > shrunk + 1000, 120, "training to go on on two hosts")
    hosts = _job_hosts(manager, "wide")
    assert sorted(name for names in hosts.values() for name in names) == sorted(nodes - {taken}), hosts
    assert manager.events("preempted"), manager.manager_log()[-3000:]


def test_training_goes_on_across_hosts_while_the_manager_is_killed_and_is_adopted(manager):
    first = manager.start(*manager.options)
    manager.submit("long", "--min", "2", "--max", "2", "--samples", "1e9", *PACED)
    manager.wait(lambda s: len(s["jobs"][0]["nodes"]) == 2 and s["jobs"][0]["samples"] > 0, 180,
                 "the job on two hosts, training")
    assert len(_job_hosts(manager, "long")) == 2
    launches = len(manager.events("launch", job="long"))
    manager.kill9(first)
    at_kill = max(manager.checkpointed_samples("long"), 1)
    # The manager is down: the workers on the compute hosts still reach the store over the bridge.
    wait_until(lambda: manager.checkpointed_samples("long") > at_kill, 60, "training while the manager is down",
               step_s=0.5)
    assert manager.keeper_pid() is not None
    down = manager.checkpointed_samples("long")

    second = manager.start(*manager.options)
    manager.wait(lambda s: s["jobs"][0]["samples"] >= down, 60, "the reports of the adopted job")
    assert manager.events("recovered")[-1]["adopted"] == ["long"]
    assert len(manager.events("launch", job="long")) == launches  # adopted, never relaunched
    assert "resumed from checkpoint" not in manager.job_log("long")
    manager.stop(second)
    assert squeue() == []
    assert manager.leftovers() == []


def test_cancel_leaves_nothing_on_any_host(manager):
    proc = manager.start(*manager.options)
    manager.submit("gone", "--min", "3", "--max", "3", "--samples", "1e9", *PACED)
    manager.wait(lambda s: len(s["jobs"][0]["nodes"]) == 3 and s["jobs"][0]["samples"] > 0, 180,
                 "the job on three hosts, training")
    assert len(_job_hosts(manager, "gone")) == 3
    cancel = bft("cancel", "gone", "--state-dir", str(manager.state_dir))
    assert cancel.returncode == 0, cancel.stderr
    manager.wait(lambda s: s["jobs"][0]["state"] == "cancelled", 60, "the job cancelled")
    wait_until(lambda: not _job_hosts(manager, "gone"), 30, "no process of the job on any host")
    # The pilots still hold the hosts; `bft manager stop` gives them back: only slurmd is left.
    manager.stop(proc)
    wait_until(lambda: all(names == {"slurmd"} for names in _compute_host_processes(manager).values()), 30,
               f"only slurmd on the compute hosts: {_compute_host_processes(manager)}")
    assert squeue() == []
    assert manager.leftovers() == []
