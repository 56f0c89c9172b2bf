"""Runtime benchmarks (medians; never pass/fail). Results and the machine: bench/README.md.

    python bench/runtime_bench.py report              # bft.train.report() cost per call
    python bench/runtime_bench.py decision            # manager decision latency, 100 jobs x 1,000 nodes
    python bench/runtime_bench.py resize [--cycles 5] # resize gaps and launch to first step: inplace (warm
                                                      # standbys), inplace-cold (--no-standby), relaunch
    python bench/runtime_bench.py simreal             # a trace through the real runtime vs bft replay of it
    python bench/runtime_bench.py statesize           # a resize's state transfer (in place) and checkpoint
                                                      # write/read at 10 MB, 100 MB, 1 GB vs a raw broadcast
                                                      # and a raw file write/read of the same bytes
    python bench/runtime_bench.py gpt                 # examples/runtime/gpt_synthetic.py's throughput at 1, 2
                                                      # and 4 workers, fixed global batch vs fixed per-worker
                                                      # batch, interleaved rounds

Run with the build on PYTHONPATH (``PYTHONPATH=build/dev/python .venv/bin/python bench/runtime_bench.py ...``).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def bench_report(repeats: int, calls: int) -> None:
    """Per-call cost of bft.train.report, outside a manager (no-op) and under one (a UDP receiver)."""
    code = f"""
import os, socket, statistics, sys, time, timeit
mode = sys.argv[1]
if mode == "manager":
    rx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); rx.bind(("127.0.0.1", 0))
    os.environ.update(BFT_JOB_ID="bench", BFT_JOB_SECRET="ab" * 32, BFT_GENERATION="1",
                      BFT_REPORT_ADDR="127.0.0.1:%d" % rx.getsockname()[1], BFT_REPORT_INTERVAL_S="0.5")
import bft.train as bt
bt.report(0)
per_call = []
for r in range({repeats}):
    n = [r * {calls}]
    def step():
        n[0] += 1
        bt.report(n[0])
    t = timeit.timeit(step, number={calls})
    base = timeit.timeit(lambda: n.__setitem__(0, n[0] + 1), number={calls})
    per_call.append((t - base) / {calls})
print(statistics.median(per_call) * 1e9)
"""
    env = dict(os.environ)
    for mode in ("plain", "manager"):
        out = subprocess.run([sys.executable, "-c", code, mode], env=env, capture_output=True, text=True, check=True)
        print(f"report() {mode:8s}: median {float(out.stdout.split()[-1]):.0f} ns per call "
              f"({repeats} runs of {calls:,} calls, loop overhead subtracted)")


def bench_decision(jobs: int, nodes: int, events: int) -> None:
    """Event in -> new map, with the manager's own decider and curve book: 100 learned jobs on 1,000 nodes."""
    from bft.runtime import CurveBook, Decider, JobRow, JobRun, JobState, ManagerOptions, StateStore

    tmp = Path(tempfile.mkdtemp())
    try:
        store = StateStore(tmp / "state.db")
        defaults = ManagerOptions()
        book = CurveBook(store, warmup_s=defaults.advisor_warmup_s, scale_up_s=defaults.scale_up_s,
                         scale_down_s=defaults.scale_down_s)
        decider = Decider(book, store, policy=defaults.policy, tfwd_s=defaults.tfwd_s, max_jobs=jobs,
                          curve_change=defaults.curve_change)
        pool = {f"n{k}" for k in range(nodes)}
        names = sorted(pool)
        runs = []
        t0 = time.time() - 3600
        for j in range(jobs):
            row = JobRow(id=f"job{j}", seq=j + 1, script="/bin/true", args=[], cwd="/", python=sys.executable,
                         min_nodes=1, max_nodes=64, work=None, curve=None, secret="00", state=JobState.QUEUED)
            run = JobRun(row)
            runs.append(run)
            # Measured at three sizes, as the advisor would have learned from reports.
            rate = 1000.0 * (1 + j % 7)
            samples, t = 0.0, t0
            for n in (1, 4, 16):
                book.advisor.report(row.id, t, n, samples)
                for _ in range(8):
                    t += 60
                    samples += 60 * rate * n ** 0.8
                    book.advisor.report(row.id, t, n, samples)
            run.advisor_time = t

        def decide() -> None:
            for p in decider.decide(runs, pool, time.monotonic()):
                p.run.target = p.nodes  # applied as the job lifecycle would, without starting processes

        decide()  # the initial map
        for e in range(events):
            node = names[(37 * e) % len(names)]
            if node in pool:  # reclaimed: it leaves the pool and every job's target
                pool.discard(node)
                for run in runs:
                    if node in run.target:
                        run.target.remove(node)
            else:
                pool.add(node)
            decide()
        latencies = list(decider.latencies_s)[1:]
        store.close()
    finally:
        shutil.rmtree(tmp)
    lat = sorted(latencies)
    print(f"decision latency, {jobs} jobs x {nodes} nodes, policy exact, learned curves: median "
          f"{statistics.median(lat) * 1e3:.1f} ms, p90 {lat[int(0.9 * len(lat))] * 1e3:.1f} ms over {events} events "
          "(node reclaimed or joined -> allocator called -> new targets; process start-up excluded)")


