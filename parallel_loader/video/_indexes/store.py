"""Video indexes on disk, shared by every process and host that reads the same directory: append-only segments.

Layout: ``<directory>/v2/*.seg``, a handful of files whatever the number of
videos (no file per video). Each writer (one ``IndexStore`` in one process)
appends to a segment of its own. The segment is named after its host, process
id and a random tag. So no two writers ever write the same file. Readers read
every segment. Each record is written with one ``write`` call, framed as::

    b"VIX1" | payload length (u32 LE) | CRC-32 of the payload (u32 LE) | payload

A reader never trusts a record cut short, or one whose checksum fails. It skips
it, and the index is made again. A record is cut short when its writer was
killed while writing, or is still writing. A checksum fails on a damaged disk
block, or a network file system's stale page.

The payload (``Record``) holds the source's key (name, size, version), the
time it was written, and the index in ``_base.facts``' binary form. A payload
takes about 50 to 100 bytes for a file with evenly spaced timestamps.

Several records may name the same file. Two workers indexed it at once, the
file changed, or a read found its seeks not exact. The newest written counts.
The cache ignores one whose size or version is not the file's now: it is stale.

Segments pile up, a new one per process and run. So ``compact`` merges those
no writer holds anymore into one, keeping the newest record per file. A writer
holds its segment by an exclusive ``flock``. It takes the lock when it creates
the segment, and the system drops it when the process ends. Nothing here decodes.
See :doc:`/video/indexes`.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import logging
import os
import secrets
import socket
import struct
import threading
import zlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from .._base.facts import get_varint, put_varint
from .._base.keys import SourceKey

__all__ = ["IndexStore", "Record"]

log = logging.getLogger(__name__)

# Bump when the framing or the payload changes: an older layout is left alone, unread.
# v2: a record's name names its stream (``keys.stream_slot``), and the default stream is FFmpeg's best.
_LAYOUT = "v2"
_MAGIC = b"VIX1"
_HEADER = struct.Struct("<4sII")  # magic, payload length, CRC-32 of the payload
_MAX_PAYLOAD = 1 << 24  # a longer length is a damaged header, not a record
_RECORD_VERSION = 1
COMPACT_AT = 32  # segments no writer holds, beyond which a read merges them


@dataclass(frozen=True)
class Record:
    """One stored index: ``entry`` holds the rest of the key of ``name`` and the index (see ``entry_of``)."""

    name: str
    entry: bytes
    written_ns: int

    @staticmethod
    def entry_of(key: SourceKey, written_ns: int, index: bytes) -> bytes:
        """The bytes the cache keeps for a file: size, version, when written, then the index.

        The index is in ``_base.facts.encode``'s binary form.
        """
        out = bytearray()
        put_varint(out, key.size)
        version = key.version.encode("utf-8", "surrogateescape")
        put_varint(out, len(version))
        out += version
        put_varint(out, written_ns)
        return bytes(out) + index

    @staticmethod
    def parse_entry(entry: bytes) -> tuple[int, str, int, int]:
        """``(size, version, written_ns, offset of the index)`` of an entry.

        Raises:
            ValueError: the entry is cut short.
        """
        try:
            size, pos = get_varint(entry, 0)
            length, pos = get_varint(entry, pos)
            version = entry[pos : pos + length].decode("utf-8", "surrogateescape")
            written_ns, pos = get_varint(entry, pos + length)
        except IndexError:
            raise ValueError("an index entry cut short") from None
        return size, version, written_ns, pos

    def payload(self) -> bytes:
        out = bytearray([_RECORD_VERSION])
        name = self.name.encode("utf-8", "surrogateescape")
        put_varint(out, len(name))
        out += name
        return bytes(out) + self.entry

    @classmethod
    def from_payload(cls, payload: bytes) -> Record:
        """Raises ``ValueError`` for a payload of another version or cut short."""
        if not payload or payload[0] != _RECORD_VERSION:
            raise ValueError("an index record of another version")
        try:
            length, pos = get_varint(payload, 1)
        except IndexError:
            raise ValueError("an index record cut short") from None
        name = payload[pos : pos + length].decode("utf-8", "surrogateescape")
        entry = payload[pos + length :]
        return cls(name, entry, cls.parse_entry(entry)[2])


class IndexStore:
    """Append-only segment files under ``directory`` (see the module docstring). Thread-safe.

    Args:
        directory: the store's directory, created when first written.
    """

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.directory = Path(directory).expanduser()
        self._segments = self.directory / _LAYOUT
        # Held while appending or reading new records: guards the fields below.
        self._lock = threading.Lock()
        self._fd: int | None = None  # this writer's segment, opened at the first append
        self._pid = 0  # the process that opened it: a forked child opens its own
        self._own = ""  # its file name
        self._read: dict[str, int] = {}  # segment file name -> bytes already read
        self._failed = False  # appending failed once (read-only, full): warned, not tried again

    def append(self, records: Iterable[Record]) -> None:
        """Append records to this writer's segment, each with one ``write``; a failure is logged once."""
        data = b"".join(_frame(r.payload()) for r in records)
        if not data:
            return
        with self._lock:
            if self._failed:
                return
            try:
                fd = self._segment()
                written = os.write(fd, data)
                if written != len(data):  # a short write (disk full): the rest goes to a new segment
                    raise OSError(errno.ENOSPC, f"wrote {written} of {len(data)} bytes")
            except OSError as exc:
                self._failed = True
                log.warning("cannot write video indexes to %s (%s); they are kept in memory only", self.directory, exc)

    def read_new(self) -> list[Record]:
        """The valid records appended to any segment since this store last read it (all of them, the first time)."""
        with self._lock:
            found: list[Record] = []
            names = self._segment_names()
            for name in names:
                start = self._read.get(name, 0)
                try:
                    with open(self._segments / name, "rb") as file:
                        file.seek(start)
                        data = file.read()
                except FileNotFoundError:  # merged away since listed: its records are in the merged segment
                    continue
                except OSError as exc:
                    log.debug("cannot read the video index segment %s: %s", name, exc)
                    continue
                used = 0
                for record, end in _records(data, name):
                    used = end
                    if record is not None:
                        found.append(record)
                self._read[name] = start + used
            for gone in set(self._read) - set(names):
                del self._read[gone]
        if len(names) > COMPACT_AT:
            self.compact()
        return found

    def compact(self) -> int:
        """Merge the segments no writer holds into one, newest record per file; return how many were merged."""
        held: list[tuple[str, int]] = []
        try:
            for name in self._segment_names():
                if name == self._own:
                    continue
                try:
                    fd = os.open(self._segments / name, os.O_RDONLY)
                except FileNotFoundError:
                    continue
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except OSError:  # a writer holds it (or this file system has no locks): leave it
                    os.close(fd)
                    continue
                held.append((name, fd))
            if len(held) < 2:
                return 0
            newest: dict[str, Record] = {}
            for name, fd in held:
                with os.fdopen(os.dup(fd), "rb") as file:
                    data = file.read()
                for record, _ in _records(data, name):
                    if record is not None:
                        kept = newest.get(record.name)
                        if kept is None or record.written_ns >= kept.written_ns:
                            newest[record.name] = record
            merged = self._segments / f"merged-{_writer_tag()}.seg"
            temporary = merged.with_suffix(".tmp")
            with open(temporary, "wb") as file:
                file.write(b"".join(_frame(r.payload()) for r in newest.values()))
                file.flush()
                os.fsync(file.fileno())
            os.replace(temporary, merged)  # the merged segment first: a record is never missing, only twice
            for name, _ in held:
                (self._segments / name).unlink(missing_ok=True)
            return len(held)
        except OSError as exc:
            log.debug("cannot compact the video index store %s: %s", self.directory, exc)
            return 0
        finally:
            for _, fd in held:
                os.close(fd)  # drops the lock

    def segment_count(self) -> int:
        return len(self._segment_names())

    def close(self) -> None:
        """Close this writer's segment (a later append opens a new one)."""
        with self._lock:
            if self._fd is not None and self._pid == os.getpid():
                os.close(self._fd)
            self._fd = None

    def _segment(self) -> int:
        """This writer's segment, created and locked the first time (and again in a forked child)."""
        if self._fd is not None and self._pid == os.getpid():
            return self._fd
        self._segments.mkdir(parents=True, exist_ok=True)
        tag = _writer_tag()
        self._own = f"{tag}.seg"
        creating = self._segments / f"{tag}.new"  # not a segment yet: compact does not see it unlocked
        fd = os.open(creating, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_EXCL, 0o644)
        # "A writer holds it", for compact. On a file system without locks compact cannot
        # lock this segment either, and leaves it.
        with contextlib.suppress(OSError):
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        try:
            os.rename(creating, self._segments / self._own)
        except OSError:
            os.close(fd)
            raise
        self._fd, self._pid = fd, os.getpid()
        return fd

    def _segment_names(self) -> list[str]:
        try:
            return sorted(e.name for e in os.scandir(self._segments) if e.name.endswith(".seg"))
        except FileNotFoundError:
            return []


