"""A video stream's packet table: every packet's byte offset, size, timestamp and keyframe flag.

The *packet table* (``PacketTable``) lists the packets of the video stream in
decoding order, with what a decoder needs to start (codec, extradata, size).
It is kept with the file's ``VideoIndex`` in the index store. So a clip's
packets can be read in one read, local or remote (see ``_read.spans``).

It also holds the container's display matrix. Frames decoded from bare packets
lack it, and a ranged read turns them as a read of the file would. A table kept
by an older version has no display matrix: ``kept_table`` refuses it, and the
object is indexed again.
"""

from __future__ import annotations

import io
import logging
import struct
import threading
import zlib
from collections import OrderedDict
from dataclasses import dataclass

import av
import av.error
import numpy as np
from av.sidedata.sidedata import Type

from .._base.errors import VideoDecodeError
from .._base.facts import VideoIndex
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
        """The table's binary form: a short header, then its columns as arrays, compressed (see ``decode``)."""
        head = bytearray(_MAGIC)
        for field in (self.codec.encode("utf-8"), self.codec_tag.encode("utf-8"), self.extradata):
            head += struct.pack("<I", len(field)) + field
        head += struct.pack("<III", self.width, self.height, len(self.pos))
        matrix = self.display_matrix or b""
        head += struct.pack("<I", len(matrix)) + matrix
        ends = self.pos + self.size
        gaps = self.pos - np.concatenate(([0], ends[:-1]))  # 0 where a packet follows the one before it
        pts = np.diff(self.pts, prepend=0)
        columns = b"".join(_narrowed(column) for column in (gaps, self.size, pts))
        # Level 1: a third of the default level's time, for about 4% more bytes (a first touch encodes one).
        return bytes(head) + zlib.compress(columns + np.packbits(self.key).tobytes(), 1)

    @classmethod
    def decode(cls, data: bytes) -> PacketTable:
        """The table ``encode`` wrote, without a loop per packet.

        Raises:
            ValueError: the bytes are no table (cut short, damaged), or an older version's.
        """
        if not data.startswith(_MAGIC):
            raise ValueError("a packet table of an older version")
        try:
            view, at, fields = memoryview(data), len(_MAGIC), []
            for _ in range(3):
                (length,) = struct.unpack_from("<I", view, at)
                fields.append(bytes(view[at + 4 : at + 4 + length]))
                at += 4 + length
            width, height, count, length = struct.unpack_from("<IIII", view, at)
            at += 16
            matrix = bytes(view[at : at + length]) or None
            columns = zlib.decompress(view[at + length :])
            gaps, at = _widened(columns, 0, count)
            size, at = _widened(columns, at, count)
            pts, at = _widened(columns, at, count)
            key = np.unpackbits(np.frombuffer(columns, np.uint8, offset=at), count=count).astype(bool)
        except (struct.error, zlib.error, ValueError, IndexError) as exc:
            raise ValueError(f"a packet table cut short or damaged ({exc})") from None
        if length not in (0, 36) or (matrix is not None and len(matrix) != 36):
            raise ValueError(f"a packet table with a display matrix of {length} bytes")
        pos = np.cumsum(gaps) + np.concatenate(([0], np.cumsum(size[:-1])))  # each gap after the ends before it
        codec, tag, extradata = fields[0].decode("utf-8"), fields[1].decode("utf-8"), fields[2]
        return cls(codec, tag, width, height, extradata, pos, size, np.cumsum(pts), key, matrix)

    def span(self, index: VideoIndex, key: int, last: int) -> tuple[int, int] | None:
        """Packets ``[first, stop)`` in decoding order that decode frames ``key`` to ``last``, or None if unknown."""
        first = np.nonzero((self.pts == index.pts(key)) & self.key)[0]  # a hidden frame's packet may share its time
        if len(first) != 1:
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


_MAGIC = b"\0PKT\3"  # an older table starts with its codec name's length: never 0
# The integer types a column may take, with the least and most each holds.
_WIDTHS = tuple((np.dtype(f"<i{n}"), -(1 << (8 * n - 1)), (1 << (8 * n - 1)) - 1) for n in (1, 2, 4, 8))


def _narrowed(column: np.ndarray) -> bytes:
    """``column`` (int64) in the narrowest little-endian integer type that holds it, that type's size first."""
    low, high = (int(column.min()), int(column.max())) if column.size else (0, 0)
    width = next(w for w, least, most in _WIDTHS if least <= low and high <= most)
    return bytes([width.itemsize]) + column.astype(width).tobytes()


def _widened(data: bytes, at: int, count: int) -> tuple[np.ndarray, int]:
    """The column ``_narrowed`` wrote at ``at``, as int64, and the offset after it."""
    if data[at] not in (1, 2, 4, 8):
        raise ValueError(f"a column of {data[at]}-byte integers")
    width = np.dtype(f"<i{data[at]}")
    end = at + 1 + count * width.itemsize
    if end > len(data):
        raise ValueError("a column cut short")
    return np.frombuffer(data, width, count, at + 1).astype(np.int64), end


def _decoded(packet: av.Packet) -> list[av.VideoFrame]:
    """The frames ``packet`` decodes to; none if it fails to decode."""
    try:
        return list(packet.decode())
    except av.error.FFmpegError:
        return []


def kept_table(extra: bytes) -> PacketTable | None:
    """The table ``extra`` holds (``PacketTable.encode``'s form), or None for none, a damaged one or an older one.

    The tables decoded last are kept, up to 32 MiB of arrays (a 5-minute file's takes about 190 KB).
    Safe to call from several threads at once.
    """
    if not extra:
        return None
    with _recent_lock:
        table = _recent.get(extra)
        if table is not None:
            _recent.move_to_end(extra)
            return table
    try:
        table = PacketTable.decode(extra)
    except ValueError as exc:
        log.debug("ignoring a packet table: %s", exc)
        return None
    with _recent_lock:
        if extra in _recent:  # another thread decoded it meanwhile
            return _recent[extra]
        _recent[extra] = table
        _recent_bytes[0] += _array_bytes(table)
        while _recent_bytes[0] > _MAX_RECENT_BYTES and len(_recent) > 1:
            _recent_bytes[0] -= _array_bytes(_recent.popitem(last=False)[1])
    return table


def _array_bytes(table: PacketTable) -> int:
    return table.pos.nbytes + table.size.nbytes + table.pts.nbytes + table.key.nbytes


_MAX_RECENT_BYTES = 32 << 20
_recent: OrderedDict[bytes, PacketTable] = OrderedDict()  # encoded form -> the table, least recently used first
_recent_bytes = [0]  # the arrays' bytes held in ``_recent``
_recent_lock = threading.Lock()
