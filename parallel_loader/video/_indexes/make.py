"""Making one file's index: from its container's tables or packets where they tell, else by decoding every frame."""

from __future__ import annotations

import logging
import os
from collections.abc import Callable

import av
from av.container import InputContainer
from av.video.stream import VideoStream

from .._base.facts import VideoIndex
from .._base.keys import SourceKey
from .._bytes.source import open_bytes
from .._media.frames import open_video
from .packets import from_packets
from .scan import scan
from .tables import Refused, from_tables

__all__ = ["make_index"]

log = logging.getLogger(__name__)


def make_index(
    path: str | os.PathLike[str],
    key: SourceKey,
    on_frame: Callable[[int, av.VideoFrame], None] | None = None,
    on_index: Callable[[InputContainer, VideoStream, VideoIndex], None] | None = None,
) -> VideoIndex:
    """A new index: from the tables, else the packets, where they tell (then ``on_index``); else by decoding.

    Decoding feeds ``on_frame``. See ``IndexCache.get`` for both. The index is of
    the stream ``key.stream`` names (None: the best video stream, see ``_media.streams``).
    """
    found = _indexed(path, key, on_index, tables=True)
    if found is None:  # the tables' check read a packet, then they could not tell: demux from the start
        found = _indexed(path, key, on_index, tables=False)
    if isinstance(found, VideoIndex):
        return found
    log.debug("video %s is indexed by decoding: %s", key.name, found)
    return scan(path, on_frame, key.stream)


def _indexed(
    path: str | os.PathLike[str],
    key: SourceKey,
    on_index: Callable[[InputContainer, VideoStream, VideoIndex], None] | None,
    tables: bool,
) -> VideoIndex | str | None:
    """The index from the tables (with ``tables``) or the packets; why not; or None to try the packets afresh."""
    with open_video(path, key.stream) as (container, stream):
        found: VideoIndex | str
        made = None
        if tables:
            with open_bytes(path) as file:
                made = from_tables(container, stream, file, key.size)
        if isinstance(made, Refused):
            log.debug("video %s: its tables cannot tell (%s)", key.name, made.reason)
            if made.demuxed:
                return None
        found = from_packets(container, stream, key.size) if made is None or isinstance(made, Refused) else made.index
        if isinstance(found, VideoIndex) and on_index is not None:
            on_index(container, stream, found)
        return found
