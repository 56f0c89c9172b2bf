"""The ``bft`` command line: ``bft replay`` replays an idle-node trace with a workload of elastic jobs;
``bft trace stats`` shows what idle capacity a trace offers and ``bft trace import`` makes one from a
scheduler log (sacct, SWF); the runtime's commands are in
``bft.runtime.cli`` (their arguments in ``bft.runtime.cli_options``).

With no arguments, ``bft replay`` replays the built-in synthetic trace and job mix (docs/sim.md)
under the exact optimiser and the equal-share heuristic and prints a side-by-side comparison.
"""

from __future__ import annotations

import argparse
import math
import os
import re
import sys
import tempfile
import time
from pathlib import Path
from typing import List, Optional, Sequence

from . import Error, alloc, curve, milp, plots, sim
from .runtime import cli as runtime_cli
from .runtime import cli_options as runtime_options

DEFAULT_POLICIES = ("exact", "equal_share")


class CliError(Exception):
    """A usage, input or environment error: printed as one line ``bft COMMAND: error: ...``, exit status 2."""


def _parse_time(text: str) -> float:
    """Seconds on the trace's clock: a number, optionally with a unit s, m, h or d (e.g. 36h, 1.5d)."""
    m = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]*)?|\.[0-9]+)\s*([smhd]?)\s*", text)
    if not m:
        raise argparse.ArgumentTypeError(f"not a time: {text!r} (examples: 7200, 90m, 36h, 1.5d)")
    return float(m.group(1)) * {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}[m.group(2)]


def _parse_policies(values: Optional[Sequence[str]]) -> List[str]:
    if not values:
        return list(DEFAULT_POLICIES)
    out: List[str] = []
    for v in values:
        for p in v.split(","):
            p = p.strip()
            if not p:
                continue
            if p not in sim.POLICIES:
                raise CliError(f"unknown policy {p!r} (choose from {', '.join(sim.POLICIES)})")
            if p not in out:
                out.append(p)
    if not out:
        raise CliError(f"--policy: no policy named (choose from {', '.join(sim.POLICIES)})")
    return out


class ProgressBar:
    """A one-line progress bar on stderr (a few plain lines when stderr is not a terminal)."""

    def __init__(self, label: str, enabled: bool = True, stream=None):
        self.label = label
        self.stream = stream or sys.stderr
        self.enabled = enabled
        self.tty = hasattr(self.stream, "isatty") and self.stream.isatty()
        self.t0 = time.perf_counter()
        self.last_quarter = -1

    def __call__(self, fraction: float) -> None:
        if not self.enabled:
            return
        fraction = min(max(fraction, 0.0), 1.0)
        elapsed = time.perf_counter() - self.t0
        if self.tty:
            width = 30
            filled = int(round(fraction * width))
            bar = "#" * filled + "." * (width - filled)
            self.stream.write(f"\r  {self.label:<22} [{bar}] {fraction:6.1%}  {elapsed:6.1f} s")
            if fraction >= 1.0:
                self.stream.write("\n")
            self.stream.flush()
        else:
            # Not a terminal (a log, a pipe): one line per quarter.
            quarter = int(fraction * 4)
            if quarter > self.last_quarter and quarter > 0:
                self.last_quarter = quarter
                self.stream.write(f"  {self.label}: {fraction:.0%} replayed ({elapsed:.1f} s)\n")
                self.stream.flush()


