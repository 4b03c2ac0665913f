"""Each video file's index, made once and kept: ``IndexCache``, in memory and in a store on disk shared by runs.

``read_clip`` does not trust a container's header (frame counts, frame rates,
seeks): it asks an ``IndexCache`` for the file's ``VideoIndex`` (see ``_base.facts``).
The cache makes a missing one from the file's packets, without decoding, where
they give evidence that this is exact (``packets``). Otherwise it decodes the
file once (``scan``). It hands the decoded frames to the reader that asked, so
that its clip comes from the same pass.

Indexes are kept by default in memory, up to ``max_bytes`` (least recently used
first out). They are also kept in a store on disk (``store``), in a per-user
cache directory: a second run and every worker find them made. A thread of the
cache's writes them there, in batches (``writer``). A miss in memory looks up
that one name in the store. An index is keyed by the file's absolute path, size
and modification time: a changed file is indexed again. ``python -m
parallel_loader.video.index ROOT_OR_LIST`` makes indexes ahead. See :doc:`/video/indexes`.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable
from pathlib import Path

import av
from av.container import InputContainer
from av.video.stream import VideoStream

from .._base.facts import PACKETS, VideoIndex, decode, decode_with_end, encode
from .._base.keys import Fetched, SourceKey, is_url, stream_slot, url_name
from .._bytes.remote_shards import RemoteObject, remote_source
from .._bytes.source import source_key
from .header import index_object
from .held import charge, held_within
from .make import make_index
from .packet_table import PacketTable, kept_table
from .scan import not_seekable_warning, scan
from .store import ENVIRONMENT_VARIABLE, PACKET_TABLE, IndexStore, Record, default_directory
from .writer import writer_for

__all__ = [
    "DEFAULT_MAX_BYTES",
    "DEFAULT_MAX_TABLE_BYTES",
    "ENVIRONMENT_VARIABLE",
    "IndexCache",
    "VideoIndex",
    "default_directory",
    "default_index_cache",
    "index_remote",
    "set_default_index_cache",
]

log = logging.getLogger(__name__)

# 512 MiB: about 1.7 million files with evenly spaced timestamps and 63-character paths (~310 bytes each, see
# IndexCache), so a Kinetics-700-sized set (650,000 videos) fits with room for longer paths and irregular timestamps.
DEFAULT_MAX_BYTES = 512 << 20
# 256 MiB: the packet tables of about 290,000 ten-second files at 30 frames a second (~935 bytes each).
DEFAULT_MAX_TABLE_BYTES = 256 << 20
_TABLE = PACKET_TABLE  # ends the slot of a local file's packet table


class _UserDefault:
    def __repr__(self) -> str:
        return "<the per-user cache directory>"


USER_DEFAULT = _UserDefault()


class IndexCache:
    """Video indexes by file: made on first use, kept in memory and on disk.

    Safe to use from several threads at once. One lock guards the table. Two
    threads asking for the same new file may both index it; the results agree.
    New indexes reach the store about 50 ms later, in batches written by a
    thread of the process (one per store, ``writer``). Until then every cache of
    the process finds them. ``flush`` waits for them; ``close`` ends the thread.
    An entry is valid while the file keeps its size and modification time; a
    changed file is indexed again. A file whose seeks are not exact is named in
    one warning, the first time this cache meets it.

    Each entry is held in memory as bytes (``_base.facts``' binary form). It is
    charged its name's and bytes' ``sys.getsizeof``, plus 120 bytes for its slot
    in the table. That is more than Python allocates for them, as a test
    measures. A file with evenly spaced timestamps and a 63-character path costs
    about 310 bytes. Irregular timestamps add 1 to 2 bytes a frame. So the
    default 512 MiB holds about 1.7 million such files (tested with 1,000,000).
    Past ``max_bytes`` the least recently used entries leave memory. They are
    found again in the store (one row read) or made again (from packets: a few
    milliseconds) if asked for.

    A local file indexed from its container's tables also keeps its packet
    table. A later read then decodes its clip without opening the file
    through FFmpeg (see ``get_with_table``). Tables are kept apart, up to
    ``max_table_bytes``: one is a shortcut, and a read without it is as exact.
    A 10-second file's takes about 935 bytes. A URL's table is part of its
    index, since its reads need it.

    Args:
        directory: where to keep indexes between runs and share them with other
            processes (created when needed). By default it is the
            per-user cache directory, or ``$PARALLEL_LOADER_VIDEO_INDEX`` (see
            ``default_directory``). ``None`` keeps them in memory only.
        max_bytes: the memory the entries may take.
        max_table_bytes: the memory local files' packet tables may take, on
            top of ``max_bytes``; 0 keeps none, in memory or on disk.

    See :doc:`/video/indexes`.
    """

    def __init__(
        self,
        directory: str | os.PathLike[str] | _UserDefault | None = USER_DEFAULT,
        max_bytes: int = DEFAULT_MAX_BYTES,
        max_table_bytes: int = DEFAULT_MAX_TABLE_BYTES,
    ) -> None:
        if isinstance(max_bytes, bool) or not isinstance(max_bytes, int) or max_bytes < 1:
            raise ValueError(f"max_bytes must be a positive int, got {max_bytes!r}")
        if isinstance(max_table_bytes, bool) or not isinstance(max_table_bytes, int) or max_table_bytes < 0:
            raise ValueError(f"max_table_bytes must be an int of 0 or more, got {max_table_bytes!r}")
        if directory is USER_DEFAULT:
            directory = default_directory()
        self.directory = None if directory is None else Path(directory).expanduser()
        self.max_bytes = max_bytes
        self.max_table_bytes = max_table_bytes
        self._store = None if self.directory is None else IndexStore(self.directory)
        self._writer = None if self._store is None else writer_for(self._store)  # one per store file, shared
        self.shard_tables = self._store  # where remote shards' member tables are kept (``_bytes.remote_shards``)
        # Held while reading or changing the fields below, never while decoding or reading files.
        self._lock = threading.Lock()
        self._entries: OrderedDict[str, bytes] = OrderedDict()  # name -> Record.entry_of bytes, oldest first
        self._bytes = 0  # what the entries are charged
        self._tables: OrderedDict[str, bytes] = OrderedDict()  # local files' packet tables, apart (see the docstring)
        self._table_bytes = 0
        self._evicted = 0
        self._reported: set[str] = set()  # files already named in a log line as not seekable
        self._forgotten: set[str] = set()  # packet tables found misleading: not taken from the store again

    def get(
        self,
        path: str | os.PathLike[str],
        on_frame: Callable[[int, av.VideoFrame], None] | None = None,
        on_index: Callable[[InputContainer, VideoStream, VideoIndex], None] | None = None,
        stream: int | None = None,
    ) -> VideoIndex:
        """The index of the video at ``path``: from memory, from disk, or made now.

        A URL's index is the one kept for it, without a request to check its
        version: its reads check that. Without one, it is made now (see ``header``).

        Args:
            path: the video file, or its URL.
            on_frame: called with each frame's number and frame as it is decoded,
                when the index must be made by decoding every frame. A reader takes
                its clip from that pass. Never called otherwise.
            on_index: called when the index is made from the file's packets
                without a packet table. It gets the container they came from (read
                to its end, still open), its video stream and the index. So a reader
                reads its clip without opening the file again. Never called
                otherwise: with a table, ``get_with_table`` returns it. It must not raise.
            stream: the stream's number, or None for the best video stream. Each
                stream's index is kept apart (None apart from the best stream's number).

        Raises:
            FileNotFoundError: there is no file at ``path``.
            VideoDecodeError: the file cannot be opened as a video, or ``stream`` names no video stream of it.
        """
        if is_url(path):
            found = self.latest(os.fspath(path), stream)
            return found[1] if found else index_remote(remote_source(os.fspath(path), self._store), self, stream)[1]
        return self.get_with_table(path, on_frame, on_index, stream)[0]

    def get_with_table(
        self,
        path: str | os.PathLike[str],
        on_frame: Callable[[int, av.VideoFrame], None] | None = None,
        on_index: Callable[[InputContainer, VideoStream, VideoIndex], None] | None = None,
        stream: int | None = None,
    ) -> tuple[VideoIndex, PacketTable | None]:
        """``get`` for a local file (or one fetched whole), and its packet table when one is held, else None.

        A table is made with an index made from the container's tables, and kept
        apart from it (see the class docstring). A read decodes the clip's packets
        from it without opening the file through FFmpeg.
        """
        key = source_key(path).of_stream(stream)
        index = self.lookup(key)
        if index is not None:
            # A table made with an index from packets; not one left from before a rescan or a distrust.
            return index, self._held_table(key) if index.made_by == PACKETS and index.seekable else None
        index, table = make_index(path, key, on_frame, on_index)
        self._keep([(key, index, b"")], table.encode() if table is not None and self.max_table_bytes else None)
        return index, table

    def rescan(
        self,
        path: str | os.PathLike[str],
        on_frame: Callable[[int, av.VideoFrame], None] | None = None,
        stream: int | None = None,
    ) -> VideoIndex:
        """Make the file's index again by decoding every frame (see ``get`` for the arguments) and keep it."""
        key = source_key(path).of_stream(stream)
        index = scan(path, on_frame, stream)
        self.put(key, index)
        return index

    def lookup(self, key: SourceKey) -> VideoIndex | None:
        """The index kept for exactly this version of a file, or None (nothing is made)."""
        index = self._held(key)
        if index is None and self._fetch(key.slot):
            index = self._held(key)
        if index is not None:
            self._report(key, index)
        return index

    def latest(self, name: str, stream: int | None = None) -> tuple[SourceKey, VideoIndex, bytes] | None:
        """The newest index kept for ``name`` whatever its version: ``(key, index, extra)``, or None.

        For a source whose version costs a request to learn (a URL): its reads
        check the version instead. ``extra`` is what ``put`` was given with it.
        A URL is looked up without its signature (``keys.url_name``): a re-signed URL finds its index.
        """
        name = url_name(name) if is_url(name) else name
        found = self._newest(name, stream)
        if found is None and self._fetch(stream_slot(name, stream)):
            found = self._newest(name, stream)
        return found

    def put(self, key: SourceKey, index: VideoIndex, extra: bytes = b"") -> None:
        """Keep ``index`` (and ``extra``: see ``latest``) for this version of a file, in memory and on disk."""
        self._keep([(key, index, extra)])

    def put_many(self, items: Iterable[tuple[SourceKey, VideoIndex, bytes]]) -> None:
        """``put`` for each ``(key, index, extra)`` of ``items``: written to the store in one transaction."""
        self._keep(list(items))

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until the indexes kept so far are in the store; False if ``timeout`` seconds passed first."""
        return True if self._writer is None else self._writer.flush(timeout)

    def _keep(self, items: list[tuple[SourceKey, VideoIndex, bytes]], table: bytes | None = None) -> None:
        """``put_many``, and the first file's packet table (``PacketTable.encode``) unless None: one batch to write."""
        if not items:
            return
        written_ns, key = time.time_ns(), items[0][0]
        records = [Record(k.slot, Record.entry_of(k, written_ns, encode(i) + x), written_ns) for k, i, x in items]
        if table is not None:
            records.append(Record(key.slot + _TABLE, Record.entry_of(key, written_ns, table), written_ns))
        with self._lock:
            for record in records[: len(items)]:
                self._insert(record.name, record.entry)
            if table is not None:
                self._insert_table(records[-1].name, records[-1].entry)
                self._forgotten.discard(records[-1].name)
        if self._writer is not None:
            self._writer.submit(records)  # written by its thread, in a batch; seen by ``_fetch`` until then
        for key, index, _ in items:
            self._report(key, index)

    def distrust(self, path: str | os.PathLike[str], reason: str, stream: int | None = None) -> None:
        """Mark a file's seeks as not exact (a read found its timestamps wrong), here and on disk."""
        key = source_key(path).of_stream(stream)
        self.put(key, self.get(path, stream=stream).distrusted(reason))

    def forget_table(self, path: str | os.PathLike[str], stream: int | None = None) -> None:
        """Drop a file's packet table (a read found it misleading), and never take it from the store again."""
        slot = source_key(path).of_stream(stream).slot + _TABLE
        with self._lock:
            self._forgotten.add(slot)
            entry = self._tables.pop(slot, None)
            if entry is not None:
                self._table_bytes -= charge(slot, entry)

    def clear(self) -> None:
        """Forget every index held in memory (those on disk stay)."""
        with self._lock:
            self._entries.clear()
            self._bytes = 0
            self._tables.clear()
            self._table_bytes = 0
            self._reported.clear()

    def close(self) -> None:
        """Write what is queued, end the writer's thread and close the store (a later use opens them again)."""
        if self._writer is not None:
            self._writer.close()
        if self._store is not None:
            self._store.close()

    @property
    def memory(self) -> int:
        """The bytes the entries held in memory are charged (see the class docstring)."""
        with self._lock:
            return self._bytes

    @property
    def table_memory(self) -> int:
        """The bytes the packet tables held in memory are charged (as entries are; see the class docstring)."""
        with self._lock:
            return self._table_bytes

    @property
    def evicted(self) -> int:
        """How many entries have left memory to keep within ``max_bytes``."""
        with self._lock:
            return self._evicted

    def __len__(self) -> int:
        """How many indexes are held in memory."""
        with self._lock:
            return len(self._entries)

    def __repr__(self) -> str:
        return f"<IndexCache directory={self.directory} entries={len(self)} bytes={self.memory}>"

    def _entry(self, entries: OrderedDict[str, bytes], slot: str) -> bytes | None:
        """The entry held for ``slot``, now the most recently used, or None."""
        with self._lock:
            entry = entries.get(slot)
            if entry is not None:
                entries.move_to_end(slot)
            return entry

    def _held(self, key: SourceKey) -> VideoIndex | None:
        entry = self._entry(self._entries, key.slot)
        if entry is None:
            return None
        try:
            size, version, _, offset = Record.parse_entry(entry)
            if (size, version) != (key.size, key.version):
                return None  # stale: the file changed since
            return decode(entry, offset)
        except ValueError as exc:  # cannot happen for entries this code wrote; never trusted
            log.debug("ignoring an unreadable video index of %s: %s", key.name, exc)
            return None

    def _held_table(self, key: SourceKey) -> PacketTable | None:
        slot = key.slot + _TABLE
        entry = self._entry(self._tables, slot)
        if entry is None and self.max_table_bytes and slot not in self._forgotten and self._fetch(slot):
            entry = self._entry(self._tables, slot)
        if entry is None:
            return None
        size, version, _, offset = Record.parse_entry(entry)
        if (size, version) != (key.size, key.version):
            return None  # of an older version of the file
        return kept_table(entry[offset:])

    def _newest(self, name: str, stream: int | None) -> tuple[SourceKey, VideoIndex, bytes] | None:
        entry = self._entry(self._entries, stream_slot(name, stream))
        if entry is None:
            return None
        try:
            size, version, _, offset = Record.parse_entry(entry)
            index, end = decode_with_end(entry, offset)
        except ValueError as exc:
            log.debug("ignoring an unreadable video index of %s: %s", name, exc)
            return None
        return SourceKey(name, size, version, stream), index, entry[end:]

    def _fetch(self, slot: str) -> bool:
        """Take ``slot``'s record from the store into memory, unless memory holds a newer one; False if none."""
        record = None if self._writer is None else self._writer.pending(slot)
        if record is None and self._store is not None:
            record = self._store.get(slot)
        if record is None:
            return False
        entries, insert = (self._tables, self._insert_table) if slot.endswith(_TABLE) else (self._entries, self._insert)
        with self._lock:
            kept = entries.get(slot)
            if kept is None or Record.parse_entry(kept)[2] <= record.written_ns:
                insert(slot, record.entry)
        return True

    def _insert(self, name: str, entry: bytes) -> None:
        """Hold ``entry`` for ``name``; drop the least recently used beyond ``max_bytes``. Caller holds the lock."""
        self._bytes, gone = held_within(self._entries, name, entry, self._bytes, self.max_bytes, keep=1)
        self._evicted += gone

    def _insert_table(self, name: str, entry: bytes) -> None:
        """``_insert`` for a packet table, within ``max_table_bytes``. Caller holds the lock."""
        self._table_bytes, _ = held_within(self._tables, name, entry, self._table_bytes, self.max_table_bytes, keep=0)

    def _report(self, key: SourceKey, index: VideoIndex) -> None:
        if index.seekable:
            return
        with self._lock:
            if key.slot in self._reported:
                return
            self._reported.add(key.slot)
        shown = key.name if key.stream is None else f"{key.name} (stream {key.stream})"
        log.warning("%s", not_seekable_warning(shown, index))


