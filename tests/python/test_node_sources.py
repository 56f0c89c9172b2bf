"""Node sources are found through a registry that packages outside this tree join by an entry point
(group ``bft.node_sources``): the CLI names no source itself (docs/runtime.md, "Node sources"); each
built-in one is documented there, with its options (there or on its own page, docs/<name>.md)."""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from bft.runtime.sources.base import BUILT_IN_SOURCES, ENTRY_POINT_GROUP, source_class, source_names
from runtime_util import python_env

PLUGIN = '''
from bft.runtime.sources.base import NodeSource, register_source


@register_source
class PbsTestSource(NodeSource):
    name = "pbs-test"

    @classmethod
    def add_arguments(cls, parser):
        parser.add_argument_group("pbs-test node source").add_argument("--pbs-test-queue", default="idle")

    @classmethod
    def from_args(cls, args, identity, state_dir):
        return cls()

    def start(self, emit):
        pass

    def stop(self, release=True):
        pass

    def launch(self, node, argv, env, log_path, *, cwd=None, stdin=False):
        raise NotImplementedError

    def address(self, node):
        return node
'''


DOCS = Path(__file__).resolve().parents[2] / "docs"
BUILT_IN = [name for name in source_names() if source_class(name).__module__ in BUILT_IN_SOURCES]


def _install(site: Path, entry_point: str, module: str = "") -> None:
    """A distribution as pip would leave it in `site`: its dist-info (with the entry point) and its module."""
    info = site / "bft_pbs_test-0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: bft-pbs-test\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[{ENTRY_POINT_GROUP}]\n{entry_point}\n")
    if module:
        (site / "bft_pbs_test.py").write_text(module)


def _manager_help(site: Path) -> subprocess.CompletedProcess:
    env = python_env()
    env["PYTHONPATH"] = os.pathsep.join([str(site), env.get("PYTHONPATH", "")])
    return subprocess.run([sys.executable, "-m", "bft", "manager", "--help"], env=env, capture_output=True,
                          text=True, timeout=60)


def test_the_built_in_sources_are_registered():
    assert {"local", "slurm"} <= set(source_names())
    assert all(module.startswith("bft.runtime.") for module in BUILT_IN_SOURCES)


@pytest.mark.parametrize("name", BUILT_IN)
def test_every_built_in_source_is_documented_with_its_options(name):
    runtime = (DOCS / "runtime.md").read_text()
    section = runtime[runtime.index("## Node sources"):]
    section = section[:section.index("\n## ")]
    assert f"- `{name}`:" in section, f"docs/runtime.md, Node sources, has no entry for `{name}`"
    own = DOCS / f"{name}.md"  # a scheduler's own page (docs/slurm.md), where it has one
    text = runtime + (own.read_text() if own.exists() else "")
    parser = argparse.ArgumentParser()
    source_class(name).add_arguments(parser)
    options = [o for action in parser._actions for o in action.option_strings if o.startswith(f"--{name}-")]
    assert options, f"{name}: its options are named --{name}-..."
    undocumented = [o for o in options if not re.search(rf"{re.escape(o)}(?![\w-])", text)]
    assert not undocumented, f"{name}: {undocumented} are not in docs/runtime.md or docs/{name}.md"


def test_an_out_of_tree_source_joins_through_an_entry_point_and_bft_manager_offers_it(tmp_path):
    _install(tmp_path, "pbs-test = bft_pbs_test", PLUGIN)
    r = _manager_help(tmp_path)
    assert r.returncode == 0, r.stderr
    text = " ".join(r.stdout.split())  # argparse wraps the help
    assert "node source: local, pbs-test, slurm" in text
    assert "--pbs-test-queue" in text and "pbs-test node source" in text


def test_a_broken_entry_point_is_one_line_and_the_other_sources_still_work(tmp_path):
    _install(tmp_path, "broken = bft_no_such_module")
    r = _manager_help(tmp_path)
    assert r.returncode == 0, r.stderr
    assert "node source: local, slurm" in " ".join(r.stdout.split())
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "broken" in lines[0] and ENTRY_POINT_GROUP in lines[0] and "not loaded" in lines[0]
