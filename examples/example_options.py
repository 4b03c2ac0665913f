"""Command-line options the example scripts share."""

from __future__ import annotations

import argparse

__all__ = ["add_output_arguments"]


def add_output_arguments(parser: argparse.ArgumentParser) -> None:
    """``--progress/--no-progress`` for ``Train.run``, and ``--verbose`` for TensorFlow's start-up log."""
    parser.add_argument(
        "--progress",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="a progress bar per epoch (default: on a terminal; otherwise one line per epoch)",
    )
    parser.add_argument("--verbose", action="store_true", help="show TensorFlow's start-up log")
