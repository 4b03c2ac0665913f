"""The byte-source interface: which inputs name a video, and opening their bytes for FFmpeg and OpenCV.

A video's bytes come from one of these sources:

* a local file (a path);
* an object in a store or behind HTTP (a URL: ``objects``, ``range_file``);
* bytes in memory (a ``Fetched``): a remote object fetched whole, or a video
  given in memory (``memory``);
* a member of a tar shard (``tar://MEMBER::SHARD``): local (``tar_members``) or at a URL (``remote_shards``).

``video_source`` is where every public reader starts: it turns its input into
one of these, or refuses it. Every function here takes any of them. Nothing
here decodes. A URL's key is its URL, size and ETag (one request).
"""

from __future__ import annotations

import io
import os
import re
from typing import Any, BinaryIO

import av
import av.error
from av.container import InputContainer

from .._base.errors import VideoDecodeError, require_file
from .._base.keys import SCHEMES, Fetched, SourceKey, UrlPath, is_url, local_key, shown_url
from .memory import file_bytes, in_memory
from .range_file import RangeFile
from .remote_shards import remote_source
from .tar_members import MEMBER_PREFIX, TarMember, tar_member

__all__ = ["ACCEPTED", "VideoSource", "open_bytes", "open_container", "opencv_source", "source_key", "video_source"]

ACCEPTED = (
    "a path (str or os.PathLike), a URL ("
    + ", ".join(f"{scheme}://" for scheme in sorted(set(SCHEMES)))
    + "), a member of a tar shard (tar://MEMBER::/path/to/shard.tar or tar://MEMBER::s3://bucket/shard.tar),"
    " or a video in memory"
    " (bytes, bytearray, memoryview, or a binary file object such as io.BytesIO)"
)

# What a reader takes (the public functions' annotation): a path or URL, or a video in memory.
VideoSource = str | os.PathLike | bytes | bytearray | memoryview | io.BufferedIOBase | io.RawIOBase

# FFmpeg's probing of a header-only open: no bytes beyond the header, no frame decoded.
_HEADER_ONLY = {"probesize": "32", "analyzeduration": "0"}
_NO_DECODING = {"skip_frame": "all"}
_STREAMS = 16  # streams given ``_NO_DECODING``; any further ones are probed as usual
_SCHEME = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*)://")


def video_source(path: Any) -> str | os.PathLike[str] | Fetched | TarMember:
    """What a reader reads for ``path``: a path or URL as given, a tar member, or a video in memory.

    A video in memory becomes a ``Fetched`` (``memory.in_memory``); a file
    object is read whole (``memory.file_bytes``). A ``tar://`` URL becomes its ``TarMember``.

    Raises:
        TypeError: ``path`` is none of the kinds accepted (``ACCEPTED``). It is an
            int, a text-mode file, a URL of a scheme no reader reads (``ftp://``),
            or another object. The message says what is accepted.
        FileNotFoundError: a tar member's shard, or the member in it, is not there.
    """
    if isinstance(path, Fetched | UrlPath | TarMember):
        return path
    if isinstance(path, bytes | bytearray | memoryview):
        return in_memory(path)
    if isinstance(path, str | os.PathLike):
        name = os.fspath(path)
        found = _SCHEME.match(name) if isinstance(name, str) else None
        if found is None or found[1].lower() in SCHEMES:
            return path
        if name.startswith(MEMBER_PREFIX):
            return path if is_url(name) else _member(name)  # a member of a remote shard is read as a URL
        # FFmpeg would take it for a protocol of its own, and fail as if the file were missing.
        raise TypeError(f"{name}: URLs of scheme {found[1]}:// cannot be read; a video source is {ACCEPTED}")
    if isinstance(path, io.TextIOBase):
        raise TypeError(f"a video cannot be read from a text-mode file ({path!r}): open it in binary mode ('rb')")
    if callable(getattr(path, "read", None)):
        return in_memory(file_bytes(path))
    shown = repr(path) if len(repr(path)) <= 80 else repr(path)[:77] + "..."
    raise TypeError(f"a video source is {ACCEPTED}; got {type(path).__name__} {shown}")


