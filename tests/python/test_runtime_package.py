"""The runtime package's face: its docstring names every module, and every public name resolves
without the manager's modules being imported by the package itself."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path
from typing import Dict, Set

import bft.runtime
from runtime_util import python_env


def test_the_runtime_package_docstring_names_every_module():
    package = Path(bft.runtime.__file__).parent
    modules = {p.stem for p in package.glob("*.py") if p.stem != "__init__"}
    modules |= {d.name for d in package.iterdir() if (d / "__init__.py").exists()}
    missing = sorted(m for m in modules if f":mod:`.{m}`" not in bft.runtime.__doc__)
    assert not missing, f"bft.runtime's docstring does not name {missing}"


def test_every_public_name_resolves_and_importing_the_package_imports_no_manager_module():
    for name in bft.runtime.__all__:
        assert getattr(bft.runtime, name) is not None
    code = "import sys, bft.runtime; print(sorted(m for m in sys.modules if m.startswith('bft.runtime.')))"
    out = subprocess.run([sys.executable, "-c", code], env=python_env(), capture_output=True, text=True, check=True)
    # The node-source interface, and the address check its listen_address() shares with the manager.
    assert out.stdout.strip() == "['bft.runtime.addresses', 'bft.runtime.nodes']"


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
