"""Command-line options the example scripts share (the benchmark scripts use them too)."""

from __future__ import annotations

import argparse

__all__ = ["add_output_arguments"]


def add_output_arguments(parser: argparse.ArgumentParser) -> None:
    """``--progress/--no-progress`` for the progress display, and ``--verbose`` for TensorFlow's start-up log."""
    parser.add_argument(
        "--progress",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="a progress bar per epoch or run (default: on a terminal; otherwise one line each, on stderr)",
    )
    parser.add_argument("--verbose", action="store_true", help="show TensorFlow's start-up log")
