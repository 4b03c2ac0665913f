"""A remote video read in few requests: its index from its header, then each clip from one ranged read.

Words used here:

* the *packet table* (``_indexes.packet_table.PacketTable``): every packet's
  byte offset, size, timestamp and keyframe flag, kept with the file's index.
  It holds the display matrix too, which the decoded frames lack. A table kept
  by an older version, without it, makes the object be indexed again.
* the *span* of a clip: its bytes, from the keyframe packet at or before it to
  the last packet its frames need. One ranged read fetches it, and
  ``spans.decode_span`` decodes it, as for a local file.

A first touch indexes the object from its header, or whole (see ``_indexes.header``).

Some clips are instead read from the whole object in memory by
``local.read_local``, exactly as a local file is. These include clips whose ranged decode does not
follow the index, objects without a packet table, and ``seek=False``. An object
changed since it was indexed is found by the clip's read itself
(``_bytes.objects.ObjectChanged``) and indexed again. Nothing here starts threads.
See :doc:`/video/remote`.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Sequence

import av
import av.error
import numpy as np

from .._base.errors import VideoDecodeError
from .._base.facts import VideoIndex
from .._base.info import VideoInfo
from .._base.keys import Fetched, SourceKey, shown_url
from .._bytes.objects import ObjectChanged, RemoteObject
from .._bytes.range_file import RangeFile, fetch_whole
from .._bytes.remote_shards import remote_source
from .._indexes.cache import IndexCache, index_remote
from .._indexes.packet_table import PacketTable, kept_table
from .._media.clip import Clip
from .._media.pixels import FrameSize
from .._media.streams import StreamChoice, chosen_stream, stream_info
from .local import read_local
from .spans import decode_span

__all__ = ["probe_remote", "read_remote"]

log = logging.getLogger(__name__)


def read_remote(
    url: str,
    frames: Sequence[int] | np.ndarray,
    size: FrameSize,
    seek: bool,
    cache: IndexCache,
    rotate: bool = True,
    stream: StreamChoice = None,
) -> np.ndarray:
    """The ``frames`` of a URL, in order: one ranged read per clip where the packet table allows (module docstring)."""
    remote = remote_source(url, cache.shard_tables)
    read = functools.partial(read_local, size=size, rotate=rotate, index_cache=cache, stream=stream)
    if not seek:
        return read(fetch_whole(remote, remote.key()), frames, seek=False)
    found = cache.latest(remote.name, stream)
    fetched: Fetched | None = None
    for _ in range(2):  # a second time only when the object changed since it was indexed
        if found is not None and found[2] and kept_table(found[2]) is None:
            log.info("video %s: its kept packet table is unreadable or old; indexing it again", remote.shown)
            found = None  # the table cannot say how frames are turned (see ``packet_table``)
        if found is None:
            key, index, table, fetched = index_remote(remote, cache, stream)
        else:
            key, index, extra = found
            table = kept_table(extra)
        clip = Clip(frames, size, rotate, None if table is None else table.orientation)
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
        log.info("video %s: %s in a ranged read; reading it whole", remote.shown, problem)
        break
    if fetched is None:
        try:
            fetched = fetch_whole(remote, key)
        except ObjectChanged as exc:  # the kept index is of an older version: index this one
            log.info("%s; indexing it again", exc)
            key, index, table, fetched = index_remote(remote, cache, stream)
            fetched = fetched or fetch_whole(remote, key)
    return read(fetched, frames)


def _read_span(remote: RemoteObject, key: SourceKey, index: VideoIndex, table: PacketTable, clip: Clip) -> str:
    """Fill ``clip`` from one ranged read; return "" or what did not follow the index (then read otherwise)."""

    def read(begin: int, end: int) -> bytes:
        data = remote.read(key, begin, end)
        if len(data) != end - begin:
            raise VideoDecodeError(remote.shown, f"a read of bytes {begin}-{end - 1} returned {len(data)} bytes")
        return data

    return decode_span(table, index, clip, read)


def probe_remote(url: str, cache: IndexCache, rotate: bool = True, stream: StreamChoice = None) -> VideoInfo:
    """``probe`` for a URL: the header read through a ``RangeFile`` (its tail first).

    With ``rotate`` the first frame is decoded for its display matrix: a quarter
    turn swaps width and height, as ``read_clip`` turns the frames.
    """
    with av.open(RangeFile.open(remote_source(url, cache.shard_tables))) as container:
        return stream_info(container, chosen_stream(container, stream, shown_url(url)), rotate)
