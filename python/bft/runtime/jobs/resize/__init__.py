"""A job's resize, owned in one place: the state machine (:mod:`.machine`: the answer to every
event; its verdicts on ended generations and how failures are counted in :mod:`.verdicts`; its
phases, stop reasons and outcomes in :mod:`.states`) and the resize methods behind one interface
(:mod:`.methods`: relaunch, inplace, membership), each of which carries out its own resize steps
through the I/O the lifecycle offers it for the job (jobs/steps.py), with the in-place
configurations in the keeper's store (:mod:`.configurations`), and the gap meter (:mod:`.gaps`:
what each resize costs in training time, measured from the job's reports). The lifecycle drives
them and does the I/O they ask for."""

from .configurations import Configurations
from .machine import Machine
from .methods import (
    AUTO,
    METHODS,
    RESIZE_CHOICES,
    RESIZE_METHODS,
    Method,
    ResizeMethod,
    check_resize_choice,
    job_resize_method,
    may_run_in_place,
    method,
)
from .states import Exit, Outcome, Phase, Plan, Stop

__all__ = ["AUTO", "Configurations", "Exit", "METHODS", "Machine", "Method", "Outcome", "Phase", "Plan",
           "RESIZE_CHOICES", "RESIZE_METHODS", "ResizeMethod", "Stop", "check_resize_choice", "job_resize_method",
           "may_run_in_place", "method"]
