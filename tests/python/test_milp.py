"""bft.milp from Python: natural expressions, validation, and the key solver cases on every backend
this build has (a backend that was not built is reported as skipped)."""

import itertools
import math
import threading

import numpy as np
import pytest

import bft
from bft import milp

BACKENDS = ["glpk", "cbc"]


@pytest.fixture(params=BACKENDS)
def backend(request):
    if request.param not in milp.available_backends():
        pytest.skip(f"MILP backend {request.param!r} was not built (CBC needs coinor-libcbc-dev at configure time)")
    return request.param


def interpolate(xs, ys, x):
    return float(np.interp(x, xs, ys))


def knapsack(seed, n):
    rng = np.random.default_rng(seed)
    values = rng.integers(5, 61, n).tolist()
    weights = rng.integers(3, 41, n).tolist()
    return values, weights, sum(weights) // 3


def knapsack_dp(values, weights, capacity):
    best = [0] * (capacity + 1)
    for v, w in zip(values, weights):
        for c in range(capacity, w - 1, -1):
            best[c] = max(best[c], best[c - w] + v)
    return best[capacity]


def knapsack_model(values, weights, capacity):
    m = milp.Model("knapsack")
    take = [m.add_binary(name=f"take{i}") for i in range(len(values))]
    m.add_constraint(milp.quicksum(w * t for w, t in zip(weights, take)) <= capacity, name="capacity")
    m.maximize(milp.quicksum(v * t for v, t in zip(values, take)))
    return m, take


# ---- expressions and the model -----------------------------------------------------------------


def test_expressions_are_written_naturally():
    m = milp.Model("expr")
    x = m.add_continuous(0, 10, name="x")
    y = m.add_integer(-5, 5, name="y")
    m.add_constraint(2 * x + 3 * y - x + 4 <= 10 + y, name="c")
    row = m.constraint(0)
    assert row.name == "c"
    assert row.vars == [0, 1]
    assert row.coefs == [1.0, 2.0]
    assert row.upper == 6.0 and row.lower == -math.inf
    m.add_constraint(x + y == 1, name="eq")
    m.add_constraint(5 >= x - y / 2, name="reflected")
    assert (m.constraint(1).lower, m.constraint(1).upper) == (1.0, 1.0)
    assert m.constraint(2).coefs == [1.0, -0.5] and m.constraint(2).upper == 5.0
    m.add_constraint(x + y, -1, 3, name="ranged")
    assert (m.constraint(3).lower, m.constraint(3).upper) == (-1.0, 3.0)
    assert m.num_constraints == 4


def test_vars_are_hashable_and_chained_comparisons_are_refused():
    m = milp.Model()
    x = m.add_continuous(0, 1, name="x")
    y = m.add_continuous(0, 1, name="y")
    table = {x: "x", y: "y"}
    assert table[m.var_handle(0)] == "x"  # a different handle object for the same variable
    assert x.same_as(m.var_handle(0)) and not x.same_as(y)
    assert bool(x == m.var_handle(0)) and not bool(x == y)
    with pytest.raises(TypeError, match="chained comparisons"):
        0 <= x <= 1  # noqa: B015 - the point is that this raises instead of dropping a bound


def test_enums_are_python_enums():
    import enum

    assert issubclass(milp.Termination, enum.Enum)
    assert {t.name for t in milp.Termination} == {
        "OPTIMAL",
        "TIME_LIMIT",
        "INFEASIBLE",
        "UNBOUNDED",
        "INFEASIBLE_OR_UNBOUNDED",
        "ERROR",
        "INTERRUPTED",
    }
    assert milp.termination_name(milp.Termination.TIME_LIMIT) == "time_limit"


