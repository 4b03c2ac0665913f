"""EPIC-KITCHENS' action segments: a CSV of videos, ``HH:MM:SS.ff`` times, and verb and noun classes.

``epic_kitchens_samples`` reads a CSV such as ``EPIC_100_train.csv``. Each row
is a segment ``[start_timestamp, stop_timestamp)`` of the long video
``<participant_id>/videos/<video_id>.MP4``, or ``<video_id>.mp4``, under the
root. Its label comes from one class column, or one from each of several (a
verb and a noun, a label a head). No video is opened. See :doc:`/video/datasets`.
"""

from __future__ import annotations

import csv
import os
import re
from collections.abc import Sequence
from pathlib import Path

from .._base.keys import is_url
from .annotations import VIDEO_EXTENSIONS
from .exclude import Exclude, excluding
from .finding import VideoFinder, report_missing
from .parsing import AnnotationError, check_segment, root_path, some_names
from .sample_list import SampleList, VideoSample

__all__ = ["epic_kitchens_samples"]


_COLUMNS = ("participant_id", "video_id", "start_timestamp", "stop_timestamp")
_TIME = re.compile(r"(\d+):([0-5]\d):([0-5]\d(?:\.\d*)?)")


def epic_kitchens_samples(
    csv_file: str | os.PathLike[str],
    root: str | os.PathLike[str],
    labels: str | Sequence[str] = ("verb_class", "noun_class"),
    classes: Sequence[str] | Sequence[Sequence[str]] | None = None,
    *,
    exclude: Exclude = None,
) -> SampleList:
    """Return the action segments of an EPIC-KITCHENS CSV, such as ``EPIC_100_train.csv``.

    The CSV needs ``participant_id``, ``video_id``, ``start_timestamp``,
    ``stop_timestamp`` and the ``labels`` columns; others are ignored. Times
    are ``HH:MM:SS.ff``. A class column holds class numbers from 0.

    One label column gives each sample its number as label. Several give a
    tuple of labels a sample, one a head in the columns' order: ``(verb, noun)``
    by default. ``classes`` is then one tuple of names a head (``SampleList.heads``).

    A row's file is ``root/<participant_id>/videos/<video_id>.MP4``, else
    ``root/<video_id>.mp4``, with any of ``VIDEO_EXTENSIONS``. Each folder is
    listed once. Rows with no file are left out, with one warning that counts
    them and names the first. A URL root is kept, and its first layout taken
    without a check. See :doc:`/video/datasets`.

    Args:
        csv_file: the CSV.
        root: the folder holding the videos, or a URL.
        labels: the class column giving the label, or columns giving one label a head.
        classes: each label column's class names in number order: a list, or
            one list per column. Pass the training set's to a validation set.
            Default: the numbers, up to the largest in the CSV.
        exclude: files to leave out (see ``excluding``).

    Raises:
        TypeError: ``labels`` is not a column name or a sequence of them.
        FileNotFoundError: there is no ``csv_file``.
        AnnotationError: a column is missing; or a row's time or class number
            is malformed, or its segment is empty. The error names the file and the line.
        ValueError: ``classes`` does not give one list per label column, or no row has a file.
    """
    columns = (labels,) if isinstance(labels, str) else tuple(labels)
    if not columns or not all(isinstance(c, str) for c in columns):
        raise TypeError(f"labels must be a column name or a sequence of them, got {labels!r}")
    csv_file = Path(csv_file)
    rows = _rows(csv_file, columns)
    if not rows:
        raise ValueError(f"{csv_file} lists no segment")
    names = _class_names(classes, columns, rows, csv_file)
    root = root_path(root)
    finder = None if is_url(root) else VideoFinder(root, VIDEO_EXTENSIONS)
    samples: list[VideoSample] = []
    missing: list[tuple[int, str]] = []
    for line, participant, video, start, end, numbers in rows:
        layouts = (os.path.join(participant, "videos", f"{video}.MP4"), f"{video}.mp4")
        found = layouts[0] if finder is None else next(filter(None, map(finder.find, layouts)), None)
        if found is None:
            missing.append((line, layouts[0]))
            continue
        label = numbers if len(numbers) > 1 else numbers[0]
        samples.append(VideoSample(str(root / found), label, start, end, f"{csv_file}, line {line}"))
    report_missing(str(csv_file), missing, len(rows), len(samples), root)
    return excluding(SampleList(names if len(names) > 1 else names[0], samples), exclude)


def _rows(csv_file: Path, columns: tuple[str, ...]) -> list[tuple[int, str, str, float, float, tuple[int, ...]]]:
    """Return each row's ``(line, participant, video, start, end, class numbers)``, checked."""
    rows = []
    with open(csv_file, newline="", encoding="utf-8") as f:
        reader = csv.DictReader(f)
        lacking = [c for c in (*_COLUMNS, *columns) if c not in (reader.fieldnames or ())]
        if lacking:
            reason = f"the header lacks the column(s) {lacking}; it has {reader.fieldnames}"
            raise AnnotationError(f"{csv_file}, line 1", reason)
        for row in reader:
            origin = f"{csv_file}, line {reader.line_num}"
            if None in row or None in row.values():
                raise AnnotationError(origin, f"expected {len(reader.fieldnames or ())} fields as in the header")
            start, end = check_segment(
                origin, _seconds(origin, row, "start_timestamp"), _seconds(origin, row, "stop_timestamp")
            )
            numbers = tuple(_class_number(origin, row, c) for c in columns)
            rows.append((reader.line_num, row["participant_id"], row["video_id"], start, end, numbers))
    return rows


def _seconds(origin: str, row: dict[str, str], column: str) -> float:
    """Return a ``HH:MM:SS.ff`` time as seconds.

    Raises:
        AnnotationError: the time is not of that form.
    """
    match = _TIME.fullmatch(row[column].strip())
    if match is None:
        raise AnnotationError(origin, f"{column} must be HH:MM:SS.ff, got {row[column]!r}")
    hours, minutes, seconds = match.groups()
    return int(hours) * 3600 + int(minutes) * 60 + float(seconds)


def _class_number(origin: str, row: dict[str, str], column: str) -> int:
    value = row[column].strip()
    if not (value.isascii() and value.isdigit()):
        raise AnnotationError(origin, f"{column} must be a class number from 0, got {row[column]!r}")
    return int(value)


def _class_names(
    classes: Sequence[str] | Sequence[Sequence[str]] | None,
    columns: tuple[str, ...],
    rows: list[tuple[int, str, str, float, float, tuple[int, ...]]],
    csv_file: Path,
) -> list[tuple[str, ...]]:
    """Return each label column's class names: those given, checked against the rows, or the numbers.

    Raises:
        ValueError: ``classes`` does not give one list of names per column.
        AnnotationError: a row's class number has no name.
    """
    if classes is None:
        return [tuple(str(k) for k in range(max(row[5][i] for row in rows) + 1)) for i in range(len(columns))]
    heads = [classes] if len(columns) == 1 else list(classes)
    if len(heads) != len(columns) or any(isinstance(h, str) or not isinstance(h, Sequence) for h in heads):
        raise ValueError(f"classes must give one list of class names per label column {columns}, got {classes!r:.100}")
    names = [tuple(str(n) for n in head) for head in heads]
    for line, *_, numbers in rows:
        for column, number, head in zip(columns, numbers, names, strict=True):
            if number >= len(head):
                raise AnnotationError(
                    f"{csv_file}, line {line}", f"{column} {number} has no name: the classes are {some_names(head)}"
                )
    return names
