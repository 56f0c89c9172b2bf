"""The Slurm node source: idle nodes adopted through preemptible single-node pilot jobs.

The source keeps ``--slurm-pending`` pilot jobs pending in a preemptible partition or QOS. When
Slurm starts one, its node joins the pool; when Slurm takes the node back (preemption, time limit,
cancellation, failure), the node is reclaimed. The pilot (scheduler-neutral: :mod:`.pilots`, whose
report listener this source composes) reports both at once, signed with a per-manager secret; a
poll of ``squeue`` every few seconds is the safety net for lost messages. The Slurm commands and the
pilot's batch script are :mod:`.slurm_commands`. Commands run inside the pilot's allocation with
``srun --jobid=<pilot> --overlap``, so Slurm accounts them and kills them with the pilot. Every
pilot carries the manager's identity in its job name, so a restarted manager adopts its running
pilots and cancels the surplus. Site setup and measurements: docs/slurm.md.
"""

from __future__ import annotations

import argparse
import getpass
import logging
import os
import re
import socket
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

from .base import Emit, NodeEvent, NodeSource, SourceError, register_source
from .pilot_reports import PilotReports, PilotState
from .slurm_commands import JOB_VAR, NODE_VAR, PILOT_PREFIX, Queued, SlurmCommands

log = logging.getLogger(__name__)

