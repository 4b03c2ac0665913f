"""Videos held in memory: ``bytes``, a ``bytearray``, a ``memoryview`` or a binary file object's bytes.

``in_memory`` holds the bytes as a ``Fetched``: the byte source every reader
already opens from memory. Its key is its content. The name is
``memory:sha256-`` and the first 32 hex digits of the bytes' SHA-256; the size
and version follow from the bytes. So the same bytes find the same index, in
this process and, through the store on disk, in others. Hashing costs about
0.6 ms a megabyte of CPU on one core (``benchmarks/video_memory.py``: SHA-256
at 1,686 MB/s, BLAKE2b at 679). That is a few percent of a clip's decoding. The whole
buffer is hashed, never a sample of it: a changed byte that a sample missed
would give a wrong index. ``file_bytes`` reads a file object whole. Nothing here decodes.
See :doc:`/video/in_memory`.
"""

from __future__ import annotations

import hashlib
import io
from typing import Any

from .._base.keys import Fetched, SourceKey

__all__ = ["file_bytes", "in_memory"]

_DIGITS = 32  # hex digits of the SHA-256 kept in a name: 128 bits


def in_memory(data: bytes | bytearray | memoryview) -> Fetched:
    """``data`` as a byte source keyed by its content (see the module docstring).

    ``bytes`` are held as they are; a ``bytearray`` or ``memoryview`` is copied
    once, so that changing it later cannot change a video already indexed.
    """
    held = data if isinstance(data, bytes) else memoryview(data).cast("B").tobytes()
    digest = hashlib.sha256(held).hexdigest()[:_DIGITS]
    return Fetched(SourceKey(f"memory:sha256-{digest}", len(held), f"h{digest}"), held)


def file_bytes(file: Any) -> bytes:
    """All of a binary file object's bytes.

    A seekable file object is read from its start, and left where it was. One
    that cannot seek (a pipe) is read from where it is to its end.

    Raises:
        TypeError: its ``read()`` does not give bytes (a text-mode file).
    """
    if isinstance(file, io.BytesIO):
        return file.getvalue()  # no copy while the BytesIO is not written to
    seekable = getattr(file, "seekable", None)
    if callable(seekable) and seekable():
        position = file.tell()
        file.seek(0)
        try:
            data = file.read()
        finally:
            file.seek(position)
    else:
        data = file.read()
    if not isinstance(data, bytes | bytearray):
        raise TypeError(
            f"a video's file object must give bytes, but its read() gave {type(data).__name__}: "
            "open it in binary mode ('rb')"
        )
    return bytes(data)
