"""A job's resize, owned in one place: the state machine (:mod:`.machine`: phases, the answer to
every event, how failures are counted) and the resize methods behind one interface
(:mod:`.methods`: relaunch, inplace, membership), with the in-place configurations in the keeper's
store (:mod:`.configurations`). The lifecycle drives them and carries out what they answer."""

from .configurations import Configurations
from .machine import Exit, Machine, Outcome, Phase, Plan, Stop
from .methods import (
    AUTO,
    METHODS,
    RESIZE_CHOICES,
    RESIZE_METHODS,
    Method,
    check_resize_choice,
    job_resize_method,
    method,
)

__all__ = ["AUTO", "Configurations", "Exit", "METHODS", "Machine", "Method", "Outcome", "Phase", "Plan",
           "RESIZE_CHOICES", "RESIZE_METHODS", "Stop", "check_resize_choice", "job_resize_method", "method"]
