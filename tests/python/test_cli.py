"""`bft replay` / `python -m bft replay`: the default run, files written, errors."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import bft
from bft import cli, sim

JOB = {
    "name": "j", "submit": 0, "min_nodes": 1, "max_nodes": 2, "work": 1e6, "scale_up_s": 5.0,
    "scale_down_s": 3.0, "nodes": [0, 1, 2], "throughput": [0.0, 10.0, 18.0],
}


def run_module(*args, cwd=None):
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    return subprocess.run([sys.executable, "-m", "bft", *args], capture_output=True, text=True, env=env, cwd=cwd,
                          timeout=120)


def test_default_replay_runs_the_synthetic_workload_and_writes_outputs(tmp_path):
    out = tmp_path / "out"
    p = run_module("replay", "--out", str(out), cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    assert "built-in synthetic workload (seed 1)" in p.stdout
    assert "policy exact" in p.stdout and "policy equal_share" in p.stdout
    assert "idle capture" in p.stdout
    assert "100% replayed" in p.stderr  # the progress report (plain lines when not a terminal)
    for name in ("steps-exact.csv", "summary-exact.json", "jobs-exact.csv", "nodes-exact.png", "progress-exact.png",
                 "steps-equal_share.csv", "comparison.txt", "comparison.png"):
        assert (out / name).is_file(), name
    summary = json.loads((out / "summary-exact.json").read_text())
    assert summary["policy"] == "exact" and summary["samples_done"] > 0
    header = (out / "steps-exact.csv").read_text().splitlines()[0]
    assert header.split(",") == list(sim.STEP_COLUMNS)
    assert (out / "nodes-exact.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_files_policies_window_and_subset(tmp_path, capsys):
    (tmp_path / "t.csv").write_text("time,node,state\n0,a,idle\n0,b,idle\n100,b,busy\n200,b,idle\n")
    (tmp_path / "j.jsonl").write_text(json.dumps(JOB) + "\n")
    rc = cli.main(["replay", "--trace", str(tmp_path / "t.csv"), "--jobs", str(tmp_path / "j.jsonl"),
                   "--policy", "exact,equal_share", "--end", "5m", "--nodes", "a", "-q", "--out", str(tmp_path / "o"),
                   "--no-plots"])
    assert rc == 0
    out = capsys.readouterr().out
    assert "1 nodes" in out
    s = json.loads((tmp_path / "o" / "summary-exact.json").read_text())
    assert s["end_s"] == 300 and s["nodes"] == 1
    assert s["samples_done"] == pytest.approx(3000)  # one node at 10 samples/s for 300 s
    assert not list((tmp_path / "o").glob("*.png"))


def test_bad_trace_file_is_a_clear_error(tmp_path):
    (tmp_path / "t.csv").write_text("time,node,state\n0,a,idle\nsoon,b,idle\n")
    (tmp_path / "j.jsonl").write_text(json.dumps(JOB) + "\n")
    p = run_module("replay", "--trace", str(tmp_path / "t.csv"), "--jobs", str(tmp_path / "j.jsonl"))
    assert p.returncode != 0
    assert f"{tmp_path / 't.csv'}:3: time: expected a non-negative whole number of seconds" in p.stderr
    assert "Traceback" not in p.stderr


def one_line_error(capsys, argv):
    """Runs cli.main(argv), expects exit status 2 and returns its one-line error message."""
    rc = cli.main(argv)
    err = capsys.readouterr().err
    assert rc == 2, err
    assert "Traceback" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("bft replay: error: "), err
    return lines[0]


def test_bad_jobs_file_and_bad_arguments_are_clear_errors(tmp_path, capsys):
    (tmp_path / "t.csv").write_text("time,node,state\n0,a,idle\n")
    (tmp_path / "j.jsonl").write_text(json.dumps(dict(JOB, work=-5)) + "\n")
    msg = one_line_error(capsys, ["replay", "--trace", str(tmp_path / "t.csv"), "--jobs", str(tmp_path / "j.jsonl")])
    assert 'j.jsonl:1: job "j": work must be finite and > 0' in msg
    assert "unknown policy 'greedy'" in one_line_error(capsys, ["replay", "--policy", "greedy"])
    assert "give both --trace and --jobs" in one_line_error(capsys, ["replay", "--trace", str(tmp_path / "t.csv")])
    msg = one_line_error(capsys, ["replay", "--trace", str(tmp_path / "missing.csv"), "--jobs",
                                  str(tmp_path / "j.jsonl")])
    assert "No such file" in msg or "no such file" in msg
    # A directory where a file is expected: an OSError, not a traceback.
    assert "bft replay: error: " in one_line_error(capsys, ["replay", "--trace", str(tmp_path), "--jobs",
                                                            str(tmp_path / "j.jsonl")])


def test_unknown_milp_backend_is_rejected_before_replaying(capsys):
    msg = one_line_error(capsys, ["replay", "--policy", "count_milp", "--milp-backend", "foo", "-q"])
    assert "--milp-backend: unknown MILP backend 'foo'" in msg
    assert "glpk" in msg  # lists what this build has
    p = run_module("replay", "--policy", "count_milp", "--milp-backend", "foo")
    assert p.returncode == 2
    assert "Traceback" not in p.stderr and "bft replay: error: --milp-backend" in p.stderr
    assert "policy count_milp" not in p.stdout  # nothing was replayed


def test_an_unwritable_out_directory_is_an_error_before_replaying(tmp_path, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory\n")
    msg = one_line_error(capsys, ["replay", "-q", "--out", str(blocker / "sub")])
    assert f"--out {blocker / 'sub'}: cannot write there" in msg
    msg = one_line_error(capsys, ["replay", "-q", "--out", str(blocker)])
    assert "cannot write there" in msg
    if Path("/proc").is_dir():
        p = run_module("replay", "--out", "/proc/forbidden")
        assert p.returncode == 2
        assert "Traceback" not in p.stderr
        assert "bft replay: error: --out /proc/forbidden: cannot write there" in p.stderr
        assert "replayed" not in p.stderr and "policy exact" not in p.stdout  # before any replay


def test_a_library_error_during_a_replay_is_one_line(tmp_path, capsys, monkeypatch):
    def fail(*args, **kwargs):
        raise bft.NotAvailable("MILP backend 'x' is not available")

    monkeypatch.setattr(sim, "replay", fail)
    msg = one_line_error(capsys, ["replay", "-q", "--policy", "exact"])
    assert msg == "bft replay: error: exact: MILP backend 'x' is not available"


def test_time_arguments_accept_units():
    assert cli._parse_time("90m") == 5400
    assert cli._parse_time("1.5d") == 129600
    assert cli._parse_time("7200") == 7200


def test_a_truncated_or_padded_gzip_trace_is_a_one_line_error(tmp_path, capsys):
    # A file copied while being written used to replay half the trace with exit status 0.
    import gzip

    rows = "".join(f"{k},n{k},idle\n" for k in range(2000))
    whole = gzip.compress(("time,node,state\n" + rows).encode())
    (tmp_path / "j.jsonl").write_text(json.dumps(JOB) + "\n")
    trace = tmp_path / "t.csv.gz"
    for data, needle in [
        (whole[: len(whole) // 2], "gzip stream is truncated"),
        (whole[:-8], f"{trace}: the gzip stream is truncated after line 2001"),
        (whole + b"\0\0\0\0", f"{trace}: unexpected data after the end of the gzip stream"),
    ]:
        trace.write_bytes(data)
        line = one_line_error(capsys, ["replay", "--trace", str(trace), "--jobs", str(tmp_path / "j.jsonl"), "-q"])
        assert needle in line and str(trace) in line, line
    trace.write_bytes(whole)
    assert len(sim.read_trace(trace)) == 2000  # the intact file reads whole
