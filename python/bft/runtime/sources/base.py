"""Where nodes come from: the node-source interface and the registry of sources.

A node source announces nodes that join the pool of idle nodes and nodes that the main scheduler
reclaims, and runs a command on one of its nodes. One small class per source, like the MILP
backends: adding a scheduler is one module whose class carries ``@register_source``. The built-in
sources are the modules named in ``BUILT_IN_SOURCES``; a package outside this tree joins by
declaring its module under the entry-point group ``bft.node_sources`` (``ENTRY_POINT_GROUP``), as
torch's rendezvous handlers do, and ``source_names()`` finds it without an edit here.

Threading: a source calls ``emit`` from any thread (its own watcher threads included); the manager
queues the events and handles them on its event loop. ``launch`` and ``reclaim_done`` are called
from the manager's loop only.
"""

from __future__ import annotations

import abc
import argparse
import importlib
import inspect
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, ClassVar, Dict, List, Mapping, Optional, Sequence, Type

from ..trust.addresses import check_listen_address


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
        """Adds this source's options (``--<name>-...``) to ``bft manager``'s parser; their defaults
        are the constructor's (:meth:`defaults`), so that each is written once."""

    @classmethod
    def defaults(cls) -> Dict[str, Any]:
        """The constructor's keyword defaults by parameter name: what the options default to."""
        parameters = inspect.signature(cls.__init__).parameters.values()
        return {p.name: p.default for p in parameters if p.default is not inspect.Parameter.empty}

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
    def launch(self, node: str, argv: Sequence[str], env: Mapping[str, str], log_path: Path, *,
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
            address = socket.getaddrinfo(host, None, socket.AF_INET, socket.SOCK_STREAM)[0][4][0]
        except OSError as e:
            raise SourceError(f"{self.name}: cannot resolve the manager's address {host!r}: {e}") from None
        try:
            return check_listen_address(f"{self.name}: the manager's address {host!r}", address)
        except ValueError as e:
            raise SourceError(f"{e}; give --bind") from None

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


# The modules of this package that define a source (each registers itself on import).
BUILT_IN_SOURCES = ("bft.runtime.sources.local", "bft.runtime.sources.slurm")
# Out-of-tree sources: an entry point ``<name> = "<module>"`` or ``"<module>:<class>"`` in this group.
ENTRY_POINT_GROUP = "bft.node_sources"

_SOURCES: Dict[str, Type[NodeSource]] = {}
_discovered = False


def register_source(cls: Type[NodeSource]) -> Type[NodeSource]:
    """Registers a node source class under ``cls.name`` (usable as a decorator)."""
    if not cls.name or _SOURCES.get(cls.name, cls) is not cls:
        raise ValueError(f"node source name {cls.name!r} is empty or taken")
    _SOURCES[cls.name] = cls
    return cls


def _entry_points() -> list:
    from importlib.metadata import entry_points

    found = entry_points()
    if hasattr(found, "select"):  # Python >= 3.10
        return list(found.select(group=ENTRY_POINT_GROUP))
    return list(found.get(ENTRY_POINT_GROUP, ()))  # Python 3.9: a dict of groups


def _discover() -> None:
    """Imports the built-in sources and loads the entry points, once. An entry point that fails to
    load is skipped with one line on stderr: a broken plug-in must not take every source with it."""
    global _discovered
    if _discovered:
        return
    _discovered = True
    for module in BUILT_IN_SOURCES:
        importlib.import_module(module)
    for ep in _entry_points():
        try:
            loaded = ep.load()  # importing its module runs its @register_source
            if isinstance(loaded, type) and issubclass(loaded, NodeSource):
                register_source(loaded)
        except Exception as e:  # noqa: BLE001 - whatever a plug-in raises, it is reported and skipped
            print(f"bft: node source entry point {ep.name} = {ep.value!r} (group {ENTRY_POINT_GROUP}) "
                  f"not loaded: {type(e).__name__}: {e}", file=sys.stderr)


def source_names() -> List[str]:
    """Every registered source: the built-in ones and those of installed packages' entry points."""
    _discover()
    return sorted(_SOURCES)


def source_class(name: str) -> Type[NodeSource]:
    _discover()
    if name not in _SOURCES:
        raise SourceError(f"unknown node source {name!r} (choose from {', '.join(source_names())})")
    return _SOURCES[name]
