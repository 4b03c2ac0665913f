"""Compact sample lists: a million samples in tens of megabytes, cheap to index, slice and pickle.

A ``SampleList`` is the class names in label order and the samples. Each
sample is a ``VideoSample``: a file, a label, an optional segment and where it
was listed. The samples are kept in columns of arrays, not as objects: about 60
bytes a sample for Kinetics-style names. A large list pickles as a reference
to one shared file (``ColumnFile``), which each process maps, not as a copy.
Nothing here opens a video file. See :doc:`/video/datasets`.
"""

from __future__ import annotations

import logging
import os
import threading
from array import array
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import overload

import numpy as np

from .shared_columns import ColumnFile, ColumnReference, ColumnRows, map_columns

__all__ = ["SampleList", "SampleListBuilder", "VideoSample", "column_list", "common_folder"]

log = logging.getLogger(__name__)

_NO_ORIGIN = ""  # the template of a sample found by scanning: no origin


@dataclass(frozen=True)
class VideoSample:
    """One sample: a video file, its label, and optionally the segment to sample from.

    Attributes:
        path: the video file.
        label: the index of the sample's class in its ``SampleList``'s ``classes``.
            A list of several labels a sample has a tuple of them, one a head.
        start: where the segment starts, in seconds; ``None`` for the start of the video.
        end: where it ends (exclusive), in seconds; ``None`` for the end of the video.
        origin: where the sample was listed, such as ``"trainlist01.txt, line 17"``;
            empty for a sample found by scanning a folder.
    """

    path: str
    label: int | tuple[int, ...]
    start: float | None = None
    end: float | None = None
    origin: str = ""


class SampleListBuilder:
    """Collects samples into the columns of a ``SampleList`` without making an object per sample.

    Args:
        prefix: what every path added starts with (``add`` takes the rest).
    """

    def __init__(self, prefix: str = "") -> None:
        self.prefix = prefix
        self._names = bytearray()
        self._offsets = array("q", [0])
        self._labels = array("i")  # one int a sample, or ``heads`` ints a sample end to end
        self._heads = 0  # the labels' tuple length; 0 for int labels
        self._starts = array("d")
        self._ends = array("d")
        self._segments = False
        self._templates: dict[str, int] = {}
        self._kinds = array("i")
        self._numbers = array("i")

    def add(
        self,
        rest: str,
        label: int | tuple[int, ...],
        start: float | None = None,
        end: float | None = None,
        origin=("", 0),
    ) -> None:
        """Add the sample ``prefix + rest``; ``origin`` is ``(template, number)``: ``template.format(number)``.

        ``label`` is an int, or a tuple of ints (one a head); every sample's has one form, or ValueError is raised.
        """
        heads = len(label) if isinstance(label, tuple) else 0  # 0: an int label, not a tuple of one
        if heads != self._heads and len(self):
            raise ValueError(f"samples need labels of one form: sample {len(self)}'s {label!r} is not the first's")
        self._heads = heads
        self._labels.extend(label if heads else (label,))
        self._names += rest.encode("utf-8", "surrogateescape")
        self._offsets.append(len(self._names))
        if start is not None or end is not None:
            self._segments = True
        self._starts.append(np.nan if start is None else start)
        self._ends.append(np.nan if end is None else end)
        template, number = origin
        kind = self._templates.get(template)
        if kind is None:
            kind = self._templates[template] = len(self._templates)
        self._kinds.append(kind)
        self._numbers.append(number)

    def __len__(self) -> int:
        return len(self._offsets) - 1

    def build(self, classes: Sequence[str] | Sequence[Sequence[str]], labels: np.ndarray | None = None) -> SampleList:
        """The ``SampleList`` of the samples added, with ``classes`` (a sequence a head with tuple labels).

        ``labels``, given, replaces the labels added.
        """
        if labels is None:
            labels = np.frombuffer(self._labels, dtype=np.int32).copy()
            if self._heads:
                labels = labels.reshape(len(self), self._heads)
                classes = tuple(tuple(head) for head in classes)
        columns = _Columns(
            prefix=self.prefix,
            names=bytes(self._names),
            offsets=np.frombuffer(self._offsets, dtype=np.int64).copy(),
            labels=labels.astype(np.int32, copy=False),
            starts=np.frombuffer(self._starts, dtype=np.float64).copy() if self._segments else None,
            ends=np.frombuffer(self._ends, dtype=np.float64).copy() if self._segments else None,
            templates=tuple(self._templates),
            kinds=np.frombuffer(self._kinds, dtype=np.int32).copy(),
            numbers=np.frombuffer(self._numbers, dtype=np.int32).copy(),
        )
        return SampleList._of(tuple(classes), columns)


