"""Every default and shared name is stated once (issue 39, item 5): the runtime commands' help texts
say their defaults through argparse's ``%(default)s`` (the value the option really has, which for
``bft manager`` is ManagerOptions'), never as a number or word of their own; the package names full
backpropagation's configuration only through ``bft.jobs.FULL_CONFIGURATION``."""

from __future__ import annotations

import argparse
import ast
import dataclasses
import inspect
import re
from pathlib import Path
from typing import Iterator, List, Set, Tuple

import pytest

import bft
import bft._core as core
from bft import alloc, jobs, milp, sim
from bft.runtime import cli_options
from bft.runtime.options import DEFAULTS, ManagerOptions
from bft.runtime.statedb.jobspec import DEFAULT_SPEEDUP

PACKAGE = Path(bft.__file__).parent
DOCS = Path(__file__).resolve().parents[2] / "docs"


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


# -- help texts --------------------------------------------------------------------------------------

def _command_parsers() -> dict:
    top = argparse.ArgumentParser(prog="bft")
    cli_options.add_parsers(top.add_subparsers(dest="command"))
    return {name: parser for name, parser in top._subparsers._group_actions[0].choices.items()
            if name in cli_options.COMMANDS}


def _has_a_value(action: argparse.Action) -> bool:
    """An option whose default is a value to show: not unset (None, "", []) and not a switch's off."""
    if action.help in (None, argparse.SUPPRESS) or isinstance(action, argparse._HelpAction):
        return False
    if action.nargs == 0:
        return False  # a switch: store_true/--no-x, its default is its absence
    return action.default not in (None, "", []) and action.default is not argparse.SUPPRESS


@pytest.mark.parametrize("command", cli_options.COMMANDS)
def test_every_runtime_option_with_a_default_says_it_through_argparse_not_in_its_own_words(command):
    """``bft manager``, ``bft submit``, ``bft report``, ... and every node source's options (part of
    ``bft manager``): a help text that writes its default (``f"(default {DEFAULTS.checkpoint_grace_s:g})"``,
    ``"(default 8)"``) instead of ``%(default)s`` fails, so the help cannot disagree with the value."""
    parser = _command_parsers()[command]
    restated = [action.option_strings[0] if action.option_strings else action.dest for action in parser._actions
                if _has_a_value(action) and "%(default)" not in action.help]
    assert not restated, f"bft {command}: these options' help should show their default with %(default)s: {restated}"


def _options_field(parser: argparse.ArgumentParser, action: argparse.Action) -> str:
    """The ManagerOptions field that ``bft manager``'s option sets, found by giving it a marker value."""
    args = parser.parse_args([])
    marker = "7" if action.dest == "procs_per_node" else object()  # --procs-per-node is resolved from text
    setattr(args, action.dest, marker)
    options = cli_options.manager_options(args)
    changed = [f.name for f in dataclasses.fields(ManagerOptions)
               if getattr(options, f.name) is marker or (marker == "7" and getattr(options, f.name) == 7)]
    return changed[0] if len(changed) == 1 else ""


def _shown(value) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def test_bft_manager_help_shows_each_managers_options_default():
    """``bft manager --help`` shows, for each option that is a ManagerOptions field, that field's
    default (bft.runtime.options.DEFAULTS), as argparse renders it."""
    parser = _command_parsers()["manager"]
    formatter = parser._get_formatter()
    checked = {}
    for action in parser._actions:
        field = _options_field(parser, action) if action.option_strings and action.dest != "help" else ""
        if not field or not _has_a_value(action):  # --standby (None), --bind (""): explained in words
            continue
        shown = formatter._expand_help(action)
        assert f"default {_shown(getattr(DEFAULTS, field))}" in shown, (action.option_strings[0], field, shown)
        checked[action.option_strings[0]] = field
    # Every field the command line sets: all but the API's own and the two whose defaults (None, "")
    # are explained in words (--standby, --bind).
    api_only = {"advisor_warmup_s", "curve_change", "min_decision_interval_s", "procs_per_node_found"}
    expected = {f.name for f in dataclasses.fields(ManagerOptions)} - api_only - {"standby", "bind_address"}
    assert set(checked.values()) == expected and checked["--grace"] == "checkpoint_grace_s", checked


