"""Making one file's index: from its container's tables or packets where they tell, else by decoding every frame."""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from typing import BinaryIO

import av
from av.container import InputContainer
from av.video.stream import VideoStream

from .._base.facts import VideoIndex
from .._base.keys import Fetched, SourceKey
from .._bytes.source import open_bytes
from .._media.frames import open_video
from .mkv_tables import EBML_MAGIC
from .mov_tables import MOV_BOXES
from .packet_table import PacketTable, table_of_arrays
from .packets import from_packets
from .scan import scan
from .tables import Refused, from_tables
from .track_packets import read_at

__all__ = ["make_index"]

_HEADER_ONLY_FAMILIES = ("mov", "matroska")
_AVI_SIGNATURE = (b"RIFF", b"AVI ")  # bytes 0-3 and 8-11; FFmpeg's probe gives its "avi" demuxer the top score
_HEADER_ONLY_CODECS = ("h264", "vp8", "vp9", "av1")  # FFmpeg's canonical names, whatever the decoder

log = logging.getLogger(__name__)


def make_index(
    path: str | os.PathLike[str] | Fetched,
    key: SourceKey,
    on_frame: Callable[[int, av.VideoFrame], None] | None = None,
    on_index: Callable[[InputContainer, VideoStream, VideoIndex], None] | None = None,
) -> tuple[VideoIndex, PacketTable | None]:
    """A new index: from the tables, else the packets, where they tell; else by decoding.

    Decoding feeds ``on_frame``. An index from the packets, without a table, is
    given to ``on_index``. See ``IndexCache.get`` for both. The index is of
    the stream ``key.stream`` names (None: the best video stream, see ``_media.streams``).
    An index from the tables comes with the stream's packet table; otherwise the table is None.
    """
    with open_bytes(path) as file:  # the tables' bytes, read beside FFmpeg's own reads
        head = read_at(file, 0, 12)
        quick = _from_header_only(path, key, file) if _worth_a_header_only_open(head) else None
        if isinstance(quick, tuple):
            return quick
        demuxer = "avi" if (head[:4], head[8:12]) == _AVI_SIGNATURE else None  # no probe of every demuxer
        if isinstance(quick, Refused):  # the tables cannot tell: the packets, in a container opened as usual
            found = _indexed(path, key, on_index, None, demuxer)
        else:
            found = _indexed(path, key, on_index, file, demuxer)
            if found is None:  # the tables' check read a packet, then they could not tell: demux from the start
                found = _indexed(path, key, on_index, None, demuxer)
    if not isinstance(found, str):
        return found
    log.debug("video %s is indexed by decoding: %s", key.name, found)
    return scan(path, on_frame, key.stream), None


def _worth_a_header_only_open(head: bytes) -> bool:
    """Whether a file starting with ``head`` is MP4/MOV or Matroska (where H.264, VP8, VP9 and AV1 are common)."""
    return head[4:8] in MOV_BOXES or head[:4] == EBML_MAGIC


def _from_header_only(
    path: str | os.PathLike[str] | Fetched, key: SourceKey, file: BinaryIO
) -> tuple[VideoIndex, PacketTable] | Refused | None:
    """The index and table from the tables, in a container opened from its header alone (see ``open_container``).

    FFmpeg opens an H.264 stream by decoding several frames, to guess its
    decoder's delay; the tables and their checks need none of it. Refused when
    the tables cannot tell; None where such an open may not be the usual one
    (another codec or family, several video streams: FFmpeg's choice of the best one uses what it decodes).
    """
    with open_video(path, key.stream, header_only=True) as (container, stream):
        family = container.format.name.split(",")[0]
        if family not in _HEADER_ONLY_FAMILIES or stream.codec_context.codec.canonical_name not in _HEADER_ONLY_CODECS:
            return None
        if len(container.streams.video) > 1:
            return None
        return _from_tables(container, stream, file, key)


def _from_tables(
    container: InputContainer, stream: VideoStream, file: BinaryIO, key: SourceKey
) -> tuple[VideoIndex, PacketTable] | Refused:
    """The index and packet table from the container's tables (see ``tables``), or why they cannot tell."""
    made = from_tables(container, stream, file, key.size)
    if isinstance(made, Refused):
        log.debug("video %s: its tables cannot tell (%s)", key.name, made.reason)
        return made
    return made.index, table_of_arrays(stream, made.pos, made.size, made.pts, made.key, made.display_matrix)


def _indexed(
    path: str | os.PathLike[str] | Fetched,
    key: SourceKey,
    on_index: Callable[[InputContainer, VideoStream, VideoIndex], None] | None,
    tables: BinaryIO | None,
    demuxer: str | None = None,
) -> tuple[VideoIndex, PacketTable | None] | str | None:
    """The index and table from the tables (read from ``tables``) or the packets; why not; None: try the packets.

    ``demuxer`` names FFmpeg's demuxer where the file's signature told it (see ``open_container``).
    """
    with open_video(path, key.stream, container_format=demuxer) as (container, stream):
        made = _from_tables(container, stream, tables, key) if tables is not None else None
        if isinstance(made, Refused) and made.demuxed:
            return None
        index: VideoIndex | str
        index, table = made if isinstance(made, tuple) else (from_packets(container, stream, key.size), None)
        if isinstance(index, str):
            return index
        if on_index is not None and table is None:  # with a table, a reader reads the clip's bytes instead
            on_index(container, stream, index)
        return index, table
