"""Sample lists from tables: CSV, JSONL or Parquet files of paths, labels and segments, read by columns.

``table_samples`` reads the columns it names with pyarrow, whose CSV reader
parses blocks on several threads. Every step works on whole columns: the paths
become one UTF-8 buffer and its offsets, the labels an int array, the times
float arrays. No Python object is made per row, so ten million rows cost
their columns' bytes, not gigabytes of objects. A table at a URL is read through
fsspec, with the settings ``configure`` gave its prefix. No video is opened.
See :doc:`/video/datasets`.
"""

from __future__ import annotations

import csv
import io
import os
import re
from collections.abc import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pa_csv
import pyarrow.json as pa_json
import pyarrow.parquet as pq

from .._base.keys import SCHEMES, is_url
from .._bytes.objects import remote_object
from .parsing import AnnotationError, check_segment, some_names
from .sample_list import SampleList, column_list, common_folder

__all__ = ["TABLE_KINDS", "table_samples"]

# A table's kind by the end of its name; CSV and JSONL may also be compressed (.gz, .bz2, .zst).
TABLE_KINDS = {".csv": "csv", ".jsonl": "jsonl", ".ndjson": "jsonl", ".parquet": "parquet", ".pq": "parquet"}
_COMPRESSED = (".gz", ".bz2", ".zst")
_URL = "^(" + "|".join(re.escape(scheme) for scheme in SCHEMES) + ")://"  # what is_url accepts, as a pattern
_TIME_UNITS = {"s": 1.0, "ms": 1e3, "us": 1e6, "ns": 1e9}


def table_samples(
    source: str | os.PathLike[str],
    path: str = "path",
    label: str | Sequence[str] = "label",
    start: str | None = None,
    end: str | None = None,
    *,
    root: str | os.PathLike[str] | None = None,
    classes: Sequence[str] | Sequence[Sequence[str] | None] | None = None,
) -> SampleList:
    """Read a CSV, JSONL or Parquet table of videos into a ``SampleList``, column by column.

    The kind comes from the name's end: ``.csv``, ``.jsonl`` or ``.ndjson``
    (either may end in ``.gz``, ``.bz2`` or ``.zst`` too), ``.parquet`` or ``.pq``.
    Labels are all ints (class indices, kept as they are) or all strings
    (class names). A CSV column of whole numbers holds class indices. Times are
    seconds or ``[HH:]MM:SS[.ff]``; an empty time is the video's start or end.
    Each sample's ``origin`` is ``"<source>, row <n>"``, counting data rows from 1.
    See :doc:`/video/datasets`.

    Args:
        source: the table's path or URL.
        path: the column of video paths or URLs.
        label: the label column, or several (a tuple): each sample then has one label a head.
        start: the column of segment starts; ``None`` for whole videos.
        end: the column of segment ends; ``None`` for whole videos.
        root: what relative paths are relative to: a folder or a URL.
        classes: class names in label order; pass the training set's for a validation set.
            Default: the string labels sorted, or ``"0"`` to the largest int label.
            With several label columns, a tuple of those, one a head (each may be ``None``).

    Returns:
        The samples, in the table's order.

    Raises:
        TypeError: ``label`` or ``classes`` is not a name or names.
        FileNotFoundError: there is no table at ``source``.
        ValueError: the name's end is not one of the kinds above, or the table has no row.
        AnnotationError: a column named is not in the table; the message lists those
            that are. Or a row has no path, an unknown label or a bad time; the
            message names the row.
    """
    name = os.fspath(source)
    heads = (label,) if isinstance(label, str) else tuple(label)
    if not heads or not all(isinstance(h, str) for h in heads):
        raise TypeError(f"label must be a column name or a tuple of them, got {label!r}")
    per_head = _per_head_classes(classes, len(heads))
    times = [c for c in (start, end) if c is not None]
    wanted = list(dict.fromkeys([path, *heads, *times]))
    kind = _kind(name)
    table = _read(name, kind, wanted, times, heads)
    if table.num_rows == 0:
        raise ValueError(f"{name} lists no video: the table has no row")
    count = table.num_rows
    columns = dict(zip(table.column_names, table.columns, strict=True))
    del table  # each column is dropped once made into arrays, so that two copies of all are never held
    # The small columns first, the paths last: their copy is the largest, made when the rest is done.
    labels, names_of_heads = [], []
    for head, wanted_classes in zip(heads, per_head, strict=True):
        codes, head_classes = _labels(name, columns[head], head, wanted_classes, digits_are_ints=kind == "csv")
        labels.append(codes)
        names_of_heads.append(head_classes)
    segments = None
    if times:
        starts = _seconds(name, columns[start], start) if start else np.full(count, np.nan)
        ends = _seconds(name, columns[end], end) if end else np.full(count, np.nan)
        _check_segments(name, starts, ends)
        segments = (starts, ends)
    for used in {*heads, *times} - {path}:
        del columns[used]
    _give_back()
    prefix, names, offsets = _paths(name, columns.pop(path), path, root)
    del columns
    _give_back()
    if len(heads) == 1:
        return column_list(names_of_heads[0], prefix, names, offsets, labels[0], segments, name)
    return column_list(tuple(names_of_heads), prefix, names, offsets, np.stack(labels, axis=1), segments, name)


