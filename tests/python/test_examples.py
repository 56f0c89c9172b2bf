"""Every Python example runs to completion: the README and docs show code that works."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "python"
SELF_CONTAINED = ["tour.py", "alloc_example.py", "milp_smoke.py", "replay_compare.py"]


def run_example(name, *args):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    return subprocess.run([sys.executable, str(EXAMPLES / name), *args], capture_output=True, text=True,
                          env=env, timeout=300)


@pytest.mark.parametrize("name", SELF_CONTAINED)
def test_example_runs(name):
    done = run_example(name)
    assert done.returncode == 0, f"{name} failed:\n{done.stdout}\n{done.stderr}"
    assert done.stdout.strip(), f"{name} printed nothing"


def test_curve_accuracy_table_runs_on_the_real_curves(shared_data):
    done = run_example("curve_accuracy_table.py")
    assert done.returncode == 0, done.stderr
    assert "auto" in done.stdout


def test_every_example_is_covered():
    assert {p.name for p in EXAMPLES.glob("*.py")} == set(SELF_CONTAINED) | {"curve_accuracy_table.py"}


NOTEBOOKS = Path(__file__).resolve().parents[2] / "examples" / "notebooks"

# Runs the code cells of a notebook in order, in one namespace, as Jupyter would (IPython magics
# such as %matplotlib are skipped: the backend is Agg). No Jupyter installation is needed.
RUN_NOTEBOOK = r"""
import json, sys
import matplotlib
matplotlib.use("Agg")
notebook = json.load(open(sys.argv[1], encoding="utf-8"))
namespace = {"__name__": "__main__"}
for number, cell in enumerate(notebook["cells"]):
    if cell["cell_type"] != "code":
        continue
    source = "".join(line for line in cell["source"] if not line.lstrip().startswith("%"))
    exec(compile(source, f"{sys.argv[1]} cell {number}", "exec"), namespace)
print("cells run")
"""


def test_notebooks_execute(tmp_path):
    notebooks = sorted(NOTEBOOKS.glob("*.ipynb"))
    assert notebooks, "no notebook in examples/notebooks"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path), MPLBACKEND="Agg")
    for notebook in notebooks:
        done = subprocess.run([sys.executable, "-c", RUN_NOTEBOOK, str(notebook)], capture_output=True, text=True,
                              env=env, cwd=tmp_path, timeout=300)
        assert done.returncode == 0, f"{notebook.name} failed:\n{done.stdout}\n{done.stderr}"
        assert "cells run" in done.stdout and "policy exact" in done.stdout