def _replay_parser(sub) -> argparse.ArgumentParser:
    p = sub.add_parser(
        "replay",
        help="replay an idle-node trace with a workload of elastic training jobs",
        description="Replay an idle-node trace with a queue of elastic training jobs under one or more "
        "allocation policies and report samples done, idle capture, overheads and allocator time. "
        "With no --trace/--jobs, a built-in synthetic trace and job mix is replayed (docs/sim.md).",
    )
    p.add_argument("--trace", type=Path, help="node event trace: CSV time,node,state (optionally .gz)")
    p.add_argument("--jobs", type=Path, help="job workload: JSONL, one job per line (docs/formats.md)")
    p.add_argument(
        "--policy",
        action="append",
        metavar="NAME",
        help=f"allocation policy, repeatable or a comma list: {', '.join(sim.POLICIES)} "
        f"(default: {','.join(DEFAULT_POLICIES)})",
    )
    # Mode names and defaults are the C++ library's (bft.sim reads them from ReplayOptions).
    p.add_argument("--curves", choices=(*sim.CURVE_MODES, *sim.DIAGNOSTIC_CURVE_MODES, "both"),
                   default=sim.DEFAULT_CURVES,
                   help="curves the allocator sees: the workload's (oracle), learned online by the profiling "
                   "advisor (learned), or one replay of each (both); learned_curves (learned_costs) learns "
                   "only the curves (only the rescale costs), a diagnostic (docs/sim.md). Default: %(default)s")
    p.add_argument("--accounting", choices=(*sim.ACCOUNTINGS, "both"), default=sim.DEFAULT_ACCOUNTING,
                   help="how time and progress are accounted: libbft's (continuous), the published BFTrainer "
                   "replayer's (reference), or one replay of each (both); docs/sim.md. Default: %(default)s")
    p.add_argument("--configurations", choices=(*sim.CONFIGURATION_MODES, "both"), default=sim.DEFAULT_CONFIGURATIONS,
                   help="the jobs' configurations (structured partial backpropagation, docs/spb.md): the policy "
                   "chooses among those each job declares (choose), keeps full backpropagation (full: the plain "
                   "policy), or one replay of each (both). Default: %(default)s")
    p.add_argument("--max-jobs", type=int, default=sim.DEFAULT_MAX_JOBS,
                   help="most jobs admitted at once, FCFS (default %(default)s)")
    p.add_argument("--tfwd", type=float, default=sim.DEFAULT_TFWD_S,
                   help="allocator's forward-looking time in seconds (default %(default)g)")
    p.add_argument("--nodes", metavar="SPEC",
                   help="node subset: a count N (first N names in sorted order), positions A:B in the trace's order "
                   "of first appearance (A included, B not), a comma list of names, or @FILE")
    p.add_argument("--start", type=_parse_time, help="window start on the trace's clock (e.g. 72000, 20h, 1d)")
    p.add_argument("--end", type=_parse_time, help="window end on the trace's clock (default: the trace's last event)")
    p.add_argument("--out", type=Path, help="write the step logs, summaries, job tables and plots to this directory")
    p.add_argument("--no-plots", action="store_true", help="with --out, skip the PNG plots")
    p.add_argument("--seed", type=int, default=1,
                   help="seed of the built-in synthetic trace and jobs (default %(default)s)")
    p.add_argument("--milp-backend", help="MILP backend for node_milp/count_milp "
                   f"(default {alloc.DEFAULT_MILP_BACKEND})")
    p.add_argument("--time-limit", type=float,
                   help=f"time limit per MILP allocation in seconds (default {sim.DEFAULT_MILP_TIME_LIMIT_S:g}; "
                   "the summary counts the allocations that hit it)")
    p.add_argument("--advisor", action="append", default=[], metavar="KEY=VALUE",
                   help="with learned curves, an option of the profiling advisor (repeatable), e.g. warmup_s=10; "
                   f"keys: {', '.join(curve.ADVISOR_KEYS)} (docs/curve.md)")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress bar")
    return p


def _load_inputs(args) -> "tuple":
    if (args.trace is None) != (args.jobs is None):
        raise CliError("give both --trace and --jobs, or neither for the built-in synthetic default")
    if args.trace is None:
        trace, jobs = sim.generate_synthetic(seed=args.seed)
        what = (f"built-in synthetic workload (seed {args.seed}): {len(trace.node_names)} nodes, "
                f"{len(trace)} transitions over {(trace.last_time_s) / 86400:.1f} days, {len(jobs)} jobs")
        return trace, jobs, what
    try:
        t0 = time.perf_counter()
        trace = sim.read_trace(args.trace)
        jobs = sim.read_jobs(args.jobs)
        dt = time.perf_counter() - t0
    except (OSError, ValueError, Error) as e:  # unreadable files; bad lines (path:line: ...)
        raise CliError(f"{e}") from None
    what = (f"{args.trace}: {len(trace.node_names)} nodes, {len(trace)} transitions; "
            f"{args.jobs}: {len(jobs)} jobs (read in {dt:.1f} s)")
    return trace, jobs, what


def _check_backend(name: Optional[str]) -> None:
    """--milp-backend must name a backend this build has."""
    if name is None:
        return
    available = milp.available_backends()
    if name not in available:
        raise CliError(f"--milp-backend: unknown MILP backend {name!r} "
                       f"(this build has: {', '.join(available) or 'none'})")


