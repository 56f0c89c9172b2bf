"""bft.sim: readers, the replay engine through Python, numpy outputs, the real Summit slice."""

import gzip
import json
import math

import numpy as np
import pytest

from bft import curve, sim

TINY_TRACE = "time,node,state\n0,a,idle\n0,b,idle\n100,b,busy\n200,b,idle\n"
JOB = {
    "name": "j", "submit": 0, "min_nodes": 1, "max_nodes": 2, "work": 1e6, "scale_up_s": 5.0,
    "scale_down_s": 3.0, "nodes": [0, 1, 2], "throughput": [0.0, 10.0, 18.0], "objective": [0.0, 10.0, 18.0],
}


def write_jobs(path, jobs):
    path.write_text("".join(json.dumps(j) + "\n" for j in jobs))
    return path


def test_tiny_trace_replay_matches_the_hand_computed_accounting():
    trace = sim.parse_trace(TINY_TRACE)
    jobs = sim.parse_jobs(json.dumps(JOB))
    r = sim.replay(trace, jobs, "exact", end_s=300)
    s = r.summary
    # 1800 on 2 nodes, -54 preemption loss, +1000 on 1 node, -50 rescale loss, +1800 on 2 nodes.
    assert s["samples_done"] == pytest.approx(4496)
    assert s["samples_without_losses"] == pytest.approx(4600)
    assert s["overhead_efficiency"] == pytest.approx(4496 / 4600)
    assert s["idle_node_hours"] == pytest.approx(500 / 3600)
    assert s["idle_capture"] == pytest.approx(1.0)
    assert (s["rescales"], s["preemptions"]) == (1, 1)
    assert r.steps["time_s"].tolist() == [0, 100, 200, 300]
    assert r.steps["used_nodes"].dtype == np.int32
    assert r.steps["samples_done"].tolist() == pytest.approx([0, 1746, 2696, 4496])
    t, done = r.job_progress(0)
    assert t.tolist() == [0, 100, 200, 300]
    assert done[-1] == pytest.approx(4496)


def test_a_loss_larger_than_the_samples_done_is_charged_in_full():
    # b reclaimed 1 s in: loss 3 s x 18/s = 54 against 18 done -> done 0, 36 owed; [1,200) on one
    # node makes 1990 and pays the 36 first (1954); the grow at 200 costs 50 (1904); +1800 to 300.
    trace = sim.parse_trace("time,node,state\n0,a,idle\n0,b,idle\n1,b,busy\n200,b,idle\n")
    jobs = sim.parse_jobs(json.dumps(JOB))
    s = sim.replay(trace, jobs, "exact", end_s=300).summary
    assert s["loss_samples"] == pytest.approx(104)
    assert s["unpaid_loss_samples"] == 0
    assert s["samples_done"] == pytest.approx(3704)
    assert s["samples_without_losses"] == pytest.approx(3808)
    assert s["overhead_efficiency"] == pytest.approx(1 - 104 / 3808)
    # Ending at 2 s: 26 of the 54 are still owed; the efficiency counts the loss in full.
    r = sim.replay(trace, jobs, "exact", end_s=2)
    assert r.summary["unpaid_loss_samples"] == pytest.approx(26)
    assert r.jobs["unpaid_loss_samples"].tolist() == pytest.approx([26])
    assert r.summary["samples_done"] == 0
    assert r.summary["overhead_efficiency"] == pytest.approx(1 - 54 / 28)


def test_equal_share_and_exact_agree_on_a_single_job():
    trace = sim.parse_trace(TINY_TRACE)
    jobs = sim.parse_jobs(json.dumps(JOB))
    a = sim.replay(trace, jobs, "exact", end_s=300).summary
    b = sim.replay(trace, jobs, "equal_share", end_s=300).summary
    assert b["samples_without_losses"] == pytest.approx(a["samples_without_losses"])


