"""Trace replay: evaluate allocation policies on idle-node traces (a thin layer over ``bft._core.sim``).

>>> from bft import sim
>>> trace, jobs = sim.generate_synthetic(seed=1)
>>> result = sim.replay(trace, jobs, policy="exact")
>>> result.summary["idle_capture"]  # doctest: +SKIP

Traces are ``time,node,state`` CSV files (optionally gzip) and workloads are JSONL files with one
job per line; see docs/formats.md. The accounting is documented in docs/sim.md.

Split as the C++ is (libbft/src/sim/): ``_trace`` (traces, their statistics, the importers, node
selection), ``_replay`` (the replay and its result), ``_text`` (the text reports), ``_outputs`` (the
files of ``bft replay --out``). This package is their one public face: import every name from ``bft.sim``.
"""

# The job format has its own module (bft.jobs), beneath the allocator and the replay; its names stay here too.
from ..jobs import JobSpec, configuration_fields, job_fields, parse_jobs, read_jobs, write_jobs
from ._outputs import write_outputs
from ._replay import (
    ACCOUNTINGS,
    CONFIGURATION_MODES,
    CURVE_MODES,
    DEFAULT_ACCOUNTING,
    DEFAULT_CONFIGURATIONS,
    DEFAULT_CURVES,
    DEFAULT_MAX_JOBS,
    DEFAULT_MILP_TIME_LIMIT_S,
    DEFAULT_POLICY,
    DEFAULT_TFWD_S,
    DIAGNOSTIC_CURVE_MODES,
    POLICIES,
    REFERENCE_START_EVENT,
    STEP_COLUMNS,
    CurveMode,
    IdleLifetimePredictor,
    ReplayResult,
    model_from_name,
    reference_start_s,
    replay,
    replay_label,
)
from ._text import comparison_table, format_summary, format_trace_stats
from ._trace import (
    MAX_MACHINE_NODES,
    ImportedTrace,
    NodeState,
    Trace,
    TraceStats,
    expand_hostlist,
    expand_hostlists,
    generate_synthetic,
    import_sacct,
    import_swf,
    machine_nodes_spec,
    parse_sacct_time,
    parse_trace,
    read_sacct_jobs,
    read_trace,
    select_nodes,
    trace_stats,
    write_trace,
)

__all__ = [
    "Trace",
    "JobSpec",
    "NodeState",
    "CurveMode",
    "ReplayResult",
    "read_trace",
    "parse_trace",
    "write_trace",
    "TraceStats",
    "trace_stats",
    "format_trace_stats",
    "ImportedTrace",
    "IdleLifetimePredictor",
    "parse_sacct_time",
    "expand_hostlist",
    "expand_hostlists",
    "machine_nodes_spec",
    "select_nodes",
    "import_sacct",
    "import_swf",
    "read_jobs",
    "parse_jobs",
    "job_fields",
    "configuration_fields",
    "write_jobs",
    "generate_synthetic",
    "replay",
    "comparison_table",
    "format_summary",
    "replay_label",
    "POLICIES",
    "DEFAULT_MILP_TIME_LIMIT_S",
    "DEFAULT_MAX_JOBS",
    "DEFAULT_TFWD_S",
    "DEFAULT_POLICY",
    "DEFAULT_CURVES",
    "DEFAULT_ACCOUNTING",
    "DEFAULT_CONFIGURATIONS",
    "CURVE_MODES",
    "DIAGNOSTIC_CURVE_MODES",
    "ACCOUNTINGS",
    "CONFIGURATION_MODES",
    "REFERENCE_START_EVENT",
    "reference_start_s",
    # Offered and used before they were listed here (the runtime's sacct wait, the benches, tests).
    "MAX_MACHINE_NODES",
    "STEP_COLUMNS",
    "model_from_name",
    "read_sacct_jobs",
    # The files of `bft replay --out DIR` (docs/formats.md), written by the command line before it was here.
    "write_outputs",
]
