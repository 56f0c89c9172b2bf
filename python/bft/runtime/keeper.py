"""``python -m bft.runtime.keeper``: the keeper's command line (a running keeper that an earlier manager
started carries it). The keeper is :mod:`.ops.keeper`."""

from __future__ import annotations

import sys

from .ops.keeper import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