@pytest.mark.parametrize(
    "build, needle",
    [
        (lambda m, x: m.add_constraint(float("nan") * x <= 1, name="cap"), "constraint 'cap'"),
        (lambda m, x: m.add_constraint(math.inf * x >= 0, name="row7"), "constraint 'row7'"),
        (lambda m, x: m.add_constraint(x, 2, 1, name="budget"), "lower bound 2 > upper bound 1"),
        (lambda m, x: m.add_continuous(3, 2, name="nodes"), "variable 'nodes'"),
        (lambda m, x: m.add_integer(0.5, 4, name="replicas"), "fractional bound 0.5"),
        (lambda m, x: m.add_piecewise_linear(x, [1.0], [2.0], name="tput"), "at least two breakpoints"),
        (lambda m, x: m.add_piecewise_linear(x, [0, 1, 1], [0, 1, 2], name="f"), "strictly increasing"),
        (lambda m, x: m.add_piecewise_linear(x, [0, 1, 2], [0, 1], name="g"), "3 breakpoint xs but 2 ys"),
        (lambda m, x: m.add_binary(name="speed"), "duplicate variable name 'speed'"),
        (lambda m, x: m.maximize(-math.inf * x), "objective"),
        # GLPK aborted the interpreter on this one (glp_set_rii: invalid scale factor)
        (lambda m, x: m.add_constraint(1e-200 * x <= 5, name="cap"), "constraint 'cap': coefficient .*1e-200"),
        # CBC aborted on this one (an assertion in Clp)
        (lambda m, x: m.maximize(1e25 * x), "objective: coefficient of variable 'speed'"),
        (lambda m, x: m.add_continuous(0, 1e30, name="nodes"), "variable 'nodes': upper bound is 1e\\+30"),
    ],
)
def test_bad_input_raises_value_error_naming_the_culprit(build, needle):
    m = milp.Model()
    x = m.add_continuous(0, 1, name="speed")
    with pytest.raises(ValueError, match=needle):
        build(m, x)


def test_variable_from_another_model_is_rejected():
    a, b = milp.Model("a"), milp.Model("b")
    xa = a.add_continuous(0, 1, name="xa")
    xb = b.add_continuous(0, 1, name="xb")
    with pytest.raises(ValueError, match="constraint 'cb'.*another model"):
        b.add_constraint(xa <= 1, name="cb")
    with pytest.raises(ValueError, match="piecewise-linear 'pb'.*another model"):
        b.add_piecewise_linear(xa, [0, 1], [0, 1], name="pb")
    with pytest.raises(ValueError, match="two models"):
        xa + xb


def test_unknown_backend_and_bad_options():
    m = milp.Model()
    with pytest.raises(bft.NotAvailable, match="registered backends"):
        milp.solve(m, backend="no-such-solver")
    assert issubclass(bft.NotAvailable, RuntimeError)
    with pytest.raises(ValueError, match="time_limit_s"):
        milp.solve(m, time_limit_s=0)
    with pytest.raises(ValueError, match="relative_gap"):
        milp.solve(m, relative_gap=-1)


def test_lp_export_has_sos2_for_piecewise_linear(tmp_path):
    m = milp.Model("export")
    n = m.add_integer(1, 7, name="n")
    f = m.add_piecewise_linear(n, [1, 4, 7], [0, 10, 12], name="tput")
    m.add_constraint(n + f <= 12, name="cap")
    m.maximize(f)
    text = m.to_lp_string()
    assert "Maximize\n obj: tput\n" in text
    assert " tput_x: n - tput_w0 - 4 tput_w1 - 7 tput_w2 = 0\n" in text
    assert "SOS\n tput_sos2: S2:: tput_w0:1 tput_w1:2 tput_w2:3\n" in text
    path = tmp_path / "model.lp"
    m.write_lp(str(path))
    assert path.read_text() == text


# ---- solving, on every backend -----------------------------------------------------------------


def test_knapsack_matches_dynamic_programming(backend):
    values, weights, capacity = knapsack(1, 25)
    m, take = knapsack_model(values, weights, capacity)
    r = milp.solve(m, backend=backend)
    assert r.optimal, r.message
    assert r.backend == backend
    expected = knapsack_dp(values, weights, capacity)
    assert r.objective == pytest.approx(expected, abs=1e-6)
    assert isinstance(r.values, np.ndarray) and r.values.shape == (len(take),)
    chosen = r.values > 0.5
    assert np.all(r.values == np.round(r.values))
    assert int(np.dot(weights, chosen)) <= capacity
    assert int(np.dot(values, chosen)) == expected
    assert r.value(take[0]) == r.values[0] == r[take[0]]


