"""PNG plots (matplotlib, headless): a replay's idle vs used nodes and progress per job; a trace's idle capacity."""

from __future__ import annotations

import os
import time
from typing import Sequence, Union

import numpy as np

PathLike = Union[str, os.PathLike]
# What a command line says when a plot is asked for without matplotlib (an optional dependency).
MATPLOTLIB_MISSING = "matplotlib, which is not installed: pip install matplotlib (or 'libbft[plot]')"


def have_matplotlib() -> bool:
    """Whether the plots can be drawn: a command line checks before its work, not after."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _time_axis(t: np.ndarray, start: float, span: float):
    if span > 3 * 86400:
        return (t - start) / 86400.0, "time since start (days)"
    return (t - start) / 3600.0, "time since start (hours)"


def plot_nodes(result, path: PathLike) -> None:
    """Idle nodes and nodes used by training over time (step plot, one point per event)."""
    plt = _pyplot()
    s = result.summary
    start, end = float(s["start_s"]), float(s["end_s"])
    steps = result.steps
    x, xlabel = _time_axis(steps["time_s"], start, end - start)
    fig, ax = plt.subplots(figsize=(10, 4), dpi=110)
    ax.fill_between(x, steps["idle_nodes"], step="post", color="#c6dbef", label="idle nodes")
    ax.step(x, steps["used_nodes"], where="post", color="#08519c", linewidth=0.8, label="used by training")
    ax.set_xlabel(xlabel)
    ax.set_ylabel("nodes")
    ax.set_xlim(0, x[-1] if len(x) else 1)
    ax.set_ylim(bottom=0)
    ax.set_title(f"{result.label}: idle capture {float(s['idle_capture']):.1%} "
                 f"({float(s['used_node_hours']):.0f} of {float(s['idle_node_hours']):.0f} node-hours)")
    ax.legend(loc="upper right")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def plot_harvest(report, path: PathLike) -> None:
    """`bft report --png`: nodes in the manager's pool (harvested) and nodes used by jobs over the
    report's period (step plot; bft.runtime.ops.accounting.Report)."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(10, 4), dpi=110)
    hours = (report.until_s - report.since_s) / 3600.0

    def xy(steps):  # held until the period's end
        return ([(t - report.since_s) / 3600.0 for t, _ in steps] + [hours], [n for _, n in steps] + [steps[-1][1]])

    x, y = xy(report.pool_steps)
    ax.fill_between(x, y, step="post", color="#c6dbef", label="idle nodes in the pool")
    x, y = xy(report.used_steps)
    ax.step(x, y, where="post", color="#08519c", linewidth=1.0, label="used by jobs")
    ax.set_xlabel(f"hours since {time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(report.since_s))}")
    ax.set_ylabel("nodes")
    ax.set_xlim(0, hours)
    ax.set_ylim(bottom=0)
    ax.set_title(f"harvested {report.harvested_node_hours:.2f} node-hours, used by jobs {report.used_node_hours:.2f}")
    ax.legend(loc="upper right")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def plot_progress(result, path: PathLike, max_labels: int = 12) -> None:
    """Cumulative samples done per job over time, as a fraction of each job's work."""
    plt = _pyplot()
    s = result.summary
    start, end = float(s["start_s"]), float(s["end_s"])
    prog = result.progress
    fig, ax = plt.subplots(figsize=(10, 4.5), dpi=110)
    jobs = np.unique(prog["job"]) if len(prog["job"]) else np.array([], dtype=int)
    names = result.jobs["name"]
    work = result.jobs["work"]
    cmap = plt.get_cmap("tab20")
    for k, j in enumerate(jobs):
        sel = prog["job"] == j
        x, xlabel = _time_axis(prog["time_s"][sel], start, end - start)
        y = prog["done"][sel] / work[j]
        ax.plot(x, y, color=cmap(k % 20), linewidth=0.9, label=names[j] if k < max_labels else None)
    _, xlabel = _time_axis(np.array([start]), start, end - start)
    ax.set_xlabel(xlabel)
    ax.set_ylabel("fraction of work done")
    ax.set_ylim(0, 1.02)
    ax.set_xlim(left=0)
    ax.set_title(f"{result.label}: progress of {len(jobs)} admitted jobs "
                 f"({s['jobs_finished']} finished)")
    if len(jobs):
        ax.legend(loc="upper left", fontsize=7, ncol=2,
                  title=None if len(jobs) <= max_labels else f"first {max_labels} of {len(jobs)}")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def plot_comparison(results: Sequence, path: PathLike) -> None:
    """Total samples done over time, one line per policy."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(10, 4), dpi=110)
    for r in results:
        s = r.summary
        start, end = float(s["start_s"]), float(s["end_s"])
        x, xlabel = _time_axis(r.steps["time_s"], start, end - start)
        ax.step(x, r.steps["samples_done"], where="post", label=r.label)
        ax.set_xlabel(xlabel)
    ax.set_ylabel("samples done (all jobs)")
    ax.set_xlim(left=0)
    ax.set_ylim(bottom=0)
    ax.legend(loc="upper left")
    ax.set_title("cumulative progress by policy")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def plot_trace_stats(stats, path: PathLike, title: str = "") -> None:
    """`bft trace stats --png`: idle nodes over time (with the mean) and the idle-hole lengths."""
    plt = _pyplot()
    t = np.asarray(stats.step_time_s, dtype=float)
    x, xlabel = _time_axis(t, float(stats.start_s), float(stats.end_s - stats.start_s))
    fig, (over_time, holes) = plt.subplots(1, 2, figsize=(12, 4), dpi=110, gridspec_kw={"width_ratios": [2, 1]})
    over_time.fill_between(x, stats.step_idle_nodes, step="post", color="#c6dbef", label="idle nodes")
    over_time.axhline(stats.mean_idle_nodes, color="#08519c", linewidth=0.8,
                      label=f"mean {stats.mean_idle_nodes:,.1f} of {stats.nodes:,}")
    over_time.set_xlabel(xlabel)
    over_time.set_ylabel("idle nodes")
    over_time.set_xlim(0, x[-1] if len(x) else 1)
    over_time.legend(loc="upper right", fontsize=8)
    lengths = np.asarray(stats.hole_lengths_s, dtype=float)
    if len(lengths):
        low = max(1.0, float(lengths.min()))
        bins = np.logspace(np.log10(low), np.log10(max(low * 10, float(lengths.max()))), 40)
        holes.hist(np.maximum(lengths, low), bins=bins, color="#6baed6")
        holes.set_xscale("log")
    holes.set_xlabel("idle-hole length (s)")
    holes.set_ylabel("holes")
    holes.set_title(f"{len(lengths):,} ended, {stats.holes_open_at_end:,} open at the end", fontsize=9)
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