def _prepare_out(out: Path) -> None:
    """Creates --out and checks that files can be written there, before any replay runs."""
    try:
        out.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=out):
            pass
    except OSError as e:
        raise CliError(f"--out {out}: cannot write there: {e.strerror or e}") from None


_INT32_MAX = 2**31 - 1
_UINT64_MAX = 2**64 - 1


def _check_numbers(args) -> None:
    """Ranges the C++ side would refuse with a pybind11 signature dump, or silently misuse."""
    if not 1 <= args.max_jobs <= _INT32_MAX:
        raise CliError(f"--max-jobs must be between 1 and {_INT32_MAX}, got {args.max_jobs}")
    if not 0 <= args.seed <= _UINT64_MAX:
        raise CliError(f"--seed must be between 0 and {_UINT64_MAX}, got {args.seed}")
    if not (math.isfinite(args.tfwd) and args.tfwd > 0):
        raise CliError(f"--tfwd must be a finite number of seconds > 0, got {args.tfwd:g}")
    if args.time_limit is not None and not (args.time_limit >= 1e-3):  # also refuses NaN
        raise CliError(f"--time-limit must be at least 0.001 s (per MILP allocation), got {args.time_limit:g}")


def _check_plotting(args) -> None:
    """--out writes PNG plots with matplotlib (an optional dependency): say so before replaying."""
    if args.out is not None and not args.no_plots and not plots.have_matplotlib():
        raise CliError(f"--out writes PNG plots with {plots.MATPLOTLIB_MISSING}, or pass --no-plots")


def replay_main(args) -> int:
    policies = _parse_policies(args.policy)
    curve_modes = list(sim.CURVE_MODES) if args.curves == "both" else [args.curves]
    accountings = list(sim.ACCOUNTINGS) if args.accounting == "both" else [args.accounting]
    configuration_modes = list(sim.CONFIGURATION_MODES) if args.configurations == "both" else [args.configurations]
    _check_numbers(args)
    _check_backend(args.milp_backend)
    try:
        advisor = curve.advisor_options(args.advisor)
    except ValueError as e:
        raise CliError(str(e)) from None
    if args.advisor and curve_modes == ["oracle"]:
        raise CliError("--advisor sets the profiling advisor of learned curves: add --curves learned (or both)")
    _check_plotting(args)
    if args.out is not None:
        _prepare_out(args.out)
    trace, jobs, what = _load_inputs(args)
    try:
        nodes = sim.select_nodes(args.nodes, trace)
    except ValueError as e:
        raise CliError(str(e)) from None
    # Before any replay runs: with --accounting both the continuous ones would run first, for nothing.
    if "reference" in accountings and args.start is None and sim.reference_start_s(trace) is None:
        raise CliError(f"--accounting {args.accounting}: the reference window starts at the trace's "
                       f"{sim.REFERENCE_START_EVENT}th distinct time and this trace has fewer: give --start")
    print(f"bft replay: {what}", flush=True)
    window = []
    if nodes is not None:
        window.append(f"{len(nodes)} nodes")
    if args.start is not None or args.end is not None:
        window.append(f"window {args.start if args.start is not None else 0:g} .. "
                      f"{args.end if args.end is not None else trace.last_time_s:g} s")
    print(f"  max {args.max_jobs} jobs at once, tfwd {args.tfwd:g} s"
          + (", " + ", ".join(window) if window else ""), flush=True)

    results = []
    for accounting in accountings:
        for configurations in configuration_modes:
            for curves in curve_modes:
                for policy in policies:
                    results.append(_replay_one(args, trace, jobs, nodes, policy, curves, accounting, configurations,
                                               advisor))

    print()
    for r in results:
        print(sim.format_summary(r.summary))
        print()
    if len(results) > 1:
        print(sim.comparison_table(results))
        print()

    if args.out is not None:
        try:
            written = sim.write_outputs(results, args.out, plots=not args.no_plots)  # checked by _check_plotting
        except OSError as e:
            raise CliError(f"--out {args.out}: {e}") from None
        print(f"wrote {len(written)} files to {args.out}/: {', '.join(written)}")
    elif args.trace is None:
        print("(--out DIR writes the step logs, summaries and plots; --help lists the options)")
    return 0


