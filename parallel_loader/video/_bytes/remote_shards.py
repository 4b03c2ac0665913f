"""Members of tar shards at URLs, read in place: each member is an object of its own, a byte range of its shard.

Words used here (see ``tar_members`` for shards, members and member tables):

* a *remote member*: ``tar://MEMBER::URL``, where ``URL`` names a shard in a
  store or behind HTTP (``s3://bucket/train-00000.tar``). Its ``RemoteMember``
  reads as a ``RemoteObject`` does: each read is one ranged read of the shard,
  sent with the shard's ETag (``If-Match``).
* a member's *key*: its URL, its size, and a version made of the shard's
  version, the shard's size and the member's offset. So a read needs only the
  key: later epochs and processes read a clip without the member table.

A remote shard's member table is made in few requests, never one per member.
The first read takes the shard's last ``TABLE_BLOCK_BYTES``, which hold a small
shard whole. A larger shard's table comes from an index file beside it (DALI's
``.idx`` or a ``wids`` ``.index``), else from its tar headers. Those are read
in ranges of ``TABLE_BLOCK_BYTES``; a member longer than one is skipped by a seek.
The table is held in this process (``tar_members.hold_table``) and kept by
``ShardTables``, the index store, keyed by the shard's URL, size and version.
Where the table is made from the headers, the members a ``SmallMembers`` wants
come with it, from the same reads. A member up to ``WHOLE_BYTES`` comes whole at
its first touch: one request, not a tail, a head and a span. A shard changed
since its table was made fails a read (``ObjectChanged``); its table is then made
again. A read that succeeds for another version than the table held shows the
table old: it is made again too. Nothing here decodes. See :doc:`/video/in_memory`.
"""

from __future__ import annotations

import io
import logging
import weakref
from typing import Protocol

from .._base.errors import VideoDecodeError
from .._base.keys import SourceKey, shown_url, url_name
from .objects import ObjectChanged, RemoteObject, remote_object
from .range_file import RangeFile
from .tar_members import (
    MemberTable,
    SmallMembers,
    forget_table,
    headers_members,
    held_table,
    hold_table,
    index_files,
    index_members,
    member_url,
    split_member_url,
)

__all__ = [
    "INDEX_FILE_BYTES",
    "TABLE_BLOCK_BYTES",
    "WHOLE_BYTES",
    "RemoteMember",
    "ShardTables",
    "member_key",
    "remote_member_table",
    "remote_source",
    "shard_changed",
]

log = logging.getLogger(__name__)

TABLE_BLOCK_BYTES = 16 << 20  # one read of a shard's headers: 16 MiB holds ~3 to 300 members' headers and data
WHOLE_BYTES = 8 << 20  # a member up to this size comes whole in its first read (a 30-s 360p clip: ~3 MB)
INDEX_FILE_BYTES = 64 << 20  # an index file beside a shard is read whole, in one request, up to this size


class ShardTables(Protocol):
    """Where remote shards' member tables are kept beyond this process (``IndexCache`` is one)."""

    def shard_table(self, name: str) -> tuple[SourceKey, bytes] | None:
        """The shard's key and table (``MemberTable.encode``) kept for the shard at URL ``name``, or None."""

    def keep_shard_table(self, key: SourceKey, table: bytes) -> None:
        """Keep a shard's table under its key."""


def remote_source(url: str, kept: ShardTables | None = None) -> RemoteObject:
    """The object at ``url``: a ``RemoteMember`` for a member of a remote shard, else ``remote_object(url)``.

    No request is made. ``kept`` keeps member tables between processes (see the module docstring).
    """
    return RemoteMember(url, kept) if split_member_url(url) is not None else remote_object(url)


