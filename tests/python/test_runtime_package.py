"""The runtime package's face: its docstring names every module, and every public name resolves
without the manager's modules being imported by the package itself."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

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