def test_invariants_hold_on_the_synthetic_default():
    trace, jobs = sim.generate_synthetic(seed=3, nodes=128, mean_idle_nodes=30, duration_s=86400, jobs=20)
    r = sim.replay(trace, jobs, "exact", record_assignments=True)
    s = r.summary
    assert s["used_node_hours"] <= s["idle_node_hours"]
    assert np.all(r.steps["used_nodes"] <= r.steps["idle_nodes"])
    assert np.all(r.jobs["done"] <= r.jobs["work"])
    assert np.all(r.jobs["done"] >= 0)
    finished = r.jobs["finish_s"] >= 0
    assert np.all(r.jobs["done"][finished] == r.jobs["work"][finished])
    # The assignment log never gives a node to a second job before the first released it.
    owner = {}
    for node, job in zip(r.assignments["node"].tolist(), r.assignments["job"].tolist()):
        if job >= 0:
            assert node not in owner, f"node {node} runs two jobs"
            owner[node] = job
        else:
            assert owner.pop(node) >= 0
    assert s["samples_done"] > 0 and s["rescales"] > 0 and s["preemptions"] > 0
    assert s["samples_done"] - s["unpaid_loss_samples"] == pytest.approx(
        s["samples_without_losses"] - s["loss_samples"])


def test_generator_is_deterministic_and_round_trips_through_files(tmp_path):
    t1, j1 = sim.generate_synthetic(seed=7, nodes=64, mean_idle_nodes=16, duration_s=20000, jobs=5)
    t2, j2 = sim.generate_synthetic(seed=7, nodes=64, mean_idle_nodes=16, duration_s=20000, jobs=5)
    assert np.array_equal(t1.times, t2.times) and np.array_equal(t1.nodes, t2.nodes)
    sim.write_trace(t1, tmp_path / "t.csv.gz")
    sim.write_jobs(j1, tmp_path / "j.jsonl")
    with gzip.open(tmp_path / "t.csv.gz", "rt") as f:
        assert f.readline() == "time,node,state\n"
    t3 = sim.read_trace(tmp_path / "t.csv.gz")
    j3 = sim.read_jobs(tmp_path / "j.jsonl")
    assert t3.node_names == [t1.node_names[i] for i in sorted(set(t1.nodes.tolist()), key=t1.nodes.tolist().index)]
    assert len(t3) == len(t1)
    assert [j.name for j in j3] == [j.name for j in j1]
    assert j3[0].throughput == j1[0].throughput
    a = sim.replay(t1, j1, "exact").summary
    b = sim.replay(tmp_path / "t.csv.gz", tmp_path / "j.jsonl", "exact").summary
    assert a["samples_done"] == pytest.approx(b["samples_done"])


def per_second_trace_stats(text):
    """An independent oracle for sim.trace_stats: walk the trace second by second."""
    rows = [line.split(",") for line in text.strip().splitlines()[1:]]
    times = sorted({int(t) for t, _, _ in rows})
    start, end = times[0], times[-1]
    idle, since, holes, counts = set(), {}, [], []
    by_time = {}
    for t, node, state in rows:
        by_time.setdefault(int(t), []).append((node, state))
    for second in range(start, end):
        for node, state in by_time.get(second, []):
            if state == "idle":
                idle.add(node)
                since[node] = second
            else:
                idle.discard(node)
                holes.append(second - since.pop(node))
        counts.append(len(idle))
    for node, state in by_time.get(end, []):  # the last instant: holes end or open, no time counted
        if state == "busy":
            holes.append(end - since.pop(node))
        else:
            since[node] = end
    counts = np.sort(np.array(counts))
    span = end - start
    return {
        "mean_idle_nodes": counts.sum() / span,
        "p50_idle_nodes": int(counts[math.ceil(0.5 * span) - 1]),
        "p90_idle_nodes": int(counts[math.ceil(0.9 * span) - 1]),
        "p99_idle_nodes": int(counts[math.ceil(0.99 * span) - 1]),
        "holes": sorted(holes),
        "open": len(since),
        "events_per_hour": len(times) * 3600 / span,
    }


