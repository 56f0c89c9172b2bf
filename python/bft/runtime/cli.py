"""``bft manager``, ``bft submit``, ``bft status``, ``bft cancel``, ``bft logs``.

Every usage or environment error is one line on stderr and exit status 2 (bft.cli prints it).
"""

from __future__ import annotations

import argparse
import fcntl
import json
import math
import os
import re
import stat
import sys
import time
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

from .. import alloc, sim
from .._bounded import read_json, tail_lines
from . import control
from .curvebook import INPLACE_SCALE_DOWN_S, INPLACE_SCALE_UP_S
from .launcher import default_python
from .nodes import SourceError, source_class, source_names
from .resize import AUTO, RESIZE_CHOICES, RESIZE_METHODS
from .state import StateError, StateStore


class UsageError(Exception):
    """One line for stderr; exit status 2."""


def default_state_dir() -> Path:
    if os.environ.get("BFT_STATE_DIR"):
        return Path(os.environ["BFT_STATE_DIR"])
    base = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    return Path(base) / "bft"


def _state_dir_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--state-dir", type=Path, default=None, metavar="DIR",
                   help="the manager's private directory (default: $BFT_STATE_DIR, else ~/.local/state/bft)")


def add_parsers(sub) -> None:
    from . import local, slurm  # noqa: F401 - registers the node sources

    p = sub.add_parser("manager", help="run the runtime manager (or: bft manager stop)",
                       description="Adopt idle nodes from a node source and run elastic PyTorch jobs on them, "
                       "growing and shrinking them as the allocator decides (docs/runtime.md).")
    p.add_argument("action", nargs="?", choices=("run", "stop"), default="run",
                   help="run (default) or stop the manager of --state-dir")
    _state_dir_arg(p)
    p.add_argument("--source", default="local", help=f"node source: {', '.join(source_names())} (default local)")
    p.add_argument("--policy", default=sim.DEFAULT_POLICY,
                   help=f"allocation policy: {', '.join(alloc.SOLVERS)} (default {sim.DEFAULT_POLICY})")
    p.add_argument("--resize", default=AUTO,
                   help=f"how a job changes size unless it asks (bft submit --resize): {', '.join(RESIZE_METHODS)}, "
                   f"or {AUTO} (default): inplace for a script that uses bft.train.ElasticState, relaunch for "
                   "others (docs/runtime.md)")
    p.add_argument("--inplace-timeout", type=float, default=30.0, metavar="S",
                   help="--resize inplace: seconds a resize may take before the job is relaunched (default 30)")
    p.add_argument("--standby", action=argparse.BooleanOptionalAction, default=None,
                   help="a warm standby process (torch imported) on every idle node, so a job resized in place "
                   "starts at once there (default: on unless --resize relaunch or membership)")
    p.add_argument("--tfwd", type=float, default=alloc.DEFAULT_TFWD_S,
                   help=f"allocator's forward-looking time in seconds (default {alloc.DEFAULT_TFWD_S:g})")
    p.add_argument("--max-jobs", type=int, default=sim.DEFAULT_MAX_JOBS,
                   help=f"most jobs admitted at once, FCFS (default {sim.DEFAULT_MAX_JOBS})")
    p.add_argument("--grace", type=float, default=20.0,
                   help="seconds a job has to checkpoint after SIGTERM before it is killed (default 20)")
    p.add_argument("--max-retries", type=int, default=2, help="retries of a failing job (default 2)")
    p.add_argument("--report-timeout", type=float, default=60.0,
                   help="seconds a running job may go without a progress report before it is flagged and gets "
                        "the lowest priority (default 60)")
    p.add_argument("--scale-up-s", type=float, default=5.0, help="grow cost assumed until measured (default 5)")
    p.add_argument("--scale-down-s", type=float, default=5.0, help="shrink cost assumed until measured (default 5)")
    p.add_argument("--inplace-scale-up-s", type=float, default=INPLACE_SCALE_UP_S,
                   help=f"in-place grow cost assumed until measured (default {INPLACE_SCALE_UP_S:g})")
    p.add_argument("--inplace-scale-down-s", type=float, default=INPLACE_SCALE_DOWN_S,
                   help=f"in-place shrink cost assumed until measured (default {INPLACE_SCALE_DOWN_S:g})")
    p.add_argument("--bind", default="",
                   help="address the rendezvous store and the report socket listen on (default: the address the "
                        "source's nodes reach the manager at; 127.0.0.1 for the local source)")
    p.add_argument("--store-port", type=int, default=0, help="rendezvous store port (default: any free)")
    p.add_argument("--report-port", type=int, default=0, help="progress report UDP port (default: any free)")
    p.add_argument("--metrics-textfile", type=Path, metavar="FILE",
                   help="write Prometheus metrics to FILE (ending .prom) for node_exporter's textfile collector, "
                   "replaced atomically every --metrics-interval (docs/runtime.md, \"Metrics\")")
    p.add_argument("--metrics-port", type=int, metavar="PORT",
                   help="serve Prometheus metrics over HTTP on PORT of --metrics-address (0: a free port)")
    p.add_argument("--metrics-address", default="127.0.0.1", metavar="ADDR",
                   help="the one address --metrics-port listens on, never a wildcard (default 127.0.0.1; give the "
                   "--bind address for a Prometheus on another host)")
    p.add_argument("--metrics-interval", type=float, default=5.0, metavar="S",
                   help="seconds between two snapshots of the metrics (default 5)")
    p.add_argument("--config", type=Path, metavar="FILE",
                   help="a TOML file of these options: keys are the long option names without '--' "
                   "(max-jobs = 4, standby = false); options given on the command line override it")
    for name in source_names():
        source_class(name).add_arguments(p)

    p = sub.add_parser("submit", help="submit a training script to the manager",
                       description="Submit an elastic training job: SCRIPT runs under torchrun on 0 or "
                       "MIN..MAX nodes. Arguments after -- go to the script.")
    p.add_argument("script", type=Path, help="the training script (it imports bft.train)")
    p.add_argument("script_args", nargs="*", metavar="-- ARGS", help="arguments for the script, after --")
    p.add_argument("--min", type=int, default=1, dest="min_nodes", help="fewest nodes the job runs on (default 1)")
    p.add_argument("--max", type=int, default=8, dest="max_nodes", help="most nodes (default 8)")
    p.add_argument("--name", help="job name (default: the script's name and a number)")
    p.add_argument("--samples", type=float, help="the job's work in samples (BFT_TARGET_SAMPLES; shows an ETA)")
    p.add_argument("--curve", type=Path,
                   help="JSON {\"nodes\": [...], \"throughput\": [...]}: a prior throughput curve (samples/s)")
    p.add_argument("--configuration", action="append", default=[], metavar="NAME:EFFICIENCY[:SPEEDUP]",
                   help="another way the script can run (structured partial backpropagation, docs/spb.md), "
                   "repeatable: the script reads NAME from bft.train.configuration(); EFFICIENCY (0..1] is what a "
                   "sample processed in it is worth against full backpropagation; SPEEDUP (default 1) its samples/s "
                   "over full backpropagation's, assumed until measured")
    p.add_argument("--retries", type=int, help="retries if the job fails (default: the manager's --max-retries)")
    p.add_argument("--resize", metavar="METHOD",
                   help=f"how this job changes size: {', '.join(RESIZE_CHOICES)} (default: the manager's "
                   "--resize; docs/runtime.md)")
    p.add_argument("--python", default=default_python(), help="Python interpreter for the job (default: this one)")
    _state_dir_arg(p)

    p = sub.add_parser("status", help="jobs, nodes, rates and progress of the manager")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    _state_dir_arg(p)

    p = sub.add_parser("cancel", help="cancel a job")
    p.add_argument("job")
    _state_dir_arg(p)

    p = sub.add_parser("report", help="accounting: node-hours harvested and used, samples, losses, per job or user",
                       description="What the idle nodes produced over a period, from the state directory's "
                       "state.db (docs/runtime.md, \"Accounting\"); works with or without a running manager.")
    p.add_argument("--since", metavar="TIME",
                   help="start of the period: YYYY-MM-DD[ HH:MM[:SS]] (local time) or seconds since the epoch "
                   "(default: the first record)")
    p.add_argument("--until", metavar="TIME", help="end of the period (default: now)")
    p.add_argument("--by", choices=("job", "user"), default="job", help="one row per job (default) or per user")
    p.add_argument("--csv", type=Path, metavar="FILE", help="write the rows as CSV to FILE ('-': standard output, "
                   "instead of the table)")
    p.add_argument("--png", type=Path, metavar="FILE", help="plot idle nodes in the pool and nodes used over time")
    _state_dir_arg(p)

    p = sub.add_parser("logs", help="print a job's output")
    p.add_argument("job")
    p.add_argument("-n", "--lines", type=int, default=50, help="last N lines (default 50; 0: all)")
    _state_dir_arg(p)


