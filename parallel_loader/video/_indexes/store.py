"""Video indexes on disk, shared by every process that reads the same directory: one SQLite database, read per file.

Layout: ``<directory>/indexes-v3.sqlite`` (with its ``-wal`` and ``-shm`` files
while open). Two tables, ``indexes`` and ``packet_tables``, each keyed by a
record's name: a file's path or URL and its stream (``keys.stream_slot``). A
row holds the entry (``Record.entry_of``), its CRC-32 and the time it was
written. A lookup reads that one row, so nothing is read whole: a process's
first lookup costs opening the database and one B-tree descent.

Why SQLite: it is in the standard library, kept well, and serves each case.

- Several writers on a host: WAL mode lets readers run while one writer commits.
  Writers wait for each other up to ``BUSY_S`` (``busy_timeout``).
- A writer killed mid-write: a transaction is all or nothing, so only records it
  had not committed are lost. ``synchronous=NORMAL`` may lose the last commits on
  a power cut, never the database.
- A damaged record: each entry's CRC-32 is checked on every read. A mismatch, or
  ``sqlite3.DatabaseError``, reads as "not indexed": the index is made again and
  written over the damaged row. It is logged once per process.
- Several hosts: WAL needs shared memory, which network file systems do not
  give. On one (``NETWORK_FILE_SYSTEMS``, read from ``/proc/mounts``) the store
  uses a rollback journal instead, which needs only file locks. Those are not
  reliable on every server: keep one store per host, or make one ahead with
  ``python -m parallel_loader.video.index`` and share it read-only.
- A store this process cannot write (a read-only folder or file) is opened
  read-only and immutable. Indexes made then are kept in memory only.

Small members of remote shards are kept in ``packet_tables`` too (``member_bytes``).

Several records may name the same file: two workers indexed it at once, or the
file changed. The newest written counts. The cache ignores one whose size or
version is not the file's now: it is stale.

The earlier layout's segments (``segments``, ``v2/*.seg``) are read once, at the
first open that can write, and carried over; their folder is then renamed
``v2.carried-over``. Nothing here decodes. See :doc:`/video/indexes`.
"""

from __future__ import annotations

import contextlib
import logging
import os
import secrets
import sqlite3
import threading
import time
import zlib
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from .._base.facts import get_varint, put_varint
from .._base.keys import SourceKey
from . import segments

__all__ = [
    "BUSY_S",
    "ENVIRONMENT_VARIABLE",
    "FILE_NAME",
    "MEMBER_BYTES",
    "MEMBER_TABLE",
    "NETWORK_FILE_SYSTEMS",
    "PACKET_TABLE",
    "IndexStore",
    "Record",
    "default_directory",
    "file_system",
]

log = logging.getLogger(__name__)

ENVIRONMENT_VARIABLE = "PARALLEL_LOADER_VIDEO_INDEX"  # a directory, or "off" to keep indexes in memory only
_OFF = ("", "0", "off", "none", "false", "no")
FILE_NAME = "indexes-v3.sqlite"  # bump the number when the schema or the entry changes: an older one is left alone
PACKET_TABLE = "\x00packets"  # ends the name of a local file's packet table (a NUL is in no path)
MEMBER_TABLE = "\x00members"  # ends the name of a remote shard's member table (kept with the packet tables)
MEMBER_BYTES = "\x00bytes"  # ends the name of a remote shard's small member's bytes (kept there too)
BUSY_S = 60.0  # how long a writer waits for the others before giving up on a write
# File system types (as /proc/mounts names them) whose hosts share no memory: no WAL there.
NETWORK_FILE_SYSTEMS = frozenset(
    {"nfs", "nfs4", "cifs", "smb3", "smbfs", "ceph", "glusterfs", "lustre", "gpfs", "beegfs", "9p", "afs"}
)
_SCHEMA = """
CREATE TABLE IF NOT EXISTS indexes (
    name BLOB PRIMARY KEY, written_ns INTEGER NOT NULL, crc INTEGER NOT NULL, entry BLOB NOT NULL
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS packet_tables (
    name BLOB PRIMARY KEY, written_ns INTEGER NOT NULL, crc INTEGER NOT NULL, entry BLOB NOT NULL
);
"""
# An index is ~100 bytes: WITHOUT ROWID keeps it in the key's B-tree. A packet table is KBs: a rowid table.
# A newer record replaces the row; so does any record, where the row's checksum fails.
_UPSERT = """
INSERT INTO {0} (name, written_ns, crc, entry) VALUES (?, ?, ?, ?)
ON CONFLICT (name) DO UPDATE SET written_ns = excluded.written_ns, crc = excluded.crc, entry = excluded.entry
WHERE excluded.written_ns >= {0}.written_ns OR crc32({0}.entry) != {0}.crc
"""
_SELECT = "SELECT written_ns, crc, entry FROM {0} WHERE name = ?"


