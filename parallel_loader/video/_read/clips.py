"""Decoding exact frames from videos, local, at URLs or in memory: ``read_clip``, ``frame_count`` and ``probe``.

``read_clip`` returns exactly the frames asked for: the same pixels as decoding
every frame from the first. It decodes as few frames as the file allows. Which
frame is which comes from the file's ``VideoIndex``, never from the container's
frame count or frame rate. Broken input raises ``VideoDecodeError``, which names
the file; a clip is never returned short or padded. Nothing here starts threads;
every function may be called from several threads at once.
See :doc:`/video/decoding`.
"""

from __future__ import annotations

import os

import numpy as np

from ..._core.checks import check_int
from .._base.info import VideoInfo
from .._base.keys import is_url
from .._bytes.source import VideoSource, video_source
from .._indexes.cache import IndexCache, default_index_cache
from .._media.pixels import FrameSize
from .._media.streams import check_stream
from .local import header_frames, probe_local, read_local
from .remote import probe_remote, read_remote

__all__ = ["VideoInfo", "check_clip_size", "frame_count", "probe", "read_clip", "read_frames"]


def probe(path: VideoSource, *, rotate: bool = True, stream: int | None = None) -> VideoInfo:
    """Read a video's header: frame count, frame rate and size, without decoding.

    ``width`` and ``height`` are those of the frames ``read_clip`` returns with
    the same ``rotate``. By default that is as displayed, swapped for a file
    shown at 90 or 270 degrees. With ``rotate=False`` it is as stored.

    Args:
        path: the video file, its URL, or the video in memory (``bytes``,
            ``memoryview``, a binary file object; see :doc:`/video/in_memory`).
        rotate: give the size as displayed (the default); ``False`` gives it as stored.
        stream: which stream, by its number among all the file's streams; ``None``
            (the default) takes the video stream FFmpeg picks as best, never an
            attached picture. See :doc:`/video/decoding`.

    Returns:
        The header's frame count, frame rate, width and height.

    Raises:
        TypeError: ``path`` is no kind of video source (the message lists those accepted).
        FileNotFoundError: there is no file at ``path``.
        VideoDecodeError: the file cannot be opened as a video, or ``stream``
            names no video stream of it (the message lists its streams).
    """
    check_stream(stream)
    path = video_source(path)
    if is_url(path):  # OpenCV reads no object store: the header through the byte source
        return probe_remote(os.fspath(path), default_index_cache(), rotate=rotate, stream=stream)
    return probe_local(path, rotate=rotate, stream=stream)


def frame_count(
    path: VideoSource,
    exact: bool = True,
    *,
    index_cache: IndexCache | None = None,
    stream: int | None = None,
) -> int:
    """Return the number of frames in a video.

    The header's count (``CAP_PROP_FRAME_COUNT``) can be wrong. It comes from
    the container, or from duration times frame rate. A truncated file keeps its
    full count, and some files claim several times the frames that decode.

    With ``exact=True`` (the default) the count is the file's index's. The index
    comes from the file's packets where they tell, else from decoding every
    frame once. It is kept in ``index_cache``, so later calls and ``read_clip``
    cost nothing more. It is the only count ``read_clip`` is sure to honour.
    ``exact=False`` returns the header's count, which is cheap. For a URL, both
    return the index's count.
    See :doc:`/video/decoding`.

    Args:
        path: the video file, its URL, or the video in memory (see ``probe``).
        exact: count decoded frames rather than read the header.
        index_cache: where indexes are kept; default: ``default_index_cache()``.
        stream: which stream (see ``probe``); each stream's index is kept apart.

    Raises:
        TypeError: ``path`` is no kind of video source (the message lists those accepted).
        FileNotFoundError: there is no file at ``path``.
        VideoDecodeError: the file cannot be opened as a video, no frame decodes,
            or ``stream`` names no video stream of it.
    """
    check_stream(stream)
    path = video_source(path)
    if exact or is_url(path):  # a URL's index comes from its header: as cheap as the header's count
        return (default_index_cache() if index_cache is None else index_cache).get(path, stream=stream).frames
    return header_frames(path, stream)


