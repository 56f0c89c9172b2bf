"""The allocator (:mod:`bft._core.alloc`): which idle nodes each elastic training job runs on.

>>> import bft
>>> jobs = [
...     {"name": "a", "min_nodes": 1, "max_nodes": 4, "nodes": [1, 4], "throughput": [10, 40]},
...     {"name": "b", "min_nodes": 1, "max_nodes": 2, "nodes": [1, 2], "throughput": [15, 30]},
... ]
>>> result = bft.allocate(jobs, pool=[0, 1, 2, 3], current={0: "a"})
>>> result.nodes_after.tolist(), result.objective
([2, 2], 500.0)

Jobs are dicts with the fields of ``jobs-*.jsonl`` (``name``, ``min_nodes``, ``max_nodes``,
``scale_up_s``, ``scale_down_s``, ``nodes``, ``throughput`` required, ``objective``, ``weight`` and
``configurations`` optional; ``submit`` and ``work`` are allowed and not used), read by the workload
format's own validator in C++ (:mod:`bft.jobs`), or :class:`Job` objects. An unknown field, a
missing one, or a value of the wrong type (a string for a number, a fraction for a node count) is a
ValueError naming the job and the field.
The formulation, the solvers and when to choose which are in docs/alloc.md.
"""

from __future__ import annotations

import enum
from typing import Any, Iterable, List, Mapping, Optional, Sequence, Tuple, Union

import numpy as np

from ._core import alloc as _a
from ._core import jobs as _jobs

Job = _a.Job
Configuration = _jobs.Configuration
JobAllocation = _a.JobAllocation
Allocation = _a.Allocation
Goal = _a.Goal
AllocationStatus = _a.AllocationStatus
NodeNames = _a.NodeNames
solve = _a.solve

_POLICIES = tuple(_a.policies())  # every registered policy, exact first: the one table (alloc::Policies)
SOLVERS = tuple(p.name for p in _POLICIES)  # their names: the one list every front end offers
MILP_SOLVERS = tuple(p.name for p in _POLICIES if p.solves_milp)  # run them under a time limit, isolated
# The policy names as a str enum (SolverKind.EXACT == "exact"), built from the same list.
SolverKind = enum.Enum("SolverKind", {name.upper(): name for name in SOLVERS}, type=str)
GOALS = tuple(_a.goal_names())  # from C++ (alloc::ToString(Goal))
DEFAULT_TFWD_S = _a.DEFAULT_TFWD_S  # alloc::kDefaultTfwdS, the horizon of Problem and ReplayOptions
# alloc::SolveOptions' defaults: allocate()'s, and what the command lines' help says.
DEFAULT_SOLVER = _a.DEFAULT_SOLVER
DEFAULT_GOAL = _a.DEFAULT_GOAL
DEFAULT_MILP_BACKEND = _a.DEFAULT_MILP_BACKEND
DEFAULT_RELATIVE_GAP = _a.DEFAULT_RELATIVE_GAP
MAX_HORIZON_S = _a.MAX_HORIZON_S  # alloc::kMaxHorizonS: the longest tfwd_s or rescale cost the manager accepts


def policy_inputs(name: str) -> Tuple[str, ...]:
    """What policy ``name`` reads beyond the jobs, pool and map, by the names of ``allocate``'s
    arguments (``remaining_samples``, ``expected_idle_s``): a caller supplies those it can; without
    one, the policy decides as if it were unknown. ValueError for an unknown policy."""
    return tuple(_a.find_policy(name).inputs)


_INT64 = (-(2**63), 2**63 - 1)  # node ids (bft::alloc::NodeId)


def _in_range(what: str, value: int, limits: tuple) -> int:
    if not limits[0] <= value <= limits[1]:
        raise ValueError(f"{what}: {value} is out of range [{limits[0]}, {limits[1]}]")
    return value


def _copy_job(job: Job, weight: float) -> Job:
    """A copy, so that what allocate() sets on it (remaining_samples) never reaches the caller's Job."""
    copy = Job(job.id, job.min_nodes, job.max_nodes, job.objective, job.throughput, job.scale_up_s,
               job.scale_down_s, weight, restart_s=job.restart_s)
    copy.remaining_samples = job.remaining_samples
    copy.configurations, copy.configuration = job.configurations, job.configuration
    return copy


def to_job(job: Union[Job, Mapping[str, Any]], index: int = 0, weight: Optional[float] = None) -> Job:
    """A :class:`Job` from a Job or a dict with the fields of ``jobs-*.jsonl``, checked by the workload
    format's own validator (:func:`bft.jobs.from_dict`); errors name ``jobs[index]``, the job and the field."""
    if isinstance(job, Job):
        return _copy_job(job, job.weight if weight is None else float(weight))
    if not isinstance(job, Mapping):
        raise ValueError(f"jobs[{index}]: expected a dict or a bft.alloc.Job, got {type(job).__name__}")
    try:
        built = _a.from_job_spec(_jobs.job_from_dict(job, True))
    except ValueError as e:
        raise ValueError(f"jobs[{index}]: {e}") from None
    if weight is not None:
        built.weight = float(weight)
    return built