# A list whose columns hold at least this many bytes crosses to another process through a
# shared file (``ColumnFile``); a smaller one is pickled as it is, which costs less than a file.
SHARE_BYTES = 1 << 20
_ARRAYS = ("names", "offsets", "labels", "starts", "ends", "kinds", "numbers")
_GATHER_ROWS = 1 << 16  # rows gathered at once by ``take``: bounds its index arrays
_sharing = threading.Lock()  # held while a list's shared file is written, so that it is written once


@dataclass(frozen=True)
class _Columns:
    prefix: str
    names: bytes | np.ndarray  # the paths less the prefix, UTF-8, end to end: bytes, or uint8 (mapped)
    offsets: np.ndarray  # int64, len + 1
    labels: np.ndarray  # int32, (len,), or (len, heads) with several labels a sample
    starts: np.ndarray | None  # float64, NaN for none; None when no sample has a segment
    ends: np.ndarray | None
    templates: tuple[str, ...]
    kinds: np.ndarray  # int32, indexes templates
    numbers: np.ndarray  # int32
    # The file these columns cross to other processes by: a ColumnFile where they were made,
    # its ColumnReference where they were mapped; None until first pickled.
    shared: object = field(default=None, compare=False, repr=False)
    # Where mapped, the file's rows read one sample at a time without mapping them (ColumnRows).
    rows: ColumnRows | None = field(default=None, compare=False, repr=False)

    def row(self, name: str, i: int) -> np.ndarray:
        """Row ``i`` of column ``name``: from the array, or read from the shared file where mapped."""
        if self.rows is None:
            return getattr(self, name)[i]
        return self.rows.rows(name, i)[0]

    def take(self, chosen: np.ndarray | slice) -> _Columns:
        """The columns of the samples ``chosen`` (a slice of step 1, or indices)."""
        if isinstance(chosen, slice):
            begin, end = int(self.offsets[chosen.start]), int(self.offsets[chosen.stop])
            names = bytes(self.names[begin:end])
            offsets = self.offsets[chosen.start : chosen.stop + 1] - begin
        else:
            names, offsets = _gather(self.names, self.offsets, chosen)
        return _Columns(
            self.prefix,
            names,
            offsets,
            self.labels[chosen].copy(),
            None if self.starts is None else self.starts[chosen].copy(),
            None if self.ends is None else self.ends[chosen].copy(),
            self.templates,
            self.kinds[chosen].copy(),
            self.numbers[chosen].copy(),
        )

    def same_as(self, other: _Columns) -> bool:
        """Whether the two hold equal columns (then their samples are equal too), compared as arrays."""
        if (self.prefix, self.templates) != (other.prefix, other.templates):
            return False
        mine, theirs = self._arrays(), other._arrays()
        return mine.keys() == theirs.keys() and all(
            np.array_equal(
                np.frombuffer(a, np.uint8) if k == "names" else a,
                np.frombuffer(theirs[k], np.uint8) if k == "names" else theirs[k],
                equal_nan=k in ("starts", "ends"),
            )
            for k, a in mine.items()
        )

    def nbytes(self) -> int:
        return sum(len(a) if isinstance(a, bytes) else a.nbytes for a in self._arrays().values())

    def _arrays(self) -> dict[str, bytes | np.ndarray]:
        return {name: getattr(self, name) for name in _ARRAYS if getattr(self, name) is not None}

    def __reduce__(self) -> tuple[object, tuple[object, ...]]:
        """Pickle a large list as a reference to a shared file (written at the first pickle), a small one whole."""
        fields = (self.prefix, *(getattr(self, n) for n in _ARRAYS[:5]), self.templates, self.kinds, self.numbers)
        if self.shared is None and self.nbytes() >= SHARE_BYTES:
            with _sharing:  # one file, even when two threads pickle the list at once
                if self.shared is None:
                    arrays = {k: np.frombuffer(a, np.uint8) if k == "names" else a for k, a in self._arrays().items()}
                    try:
                        object.__setattr__(self, "shared", ColumnFile(arrays))
                    except OSError as exc:
                        log.warning("sample list pickled whole: its shared file could not be written (%s)", exc)
        if self.shared is None:
            return _Columns, fields
        reference = self.shared.reference if isinstance(self.shared, ColumnFile) else self.shared
        return _mapped, (reference, self.prefix, self.templates)


