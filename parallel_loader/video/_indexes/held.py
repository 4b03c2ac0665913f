"""Entries held in memory within a byte budget, least recently used out first: what ``cache`` charges each.

An entry is a name and its bytes in an ``OrderedDict``, oldest first. It is
charged its name's and bytes' ``sys.getsizeof``, plus ``SLOT_BYTES`` for its
slot in the dict and its place in the order. Nothing here locks: the caller does.
"""

from __future__ import annotations

import sys
from collections import OrderedDict

__all__ = ["SLOT_BYTES", "charge", "held_within"]

SLOT_BYTES = 120  # what an entry costs beyond its name and bytes: the table's slot and its LRU link


def charge(name: str, entry: bytes) -> int:
    """The bytes an entry is charged (see the module docstring)."""
    return sys.getsizeof(name) + sys.getsizeof(entry) + SLOT_BYTES


def held_within(
    entries: OrderedDict[str, bytes], name: str, entry: bytes, held: int, limit: int, keep: int
) -> tuple[int, int]:
    """Put ``entry`` in ``entries`` (charged ``held`` bytes) last; drop the first beyond ``limit``, down to ``keep``.

    Returns the bytes now charged and how many entries were dropped.
    """
    old = entries.pop(name, None)
    if old is not None:
        held -= charge(name, old)
    entries[name] = entry
    held += charge(name, entry)
    dropped = 0
    while held > limit and len(entries) > keep:
        gone, gone_entry = entries.popitem(last=False)
        held -= charge(gone, gone_entry)
        dropped += 1
    return held, dropped
