"""`bft manager --config FILE` (docs/runtime.md, "Configuration file"): a TOML file of the manager's
options, derived from the same argparse definitions as the flags; flags override it; every error is
one line naming the file and line."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pytest

from bft.runtime import cli_options
from bft.runtime.options import DEFAULTS, ManagerOptions
from runtime_util import bft

pytestmark = pytest.mark.skipif(sys.version_info < (3, 11), reason="tomllib is in the standard library from 3.11")


@pytest.fixture
def manager_parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(prog="bft")
    sub = top.add_subparsers(dest="command")
    cli_options.add_parsers(sub)
    return sub.choices["manager"]


def _settable(action: argparse.Action):
    """A TOML value for an option and what argparse makes of it."""
    if action.nargs == 0:
        return (True, True) if isinstance(action, argparse.BooleanOptionalAction) or action.const is True else None
    if action.choices:
        choice = list(action.choices)[-1]
        return choice, choice
    if action.type is int:
        return 7, 7
    if action.type is float:
        return 2.5, 2.5
    if action.type is Path:
        return "/tmp/somewhere.prom", Path("/tmp/somewhere.prom")
    return "value-x", "value-x"


def test_every_option_of_the_manager_can_be_set_in_the_file(manager_parser, tmp_path):
    lines, expected = [], {}
    for action in manager_parser._actions:
        longs = [o for o in action.option_strings if o.startswith("--")]
        if not longs or longs[0] in ("--help", "--config"):
            continue
        value = _settable(action)
        assert value is not None, f"{longs[0]}: no way to set it in a configuration file"
        toml_value = "true" if value[0] is True else f'"{value[0]}"' if isinstance(value[0], str) else value[0]
        lines.append(f"{longs[0][2:]} = {toml_value}")
        expected[action.dest] = value[1]
    path = tmp_path / "manager.toml"
    path.write_text("\n".join(lines) + "\n")
    args = manager_parser.parse_args(cli_options.with_config(manager_parser, ["manager", "--config", str(path)])[1:])
    assert len(expected) > 30  # the manager's own options and every node source's
    for dest, value in expected.items():
        assert getattr(args, dest) == value, dest


def test_options_on_the_command_line_override_the_file(manager_parser, tmp_path):
    path = tmp_path / "manager.toml"
    path.write_text('policy = "equal_share"\nmax-jobs = 4\nstandby = true\nbind = "10.1.2.3"\n')
    argv = cli_options.with_config(manager_parser, ["manager", "--max-jobs", "3", "--config", str(path),
                                                    "--no-standby"])
    args = manager_parser.parse_args(argv[1:])
    assert (args.policy, args.max_jobs, args.standby, args.bind) == ("equal_share", 3, False, "10.1.2.3")
    # Only what the file still decides is traced back to its lines.
    assert args.config_origins == {"--policy": f"{path}:1", "--bind": f"{path}:4"}


@pytest.mark.parametrize("text, line, needle", [
    ("max-jobs = 4\n\n# a comment\nmax_jobs = 4\n", 4, "unknown key 'max_jobs'"),
    ('policy = "exact"\nmax-jobs = "four"\n', 2, "max-jobs: 'four' is not a valid value"),
    ('standby = "yes"\n', 1, "standby: expected true or false"),
    ('resize = "auto"\n[metrics]\nport = 9464\n', 2, "unknown key 'metrics'"),
    ("tfwd = [1, 2]\n", 1, "tfwd: expected a string or a number"),
    ('policy = "exact"\nmax-jobs = 4 4\n', 2, "not TOML"),
    ("config = 'other.toml'\n", 1, "unknown key 'config'"),
])
def test_a_bad_file_is_one_line_naming_the_key_and_line(tmp_path, text, line, needle):
    path = tmp_path / "manager.toml"
    path.write_text(text)
    r = bft("manager", "--state-dir", str(tmp_path / "state"), "--config", str(path))
    assert r.returncode == 2, r.stderr
    assert r.stderr.count("\n") == 1 and "Traceback" not in r.stderr, r.stderr
    assert needle in r.stderr, r.stderr
    where = f"{path}:{line}" if "not TOML" not in needle else f"line {line}"
    assert where in r.stderr, r.stderr
    assert not (tmp_path / "state").exists()  # refused before anything was created


def test_a_value_the_manager_refuses_names_the_line_it_came_from(tmp_path):
    path = tmp_path / "manager.toml"
    path.write_text('policy = "exact"\nmax-jobs = 0\n')
    r = bft("manager", "--state-dir", str(tmp_path / "state"), "--config", str(path))
    assert r.returncode == 2 and r.stderr.count("\n") == 1, r.stderr
    assert f"{path}:2: --max-jobs must be >= 1" in r.stderr, r.stderr
    r = bft("manager", "--state-dir", str(tmp_path / "state"), "--config", str(path), "--max-jobs", "-1")
    assert r.returncode == 2 and f"{path}" not in r.stderr and "--max-jobs must be >= 1" in r.stderr, r.stderr


@pytest.mark.runtime
def test_a_manager_runs_with_its_file_and_the_flags_that_override_it(harness, tmp_path):
    path = tmp_path / "manager.toml"
    path.write_text('source = "local"\nlocal-nodes = 3\npolicy = "equal_share"\nmax-jobs = 5\n')
    proc = harness.start("--config", str(path), "--policy", "exact")
    status = harness.wait(lambda s: len(s["nodes"]["pool"]) == 3, 30, "the file's 3 local nodes")
    assert status["manager"]["policy"] == "exact"
    harness.stop(proc)


def test_bft_manager_without_options_runs_with_the_managers_own_defaults(manager_parser):
    """Every default is ManagerOptions' (bft.runtime.options): the argument table reads it, restates none."""
    assert cli_options.manager_options(manager_parser.parse_args([])) == DEFAULTS


def test_the_objective_reaches_the_managers_options_and_a_wrong_one_is_named(manager_parser):
    assert cli_options.manager_options(manager_parser.parse_args(["--objective", "speedup"])).objective == "speedup"
    with pytest.raises(ValueError, match="--objective: objective 'latency'"):
        ManagerOptions(objective="latency").check()
