"""A remote video read in few requests: its index from its header, then each clip from one ranged read.

Words used here:

* the *packet table* (``PacketTable``): every packet of the video stream in
  decoding order, with its byte offset, size, timestamp and keyframe flag, and
  what a decoder needs to start (codec, extradata, size). It is kept with the
  file's ``VideoIndex`` in the index store, under the object's URL, size and ETag.
* the *span* of a clip: from the first byte of the keyframe packet before it to
  the last byte of the last packet its frames need. One ranged read fetches it;
  a codec context fed those packets gives the frames that seeking in the file
  gives (the same checks as ``frames.frames_from``: timestamps in order,
  starting with the keyframe, decoded as a keyframe).

First touch of an object (``remote_index``): one suffix read of its tail gives
its size and ETag, and the whole object when it is small. An MP4/MOV keeps its
packet table in its ``moov`` box, at the start or (often) at the end: with the
head read too, FFmpeg parses the header from those bytes, and the packets are
demuxed with the media data read as zeros (the table's offsets, sizes and
timestamps come from ``moov``; nothing decodes). Another read fetches a part of
the header the two did not hold. Every other container, and an MP4 whose
packets cannot tell (see ``packet_index``), is fetched whole once and indexed
from memory like a local file, and its packets are found in those bytes.

A clip whose range decode does not follow the index, an object without a
packet table, and ``seek=False`` are read from the whole object in memory by
``decode.read_clip``: exact as for a local file. An object changed since it was
indexed is found by the clip's read itself (``remote.ObjectChanged``) and
indexed again. Nothing here starts threads.
"""

from __future__ import annotations

import functools
import io
import logging
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

import av
import av.error
import numpy as np

from .._base.errors import VideoDecodeError
from .._base.facts import VideoIndex, _unzigzag, _zigzag, get_varint, put_varint
from .._bytes.objects import ObjectChanged, RemoteObject, remote_object
from .._bytes.source import Fetched, SourceKey
from .._indexes.packets import from_packets

if TYPE_CHECKING:
    from .._indexes.cache import IndexCache
    from .local import VideoInfo, _Clip

__all__ = ["PacketTable", "RangeFile", "probe_remote", "read_clip", "remote_index"]

log = logging.getLogger(__name__)

TAIL_BYTES = 256 << 10  # the first read (a 5-minute MP4's moov is ~120 KB); a smaller object comes whole
HEAD_BYTES = 64 << 10  # the second, for a file whose first bytes say MP4/MOV
BLOCK_BYTES = 1 << 20  # what a RangeFile fetches for a read it does not hold
_MOV_BRANDS = (b"ftyp", b"moov", b"mdat", b"free", b"wide", b"skip")


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
        return bytes(out)

    @classmethod
    def decode(cls, data: bytes) -> PacketTable:
        """Raises ``ValueError`` for bytes that are no table (cut short)."""
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
        except IndexError:
            raise ValueError("a packet table cut short") from None
        return cls(texts[0], texts[1], width, height, extradata, table[0], table[1], table[2], table[3].astype(bool))

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


def remote_index(url: str, cache: IndexCache) -> VideoIndex:
    """The index of the object at ``url``: kept (no request), or made now (see the module docstring)."""
    found = cache.latest(url)
    if found is not None:
        return found[1]
    return _index(remote_object(url), cache)[1]


def read_clip(
    url: str,
    start: int,
    clip_len: int,
    stride: int,
    size: tuple[int, int] | None,
    seek: bool,
    cache: IndexCache,
) -> np.ndarray:
    """``decode.read_clip`` for a URL: one ranged read per clip where the packet table allows (module docstring)."""
    from .local import _Clip
    from .local import read_clip as read_local

    remote = remote_object(url)
    if not seek:
        return read_local(_fetch(remote, remote.key()), start, clip_len, stride, size, seek=False, index_cache=cache)
    found = cache.latest(url)
    fetched: Fetched | None = None
    for _ in range(2):  # a second time only when the object changed since it was indexed
        if found is None:
            key, index, table, fetched = _index(remote, cache)
        else:
            key, index, extra = found
            table = _table(extra)
        clip = _Clip(start, clip_len, stride, size)
        if fetched is not None or table is None or not index.seekable or clip.last >= index.frames:
            break
        try:
            problem = _read_span(remote, key, index, table, clip)
        except ObjectChanged as exc:
            log.info("%s; indexing it again", exc)
            found = None
            continue
        if not problem:
            return clip.frames
        log.info("video %s: %s in a ranged read; reading it whole", url, problem)
        break
    if fetched is None:
        try:
            fetched = _fetch(remote, key)
        except ObjectChanged as exc:  # the kept index is of an older version: index this one
            log.info("%s; indexing it again", exc)
            key, index, table, fetched = _index(remote, cache)
            fetched = fetched or _fetch(remote, key)
    return read_local(fetched, start, clip_len, stride, size, index_cache=cache)


