"""``bft manager``, ``bft submit``, ``bft status``, ``bft cancel``, ``bft logs``, ``bft report``: the
commands. Their arguments and the configuration file are :mod:`.cli_options`.

Every usage or environment error is one line on stderr and exit status 2 (bft.cli prints it).
"""

from __future__ import annotations

import argparse
import fcntl
import json
import math
import os
import sys
import time
from pathlib import Path
from typing import Any, Dict, List, Optional

from .._bounded import tail_lines
from ..jobs import FULL_CONFIGURATION
from .cli_options import UsageError, configuration_arg, default_state_dir, located, manager_options
from .ops import control, report_command
from .ops.keeper import KeeperError
from .sources.base import SourceError, source_class
from .statedb import jobspec
from .statedb.schema import JobState, StateError
from .statedb.store import StateStore
from .trust.addresses import check_listen_address
from .trust.files import check_private_dir


def main(args: argparse.Namespace) -> int:
    if args.command == "report":  # several state directories
        try:
            return report_command.run(args, args.state_dir or [default_state_dir()])
        except StateError as e:
            raise UsageError(str(e)) from None
    state_dir = args.state_dir if args.state_dir is not None else default_state_dir()
    if state_dir.exists() and not os.access(state_dir, os.R_OK | os.X_OK):
        # Another user's manager: every verb gets the same one line.
        raise UsageError(f"permission denied: {state_dir} belongs to another user")
    try:
        if args.command == "manager":
            if args.action == "stop":
                return _stop(state_dir)
            try:
                return _run_manager(args, state_dir)
            except (UsageError, SourceError) as e:
                raise UsageError(located(args, str(e))) from None
        if args.command == "submit":
            return _submit(args, state_dir)
        if args.command == "status":
            return _status(args, state_dir)
        if args.command == "cancel":
            answer = control.request(state_dir, {"op": "cancel", "job": args.job})
            print(f"cancelling {answer['job']}")
            return 0
        if args.command == "logs":
            return _logs(args, state_dir)
    except (control.ControlError, StateError, SourceError) as e:
        raise UsageError(str(e)) from None
    return 2


# -- manager --------------------------------------------------------------------------------------

def _private_dir(path: Path) -> None:
    """The state directory, made or checked: the control socket and the job secrets live here."""
    try:
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
        check_private_dir(path)
        if path.stat().st_mode & 0o077:  # readable by others, writable by none: nothing planted, close it
            os.chmod(path, 0o700)
    except OSError as e:
        raise UsageError(f"--state-dir {path}: {e.strerror or e}") from None
    except ValueError as e:
        raise UsageError(f"--state-dir {path}: {e}") from None


def _run_manager(args: argparse.Namespace, state_dir: Path) -> int:
    from .manager import Manager, new_identity

    try:
        options = manager_options(args)
        options.check()
        check_listen_address("--metrics-address", args.metrics_address)
    except ValueError as e:
        raise UsageError(str(e)) from None
    if not (math.isfinite(args.metrics_interval) and args.metrics_interval > 0):
        raise UsageError(f"--metrics-interval: expected a positive number of seconds, got {args.metrics_interval}")
    cls = source_class(args.source)
    # Everything the manager and its jobs create (state, logs, checkpoints) is owner-only.
    os.umask(0o077)
    # The lock first: from here on `bft submit` waits for this manager instead of saying none runs.
    _private_dir(state_dir)
    lock = open(state_dir / control.LOCK_NAME, "a+")
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        lock.seek(0)
        raise UsageError(f"a manager is already running for {state_dir} (pid {lock.read().strip() or '?'})") from None
    lock.seek(0)
    lock.truncate()
    lock.write(str(os.getpid()))
    lock.flush()
    try:
        import torch.distributed  # noqa: F401
    except ImportError:
        raise UsageError("the manager needs PyTorch: pip install 'libbft[runtime]' (torch==2.13.0)") from None
    store = StateStore(state_dir / "state.db")
    identity = store.meta("identity")
    if identity is None:
        identity = new_identity()
        store.set_meta("identity", identity)
    source = cls.from_args(args, identity, state_dir)
    exporter = _metrics_exporter(args, store)
    manager = Manager(state_dir=state_dir, source=source, store=store, identity=identity, options=options,
                      metrics=exporter)
    print(f"bft manager: {identity}, state in {state_dir}, source {args.source}, policy {args.policy}, "
          f"resize {args.resize}, {options.procs_per_node} processes per node ({options.procs_per_node_found})",
          flush=True)
    try:
        if exporter is not None:
            _start_metrics(exporter)
        return manager.run()
    except (OSError, KeeperError) as e:  # KeeperError: its listeners (--bind, --store-port, --report-port)
        raise UsageError(f"cannot start: {e}") from None
    finally:
        if exporter is not None:
            exporter.stop()


