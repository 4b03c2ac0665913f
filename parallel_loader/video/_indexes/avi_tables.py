"""An AVI stream's packets from its index chunks, parsed as whole arrays: no demuxing, no loop per packet.

An AVI keeps a table of its chunks, the ``idx1`` chunk after the ``movi``
list. Each entry gives a chunk's offset, size and keyframe flag. A video chunk
is one packet, and FFmpeg times the ``k``-th chunk as ``k`` plus a constant. An
empty chunk (a dropped frame) takes a frame's time but is no packet.

It refuses, with the reason, what it does not read as FFmpeg does. That covers
files over 1 GB (RIFF-AVIX extensions) and OpenDML indexes (``indx``), which
FFmpeg prefers to ``idx1``. The caller then demuxes the file as before. See
:doc:`/video/first_touch`.
"""

from __future__ import annotations

import struct
from typing import BinaryIO

import numpy as np

from .track_packets import TrackPackets, read_at

__all__ = ["stream_packets"]

_KEYFRAME = 0x10  # AVIIF_KEYFRAME in an idx1 entry's flags
_MAX_CHUNK = 1 << 28  # a header list or index larger than this is refused rather than read
# An idx1 entry; its chunk id read as a little-endian number, so a stream's ids compare as whole numbers.
_IDX1 = np.dtype([("id", "<u4"), ("flags", "<u4"), ("offset", "<u4"), ("size", "<u4")])


def stream_packets(file: BinaryIO, file_size: int, stream: int) -> TrackPackets | str:
    """The packets of the AVI's ``stream``-th stream (FFmpeg's ``stream.index``), from its index; or why not."""
    try:
        return _stream_packets(file, file_size, stream)
    except (ValueError, struct.error) as exc:
        return f"the index cannot be read ({exc})"


def _stream_packets(file: BinaryIO, file_size: int, stream: int) -> TrackPackets | str:
    head = read_at(file, 0, 12)
    if len(head) < 12 or head[:4] != b"RIFF" or head[8:] != b"AVI ":
        return "not an AVI file"
    chunks = dict(_top_level(file, file_size))
    if b"hdrl" not in chunks or b"movi" not in chunks:
        return "no header list or no movi list"
    start, size = chunks[b"hdrl"]
    lists = [body for kind, body in _chunks(read_at(file, start, _bounded(size))) if kind == b"LIST:strl"]
    if stream >= len(lists):
        return f"no stream {stream}"
    if b"indx" in dict(_chunks(lists[stream])):  # FFmpeg reads an OpenDML index where there is one
        return "an OpenDML index (no reader yet)"
    if b"idx1" not in chunks:
        return "no index"
    start, size = chunks[b"idx1"]
    return _idx1(read_at(file, start, _bounded(size)), chunks[b"movi"][0] - 4, stream)


def _top_level(file: BinaryIO, file_size: int) -> list[tuple[bytes, tuple[int, int]]]:
    """The RIFF's chunks as ``(id, (body start, size))``, a list by its list type; refuses an OpenDML extension."""
    found = []
    at = 12
    while at + 8 <= file_size:
        kind, size = struct.unpack("<4sI", read_at(file, at, 8))
        if kind == b"RIFF":
            raise ValueError("a RIFF-AVIX extension (a file over 1 GB)")
        if kind == b"LIST":
            kind = read_at(file, at + 8, 4)
            found.append((kind, (at + 12, size - 4)))
        else:
            found.append((kind, (at + 8, size)))
        at += 8 + size + (size & 1)
    return found


def _chunks(data: bytes) -> list[tuple[bytes, bytes]]:
    """The chunks in ``data`` as ``(id, body)``, a list's id as ``b"LIST:" + its type``."""
    found = []
    at = 0
    while at + 8 <= len(data):
        kind, size = struct.unpack_from("<4sI", data, at)
        body = data[at + 8 : at + 8 + size]
        if kind == b"LIST":
            kind, body = b"LIST:" + body[:4], body[4:]
        found.append((kind, body))
        at += 8 + size + (size & 1)
    return found


def _idx1(data: bytes, movi: int, stream: int) -> TrackPackets | str:
    """The stream's entries of ``idx1``; offsets from the ``movi`` list's type, or from the file's start."""
    entries = np.frombuffer(data, dtype=_IDX1, count=len(data) // _IDX1.itemsize)
    ids = entries["id"]
    number = f"{stream:02d}".encode()  # a chunk id is 4 bytes: 2 digits, then its kind
    ours = (ids == _fourcc(number + b"dc")) | (ids == _fourcc(number + b"db")) if len(number) == 2 else ids < 0
    entries = entries[ours]
    if not len(entries):
        return "no index entry of the stream"
    offset = entries["offset"].astype(np.int64)
    if offset[0] < movi:  # relative to the movi list, as FFmpeg guesses from the first entry
        offset = offset + movi
    return _packets(offset + 8, entries["size"].astype(np.int64), (entries["flags"] & _KEYFRAME) != 0)


def _packets(pos: np.ndarray, size: np.ndarray, key: np.ndarray) -> TrackPackets:
    """The packets of the index's chunks, each chunk a frame's time (see the module docstring)."""
    dts = np.arange(len(pos), dtype=np.int64)
    kept = size > 0
    if not kept.all():  # most files drop no frame: no copies then
        pos, size, dts, key = pos[kept], size[kept], dts[kept], key[kept]
    return TrackPackets(pos, size, dts, np.zeros(len(pos), dtype=np.int64), key, header=8)


def _fourcc(code: bytes) -> int:
    """A 4-byte chunk id as ``_IDX1`` reads it."""
    return int.from_bytes(code, "little")


def _bounded(size: int) -> int:
    if size > _MAX_CHUNK:
        raise ValueError(f"a header or index chunk of {size} bytes")
    return size