def _read_span(remote: RemoteObject, key: SourceKey, index: VideoIndex, table: PacketTable, clip: _Clip) -> str:
    """Fill ``clip`` from one ranged read; return "" or what did not follow the index (then read otherwise)."""
    first_frame = index.keyframe_before(clip.start)
    span = table.span(index, first_frame, clip.last)
    if span is None:
        return f"no packet of the table holds keyframe {first_frame}"
    first, stop = span
    begin, end = table.byte_range(first, stop)
    data = remote.read(key, begin, end)
    if len(data) != end - begin:
        raise VideoDecodeError(remote.url, f"a read of bytes {begin}-{end - 1} returned {len(data)} bytes")
    codec = av.CodecContext.create(table.codec, "r")
    codec.thread_count = 1
    if table.extradata:
        codec.extradata = table.extradata
    if table.codec_tag:
        codec.codec_tag = table.codec_tag
    codec.width, codec.height = table.width, table.height
    previous = -1
    skipping = False  # whether the decoder skips frames nothing refers to (as ``frames.frames_from``)
    try:
        for j in [*range(first, stop), None]:
            if j is None:
                packet = None  # flush the frames the decoder holds back
            else:
                offset, length = int(table.pos[j]) - begin, int(table.size[j])
                packet = av.Packet(length)  # zero-padded; bytes copied in (see the video notes)
                memoryview(packet)[:] = data[offset : offset + length]
                packet.pts = int(table.pts[j])
                i = index.frame_at(packet.pts)
                skip = not (i is None or i == first_frame or clip.wants(i))
                if skip != skipping:
                    codec.skip_frame = "NONREF" if skip else "DEFAULT"
                    skipping = skip
            for frame in codec.decode(packet):
                i = index.frame_at(frame.pts)
                if i is None:
                    return f"timestamp {frame.pts} is unknown to the index"
                if i < first_frame:
                    continue
                if i <= previous or (previous < 0 and i != first_frame):
                    return f"frame {i} decodes after frame {max(previous, first_frame)}"
                if previous < 0 and first_frame > 0 and not frame.key_frame:
                    return f"frame {first_frame} does not decode as a keyframe"
                previous = i
                if clip.wants(i):
                    clip.keep(i, frame)
                    if clip.full:
                        return ""
    except av.error.FFmpegError as exc:
        return f"a packet does not decode ({exc})"
    return f"the packets of bytes {begin}-{end - 1} end before frame {clip.last}"


def _index(remote: RemoteObject, cache: IndexCache) -> tuple[SourceKey, VideoIndex, PacketTable | None, Fetched | None]:
    """Index an object not indexed yet: ``(key, index, table, the whole object if it was fetched)``; keep it."""
    key, tail_start, tail = remote.tail(TAIL_BYTES)
    fetched = Fetched(key, tail) if tail_start == 0 else None
    index: VideoIndex | str | None = None
    table = None
    if fetched is None:
        head = remote.read(key, 0, min(HEAD_BYTES, tail_start))
        if head[4:8] in _MOV_BRANDS:
            index, table = _from_header(remote, key, {0: head, tail_start: tail})
        if not isinstance(index, VideoIndex):
            if index is not None:
                log.debug("video %s is read whole to be indexed: %s", remote.url, index)
            fetched = _fetch(remote, key)
    if fetched is not None:
        index = cache.get(fetched)
        table = _table_in_memory(fetched)
    assert isinstance(index, VideoIndex)
    cache.put(key, index, extra=b"" if table is None else table.encode())
    return key, index, table, fetched


def _from_header(
    remote: RemoteObject, key: SourceKey, blocks: dict[int, bytes]
) -> tuple[VideoIndex | str, PacketTable | None]:
    """An MP4/MOV's index and packet table from its header, the media data read as zeros.

    Offsets, sizes and timestamps come from the sample tables; which packets are
    keyframes from the sync-sample table (``stream.index_entries``, copied at
    once: PyAV 18.1's entries go stale once demuxing starts), since with zeros
    for data FFmpeg's parser cannot see a keyframe.
    """
    made: list[VideoIndex | str] = []
    packets: list[tuple[int, int, int, bool]] = []
    for _ in range(2):  # once for the index, once for the table; the header's bytes are held after the first
        source = RangeFile(remote, key, blocks)
        try:
            container = av.open(source)
        except av.error.FFmpegError as exc:
            return f"the header cannot be read ({exc})", None
        try:
            if not container.streams.video:
                return "no video stream", None
            stream = container.streams.video[0]
            stream.codec_context.thread_count = 1
            sync = {entry.pos for entry in stream.index_entries if entry.is_keyframe}
            source.zero_fill = True
            if not made:
                made.append(from_packets(_SyncKeyed(container, sync), stream, key.size))
                if not isinstance(made[0], VideoIndex):
                    return made[0], None
                continue
            for packet in container.demux(stream):
                if packet.size:
                    packets.append((packet.pos, packet.size, packet.pts, packet.pos in sync))
            table = _table_of(stream, packets)
        finally:
            container.close()
    return made[0], table


class _SyncKeyed:
    """A container whose packets' keyframe flags are the sync-sample table's (see ``_from_header``)."""

    def __init__(self, container: av.container.InputContainer, sync: set[int]) -> None:
        self.format, self._container, self._sync = container.format, container, sync

    def demux(self, stream: av.video.stream.VideoStream) -> Iterator[_Keyed]:
        for packet in self._container.demux(stream):
            yield _Keyed(packet, packet.pos in self._sync)