def test_assignment_matches_brute_force(backend):
    rng = np.random.default_rng(11)
    n = 5
    cost = rng.integers(1, 51, (n, n))
    best = min(sum(cost[i, p[i]] for i in range(n)) for p in itertools.permutations(range(n)))
    m = milp.Model("assignment")
    x = [[m.add_binary(name=f"x_{i}_{j}") for j in range(n)] for i in range(n)]
    for i in range(n):
        m.add_constraint(milp.quicksum(x[i]) == 1, name=f"worker{i}")
        m.add_constraint(milp.quicksum(x[j][i] for j in range(n)) == 1, name=f"task{i}")
    total = milp.quicksum(int(cost[i, j]) * x[i][j] for i in range(n) for j in range(n))
    m.minimize(total)
    r = milp.solve(m, backend=backend)
    assert r.optimal, r.message
    assert r.objective == pytest.approx(best)
    assert r.value(total) == pytest.approx(best)


def test_lp_with_fractional_optimum(backend):
    m = milp.Model("lp")
    x = m.add_continuous(name="x")
    y = m.add_continuous(name="y")
    m.add_constraint(2 * x + y <= 4)
    m.add_constraint(x + 2 * y <= 4)
    m.maximize(x + y + 1.5)
    r = milp.solve(m, backend=backend)
    assert r.termination == milp.Termination.OPTIMAL
    assert r.value(x) == pytest.approx(4 / 3, abs=1e-7)
    assert r.value(y) == pytest.approx(4 / 3, abs=1e-7)
    assert r.objective == pytest.approx(8 / 3 + 1.5, abs=1e-7)
    assert r.gap == pytest.approx(0, abs=1e-7)


ZIGZAG = ([0, 1, 2, 3, 4, 5, 6], [0, 5, 1, 6, 0, 4, -2])


@pytest.mark.parametrize("sense", [milp.Sense.MAXIMIZE, milp.Sense.MINIMIZE])
def test_piecewise_linear_matches_direct_evaluation(backend, sense):
    xs, ys = ZIGZAG
    for at in np.linspace(xs[0], xs[-1], 19):
        m = milp.Model()
        x = m.add_continuous(-100, 100, name="x")
        y = m.add_piecewise_linear(x, np.array(xs, dtype=float), ys, name="f")
        m.add_constraint(x == float(at), name="fix")
        m.set_objective(1.0 * y, sense)  # pushing y would expose a convexified formulation
        r = milp.solve(m, backend=backend)
        assert r.optimal, r.message
        assert r.value(y) == pytest.approx(interpolate(xs, ys, at), abs=1e-6), at


@pytest.mark.parametrize("c", [-2.0, -0.5, 0.0, 0.3, 1.0, 2.5])
def test_non_concave_curve_is_not_convexified(backend, c):
    xs, ys = ZIGZAG
    m = milp.Model()
    x = m.add_continuous(-milp.INF, milp.INF, name="x")
    y = m.add_piecewise_linear(x, xs, ys, name="f")
    m.maximize(y - c * x)
    r = milp.solve(m, backend=backend)
    assert r.optimal, r.message
    assert r.objective == pytest.approx(max(yk - c * xk for xk, yk in zip(xs, ys)), abs=1e-6)
    assert r.value(y) == pytest.approx(interpolate(xs, ys, r.value(x)), abs=1e-6)


def test_infeasible_and_unbounded_are_detected(backend):
    m = milp.Model()
    x = m.add_integer(0, 10, name="x")
    y = m.add_integer(0, 10, name="y")
    m.add_constraint(2 * x + 2 * y == 7, name="odd")
    m.maximize(x + y)
    r = milp.solve(m, backend=backend)
    assert r.termination == milp.Termination.INFEASIBLE, r.message
    assert not r.has_solution
    with pytest.raises(bft.Error):
        r.value(x)

    u = milp.Model()
    a = u.add_integer(0, milp.INF, name="a")
    b = u.add_continuous(0, milp.INF, name="b")
    u.add_constraint(a - b <= 1)
    u.maximize(a + b)
    assert milp.solve(u, backend=backend).termination == milp.Termination.UNBOUNDED


@pytest.mark.parametrize("cap", [1e12, 1e15])
def test_a_large_bound_is_solved_or_refused_never_called_unbounded(backend, cap):
    # CBC called `max x s.t. x <= 1e15` unbounded (Clp reads 1e15 as infinity) and lost the optimum
    # 1e12 without presolve; it now solves what it can and names what it cannot.
    m = milp.Model()
    x = m.add_continuous(0, milp.INF, name="x")
    m.add_constraint(x <= cap, name="cap")
    m.maximize(x)
    for presolve in (True, False):
        r = milp.solve(m, backend=backend, presolve=presolve)
        if backend == "cbc" and cap >= 1e15:
            assert r.termination == milp.Termination.ERROR, r.message
            assert "constraint 'cap': upper bound is 1e+15" in r.message and "glpk" in r.message
        else:
            assert r.termination == milp.Termination.OPTIMAL, r.message
            assert r.objective == cap


