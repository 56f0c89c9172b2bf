"""Issue 29's poison inputs: a job or a flag the allocator refuses. Each is refused where it enters
(one line, exit status 2), and a job that gets past the entry anyway (stored by an older manager that
took curves up to 1e15) is marked failed with the allocator's reason while the manager goes on, also
after a restart. Real manager processes."""

from __future__ import annotations

import json

import pytest

from bft import alloc, jobs
from bft.runtime.statedb.store import JobRow, StateStore
from runtime_util import bft, one_line_error

pytestmark = pytest.mark.runtime


@pytest.mark.parametrize("flags, needle", [
    (("--tfwd", "0"), "--tfwd: expected seconds in (0, 1000], got 0"),
    (("--scale-up-s", "1e13"), "--scale-up-s: expected seconds in [0, 1000], got 1e+13"),
    (("--inplace-scale-down-s", "inf"), "--inplace-scale-down-s: expected a finite number >= 0"),
])
def test_manager_flags_the_allocator_refuses_are_one_line_before_anything_starts(tmp_path, flags, needle):
    one_line_error(bft("manager", "--state-dir", str(tmp_path / "state"), *flags), needle)
    assert not (tmp_path / "state").exists()  # refused before the state directory is made


def test_poison_curves_are_refused_at_submit(harness, tmp_path):
    harness.start("--local-nodes", "1")
    script = tmp_path / "ok.py"
    script.write_text("print('hi')\n")
    curve = tmp_path / "curve.json"
    curve.write_text(json.dumps({"nodes": [1, 2], "throughput": [1.0, 9e14]}))
    submit = ("submit", str(script), "--state-dir", str(harness.state_dir), "--curve", str(curve))
    one_line_error(bft(*submit), f"throughput[1] = 900000000000000.0 is not a rate in samples/s (0 to "
                                  f"{jobs.MAX_SAMPLES_PER_S:g})")
    curve.write_text(json.dumps({"nodes": [1, 2], "throughput": [1.0, 1e10]}))
    # The advisor's prior extends the best rate per node (5e9 at 2 nodes) to --max nodes.
    one_line_error(bft(*submit, "--max", "1000"),
                    "--curve: its best rate per node, 5e+09 samples/s, at --max 1000 nodes is 5e+12 samples/s, "
                    "above 1e+12")
    one_line_error(bft(*submit, "--configuration", "half:0.5:1000"),
                    "--configuration half: speedup 1000 x the --curve's 4e+10 samples/s (up to --max 8 nodes) "
                    "exceeds 1e+12")
    # The curve file is read in bounded memory and depth (bft._bounded).
    one_line_error(bft("submit", str(script), "--state-dir", str(harness.state_dir), "--curve", "/dev/zero"),
                    "--curve: /dev/zero is larger than 16 MiB")
    curve.write_text("[" * 100_000)
    one_line_error(bft(*submit), "nested too deeply to be read")
    assert harness.status()["jobs"] == []


def test_a_stored_poison_job_is_failed_with_the_reason_and_the_manager_goes_on_after_restarts(harness, tmp_path):
    harness.state_dir.mkdir(mode=0o700)
    store = StateStore(harness.state_dir / "state.db")
    script = tmp_path / "ok.py"
    script.write_text("print('hi')\n")
    store.add_job(JobRow(id="poison", seq=0, script=str(script), args=[], cwd=str(tmp_path), python="python3",
                         min_nodes=1, max_nodes=2, work=None, curve={"nodes": [1, 2], "throughput": [9e14, 9e14]},
                         secret="ab" * 32, state="queued", resize="relaunch"))
    store.close()
    for _ in range(2):  # the first start and a restart
        proc = harness.start("--local-nodes", "2")
        s = harness.wait(lambda s: harness.job("poison")["state"] == "failed", 60, "the poison job to fail",
                         proc=proc)
        reason = next(j for j in s["jobs"] if j["id"] == "poison")["reason"]
        assert reason.startswith("the allocator refuses the job as the manager sees it now: ") and "9e+14" in reason
        assert f"exceeds {alloc.MAX_HORIZON_S * jobs.MAX_SAMPLES_PER_S:g}" in reason, reason
        harness.stop(proc)  # it answered a stop: it was alive all along
    assert len(harness.events("job_refused", job="poison")) == 1  # failed once: not decided again after a restart
    assert "Traceback" not in harness.manager_log()
