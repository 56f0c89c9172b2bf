"""bft.train, the training-loop side, in real processes: reports over a real UDP socket, atomic
checkpoints, the SIGTERM contract, and the example scripts unchanged under plain python and torchrun."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from bft.train import EXIT_RESIZE, protocol
from runtime_util import REPO, free_port, python_env

SECRET = "5a" * 32


def run_py(code: str, env=None, timeout=120, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env={**python_env(), **(env or {})},
                          capture_output=True, text=True, timeout=timeout, **kw)


def manager_env(port: int, tmp_path: Path, **extra) -> dict:
    return {"BFT_JOB_ID": "j1", "BFT_JOB_SECRET": SECRET, "BFT_GENERATION": "3", "BFT_REPORT_ADDR": f"127.0.0.1:{port}",
            "BFT_CHECKPOINT_DIR": str(tmp_path / "ckpt"), "BFT_REPORT_INTERVAL_S": "0.1", **extra}


def test_report_outside_a_manager_is_a_noop_that_never_raises(tmp_path):
    r = run_py("""
        import bft.train as bt
        for x in (1, 2.5, "garbage", None, float("nan")):
            bt.report(x)
        print("survived")
    """, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "survived"
    assert r.stderr.count("not launched by bft manager") == 1


def _received(rx: socket.socket) -> list:
    """The reports that reached `rx` (signed with SECRET), read until it stays quiet for a second."""
    got = []
    rx.settimeout(1)
    while True:
        try:
            got.append(protocol.decode(rx.recv(1024), bytes.fromhex(SECRET)))
        except socket.timeout:
            return got


def test_reports_reach_the_manager_signed_and_the_last_one_at_exit(tmp_path):
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as rx:
        rx.bind(("127.0.0.1", 0))
        r = run_py("""
            import time, bft.train as bt
            for n in range(1, 6):
                bt.report(n * 100)
                time.sleep(0.15)
            bt.report(12345)
        """, env=manager_env(rx.getsockname()[1], tmp_path), cwd=tmp_path)
        assert r.returncode == 0, r.stderr
        got = _received(rx)
    assert got, "no report arrived"
    assert got[0].samples == 100  # the first step is sent at once
    assert got[-1].samples == 12345  # the final count is flushed at exit
    assert [g.seq for g in got] == sorted({g.seq for g in got})
    assert {(g.job, g.generation, g.rank, g.world) for g in got} == {("j1", 3, 0, 1)}
    with pytest.raises(ValueError, match="signature"):
        protocol.decode(protocol.encode(got[0], b"other secret"), bytes.fromhex(SECRET))


def test_checkpoint_is_atomic_and_resume_returns_it(tmp_path):
    env = {"BFT_CHECKPOINT_DIR": str(tmp_path / "ckpt")}
    r = run_py("""
        import bft.train as bt
        assert bt.resume() is None and bt.resume(default={"x": 0}) == {"x": 0}
        path = bt.checkpoint({"samples": 7, "w": list(range(5))})
        print(path)
        assert bt.resume() == {"samples": 7, "w": [0, 1, 2, 3, 4]}
    """, env=env)
    assert r.returncode == 0, r.stderr
    files = sorted(p.name for p in (tmp_path / "ckpt").iterdir())
    assert files == ["checkpoint.pt"]  # no temporary file left behind
    # Only rank 0 writes.
    r = run_py("import bft.train as bt; print(bt.checkpoint({'a': 1}))", env={**env, "RANK": "1", "WORLD_SIZE": "2",
                                                                           "BFT_CHECKPOINT_DIR": str(tmp_path / "r1")})
    assert r.stdout.strip() == "None" and not (tmp_path / "r1").exists()


LOOP = """
    import sys, time, bft.train as bt
    state = bt.resume() or {"step": 0}
    step = state["step"]
    while step < 10**9:
        step += 1
        bt.report(step)
        if step == 1:
            print("ready", flush=True)  # the first step is done: the loop runs
        time.sleep(0.01)
        if CHECK and bt.should_stop():
            bt.checkpoint({"step": step})
            print("saved", step, flush=True)
            bt.exit_for_resize()