def _metrics_exporter(args: argparse.Namespace, store: StateStore):
    """The Prometheus exporter the metrics options ask for, or None."""
    if args.metrics_textfile is None and args.metrics_port is None:
        return None
    try:
        from .ops.metrics import MetricsError, MetricsExporter
    except ImportError:
        raise UsageError("--metrics-*: needs prometheus-client: pip install 'libbft[runtime]'") from None
    try:
        return MetricsExporter(store, textfile=args.metrics_textfile, port=args.metrics_port,
                               address=args.metrics_address, interval_s=args.metrics_interval,
                               job_names=args.metrics_job_names)
    except MetricsError as e:
        raise UsageError(str(e)) from None


def _start_metrics(exporter) -> None:
    from .ops.metrics import MetricsError

    try:
        url = exporter.start()
    except MetricsError as e:
        raise UsageError(str(e)) from None
    if url is not None:
        print(f"bft manager: metrics on {url}", flush=True)


def _stop(state_dir: Path) -> int:
    control.request(state_dir, {"op": "stop"}, timeout_s=None)
    print("manager stopped")
    return 0


# -- submit ---------------------------------------------------------------------------------------

def _submit(args: argparse.Namespace, state_dir: Path) -> int:
    script = args.script.resolve()
    if not script.is_file():
        raise UsageError(f"{args.script}: no such training script")
    script_args = list(args.script_args)
    curve = None
    if args.curve is not None:
        try:
            curve = jobspec.read_curve(args.curve, "--curve")
        except ValueError as e:
            raise UsageError(str(e)) from None
    configurations = [configuration_arg(text) for text in args.configuration]
    try:
        jobspec.check_rates(curve, jobspec.check_configurations(configurations), args.max_nodes)
    except ValueError as e:
        raise UsageError(str(e)) from None
    name = args.name or f"{script.stem}-{time.strftime('%H%M%S')}-{os.getpid() % 1000:03d}"
    request: Dict[str, Any] = {"op": "submit", "name": name, "script": str(script), "args": script_args,
                               "cwd": os.getcwd(), "python": args.python, "min_nodes": args.min_nodes,
                               "max_nodes": args.max_nodes, "work": args.samples, "curve": curve,
                               "configurations": configurations}
    if args.retries is not None:
        request["max_retries"] = args.retries
    if args.resize is not None:
        request["resize"] = args.resize
    if args.procs_per_node is not None:
        request["procs_per_node"] = args.procs_per_node
    answer = control.request(state_dir, request, appear_s=control.SUBMIT_WAIT_S)
    print(answer["job"])
    return 0


# -- status ---------------------------------------------------------------------------------------

def _status(args: argparse.Namespace, state_dir: Path) -> int:
    try:
        status = control.request(state_dir, {"op": "status"})["status"]
    except control.ControlError as e:
        if not (state_dir / "state.db").exists():
            raise
        status = _offline_status(state_dir, str(e))
    if args.json:
        json.dump(status, sys.stdout, indent=2)
        print()
    else:
        print(format_status(status))
    return 0


def _offline_status(state_dir: Path, why: str) -> Dict[str, Any]:
    """What the state file says while no manager runs."""
    store = StateStore(state_dir / "state.db", create=False, read_only=True)
    jobs = [j.status() for j in store.jobs()]
    store.close()
    return {"manager": None, "offline": why, "nodes": {"pool": [], "used": {}}, "jobs": jobs}


def _si(x: Optional[float]) -> str:
    if x is None:
        return "-"
    for unit, scale in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(x) >= scale:
            return f"{x / scale:.3g}{unit}"
    return f"{x:.3g}"


