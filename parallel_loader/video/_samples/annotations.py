"""Readers of sample lists: which videos, or segments of videos, a data set holds, and their labels.

Each reader builds a ``SampleList`` from a layout that public data sets ship:

* ``folder_samples``: a tree ``root/<class>/<video>``;
* ``ucf101_samples``: UCF101's ``classInd.txt`` and ``trainlist0N.txt`` / ``testlist0N.txt``;
* ``hmdb51_samples``: HMDB51's ``<class>_test_split<N>.txt`` files;
* ``kinetics_samples``: a CSV ``label,youtube_id,time_start,time_end,split``;
* ``sample_list``: an explicit list of ``(path, label)`` or ``(path, label, start, end)``.

Each reader takes ``exclude``, the files to leave out (see ``excluding``). A
malformed line or an unknown class is an ``AnnotationError`` that names the file
and the line. No reader opens a video. Each sample keeps where it was listed
(``origin``), so errors about its file can say so. See :doc:`/video/datasets`.
"""

from __future__ import annotations

import csv
import math
import os
import string
from collections.abc import Sequence
from pathlib import Path
from typing import Literal

import numpy as np

from .exclude import Exclude, excluding
from .finding import VideoFinder, folder_files, report_missing
from .parsing import (
    AnnotationError,
    check_segment,
    column_seconds,
    field_lines,
    nonempty,
    root_path,
    some_names,
    whole_seconds,
)
from .row_labels import row_labels
from .sample_list import SampleList, SampleListBuilder, VideoSample, common_folder

__all__ = [
    "KINETICS_PATTERN",
    "VIDEO_EXTENSIONS",
    "folder_samples",
    "hmdb51_samples",
    "kinetics_samples",
    "sample_list",
    "ucf101_samples",
]


VIDEO_EXTENSIONS = frozenset({".avi", ".mp4", ".mkv", ".mov", ".webm", ".mpg", ".mpeg", ".m4v", ".wmv", ".flv"})

# Where the Kinetics download scripts put a clip: under its label, named by its video and times.
KINETICS_PATTERN = "{label}/{youtube_id}_{time_start:06d}_{time_end:06d}.mp4"
_KINETICS_COLUMNS = ("label", "youtube_id", "time_start", "time_end")


def sample_list(
    rows: Sequence[Sequence[object]],
    classes: Sequence[str] | Sequence[Sequence[str]] | None = None,
    root: str | os.PathLike[str] | None = None,
    *,
    exclude: Exclude = None,
) -> SampleList:
    """Make a sample list from ``(path, label)`` or ``(path, label, start_seconds, end_seconds)`` rows.

    Labels are either all ints (indices into ``classes``) or all strings (class
    names). Without ``classes``, int labels name their classes ``"0"``, ``"1"``,
    ... up to the largest label. Without ``classes``, string labels are sorted.
    A segment's ``start`` or ``end`` may be ``None`` for the start or end of the
    video. See :doc:`/video/datasets`.

    A label may be a tuple, one label a head: ``(path, (verb, noun))``. Then
    every row's is, of one length, and ``classes`` gives one list of names a
    head. Each head follows the rules above on its own.

    Args:
        rows: the samples.
        classes: class names in label order, or one list of them a head; pass the training set's for a validation set.
        root: a folder that relative paths are relative to.
        exclude: files to leave out (see ``excluding``).

    Raises:
        AnnotationError: a row is malformed, names a class not in ``classes``, or
            has a segment that ends before it starts; the error says which row.
        ValueError: ``rows`` is empty, or ``classes`` does not give one list of names a head.
    """
    if len(rows) == 0:
        raise ValueError("the sample list is empty")
    parsed: list[tuple[str, float | None, float | None]] = []
    labels: list[object] = []
    for i, row in enumerate(rows):
        origin = f"sample {i}"
        if isinstance(row, str | bytes) or not isinstance(row, Sequence) or len(row) not in (2, 4):
            raise AnnotationError(
                origin, f"expected (path, label) or (path, label, start_seconds, end_seconds), got {row!r}"
            )
        path = os.fspath(row[0])
        if root is not None:
            path = os.path.join(root, path)
        start, end = (row[2], row[3]) if len(row) == 4 else (None, None)
        parsed.append((path, *check_segment(origin, start, end)))
        labels.append(row[1])
    names, numbers = row_labels(labels, classes)
    prefix = common_folder([path for path, _, _ in parsed])
    builder = SampleListBuilder(prefix)
    for i, (path, start, end) in enumerate(parsed):
        builder.add(path[len(prefix) :], numbers[i], start, end, origin=("sample {}", i))
    return excluding(builder.build(names), exclude)


