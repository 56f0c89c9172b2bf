"""The runtime: a manager that runs real elastic PyTorch jobs on idle nodes (docs/runtime.md).

:mod:`bft.runtime.manager` (the event loop), :mod:`bft.runtime.nodes` (the node-source interface),
:mod:`bft.runtime.local` and :mod:`bft.runtime.slurm` (the sources), :mod:`bft.runtime.launcher`
(torchrun), :mod:`bft.runtime.state` (SQLite state) and :mod:`bft.runtime.control` (the control
socket). The training-loop side is :mod:`bft.train`.
"""

from .nodes import NodeEvent, NodeSource, SourceError, register_source, source_class, source_names

__all__ = ["NodeEvent", "NodeSource", "SourceError", "register_source", "source_class", "source_names"]
