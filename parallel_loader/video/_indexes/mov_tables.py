"""An MP4/MOV track's packets from its sample tables, parsed as whole arrays: no demuxing, no loop per packet.

An MP4 or MOV file keeps every packet's place in its ``moov`` box, in each
track's sample table (``stbl``). It holds the sizes (``stsz``), the chunk
offsets (``stco``/``co64``) and which samples each chunk holds (``stsc``). It
also holds the decoding durations (``stts``), the composition offsets
(``ctts``) and the sync samples (``stss``). Each is one array of big-endian
integers, read here with numpy.

``track_packets`` gives a track's packets in decoding order as ``TrackPackets``.
It refuses, with the reason, what it does not read as FFmpeg does. That covers
fragmented files, several sample descriptions, and more than one edit.
It also covers partial sync samples and random-access groups, which make more keyframes.
The caller then demuxes the file as before. See :doc:`/video/first_touch`.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from typing import BinaryIO

import numpy as np

from .track_packets import TrackPackets, read_at

__all__ = ["MOV_BOXES", "box", "boxes", "display_matrix", "read_moov", "track_matrix", "track_packets"]

# The boxes an MP4/MOV file starts with: its first box's type is one of these.
MOV_BOXES = (b"ftyp", b"moov", b"mdat", b"free", b"wide", b"skip")
# Boxes of a track's sample table that add keyframes FFmpeg marks and this reader would not.
_MORE_KEYFRAMES = (b"stps",)
_MAX_MOOV = 1 << 30  # a header no real file reaches: refused rather than read


def read_moov(file: BinaryIO, file_size: int) -> bytes | str:
    """The body of the file's ``moov`` box, read by walking the top-level boxes; or why it cannot be read."""
    start = 0
    while start + 8 <= file_size:
        header = read_at(file, start, 16)
        try:
            kind, body, end = box(header, 0, start, file_size)
        except ValueError as exc:
            return str(exc)
        if kind == b"moov":
            if end - body > _MAX_MOOV:
                return f"a moov box of {end - body} bytes"
            data = read_at(file, body, end - body)
            return data if len(data) == end - body else "the moov box is cut short"
        start = end
    return "no moov box"


def track_packets(moov: bytes, track_id: int) -> TrackPackets | str:
    """The packets of track ``track_id`` (FFmpeg's ``stream.id``) from the ``moov`` body; or why not.

    Raises nothing: a box that cannot be read gives its reason.
    """
    try:
        return _track_packets(moov, track_id)
    except (ValueError, struct.error) as exc:
        return f"the sample tables cannot be read ({exc})"


def _track_packets(moov: bytes, track_id: int) -> TrackPackets | str:
    if any(kind == b"mvex" for kind, _, _ in boxes(moov, 0, len(moov))):
        return "a fragmented file (its packets are in movie fragments)"
    for kind, body, end in boxes(moov, 0, len(moov)):
        if kind != b"trak":
            continue
        children = {k: (b, e) for k, b, e in boxes(moov, body, end)}
        if b"tkhd" not in children or _track_id(moov, *children[b"tkhd"]) != track_id:
            continue
        edits = _edits(moov, children.get(b"edts"))
        if isinstance(edits, str):
            return edits
        found = _find(moov, body, end, (b"mdia", b"minf", b"stbl"))
        if found is None:
            return "the track has no sample table"
        return _sample_table(moov, *found, edits)
    return f"no track {track_id}"