def _mapped(reference: ColumnReference, prefix: str, templates: tuple[str, ...]) -> _Columns:
    """The columns a pickle refers to, mapped from their shared file (see ``_Columns.__reduce__``)."""
    arrays, rows = map_columns(reference)
    starts, ends = arrays.get("starts"), arrays.get("ends")
    names, offsets, labels, kinds, numbers = (arrays[k] for k in ("names", "offsets", "labels", "kinds", "numbers"))
    return _Columns(prefix, names, offsets, labels, starts, ends, templates, kinds, numbers, reference, rows)


def _gather(names: bytes | np.ndarray, offsets: np.ndarray, chosen: np.ndarray) -> tuple[bytes, np.ndarray]:
    """The names of the rows ``chosen``, end to end, and their offsets: a block of rows at a time, no loop per row."""
    view = np.frombuffer(names, dtype=np.uint8)
    starts, ends = offsets[chosen], offsets[np.asarray(chosen) + 1]
    lengths = ends - starts
    new_offsets = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(lengths, out=new_offsets[1:])
    out = np.empty(int(new_offsets[-1]), dtype=np.uint8)
    for block in range(0, len(lengths), _GATHER_ROWS):
        rows = slice(block, block + _GATHER_ROWS)
        first, last = new_offsets[block], new_offsets[min(block + _GATHER_ROWS, len(lengths))]
        # Each byte's place in ``names``: its row's start, plus how far it is into its row.
        into_row = np.arange(first, last, dtype=np.int64) - np.repeat(new_offsets[:-1][rows], lengths[rows])
        out[first:last] = view[np.repeat(starts[rows], lengths[rows]) + into_row]
    return out.tobytes(), new_offsets


