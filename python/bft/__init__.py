"""libbft: turn the transiently idle nodes of a supercomputer into deep-learning training throughput.

Capabilities mirror the C++ library: :mod:`bft.milp` (MILP model and backends), :mod:`bft.curve`
(throughput curves, fitting, profiling advisor), :mod:`bft.jobs` (the job format), :mod:`bft.alloc`
(the allocator) and :mod:`bft.sim` (trace replay).
"""

from . import _core, alloc, curve, jobs, milp, sim
from ._core import Error, NotAvailable
from .alloc import allocate

__version__ = _core.__version__

__all__ = ["Error", "NotAvailable", "__version__", "alloc", "allocate", "curve", "jobs", "milp", "sim"]