"""


def _start_loop(tmp_path, check: bool, env: dict) -> subprocess.Popen:
    code = textwrap.dedent(LOOP).replace("CHECK", str(check))
    proc = subprocess.Popen([sys.executable, "-c", code], env={**python_env(), **env}, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, cwd=tmp_path)
    assert proc.stdout.readline().strip() == "ready"
    return proc


def test_sigterm_lets_the_loop_save_then_exits_for_resize(tmp_path):
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as rx:
        rx.bind(("127.0.0.1", 0))
        proc = _start_loop(tmp_path, True, manager_env(rx.getsockname()[1], tmp_path))
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=30)
    assert proc.returncode == EXIT_RESIZE, err
    saved = int(out.split()[-1])
    r = run_py("import bft.train as bt; print(bt.resume()['step'])", env={"BFT_CHECKPOINT_DIR": str(tmp_path / "ckpt")})
    assert int(r.stdout) == saved


def test_plain_run_stopped_by_sigterm_exits_zero(tmp_path):
    proc = _start_loop(tmp_path, True, {})
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    assert "saved" in out and (tmp_path / "bft-checkpoints").is_dir()


def test_a_loop_that_never_checks_is_ended_after_the_grace_time(tmp_path):
    proc = _start_loop(tmp_path, False, {"BFT_GRACE_S": "1", "BFT_JOB_ID": "j"})
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=30)  # (the loop never ends by itself)
    assert proc.returncode == EXIT_RESIZE
    assert "no checkpoint within the 1 s grace time" in err  # the helper ended it, after the grace time


ENDS_FINISHED = """
    import atexit, concurrent.futures, sys, threading, time
    import bft.train as bt
    log = open(sys.argv[1], "w")
    log.write("a line never flushed by the script\\n")
    pool = concurrent.futures.ThreadPoolExecutor(2)  # its workers wait for work until told to finish
    pool.submit(time.sleep, 0.1)
    threading.Thread(target=lambda: (time.sleep(0.5), print("the thread finished", flush=True))).start()
    atexit.register(lambda: print("atexit ran", flush=True))
    bt.report(12345)
    bt.exit_finished()
    print("after exit_finished")
