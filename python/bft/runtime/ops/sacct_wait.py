"""The main jobs' added wait, measured from Slurm's accounting (``sacct``), for ``bft report``.

A *main* job is any job that is not a bft pilot (a pilot's job name is ``bft-pilot.<identity>``,
:mod:`.slurm`). The added wait of a main job J that started within the period is the time t in
[Eligible(J), Start(J)), cut to the period, at which

- a pilot of the manager(s) accounted held at least one of J's nodes (NodeList(J)), and
- no other main job held any of J's nodes

(so J's nodes were free of everything but pilots, and a pilot held one). Time after J became
eligible during which its nodes ran other main jobs, or were all free while J still waited (the
scheduler's cycle, priorities, limits), is not counted. It is still an upper bound of what the pilots
cost J in one respect: Slurm might not have started J sooner without them (a reservation, a limit);
it is a measure, not the grace time granted (the bound :mod:`.report` gives without sacct).

The records are ``sacct --allusers --allocations --parsable2`` lines (:data:`FORMAT`); on a cluster
without an accounting database, those of its job-completion log (``sacct --completion``: ended jobs only). The lines
are read by the project's one reader of sacct's format, the C++ trace importer's
(``bft.sim.read_sacct_jobs``: a header naming the columns, each once, ``|``-separated fields, steps
skipped, NodeList expanded within a count of names per file); its times by sacct's time parser.
"""

from __future__ import annotations

import bisect
import itertools
import os
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from typing import Dict, Iterable, List, Optional, Sequence, Tuple

from ... import sim
from ..._bounded import MAX_LINE_BYTES
from ..sources.slurm_commands import PILOT_PREFIX

FORMAT = "JobID,JobName,Eligible,Start,End,NodeList"
_TIMEOUT_S = 60.0
# The most of sacct's own output `bft report` reads (about 2.5 million records of ~100 bytes): it grows
# with the period's jobs, so a longer one is refused with a line asking for a shorter period instead
# of being read into memory whatever its size.
MAX_OUTPUT_BYTES = 256 << 20
# The most node names one file of records may expand to (a month of a busy machine's jobs names a few
# million; each distinct name is held once): a hostlist such as n[0-999999] on a few lines is refused
# in one line, counted before it is expanded.
MAX_NODE_NAMES = 10_000_000


class SacctError(Exception):
    """sacct's records cannot be had or read: one line."""


@dataclass
class SacctJob:
    job_id: str
    name: str
    eligible_s: Optional[float]
    start_s: float
    end_s: Optional[float]  # None: still running
    nodes: List[str]


@dataclass
class MainWait:
    main_jobs: int  # main jobs that started within the period
    jobs: int  # of which waited on a pilot (added wait > 0)
    wait_s: float  # their added wait, summed
    source: str = "sacct"  # where the records came from, for the report
    per_job: Dict[str, float] = field(default_factory=dict)  # every main job's added wait (0 if none), by job id


def _time(text: str) -> Optional[float]:
    if text in ("", "Unknown", "None"):
        return None
    return float(sim.parse_sacct_time(text))


def parse(path: "os.PathLike[str] | str", source: Optional[str] = None) -> List[SacctJob]:
    """The jobs (not steps) that started, from a file of ``sacct --parsable2 --format=`` :data:`FORMAT`
    output (columns in any order, more allowed), read by the project's one reader of the format (the
    importer's, :func:`bft.sim.read_sacct_jobs`): at most :data:`MAX_NODE_NAMES` node names, counted
    before they are made. SacctError naming `source` (default: the path) and the line otherwise."""
    path = os.fspath(path)
    source = path if source is None else source
    try:
        lines = sim.read_sacct_jobs(path, FORMAT.split(","), max_names=MAX_NODE_NAMES)
    except (ValueError, OSError) as e:
        raise SacctError(str(e).replace(path, source, 1)) from None
    out = []
    for number, (job_id, name, eligible, start, end, _), nodes in lines:
        try:
            start_s, end_s, eligible_s = _time(start), _time(end), _time(eligible)
        except ValueError as e:
            raise SacctError(f"{source}:{number}: job {job_id}: {e}") from None
        if start_s is None or not nodes:
            continue  # never started
        out.append(SacctJob(job_id, name, eligible_s, start_s, end_s, nodes))
    return out


def read(since_s: float, until_s: float) -> Tuple[List[SacctJob], str]:
    """The jobs in sacct's records of every user's jobs that ran in [since_s, until_s], and where they
    came from: the accounting database, else (a cluster without one) the job-completion log, which has
    the ended jobs only. SacctError if sacct is missing or refuses."""
    fmt = "%Y-%m-%dT%H:%M:%S"
    argv = ["sacct", "--allusers", "--allocations", "--parsable2", f"--format={FORMAT}",
            f"--starttime={time.strftime(fmt, time.localtime(since_s))}",
            f"--endtime={time.strftime(fmt, time.localtime(until_s))}"]
    try:
        return _run(argv, "sacct"), "sacct"
    except SacctError as e:
        if "accounting storage is disabled" not in str(e):
            raise
    source = "sacct --completion (ended jobs only)"
    return _run([*argv, "--completion"], source), source


