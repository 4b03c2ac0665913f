"""The index store's earlier layout, ``v2``: append-only segment files, read once to carry them into the database.

Layout: ``<directory>/v2/*.seg``, one segment per writing process. Each record
was written with one ``write`` call, framed as::

    b"VIX1" | payload length (u32 LE) | CRC-32 of the payload (u32 LE) | payload

and the payload is a version byte, the name's length (a varint), the name,
then the entry (``store.Record.entry_of``: it starts with the time written). A record cut short (its writer was
killed while writing) or whose checksum fails is skipped. Bytes that are no
record are skipped up to the next magic. Nothing here writes a store: ``store``
reads these segments once and then renames the folder (see :doc:`/video/indexes`).
"""

from __future__ import annotations

import logging
import os
import struct
import zlib
from collections.abc import Iterable, Iterator
from pathlib import Path

from .._base.facts import get_varint, put_varint

__all__ = ["LAYOUT", "frame", "read_segments"]

log = logging.getLogger(__name__)

LAYOUT = "v2"  # the folder under the store's directory
_MAGIC = b"VIX1"
_HEADER = struct.Struct("<4sII")  # magic, payload length, CRC-32 of the payload
_MAX_PAYLOAD = 1 << 24  # a longer length is a damaged header, not a record
_RECORD_VERSION = 1


def read_segments(folder: str | os.PathLike[str]) -> list[tuple[str, bytes]]:
    """Every valid ``(name, entry)`` in the ``*.seg`` files of ``folder``, in the order written per segment.

    A name may come more than once: the caller keeps the newest written.
    """
    found: list[tuple[str, bytes]] = []
    try:
        names = sorted(e.name for e in os.scandir(folder) if e.name.endswith(".seg"))
    except OSError:
        return []
    for name in names:
        try:
            data = (Path(folder) / name).read_bytes()
        except OSError as exc:
            log.debug("cannot read the video index segment %s: %s", name, exc)
            continue
        found += _records(data, name)
    return found


def frame(records: Iterable[tuple[str, bytes]]) -> bytes:
    """``(name, entry)`` pairs framed as a ``v2`` segment holds them (what an earlier version wrote)."""
    out = bytearray()
    for name, entry in records:
        payload = bytearray([_RECORD_VERSION])
        encoded = name.encode("utf-8", "surrogateescape")
        put_varint(payload, len(encoded))
        payload += encoded + entry
        out += _HEADER.pack(_MAGIC, len(payload), zlib.crc32(payload)) + payload
    return bytes(out)


def _records(data: bytes, segment: str) -> Iterator[tuple[str, bytes]]:
    """The valid framed records of ``data``; stops at one cut short, passes over damaged ones."""
    pos = 0
    while pos + _HEADER.size <= len(data):
        magic, length, crc = _HEADER.unpack_from(data, pos)
        if magic != _MAGIC or length > _MAX_PAYLOAD:
            following = data.find(_MAGIC, pos + 1)
            log.debug("skipping damaged bytes in video index segment %s at %d", segment, pos)
            if following < 0:
                return
            pos = following
            continue
        end = pos + _HEADER.size + length
        if end > len(data):
            return  # cut short: its writer was killed while writing
        payload = data[pos + _HEADER.size : end]
        pos = end
        if zlib.crc32(payload) != crc:
            log.debug("ignoring a damaged record in video index segment %s", segment)
            continue
        try:
            yield _from_payload(payload)
        except ValueError as exc:
            log.debug("ignoring a record of video index segment %s: %s", segment, exc)


def _from_payload(payload: bytes) -> tuple[str, bytes]:
    """Raises ``ValueError`` for a payload of another version or cut short."""
    if not payload or payload[0] != _RECORD_VERSION:
        raise ValueError("an index record of another version")
    try:
        length, pos = get_varint(payload, 1)
    except IndexError:
        raise ValueError("an index record cut short") from None
    return payload[pos : pos + length].decode("utf-8", "surrogateescape"), payload[pos + length :]
