"""libbft: turn the transiently idle nodes of a supercomputer into deep-learning training throughput.

Capabilities mirror the C++ library: :mod:`bft.milp` (MILP model and backends), :mod:`bft.curve`
(throughput curves, fitting, profiling advisor), :mod:`bft.jobs` (the job format), :mod:`bft.alloc`
(the allocator) and :mod:`bft.sim` (trace replay).
"""

from . import _core
from ._core import Error, NotAvailable
from . import jobs
from . import alloc
from .alloc import allocate
from . import curve
from . import milp
from . import sim

__version__ = _core.__version__

__all__ = ["Error", "NotAvailable", "__version__"]
