"""The ``local`` node source: virtual nodes on this host.

Without a trace, ``--local-nodes N`` nodes join at start and stay. With ``--local-trace FILE`` (the
replay's ``time,node,state`` CSV, read by the same C++ reader as ``bft replay``), the trace's nodes
go idle and busy as the trace says, played back in scaled time (``--local-time-scale 360``: one
trace hour in ten seconds). A node that turns busy is reclaimed: the manager is told at once, and
after ``--local-grace-s`` the source kills whatever of this manager still runs there, as a batch
scheduler taking its node back would.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

from .. import sim
from .launcher import signal_processes, tagged_processes
from .nodes import Emit, NodeEvent, NodeSource, SourceError, register_source


@register_source
class LocalNodeSource(NodeSource):
    name = "local"

    def __init__(self, identity: str, state_dir: Path, nodes: int = 4, trace: Optional[Path] = None,
                 time_scale: float = 1.0, grace_s: float = 5.0, start_s: Optional[float] = None):
        if nodes < 1:
            raise SourceError("--local-nodes must be >= 1")
        if not time_scale > 0:
            raise SourceError("--local-time-scale must be > 0")
        if not grace_s >= 0:
            raise SourceError("--local-grace-s must be >= 0")
        self.identity = identity
        self.grace_s = grace_s
        self.time_scale = time_scale
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
        # Playback survives a manager restart: the wall-clock origin is kept in the state directory.
        self._clock_file = state_dir / "local-source.json"
        self._t0 = self._load_t0()
        self._idle: Dict[str, bool] = {}
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None
        self._timers: List[threading.Timer] = []

    @classmethod
    def add_arguments(cls, parser: argparse.ArgumentParser) -> None:
        g = parser.add_argument_group("local source (--source local)")
        g.add_argument("--local-nodes", type=int, default=4, metavar="N",
                       help="virtual nodes on this host; with --local-trace, the trace's first N nodes (default 4)")
        g.add_argument("--local-trace", type=Path, metavar="FILE",
                       help="idle-node trace (CSV time,node,state, optionally .gz) played back in scaled time")
        g.add_argument("--local-time-scale", type=float, default=1.0, metavar="X",
                       help="trace seconds per wall-clock second (360: one trace hour in 10 s; default 1)")
        g.add_argument("--local-grace-s", type=float, default=5.0, metavar="S",
                       help="seconds between a node turning busy and its processes being killed (default 5)")
        g.add_argument("--local-start", type=float, metavar="S", help="trace time to start playing at")

    @classmethod
    def from_args(cls, args: argparse.Namespace, identity: str, state_dir: Path) -> "LocalNodeSource":
        return cls(identity, state_dir, nodes=args.local_nodes, trace=args.local_trace,
                   time_scale=args.local_time_scale, grace_s=args.local_grace_s, start_s=args.local_start)

    def _load_t0(self) -> float:
        try:
            return float(json.loads(self._clock_file.read_text())["t0"])
        except (OSError, ValueError, KeyError, TypeError):
            t0 = time.time()
            tmp = self._clock_file.with_suffix(".tmp")
            tmp.write_text(json.dumps({"t0": t0}))
            os.replace(tmp, self._clock_file)
            return t0

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
            if self._stop.wait(max(0.0, self.wall_time(trace_t) - time.time())):
                return
            self._apply(node, kind)

    def _apply(self, node: str, kind: str) -> None:
        idle = kind == "join"
        if self._idle.get(node) == idle:
            return
        self._idle[node] = idle
        if idle:
            self._emit(NodeEvent("join", node))
        else:
            self._emit(NodeEvent("reclaim", node, grace_s=self.grace_s))
            timer = threading.Timer(self.grace_s, self._take_back, args=(node,))
            timer.daemon = True
            self._timers.append(timer)
            timer.start()

    def _take_back(self, node: str) -> None:
        """The main scheduler takes the node: whatever of ours still runs there is killed."""
        if not self._idle.get(node):
            signal_processes(tagged_processes(self.identity, node=node), signal.SIGKILL)

    def stop(self, release: bool = True) -> None:
        self._stop.set()
        for timer in self._timers:
            timer.cancel()

    def launch(self, node: str, argv: Sequence[str], env: Mapping[str, str], log_path: Path,
               cwd: Optional[Path] = None) -> subprocess.Popen:
        if not self._idle.get(node):
            raise SourceError(f"node {node} is not idle")
        with open(log_path, "ab") as log:
            return subprocess.Popen(list(argv), env={**os.environ, **env}, stdout=log, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL, cwd=cwd, start_new_session=True)

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
