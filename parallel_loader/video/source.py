"""Where a video's bytes come from: a local file's identity (``SourceKey``) and opening it for FFmpeg.

A file's index is valid for one version of its bytes, so everything that keeps
an index keys it by ``SourceKey``: a name, a size and a version. For a local
file these are its absolute path, its size and its modification time; another
kind of source (an object store, a URL) gives its own name and version (an
ETag, a generation number) and the same store keeps its indexes. This module is
the one place that stats or opens a video file; nothing here decodes.
"""

from __future__ import annotations

import os
import stat
from typing import NamedTuple

import av
import av.error
from av.container import InputContainer

from .errors import VideoDecodeError, require_file

__all__ = ["SourceKey", "local_key", "open_container"]


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


def open_container(path: str | os.PathLike[str]) -> InputContainer:
    """Open ``path`` for demuxing.

    Raises:
        FileNotFoundError: there is no file at ``path``.
        VideoDecodeError: ``path`` is not a file or cannot be opened as a video.
    """
    require_file(path)
    try:
        return av.open(os.fspath(path))
    except av.error.FFmpegError as exc:
        raise VideoDecodeError(
            path, f"cannot be opened as a video (not a video, corrupt, or an unsupported format: {exc})"
        ) from None