def _duration(s: Optional[float]) -> str:
    if s is None:
        return "-"
    s = int(round(s))
    return f"{s // 3600}h{s % 3600 // 60:02d}m" if s >= 3600 else f"{s // 60}m{s % 60:02d}s" if s >= 60 else f"{s}s"


def format_status(status: Dict[str, Any]) -> str:
    lines: List[str] = []
    m = status.get("manager")
    if m is None:
        lines.append(f"manager: not running ({status.get('offline', '')}); jobs as last saved")
    else:
        src = m["source"]
        p50 = m["decision_p50_s"]
        lines.append(f"manager {m['identity']} (pid {m['pid']}): source {src.get('source')}, policy {m['policy']}, "
                     f"resize {m['resize']}, {m.get('procs_per_node', 1)} processes per node; "
                     f"{m['decisions']} decisions"
                     + (f", median {p50 * 1e3:.1f} ms" if p50 is not None else "")
                     + (f"; {m['bad_reports']} reports dropped ("
                        + ", ".join(f"{k} {v}" for k, v in m.get("dropped_reports", {}).items() if v) + ")"
                        if m["bad_reports"] else "")
                     + ("; stopping" if m["stopping"] else ""))
        used = status["nodes"]["used"]
        unused = status["nodes"].get("unused")
        lines.append(f"nodes: {len(status['nodes']['pool'])} in the pool, {len(used)} training"
                     + (f"; {len(unused['nodes'])} unused: {unused['why']}" if unused and unused["nodes"] else ""))
    header = ("JOB", "STATE", "NODES", "PROCS", "RANGE", "RESIZE", "SAMPLES", "WORK", "RATE/s", "ETA", "RETRIES")
    # The configuration column only when a job declares configurations (bft submit --configuration).
    configurations = any(j.get("configurations") for j in status["jobs"])
    if configurations:
        header += ("CONFIGURATION",)
    rows = [header]
    for j in status["jobs"]:
        state = j["state"] + (" (resizing)" if j.get("resizing") else "")
        nodes = str(len(j["nodes"])) if "nodes" in j else "-"
        # The training processes of its nodes (world size), and how many each node runs.
        procs = f"{j['world_size']} ({j.get('procs_per_node', 1)}/node)" if "world_size" in j else "-"
        row = (j["id"], state, nodes, procs, f"{j['min_nodes']}..{j['max_nodes']}", j.get("resize") or "-",
               _si(j["samples"]), _si(j["work"]),
               _si(j.get("rate")) if "rate" in j else "-", _duration(j.get("eta_s")), str(j["retries"]))
        rows.append(row + ((j.get("configuration", FULL_CONFIGURATION),) if configurations else ()))
    widths = [max(len(r[k]) for r in rows) for k in range(len(header))]
    for r in rows:
        lines.append("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip())
    for j in status["jobs"]:
        if j["state"] in (JobState.FAILED, JobState.INCOMPLETE) and j["reason"]:
            lines.append(f"{j['id']} {j['state']}: {j['reason'].splitlines()[0]} (bft logs {j['id']})")
        elif j.get("waiting"):
            lines.append(f"{j['id']} waiting {_duration(j.get('waiting_s'))} since "
                         f"{'it stopped' if j.get('waiting_since') == 'stopped' else 'submit'}: {j['waiting']}")
        elif j.get("warning"):
            lines.append(f"{j['id']}: {j['warning']}")
    return "\n".join(lines)


# -- logs -----------------------------------------------------------------------------------------

def _logs(args: argparse.Namespace, state_dir: Path) -> int:
    path = state_dir / "jobs" / args.job / "output.log"
    if not jobspec.JOB_NAME.fullmatch(args.job) or not path.exists():
        raise UsageError(f"no log for a job named {args.job!r} in {state_dir}")
    if args.lines < 0:
        raise UsageError("--lines must be >= 0")
    if args.lines:  # read backwards from the end: a log of gigabytes costs what is shown
        sys.stdout.write("\n".join(tail_lines(path, args.lines)) + "\n")
        return 0
    with open(path, "rb") as f:  # the whole log, a line at a time
        for line in f:
            sys.stdout.write(line.decode("utf-8", "replace").rstrip("\r\n") + "\n")
    return 0
