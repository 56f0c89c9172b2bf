"""Importers of scheduler logs (`bft trace import sacct|swf`, `bft.sim.import_sacct|import_swf`): random
logs against an independent second-by-second oracle, the project's fixtures and the errors a user meets."""

import gzip
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from bft import cli, sim
from test_cli import one_line_error, run_module

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


def idle_sets(trace, origin_s, end_s):
    """{log time: set of idle node names} at every second of [origin_s, end_s), from the trace alone."""
    state = {}
    events = {}
    for t, n, s in zip(trace.times.tolist(), trace.nodes.tolist(), trace.states.tolist()):
        events.setdefault(t, []).append((trace.node_names[n], s == sim.NodeState.IDLE.value))
    out = {}
    for tau in range(0, end_s - origin_s):
        for name, idle in events.get(tau, []):
            state[name] = idle
        out[origin_s + tau] = {name for name, idle in state.items() if idle}
    return out


def test_sacct_import_matches_a_second_by_second_oracle(tmp_path):
    rng = np.random.default_rng(11)
    machine = [f"c{i:02d}" for i in range(6)]
    for case in range(40):
        lines = ["JobID|Start|End|NodeList"]
        jobs = []  # (start, end or None, nodes)
        for j in range(int(rng.integers(1, 9))):
            start = int(rng.integers(0, 80))
            end = None if rng.random() < 0.15 else start + int(rng.integers(0, 40))
            nodes = sorted({machine[k] for k in rng.integers(0, 6, size=int(rng.integers(1, 4)))})
            jobs.append((start, end, nodes))
            lines.append(f"{j}|{start + 10**9}|{'Unknown' if end is None else end + 10**9}|{','.join(nodes)}")
        log = tmp_path / f"log{case}.txt"
        log.write_text("\n".join(lines) + "\n")
        window = {}
        if rng.random() < 0.5:
            window = {"start": 10**9 + int(rng.integers(0, 40)), "end": 10**9 + int(rng.integers(50, 120))}
        ran = [(s, e, n) for s, e, n in jobs if e is None or e > s]
        origin = window.get("start", 10**9 + min(s for s, _, _ in ran)) - 10**9
        end = window.get("end", 10**9 + max(max(s, e or s) for s, e, _ in ran)) - 10**9
        if not window and end <= origin:  # every job starts at one time and still runs: no window
            with pytest.raises(ValueError, match="give the end"):
                sim.import_sacct(log, "c[00-05]")
            continue

        # A job holds its nodes from its start (or the window's) until its end, if the window sees it.
        want = {t: set(machine) - {x for s, e, n in ran if max(s, origin) <= t and (e is None or e > end or t < e)
                                   for x in n}
                for t in range(origin, end)}
        try:
            imported = sim.import_sacct(log, "c[00-05]", **{k: str(v) for k, v in window.items()})
        except ValueError as e:
            assert "no node of the machine is idle" in str(e) or "no job ran" in str(e)
            assert not any(want.values()) or not ran
            continue
        assert imported.origin_s == origin + 10**9 and imported.end_s == end + 10**9
        got = idle_sets(imported.trace, origin, end)
        assert got == want, "\n".join(lines)
        assert imported.jobs_used + imported.jobs_skipped == len(jobs)


