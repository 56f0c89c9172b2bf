"""This worker process, the training side's state behind the contract that :mod:`bft.train`
exposes: who it is (rank, world size, job), its progress reports, its checkpoints, the stop a
SIGTERM requests (with the grace time to checkpoint) and its exit status. A module of its own so
that :mod:`.elastic` builds on it without importing the package it is part of.
"""

from __future__ import annotations

import atexit
import gc
import io
import os
import pickle
import signal
import sys
import threading
from pathlib import Path
from typing import Any, NoReturn, Optional

from .._atomic import write_atomically
from ..jobs import FULL_CONFIGURATION
from . import _reporter
from .protocol import (
    DEFAULT_GRACE_S,
    ENV_CHECKPOINT_DIR,
    ENV_CONFIGURATION,
    ENV_EXIT_FILE,
    ENV_GRACE_S,
    ENV_JOB_ID,
    ENV_TARGET_SAMPLES,
)

# The exit status of a worker that stopped because its job is being resized. Non-zero on purpose:
# torchrun treats a zero exit as "the job is done" and a non-zero one as "restart the workers".
EXIT_RESIZE = 75
# The exit status of a worker whose in-place resize failed (a peer vanished, a timeout): the manager
# falls back to relaunching the job from its last checkpoint.
EXIT_INPLACE_FAILED = 76

_CHECKPOINT_NAME = "checkpoint.pt"
_ZIP_MAGIC = b"PK\x03\x04"  # torch.save's format; pickle's starts otherwise
stop_requested = threading.Event()
_stop_agreed = False
_handler_installed = False
_handler_lock = threading.Lock()


def _env_int(name: str, default: int) -> int:
    try:
        return int(os.environ.get(name, default))
    except ValueError:
        return default


def rank() -> int:
    """This worker's global rank (torchrun's RANK; 0 for a plain ``python train.py``)."""
    return _env_int("RANK", 0)


def world_size() -> int:
    """The number of workers (torchrun's WORLD_SIZE; 1 for a plain ``python train.py``)."""
    return max(1, _env_int("WORLD_SIZE", 1))


def under_manager() -> bool:
    """True when the job was launched by ``bft manager``."""
    return ENV_JOB_ID in os.environ


def job_id() -> str:
    """The job's id under the manager, else the script's file name without extension."""
    return os.environ.get(ENV_JOB_ID) or Path(sys.argv[0] or "job").stem or "job"


def target_samples(default: Optional[int] = None) -> Optional[int]:
    """The job's work in samples (``bft submit --samples``), else ``default``."""
    value = os.environ.get(ENV_TARGET_SAMPLES)
    try:
        return int(float(value)) if value else default
    except ValueError:
        return default


def configuration() -> str:
    """The configuration the manager runs this job in: "full" (full backpropagation), or one of the
    names given to ``bft submit --configuration`` (structured partial backpropagation: the script
    sets up bft.train.spb accordingly, docs/spb.md). "full" outside the manager. A change of
    configuration restarts the job from its checkpoint, so it is fixed for a process's lifetime."""
    return os.environ.get(ENV_CONFIGURATION) or FULL_CONFIGURATION


def report(samples: float, *, all_ranks: bool = False) -> None:
    """Reports the cumulative number of samples this job has processed.

    Call it once per step. It stores two numbers and returns (well under a microsecond); a
    background thread sends the latest value to the manager about twice a second, so a lost
    datagram only delays the manager's view. Only rank 0's reports count, unless ``all_ranks``:
    then every rank reports its own samples and the manager adds them up. Never raises.
    """
    try:
        install_handler()
        _reporter.REPORTER.record(samples, all_ranks)
    except Exception:  # noqa: BLE001 - the training loop must never see a reporting error
        pass


def checkpoint_path() -> Path:
    """Where this job's checkpoint lives (the manager's job directory, else ./bft-checkpoints/<job>)."""
    base = os.environ.get(ENV_CHECKPOINT_DIR)
    directory = Path(base) if base else Path.cwd() / "bft-checkpoints" / job_id()
    return directory / _CHECKPOINT_NAME


def _serialize(state: Any) -> bytes:
    buffer = io.BytesIO()
    torch = sys.modules.get("torch")
    if torch is not None:
        torch.save(state, buffer)
    else:
        pickle.dump(state, buffer, protocol=pickle.HIGHEST_PROTOCOL)
    return buffer.getvalue()


def checkpoint(state: Any, *, all_ranks: bool = False) -> Optional[Path]:
    """Saves ``state`` atomically (temporary file, fsync, rename, fsync of the directory), readable
    by its owner only (0600 in a 0700 directory).

    Only rank 0 writes (data-parallel ranks hold the same state) unless ``all_ranks``; returns the
    path written, or None on the other ranks. Uses ``torch.save`` when torch is imported, pickle
    otherwise. A crash at any moment leaves either the old or the new checkpoint, never a torn one.
    """
    install_handler()
    if rank() != 0 and not all_ranks:
        return None
    path = checkpoint_path()
    if all_ranks:
        path = path.with_name(f"{path.stem}.rank{rank()}{path.suffix}")
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(path.parent, 0o700)  # owner-only whatever the umask: a checkpoint holds the model
    data = _serialize(state)
    write_atomically(path, data, sync_directory=True)
    _reporter.REPORTER.flush()
    return path