COMMANDS = ("manager", "submit", "status", "cancel", "logs", "report")


# -- the configuration file -------------------------------------------------------------------------

def with_config(manager_parser: argparse.ArgumentParser, argv: List[str]) -> List[str]:
    """`bft manager ... --config FILE ...`: the file's settings as options placed before the command
    line's own, so that those override them (argparse keeps an option's last value). The keys are the
    manager parser's own long options without '--': the one list of flags, nothing to keep in step."""
    if argv[:1] != ["manager"]:
        return argv
    path: Optional[str] = None
    for k, token in enumerate(argv):
        if token == "--config" and k + 1 < len(argv):
            path = argv[k + 1]
        elif token.startswith("--config="):
            path = token.split("=", 1)[1]
    if path is None:
        return argv
    given = {token.split("=", 1)[0] for token in argv[1:] if token.startswith("--")}
    options, origins = [], {}
    for flag, token, where in config_options(manager_parser, Path(path)):
        options.append(token)
        if flag not in given and f"--no-{flag[2:]}" not in given:
            origins[flag] = where
    # Where each setting that is not overridden came from: an error about its value names the line.
    manager_parser.set_defaults(config_origins=origins)
    return ["manager", *options, *argv[1:]]


def located(args: argparse.Namespace, message: str) -> str:
    """An error about an option whose value came from the configuration file, prefixed with its file
    and line (the checks name the option: "--max-jobs must be >= 1")."""
    flag = re.match(r"--[a-z0-9-]+", message)
    where = getattr(args, "config_origins", {}).get(flag.group() if flag else "")
    return f"{where}: {message}" if where else message