# What each method of `resize` runs the manager with: inplace-cold is inplace without warm standbys.
METHODS = {"inplace": ("--resize", "inplace", "--standby"), "inplace-cold": ("--resize", "inplace", "--no-standby"),
           "relaunch": ("--resize", "relaunch"), "membership": ("--resize", "membership")}


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


@contextlib.contextmanager
def local_manager(state: Path, trace: Path, nodes: int, method: str, *options: str,
                  script: str = "examples/runtime/ddp_synthetic.py"):
    """A real ``bft manager`` on the local source driven by ``trace``; stopped (and everything it
    started) on exit. Yields a function that submits `script` with no end."""
    from bft.runtime import terminate_tagged
    from bft.runtime.ops import control

    env = dict(os.environ, OMP_NUM_THREADS="1")
    manager = subprocess.Popen([sys.executable, "-m", "bft", "manager", "--state-dir", str(state), *METHODS[method],
                                "--local-trace", str(trace), "--local-nodes", str(nodes), "--local-grace-s", "10",
                                *options], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                               start_new_session=True)
    identity = None

    def submit(name: str, *args: str) -> None:
        subprocess.run([sys.executable, "-m", "bft", "submit", str(REPO / script),
                        "--state-dir", str(state), "--name", name, "--min", "1", "--max", str(nodes),
                        "--samples", "1e12", *args], env=env, check=True, capture_output=True)

    try:
        for _ in range(300):
            try:
                identity = control.request(state, {"op": "status"})["status"]["manager"]["identity"]
                break
            except control.ControlError:
                time.sleep(0.2)
        yield submit
    finally:
        manager.send_signal(signal.SIGTERM)
        try:
            manager.wait(60)
        except subprocess.TimeoutExpired:
            manager.kill()
        if identity:
            terminate_tagged(identity, 5.0)


def write_trace(path: Path, rows) -> Path:
    path.write_text("time,node,state\n" + "".join(f"{t:g},{n},{s}\n" for t, n, s in rows))
    return path


def run_resize_cycles(method: str, cycles: int, nodes: int, period_s: float, options: tuple = (),
                      script: tuple = ("examples/runtime/elastic_synthetic.py", "--step-s", "0.05")) -> dict:
    from bft.runtime import CurveBook, JobRun, ManagerOptions, StateStore

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
    # The rescale costs the advisor measured per method, rebuilt as a restarted manager would (a
    # method without a measured rescale shows the manager's default).
    defaults = ManagerOptions()
    book = CurveBook(store, warmup_s=defaults.advisor_warmup_s, scale_up_s=defaults.scale_up_s,
                     scale_down_s=defaults.scale_down_s)
    run = JobRun(store.job("bench"))
    for p in store.progress():
        book.replay_record(run, p)
    out["advisor_costs"] = book.cost_status(run)
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


SIMREAL_TRACE = [  # 4 nodes over 8 minutes: holes open and close while one job trains
    (0, "n0", "idle"), (0, "n1", "idle"), (160, "n2", "idle"), (160, "n3", "idle"), (320, "n2", "busy"),
    (320, "n3", "busy"), (480, "n0", "busy"), (480, "n1", "busy")]


