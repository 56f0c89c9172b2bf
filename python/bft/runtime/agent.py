"""``python -m bft.runtime.agent``: the command line every node's torchrun agent is started with (and
that running agents of an earlier manager still carry). The agent is :mod:`.onnode.torchrun_agent`."""

from __future__ import annotations

import sys

from .onnode.torchrun_agent import _exit, main

if __name__ == "__main__":
    _exit(main(sys.argv[1:]))
