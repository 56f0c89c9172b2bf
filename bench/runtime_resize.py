"""Runtime bench: resize gaps and launch to first step under a real ``bft manager`` (local source):
inplace (warm standbys), inplace-cold (--no-standby), relaunch, membership; medians and ratios of
one run, never pass/fail (bench/README.md, "Runtime").

    python bench/runtime_resize.py [--cycles 5] [--nodes 2 ...] [--method inplace ...]

Run with the build on PYTHONPATH (``PYTHONPATH=build/dev/python .venv/bin/python bench/runtime_resize.py ...``).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from runtime_shared import METHODS, local_manager, write_trace


def bench_resize(cycles: int, methods: list, sizes: list, period_s: float, launches: int, gpus: int,
                 script: list, procs: tuple = (1,)) -> None:
    """A real manager (local source) and one elastic job (`script`: its path and arguments; by default
    examples/runtime/elastic_synthetic.py --step-s 0.05, the same script for every method); the trace
    takes half of the nodes away and gives them back every cycle. The manager measures each gap (last
    step at the old size -> first at the new one). Then, per method, `launches` short jobs one after
    the other on the same nodes: launch -> first step. With `gpus`, virtual node k trains on GPU k mod
    gpus (the manager's --local-gpus). Each of `procs` (processes per node, the manager's
    --procs-per-node) is run in turn; a count other than 1 is named in the results' keys ("x2/node")."""
    from bft.runtime.decide.curvebook import RESCALE_METHODS

    gpu_options = ("--local-gpus", str(gpus)) if gpus else ()
    if gpus:
        import torch

        print(f"devices: {gpus} GPU(s), {torch.cuda.get_device_name(0)}, torch {torch.__version__}", flush=True)
    results = {}
    for nodes, per_node in [(n, k) for n in sizes for k in procs]:
        options = (*gpu_options, "--procs-per-node", str(per_node))
        label = f"{nodes // 2}<->{nodes}" + (f" x{per_node}/node" if per_node != 1 else "")
        for method in methods:
            r = run_resize_cycles(method, cycles, nodes, period_s, options, script)
            results[f"{method} {label}"] = r
            r["launches"] = run_launches(method, launches, nodes, options) if launches else []
            for kind in ("grow", "shrink"):
                g = r[kind]
                med = f"{statistics.median(g):.2f} s" if g else "n/a"
                print(f"resize gap, {method:8s} {kind:6s} ({label} nodes): median {med}, counted "
                      f"{len(g)} of {cycles} cycles ({r['decided'][kind]} decisions){r['left_out'][kind]}: "
                      f"{', '.join(f'{x:.2f}' for x in g)}", flush=True)
            c = r["advisor_costs"]  # what the allocator is charged, in its units (docs/runtime.md)
            print(f"advisor's measured costs, {method:8s} ({label} nodes): "
                  + "; ".join(f"{m} up {c[m]['scale_up_s']:.2f} s ({c[m]['measured_ups']} grows), down "
                              f"{c[m]['scale_down_s']:.2f} s ({c[m]['measured_downs']} shrinks)"
                              for m in RESCALE_METHODS), flush=True)  # the methods' entries, not cold_start's
            g = r["grow_decided_to_first_step"]
            print(f"grow, decision -> first step at the new size, {method:8s} ({label} nodes): "
                  f"median {statistics.median(g) if g else float('nan'):.2f} s: {', '.join(f'{x:.2f}' for x in g)}",
                  flush=True)
            print(f"throughput by size, {method:8s} ({label}): " + "; ".join(
                f"{n} node(s) {rate:.2f} samples/s" for n, rate in sorted(r["samples_per_s"].items())), flush=True)
            first, warm = r["launch_to_first_step"], r["launches"]
            print(f"launch to first step, {method:8s} ({nodes} nodes): the resize run's job (submitted as the "
                  f"manager started): {', '.join(f'{x:.2f} s' for x in first) or 'n/a'}; {launches} jobs one after "
                  f"the other on idle nodes: median {statistics.median(warm) if warm else float('nan'):.2f} s: "
                  f"{', '.join(f'{x:.2f}' for x in warm)}", flush=True)
    for kind in ("grow", "shrink", "grow_decided_to_first_step", "launches"):
        for nodes in sizes:
            key = {m: results[f"{m} {nodes // 2}<->{nodes}"][kind] for m in methods} if 1 in procs else {}
            for a, b in (("inplace", "relaunch"), ("inplace", "inplace-cold")):
                if a in key and b in key and key[a] and key[b]:
                    ratio = statistics.median(key[a]) / statistics.median(key[b])
                    print(f"ratio {a} / {b}, {kind} ({nodes // 2}<->{nodes}): {ratio:.3f}", flush=True)
            for method in methods:  # N processes per node against one, the same method and nodes
                one = results.get(f"{method} {nodes // 2}<->{nodes}", {}).get(kind)
                for per_node in (k for k in procs if k != 1):
                    more = results[f"{method} {nodes // 2}<->{nodes} x{per_node}/node"][kind]
                    if one and more:
                        ratio = statistics.median(more) / statistics.median(one)
                        print(f"ratio {per_node} / 1 processes per node, {method} {kind} ({nodes // 2}<->{nodes}): "
                              f"{ratio:.3f}", flush=True)
    print(json.dumps(results))