def _sample_table(moov: bytes, body: int, end: int, edits: int) -> TrackPackets | str:
    tables = {kind: (b, e) for kind, b, e in boxes(moov, body, end)}
    for kind in _MORE_KEYFRAMES:
        if kind in tables:
            return f"a {kind.decode()} box (more keyframes than the sync samples)"
    if b"sbgp" in tables and moov[tables[b"sbgp"][0] + 4 : tables[b"sbgp"][0] + 8] == b"rap ":
        return "random-access sample groups (open-GOP keyframes)"
    missing = [k.decode() for k in (b"stsd", b"stsc", b"stts", b"stss") if k not in tables]
    if b"stsz" not in tables:
        missing.append("stsz")
    if b"stco" not in tables and b"co64" not in tables:
        missing.append("stco")
    if missing:
        return f"no {', '.join(missing)} box"
    if _u32(moov, tables[b"stsd"][0] + 4) != 1:
        return "several sample descriptions"
    size = _sizes(moov, *tables[b"stsz"])
    count = len(size)
    wide = b"co64" in tables
    chunks = _array(moov, *tables[b"co64" if wide else b"stco"], 1, 8 if wide else 4)
    pos = _positions(_array(moov, *tables[b"stsc"], 3, 4), chunks[:, 0], size)
    if isinstance(pos, str):
        return pos
    runs = _array(moov, *tables[b"stts"], 2, 4)
    deltas = np.repeat(runs[:, 1], runs[:, 0])
    if len(deltas) < count:
        return f"the time table covers {len(deltas)} of {count} samples"
    dts = np.concatenate(([0], np.cumsum(deltas[: count - 1])))
    offset = np.zeros(count, dtype=np.int64)
    if b"ctts" in tables:
        runs = _array(moov, *tables[b"ctts"], 2, 4, signed=True)
        offset = np.repeat(runs[:, 1], runs[:, 0].astype(np.uint32).astype(np.int64))[:count]
        if len(offset) < count:
            return f"the composition offsets cover {len(offset)} of {count} samples"
    sync = _array(moov, *tables[b"stss"], 1, 4)[:, 0] - 1
    if sync.size and (sync.min() < 0 or sync.max() >= count):
        return "a sync sample past the last sample"
    key = np.zeros(count, dtype=bool)
    key[sync] = True
    return TrackPackets(pos, size, dts, offset, key, edits)


def _positions(stsc: np.ndarray, chunk_offsets: np.ndarray, size: np.ndarray) -> np.ndarray | str:
    """Each sample's byte offset: its chunk's offset plus the sizes of the samples before it in the chunk."""
    chunks = len(chunk_offsets)
    first = stsc[:, 0] - 1  # each run's first chunk, 0-based
    if not len(first) or first[0] != 0 or (np.diff(first) <= 0).any() or first[-1] >= chunks:
        return "a sample-to-chunk table that does not cover the chunks in order"
    per_chunk = np.repeat(stsc[:, 1], np.diff(np.append(first, chunks)))
    if int(per_chunk.sum()) != len(size):
        return f"the chunks hold {int(per_chunk.sum())} samples, the size table {len(size)}"
    chunk_of = np.repeat(np.arange(chunks), per_chunk)
    ends = np.cumsum(size)
    before = ends - size  # bytes of all samples before each
    first_sample = np.concatenate(([0], np.cumsum(per_chunk)[:-1]))
    return chunk_offsets[chunk_of] + before - before[first_sample][chunk_of]


def _sizes(data: bytes, body: int, end: int) -> np.ndarray:
    fixed, count = struct.unpack_from(">II", data, body + 4)
    if fixed:
        return np.full(count, fixed, dtype=np.int64)
    return _column(data, body + 12, end, count, 1, 4)[:, 0]


def _array(data: bytes, body: int, end: int, columns: int, width: int, signed: bool = False) -> np.ndarray:
    """A full box's table: a 32-bit count after the version and flags, then rows of big-endian integers."""
    return _column(data, body + 8, end, _u32(data, body + 4), columns, width, signed)


def _column(data: bytes, at: int, end: int, rows: int, columns: int, width: int, signed: bool = False) -> np.ndarray:
    if at + rows * columns * width > end:
        raise ValueError(f"a table of {rows} rows reaches past its box")
    kind = f">{'i' if signed else 'u'}{width}"
    return np.frombuffer(data, dtype=kind, count=rows * columns, offset=at).astype(np.int64).reshape(rows, columns)


def _edits(data: bytes, edts: tuple[int, int] | None) -> int | str:
    """How many edits show media (empty edits not counted); the reason when one plays at another rate."""
    if edts is None:
        return 0
    shown = 0
    for kind, body, end in boxes(data, *edts):
        if kind != b"elst":
            continue
        version, count = data[body], _u32(data, body + 4)
        row = 20 if version == 1 else 12
        if body + 8 + count * row > end:
            raise ValueError("an edit list reaches past its box")
        for i in range(min(count, 8)):  # more than a few edits is refused below
            at = body + 8 + i * row
            media = struct.unpack_from(">q" if version == 1 else ">i", data, at + (8 if version == 1 else 4))[0]
            if struct.unpack_from(">i", data, at + row - 4)[0] != 1 << 16:
                return "an edit that plays at another rate"
            shown += media != -1
        shown += max(0, count - 8)
    return shown