class SampleList(Sequence[VideoSample]):
    """Class names in label order, and the samples, kept in compact columns (see the module docstring).

    ``SampleList(classes, samples)`` takes the samples as ``VideoSample`` objects;
    the readers (``kinetics_samples`` and the others) build the columns directly.

    A list may have several labels a sample (``heads``): a verb and a noun, say.
    Its ``classes`` then holds one tuple of names a head, and each sample's
    ``label`` a tuple of ints. ``table_samples`` with several label columns,
    ``sample_list`` with tuple labels and ``epic_kitchens_samples`` make such lists.

    Attributes:
        classes: the class names; a sample's ``label`` indexes this.
        fields: the extensions of the members of a WebDataset sample that come with its clip in a batch
            (``webdataset_samples``' ``fields``); empty for other lists.
    """

    classes: tuple[str, ...] | tuple[tuple[str, ...], ...]
    _columns: _Columns
    fields: tuple[str, ...] = ()

    def __init__(self, classes: Sequence[str] | Sequence[Sequence[str]], samples: Iterable[VideoSample]) -> None:
        samples = list(samples)
        prefix = common_folder([s.path for s in samples])
        builder = SampleListBuilder(prefix)
        for s in samples:
            builder.add(s.path[len(prefix) :], s.label, s.start, s.end, _split_origin(s.origin))
        built = builder.build(classes)
        self.classes, self._columns = built.classes, built._columns

    @classmethod
    def _of(cls, classes: tuple[str, ...], columns: _Columns, fields: tuple[str, ...] = ()) -> SampleList:
        made = cls.__new__(cls)
        made.classes, made._columns, made.fields = classes, columns, fields
        return made

    @property
    def samples(self) -> tuple[VideoSample, ...]:
        """Every sample as a ``VideoSample``, in the order listed (made on each access: for small lists)."""
        return tuple(self)

    @property
    def labels(self) -> np.ndarray:
        """Every sample's label, an ``int32`` array (read-only): ``(len,)``, or ``(len, heads)`` with several."""
        labels = self._columns.labels.view()
        labels.flags.writeable = False
        return labels

    def labels_at(self, indices: Sequence[int] | np.ndarray) -> np.ndarray:
        """The labels of the samples at ``indices``, an ``int32`` array: ``labels[indices]``.

        A list shared from another process reads them from its file one by one.
        So a batch's few labels do not map the pages around them.
        """
        c = self._columns
        chosen = np.asarray(indices, dtype=np.int64)
        if c.rows is None or not len(chosen):
            return c.labels[chosen]
        return np.concatenate([c.rows.rows("labels", _index(i, len(self))) for i in chosen.tolist()])

    def path(self, i: int) -> str:
        """The file of sample ``i``."""
        c = self._columns
        i = _index(i, len(self))
        if c.rows is None:
            name = c.names[c.offsets[i] : c.offsets[i + 1]]
        else:
            begin, end = c.rows.rows("offsets", i, 2).tolist()
            name = c.rows.bytes("names", begin, end)
        return c.prefix + str(name, "utf-8", "surrogateescape")

    def label(self, i: int) -> int | tuple[int, ...]:
        """The label of sample ``i``: an int, or a tuple of ints with several labels a sample (``heads``)."""
        label = self._columns.row("labels", _index(i, len(self)))
        return int(label) if label.ndim == 0 else tuple(label.tolist())

    @property
    def heads(self) -> int:
        """The number of labels a sample has; 1 unless the list has several labels a sample (see ``classes``)."""
        labels = self._columns.labels
        return 1 if labels.ndim == 1 else labels.shape[1]

    def segment(self, i: int) -> tuple[float | None, float | None]:
        """``(start, end)`` of sample ``i`` in seconds, ``None`` for either end of the video."""
        c = self._columns
        if c.starts is None or c.ends is None:
            return None, None
        i = _index(i, len(self))
        start, end = float(c.row("starts", i)), float(c.row("ends", i))
        return (None if start != start else start), (None if end != end else end)

    def origin(self, i: int) -> str:
        """Where sample ``i`` was listed, or "" for one found by scanning."""
        c = self._columns
        i = _index(i, len(self))
        template = c.templates[c.row("kinds", i)]
        return template.format(int(c.row("numbers", i))) if template else ""

    def paths(self) -> Iterator[str]:
        """Every sample's file, in order (no object per sample kept)."""
        c = self._columns
        for block in range(0, len(self), _GATHER_ROWS):  # a block's offsets as ints at a time, not all
            offsets = c.offsets[block : block + _GATHER_ROWS + 1].tolist()
            for i in range(len(offsets) - 1):
                yield c.prefix + str(c.names[offsets[i] : offsets[i + 1]], "utf-8", "surrogateescape")

    def keep(self, mask: np.ndarray) -> SampleList:
        """The samples where ``mask`` (a bool array, one per sample) is true, with the same classes."""
        return SampleList._of(self.classes, self._columns.take(np.flatnonzero(mask)), self.fields)

    def __len__(self) -> int:
        return len(self._columns.labels)

    @overload
    def __getitem__(self, i: int) -> VideoSample: ...

    @overload
    def __getitem__(self, i: slice) -> SampleList: ...

    def __getitem__(self, i: int | slice) -> VideoSample | SampleList:
        n = len(self)
        if isinstance(i, slice):
            start, stop, step = i.indices(n)
            chosen = slice(start, max(start, stop)) if step == 1 else np.arange(start, stop, step)
            return SampleList._of(self.classes, self._columns.take(chosen), self.fields)
        i = _index(i, n)
        if not 0 <= i < n:
            raise IndexError(f"sample {i} is out of range: the list has {n}")
        return VideoSample(self.path(i), self.label(i), *self.segment(i), self.origin(i))

    def __iter__(self) -> Iterator[VideoSample]:
        for i in range(len(self)):
            yield self[i]

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, SampleList):
            return NotImplemented
        if (self.classes, self.fields) != (other.classes, other.fields) or len(self) != len(other):
            return False
        if self._columns.same_as(other._columns):
            return True  # the same columns: no sample need be made
        return self.samples == other.samples

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        several = self._columns.labels.ndim == 2  # then "2+3 classes": a verb of 2, a noun of 3
        counts = "+".join(str(len(head)) for head in self.classes) if several else len(self.classes)
        return f"<SampleList of {len(self)} samples, {counts} classes>"