def _node_name(where: str, value: Any) -> str:
    if not isinstance(value, str):
        raise ValueError(f"{where}: node names and integer ids cannot be mixed, got {value!r}")
    return value


def _pool(pool: Any) -> tuple:
    """(node ids, NodeNames or None): integer ids as they are, or names interned in pool order."""
    arr = np.asarray(pool)
    if arr.ndim != 1:
        raise ValueError("pool: expected a flat list or 1-d array of node ids or node names")
    if arr.size and (arr.dtype.kind == "U" or any(isinstance(x, str) for x in pool)):
        names = _a.NodeNames()
        ids = []
        for k, x in enumerate(pool):
            name = _node_name(f"pool: entry {k}", x)
            if names.find(name) >= 0:
                raise ValueError(f"pool: node {name!r} appears twice")
            try:
                ids.append(names.intern(name))
            except ValueError as e:
                raise ValueError(f"pool: entry {k}: {e}") from None
        return ids, names
    if arr.size and arr.dtype.kind not in "iu":
        raise ValueError(f"pool: node ids must be integers or node names (strings), got an array of {arr.dtype}")
    return [_in_range("pool: node id", int(x), _INT64) for x in arr], None


def _current(current: Any, names: Optional["_a.NodeNames"]) -> tuple:
    if current is None:
        return [], []
    if isinstance(current, Mapping):
        items = list(current.items())
    else:
        items = list(current)
    nodes, jobs = [], []
    for k, item in enumerate(items):
        try:
            node, job = item
        except (TypeError, ValueError):
            raise ValueError(f"current: entry {k} ({item!r}) is not a node -> job id pair") from None
        if not isinstance(job, str):
            raise ValueError(f"current: entry {k}: job id must be a string (a job's name), got {job!r}")
        if names is not None:
            if not isinstance(node, str):
                raise ValueError(f"current: entry {k}: the pool names its nodes, so must this, got {node!r}")
            node_id = names.find(node)
            if node_id < 0:
                raise ValueError(f"current: entry {k}: node {node!r} is not in the pool")
            nodes.append(node_id)
        else:
            if not isinstance(node, (int, np.integer)) or isinstance(node, (bool, np.bool_)):
                raise ValueError(f"current: entry {k}: node id must be an integer, got {node!r}")
            nodes.append(_in_range(f"current: entry {k}: node id", int(node), _INT64))
        jobs.append(job)
    return nodes, jobs


class _NamedView:
    """A view of a C++ result with node names: copy and pickle refuse it as they refuse the result itself
    (its __getattr__ would otherwise recurse on a copy that has no result yet)."""

    def __reduce_ex__(self, protocol: Any) -> Any:
        raise TypeError(f"cannot pickle {type(self).__name__!r} object")


class NamedJobAllocation(_NamedView):
    """A :class:`JobAllocation` whose ``kept``, ``added`` and ``released`` are node names."""

    def __init__(self, job: JobAllocation, names: "_a.NodeNames"):
        self._job, self._names = job, names

    def __getattr__(self, attribute: str) -> Any:
        return getattr(self._job, attribute)

    kept = property(lambda self: self._names.names(self._job.kept))
    added = property(lambda self: self._names.names(self._job.added))
    released = property(lambda self: self._names.names(self._job.released))

    def __repr__(self) -> str:
        return f"NamedJobAllocation({self._job.id!r}, {self._job.nodes_before} -> {self._job.nodes_after} nodes)"


class NamedAllocation(_NamedView):
    """An :class:`Allocation` of named nodes (what :func:`allocate` returns for a pool of names):
    ``map`` maps node names to job ids, ``map_nodes`` and each job's ``kept``, ``added`` and
    ``released`` hold names; everything else is the allocation's own."""

    def __init__(self, allocation: Allocation, names: "_a.NodeNames"):
        self._allocation, self._names = allocation, names

    def __getattr__(self, attribute: str) -> Any:
        return getattr(self._allocation, attribute)

    @property
    def map(self) -> dict:
        return dict(zip(self.map_nodes, self._allocation.map.values()))

    @property
    def map_nodes(self) -> list:
        return self._names.names(self._allocation.map_nodes)

    @property
    def jobs(self) -> list:
        return [NamedJobAllocation(j, self._names) for j in self._allocation.jobs]

    def __repr__(self) -> str:
        return "Named" + repr(self._allocation)


