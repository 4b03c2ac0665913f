"""A remote video's index and packet table, in few requests: from an MP4's header, else from the whole object.

First touch of an object (``range_file.read_ends``): one suffix read of its
tail gives its size and version, and the whole object when it is small. An
MP4/MOV keeps its packet table in its ``moov`` box, at the start or (often) at the end. With the head read too, FFmpeg
parses the header from those bytes. The packets are then demuxed with the media
data read as zeros: offsets, sizes and timestamps come from ``moov``, and
nothing decodes. The display matrix is read from the video track's ``tkhd``, as
FFmpeg reads it (``display_matrix``). Every other container, and an MP4 whose
packets cannot tell (see ``packets``), is fetched whole once and indexed from memory.
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
from .._media.streams import chosen_stream
from .make import make_index
from .mov_tables import MOV_BOXES, display_matrix
from .packet_table import PacketTable, table_in_memory, table_of, table_of_arrays
from .packets import array_check, from_packets
from .tables import Refused, TableIndex, from_tables

__all__ = ["index_object"]

log = logging.getLogger(__name__)


def index_object(
    remote: RemoteObject, stream: int | None = None
) -> tuple[SourceKey, VideoIndex, PacketTable | None, Fetched | None]:
    """Index an object's stream: ``(key, index, packet table or None, the whole object if it was fetched)``.

    ``stream`` is the stream's number, or None for the best video stream (see
    ``_media.streams``); the key names it. Nothing is kept: the caller keeps the
    index (see ``cache.index_remote``).
    """
    key, blocks = read_ends(remote)
    key = key.of_stream(stream)
    fetched = Fetched(key, blocks[0]) if len(blocks[0]) == key.size else None
    index: VideoIndex | str | None = None
    table = None
    if fetched is None:
        if blocks[0][4:8] in MOV_BOXES:
            index, table = _from_header(remote, key, blocks)
        if not isinstance(index, VideoIndex):
            if index is not None:
                log.debug("video %s is read whole to be indexed: %s", remote.shown, index)
            fetched = fetch_whole(remote, key, blocks)
    if fetched is not None:
        index = make_index(fetched, key)[0]
        table = table_in_memory(fetched, stream)
    assert isinstance(index, VideoIndex)
    return key, index, table, fetched


def _from_header(
    remote: RemoteObject, key: SourceKey, blocks: dict[int, bytes]
) -> tuple[VideoIndex | str, PacketTable | None]:
    """An MP4/MOV's index and packet table from its header: its sample tables, else its packets demuxed.

    The sample tables are read as arrays (see ``tables``). Where they cannot
    tell, the packets are demuxed with the media data read as zeros (``_demuxed``).
    """
    opened = _open_header(remote, key, blocks)
    if isinstance(opened, str):
        return opened, None
    container, stream = opened
    try:
        if array_check(stream.codec_context.name) is not None:  # its check reads every packet: not from a header
            made: TableIndex | Refused = Refused("its packets' check reads the media data")
        else:
            made = from_tables(container, stream, RangeFile(remote, key, blocks), key.size)
        if isinstance(made, TableIndex):
            matrix = _header_matrix(remote, key, blocks, stream.id)
            if isinstance(matrix, str):
                return matrix, None
            return made.index, table_of_arrays(stream, made.pos, made.size, made.pts, made.key, matrix)
        log.debug("video %s: its tables cannot tell (%s); demuxing its header", remote.shown, made.reason)
    finally:
        container.close()
    return _demuxed(remote, key, blocks)


def _open_header(
    remote: RemoteObject, key: SourceKey, blocks: dict[int, bytes]
) -> tuple[av.container.InputContainer, av.video.stream.VideoStream] | str:
    """The object opened from its header, the media data read as zeros, and the stream ``key`` names; or why not.

    The stream's sync samples are read before any packet (``stream.index_entries``).

    Raises:
        VideoDecodeError: the object has no such video stream.
    """
    source = RangeFile(remote, key, blocks)
    try:
        container = av.open(source)
    except av.error.FFmpegError as exc:
        return f"the header cannot be read ({exc})"
    try:
        stream = chosen_stream(container, key.stream, remote.shown)
    except BaseException:
        container.close()
        raise
    stream.codec_context.thread_count = 1
    source.zero_fill = True
    return container, stream


def _header_matrix(remote: RemoteObject, key: SourceKey, blocks: dict[int, bytes], track_id: int) -> bytes | str | None:
    """The display matrix (see ``display_matrix``), or why it cannot be read; the header's bytes are held."""
    try:
        return display_matrix(RangeFile(remote, key, blocks), key.size, track_id)
    except ValueError as exc:
        return f"the display matrix cannot be read from the header ({exc})"


def _demuxed(
    remote: RemoteObject, key: SourceKey, blocks: dict[int, bytes]
) -> tuple[VideoIndex | str, PacketTable | None]:
    """An MP4/MOV's index and packet table from its packets demuxed, the media data read as zeros.

    Offsets, sizes and timestamps come from the sample tables; which packets are
    keyframes from the sync-sample table (``stream.index_entries``, copied at
    once: PyAV 18.1's entries go stale once demuxing starts), since with zeros
    for data FFmpeg's parser cannot see a keyframe.
    """
    made: list[VideoIndex | str] = []
    matrix: bytes | None = None
    packets: list[tuple[int, int, int, bool]] = []
    for _ in range(2):  # once for the index, once for the table; the header's bytes are held after the first
        opened = _open_header(remote, key, blocks)
        if isinstance(opened, str):
            return opened, None
        container, stream = opened
        try:
            sync = {entry.pos for entry in stream.index_entries if entry.is_keyframe}
            if not made:
                made.append(from_packets(_SyncKeyed(container, sync), stream, key.size))
                if not isinstance(made[0], VideoIndex):
                    return made[0], None
                found = _header_matrix(remote, key, blocks, stream.id)
                if isinstance(found, str):
                    return found, None
                matrix = found
                continue
            for packet in container.demux(stream):
                if packet.size:
                    packets.append((packet.pos, packet.size, packet.pts, packet.pos in sync))
            table = table_of(stream, packets, matrix)
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