def _one_level_down(root: Path, name: str, extensions: set[str]) -> str:
    """A hint when ``root`` is one level above the class folders (``data`` for ``data/train``)."""
    below = root / name
    if any(
        p.is_file() and p.suffix.lower() in extensions for sub in below.iterdir() if sub.is_dir() for p in sub.iterdir()
    ):
        return f": {below} holds class folders itself; did you mean root={str(below)!r}?"
    return ""


def folder_samples(
    root: str | os.PathLike[str],
    classes: Sequence[str] | None = None,
    extensions: Sequence[str] = tuple(sorted(VIDEO_EXTENSIONS)),
    *,
    exclude: Exclude = None,
) -> SampleList:
    """Return the videos of a tree ``root/<class>/<video>``, labelled by class folder.

    Files and folders whose names start with ``.`` are ignored, such as macOS's
    ``._clip.avi``. So are files whose names do not end in one of ``extensions``.
    See :doc:`/video/datasets`.

    Args:
        root: the folder whose subfolders are the classes.
        classes: class folder names in label order; default: every subfolder, sorted.
        extensions: the file name endings that count as videos (any case).
        exclude: files to leave out (see ``excluding``).

    Raises:
        FileNotFoundError: ``root`` or a named class folder does not exist.
        ValueError: ``root`` is not a folder, or has no class folder, or a class
            folder has no video (the message says where it looked).
    """
    root = root_path(root)
    for name, value in (("classes", classes), ("extensions", extensions)):
        if isinstance(value, str):
            raise TypeError(f"{name} must be a list of strings, got the single string {value!r}: pass [{value!r}]")
    extensions = {e.lower() for e in extensions}
    if not root.exists():
        raise FileNotFoundError(2, "video root folder not found", str(root))
    if not root.is_dir():
        raise ValueError(f"{root}: the video root must be a folder of class folders")
    if classes is None:
        classes = sorted(p.name for p in root.iterdir() if p.is_dir() and not p.name.startswith("."))
        if not classes:
            raise ValueError(f"{root} has no class folders: expected {root}/<class>/<video files>")
    else:
        classes = list(classes)
        missing = [c for c in classes if not (root / c).is_dir()]
        if missing:
            raise FileNotFoundError(2, f"class folders {missing} not found", str(root))
    builder = SampleListBuilder(os.path.join(str(root), ""))
    for label, name in enumerate(classes):
        # A URL's folder is listed through its store; a local one with scandir, which needs no stat per file.
        files = sorted(f for f in folder_files(root / name) if os.path.splitext(f)[1].lower() in extensions)
        if not files:
            raise ValueError(
                f"{root / name} has no video files (looked for {', '.join(sorted(extensions))}); "
                f"every class folder needs at least one{_one_level_down(root, name, extensions)}"
            )
        folder = str(Path(name)) + os.sep
        for file in files:
            builder.add(folder + file, label)
    return excluding(builder.build(tuple(classes)), exclude)


