"""``bft manager``'s and the other runtime commands' arguments: the table of options (its defaults
read from :class:`bft.runtime.options.ManagerOptions`, the node sources' from the registry) and the
``--config`` TOML file that sets the same options. The commands themselves are :mod:`.cli`."""

from __future__ import annotations

import argparse
import os
import re
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

from .. import alloc, curve
from .jobs.launcher import default_python
from .jobs.resize import AUTO, RESIZE_CHOICES, RESIZE_METHODS
from .options import DEFAULTS, METRICS_ADDRESS, METRICS_INTERVAL_S, ManagerOptions, resolve_procs_per_node
from .sources.base import source_class, source_names
from .statedb.jobspec import DEFAULT_SPEEDUP
from .trust.files import read_owned_file

CONFIG_MAX_BYTES = 1 << 20  # a configuration file is a few lines


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
    p = sub.add_parser("manager", help="run the runtime manager (or: bft manager stop)",
                       description="Adopt idle nodes from a node source and run elastic PyTorch jobs on them, "
                       "growing and shrinking them as the allocator decides (docs/runtime.md).")
    p.add_argument("action", nargs="?", choices=("run", "stop"), default="run",
                   help="run or stop the manager of --state-dir (default %(default)s)")
    _state_dir_arg(p)
    p.add_argument("--source", default="local", help=f"node source: {', '.join(source_names())} (default %(default)s)")
    p.add_argument("--policy", default=DEFAULTS.policy,
                   help=f"allocation policy: {', '.join(alloc.SOLVERS)} (default %(default)s)")
    p.add_argument("--resize", default=DEFAULTS.resize,
                   help=f"how a job changes size unless it asks (bft submit --resize): {', '.join(RESIZE_METHODS)}, "
                   f"or {AUTO}: inplace for a script that uses bft.train.ElasticState, relaunch for others "
                   "(default %(default)s; docs/runtime.md)")
    p.add_argument("--inplace-timeout", type=float, default=DEFAULTS.inplace_timeout_s, metavar="S",
                   help="--resize inplace: seconds a resize may take before the job is relaunched "
                   "(default %(default)g)")
    p.add_argument("--standby", action=argparse.BooleanOptionalAction, default=DEFAULTS.standby,
                   help="a warm standby process (torch imported) on every idle node, so a job resized in place "
                   "starts at once there (default: on unless --resize relaunch or membership)")
    p.add_argument("--procs-per-node", default=str(DEFAULTS.procs_per_node), metavar="N|auto",
                   help="processes a job runs on each node, one per device (LOCAL_RANK), unless it asks for fewer "
                   "(bft submit --procs-per-node); auto: this host's accelerators, from CUDA_VISIBLE_DEVICES, "
                   "Slurm's GPUs (SLURM_GPUS_ON_NODE, SLURM_STEP_GPUS, SLURM_JOB_GPUS) or torch.cuda.device_count(), "
                   "else 1 (default %(default)s; docs/runtime.md)")
    p.add_argument("--objective", choices=curve.OBJECTIVES, default=DEFAULTS.objective,
                   help="what the allocator maximises for each job: throughput (samples/s) or speedup (over the "
                   "job's own one-node rate, learned like its curve; docs/curve.md) (default %(default)s)")
    p.add_argument("--tfwd", type=float, default=DEFAULTS.tfwd_s,
                   help="allocator's forward-looking time in seconds (default %(default)g)")
    p.add_argument("--max-jobs", type=int, default=DEFAULTS.max_jobs,
                   help="most jobs admitted at once, FCFS (default %(default)s)")
    p.add_argument("--grace", type=float, default=DEFAULTS.checkpoint_grace_s,
                   help="seconds a job has to checkpoint after SIGTERM before it is killed "
                   "(default %(default)g)")
    p.add_argument("--max-retries", type=int, default=DEFAULTS.max_retries,
                   help="retries of a failing job (default %(default)s)")
    p.add_argument("--report-timeout", type=float, default=DEFAULTS.report_timeout_s,
                   help="seconds a running job may go without a progress report before it is flagged and gets "
                        "the lowest priority (default %(default)g)")
    p.add_argument("--scale-up-s", type=float, default=DEFAULTS.scale_up_s,
                   help="grow cost assumed until measured (default %(default)g)")
    p.add_argument("--scale-down-s", type=float, default=DEFAULTS.scale_down_s,
                   help="shrink cost assumed until measured (default %(default)g)")
    p.add_argument("--inplace-scale-up-s", type=float, default=DEFAULTS.inplace_scale_up_s,
                   help="in-place grow cost assumed until measured (default %(default)g)")
    p.add_argument("--inplace-scale-down-s", type=float, default=DEFAULTS.inplace_scale_down_s,
                   help="in-place shrink cost assumed until measured (default %(default)g)")
    p.add_argument("--bind", default=DEFAULTS.bind_address,
                   help="address the rendezvous store and the report socket listen on (default: the address the "
                        "source's nodes reach the manager at; 127.0.0.1 for the local source)")
    p.add_argument("--store-port", type=int, default=DEFAULTS.store_port,
                   help="rendezvous store port (default %(default)s: any free one)")
    p.add_argument("--report-port", type=int, default=DEFAULTS.report_port,
                   help="progress report UDP port (default %(default)s: any free one)")
    p.add_argument("--metrics-textfile", type=Path, metavar="FILE",
                   help="write Prometheus metrics to FILE (ending .prom) for node_exporter's textfile collector, "
                   "replaced atomically every --metrics-interval (docs/runtime.md, \"Metrics\")")
    p.add_argument("--metrics-port", type=int, metavar="PORT",
                   help="serve Prometheus metrics over HTTP on PORT of --metrics-address (0: a free port)")
    p.add_argument("--metrics-address", default=METRICS_ADDRESS, metavar="ADDR",
                   help="the one address --metrics-port listens on, never a wildcard (default %(default)s; "
                   "give the --bind address for a Prometheus on another host)")
    p.add_argument("--metrics-job-names", action="store_true",
                   help="label the jobs' series with their names; without it a job is a keyed hash of its name, "
                   "so whoever reads the metrics learns no job's name (docs/security.md, \"Metrics\")")
    p.add_argument("--metrics-interval", type=float, default=METRICS_INTERVAL_S, metavar="S",
                   help="seconds between two snapshots of the metrics (default %(default)g)")
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
    p.add_argument("--min", type=int, default=1, dest="min_nodes",
                   help="fewest nodes the job runs on (default %(default)s)")
    p.add_argument("--max", type=int, default=8, dest="max_nodes", help="most nodes (default %(default)s)")
    p.add_argument("--name", help="job name (default: the script's name and a number)")
    p.add_argument("--samples", type=float, help="the job's work in samples (BFT_TARGET_SAMPLES; shows an ETA)")
    p.add_argument("--curve", type=Path,
                   help="JSON {\"nodes\": [...], \"throughput\": [...]}: a prior throughput curve (samples/s)")
    p.add_argument("--configuration", action="append", default=[], metavar="NAME:EFFICIENCY[:SPEEDUP]",
                   help="another way the script can run (structured partial backpropagation, docs/spb.md), "
                   "repeatable: the script reads NAME from bft.train.configuration(); EFFICIENCY (0..1] is what a "
                   "sample processed in it is worth against full backpropagation; SPEEDUP "
                   f"(default {DEFAULT_SPEEDUP:g}) its samples/s over full backpropagation's, assumed until measured")
    p.add_argument("--retries", type=int, help="retries if the job fails (default: the manager's --max-retries)")
    p.add_argument("--resize", metavar="METHOD",
                   help=f"how this job changes size: {', '.join(RESIZE_CHOICES)} (default: the manager's "
                   "--resize; docs/runtime.md)")
    p.add_argument("--procs-per-node", type=int, metavar="N",
                   help="processes on each of the job's nodes (default: the manager's --procs-per-node, which is "
                   "also the most it accepts)")
    p.add_argument("--python", default=default_python(),
                   help="Python interpreter for the job (default: this one, %(default)s)")
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
    p.add_argument("--by", choices=("job", "user"), default="job",
                   help="one row per job or per user (default %(default)s)")
    p.add_argument("--csv", type=Path, metavar="FILE", help="write the rows as CSV to FILE ('-': standard output, "
                   "instead of the table)")
    p.add_argument("--png", type=Path, metavar="FILE", help="plot idle nodes in the pool and nodes used over time")
    p.add_argument("--sacct", type=Path, metavar="FILE",
                   help="Slurm managers: the main jobs' added wait from this saved `sacct --allusers --allocations "
                   "--parsable2 --format=JobID,JobName,Eligible,Start,End,NodeList` output (default: run sacct; "
                   "without it, the grace granted, an upper bound)")
    p.add_argument("--state-dir", type=Path, action="append", metavar="DIR",
                   help="a manager's state directory; give it once per user to account several users' managers, "
                   "each directory's jobs being its owner's (default: $BFT_STATE_DIR, else ~/.local/state/bft)")

    p = sub.add_parser("logs", help="print a job's output")
    p.add_argument("job")
    p.add_argument("-n", "--lines", type=int, default=50, help="last N lines (0: all; default %(default)s)")
    _state_dir_arg(p)


