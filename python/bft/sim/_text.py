"""The text reports of the replay: one replay's summary, a side-by-side comparison of several, and a
trace's idle-capacity figures (``bft replay``, ``bft trace stats``).

Re-exported by :mod:`bft.sim`; import from there.
"""

from __future__ import annotations

from typing import Dict, Sequence

import numpy as np

from ._replay import DEFAULT_ACCOUNTING, DEFAULT_CONFIGURATIONS, DEFAULT_CURVES, ReplayResult
from ._trace import TraceStats


def format_trace_stats(stats: TraceStats, label: str) -> str:
    """The text report of ``bft trace stats``: is this machine's idle capacity worth harvesting?"""
    span_s = stats.end_s - stats.start_s
    holes = stats.hole_lengths_s

    def hole_figure(q: float) -> str:
        return _duration(float(np.quantile(holes, q, method="inverted_cdf"))) if len(holes) else "-"

    share = 100.0 * stats.mean_idle_nodes / stats.nodes if stats.nodes else 0.0
    return "\n".join([
        f"{label}: {stats.nodes:,} nodes, {stats.transitions:,} transitions over {_duration(span_s)}",
        f"idle nodes (time-weighted): mean {stats.mean_idle_nodes:,.1f} ({share:.1f} % of the nodes), "
        f"median {stats.p50_idle_nodes:,}, p90 {stats.p90_idle_nodes:,}, p99 {stats.p99_idle_nodes:,}, "
        f"max {stats.max_idle_nodes:,}",
        f"idle node-hours: {stats.idle_node_s / 3600.0:,.0f}",
        f"idle holes: {len(holes):,} ended (+{stats.holes_open_at_end:,} open at the end); length "
        f"p10 {hole_figure(0.1)}, median {hole_figure(0.5)}, p90 {hole_figure(0.9)}, "
        f"mean {_duration(float(np.mean(holes))) if len(holes) else '-'}",
        f"events: {stats.events_per_hour:,.1f} per hour (distinct transition times)",
    ])


def format_summary(summary: Dict[str, object]) -> str:
    """A readable multi-line summary of one replay."""
    s = summary
    label = s["policy"] if s["curves"] == DEFAULT_CURVES else f"{s['policy']} (learned curves)"
    if s.get("accounting", DEFAULT_ACCOUNTING) != DEFAULT_ACCOUNTING:
        label += f", {s['accounting']} accounting"
    if s.get("configurations", DEFAULT_CONFIGURATIONS) != DEFAULT_CONFIGURATIONS:
        label += ", full backpropagation only"
    lines = [
        f"policy {label}: {s['nodes']} nodes, window {_duration(float(s['end_s']) - float(s['start_s']))}, "
        f"{s['events']} events",
        f"  samples done          {float(s['samples_done']):.4g}  "
        f"(overhead efficiency {float(s['overhead_efficiency']):.1%}, "
        f"{float(s['loss_samples']):.3g} lost to {s['rescales']} rescales and {s['preemptions']} preemptions)",
        f"  node-hours            {float(s['used_node_hours']):.1f} used of {float(s['idle_node_hours']):.1f} idle "
        f"(idle capture {float(s['idle_capture']):.1%})",
        f"  jobs                  {s['jobs_finished']} finished of {s['jobs_submitted']} submitted "
        f"({s['jobs_admitted']} admitted)",
    ]
    if int(s.get("configuration_switches", 0)) or float(s.get("partial_node_hours", 0.0)):
        lines.append(
            f"  configurations        {float(s['partial_node_hours']):.1f} node-hours in partial backpropagation, "
            f"{s['configuration_switches']} switches"
        )
    if int(s["jobs_finished"]) > 0:
        lines.append(
            f"  makespan              {_duration(s['makespan_s'])}, mean turnaround {_duration(s['mean_turnaround_s'])}"
        )
        lines.append(
            f"  active window         {float(s['active_used_node_hours']):.1f} used of "
            f"{float(s['active_idle_node_hours']):.1f} idle node-hours (idle capture "
            f"{float(s['active_idle_capture']):.1%}), first admission to last finish"
        )
    lines.append(
        f"  allocator             {s['allocator_calls']} calls, p50 {_seconds(s['allocator_p50_s'])}, "
        f"p99 {_seconds(s['allocator_p99_s'])}, max {_seconds(s['allocator_max_s'])}"
    )
    if int(s.get("allocator_time_limits", 0)) or int(s.get("allocator_failures", 0)):
        lines.append(
            f"  MILP allocations      {s['allocator_time_limits']} stopped at the time limit, "
            f"{s['allocator_failures']} failed (jobs kept their nodes or the incumbent)"
        )
    lines.append(f"  replay wall time      {_seconds(s['wall_s'])}")
    return "\n".join(lines)


