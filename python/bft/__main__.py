"""``python -m bft replay ...``: the same as the ``bft`` console script."""

import sys

from .cli import main

sys.exit(main())
