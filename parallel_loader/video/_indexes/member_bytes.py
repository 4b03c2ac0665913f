"""Small members of remote shards kept in the index store, so a caption costs a request once, not once an epoch.

Words used here (see ``_bytes.remote_shards`` for remote shards, members and their keys):

* a *kept member*: a member's bytes in the index store (``store``), in a row
  named by the member's URL. The row holds the member's key too: its size, and
  its shard's version and size with its offset.
* ``KEPT_MEMBER_BYTES``: only members up to this size are kept: captions, JSON,
  class numbers. Larger ones are read from the shard each time.

A member is looked up by its key now, as its shard's member table gives it. A
shard rewritten since gives another key, so its old bytes are never served; the
member's next read writes over them. A member is taken from the store only
right after a read of its shard checked the shard's version: in
``VideoDataset``, its clip's read. That read lets go of a member table older
than the shard (``remote_shards``). The store's writer thread writes them
(``writer``). The store grows by at most ``KEPT_MEMBER_BYTES`` a member name;
nothing is held in memory but the writer's queue. Nothing here decodes. See :doc:`/video/in_memory`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence

from .._base.keys import SourceKey
from .._bytes.remote_shards import member_key
from .._bytes.tar_members import MemberTable
from .store import MEMBER_BYTES, IndexStore, Record
from .writer import StoreWriter, writer_for

__all__ = ["KEPT_MEMBER_BYTES", "keep_members", "read_kept"]

KEPT_MEMBER_BYTES = 64 << 10  # a member is kept up to this size: a caption or a JSON of metadata, not a video


def read_kept(
    store: IndexStore | None,
    table: MemberTable,
    names: Sequence[str],
    read: Callable[[list[str]], dict[str, bytes]],
) -> dict[str, bytes]:
    """The bytes of members ``names`` of a remote shard: those kept in ``store``, the others from ``read``, then kept.

    Args:
        store: where members are kept, or ``None`` to read them all.
        table: the shard's member table now: it gives each member's key.
        names: the members.
        read: reads the members it is given from the shard (one read for neighbours).

    Returns:
        Each member's bytes, by name.

    Raises:
        FileNotFoundError: the shard has no member of one of those names.
    """
    keys = {name: member_key(table, name) for name in names}
    writer = None if store is None else writer_for(store)
    found = {}
    for name, key in keys.items():
        data = None if writer is None or key.size > KEPT_MEMBER_BYTES else _kept(writer, key)
        if data is not None:
            found[name] = data
    missing = [name for name in names if name not in found]
    if missing:
        fresh = read(missing)
        found.update(fresh)
        if writer is not None:
            _keep(writer, [(keys[name], fresh[name]) for name in missing])
    return found


def keep_members(store: IndexStore, members: Iterable[tuple[SourceKey, bytes]]) -> None:
    """Keep each member up to ``KEPT_MEMBER_BYTES`` under its key (``member_key``); others are left.

    The store's writer thread writes them, in a batch; a lookup finds them at once.
    """
    _keep(writer_for(store), members)


def _keep(writer: StoreWriter, members: Iterable[tuple[SourceKey, bytes]]) -> None:
    written_ns = time.time_ns()
    records = [
        Record.of_key(key, MEMBER_BYTES, data, written_ns)
        for key, data in members
        if len(data) == key.size <= KEPT_MEMBER_BYTES
    ]
    if records:
        writer.submit(records)


def _kept(writer: StoreWriter, key: SourceKey) -> bytes | None:
    """The bytes kept for the member ``key`` names, or None: none kept, or kept of another version."""
    name = key.name + MEMBER_BYTES
    record = writer.pending(name) or writer.store.get(name)
    found = None if record is None else record.key_and_data(key.name)
    return found[1] if found is not None and found[0] == key and len(found[1]) == key.size else None
