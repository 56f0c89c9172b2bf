"""Issue 29: every file the CLI and the manager read is read in bounded memory (one line cap, one size
cap, tails read from the end), the state database is validated on open, the local source's trace and
clock file cannot stop its playback, and an import's transitions are capped. Each found instance is a
test; the readers' classes are searched by property tests."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bft import _bounded
from bft._core import MAX_LINE_BYTES
from bft.runtime.sources.base import SourceError
from bft.runtime.sources.local import LocalNodeSource
from bft.runtime.statedb.schema import StateError
from bft.runtime.statedb.store import JobRow, StateStore
from runtime_util import write_trace
from test_cli import one_line_error, run_module

# -- read_whole: the size cap and the line cap ----------------------------------------------------


def test_a_file_with_no_end_is_refused_at_the_size_cap():
    with pytest.raises(ValueError, match=r"^--nodes: /dev/zero is larger than 16 MiB$"):
        _bounded.read_whole("/dev/zero", "--nodes")


def test_a_line_over_the_cap_is_refused_naming_its_line(tmp_path):
    path = tmp_path / "nodes.txt"
    path.write_bytes(b"a\n" + b"x" * MAX_LINE_BYTES + b"\n" + b"y" * (MAX_LINE_BYTES + 1) + b"\nb\n")
    with pytest.raises(ValueError, match=rf"^--nodes: {path}:3: a line longer than {MAX_LINE_BYTES} bytes$"):
        _bounded.read_whole(path, "--nodes")
    path.write_bytes(b"x" * MAX_LINE_BYTES)  # exactly the cap, no newline: taken
    assert len(_bounded.read_whole(path, "--nodes")) == MAX_LINE_BYTES


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(0, 40), max_size=12), st.integers(1, 12))
def test_the_line_cap_finds_exactly_the_first_long_line(lengths, cap):
    """read_whole's one-pass check against splitting the file, on a cap small enough to search."""
    data = b"\n".join(b"x" * n for n in lengths)
    original = _bounded.MAX_LINE_BYTES
    _bounded.MAX_LINE_BYTES = cap
    try:
        path = f"/tmp/bft-bounded-{os.getpid()}.txt"
        with open(path, "wb") as f:
            f.write(data)
        long_lines = [k + 1 for k, line in enumerate(data.split(b"\n")) if len(line) > cap]
        try:
            _bounded.read_whole(path, "f")
            got = None
        except ValueError as e:
            got = int(str(e).split(":")[2])
        assert got == (long_lines[0] if long_lines else None), (data, cap, got)
    finally:
        _bounded.MAX_LINE_BYTES = original
        os.unlink(path)


def test_at_lists_of_the_cli_are_bounded(capsys):
    assert one_line_error(capsys, ["replay", "-q", "--nodes", "@/dev/zero"]).endswith(
        "--nodes: /dev/zero is larger than 16 MiB")


def test_a_curve_file_is_bounded_and_deep_nesting_is_one_line(tmp_path):
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 100_000)
    with pytest.raises(ValueError, match=r"^--curve: .*deep\.json: nested too deeply to be read$"):
        _bounded.read_json(deep, "--curve")
    with pytest.raises(ValueError, match="larger than 16 MiB"):
        _bounded.read_json("/dev/zero", "--curve")


@pytest.mark.skipif(sys.version_info < (3, 11), reason="tomllib is in the standard library from 3.11")
def test_a_manager_config_file_is_read_within_a_cap_and_deep_nesting_is_one_line(capsys, tmp_path):
    """--config /dev/zero, a file past the 1 MiB cap and TOML nested 100,000 deep: one line each, exit
    2, read no further than the cap (the manager never starts)."""
    big = tmp_path / "big.toml"
    big.write_bytes(b"\n" * (2 << 20))
    deep = tmp_path / "deep.toml"
    deep.write_text("a = " + "[" * 100_000)
    for path, needle in (("/dev/zero", "/dev/zero"), (big, "larger than 1048576 bytes"), (deep, "nested too deeply")):
        assert needle in one_line_error(capsys, ["manager", "--config", str(path)])


# -- tail_lines: what bft logs -n reads ------------------------------------------------------------