def allocate(
    jobs: Iterable[Union[Job, Mapping[str, Any]]],
    pool: Union[Sequence[int], Sequence[str], np.ndarray],
    current: Optional[Union[Mapping[Any, str], Iterable[tuple]]] = None,
    tfwd: float = DEFAULT_TFWD_S,
    solver: Union[str, "SolverKind"] = DEFAULT_SOLVER,
    goal: Union[str, "Goal"] = DEFAULT_GOAL,
    weights: Optional[Sequence[float]] = None,
    milp_backend: str = DEFAULT_MILP_BACKEND,
    time_limit_s: Optional[float] = None,
    relative_gap: float = DEFAULT_RELATIVE_GAP,
    isolate: bool = False,
    remaining_samples: Optional[Sequence[float]] = None,
    expected_idle_s: Optional[Sequence[float]] = None,
) -> Union[Allocation, NamedAllocation]:
    """Decide which nodes of ``pool`` each job runs on.

    ``pool`` holds integer node ids, or node names as schedulers give them (``"c05n06"``), which
    are interned in pool order (the order free nodes go out in) and give a :class:`NamedAllocation`
    whose nodes are names. ``current`` maps node -> job id (the nodes jobs run on now, named as in
    the pool; every node must be in the pool).
    ``solver`` is a registered policy, one of :data:`SOLVERS` (docs/alloc.md describes each):
    ``exact`` by default (proven optimum); the MILPs (:data:`MILP_SOLVERS`) run on ``milp_backend``; ``goal`` is
    ``throughput`` or ``max_min_fair``; ``weights`` (one per job) multiply each job's value and
    penalty. Returns an :class:`Allocation` whose per-job figures (``nodes_after``, ``rate``,
    ``value``, ``penalty``...) are numpy arrays in the order of ``jobs``. Bad input raises
    ValueError naming the field; the GIL is released while solving, and Ctrl-C stops it
    (``KeyboardInterrupt``). ``isolate=True`` runs MILP solves in a child process, so that a crash
    of the solver library comes back as a failed allocation (every job keeps its nodes) instead of
    ending this process: what a long-lived caller should use.

    ``time_limit_s`` bounds each MILP solve (None: no limit, the default, so that a call returns
    the proven optimum however long it takes). A MILP may take minutes even on a few jobs (CBC under
    ``max_min_fair`` did on 2 jobs and 17 nodes, issue 40): a caller that must answer in time sets one,
    as ``bft replay`` (``sim.DEFAULT_MILP_TIME_LIMIT_S``) and the manager do. An unknown
    ``milp_backend`` (or one this build lacks) is :class:`bft.NotAvailable`, which is a ValueError too.

    The policies ``completion_aware`` and ``lifetime_aware`` (docs/alloc.md) read, respectively,
    ``remaining_samples`` (one per job: samples each still has to process) and ``expected_idle_s``
    (one per pool node, in pool order: seconds it is expected to stay idle); other solvers ignore them.
    """
    # Names as strings (or the enums that are strings): anything else is one line, not pybind's
    # multi-line list of overloads.
    for field, value, kinds in (("solver", solver, (str,)), ("goal", goal, (str, Goal)),
                                ("milp_backend", milp_backend, (str,))):
        if not isinstance(value, kinds):
            raise TypeError(f"{field}: expected a name (a str), got {type(value).__name__}")
    jobs = list(jobs)
    if weights is not None:
        weights = list(np.asarray(weights, dtype=float).ravel())
        if len(weights) != len(jobs):
            raise ValueError(f"weights: {len(weights)} values for {len(jobs)} jobs")
    built = [to_job(j, k, None if weights is None else weights[k]) for k, j in enumerate(jobs)]
    if remaining_samples is not None:
        for job, value in zip(built, _per_item("remaining_samples", remaining_samples, len(built), "jobs")):
            job.remaining_samples = value
    if isinstance(goal, str):
        goal = _a.goal_from_string(goal)
    try:
        tfwd = float(tfwd)
    except (TypeError, ValueError):
        raise ValueError(f"tfwd: expected a number of seconds, got {tfwd!r}") from None
    pool_ids, names = _pool(pool)
    nodes, owners = _current(current, names)
    allocation = solve(
        built,
        pool_ids,
        nodes,
        owners,
        tfwd_s=tfwd,
        solver=solver,
        goal=goal,
        milp_backend=milp_backend,
        time_limit_s=float("inf") if time_limit_s is None else float(time_limit_s),
        relative_gap=float(relative_gap),
        isolate=bool(isolate),
        expected_idle_s=[] if expected_idle_s is None else _per_item("expected_idle_s", expected_idle_s,
                                                                      len(pool_ids), "pool nodes"),
    )
    return allocation if names is None else NamedAllocation(allocation, names)


def _per_item(field: str, values: Sequence[float], count: int, what: str) -> List[float]:
    """One finite number per job or pool node; the C++ checks the ranges and names the entry."""
    try:
        out = [float(v) for v in np.asarray(values, dtype=float).ravel()]
    except (TypeError, ValueError):
        raise ValueError(f"{field}: expected numbers, got {values!r}") from None
    if len(out) != count:
        raise ValueError(f"{field}: {len(out)} values for {count} {what}")
    return out


__all__ = [
    "Job",
    "Configuration",
    "JobAllocation",
    "Allocation",
    "NamedAllocation",
    "NamedJobAllocation",
    "NodeNames",
    "AllocationStatus",
    "SolverKind",
    "policy_inputs",
    "Goal",
    "allocate",
    "solve",
    "to_job",
    "SOLVERS",
    "MILP_SOLVERS",
    "GOALS",
    "DEFAULT_TFWD_S",
    "DEFAULT_SOLVER",
    "DEFAULT_GOAL",
    "DEFAULT_MILP_BACKEND",
    "DEFAULT_RELATIVE_GAP",
]