def manager_options(args: argparse.Namespace) -> ManagerOptions:
    """The manager's options from ``bft manager``'s parsed arguments (unchecked: ManagerOptions.check;
    ValueError for a --procs-per-node that is neither a number nor auto)."""
    procs_per_node, found = resolve_procs_per_node(args.procs_per_node)
    return ManagerOptions(procs_per_node=procs_per_node, procs_per_node_found=found,
                          policy=args.policy, resize=args.resize, tfwd_s=args.tfwd, objective=args.objective,
                          max_jobs=args.max_jobs,
                          bind_address=args.bind, store_port=args.store_port, report_port=args.report_port,
                          checkpoint_grace_s=args.grace, scale_up_s=args.scale_up_s, scale_down_s=args.scale_down_s,
                          inplace_scale_up_s=args.inplace_scale_up_s, inplace_scale_down_s=args.inplace_scale_down_s,
                          max_retries=args.max_retries, report_timeout_s=args.report_timeout,
                          inplace_timeout_s=args.inplace_timeout, standby=args.standby)


COMMANDS = ("manager", "submit", "status", "cancel", "logs", "report")


def configuration_arg(text: str) -> Dict[str, Any]:
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
        text = read_owned_file(path, CONFIG_MAX_BYTES).decode()
    except UnicodeDecodeError:
        raise UsageError(f"--config {path}: not UTF-8 text") from None
    except ValueError as e:  # another user's, writable by others, a link, not a file, too large
        raise UsageError(f"--config {path}: {e}") from None
    try:
        settings = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise UsageError(f"--config {path}: not TOML: {e}") from None
    except RecursionError:
        raise UsageError(f"--config {path}: nested too deeply to be read (a manager's settings are flat)") from None
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
