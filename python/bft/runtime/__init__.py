"""The runtime: a manager that runs real elastic PyTorch jobs on idle nodes (docs/runtime.md). The
training-loop side is :mod:`bft.train`. Its modules:

- the manager: :mod:`.manager` (the event loop), :mod:`.options` (its options and every default),
  :mod:`.decider` (the allocator's problem in, placements out), :mod:`.curvebook` (the profiling
  advisor, priors, rescale costs; + :mod:`.growstarts`, grows' newcomers timed warm and cold),
  :mod:`.reports` (progress datagrams in), :mod:`.lifecycle` (carrying out decisions, judging ended
  generations; + :mod:`.heartbeats`, hung in-place workers found by their heartbeats),
  :mod:`.workers` (a job's processes and its in-place configurations), :mod:`.resize` (a job's
  resize: its state machine and methods),
  :mod:`.runs` (what the manager tracks of an active job), :mod:`.standby` (warm standbys),
  :mod:`.launcher` (torchrun command lines, environments, its logs), :mod:`.processes` (finding and
  ending the processes the manager started, by their tags),
  :mod:`.agent` (the torchrun wrapper on each node), :mod:`.keeper` (the store and report socket
  that outlive the manager), :mod:`.jobfiles` (a job's directory and logs), :mod:`.status`
  (what ``bft status`` shows);
- state and control: :mod:`.state` (the SQLite store), :mod:`.state_schema` (its tables, versions,
  job states and checks), :mod:`.jobspec` (what a job is made of, checked: name, curve,
  configurations), :mod:`.control` (the control socket), :mod:`.metrics` (Prometheus; +
  :mod:`.metrics_http`, its endpoint's bounded server),
  :mod:`.report` (``bft report``'s accounting; + :mod:`.report_input`, other users' state files read
  as untrusted data, and :mod:`.sacct_wait`, the main jobs' added wait from sacct);
- node sources: :mod:`.nodes` (the interface and the registry, with entry points), :mod:`.local`
  (+ :mod:`.emulated`, its load-testing jobs), :mod:`.slurm` (+ :mod:`.slurm_commands`), and the
  scheduler-neutral pilots: :mod:`.pilots` (their report listener) and :mod:`.pilot` (the program);
- the command line: :mod:`.cli` (the commands) and :mod:`.cli_options` (their arguments, the
  configuration file);
- what is trusted: :mod:`.addresses` (the one check of every address something listens on) and
  :mod:`.trust` (files and directories only from their own user, no symbolic links).

The names below are the runtime's public face (for benches and tools), with the control socket's
client (:func:`.control.request`, :class:`.control.ControlError`); all but the node-source interface
are imported on first use, so a node's agent imports none of the manager's modules.
"""

from __future__ import annotations

import importlib

from .nodes import NodeEvent, NodeSource, SourceError, register_source, source_class, source_names

# name -> the module that defines it, imported on first use
_LAZY = {
    "ACTIVE_STATES": "state_schema",
    "CurveBook": "curvebook",
    "Decider": "decider",
    "JobRow": "state",
    "JobRun": "runs",
    "JobState": "state_schema",
    "Manager": "manager",
    "ManagerOptions": "options",
    "MetricsExporter": "metrics",
    "StateError": "state_schema",
    "StateStore": "state",
    "read_curve": "jobspec",
    "tagged_processes": "processes",
    "terminate_tagged": "processes",
}

__all__ = ["NodeEvent", "NodeSource", "SourceError", "register_source", "source_class", "source_names", *_LAZY]


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
