"""A tour of libbft from Python: the README's example, run by tests/python/test_examples.py.

    PYTHONPATH=build/dev/python .venv/bin/python examples/python/tour.py
"""

import bft
from bft import curve, milp, sim

# 1. Throughput curves. Three measurements of a job are enough for a fitted samples/s curve
#    (model chosen automatically by leave-one-out error; extrapolation beyond 16 nodes is conservative).
fit = curve.fit(nodes=[1, 4, 16], samples_per_s=[1193.0, 4692.0, 18348.0])
print("fit:", fit.status, "model", fit.model, "-> 8 nodes:", round(fit.predict(8)), "samples/s")
vgg = fit.to_curve(64)  # a ThroughputCurve the allocator consumes

# 2. The allocator: which of the idle nodes each elastic job runs on at this event.
jobs = [
    {"name": "vgg16", "min_nodes": 1, "max_nodes": 64, "nodes": list(vgg.nodes), "throughput": list(vgg.values),
     "scale_up_s": 18.0, "scale_down_s": 12.0},
    {"name": "resnet18", "min_nodes": 2, "max_nodes": 8, "nodes": [0, 1, 2, 4, 8],
     "throughput": [0.0, 5219.0, 10583.0, 20436.0, 39584.0], "scale_up_s": 17.0, "scale_down_s": 11.0},
]
pool = list(range(100, 112))  # 12 idle nodes; vgg16 runs on 100..103 now
current = {100: "vgg16", 101: "vgg16", 102: "vgg16", 103: "vgg16"}
a = bft.allocate(jobs, pool, current, tfwd=10, solver="exact")
print(a)
for j, job in enumerate(a.job_ids):
    print(f"  {job}: {a.nodes_before[j]} -> {a.nodes_after[j]} nodes, {a.rate[j]:.0f} samples/s")

# 3. Online profiling: the advisor learns a job's curve from its progress reports alone.
advisor = curve.ProfilingAdvisor()
samples = 0.0
for t in range(0, 600, 10):  # ten minutes on 4 nodes, then on 8
    nodes = 4 if t < 300 else 8
    advisor.report("vgg16", float(t), nodes, samples)
    samples += 10 * vgg(nodes)
print("advisor: 8 nodes ->", round(advisor.throughput_estimate("vgg16", 64)(8)), "samples/s; probe next:",
      [p.nodes for p in advisor.probe_suggestions("vgg16", 64)])

# 4. The MILP layer underneath (any backend built: GLPK, CBC).
m = milp.Model("tiny")
x = m.add_integer(0, 8, name="x")
y = m.add_piecewise_linear(x, [0, 2, 4, 8], [0, 1, 9, 12], name="f")
m.add_constraint(x <= 6, name="cap")
m.maximize(y - 0.5 * x)
for backend in milp.available_backends():
    r = milp.solve(m, backend=backend)
    print(f"milp[{backend}]:", r.termination, "x =", r.value(x), "objective", r.objective)

# 5. Replay: the built-in synthetic trace (documented generator, seed 1), exact vs equal share.
trace, workload = sim.generate_synthetic(seed=1)
for policy in ("exact", "equal_share"):
    s = sim.replay(trace, workload, policy=policy).summary
    print(f"replay {policy:11s}: {s['samples_done']:.3e} samples, idle capture {s['idle_capture']:.1%}")
