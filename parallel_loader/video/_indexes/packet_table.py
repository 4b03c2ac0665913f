"""A video stream's packet table: every packet's byte offset, size, timestamp and keyframe flag.

The *packet table* (``PacketTable``) lists the packets of the video stream in
decoding order, with what a decoder needs to start (codec, extradata, size).
It is kept with the file's ``VideoIndex`` in the index store. So a remote
clip's packets can be fetched in one ranged read (see ``_read.remote``).

It also holds the container's display matrix. Frames decoded from bare packets
lack it, and a ranged read turns them as a read of the file would. A table kept
by an older version has no display matrix: ``kept_table`` refuses it, and the
object is indexed again.
"""

from __future__ import annotations

import functools
import io
import logging
from dataclasses import dataclass

import av
import av.error
import numpy as np
from av.sidedata.sidedata import Type

from .._base.errors import VideoDecodeError
from .._base.facts import VideoIndex, _unzigzag, _zigzag, get_varint, put_varint
from .._base.keys import Fetched
from .._media.pixels import Orientation, orientation
from .._media.streams import chosen_stream

__all__ = ["PacketTable", "kept_table", "table_in_memory", "table_of", "table_of_arrays"]

log = logging.getLogger(__name__)


@dataclass(frozen=True, eq=False)
class PacketTable:
    """A video stream's packets in decoding order, and what a decoder needs to start (see the module docstring)."""

    codec: str
    codec_tag: str
    width: int
    height: int
    extradata: bytes
    pos: np.ndarray  # int64 byte offsets of each packet's data
    size: np.ndarray  # int64
    pts: np.ndarray  # int64
    key: np.ndarray  # bool
    # The display matrix frames decoded from the file carry (36 bytes, FFmpeg's), or None for none.
    display_matrix: bytes | None = None

    @property
    def orientation(self) -> Orientation | None:
        """The turn of the display matrix, or None without one: then frames turn by their own side data."""
        return None if self.display_matrix is None else orientation(self.display_matrix)

    def encode(self) -> bytes:
        out = bytearray()
        for text in (self.codec, self.codec_tag):
            raw = text.encode("utf-8")
            put_varint(out, len(raw))
            out += raw
        put_varint(out, self.width)
        put_varint(out, self.height)
        put_varint(out, len(self.extradata))
        out += self.extradata
        put_varint(out, len(self.pos))
        previous_pos = previous_pts = 0
        columns = (self.pos.tolist(), self.size.tolist(), self.pts.tolist(), self.key.tolist())
        for pos, size, pts, key in zip(*columns, strict=True):
            put_varint(out, _zigzag(pos - previous_pos))
            put_varint(out, size * 2 + int(key))
            put_varint(out, _zigzag(pts - previous_pts))
            previous_pos, previous_pts = pos + size, pts
        matrix = self.display_matrix or b""
        put_varint(out, len(matrix))  # 0 for none: an older version's table ends before it
        out += matrix
        return bytes(out)

    @classmethod
    def decode(cls, data: bytes) -> PacketTable:
        """Raises ``ValueError`` for bytes that are no table (cut short), or an older version's (no display matrix)."""
        try:
            texts = []
            pos = 0
            for _ in range(2):
                length, pos = get_varint(data, pos)
                texts.append(bytes(data[pos : pos + length]).decode("utf-8"))
                pos += length
            width, pos = get_varint(data, pos)
            height, pos = get_varint(data, pos)
            length, pos = get_varint(data, pos)
            extradata = bytes(data[pos : pos + length])
            pos += length
            count, pos = get_varint(data, pos)
            table = np.empty((4, count), dtype=np.int64)
            previous_pos = previous_pts = 0
            for i in range(count):
                delta, pos = get_varint(data, pos)
                size_key, pos = get_varint(data, pos)
                pts_delta, pos = get_varint(data, pos)
                offset = previous_pos + _unzigzag(delta)
                size = size_key >> 1
                previous_pts += _unzigzag(pts_delta)
                table[:, i] = (offset, size, previous_pts, size_key & 1)
                previous_pos = offset + size
            if pos == len(data):
                raise ValueError("a packet table of an older version, without the display matrix")
            length, pos = get_varint(data, pos)
            matrix = bytes(data[pos : pos + length]) or None
        except IndexError:
            raise ValueError("a packet table cut short") from None
        if length not in (0, 36) or pos + length > len(data):
            raise ValueError(f"a packet table with a display matrix of {length} bytes")
        keys = table[3].astype(bool)
        return cls(texts[0], texts[1], width, height, extradata, table[0], table[1], table[2], keys, matrix)

    def span(self, index: VideoIndex, key: int, last: int) -> tuple[int, int] | None:
        """Packets ``[first, stop)`` in decoding order that decode frames ``key`` to ``last``, or None if unknown."""
        first = np.nonzero(self.pts == index.pts(key))[0]
        if len(first) != 1 or not self.key[first[0]]:
            return None
        first = int(first[0])
        needed = np.nonzero(self.pts[first:] <= index.pts(last))[0]
        return first, first + int(needed[-1]) + 1

    def byte_range(self, first: int, stop: int) -> tuple[int, int]:
        return int(self.pos[first]), int((self.pos[first:stop] + self.size[first:stop]).max())