def _replay_one(args, trace, jobs, nodes, policy, curves, accounting, configurations,
                advisor) -> "sim.ReplayResult":
    label = sim.replay_label(policy, curves, accounting, configurations)
    sys.stdout.flush()
    bar = ProgressBar(label, enabled=not args.quiet)
    try:
        r = sim.replay(
            trace, jobs, policy=policy, curves=curves, max_jobs=args.max_jobs, tfwd_s=args.tfwd,
            nodes=nodes, start_s=args.start, end_s=args.end, milp_backend=args.milp_backend,
            time_limit_s=args.time_limit, advisor=advisor, on_progress=bar, accounting=accounting,
            configurations=configurations,
        )
    except (ValueError, Error, OSError) as e:
        raise CliError(f"{label}: {e}") from None
    s = r.summary
    if int(s["allocator_time_limits"]) or int(s["allocator_failures"]):
        limit = args.time_limit if args.time_limit is not None else sim.DEFAULT_MILP_TIME_LIMIT_S
        print(f"bft replay: warning: {label}: {s['allocator_time_limits']} of {s['allocator_calls']} "
              f"allocations stopped at the MILP time limit ({limit:g} s; --time-limit), "
              f"{s['allocator_failures']} failed; those kept their incumbent or their nodes",
              file=sys.stderr)
    return r


def _trace_parser(sub) -> None:
    p = sub.add_parser("trace", help="look at an idle-node trace",
                       description="Tools for idle-node traces (time,node,state CSV, docs/formats.md).")
    trace_sub = p.add_subparsers(dest="trace_command", metavar="TRACE_COMMAND")
    stats = trace_sub.add_parser(
        "stats",
        help="idle nodes over time, idle-hole lengths, events per hour",
        description="How much idle capacity a trace offers: idle nodes over time (mean, time-weighted "
        "percentiles), the distribution of idle-hole lengths and events per hour, as text and "
        "optionally a PNG (docs/trace.md).",
    )
    stats.add_argument("trace", type=Path, help="node event trace: CSV time,node,state (optionally .gz)")
    stats.add_argument("--png", type=Path, help="also write the plots to this PNG file (needs matplotlib)")

    imp = trace_sub.add_parser(
        "import",
        help="a scheduler log (sacct, SWF) as an idle-node trace",
        description="Write the idle-node trace of a centre's scheduler log: a node is busy while a job of the "
        "log runs on it and idle otherwise (docs/trace.md has the sacct command to run).",
    )
    source = imp.add_subparsers(dest="log_format", metavar="FORMAT")
    sacct = source.add_parser("sacct", help="Slurm accounting: sacct --parsable2 output",
                              description="Import `sacct --parsable2 --format=JobID,Start,End,NodeList` output.")
    sacct.add_argument("log", type=Path, help="sacct --parsable2 output (optionally .gz)")
    sacct.add_argument("--machine-nodes", required=True, metavar="NODES",
                       help="every node of the machine: a hostlist expression (c[001-128],gpu[1-4]) or @FILE "
                       "with one name or expression per line (e.g. from sinfo -h -N -o %%N)")
    sacct.add_argument("--start", help="window start: Unix seconds or YYYY-MM-DDTHH:MM:SS (default: first job start)")
    sacct.add_argument("--end", help="window end (default: last job end)")
    sacct.add_argument("--out", "-o", type=Path, required=True, help="trace to write (CSV; .gz compresses)")
    swf = source.add_parser("swf", help="Standard Workload Format, count level",
                            description="Import a Standard Workload Format log: each job takes "
                            "ceil(processors / --procs-per-node) whole nodes, the lowest-numbered free ones.")
    swf.add_argument("log", type=Path, help="SWF log (optionally .gz)")
    swf.add_argument("--procs-per-node", required=True, type=int, help="processors of one node")
    swf.add_argument("--machine-nodes", type=int,
                     help="nodes of the machine (default: the header's MaxNodes, else MaxProcs / procs per node)")
    swf.add_argument("--out", "-o", type=Path, required=True, help="trace to write (CSV; .gz compresses)")


def _machine_nodes(spec: str) -> List[str]:
    try:
        return sim.machine_nodes_spec(spec)
    except ValueError as e:
        raise CliError(str(e)) from None