def test_the_help_check_sees_a_restated_default():
    """The check above cannot pass for want of looking: an option whose help writes its number fails it."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--max", type=int, default=8, help="most nodes (default 8)")
    parser.add_argument("--min", type=int, default=1, help="fewest nodes (default %(default)s)")
    parser.add_argument("--name", help="a name (default: the script's)")
    parser.add_argument("--json", action="store_true", help="machine-readable")
    assert [a.dest for a in parser._actions if _has_a_value(a) and "%(default)" not in a.help] == ["max"]


# -- the allocator's defaults ------------------------------------------------------------------------

def test_the_allocators_defaults_are_the_bindings_exports():
    """bft.allocate and bft.milp.solve default to what the C++ exports (bft._core), so the runtime,
    which passes none of them, decides with the C++ defaults."""
    allocate = inspect.signature(alloc.allocate).parameters
    assert (allocate["solver"].default, allocate["goal"].default, allocate["milp_backend"].default,
            allocate["relative_gap"].default) == (core.alloc.DEFAULT_SOLVER, core.alloc.DEFAULT_GOAL,
                                                  core.alloc.DEFAULT_MILP_BACKEND, core.alloc.DEFAULT_RELATIVE_GAP)
    solve = inspect.signature(milp.solve).parameters
    assert (solve["backend"].default, solve["relative_gap"].default) == (core.milp.DEFAULT_BACKEND,
                                                                          core.milp.DEFAULT_RELATIVE_GAP)
    assert DEFAULTS.policy == core.sim.DEFAULT_POLICY == sim.DEFAULT_POLICY


def test_the_runtime_states_no_allocator_default_of_its_own():
    """No call in bft.runtime passes a goal, MILP backend, relative gap or time limit as a literal, nor
    the default solver by name: those come from the bindings (the runtime's time limit is
    sim.DEFAULT_MILP_TIME_LIMIT_S, the replay's)."""
    literal_only = {"goal", "milp_backend", "backend", "relative_gap", "time_limit_s"}
    found = []
    for path in sorted((PACKAGE / "runtime").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            for keyword in node.keywords if isinstance(node, ast.Call) else ():
                if not isinstance(keyword.value, ast.Constant):
                    continue
                if keyword.arg in literal_only or (keyword.arg in ("solver", "policy")
                                                   and keyword.value.value == alloc.DEFAULT_SOLVER):
                    found.append(f"{path.relative_to(PACKAGE.parent)}:{node.lineno}: {keyword.arg}=")
    assert not found, found


# -- the docs ----------------------------------------------------------------------------------------

# Where the docs say an option's default: "`bft manager --grace`, default 20 s", "`--max-retries`
# (default 2", "`--report-timeout` seconds (default 60", "`--resize`, whose default, `auto`"; a pair
# "`--scale-up-s/--scale-down-s` (5 s)" or "(2.5 s and 0.5 s"; a table row "| `--slurm-pending` | 2 |".
DOC_DEFAULT = re.compile(r"`(?:bft \w+ )?(--[a-z0-9-]+)(?: [^`]*)?`"  # the option, maybe with its command
                         r"[^`(|\n]{0,12}?\(?default,?\s+`?([0-9][0-9.]*|[a-z_]+)\b")
DOC_PAIR = re.compile(r"`(--[a-z0-9-]+)/(--[a-z0-9-]+)` \(([0-9.]+) s(?: and ([0-9.]+) s)?")
DOC_ROW = re.compile(r"^\| `(--[a-z0-9-]+)` \| `?([0-9][0-9.]*|/[^ `|]*)`?[ |(:]", re.M)


def doc_defaults(text: str) -> List[Tuple[str, str]]:
    """(option, the default the text gives it) of every place the text states one."""
    prose = " ".join(text.split("\n"))  # a sentence may break between the option and its default
    found = [m.groups() for m in DOC_DEFAULT.finditer(prose)] + [m.groups() for m in DOC_ROW.finditer(text)]
    for first, second, value, other in (m.groups() for m in DOC_PAIR.finditer(prose)):
        found += [(first, value), (second, other or value)]
    return found


def test_the_docs_state_each_runtime_options_default_as_the_option_has_it():
    """docs/runtime.md and docs/slurm.md restate defaults for the reader (the grace time, --max-jobs,
    the rescale costs, the Slurm source's table): each must be the value the option really has."""
    parsers = _command_parsers()
    # bft manager's where both commands have the option (--resize, --procs-per-node: a job's own
    # defaults to the manager's).
    actions = {option: action for name in ("submit", "manager") for action in parsers[name]._actions
               for option in action.option_strings}
    stated = [(doc, option, value) for doc in ("runtime.md", "slurm.md")
              for option, value in doc_defaults((DOCS / doc).read_text())]
    assert len(stated) >= 15, f"the docs' defaults were not found (the patterns are broken): {stated}"
    wrong = [(doc, option, value, _shown(actions[option].default)) for doc, option, value in stated
             if option not in actions or _shown(actions[option].default) != value]
    assert not wrong, f"(page, option, the page's default, the option's): {wrong}"
    # A configuration's speedup when --configuration NAME:EFFICIENCY gives none (bft.runtime.statedb.jobspec).
    speedups = re.findall(r"SPEEDUP \(default ([0-9.]+)\)", " ".join((DOCS / "runtime.md").read_text().split()))
    assert speedups and set(speedups) == {_shown(DEFAULT_SPEEDUP)}, speedups


def test_the_docs_check_reads_each_way_a_default_is_written():
    text = ("`bft manager --grace`, default 20 s; `--max-retries` (default\n2, per job); `--resize`, whose "
            "default, `auto`, ...\n`--scale-up-s/--scale-down-s` (5 s) and `--inplace-scale-up-s/--x` (2.5 s and "
            "0.5 s)\n| `--slurm-pending` | 2 | pilots |\n| `--slurm-partition` | the default partition |\n")
    assert sorted(doc_defaults(text)) == sorted([("--grace", "20"), ("--max-retries", "2"), ("--resize", "auto"),
                                                 ("--scale-up-s", "5"), ("--scale-down-s", "5"),
                                                 ("--inplace-scale-up-s", "2.5"), ("--x", "0.5"),
                                                 ("--slurm-pending", "2")])
