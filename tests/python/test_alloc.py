"""bft.allocate / bft.alloc: solvers agree, bad input names the field, outputs are numpy arrays."""

import copy
import json
import random
import re
import threading

import numpy as np
import pytest

import bft
from bft import alloc, curve


def job(name, lo, hi, nodes, values, up=0.0, down=0.0, **extra):
    d = {"name": name, "min_nodes": lo, "max_nodes": hi, "nodes": nodes, "throughput": values,
         "scale_up_s": up, "scale_down_s": down}
    d.update(extra)
    return d


def test_hand_solved_case_and_numpy_outputs():
    jobs = [job("a", 1, 4, [1, 4], [10, 40]), job("b", 1, 2, [1, 2], [15, 30])]
    r = bft.allocate(jobs, pool=np.arange(100, 104), current={100: "a"})
    assert r.objective == pytest.approx(500.0)
    assert r.status == alloc.AllocationStatus.OPTIMAL
    assert r.termination is None  # the exact solver runs no MILP
    for field in ("nodes_before", "nodes_after", "rate", "value", "penalty", "map_nodes", "map_jobs"):
        assert isinstance(getattr(r, field), np.ndarray), field
    assert r.nodes_after.tolist() == [2, 2]
    assert r.nodes_before.tolist() == [1, 0]
    assert r.job_ids == ["a", "b"]
    assert r.jobs[0].kept.tolist() == [100]
    assert isinstance(r.jobs[1].added, np.ndarray)
    assert sorted(r.map) == [100, 101, 102, 103]
    assert r.map_nodes.dtype == np.int64
    assert [r.job_ids[j] for j in r.map_jobs] == [r.map[n] for n in r.map_nodes]
    assert r.rate.tolist() == [20.0, 30.0]


def random_jobs(rng, count, max_nodes=6):
    jobs = []
    for j in range(count):
        lo = rng.randint(1, 2)
        hi = rng.randint(lo, max_nodes)
        nodes = sorted(rng.sample(range(1, hi + 3), rng.randint(1, 3)))
        jobs.append(job(f"j{j}", lo, hi, nodes, [rng.uniform(0, 50) for _ in nodes],
                        up=rng.uniform(0, 20), down=rng.uniform(0, 10)))
    return jobs


@pytest.mark.parametrize("goal", ["throughput", "max_min_fair"])
def test_solvers_agree_on_random_problems(goal):
    rng = random.Random(3)
    backends = bft.milp.available_backends()
    if "glpk" not in backends:
        pytest.skip("the GLPK backend is not built into this module")
    for _ in range(60):
        jobs = random_jobs(rng, rng.randint(0, 4))
        pool = rng.sample(range(50), rng.randint(0, 8))
        current = {n: rng.choice(jobs)["name"] for n in pool if jobs and rng.random() < 0.5}
        results = {s: bft.allocate(jobs, pool, current, solver=s, goal=goal)
                   for s in ("exact", "count_milp", "node_milp")}
        best = results["exact"].objective
        for s, r in results.items():
            assert r.status == alloc.AllocationStatus.OPTIMAL, (s, r.message)
            assert r.objective == pytest.approx(best, rel=1e-6, abs=1e-6), s
            assert r.min_normalized_value == pytest.approx(results["exact"].min_normalized_value, abs=1e-6)
            assert r.nodes_after.sum() <= len(pool)
        heuristic = bft.allocate(jobs, pool, current, solver="equal_share")
        if goal == "throughput":
            assert heuristic.objective <= best + 1e-6 * max(1.0, abs(best))


