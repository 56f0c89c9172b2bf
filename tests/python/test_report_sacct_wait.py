"""The main jobs' added wait from sacct's records (bft.runtime.ops.sacct_wait, docs/runtime.md
"Accounting") on a hand-written sacct log whose answer is worked out by hand below."""

from __future__ import annotations

import csv
import io
import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bft.runtime.ops import sacct_wait
from bft.runtime.statedb.store import StateStore
from runtime_util import bft, one_line_error

# n1: pilot 100 of manager m1 until 1060 (preempted for A). n2: main job B until 1030, then m1's pilot
# 101 until 1061. A (n1, n2) eligible at 1020, started at 1062: 1020-1030 B held n2 (not the pilots'
# doing), 1030-1061 pilots held its nodes and nothing else did (31 s), 1061-1062 its nodes were free
# (Slurm's cycle, not counted). n4: pilot 102 of another manager m2 until 1045; D on n4 eligible at
# 1000, started at 1050: 45 s, but only m2's. C: no pilot on n3, started at once (its Eligible in
# sacct's ISO form), still running. Steps and a job that never started are skipped.
LOG = """JobID|JobName|Eligible|Start|End|NodeList
100|bft-pilot.m1|990|990|1060|n1
100.0|bft.m1|990|991|1060|n1
101|bft-pilot.m1|1000|1031|1061|n2
102|bft-pilot.m2|980|980|1045|n4
200|B|800|900|1030|n2
201|A|1020|1062|1500|n[1-2]
202|C|1970-01-01T00:18:20|1100|Unknown|n3
203|D|1000|1050|1400|n4
204|E|1000|Unknown|Unknown|None assigned
"""


def _log(tmp_path, text: str = LOG):
    path = tmp_path / "jobs.sacct"
    path.write_text(text)
    return path


def test_added_wait_counts_only_the_time_pilots_alone_held_a_waiting_jobs_nodes(tmp_path):
    jobs = sacct_wait.parse(_log(tmp_path))
    assert sorted(j.job_id for j in jobs) == ["100", "101", "102", "200", "201", "202", "203"]
    m1 = sacct_wait.added_wait(jobs, ["bft-pilot.m1"], since_s=0, until_s=2000)
    assert (m1.main_jobs, m1.jobs, m1.wait_s) == (4, 1, 31.0)  # A, B, C, D started; A waited 31 s
    both = sacct_wait.added_wait(jobs, ["bft-pilot.m1", "bft-pilot.m2"], since_s=0, until_s=2000)
    assert (both.jobs, both.wait_s) == (2, 31.0 + 45.0)
    # A period from 1040: A's wait is cut to 1040-1061; B started before it.
    late = sacct_wait.added_wait(jobs, ["bft-pilot.m1"], since_s=1040, until_s=2000)
    assert (late.main_jobs, late.jobs, late.wait_s) == (3, 1, 21.0)


def test_sacct_records_that_cannot_be_read_are_one_line_naming_the_line(tmp_path):
    header = "JobID|JobName|Eligible|Start|End|NodeList\n"
    for text, message in [
            ("JobID|Start|End|NodeList\n", r"^x:1: expected a sacct --parsable2 header naming the columns JobID, "
                                            r"JobName, Eligible, Start, End and NodeList"),
            (header + "7|a|1|yesterday|2|n1\n", r"^x:2: job 7: .*yesterday"),
            (header + "7|a|1|2\n", r"^x:2: expected 6 '\|'-separated fields"),
            # The importer's own refusal (one reader of the format): not the first of two columns.
            ("JobID|JobName|Eligible|Start|End|NodeList|Start\n", r"^x:1: the header names the column Start twice")]:
        with pytest.raises(sacct_wait.SacctError, match=message):
            sacct_wait.parse(_log(tmp_path, text), "x")


def test_sacct_node_names_are_counted_before_they_are_made_and_capped_per_file(tmp_path, monkeypatch):
    """Three lines of a million names each: refused at the line that passes the file's cap, before its
    names are made (the cap lowered to keep the test small; the real one is MAX_NODE_NAMES)."""
    monkeypatch.setattr(sacct_wait, "MAX_NODE_NAMES", 2_500_000)
    header = "JobID|JobName|Eligible|Start|End|NodeList\n"
    lines = "".join(f"{k}|a|1|2|3|n[0-999999]\n" for k in range(1, 4))
    past_the_cap = r"^x:4: job 3: NodeList: \"n\[0-999999\]\" would take the file past 2500000 node names"
    with pytest.raises(sacct_wait.SacctError, match=past_the_cap):
        sacct_wait.parse(_log(tmp_path, header + lines), "x")
    # Within the cap, every job keeps its nodes, and a node named by many jobs is one string.
    jobs = sacct_wait.parse(_log(tmp_path, header + "1|a|1|2|3|n[1-3]\n2|b|1|2|3|n[2-3]\n"), "x")
    assert [j.nodes for j in jobs] == [["n1", "n2", "n3"], ["n2", "n3"]] and jobs[0].nodes[1] is jobs[1].nodes[0]