def run_resize_cycles(method: str, cycles: int, nodes: int, period_s: float, options: tuple = (),
                      script: tuple = ("examples/runtime/elastic_synthetic.py", "--step-s", "0.05")) -> dict:
    from bft.runtime import StateStore
    from bft.runtime.ops import control

    tmp = Path(tempfile.mkdtemp())
    leaving = [f"n{k}" for k in range(nodes // 2, nodes)]
    rows = [(0, f"n{k}", "idle") for k in range(nodes)]
    for c in range(cycles):
        start = period_s * (1 + c)
        rows += [(start, n, "busy") for n in leaving] + [(start + period_s / 2, n, "idle") for n in leaving]
    state = tmp / "state"
    # A long horizon (--tfwd) so that growing back is always worth its cost: this measures resizes, not policy.
    with local_manager(state, write_trace(tmp / "trace.csv", rows), nodes, method, "--tfwd", "600", *options,
                       script=script[0]) as submit:
        curve = tmp / "curve.json"  # linear prior: the job wants every node until the advisor knows better
        curve.write_text(json.dumps({"nodes": [1, nodes], "throughput": [1000.0, 1000.0 * nodes]}))
        submit("bench", "--curve", str(curve), "--", *script[1:])
        time.sleep(period_s * (cycles + 1) + 5)
        # The rescale costs the advisor measured per method, as the manager charges its allocator at the
        # run's end (`bft status --json`; a method without a measured rescale shows the manager's default).
        jobs = control.request(state, {"op": "status"})["status"]["jobs"]
        advisor_costs = next(job["rescale_costs"] for job in jobs if job["id"] == "bench")
    store = StateStore(state / "state.db", create=False, read_only=True)
    out = {"grow": [], "shrink": [], "decided": {"grow": 0, "shrink": 0}, "left_out": {"grow": "", "shrink": ""},
           "launch_to_first_step": [], "grow_decided_to_first_step": []}
    restarts = {"grow": 0, "shrink": 0}
    decided_grow = None
    for e in store.events(("resize_gap", "allocate")):
        if e["kind"] == "allocate":
            if e["from_nodes"] and e["to_nodes"] > e["from_nodes"]:
                decided_grow = e["time_s"]
            continue
        kind = "grow" if e["to_nodes"] > e["from_nodes"] else "shrink"
        if e.get("gap", "resize") == "resize":  # a restart after a time without nodes is not a resize
            out[kind].append(e["gap_s"])
            if kind == "grow" and decided_grow is not None:  # the decision to grow -> the first step at the new size
                out["grow_decided_to_first_step"].append(e["time_s"] - decided_grow)
        else:
            restarts[kind] += 1
        decided_grow = None
    for e in store.events(("allocate",)):
        if e["from_nodes"] and e["to_nodes"] and e["from_nodes"] != e["to_nodes"]:
            out["decided"]["grow" if e["to_nodes"] > e["from_nodes"] else "shrink"] += 1
    for kind in ("grow", "shrink"):
        missing = cycles - len(out[kind])
        if missing > 0:  # said, not hidden: which resizes the manager could not measure, and why
            out["left_out"][kind] = (f"; {missing} left out: {restarts[kind]} after a time without nodes, the others "
                                     "superseded by a second resize before their first step, or unfinished at the end")
    out["advisor_costs"] = advisor_costs
    # The job's throughput at each size: samples over time between consecutive reports of one generation
    # at one size, summed per size (the gaps between sizes are left out).
    spans: dict = {}
    previous = None
    for p in store.progress():
        if previous is not None and (previous["generation"], previous["nodes"]) == (p["generation"], p["nodes"]):
            done, took = spans.get(p["nodes"], (0.0, 0.0))
            spans[p["nodes"]] = (done + p["samples"] - previous["samples"], took + p["time_s"] - previous["time_s"])
        previous = p
    out["samples_per_s"] = {n: done / took for n, (done, took) in spans.items() if took > 0}
    launches = store.events(("launch",))
    progress = list(store.db.execute("SELECT time_s FROM progress WHERE job = 'bench' AND samples > 0 ORDER BY time_s"))
    for launch in launches[:1]:  # the job's first start: later launches are resizes (relaunch) or fallbacks
        after = [row[0] for row in progress if row[0] > launch["time_s"]]
        if after:
            out["launch_to_first_step"].append(after[0] - launch["time_s"])
    if os.environ.get("BFT_BENCH_EVENTS"):  # for a closer look: the manager's event log
        events = store.events()
        for e in events:
            print(f"  {e['time_s'] - events[0]['time_s']:7.1f} {e['kind']:12s} {e.get('job') or ''} "
                  f"{e.get('node') or ''} {e.get('to_nodes', '')} {e.get('gap_s', '')}")
    store.close()
    shutil.rmtree(tmp)
    return out


def warm_standbys(identity: str) -> int:
    """How many of the manager's standbys have done their imports: blocked reading their pipe."""
    from bft.runtime import tagged_processes
    from bft.train import protocol

    count = 0
    for pid in tagged_processes(identity):
        try:
            environ = Path(f"/proc/{pid}/environ").read_bytes()
            waiting = "pipe_read" in Path(f"/proc/{pid}/wchan").read_text()
        except OSError:
            continue
        count += waiting and f"{protocol.ENV_STANDBY}=1".encode() in environ.split(b"\0")
    return count


def run_launches(method: str, launches: int, nodes: int, options: tuple = ()) -> list:
    """Launch -> first step of `launches` short jobs, one after the other, each on all `nodes`; with
    standbys, a job is submitted once every node's standby has done its imports (waits in its read)."""
    from bft.runtime import ACTIVE_STATES, StateStore
    from bft.runtime.ops import control

    tmp = Path(tempfile.mkdtemp())
    state = tmp / "state"
    trace = write_trace(tmp / "trace.csv", [(0, f"n{k}", "idle") for k in range(nodes)])
    with local_manager(state, trace, nodes, method, *options, script="examples/runtime/elastic_synthetic.py") as submit:
        for k in range(launches):
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                s = control.request(state, {"op": "status"})["status"]
                done = all(j["state"] not in ACTIVE_STATES for j in s["jobs"])
                if done and (method != "inplace" or warm_standbys(s["manager"]["identity"]) == nodes):
                    break
                time.sleep(0.2)
            time.sleep(1.0)
            submit(f"launch{k}", "--min", str(nodes), "--samples", "2000", "--", "--step-s", "0.05")
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and any(j["state"] in ACTIVE_STATES
                                                  for j in control.request(state, {"op": "status"})["status"]["jobs"]):
            time.sleep(0.2)
    store = StateStore(state / "state.db", create=False, read_only=True)
    out = []
    for k in range(launches):
        launch = store.events(("launch",), f"launch{k}")
        first = store.db.execute("SELECT MIN(time_s) FROM progress WHERE job = ? AND samples > 0",
                                 (f"launch{k}",)).fetchone()[0]
        if launch and first:
            out.append(first - launch[0]["time_s"])
    store.close()
    shutil.rmtree(tmp)
    return out


def main() -> None:
    z = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    z.add_argument("--cycles", type=int, default=5)
    z.add_argument("--nodes", type=int, action="append", help="nodes at full size, half of them taken away and "
                   "given back every cycle (repeatable; default 2 and 4)")
    z.add_argument("--period", type=float, default=30.0, help="seconds per cycle (default 30)")
    z.add_argument("--method", action="append", choices=tuple(METHODS),
                   help="repeatable (default inplace, inplace-cold, relaunch)")
    z.add_argument("--launches", type=int, default=5, help="short jobs launched one after the other (default 5)")
    z.add_argument("--script", nargs=argparse.REMAINDER, metavar="SCRIPT ARGS",
                   help="the job: a script under the repository and its arguments, last on the line (default "
                        "examples/runtime/elastic_synthetic.py --step-s 0.05)")
    z.add_argument("--local-gpus", type=int, default=0, metavar="N",
                   help="train on GPUs: virtual node k gets GPU k mod N (default 0: CPU)")
    z.add_argument("--procs-per-node", type=int, action="append", metavar="N",
                   help="processes per node (the manager's --procs-per-node), repeatable: each is run in turn, "
                        "in the same run (default 1)")
    a = z.parse_args()
    bench_resize(a.cycles, a.method or ["inplace", "inplace-cold", "relaunch"], a.nodes or [2, 4], a.period,
                 a.launches, a.local_gpus, a.script or ["examples/runtime/elastic_synthetic.py", "--step-s", "0.05"],
                 tuple(a.procs_per_node or [1]))


if __name__ == "__main__":
    main()
