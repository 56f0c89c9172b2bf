"""The resize is carried out by its method: no module of the runtime outside jobs/resize/ branches
on a job's resize method (the lifecycle and the workers ask the job's ``Method``, which does its own
steps). Read from the source with ``ast``: no torch, no processes.

A branch on a method is a read of one of its flags (a bool class attribute of a ``Method``, such as
``how.in_place``), a comparison with one of its names (``== "inplace"``, ``in ("relaunch", ...)``,
``is ResizeMethod.INPLACE``, a ``case "membership":``), or an ``isinstance`` test against one of its
classes. And each method's steps are its own: what it asks of the lifecycle, in order, for a grow
and for a reclaim (a real resize machine; the lifecycle's I/O recorded)."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Iterator, List, Set, Tuple

import pytest

from bft.runtime.jobs.resize import METHODS, Machine, Method, Phase, ResizeMethod, Stop

ROOT = Path(__file__).resolve().parents[2]
RUNTIME = ROOT / "python" / "bft" / "runtime"
PACKAGE = RUNTIME / "jobs" / "resize"


def _flags() -> Set[str]:
    """The methods' flags: their bool class attributes."""
    return {name for cls in {Method, *(type(m) for m in METHODS.values())}
            for name, value in vars(cls).items() if isinstance(value, bool)}


def _classes() -> Set[str]:
    return {cls.__name__ for cls in {Method, *(type(m) for m in METHODS.values())}}


NAMES = {m.value for m in ResizeMethod}


def _names_a_method(expr: ast.AST) -> bool:
    """A method's name: its string, ResizeMethod.X or ResizeMethod.X.value, or a literal tuple, list or
    set holding one."""
    if isinstance(expr, (ast.Tuple, ast.List, ast.Set)):
        return any(_names_a_method(e) for e in expr.elts)
    if isinstance(expr, ast.Constant):
        return expr.value in NAMES
    if isinstance(expr, ast.Attribute) and expr.attr == "value":
        expr = expr.value
    return isinstance(expr, ast.Attribute) and isinstance(expr.value, ast.Name) and expr.value.id == "ResizeMethod"


def _branches(tree: ast.AST, flags: Set[str], classes: Set[str]) -> Iterator[Tuple[int, str]]:
    """(line, what) for every branch on a resize method in `tree`."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr in flags and isinstance(node.ctx, ast.Load):
            yield node.lineno, f"reads the flag .{node.attr}"
        elif isinstance(node, ast.Compare) and any(_names_a_method(e) for e in (node.left, *node.comparators)):
            yield node.lineno, f"compares with a method's name: {ast.unparse(node)}"
        elif isinstance(node, ast.MatchValue) and _names_a_method(node.value):
            yield node.lineno, f"matches a method's name: {ast.unparse(node.value)}"
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "isinstance" \
                and len(node.args) == 2 and any(isinstance(n, ast.Name) and n.id in classes
                                                for n in ast.walk(node.args[1])):
            yield node.lineno, f"tests a method's class: {ast.unparse(node)}"


def test_no_module_outside_the_resize_package_branches_on_a_resize_method():
    flags, classes = _flags(), _classes()
    assert "in_place" in flags  # the check knows the flags it looks for
    found: List[str] = []
    for path in sorted(RUNTIME.rglob("*.py")):
        if PACKAGE in path.parents:
            continue
        for line, what in _branches(ast.parse(path.read_text()), flags, classes):
            found.append(f"{path.relative_to(ROOT)}:{line} {what}")
    assert not found, "ask the job's method (jobs/resize/methods.py) instead:\n" + "\n".join(found)


def test_the_check_finds_each_kind_of_branch():
    """The check cannot pass by seeing nothing: each kind of branch it reads is found, and a call of a
    method's verb or a keyword argument of the same name is not a branch."""
    source = """
if how.in_place:
    pass
x = a if run.method == "inplace" else b
if row.resize in ("relaunch", "membership"):
    pass
if kind is ResizeMethod.INPLACE or kind == ResizeMethod.MEMBERSHIP.value:
    pass
match name:
    case "relaunch":
        pass
if isinstance(how, InPlace):
    pass
how.rescale(job, now, switch)
machine.resize(target, now, in_place=True)
"""
    lines = sorted({line for line, _ in _branches(ast.parse(source), {"in_place"}, {"InPlace"})})
    assert lines == [2, 4, 5, 7, 10, 12], lines


class _Job:
    """A job as its method sees it (resize.methods.Steps): a real resize machine, and the I/O steps the
    lifecycle would carry out, recorded in order instead."""

    def __init__(self, members: List[str], target: List[str], nodes_left: bool = True):
        self.machine = Machine(checkpoint_grace_s=30.0, join_timeout_s=60.0, max_retries=2)
        self.machine.start(members, 1)
        self.target, self.nodes_left, self.calls = target, nodes_left, []

    def __getattr__(self, step: str):
        def record(*args, **kwargs):
            self.calls.append((step, *args, *kwargs.values()))
            return {"has_nodes_left": self.nodes_left, "publish_first": True, "heartbeats_due": False}.get(step)
        return record


def test_each_method_carries_out_a_grow_decision_its_own_way():
    grow = ["n0", "n1", "n2"]
    relaunch, membership, inplace = (_Job(["n0", "n1"], grow) for _ in range(3))
    switched = _Job(["n0", "n1"], grow)

    assert METHODS["relaunch"].rescale(relaunch, 0.0, switch=False) == "relaunch"
    assert [c[0] for c in relaunch.calls] == ["begin_gap", "terminate_stopping"] and relaunch.calls[0][1] is False
    assert relaunch.machine.phase is Phase.STOPPING and relaunch.machine.reason is Stop.RESIZE

    assert METHODS["membership"].rescale(membership, 0.0, switch=False) == "relaunch"  # (the advisor's kind)
    assert membership.calls == [("begin_gap", False), ("terminate", []), ("launch", ["n2"])]
    assert membership.machine.phase is Phase.STEADY and membership.machine.members == grow

    assert METHODS["inplace"].rescale(inplace, 0.0, switch=False) == "inplace"
    assert [c[0] for c in inplace.calls] == ["begin_gap", "read_arrivals", "carry_out", "terminate_stopping"]
    plan = inplace.calls[2][1]
    assert inplace.calls[0][1] is True and plan.start == ["n2"] and not plan.publish
    assert inplace.machine.phase is Phase.RESIZING and inplace.machine.generation == 1

    # A new configuration is never in place: relaunched in it.
    assert METHODS["inplace"].rescale(switched, 0.0, switch=True) == "relaunch"
    assert switched.calls == relaunch.calls and switched.machine.phase is Phase.STOPPING


@pytest.mark.parametrize("name, shrinks", [("relaunch", False), ("membership", True), ("inplace", True)])
def test_a_reclaim_stops_a_relaunch_job_and_shrinks_the_others_off_the_node(name, shrinks):
    job = _Job(["n0", "n1"], ["n0"])
    METHODS[name].reclaimed(job, "n1", 0.0)
    if shrinks:
        assert job.calls == [("shrink_off", "n1")] and job.machine.phase is Phase.STEADY
        return
    assert job.calls == [("has_nodes_left",), ("terminate_stopping",)] and job.machine.reason is Stop.RESIZE
    gone = _Job(["n0"], [], nodes_left=False)  # its last node reclaimed: preempted, not resized
    METHODS[name].reclaimed(gone, "n0", 0.0)
    assert gone.machine.reason is Stop.PREEMPTED