def _frame(payload: bytes) -> bytes:
    return _HEADER.pack(_MAGIC, len(payload), zlib.crc32(payload)) + payload


def _records(data: bytes, segment: str) -> Iterator[tuple[Record | None, int]]:
    """``(record or None, bytes used so far)`` for each framed record of ``data``; stops at one cut short.

    A damaged record (wrong checksum, unreadable payload) gives ``None`` and is
    passed over; bytes that are no record are skipped up to the next magic.
    """
    pos = 0
    view = memoryview(data)
    while pos + _HEADER.size <= len(data):
        magic, length, crc = _HEADER.unpack_from(data, pos)
        if magic != _MAGIC or length > _MAX_PAYLOAD:
            following = data.find(_MAGIC, pos + 1)
            log.debug("skipping damaged bytes in video index segment %s at %d", segment, pos)
            if following < 0:
                return  # what follows may be a record still being written: read again later
            pos = following
            continue
        end = pos + _HEADER.size + length
        if end > len(data):
            return  # cut short, or still being written
        payload = bytes(view[pos + _HEADER.size : end])
        pos = end
        if zlib.crc32(payload) != crc:
            log.debug("ignoring a damaged record in video index segment %s", segment)
            yield None, pos
            continue
        try:
            yield Record.from_payload(payload), pos
        except ValueError as exc:
            log.debug("ignoring a record of video index segment %s: %s", segment, exc)
            yield None, pos


def _writer_tag() -> str:
    host = "".join(c if c.isalnum() or c in "-_." else "_" for c in socket.gethostname())[:64]
    return f"{host}-{os.getpid()}-{secrets.token_hex(4)}"