def test_trace_stats_match_a_per_second_sweep():
    rng = np.random.default_rng(5)
    for _ in range(30):
        lines = ["time,node,state"]
        for node in range(int(rng.integers(1, 6))):
            t = int(rng.integers(0, 50))
            for k in range(int(rng.integers(1, 8))):
                lines.append(f"{t},n{node},{'idle' if k % 2 == 0 else 'busy'}")
                t += int(rng.integers(1, 40))
        lines[1:] = sorted(lines[1:], key=lambda line: int(line.split(",")[0]))
        text = "\n".join(lines) + "\n"
        s = sim.trace_stats(sim.parse_trace(text))
        if s.end_s == s.start_s:
            continue
        want = per_second_trace_stats(text)
        assert s.mean_idle_nodes == pytest.approx(want["mean_idle_nodes"])
        for key in ("p50_idle_nodes", "p90_idle_nodes", "p99_idle_nodes"):
            assert getattr(s, key) == want[key], (key, text)
        assert s.hole_lengths_s.tolist() == want["holes"]
        assert s.holes_open_at_end == want["open"]
        assert s.events_per_hour == pytest.approx(want["events_per_hour"])


def test_bad_trace_file_names_file_and_line(tmp_path):
    p = tmp_path / "bad.csv"
    p.write_text("time,node,state\n1,a,idle\n2,a,sleeping\n")
    with pytest.raises(ValueError, match=r"bad\.csv:3: state: expected \"idle\" or \"busy\", found \"sleeping\""):
        sim.read_trace(p)
    p.write_text("time,node,state\n5,a,idle\n3,b,idle\n")
    with pytest.raises(ValueError, match=r"bad\.csv:3: time 3 is before the previous line's 5"):
        sim.read_trace(p)


def test_bad_gzip_trace_names_file_and_line(tmp_path):
    p = tmp_path / "bad.csv.gz"
    with gzip.open(p, "wt") as f:
        f.write("time,node,state\n1,a,idle\n1,a,busy\n")
    with pytest.raises(ValueError, match=r"bad\.csv\.gz:3: node a changes state twice at time 1"):
        sim.read_trace(p)


def test_bad_jobs_file_names_file_line_and_field(tmp_path):
    bad = dict(JOB, max_nodes="two")
    p = write_jobs(tmp_path / "bad.jsonl", [JOB, bad])
    with pytest.raises(ValueError, match=r'bad\.jsonl:2: job "j": "max_nodes": expected a number'):
        sim.read_jobs(p)
    p.write_text(json.dumps(JOB) + "\n" + json.dumps(dict(JOB, name="k", gpus=4)) + "\n")
    with pytest.raises(ValueError, match=r'bad\.jsonl:2: unknown field "gpus"'):
        sim.read_jobs(p)
    p.write_text(json.dumps(JOB)[:-1] + "\n")
    with pytest.raises(ValueError, match=r"bad\.jsonl:1: malformed JSON: column \d+: expected ',' or '}'"):
        sim.read_jobs(p)


def test_missing_files_raise_file_not_found(tmp_path):
    with pytest.raises(FileNotFoundError):
        sim.read_trace(tmp_path / "nope.csv")
    with pytest.raises(FileNotFoundError):
        sim.read_jobs(tmp_path / "nope.jsonl")


def test_learned_replay_uses_the_advisor_options_it_is_given():
    trace, jobs = sim.generate_synthetic(seed=3, nodes=64, mean_idle_nodes=20, duration_s=43200, jobs=10)

    def outcome(**kwargs):
        s = sim.replay(trace, jobs, "exact", "learned", **kwargs).summary
        return s["samples_done"], s["loss_samples"], s["rescales"]

    default = outcome()
    options = curve.AdvisorOptions()
    assert outcome(advisor=options) == default
    options.prior_samples_per_node_s = 1.0  # a pessimistic prior: new jobs look barely worth nodes
    options.exploration_bonus = 0.0
    assert outcome(advisor=options) != default
    options.warmup_s = -1.0
    with pytest.raises(ValueError, match="advisor options: warmup_s -1 must be finite and >= 0"):
        sim.replay(trace, jobs, "exact", "learned", advisor=options)
    with pytest.raises(ValueError, match="advisor: expected a bft.curve.AdvisorOptions, got dict"):
        sim.replay(trace, jobs, "exact", "learned", advisor={"warmup_s": 3})