def table_of(
    stream: av.video.stream.VideoStream, packets: list[tuple[int, int, int, bool]], display_matrix: bytes | None
) -> PacketTable | None:
    """The table of ``stream``'s ``packets`` (offset, size, pts, keyframe); None if one has no offset or pts."""
    if not packets or any(p[0] is None or p[0] < 0 or p[2] is None for p in packets):
        return None
    columns = np.asarray([p[:3] for p in packets], dtype=np.int64).T
    keys = np.asarray([p[3] for p in packets], dtype=bool)
    return table_of_arrays(stream, columns[0], columns[1], columns[2], keys, display_matrix)


def table_of_arrays(
    stream: av.video.stream.VideoStream,
    pos: np.ndarray,
    size: np.ndarray,
    pts: np.ndarray,
    key: np.ndarray,
    display_matrix: bytes | None,
) -> PacketTable:
    """The table of ``stream``'s packets given as arrays (offset, size, pts, keyframe), in decoding order."""
    context = stream.codec_context
    start = (context.name, context.codec_tag or "", context.width, context.height, bytes(context.extradata or b""))
    return PacketTable(*start, pos, size, pts, key, display_matrix)


def table_in_memory(fetched: Fetched, stream: int | None = None) -> PacketTable | None:
    """The packet table of an object held whole, each packet found in its bytes; None if one is not found.

    The display matrix is the first decoded frame's; None also if no frame decodes.
    """
    data = fetched.data
    packets: list[tuple[int, int, int, bool]] = []
    first: list[av.VideoFrame] = []
    try:
        with av.open(io.BytesIO(data)) as container:
            video = chosen_stream(container, stream, fetched)
            video.codec_context.thread_count = 1
            for packet in container.demux(video):
                if not first:
                    first.extend(_decoded(packet))  # the last, empty packet flushes the decoder
                if not packet.size:
                    continue
                payload = bytes(packet)
                pos = packet.pos if packet.pos is not None and packet.pos >= 0 else 0
                found = data.find(payload, pos, pos + packet.size + 64)  # AVI: 8 bytes of chunk header first
                if found < 0 or packet.pts is None:
                    return None
                packets.append((found, packet.size, packet.pts, packet.is_keyframe))
            if not first:
                return None
            matrix = first[0].side_data.get(Type.DISPLAYMATRIX)
            return table_of(video, packets, None if matrix is None else bytes(matrix))
    except (av.error.FFmpegError, VideoDecodeError):
        return None


def _decoded(packet: av.Packet) -> list[av.VideoFrame]:
    """The frames ``packet`` decodes to; none if it fails to decode."""
    try:
        return list(packet.decode())
    except av.error.FFmpegError:
        return []


@functools.lru_cache(maxsize=256)  # decoding a 5-minute file's table takes ~30 ms of Python: once per file
def kept_table(extra: bytes) -> PacketTable | None:
    if not extra:
        return None
    try:
        return PacketTable.decode(extra)
    except ValueError as exc:
        log.debug("ignoring a packet table: %s", exc)
        return None
