"""Solver-agnostic mixed-integer linear programming (:mod:`bft._core.milp`).

Build a :class:`Model`, write constraints naturally and solve it with any backend this build has:

>>> from bft import milp
>>> m = milp.Model("demo")
>>> x = m.add_integer(0, 10, name="x")
>>> y = m.add_continuous(0, 10, name="y")
>>> c = m.add_constraint(2 * x + 3 * y <= 12, name="cap")
>>> f = m.add_piecewise_linear(x, [0, 2, 4, 10], [0, 5, 6, 9], name="f")   # y = f(x), exact (SOS2)
>>> m.maximize(f + y)
>>> r = milp.solve(m, backend="glpk", time_limit_s=5)
>>> r.termination, round(r.objective, 6)                                   # doctest: +SKIP
(<Termination.OPTIMAL: 0>, 9.0)

Results keep *why* the solver stopped (:class:`Termination`) apart from whether a solution exists
(``Result.has_solution``); ``Result.values`` is a numpy array with one value per variable.
Invalid input raises ``ValueError`` naming the variable or constraint; an unknown backend raises
:class:`bft.NotAvailable`. Formulations, statuses and LP export are documented in docs/milp.md.
"""

from __future__ import annotations

from typing import Iterable, List, Union

from ._core import milp as _m

INF = _m.INF
# milp's defaults in C++ (milp::kDefaultBackend, SolveOptions::relative_gap): solve()'s.
DEFAULT_BACKEND = _m.DEFAULT_BACKEND
DEFAULT_RELATIVE_GAP = _m.DEFAULT_RELATIVE_GAP
_SOLVE_DEFAULTS = _m.SolveOptions()  # solve()'s other defaults: a default-constructed SolveOptions'
VarType = _m.VarType
Sense = _m.Sense
Termination = _m.Termination
Var = _m.Var
LinExpr = _m.LinExpr
LinConstraint = _m.LinConstraint
ConstraintRef = _m.ConstraintRef
VarData = _m.VarData
RowData = _m.RowData
PiecewiseLinearData = _m.PiecewiseLinearData
Model = _m.Model
SolveOptions = _m.SolveOptions
Result = _m.Result
Backend = _m.Backend
termination_name = _m.termination_name
make_backend = _m.make_backend


def available_backends() -> List[str]:
    """Names of the MILP backends this build has (sorted), e.g. ``['cbc', 'glpk']``."""
    return list(_m.registered_backends())


def solve(
    model: Model,
    backend: str = DEFAULT_BACKEND,
    time_limit_s: float = _SOLVE_DEFAULTS.time_limit_s,
    relative_gap: float = DEFAULT_RELATIVE_GAP,
    presolve: bool = _SOLVE_DEFAULTS.presolve,
    verbose: bool = _SOLVE_DEFAULTS.verbose,
    isolate: bool = _SOLVE_DEFAULTS.isolate,
) -> Result:
    """Solves a snapshot of ``model`` with the named backend (the GIL is released while it runs).

    ``isolate=True`` solves in a child process, so that a crash of the solver library comes back
    as a result with ``Termination.ERROR`` instead of ending this process. Ctrl-C stops the solve
    and raises ``KeyboardInterrupt``.

    Raises ``ValueError`` for invalid options and :class:`bft.NotAvailable` for a backend this
    build does not have; solver outcomes (infeasible, time limit, ...) come back in the result.
    """
    options = SolveOptions(
        time_limit_s=float(time_limit_s),
        relative_gap=float(relative_gap),
        presolve=bool(presolve),
        verbose=bool(verbose),
        isolate=bool(isolate),
    )
    error = options.validation_error()
    if error:
        raise ValueError(error)
    return _m.solve(model, backend, options)


def quicksum(terms: Iterable[Union[Var, LinExpr, float, int]]) -> LinExpr:
    """Sum of variables, expressions and numbers in linear time (``sum()`` copies at every step)."""
    total = LinExpr()
    for term in terms:
        total += term
    return total


__all__ = [
    "INF",
    "DEFAULT_BACKEND",
    "DEFAULT_RELATIVE_GAP",
    "VarType",
    "Sense",
    "Termination",
    "Var",
    "LinExpr",
    "LinConstraint",
    "ConstraintRef",
    "VarData",
    "RowData",
    "PiecewiseLinearData",
    "Model",
    "SolveOptions",
    "Result",
    "Backend",
    "available_backends",
    "make_backend",
    "solve",
    "quicksum",
    "termination_name",
]