def test_learned_replay_shares_what_jobs_of_one_model_measured():
    trace, jobs = sim.generate_synthetic(seed=3, nodes=64, mean_idle_nodes=20, duration_s=43200, jobs=10)

    def first_estimates(**kwargs):
        r = sim.replay(trace, jobs, "exact", "learned", max_jobs=2, **kwargs)
        p = r.progress
        first = {}
        for j, n, est in zip(p["job"], p["nodes"], p["estimate"]):
            if n > 0 and j not in first:
                first[int(j)] = float(est)
        return first

    alone = first_estimates()
    shared = first_estimates(models=["m"] * len(jobs))
    # The first job has no sibling yet; a later one starts from what the earlier ones measured.
    assert shared[0] == alone[0]
    assert shared != alone
    assert sim.model_from_name("J00000-AlexNet") == "AlexNet"
    assert sim.model_from_name("plain") == ""
    with pytest.raises(ValueError, match="models: 1 given for 10 jobs"):
        sim.replay(trace, jobs, "exact", "learned", models=["m"])


def test_learned_replay_values_a_speedup_objective_in_learned_speedup():
    trace, jobs = sim.generate_synthetic(seed=3, nodes=64, mean_idle_nodes=20, duration_s=43200, jobs=10)

    def outcome(specs, curves):
        s = sim.replay(trace, specs, "exact", curves).summary
        return s["samples_done"], s["rescales"]

    throughput = outcome(jobs, "learned")
    for spec in jobs:  # each job's objective: its throughput over its own one-node rate
        spec.objective = [v / spec.throughput_at(1) for v in spec.throughput]
    # The workload's objective no longer being ignored, the learned allocator maximises another sum
    # (the speedups, each in units of the advisor's estimate at 1 node), as the oracle does.
    assert outcome(jobs, "learned") != throughput


def test_the_halves_of_learned_mode_are_replay_modes():
    trace = sim.parse_trace(TINY_TRACE)
    jobs = sim.parse_jobs(json.dumps(JOB))
    for mode in ("learned_curves", "learned_costs"):
        r = sim.replay(trace, jobs, "exact", mode)
        assert r.summary["curves"] == mode
        assert r.progress["estimate"][0] == 2000.0  # the advisor's prior on 2 nodes
        assert r.progress["rate"][0] == 18.0
    assert sim.replay(trace, jobs, "exact", "oracle").progress["estimate"][0] == 0.0


def test_bad_options_raise_value_error():
    trace = sim.parse_trace(TINY_TRACE)
    jobs = sim.parse_jobs(json.dumps(JOB))
    with pytest.raises(ValueError, match="max_jobs"):
        sim.replay(trace, jobs, max_jobs=0)
    with pytest.raises(ValueError, match="unknown"):
        sim.replay(trace, jobs, policy="fastest")
    with pytest.raises(ValueError, match="curves"):
        sim.replay(trace, jobs, curves="psychic")
    with pytest.raises(ValueError, match='node "zz" is not in the trace'):
        sim.replay(trace, jobs, nodes=["zz"])


def test_select_nodes_reads_counts_positions_lists_and_files(tmp_path):
    # First appearance c, a, b: positions follow it, a count takes the sorted names.
    trace = sim.parse_trace("time,node,state\n0,c,idle\n0,a,idle\n50,b,idle\n100,a,busy\n")
    listed = tmp_path / "nodes.txt"
    listed.write_bytes(b"\xef\xbb\xbfb\n\n  c  \n")
    assert sim.select_nodes(None, trace) is None
    assert sim.select_nodes("2", trace) == ["a", "b"]
    assert sim.select_nodes("0:2", trace) == ["c", "a"]
    assert sim.select_nodes("1:3", trace) == ["a", "b"]
    assert sim.select_nodes(" b, c,", trace) == ["b", "c"]
    assert sim.select_nodes(f"@{listed}", trace) == ["b", "c"]
    nodes = sim.select_nodes("0:2", trace)
    assert sim.replay(trace, sim.parse_jobs(json.dumps(JOB)), nodes=nodes).summary["nodes"] == len(nodes)