@settings(max_examples=300, deadline=None)
@given(st.lists(st.text(alphabet="ab\r\u00e9", max_size=30), max_size=40), st.booleans(), st.integers(1, 50),
       st.integers(1, 40))
def test_tail_lines_matches_the_whole_file_read(tmp_path_factory, lines, final_newline, count, block):
    """Read backwards in blocks of 1 to 40 bytes, so that block ends fall everywhere: inside a line,
    on a newline, between a carriage return and its newline, inside a two-byte character."""
    path = tmp_path_factory.mktemp("tail") / "output.log"
    text = "\n".join(lines) + ("\n" if final_newline and lines else "")
    path.write_text(text)
    original = _bounded.TAIL_BLOCK_BYTES
    _bounded.TAIL_BLOCK_BYTES = block
    try:
        assert _bounded.tail_lines(path, count) == text.splitlines()[-count:]
    finally:
        _bounded.TAIL_BLOCK_BYTES = original


def test_tail_lines_reads_only_the_end_of_a_large_log(tmp_path):
    path = tmp_path / "output.log"
    with open(path, "wb") as f:
        f.truncate(300 << 20)  # 300 MB of NULs, sparse: no line ends in it
        f.seek(0, os.SEEK_END)
        f.write(b"\nfirst\nsecond\nthird\n")
    code = ("import re, sys\nfrom bft._bounded import tail_lines\nprint(tail_lines(sys.argv[1], 2))\n"
            "print(re.search(r'VmHWM:\\s*(\\d+) kB', open('/proc/self/status').read()).group(1))\n")
    out = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True, timeout=120,
                         env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    assert out.returncode == 0, out.stderr
    shown, max_rss_kib = out.stdout.strip().splitlines()
    assert shown == "['second', 'third']"
    assert int(max_rss_kib) < 200 * 1024, f"peak RSS {int(max_rss_kib) / 1024:.0f} MiB"


# -- the state database, validated on open ---------------------------------------------------------


def _store_with_a_job(path):
    store = StateStore(path)
    store.add_job(JobRow(id="j", seq=0, script="/bin/true", args=["x"], cwd="/", python="python3", min_nodes=1,
                         max_nodes=2, work=None, curve=None, secret="00", state="queued"))
    store.close()


@pytest.mark.parametrize("damage, message", [
    ("UPDATE jobs SET args = 'not json'", "table 'jobs', row 'j': a JSON column is not JSON"),
    ("UPDATE jobs SET configurations = '3'", "table 'jobs', row 'j': --configuration: expected at most"),
    ("UPDATE jobs SET args = '[1]'", "table 'jobs', row 'j': args: expected an array of strings"),
    ("""UPDATE jobs SET curve = '{"nodes": "x", "throughput": 3}'""",
     "table 'jobs', row 'j': curve: 'nodes' and 'throughput' must be non-empty lists"),
    ("UPDATE jobs SET min_nodes = 'abc'", "table 'jobs', row 'j': column min_nodes holds 'abc', not INTEGER"),
    ("UPDATE jobs SET state = 'zombie'", "table 'jobs', row 'j': column state 'zombie' is not one of"),
    ("ALTER TABLE jobs ADD COLUMN extra TEXT", "table 'jobs' has columns it should not (extra)"),
    ("DROP TABLE progress", "table 'progress' is missing"),
])
def test_a_state_file_that_passes_quick_check_but_holds_nonsense_is_refused_naming_table_and_row(
        tmp_path, damage, message):
    path = tmp_path / "state.db"
    _store_with_a_job(path)
    db = sqlite3.connect(path)
    db.execute(damage)
    db.commit()
    db.close()
    with pytest.raises(StateError, match=message.replace("(", r"\(").replace(")", r"\)")):
        StateStore(path, create=False, read_only=True)
    r = run_module("status", "--state-dir", str(tmp_path))
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 2 and len(lines) == 1 and "Traceback" not in r.stderr, r.stderr
    assert message in lines[0], lines[0]