def ucf101_samples(
    root: str | os.PathLike[str],
    split_dir: str | os.PathLike[str],
    split: int = 1,
    subset: Literal["train", "test"] = "train",
    *,
    exclude: Exclude = None,
) -> SampleList:
    """Return the videos of one UCF101 split, from the files of ``UCF101TrainTestSplits``.

    ``split_dir/classInd.txt`` numbers the classes from 1 (``1 ApplyEyeMakeup``);
    ``trainlist0N.txt`` lists ``<class>/<video> <number>`` and ``testlist0N.txt``
    just ``<class>/<video>``. Labels are the class numbers less one, so they run
    from 0 in ``classInd.txt``'s order. A video's class is its folder's; where a
    line also gives a number, the two must agree. See :doc:`/video/datasets`.

    Args:
        root: the folder holding ``<class>/<video>.avi``.
        split_dir: the folder holding ``classInd.txt`` and the lists.
        split: which of the splits (UCF101 ships 1, 2 and 3).
        subset: ``"train"`` reads ``trainlist0N.txt``, ``"test"`` ``testlist0N.txt``.
        exclude: files to leave out (see ``excluding``).

    Raises:
        FileNotFoundError: ``classInd.txt`` or the list is missing.
        AnnotationError: a line is malformed, names a class that ``classInd.txt``
            does not list, or gives a number that disagrees with its folder. The
            error names the file and the line.
    """
    if subset not in ("train", "test"):
        raise ValueError(f"subset must be 'train' or 'test', got {subset!r}")
    split_dir = Path(split_dir)
    numbered: dict[int, tuple[str, str]] = {}  # class number -> (name, origin)
    index_file = split_dir / "classInd.txt"
    for origin, fields in field_lines(index_file):
        if len(fields) != 2 or not fields[0].isdigit() or int(fields[0]) < 1:
            raise AnnotationError(origin, f"expected '<number from 1> <class name>', got {' '.join(fields)!r}")
        number = int(fields[0])
        if number in numbered:
            raise AnnotationError(origin, f"class number {number} is given twice (first at {numbered[number][1]})")
        numbered[number] = (fields[1], origin)
    if sorted(numbered) != list(range(1, len(numbered) + 1)):
        gaps = sorted(set(range(1, max(numbered, default=0) + 1)) - set(numbered))
        raise AnnotationError(str(index_file), f"class numbers must run from 1 without gaps; missing {gaps[:10]}")
    classes = tuple(numbered[k][0] for k in sorted(numbered))
    label_of = {name: k for k, name in enumerate(classes)}
    samples = []
    for origin, fields in field_lines(split_dir / f"{subset}list{split:02d}.txt"):
        relative = fields[0]
        parts = relative.replace("\\", "/").split("/")
        name = parts[0]
        if len(fields) > 2 or len(parts) < 2:
            raise AnnotationError(origin, f"expected '<class>/<video>' and an optional class number, got {fields!r}")
        if name not in label_of:
            raise AnnotationError(origin, f"unknown class {name!r}: {index_file} does not list it")
        label = label_of[name]
        if len(fields) == 2 and fields[1] != str(label + 1):
            raise AnnotationError(
                origin, f"class number {fields[1]!r}, but the video is in folder {name!r}, number {label + 1}"
            )
        samples.append(VideoSample(str(root_path(root) / relative), label, origin=origin))
    return excluding(SampleList(classes, nonempty(samples, split_dir / f"{subset}list{split:02d}.txt")), exclude)