def resume(default: Any = None, *, map_location: str = "cpu") -> Any:
    """The state of the last :func:`checkpoint` of this job, or ``default`` on a first start."""
    install_handler()
    path = checkpoint_path()
    if not path.exists():
        return default
    data = path.read_bytes()
    if not data.startswith(_ZIP_MAGIC):  # written by pickle (torch was not imported then)
        return pickle.loads(data)
    import torch

    return torch.load(io.BytesIO(data), map_location=map_location, weights_only=False)


def should_stop() -> bool:
    """True once a SIGTERM reached this worker or, under torch.distributed, any worker of the job.

    Call it at a step boundary: under an initialised process group it costs one all-reduce of one
    integer, so every rank stops at the same step and rank 0's checkpoint matches them all. If a
    peer has vanished (its node was reclaimed) the all-reduce fails and this returns True too.
    """
    global _stop_agreed
    install_handler()
    if _stop_agreed:
        return True
    local = stop_requested.is_set()
    dist = _distributed()
    if dist is None:
        _stop_agreed = local
        return local
    try:
        import torch

        flag = torch.tensor([1 if local else 0], dtype=torch.int32)
        dist.all_reduce(flag, op=dist.ReduceOp.MAX)
        _stop_agreed = bool(flag.item())
    except Exception:  # noqa: BLE001 - a lost peer means the group is being torn down: stop
        _stop_agreed = True
    return _stop_agreed


def exit_for_resize() -> None:
    """Ends this worker after :func:`should_stop`: flushes the last report and exits with
    :data:`EXIT_RESIZE` (under the manager) or 0 (a plain run that was asked to stop)."""
    exit_now(EXIT_RESIZE if under_manager() or "TORCHELASTIC_RUN_ID" in os.environ else 0)


def exit_finished() -> NoReturn:
    """Ends a worker whose training is done, with status 0: every rank arrives (a barrier) and the
    process group is destroyed, if one is initialised; then what a normal exit does (other threads
    joined, ``atexit`` handlers run, the last report among them, open files flushed); then the process
    ends without the interpreter's teardown.

    Why not a plain return: a model that holds the group (DDP's reducer, FSDP2's mesh) keeps gloo's
    worker threads alive past ``destroy_process_group``. One of them may still be releasing the last
    collective's tensors when the interpreter starts to tear down; it then needs the GIL, the
    interpreter ends that thread instead, and the unwinding through a destructor aborts the process
    (SIGABRT, "terminate called without an active exception") after the script's work is done: a
    failed job to torchrun and the manager (docs/runtime.md has the trace and the measured rate).
    """
    if threading.current_thread() is not threading.main_thread():
        raise RuntimeError("bft.train.exit_finished() ends the process: call it from the main thread")
    dist = _distributed()
    if dist is not None:
        dist.barrier()  # every rank arrives before any tears down
        dist.destroy_process_group()
    # What the interpreter's exit does first, in its order: the threads' exit hooks (a thread pool's
    # workers are told to finish), the wait for every non-daemon thread, then the atexit handlers.
    threading._shutdown()
    atexit._run_exitfuncs()
    _flush_open_files()
    exit_now(0)


def _flush_open_files() -> None:
    """Flushes every open Python file object, as the interpreter's teardown would when it closes them:
    a log line written without a flush is not lost to the exit that skips the teardown."""
    for obj in gc.get_objects():
        try:
            if isinstance(obj, io.IOBase) and not obj.closed and obj.writable():
                obj.flush()
        except (OSError, ValueError):  # a broken pipe, a detached or unwritable stream: nothing to keep
            pass


def exit_now(code: int) -> None:
    """Flushes the last report and the output, leaves the exit status for the manager, and exits
    without waiting for anything (a peer's collective, a DataLoader worker)."""
    _reporter.REPORTER.flush()
    sys.stdout.flush()
    sys.stderr.flush()
    leave_exit_status(code)
    os._exit(code)


def leave_exit_status(code: int) -> None:
    """Writes ``code`` where the manager reads it (BFT_AGENT_EXIT_FILE): a manager restarted after
    this process was started is not its parent and cannot wait for it."""
    path = os.environ.get(ENV_EXIT_FILE)
    if path:
        try:
            with open(path, "w") as f:
                f.write(str(code))
        except OSError:
            pass


def _distributed():
    dist = sys.modules.get("torch.distributed")
    if dist is not None and dist.is_available() and dist.is_initialized():
        return dist
    return None


def grace_s() -> float:
    try:
        return max(0.0, float(os.environ.get(ENV_GRACE_S, DEFAULT_GRACE_S)))
    except ValueError:
        return DEFAULT_GRACE_S


def _on_sigterm(signum, frame) -> None:  # noqa: ARG001 - signal handler signature
    if stop_requested.is_set():
        return
    stop_requested.set()
    # The loop has the grace time to reach should_stop() and save; then the helper ends the worker.
    timer = threading.Timer(grace_s(), _grace_expired)
    timer.daemon = True
    timer.start()


def _grace_expired() -> None:
    print(f"bft.train: no checkpoint within the {grace_s():g} s grace time after SIGTERM; exiting",
          file=sys.stderr, flush=True)
    exit_for_resize()


def install_handler() -> None:
    """Installs the SIGTERM handler once, from the main thread (signal handlers can only go there)."""
    global _handler_installed
    if _handler_installed or threading.current_thread() is not threading.main_thread():
        return
    with _handler_lock:
        if not _handler_installed:
            signal.signal(signal.SIGTERM, _on_sigterm)
            _handler_installed = True