def default_directory() -> Path | None:
    """Where indexes are kept unless an ``IndexCache`` is given another directory.

    ``$PARALLEL_LOADER_VIDEO_INDEX`` when set (``off`` for nowhere: memory only),
    else ``$XDG_CACHE_HOME/parallel_loader/video_index`` (``~/.cache/...`` by default).
    """
    chosen = os.environ.get(ENVIRONMENT_VARIABLE)
    if chosen is not None:
        return None if chosen.strip().lower() in _OFF else Path(chosen).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "parallel_loader" / "video_index"


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

    @classmethod
    def of_key(cls, key: SourceKey, suffix: str, data: bytes, written_ns: int) -> Record:
        """The record of ``data`` under ``key``, named by its name and ``suffix`` (``MEMBER_TABLE``...)."""
        return cls(key.name + suffix, cls.entry_of(key, written_ns, data), written_ns)

    def key_and_data(self, name: str) -> tuple[SourceKey, bytes] | None:
        """``(key, data)`` of a record ``of_key`` made for ``name``; None where its entry is cut short."""
        try:
            size, version, _, offset = self.parse_entry(self.entry)
        except ValueError:
            return None
        return SourceKey(name, size, version), self.entry[offset:]

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


class IndexStore:
    """The SQLite store under ``directory`` (see the module docstring). Thread-safe; each process opens its own.

    The database is opened at the first ``get`` or ``write`` in a process. A
    forked child opens its own connection and never touches its parent's.

    Args:
        directory: the store's directory, created when first opened.
    """

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.directory = Path(directory).expanduser()
        self.path = self.directory / FILE_NAME
        # Held while using the connection: one connection serves every thread of a process.
        self._lock = threading.Lock()
        self._db: sqlite3.Connection | None = None
        self._pid = 0  # the process that opened it
        self._read_only = False  # opened read-only: writes are dropped
        self._unusable = False  # cannot be opened: warned once, kept in memory only
        self._write_failed = False  # a write failed (disk full, locked too long): warned once, not tried again
        self._warned_damage = False

    @property
    def read_only(self) -> bool:
        """Whether this process opened the store read-only (known after the first ``get`` or ``write``)."""
        return self._read_only

    @property
    def writable(self) -> bool:
        """False once this process found it cannot write the store: opened read-only, or a write failed."""
        return not (self._unusable or self._read_only or self._write_failed)

    def get(self, name: str) -> Record | None:
        """The newest record of ``name``, or None: never stored, or damaged (logged once)."""
        with self._lock:
            db = self._connection()
            if db is None:
                return None
            try:
                row = db.execute(_SELECT.format(_table(name)), (_key(name),)).fetchone()
            except sqlite3.DatabaseError as exc:
                self._damaged(exc)
                return None
        if row is None:
            return None
        written_ns, crc, entry = row
        if not isinstance(entry, bytes) or zlib.crc32(entry) != crc:
            self._damaged(f"the entry of {name!r} fails its checksum")
            return None
        return Record(name, entry, written_ns)

    def write(self, records: Iterable[Record]) -> None:
        """Write records in one transaction (a newer record of a name replaces it); a failure is logged once."""
        records = list(records)
        if not records:
            return
        with self._lock:
            db = self._connection()
            if db is None or self._read_only or self._write_failed:
                return
            try:
                _upsert(db, records)
            except sqlite3.Error as exc:
                self._write_failed = True
                log.warning("cannot write video indexes to %s (%s); they are kept in memory only", self.path, exc)

    def shard_table(self, name: str) -> tuple[SourceKey, bytes] | None:
        """The member table kept for the shard at URL ``name``: ``(shard key, table bytes)``, or None."""
        record = self.get(name + MEMBER_TABLE)
        return None if record is None else record.key_and_data(name)

    def keep_shard_table(self, key: SourceKey, table: bytes) -> None:
        """Keep a remote shard's member table (``MemberTable.encode``) under its shard's key."""
        self.write([Record.of_key(key, MEMBER_TABLE, table, time.time_ns())])

    def names(self) -> list[str]:
        """Every stored name, indexes and packet tables: for tests and tools, it reads the whole key set."""
        with self._lock:
            db = self._connection()
            if db is None:
                return []
            rows = db.execute("SELECT name FROM indexes UNION ALL SELECT name FROM packet_tables").fetchall()
        return [bytes(n).decode("utf-8", "surrogateescape") for (n,) in rows]

    def close(self) -> None:
        """Close this process's connection (a later call opens it again)."""
        with self._lock:
            if self._db is not None and self._pid == os.getpid():
                self._db.close()
            self._db = None

    def _connection(self) -> sqlite3.Connection | None:
        """This process's connection, opened the first time (and again in a forked child). Caller holds the lock."""
        if self._db is not None and self._pid == os.getpid():
            return self._db
        self._db = None  # a parent's connection: never used across a fork
        if self._unusable:
            return None
        try:
            self._db = self._open()
        except (OSError, sqlite3.Error) as exc:
            self._unusable = True
            log.warning("cannot open the video index store %s (%s); indexes are kept in memory only", self.path, exc)
            return None
        self._pid = os.getpid()
        return self._db

    def _open(self) -> sqlite3.Connection:
        with contextlib.suppress(OSError):  # a read-only store's folder may exist and refuse this
            self.directory.mkdir(parents=True, exist_ok=True)
        exists = self.path.exists()
        writable = os.access(self.directory, os.W_OK | os.X_OK) and (not exists or os.access(self.path, os.W_OK))
        if not writable:
            if not exists:
                raise OSError(f"{self.directory} cannot be written and holds no store")
            # WAL needs a writable -shm file to read; a store nobody may write cannot change under us.
            uri = f"{self.path.resolve().as_uri()}?mode=ro&immutable=1"
            db = sqlite3.connect(uri, uri=True, isolation_level=None, check_same_thread=False)
            self._read_only = True
            log.info("the video index store %s is read-only: indexes made now are kept in memory only", self.path)
            return db
        db = sqlite3.connect(self.path, timeout=BUSY_S, isolation_level=None, check_same_thread=False)
        try:
            db.create_function("crc32", 1, zlib.crc32, deterministic=True)
            kind = file_system(self.directory)
            journal = "delete" if kind in NETWORK_FILE_SYSTEMS or kind.startswith("fuse.") else "wal"
            if db.execute("PRAGMA journal_mode").fetchone()[0] != journal:
                db.execute(f"PRAGMA journal_mode={journal}")
            db.execute("PRAGMA synchronous=NORMAL")
            db.executescript(_SCHEMA)
            self._carry_over(db)
        except BaseException:
            db.close()
            raise
        return db

    def _carry_over(self, db: sqlite3.Connection) -> None:
        """Write the earlier layout's records into the database, then rename their folder so none reads them again."""
        folder = self.directory / segments.LAYOUT
        if not folder.is_dir():
            return
        records = []
        for name, entry in segments.read_segments(folder):
            try:
                written_ns = Record.parse_entry(entry)[2]
            except ValueError:
                continue
            if written_ns < 1 << 63:  # a damaged varint can be longer than SQLite's integers
                records.append(Record(name, entry, written_ns))
        _upsert(db, records)
        for target in (f"{segments.LAYOUT}.carried-over", f"{segments.LAYOUT}.carried-over-{secrets.token_hex(4)}"):
            try:
                os.rename(folder, self.directory / target)
                break
            except FileNotFoundError:  # another process carried them over at the same time: both wrote the same
                break
            except OSError:
                continue
        log.info("carried %d video indexes over from %s into %s", len(records), folder, self.path)

    def _damaged(self, reason: object) -> None:
        if not self._warned_damage:
            self._warned_damage = True
            log.warning("a damaged video index store %s (%s): such indexes are made again", self.path, reason)