def column_list(
    classes: tuple[str, ...] | tuple[tuple[str, ...], ...],
    prefix: str,
    names: bytes | np.ndarray,
    offsets: np.ndarray,
    labels: np.ndarray,
    segments: tuple[np.ndarray, np.ndarray] | None,
    table: str,
) -> SampleList:
    """A ``SampleList`` over columns made elsewhere, as a table reader makes them, without a copy.

    Args:
        classes: the class names, or a tuple of them a head with several labels a sample.
        prefix: what every path starts with.
        names: the rest of the paths, UTF-8, end to end (bytes, or a uint8 array).
        offsets: int64, where each name starts in ``names``, and the end.
        labels: int32, ``(len,)`` or ``(len, heads)``.
        segments: ``(starts, ends)`` float64 seconds (NaN for either end of the video), or ``None``.
        table: where the rows were listed; a sample's origin is ``"<table>, row <number from 1>"``.
    """
    count = len(labels)
    starts, ends = (None, None) if segments is None else segments
    columns = _Columns(
        prefix=prefix,
        names=names,
        offsets=offsets.astype(np.int64, copy=False),
        labels=labels.astype(np.int32, copy=False),
        starts=starts,
        ends=ends,
        templates=(table.replace("{", "{{").replace("}", "}}") + ", row {}",),
        kinds=np.zeros(count, dtype=np.int32),
        numbers=np.arange(1, count + 1, dtype=np.int32),
    )
    return SampleList._of(classes, columns)


def _index(i: int, count: int) -> int:
    """``i`` as a place from 0, counting a negative one from the end (as a sequence does)."""
    i = int(i)
    return i + count if i < 0 else i


def common_folder(paths: Sequence[str]) -> str:
    """The longest folder (with its trailing separator) that every path starts with, or ""."""
    if not paths:
        return ""
    prefix = os.path.commonprefix([min(paths), max(paths)])  # noqa: RUF071 (cut at the last separator below)
    return prefix[: prefix.rfind(os.sep) + 1]


def _split_origin(origin: str) -> tuple[str, int]:
    """``(template, number)`` of an origin: ``("trainlist01.txt, line {}", 17)``; ``(origin, 0)`` without a number."""
    escaped = origin.replace("{", "{{").replace("}", "}}")
    digits = len(escaped) - len(escaped.rstrip("0123456789"))
    if 0 < digits <= 9 and (digits == 1 or escaped[-digits] != "0"):
        return escaped[:-digits] + "{}", int(escaped[-digits:])
    return escaped, 0
