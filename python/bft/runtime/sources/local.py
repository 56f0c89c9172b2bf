"""The ``local`` node source: virtual nodes on this host.

Without a trace, ``--local-nodes N`` nodes join at start and stay. With ``--local-trace FILE`` (the
replay's ``time,node,state`` CSV, read by the same C++ reader as ``bft replay``), the trace's nodes
go idle and busy as the trace says, played back in scaled time (``--local-time-scale 360``: one
trace hour in ten seconds). A node that turns busy is reclaimed: the manager is told at once, and
after ``--local-grace-s`` the source kills whatever of this manager still runs there, as a batch
scheduler taking its node back would.

``--local-emulate`` is a load-testing tool, never a default (docs/runtime.md, "Load testing: the
emulated launcher"): instead of one torchrun agent per node, the first node of a job's generation
runs the job's script once, without torchrun, with WORLD_SIZE set to the generation's node count;
the generation's other nodes share that process. With the emulated job of
:mod:`bft.runtime.sources.emulated` as the script, a few processes stand for hundreds of nodes, so the real
manager can be driven by Summit's whole trace on a small machine.
"""

from __future__ import annotations

import argparse
import heapq
import itertools
import json
import os
import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

from ... import sim
from ..._atomic import write_atomically
from ..._bounded import read_json
from ...train import protocol
from ..jobs.processes import signal_processes, tagged_processes
from .base import Emit, NodeEvent, NodeSource, SourceError, register_source
from .emulated import LAUNCHED_ENV


