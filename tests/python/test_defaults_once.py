"""Every default and shared name is stated once (issue 39, item 5): the package names full
backpropagation's configuration only through ``bft.jobs.FULL_CONFIGURATION``."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Iterator, List, Set, Tuple

import bft
from bft import jobs

PACKAGE = Path(bft.__file__).parent


def _docstrings(tree: ast.AST) -> Set[int]:
    """The ids of the docstring constants of a module, its classes and functions (prose, not values)."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                found.add(id(first.value))
    return found


def _strings(path: Path) -> Iterator[Tuple[int, str, ast.AST]]:
    """(line, value, parent statement) of every string constant of a module that is not a docstring,
    the literal pieces of f-strings included."""
    tree = ast.parse(path.read_text(), str(path))
    prose = _docstrings(tree)
    statement_of = {}  # node -> the innermost statement holding it
    for statement in ast.walk(tree):
        if isinstance(statement, ast.stmt):
            for node in ast.walk(statement):
                statement_of[node] = statement  # ast.walk is breadth-first: inner statements come later
    for node, statement in statement_of.items():
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in prose:
            yield node.lineno, node.value, statement


def _names_full(value: str) -> bool:
    """The configuration's name as a value, or quoted inside SQL ("DEFAULT 'full'")."""
    return value == jobs.FULL_CONFIGURATION or f"'{jobs.FULL_CONFIGURATION}'" in value


def _is_the_definition(path: Path, statement: ast.AST) -> bool:
    return (path == PACKAGE / "jobs.py" and isinstance(statement, ast.Assign)
            and [getattr(t, "id", None) for t in statement.targets] == ["FULL_CONFIGURATION"])


def test_the_configuration_name_full_is_written_once_in_the_package():
    """Fails when a module of python/bft writes "full" (full backpropagation's configuration) as a
    literal instead of bft.jobs.FULL_CONFIGURATION: ``configuration == "full"`` in the curve book,
    ``DEFAULT 'full'`` in the state schema. Docstrings may say it in prose."""
    definitions: List[str] = []
    restated: List[str] = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for line, value, statement in _strings(path):
            if _names_full(value):
                where = f"{path.relative_to(PACKAGE.parent)}:{line}"
                (definitions if _is_the_definition(path, statement) else restated).append(where)
    assert len(definitions) == 1, f"bft.jobs.FULL_CONFIGURATION is not the one definition: {definitions}"
    assert not restated, f"write bft.jobs.FULL_CONFIGURATION instead of the literal at: {restated}"


def test_the_check_of_literals_finds_one_in_code_and_in_sql_but_not_in_a_docstring(tmp_path):
    """The scan above cannot pass for want of looking: it sees a comparison, an f-string's SQL and a
    default argument, and leaves docstrings alone."""
    module = tmp_path / "m.py"
    module.write_text('"""Runs in "full" by default."""\n'
                      'def f(c="full"):\n'
                      '    """"full" or another."""\n'
                      '    return c == "full"\n'
                      'SQL = f"DEFAULT \'full\' {1}"\n')
    assert [line for line, value, _ in _strings(module) if _names_full(value)] == [2, 4, 5]
