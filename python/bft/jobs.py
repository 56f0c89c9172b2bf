"""The job format (:mod:`bft._core.jobs`): what an elastic training job is, the one table of its
fields and the one validator, shared by the allocator (:func:`bft.allocate`'s job dicts) and the
replay (workload files).

>>> from bft import jobs
>>> spec = jobs.from_dict({"name": "a", "min_nodes": 1, "max_nodes": 4, "scale_up_s": 0,
...                        "scale_down_s": 0, "nodes": [1, 4], "throughput": [10, 40]},
...                       for_allocation=True)
>>> spec.max_nodes, spec.throughput_at(2)
(4, 20.0)

Workloads are JSONL files, one job per line (docs/formats.md).
"""

from __future__ import annotations

import os
from typing import Any, List, Mapping, Sequence, Union

from ._core import jobs as _jobs

JobSpec = _jobs.JobSpec
Configuration = _jobs.Configuration
# The largest throughput or objective value a job may have (samples/s): bft::jobs::kMaxSamplesPerS.
MAX_SAMPLES_PER_S = _jobs.MAX_SAMPLES_PER_S
# The one table of a workload job line's fields, (name, required, read by the allocator), and of one
# of its configurations, (name, required): bft::jobs::JobFields() and ConfigurationFields().
job_fields = _jobs.job_fields
configuration_fields = _jobs.configuration_fields
# The name of a job's configuration 0, full backpropagation: the job's own curves, which a declared
# configuration (structured partial backpropagation, docs/spb.md) may not be named. The manager runs a
# job in it until the allocator chooses another, and tells its processes so (BFT_CONFIGURATION).
FULL_CONFIGURATION = "full"

PathLike = Union[str, os.PathLike]


def from_dict(fields: Mapping[str, Any], for_allocation: bool = False) -> JobSpec:
    """The job a dict of workload fields describes, checked as a workload line is; with
    ``for_allocation`` the replay-only fields (``submit``, ``work``) may be absent. Bad fields raise
    ValueError naming the job and the field."""
    return _jobs.job_from_dict(fields, for_allocation)


def read_jobs(path: PathLike) -> List[JobSpec]:
    """Reads a JSONL workload (plain or gzip). Bad lines raise ValueError("path:line: ...")."""
    return _jobs.read_jobs(os.fspath(path))


def parse_jobs(text: str, source: str = "<jobs>") -> List[JobSpec]:
    """The jobs of JSONL text; ``source`` names it in error messages."""
    return _jobs.parse_jobs(text, source)


def write_jobs(jobs: Sequence[JobSpec], path: PathLike) -> None:
    """Writes the format :func:`read_jobs` reads (gzip if the path ends in ``.gz``)."""
    _jobs.write_jobs(list(jobs), os.fspath(path))


__all__ = ["JobSpec", "Configuration", "FULL_CONFIGURATION", "MAX_SAMPLES_PER_S", "job_fields",
           "configuration_fields", "from_dict", "read_jobs", "parse_jobs", "write_jobs"]