def config_options(parser: argparse.ArgumentParser, path: Path) -> List[Tuple[str, str, str]]:
    """The options that a TOML configuration file sets, checked: (flag, command-line token, "file:line")
    each; a bad file, key or value raises UsageError naming the file and line."""
    try:
        import tomllib
    except ImportError:  # Python < 3.11
        raise UsageError(f"--config {path}: reading TOML needs Python 3.11 or newer") from None
    try:
        text = path.read_text()
    except OSError as e:
        raise UsageError(f"--config {path}: {e.strerror or e}") from None
    except UnicodeDecodeError:
        raise UsageError(f"--config {path}: not UTF-8 text") from None
    try:
        settings = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise UsageError(f"--config {path}: not TOML: {e}") from None
    actions = {option[2:]: action for action in parser._actions for option in action.option_strings
               if option.startswith("--")}
    out: List[Tuple[str, str, str]] = []
    for key, value in settings.items():
        where = f"{path}:{_key_line(text, key)}"
        action = actions.get(key)
        if action is None or key in ("config", "help"):
            raise UsageError(f"{where}: unknown key {key!r} (keys are bft manager's long options without '--'; "
                             "bft manager --help lists them)")
        flag = f"--{key}"
        if action.nargs == 0:  # a switch: true or false
            if not isinstance(value, bool):
                raise UsageError(f"{where}: {key}: expected true or false, got {value!r}")
            if isinstance(action, argparse.BooleanOptionalAction):
                out.append((flag, flag if value else f"--no-{key}", where))
            elif value:
                out.append((flag, flag, where))
            continue
        if isinstance(value, bool) or not isinstance(value, (str, int, float)):
            raise UsageError(f"{where}: {key}: expected a string or a number, got {value!r}")
        text_value = str(value)
        try:
            converted = action.type(text_value) if callable(action.type) else text_value
        except (TypeError, ValueError, argparse.ArgumentTypeError):
            raise UsageError(f"{where}: {key}: {value!r} is not a valid value") from None
        if action.choices is not None and converted not in action.choices:
            raise UsageError(f"{where}: {key}: {value!r} is not one of {', '.join(map(str, action.choices))}")
        out.append((flag, f"{flag}={text_value}", where))  # one token: a value beginning with "-" stays a value
    return out


def _key_line(text: str, key: str) -> int:
    """The line of a top-level key's assignment (tomllib keeps no positions)."""
    pattern = re.compile(rf"""\s*(?:{re.escape(key)}|"{re.escape(key)}"|'{re.escape(key)}')\s*[=.]""")
    for number, line in enumerate(text.splitlines(), 1):
        if line.lstrip().startswith("["):  # a table: the keys after it are not top-level
            header = line.strip().strip("[]").strip()
            if header.strip('"\'') == key:
                return number
            continue
        if pattern.match(line):
            return number
    return 1