def _give_back() -> None:
    """Return the memory of the columns dropped to the system: Arrow's allocator otherwise keeps it a while."""
    pa.default_memory_pool().release_unused()


def _kind(name: str) -> str:
    """The table's kind from its name (a URL's query left out).

    Raises:
        ValueError: the name ends in no kind known.
    """
    base = name.split("?", 1)[0].lower() if is_url(name) else name.lower()
    for suffix in _COMPRESSED:
        base = base.removesuffix(suffix)
    kind = TABLE_KINDS.get(os.path.splitext(base)[1])
    if kind is None:
        known = ", ".join(sorted(TABLE_KINDS))
        raise ValueError(
            f"{name}: cannot tell the table's kind from its name; table_samples reads {known} "
            f"(CSV and JSONL may end in {', '.join(_COMPRESSED)} too): rename the file"
        )
    if kind == "parquet" and name.lower().endswith(_COMPRESSED):
        raise ValueError(f"{name}: a Parquet file is compressed inside; name it .parquet without {_COMPRESSED}")
    return kind


def _read(name: str, kind: str, wanted: list[str], times: list[str], heads: tuple[str, ...]) -> pa.Table:
    """The ``wanted`` columns of the table (others are not kept, and for CSV and Parquet not parsed).

    Raises:
        FileNotFoundError: there is no table.
        AnnotationError: a wanted column is missing.
    """
    if not is_url(name) and not os.path.isfile(name):
        raise FileNotFoundError(2, "table not found", name)
    if kind == "csv":
        return _read_csv(name, wanted, times, heads)
    with _open(name) as file:
        if kind == "parquet":
            parquet = pq.ParquetFile(file)
            _require(name, wanted, parquet.schema_arrow.names)
            return parquet.read(columns=wanted)
        if kind == "jsonl":
            table = pa_json.read_json(file)
            _require(name, wanted, table.column_names)
            return table.select(wanted)
    raise AssertionError(f"unreachable: a table kind not read: {kind}")


def _read_csv(name: str, wanted: list[str], times: list[str], heads: tuple[str, ...]) -> pa.Table:
    """The ``wanted`` columns of a CSV, parsed on several threads.

    Raises:
        AnnotationError: a wanted column is missing, or the file is not a CSV.
    """
    # Fixed types, so that no block's guess is contradicted by a later block: paths as text, labels as
    # a dictionary of text, times as numbers. Times in clock form do not read as numbers: then as text.
    for time_type in (pa.float64(), pa.string()):
        types = {wanted[0]: pa.string(), **{t: time_type for t in times}}
        types.update({h: pa.dictionary(pa.int32(), pa.string()) for h in heads})
        options = pa_csv.ConvertOptions(include_columns=wanted, column_types=types)
        try:
            with _open(name) as file:
                return pa_csv.read_csv(file, convert_options=options)
        except pa.ArrowKeyError:
            break  # a column is missing: name those present, read from the header alone
        except pa.ArrowInvalid as exc:
            if time_type == pa.string() or not times:
                raise AnnotationError(name, f"cannot be read as CSV: {exc}") from None
    with _open(name) as file:
        header = next(csv.reader(io.TextIOWrapper(file, encoding="utf-8", newline="")), [])
    _require(name, wanted, header)
    raise AssertionError("unreachable: pyarrow found a column missing that the header has")