# squeue states in which a pilot is waiting for a node (it counts as pending).
_WAITING = {"PENDING", "CONFIGURING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "RESV_DEL_HOLD"}
# Slurm keeps for a preempting main job none of the nodes that free up meanwhile, and preempts again
# only KillWait + MessageTimeout later: so while a preemption of ours is under way, and this long
# after, pending pilots are held and a pilot that starts gives its node back at once (docs/slurm.md,
# "The main queue's wait").
_STAND_BACK_S = 3.0


@dataclass
class _Pilot:
    job_id: str
    state: PilotState = PilotState.PENDING
    node: str = ""
    preempt_polled: bool = False  # a poll saw it preempted before its "term" report came


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
        bind: str = "",
        port: int = 0,
        poll_s: float = 2.0,
        pilot_output: str = "/dev/null",
        gpus_per_node: str = "",
    ):
        self._slurm = SlurmCommands(identity=identity, job_name=f"{PILOT_PREFIX}{identity}", user=getpass.getuser(),
                                    partition=partition, qos=qos, account=account, time_limit=time_limit,
                                    time_min=time_min, pilot_output=pilot_output, gpus_per_node=gpus_per_node)
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
        self._manager_address = manager_address or bind or socket.gethostname()
        self._bind_address = bind
        self.port, self.poll_s, self.pilot_output = port, poll_s, pilot_output
        self.gpus_per_node = gpus_per_node
        self.job_name, self.user = self._slurm.job_name, self._slurm.user
        self.grace_s = 0.0
        self._reports = PilotReports(scheduler=self.name, identity=identity, on_report=self._on_pilot_report)
        self._emit: Optional[Emit] = None
        self._lock = threading.RLock()
        self._pilots: Dict[str, _Pilot] = {}
        self._addresses: Dict[str, str] = {}
        self._stopping = threading.Event()
        self._releasing = False  # stop(release=True) in progress: every pilot may exit at once
        self._poller: Optional[threading.Thread] = None
        self._failures = 0  # pilots in a row that ended without ever reporting "start"
        self._next_submit_s = 0.0
        self._submitted: Optional[List[str]] = None  # during start(): what it submitted, to undo a failure
        self._ended: Dict[str, None] = {}  # pilots seen gone (insertion-ordered, bounded): replays of them are ignored
        self._queued: Dict[str, Queued] = {}  # squeue's last answer
        self._preempt_seen_s = float("-inf")  # monotonic time a preemption of ours was last seen under way

    # ---- construction -------------------------------------------------------------------------

    @classmethod
    def add_arguments(cls, parser: argparse.ArgumentParser) -> None:
        g, d = parser.add_argument_group("slurm node source (--source slurm)"), cls.defaults()
        arg = g.add_argument
        arg("--slurm-partition", default=d["partition"],
            help="partition of the pilot jobs (a preemptible, low PriorityTier one)")
        arg("--slurm-qos", default=d["qos"],
            help="QOS of the pilot jobs (a preemptible one, for PreemptType=preempt/qos)")
        arg("--slurm-account", default=d["account"], help="account charged for the pilot jobs")
        arg("--slurm-time", default=d["time_limit"],
            help="time limit of each pilot (sbatch --time); default %(default)s")
        arg("--slurm-time-min", default=d["time_min"],
            help="minimum time limit (sbatch --time-min), for backfill-only pilots")
        arg("--slurm-pending", type=int, default=d["pending"], help="pilots kept pending; default %(default)s")
        arg("--slurm-max-nodes", type=int, default=d["max_nodes"],
            help="most nodes held or pending at once (0: no cap); default %(default)s")
        arg("--slurm-manager-address", default=d["manager_address"],
            help="address the nodes reach the manager at (default: --bind if given, else this host's name)")
        arg("--slurm-port", type=int, default=d["port"],
            help="TCP port of the pilots' reports (0: any, kept across restarts); default %(default)s")
        arg("--slurm-poll-s", type=float, default=d["poll_s"], help="seconds between squeue polls; default %(default)s")
        arg("--slurm-pilot-output", default=d["pilot_output"],
            help="pilots' output file (sbatch --output; %%j = job id); default %(default)s")
        arg("--slurm-gpus-per-node", default=d["gpus_per_node"], metavar="[TYPE:]N",
            help="GPUs each pilot asks for (sbatch --gres=gpu:[TYPE:]N), so that training on its node sees them "
                 "where the partition constrains devices (docs/slurm.md); default none")

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
            bind=args.bind,
            port=args.slurm_port,
            poll_s=args.slurm_poll_s,
            pilot_output=args.slurm_pilot_output,
            gpus_per_node=args.slurm_gpus_per_node,
        )

    # ---- NodeSource ---------------------------------------------------------------------------

    def start(self, emit: Emit) -> None:
        self.grace_s = self._slurm.check()
        # The signing secret and the port survive a restart, so adopted pilots keep reporting.
        self._reports.open(self.state_dir / "slurm-source.json", self.listen_address(), self.port)
        self.port = self._reports.port
        self._emit = emit
        self._stopping.clear()
        self._submitted = []
        try:
            self._reconcile(*self._observe())  # adopt running pilots, cancel surplus, submit
        except SourceError:
            self._slurm.cancel(self._submitted)  # no half-started state
            self._reports.close()
            raise
        finally:
            self._submitted = None
        self._reports.serve()
        self._poller = threading.Thread(target=self._poll_loop, name="bft-slurm-poll", daemon=True)
        self._poller.start()

    def stop(self, release: bool = True) -> None:
        with self._lock:
            self._releasing = release  # pilots that report "term" now are told to exit at once
        self._stopping.set()
        if self._poller is not None:
            self._poller.join()
            self._poller = None
        if release:
            # By name, not by the ids we know: also catches a pilot submitted just before a crash.
            try:
                self._slurm.run(["scancel", f"--user={self.user}", f"--name={self.job_name}"])
            except SourceError as e:
                log.warning("%s", e)
            deadline, left = time.monotonic() + 60.0, None
            while time.monotonic() < deadline:
                try:
                    left = self._slurm.squeue()
                    if not left:
                        break
                except SourceError as e:
                    log.warning("%s", e)
                time.sleep(0.2)
            else:
                log.warning("slurm: pilot jobs %s still in the queue 60 s after scancel", sorted(left or {}))
        self._reports.close()  # answers "release" to the end: pilots that report "term" meanwhile exit at once
        with self._lock:
            if release:
                self._pilots.clear()
            self._releasing = False

    def launch(self, node: str, argv: Sequence[str], env: Mapping[str, str], log_path: Path, *,
               cwd: Optional[Path] = None, stdin: bool = False) -> subprocess.Popen:
        with self._lock:
            pilot = next((p for p in self._pilots.values() if p.node == node and p.state == PilotState.RUNNING), None)
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
            # srun forwards its standard input to the one task (a standby's assignment line, and EOF).
            return subprocess.Popen(cmd, stdin=subprocess.PIPE if stdin else subprocess.DEVNULL, stdout=out,
                                    stderr=subprocess.STDOUT, env=full_env, start_new_session=True)

    def address(self, node: str) -> str:
        if node not in self._addresses:
            out = self._slurm.run(["scontrol", "show", "node", "--oneliner", node])
            m = re.search(r"\bNodeAddr=(\S+)", out)
            if not m:
                raise SourceError(f"slurm: scontrol show node {node} gives no NodeAddr")
            self._addresses[node] = m.group(1)
        return self._addresses[node]

    def manager_address(self) -> str:
        return self._manager_address

    def listen_address(self) -> str:
        # --bind is the one address the manager listens on, the pilots' reports included.
        return self._bind_address or super().listen_address()

    def reclaim_done(self, node: str) -> None:
        # Release a preempted node before its grace time ends: the main job starts sooner.
        with self._lock:
            ids = [p.job_id for p in self._pilots.values() if p.node == node and p.state == PilotState.RECLAIMED]
            for i in ids:
                self._pilots[i].state = PilotState.CANCELLING
        self._slurm.cancel(ids)

    def nodes(self) -> List[str]:
        with self._lock:
            return sorted(p.node for p in self._pilots.values() if p.state == PilotState.RUNNING)

    def capacity(self) -> Optional[int]:
        return self.max_nodes or None  # without --slurm-max-nodes, whatever the partition holds

    def describe(self) -> Dict[str, object]:
        with self._lock:
            counts: Dict[str, int] = {}
            for p in self._pilots.values():
                counts[p.state] = counts.get(p.state, 0) + 1
        return {"source": self.name, "job_name": self.job_name, "partition": self.partition, "qos": self.qos,
                "account": self.account, "time_limit": self.time_limit, "pending_target": self.pending,
                "max_nodes": self.max_nodes, "gpus_per_node": self.gpus_per_node, "grace_s": self.grace_s,
                "report_port": self.port, "pilots": counts}

    # ---- events -------------------------------------------------------------------------------

    def _join(self, pilot: _Pilot, node: str) -> None:
        """Called with the lock held: the pilot runs on node; announce it (once)."""
        # A new pilot on a node we still believe held by an older one: that one is gone.
        for other in self._pilots.values():
            if other is not pilot and other.node == node and other.state == PilotState.RUNNING:
                other.state = PilotState.RECLAIMED
                self._emit(NodeEvent("reclaim", node, 0.0))
        pilot.state, pilot.node = PilotState.RUNNING, node
        self._failures = 0
        self._emit(NodeEvent("join", node))

    def _standing_back(self) -> bool:
        return time.monotonic() - self._preempt_seen_s < _STAND_BACK_S

    def _on_pilot_report(self, job: str, node: str, event: str) -> str:
        """A pilot's verified report ("start" or "term"); the answer it gets ("hold" or "release")."""
        preempted = False
        if event == "start":
            # Preempted before its step ran, the pilot heard no SIGTERM: only Slurm can tell.
            try:
                preempted = any(q.preempted for q in self._slurm.squeue([job]).values())
            except SourceError as e:
                log.warning("%s", e)  # the poll looks again
        to_hold: List[str] = []
        refused = False
        with self._lock:
            if job in self._ended:
                return "error ended"
            # Signed, so ours even if the sbatch answer has not been recorded yet.
            pilot = self._pilots.setdefault(job, _Pilot(job))
            if pilot.state == PilotState.CANCELLING or self._releasing:
                return "release"
            if event == "start" and pilot.state == PilotState.PENDING and not self._stopping.is_set():
                if not (preempted or self._standing_back()):
                    self._join(pilot, node)
                    return "hold"
                pilot.state = PilotState.CANCELLING  # a main job wants the node: it never joins
                refused = True
            elif event == "term" and pilot.state == PilotState.RUNNING:
                pilot.state = PilotState.RECLAIMED
                self._emit(NodeEvent("reclaim", pilot.node, self.grace_s))
                self._preempt_seen_s = time.monotonic()
                to_hold = self._unheld_waiting()
        if refused:
            log.info("slurm: pilot %s on %s started during a preemption: its node is given back", job, node)
            self._slurm.cancel([job])
            return "release"
        self._slurm.hold(to_hold, True)
        return "hold"

    def _unheld_waiting(self) -> List[str]:
        """Called with the lock held: our pilots squeue last showed waiting for a node, not held."""
        return sorted((j for j, q in self._queued.items() if q.state in _WAITING and not q.held
                       and self._pilots.get(j, _Pilot(j)).state == PilotState.PENDING), key=int)

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

    def _observe(self) -> Tuple[Dict[str, Queued], set]:
        """squeue's view of our pilots, and which of the running-but-unannounced ones have their
        pilot step up. Slurm signals a preemption to a job's steps only: a pilot whose step is not
        up yet would miss it, so the poll announces a node only once the step runs."""
        jobs = self._slurm.squeue()
        with self._lock:
            unannounced = [j for j, q in jobs.items()
                           if q.state == "RUNNING" and self._pilots.get(j, _Pilot(j)).state == PilotState.PENDING]
        stepped = set()
        if unannounced:
            out = self._slurm.run(["squeue", "--noheader", "--steps", f"--jobs={','.join(unannounced)}", "--format=%i"])
            for step in out.split():
                job, _, step_id = step.partition(".")
                if step_id.isdigit():
                    stepped.add(job)
        return jobs, stepped

    def _reconcile(self, jobs: Dict[str, Queued], stepped: set) -> None:
        """Brings our beliefs in line with squeue, then keeps the pending pilots topped up (held while
        the source stands back for a preemption)."""
        to_cancel: List[str] = []
        with self._lock:
            self._queued = jobs
            if any(q.preempted for q in jobs.values()):
                self._preempt_seen_s = time.monotonic()
            standing_back = self._standing_back()
            for job_id, pilot in list(self._pilots.items()):
                state = jobs[job_id].state if job_id in jobs else ""
                if state == "RUNNING" or state in _WAITING:
                    continue
                # Gone from the queue or ending (COMPLETING, ...): the node is no longer ours.
                if pilot.state == PilotState.RUNNING:
                    self._emit(NodeEvent("reclaim", pilot.node, 0.0))
                elif pilot.state == PilotState.PENDING:
                    # Ended without ever reporting: the pilot cannot run or cannot reach us.
                    self._failures += 1
                del self._pilots[job_id]
                self._ended[job_id] = None
                if len(self._ended) > 10000:
                    del self._ended[next(iter(self._ended))]
            for job_id, q in jobs.items():
                pilot = self._pilots.get(job_id)
                if pilot is None:
                    # Found by name: a pilot of an earlier run of this manager (restart adoption).
                    pilot = self._pilots[job_id] = _Pilot(job_id)
                if q.state != "RUNNING":
                    continue
                if pilot.state == PilotState.PENDING and (q.preempted or (standing_back and job_id not in stepped)):
                    pilot.state = PilotState.CANCELLING  # allocated during a preemption: the node is wanted
                    to_cancel.append(job_id)
                elif pilot.state == PilotState.PENDING and job_id in stepped:
                    self._join(pilot, q.node)
                elif pilot.state == PilotState.RUNNING and q.preempted and not pilot.preempt_polled:
                    pilot.preempt_polled = True  # its "term" report, with the grace time, may be on its way
                elif pilot.state == PilotState.RUNNING and q.preempted:
                    # A whole poll without its "term" report: lost; the node goes now, with no grace we could vouch for.
                    pilot.state = PilotState.RECLAIMED
                    self._emit(NodeEvent("reclaim", pilot.node, 0.0))
            # Allocated pilots whose step has not reported yet hold a node; they are not pending.
            running = {j for j, q in jobs.items() if q.state == "RUNNING"}
            waiting = sorted((j for j, p in self._pilots.items() if p.state == PilotState.PENDING and j not in running),
                             key=int)
            held = sum(1 for j, p in self._pilots.items()
                       if p.state == PilotState.RUNNING or (p.state == PilotState.PENDING and j in running))
            target = self.pending
            if self.max_nodes:
                target = max(0, min(target, self.max_nodes - held))
            if self._stopping.is_set():
                target = len(waiting)
            if len(waiting) > target:
                to_cancel += waiting[target:]  # the newest go first
                for j in to_cancel:
                    self._pilots[j].state = PilotState.CANCELLING
            deficit = target - len(waiting)
            on_hold = {j for j in waiting if j in jobs and jobs[j].held}
            to_hold = [j for j in waiting[:target] if j in jobs and j not in on_hold] if standing_back else []
            to_release = [] if standing_back else sorted(on_hold, key=int)
        self._slurm.cancel(to_cancel)
        self._slurm.hold(to_hold, True)
        self._slurm.hold(to_release, False)
        if standing_back:
            return  # submitted now, a pilot could take a node the preemptor waits for
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
            job_id = self._slurm.submit(self._reports.pilot_environment(
                manager_address=self._manager_address, job_var=JOB_VAR, node_var=NODE_VAR))
            if self._submitted is not None:
                self._submitted.append(job_id)
            with self._lock:
                self._pilots.setdefault(job_id, _Pilot(job_id))