def _run(argv: List[str], source: str) -> List[SacctJob]:
    """The jobs of sacct's standard output, kept on disk while it runs and read within MAX_OUTPUT_BYTES."""
    with tempfile.NamedTemporaryFile(prefix="bft-sacct-") as out, tempfile.TemporaryFile() as err:
        try:
            r = subprocess.run(argv, stdout=out, stderr=err, timeout=_TIMEOUT_S,
                               env={**os.environ, "SLURM_TIME_FORMAT": "%s"})
        except FileNotFoundError:
            raise SacctError("sacct not found on PATH") from None
        except subprocess.TimeoutExpired:
            raise SacctError(f"sacct gave no answer in {_TIMEOUT_S:.0f} s") from None
        if r.returncode != 0:
            err.seek(0)
            first = next((x.strip() for x in err.read(MAX_LINE_BYTES).decode("utf-8", "replace").splitlines()
                          if x.strip()), f"exit {r.returncode}")
            raise SacctError(f"sacct failed: {first}")
        if os.fstat(out.fileno()).st_size > MAX_OUTPUT_BYTES:
            raise SacctError(f"sacct's records of the period take more than {MAX_OUTPUT_BYTES >> 20} MiB: "
                             "report a shorter period (--since, --until)")
        return parse(out.name, source)


def _union(intervals: Iterable[Tuple[float, float]]) -> List[Tuple[float, float]]:
    out: List[Tuple[float, float]] = []
    for a, b in sorted(i for i in intervals if i[1] > i[0]):
        if out and a <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], b))
        else:
            out.append((a, b))
    return out


def _minus_length(keep: List[Tuple[float, float]], remove: List[Tuple[float, float]]) -> float:
    """The length of the union `keep` outside the union `remove` (both sorted, disjoint): one sweep."""
    total, first = 0.0, 0
    for a, b in keep:
        total += b - a
        while first < len(remove) and remove[first][1] <= a:
            first += 1
        k = first
        while k < len(remove) and remove[k][0] < b:
            total -= min(b, remove[k][1]) - max(a, remove[k][0])
            k += 1
    return total


class _NodeHistory:
    """The jobs that ran on one node, by start time, with the running maximum of their ends: the jobs
    that overlap a window are found by two bisections, not by a scan of the node's whole history (a
    month of a busy node is thousands of jobs, and every job that waited for it asks)."""

    def __init__(self, jobs: List[SacctJob], until_s: float):
        self.jobs = sorted(jobs, key=lambda k: k.start_s)
        self.starts = [k.start_s for k in self.jobs]
        self.ends = [k.end_s if k.end_s is not None else until_s for k in self.jobs]
        self.max_end = list(itertools.accumulate(self.ends, max))

    def overlapping(self, lo: float, hi: float) -> Iterable[Tuple[SacctJob, float, float]]:
        """Each job that ran within (lo, hi), with its time there."""
        for i in range(bisect.bisect_right(self.max_end, lo), bisect.bisect_left(self.starts, hi)):
            if self.ends[i] > lo:
                yield self.jobs[i], max(self.starts[i], lo), min(self.ends[i], hi)


def added_wait(jobs: Sequence[SacctJob], pilot_names: Iterable[str], *, since_s: float, until_s: float) -> MainWait:
    """The main jobs' added wait within [since_s, until_s] caused by the pilots named `pilot_names`
    (the module's definition)."""
    pilots = set(pilot_names)
    on_node: Dict[str, List[SacctJob]] = {}
    for j in jobs:
        for n in j.nodes:
            on_node.setdefault(n, []).append(j)
    history = {n: _NodeHistory(js, until_s) for n, js in on_node.items()}
    main_jobs = waited = 0
    total = 0.0
    per_job: Dict[str, float] = {}
    for j in jobs:
        if j.name.startswith(PILOT_PREFIX) or not since_s <= j.start_s <= until_s:
            continue
        main_jobs += 1
        per_job[j.job_id] = 0.0
        lo, hi = max(j.eligible_s if j.eligible_s is not None else j.start_s, since_s), min(j.start_s, until_s)
        if hi <= lo:
            continue
        held, busy = [], []
        for n in j.nodes:
            for k, a, b in history[n].overlapping(lo, hi):
                if k is j:
                    continue
                if k.name in pilots:
                    held.append((a, b))
                elif not k.name.startswith(PILOT_PREFIX):
                    busy.append((a, b))
        wait = _minus_length(_union(held), _union(busy))
        per_job[j.job_id] = wait
        if wait > 0:
            waited += 1
            total += wait
    return MainWait(main_jobs=main_jobs, jobs=waited, wait_s=total, per_job=per_job)
