"""Videos held in memory, and which kinds of input name a video at all: ``video_source``.

A video in memory is ``bytes``, a ``bytearray``, a ``memoryview`` or a binary
file object (``io.BytesIO``, ``open(path, "rb")``). ``in_memory`` holds its
bytes as a ``Fetched``: the byte source every reader already opens from memory.
Its key is its content. The name is ``memory:sha256-`` and the first 32 hex
digits of the bytes' SHA-256; the size and version follow from the bytes. So
the same bytes find the same index, in this process and, through the store on
disk, in others. Hashing costs about 0.6 ms a megabyte on one core (SHA-256
runs at about 1.6 GB/s here; BLAKE2b at 0.7 GB/s). That is a few percent of
a clip's decoding. The whole buffer is hashed, never a sample of it: a changed
byte that a sample missed would give a wrong index.

``video_source`` is where every public reader starts. It passes paths and URLs
through, and turns a video in memory into a ``Fetched``. It refuses anything
else with a ``TypeError`` that lists what is accepted. Nothing here decodes.
See :doc:`/video/in_memory`.
"""

from __future__ import annotations

import hashlib
import io
import os
import re
from typing import Any

from .._base.keys import SCHEMES, Fetched, SourceKey, UrlPath

__all__ = ["ACCEPTED", "VideoSource", "in_memory", "video_source"]

ACCEPTED = (
    "a path (str or os.PathLike), a URL ("
    + ", ".join(f"{scheme}://" for scheme in sorted(set(SCHEMES)))
    + "), or a video in memory (bytes, bytearray, memoryview, or a binary file object such as io.BytesIO)"
)

# What a reader takes (the public functions' annotation): a path or URL, or a video in memory.
VideoSource = str | os.PathLike | bytes | bytearray | memoryview | io.BufferedIOBase | io.RawIOBase

_DIGITS = 32  # hex digits of the SHA-256 kept in a name: 128 bits
_SCHEME = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*)://")


def in_memory(data: bytes | bytearray | memoryview) -> Fetched:
    """``data`` as a byte source keyed by its content (see the module docstring).

    ``bytes`` are held as they are; a ``bytearray`` or ``memoryview`` is copied
    once, so that changing it later cannot change a video already indexed.
    """
    held = data if isinstance(data, bytes) else memoryview(data).cast("B").tobytes()
    digest = hashlib.sha256(held).hexdigest()[:_DIGITS]
    return Fetched(SourceKey(f"memory:sha256-{digest}", len(held), f"h{digest}"), held)


def video_source(path: Any) -> str | os.PathLike[str] | Fetched:
    """What a reader reads for ``path``: a path or URL as given, or a video in memory as a ``Fetched``.

    A seekable file object is read from its start, and left where it was. One
    that cannot seek (a pipe) is read from where it is to its end.

    Raises:
        TypeError: ``path`` is none of the kinds accepted (``ACCEPTED``). It is an
            int, a text-mode file, a URL of a scheme no reader reads (``tar://``),
            or another object. The message says what is accepted.
    """
    if isinstance(path, Fetched | UrlPath):
        return path
    if isinstance(path, bytes | bytearray | memoryview):
        return in_memory(path)
    if isinstance(path, str | os.PathLike):
        _check_scheme(path)
        return path
    if isinstance(path, io.TextIOBase):
        raise TypeError(f"a video cannot be read from a text-mode file ({path!r}): open it in binary mode ('rb')")
    if callable(getattr(path, "read", None)):
        return in_memory(_read_whole(path))
    raise TypeError(f"a video source is {ACCEPTED}; got {type(path).__name__} {_shown(path)}")


def _check_scheme(path: str | os.PathLike[str]) -> None:
    """Raise ``TypeError`` for a URL whose scheme no reader reads (FFmpeg would take it for a protocol of its own)."""
    name = os.fspath(path)
    found = _SCHEME.match(name) if isinstance(name, str) else None
    if found is None or found[1].lower() in SCHEMES:
        return
    raise TypeError(f"{name}: URLs of scheme {found[1]}:// cannot be read; a video source is {ACCEPTED}")


def _read_whole(file: Any) -> bytes:
    """All of a binary file object's bytes (see ``video_source``)."""
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
            f"open it in binary mode ('rb'); a video source is {ACCEPTED}"
        )
    return bytes(data)


def _shown(value: object) -> str:
    shown = repr(value)
    return shown if len(shown) <= 80 else shown[:77] + "..."
