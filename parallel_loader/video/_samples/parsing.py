"""Reading annotation files: lines, fields and segment times, checked as they are read.

The sample-list readers share these helpers. A problem is an ``AnnotationError``
that names the file and the line. ``root_path`` turns a data set's root into a
``Path``, or a ``RemotePath`` for a URL. See :doc:`/video/datasets`.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np

from ..._core.exceptions import PicklesAsItself
from .._base.keys import is_url
from .._bytes.listing import RemotePath
from .sample_list import VideoSample

__all__ = [
    "AnnotationError",
    "check_segment",
    "column_seconds",
    "field_lines",
    "nonempty",
    "root_path",
    "some_names",
    "text_lines",
    "whole_seconds",
]


class AnnotationError(PicklesAsItself, ValueError):
    """An annotation file or a sample list that cannot be used as it is.

    It is raised for a malformed line or an unknown class.

    Attributes:
        origin: where the problem is, such as ``"trainlist01.txt, line 17"``.
        reason: what is wrong there.
    """

    def __init__(self, origin: str, reason: str) -> None:
        self.origin = origin
        self.reason = reason
        super().__init__(f"{origin}: {reason}")


def root_path(root: object) -> Path:
    """Return ``root`` as a ``Path``, or as a ``RemotePath`` for a URL.

    Raises:
        TypeError: ``root`` is not a path.
    """
    if not isinstance(root, str | os.PathLike):
        raise TypeError(f"root must be the path of a folder of class folders, got {type(root).__name__} {root!r}")
    if is_url(root):
        return RemotePath(os.fspath(root))  # type: ignore[return-value]
    return Path(root)


def text_lines(path: Path) -> Iterator[tuple[str, str]]:
    """Yield ``(origin, line)`` for each non-blank line of a text file, stripped."""
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            if line.strip():
                yield f"{path}, line {number}", line.strip()


def field_lines(path: Path) -> Iterator[tuple[str, list[str]]]:
    """Yield ``(origin, fields)`` for each non-blank line of a whitespace-separated text file (CRLF or LF)."""
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            fields = line.split()
            if fields:
                yield f"{path}, line {number}", fields


def check_segment(origin: str, start: object, end: object) -> tuple[float | None, float | None]:
    """Check a segment's times in seconds and return them as floats.

    Each time is a number or ``None``, and ``0 <= start < end``.

    Raises:
        AnnotationError: a time is not a finite number, or the segment is empty or starts before 0.
    """
    for name, value in (("start", start), ("end", end)):
        if value is not None and (
            isinstance(value, bool) or not isinstance(value, int | float | np.number) or not math.isfinite(value)
        ):
            raise AnnotationError(origin, f"the segment's {name} must be a number of seconds or None, got {value!r}")
    if start is not None and start < 0:
        raise AnnotationError(origin, f"the segment starts before 0 s: {start!r}")
    if start is not None and end is not None and end <= start:
        raise AnnotationError(origin, f"the segment ends at {end!r} s, not after its start at {start!r} s")
    return (None if start is None else float(start)), (None if end is None else float(end))


def column_seconds(origin: str, row: dict[str, str], column: str) -> float:
    """Return a CSV row's ``column`` as seconds.

    Raises:
        AnnotationError: the value is not a number.
    """
    try:
        return float(row[column])
    except ValueError:
        raise AnnotationError(origin, f"{column} must be a number of seconds, got {row[column]!r}") from None


def whole_seconds(seconds: float) -> int | float:
    """Return an int for a whole number of seconds, so that a pattern can format it with ``:06d``."""
    return int(seconds) if seconds.is_integer() else seconds


def nonempty(samples: list[VideoSample], where: object) -> tuple[VideoSample, ...]:
    """Return ``samples`` as a tuple.

    Raises:
        ValueError: there is none; the message names ``where``.
    """
    if not samples:
        raise ValueError(f"{where} lists no video")
    return tuple(samples)


def some_names(names: Sequence[str], limit: int = 10) -> str:
    """Return the first few names, for an error message."""
    shown = ", ".join(repr(n) for n in names[:limit])
    return f"{shown}, ... ({len(names)} in all)" if len(names) > limit else shown
