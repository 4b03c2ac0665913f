"""A Matroska/WebM track's packets from its clusters' block headers: one read per cluster, fields as arrays.

Matroska keeps no table of every packet. Each ``Cluster`` holds a timestamp and
its blocks (``SimpleBlock``, or a ``Block`` in a ``BlockGroup``). A block header
gives its track number, a timestamp relative to the cluster's, and flags
(keyframe, lacing). The ``Cues`` name keyframes by time and cluster.

``track_packets`` reads each cluster whole, walks its elements to find where
each block starts, and reads every header field as arrays. Matroska stores
presentation timestamps, and FFmpeg's packets keep the storage order.

It refuses, with the reason, what it does not read as FFmpeg does. That covers
laced or invisible blocks, clusters of unknown size, and content encodings
(compression, encryption). It also covers a track time scale and Cues that
name a keyframe the blocks do not have. The caller then demuxes the file as
before. See :doc:`/video/first_touch`.
"""

from __future__ import annotations

from typing import BinaryIO

import numpy as np

from .track_packets import TrackPackets, read_at

__all__ = ["EBML_MAGIC", "track_packets"]

_EBML, _SEGMENT = 0x1A45DFA3, 0x18538067
EBML_MAGIC = _EBML.to_bytes(4, "big")  # the first bytes of a Matroska or WebM file
_TRACKS, _CUES, _CLUSTER = 0x1654AE6B, 0x1C53BB6B, 0x1F43B675  # the elements of a segment read here
_TRACK_ENTRY, _TRACK_NUMBER, _TIMESTAMP = 0xAE, 0xD7, 0xE7
_VIDEO, _PROJECTION = 0xE0, 0x7670
_SIMPLE_BLOCK, _BLOCK_GROUP, _BLOCK, _REFERENCE_BLOCK = 0xA3, 0xA0, 0xA1, 0xFB
_CUE_POINT, _CUE_TIME, _CUE_TRACK_POSITIONS, _CUE_TRACK, _CUE_CLUSTER = 0xBB, 0xB3, 0xB7, 0xF7, 0xF1
# Elements of a track entry that change its packets or their times as FFmpeg reads them.
_REFUSED = {0x6D80: "content encodings (compression or encryption)", 0x23314F: "a track time scale"}
_LACING, _INVISIBLE, _KEYFRAME = 0x06, 0x08, 0x80  # a block header's flags
_MAX_ELEMENT = 1 << 28  # a header element or cluster larger than this is refused rather than read
_PEEK = 16  # bytes enough for any element's ID and size
_CUES_CHECKED = 16  # cues, spread over the file, that must name a keyframe of the blocks


def track_packets(file: BinaryIO, file_size: int, stream: int) -> TrackPackets | str:
    """The packets of the ``stream``-th track (FFmpeg's ``stream.index``), from its clusters; or why not.

    Raises nothing: an element that cannot be read gives its reason.
    """
    try:
        return _track_packets(file, file_size, stream)
    except (ValueError, IndexError) as exc:
        return f"the clusters cannot be read ({exc})"


def _track_packets(file: BinaryIO, file_size: int, stream: int) -> TrackPackets | str:
    head = read_at(file, 0, _PEEK)
    kind, body, size = _element(head, 0)
    if kind != _EBML:
        return "not a Matroska file"
    start = body + size
    kind, segment, size = _element(read_at(file, start, _PEEK), 0)
    segment += start
    if kind != _SEGMENT:
        return "no segment after the EBML header"
    end = file_size if size < 0 else min(file_size, segment + size)
    track = 0
    cues: tuple[list[int], list[int], list[int]] = ([], [], [])
    blocks = _Blocks()
    at = segment
    head = read_at(file, at, _PEEK)  # the next element's ID and size, read with the element before it
    while at + 2 <= end:
        kind, body, size = _element(head, 0)
        body += at
        if size < 0:
            return "an element of unknown size (a live stream's cluster)"
        if size > _MAX_ELEMENT:
            raise ValueError(f"an element of {size} bytes")
        if kind in (_TRACKS, _CUES, _CLUSTER):
            data = read_at(file, body, size + _PEEK)
            if len(data) < size:
                return "the file ends inside an element"
            head = data[size:]
            data = data[:size]
            if kind == _TRACKS:
                track = _track_number(data, stream)
                if isinstance(track, str):
                    return track
            elif kind == _CUES:
                cues = _cues(data, segment)
            else:
                blocks.add(data, body, at)
        else:
            head = read_at(file, body + size, _PEEK)
        at = body + size
    if not track:
        return "no Tracks element"
    return _packets(blocks, track, cues)


