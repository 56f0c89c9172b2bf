"""The training-loop side of libbft: what a training script imports.

The whole contract is four calls and an ending::

    import bft.train as bt

    state = bt.resume()                      # the last checkpoint, or None on a first start
    samples = state["samples"] if state else 0
    while samples < bt.target_samples(default=100_000):
        ...one training step...
        samples += batch_size * world_size
        bt.report(samples)                   # cumulative samples; cheap, never blocks or raises
        if bt.should_stop():                 # SIGTERM reached any rank: the job is being resized
            bt.checkpoint({"samples": samples, "model": model.state_dict()})
            bt.exit_for_resize()
    bt.exit_finished()                       # done: every rank arrives, the group ends, exit 0

Under ``bft manager`` the reports reach the manager (authenticated with the job's secret) and the
checkpoints go to the job's checkpoint directory. Outside it (``python train.py``, plain
``torchrun``) reports are no-ops and checkpoints go to ``./bft-checkpoints/<script name>``, so the
same script runs unchanged. docs/runtime.md describes the contract and its environment variables.
``ElasticSampler`` (bft.train.sampler) feeds a DataLoader so that resizes neither repeat nor skip data;
``FixedGlobalBatch`` and ``FixedPerWorkerBatch`` (bft.train.semantics) say what a resize does to the model;
``HSDPState`` (bft.train.hsdp) resizes a model sharded in each node and replicated across nodes in place.
"""

from __future__ import annotations

from .elastic import ElasticState, device
from .hsdp import HSDPState
from .sampler import ElasticSampler
from .semantics import FixedGlobalBatch, FixedPerWorkerBatch, linear_scaling
from .worker import (
    EXIT_INPLACE_FAILED,
    EXIT_RESIZE,
    checkpoint,
    checkpoint_path,
    configuration,
    exit_finished,
    exit_for_resize,
    job_id,
    rank,
    report,
    resume,
    should_stop,
    target_samples,
    under_manager,
    world_size,
)

__all__ = [
    "EXIT_RESIZE",
    "EXIT_INPLACE_FAILED",
    "ElasticSampler",
    "ElasticState",
    "HSDPState",
    "FixedGlobalBatch",
    "FixedPerWorkerBatch",
    "linear_scaling",
    "device",
    "report",
    "resume",
    "checkpoint",
    "checkpoint_path",
    "should_stop",
    "exit_for_resize",
    "exit_finished",
    "target_samples",
    "configuration",
    "job_id",
    "rank",
    "world_size",
    "under_manager",
]
