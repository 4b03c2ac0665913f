"""Opening a video's bytes for FFmpeg and OpenCV, wherever they are: a local file, a URL, or bytes in memory.

Bytes in memory (a ``Fetched``) are a remote object fetched whole, or a video
given in memory (``memory``). Nothing here decodes. A URL's key is its URL,
size and ETag (one request).
"""

from __future__ import annotations

import io
import os
from typing import BinaryIO

import av
import av.error
from av.container import InputContainer

from .._base.errors import VideoDecodeError, require_file
from .._base.keys import Fetched, SourceKey, is_url, local_key, shown_url
from .objects import remote_object
from .range_file import RangeFile

__all__ = ["open_bytes", "open_container", "opencv_source", "source_key"]

# FFmpeg's probing of a header-only open: no bytes beyond the header, no frame decoded.
_HEADER_ONLY = {"probesize": "32", "analyzeduration": "0"}
_NO_DECODING = {"skip_frame": "all"}
_STREAMS = 16  # streams given ``_NO_DECODING``; any further ones are probed as usual


def source_key(path: str | os.PathLike[str]) -> SourceKey:
    """The key of ``path`` now: a local file's (``local_key``), a URL's (one request) or a ``Fetched``'s."""
    if isinstance(path, Fetched):
        return path.key
    if is_url(path):
        return remote_object(os.fspath(path)).key()
    return local_key(path)


def open_bytes(path: str | os.PathLike[str]) -> BinaryIO:
    """``path``'s bytes as a seekable binary file: a local file, a URL's ``RangeFile``, or a ``Fetched``'s memory.

    Raises:
        FileNotFoundError: there is no file at ``path``.
    """
    if isinstance(path, Fetched):
        return io.BytesIO(path.data)
    if is_url(path):
        return io.BufferedReader(RangeFile.open(os.fspath(path)))
    return open(path, "rb")


def opencv_source(path: str | os.PathLike[str]) -> str | BinaryIO:
    """What OpenCV's ``VideoCapture`` opens for a local file (its path) or a ``Fetched`` (a file object over its bytes).

    Raises:
        FileNotFoundError: there is no file at ``path``.
        VideoDecodeError: ``path`` is not a file.
    """
    if isinstance(path, Fetched):
        return io.BytesIO(path.data)
    require_file(path)
    return os.fspath(path)


def open_container(path: str | os.PathLike[str], header_only: bool = False) -> InputContainer:
    """Open ``path`` (a file, a URL or a ``Fetched``) for demuxing.

    A URL is read through a ``RangeFile``, which fetches what FFmpeg asks for in
    large ranged reads; ``Fetched`` bytes are read from memory. With
    ``header_only`` FFmpeg reads the header and decodes nothing to learn the
    streams. An H.264 stream then opens in a quarter of the time. Its pixel
    format stays unknown, and its decoder's delay unguessed: for reading tables, not for decoding.

    Raises:
        FileNotFoundError: there is no file at ``path``.
        VideoDecodeError: ``path`` is not a file or cannot be opened as a video.
    """
    if isinstance(path, Fetched):
        opened: object = io.BytesIO(path.data)
    elif is_url(path):
        opened = RangeFile.open(os.fspath(path))
    else:
        require_file(path)
        opened = os.fspath(path)
    try:
        if header_only:
            return av.open(opened, options=_HEADER_ONLY, stream_options=[_NO_DECODING] * _STREAMS)
        return av.open(opened)
    except av.error.FFmpegError as exc:
        shown = shown_url(path) if is_url(path) else path
        raise VideoDecodeError(
            shown, f"cannot be opened as a video (not a video, corrupt, or an unsupported format: {exc})"
        ) from None