class RemoteMember(RemoteObject):
    """A member of a shard at a URL, read as an object of its own (see the module docstring). Thread-safe.

    Attributes:
        url: ``tar://MEMBER::URL``, as given.
        member: the member's name in the shard.
        shard: the shard, a ``RemoteObject``; it makes the requests and counts them.
        name: the URL without a signature: what the member's index is kept by.
        shown: the URL without a query string: what errors and logs name.
    """

    def __init__(self, url: str, kept: ShardTables | None = None) -> None:  # no request: RemoteObject's reads are
        split = split_member_url(url)  # overridden, so its own fields are not set up
        if split is None:
            raise ValueError(f"{url}: not a member of a shard (tar://MEMBER::URL)")
        self.member, shard = split
        self.shard = remote_object(shard)
        self.url, self.protocol, self.fs, self.network = url, self.shard.protocol, self.shard.fs, self.shard.network
        self.name, self.shown = url_name(url), shown_url(url)
        self._kept = kept

    @property
    def requests(self) -> int:  # type: ignore[override]
        """How many requests the shard's object has made for this member (tries included)."""
        return self.shard.requests

    def first_read(self, n: int) -> tuple[SourceKey, int, bytes]:
        """``(key, start, bytes)``: the member's last ``n`` bytes, in one ranged read; whole up to ``WHOLE_BYTES``.

        The member table gives the size ahead. So a member up to ``WHOLE_BYTES``
        comes whole, and its first touch and first clip cost one request. A table
        kept for an older version of the shard fails the read; it is made again, once.
        """
        for tries in (1, 2):
            key = self.key()
            start = 0 if key.size <= max(n, WHOLE_BYTES) else key.size - n
            try:
                return key, start, self.read(key, start, key.size)
            except ObjectChanged:
                if tries == 2:
                    raise
                log.info("the member table of %s was of an older version: making it again", self.shard.shown)
        raise AssertionError("not reached")

    def key(self) -> SourceKey:
        """The member's key now, from its shard's member table (made if this process and the store lack it)."""
        table = remote_member_table(self.shard, self._kept)
        try:
            return member_key(table, self.member)
        except FileNotFoundError:
            raise FileNotFoundError(2, "no such member in the shard", self.shown) from None

    def read(self, key: SourceKey, start: int, end: int) -> bytes:
        """Bytes ``[start, end)`` of the member version ``key`` names: one ranged read of the shard.

        Raises:
            ObjectChanged: the shard is another version now; its member table is made again at the next ``key``.
            FileNotFoundError: there is no shard at the URL.
            VideoDecodeError: access is denied, or the read failed within the retry budget.
        """
        if start >= end:
            return b""
        version, size, offset = key.version.rsplit("@", 2)
        shard_key = SourceKey(self.shard.name, int(size, 16), version)
        try:
            data = self.shard.read(shard_key, int(offset, 16) + start, int(offset, 16) + end)
        except ObjectChanged:
            shard_changed(self.shard.name, version)
            raise
        held = held_table(self.shard.name)
        if held is not None and (held.key.version, held.key.size) != (version, shard_key.size):
            shard_changed(self.shard.name, held.key.version)  # the shard is this version now: the table is older
        return data


# Shard versions found changed: their tables are taken from the store no more. A version never comes back.
_changed: set[tuple[str, str]] = set()


def shard_changed(name: str, version: str) -> None:
    """Take version ``version`` of the shard at URL ``name`` as gone: its table is not held, nor read from the store."""
    held = held_table(name)
    if held is not None and held.key.version == version:
        forget_table(name)
    _changed.add((name, version))


def member_key(table: MemberTable, member: str) -> SourceKey:
    """The key of member ``member`` of the remote shard of ``table`` (see the module docstring).

    Raises:
        FileNotFoundError: the shard has no member of that name.
    """
    offset, size = table.find(member)
    return SourceKey(member_url(table.key.name, member), size, f"{table.key.version}@{table.key.size:x}@{offset:x}")