def _open(name: str) -> io.RawIOBase:
    """The table's bytes, decompressed by the name's end: a local file, or a URL through fsspec."""
    if not is_url(name):
        return pa.input_stream(name, compression="detect")
    fs = remote_object(name).fs
    return fs.open(name, "rb", compression="infer")


def _require(name: str, wanted: list[str], present: list[str]) -> None:
    missing = [c for c in wanted if c not in present]
    if missing:
        raise AnnotationError(name, f"no column {some_names(missing)}; the table's columns are {some_names(present)}")


def _per_head_classes(classes: object, heads: int) -> list[Sequence[str] | None]:
    if classes is None:
        return [None] * heads
    if isinstance(classes, str):
        raise TypeError(f"classes must be a list of class names, got the single string {classes!r}")
    if heads == 1:
        return [list(classes)]  # type: ignore[call-overload]
    classes = list(classes)  # type: ignore[call-overload]
    if len(classes) != heads or any(isinstance(c, str) for c in classes):
        raise TypeError(f"with {heads} label columns, classes must be {heads} lists of names (or None), one a column")
    return [None if c is None else list(c) for c in classes]


def _paths(name: str, column: pa.ChunkedArray, column_name: str, root: object) -> tuple[str, np.ndarray, np.ndarray]:
    """``(prefix, names, offsets)``: every path is ``prefix`` and its name, the names one UTF-8 buffer."""
    empty = pc.or_kleene(column.is_null(), pc.equal(column, ""))
    if pc.any(empty).as_py():
        row = _first(empty)
        raise AnnotationError(f"{name}, row {row + 1}", f"the {column_name!r} column is empty: each row needs a video")
    lead = ""
    if root is not None:
        root = os.path.join(os.fspath(root), "")
        rooted = pc.or_(pc.starts_with(column, os.sep), pc.match_substring_regex(column, _URL, ignore_case=True))
        if not pc.any(rooted).as_py():
            lead = root  # every path is relative: the root is the prefix alone, no copy made
        else:
            text = column.type
            joined = pc.binary_join_element_wise(pa.scalar(root, text), column, pa.scalar("", text))
            column = pc.if_else(rooted, column, joined)
    least, most = pc.min_max(column).values()
    folder = common_folder([least.as_py(), most.as_py()])
    if folder:
        column = pc.utf8_slice_codeunits(column, len(folder))
    chunks, rows = column.chunks, len(column)
    del column  # the chunks are now held by the list alone, which _one_buffer empties as it copies
    names, offsets = _one_buffer(chunks, rows)
    return lead + folder, names, offsets


def _one_buffer(chunks: list[pa.Array], rows: int) -> tuple[np.ndarray, np.ndarray]:
    """A text column's bytes end to end in one uint8 array, and its int64 offsets.

    Each chunk is dropped from ``chunks`` once copied, so that the column's text
    is held about once, not twice, while it is copied.
    """
    total = sum(_text(chunk)[0][-1] - _text(chunk)[0][0] for chunk in chunks)
    names = np.empty(int(total), dtype=np.uint8)
    offsets = np.zeros(rows + 1, dtype=np.int64)
    at_byte = at_row = 0
    chunks.reverse()
    while chunks:
        chunk_offsets, data = _text(chunks.pop())
        size, count = int(chunk_offsets[-1] - chunk_offsets[0]), len(chunk_offsets) - 1
        names[at_byte : at_byte + size] = data[chunk_offsets[0] : chunk_offsets[-1]]
        offsets[at_row + 1 : at_row + count + 1] = chunk_offsets[1:] - chunk_offsets[0] + at_byte
        at_byte, at_row = at_byte + size, at_row + count
    return names, offsets


