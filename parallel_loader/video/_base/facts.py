"""``VideoIndex``: the facts about one video file that exact seeking needs, and their compact binary form.

The record sits below everything that makes, keeps or uses it. The packet index
and the decoding scan make it (``_indexes.packets``, ``_indexes.scan``). The store
and the cache keep it (``_indexes.store``, ``_indexes.cache``). The readers use it
(``_media``, ``_read``). It knows nothing of files, containers or threads.

The binary form (``encode``/``decode``) is what the store writes and the
in-memory cache holds. It is made of varints and deltas. A file with evenly
spaced timestamps takes a few dozen bytes. One with irregular timestamps (gaps,
variable frame rate) takes about one or two bytes a frame.
See :doc:`/video/indexes`.
"""

from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass, field, replace
from fractions import Fraction
from functools import cached_property

import numpy as np

__all__ = [
    "DECODING",
    "PACKETS",
    "VideoIndex",
    "decode",
    "decode_with_end",
    "encode",
    "get_varint",
    "put_varint",
    "regular_or_table",
    "sorted_unique",
]

# The ways an index is made (``VideoIndex.made_by``).
PACKETS = "packets"  # from the container's packets, without decoding (see ``_indexes.packets``)
DECODING = "decoding"  # by decoding every frame once (see ``_indexes.scan``)

_SEEKABLE, _INTACT, _TABLE, _FROM_PACKETS, _SEEK_BACK, _UNSORTED, _TIME_BASE = 1, 2, 4, 8, 16, 32, 64  # flag bits


@dataclass(frozen=True, eq=False)
class VideoIndex:
    """The facts about one video file that exact seeking needs.

    Attributes:
        frames: how many frames decode, counting from the first.
        keyframes: frame indices a seek can start at, ascending, always starting with 0.
        seekable: whether seeking to those keyframes is exact for this file.
        reason: why not, when ``seekable`` is False ("" otherwise).
        intact: whether every packet was read whole, to the end of the file
            (and, for an index made by decoding, decoded). Then ``frames`` is
            all the file holds, whatever its header claims. Otherwise (a
            truncated or damaged file) ``frames`` counts what decodes of what is left.
        made_by: ``"packets"`` (from the container's packets without decoding:
            every read checks the frames it decodes against it) or
            ``"decoding"`` (every frame decoded once).
        seek_back: how far before a keyframe's presentation timestamp a seek
            aims, in the stream's time base (0 for most files). Containers
            without an index (MPEG-TS and PS) seek by their packets' decoding
            timestamps. With B-frames these come before the presentation ones.
            So a seek aimed at the keyframe's own timestamp lands after it.
        time_base: the seconds one timestamp tick lasts, or None when not known.
            With it and the timestamps, ``timed`` is True, and frames can be found by time.

    See :doc:`/video/decoding`.
    """

    frames: int
    keyframes: tuple[int, ...] = (0,)
    seekable: bool = False
    reason: str = ""
    # Presentation timestamps of frames 0, 1, ..., in the stream's time base: either
    # ``pts_start + i * pts_step`` (most files; nothing stored per frame) or, for
    # irregular ones (gaps, variable frame rate), the table ``pts_table``. A table may
    # not rise: AVI has no presentation timestamps, and with B-frames FFmpeg gives each
    # frame its packet's, in decoding order; they still name one frame each.
    pts_start: int = 0
    pts_step: int = 0
    pts_table: np.ndarray | None = field(default=None, repr=False)
    intact: bool = False  # the safe claim for an index made by hand: not known to be whole
    made_by: str = DECODING
    seek_back: int = 0
    time_base: Fraction | None = None

    @property
    def timed(self) -> bool:
        """True when the index holds every frame's timestamp and their time base, so frames can be found by time."""
        return self.time_base is not None and (self.pts_table is not None or self.pts_step > 0)

    def seek_target(self, key: int) -> int:
        """The timestamp a seek for keyframe ``key`` aims at: at or before where its packet is."""
        return self.pts(key) - self.seek_back

    def pts(self, frame: int) -> int:
        """The presentation timestamp of ``frame`` (0 <= frame < frames)."""
        if self.pts_table is not None:
            return int(self.pts_table[frame])
        return self.pts_start + frame * self.pts_step

    def frame_at(self, pts: int | None) -> int | None:
        """The frame whose presentation timestamp is ``pts``, or None when none is."""
        if pts is None:
            return None
        if self.pts_table is not None:
            ordered, order = self._lookup
            i = int(np.searchsorted(ordered, pts))
            if i >= self.frames or ordered[i] != pts:
                return None
            return i if order is None else int(order[i])
        i, rest = divmod(pts - self.pts_start, self.pts_step or 1)
        return i if rest == 0 and 0 <= i < self.frames else None

    @cached_property
    def _lookup(self) -> tuple[np.ndarray, np.ndarray | None]:
        """The table sorted, and which frame each sorted timestamp is (None: the table is sorted already)."""
        table = self.pts_table
        assert table is not None
        if table.size < 2 or bool((np.diff(table) > 0).all()):
            return table, None
        order = np.argsort(table, kind="stable")
        return table[order], order

    def keyframe_before(self, frame: int) -> int:
        """The last keyframe at or before ``frame``: where decoding must start to reach it exactly."""
        return self.keyframes[bisect_right(self.keyframes, frame) - 1]

    def distrusted(self, reason: str) -> VideoIndex:
        """This file's index once its seeks are found not to be exact: frames decoded from the first."""
        return replace(self, keyframes=(0,), seekable=False, reason=reason, seek_back=0)


