"""Throughput curves, model fitting and the online profiling advisor (:mod:`bft._core.curve`).

>>> from bft import curve
>>> result = curve.fit([1, 8, 64], [1193.3, 9257.9, 70151.7])
>>> result.ok, curve.model_name(result.model)          # doctest: +SKIP
(True, 'optimus')
>>> result.evaluate([2, 4, 16, 32])                      # doctest: +SKIP

Models, the selection rule, fit statuses, the extrapolation rule and the advisor are documented
in docs/curve.md.
"""

from __future__ import annotations

from typing import Optional, Sequence, Union

from ._core import curve as _c

Model = _c.Model
FitStatus = _c.FitStatus
Selection = _c.Selection
ThroughputCurve = _c.ThroughputCurve
FitOptions = _c.FitOptions
FitResult = _c.FitResult
ModelFit = _c.ModelFit
AdvisorOptions = _c.AdvisorOptions
AdvisorCurves = _c.AdvisorCurves
SizeEstimate = _c.SizeEstimate
RescaleOverhead = _c.RescaleOverhead
RescaleMethod = _c.RescaleMethod
Objective = _c.Objective
RescaleCosts = _c.RescaleCosts
ProbeSuggestion = _c.ProbeSuggestion
JobProfile = _c.JobProfile
ProfilingAdvisor = _c.ProfilingAdvisor
model_from_string = _c.model_from_string
model_name = _c.model_name
status_name = _c.status_name
num_parameters = _c.num_parameters
measured_rescale_costs = _c.measured_rescale_costs
rescale_method_from_string = _c.rescale_method_from_string
objective_from_string = _c.objective_from_string
# The objectives' names as objective_from_string reads them (bft manager --objective, the benches').
OBJECTIVES = tuple(name.lower() for name in Objective.__members__)
rescale_method_name = _c.rescale_method_name


# The profiling advisor's options a command line sets as KEY=VALUE (bft replay --advisor, the learned_*
# benches): its numeric fields, and its fit's as fit.NAME (fit.extrapolation_limit=2
# fit.extrapolation_discount=0.5: FitOptions' conservative rule).
def _numeric_fields(obj) -> tuple:
    return tuple(k for k in dir(obj) if not k.startswith("_") and type(getattr(obj, k)) in (int, float))


_ADVISOR_DEFAULTS = AdvisorOptions()
ADVISOR_KEYS = _numeric_fields(_ADVISOR_DEFAULTS) + tuple(f"fit.{k}" for k in _numeric_fields(_ADVISOR_DEFAULTS.fit))


def advisor_options(items: Sequence[str], flag: str = "--advisor") -> "AdvisorOptions":
    """KEY=VALUE items (keys: ADVISOR_KEYS) as AdvisorOptions, checked as the C++ checks them; a bad item
    is a ValueError starting with ``flag``, naming the key."""
    options = AdvisorOptions()
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or key not in ADVISOR_KEYS:
            raise ValueError(f"{flag} {item!r}: expected KEY=VALUE with KEY one of {', '.join(ADVISOR_KEYS)}")
        target, name = (options.fit, key[4:]) if key.startswith("fit.") else (options, key)
        kind = type(getattr(target, name))
        try:
            setattr(target, name, kind(value))
        except (TypeError, ValueError, OverflowError):
            raise ValueError(f"{flag} {key}: {value!r} is not {'an integer' if kind is int else 'a number'}") from None
    ok, why = options.is_valid()
    if not ok:
        raise ValueError(f"{flag} {why.removeprefix('advisor options: ')}")
    return options


def _as_model(model: Union[str, "Model"]) -> "Model":
    return model_from_string(model) if isinstance(model, str) else model


def fit(
    nodes: Sequence[float],
    samples_per_s: Sequence[float],
    weights: Optional[Sequence[float]] = None,
    model: Union[str, "Model"] = "auto",
    selection: Union[str, "Selection"] = "loo",
    options: Optional["FitOptions"] = None,
) -> "FitResult":
    """Fit a throughput model to samples (node count, samples/s, optional weight).

    ``model`` is ``"auto"`` (choose by ``selection``: ``"loo"`` leave-one-out error or ``"aicc"``)
    or one of ``"amdahl"``, ``"optimus"``, ``"comm_log"``, ``"usl"``. Invalid input raises
    ``ValueError``; too little data is reported by ``result.status``, never as bad parameters.
    """
    opts = FitOptions()
    if options is not None:
        for field in ("model", "selection", "max_iterations", "tolerance", "duplicate_tolerance",
                      "extrapolation_discount", "extrapolation_limit"):
            setattr(opts, field, getattr(options, field))
    if options is None or model != "auto":
        opts.model = _as_model(model)
    if isinstance(selection, str):
        rules = {"loo": Selection.LEAVE_ONE_OUT, "aicc": Selection.AICC}
        if selection not in rules:
            raise ValueError(f"unknown model selection rule {selection!r} (expected 'loo' or 'aicc')")
        selection = rules[selection]
    if options is None or selection != Selection.LEAVE_ONE_OUT:
        opts.selection = selection
    return _c.fit(nodes, samples_per_s, weights, opts)


__all__ = [
    "ADVISOR_KEYS",
    "AdvisorCurves",
    "AdvisorOptions",
    "FitOptions",
    "FitResult",
    "FitStatus",
    "JobProfile",
    "Model",
    "ModelFit",
    "OBJECTIVES",
    "Objective",
    "ProbeSuggestion",
    "ProfilingAdvisor",
    "RescaleCosts",
    "RescaleMethod",
    "RescaleOverhead",
    "Selection",
    "SizeEstimate",
    "ThroughputCurve",
    "advisor_options",
    "fit",
    "measured_rescale_costs",
    "model_from_string",
    "model_name",
    "num_parameters",
    "objective_from_string",
    "rescale_method_from_string",
    "rescale_method_name",
    "status_name",
]