"""


def test_exit_finished_ends_as_a_normal_exit_does_threads_atexit_files_and_the_last_report(tmp_path):
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as rx:
        rx.bind(("127.0.0.1", 0))
        status = tmp_path / "status"
        r = subprocess.run([sys.executable, "-c", textwrap.dedent(ENDS_FINISHED), str(tmp_path / "log")],
                           env={**python_env(), **manager_env(rx.getsockname()[1], tmp_path),
                                "BFT_AGENT_EXIT_FILE": str(status)}, capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr
        got = _received(rx)
    assert got, "no report arrived"
    assert r.stdout.splitlines() == ["the thread finished", "atexit ran"]  # in the interpreter's order
    assert (tmp_path / "log").read_text() == "a line never flushed by the script\n"
    assert status.read_text() == "0"
    assert got[-1].samples == 12345


def test_exit_finished_from_another_thread_is_refused_in_one_line(tmp_path):
    r = run_py("""
        import threading, bft.train as bt
        def end():
            try:
                bt.exit_finished()
            except RuntimeError as e:
                print(e)
        t = threading.Thread(target=end)
        t.start()
        t.join()
        print("still running")
    """, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == ["bft.train.exit_finished() ends the process: call it from the main thread",
                                     "still running"]


def test_exit_finished_ends_gloo_ranks_whose_ddp_model_still_holds_the_group(tmp_path):
    """DDP's reducer keeps the group, and gloo's threads, alive past destroy_process_group: the case in
    which a plain return sometimes aborted at exit. Each rank arrives, ends the group and exits 0."""
    pytest.importorskip("torch", reason="the gloo ranks need PyTorch (./dev.sh installs torch==2.13.0)")
    code = textwrap.dedent("""
        import atexit, torch, torch.distributed as dist
        import bft.train as bt
        dist.init_process_group("gloo")
        model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(4, 2))
        model(torch.randn(3, 4)).sum().backward()
        loss = torch.ones(1)
        dist.all_reduce(loss)
        atexit.register(lambda: print("group ended:", not dist.is_initialized(), flush=True))
        bt.exit_finished()
    """)
    port = free_port()
    procs = [subprocess.Popen([sys.executable, "-c", code], env={
        **python_env(), "RANK": str(rank), "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)},
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=tmp_path) for rank in range(2)]
    try:
        outs = [proc.communicate(timeout=120)[0] for proc in procs]
    finally:
        for proc in procs:
            proc.kill()
    assert [proc.returncode for proc in procs] == [0, 0], outs
    assert all("group ended: True" in out for out in outs), outs


@pytest.mark.parametrize("launcher", ["python", "torchrun"])
def test_example_runs_unchanged_outside_the_manager(tmp_path, launcher):
    pytest.importorskip("torch", reason="the runtime examples need PyTorch (./dev.sh installs torch==2.13.0)")
    script = REPO / "examples" / "runtime" / "ddp_synthetic.py"
    prefix = [sys.executable] if launcher == "python" else [
        sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2"]
    r = subprocess.run([*prefix, str(script), "--samples", "3000", "--batch", "64"], env=python_env(), cwd=tmp_path,
                       capture_output=True, text=True, timeout=180)
    assert r.returncode == 0, r.stdout + r.stderr
    world = 1 if launcher == "python" else 2
    assert f"on {world} workers" in r.stdout
    assert (tmp_path / "bft-checkpoints" / "ddp_synthetic" / "checkpoint.pt").exists()


def test_digits_example_learns_from_the_packaged_dataset(tmp_path):
    pytest.importorskip("torch", reason="the runtime examples need PyTorch")
    pytest.importorskip("sklearn", reason="the digits example needs scikit-learn (the runtime extra)")
    r = subprocess.run([sys.executable, str(REPO / "examples" / "runtime" / "ddp_digits.py"), "--samples", "12000"],
                       env=python_env(), cwd=tmp_path, capture_output=True, text=True, timeout=180)
    assert r.returncode == 0, r.stderr
    accuracy = float(r.stdout.split("test accuracy")[-1])
    assert accuracy > 0.8, r.stdout  # eight epochs of a small CNN; chance is 0.1


def test_an_in_place_worker_points_gloo_at_its_node_address(tmp_path):
    """An in-place worker has no torchrun agent to choose gloo's interface: bft.train.run sets
    GLOO_SOCKET_IFNAME to the interface holding the node's address (BFT_NODE_ADDR), so workers on
    hosts whose names do not resolve still reach each other (and a user's own setting stays)."""
    script = tmp_path / "show.py"
    script.write_text("import os\nprint(os.environ.get('GLOO_SOCKET_IFNAME', 'unset'))\n")

    def interface(**extra: str) -> str:
        env = {k: v for k, v in python_env().items() if k != "GLOO_SOCKET_IFNAME"}
        env.update({protocol.ENV_NODE_ADDR: "127.0.0.1", **extra})
        out = subprocess.run([sys.executable, "-m", "bft.train.run", str(script)], env=env, capture_output=True,
                             text=True, timeout=60)
        return out.stdout.strip()

    assert interface() == "lo"
    assert interface(GLOO_SOCKET_IFNAME="eth7") == "eth7"


def test_after_an_in_place_resize_the_first_step_is_reported_at_once_not_an_interval_later(tmp_path):
    # A 5 s report interval: without the prompt send the new generation's first report would come at
    # the next interval (or at exit, 3 s later), and the manager's resize gap would end there.
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as rx:
        rx.bind(("127.0.0.1", 0))
        proc = subprocess.Popen([sys.executable, "-c", textwrap.dedent("""
            import time
            from bft.train import _reporter
            r = _reporter.REPORTER
            r.record(100, False)
            time.sleep(0.3)
            r.reconfigure(4, 0, 2)
            time.sleep(0.3)
            r.record(200, False)
            print(time.time(), flush=True)
            time.sleep(3)
        """)], env={**python_env(), **manager_env(rx.getsockname()[1], tmp_path, BFT_REPORT_INTERVAL_S="5")},
            stdout=subprocess.PIPE, text=True)
        try:
            rx.settimeout(10)
            first = protocol.decode(rx.recv(1024), bytes.fromhex(SECRET))
            second = protocol.decode(rx.recv(1024), bytes.fromhex(SECRET))
            arrived = time.time()
            stepped = float(proc.stdout.readline())
        finally:
            proc.kill()
            proc.wait(10)
    assert (first.generation, first.samples) == (3, 100)
    assert (second.generation, second.world, second.samples) == (4, 2, 200)
    assert arrived - stepped < 1.0, f"the first step at the new size was reported {arrived - stepped:.2f} s after it"