class _Blocks:
    """Every cluster's blocks: each one's header bytes, place and size, and its cluster's time and offset."""

    def __init__(self) -> None:
        self.heads: list[bytes] = []  # each block's first 4 bytes: track number, relative time, flags
        self.at: list[int] = []  # each block's offset in the file
        self.size: list[int] = []  # each block's size, header included
        self.grouped: dict[int, bool] = {}  # block -> keyframe, for a block in a group: no reference
        self.times: list[int] = []  # each cluster's time
        self.starts: list[int] = []  # each cluster's offset in the file
        self.counts: list[int] = []  # each cluster's number of blocks

    def add(self, data: bytes, body: int, start: int) -> None:
        """Add the blocks of a cluster whose body ``data`` starts at ``body``, its element at ``start``."""
        heads, offsets, sizes = self.heads, self.at, self.size
        before = len(offsets)
        time = -1
        at, end = 0, len(data)
        while at < end:
            first = data[at + 1]
            if data[at] == _SIMPLE_BLOCK and first & 0xC0 and first != 0xFF:  # the common case: a 1- or 2-byte size
                if first & 0x80:
                    at, size = at + 2, first & 0x7F
                else:
                    at, size = at + 3, (first & 0x3F) << 8 | data[at + 2]
                heads.append(data[at : at + 4])
                offsets.append(body + at)
                sizes.append(size)
                at += size
                continue
            kind, child, size = _element(data, at)
            if size < 0:
                raise ValueError("an element of unknown size inside a cluster")
            if kind == _TIMESTAMP:
                time = int.from_bytes(data[child : child + size], "big")
            elif kind == _SIMPLE_BLOCK:
                heads.append(data[child : child + 4])
                offsets.append(body + child)
                sizes.append(size)
            elif kind == _BLOCK_GROUP:
                self._group(data, body, child, child + size)
            at = child + size
        if at != end:
            raise ValueError("an element reaches past its cluster")
        if time < 0 and len(offsets) > before:
            raise ValueError("a cluster without a timestamp")
        self.times.append(time)
        self.starts.append(start)
        self.counts.append(len(offsets) - before)

    def _group(self, data: bytes, body: int, at: int, end: int) -> None:
        referenced = False
        block = None
        while at < end:
            kind, child, size = _element(data, at)
            if kind == _BLOCK:
                block = (child, size)
            referenced |= kind == _REFERENCE_BLOCK
            at = child + size
        if block is None:
            raise ValueError("a block group without a block")
        self.grouped[len(self.at)] = not referenced
        self.heads.append(data[block[0] : block[0] + 4])
        self.at.append(body + block[0])
        self.size.append(block[1])


def _packets(blocks: _Blocks, track: int, cues: tuple[list[int], list[int], list[int]]) -> TrackPackets | str:
    """The track's packets from every cluster's blocks, their header fields read as arrays."""
    size = np.asarray(blocks.size, dtype=np.int64)
    if not size.size:
        return "no block"
    if size.min() < 4:
        raise ValueError("a block shorter than its header")
    heads = np.frombuffer(b"".join(blocks.heads), dtype=np.uint8).reshape(-1, 4)
    number, flags = heads[:, 0], heads[:, 3]
    if track >= 0x80 or ((number & 0x80) == 0).any():  # a track number over 127 takes two or more bytes
        return "a track number over 127"
    keyframe = (flags & _KEYFRAME) != 0
    if blocks.grouped:
        keyframe[list(blocks.grouped)] = list(blocks.grouped.values())
    ours = number == (0x80 | track)
    if not ours.any():
        return "no block of the track"
    if (flags[ours] & _LACING).any():
        return "laced blocks"
    if (flags[ours] & _INVISIBLE).any():
        return "an invisible block"
    relative = (heads[:, 1].astype(np.int64) << 8 | heads[:, 2]).astype(np.int16)
    times = np.repeat(np.asarray(blocks.times, dtype=np.int64), blocks.counts)
    clusters = np.repeat(np.asarray(blocks.starts, dtype=np.int64), blocks.counts)
    packets = TrackPackets(
        np.asarray(blocks.at, dtype=np.int64)[ours] + 4,
        size[ours] - 4,
        (times + relative)[ours],
        np.zeros(int(ours.sum()), dtype=np.int64),
        keyframe[ours],
        pts_only=True,
        packet_header=4,
        index_pos=clusters[ours],
    )
    return _against_cues(packets, track, cues)


