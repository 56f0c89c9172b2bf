"""Ctrl-C (SIGINT) stops long C++ calls, and isolated MILP solves give the same results.

Each interrupt test runs a child interpreter, waits until it is inside the long call (it has used
CPU time since it said so), sends SIGINT and expects KeyboardInterrupt. The 60 s bounds only detect
a call that ignores Ctrl-C (before the fix: a MILP solve ran to its end, minutes later) or never
starts; they are not measurements.
"""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bft import milp

BACKENDS = [b for b in ("glpk", "cbc") if b in milp.available_backends()]

HARD_SOLVE = r"""
import sys
from bft import milp

backend, isolate = sys.argv[1], sys.argv[2] == "isolate"
# A market split instance (Cornuejols & Dawande): branch and bound runs for minutes.
m = milp.Model("market_split")
x = [m.add_binary() for _ in range(50)]
slack = []
state = 5
for i in range(6):
    coefs = []
    for j in range(50):
        state = (state * 1103515245 + 12345) % 2**31
        coefs.append(state % 100)
    plus, minus = m.add_continuous(), m.add_continuous()
    m.add_constraint(milp.quicksum(a * v for a, v in zip(coefs, x)) + plus - minus == sum(coefs) // 2)
    slack += [plus, minus]
m.minimize(milp.quicksum(slack))
print("solving", flush=True)
try:
    r = milp.solve(m, backend=backend, isolate=isolate)
except KeyboardInterrupt:
    print("KeyboardInterrupt", flush=True)
    sys.exit(0)
print("finished", r.termination, flush=True)
"""

LONG_REPLAY = r"""
from bft import sim

trace, jobs = sim.generate_synthetic(seed=1)
print("solving", flush=True)
try:
    sim.replay(trace, jobs, policy="node_milp", time_limit_s=float("inf"))  # no on_progress callback
except KeyboardInterrupt:
    print("KeyboardInterrupt", flush=True)
    raise SystemExit(0)
print("finished", flush=True)
"""


def _sigint_default():
    """A child starts with SIGINT at its default, as an interactive session does, whatever this
    process inherited (a background job of a script has it ignored)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _cpu_s(pid):
    """CPU seconds used so far by pid and its live descendants (an isolated solve runs in a forked
    child); 0 for a process that has gone meanwhile."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        children = [int(c) for task in Path(f"/proc/{pid}/task").iterdir()
                    for c in (task / "children").read_text().split()]
    except (FileNotFoundError, ProcessLookupError):
        return 0.0
    own = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime
    return own + sum(_cpu_s(c) for c in children)


def _wait_computing(pid, cpu_s=0.5, timeout_s=60):
    """Returns once pid (with its descendants) has used cpu_s more CPU time: it is inside the call."""
    start, deadline = _cpu_s(pid), time.monotonic() + timeout_s
    while _cpu_s(pid) < start + cpu_s:
        assert time.monotonic() < deadline, f"the child used less than {cpu_s} s of CPU in {timeout_s} s"
        time.sleep(0.05)


def interrupt_child(code, *args):
    child = subprocess.Popen(
        [sys.executable, "-c", code, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        preexec_fn=_sigint_default,
    )
    try:
        assert child.stdout.readline().strip() == "solving"
        _wait_computing(child.pid)
        child.send_signal(signal.SIGINT)
        out, err = child.communicate(timeout=60)
    finally:
        if child.poll() is None:
            child.kill()
            child.communicate()
    return child.returncode, out, err


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("mode", ["in_process", "isolate"])
def test_ctrl_c_stops_a_long_milp_solve(backend, mode):
    rc, out, err = interrupt_child(HARD_SOLVE, backend, mode)
    assert rc == 0, err[-2000:]
    assert out.strip() == "KeyboardInterrupt", (out, err[-2000:])


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_process_that_ignores_sigint_is_not_stopped_by_it(backend):
    # nohup and background jobs of scripts run with SIGINT ignored: a solve there runs to its limit.
    limited = HARD_SOLVE.replace("isolate=isolate)", "isolate=isolate, time_limit_s=3)")
    code = "import signal\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\n" + limited
    rc, out, err = interrupt_child(code, backend, "in_process")
    assert rc == 0, err[-2000:]
    assert out.strip() == "finished Termination.TIME_LIMIT", (out, err[-2000:])


def test_ctrl_c_stops_a_node_milp_replay_without_a_progress_callback():
    rc, out, err = interrupt_child(LONG_REPLAY)
    assert rc == 0, err[-2000:]
    assert out.strip() == "KeyboardInterrupt", (out, err[-2000:])


@pytest.mark.parametrize("backend", BACKENDS)
def test_isolated_solves_agree_with_in_process_ones(backend):
    m = milp.Model("knapsack")
    x = [m.add_integer(0, 3, name=f"x{i}") for i in range(10)]
    m.add_constraint(milp.quicksum((i % 7 + 1) * v for i, v in enumerate(x)) <= 17, name="capacity")
    f = m.add_piecewise_linear(x[0], [0, 1, 2, 3], [0, 6, 1, 8])
    m.maximize(milp.quicksum((i * 3 % 5) * v for i, v in enumerate(x)) + f)
    direct = milp.solve(m, backend=backend)
    isolated = milp.solve(m, backend=backend, isolate=True)
    assert direct.termination == milp.Termination.OPTIMAL
    assert isolated.termination == direct.termination
    assert isolated.objective == direct.objective
    assert list(isolated.values) == list(direct.values)
    assert isolated.model_id == m.id
