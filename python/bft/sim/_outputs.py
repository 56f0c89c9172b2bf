"""The files of ``bft replay --out DIR`` (docs/formats.md, "Replay outputs"): per replay its step log,
summary and job table (and plots), and the comparison of several.

Re-exported by :mod:`bft.sim`; import from there.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import List, Sequence, Union

from ._replay import ReplayResult
from ._text import comparison_table


def write_outputs(results: Sequence[ReplayResult], out: Union[str, os.PathLike], plots: bool = True) -> List[str]:
    """Writes the files of the replays `results` into the existing directory `out`; returns their names.

    A replay's files are named by its label (``replay_label``, with "/" and any other character unsafe
    in a file name written "_"). The plots need matplotlib (``bft.plots``).
    """
    out = Path(out)
    written = []
    for r in results:
        base = _file_label(r.label)
        r.write_steps_csv(out / f"steps-{base}.csv")
        r.write_summary_json(out / f"summary-{base}.json")
        r.write_jobs_csv(out / f"jobs-{base}.csv")
        written += [f"steps-{base}.csv", f"summary-{base}.json", f"jobs-{base}.csv"]
    if len(results) > 1:
        (out / "comparison.txt").write_text(comparison_table(results) + "\n")
        written.append("comparison.txt")
    if plots:
        from .. import plots as _plots  # matplotlib, an optional dependency: only when plots are asked for

        for r in results:
            base = _file_label(r.label)
            _plots.plot_nodes(r, out / f"nodes-{base}.png")
            _plots.plot_progress(r, out / f"progress-{base}.png")
            written += [f"nodes-{base}.png", f"progress-{base}.png"]
        if len(results) > 1:
            _plots.plot_comparison(results, out / "comparison.png")
            written.append("comparison.png")
    return written


def _file_label(label: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.+-]", "_", label)