def test_a_curve_an_older_manager_stored_beyond_todays_limit_still_opens(tmp_path):
    """Its decision fails the job with the reason (test_runtime_poison); the file stays usable."""
    path = tmp_path / "state.db"
    _store_with_a_job(path)
    db = sqlite3.connect(path)
    db.execute("""UPDATE jobs SET curve = '{"nodes": [1], "throughput": [9e14]}'""")
    db.commit()
    db.close()
    store = StateStore(path, create=False, read_only=True)
    assert store.jobs()[0].curve == {"nodes": [1], "throughput": [9e14]}
    store.close()


JSON_TEXT = st.recursive(st.none() | st.booleans() | st.floats() | st.integers() | st.text(max_size=5),
                         lambda inner: st.lists(inner, max_size=3) | st.dictionaries(
                             st.sampled_from(["nodes", "throughput", "name", "efficiency", "speedup", "x"]),
                             inner, max_size=3), max_leaves=8).map(json.dumps)
CELLS = st.one_of(JSON_TEXT, st.text(max_size=8), st.integers(-(2**63), 2**63 - 1), st.floats(), st.none(),
                  st.binary(max_size=4))


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(st.sampled_from(["args", "curve", "configurations", "state", "min_nodes", "work",
                                        "samples", "cwd", "configuration"]), CELLS, min_size=1, max_size=3))
def test_any_job_row_either_opens_into_rows_status_can_show_or_is_one_state_error(tmp_path_factory, cells):
    path = tmp_path_factory.mktemp("state") / "state.db"
    _store_with_a_job(path)
    db = sqlite3.connect(path)
    try:
        db.execute(f"UPDATE jobs SET {', '.join(f'{k} = ?' for k in cells)}", tuple(cells.values()))
        db.commit()
    except sqlite3.IntegrityError:
        return  # a NOT NULL column refused the NULL itself
    finally:
        db.close()
    try:
        store = StateStore(path, create=False, read_only=True)
    except StateError as e:
        assert "\n" not in str(e) and "table 'jobs', row 'j'" in str(e)
        return
    try:
        for job in store.jobs():
            json.dumps(job.status())  # what bft status shows of it
    finally:
        store.close()


# -- the local source: its trace and clock file ----------------------------------------------------


@pytest.mark.parametrize("rows, scale, needle", [
    ([(0, "a", "idle"), (2**63 - 1, "a", "busy")], 1.0, "the trace would play for 9.22e+18 s, longer than"),
    ([(0, "a", "idle"), (200, "a", "busy")], 1e-9, "--local-time-scale 1e-09: the trace would play for 2e+11 s"),
])
def test_a_trace_that_would_outlast_the_playback_timers_is_refused(tmp_path, rows, scale, needle):
    trace = write_trace(tmp_path / "t.csv", rows)
    with pytest.raises(SourceError, match=needle.replace("+", r"\+")):
        LocalNodeSource("bft-test", tmp_path, nodes=1, trace=trace, time_scale=scale)


@pytest.mark.parametrize("clock", ['{"t0": NaN}', '{"t0": 1e300}', '{"t0": "x"}', "[", '{"t0": -1}'])
def test_a_clock_file_that_names_no_past_time_is_refused(tmp_path, clock):
    trace = write_trace(tmp_path / "t.csv", [(0, "a", "idle"), (200, "a", "busy")])
    (tmp_path / "local-source.json").write_text(clock)
    with pytest.raises(SourceError, match="--local-trace clock: "):
        LocalNodeSource("bft-test", tmp_path, nodes=1, trace=trace)
    assert (tmp_path / "local-source.json").read_text() == clock  # kept for a person to look at


# -- imports -------------------------------------------------------------------------------------


def test_an_import_whose_transitions_multiply_past_the_cap_is_refused_naming_it(tmp_path, capsys):
    log = tmp_path / "sacct.txt"
    log.write_text("JobID|Start|End|NodeList\n" + "".join(
        f"{k}|{100 * k}|{100 * k + 50}|n[1-1000000]\n" for k in range(1, 7)))
    message = one_line_error(capsys, ["trace", "import", "sacct", str(log), "--machine-nodes", "n[1-1000000]",
                                      "-o", str(tmp_path / "t.csv")])
    assert "more than 10000000 transitions, the most an import makes (kMaxImportTransitions)" in message
    assert not (tmp_path / "t.csv").exists()
