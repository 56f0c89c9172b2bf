"""Property tests (hypothesis): random inputs, invariants that must hold for every one of them.

No timing is involved (deadline=None); the number of examples is bounded so the suite stays quick.
"""

import itertools
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import bft
from bft import milp, sim

BACKENDS = [b for b in ("glpk", "cbc") if b in milp.available_backends()]


@st.composite
def small_models(draw):
    """A knapsack over 1-4 bounded integers plus one piecewise-linear term (possibly non-concave)."""
    n = draw(st.integers(1, 4))
    upper = [draw(st.integers(1, 4)) for _ in range(n)]
    weights = [draw(st.integers(0, 6)) for _ in range(n)]
    capacity = draw(st.integers(0, 15))
    values = [draw(st.integers(-3, 6)) for _ in range(n)]
    target = draw(st.integers(0, n - 1))
    ys = [draw(st.integers(-5, 10)) for _ in range(upper[target] + 1)]
    return upper, weights, capacity, values, target, ys


def enumerate_optimum(upper, weights, capacity, values, target, ys):
    best = None
    for x in itertools.product(*[range(u + 1) for u in upper]):
        if sum(w * v for w, v in zip(weights, x)) <= capacity:
            value = sum(c * v for c, v in zip(values, x)) + ys[x[target]]
            best = value if best is None else max(best, value)
    return best


@settings(max_examples=60, deadline=None)
@given(small_models())
def test_every_backend_finds_the_enumerated_optimum(model):
    upper, weights, capacity, values, target, ys = model
    m = milp.Model("property")
    x = [m.add_integer(0, u) for u in upper]
    m.add_constraint(milp.quicksum(w * v for w, v in zip(weights, x)) <= capacity, name="capacity")
    f = m.add_piecewise_linear(x[target], list(range(upper[target] + 1)), ys)
    m.maximize(milp.quicksum(c * v for c, v in zip(values, x)) + f)
    expected = enumerate_optimum(*model)
    for backend in BACKENDS:
        r = milp.solve(m, backend=backend)
        assert r.termination == milp.Termination.OPTIMAL, (backend, r.message)
        assert r.objective == pytest.approx(expected, abs=1e-6), backend


node_names = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789-_.", min_size=1, max_size=8)


@settings(max_examples=60, deadline=None)
@given(st.lists(node_names, min_size=1, max_size=6, unique=True), st.lists(st.integers(0, 50), min_size=1, max_size=30))
def test_a_written_trace_reads_back_identically(tmp_path_factory, names, gaps):
    # Alternate idle/busy per node at non-decreasing times; no node changes twice at one time.
    times, nodes, states, last = [], [], [], {}
    t = 0
    for k, gap in enumerate(gaps):
        t += gap + 1
        node = k % len(names)
        state = 1 - last.get(node, 0)
        last[node] = state
        times.append(t)
        nodes.append(node)
        states.append(state)
    trace = sim.Trace(names, times, nodes, states)
    for suffix in (".csv", ".csv.gz"):
        path = tmp_path_factory.mktemp("trace") / f"t{suffix}"
        sim.write_trace(trace, path)
        back = sim.read_trace(path)
        assert list(back.times) == times
        assert list(back.states) == states
        assert [back.node_names[i] for i in back.nodes] == [names[i] for i in nodes]


job_names = st.text(min_size=1, max_size=12).filter(lambda s: "\0" not in s)


@settings(max_examples=60, deadline=None)
@given(job_names, st.integers(1, 4), st.integers(0, 4), st.floats(0, 1e6, allow_nan=False))
def test_any_job_name_round_trips_through_the_workload_format(tmp_path_factory, name, lo, extra, rate):
    line = {"name": name, "submit": 0, "min_nodes": lo, "max_nodes": lo + extra, "work": 1e6, "scale_up_s": 1.0,
            "scale_down_s": 2.0, "nodes": [0, lo + extra], "throughput": [0.0, rate]}
    path = tmp_path_factory.mktemp("jobs") / "j.jsonl"
    path.write_text(json.dumps(line) + "\n", encoding="utf-8")
    (job,) = sim.read_jobs(path)
    assert job.name == name
    # The same dict is a valid bft.allocate job (one field table).
    r = bft.allocate([line], list(range(lo + extra)))
    assert r.job_ids == [name]
