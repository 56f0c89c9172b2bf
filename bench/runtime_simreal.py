"""Runtime bench: a trace through the real runtime (a ``bft manager`` on the local source) against
``bft replay`` of it; never pass/fail (bench/README.md, "Runtime").

    python bench/runtime_simreal.py [--method relaunch|membership]

Run with the build on PYTHONPATH (``PYTHONPATH=build/dev/python .venv/bin/python bench/runtime_simreal.py ...``).
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
import time
from pathlib import Path

from runtime_shared import local_manager, write_trace

SIMREAL_TRACE = [  # 4 nodes over 8 minutes: holes open and close while one job trains
    (0, "n0", "idle"), (0, "n1", "idle"), (160, "n2", "idle"), (160, "n3", "idle"), (320, "n2", "busy"),
    (320, "n3", "busy"), (480, "n0", "busy"), (480, "n1", "busy")]


def bench_simreal(method: str) -> None:
    """One DDP job, submitted with no curve, runs on the local source driven by SIMREAL_TRACE in real
    time. Then ``bft replay`` replays the same trace and job with the curve the advisor measured in
    that run and the rescale gaps the manager measured. Samples done by the trace's end are compared."""
    from bft import curve, sim
    from bft.runtime import Manager, ManagerOptions, StateStore, source_class

    tmp = Path(tempfile.mkdtemp())
    end_s = max(t for t, _, _ in SIMREAL_TRACE)
    trace_path = write_trace(tmp / "trace.csv", SIMREAL_TRACE)
    state = tmp / "state"
    with local_manager(state, trace_path, 4, method) as submit:
        t0 = json.loads((state / "local-source.json").read_text())["t0"]
        submit("job")
        time.sleep(max(0.0, t0 + end_s + 2 - time.time()))
    store = StateStore(state / "state.db", create=False, read_only=True)
    rows = [p for p in store.progress() if p["time_s"] <= t0 + end_s]
    real = max((p["samples"] for p in rows), default=0.0)
    submit = store.job("job").submitted_s - t0
    # The curve the manager's advisor learned, rebuilt from the stored records as a restarted manager
    # rebuilds it: a Manager on the run's state (never started: nothing runs) replays them into its curve book.
    defaults = ManagerOptions()
    manager = Manager(state_dir=state, source=source_class("local")("simreal", state, nodes=4), store=store,
                      identity="simreal", options=defaults)
    run = manager.lifecycle.new_run(store.job("job"))
    for p in rows:
        manager.book.replay_record(run, p)
    advisor, options = manager.book.advisor, manager.book.advisor.options
    learned = advisor.throughput_estimate(manager.book.key(run), 4)
    # The rescale costs the manager fed its allocator: measured means, else its defaults.
    up, down = curve.measured_rescale_costs(advisor.profile(manager.book.key(run)), defaults.scale_up_s,
                                            defaults.scale_down_s)
    store.close()
    nodes = list(range(0, 5))
    rates = [float(learned.evaluate(n)) for n in nodes]
    spec = {"name": "job", "submit": submit, "min_nodes": 1, "max_nodes": 4, "work": 1e12, "scale_up_s": up,
            "scale_down_s": down, "nodes": nodes, "throughput": rates, "objective": rates}
    (tmp / "jobs.jsonl").write_text(json.dumps(spec) + "\n")
    trace, jobs = sim.read_trace(trace_path), sim.read_jobs(tmp / "jobs.jsonl")
    replayed = float(sim.replay(trace, jobs, policy="exact", start_s=0, end_s=end_s).summary["samples_done"])
    # The same replay in the runtime's state of knowledge: curves learned online from nothing, by an
    # advisor with the manager's options (the true curve and costs drive the simulated progress).
    learned_replay = float(sim.replay(trace, jobs, policy="exact", curves="learned", advisor=options, start_s=0,
                                      end_s=end_s).summary["samples_done"])
    shutil.rmtree(tmp)
    print(f"sim vs reality ({method}): real runtime {real:,.0f} samples; measured curve {[round(r) for r in rates]} "
          f"samples/s, rescale costs up {up:.1f} s / down {down:.1f} s (the advisor's, as the manager used them)")
    print(f"  bft replay, that curve given (oracle): {replayed:,.0f} samples, "
          f"relative error {(replayed - real) / real:+.1%}")
    print(f"  bft replay, curves learned online as the manager did: {learned_replay:,.0f} samples, "
          f"relative error {(learned_replay - real) / real:+.1%}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--method", default="relaunch", choices=("relaunch", "membership"))
    bench_simreal(p.parse_args().method)


if __name__ == "__main__":
    main()
