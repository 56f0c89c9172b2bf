"""The Slurm node source: idle nodes adopted through preemptible single-node pilot jobs.

The source keeps ``--slurm-pending`` pilot jobs pending in a preemptible partition or QOS. When
Slurm starts one, its node joins the pool; when Slurm takes the node back (preemption, time limit,
cancellation, failure), the node is reclaimed. The pilot reports both at once over a TCP socket
the source listens on (messages signed with a per-manager secret); a poll of ``squeue`` every few
seconds is the safety net for lost messages. Commands run inside the pilot's allocation with
``srun --jobid=<pilot> --overlap``, so Slurm accounts them and kills them with the pilot. Every
pilot carries the manager's identity in its job name, so a restarted manager adopts its running
pilots and cancels the surplus. Site setup and measurements: docs/slurm.md.
"""

from __future__ import annotations

import argparse
import getpass
import hashlib
import hmac
import json
import logging
import os
import re
import secrets
import shutil
import socket
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

from .nodes import Emit, NodeEvent, NodeSource, SourceError, register_source

log = logging.getLogger(__name__)

# The pilot program (pilot.py beside this file) travels inline in single quotes: compute nodes need
# only a python3. The batch shell only starts it as step 0 (Slurm does not signal the shell at
# preemption).
_PILOT_PY = (Path(__file__).parent / "pilot.py").read_text()
assert "'" not in _PILOT_PY, "pilot.py must hold no single quote"
PILOT_SCRIPT = f"""#!/bin/sh
# libbft pilot job: holds this node for a bft manager (see docs/slurm.md).
exec srun --overlap --nodes=1 --ntasks=1 --quiet --export=ALL python3 -c '{_PILOT_PY}'
"""