def _import_trace(args) -> int:
    if args.log_format is None:
        raise CliError("name a log format: sacct or swf")
    # The same file by any name (a hard link, a symlink, /proc/self/fd/N): writing would destroy the input.
    if args.out.exists() and args.log.exists() and os.path.samefile(args.out, args.log):
        raise CliError(f"--out {args.out} is the log itself: name another file")
    try:
        if args.log_format == "sacct":
            imported = sim.import_sacct(args.log, _machine_nodes(args.machine_nodes), start=args.start, end=args.end)
        else:
            imported = sim.import_swf(args.log, args.procs_per_node, args.machine_nodes)
        sim.write_trace(imported.trace, args.out)
    except (OSError, ValueError, Error) as e:  # unreadable file; bad lines (path:line: ...); bad options
        raise CliError(f"{e}") from None
    trace = imported.trace
    never_idle = imported.machine_nodes - len(trace.node_names)
    print(f"wrote {args.out}: {len(trace):,} transitions of {len(trace.node_names):,} nodes "
          f"(of the machine's {imported.machine_nodes:,}; {never_idle:,} never idle, so not in the trace) over a "
          f"window of {(imported.end_s - imported.origin_s) / 86400:.2f} d from {imported.jobs_used:,} jobs "
          f"({imported.jobs_skipped:,} skipped: never ran on these nodes in the window); "
          f"time 0 is {imported.origin_s} on the log's clock")
    if imported.ignored_nodes:
        print(f"ignored {imported.ignored_nodes:,} nodes that are not in --machine-nodes "
              f"(e.g. {', '.join(imported.ignored_examples[:3])})")
    print(f"next: bft trace stats {args.out}")
    return 0


def trace_main(args) -> int:
    if args.trace_command == "import":
        return _import_trace(args)
    if args.trace_command != "stats":
        raise CliError("name a trace command: stats or import")
    if args.png is not None:
        # matplotlib picks the format from the suffix and adds ".png" to a name without one: the file
        # written is the file named, or none.
        if args.png.suffix.lower() != ".png" or args.png.is_dir():
            raise CliError(f"--png {args.png}: name a file ending in .png")
        if not plots.have_matplotlib():
            raise CliError(f"--png needs {plots.MATPLOTLIB_MISSING}")
    try:
        stats = sim.trace_stats(args.trace)
    except (OSError, ValueError, Error) as e:  # unreadable file; bad lines (path:line: ...)
        raise CliError(f"{e}") from None
    print(sim.format_trace_stats(stats, str(args.trace)))
    if args.png is not None:
        try:
            plots.plot_trace_stats(stats, args.png, title=str(args.trace))
        except OSError as e:
            raise CliError(f"--png: cannot write {args.png}: {e.strerror or e}") from None
        print(f"wrote {args.png}")
    return 0


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="bft", description="libbft: elastic training on idle supercomputer nodes")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    _replay_parser(sub)
    _trace_parser(sub)
    runtime_options.add_parsers(sub)
    argv = list(sys.argv[1:] if argv is None else argv)
    # `bft submit ... -- ARGS`: whatever follows the first "--" goes to the training script, also
    # after options (argparse alone takes it only right after the script's path).
    script_args: List[str] = []
    if argv[:1] == ["submit"] and "--" in argv:
        cut = argv.index("--")
        argv, script_args = argv[:cut], argv[cut + 1:]
    try:
        argv = runtime_options.with_config(sub.choices["manager"], argv)
    except runtime_options.UsageError as e:
        print(f"bft manager: error: {e}", file=sys.stderr)
        return 2
    args = parser.parse_args(argv)
    if script_args:
        args.script_args = [*args.script_args, *script_args]
    if args.command is None:
        parser.print_help()
        return 2
    if args.command in runtime_options.COMMANDS:
        try:
            return runtime_cli.main(args)
        except runtime_options.UsageError as e:
            print(f"bft {args.command}: error: {e}", file=sys.stderr)
            return 2
        except KeyboardInterrupt:
            print(f"\nbft {args.command}: interrupted", file=sys.stderr)
            return 130
    commands = {"replay": replay_main, "trace": trace_main}
    if args.command in commands:
        try:
            return commands[args.command](args)
        except CliError as e:
            print(f"bft {args.command}: error: {e}", file=sys.stderr)
            return 2
        except KeyboardInterrupt:
            print(f"\nbft {args.command}: interrupted", file=sys.stderr)
            return 130
    return 2  # pragma: no cover


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