def _track_id(data: bytes, body: int, end: int) -> int:
    return _u32(data, body + (20 if data[body] == 1 else 12))


def _find(data: bytes, body: int, end: int, path: tuple[bytes, ...]) -> tuple[int, int] | None:
    for kind, child, child_end in boxes(data, body, end):
        if kind == path[0]:
            return (child, child_end) if len(path) == 1 else _find(data, child, child_end, path[1:])
    return None


def _u32(data: bytes, at: int) -> int:
    return struct.unpack_from(">I", data, at)[0]


def boxes(data: bytes, start: int, end: int) -> Iterator[tuple[bytes, int, int]]:
    """The boxes in ``data[start:end]``, each as ``(type, body start, end)``."""
    while start + 8 <= end:
        kind, body, box_end = box(data, start, start, end)
        yield kind, body, box_end
        start = box_end


def box(data: bytes, at: int, start: int, limit: int) -> tuple[bytes, int, int]:
    """The box whose header is at ``data[at:]`` and at ``start`` in the file: ``(type, body start, end)``.

    Raises:
        ValueError: the header is cut short, or the box reaches past ``limit``.
    """
    if len(data) < at + 8:
        raise ValueError(f"a box header at byte {start} cut short")
    size, kind = struct.unpack_from(">I4s", data, at)
    header = 8
    if size == 1:
        if len(data) < at + 16:
            raise ValueError(f"a box header at byte {start} cut short")
        size, header = struct.unpack_from(">Q", data, at + 8)[0], 16
    elif size == 0:
        size = limit - start
    if size < header or start + size > limit:
        raise ValueError(f"a box at byte {start} of {size} bytes")
    return kind, start + header, start + size


def display_matrix(file: BinaryIO, file_size: int, track_id: int) -> bytes | None:
    """The display matrix FFmpeg gives the frames of track ``track_id`` of an MP4/MOV, or None for none.

    As ``libavformat/mov.c`` makes it: the ``tkhd`` matrix times the ``mvhd`` one,
    each product shifted by its row's fixed point (16.16, 16.16, 2.30). None when
    that is the identity. Raises ``ValueError`` for a header it cannot read.
    """
    moov = read_moov(file, file_size)
    if isinstance(moov, str):
        raise ValueError(moov)
    return track_matrix(moov, track_id)


def track_matrix(moov: bytes, track_id: int) -> bytes | None:
    """The display matrix of track ``track_id`` from the ``moov`` box's body (see ``display_matrix``)."""
    movie = [[0] * 3 for _ in range(3)]  # FFmpeg's before an mvhd is read: a tkhd before it gets zeros
    for kind, body, end in boxes(moov, 0, len(moov)):
        if kind == b"mvhd":  # version, flags, 2 times, timescale, duration (64-bit in version 1), 16 bytes
            movie = _matrix(moov, body, end, 36, 48)
        elif kind == b"trak":
            for child, header, child_end in boxes(moov, body, end):
                if child == b"tkhd":  # version, flags, 2 times, track ID, 4 bytes, duration, 16 bytes
                    track = _matrix(moov, header, child_end, 40, 52)
                    if struct.unpack_from(">I", moov, header + (20 if moov[header] == 1 else 12))[0] == track_id:
                        return _composed(track, movie)
    raise ValueError(f"no tkhd box of track {track_id}")


def _composed(track: list[list[int]], movie: list[list[int]]) -> bytes | None:
    shifts = (16, 16, 30)
    product = [[sum((track[i][e] * movie[e][j]) >> shifts[e] for e in range(3)) for j in range(3)] for i in range(3)]
    values = [(v + (1 << 31)) % (1 << 32) - (1 << 31) for row in product for v in row]  # C's int32
    if values == [1 << 16, 0, 0, 0, 1 << 16, 0, 0, 0, 1 << 30]:
        return None
    return struct.pack("<9i", *values)


def _matrix(data: bytes, body: int, end: int, at: int, at_version_1: int) -> list[list[int]]:
    """The 3x3 matrix at byte ``at`` of a full box's body (``at_version_1`` in version 1), big-endian int32."""
    offset = at_version_1 if end > body and data[body] == 1 else at
    if end - body < offset + 36:
        raise ValueError(f"a box of {end - body} bytes holds no matrix")
    values = struct.unpack_from(">9i", data, body + offset)
    return [list(values[i : i + 3]) for i in range(0, 9, 3)]