def test_job_objects_weights_and_enums():
    curve = bft.curve.ThroughputCurve([1, 2], [10.0, 20.0])
    a = alloc.Job("a", 1, 2, curve)
    b = alloc.Job("b", 1, 2, curve, weight=1.0)
    r = bft.allocate([a, b], [1, 2], weights=[1.0, 3.0])
    assert r.nodes_after.tolist() == [0, 2]
    r2 = bft.allocate([a, b], [1, 2], solver=alloc.SolverKind.EQUAL_SHARE)
    assert r2.nodes_after.tolist() == [1, 1]
    assert r2.solver == alloc.SolverKind.EQUAL_SHARE
    assert r2.status == alloc.AllocationStatus.HEURISTIC and r2.termination is None


def test_objective_field_is_maximised_and_throughput_gives_the_rate():
    j = job("a", 1, 4, [1, 4], [100, 400], objective=[1, 4])
    r = bft.allocate([j], [1, 2, 3])
    assert r.value.tolist() == [3.0]
    assert r.rate.tolist() == [300.0]


def test_empty_pool_and_no_jobs():
    r = bft.allocate([], [1, 2, 3])
    assert r.nodes_after.shape == (0,)
    assert r.objective == 0.0
    r = bft.allocate([job("a", 1, 4, [1, 4], [10, 40])], [])
    assert r.nodes_after.tolist() == [0]


@pytest.mark.parametrize(
    "bad, field",
    [
        (dict(min_nodes=5), "min_nodes"),
        (dict(min_nodes=0), "min_nodes"),
        (dict(min_nodes="x"), "min_nodes"),
        (dict(scale_up_s=-1), "scale_up_s"),
        (dict(scale_down_s=float("nan")), "scale_down_s"),
        (dict(weight=-2), "weight"),
        (dict(nodes=[2, 1], throughput=[1, 2]), "throughput"),
        (dict(nodes=[1, 2], throughput=[1, -2]), "throughput"),
        (dict(nodes=[1, 2], throughput=[1]), "throughput"),
        (dict(nodes=[1.5, 2]), "nodes"),
        (dict(nodes=[1, 10**12], throughput=[1, 2]), "nodes"),
        (dict(max_nodes=2**40), "max_nodes"),
    ],
)
def test_bad_job_fields_raise_value_error_naming_them(bad, field):
    j = job("a", 1, 4, [1, 4], [10, 40])
    j.update(bad)
    with pytest.raises(ValueError, match=field):
        bft.allocate([j], [1, 2])


def test_missing_fields_and_bad_arguments():
    j = job("a", 1, 4, [1, 4], [10, 40])
    for field in ("min_nodes", "max_nodes", "nodes", "name"):
        broken = {k: v for k, v in j.items() if k != field}
        with pytest.raises(ValueError, match=field):
            bft.allocate([broken], [1, 2])
    with pytest.raises(ValueError, match="pool"):
        bft.allocate([j], [1, 1])
    with pytest.raises(ValueError, match="not in the pool"):
        bft.allocate([j], [1, 2], {7: "a"})
    with pytest.raises(ValueError, match="unknown job"):
        bft.allocate([j], [1, 2], {1: "zzz"})
    with pytest.raises(ValueError, match="duplicate job id"):
        bft.allocate([j, dict(j)], [1, 2])
    with pytest.raises(ValueError, match="tfwd"):
        bft.allocate([j], [1, 2], tfwd=0)
    with pytest.raises(ValueError, match="solver"):
        bft.allocate([j], [1, 2], solver="simplex")
    with pytest.raises(ValueError, match="goal: unknown goal 'fastest' \\(expected throughput or max_min_fair\\)"):
        bft.allocate([j], [1, 2], goal="fastest")
    with pytest.raises(ValueError, match="weights"):
        bft.allocate([j], [1, 2], weights=[1, 2])
    with pytest.raises(ValueError, match="current"):
        bft.allocate([j], [1, 2], current=[(1, "a", 3)])
    with pytest.raises(ValueError, match="pool: node id"):
        bft.allocate([j], [1, 2**70])
    with pytest.raises(ValueError, match="current: entry 0: node id"):
        bft.allocate([j], [1, 2], {2**70: "a"})
    with pytest.raises(bft.NotAvailable):
        bft.allocate([j], [1, 2], solver="count_milp", milp_backend="no-such-backend")


