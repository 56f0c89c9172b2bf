"""``bft report``, the command: its times and outputs checked, every state directory read as untrusted
data (:mod:`.accounting_input`), the accounting (:mod:`.accounting`) with the main jobs' added wait
(:mod:`.sacct_wait`), and its table, CSV or plot written. Its arguments are
:mod:`bft.runtime.cli_options`'; errors are one line (UsageError, exit status 2)."""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Dict, List, Optional

from ..cli_options import UsageError
from ..statedb.schema import StateError


def _report_time(text: Optional[str], flag: str) -> Optional[float]:
    from .accounting_input import MAX_TIME_S

    if text is None:
        return None
    try:
        t = float(text)
    except ValueError:
        for form in ("%Y-%m-%d %H:%M:%S", "%Y-%m-%dT%H:%M:%S", "%Y-%m-%d %H:%M", "%Y-%m-%dT%H:%M", "%Y-%m-%d"):
            try:
                t = time.mktime(time.strptime(text, form))
                break
            except (ValueError, OverflowError):
                continue
        else:
            raise UsageError(f"{flag}: not a time: {text!r} (YYYY-MM-DD[ HH:MM[:SS]] or seconds since the epoch)")
    if not 0 <= t <= MAX_TIME_S:  # NaN too
        raise UsageError(f"{flag}: {text!r} is not a time between the epoch and {MAX_TIME_S:.0e} s after it")
    return t


def _identity(path: Path) -> Optional[tuple]:
    """(device, inode) of the file `path` names (links followed), None if there is none."""
    try:
        st = path.stat()
    except OSError:
        return None
    return st.st_dev, st.st_ino


def _report_outputs(args: argparse.Namespace, state_dirs: List[Path]) -> None:
    """Refuses an output (--csv, --png) that is a directory or one of the report's inputs (a state
    file, its log, the --sacct file) under any name: a link or a hard link of it is the same inode."""
    inputs = {}
    for d in state_dirs:
        for name in ("state.db", "state.db-wal", "state.db-shm"):
            inputs[_identity(d / name)] = d / name
    if args.sacct is not None:
        inputs[_identity(args.sacct)] = args.sacct
    inputs.pop(None, None)
    for flag, out in (("--csv", args.csv), ("--png", args.png)):
        if out is None or (flag == "--csv" and str(out) == "-"):
            continue
        if flag == "--png" and out.suffix.lower() != ".png":
            raise UsageError(f"--png {out}: the file name must end in .png (the plot is a PNG image)")
        if out.is_dir():
            raise UsageError(f"{flag} {out}: a directory, not a file to write")
        same = inputs.get(_identity(out))
        if same is not None:
            raise UsageError(f"{flag} {out}: the same file as the input {same}: refusing to overwrite it")
    if args.csv is not None and args.png is not None and str(args.csv) != "-" and (
            args.csv.absolute() == args.png.absolute() or _identity(args.csv) in (_identity(args.png),) and
            _identity(args.csv) is not None):
        raise UsageError(f"--csv {args.csv} and --png {args.png} name the same file")


def _emit(text: str, stream) -> None:
    """Writes a line of the report; a standard output that cannot take it (a full device, a closed
    pipe) is one line, not a traceback at exit."""
    try:
        print(text, file=stream, flush=True)
    except OSError as e:
        os.dup2(os.open(os.devnull, os.O_WRONLY), stream.fileno())  # nothing left to flush at exit
        raise UsageError(f"cannot write the report to {stream.name}: {e.strerror or e}") from None