_IDENTITY_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._@:+-]{0,100}$")
_COMMAND_TIMEOUT_S = 30.0
_MESSAGE_MAX_BYTES = 4096
_MESSAGE_MAX_AGE_S = 300.0  # older (or replayed) signed reports are ignored; allows for clock skew
_MAX_CONNECTIONS = 32  # reports handled at once; a slow or idle client cannot hold up the others
# squeue states in which a pilot is waiting for a node (it counts as pending).
_WAITING = {"PENDING", "CONFIGURING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "RESV_DEL_HOLD"}


@dataclass
class _Pilot:
    job_id: str
    state: str  # "pending" | "running" (node joined) | "reclaimed" (node announced gone) | "cancelling"
    node: str = ""


def _first_line(text: str) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return lines[0] if lines else ""


@register_source
class SlurmNodeSource(NodeSource):
    """Idle nodes of a Slurm cluster, held by single-node pilot jobs in a preemptible partition/QOS."""

    name = "slurm"

    def __init__(
        self,
        identity: str,
        state_dir: Path,
        *,
        partition: str = "",
        qos: str = "",
        account: str = "",
        time_limit: str = "1:00:00",
        time_min: str = "",
        pending: int = 2,
        max_nodes: int = 0,
        manager_address: str = "",
        port: int = 0,
        poll_s: float = 2.0,
        pilot_output: str = "/dev/null",
    ):
        if not _IDENTITY_RE.match(identity):
            raise SourceError(
                f"slurm: manager identity {identity!r} is not usable in a Slurm job name "
                "(letters, digits and . _ @ : + - only, at most 101 characters)"
            )
        if pending < 0:
            raise SourceError(f"slurm: --slurm-pending must be >= 0, got {pending}")
        if max_nodes < 0:
            raise SourceError(f"slurm: --slurm-max-nodes must be >= 0 (0: no cap), got {max_nodes}")
        if not poll_s > 0:
            raise SourceError(f"slurm: --slurm-poll-s must be > 0, got {poll_s}")
        if not 0 <= port <= 65535:
            raise SourceError(f"slurm: --slurm-port must be in 0..65535, got {port}")
        self.identity = identity
        self.state_dir = Path(state_dir)
        self.partition, self.qos, self.account = partition, qos, account
        self.time_limit, self.time_min = time_limit, time_min
        self.pending, self.max_nodes = pending, max_nodes
        self._manager_address = manager_address or socket.gethostname()
        self.port, self.poll_s, self.pilot_output = port, poll_s, pilot_output
        self.job_name = f"bft-pilot.{identity}"
        self.user = getpass.getuser()
        self.grace_s = 0.0
        self._emit: Optional[Emit] = None
        self._lock = threading.RLock()
        self._pilots: Dict[str, _Pilot] = {}
        self._addresses: Dict[str, str] = {}
        self._stopping = threading.Event()
        self._releasing = False  # stop(release=True) in progress: every pilot may exit at once
        self._threads: List[threading.Thread] = []
        self._listener: Optional[socket.socket] = None
        self._secret = b""
        self._failures = 0  # pilots in a row that ended without ever reporting "start"
        self._next_submit_s = 0.0
        self._submitted: Optional[List[str]] = None  # during start(): what it submitted, to undo a failure
        self._ended: Dict[str, None] = {}  # pilots seen gone (insertion-ordered, bounded): replays of them are ignored
        self._connections = threading.BoundedSemaphore(_MAX_CONNECTIONS)

    # ---- construction -------------------------------------------------------------------------

    @classmethod
    def add_arguments(cls, parser: argparse.ArgumentParser) -> None:
        g = parser.add_argument_group("slurm node source (--source slurm)")
        arg = g.add_argument
        arg("--slurm-partition", default="", help="partition of the pilot jobs (a preemptible, low PriorityTier one)")
        arg("--slurm-qos", default="", help="QOS of the pilot jobs (a preemptible one, for PreemptType=preempt/qos)")
        arg("--slurm-account", default="", help="account charged for the pilot jobs")
        arg("--slurm-time", default="1:00:00", help="time limit of each pilot (sbatch --time); default %(default)s")
        arg("--slurm-time-min", default="", help="minimum time limit (sbatch --time-min), for backfill-only pilots")
        arg("--slurm-pending", type=int, default=2, help="pilots kept pending; default %(default)s")
        arg("--slurm-max-nodes", type=int, default=0, help="most nodes held or pending at once (0: no cap)")
        arg("--slurm-manager-address", default="", help="address the pilots report to (default: this host's name)")
        arg("--slurm-port", type=int, default=0, help="TCP port of the pilots' reports (0: any, kept across restarts)")
        arg("--slurm-poll-s", type=float, default=2.0, help="seconds between squeue polls; default %(default)s")
        arg("--slurm-pilot-output", default="/dev/null", help="pilots' output file (sbatch --output; %%j = job id)")

    @classmethod
    def from_args(cls, args: argparse.Namespace, identity: str, state_dir: Path) -> "SlurmNodeSource":
        return cls(
            identity,
            state_dir,
            partition=args.slurm_partition,
            qos=args.slurm_qos,
            account=args.slurm_account,
            time_limit=args.slurm_time,
            time_min=args.slurm_time_min,
            pending=args.slurm_pending,
            max_nodes=args.slurm_max_nodes,
            manager_address=args.slurm_manager_address,
            port=args.slurm_port,
            poll_s=args.slurm_poll_s,
            pilot_output=args.slurm_pilot_output,
        )

    # ---- Slurm commands -----------------------------------------------------------------------

    def _run(self, argv: Sequence[str], stdin: Optional[str] = None, env: Optional[Mapping[str, str]] = None) -> str:
        """Runs a Slurm command; its stdout, or SourceError with Slurm's own first line."""
        try:
            r = subprocess.run(
                list(argv), input=stdin, capture_output=True, text=True, timeout=_COMMAND_TIMEOUT_S,
                env=dict(env) if env is not None else None,
            )
        except FileNotFoundError:
            raise SourceError(f"slurm: {argv[0]} not found on PATH (is the Slurm client installed?)") from None
        except subprocess.TimeoutExpired:
            raise SourceError(f"slurm: '{' '.join(argv[:2])}' got no answer in {_COMMAND_TIMEOUT_S:.0f} s "
                              "(slurmctld down or unreachable?)") from None
        if r.returncode != 0:
            why = _first_line(r.stderr) or _first_line(r.stdout) or f"exit status {r.returncode}"
            raise SourceError(f"slurm: {argv[0]} failed: {why}")
        return r.stdout

    def _pilot_options(self) -> List[str]:
        opts = ["--nodes=1", "--exclusive", "--no-requeue", f"--job-name={self.job_name}",
                f"--comment=bft-manager={self.identity}", f"--time={self.time_limit}"]
        for flag, value in (("--time-min", self.time_min), ("--partition", self.partition),
                            ("--qos", self.qos), ("--account", self.account)):
            if value:
                opts.append(f"{flag}={value}")
        return opts

    def _check_slurm(self) -> None:
        """Everything a pilot submission needs, checked without submitting one."""
        missing = [c for c in ("sbatch", "squeue", "scancel", "scontrol", "srun") if shutil.which(c) is None]
        if missing:
            raise SourceError(f"slurm: {', '.join(missing)} not found on PATH (is the Slurm client installed?)")
        conf = os.environ.get("SLURM_CONF")
        if conf and not os.path.isfile(conf):
            # Slurm's own clients would retry for a minute before saying so.
            raise SourceError(f"slurm: SLURM_CONF={conf} does not exist")
        # --test-only validates partition, QOS, account, time limits and the user's rights on them
        # exactly as a submission would, and submits nothing.
        try:
            self._run(["sbatch", "--test-only", *self._pilot_options(), "--output=/dev/null", "--wrap=true"])
        except SourceError as e:
            what = ", ".join(f"{k} {v}" for k, v in (("partition", self.partition), ("qos", self.qos),
                                                      ("account", self.account), ("time", self.time_limit)) if v)
            raise SourceError(f"slurm: cannot submit pilot jobs as user {self.user} ({what}): "
                              f"{str(e).split(' failed: ', 1)[-1]}") from None
        part = self.partition or self._default_partition()
        out = self._run(["scontrol", "show", "partition", "--oneliner", part])
        m = re.search(r"\bGraceTime=(\d+)", out)
        self.grace_s = float(m.group(1)) if m else 0.0
        if self.qos:
            self.grace_s = max(self.grace_s, self._qos_grace_s())
        if self.grace_s == 0:
            # No preemption grace (e.g. backfill-only pilots): a time limit or a cancellation
            # still leaves KillWait between SIGTERM and SIGKILL.
            m = re.search(r"^KillWait\s*=\s*(\d+)", self._run(["scontrol", "show", "config"]), re.M)
            self.grace_s = float(m.group(1)) if m else 0.0

    def _qos_grace_s(self) -> float:
        """The QOS's GraceTime (preempt/qos); 0 where there is no accounting database to ask."""
        try:
            r = subprocess.run(["sacctmgr", "--noheader", "--parsable2", "show", "qos", self.qos, "format=GraceTime"],
                               capture_output=True, text=True, timeout=_COMMAND_TIMEOUT_S)
        except (OSError, subprocess.TimeoutExpired):
            return 0.0
        m = re.fullmatch(r"(?:(\d+)-)?(?:(\d+):)?(\d+):(\d+)", r.stdout.strip()) if r.returncode == 0 else None
        if not m:
            return 0.0
        d, h, mi, sec = (int(x) if x else 0 for x in m.groups())
        return float(((d * 24 + h) * 60 + mi) * 60 + sec)

    def _default_partition(self) -> str:
        out = self._run(["sinfo", "--noheader", "--format=%P"])
        for p in out.split():
            if p.endswith("*"):
                return p[:-1]
        raise SourceError("slurm: no --slurm-partition given and the cluster has no default partition")

    def _squeue(self) -> Dict[str, Tuple[str, str]]:
        """This manager's pilot jobs: {job id: (squeue state, node)}."""
        out = self._run(["squeue", "--noheader", f"--user={self.user}", f"--name={self.job_name}",
                         "--format=%i|%T|%N"])
        jobs = {}
        for line in out.splitlines():
            parts = line.strip().split("|")
            if len(parts) == 3:
                jobs[parts[0]] = (parts[1], parts[2])
        return jobs

    def _submit(self) -> str:
        env = dict(os.environ)
        env.update(BFT_PILOT_SECRET=self._secret.hex(), BFT_PILOT_ADDR=f"{self._manager_address}:{self.port}",
                   BFT_PILOT_IDENTITY=self.identity)
        # Only these variables reach the pilot (the secret travels in the environment, not on a
        # command line that `ps` shows); Slurm adds its own SLURM_* variables.
        out = self._run(["sbatch", "--parsable", *self._pilot_options(), f"--output={self.pilot_output}",
                         "--export=PATH,BFT_PILOT_SECRET,BFT_PILOT_ADDR,BFT_PILOT_IDENTITY"],
                        stdin=PILOT_SCRIPT, env=env)
        return out.strip().split(";")[0]

    def _cancel(self, job_ids: Sequence[str]) -> None:
        if job_ids:
            try:
                self._run(["scancel", *job_ids])
            except SourceError as e:  # a job that ended meanwhile is not an error worth more than a log line
                log.warning("%s", e)

    # ---- state kept across manager restarts ---------------------------------------------------

    def _load_or_create_state(self) -> None:
        """The signing secret and the port survive a restart, so adopted pilots keep reporting."""
        path = self.state_dir / "slurm-source.json"
        saved = {}
        if path.exists():
            try:
                saved = json.loads(path.read_text())
            except (OSError, ValueError) as e:
                raise SourceError(f"slurm: cannot read {path}: {e}") from None
        self._secret = bytes.fromhex(saved.get("secret", "")) or secrets.token_bytes(32)
        if self.port == 0:
            self.port = int(saved.get("port", 0))
        self._listener = self._bind()
        self.port = self._listener.getsockname()[1]
        self.state_dir.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            json.dump({"secret": self._secret.hex(), "port": self.port}, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)

    def _bind(self) -> socket.socket:
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((self.listen_address(), self.port))
        except OSError as e:
            if self.port == 0:
                s.close()
                raise SourceError(f"slurm: cannot listen for pilot reports: {e}") from None
            # The previous manager's port is taken: its adopted pilots now reach us only by poll.
            log.warning("slurm: port %d unavailable (%s); listening on a new one", self.port, e)
            s.bind((self.listen_address(), 0))
        s.listen(64)
        s.settimeout(0.5)
        return s

    # ---- NodeSource ---------------------------------------------------------------------------

    def start(self, emit: Emit) -> None:
        self._check_slurm()
        self._load_or_create_state()
        self._emit = emit
        self._stopping.clear()
        self._submitted = []
        try:
            self._reconcile(*self._observe())  # adopt running pilots, cancel surplus, submit
        except SourceError:
            self._cancel(self._submitted)  # no half-started state
            self._listener.close()
            self._listener = None
            raise
        finally:
            self._submitted = None
        for target, name in ((self._listen_loop, "bft-slurm-listen"), (self._poll_loop, "bft-slurm-poll")):
            t = threading.Thread(target=target, name=name, daemon=True)
            t.start()
            self._threads.append(t)

    def stop(self, release: bool = True) -> None:
        with self._lock:
            self._releasing = release  # pilots that report "term" now are told to exit at once
        self._stopping.set()
        for t in self._threads:
            if t.name == "bft-slurm-poll":
                t.join()
        if release:
            # By name, not by the ids we know: also catches a pilot submitted just before a crash.
            try:
                self._run(["scancel", f"--user={self.user}", f"--name={self.job_name}"])
            except SourceError as e:
                log.warning("%s", e)
            deadline, left = time.monotonic() + 60.0, None
            while time.monotonic() < deadline:
                try:
                    left = self._squeue()
                    if not left:
                        break
                except SourceError as e:
                    log.warning("%s", e)
                time.sleep(0.2)
            else:
                log.warning("slurm: pilot jobs %s still in the queue 60 s after scancel", sorted(left or {}))
        if self._listener is not None:
            self._listener.close()  # ends the listening thread within its accept timeout
            self._listener = None
        for t in self._threads:
            t.join()
        self._threads = []
        with self._lock:
            if release:
                self._pilots.clear()
            self._releasing = False

    def launch(self, node: str, argv: Sequence[str], env: Mapping[str, str], log_path: Path,
               cwd: Optional[Path] = None) -> subprocess.Popen:
        with self._lock:
            pilot = next((p for p in self._pilots.values() if p.node == node and p.state == "running"), None)
        if pilot is None:
            raise SourceError(f"slurm: node {node!r} is not held by a running pilot of this manager")
        # The manager's own SLURM_* job variables (when it runs inside a job) would redirect srun.
        full_env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_") or k == "SLURM_CONF"}
        full_env.update(env)
        cmd = ["srun", f"--jobid={pilot.job_id}", "--overlap", "--nodes=1", "--ntasks=1", f"--nodelist={node}",
               f"--job-name=bft.{self.identity}", "--quiet", "--export=ALL"]
        if cwd is not None:
            cmd.append(f"--chdir={cwd}")  # the directory on the node, not of the local srun
        cmd += ["--", *argv]
        with open(log_path, "ab") as out:
            return subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                    env=full_env, start_new_session=True)

    def address(self, node: str) -> str:
        if node not in self._addresses:
            out = self._run(["scontrol", "show", "node", "--oneliner", node])
            m = re.search(r"\bNodeAddr=(\S+)", out)
            if not m:
                raise SourceError(f"slurm: scontrol show node {node} gives no NodeAddr")
            self._addresses[node] = m.group(1)
        return self._addresses[node]

    def manager_address(self) -> str:
        return self._manager_address

    def reclaim_done(self, node: str) -> None:
        # Release a preempted node before its grace time ends: the main job starts sooner.
        with self._lock:
            ids = [p.job_id for p in self._pilots.values() if p.node == node and p.state == "reclaimed"]
            for i in ids:
                self._pilots[i].state = "cancelling"
        self._cancel(ids)

    def nodes(self) -> List[str]:
        with self._lock:
            return sorted(p.node for p in self._pilots.values() if p.state == "running")

    def capacity(self) -> Optional[int]:
        return self.max_nodes or None  # without --slurm-max-nodes, whatever the partition holds

    def describe(self) -> Dict[str, object]:
        with self._lock:
            counts: Dict[str, int] = {}
            for p in self._pilots.values():
                counts[p.state] = counts.get(p.state, 0) + 1
        return {"source": self.name, "job_name": self.job_name, "partition": self.partition, "qos": self.qos,
                "account": self.account, "time_limit": self.time_limit, "pending_target": self.pending,
                "max_nodes": self.max_nodes, "grace_s": self.grace_s, "report_port": self.port,
                "pilots": counts}

    # ---- events -------------------------------------------------------------------------------

    def _join(self, pilot: _Pilot, node: str) -> None:
        """Called with the lock held: the pilot runs on node; announce it (once)."""
        # A new pilot on a node we still believe held by an older one: that one is gone.
        for other in self._pilots.values():
            if other is not pilot and other.node == node and other.state == "running":
                other.state = "reclaimed"
                self._emit(NodeEvent("reclaim", node, 0.0))
        pilot.state, pilot.node = "running", node
        self._failures = 0
        self._emit(NodeEvent("join", node))

    def _handle_message(self, line: bytes) -> str:
        try:
            mac, body = line.decode().strip().split(" ", 1)
        except (UnicodeDecodeError, ValueError):
            return "error malformed"
        want = hmac.new(self._secret, body.encode(), hashlib.sha256).hexdigest()
        if not hmac.compare_digest(mac, want):
            log.warning("slurm: pilot report with a bad signature ignored")
            return "error signature"
        try:
            msg = json.loads(body)
            job, node, event, sent_s = str(msg["job"]), str(msg["node"]), msg["event"], float(msg["time"])
        except (ValueError, KeyError, TypeError):
            return "error malformed"
        if msg.get("identity") != self.identity or event not in ("start", "term"):
            return "error unknown"
        if abs(time.time() - sent_s) > _MESSAGE_MAX_AGE_S:
            log.warning("slurm: report of pilot %s sent %.0f s ago ignored", job, time.time() - sent_s)
            return "error stale"
        with self._lock:
            if job in self._ended:
                return "error ended"
            # Signed, so ours even if the sbatch answer has not been recorded yet.
            pilot = self._pilots.setdefault(job, _Pilot(job, "pending"))
            if pilot.state == "cancelling" or self._releasing:
                return "release"
            if event == "start" and pilot.state == "pending" and not self._stopping.is_set():
                self._join(pilot, node)
            elif event == "term" and pilot.state == "running":
                pilot.state = "reclaimed"
                self._emit(NodeEvent("reclaim", pilot.node, self.grace_s))
        return "hold"

    def _listen_loop(self) -> None:
        listener = self._listener
        while True:  # until stop() closes the socket: it answers "release" while stop cancels
            try:
                conn, _ = listener.accept()
            except socket.timeout:
                continue
            except OSError:
                return
            if not self._connections.acquire(blocking=False):
                conn.close()  # flooded: the pilot retries, and the poll is the safety net
                continue
            threading.Thread(target=self._serve, args=(conn,), name="bft-slurm-report", daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        try:
            with conn:
                conn.settimeout(2.0)
                data = b""
                while not data.endswith(b"\n") and len(data) < _MESSAGE_MAX_BYTES:
                    chunk = conn.recv(_MESSAGE_MAX_BYTES)
                    if not chunk:
                        break
                    data += chunk
                conn.sendall((self._handle_message(data) + "\n").encode())
        except OSError:
            pass
        finally:
            self._connections.release()

    def _poll_loop(self) -> None:
        while not self._stopping.wait(self.poll_s):
            try:
                observed = self._observe()
            except SourceError as e:
                # No answer is no evidence: keep what we believe until Slurm answers again.
                log.warning("%s", e)
                continue
            try:
                self._reconcile(*observed)
            except SourceError as e:
                log.warning("%s", e)

    def _observe(self) -> Tuple[Dict[str, Tuple[str, str]], set]:
        """squeue's view of our pilots, and which of the running-but-unannounced ones have their
        pilot step up. Slurm signals a preemption to a job's steps only: a pilot whose step is not
        up yet would miss it, so the poll announces a node only once the step runs."""
        jobs = self._squeue()
        with self._lock:
            unannounced = [j for j, (state, _) in jobs.items()
                           if state == "RUNNING" and self._pilots.get(j, _Pilot(j, "pending")).state == "pending"]
        stepped = set()
        if unannounced:
            out = self._run(["squeue", "--noheader", "--steps", f"--jobs={','.join(unannounced)}", "--format=%i"])
            for step in out.split():
                job, _, step_id = step.partition(".")
                if step_id.isdigit():
                    stepped.add(job)
        return jobs, stepped

    def _reconcile(self, jobs: Dict[str, Tuple[str, str]], stepped: set) -> None:
        """Brings our beliefs in line with squeue, then keeps the pending pilots topped up."""
        to_cancel: List[str] = []
        with self._lock:
            for job_id, pilot in list(self._pilots.items()):
                state = jobs.get(job_id, ("", ""))[0]
                if state == "RUNNING" or state in _WAITING:
                    continue
                # Gone from the queue or ending (COMPLETING, ...): the node is no longer ours.
                if pilot.state == "running":
                    self._emit(NodeEvent("reclaim", pilot.node, 0.0))
                elif pilot.state == "pending":
                    # Ended without ever reporting: the pilot cannot run or cannot reach us.
                    self._failures += 1
                del self._pilots[job_id]
                self._ended[job_id] = None
                if len(self._ended) > 10000:
                    del self._ended[next(iter(self._ended))]
            for job_id, (state, node) in jobs.items():
                pilot = self._pilots.get(job_id)
                if pilot is None:
                    # Found by name: a pilot of an earlier run of this manager (restart adoption).
                    pilot = self._pilots[job_id] = _Pilot(job_id, "pending")
                if state == "RUNNING" and pilot.state == "pending" and job_id in stepped:
                    self._join(pilot, node)
            # Allocated pilots whose step has not reported yet hold a node; they are not pending.
            waiting = sorted((j for j, p in self._pilots.items()
                              if p.state == "pending" and jobs.get(j, ("PENDING", ""))[0] != "RUNNING"), key=int)
            held = sum(1 for j, p in self._pilots.items()
                       if p.state == "running" or (p.state == "pending" and jobs.get(j, ("", ""))[0] == "RUNNING"))
            target = self.pending
            if self.max_nodes:
                target = max(0, min(target, self.max_nodes - held))
            if self._stopping.is_set():
                target = len(waiting)
            if len(waiting) > target:
                to_cancel = waiting[target:]  # the newest go first
                for j in to_cancel:
                    self._pilots[j].state = "cancelling"
            deficit = target - len(waiting)
        self._cancel(to_cancel)
        if deficit > 0 and self._failures >= 3:
            # Pilots die before reporting (no python3 on the nodes, manager unreachable, ...):
            # back off instead of flooding the queue.
            now = time.monotonic()
            if now < self._next_submit_s:
                return
            delay = min(300.0, 2.0 ** self._failures)
            self._next_submit_s = now + delay
            log.warning("slurm: %d pilots in a row ended without reporting; next submission in %.0f s "
                        "(see --slurm-pilot-output)", self._failures, delay)
            deficit = 1
        for _ in range(max(0, deficit)):
            job_id = self._submit()
            if self._submitted is not None:
                self._submitted.append(job_id)
            with self._lock:
                self._pilots.setdefault(job_id, _Pilot(job_id, "pending"))