def main(args: argparse.Namespace) -> int:
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
        if args.command == "report":
            return _report(args, state_dir)
    except (control.ControlError, StateError, SourceError) as e:
        raise UsageError(str(e)) from None
    return 2


# -- manager --------------------------------------------------------------------------------------

def _private_dir(path: Path) -> None:
    try:
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
        st = path.stat()
    except OSError as e:
        raise UsageError(f"--state-dir {path}: {e.strerror or e}") from None
    if not stat.S_ISDIR(st.st_mode):
        raise UsageError(f"--state-dir {path}: not a directory")
    if st.st_uid != os.getuid():
        raise UsageError(f"--state-dir {path}: owned by another user")
    if st.st_mode & 0o077:
        os.chmod(path, 0o700)  # the control socket and the job secrets live here


def _run_manager(args: argparse.Namespace, state_dir: Path) -> int:
    from .manager import Manager, ManagerOptions, new_identity

    options = ManagerOptions(policy=args.policy, resize=args.resize, tfwd_s=args.tfwd, max_jobs=args.max_jobs,
                             bind_address=args.bind, store_port=args.store_port, report_port=args.report_port,
                             grace_s=args.grace, scale_up_s=args.scale_up_s, scale_down_s=args.scale_down_s,
                             inplace_scale_up_s=args.inplace_scale_up_s, inplace_scale_down_s=args.inplace_scale_down_s,
                             max_retries=args.max_retries, report_timeout_s=args.report_timeout,
                             inplace_timeout_s=args.inplace_timeout, standby=args.standby)
    try:
        options.check()
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
    manager = Manager(state_dir, source, store, identity, options, metrics=exporter)
    print(f"bft manager: {identity}, state in {state_dir}, source {args.source}, policy {args.policy}, "
          f"resize {args.resize}", flush=True)
    try:
        if exporter is not None:
            _start_metrics(exporter)
        return manager.run()
    except OSError as e:
        raise UsageError(f"cannot start: {e}") from None
    finally:
        if exporter is not None:
            exporter.stop()


def _metrics_exporter(args: argparse.Namespace, store: StateStore):
    """The Prometheus exporter the metrics options ask for, or None."""
    if args.metrics_textfile is None and args.metrics_port is None:
        return None
    try:
        from .metrics import MetricsError, MetricsExporter
    except ImportError:
        raise UsageError("--metrics-*: needs prometheus-client: pip install 'libbft[runtime]'") from None
    try:
        return MetricsExporter(store, args.metrics_textfile, args.metrics_port, args.metrics_address,
                               args.metrics_interval)
    except MetricsError as e:
        raise UsageError(str(e)) from None


def _start_metrics(exporter) -> None:
    from .metrics import MetricsError

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
            curve = read_json(args.curve, "--curve")
            control.check_curve(curve, f"--curve {args.curve}")
        except ValueError as e:
            raise UsageError(str(e)) from None
    configurations = [_configuration_arg(text) for text in args.configuration]
    try:
        control.check_rates(curve, control.check_configurations(configurations), args.max_nodes)
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
    answer = control.request(state_dir, request, appear_s=control.SUBMIT_WAIT_S)
    print(answer["job"])
    return 0


