"""A remote video's index and packet table, in few requests: from an MP4's header, else from the whole object.

First touch of an object (``range_file.read_ends``): one suffix read of its
tail gives its size and version, and the whole object when it is small. An
MP4/MOV keeps its packet table in its ``moov`` box, at the start or (often) at the end. With the head read too, FFmpeg
parses the header from those bytes. The packets are then demuxed with the media
data read as zeros: offsets, sizes and timestamps come from ``moov``, and
nothing decodes. Every other container, and an MP4 whose packets cannot tell
(see ``packets``), is fetched whole once and indexed from memory.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

import av
import av.error

from .._base.facts import VideoIndex
from .._base.keys import Fetched, SourceKey
from .._bytes.objects import RemoteObject
from .._bytes.range_file import RangeFile, fetch_whole, read_ends
from .make import make_index
from .packet_table import PacketTable, table_in_memory, table_of
from .packets import from_packets

__all__ = ["index_object"]

log = logging.getLogger(__name__)

_MOV_BRANDS = (b"ftyp", b"moov", b"mdat", b"free", b"wide", b"skip")


def index_object(remote: RemoteObject) -> tuple[SourceKey, VideoIndex, PacketTable | None, Fetched | None]:
    """Index an object: ``(key, index, packet table or None, the whole object if it was fetched)``.

    Nothing is kept: the caller keeps the index (see ``cache.index_remote``).
    """
    key, blocks = read_ends(remote)
    fetched = Fetched(key, blocks[0]) if len(blocks[0]) == key.size else None
    index: VideoIndex | str | None = None
    table = None
    if fetched is None:
        if blocks[0][4:8] in _MOV_BRANDS:
            index, table = _from_header(remote, key, blocks)
        if not isinstance(index, VideoIndex):
            if index is not None:
                log.debug("video %s is read whole to be indexed: %s", remote.shown, index)
            fetched = fetch_whole(remote, key, blocks)
    if fetched is not None:
        index = make_index(fetched, key)
        table = table_in_memory(fetched)
    assert isinstance(index, VideoIndex)
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
            table = table_of(stream, packets)
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
