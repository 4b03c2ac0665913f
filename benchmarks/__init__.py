"""Benchmarks of parallel_loader: run each as ``python -m benchmarks.NAME --help``.

Speed is measured here, never asserted in unit tests; ``tests/test_benchmarks.py``
only runs each script's smallest configuration to keep it from rotting.
"""
