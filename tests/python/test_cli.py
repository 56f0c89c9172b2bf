"""`bft replay` / `python -m bft replay` (the default run, files written, errors) and `bft trace stats`."""

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
    assert len(lines) == 1 and lines[0].startswith(f"bft {argv[0]}: error: "), err
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


def test_nonsense_arguments_are_one_line_errors_not_tracebacks_or_silent_defaults(tmp_path, capsys):
    empty = tmp_path / "empty.txt"
    empty.write_text("\n\n")
    latin1 = tmp_path / "latin1.txt"
    latin1.write_bytes(b"a\ncaf\xe9\n")
    cases = [
        (["--nodes", f"@{empty}"], f"--nodes: {empty} names no nodes"),
        (["--nodes", ","], "--nodes ',' names no nodes"),
        (["--nodes", f"@{latin1}"], f"--nodes: {latin1}:2: not UTF-8 text (byte 0xE9 at column 4)"),
        (["--nodes", "\u00b2"], "node"),  # a superscript two is not a count; no int() traceback
        (["--policy", ","], "--policy: no policy named"),
        (["--max-jobs", "99999999999"], "--max-jobs must be between 1 and 2147483647"),
        (["--max-jobs", "0"], "--max-jobs must be between 1"),
        (["--seed", "-1"], "--seed must be between 0 and 18446744073709551615"),
        (["--seed", "99999999999999999999999"], "--seed must be between 0"),
        (["--tfwd", "nan"], "--tfwd must be a finite number"),
        (["--policy", "node_milp", "--time-limit", "1e-9"], "--time-limit must be at least 0.001 s"),
        (["--curves", "learned", "--advisor", "warmup"], "--advisor 'warmup': expected KEY=VALUE with KEY one of"),
        (["--curves", "learned", "--advisor", "fit=3"], "expected KEY=VALUE"),
        (["--curves", "learned", "--advisor", "warmup_intervals=1.5"],
         "--advisor warmup_intervals: '1.5' is not an integer"),
        (["--curves", "learned", "--advisor", "warmup_s=abc"], "--advisor warmup_s: 'abc' is not a number"),
        (["--curves", "learned", "--advisor", "warmup_s=-2"], "--advisor warmup_s -2 must be finite and >= 0"),
        (["--curves", "learned", "--advisor", "drift_intervals=99999999999"], "--advisor drift_intervals"),
        (["--advisor", "warmup_s=2"], "add --curves learned"),
        (["--curves", "learned", "--advisor", "fit.model=1"], "expected KEY=VALUE"),
        (["--curves", "learned", "--advisor", "fit.extrapolation_discount=2"],
         "--advisor fit options: extrapolation_discount 2 is not in [0, 1]"),
    ]
    for extra, needle in cases:
        msg = one_line_error(capsys, ["replay", "-q", *extra])
        assert needle in msg, (extra, msg)


def test_advisor_options_reach_a_learned_replay(tmp_path):
    def samples_done(out, *extra):
        argv = ["replay", "-q", "--policy", "exact", "--curves", "learned", "--out", str(out), "--no-plots"]
        assert cli.main([*argv, *extra]) == 0
        [summary] = out.glob("summary-*.json")
        return json.loads(summary.read_text())["samples_done"]

    default = samples_done(tmp_path / "default")
    assert samples_done(tmp_path / "same", "--advisor", "warmup_s=30") == default  # the default value
    assert samples_done(tmp_path / "other", "--advisor", "prior_samples_per_node_s=1",
                        "--advisor", "exploration_bonus=0") != default

    # The fit's options too: the default advisor's extrapolation, then FitOptions' conservative rule.
    assert samples_done(tmp_path / "fit-same", "--advisor", "fit.extrapolation_limit=8",
                        "--advisor", "fit.extrapolation_discount=1") == default
    assert samples_done(tmp_path / "fit-other", "--advisor", "fit.extrapolation_limit=2",
                        "--advisor", "fit.extrapolation_discount=0.5") != default


def test_out_without_matplotlib_says_what_to_install_before_replaying(tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # `import matplotlib` raises ImportError
    msg = one_line_error(capsys, ["replay", "-q", "--out", str(tmp_path / "out")])
    assert "matplotlib, which is not installed" in msg and "--no-plots" in msg
    assert cli.main(["replay", "-q", "--policy", "exact", "--out", str(tmp_path / "out"), "--no-plots"]) == 0
    assert (tmp_path / "out" / "summary-exact.json").is_file()


def test_replay_nodes_must_be_a_list_of_names():
    trace = sim.parse_trace("time,node,state\n0,a,idle\n0,b,idle\n")
    jobs = [sim.parse_jobs(json.dumps(JOB))[0]]
    with pytest.raises(ValueError, match="nodes: expected a list of node names, got the string 'ab'"):
        sim.replay(trace, jobs, nodes="ab", end_s=10)
    with pytest.raises(ValueError, match="nodes: the list is empty"):
        sim.replay(trace, jobs, nodes=[], end_s=10)
    assert sim.replay(trace, jobs, nodes=["a"], end_s=10).summary["nodes"] == 1


def test_trace_stats_reports_idle_capacity_as_text_and_png(tmp_path):
    trace = tmp_path / "t.csv"
    trace.write_text("time,node,state\n0,a,idle\n0,b,idle\n600,a,busy\n3600,b,busy\n3600,a,idle\n7200,a,busy\n")
    png = tmp_path / "stats.png"
    p = run_module("trace", "stats", str(trace), "--png", str(png))
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    assert lines[0] == f"{trace}: 2 nodes, 6 transitions over 2.00 h"
    # idle: 2 nodes for 600 s, then 1 for 6,600 s: 7,800 node-s over 7,200 s.
    assert lines[1] == "idle nodes (time-weighted): mean 1.1 (54.2 % of the nodes), median 1, p90 1, p99 2, max 2"
    assert lines[2] == "idle node-hours: 2"
    assert "idle holes: 3 ended (+0 open at the end)" in p.stdout
    assert "events: 2.0 per hour" in p.stdout
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_trace_stats_errors_are_one_line(tmp_path, capsys, monkeypatch):
    bad = tmp_path / "bad.csv"
    bad.write_text("time,node,state\n0,a,idle\n5,a,sleepy\n")
    assert f"{bad}:3" in one_line_error(capsys, ["trace", "stats", str(bad)])
    assert "missing.csv" in one_line_error(capsys, ["trace", "stats", str(tmp_path / "missing.csv")])
    assert "name a trace command: stats or import" in one_line_error(capsys, ["trace"])
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    good = tmp_path / "good.csv"
    good.write_text("time,node,state\n0,a,idle\n")
    assert "--png needs matplotlib" in one_line_error(capsys, ["trace", "stats", str(good), "--png", "x.png"])


@pytest.mark.parametrize("png", ["plot", "x.txt", "."])
def test_png_refuses_a_name_it_would_not_write(tmp_path, capsys, png):
    trace = tmp_path / "t.csv"
    trace.write_text("time,node,state\n0,a,idle\n200,a,busy\n")
    target = tmp_path / png
    assert one_line_error(capsys, ["trace", "stats", str(trace), "--png", str(target)]).endswith(
        f"--png {target}: name a file ending in .png")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.csv"]
