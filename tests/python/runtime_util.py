"""Helpers for the runtime's end-to-end tests: a real ``bft manager`` process and real torchrun jobs.

Everything a test starts is stopped by process id in ``ManagerHarness.close`` (a fixture finalizer,
so also when the test fails): the manager processes, then every process tagged with the manager's
identity (torchrun agents and their workers).
"""

from __future__ import annotations

import collections
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional

import pytest

from bft.runtime import tagged_processes, terminate_tagged
from bft.runtime.decide.curvebook import CurveBook
from bft.runtime.decide.intake import ReportIntake
from bft.runtime.jobs.runs import JobRun
from bft.runtime.ops import control, keeper
from bft.runtime.statedb.store import JobRow, StateStore
from bft.train import protocol

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "runtime" / "ddp_synthetic.py"


def free_port() -> int:
    """A TCP port free on 127.0.0.1 a moment ago, for a process that binds it itself (a rendezvous)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def python_env() -> Dict[str, str]:
    """The environment a child Python needs to import this build of bft."""
    env = dict(os.environ)
    paths = [p for p in sys.path if p and Path(p, "bft", "__init__.py").exists()]
    env["PYTHONPATH"] = os.pathsep.join(paths[:1] + [env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env["OMP_NUM_THREADS"] = "1"
    # Several virtual nodes share this host: on a GPU host they would all take cuda:0, which NCCL
    # refuses. The tests train on CPU unless one gives the nodes GPUs (--local-gpus).
    env["CUDA_VISIBLE_DEVICES"] = ""
    return env


def run_bench_script(name: str, *args: str) -> subprocess.CompletedProcess:
    """bench/NAME run with this build of bft, its output captured (5 minutes at most)."""
    return subprocess.run([sys.executable, str(REPO / "bench" / name), *args], env=python_env(), capture_output=True,
                          text=True, timeout=300)


def bft(*args: str, cwd: Optional[Path] = None, timeout: float = 60) -> subprocess.CompletedProcess:
    """Runs the ``bft`` command line in a child process."""
    return subprocess.run([sys.executable, "-m", "bft", *args], env=python_env(), cwd=cwd, capture_output=True,
                          text=True, timeout=timeout)


def one_line_error(r: subprocess.CompletedProcess, *needles: str) -> None:
    """A command line refused as the house promises: exit status 2, one line on stderr naming each of `needles`."""
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in r.stderr, r.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]


class ManagerHarness:
    def __init__(self, root: Path):
        self.root = root
        self.state_dir = root / "state"
        self.procs: List[subprocess.Popen] = []
        self.identity: Optional[str] = None

    # -- the manager process ----------------------------------------------------------------------

    def start(self, *args: str) -> subprocess.Popen:
        log = open(self.root / f"manager-{len(self.procs)}.log", "wb")
        proc = subprocess.Popen([sys.executable, "-m", "bft", "manager", "--state-dir", str(self.state_dir), *args],
                                env=python_env(), stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        self.procs.append(proc)
        self.wait(lambda s: True, 60, "the manager to answer", proc=proc)
        self.identity = self.status()["manager"]["identity"]
        return proc

    def manager_log(self) -> str:
        return "\n".join((self.root / f"manager-{k}.log").read_text(errors="replace") for k in range(len(self.procs)))

    def status(self) -> Dict[str, Any]:
        return control.request(self.state_dir, {"op": "status"}, timeout_s=30)["status"]

    def job(self, name: str) -> Dict[str, Any]:
        return next(j for j in self.status()["jobs"] if j["id"] == name)

    def wait(self, predicate: Callable[[Dict[str, Any]], bool], timeout_s: float, what: str,
             proc: Optional[subprocess.Popen] = None) -> Dict[str, Any]:
        deadline = time.monotonic() + timeout_s
        last: Any = None
        while time.monotonic() < deadline:
            if proc is not None and proc.poll() is not None:
                pytest.fail(f"the manager exited ({proc.returncode}) while waiting for {what}:\n{self.manager_log()}")
            try:
                last = self.status()
                if predicate(last):
                    return last
            except control.ControlError as e:
                last = str(e)
            time.sleep(0.5)
        pytest.fail(f"timed out after {timeout_s} s waiting for {what}; last status:\n{json.dumps(last, indent=1)}\n"
                    f"manager log:\n{self.manager_log()[-4000:]}")

    def submit(self, name: str, *args: str, script: Path = EXAMPLE) -> None:
        r = bft("submit", str(script), "--state-dir", str(self.state_dir), "--name", name, *args, cwd=self.root)
        assert r.returncode == 0, r.stderr

    def kill9(self, proc: subprocess.Popen) -> None:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(10)

    def stop(self, proc: subprocess.Popen) -> None:
        r = bft("manager", "stop", "--state-dir", str(self.state_dir), timeout=120)
        assert r.returncode == 0, r.stderr
        assert proc.wait(60) == 0

    # -- the state file ---------------------------------------------------------------------------

    def store(self) -> StateStore:
        return StateStore(self.state_dir / "state.db", create=False, read_only=True)

    def events(self, *kinds: str, job: Optional[str] = None) -> List[Dict[str, Any]]:
        store = self.store()
        try:
            return store.events(kinds or None, job)
        finally:
            store.close()

    def diagnosis(self, log_lines: int = 30) -> str:
        """The event log (seconds from the first event) and each job's last output lines: what a failed
        end-to-end test prints."""
        out = ["=== events ==="]
        try:
            events = self.events()
        except Exception as e:  # noqa: BLE001 - no state database yet: nothing else to tell
            return f"=== no events ({e}) ==="
        start = events[0]["time_s"] if events else 0.0
        for e in events:
            detail = {k: v for k, v in e.items() if k not in ("id", "time_s", "kind", "job", "node")}
            out.append(f"{e['time_s'] - start:8.2f} {e['kind']} {e.get('job') or ''} {e.get('node') or ''} "
                       f"{json.dumps(detail)[:200]}")
        for log in sorted((self.state_dir / "jobs").glob("*/output.log")):
            out.append(f"=== {log.parent.name}: last {log_lines} lines of output.log ===")
            out.extend(log.read_text(errors="replace").splitlines()[-log_lines:])
        return "\n".join(out)

    def job_log(self, name: str) -> str:
        return (self.state_dir / "jobs" / name / "output.log").read_text(errors="replace")

    def checkpointed_samples(self, job: str) -> int:
        """The samples of the job's last checkpoint (0 before the first): its progress, also while no
        manager runs to receive its reports."""
        import torch

        path = self.state_dir / "jobs" / job / "checkpoint" / "checkpoint.pt"
        try:
            return torch.load(path, weights_only=False)["samples"]
        except (OSError, RuntimeError, EOFError, KeyError):
            return 0

    def open_pid(self, job: str, node: str) -> int:
        """The pid of the job's live process row on `node` (0 if none yet)."""
        store = self.store()
        try:
            row = store.db.execute("SELECT pid FROM procs WHERE job = ? AND node = ? AND ended_s IS NULL "
                                   "ORDER BY id DESC LIMIT 1", (job, node)).fetchone()
        finally:
            store.close()
        return int(row[0]) if row and row[0] else 0

    def keeper_pid(self) -> Optional[int]:
        """The pid of this state directory's keeper if it runs (it outlives the manager on purpose)."""
        try:
            pid = int(json.loads((self.state_dir / keeper.INFO_NAME).read_text())["pid"])
        except (OSError, ValueError, KeyError):
            return None
        return pid if keeper.keeper_alive(pid, self.state_dir) else None

    def leftovers(self) -> List[int]:
        pids = tagged_processes(self.identity) if self.identity else []
        return pids + [p for p in [self.keeper_pid()] if p is not None]

    def close(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                os.kill(proc.pid, signal.SIGKILL)
                proc.wait(10)
        if self.identity:
            terminate_tagged(self.identity, 5.0)
        pid = self.keeper_pid()
        if pid is not None:
            os.kill(pid, signal.SIGKILL)


def listening_sockets(pids, with_port=False):
    """(protocol, local address, pid) of every listening TCP socket and bound UDP socket of `pids`
    (the address as "host:port" `with_port`)."""
    out = []
    for proto, flag in (("tcp", "-ltnpH"), ("udp", "-lunpH")):
        for line in subprocess.run(["ss", flag], capture_output=True, text=True, check=True).stdout.splitlines():
            fields = line.split()
            local = fields[3] if len(fields) > 3 else ""
            for pid in map(int, re.findall(r"pid=(\d+)", line)):
                if pid in pids:
                    out.append((proto, local if with_port else local.rsplit(":", 1)[0], pid))
    return out


def write_trace(path: Path, rows: List[tuple]) -> Path:
    path.write_text("time,node,state\n" + "".join(f"{t},{n},{s}\n" for t, n, s in rows))
    return path


# -- the manager's parts without processes (test_runtime_parts, test_runtime_rescale_costs) ---------

def make_run(store: StateStore, name: str = "job", max_nodes: int = 4, min_nodes: int = 1,
             resize: str = "relaunch") -> JobRun:
    """A queued job stored in `store`, as the manager tracks it (its resize method fixed, as at a submit)."""
    row = JobRow(id=name, seq=0, script="/bin/true", args=[], cwd="/", python="python3", min_nodes=min_nodes,
                 max_nodes=max_nodes, work=None, curve=None, secret="00", state="queued", resize=resize)
    return JobRun(store.add_job(row))


def reporting_job(store: StateStore, book: CurveBook, method: str, max_nodes: int = 4):
    """A job in generation 1 whose reports go through a ReportIntake with `book`: (intake, run, send),
    where send(generation, seq, world, samples, time_s) signs and hands over one report."""
    intake = ReportIntake(store, book)
    run = make_run(store, "job", max_nodes=max_nodes, resize=method)
    run.row.secret = "ab" * 32
    run.row.generation = 1

    def send(generation: int, seq: int, world: int, samples: float, time_s: float) -> None:
        report = protocol.Report("job", generation, 0, seq, 0, world, False, samples, time_s)
        intake.on_datagram(protocol.encode(report, bytes.fromhex(run.row.secret)), {"job": run}.get)

    return intake, run, send


def stream_positions(log_dir: Path) -> Dict[int, List[int]]:
    """Stream position -> the sample indices processed there, from the in-place workers' index logs
    (examples/runtime/elastic_synthetic.py --log-indices: rank r of a world of W at position p takes
    positions p + r, p + r + W, ...)."""
    seen: Dict[int, List[int]] = collections.defaultdict(list)
    for path in log_dir.glob("*.txt"):
        for line in path.read_text().splitlines():
            position, rank, world, *index = map(int, line.split())
            for k, i in enumerate(index):
                seen[position + rank + k * world].append(i)
    return seen