def read_clip(
    path: VideoSource,
    start: int,
    clip_len: int,
    stride: int = 1,
    size: tuple[int, int] | None = None,
    *,
    seek: bool = True,
    rotate: bool = True,
    index_cache: IndexCache | None = None,
    stream: int | None = None,
) -> np.ndarray:
    """Decode frames ``start, start + stride, ..., start + (clip_len - 1) * stride`` of a video.

    Frame ``i`` is the ``i``-th frame that decoding from the first gives. The
    container's timestamps, frame rate and header do not change which frame that
    is. With ``seek=True`` the read starts at the keyframe at or before ``start``,
    found in the file's index, and skips frames that nothing refers to. A file
    whose seeks are not exact is decoded from its first frame: slower, never
    different. Each kept frame is scaled and converted to RGB in one pass, and
    turned as the file's display matrix says. See :doc:`/video/decoding`.

    Args:
        path: the video file, or its URL (``s3://``, ``gs://``, ``az://``, ``http(s)://``,
            ``file://``; see :doc:`/video/remote`). Or the video in memory
            (``bytes``, ``memoryview``, a binary file object; see :doc:`/video/in_memory`).
        start: the index of the first frame, counted from 0.
        clip_len: how many frames to return.
        stride: the step between returned frames.
        size: ``(height, width)`` to resize each frame to (as displayed); ``None``
            keeps the video's size (as displayed: width and height swap for a
            file shown at 90 or 270 degrees, unless ``rotate=False``).
        seek: start at the keyframe before ``start`` (exact, see above); ``False``
            decodes from the first frame without an index, the reference the
            seeking read is checked against.
        rotate: turn frames as the file's display matrix says (the default);
            ``False`` returns them as stored.
        index_cache: where file indexes are kept; default: ``default_index_cache()``.
        stream: which stream, by its number among all the file's streams; ``None``
            (the default) takes the video stream FFmpeg picks as best, never an
            attached picture. See :doc:`/video/decoding`.

    Returns:
        A ``uint8`` array of shape ``(clip_len, height, width, 3)``, channels in RGB order.

    Raises:
        TypeError: ``path`` is no kind of video source (the message lists those accepted).
        ValueError: an argument is out of range.
        FileNotFoundError: there is no file at ``path``.
        VideoDecodeError: the file is not a video, or it ends before the last
            frame asked for (truncated, corrupt or just short). Or it cannot be
            read or decoded after the seek. A clip is never returned short or padded.
            Or ``stream`` names no video stream of the file (the message lists its streams).
    """
    _check_clip_args(start, clip_len, stride, size)
    check_stream(stream)
    frames = start + stride * np.arange(clip_len, dtype=np.int64)
    return read_frames(path, frames, size, seek=seek, rotate=rotate, index_cache=index_cache, stream=stream)


def read_frames(
    path: VideoSource,
    frames: np.ndarray,
    size: FrameSize,
    *,
    seek: bool = True,
    rotate: bool = True,
    index_cache: IndexCache | None = None,
    stream: int | None = None,
) -> np.ndarray:
    """The ``frames`` of a local file, a URL or a video in memory, in that order (repeats allowed).

    The arguments are already checked, but for ``path``. ``size`` may also be a function of
    the first frame's ``(height, width)``, as displayed (see ``RGBFrames``).
    """
    cache = default_index_cache() if index_cache is None else index_cache
    path = video_source(path)
    if is_url(path):  # an object store or HTTP: one ranged read per clip (see ``remote``)
        return read_remote(os.fspath(path), frames, size, seek, cache, rotate, stream)
    return read_local(path, frames, size, seek=seek, rotate=rotate, index_cache=cache, stream=stream)


def _check_clip_args(start: object, clip_len: object, stride: object, size: object) -> None:
    if isinstance(start, bool) or not isinstance(start, int | np.integer) or start < 0:
        raise ValueError(f"start must be a non-negative int, got {start!r}")
    check_int("clip_len", clip_len, minimum=1)
    check_int("stride", stride, minimum=1)
    check_clip_size(size)


def check_clip_size(size: object) -> None:
    """Raise ``TypeError`` or ``ValueError`` unless ``size`` is None or ``(height, width)`` of positive ints."""
    if isinstance(size, int | np.integer) and not isinstance(size, bool):
        raise TypeError(f"size must be a (height, width) pair, got the single number {size!r}: pass ({size}, {size})")
    if size is not None and (
        not isinstance(size, tuple | list)
        or len(size) != 2
        or not all(isinstance(s, int | np.integer) and not isinstance(s, bool) and s > 0 for s in size)
    ):
        raise ValueError(f"size must be (height, width) of positive ints, or None, got {size!r}")