def run(args: argparse.Namespace, state_dirs: List[Path]) -> int:
    """Each state directory read as untrusted data (report_input). One that cannot be read is one line
    naming it, and the others are reported: the exit status is then 2, so that a script sees the
    report is partial. The same state file given twice (another path to it) is counted once."""
    from . import accounting as report
    from . import sacct_wait
    from .accounting_input import READ_ERRORS, ReportInput, read_error

    since, until = _report_time(args.since, "--since"), _report_time(args.until, "--until")
    _report_outputs(args, state_dirs)
    now = time.time()
    stores: Dict[Path, ReportInput] = {}
    seen: Dict[tuple, Path] = {}
    left_out = 0

    def leave_out(state_dir: Path, e: Exception) -> None:
        nonlocal left_out
        left_out += 1
        print(f"bft report: {read_error(state_dir, e)} (left out of the report)", file=sys.stderr)
        if state_dir in stores:
            stores.pop(state_dir).close()

    try:
        for state_dir in state_dirs:
            try:
                store = ReportInput(state_dir)
            except StateError as e:
                leave_out(state_dir, e)
                continue
            if store.key in seen:
                store.close()
                print(f"bft report: --state-dir {state_dir}: the same state file as --state-dir {seen[store.key]} "
                      "(given twice): counted once", file=sys.stderr)
                continue
            seen[store.key] = state_dir
            stores[state_dir] = store
        pilots: Dict[Path, Optional[str]] = {}
        for state_dir, store in list(stores.items()):
            try:
                pilots[state_dir] = report.pilot_job_name(store)
            except READ_ERRORS as e:
                leave_out(state_dir, e)
        if not stores:
            return 2
        # One period for every directory: from the earliest first record, unless --since says.
        if since is None:
            firsts = [f for f in (report.first_record_s(s) for s in stores.values()) if f is not None]
            since = min(firsts) if firsts else now
        until = now if until is None else until
        if until <= since:
            raise UsageError(f"--until must be after --since (the period is [{since:.0f}, {until:.0f}])")
        if args.sacct is not None and not any(pilots.values()):
            raise UsageError(f"--sacct {args.sacct}: no state directory given is a Slurm manager's (sacct's "
                             "records measure the wait of Slurm pilots' main jobs)")
        jobs = _sacct_jobs(args, since, until) if any(pilots.values()) else None
        reports = []
        for state_dir, store in list(stores.items()):
            try:
                reports.append(report.account(store, store.owner, since=since, until=until, now=now))
            except READ_ERRORS as e:
                pilots.pop(state_dir)
                leave_out(state_dir, e)
        if not reports:
            return 2
        main_wait = None
        if jobs is not None:
            main_wait = sacct_wait.added_wait(jobs[0], [p for p in pilots.values() if p], since_s=since, until_s=until)
            main_wait.source = jobs[1]
        result = report.combine(reports, main_wait=main_wait)
    finally:
        for s in stores.values():
            s.close()
    status = 2 if left_out else 0
    if args.csv is not None and str(args.csv) == "-":
        _emit(report.to_csv(result, args.by).rstrip("\n"), sys.stdout)
    else:
        _emit(report.format_table(result, args.by), sys.stdout)
        if args.csv is not None:
            try:
                args.csv.write_text(report.to_csv(result, args.by))
            except OSError as e:
                raise UsageError(f"--csv {args.csv}: {e.strerror or e}") from None
            _emit(f"wrote {args.csv}", sys.stdout)
    if args.png is not None:
        from ...plots import plot_harvest

        try:
            plot_harvest(result, args.png)
        except OSError as e:
            raise UsageError(f"--png {args.png}: {e.strerror or e}") from None
        _emit(f"wrote {args.png}", sys.stderr if args.csv is not None and str(args.csv) == "-" else sys.stdout)
    return status


def _sacct_jobs(args: argparse.Namespace, since: float, until: float):
    """sacct's records for the main jobs' added wait, and their source: --sacct FILE, else sacct
    itself; None (the grace bound only) when sacct is not reachable and no file was given."""
    from . import sacct_wait

    if args.sacct is not None:
        try:
            return sacct_wait.parse(args.sacct, f"--sacct {args.sacct}"), str(args.sacct)
        except sacct_wait.SacctError as e:
            raise UsageError(str(e)) from None
    try:
        return sacct_wait.read(since, until)
    except sacct_wait.SacctError as e:
        print(f"bft report: main jobs' added wait not measured ({e}): the grace granted is shown", file=sys.stderr)
        return None