def comparison_table(results: Sequence[ReplayResult]) -> str:
    """Side-by-side comparison of several replays of the same trace and workload."""
    rows = [
        ("samples done", lambda s: f"{float(s['samples_done']):.4g}"),
        ("idle capture", lambda s: f"{float(s['idle_capture']):.1%}"),
        ("active idle capture", lambda s: f"{float(s['active_idle_capture']):.1%}" if int(s["jobs_finished"]) else "-"),
        ("node-hours used", lambda s: f"{float(s['used_node_hours']):.1f}"),
        ("overhead efficiency", lambda s: f"{float(s['overhead_efficiency']):.1%}"),
        ("jobs finished", lambda s: f"{s['jobs_finished']}/{s['jobs_submitted']}"),
        ("makespan", lambda s: _duration(s["makespan_s"]) if int(s["jobs_finished"]) else "-"),
        ("mean turnaround", lambda s: _duration(s["mean_turnaround_s"]) if int(s["jobs_finished"]) else "-"),
        ("rescales", lambda s: str(s["rescales"])),
        ("preemptions", lambda s: str(s["preemptions"])),
        ("allocator p50", lambda s: _seconds(s["allocator_p50_s"])),
        ("allocator p99", lambda s: _seconds(s["allocator_p99_s"])),
        ("allocator max", lambda s: _seconds(s["allocator_max_s"])),
        ("replay wall time", lambda s: _seconds(s["wall_s"])),
    ]
    if any(float(r.summary["partial_node_hours"]) or r.summary["configurations"] != DEFAULT_CONFIGURATIONS
           for r in results):
        at = [name for name, _ in rows].index("preemptions") + 1
        rows[at:at] = [
            ("partial-backprop node-hours", lambda s: f"{float(s['partial_node_hours']):.1f}"),
            ("configuration switches", lambda s: str(s["configuration_switches"])),
        ]
    if results:
        base = float(results[0].summary["samples_done"])
        if base > 0 and len(results) > 1:
            rows.insert(1, (f"vs {results[0].label}", lambda s: f"{float(s['samples_done']) / base:.3f}x"))
    header = [""] + [r.label for r in results]
    table = [header] + [[name] + [fmt(r.summary) for r in results] for name, fmt in rows]
    widths = [max(len(row[i]) for row in table) for i in range(len(header))]
    out = []
    for k, row in enumerate(table):
        out.append("  ".join(cell.ljust(widths[0]) if i == 0 else cell.rjust(widths[i]) for i, cell in enumerate(row)))
        if k == 0:
            out.append("  ".join("-" * w for w in widths))
    return "\n".join(out)


def _duration(s: float) -> str:
    s = float(s)
    if s >= 86400:
        return f"{s / 86400:.2f} d"
    if s >= 3600:
        return f"{s / 3600:.2f} h"
    if s >= 60:
        return f"{s / 60:.1f} min"
    return f"{s:.1f} s"


def _seconds(s: float) -> str:
    s = float(s)
    if s >= 1:
        return f"{s:.2f} s"
    if s >= 1e-3:
        return f"{s * 1e3:.2f} ms"
    return f"{s * 1e6:.0f} us"