def test_a_bad_node_spec_is_a_value_error_naming_the_option_and_what_is_wrong(tmp_path):
    trace = sim.parse_trace("time,node,state\n0,c,idle\n0,a,idle\n50,b,idle\n")
    latin1 = tmp_path / "latin1.txt"
    latin1.write_bytes(b"a\ncaf\xe9\n")
    cases = [
        ("0", "--nodes: the count must be >= 1"),
        ("4", "--nodes 4: the trace has only 3 nodes"),
        ("2:1", "--nodes 2:1: positions A:B need A < B <= 3 (the trace's nodes)"),
        ("0:4", "--nodes 0:4: positions A:B need A < B <= 3"),
        (",", "--nodes ',' names no nodes"),
        (f"@{tmp_path / 'missing.txt'}", f"--nodes: cannot read {tmp_path / 'missing.txt'}: No such file"),
        (f"@{latin1}", f"--nodes: {latin1}:2: not UTF-8 text (byte 0xE9 at column 4)"),
        (64, "--nodes: expected a string, got int"),
    ]
    for spec, message in cases:
        with pytest.raises(ValueError) as e:
            sim.select_nodes(spec, trace)
        assert str(e.value).startswith(message), (spec, str(e.value))


def test_progress_callback_runs_and_its_exception_stops_the_replay():
    trace, jobs = sim.generate_synthetic(seed=1, nodes=64, mean_idle_nodes=16, duration_s=20000, jobs=4)
    seen = []
    sim.replay(trace, jobs, on_progress=seen.append)
    assert seen[-1] == 1.0 and len(seen) >= 2 and seen == sorted(seen)

    def boom(_):
        raise KeyError("stop")

    with pytest.raises(KeyError):
        sim.replay(trace, jobs, on_progress=boom)


def test_trace_from_arrays_is_validated():
    t = sim.Trace(["x", "y"], [0, 0, 5], [0, 1, 0], [1, 1, 0])
    assert len(t) == 3 and t.last_time_s == 5
    with pytest.raises(ValueError, match="already busy"):
        sim.Trace(["x"], [0], [0], [0])


def test_comparison_table_lists_every_policy():
    trace = sim.parse_trace(TINY_TRACE)
    jobs = sim.parse_jobs(json.dumps(JOB))
    rs = [sim.replay(trace, jobs, p, end_s=300) for p in ("exact", "equal_share")]
    table = sim.comparison_table(rs)
    assert "exact" in table.splitlines()[0] and "equal_share" in table.splitlines()[0]
    assert "idle capture" in table and "allocator p99" in table


@pytest.fixture(scope="module")
def summit_slice(shared_data):
    trace = sim.read_trace(shared_data / "summit-idle-nodes-2021-02.csv.gz")
    jobs = sim.read_jobs(shared_data / "jobs-imagenet-throughput-1001.jsonl")[:400]
    return trace, jobs


def test_summit_slice_exact_beats_equal_share_and_learned_reaches_98_percent(summit_slice):
    trace, jobs = summit_slice
    window = dict(start_s=72000, end_s=72000 + 6 * 3600, record_job_progress=False)
    exact = sim.replay(trace, jobs, "exact", **window).summary
    equal = sim.replay(trace, jobs, "equal_share", **window).summary
    learned = sim.replay(trace, jobs, "exact", "learned", **window).summary
    assert exact["jobs_finished"] < 400
    assert exact["samples_done"] >= equal["samples_done"]
    # 97.1 % with the advisor's old conservative extrapolation, 99.3 % now (docs/sim.md).
    assert learned["samples_done"] >= 0.98 * exact["samples_done"]


def test_trace_arrays_are_not_truncated_to_integers():
    with pytest.raises(ValueError, match=r"Trace: times\[1\]: expected a whole number, got 1.9"):
        sim.Trace(["x"], [0, 1.9], [0, 0], [1, 0])
    with pytest.raises(ValueError, match="Trace: states: expected whole numbers"):
        sim.Trace(["x"], [0], [0], ["idle"])
    assert sim.Trace(["x"], [0.0, 2.0], [0, 0], [1, 0]).last_time_s == 2