def default_index_cache() -> IndexCache:
    """The cache ``read_clip``, ``frame_count`` and ``VideoDataset`` use unless given another.

    Made at the first call, with the default directory (see ``default_directory``).
    """
    cache = _default[0]
    if cache is None:
        with _default_lock:
            if _default[0] is None:
                _default[0] = IndexCache()
            cache = _default[0]
    return cache


def set_default_index_cache(cache: IndexCache) -> None:
    """Replace the process-wide default cache, e.g. with ``IndexCache(directory)`` to keep indexes elsewhere.

    Call it before loading starts; reads already under way finish with the old cache.
    """
    if not isinstance(cache, IndexCache):
        raise TypeError(f"expected an IndexCache, got {type(cache).__name__}")
    _default[0] = cache


def index_remote(
    remote: RemoteObject, cache: IndexCache, stream: int | None = None
) -> tuple[SourceKey, VideoIndex, PacketTable | None, Fetched | None]:
    """Index an object's stream now; keep the index with its packet table: ``(key, index, table, fetched or None)``."""
    key, index, table, fetched = index_object(remote, stream)
    cache.put(key, index, extra=b"" if table is None else table.encode())
    return key, index, table, fetched


_default: list[IndexCache | None] = [None]  # one slot, so that replacing it is one atomic store
_default_lock = threading.Lock()  # held while making the first default cache
