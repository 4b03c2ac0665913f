"""``python -m benchmarks.sweep``."""

from .cli import main

main()
