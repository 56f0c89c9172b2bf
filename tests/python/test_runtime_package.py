"""The runtime package's face: its docstring names every module, and every public name resolves
without the manager's modules being imported by the package itself."""

from __future__ import annotations

import ast
import importlib
import subprocess
import sys
from pathlib import Path
from typing import Dict, Set

import pytest

import bft.runtime
from runtime_util import python_env


def _packages(root: Path):
    """bft.runtime and each of its folders: (dotted name, directory)."""
    for init in sorted(root.rglob("__init__.py")):
        yield ".".join(init.parent.relative_to(root.parents[1]).parts), init.parent


def test_every_folder_of_the_runtime_names_each_of_its_modules_in_its_docstring():
    """The tree is the map: each folder's docstring says what every module and subfolder in it is for,
    so a newcomer finds a concept's home from the tree and the folders' one-paragraph guides."""
    missing = []
    for name, folder in _packages(Path(bft.runtime.__file__).parent):
        doc = importlib.import_module(name).__doc__ or ""
        parts = {p.stem for p in folder.glob("*.py") if p.stem != "__init__"}
        parts |= {d.name for d in folder.iterdir() if (d / "__init__.py").exists()}
        missing += [f"{name}.{m}" for m in sorted(parts) if f":mod:`.{m}`" not in doc]
    assert not missing, f"not named in their folder's docstring: {missing}"


def test_the_runtimes_top_level_holds_only_the_manager_its_command_line_its_folders_and_the_stable_names():
    """Everything else lives in a folder; what stays on top is the manager, its options, its command
    line, and the four names that running processes and out-of-tree node sources depend on."""
    root = Path(bft.runtime.__file__).parent
    assert sorted(p.stem for p in root.glob("*.py")) == sorted(
        ["__init__", "manager", "options", "cli", "cli_options", *STABLE_NAMES])


# The names other processes and packages use: the agent's and the keeper's ``python -m`` command lines
# (a manager adopts agents and keepers an earlier one started), and the node-source interface and the
# pilots' listener that out-of-tree sources (bft.node_sources entry points) import.
STABLE_NAMES = {"agent": "onnode.torchrun_agent", "keeper": "ops.keeper", "nodes": "sources.base",
                "pilots": "sources.pilot_reports"}


@pytest.mark.parametrize("old,home", sorted(STABLE_NAMES.items()))
def test_a_stable_name_is_a_thin_re_export_of_its_home(old, home):
    shim = importlib.import_module(f"bft.runtime.{old}")
    target = importlib.import_module(f"bft.runtime.{home}")
    public = getattr(shim, "__all__", ["main"])
    assert public and all(getattr(shim, n) is getattr(target, n) for n in public)
    body = [n for n in ast.parse(Path(shim.__file__).read_text()).body
            if not isinstance(n, (ast.Expr, ast.ImportFrom, ast.Import, ast.If, ast.Assign))]
    assert body == [], f"bft.runtime.{old} defines code of its own; it should only re-export {home}"


@pytest.mark.parametrize("name", ["agent", "keeper"])
def test_the_agent_and_keeper_command_lines_run_without_their_environment_say_one_line_and_exit_2(name):
    """The stable command lines reach their home's main, which answers a wrong start in one line."""
    out = subprocess.run([sys.executable, "-m", f"bft.runtime.{name}", "--no-such-flag"],
                         env={k: v for k, v in python_env().items() if not k.startswith("BFT_")},
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and len(out.stderr.strip().splitlines()) == 1, out.stderr
    assert "bft" in out.stderr and "Traceback" not in out.stderr


def test_every_public_name_resolves_and_importing_the_package_imports_no_manager_module():
    for name in bft.runtime.__all__:
        assert getattr(bft.runtime, name) is not None
    code = "import sys, bft.runtime; print(sorted(m for m in sys.modules if m.startswith('bft.runtime.')))"
    out = subprocess.run([sys.executable, "-c", code], env=python_env(), capture_output=True, text=True, check=True)
    # The node-source interface, and the address check its listen_address() shares with the manager.
    assert out.stdout.strip() == str(["bft.runtime.sources", "bft.runtime.sources.base", "bft.runtime.trust",
                                      "bft.runtime.trust.addresses"])


def _imports(package_dir: Path) -> Dict[str, Set[str]]:
    """Each module of the package -> the package's modules it imports, at its top or in a function (relative
    imports: the runtime imports itself only so)."""
    graph: Dict[str, Set[str]] = {}
    for path in package_dir.rglob("*.py"):
        parts = path.relative_to(package_dir.parent).with_suffix("").parts
        module = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        package = module if path.name == "__init__.py" else module.rpartition(".")[0]
        deps: Set[str] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level:
                base = package.split(".")[:len(package.split(".")) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
                deps |= {target} if node.module else {f"{target}.{a.name}" for a in node.names}
        graph[module] = deps
    return graph


def test_the_runtime_has_no_import_circle():
    """No module of bft.runtime imports, through others, one that imports it (a circle hidden by a lazy
    import was how state_schema reached the job checks before jobspec.py)."""
    graph = _imports(Path(bft.runtime.__file__).parent)
    circles = []
    for start in graph:
        stack = [(start, (start,))]
        while stack:
            module, path = stack.pop()
            for dep in graph[module] & graph.keys():
                if dep == start:
                    circles.append(" -> ".join((*path, start)))
                elif dep not in path:
                    stack.append((dep, (*path, dep)))
    assert not circles, circles