def source_key(path: str | os.PathLike[str]) -> SourceKey:
    """The key of ``path`` now: a local file's (``local_key``), a URL's (one request), a member's or a ``Fetched``'s."""
    path = _resolved(path)
    if isinstance(path, Fetched | TarMember):
        return path.key
    if is_url(path):
        return remote_source(os.fspath(path)).key()
    return local_key(path)


def open_bytes(path: str | os.PathLike[str]) -> BinaryIO:
    """``path``'s bytes as a seekable binary file: a local file, a URL's ``RangeFile``, a member's or a ``Fetched``'s.

    Raises:
        FileNotFoundError: there is no file at ``path``.
    """
    path = _resolved(path)
    if isinstance(path, Fetched):
        return io.BytesIO(path.data)
    if isinstance(path, TarMember):
        return path.open()
    if is_url(path):
        return io.BufferedReader(RangeFile.open(remote_source(os.fspath(path))))
    return open(path, "rb")


def opencv_source(path: str | os.PathLike[str]) -> str | BinaryIO:
    """What OpenCV's ``VideoCapture`` opens for a local file, a member (its ``subfile``) or a ``Fetched``.

    A ``Fetched`` is a file object over its bytes: keep it until the capture is released.

    Raises:
        FileNotFoundError: there is no file at ``path``.
        VideoDecodeError: ``path`` is not a file.
    """
    path = _resolved(path)
    if isinstance(path, Fetched):
        return io.BytesIO(path.data)
    if isinstance(path, TarMember):
        return path.ffmpeg_url()
    require_file(path)
    return os.fspath(path)


def open_container(
    path: str | os.PathLike[str], header_only: bool = False, container_format: str | None = None
) -> InputContainer:
    """Open ``path`` (a file, a URL, a tar member or a ``Fetched``) for demuxing.

    A URL is read through a ``RangeFile``, which fetches what FFmpeg asks for in
    large ranged reads; ``Fetched`` bytes are read from memory, and a member as a
    ``subfile`` of its shard. With ``header_only`` FFmpeg reads the header and
    decodes nothing to learn the streams. An H.264 stream then opens in a quarter
    of the time. Its pixel format stays unknown, and its decoder's delay unguessed:
    for reading tables, not for decoding. A ``container_format`` (FFmpeg's
    demuxer name) skips FFmpeg's probe of every demuxer: for a caller that read
    the file's signature, which FFmpeg's probe would match.

    Raises:
        FileNotFoundError: there is no file at ``path``.
        VideoDecodeError: ``path`` is not a file or cannot be opened as a video.
    """
    path = _resolved(path)
    if isinstance(path, Fetched):
        opened: object = io.BytesIO(path.data)
    elif isinstance(path, TarMember):
        opened = path.ffmpeg_url()
    elif is_url(path):
        opened = RangeFile.open(remote_source(os.fspath(path)))
    else:
        require_file(path)
        opened = os.fspath(path)
    try:
        if header_only:
            return av.open(
                opened, format=container_format, options=_HEADER_ONLY, stream_options=[_NO_DECODING] * _STREAMS
            )
        return av.open(opened, format=container_format)
    except av.error.FFmpegError as exc:
        shown = shown_url(path) if is_url(path) else path
        raise VideoDecodeError(
            shown, f"cannot be opened as a video (not a video, corrupt, or an unsupported format: {exc})"
        ) from None


def _resolved(path: str | os.PathLike[str]) -> str | os.PathLike[str]:
    """A ``tar://`` URL as its ``TarMember`` (the index cache is given sample paths as strings); else ``path``."""
    local_member = isinstance(path, str) and path.startswith(MEMBER_PREFIX) and not is_url(path)
    return _member(path) if local_member else path


def _member(url: str) -> TarMember:
    """The member of a local shard ``url`` names; a malformed member URL is refused with what is accepted."""
    try:
        return tar_member(url)
    except TypeError as exc:
        raise TypeError(f"{exc}; a video source is {ACCEPTED}") from None