@register_source
class LocalNodeSource(NodeSource):
    name = "local"

    def __init__(self, identity: str, state_dir: Path, *, nodes: int = 4, trace: Optional[Path] = None,
                 time_scale: float = 1.0, grace_s: float = 5.0, start_s: Optional[float] = None,
                 emulate: bool = False, gpus: int = 0):
        if nodes < 1:
            raise SourceError("--local-nodes must be >= 1")
        if gpus < 0:
            raise SourceError("--local-gpus must be >= 0")
        if not time_scale > 0:
            raise SourceError("--local-time-scale must be > 0")
        if not grace_s >= 0:
            raise SourceError("--local-grace-s must be >= 0")
        self.identity = identity
        self.grace_s = grace_s
        self.time_scale = time_scale
        self.emulate = emulate
        self.gpus = gpus
        self._events: List[Tuple[float, str, str]] = []  # (trace time, node, "join"/"reclaim")
        if trace is None:
            self.node_names = [f"local-{k}" for k in range(nodes)]
            self._trace_start = 0.0
        else:
            try:
                t = sim.read_trace(trace)
            except (OSError, ValueError) as e:
                raise SourceError(f"--local-trace: {e}") from None
            if not len(t):
                raise SourceError(f"--local-trace {trace}: the trace has no transitions")
            self.node_names = list(t.node_names)[:nodes] if nodes else list(t.node_names)
            keep = set(self.node_names)
            names = list(t.node_names)
            for time_s, node, state in zip(t.times.tolist(), t.nodes.tolist(), t.states.tolist()):
                name = names[node]
                if name in keep:
                    self._events.append((float(time_s), name, "join" if state == 1 else "reclaim"))
            self._trace_start = float(t.first_time_s if start_s is None else start_s)
            # Playback waits with threading's timeouts, which end at TIMEOUT_MAX (292 years on Linux).
            span_s = (self._events[-1][0] - self._trace_start) / time_scale if self._events else 0.0
            if not span_s <= threading.TIMEOUT_MAX:
                raise SourceError(f"--local-time-scale {time_scale:g}: the trace would play for {span_s:.3g} s, "
                                  f"longer than {threading.TIMEOUT_MAX:.3g} s")
        # Playback survives a manager restart: the wall-clock origin is kept in the state directory.
        self._clock_file = state_dir / "local-source.json"
        self._t0 = self._load_t0()
        self._idle: Dict[str, bool] = {}
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None
        # Reclaimed nodes to clear once their grace time is over: (wall deadline, node), a heap the
        # playback thread serves (a burst of thousands of reclaims is thousands of entries, not threads).
        self._take_backs: List[Tuple[float, str]] = []
        self._launched: Dict[str, subprocess.Popen] = {}  # node -> the last process started there
        self._generations: Dict[Tuple[str, str], subprocess.Popen] = {}  # emulated (job, generation) -> process

    @property
    def runs_scripts(self) -> bool:  # type: ignore[override]
        return not self.emulate

    @classmethod
    def add_arguments(cls, parser: argparse.ArgumentParser) -> None:
        g, d = parser.add_argument_group("local source (--source local)"), cls.defaults()
        g.add_argument("--local-nodes", type=int, default=d["nodes"], metavar="N",
                       help="virtual nodes on this host; with --local-trace, the trace's first N nodes "
                            "(default %(default)s)")
        g.add_argument("--local-trace", type=Path, metavar="FILE",
                       help="idle-node trace (CSV time,node,state, optionally .gz) played back in scaled time")
        g.add_argument("--local-time-scale", type=float, default=d["time_scale"], metavar="X",
                       help="trace seconds per wall-clock second (360: one trace hour in 10 s; default %(default)g)")
        g.add_argument("--local-grace-s", type=float, default=d["grace_s"], metavar="S",
                       help="seconds between a node turning busy and its processes being killed (default %(default)g)")
        g.add_argument("--local-start", type=float, metavar="S", help="trace time to start playing at")
        g.add_argument("--local-gpus", type=int, default=d["gpus"], metavar="N",
                       help="give virtual node k only GPU k mod N (CUDA_VISIBLE_DEVICES; with P processes per node, "
                            "GPUs kP..kP+P-1 mod N); with more processes than GPUs "
                            "the workers use gloo on the GPU, as NCCL needs a device per rank (default %(default)s: "
                            "the processes see what this host's environment says)")
        g.add_argument("--local-emulate", action="store_true",
                       help="load testing only: one process per job generation, no torchrun (docs/runtime.md)")

    @classmethod
    def from_args(cls, args: argparse.Namespace, identity: str, state_dir: Path) -> "LocalNodeSource":
        return cls(identity, state_dir, nodes=args.local_nodes, trace=args.local_trace,
                   time_scale=args.local_time_scale, grace_s=args.local_grace_s, start_s=args.local_start,
                   emulate=args.local_emulate, gpus=args.local_gpus)

    def _load_t0(self) -> float:
        """The wall-clock time the trace started playing at: a previous manager's (the clock file), or now.
        A clock file that names no past time (NaN, 1e300, the future) would make the trace play in no
        time or never: refused in one line, not replaced, so that a restart does not replay the trace."""
        if not self._clock_file.exists():
            t0 = time.time()
            write_atomically(self._clock_file, json.dumps({"t0": t0}).encode())
            return t0
        try:
            clock = read_json(self._clock_file, "--local-trace clock")
        except ValueError as e:
            raise SourceError(str(e)) from None
        t0 = clock.get("t0") if isinstance(clock, dict) else None
        if isinstance(t0, bool) or not isinstance(t0, (int, float)) or not 0 < t0 <= time.time():
            raise SourceError(f"--local-trace clock: {self._clock_file}: t0 = {t0!r} is not a past wall-clock time "
                              "(delete the file to play the trace from its start)")
        return float(t0)

    def wall_time(self, trace_time_s: float) -> float:
        return self._t0 + (trace_time_s - self._trace_start) / self.time_scale

    def start(self, emit: Emit) -> None:
        self._emit = emit
        if not self._events:
            for node in self.node_names:
                self._idle[node] = True
                emit(NodeEvent("join", node))
            return
        self._idle = {node: False for node in self.node_names}
        self._thread = threading.Thread(target=self._play, name="bft-local-trace", daemon=True)
        self._thread.start()

    def _play(self) -> None:
        start = 0
        initially_idle: Dict[str, bool] = {}
        while start < len(self._events) and self._events[start][0] < self._trace_start:
            _, node, kind = self._events[start]
            initially_idle[node] = kind == "join"
            start += 1
        for node, idle in initially_idle.items():
            if idle:
                self._apply(node, "join")
        for trace_t, node, kind in self._events[start:]:
            due = self.wall_time(trace_t)
            while self._take_backs and self._take_backs[0][0] <= due:
                if self._stop.wait(max(0.0, self._take_backs[0][0] - time.time())):
                    return
                self._take_back(heapq.heappop(self._take_backs)[1])
            if self._stop.wait(max(0.0, due - time.time())):
                return
            self._apply(node, kind)
        while self._take_backs:
            if self._stop.wait(max(0.0, self._take_backs[0][0] - time.time())):
                return
            self._take_back(heapq.heappop(self._take_backs)[1])

    def _apply(self, node: str, kind: str) -> None:
        idle = kind == "join"
        if self._idle.get(node) == idle:
            return
        self._idle[node] = idle
        if idle:
            self._emit(NodeEvent("join", node))
        else:
            self._emit(NodeEvent("reclaim", node, grace_s=self.grace_s))
            heapq.heappush(self._take_backs, (time.time() + self.grace_s, node))

    def _take_back(self, node: str) -> None:
        """The main scheduler takes the node: whatever of ours still runs there is killed."""
        proc = self._launched.get(node)
        if self._idle.get(node) or proc is None:
            return  # idle again, or nothing of ours ever ran there
        if self.emulate:
            if proc.poll() is None:  # the process of the node's generation stands for this node too
                signal_processes([-proc.pid], signal.SIGKILL)
        else:
            signal_processes(tagged_processes(self.identity, node=node), signal.SIGKILL)

    def stop(self, release: bool = True) -> None:
        self._stop.set()

    def launch(self, node: str, argv: Sequence[str], env: Mapping[str, str], log_path: Path, *,
               cwd: Optional[Path] = None, stdin: bool = False) -> subprocess.Popen:
        if not self._idle.get(node):
            raise SourceError(f"node {node} is not idle")
        if self.emulate:
            key = (env.get(protocol.ENV_JOB_ID, ""), env.get(protocol.ENV_GENERATION, ""))
            proc = self._generations.get(key)
            if proc is None:  # the generation's first node: its one process (the others only point at it)
                argv, world = _without_torchrun(argv)
                env = {**os.environ, **env, "WORLD_SIZE": str(world), "RANK": "0", "LOCAL_RANK": "0",
                       LAUNCHED_ENV: repr(time.time())}
                self._generations = {k: p for k, p in self._generations.items() if p.poll() is None}
                proc = self._generations[key] = self._popen(argv, env, log_path, cwd, False)
        else:
            # Node k's processes see devices k*N .. k*N+N-1 (mod --local-gpus), each binding its LOCAL_RANK.
            per_node = int(env.get(protocol.ENV_PROCS_PER_NODE, "1"))
            first = self.node_names.index(node) * per_node
            gpu = ({"CUDA_VISIBLE_DEVICES": ",".join(str((first + k) % self.gpus) for k in range(per_node))}
                   if self.gpus else {})
            if self.gpus and len(self.node_names) * per_node > self.gpus:
                gpu[protocol.ENV_DIST_BACKEND] = "gloo"  # virtual nodes share a GPU: NCCL refuses two ranks on one
            proc = self._popen(argv, {**os.environ, **env, **gpu}, log_path, cwd, stdin)
        self._launched[node] = proc
        return proc

    @staticmethod
    def _popen(argv: Sequence[str], env: Mapping[str, str], log_path: Path, cwd: Optional[Path],
               stdin: bool) -> subprocess.Popen:
        with open(log_path, "ab") as log:
            return subprocess.Popen(list(argv), env=dict(env), stdout=log, stderr=subprocess.STDOUT,
                                    stdin=subprocess.PIPE if stdin else subprocess.DEVNULL, cwd=cwd,
                                    start_new_session=True)

    def address(self, node: str) -> str:
        return "127.0.0.1"

    def nodes(self) -> List[str]:
        return [n for n, idle in self._idle.items() if idle]

    def capacity(self) -> Optional[int]:
        return len(self.node_names)

    def describe(self) -> Dict[str, object]:
        d: Dict[str, object] = {"source": self.name, "nodes": len(self.node_names)}
        if self._events:
            trace_time_s = self._trace_start + (time.time() - self._t0) * self.time_scale
            d.update(time_scale=self.time_scale, trace_time_s=trace_time_s)
        return d


def _without_torchrun(argv: Sequence[str]) -> Tuple[List[str], int]:
    """The script's own command line inside a torchrun command line (launcher.torchrun_argv), and the
    generation's node count. A node range (the membership resize method) cannot be emulated: one
    process stands for a fixed set of nodes."""
    if list(argv[1:3]) != ["-m", "bft.runtime.agent"]:  # an in-place worker: one per node, always
        raise SourceError("--local-emulate needs --resize relaunch (one emulated process per fixed set of nodes)")
    python, rest = argv[0], list(argv[3:])  # python -m bft.runtime.agent
    options = list(itertools.takewhile(lambda a: a.startswith("--"), rest))
    script = rest[len(options):]  # the script and its arguments
    nnodes = next((a.split("=", 1)[1] for a in options if a.startswith("--nnodes=")), "1:1")
    low, _, high = nnodes.partition(":")
    if low != (high or low):
        raise SourceError("--local-emulate needs --resize relaunch (one emulated process per fixed set of nodes)")
    return [python, *script], int(low)
