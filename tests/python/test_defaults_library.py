"""Every default once (issue 39 item 5): the Python layer reads the C++ defaults the bindings export
(bft._core) instead of restating them, the command line's help prints argparse's default, and the
in-train report interval is one named constant of the protocol."""

from __future__ import annotations

import ast
import inspect
import socket
from pathlib import Path

import pytest

import bft._core as core
from bft import alloc, cli, milp
from bft.train import _reporter, protocol

PACKAGE = Path(alloc.__file__).parent
# The C++ defaults of the MILP layer and the allocator, as the bindings export them.
CXX_DEFAULTS = {core.milp.DEFAULT_BACKEND, core.milp.DEFAULT_RELATIVE_GAP, core.alloc.DEFAULT_SOLVER,
                core.alloc.DEFAULT_GOAL, core.alloc.DEFAULT_MILP_BACKEND, core.alloc.DEFAULT_RELATIVE_GAP}


def _code_constants(tree: ast.AST) -> list:
    """The literals of a module's code: every constant but the docstrings (doctest examples may name a backend)."""
    docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                  if isinstance(node, (ast.Module, ast.FunctionDef, ast.ClassDef, ast.AsyncFunctionDef))
                  and node.body and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant)}
    return [node.value for node in ast.walk(tree) if isinstance(node, ast.Constant) and id(node) not in docstrings]


def _signature_defaults(tree: ast.AST) -> list:
    """The literal defaults of every function's parameters and every module-level DEFAULT_* name."""
    out = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            out += [d.value for d in [*node.args.defaults, *node.args.kw_defaults] if isinstance(d, ast.Constant)]
    for node in tree.body:
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant) and any(
                isinstance(t, ast.Name) and t.id.startswith("DEFAULT_") for t in node.targets):
            out.append(node.value.value)
    return out


@pytest.mark.parametrize("module", ["alloc.py", "milp.py", "cli.py"])
def test_the_python_layer_does_not_restate_the_milp_backend_or_relative_gap(module):
    constants = _code_constants(ast.parse((PACKAGE / module).read_text()))
    assert core.milp.DEFAULT_BACKEND == "glpk" and core.milp.DEFAULT_RELATIVE_GAP == 1e-9  # what is looked for
    restated = [c for c in constants if c in ("glpk", 1e-9) and not isinstance(c, bool)]
    assert restated == [], f"{module} restates {restated}: read bft._core's DEFAULT_* instead"


@pytest.mark.parametrize("module", ["alloc.py", "milp.py"])
def test_no_default_of_alloc_or_milp_is_a_literal_of_a_cxx_default(module):
    defaults = _signature_defaults(ast.parse((PACKAGE / module).read_text()))
    restated = [d for d in defaults if not isinstance(d, bool) and d in CXX_DEFAULTS]
    assert restated == [], f"{module}: {restated} written as literals, not read from bft._core"


def test_solve_and_allocate_default_to_what_the_bindings_export():
    solve = inspect.signature(milp.solve).parameters
    assert solve["backend"].default == core.milp.DEFAULT_BACKEND
    assert solve["relative_gap"].default == core.milp.DEFAULT_RELATIVE_GAP
    allocate = inspect.signature(alloc.allocate).parameters
    assert allocate["solver"].default == core.alloc.DEFAULT_SOLVER
    assert allocate["goal"].default == core.alloc.DEFAULT_GOAL
    assert allocate["milp_backend"].default == core.alloc.DEFAULT_MILP_BACKEND
    assert allocate["relative_gap"].default == core.alloc.DEFAULT_RELATIVE_GAP


def test_every_default_of_milp_solve_is_a_default_constructed_solve_options():
    solve = ast.parse((PACKAGE / "milp.py").read_text())
    [definition] = [n for n in solve.body if isinstance(n, ast.FunctionDef) and n.name == "solve"]
    assert [ast.unparse(d) for d in definition.args.defaults if isinstance(d, ast.Constant)] == []
    parameters, options = inspect.signature(milp.solve).parameters, core.milp.SolveOptions()
    for name in ("time_limit_s", "relative_gap", "presolve", "verbose", "isolate"):
        assert parameters[name].default == getattr(options, name), name


def test_the_command_lines_help_prints_argparses_default_not_a_copy_of_it():
    """An option with a default says it through %(default)s, never by formatting the default's source again."""
    tree = ast.parse((PACKAGE / "cli.py").read_text())
    copies = []
    for call in ast.walk(tree):
        if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute)
                and call.func.attr == "add_argument"):
            continue
        keywords = {k.arg: k.value for k in call.keywords}
        if "default" in keywords and "help" in keywords:
            default = ast.unparse(keywords["default"])
            formatted = [ast.unparse(v.value) for v in ast.walk(keywords["help"]) if isinstance(v, ast.FormattedValue)]
            if default in formatted:
                copies.append(f"{ast.unparse(call.args[0])}: {default}")
    assert copies == []
    parser = cli.argparse.ArgumentParser()
    cli._replay_parser(parser.add_subparsers())
    text = parser._subparsers._group_actions[0].choices["replay"].format_help()
    assert f"(default {cli.sim.DEFAULT_MAX_JOBS})" in " ".join(text.split())


def test_a_worker_reports_at_the_protocols_interval_unless_told_another(monkeypatch):
    receiver = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    receiver.bind(("127.0.0.1", 0))
    monkeypatch.setenv(protocol.ENV_REPORT_ADDR, f"127.0.0.1:{receiver.getsockname()[1]}")
    monkeypatch.setenv(protocol.ENV_JOB_SECRET, "ab" * (protocol.SECRET_HEX // 2))
    monkeypatch.setenv(protocol.ENV_JOB_ID, "j1")
    monkeypatch.delenv(protocol.ENV_REPORT_INTERVAL_S, raising=False)
    assert (_reporter.DEFAULT_REPORT_INTERVAL_S, _reporter.MIN_REPORT_INTERVAL_S) == (
        protocol.DEFAULT_REPORT_INTERVAL_S, protocol.MIN_REPORT_INTERVAL_S)
    # Other values than the protocol's, so that a literal copy of them in the reporter fails here.
    monkeypatch.setattr(_reporter, "DEFAULT_REPORT_INTERVAL_S", 0.75)
    monkeypatch.setattr(_reporter, "MIN_REPORT_INTERVAL_S", 0.25)
    reporters = []
    try:
        for told, expected in ((None, 0.75), ("2", 2.0), ("0.001", 0.25)):
            if told is not None:
                monkeypatch.setenv(protocol.ENV_REPORT_INTERVAL_S, told)
            reporter = _reporter.Reporter()
            reporters.append(reporter)
            reporter._configure()
            assert reporter._enabled and reporter._interval_s == expected, told
    finally:
        receiver.close()
        for reporter in reporters:
            if reporter._sock is not None:
                reporter._sock.close()