def _text(chunk: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """A text chunk's offsets and bytes, as arrays over its buffers (no copy)."""
    _, offset_buffer, data = chunk.buffers()
    wide = pa.types.is_large_string(chunk.type) or pa.types.is_large_binary(chunk.type)
    dtype = np.int64 if wide else np.int32
    offsets = np.frombuffer(offset_buffer, dtype=dtype, count=len(chunk) + 1, offset=chunk.offset * dtype(0).nbytes)
    return offsets, np.frombuffer(data, dtype=np.uint8) if data is not None else np.empty(0, np.uint8)


def _labels(
    name: str, column: pa.ChunkedArray, head: str, classes: Sequence[str] | None, *, digits_are_ints: bool
) -> tuple[np.ndarray, tuple[str, ...]]:
    """``(labels, classes)`` of one label column: int32 indices into the class names."""
    if column.null_count:
        row = _first(column.is_null())
        raise AnnotationError(f"{name}, row {row + 1}", f"the {head!r} column is empty: each row needs a label")
    kind = column.type.value_type if pa.types.is_dictionary(column.type) else column.type
    if pa.types.is_dictionary(column.type) and not (pa.types.is_string(kind) or pa.types.is_large_string(kind)):
        column = column.cast(kind)  # a categorical of numbers: its values
    if pa.types.is_floating(kind) and pc.all(pc.equal(column, pc.floor(column))).as_py():
        column, kind = column.cast(pa.int64()), pa.int64()  # JSON's 3.0
    if pa.types.is_integer(kind):
        return _index_labels(name, column.to_numpy(), head, classes)
    if not (pa.types.is_string(kind) or pa.types.is_large_string(kind)):
        raise AnnotationError(name, f"the {head!r} column holds {kind}: labels must be ints or class names")
    codes = np.empty(len(column), dtype=np.int32)
    values: dict[str, int] = {}  # each class name met -> its number in order met
    at = 0
    for chunk in column.chunks:
        encoded = chunk if pa.types.is_dictionary(chunk.type) else chunk.dictionary_encode()
        numbers = np.array([values.setdefault(v, len(values)) for v in encoded.dictionary.to_pylist()], np.int32)
        codes[at : at + len(chunk)] = numbers[encoded.indices.to_numpy(zero_copy_only=False)] if len(numbers) else 0
        at += len(chunk)
    met = list(values)
    if "" in values:
        row = int(np.argmax(codes == values[""]))
        raise AnnotationError(f"{name}, row {row + 1}", f"the {head!r} column is empty: each row needs a label")
    if digits_are_ints and all(re.fullmatch(r"-?[0-9]+", v) for v in met):
        return _index_labels(name, np.array([int(v) for v in met], dtype=np.int64)[codes], head, classes)
    names = sorted(met) if classes is None else list(classes)
    place = {n: k for k, n in enumerate(names)}
    renumber = np.array([place.get(v, -1) for v in met], dtype=np.int32)
    labels = renumber[codes]
    if (labels < 0).any():
        row = int(np.argmax(labels < 0))
        unknown = met[int(codes[row])]
        raise AnnotationError(
            f"{name}, row {row + 1}", f"unknown label {unknown!r} in {head!r}: the classes are {some_names(names)}"
        )
    return labels, tuple(names)


def _index_labels(
    name: str, labels: np.ndarray, head: str, classes: Sequence[str] | None
) -> tuple[np.ndarray, tuple[str, ...]]:
    """Int labels kept as they are: checked against ``classes``, or naming classes ``"0"`` to the largest."""
    count = int(labels.max()) + 1 if classes is None else len(classes)
    bad = (labels < 0) | (labels >= count)
    if bad.any():
        row = int(np.argmax(bad))
        reason = f"label {int(labels[row])} in {head!r} is not a class index from 0 to {count - 1}"
        raise AnnotationError(f"{name}, row {row + 1}", reason)
    names = tuple(str(k) for k in range(count)) if classes is None else tuple(classes)
    return labels.astype(np.int32), names


def _seconds(name: str, column: pa.ChunkedArray, column_name: str) -> np.ndarray:
    """A time column as float64 seconds, NaN where empty: numbers, ``[HH:]MM:SS[.ff]`` text, or times of day."""
    kind = column.type
    if pa.types.is_integer(kind) or pa.types.is_floating(kind):
        return column.cast(pa.float64()).to_numpy()
    if pa.types.is_time(kind) or pa.types.is_duration(kind):
        return column.cast(pa.int64()).cast(pa.float64()).to_numpy() / _TIME_UNITS[kind.unit]
    if not (pa.types.is_string(kind) or pa.types.is_large_string(kind)):
        raise AnnotationError(name, f"the {column_name!r} column holds {kind}: times must be seconds or HH:MM:SS.ff")
    return np.concatenate([_text_seconds(name, chunk, column_name) for chunk in column.chunks] or [np.empty(0)])


def _text_seconds(name: str, text: pa.Array, column_name: str) -> np.ndarray:
    """Seconds from text: a number, or ``[HH:]MM:SS[.ff]`` (parts split and weighed as whole columns)."""
    text = pc.utf8_trim_whitespace(text)
    text = pc.if_else(pc.equal(text, ""), pa.scalar(None, text.type), text)
    clock = pc.fill_null(pc.match_substring(text, ":"), False).to_numpy(zero_copy_only=False)
    seconds = np.full(len(text), np.nan)
    plain = np.flatnonzero(~clock)
    try:
        seconds[plain] = text.take(plain).cast(pa.float64()).to_numpy(zero_copy_only=False)
        if clock.any():
            parts = pc.split_pattern(text.filter(clock), ":")
            bounds = parts.offsets.to_numpy()
            lengths = np.diff(bounds)
            values = parts.flatten().cast(pa.float64()).to_numpy(zero_copy_only=False)
            if ((lengths < 2) | (lengths > 3)).any() or (values < 0).any():
                raise pa.ArrowInvalid("not [HH:]MM:SS[.ff]")
            # Each part's place from the end of its time: 0 for seconds, 1 for minutes, 2 for hours.
            place = np.repeat(bounds[1:], lengths) - 1 - np.arange(len(values))
            leading = place == np.repeat(lengths, lengths) - 1  # hours, or minutes without hours: any size
            if (values[~leading] >= 60).any():
                raise pa.ArrowInvalid("minutes or seconds of 60 or more")
            seconds[np.flatnonzero(clock)] = np.add.reduceat(values * 60.0**place, bounds[:-1])
    except pa.ArrowInvalid:
        row = _first_bad_time(text.to_pylist())
        raise AnnotationError(
            f"{name}, row {row + 1}",
            f"{column_name} must be seconds or [HH:]MM:SS[.ff], got {text[row].as_py()!r}",
        ) from None
    return seconds


def _first_bad_time(values: list[str | None]) -> int:
    """The first row whose time does not read, found one row at a time: only to name it in an error."""
    shape = re.compile(r"(?:(?:\d+:)?[0-5]?\d:[0-5]?\d(?:\.\d*)?)")
    for row, value in enumerate(values):
        if value is None or shape.fullmatch(value):
            continue
        try:
            float(value)
        except ValueError:
            return row
    return 0


def _check_segments(name: str, starts: np.ndarray, ends: np.ndarray) -> None:
    """Check every segment at once: ``0 <= start < end``, NaN for either end of the video."""
    with np.errstate(invalid="ignore"):
        bad = np.isinf(starts) | np.isinf(ends) | (starts < 0) | (ends <= starts)
    if bad.any():
        row = int(np.argmax(bad))
        start, end = (None if v != v else float(v) for v in (starts[row], ends[row]))
        check_segment(f"{name}, row {row + 1}", start, end)  # raises, with the reason
        raise AssertionError("unreachable: check_segment passed a segment found bad")


def _first(mask: pa.ChunkedArray) -> int:
    return int(np.argmax(mask.to_numpy()))