def _against_cues(
    packets: TrackPackets, track: int, cues: tuple[list[int], list[int], list[int]]
) -> TrackPackets | str:
    """``packets`` when every cue of the track names a keyframe at its time in its cluster; else why not."""
    assert packets.index_pos is not None
    clusters, times, tracks = (np.asarray(column, dtype=np.int64) for column in cues)
    ours = tracks == track
    clusters, times = clusters[ours], times[ours]
    keyframes = np.flatnonzero(packets.key)
    if not keyframes.size:
        return "no keyframe"
    order = keyframes[np.argsort(packets.dts[keyframes], kind="stable")]
    found = order[np.minimum(np.searchsorted(packets.dts[order], times), len(order) - 1)]
    wrong = np.flatnonzero((packets.dts[found] != times) | (packets.index_pos[found] != clusters))
    return f"a cue names no keyframe (time {int(times[wrong[0]])})" if wrong.size else packets


def _track_number(data: bytes, stream: int) -> int | str:
    """The number of the ``stream``-th track entry, or why it is not read."""
    entries = [(body, size) for kind, body, size in _children(data, 0, len(data)) if kind == _TRACK_ENTRY]
    if stream >= len(entries):
        return f"no track {stream}"
    body, size = entries[stream]
    number = 0
    for kind, child, length in _children(data, body, body + size):
        if kind in _REFUSED:
            return _REFUSED[kind]
        if kind == _TRACK_NUMBER:
            number = int.from_bytes(data[child : child + length], "big")
        if kind == _VIDEO and any(k == _PROJECTION for k, _, _ in _children(data, child, child + length)):
            # FFmpeg turns its frames by the projection's pose (a display matrix): read through FFmpeg.
            return "a video projection"
    return number or "a track entry without a number"


def _cues(data: bytes, segment: int) -> tuple[list[int], list[int], list[int]]:
    """The cluster (an offset in the file), time and track of a few cues spread over the file."""
    points = [(body, size) for kind, body, size in _children(data, 0, len(data)) if kind == _CUE_POINT]
    clusters, times, tracks = [], [], []
    for i in sorted(set(np.linspace(0, len(points) - 1, _CUES_CHECKED).astype(int).tolist())) if points else ():
        body, size = points[i]
        time = -1
        for child, at, length in _children(data, body, body + size):
            if child == _CUE_TIME:
                time = int.from_bytes(data[at : at + length], "big")
            elif child == _CUE_TRACK_POSITIONS:
                fields = {k: int.from_bytes(data[b : b + n], "big") for k, b, n in _children(data, at, at + length)}
                clusters.append(segment + fields.get(_CUE_CLUSTER, -1))
                times.append(time)
                tracks.append(fields.get(_CUE_TRACK, 0))
    return clusters, times, tracks


def _children(data: bytes, at: int, end: int) -> list[tuple[int, int, int]]:
    """The elements from ``at`` to ``end`` as ``(id, body start, size)``."""
    found = []
    while at < end:
        kind, body, size = _element(data, at)
        if size < 0:
            raise ValueError("an element of unknown size in a header")
        found.append((kind, body, size))
        at = body + size
    return found


def _element(data: bytes, at: int) -> tuple[int, int, int]:
    """The element at ``at``: ``(id, body start, size)``, size -1 when unknown."""
    length = 9 - data[at].bit_length()
    if length > 4:
        raise ValueError(f"no element ID at byte {at}")
    kind = int.from_bytes(data[at : at + length], "big")
    at += length
    width = 9 - data[at].bit_length()
    if width > 8:
        raise ValueError(f"no element size at byte {at}")
    size = int.from_bytes(data[at : at + width], "big") & ((1 << (7 * width)) - 1)
    return kind, at + width, -1 if size == (1 << (7 * width)) - 1 else size