def _configuration_arg(text: str) -> Dict[str, Any]:
    """--configuration NAME:EFFICIENCY[:SPEEDUP] as the request's dict (checked by control)."""
    parts = text.split(":")
    if len(parts) not in (2, 3):
        raise UsageError(f"--configuration {text!r}: expected NAME:EFFICIENCY[:SPEEDUP], e.g. spb-d2:0.8:1.4")
    out: Dict[str, Any] = {"name": parts[0]}
    for key, value in zip(("efficiency", "speedup"), parts[1:]):
        try:
            out[key] = float(value)
        except ValueError:
            raise UsageError(f"--configuration {text!r}: {key} {value!r} is not a number") from None
    return out


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
                     f"resize {m['resize']}; {m['decisions']} decisions"
                     + (f", median {p50 * 1e3:.1f} ms" if p50 is not None else "")
                     + (f"; {m['bad_reports']} reports dropped ("
                        + ", ".join(f"{k} {v}" for k, v in m.get("dropped_reports", {}).items() if v) + ")"
                        if m["bad_reports"] else "")
                     + ("; stopping" if m["stopping"] else ""))
        used = status["nodes"]["used"]
        unused = status["nodes"].get("unused")
        lines.append(f"nodes: {len(status['nodes']['pool'])} in the pool, {len(used)} training"
                     + (f"; {len(unused['nodes'])} unused: {unused['why']}" if unused and unused["nodes"] else ""))
    header = ("JOB", "STATE", "NODES", "RANGE", "RESIZE", "SAMPLES", "WORK", "RATE/s", "ETA", "RETRIES")
    # The configuration column only when a job declares configurations (bft submit --configuration).
    configurations = any(j.get("configurations") for j in status["jobs"])
    if configurations:
        header += ("CONFIGURATION",)
    rows = [header]
    for j in status["jobs"]:
        state = j["state"] + (" (resizing)" if j.get("resizing") else "")
        nodes = str(len(j["nodes"])) if "nodes" in j else "-"
        row = (j["id"], state, nodes, f"{j['min_nodes']}..{j['max_nodes']}", j.get("resize") or "-",
               _si(j["samples"]), _si(j["work"]),
               _si(j.get("rate")) if "rate" in j else "-", _duration(j.get("eta_s")), str(j["retries"]))
        rows.append(row + ((j.get("configuration", "full"),) if configurations else ()))
    widths = [max(len(r[k]) for r in rows) for k in range(len(header))]
    for r in rows:
        lines.append("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip())
    for j in status["jobs"]:
        if j["state"] in ("failed", "incomplete") and j["reason"]:
            lines.append(f"{j['id']} {j['state']}: {j['reason'].splitlines()[0]} (bft logs {j['id']})")
        elif j.get("waiting"):
            lines.append(f"{j['id']} waiting {_duration(j.get('waiting_s'))} since "
                         f"{'it stopped' if j.get('waiting_since') == 'stopped' else 'submit'}: {j['waiting']}")
        elif j.get("warning"):
            lines.append(f"{j['id']}: {j['warning']}")
    return "\n".join(lines)


# -- report ---------------------------------------------------------------------------------------

def _report_time(text: Optional[str], flag: str) -> Optional[float]:
    if text is None:
        return None
    try:
        return float(text)
    except ValueError:
        pass
    for form in ("%Y-%m-%d %H:%M:%S", "%Y-%m-%dT%H:%M:%S", "%Y-%m-%d %H:%M", "%Y-%m-%dT%H:%M", "%Y-%m-%d"):
        try:
            return time.mktime(time.strptime(text, form))
        except ValueError:
            continue
    raise UsageError(f"{flag}: not a time: {text!r} (YYYY-MM-DD[ HH:MM[:SS]] or seconds since the epoch)")


def _report(args: argparse.Namespace, state_dir: Path) -> int:
    from . import report

    since, until = _report_time(args.since, "--since"), _report_time(args.until, "--until")
    if not (state_dir / "state.db").exists():
        raise UsageError(f"no manager state in {state_dir} (--state-dir)")
    store = StateStore(state_dir / "state.db", create=False, read_only=True)
    try:
        result = report.account(store, report.owner_of(state_dir), since, until)
    except ValueError as e:
        raise UsageError(str(e)) from None
    finally:
        store.close()
    if args.csv is not None and str(args.csv) == "-":
        sys.stdout.write(report.to_csv(result, args.by))
    else:
        print(report.format_table(result, args.by))
        if args.csv is not None:
            try:
                args.csv.write_text(report.to_csv(result, args.by))
            except OSError as e:
                raise UsageError(f"--csv {args.csv}: {e.strerror or e}") from None
            print(f"wrote {args.csv}")
    if args.png is not None:
        from ..plots import plot_harvest

        try:
            plot_harvest(result, args.png)
        except OSError as e:
            raise UsageError(f"--png {args.png}: {e.strerror or e}") from None
        print(f"wrote {args.png}", file=sys.stderr if args.csv is not None and str(args.csv) == "-" else sys.stdout)
    return 0


# -- logs -----------------------------------------------------------------------------------------

def _logs(args: argparse.Namespace, state_dir: Path) -> int:
    path = state_dir / "jobs" / args.job / "output.log"
    if not control.JOB_NAME.fullmatch(args.job) or not path.exists():
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
