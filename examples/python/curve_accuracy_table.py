"""Prediction error of every throughput model on the measured ImageNet curves (docs/curve.md).

For each distinct curve in jobs-imagenet-throughput-1001.jsonl (seven models measured at
1, 2, 4, ..., 64 nodes) and each training set of node counts, fit every model from the measured
values at the training sizes only and compare its prediction with the measured value at every
other measured size ("unmeasured sizes"), split into
  * inside:  unmeasured sizes between the smallest and the largest training size (interpolation),
  * beyond:  unmeasured sizes above the largest training size, raw model prediction (extrapolation),
  * beyond, conservative: the same sizes, with FitResult.evaluate (the discounted, capped
    extrapolation the allocator is given).
Error = |predicted / measured - 1|. Prints Markdown tables (median / max per training set).

Usage: PYTHONPATH=build/<dir>/python python examples/python/curve_accuracy_table.py [jobs.jsonl]
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

from bft import curve

DEFAULT = Path(__file__).resolve().parents[3] / "shared" / "data" / "jobs-imagenet-throughput-1001.jsonl"
TRAINING_SETS = [(1, 8, 64), (1, 4, 16), (1, 2, 4)]
MODELS = ["amdahl", "optimus", "comm_log", "usl", "auto"]


def load_curves(path: Path) -> dict[str, tuple[list[int], list[float]]]:
    """Distinct measured curves (deduplicated by their values), keyed by the first job's name."""
    curves: dict[str, tuple[list[int], list[float]]] = {}
    seen = set()
    with open(path) as f:
        for line in f:
            job = json.loads(line)
            key = tuple(job["throughput"])
            if key in seen:
                continue
            seen.add(key)
            pts = [(n, x) for n, x in zip(job["nodes"], job["throughput"]) if n > 0]
            curves[job["name"]] = ([n for n, _ in pts], [x for _, x in pts])
    return curves


def errors(curves, train, model):
    """(inside, beyond_raw, beyond_conservative, chosen models, statuses) relative errors."""
    inside, beyond, beyond_c, chosen, bad = [], [], [], [], []
    for name, (nodes, values) in curves.items():
        xs = [values[nodes.index(n)] for n in train]
        res = curve.fit(list(train), xs, model=model)
        if not res.ok:
            bad.append(f"{name}: {curve.status_name(res.status)}")
            continue
        chosen.append(curve.model_name(res.model))
        for n, x in zip(nodes, values):
            if n in train:
                continue
            if n < max(train):
                inside.append(abs(res.predict(n) / x - 1))
            else:
                beyond.append(abs(res.predict(n) / x - 1))
                beyond_c.append(abs(res.evaluate(n) / x - 1))
    return inside, beyond, beyond_c, chosen, bad


def cell(errs):
    if not errs:
        return "—"
    return f"{100 * statistics.median(errs):.1f}% / {100 * max(errs):.1f}%"


def main() -> int:
    path = Path(sys.argv[1]) if len(sys.argv) > 1 else DEFAULT
    if not path.exists():
        print(f"data not found: {path}", file=sys.stderr)
        return 1
    curves = load_curves(path)
    all_sizes = sorted({n for nodes, _ in curves.values() for n in nodes})
    print(f"{len(curves)} distinct curves ({', '.join(curves)}), measured at {all_sizes} nodes.\n")
    for train in TRAINING_SETS:
        inside_sizes = [n for n in all_sizes if n not in train and n < max(train)]
        beyond_sizes = [n for n in all_sizes if n > max(train)]
        print(f"### Training sizes {{{', '.join(map(str, train))}}}\n")
        print(f"Inside: {inside_sizes or 'none'}; beyond: {beyond_sizes or 'none'}. Median / max relative error.\n")
        print("| model | inside (interpolation) | beyond, raw model | beyond, conservative curve "
              "| all unmeasured, raw |")
        print("|---|---|---|---|---|")
        picks = {}
        for model in MODELS:
            inside, beyond, beyond_c, chosen, bad = errors(curves, train, model)
            label = "**auto**" if model == "auto" else model
            note = f" ({len(bad)} not fitted)" if bad else ""
            print(f"| {label}{note} | {cell(inside)} | {cell(beyond)} | {cell(beyond_c)} | {cell(inside + beyond)} |")
            if model == "auto":
                picks = {m: chosen.count(m) for m in sorted(set(chosen))}
        print(f"\nAutomatic choice picked: {', '.join(f'{m} ×{c}' for m, c in picks.items())}.\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
