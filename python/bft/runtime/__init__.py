"""The runtime: a manager that runs real elastic PyTorch jobs on idle nodes (docs/runtime.md). The
training-loop side is :mod:`bft.train`. Its parts, one folder each (each folder's docstring names
its modules):

- :mod:`.manager` (the event loop) and :mod:`.options` (its options and every default), with the
  command line: :mod:`.cli` (the commands) and :mod:`.cli_options` (their arguments, the
  configuration file);
- :mod:`.sources`: where nodes come from (the node-source interface and registry, the local and
  Slurm sources, the pilots' report listener);
- :mod:`.jobs`: running jobs (what the manager tracks of each, the lifecycle and its resize state
  machine and methods, worker processes, launch command lines, warm standbys, heartbeats);
- :mod:`.decide`: who gets which nodes (the decider, the curve book, grows' start times, the
  progress reports they learn from);
- :mod:`.statedb`: the state on disk (the SQLite store, its schema, job specifications);
- :mod:`.ops`: how people and tools reach a manager (control socket, status, the keeper, metrics,
  ``bft report``'s accounting);
- :mod:`.onnode`: what runs on a compute node for the manager (the torchrun agent, the pilot);
- :mod:`.trust`: what is trusted (listen addresses, files and directories).

Stable names kept for what is started or imported from outside: :mod:`.agent` and :mod:`.keeper`
(the ``python -m`` command lines of the agent and the keeper, which running processes carry),
:mod:`.nodes` and :mod:`.pilots` (the names out-of-tree node sources import).

The names below are the runtime's public face (for benches and tools), with the control socket's
client (:func:`.ops.control.request`, :class:`.ops.control.ControlError`); all but the node-source
interface are imported on first use, so a node's agent imports none of the manager's modules.
"""

from __future__ import annotations

import importlib

from .sources.base import NodeEvent, NodeSource, SourceError, register_source, source_class, source_names

# name -> the module that defines it, imported on first use
_LAZY = {
    "ACTIVE_STATES": "statedb.schema",
    "CurveBook": "decide.curvebook",
    "Decider": "decide.decider",
    "JobRow": "statedb.store",
    "JobRun": "jobs.runs",
    "JobState": "statedb.schema",
    "Manager": "manager",
    "ManagerOptions": "options",
    "MetricsExporter": "ops.metrics",
    "StateError": "statedb.schema",
    "StateStore": "statedb.store",
    "read_curve": "statedb.jobspec",
    "tagged_processes": "jobs.processes",
    "terminate_tagged": "jobs.processes",
}

__all__ = ["NodeEvent", "NodeSource", "SourceError", "register_source", "source_class", "source_names", *_LAZY]


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