def test_report_of_a_slurm_manager_reads_the_added_wait_from_a_saved_sacct_file(tmp_path):
    # A Slurm manager's state directory holds its pilots' job name in its start event.
    state = tmp_path / "state"
    state.mkdir()
    store = StateStore(state / "state.db")
    store.log_event("manager_started", source={"source": "slurm", "job_name": "bft-pilot.m1"})
    store.close()
    log = tmp_path / "jobs.sacct"
    log.write_text(LOG)
    r = bft("report", "--state-dir", str(state), "--sacct", str(log), "--since", "0", "--until", "2000")
    assert r.returncode == 0 and not r.stderr, r.stderr
    assert f"main jobs' added wait measured from {log}: 31 s; 1 of the 4 main jobs that started waited" in r.stdout
    # A local manager's directory: only the grace bound; a --sacct given for it is a mistake, said in one line.
    local = tmp_path / "local"
    local.mkdir()
    store = StateStore(local / "state.db")
    store.log_event("manager_started", source={"source": "local"})
    store.close()
    r = bft("report", "--state-dir", str(local), "--csv", "-")
    assert r.returncode == 0 and list(csv.DictReader(io.StringIO(r.stdout))) == [], r.stderr
    one_line_error(bft("report", "--state-dir", str(local), "--sacct", str(tmp_path / "absent")),
                   "no state directory given is a Slurm manager's")
    one_line_error(bft("report", "--state-dir", str(state), "--sacct", str(tmp_path / "absent")),
                   f"--sacct {tmp_path / 'absent'}")
    # Read within the caps of every file read whole: a line of /dev/zero is refused, not held.
    one_line_error(bft("report", "--state-dir", str(state), "--sacct", "/dev/zero"), "--sacct /dev/zero")


def _added_wait_by_elementary_intervals(jobs, pilots, since_s, until_s):
    """The definition read literally: cut time at every start and end, and count each piece of a
    waiting main job's window where a listed pilot held one of its nodes and no other main job held any."""
    def holds(k, n, t):
        return n in k.nodes and k.start_s <= t < (k.end_s if k.end_s is not None else until_s)

    total = 0.0
    for j in jobs:
        if j.name.startswith("bft-pilot.") or not since_s <= j.start_s <= until_s:
            continue
        lo, hi = max(j.eligible_s if j.eligible_s is not None else j.start_s, since_s), min(j.start_s, until_s)
        cuts = sorted({lo, hi, *(t for k in jobs for t in (k.start_s, k.end_s) if t is not None and lo < t < hi)})
        for a, b in zip(cuts, cuts[1:]):
            t = (a + b) / 2
            others = [k for k in jobs if k is not j and any(holds(k, n, t) for n in j.nodes)]
            if any(k.name in pilots for k in others) and not any(not k.name.startswith("bft-pilot.") for k in others):
                total += b - a
    return total


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["bft-pilot.m1", "bft-pilot.m2", "main"]),
                          st.integers(0, 60), st.integers(0, 30), st.integers(1, 40), st.booleans(),
                          st.sets(st.sampled_from(["n1", "n2", "n3"]), min_size=1)), max_size=12),
       st.integers(0, 40), st.integers(40, 140))
def test_added_wait_equals_the_definition_cut_at_every_start_and_end(specs, since, until):
    jobs = [sacct_wait.SacctJob(str(i), name, float(start), float(start + wait), None if running else
                                float(start + wait + length), sorted(nodes))
            for i, (name, start, wait, length, running, nodes) in enumerate(specs)]
    got = sacct_wait.added_wait(jobs, ["bft-pilot.m1"], since_s=since, until_s=until).wait_s
    assert got == pytest.approx(_added_wait_by_elementary_intervals(jobs, {"bft-pilot.m1"}, since, until), abs=1e-9)


def test_sacct_output_beyond_the_cap_is_refused_in_one_line_asking_for_a_shorter_period(tmp_path, monkeypatch):
    fake = tmp_path / "sacct"  # a real process on PATH whose output outgrows the (lowered) cap
    fake.write_text("#!/bin/sh\nhead -c 3000000 /dev/zero | tr '\\0' 'x'\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    monkeypatch.setattr(sacct_wait, "MAX_OUTPUT_BYTES", 1 << 20)
    with pytest.raises(sacct_wait.SacctError, match=r"more than 1 MiB: report a shorter period"):
        sacct_wait.read(0, 1)


def test_added_wait_gives_each_main_jobs_own_wait(tmp_path):
    """What the Slurm demo prints per main job (examples/runtime/slurm_demo.py)."""
    jobs = sacct_wait.parse(_log(tmp_path))
    both = sacct_wait.added_wait(jobs, ["bft-pilot.m1", "bft-pilot.m2"], since_s=0, until_s=2000)
    assert both.per_job == {"200": 0.0, "201": 31.0, "202": 0.0, "203": 45.0}
    assert sum(both.per_job.values()) == both.wait_s
