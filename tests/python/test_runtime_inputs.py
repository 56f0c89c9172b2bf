"""Bad input to the runtime: the CLI answers one line with exit status 2, the manager drops bad
messages and keeps working, a crashing script is marked failed with its log tail, and a corrupt or
foreign state file is refused rather than reset. Real manager and real processes throughout."""

from __future__ import annotations

import socket
import sqlite3

import pytest

from bft.runtime.statedb.store import StateStore
from bft.train import protocol
from runtime_util import bft, one_line_error

pytestmark = pytest.mark.runtime


def test_submit_errors_are_one_line(harness, tmp_path):
    harness.start("--local-nodes", "1")
    state = str(harness.state_dir)
    script = tmp_path / "ok.py"
    script.write_text("print('hi')\n")
    one_line_error(bft("submit", str(tmp_path / "missing.py"), "--state-dir", state), "no such training script")
    one_line_error(bft("submit", str(script), "--state-dir", state, "--min", "0"), "--min")
    one_line_error(bft("submit", str(script), "--state-dir", state, "--min", "4", "--max", "2"), "--max")
    # More nodes than the source can ever offer: refused at submit, not queued forever.
    one_line_error(bft("submit", str(script), "--state-dir", state, "--min", "2", "--max", "2"),
                    "--min 2: the local source offers at most 1 node")
    one_line_error(bft("submit", str(script), "--state-dir", state, "--name", "bad name!"), "--name")
    # A directory is "executable" (searchable): refused at submit, not launched three times.
    one_line_error(bft("submit", str(script), "--state-dir", state, "--python", str(tmp_path)),
                   f"--python: {str(tmp_path)!r} is not an executable file")
    one_line_error(bft("submit", str(script), "--state-dir", state, "--samples", "-5"), "--samples")
    one_line_error(bft("submit", str(script), "--state-dir", state, "--samples", "nan"), "--samples")
    curve = tmp_path / "curve.json"
    curve.write_text('{"nodes": [1, 2], "throughput": [10]}')
    one_line_error(bft("submit", str(script), "--state-dir", state, "--curve", str(curve)), "--curve")
    curve.write_text("not json")
    one_line_error(bft("submit", str(script), "--state-dir", state, "--curve", str(curve)), "not JSON")
    r = bft("submit", str(script), "--state-dir", state, "--name", "dup")
    assert r.returncode == 0, r.stderr
    one_line_error(bft("submit", str(script), "--state-dir", state, "--name", "dup"), "exists already")
    # The script's own arguments follow "--", also after options.
    r = bft("submit", str(script), "first", "--state-dir", state, "--name", "args", "--", "--lr", "0.1", "--")
    assert r.returncode == 0, r.stderr
    store = harness.store()
    assert [j.args for j in store.jobs() if j.id == "args"] == [["first", "--lr", "0.1", "--"]]
    store.close()
    one_line_error(bft("cancel", "nosuchjob", "--state-dir", state), "no job named")
    one_line_error(bft("logs", "nosuchjob", "--state-dir", state), "no log")
    one_line_error(bft("status", "--state-dir", str(tmp_path / "nowhere")), "no manager is running")
    one_line_error(bft("manager", "--state-dir", state, "--local-nodes", "1"), "already running")
    one_line_error(bft("manager", "--state-dir", str(tmp_path / "m2"), "--policy", "magic"), "--policy")
    one_line_error(bft("manager", "--state-dir", str(tmp_path / "m2"), "--resize", "sideways"), "--resize")
    one_line_error(bft("submit", str(script), "--state-dir", state, "--resize", "sideways"), "--resize")
    one_line_error(bft("manager", "--state-dir", str(tmp_path / "m2"), "--source", "pbs"), "unknown node source")
    one_line_error(bft("manager", "--state-dir", str(tmp_path / "m2"), "--local-trace", str(tmp_path / "no.csv")),
                    "--local-trace")


def test_crashing_script_fails_with_log_tail(harness, tmp_path):
    harness.start("--local-nodes", "2")
    script = tmp_path / "crash.py"
    script.write_text("import sys\nprint('about to fail: missing data file', flush=True)\nsys.exit(3)\n")
    harness.submit("crash", "--min", "1", "--max", "2", "--retries", "1", script=script)
    s = harness.wait(lambda s: s["jobs"][0]["state"] == "failed", 120, "the job to be marked failed")
    job = s["jobs"][0]
    assert job["retries"] == 2
    assert job["reason"].startswith("the script exited with code 3 (2 attempts)")
    assert "about to fail: missing data file" in job["reason"]
    failures = harness.events("job_failed", job="crash")
    assert len(failures) == 2 and all("about to fail" in f["tail"] for f in failures)
    r = bft("status", "--state-dir", str(harness.state_dir))
    assert "crash failed: the script exited with code 3" in r.stdout
    # The nodes are free again and the manager goes on.
    harness.wait(lambda s: not s["nodes"]["used"], 30, "the nodes to be released")