def market_split(rows, cols, seed):
    rng = np.random.default_rng(seed)
    a = rng.integers(0, 100, (rows, cols))
    m = milp.Model("market_split")
    x = [m.add_binary() for _ in range(cols)]
    slack = []
    for i in range(rows):
        plus, minus = m.add_continuous(), m.add_continuous()
        m.add_constraint(milp.quicksum(int(a[i, j]) * x[j] for j in range(cols)) + plus - minus == int(a[i].sum()) // 2)
        slack += [plus, minus]
    m.minimize(milp.quicksum(slack))
    return m


def test_time_limit_is_honoured_on_a_hard_instance(backend):
    m = market_split(6, 50, 5)
    r = milp.solve(m, backend=backend, time_limit_s=0.5)
    assert r.termination == milp.Termination.TIME_LIMIT, r.message
    # How close to the limit it stopped is a measurement, not a pass/fail check (bench/).


def test_solve_releases_the_gil(backend):
    # While one thread is inside a long solve, another thread runs Python code to completion. Only
    # the order of events is checked: the Python task (about a thousand bytecodes) must finish
    # while the solve (1 s on an instance branch and bound cannot close) is still running.
    # With the GIL held, the task could only finish after the solve had returned.
    m = market_split(6, 50, 7)
    inside = threading.Event()
    finished = threading.Event()
    results = []

    def solve():
        inside.set()
        results.append(milp.solve(m, backend=backend, time_limit_s=1))
        finished.set()

    solver = threading.Thread(target=solve)
    solver.start()
    inside.wait()
    total = sum(k * k for k in range(1000))  # Python code that needs the GIL
    task_done_while_solving = not finished.is_set()
    solver.join()
    assert total == 332833500
    assert results[0].termination in (milp.Termination.TIME_LIMIT, milp.Termination.OPTIMAL)
    assert task_done_while_solving, "the Python task finished only after the solve: the GIL was held"


def test_concurrent_solves_from_python_threads_agree(backend):
    instances = [knapsack(100 + t, 30) for t in range(6)]
    expected = [knapsack_dp(*inst) for inst in instances]
    got = [None] * len(instances)

    def work(t):
        m, _ = knapsack_model(*instances[t])
        got[t] = [milp.solve(m, backend=backend).objective for _ in range(3)]

    threads = [threading.Thread(target=work, args=(t,)) for t in range(len(instances))]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    for t, values in enumerate(got):
        assert values == pytest.approx([expected[t]] * 3)


CONCURRENT_MODIFICATION = r"""
import sys, threading
from bft import milp
backend = sys.argv[1]
m = milp.Model("grows")
x = [m.add_integer(0, 3, name=f"x{i}") for i in range(60)]
for r in range(8):
    m.add_constraint(milp.quicksum(((i * 7 + r * 13) % 11 + 1) * v for i, v in enumerate(x)) <= 50 + r)
m.maximize(milp.quicksum(((i * 5) % 9 + 1) * v for i, v in enumerate(x)))
vars_at_start = m.num_vars
results = []
solver = threading.Thread(target=lambda: results.append(milp.solve(m, backend=backend, time_limit_s=2)))
solver.start()
while solver.is_alive():  # grow the model (reallocating its arrays) while the solve runs
    v = m.add_continuous(0, 1)
    m.add_constraint(v + x[0] <= 3)
    m.maximize(milp.quicksum(x) + v)
solver.join()
r = results[0]
assert r.model_id == m.id, (r.model_id, m.id)
assert r.has_solution and len(r.values) == vars_at_start, (r.message, len(r.values), vars_at_start)
print("ok", m.num_vars - vars_at_start)
"""


def test_model_changed_from_another_thread_while_solving_does_not_affect_the_solve(backend):
    # The solve releases the GIL; before it solved a snapshot, growing the model meanwhile corrupted
    # memory (a crash of the interpreter). Run in a child interpreter so a crash is a plain failure.
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-c", CONCURRENT_MODIFICATION, backend], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.startswith("ok ")
    assert int(done.stdout.split()[1]) > 0  # the model really was changed during the solve