def test_a_throughput_that_would_overflow_the_replay_is_rejected(tmp_path):
    line = {"name": "j", "submit": 0, "min_nodes": 1, "max_nodes": 2, "work": 1e6, "scale_up_s": 1.0,
            "scale_down_s": 1.0, "nodes": [0, 1, 2], "throughput": [0.0, 10.0, 1e300]}
    with pytest.raises(ValueError, match=r"j.jsonl:1: job \"j\": throughput: 1e\+300 samples/s exceeds 1e\+12"):
        sim.parse_jobs(json.dumps(line), "j.jsonl")


def test_a_workload_too_large_for_progress_reports_is_rejected():
    line = {"name": "j", "submit": 0, "min_nodes": 1, "max_nodes": 2, "work": 1e300, "scale_up_s": 1.0,
            "scale_down_s": 1.0, "nodes": [0, 1, 2], "throughput": [0.0, 10.0, 18.0]}
    with pytest.raises(ValueError, match=r"j.jsonl:1: job \"j\": work 1e\+300 exceeds 1e\+18 samples"):
        sim.parse_jobs(json.dumps(line), "j.jsonl")


def test_every_policy_replays_in_both_accountings_from_python_and_the_cli(tmp_path, capsys):
    trace, jobs = sim.generate_synthetic(seed=3, nodes=64, duration_s=6 * 3600, jobs=8, mean_idle_nodes=20)
    for policy in sim.POLICIES:
        if policy.endswith("_milp"):
            continue  # covered by the MILP tests; slow here
        for accounting in ("continuous", "reference"):
            r = sim.replay(trace, jobs, policy, accounting=accounting, start_s=0)
            s = r.summary
            assert s["accounting"] == accounting and s["policy"] == policy
            assert 0 < s["samples_done"] <= s["samples_without_losses"] * (1 + 1e-12)
            assert r.label == (policy if accounting == "continuous" else f"{policy}/reference")
    with pytest.raises(ValueError, match='accounting: unknown mode "published"'):
        sim.replay(trace, jobs, "exact", accounting="published")
    p = tmp_path / "t.csv"
    sim.write_trace(trace, p)
    j = tmp_path / "j.jsonl"
    sim.write_jobs(jobs, j)
    from bft import cli
    assert cli.main(["replay", "--trace", str(p), "--jobs", str(j), "--policy", "exact,completion_aware",
                     "--accounting", "both", "--start", "0", "--nodes", "0:32", "-q"]) == 0
    out = capsys.readouterr().out
    assert "completion_aware/reference" in out and "active idle capture" in out
    assert "policy exact, reference accounting: 32 nodes" in out
    assert cli.main(["replay", "--trace", str(p), "--jobs", str(j), "--nodes", "5:3", "-q"]) == 2
    assert f"positions A:B need A < B <= {len(sim.read_trace(p).node_names)}" in capsys.readouterr().err


def test_replay_defaults_and_mode_names_are_the_cpp_options(capsys):
    from bft import alloc, cli

    trace, jobs = sim.parse_trace(TINY_TRACE), sim.parse_jobs(json.dumps(JOB))
    s = sim.replay(trace, jobs, end_s=300).summary  # every option left to its default
    assert (s["policy"], s["curves"], s["accounting"], s["configurations"]) == (
        sim.DEFAULT_POLICY, sim.DEFAULT_CURVES, sim.DEFAULT_ACCOUNTING, sim.DEFAULT_CONFIGURATIONS)
    assert sim.DEFAULT_TFWD_S == alloc.DEFAULT_TFWD_S  # one horizon for the allocator and the replay
    # Every mode name the library has is accepted and reported back as given; bft replay offers them.
    for option, names in (("curves", sim.CURVE_MODES), ("accounting", sim.ACCOUNTINGS),
                          ("configurations", sim.CONFIGURATION_MODES)):
        for name in names:
            # start_s: the reference accounting's default window starts at the 1000th event.
            assert sim.replay(trace, jobs, start_s=0, end_s=300, **{option: name}).summary[option] == name
        with pytest.raises(SystemExit):
            cli.main(["replay", f"--{option}", "no-such-mode"])
        offered = capsys.readouterr().err
        assert all(f"'{name}'" in offered for name in (*names, "both")), offered


