"""``bft.runtime.pilots``, the name an out-of-tree pilot-based source (PBS, LSF) imports the pilots'
report listener by (docs/runtime.md, "Node sources"): it lives in :mod:`.sources.pilot_reports`."""

from __future__ import annotations

from .sources.pilot_reports import (
                                    ENV_ADDRESS,
                                    ENV_IDENTITY,
                                    ENV_JOB_VAR,
                                    ENV_NODE_VAR,
                                    ENV_SECRET_FILE,
                                    EVENTS,
                                    MAX_CONNECTIONS,
                                    MESSAGE_DEADLINE_S,
                                    OnReport,
                                    PilotReports,
                                    PilotState,
                                    pilot_program,
)

__all__ = ["ENV_ADDRESS", "ENV_IDENTITY", "ENV_JOB_VAR", "ENV_NODE_VAR", "ENV_SECRET_FILE", "EVENTS",
           "MAX_CONNECTIONS", "MESSAGE_DEADLINE_S", "OnReport", "PilotReports", "PilotState", "pilot_program"]
