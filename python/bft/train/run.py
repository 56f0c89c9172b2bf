"""Runs a training script as ``__main__`` and leaves its exit status for the manager.

    python -m bft.train.run SCRIPT [ARGS...]

The in-place resize method starts scripts without torchrun, through this: a manager restarted while
the script ran is not its parent, so it reads the status from ``BFT_AGENT_EXIT_FILE`` instead.
"""

from __future__ import annotations

import os
import runpy
import sys
import traceback

from . import protocol
from ._netif import gloo_on_the_node_address
from .worker import leave_exit_status


def main() -> int:
    if len(sys.argv) < 2:
        print("usage: python -m bft.train.run SCRIPT [ARGS...]", file=sys.stderr)
        return 2
    try:
        protocol.resolve_job_secret()  # the launch carries the file's path, never the secret itself
    except ValueError as e:
        print(f"bft.train.run: {e}", file=sys.stderr, flush=True)
        leave_exit_status(2)
        return 2
    script = sys.argv[1]
    sys.argv = sys.argv[1:]
    gloo_on_the_node_address(os.environ.get(protocol.ENV_NODE_ADDR, ""))  # before the script's first group
    sys.path.insert(0, os.path.dirname(os.path.abspath(script)))  # as `python SCRIPT` does
    code = 0
    try:
        runpy.run_path(script, run_name="__main__")
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        if not isinstance(e.code, (int, type(None))):
            print(e.code, file=sys.stderr)
    except BaseException:  # noqa: BLE001 - reported like Python reports it, with its status
        traceback.print_exc()
        code = 1
    sys.stdout.flush()
    sys.stderr.flush()
    leave_exit_status(code)
    return code


if __name__ == "__main__":
    sys.exit(main())
