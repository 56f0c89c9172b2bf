"""Issue 29, the class of the poison job: every submit request the control socket accepts, under any
flags ManagerOptions.check() accepts, is a job the allocator takes. Hypothesis searches curves,
speedups, node counts, horizons and rescale costs across and beyond their limits (NaN, infinities,
1e300). Fast: no manager process, no torch."""

from __future__ import annotations

import itertools
import sys
import time

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from bft import alloc, jobs
from bft.runtime.decide.curvebook import CurveBook
from bft.runtime.decide.decider import Decider
from bft.runtime.jobs.runs import JobRun
from bft.runtime.ops import control
from bft.runtime.options import ManagerOptions
from bft.runtime.statedb.store import StateStore

RATES = st.one_of(st.floats(0, jobs.MAX_SAMPLES_PER_S), st.floats(0, jobs.MAX_SAMPLES_PER_S),
                  st.floats(0, 10 * jobs.MAX_SAMPLES_PER_S), st.floats(allow_nan=True, allow_infinity=True),
                  st.sampled_from([0.0, 1e-5, jobs.MAX_SAMPLES_PER_S, 9e14, 1e15, 1e300]))
# Mostly within the limit, so that most examples reach the allocator: three flags of these each.
SECONDS = st.one_of(st.floats(0, alloc.MAX_HORIZON_S), st.floats(0, alloc.MAX_HORIZON_S),
                    st.floats(0, alloc.MAX_HORIZON_S), st.sampled_from([0.0, alloc.MAX_HORIZON_S, 1e13]),
                    st.floats(allow_nan=True, allow_infinity=True))
HORIZONS = SECONDS.filter(lambda s: s != 0)  # tfwd_s: 0 is refused, and Hypothesis likes 0


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    root = tmp_path_factory.mktemp("poison")
    script = root / "train.py"
    script.write_text("pass\n")
    store = StateStore(root / "state.db")
    yield store, str(script), str(root), itertools.count()
    store.close()


@settings(max_examples=1000, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(curve_nodes=st.lists(st.integers(0, 300), min_size=1, max_size=4, unique=True).map(sorted),
       rates=st.lists(RATES, min_size=4, max_size=4), max_nodes=st.integers(1, 300),
       speedups=st.lists(st.one_of(st.floats(0.001, 1000), st.sampled_from([1000.0])), max_size=2),
       tfwd_s=HORIZONS, scale_up_s=SECONDS, scale_down_s=SECONDS)
def test_every_job_and_flag_the_entry_accepts_is_one_the_allocator_takes(world, curve_nodes, rates, max_nodes,
                                                                          speedups, tfwd_s, scale_up_s, scale_down_s):
    store, script, cwd, names = world
    options = ManagerOptions(tfwd_s=tfwd_s, scale_up_s=scale_up_s, scale_down_s=scale_down_s)
    try:
        options.check()
    except ValueError:
        event("flags refused")
        return  # refused at the entry: bft manager exits 2 with the line
    request = {"op": "submit", "name": f"j{next(names)}", "script": script, "args": [], "cwd": cwd,
               "python": sys.executable, "min_nodes": 1, "max_nodes": max_nodes,
               "curve": {"nodes": curve_nodes, "throughput": rates[:len(curve_nodes)]},
               "configurations": [{"name": f"c{k}", "efficiency": 0.5, "speedup": s} for k, s in enumerate(speedups)]}
    try:
        row = control.job_from_request(request, 2)
    except ValueError:
        event("job refused")
        return  # refused at the entry: bft submit exits 2 with the line
    event("accepted: decided")
    run = JobRun(store.add_job(row))
    book = CurveBook(store, warmup_s=0.0, scale_up_s=options.scale_up_s, scale_down_s=options.scale_down_s)
    book.set_prior(run)
    decider = Decider(book, store, policy="exact", tfwd_s=options.tfwd_s, max_jobs=10, curve_change=0.15)
    pool = [f"n{k}" for k in range(max_nodes)]
    placements = decider.decide([run], pool, time.monotonic())
    assert decider.refused == [] and placements is not None, (request, options)
