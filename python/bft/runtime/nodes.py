"""Where nodes come from: the node-source interface and the registry of sources.

A node source announces nodes that join the pool of idle nodes and nodes that the main scheduler
reclaims, and runs a command on one of its nodes. One small class per source, like the MILP
backends: adding a scheduler is one module and one ``register_source`` line.

Threading: a source calls ``emit`` from any thread (its own watcher threads included); the manager
queues the events and handles them on its event loop. ``launch`` and ``reclaim_done`` are called
from the manager's loop only.
"""

from __future__ import annotations

import abc
import argparse
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, ClassVar, Dict, List, Mapping, Optional, Sequence, Type


class SourceError(Exception):
    """A node source cannot start or act (bad configuration, scheduler unreachable): one clear line."""


@dataclass(frozen=True)
class NodeEvent:
    """A node joins the pool (``kind == "join"``) or is reclaimed by the main scheduler (``"reclaim"``).

    For a reclaim, ``grace_s`` is how long the manager has before the node is taken (0: already
    gone). ``time_s`` is wall-clock time (``time.time()``) of the event.
    """

    kind: str
    node: str
    grace_s: float = 0.0
    time_s: float = field(default_factory=time.time)

    def __post_init__(self):
        if self.kind not in ("join", "reclaim"):
            raise ValueError(f"NodeEvent.kind: expected 'join' or 'reclaim', got {self.kind!r}")


Emit = Callable[[NodeEvent], None]


class NodeSource(abc.ABC):
    """One source of idle nodes. Subclasses set ``name`` and implement the abstract methods."""

    name: ClassVar[str] = ""
    # False where the source only emulates the jobs' processes (load testing): no standbys there.
    runs_scripts: bool = True

    @classmethod  # noqa: B027 - optional: a source may have no options
    def add_arguments(cls, parser: argparse.ArgumentParser) -> None:
        """Adds this source's options (``--<name>-...``) to ``bft manager``'s parser."""

    @classmethod
    @abc.abstractmethod
    def from_args(cls, args: argparse.Namespace, identity: str, state_dir: Path) -> "NodeSource":
        """Builds the source from ``bft manager``'s parsed options. ``identity`` names this manager
        (tag every external object with it, so a restarted manager finds its own); ``state_dir``
        is the manager's private directory. Raises SourceError on bad configuration."""

    @abc.abstractmethod
    def start(self, emit: Emit) -> None:
        """Starts announcing nodes through ``emit``. Raises SourceError if the source cannot work."""

    @abc.abstractmethod
    def stop(self, release: bool = True) -> None:
        """Stops announcing. With ``release``, gives every node back (a batch source cancels its
        pilot jobs); without it (the manager is restarting), leaves them for the next manager."""

    @abc.abstractmethod
    def launch(self, node: str, argv: Sequence[str], env: Mapping[str, str], log_path: Path,
               cwd: Optional[Path] = None, stdin: bool = False) -> subprocess.Popen:
        """Runs ``argv`` on ``node`` in directory ``cwd`` with ``env`` added to the environment,
        output appended to ``log_path``. The returned process runs in a session of its own;
        signalling its process group reaches the command on the node. With ``stdin``, what is
        written to the process's ``stdin`` pipe reaches the command's standard input (a standby's
        assignment), else it reads nothing. Raises SourceError if the node is not usable."""

    @abc.abstractmethod
    def address(self, node: str) -> str:
        """The address other nodes use to reach processes running on ``node``."""

    def manager_address(self) -> str:
        """The address the nodes use to reach the manager (rendezvous store, progress reports)."""
        return "127.0.0.1"

    def listen_address(self) -> str:
        """The local address the manager's sockets bind to unless --bind says otherwise: the one the
        nodes reach the manager at (an IP, never a wildcard)."""
        host = self.manager_address()
        try:
            return socket.getaddrinfo(host, None, socket.AF_INET, socket.SOCK_STREAM)[0][4][0]
        except OSError as e:
            raise SourceError(f"{self.name}: cannot resolve the manager's address {host!r}: {e}") from None

    def reclaim_done(self, node: str) -> None:  # noqa: B027 - optional: most sources need not hear it
        """The manager has vacated a reclaimed node (nothing of it runs there any more)."""

    def nodes(self) -> List[str]:
        """Nodes the source currently holds (for a restarted manager: what it found again)."""
        return []

    def capacity(self) -> Optional[int]:
        """The most nodes the source can ever offer at once, if it knows (a job needing more is refused)."""
        return None

    def describe(self) -> Dict[str, object]:
        """A few facts for ``bft status`` (source name, configuration, counts)."""
        return {"source": self.name}


_SOURCES: Dict[str, Type[NodeSource]] = {}


def register_source(cls: Type[NodeSource]) -> Type[NodeSource]:
    """Registers a node source class under ``cls.name`` (usable as a decorator)."""
    if not cls.name or cls.name in _SOURCES:
        raise ValueError(f"node source name {cls.name!r} is empty or taken")
    _SOURCES[cls.name] = cls
    return cls


def source_names() -> List[str]:
    return sorted(_SOURCES)


def source_class(name: str) -> Type[NodeSource]:
    if name not in _SOURCES:
        raise SourceError(f"unknown node source {name!r} (choose from {', '.join(source_names())})")
    return _SOURCES[name]