def bench_simreal(method: str) -> None:
    """One DDP job, submitted with no curve, runs on the local source driven by SIMREAL_TRACE in real
    time. Then ``bft replay`` replays the same trace and job with the curve the advisor measured in
    that run and the rescale gaps the manager measured. Samples done by the trace's end are compared."""
    from bft import curve, sim
    from bft.runtime import ManagerOptions, StateStore

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
    # The curve the manager's advisor learned, rebuilt from the stored records as a restarted manager would.
    defaults = ManagerOptions()
    options = curve.AdvisorOptions()
    options.warmup_s = defaults.advisor_warmup_s
    advisor = curve.ProfilingAdvisor(options)
    for p in rows:
        method = curve.rescale_method_from_string(p["method"])
        advisor.report("job", p["time_s"], p["nodes"], p["advisor_samples"], method)
    learned = advisor.throughput_estimate("job", 4)
    # The rescale costs the manager fed its allocator: measured means, else its defaults.
    up, down = curve.measured_rescale_costs(advisor.profile("job"), defaults.scale_up_s, defaults.scale_down_s)
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


STATESIZE_WORKER = r"""
import os, statistics, sys, tempfile, time
from pathlib import Path
import torch, torch.distributed as dist
import bft.train as bt
from bft.train.elastic import broadcast_state, state_bytes

size_mb, repeats, directory = float(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
dist.init_process_group("gloo")
rank = dist.get_rank()
# A model-like state: float32 tensors of at most 16 MB (a large model's layers), size_mb in all.
total = int(size_mb * 1e6) // 4
state = {"model": {f"layer{k}": torch.randn(min(4_000_000, total - k * 4_000_000))
                   for k in range(-(-total // 4_000_000))}, "samples": 0} if rank == 0 else None
nbytes = state_bytes(state) if rank == 0 else 0
raw = torch.empty(total * 4, dtype=torch.uint8)
if rank == 0:
    raw.copy_(torch.cat([t.view(-1) for t in state["model"].values()]).view(torch.uint8))
os.environ["BFT_CHECKPOINT_DIR"] = directory
times = {k: [] for k in ("inplace", "broadcast", "ckpt_write", "file_write", "ckpt_read", "file_read")}


def timed(key, fn):
    dist.barrier()
    t = time.perf_counter()
    out = fn()
    dist.barrier()
    times[key].append(time.perf_counter() - t)
    return out


def evict(path):
    # Out of the page cache: the read measures the disk, as a relaunch on another node would.
    fd = os.open(path, os.O_RDONLY)
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    os.close(fd)


def raw_write(path, data):
    with open(path, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


for _ in range(repeats):
    got = timed("inplace", lambda: broadcast_state(state, 0, torch.device("cpu")))
    del got
    buf = raw.clone() if rank == 0 else torch.empty_like(raw)
    timed("broadcast", lambda: dist.broadcast(buf, 0))
    del buf
    if rank == 0:
        path = timed("ckpt_write", lambda: bt.checkpoint(state))
        evict(path)
        timed("ckpt_read", lambda: bt.resume())
        plain = Path(directory) / "raw.bin"
        timed("file_write", lambda: raw_write(plain, raw.numpy().tobytes()))
        evict(plain)
        timed("file_read", lambda: plain.read_bytes())
    else:
        for key in ("ckpt_write", "ckpt_read", "file_write", "file_read"):
            dist.barrier(); dist.barrier()
if rank == 0:
    print("RESULT", nbytes, " ".join(f"{k}={statistics.median(v)!r}" for k, v in times.items()), flush=True)
dist.barrier()
dist.destroy_process_group()
"""


def bench_statesize(sizes_mb: list, repeats: int) -> None:
    """A resize's cost against the state's size: the in-place transfer (bft.train.elastic.broadcast_state,
    what newcomers receive) against a raw torch.distributed broadcast of the same bytes, and a checkpoint
    write and read (bt.checkpoint, bt.resume: what a relaunch does) against a raw write (fsync) and read
    of the same bytes; two gloo ranks on this host, every figure a median of `repeats`."""
    for size_mb in sizes_mb:
        n = repeats if size_mb < 1000 else 1
        with tempfile.TemporaryDirectory(prefix="bft-statesize-") as directory:
            env = dict(os.environ, OMP_NUM_THREADS="1", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(_free_port()),
                       WORLD_SIZE="2", CUDA_VISIBLE_DEVICES="")
            procs = [subprocess.Popen([sys.executable, "-c", STATESIZE_WORKER, str(size_mb), str(n), directory],
                                      env=dict(env, RANK=str(rank), LOCAL_RANK="0"), stdout=subprocess.PIPE,
                                      text=True) for rank in range(2)]
            outs = [proc.communicate(timeout=1800)[0] for proc in procs]
        line = next(line for line in outs[0].splitlines() if line.startswith("RESULT"))
        _, nbytes, *fields = line.split()
        t = {k: float(v) for k, v in (f.split("=") for f in fields)}
        mb = int(nbytes) / 1e6
        target = 2 * t["broadcast"] + 0.5
        print(f"{mb:7.0f} MB ({n} runs): in place {t['inplace']:.3f} s vs broadcast {t['broadcast']:.3f} s "
              f"({mb / 1e3 / t['broadcast']:.2f} GB/s), ratio {t['inplace'] / t['broadcast']:.2f}, "
              f"target 2 x broadcast + 0.5 s = {target:.3f} s ({'met' if t['inplace'] <= target else 'missed'}); "
              f"checkpoint write {t['ckpt_write']:.3f} s vs file write {t['file_write']:.3f} s "
              f"(ratio {t['ckpt_write'] / t['file_write']:.2f}); read {t['ckpt_read']:.3f} s vs "
              f"{t['file_read']:.3f} s (ratio {t['ckpt_read'] / t['file_read']:.2f})", flush=True)


