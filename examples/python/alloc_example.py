# %% [markdown]
# # Allocating idle nodes to elastic training jobs with `bft.allocate`
#
# Notebook-style example (cells separated by `# %%`; runs as a plain script too):
#
#     PYTHONPATH=build/dev/python .venv/bin/python examples/python/alloc_example.py
#
# It takes ten jobs from the ImageNet workload of the BFTrainer evaluation (or synthetic ones
# when ../shared/data is absent), lets them run on a pool of idle nodes, then replays one event:
# the main scheduler takes back a third of the nodes and new ones become idle.

# %%
import json
import time
from pathlib import Path

import numpy as np

import bft

DATA = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "jobs-imagenet-throughput-1001.jsonl"
if DATA.exists():
    with open(DATA) as f:
        jobs = [json.loads(line) for _, line in zip(range(10), f)]
else:  # same shape: 1..64 nodes, sub-linear speed-up
    nodes = [0, 1, 2, 4, 8, 16, 32, 64]
    jobs = [
        {"name": f"job{j}", "min_nodes": 1, "max_nodes": 64, "nodes": nodes,
         "throughput": [1000.0 * (j + 1) * n ** 0.9 for n in nodes], "scale_up_s": 18.0, "scale_down_s": 12.0}
        for j in range(10)
    ]
print(f"{len(jobs)} jobs, e.g. {jobs[0]['name']}: {jobs[0]['throughput'][-1]:.0f} samples/s on 64 nodes")

# %% [markdown]
# ## First event: 200 idle nodes, nothing running yet

# %%
pool = np.arange(200)
first = bft.allocate(jobs, pool)
print(first)
print("nodes per job:", dict(zip(first.job_ids, first.nodes_after.tolist())))

# %% [markdown]
# ## Next event: nodes 0..69 are reclaimed, nodes 200..279 become idle
#
# `current` is the map the jobs run on now, minus the reclaimed nodes (they are gone from the pool).

# %%
reclaimed = set(range(70))
pool = np.array([n for n in range(280) if n not in reclaimed])
current = {node: job for node, job in first.map.items() if node not in reclaimed}

results = {}
for solver in ("exact", "count_milp", "equal_share"):
    start = time.perf_counter()
    results[solver] = bft.allocate(jobs, pool, current, tfwd=10, solver=solver)
    print(f"{solver:12s} objective {results[solver].objective:14.1f}  "
          f"{results[solver].status.name.lower():9s}  "
          f"{(time.perf_counter() - start) * 1e3:7.2f} ms")

# %% [markdown]
# Per-job figures are numpy arrays in the order of `jobs`.

# %%
best = results["exact"]
print(f"{'job':22s} {'before':>6s} {'after':>6s} {'rate (samples/s)':>17s} {'penalty':>10s}")
for j, name in enumerate(best.job_ids):
    print(f"{name:22s} {best.nodes_before[j]:6d} {best.nodes_after[j]:6d} {best.rate[j]:17.1f} {best.penalty[j]:10.1f}")
print("predicted total:", best.rate.sum().round(1), "samples/s on", best.nodes_after.sum(), "of", len(pool), "nodes")

# %% [markdown]
# ## Max-min fairness
#
# Maximise the smallest normalised value (throughput over throughput at max_nodes) first, then
# the throughput objective among the allocations that reach it.

# %%
fair = bft.allocate(jobs, pool, current, goal="max_min_fair")
print("throughput goal: min normalised", round(best.min_normalized_value, 3), "objective", round(best.objective))
print("max-min goal:    min normalised", round(fair.min_normalized_value, 3), "objective", round(fair.objective))