@pytest.mark.parametrize("accounting", ["both", "reference"])
def test_a_reference_window_the_trace_cannot_start_is_refused_before_any_replay_runs(tmp_path, capsys, accounting):
    from bft import cli

    trace, jobs = tmp_path / "t.csv", tmp_path / "j.jsonl"
    trace.write_text(TINY_TRACE)
    jobs.write_text(json.dumps(JOB) + "\n")
    assert sim.reference_start_s(sim.parse_trace(TINY_TRACE)) is None  # fewer than 1,000 distinct times
    assert cli.main(["replay", "--trace", str(trace), "--jobs", str(jobs), "--accounting", accounting, "-q"]) == 2
    captured = capsys.readouterr()
    assert captured.err.strip() == (
        f"bft replay: error: --accounting {accounting}: the reference window starts at the trace's "
        f"{sim.REFERENCE_START_EVENT}th distinct time and this trace has fewer: give --start")
    assert "policy" not in captured.out  # not one replay ran
    lines = "".join(f"{t},n,{'idle' if t % 2 else 'busy'}\n" for t in range(1, 1002))
    assert sim.reference_start_s(sim.parse_trace("time,node,state\n" + lines)) == sim.REFERENCE_START_EVENT


# The names bft.sim offered as one module (sim.py) before it became a package of one module per concept,
# and write_outputs (the files of `bft replay --out`, moved there from the command line).
NAMES_OF_THE_SINGLE_MODULE = {
    "ACCOUNTINGS", "CONFIGURATION_MODES", "CURVE_MODES", "CurveMode", "DEFAULT_ACCOUNTING", "DEFAULT_CONFIGURATIONS",
    "DEFAULT_CURVES", "DEFAULT_MAX_JOBS", "DEFAULT_MILP_TIME_LIMIT_S", "DEFAULT_POLICY", "DEFAULT_TFWD_S",
    "DIAGNOSTIC_CURVE_MODES", "IdleLifetimePredictor", "ImportedTrace", "JobSpec", "MAX_MACHINE_NODES", "NodeState",
    "POLICIES", "REFERENCE_START_EVENT", "ReplayResult", "STEP_COLUMNS", "Trace", "TraceStats", "comparison_table",
    "configuration_fields", "expand_hostlist", "expand_hostlists", "format_summary", "format_trace_stats",
    "generate_synthetic", "import_sacct", "import_swf", "job_fields", "machine_nodes_spec", "model_from_name",
    "parse_jobs", "parse_sacct_time", "parse_trace", "read_jobs", "read_sacct_jobs", "read_trace",
    "reference_start_s", "replay", "replay_label", "select_nodes", "trace_stats", "write_jobs", "write_trace",
    "write_outputs",
}


def test_the_sim_package_offers_exactly_the_names_of_the_single_module_it_replaced():
    import types

    offered = {name for name, value in vars(sim).items()
               if not name.startswith("_") and not isinstance(value, types.ModuleType)}
    assert offered == NAMES_OF_THE_SINGLE_MODULE
    assert set(sim.__all__) == NAMES_OF_THE_SINGLE_MODULE
    assert callable(sim.replay) and callable(sim.read_trace)  # functions, not the submodules of the same concept


def test_write_outputs_writes_each_replays_files_named_by_its_label_and_the_comparison(tmp_path):
    trace, jobs = sim.parse_trace(TINY_TRACE), sim.parse_jobs(json.dumps(JOB))
    results = [sim.replay(trace, jobs, "exact", end_s=300),
               sim.replay(trace, jobs, "exact", end_s=300, configurations="full")]
    written = sim.write_outputs(results, tmp_path, plots=False)
    assert written == ["steps-exact.csv", "summary-exact.json", "jobs-exact.csv", "steps-exact_full.csv",
                       "summary-exact_full.json", "jobs-exact_full.csv", "comparison.txt"]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(written)
    assert json.loads((tmp_path / "summary-exact_full.json").read_text())["configurations"] == "full"
    assert (tmp_path / "comparison.txt").read_text() == sim.comparison_table(results) + "\n"
