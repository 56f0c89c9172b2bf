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


def test_the_slurm_demo_counts_stepping_apart_from_running(tmp_path):
    """The demo's measure of training (examples/runtime/slurm_demo.py): node-time its processes ran,
    and node-time they were stepping, which leaves out a relaunch's start-up and a stalled job."""
    sys.path.insert(0, str(EXAMPLES.parent / "runtime"))
    try:
        import slurm_demo
    finally:
        sys.path.pop(0)
    from bft.runtime.statedb.store import StateStore
    from runtime_util import make_run

    store = StateStore(tmp_path / "state.db")
    make_run(store, "job")
    samples = 0.0
    for k in range(21):  # generation 1 on one node, a report every 0.5 s from 0 to 10 s
        samples += 50.0
        store.add_progress("job", generation=1, time_s=0.5 * k, nodes=1, samples=samples, advisor_samples=samples)
    # A relaunch: no step from 10 to 20 s (the new generation's first record at 20 s ends no stepping
    # interval), then two nodes stepping until 30 s, with one stall of 3 s in the middle.
    for k in range(21):
        t = 20.0 + 0.5 * k + (3.0 if k > 10 else 0.0)
        samples += 0.0 if k == 0 else 100.0
        store.add_progress("job", generation=2, time_s=t, nodes=2, samples=samples, advisor_samples=samples)
    # Two processes per node in generation 2: a node's node-time counts once (its local rank 0).
    for node, local_rank, started, ended in (("n0", 0, 0.0, 10.0), ("n0", 0, 12.0, 33.0), ("n0", 1, 12.0, 33.0),
                                             ("n1", 0, 12.0, 33.0), ("n1", 1, 12.0, 33.0)):
        row = store.add_proc("job", 1, node, local_rank)
        store.db.execute("UPDATE procs SET started_s = ?, ended_s = ? WHERE id = ?", (started, ended, row))
    store.close()
    running, stepping, trained = slurm_demo.training(tmp_path, 5.0, 30.0)
    assert running == pytest.approx(5.0 + 18.0 + 18.0)
    # 5-10 s on one node; on two, 20-25 s and 28.5-30 s (the stall from 25 to 28.5 s is not stepping).
    assert stepping == pytest.approx(5.0 * 1 + 5.0 * 2 + 1.5 * 2)
    assert trained == pytest.approx(50.0 * 10 + 100.0 * 14)  # the counts at 30 s and at 5 s


@pytest.mark.parametrize("flag, value, message", [
    ("--step-s", "-1", "--step-s must be in 0..60 seconds, got -1.0"),
    ("--step-s", "nan", "--step-s must be in 0..60 seconds, got nan"),
    ("--step-s", "abc", "argument --step-s: invalid float value: 'abc'"),
    ("--procs-per-node", "0", "--procs-per-node must be in 1..8, got 0")])
def test_the_slurm_demo_refuses_a_bad_step_time_or_process_count_before_it_starts_anything(flag, value, message):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    done = subprocess.run([sys.executable, str(EXAMPLES.parent / "runtime" / "slurm_demo.py"), flag, value],
                          capture_output=True, text=True, env=env, timeout=60)
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert done.stderr.strip().splitlines()[-1].endswith(message), done.stderr
    assert "starting the Slurm test cluster" not in done.stdout


@pytest.mark.parametrize("args, message", [
    (["--ddp", "--global-batch", "128"],
     "--ddp trains one batch per worker and step; --global-batch needs micro-batches"),
    (["--global-batch", "128", "--lr-rule", "linear"],
     "--lr-rule applies to a fixed per-worker batch; a fixed global batch keeps the learning rate")])
def test_the_elastic_example_refuses_flags_that_do_not_go_together_in_one_line(args, message):
    """elastic_synthetic.py: argparse's one line and exit 2, before torch sets anything up."""
    pytest.importorskip("torch", reason="the elastic example needs PyTorch")
    from runtime_util import python_env

    done = subprocess.run([sys.executable, str(EXAMPLES.parent / "runtime" / "elastic_synthetic.py"), *args],
                          capture_output=True, text=True, env=python_env(), timeout=60)
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert done.stderr.strip().splitlines()[-1].endswith(message), done.stderr


def test_the_gpt_example_learns_its_markov_chain(tmp_path):
    """examples/runtime/gpt_synthetic.py, shrunk to seconds (2 layers of width 32, 64 tokens, sequences
    of 16), under plain python: its loss falls well below ln(vocab) = 4.16 (uniform guessing) towards
    the chain's ln(8) = 2.08, so the model and the data fit together."""
    pytest.importorskip("torch", reason="the GPT example needs PyTorch")
    from runtime_util import python_env

    script = EXAMPLES.parent / "runtime" / "gpt_synthetic.py"
    done = subprocess.run([sys.executable, str(script), "--vocab", "64", "--length", "16", "--width", "32",
                           "--layers", "2", "--heads", "2", "--dataset", "512", "--batch", "16", "--global-batch", "32",
                           "--lr", "3e-3", "--samples", "9600"],
                          env=dict(python_env(), BFT_CHECKPOINT_DIR=str(tmp_path)), cwd=tmp_path,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    loss = float(done.stdout.split("final loss ")[1].split()[0])
    assert loss < 3.5, done.stdout