def test_swf_import_keeps_the_log_busy_count_and_whole_nodes(tmp_path):
    rng = np.random.default_rng(12)
    for case in range(40):
        ppn, machine = int(rng.integers(1, 5)), int(rng.integers(2, 9))
        lines = [f"; MaxProcs: {ppn * machine}"]
        jobs = []  # (start, end, nodes)
        for j in range(1, int(rng.integers(2, 12))):
            submit, wait, run = int(rng.integers(0, 60)), int(rng.integers(-1, 20)), int(rng.integers(-1, 30))
            procs = int(rng.integers(1, ppn * machine + 1))
            lines.append(f"{j} {submit} {wait} {run} {procs} -1 -1 {procs} -1 -1 1 1 1 -1 1 -1 -1 -1")
            if wait >= 0 and run > 0:
                jobs.append((submit + wait, submit + wait + run, -(-procs // ppn)))
        log = tmp_path / f"log{case}.swf.gz"
        with gzip.open(log, "wt") as f:
            f.write("\n".join(lines) + "\n")
        end = max((e for _, e, _ in jobs), default=0)
        busy = {t: sum(n for s, e, n in jobs if s <= t < e) for t in range(end)}
        try:
            imported = sim.import_swf(log, ppn)
        except ValueError as e:
            fits = all(b <= machine for b in busy.values())
            assert (not jobs and "no job with a start" in str(e)) or (jobs and not fits and "are free" in str(e)), e
            continue
        assert all(b <= machine for b in busy.values())
        idle = idle_sets(imported.trace, 0, end)
        # A node the trace does not name is busy throughout, so the idle count is the machine's minus the log's.
        assert all(len(idle[t]) == machine - busy[t] for t in range(end))
        assert imported.jobs_used == len(jobs)


def test_import_cli_writes_the_fixture_traces_that_stats_reads(tmp_path):
    out = tmp_path / "sacct.csv.gz"
    p = run_module("trace", "import", "sacct", str(FIXTURES / "sacct_small.txt"), "--machine-nodes", "c[01-04]",
                   "-o", str(out))
    assert p.returncode == 0, p.stderr
    assert p.stdout.splitlines()[0] == (
        f"wrote {out}: 6 transitions of 3 nodes (of the machine's 4; 1 never idle, so not in the trace) over a "
        "window of 0.08 d from 4 jobs (1 skipped: never ran on these nodes in the window); time 0 is 1793491200 "
        "on the log's clock")
    assert "ignored 1 nodes that are not in --machine-nodes (e.g. gpu1)" in p.stdout
    trace = sim.read_trace(out)
    assert trace.node_names == ["c03", "c04", "c01"] and trace.times.tolist() == [0, 0, 1800, 3600, 5400, 6300]
    assert run_module("trace", "stats", str(out)).returncode == 0

    nodes = tmp_path / "nodes.txt"
    nodes.write_text("c[01-02]\n\nc03\nc04\n")
    p = run_module("trace", "import", "sacct", str(FIXTURES / "sacct_small.txt"), "--machine-nodes", f"@{nodes}",
                   "--start", "2026-11-01T00:45:00", "--end", "2026-11-01T01:40:00", "-o", str(out))
    assert p.returncode == 0, p.stderr
    assert sim.read_trace(out).times.tolist() == [0, 900, 2700]

    p = run_module("trace", "import", "swf", str(FIXTURES / "swf_small.swf"), "--procs-per-node", "4",
                   "-o", str(tmp_path / "swf.csv"))
    assert p.returncode == 0, p.stderr
    assert "from 3 jobs (2 skipped" in p.stdout
    assert sim.read_trace(tmp_path / "swf.csv").node_names == ["n2", "n3", "n0", "n1"]


def test_import_errors_are_one_line_naming_the_file_and_line(tmp_path, capsys):
    sacct = str(FIXTURES / "sacct_small.txt")
    out = str(tmp_path / "t.csv")
    nodes = tmp_path / "nodes.txt"
    nodes.write_text("c01\nc[02-\n")
    assert f"--machine-nodes: {nodes}:2: hostlist \"c[02-\"" in one_line_error(
        capsys, ["trace", "import", "sacct", sacct, "--machine-nodes", f"@{nodes}", "-o", out])
    nodes.write_bytes(b"c01\n\xff\n")
    assert f"{nodes}:2: not UTF-8" in one_line_error(
        capsys, ["trace", "import", "sacct", sacct, "--machine-nodes", f"@{nodes}", "-o", out])
    assert "range 4-1 runs backwards" in one_line_error(
        capsys, ["trace", "import", "sacct", sacct, "--machine-nodes", "c[4-1]", "-o", out])
    assert "start: time \"yesterday\"" in one_line_error(
        capsys, ["trace", "import", "sacct", sacct, "--machine-nodes", "c[01-04]", "--start", "yesterday", "-o", out])
    bad = tmp_path / "bad.txt"
    bad.write_text("JobID|Start|End|NodeList\n1|2026-11-01T00:00:00|2026-10-01T00:00:00|c01\n")
    assert f"{bad}:2: job 1: End 2026-10-01T00:00:00 is before Start" in one_line_error(
        capsys, ["trace", "import", "sacct", str(bad), "--machine-nodes", "c01", "-o", out])
    swf = str(FIXTURES / "swf_small.swf")
    assert "swf_small.swf:7: job 2 needs 1 nodes" in one_line_error(
        capsys, ["trace", "import", "swf", swf, "--procs-per-node", "4", "--machine-nodes", "2", "-o", out])
    assert "procs_per_node: 0 is out of range" in one_line_error(
        capsys, ["trace", "import", "swf", swf, "--procs-per-node", "0", "-o", out])
    assert "cannot be opened for writing" in one_line_error(
        capsys, ["trace", "import", "swf", swf, "--procs-per-node", "4", "-o", str(tmp_path / "no" / "t.csv")])
    assert "name a log format: sacct or swf" in one_line_error(capsys, ["trace", "import"])


def test_import_functions_check_their_arguments():
    swf = FIXTURES / "swf_small.swf"
    with pytest.raises(ValueError, match="procs_per_node: expected a whole number, got True"):
        sim.import_swf(swf, True)
    with pytest.raises(ValueError, match="machine_nodes: expected a whole number"):
        sim.import_swf(swf, 4, machine_nodes=2.5)
    with pytest.raises(ValueError, match=r"machine_nodes\[1\]: expected a string"):
        sim.import_sacct(FIXTURES / "sacct_small.txt", ["c01", 2])
    with pytest.raises(ValueError, match="end: -3 is out of range"):
        sim.import_sacct(FIXTURES / "sacct_small.txt", "c[01-04]", end=-3)
    with pytest.raises(ValueError, match=r"end \(50\) must be after start \(100\)"):
        sim.import_sacct(FIXTURES / "sacct_small.txt", "c[01-04]", start=100, end=50)
    assert sim.expand_hostlist("c[1-2]") == ["c1", "c2"]


def test_a_node_handed_over_at_the_window_end_stays_busy(tmp_path):
    log = tmp_path / "handoff.txt"
    log.write_text("JobID|Start|End|NodeList\n1|0|200|c1\n2|200|Unknown|c1\n3|0|50|c2\n")
    for end in (None, 200):
        imported = sim.import_sacct(log, "c[1-3]", end=end)
        lines = list(zip(imported.trace.times.tolist(), [imported.trace.node_names[n] for n in imported.trace.nodes]))
        assert lines == [(0, "c3"), (50, "c2")]  # c1 passes from job 1 to job 2 at 200: no transition
        assert (imported.jobs_used, imported.jobs_skipped, imported.machine_nodes) == (3, 0, 3)
    with pytest.raises(ValueError, match=r"not after the window's start \(300\): give the end"):
        sim.import_sacct(log, "c[1-3]", start=300)


def test_a_byte_order_mark_is_ignored_in_logs_and_node_files(tmp_path, capsys):
    log = tmp_path / "bom.txt"
    log.write_bytes(b"\xef\xbb\xbfJobID|Start|End|NodeList\r\n1|100|200|c1\r\n1.batch|50|300|c2\r\n")
    imported = sim.import_sacct(log, "c[1-2]")
    assert imported.origin_s == 100 and imported.trace.node_names == ["c2", "c1"]  # the step is not a job
    nodes = tmp_path / "nodes.txt"
    nodes.write_bytes(b"\xef\xbb\xbfc1\r\nc2\r\n")
    out = tmp_path / "t.csv"
    assert cli.main(["trace", "import", "sacct", str(log), "--machine-nodes", f"@{nodes}", "-o", str(out)]) == 0
    assert "ignored" not in capsys.readouterr().out
    swf = tmp_path / "bom.swf"
    swf.write_bytes(b"\xef\xbb\xbf; MaxNodes: 2\n1 0 0 10 1 -1 -1 1 -1 -1 1 1 1 -1 1 -1 -1 -1\n")
    assert sim.import_swf(swf, 1).machine_nodes == 2


def test_writes_that_fail_and_inputs_out_of_bounds_are_errors(tmp_path, capsys):
    sacct = str(FIXTURES / "sacct_small.txt")
    if Path("/dev/full").exists():
        assert "/dev/full: write failed" in one_line_error(
            capsys, ["trace", "import", "sacct", sacct, "--machine-nodes", "c[01-04]", "-o", "/dev/full"])
    copy = tmp_path / "log.txt"
    copy.write_text((FIXTURES / "sacct_small.txt").read_text())
    assert "is the log itself" in one_line_error(
        capsys, ["trace", "import", "sacct", str(copy), "--machine-nodes", "c[01-04]", "-o", str(copy)])
    assert copy.read_text() == (FIXTURES / "sacct_small.txt").read_text()
    nodes = tmp_path / "many.txt"
    nodes.write_text("a[0-599999]\nb[0-599999]\n")
    assert "more than 1,000,000 nodes" in one_line_error(
        capsys, ["trace", "import", "sacct", sacct, "--machine-nodes", f"@{nodes}", "-o", str(tmp_path / "t.csv")])
    with pytest.raises(ValueError, match="machine_nodes: more than 1,000,000 nodes"):
        sim.import_sacct(sacct, ["a[0-599999]", "b[0-599999]"])
    with pytest.raises(ValueError, match="machine_nodes: expected a hostlist string or a list of them, got bytes"):
        sim.import_sacct(sacct, b"c1")
    with pytest.raises(ValueError, match="start: contains a NUL byte"):
        sim.import_sacct(sacct, "c1", start="1\0")
    swf = tmp_path / "bad_header.swf"
    swf.write_text("; MaxNodes: -1\n1 0 0 10 0 -1 -1 2 -1 -1 1 1 1 -1 1 -1 -1 -1\n")
    assert sim.import_swf(swf, 1, machine_nodes=4).jobs_used == 1  # field 5 of 0: the requested 2 processors
    with pytest.raises(ValueError, match=r"bad_header\.swf:1: MaxNodes: expects a positive whole number, found \"-1\""):
        sim.import_swf(swf, 1)


@pytest.mark.parametrize("kind", ["trace", "jobs"])
def test_a_200_mb_line_is_refused_in_bounded_memory(tmp_path, kind):
    """A file whose one line is 200 MB (gzip: under 1 MB on disk) is a one-line error naming file:line,
    and the reader never holds more than about the formats' 1 MiB line limit of it."""
    path = tmp_path / f"huge-{kind}.gz"
    with gzip.open(path, "wb", compresslevel=1) as f:
        f.write(b"time,node,state\n" if kind == "trace" else b"")
        for _ in range(200):
            f.write(b"x" * (1 << 20))
    reader = "bft.sim.read_trace" if kind == "trace" else "bft.jobs.read_jobs"
    # A child process, so that its peak memory (VmHWM: since its exec, unlike ru_maxrss) is this read's.
    code = (f"import re, sys, bft.sim, bft.jobs\n"
            f"try:\n    {reader}(sys.argv[1])\nexcept ValueError as e:\n    print(e)\n"
            "print(re.search(r'VmHWM:\\s*(\\d+) kB', open('/proc/self/status').read()).group(1))\n")
    out = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True, timeout=120,
                         env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    assert out.returncode == 0, out.stderr
    message, max_rss_kib = out.stdout.strip().splitlines()
    line = 2 if kind == "trace" else 1
    assert message == f"{path}:{line}: a line longer than 1048576 bytes, the formats' limit (is this the right file?)"
    assert int(max_rss_kib) < 150 * 1024, f"peak RSS {int(max_rss_kib) / 1024:.0f} MiB"


@pytest.mark.parametrize("header", ["JobID|Start|End|NodeList|Start", "JobID|Start|End|NodeList|NodeList"])
def test_a_sacct_header_naming_a_column_twice_is_an_error(tmp_path, header):
    log = tmp_path / "sacct.txt"
    log.write_text(f"{header}\n1|0|10|c1|0\n")
    column = header.rsplit("|", 1)[1]
    with pytest.raises(ValueError, match=rf"sacct\.txt:1: the header names the column {column} twice"):
        sim.import_sacct(log, "c1")


def test_an_swf_header_giving_maxnodes_twice_is_an_error(tmp_path):
    log = tmp_path / "log.swf"
    log.write_text("; MaxNodes: 4\n; MaxNodes: 8\n1 0 0 10 1 -1 -1 1 -1 -1 1 1 1 -1 1 -1 -1 -1\n")
    with pytest.raises(ValueError, match=r"log\.swf:2: the header gives MaxNodes twice"):
        sim.import_swf(log, 1)


def test_a_hard_link_of_the_log_is_refused_as_the_output(tmp_path, capsys):
    log = tmp_path / "sacct.txt"
    log.write_text("JobID|Start|End|NodeList\n1|0|10|c1\n")
    os.link(log, tmp_path / "alias.txt")
    assert "is the log itself" in one_line_error(
        capsys, ["trace", "import", "sacct", str(log), "--machine-nodes", "c1", "-o", str(tmp_path / "alias.txt")])
    assert log.read_text() == "JobID|Start|End|NodeList\n1|0|10|c1\n"