def hmdb51_samples(
    root: str | os.PathLike[str],
    split_dir: str | os.PathLike[str],
    split: int = 1,
    subset: Literal["train", "test"] = "train",
    classes: Sequence[str] | None = None,
    *,
    exclude: Exclude = None,
) -> SampleList:
    """Return the videos of one HMDB51 split, from the ``<class>_test_split<N>.txt`` files.

    Each file lists its class's videos, one per line, with a mark: ``1`` for
    training, ``2`` for testing, ``0`` for neither. The classes are the files'
    names less ``_test_split<N>.txt``, sorted, unless ``classes`` gives them.
    See :doc:`/video/datasets`.

    Args:
        root: the folder holding ``<class>/<video>.avi``.
        split_dir: the folder holding the split files.
        split: which of the splits (HMDB51 ships 1, 2 and 3).
        subset: ``"train"`` keeps the videos marked 1, ``"test"`` those marked 2.
        classes: class names in label order; each split file's class must be one.
        exclude: files to leave out (see ``excluding``).

    Raises:
        FileNotFoundError: ``split_dir`` has no split file for ``split``.
        AnnotationError: a malformed line (naming the file and line), or a split
            file for a class not in ``classes``.
    """
    marks = {"train": "1", "test": "2"}
    if subset not in marks:
        raise ValueError(f"subset must be 'train' or 'test', got {subset!r}")
    suffix = f"_test_split{split}.txt"
    files = sorted(p for p in Path(split_dir).glob(f"*{suffix}") if not p.name.startswith("."))
    if not files:
        raise FileNotFoundError(2, f"no split files <class>{suffix} found", str(split_dir))
    names = [p.name[: -len(suffix)] for p in files]
    classes = tuple(names if classes is None else classes)
    samples = []
    for file, name in zip(files, names, strict=True):
        if name not in classes:
            raise AnnotationError(str(file), f"class {name!r} is not one of the classes given: {some_names(classes)}")
        label = classes.index(name)
        for origin, fields in field_lines(file):
            if len(fields) != 2 or fields[1] not in ("0", "1", "2"):
                raise AnnotationError(origin, f"expected '<video> <0, 1 or 2>', got {' '.join(fields)!r}")
            if fields[1] == marks[subset]:
                samples.append(VideoSample(str(root_path(root) / name / fields[0]), label, origin=origin))
    return excluding(SampleList(classes, nonempty(samples, Path(split_dir) / f"*{suffix}")), exclude)


