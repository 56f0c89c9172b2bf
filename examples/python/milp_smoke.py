"""Smoke test of an installed libbft: build a small MILP with a piecewise-linear term and solve it
on every MILP backend the build has. Exits non-zero on a missing backend list or a wrong answer.

Used by `./dev.sh wheel` after `pip install .` into a fresh virtual environment.
"""

import sys

import bft
from bft import milp


def interpolate(xs, ys, x):
    for k in range(len(xs) - 1):
        if x <= xs[k + 1]:
            return ys[k] + (ys[k + 1] - ys[k]) * (x - xs[k]) / (xs[k + 1] - xs[k])
    return ys[-1]


def main() -> int:
    # Eight idle nodes split between two jobs; job B's throughput curve is non-concave.
    nodes_b, speed_b = [0, 2, 4, 8], [0, 1, 9, 12]
    total = 8
    m = milp.Model("smoke")
    a = m.add_integer(0, total, name="nodes_a")
    b = m.add_integer(0, total, name="nodes_b")
    tput_b = m.add_piecewise_linear(b, nodes_b, speed_b, name="samples_per_s_b")
    m.add_constraint(a + b <= total, name="idle_nodes")
    m.maximize(2 * a + tput_b)
    best = max(2 * na + interpolate(nodes_b, speed_b, nb) for na in range(total + 1) for nb in range(total + 1 - na))

    backends = milp.available_backends()
    print(f"bft {bft.__version__}: MILP backends {backends}")
    if not backends:
        print("no MILP backend was built")
        return 1
    failures = 0
    for backend in backends:
        r = milp.solve(m, backend=backend, time_limit_s=10)
        ok = r.optimal and abs(r.objective - best) < 1e-6
        ok = ok and abs(r.value(tput_b) - interpolate(nodes_b, speed_b, r.value(b))) < 1e-6
        print(
            f"{backend:5s} {milp.termination_name(r.termination)}: nodes A={r.value(a):g} B={r.value(b):g}, "
            f"throughput {r.objective:g} (enumeration: {best:g}), {r.wall_time_s:.4f} s"
            if r.has_solution
            else f"{backend:5s} {milp.termination_name(r.termination)}: {r.message}"
        )
        if not ok:
            print(f"{backend}: WRONG ANSWER")
            failures += 1
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