def _upsert(db: sqlite3.Connection, records: list[Record]) -> None:
    """Write ``records`` in one transaction, all or none (the newest written of a name counts)."""
    rows: dict[str, list[tuple[bytes, int, int, bytes]]] = {"indexes": [], "packet_tables": []}
    for record in records:
        row = (_key(record.name), record.written_ns, zlib.crc32(record.entry), record.entry)
        rows[_table(record.name)].append(row)
    db.execute("BEGIN IMMEDIATE")  # takes the write lock now, so waiting for it honours the busy timeout
    try:
        for table, values in rows.items():
            if values:  # in key order: neighbouring rows share B-tree pages, so a batch touches each page once
                db.executemany(_UPSERT.format(table), sorted(values))
        db.execute("COMMIT")
    except BaseException:
        with contextlib.suppress(sqlite3.Error):
            db.execute("ROLLBACK")
        raise


def file_system(path: str | os.PathLike[str]) -> str:
    """The type of the file system holding ``path``, as ``/proc/mounts`` names it ("" where unknown)."""
    target = os.path.realpath(path)
    found, longest = "", -1
    try:
        with open("/proc/mounts", encoding="utf-8", errors="replace") as mounts:
            for line in mounts:
                fields = line.split()
                if len(fields) < 3:
                    continue
                point = fields[1].replace("\\040", " ")
                inside = target == point or target.startswith(point.rstrip("/") + "/")
                if inside and len(point) > longest:
                    found, longest = fields[2], len(point)
    except OSError:  # not Linux
        return ""
    return found


def _table(name: str) -> str:
    return "packet_tables" if name.endswith((PACKET_TABLE, MEMBER_TABLE, MEMBER_BYTES)) else "indexes"


def _key(name: str) -> bytes:
    """Names are stored as bytes: a path may hold bytes that are not UTF-8 (as surrogates)."""
    return name.encode("utf-8", "surrogateescape")