def kinetics_samples(
    csv_file: str | os.PathLike[str],
    root: str | os.PathLike[str],
    split: str | None = None,
    pattern: str = KINETICS_PATTERN,
    classes: Sequence[str] | None = None,
    trimmed: bool | None = None,
    *,
    extensions: Sequence[str] | None = tuple(sorted(VIDEO_EXTENSIONS)),
    exclude: Exclude = None,
) -> SampleList:
    """Return the clips of a Kinetics-style CSV, with the header ``label,youtube_id,time_start,time_end,split``.

    Each row's file is ``root / pattern.format(**row)``. There, the row's times
    are numbers (ints when whole) and its other columns strings. The default
    pattern is the Kinetics download scripts' ``<label>/<id>_<start:06d>_<end:06d>.mp4``.
    A file holds just its segment (``trimmed``), or the whole video. From a whole
    video, the samples take ``[time_start, time_end)``. By default, a pattern that
    names a time is taken to name a trimmed clip. See :doc:`/video/datasets`.

    A row's file may have another of ``extensions`` than the pattern's, as
    downloads come (``.mkv``, ``.webm``). Each folder is listed once to find it.
    Rows with no file are left out, with one warning that counts them and names the first.

    Args:
        csv_file: the CSV; more columns than the four needed are fine.
        root: the folder the pattern is relative to, or a URL (``s3://bucket/kinetics``).
        split: keep only the rows whose ``split`` column is this (such as ``"train"``); ``None`` keeps all.
        pattern: a ``str.format`` pattern over the CSV's columns giving each row's file.
        classes: class names in label order (pass the training set's for a
            validation set); default: the labels of the rows kept, sorted.
        trimmed: the files hold only their segments (``True``) or whole videos (``False``).
        extensions: the extensions a row's file may have. ``None`` takes the
            pattern's names as they are, without listing a folder.
        exclude: files to leave out (see ``excluding``).

    Raises:
        FileNotFoundError: there is no ``csv_file``.
        ValueError: no row kept has a file (or, with ``extensions=None``, no row is kept).
        AnnotationError: a column is missing, or the pattern names a column the
            CSV lacks. Or a row is malformed, has an unknown label, or its times do
            not make a segment. The error names the file and the line.
    """
    csv_file = Path(csv_file)
    fields_used = {name for _, name, _, _ in string.Formatter().parse(pattern) if name}
    if trimmed is None:
        trimmed = bool(fields_used & {"time_start", "time_end"})
    root = root_path(root)
    # Where a pattern's name is normalized as a path under root would be (a URL keeps its "//").
    base = Path(root) if isinstance(root, Path) else Path("/", str(root).partition("://")[2])
    finder = None if extensions is None else VideoFinder(root, extensions)
    missing: list[tuple[int, str]] = []  # (line, name) of the rows with no file
    builder = SampleListBuilder(os.path.join(str(root), ""))
    label_of = None if classes is None else {name: k for k, name in enumerate(classes)}
    found: dict[str, int] = {}  # without classes: label -> its number in order of first appearance
    template = str(csv_file).replace("{", "{{").replace("}", "}}") + ", line {}"
    with open(csv_file, newline="", encoding="utf-8") as f:
        reader = csv.reader(f)  # rows as lists, made into dicts for the pattern: a million rows in seconds
        header = next(reader, [])
        columns = set(header)
        missing = [c for c in (*_KINETICS_COLUMNS, *(["split"] if split is not None else [])) if c not in columns]
        unknown = sorted(fields_used - columns)
        if missing or unknown:
            what = f"{missing}" if missing else f"{unknown} that the pattern names"
            reason = f"the header lacks the column(s) {what}; it has {sorted(columns)}"
            raise AnnotationError(f"{csv_file}, line 1", reason)
        width = len(header)
        at = {name: header.index(name) for name in ("label", "time_start", "time_end", "split") if name in columns}
        label_at, start_at, end_at, split_at = at["label"], at["time_start"], at["time_end"], at.get("split")
        for fields in reader:
            if not fields:
                continue  # a blank line, as csv.DictReader skips it
            line = reader.line_num
            if len(fields) != width:
                raise AnnotationError(f"{csv_file}, line {line}", f"expected {width} fields as in the header")
            if split is not None and fields[split_at] != split:
                continue
            try:
                start, end = float(fields[start_at]), float(fields[end_at])
                ok = 0.0 <= start < end < math.inf  # False for NaN too
            except ValueError:
                ok = False
            if not ok:  # the checks again, slowly, for their message
                origin = f"{csv_file}, line {line}"
                row = dict(zip(header, fields, strict=True))
                start, end = check_segment(
                    origin, column_seconds(origin, row, "time_start"), column_seconds(origin, row, "time_end")
                )
            values = dict(zip(header, fields, strict=True))
            values["time_start"], values["time_end"] = whole_seconds(start), whole_seconds(end)
            try:
                relative = pattern.format(**values)
            except (ValueError, KeyError, IndexError) as exc:
                origin = f"{csv_file}, line {line}"
                raise AnnotationError(origin, f"the pattern {pattern!r} does not fit this row: {exc}") from None
            if "//" in relative or "/./" in relative or relative.startswith(("./", "/")) or os.sep != "/":
                relative = os.path.relpath(Path(base, relative), base)  # as Path(root, relative) names it
            name = fields[label_at]
            if label_of is None:
                label = found.setdefault(name, len(found))
            else:
                label = label_of.get(name, -1)
                if label < 0:
                    origin = f"{csv_file}, line {line}"
                    known = some_names(tuple(classes))
                    raise AnnotationError(origin, f"unknown label {name!r}: the classes are {known}")
            if finder is not None:
                there = finder.find(relative)
                if there is None:
                    missing.append((line, relative))
                    continue
                relative = there
            if trimmed:
                builder.add(relative, label, None, None, (template, line))
            else:
                builder.add(relative, label, start, end, (template, line))
    what = csv_file if split is None else f"{csv_file} (split {split!r})"
    report_missing(str(what), missing, len(builder) + len(missing), len(builder), root)
    if not len(builder):
        raise ValueError(f"{what} lists no video")
    if label_of is None:
        names = tuple(sorted(found))
        rank = {name: k for k, name in enumerate(names)}
        renumber = np.array([rank[name] for name in found], dtype=np.int32)
        built = builder.build(names)
        built = builder.build(names, renumber[built.labels])
    else:
        built = builder.build(tuple(classes))
    return excluding(built, exclude)
