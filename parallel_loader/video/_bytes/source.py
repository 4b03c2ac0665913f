"""Where a video's bytes come from: a file's or a URL's identity (``SourceKey``) and opening it for FFmpeg.

A file's index is valid for one version of its bytes, so everything that keeps
an index keys it by ``SourceKey``: a name, a size and a version. For a local
file these are its absolute path, its size and its modification time; another
kind of source (an object store, a URL) gives its own name and version (an
ETag, a generation number) and the same store keeps its indexes. This module is
the one place that stats or opens a video file; nothing here decodes.

A video path may also be a URL (``s3://``, ``gs://``, ``http(s)://``...: see
``remote``), whose key is its URL, size and ETag, or a ``Fetched`` object: a
remote file's bytes already in memory, which every reader opens like a file.
"""

from __future__ import annotations

import io
import os
import stat
from typing import NamedTuple

import av
import av.error
from av.container import InputContainer

from .._base.errors import VideoDecodeError, require_file

__all__ = ["Fetched", "SourceKey", "is_url", "local_key", "open_container", "source_key"]


class SourceKey(NamedTuple):
    """Which bytes an index describes: ``name`` at ``size`` bytes, in version ``version``.

    ``version`` is ``"m<hex>"`` for a local file, its modification time in
    nanoseconds; other sources use their own scheme (another first letter, such
    as ``"e"`` and an ETag), so versions from two schemes never compare equal.
    """

    name: str
    size: int
    version: str


def local_key(path: str | os.PathLike[str]) -> SourceKey:
    """The key of the local file at ``path`` now (one ``stat``).

    Raises:
        FileNotFoundError: there is no file at ``path``.
        VideoDecodeError: ``path`` is not a file.
    """
    name = os.path.abspath(path)
    try:
        info = os.stat(name)
    except FileNotFoundError:
        raise FileNotFoundError(2, "no such video file", os.fspath(path)) from None
    if not stat.S_ISREG(info.st_mode):
        require_file(path)
    return SourceKey(name, info.st_size, f"m{info.st_mtime_ns:x}")


class Fetched(os.PathLike):
    """A remote video's bytes, fetched whole: opened from memory, named (in errors, in the index) by its URL.

    Attributes:
        key: the object's URL, size and version.
        data: all its bytes.
    """

    def __init__(self, key: SourceKey, data: bytes) -> None:
        if len(data) != key.size:
            raise ValueError(f"{key.name}: {len(data)} bytes fetched, but the object has {key.size}")
        self.key, self.data = key, data

    def __fspath__(self) -> str:
        return self.key.name

    def __repr__(self) -> str:
        return f"Fetched({self.key.name!r}, {self.key.size} bytes)"


def is_url(path: object) -> bool:
    """Whether ``path`` is a URL read through ``remote`` rather than a local path."""
    from .objects import is_url as remote_url

    return remote_url(path)


def source_key(path: str | os.PathLike[str]) -> SourceKey:
    """The key of ``path`` now: a local file's (``local_key``), a URL's (one request) or a ``Fetched``'s."""
    if isinstance(path, Fetched):
        return path.key
    if is_url(path):
        from .objects import remote_object

        return remote_object(str(path)).key()
    return local_key(path)


def open_container(path: str | os.PathLike[str]) -> InputContainer:
    """Open ``path`` (a file, a URL or a ``Fetched``) for demuxing.

    A URL is read through a file object that fetches what FFmpeg asks for in
    large ranged reads (see ``ranged.RangeFile``); ``Fetched`` bytes from memory.

    Raises:
        FileNotFoundError: there is no file at ``path``.
        VideoDecodeError: ``path`` is not a file or cannot be opened as a video.
    """
    if isinstance(path, Fetched):
        opened: object = io.BytesIO(path.data)
    elif is_url(path):
        from .._read.remote import RangeFile

        opened = RangeFile.open(str(path))
    else:
        require_file(path)
        opened = os.fspath(path)
    try:
        return av.open(opened)
    except av.error.FFmpegError as exc:
        raise VideoDecodeError(
            path, f"cannot be opened as a video (not a video, corrupt, or an unsupported format: {exc})"
        ) from None