def regular_or_table(
    frames: int,
    keyframes: tuple[int, ...],
    pts: np.ndarray,
    intact: bool,
    made_by: str,
    seek_back: int = 0,
    time_base: Fraction | None = None,
) -> VideoIndex:
    """A seekable index over the rising timestamps ``pts``, as start and step when they are evenly spaced."""
    step = int(pts[1] - pts[0]) if frames > 1 else 1
    common = dict(intact=intact, made_by=made_by, seek_back=seek_back, time_base=time_base)
    if np.array_equal(pts, pts[0] + step * np.arange(frames, dtype=np.int64)):
        return VideoIndex(frames, keyframes, True, "", int(pts[0]), step, None, **common)
    return VideoIndex(frames, keyframes, True, "", pts_table=pts, **common)


def sorted_unique(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The distinct values of the 1-D ``values``, ascending, and each value's place among them.

    It gives what ``np.unique(values, return_inverse=True)`` gives. But
    ``np.unique`` imports ``numpy.ma`` at its first call, which costs a read's
    first clip in every new process more than the clip itself.
    """
    order = np.argsort(values, kind="stable")
    ordered = values[order]
    new = np.empty(ordered.size, dtype=bool)
    new[:1] = True
    np.not_equal(ordered[1:], ordered[:-1], out=new[1:])
    inverse = np.empty(ordered.size, dtype=np.intp)
    inverse[order] = np.cumsum(new) - 1
    return ordered[new], inverse


def encode(index: VideoIndex) -> bytes:
    """The compact binary form of ``index`` (see the module docstring)."""
    flags = (
        _SEEKABLE * index.seekable
        | _INTACT * index.intact
        | _TABLE * (index.pts_table is not None)
        | _FROM_PACKETS * (index.made_by == PACKETS)
        | _SEEK_BACK * (index.seek_back != 0)
        | _UNSORTED * (index.pts_table is not None and bool((np.diff(index.pts_table) < 0).any()))
        | _TIME_BASE * (index.time_base is not None)
    )
    out = bytearray([flags])
    put_varint(out, index.frames)
    reason = index.reason.encode("utf-8", "surrogateescape")
    put_varint(out, len(reason))
    out += reason
    put_varint(out, len(index.keyframes))
    previous = 0
    for k in index.keyframes:
        put_varint(out, k - previous)
        previous = k
    if index.pts_table is not None:
        table = index.pts_table
        put_varint(out, _zigzag(int(table[0])))
        deltas = np.diff(table).tolist()
        unsorted = bool(out[0] & _UNSORTED)
        for delta in deltas:
            put_varint(out, _zigzag(delta) if unsorted else delta)
    else:
        put_varint(out, _zigzag(index.pts_start))
        put_varint(out, _zigzag(index.pts_step))
    if index.seek_back:  # last, so that a reader without this field still reads the rest alike
        put_varint(out, _zigzag(index.seek_back))
    if index.time_base is not None:  # after seek_back, for the same reason
        put_varint(out, index.time_base.numerator)
        put_varint(out, index.time_base.denominator)
    return bytes(out)


def decode(data: bytes | memoryview, offset: int = 0) -> VideoIndex:
    """The ``VideoIndex`` whose binary form starts at ``offset`` of ``data``.

    Raises:
        ValueError: ``data`` does not hold an index (cut short or not one).
    """
    return decode_with_end(data, offset)[0]


def decode_with_end(data: bytes | memoryview, offset: int = 0) -> tuple[VideoIndex, int]:
    """``decode``, and the offset just past the index's binary form (what follows it is another's)."""
    try:
        flags = data[offset]
        pos = offset + 1
        frames, pos = get_varint(data, pos)
        length, pos = get_varint(data, pos)
        reason = bytes(data[pos : pos + length]).decode("utf-8", "surrogateescape")
        pos += length
        count, pos = get_varint(data, pos)
        keyframes, k = [], 0
        for _ in range(count):
            delta, pos = get_varint(data, pos)
            k += delta
            keyframes.append(k)
        made_by = PACKETS if flags & _FROM_PACKETS else DECODING
        common = dict(seekable=bool(flags & _SEEKABLE), reason=reason, intact=bool(flags & _INTACT), made_by=made_by)
        if flags & _TABLE:
            first, pos = get_varint(data, pos)
            values = [_unzigzag(first)]
            for _ in range(frames - 1):
                delta, pos = get_varint(data, pos)
                values.append(_unzigzag(delta) if flags & _UNSORTED else delta)
            table = np.cumsum(np.asarray(values, dtype=np.int64))
            timing = dict(pts_table=table)
        else:
            start, pos = get_varint(data, pos)
            step, pos = get_varint(data, pos)
            timing = dict(pts_start=_unzigzag(start), pts_step=_unzigzag(step))
        if flags & _SEEK_BACK:
            back, pos = get_varint(data, pos)
            common["seek_back"] = _unzigzag(back)
        if flags & _TIME_BASE:
            numerator, pos = get_varint(data, pos)
            denominator, pos = get_varint(data, pos)
            common["time_base"] = Fraction(numerator, denominator)
        return VideoIndex(frames, tuple(keyframes), **timing, **common), pos
    except (IndexError, ZeroDivisionError):
        raise ValueError("a video index cut short or damaged") from None


def put_varint(out: bytearray, value: int) -> None:
    if value < 0:
        raise ValueError(f"a varint must not be negative, got {value}")
    while value >= 0x80:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)


def get_varint(data: bytes | memoryview, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, pos
        shift += 7
        if shift > 70:
            raise ValueError("a varint longer than 10 bytes")


def _zigzag(value: int) -> int:
    return value * 2 if value >= 0 else -value * 2 - 1


def _unzigzag(value: int) -> int:
    return value >> 1 if not value & 1 else -(value >> 1) - 1