def test_names_of_the_wrong_type_are_one_line_and_an_unknown_backend_is_a_value_error():
    j = job("a", 1, 4, [1, 4], [10, 40])
    for field in ("solver", "goal", "milp_backend"):
        with pytest.raises(TypeError, match=rf"^{field}: expected a name \(a str\), got NoneType$"):
            bft.allocate([j], [1, 2], **{field: None})
    # Documented as NotAvailable (docs/alloc.md) and, as bad input, a ValueError (allocate's docstring).
    with pytest.raises(ValueError, match="MILP backend 'bogus' is not available") as raised:
        bft.allocate([j], [1, 2], solver="count_milp", milp_backend="bogus")
    assert isinstance(raised.value, bft.NotAvailable)


def test_exact_refuses_a_problem_whose_table_would_not_fit_naming_its_size():
    """1,500 jobs that each want 100 of 100,000 nodes: a 1.1 GiB table, refused in one line (1e5 jobs on
    1e5 nodes ended in std::bad_alloc)."""
    curve_ = bft.curve.ThroughputCurve([1, 100], [1.0, 100.0])
    jobs = [alloc.Job(f"j{k}", 1, 100, curve_) for k in range(1500)]
    with pytest.raises(ValueError, match=r"^exact: 1500 jobs on 100000 nodes need a table of \d+ MiB, more than 1024"):
        bft.allocate(jobs, list(range(100_000)))


def test_real_workload_curves(shared_data):
    path = shared_data / "jobs-imagenet-throughput-1001.jsonl"
    if not path.exists():
        pytest.skip(f"real data not found: {path}")
    with open(path) as f:
        jobs = [json.loads(line) for _, line in zip(range(100), f)]
    pool = np.arange(4734)
    current = {int(n): jobs[int(n) % 100]["name"] for n in pool[:2000]}
    r = bft.allocate(jobs, pool, current)
    assert r.status == alloc.AllocationStatus.OPTIMAL
    assert r.nodes_after.sum() <= 4734
    assert np.all((r.nodes_after == 0) | ((r.nodes_after >= 1) & (r.nodes_after <= 64)))
    heuristic = bft.allocate(jobs, pool, current, solver="equal_share")
    assert heuristic.objective <= r.objective


