"""Frames by time: the frame played at each of some times, found from the timestamps the file's index keeps.

Words used here:

* a frame's *display time*: its presentation timestamp times the stream's time
  base, in seconds. Frame ``i`` is the ``i``-th in display order, so its display
  time is the ``i``-th smallest timestamp.
* the frame *played at* time ``t``: the one whose display interval, from its
  display time to the next frame's, holds ``t``. The last frame lasts as long
  as the one before it (a one-frame video: one tick of the time base).

Times are the file's own, as torchcodec's ``get_frames_played_at`` takes them;
most files start at 0. A time before the first frame, or at or after the last
frame's end, is an error naming the range. Nothing is decoded to find the
frames: the index holds the timestamps (see ``_base.facts``).
See :doc:`/video/decoding`.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

import numpy as np

from .._base.errors import VideoDecodeError
from .._base.facts import VideoIndex
from .._bytes.source import VideoSource, video_source
from .._indexes.cache import IndexCache, default_index_cache
from .._media.streams import check_stream
from .clips import check_clip_size, read_frames

__all__ = ["display_times", "played_at", "read_frames_at"]


def read_frames_at(
    path: VideoSource,
    seconds: Sequence[float] | np.ndarray,
    size: tuple[int, int] | None = None,
    stream: int | None = None,
    *,
    rotate: bool = True,
    index_cache: IndexCache | None = None,
) -> np.ndarray:
    """Decode the frames played at the given times: the frame whose display interval holds each time.

    A frame is played from its timestamp to the next frame's. So at 30 times a
    second, a 25-fps file repeats frames and a 60-fps one skips. Variable frame
    rates follow the timestamps, not the header's rate. The frames are found in
    the file's index, without decoding, then read as ``read_clip`` reads them.
    See :doc:`/video/decoding`.

    Args:
        path: the video file, its URL, or the video in memory (see ``read_clip``).
        seconds: the times, in seconds, as the file's timestamps count them (most
            files start at 0); any order, repeats allowed.
        size: ``(height, width)`` to resize each frame to, or ``None`` (see ``read_clip``).
        stream: which stream, by its number among all the file's streams;
            ``None`` takes the video stream FFmpeg picks as best.
        rotate: turn frames as the file's display matrix says (see ``read_clip``).
        index_cache: where file indexes are kept; default: ``default_index_cache()``.

    Returns:
        A ``uint8`` array of shape ``(len(seconds), height, width, 3)``, in the order of ``seconds``.

    Raises:
        ValueError: ``seconds`` is empty or not finite, or a time is outside the
            video: before its first frame, or at or after its last frame's end.
        TypeError: ``path`` is no kind of video source (the message lists those accepted).
        FileNotFoundError: there is no file at ``path``.
        VideoDecodeError: the file is not a video, or ``stream`` names no video
            stream of it. Or its timestamps cannot place frames in time, or a frame does not decode.
    """
    check_clip_size(size)
    check_stream(stream)
    path = video_source(path)
    times = np.asarray(seconds, dtype=np.float64).reshape(-1)
    if times.size == 0:
        raise ValueError("seconds is empty: give at least one time")
    if not np.isfinite(times).all():
        raise ValueError(f"seconds must be finite numbers, got {np.asarray(seconds).tolist()!r}")
    cache = default_index_cache() if index_cache is None else index_cache
    index = cache.get(path, stream=stream)
    frames = played_at(index, times, path)
    return read_frames(path, frames, size, rotate=rotate, index_cache=cache, stream=stream)


def display_times(index: VideoIndex, path: str | os.PathLike[str]) -> np.ndarray:
    """The display times of frames ``0, 1, ...``, and the last frame's end after them: ``frames + 1`` seconds.

    Raises:
        VideoDecodeError: the index holds no timestamps, or no time base (they cannot place frames in time).
    """
    if not index.timed:
        why = index.reason or "the stream gives no time base"
        raise VideoDecodeError(path, f"its timestamps cannot place frames in time ({why})")
    assert index.time_base is not None
    if index.pts_table is not None:
        ticks = np.sort(index.pts_table)
    else:
        ticks = index.pts_start + index.pts_step * np.arange(index.frames, dtype=np.int64)
    last = int(ticks[-1] - ticks[-2]) if ticks.size > 1 else 1
    ticks = np.append(ticks, ticks[-1] + last)
    base = index.time_base
    return ticks * base.numerator / base.denominator


def played_at(index: VideoIndex, seconds: np.ndarray, path: str | os.PathLike[str]) -> np.ndarray:
    """The frame played at each of ``seconds`` (see the module docstring), as ``int64`` frame numbers.

    Raises:
        ValueError: a time is before the first frame, or at or after the last frame's end.
        VideoDecodeError: the index cannot place frames in time (see ``display_times``).
    """
    times = display_times(index, path)
    outside = (seconds < times[0]) | (seconds >= times[-1])
    if outside.any():
        bad = float(seconds[np.argmax(outside)])
        raise ValueError(
            f"{os.fspath(path)}: no frame is played at {bad:g} s: "
            f"its frames are played from {times[0]:g} s to before {times[-1]:g} s"
        )
    return np.searchsorted(times, seconds, side="right").astype(np.int64) - 1
