"""A warm standby: a process on an idle node that has imported torch and waits for a job.

    python -m bft.train.standby

``bft manager --resize inplace`` starts one per process (``--procs-per-node``; each bound to its
device, LOCAL_RANK) on every node of its pool that runs nothing of a job (through the node source's
``launch``, like a worker), so that a job launched there skips the interpreter's start and the
imports (and the device's context): most of a launch (bench/README.md, "Launch → first step").
The assignment comes on standard input, a pipe only the manager holds: one JSON line
``{"argv": [python, "-m", "bft.train.run", SCRIPT, ARGS...], "env": {...}, "cwd": DIR, "log": FILE}``.
The standby then runs the script exactly as ``python -m bft.train.run`` would (the same function),
in that directory, with that environment, its output appended to the job's log. End of input
without an assignment (the manager closed the pipe, or died) ends it with status 0. No socket, no
file: nobody but the manager can hand it work (docs/security.md).
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any, Dict, List

# Warm-up: what a training script imports in any case, and what torch imports lazily on its first
# optimizer (torch._dynamo: a second on this machine). Nothing here reads the job's environment (the
# device is the standby's own LOCAL_RANK, the local rank it serves).
import torch
import torch.distributed  # noqa: F401 - imported for the job
import torch.nn.parallel  # noqa: F401 - imported for the job

from . import elastic, run  # noqa: F401 - elastic: imported for the job

torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=0.0)
if torch.cuda.is_available():  # its device's context now, not at the job's start (the manager's LOCAL_RANK)
    torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    torch.zeros(1, device="cuda")

EXIT_BAD_ASSIGNMENT = 2


def parse_assignment(line: bytes) -> Dict[str, Any]:
    """The manager's assignment line, checked; ValueError names the field that is wrong."""
    try:
        a = json.loads(line)
    except ValueError as e:
        raise ValueError(f"assignment: not JSON ({e})") from None
    if not isinstance(a, dict):
        raise ValueError("assignment: expected a JSON object")
    argv = a.get("argv")
    if not (isinstance(argv, list) and len(argv) >= 4 and all(isinstance(x, str) for x in argv)
            and argv[1:3] == ["-m", "bft.train.run"]):
        raise ValueError("assignment: argv must be [python, '-m', 'bft.train.run', SCRIPT, ARGS...]")
    env = a.get("env")
    if not (isinstance(env, dict) and all(isinstance(k, str) and isinstance(v, str) for k, v in env.items())):
        raise ValueError("assignment: env must map names to strings")
    for field in ("cwd", "log"):
        if not isinstance(a.get(field), str):
            raise ValueError(f"assignment: {field} must be a path")
    return a


def _redirect_output(log: str) -> None:
    """The script's output goes to the job's log, as a worker started for the job writes it."""
    try:
        fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    except OSError as e:  # a node that does not see the state directory: the standby's own log keeps it
        print(f"bft.train.standby: cannot open the job's log {log} ({e}); output stays here", file=sys.stderr)
        return
    sys.stdout.flush()
    sys.stderr.flush()
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)


def main(argv: List[str]) -> int:
    if len(argv) > 1:
        print("usage: python -m bft.train.standby (the assignment comes on standard input)", file=sys.stderr)
        return EXIT_BAD_ASSIGNMENT
    line = sys.stdin.buffer.readline()
    if not line.strip():
        return 0  # no assignment: the manager let the node go, or it is gone
    try:
        a = parse_assignment(line)
    except ValueError as e:
        print(f"bft.train.standby: {e}", file=sys.stderr, flush=True)
        return EXIT_BAD_ASSIGNMENT
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)  # the script reads nothing of the manager's pipe
    os.close(null)
    _redirect_output(a["log"])
    os.chdir(a["cwd"])
    sys.path[0] = a["cwd"]  # as `python -m bft.train.run` started in that directory has it
    os.environ.update(a["env"])
    sys.argv = [run.__file__, *a["argv"][3:]]
    return run.main()


if __name__ == "__main__":
    sys.exit(main(sys.argv))