def test_concurrent_solves_from_threads_match_a_plain_call():
    # The solve call releases the GIL; solves from several threads must not interfere.
    rng = random.Random(9)
    jobs = random_jobs(rng, 200, max_nodes=64)
    pool = list(range(3000))
    expected = bft.allocate(jobs, pool).objective
    out = []
    threads = [threading.Thread(target=lambda: out.append(bft.allocate(jobs, pool).objective)) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert out == [expected] * 3


@pytest.mark.parametrize(
    "change, needle",
    [
        # Each of these used to be coerced silently. The messages are the workload reader's.
        (dict(min_nodes="2"), 'jobs[0]: job "a": "min_nodes": expected a number, found "2"'),
        (dict(scale_up_s="5"), 'jobs[0]: job "a": "scale_up_s": expected a number, found "5"'),
        (dict(max_nodes=True), 'jobs[0]: job "a": "max_nodes": expected a number, found True'),
        (dict(max_nodes=np.bool_(True)), '"max_nodes": expected a number, found'),
        (dict(name=[1, 2]), 'jobs[0]: "name": expected a string, found an array of numbers'),
        (dict(throughput=["10", "40"]), "\"throughput\": expected an array of numbers, found ['10', '40']"),
        (dict(sacle_up_s=5.0), 'jobs[0]: unknown field "sacle_up_s" (known: name, submit, min_nodes'),
        (dict(id="a"), 'unknown field "id"'),
        (dict(configurations=[{"name": "s", "efficiency": 2, "throughput": [1, 2]}]),
         'jobs[0]: job "a": configurations[0]: efficiency 2 must be in (0, 1]'),
    ],
)
def test_job_dicts_are_checked_by_the_workload_format_validator(change, needle):
    j = job("a", 1, 4, [1, 4], [10, 40])
    j.update(change)
    with pytest.raises(ValueError, match=re.escape(needle)):
        bft.allocate([j], [1, 2])


def test_a_job_dict_and_its_workload_line_give_the_same_job():
    d = job("a", 1, 4, [1, 4], [10, 40], up=3.0, objective=[2, 5], weight=2.0)
    spec = bft.jobs.parse_jobs(json.dumps(dict(d, submit=0, work=100)))[0]
    built = alloc.to_job(d)
    assert (built.min_nodes, built.max_nodes, built.scale_up_s, built.weight) == (1, 4, 3.0, 2.0)
    assert built.objective.values.tolist() == spec.objective == [2.0, 5.0]
    assert built.throughput.values.tolist() == spec.throughput
    # numpy arrays and numbers are numbers; the replay-only fields are optional for the allocator.
    numpy_job = dict(d, nodes=np.array([1, 4]), throughput=np.array([10.0, 40.0]), max_nodes=np.int64(4))
    assert alloc.to_job(numpy_job).throughput.values.tolist() == spec.throughput
    with pytest.raises(ValueError, match=re.escape('job "a": missing field "submit"')):
        bft.jobs.from_dict(d)


def test_missing_rescale_costs_are_an_error_as_in_the_workload_format():
    j = job("a", 1, 4, [1, 4], [10, 40])
    del j["scale_down_s"]
    with pytest.raises(ValueError, match='jobs\\[0\\]: job "a": missing field "scale_down_s"'):
        bft.allocate([j], [1, 2])
    # A workload line (with the replay-only fields submit and work) is a valid job dict.
    line = dict(job("b", 1, 4, [1, 4], [10, 40]), submit=0, work=1e6)
    assert bft.allocate([line], [1, 2]).nodes_after.tolist() == [2]


def test_current_and_pool_are_not_coerced():
    j = job("a", 1, 4, [1, 4], [10, 40])
    with pytest.raises(ValueError, match="current: entry 0: node id must be an integer, got 1.7"):
        bft.allocate([j], [1, 2], {1.7: "a"})
    with pytest.raises(ValueError, match="current: entry 0: job id must be a string"):
        bft.allocate([j], [1, 2], {1: 7})
    with pytest.raises(ValueError, match="pool: node ids must be integers or node names"):
        bft.allocate([j], [1.0, 2.5])
    with pytest.raises(ValueError, match="pool: node ids must be integers or node names"):
        bft.allocate([j], [True, False])


def test_named_nodes_give_the_allocation_of_their_ids():
    # A scheduler names its nodes ("c05n06"). Names interned in pool order get ids 0, 1, ...; with the
    # pool in ascending id order, the named allocation is the integer one with every id named.
    rng = random.Random(11)
    for _ in range(40):
        jobs = random_jobs(rng, rng.randint(1, 4))
        pool = sorted(rng.sample(range(50), rng.randint(1, 8)))
        current = {n: rng.choice(jobs)["name"] for n in pool if rng.random() < 0.5}
        name = {n: f"c{n:02d}n{n % 7:02d}" for n in pool}
        for solver in ("exact", "equal_share"):
            by_id = bft.allocate(jobs, pool, current, solver=solver)
            named = bft.allocate(jobs, [name[n] for n in pool], {name[n]: j for n, j in current.items()}, solver=solver)
            assert isinstance(named, bft.alloc.NamedAllocation)
            assert named.map == {name[n]: j for n, j in by_id.map.items()}
            assert named.map_nodes == [name[n] for n in by_id.map_nodes]
            assert named.objective == by_id.objective and named.status == by_id.status
            assert named.nodes_after.tolist() == by_id.nodes_after.tolist()
            for a, b in zip(named.jobs, by_id.jobs):
                assert a.id == b.id
                for part in ("kept", "added", "released"):
                    assert getattr(a, part) == [name[n] for n in getattr(b, part)]


def test_bad_node_names_are_value_errors_naming_the_entry():
    j = job("a", 1, 4, [1, 4], [10, 40])
    cases = [
        (dict(pool=["h1", "h1"]), "pool: node 'h1' appears twice"),
        (dict(pool=["h1", 2]), "pool: entry 1: node names and integer ids cannot be mixed"),
        (dict(pool=["h1", ""]), "pool: entry 1: node name: must not be empty"),
        (dict(pool=["a\x00b"]), "pool: entry 0: node name: must not hold a NUL byte"),
        (dict(pool=["h1"], current={"h9": "a"}), "current: entry 0: node 'h9' is not in the pool"),
        (dict(pool=["h1"], current={1: "a"}), "current: entry 0: the pool names its nodes"),
        (dict(pool=[1], current={"h1": "a"}), "current: entry 0: node id must be an integer"),
    ]
    for kwargs, message in cases:
        with pytest.raises(ValueError, match=re.escape(message)):
            bft.allocate([j], **kwargs)


def test_values_whose_products_overflow_are_rejected_naming_the_field():
    # A job dict is held to the workload format's limit; a Job object reaches the allocator's own check.
    with pytest.raises(ValueError, match=re.escape('jobs[0]: job "a": throughput: 1e+300 samples/s exceeds 1e+12')):
        bft.allocate([job("a", 1, 4, [1, 4], [10, 1e300])], [1, 2])
    big = alloc.Job("a", 1, 4, curve.ThroughputCurve([1, 4], [10, 1e300]))
    with pytest.raises(ValueError, match="tfwd_s 10 x weight 1 x largest objective value 1e\\+300"):
        bft.allocate([big], [1, 2])
    with pytest.raises(ValueError, match="tfwd_s 1e\\+308"):
        bft.allocate([job("a", 1, 4, [1, 4], [10, 40])], [1, 2], tfwd=1e308)
    for solver in ("exact", "equal_share"):
        with pytest.raises(ValueError, match="exceeds"):
            bft.allocate([big], [1, 2], solver=solver)


def test_allocations_have_their_own_status_apart_from_milp_termination():
    jobs = [job("a", 1, 4, [1, 4], [100, 400]), job("b", 1, 4, [1, 4], [1, 4])]
    assert bft.allocate(jobs, [1, 2, 3, 4]).status == alloc.AllocationStatus.OPTIMAL
    assert bft.allocate(jobs, [1, 2, 3, 4], solver="equal_share").status == alloc.AllocationStatus.HEURISTIC
    assert {s.name for s in alloc.AllocationStatus} == {"OPTIMAL", "HEURISTIC", "TIME_LIMIT", "FAILED"}


@pytest.mark.skipif(not bft.milp.available_backends(), reason="built without a MILP backend (GLPK, CBC)")
def test_a_milp_allocation_reports_the_solvers_termination_beside_its_status():
    jobs = [job("a", 1, 4, [1, 4], [100, 400]), job("b", 1, 4, [1, 4], [1, 4])]
    milp = bft.allocate(jobs, [1, 2, 3, 4], solver="count_milp")
    assert milp.status == alloc.AllocationStatus.OPTIMAL and milp.termination == bft.milp.Termination.OPTIMAL


def test_completion_and_lifetime_policies_take_their_inputs_by_job_and_by_pool_node():
    jobs = [
        {"name": "a", "min_nodes": 1, "max_nodes": 4, "scale_up_s": 0, "scale_down_s": 0, "nodes": [1, 4],
         "throughput": [10, 40]},
        {"name": "b", "min_nodes": 1, "max_nodes": 4, "scale_up_s": 0, "scale_down_s": 0, "nodes": [1, 4],
         "throughput": [9, 36]},
    ]
    # a is 100 samples from done: one node finishes it within the 10 s horizon, b takes the rest.
    done_soon = alloc.allocate(jobs, [0, 1, 2, 3], solver="completion_aware", remaining_samples=[100, 1e9])
    assert done_soon.nodes_after.tolist() == [1, 3]
    assert alloc.allocate(jobs, [0, 1, 2, 3], solver="exact").nodes_after.tolist() == [4, 0]
    # Named nodes: the four with the longest expected idle times go out (n0, expected 5 s, stays).
    named = alloc.allocate(jobs[:1], ["n0", "n1", "n2", "n3", "n4"], solver="lifetime_aware",
                           expected_idle_s=[5, 900, 60, 700, 800])
    assert set(named.jobs[0].added) == {"n1", "n3", "n4", "n2"}
    small = dict(jobs[0], max_nodes=2)
    assert set(alloc.allocate([small], ["n0", "n1", "n2"], solver="lifetime_aware",
                              expected_idle_s=[5, 900, 60]).jobs[0].added) == {"n1", "n2"}
    with pytest.raises(ValueError, match="expected_idle_s: 2 values for 3 pool nodes"):
        alloc.allocate([small], [0, 1, 2], solver="lifetime_aware", expected_idle_s=[1, 2])
    with pytest.raises(ValueError, match=r"expected_idle_s\[1\] \(node 1\): -2 must be"):
        alloc.allocate([small], [0, 1, 2], solver="lifetime_aware", expected_idle_s=[1, -2, 3])
    mine = alloc.to_job(jobs[0])
    alloc.allocate([mine], [0, 1, 2, 3], solver="completion_aware", remaining_samples=[5])
    assert mine.remaining_samples == 0.0  # the caller's Job is not changed
    with pytest.raises(ValueError, match="remaining_samples: expected numbers"):
        alloc.allocate([small], [0, 1], solver="completion_aware", remaining_samples=["lots"])
    with pytest.raises(ValueError, match="remaining_samples -5 must be a finite number >= 0"):
        alloc.allocate([small], [0, 1], solver="completion_aware", remaining_samples=[-5])


def test_a_job_with_a_partial_backpropagation_configuration_gets_it_when_it_is_worth_more():
    full = curve.ThroughputCurve([1, 2], [10.0, 18.0])
    job = alloc.Job("j", 1, 2, full)
    job.configurations = [alloc.Configuration("spb", curve.ThroughputCurve([1, 2], [14.0, 26.0]), efficiency=0.9)]
    a = alloc.allocate([job], [0, 1])
    assert a.configuration.tolist() == [1] and a.jobs[0].configuration == 1
    assert a.objective == pytest.approx(10 * 0.9 * 26)
    assert alloc.allocate([job], [0, 1], weights=[2.0]).jobs[0].configuration == 1  # kept when reweighted
    assert alloc.allocate([job], [0, 1], solver="equal_share").jobs[0].configuration == 0
    job.configurations = [alloc.Configuration("spb", curve.ThroughputCurve([1, 2], [14.0, 26.0]), efficiency=0.5)]
    assert alloc.allocate([job], [0, 1]).jobs[0].configuration == 0
    job.configurations = [alloc.Configuration("full", full)]
    with pytest.raises(ValueError, match="configurations\\[0\\]: name 'full' is taken"):
        alloc.allocate([job], [0, 1])


def test_copies_of_named_allocations_are_refused_like_the_others():
    job = {"name": "a", "min_nodes": 1, "max_nodes": 2, "nodes": [1, 2], "throughput": [1.0, 2.0], "scale_up_s": 0,
           "scale_down_s": 0}
    for pool in ([1, 2], ["x", "y"]):
        result = bft.allocate([job], pool)
        for view in (result, result.jobs[0]):
            with pytest.raises(TypeError, match="cannot pickle"):
                copy.copy(view)
    json.dumps(result.map)  # the named view itself still works
