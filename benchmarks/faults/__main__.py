"""``python -m benchmarks.faults``: the exit status is 1 when a run failed."""

import sys

from .cli import main

sys.exit(0 if not main()["failures"] else 1)
