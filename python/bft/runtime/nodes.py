"""``bft.runtime.nodes``, the name out-of-tree node sources import the interface by (docs/runtime.md,
"Node sources"): it lives in :mod:`.sources.base`."""

from __future__ import annotations

from .sources.base import (
                           BUILT_IN_SOURCES,
                           ENTRY_POINT_GROUP,
                           Emit,
                           NodeEvent,
                           NodeSource,
                           SourceError,
                           register_source,
                           source_class,
                           source_names,
)

__all__ = ["BUILT_IN_SOURCES", "ENTRY_POINT_GROUP", "Emit", "NodeEvent", "NodeSource", "SourceError",
           "register_source", "source_class", "source_names"]