def remote_member_table(
    shard: RemoteObject, kept: ShardTables | None = None, small: SmallMembers | None = None
) -> MemberTable:
    """The member table of the shard ``shard``: held, kept in ``kept``, or made now (see the module docstring).

    ``small.found`` gets the members it wants, where the table is made now from the shard's headers.

    Raises:
        FileNotFoundError: there is no shard at its URL.
        VideoDecodeError: it is not an uncompressed tar file, or it cannot be read.
    """
    held = held_table(shard.name)
    if held is not None:
        if kept is not None:
            _keep_once(kept, held)
        return held
    found = None if kept is None else kept.shard_table(shard.name)
    if found is not None and (shard.name, found[0].version) not in _changed:
        try:
            table = MemberTable.decode(*found)
        except ValueError as exc:
            log.info("the kept member table of %s is unreadable (%s): making it again", shard.shown, exc)
        else:
            hold_table(table)
            _kept_in.setdefault(kept, set()).add((table.key.name, table.key.version))
            return table
    table = _made(shard, small)
    hold_table(table)
    if kept is not None:
        kept.keep_shard_table(table.key, table.encode())
        _kept_in.setdefault(kept, set()).add((table.key.name, table.key.version))
    return table


# The tables each store is known to keep, as (shard, version): a table held is looked up once a store, not each time.
_kept_in: weakref.WeakKeyDictionary[ShardTables, set[tuple[str, str]]] = weakref.WeakKeyDictionary()


def _keep_once(kept: ShardTables, table: MemberTable) -> None:
    """Keep a held ``table`` in ``kept`` too, where no table of its shard is there (one lookup a store and shard).

    So a table made with another store (the listing's, say) is found by a later process using ``kept``.
    """
    known = _kept_in.setdefault(kept, set())
    if (table.key.name, table.key.version) in known:
        return
    if kept.shard_table(table.key.name) is None:  # another version there is left: reads tell which is current
        kept.keep_shard_table(table.key, table.encode())
    known.add((table.key.name, table.key.version))


def _made(shard: RemoteObject, small: SmallMembers | None) -> MemberTable:
    """The shard's table from its last block, from an index file beside it, or from its headers read in blocks."""
    key, start, last = shard.first_read(TABLE_BLOCK_BYTES)
    if len(last) < key.size and "?" not in shard.url:  # a signed URL's index file would need a signature of its own
        members = _from_index_file(shard, key)
        if members is not None:
            return members
    blocks = _HeaderBlocks(shard, key, {start: last})
    members = headers_members(io.BufferedReader(blocks, 64 << 10), shard.shown, small)
    log.debug("member table of %s from its headers: %d members, %d requests", shard.shown, len(members), blocks.reads)
    return MemberTable.of(key, members, "headers")


def _from_index_file(shard: RemoteObject, key: SourceKey) -> MemberTable | None:
    """The table from an index file beside the shard (one request each tried), or None."""
    for url, kind in index_files(shard.url):
        try:
            _, start, data = remote_object(url).first_read(INDEX_FILE_BYTES)
            if start > 0:
                raise ValueError(f"it is larger than {INDEX_FILE_BYTES} bytes")
            return MemberTable.of(key, index_members(kind, data, key.size), kind)
        except FileNotFoundError:
            continue
        except (VideoDecodeError, ValueError) as exc:  # S3 answers 403 for a missing object to some clients
            log.info("%s cannot be used (%s): reading the shard's headers instead", shown_url(url), exc)
    return None


class _HeaderBlocks(RangeFile):
    """A shard read for its headers: blocks of ``TABLE_BLOCK_BYTES``, holding only the last fetched and the tail."""

    def __init__(self, shard: RemoteObject, key: SourceKey, blocks: dict[int, bytes]) -> None:
        super().__init__(shard, key, blocks)
        self.block_bytes = TABLE_BLOCK_BYTES
        self.reads = 1  # the first read, which gave ``blocks``

    def readinto(self, buffer: memoryview) -> int:  # type: ignore[override]
        if not any(s <= self.position < s + len(b) for s, b in self.blocks.items()):
            for start in [s for s, b in self.blocks.items() if s + len(b) < self.key.size]:
                del self.blocks[start]  # passed: the headers are read in order
            self.reads += 1
        return super().readinto(buffer)
