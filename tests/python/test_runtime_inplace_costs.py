"""End to end: the rescale costs the allocator is charged under ``--resize inplace``, with a real
manager, real PyTorch (gloo on CPU) and examples/runtime/elastic_synthetic.py: after an in-place grow
the job is charged the measured in-place costs, never the relaunch ones, also by a manager restarted
after kill -9. Bounded in time; the harness stops every process it started, pass or fail."""

from __future__ import annotations

import pytest

from runtime_util import REPO, write_trace

pytestmark = pytest.mark.runtime

ELASTIC = REPO / "examples" / "runtime" / "elastic_synthetic.py"
RELAUNCH_UP, RELAUNCH_DOWN = 7.0, 6.0  # the relaunch defaults given: no relaunch happens to measure them
INPLACE_UP, INPLACE_DOWN = 3.0, 2.0  # the in-place defaults given, replaced by the measured costs
# Before a job's costs are measured, moving its state is added to the defaults (curvebook.state_costs):
# this example's state is well under 1 MB, under 0.01 s at either method's rate per byte.
STATE_S = 0.01


def _costs(status) -> dict:
    """The job's rescale costs as `bft status --json` shows them ({} before it runs)."""
    return (status["jobs"][0].get("rescale_costs") or {}) if status["jobs"] else {}


def test_after_an_in_place_grow_the_job_is_charged_the_measured_in_place_cost(harness):
    trace = write_trace(harness.root / "trace.csv", [(0, "n0", "idle"), (12, "n1", "idle")])
    args = ("--resize", "inplace", "--local-trace", str(trace), "--local-nodes", "2", "--grace", "10",
            "--scale-up-s", f"{RELAUNCH_UP:g}", "--scale-down-s", f"{RELAUNCH_DOWN:g}",
            "--inplace-scale-up-s", f"{INPLACE_UP:g}", "--inplace-scale-down-s", f"{INPLACE_DOWN:g}")
    first = harness.start(*args)
    harness.submit("el", "--min", "1", "--max", "2", "--samples", "10000000", "--", "--step-s", "0.05",
                   script=ELASTIC)
    # Running on one node: its next rescale is in place, nothing measured yet: the in-place defaults.
    status = harness.wait(lambda s: _costs(s) and s["jobs"][0]["nodes"] == ["n0"], 120, "training on n0")
    costs = _costs(status)
    assert costs["charged"] == "inplace"
    assert costs["inplace"]["scale_up_s"] == pytest.approx(INPLACE_UP, abs=STATE_S)
    assert costs["inplace"]["scale_down_s"] == INPLACE_DOWN  # a shrink in place moves no state
    # Grown in place to n0+n1; the advisor measures the grow once the job runs steadily on two nodes.
    status = harness.wait(lambda s: _costs(s).get("inplace", {}).get("measured_ups", 0) >= 1, 150,
                          "the in-place grow to be measured")
    costs = _costs(status)
    assert harness.events("resize_inplace", job="el") and len(harness.events("launch", job="el")) == 1
    assert costs["charged"] == "inplace"
    measured_up = costs["inplace"]["scale_up_s"]
    assert measured_up != pytest.approx(INPLACE_UP, abs=STATE_S) and measured_up >= 0
    assert costs["relaunch"]["measured_ups"] == 0  # no relaunch: its defaults stand, unmixed
    assert costs["relaunch"]["scale_up_s"] == pytest.approx(RELAUNCH_UP, abs=STATE_S)
    assert costs["relaunch"]["scale_down_s"] == pytest.approx(RELAUNCH_DOWN, abs=STATE_S)
    # n1 joined and was given to the job in one decision, before a standby could start there: its
    # newcomer started cold, timed from the decision to the first step at two nodes (growstarts).
    (gap,) = harness.events("resize_gap", job="el")
    assert gap["start"] == "cold" and 0 < gap["start_s"] < 60
    # ... and the decision knew it would: no free node had a standby, so the grow was charged cold.
    assert [e["grow_start"] for e in harness.events("allocate", job="el") if e["from_nodes"] == 1] == ["cold"]
    assert costs["cold_start"]["grows"] == {"warm": 0, "cold": 1}

    # kill -9 and a new manager: it adopts the job and charges the same measured in-place grow (the
    # advisor rebuilt from the progress records, methods included).
    harness.kill9(first)
    second = harness.start(*args)
    rebuilt = _costs(harness.wait(lambda s: len(s["jobs"][0]["nodes"]) == 2, 60, "the job adopted"))
    assert [e["adopted"] for e in harness.events("recovered")] == [["el"]]
    assert rebuilt["charged"] == "inplace"
    assert (rebuilt["inplace"]["measured_ups"], rebuilt["relaunch"]["measured_ups"]) == (1, 0)
    # (Reports that arrived since refine the rate estimate the cost is expressed at: close, not equal.)
    assert rebuilt["inplace"]["scale_up_s"] == pytest.approx(measured_up, rel=0.2)
    harness.stop(second)
    assert harness.leftovers() == []