def test_spoofed_and_malformed_reports_are_dropped(harness, tmp_path):
    harness.start("--local-nodes", "1")
    script = tmp_path / "sleep.py"
    script.write_text("import time\ntime.sleep(600)\n")
    harness.submit("victim", "--min", "1", "--max", "1", script=script)
    status = harness.wait(lambda s: s["jobs"][0]["state"] == "running", 60, "the job to run")
    store = harness.store()
    addr = next(e for e in store.events(("manager_started",)))["reports"]
    row = store.job("victim")
    store.close()
    host, port = addr.rsplit(":", 1)
    forged = protocol.Report("victim", row.generation, 0, 10**6, 0, 1, False, 1e12, 1.7e9)
    datagrams = [
        protocol.encode(forged, b"\x00" * 32),  # signed with a guessed secret
        protocol.encode(forged, bytes.fromhex(row.secret))[:-4] + b"beef",  # a tampered signature
        b"BFT1 victim garbage",
        b"\xff\xfe" * 100,
        b"",
        b"BFT1 " + b"x" * 600,
        protocol.encode(protocol.Report("nosuchjob", 1, 0, 1, 0, 1, False, 5.0, 1.7e9), b"k" * 32),
    ]
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        for d in datagrams:
            s.sendto(d, (host, int(port)))
    status = harness.wait(lambda s: s["manager"]["bad_reports"] >= len(datagrams) - 1, 20, "bad reports counted")
    assert status["jobs"][0]["samples"] == 0  # nothing forged was believed
    # A correctly signed report is believed, a replay of it is not.
    good = protocol.encode(protocol.Report("victim", row.generation, 0, 1, 0, 1, False, 42.0, 1.7e9 + 1),
                          bytes.fromhex(row.secret))
    stale = protocol.encode(protocol.Report("victim", row.generation, 0, 1, 0, 1, False, 99.0, 1.7e9 + 2),
                           bytes.fromhex(row.secret))
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.sendto(good, (host, int(port)))
        s.sendto(stale, (host, int(port)))
    harness.wait(lambda s: s["jobs"][0]["samples"] == 42.0, 20, "the signed report")
    assert harness.job("victim")["samples"] == 42.0


def test_corrupt_and_foreign_state_files_are_refused(tmp_path):
    corrupt = tmp_path / "corrupt"
    corrupt.mkdir(mode=0o700)
    (corrupt / "state.db").write_bytes(b"this is not a database at all" * 100)
    r = bft("manager", "--state-dir", str(corrupt))
    one_line_error(r, "not a libbft state database")
    assert (corrupt / "state.db").read_bytes().startswith(b"this is not")  # untouched

    foreign = tmp_path / "foreign"
    foreign.mkdir(mode=0o700)
    db = sqlite3.connect(foreign / "state.db")
    db.execute("CREATE TABLE t (x)")
    db.commit()
    db.close()
    one_line_error(bft("manager", "--state-dir", str(foreign)), "another program")

    damaged = tmp_path / "damaged"
    damaged.mkdir(mode=0o700)
    store = StateStore(damaged / "state.db")
    for _ in range(200):  # enough rows for several pages
        store.log_event("filler", detail="x" * 200)
    store.db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    store.close()
    data = bytearray((damaged / "state.db").read_bytes())
    for page in range(1, len(data) // 4096):  # garbage over every b-tree page header but the first
        data[page * 4096:page * 4096 + 8] = b"\xa5" * 8
    (damaged / "state.db").write_bytes(bytes(data))
    one_line_error(bft("manager", "--state-dir", str(damaged)), "malformed")


@pytest.mark.parametrize("flag", ["--store-port", "--report-port"])
@pytest.mark.parametrize("port", ["70000", "-1", "-5"])
def test_a_listener_port_out_of_range_is_one_line_before_anything_starts(tmp_path, flag, port):
    r = bft("manager", "--state-dir", str(tmp_path / "s"), "--local-nodes", "1", f"{flag}={port}")
    one_line_error(r, f"{flag}: expected a port in [0, 65535]", port)
    assert not (tmp_path / "s").exists()


def test_a_store_port_in_use_is_one_line_naming_it(tmp_path):
    """The keeper cannot listen: the manager says so in one line (it was a KeeperError traceback)."""
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        r = bft("manager", "--state-dir", str(tmp_path / "s"), "--local-nodes", "1", "--store-port", str(port))
    one_line_error(r, "cannot start", f"store port {port}", "Address already in use")


def test_a_negative_local_gpu_count_is_one_line(tmp_path):
    r = bft("manager", "--state-dir", str(tmp_path / "state"), "--local-gpus", "-1")
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 2 and len(lines) == 1 and "Traceback" not in r.stderr, r.stderr
    assert "--local-gpus must be >= 0" in lines[0], lines[0]