GPT_SEMANTICS = ("fixed global batch", "fixed per-worker batch")


def _gpt_run(world: int, semantics: str, steps: int, batch: int, global_batch: int) -> dict:
    """One run of examples/runtime/gpt_synthetic.py on `world` workers started as torchrun would (one
    thread each): its median step time (the example leaves out the first 3 steps) and the load average
    when it started."""
    script = REPO / "examples" / "runtime" / "gpt_synthetic.py"
    per_step = global_batch if semantics == GPT_SEMANTICS[0] else batch * world
    args = ["--global-batch", str(global_batch)] if semantics == GPT_SEMANTICS[0] else []
    load = float(Path("/proc/loadavg").read_text().split()[0])
    with tempfile.TemporaryDirectory(prefix="bft-gpt-") as directory:
        env = dict(os.environ, OMP_NUM_THREADS="1", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(_free_port()),
                   WORLD_SIZE=str(world), CUDA_VISIBLE_DEVICES="", BFT_CHECKPOINT_DIR=directory)
        command = [sys.executable, str(script), "--batch", str(batch), "--samples", str(steps * per_step), *args]
        procs = [subprocess.Popen(command, env=dict(env, RANK=str(rank), LOCAL_RANK="0"),
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
                 for rank in range(world)]
        outs = [proc.communicate(timeout=1800)[0] for proc in procs]
    found = re.search(r"median step ([0-9.]+) s over ([0-9]+) steps", outs[0])
    if not found:
        raise RuntimeError(f"{world} worker(s), {semantics}: no median step in the output: {outs[0][-2000:]}")
    step_s = float(found.group(1))
    return {"step_s": step_s, "samples_per_s": per_step / step_s, "measured_steps": int(found.group(2)),
            "load": load}


def bench_gpt(worlds: list, rounds: int, steps: int, batch: int, global_batch: int, curve_out: str) -> None:
    """Throughput of examples/runtime/gpt_synthetic.py at each world size, fixed global batch
    (`global_batch` in micro-batches of `batch`) against fixed per-worker batch (`batch`), measured
    interleaved: `rounds` rounds per world size, each one run of either, the order alternating (A B,
    B A, ...) so that a load that drifts through the run weighs on both alike. Per world size: the
    median over rounds of each run's median step time, the samples/s it gives, the ratio of those
    medians, and each round's ratio (its two runs back to back) with their median. With
    `curve_out`, each semantics' samples/s by world size is written as a curve ({"nodes": [...],
    "throughput": [...]}, the format of bft submit --curve) to CURVE_OUT-global.json and
    CURVE_OUT-per-worker.json."""
    print(f"uptime before: {subprocess.run(['uptime'], capture_output=True, text=True).stdout.strip()}", flush=True)
    start = time.monotonic()
    medians = {name: {} for name in GPT_SEMANTICS}
    for world in worlds:
        runs = {name: [] for name in GPT_SEMANTICS}
        for r in range(rounds):
            for name in (GPT_SEMANTICS if r % 2 == 0 else GPT_SEMANTICS[::-1]):
                run = _gpt_run(world, name, steps, batch, global_batch)
                runs[name].append(run)
                print(f"{world} worker(s), round {r + 1}, {name}: median step {run['step_s']:.3f} s over "
                      f"{run['measured_steps']} steps, {run['samples_per_s']:.2f} samples/s (load average "
                      f"{run['load']:.2f} at its start; {time.monotonic() - start:.0f} s into the bench)", flush=True)
        for name in GPT_SEMANTICS:
            step = statistics.median(run["step_s"] for run in runs[name])
            rate = statistics.median(run["samples_per_s"] for run in runs[name])
            medians[name][world] = rate
            print(f"{world} worker(s), {name}: median step {step:.3f} s, {rate:.2f} samples/s "
                  f"(medians of {rounds} runs)", flush=True)
        # Each round's two runs are back to back: their ratio is less moved by a load that changes between rounds.
        paired = [a["samples_per_s"] / b["samples_per_s"]
                  for a, b in zip(runs[GPT_SEMANTICS[0]], runs[GPT_SEMANTICS[1]])]
        print(f"{world} worker(s), ratio fixed global / fixed per-worker throughput: "
              f"{medians[GPT_SEMANTICS[0]][world] / medians[GPT_SEMANTICS[1]][world]:.3f} (of the medians); per "
              f"round {', '.join(f'{x:.3f}' for x in paired)}, median {statistics.median(paired):.3f}", flush=True)
    if curve_out:
        for name, suffix in zip(GPT_SEMANTICS, ("global", "per-worker")):
            path = Path(f"{curve_out}-{suffix}.json")
            worlds_measured = sorted(medians[name])
            path.write_text(json.dumps({"nodes": [0, *worlds_measured],
                                        "throughput": [0.0, *(round(medians[name][w], 4) for w in worlds_measured)]})
                            + "\n")
            print(f"curve of the {name}: {path}", flush=True)
    print(f"uptime after: {subprocess.run(['uptime'], capture_output=True, text=True).stdout.strip()} "
          f"({time.monotonic() - start:.0f} s)", flush=True)


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="what", required=True)
    r = sub.add_parser("report")
    r.add_argument("--repeats", type=int, default=7)
    r.add_argument("--calls", type=int, default=200_000)
    d = sub.add_parser("decision")
    d.add_argument("--jobs", type=int, default=100)
    d.add_argument("--nodes", type=int, default=1000)
    d.add_argument("--events", type=int, default=21)
    z = sub.add_parser("resize")
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
    m = sub.add_parser("simreal")
    m.add_argument("--method", default="relaunch", choices=("relaunch", "membership"))
    g = sub.add_parser("statesize")
    g.add_argument("--mb", type=float, action="append", help="state size in MB, repeatable (default 10, 100, 1000; "
                   "1000 MB and more measured once)")
    g.add_argument("--repeats", type=int, default=5)
    t = sub.add_parser("gpt")
    t.add_argument("--world", type=int, action="append", help="world sizes, repeatable (default 1, 2 and 4)")
    t.add_argument("--rounds", type=int, default=5, help="runs of each semantics per world size, interleaved "
                   "(default 5)")
    t.add_argument("--steps", type=int, default=6, help="steps per run, the first 3 left out (default 6)")
    t.add_argument("--batch", type=int, default=8, help="per-worker batch, and the micro-batch (default 8)")
    t.add_argument("--global-batch", type=int, default=32)
    t.add_argument("--curve-out", metavar="PREFIX", help="write each semantics' curve to PREFIX-global.json and "
                   "PREFIX-per-worker.json (bft submit --curve's format; bench/gpt_replay.py reads them)")
    a = p.parse_args()
    if a.what == "report":
        bench_report(a.repeats, a.calls)
    elif a.what == "decision":
        bench_decision(a.jobs, a.nodes, a.events)
    elif a.what == "simreal":
        bench_simreal(a.method)
    elif a.what == "gpt":
        bench_gpt(a.world or [1, 2, 4], a.rounds, a.steps, a.batch, a.global_batch, a.curve_out)
    elif a.what == "statesize":
        bench_statesize(a.mb or [10, 100, 1000], a.repeats)
    else:
        sys.path.insert(0, str(Path(__file__).parent))
        bench_resize(a.cycles, a.method or ["inplace", "inplace-cold", "relaunch"], a.nodes or [2, 4], a.period,
                     a.launches, a.local_gpus,
                     a.script or ["examples/runtime/elastic_synthetic.py", "--step-s", "0.05"],
                     tuple(a.procs_per_node or [1]))


if __name__ == "__main__":
    main()