class _Keyed:
    def __init__(self, packet: av.Packet, is_keyframe: bool) -> None:
        self._packet, self.is_keyframe = packet, is_keyframe

    def __getattr__(self, name: str) -> object:
        return getattr(self._packet, name)

    def __bytes__(self) -> bytes:
        return bytes(self._packet)


def _table_of(stream: av.video.stream.VideoStream, packets: list[tuple[int, int, int, bool]]) -> PacketTable | None:
    if not packets or any(p[0] is None or p[0] < 0 or p[2] is None for p in packets):
        return None
    context = stream.codec_context
    columns = np.asarray([p[:3] for p in packets], dtype=np.int64).T
    return PacketTable(
        context.name,
        context.codec_tag or "",
        context.width,
        context.height,
        bytes(context.extradata or b""),
        columns[0],
        columns[1],
        columns[2],
        np.asarray([p[3] for p in packets], dtype=bool),
    )


def _table_in_memory(fetched: Fetched) -> PacketTable | None:
    """The packet table of an object held whole, each packet found in its bytes; None if one is not found."""
    data = fetched.data
    packets: list[tuple[int, int, int, bool]] = []
    try:
        with av.open(io.BytesIO(data)) as container:
            if not container.streams.video:
                return None
            stream = container.streams.video[0]
            for packet in container.demux(stream):
                if not packet.size:
                    continue
                payload = bytes(packet)
                pos = packet.pos if packet.pos is not None and packet.pos >= 0 else 0
                found = data.find(payload, pos, pos + packet.size + 64)  # AVI: 8 bytes of chunk header first
                if found < 0 or packet.pts is None:
                    return None
                packets.append((found, packet.size, packet.pts, packet.is_keyframe))
            return _table_of(stream, packets)
    except av.error.FFmpegError:
        return None


@functools.lru_cache(maxsize=256)  # decoding a 5-minute file's table takes ~30 ms of Python: once per file
def _table(extra: bytes) -> PacketTable | None:
    if not extra:
        return None
    try:
        return PacketTable.decode(extra)
    except ValueError as exc:
        log.debug("ignoring a packet table: %s", exc)
        return None


def _fetch(remote: RemoteObject, key: SourceKey) -> Fetched:
    """The whole object, in one read of the version ``key`` names."""
    return Fetched(key, remote.read(key, 0, key.size))


class RangeFile(io.RawIOBase):
    """A remote object as a seekable file for FFmpeg: reads served from blocks fetched with ranged reads.

    A read the blocks do not hold fetches ``BLOCK_BYTES`` from where it starts;
    with ``zero_fill`` it is answered with zeros instead (demuxing an MP4 for its
    packet table, whose data is not needed).
    """

    def __init__(self, remote: RemoteObject, key: SourceKey, blocks: dict[int, bytes] | None = None) -> None:
        super().__init__()
        self.remote, self.key = remote, key
        self.blocks = {} if blocks is None else blocks  # start -> bytes; shared with the caller
        self.position = 0
        self.zero_fill = False

    @classmethod
    def open(cls, url: str) -> RangeFile:
        """A file over the object at ``url`` with its tail (which gives its size and version) and head read."""
        remote = remote_object(url)
        key, start, tail = remote.tail(TAIL_BYTES)
        blocks = {start: tail}
        if start > 0:
            blocks[0] = remote.read(key, 0, min(HEAD_BYTES, start))
        return cls(remote, key, blocks)

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self.position, io.SEEK_END: self.key.size}[whence]
        self.position = max(0, base + offset)
        return self.position

    def tell(self) -> int:
        return self.position

    def readinto(self, buffer: memoryview) -> int:  # type: ignore[override]
        count = min(len(buffer), self.key.size - self.position)
        if count <= 0:
            return 0
        for start, block in self.blocks.items():
            if start <= self.position < start + len(block):
                count = min(count, start + len(block) - self.position)
                buffer[:count] = block[self.position - start : self.position - start + count]
                break
        else:
            following = min([s for s in self.blocks if s > self.position], default=self.key.size)
            count = min(count, following - self.position)
            if self.zero_fill:
                buffer[:count] = bytes(count)
            else:
                end = min(self.key.size, self.position + BLOCK_BYTES, following)
                self.blocks[self.position] = self.remote.read(self.key, self.position, end)
                return self.readinto(buffer)
        self.position += count
        return count


def probe_remote(url: str) -> VideoInfo:
    """``decode.probe`` for a URL: the header read through a ``RangeFile`` (its tail first)."""
    from .local import VideoInfo

    with av.open(RangeFile.open(url)) as container:
        if not container.streams.video:
            raise VideoDecodeError(url, "cannot be opened as a video (the file has no video stream)")
        stream = container.streams.video[0]
        rate = stream.average_rate or stream.base_rate or 0
        return VideoInfo(
            frames=max(0, stream.frames),
            fps=float(rate),
            width=stream.codec_context.width,
            height=stream.codec_context.height,
        )
