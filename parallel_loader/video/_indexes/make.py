"""Making one file's index: from its container's tables or packets where they tell, else by decoding every frame."""

from __future__ import annotations

import logging
import os
from collections.abc import Callable

import av
from av.container import InputContainer
from av.video.stream import VideoStream

from .._base.facts import VideoIndex
from .._base.keys import Fetched, SourceKey
from .._bytes.source import open_bytes
from .._media.frames import open_video
from .packet_table import PacketTable, table_of_arrays
from .packets import from_packets
from .scan import scan
from .tables import Refused, TableIndex, from_tables

__all__ = ["make_index"]

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
    found = _indexed(path, key, on_index, tables=True)
    if found is None:  # the tables' check read a packet, then they could not tell: demux from the start
        found = _indexed(path, key, on_index, tables=False)
    if not isinstance(found, str):
        return found
    log.debug("video %s is indexed by decoding: %s", key.name, found)
    return scan(path, on_frame, key.stream), None


def _indexed(
    path: str | os.PathLike[str] | Fetched,
    key: SourceKey,
    on_index: Callable[[InputContainer, VideoStream, VideoIndex], None] | None,
    tables: bool,
) -> tuple[VideoIndex, PacketTable | None] | str | None:
    """The index and table from the tables (with ``tables``) or the packets; why not; or None to try the packets."""
    with open_video(path, key.stream) as (container, stream):
        made = None
        if tables:
            with open_bytes(path) as file:
                made = from_tables(container, stream, file, key.size)
        if isinstance(made, Refused):
            log.debug("video %s: its tables cannot tell (%s)", key.name, made.reason)
            if made.demuxed:
                return None
        table = None
        if isinstance(made, TableIndex):
            index: VideoIndex | str = made.index
            table = table_of_arrays(stream, made.pos, made.size, made.pts, made.key, made.display_matrix)
        else:
            index = from_packets(container, stream, key.size)
        if isinstance(index, str):
            return index
        if on_index is not None and table is None:  # with a table, a reader reads the clip's bytes instead
            on_index(container, stream, index)
        return index, table
