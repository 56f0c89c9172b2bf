"""The real manager under load with the emulated launcher (--local-emulate): Summit's trace, 256 of its
nodes, at 100x, six ImageNet jobs. Behaviour only, no timings (bench/load_bench.py measures)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from bft.runtime.statedb.store import StateStore
from runtime_util import REPO

sys.path.insert(0, str(REPO / "bench"))
import load_bench  # noqa: E402

pytestmark = pytest.mark.runtime

TRACE = load_bench.DATA / "summit-idle-nodes-2021-02.csv.gz"
JOBS = load_bench.DATA / "jobs-imagenet-throughput-1001.jsonl"
# From this trace time on, at least 50 of the trace's first 256 nodes are idle for 3 hours while
# about 200 transitions come and go: the jobs are resized and preempted, and can all finish.
START_S = 378_000.0
WORK = 3e7


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    if not TRACE.exists() or not JOBS.exists():
        pytest.skip(f"the real data is not here ({load_bench.DATA})")
    root = tmp_path_factory.mktemp("load")
    result = load_bench.drive(root, TRACE, JOBS, nodes=256, start_s=START_S, window_s=None, time_scale=100,
                              limit=6, work=WORK, timeout_s=300, grace_s=100)
    result["root"] = root
    return result


def test_every_job_finishes_its_work(run):
    assert run["jobs_submitted"] == 6
    for job in run["jobs"]:
        assert job["state"] == "finished", job
        assert job["samples"] >= WORK, job


def test_no_process_outlives_the_manager(run):
    assert run["orphans"] == []


def test_a_stopped_job_resumes_from_where_it_reported(run):
    """Every generation after a stop starts from at least the last count reported before it: the
    emulated job checkpoints on the manager's SIGTERM, as a real one does."""
    store = StateStore(Path(run["root"]) / "state" / "state.db", create=False, read_only=True)
    last: dict = {}  # job -> (generation, last samples reported in it)
    resumed = 0
    for p in store.progress():
        generation, samples = last.get(p["job"], (None, 0.0))
        if generation is not None and p["generation"] != generation:
            assert p["samples"] >= samples, dict(p)
            resumed += 1
        last[p["job"]] = (p["generation"], p["samples"])
    store.close()
    assert resumed > 0  # the trace resized or preempted some job: the check above was exercised


def test_every_report_is_accepted_once(run):
    """The emulated jobs send only genuine, well-signed reports, none handled twice (a replay). The one
    drop allowed is a report of a generation the manager has just stopped: the stopping process's last
    datagram may be in flight while the next generation starts (CI's clone saw one)."""
    assert run["reports"] > 0
    dropped = dict(run["dropped_reports"])
    stale = dropped.pop("stale_generation")
    assert sum(dropped.values()) == 0, run["dropped_reports"]
    generations = sum(job["generation"] for job in run["jobs"])
    assert stale <= generations, (stale, generations)


def test_each_node_event_is_handled_once(run):
    """A node's joins and reclaims alternate in the event log: none is handled twice."""
    store = StateStore(Path(run["root"]) / "state" / "state.db", create=False, read_only=True)
    last: dict = {}
    for e in store.events(("join", "reclaim")):
        assert last.get(e["node"]) != e["kind"], e
        last[e["node"]] = e["kind"]
    store.close()
    assert last  # nodes came and went
def test_emulation_runs_the_script_alone_on_the_generations_node_count():
    from bft.runtime.jobs.launcher import LaunchSpec, script_argv, torchrun_argv
    from bft.runtime.sources.base import SourceError
    from bft.runtime.sources.local import _without_torchrun

    def spec(low, high):
        return LaunchSpec(job="j", generation=3, script="/x/emulated.py", args=["--curve", "{}", "--time-scale", "100"],
                          python="/usr/bin/python3", node="n1", node_address="127.0.0.1", store_address="127.0.0.1:1",
                          min_nodes=low, max_nodes=high, max_restarts=0, log_dir=Path("/tmp"))

    argv, world = _without_torchrun(torchrun_argv(spec(7, 7)))
    assert argv == ["/usr/bin/python3", "/x/emulated.py", "--curve", "{}", "--time-scale", "100"]
    assert world == 7
    with pytest.raises(SourceError, match="--resize relaunch"):
        _without_torchrun(torchrun_argv(spec(1, 8)))  # the membership method's node range
    with pytest.raises(SourceError, match="--resize relaunch"):
        _without_torchrun(script_argv(spec(1, 1)))  # an in-place worker: one process per node
