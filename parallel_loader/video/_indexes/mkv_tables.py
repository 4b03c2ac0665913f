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

__all__ = ["track_packets"]

_EBML, _SEGMENT, _CLUSTER, _TRACKS, _INFO, _CUES = (
    0x1A45DFA3,
    0x18538067,
    0x1F43B675,
    0x1654AE6B,
    0x1549A966,
    0x1C53BB6B,
)
_TRACK_ENTRY, _TRACK_NUMBER, _TIMESTAMP = 0xAE, 0xD7, 0xE7
_SIMPLE_BLOCK, _BLOCK_GROUP, _BLOCK, _REFERENCE_BLOCK = 0xA3, 0xA0, 0xA1, 0xFB
_CUE_POINT, _CUE_TIME, _CUE_TRACK_POSITIONS, _CUE_TRACK, _CUE_CLUSTER = 0xBB, 0xB3, 0xB7, 0xF7, 0xF1
# Elements of a track entry that change its packets or their times as FFmpeg reads them.
_REFUSED = {0x6D80: "content encodings (compression or encryption)", 0x23314F: "a track time scale"}
_LACING, _INVISIBLE, _KEYFRAME = 0x06, 0x08, 0x80  # a block header's flags
_MAX_ELEMENT = 1 << 28  # a header element or cluster larger than this is refused rather than read
_PEEK = 16  # bytes enough for any element's ID and size


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
    clusters: list[_Blocks] = []
    at = segment
    while at + 2 <= end:
        kind, body, size = _element(read_at(file, at, _PEEK), 0)
        body += at
        if size < 0:
            return "an element of unknown size (a live stream's cluster)"
        if size > _MAX_ELEMENT:
            raise ValueError(f"an element of {size} bytes")
        if kind == _TRACKS:
            track = _track_number(read_at(file, body, size), stream)
            if isinstance(track, str):
                return track
        elif kind == _CUES:
            cues = _cues(read_at(file, body, size), segment)
        elif kind == _CLUSTER:
            clusters.append(_Blocks(read_at(file, body, size), body, at))
        at = body + size
    if not track:
        return "no Tracks element before the clusters"
    return _packets(clusters, track, cues)


class _Blocks:
    """A cluster's blocks: where each one's header is, its keyframe flag if in a group, and the cluster's time."""

    def __init__(self, data: bytes, body: int, start: int) -> None:
        self.data, self.body, self.start = data, body, start
        self.time = -1
        self.at: list[int] = []  # offsets in ``data`` of each block's header (its track number)
        self.size: list[int] = []  # each block's size, header included
        self.grouped: list[int] = []  # indices into ``at`` of blocks in a group without a reference: keyframes
        self.in_group: list[int] = []  # indices into ``at`` of blocks in a group
        self._walk(0, len(data))

    def _walk(self, at: int, end: int) -> None:
        data = self.data
        while at < end:
            first = data[at + 1]
            if data[at] == _SIMPLE_BLOCK and first & 0xC0 and first != 0xFF:  # the common case: a 1- or 2-byte size
                if first & 0x80:
                    body, size = at + 2, first & 0x7F
                else:
                    body, size = at + 3, (first & 0x3F) << 8 | data[at + 2]
            else:
                kind, body, size = _element(data, at)
                if size < 0:
                    raise ValueError("an element of unknown size inside a cluster")
                if kind != _SIMPLE_BLOCK:
                    if kind == _TIMESTAMP:
                        self.time = int.from_bytes(data[body : body + size], "big")
                    elif kind == _BLOCK_GROUP:
                        self._group(body, body + size)
                    at = body + size
                    continue
            if self.time < 0:
                raise ValueError("a block before its cluster's timestamp")
            self.at.append(body)
            self.size.append(size)
            at = body + size

    def _group(self, at: int, end: int) -> None:
        referenced = False
        block = None
        while at < end:
            kind, body, size = _element(self.data, at)
            if kind == _BLOCK:
                block = (body, size)
            referenced |= kind == _REFERENCE_BLOCK
            at = body + size
        if block is None:
            raise ValueError("a block group without a block")
        if self.time < 0:
            raise ValueError("a block before its cluster's timestamp")
        self.in_group.append(len(self.at))
        if not referenced:
            self.grouped.append(len(self.at))
        self.at.append(block[0])
        self.size.append(block[1])


def _packets(clusters: list[_Blocks], track: int, cues: tuple[list[int], list[int], list[int]]) -> TrackPackets | str:
    """The track's packets from each cluster's blocks, their header fields read as arrays."""
    pos, size, pts, key, cluster = [], [], [], [], []
    for blocks in clusters:
        data = np.frombuffer(blocks.data, dtype=np.uint8)
        at = np.asarray(blocks.at, dtype=np.int64)
        if not at.size:
            continue
        if (np.asarray(blocks.size) < 4).any():
            raise ValueError("a block shorter than its header")
        number = data[at]
        ours = number == (0x80 | track)
        if track >= 0x80 or ((number & 0x80) == 0).any():  # a track number over 127 takes two or more bytes
            return "a track number over 127"
        flags = data[at + 3][ours]
        if (flags & _LACING).any():
            return "laced blocks"
        if (flags & _INVISIBLE).any():
            return "an invisible block"
        grouped = np.zeros(len(at), dtype=bool)
        grouped[blocks.in_group] = True
        keyframe = (data[at + 3] & _KEYFRAME) != 0
        keyframe[blocks.in_group] = False
        keyframe[blocks.grouped] = True
        relative = (data[at + 1].astype(np.int16) << 8 | data[at + 2]).astype(np.int16)
        pos.append(blocks.body + at[ours] + 4)
        size.append(np.asarray(blocks.size, dtype=np.int64)[ours] - 4)
        pts.append(blocks.time + relative[ours].astype(np.int64))
        key.append(keyframe[ours])
        cluster.append(np.full(int(ours.sum()), blocks.start, dtype=np.int64))
    if not pos:
        return "no block of the track"
    packets = TrackPackets(
        np.concatenate(pos),
        np.concatenate(size),
        np.concatenate(pts),
        np.zeros(sum(len(p) for p in pos), dtype=np.int64),
        np.concatenate(key),
        pts_only=True,
        packet_header=4,
        index_pos=np.concatenate(cluster),
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
    return number or "a track entry without a number"


def _cues(data: bytes, segment: int) -> tuple[list[int], list[int], list[int]]:
    """Every cue's cluster (an offset in the file), time and track."""
    clusters, times, tracks = [], [], []
    for kind, body, size in _children(data, 0, len(data)):
        if kind != _CUE_POINT:
            continue
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
