"""Time in a dataset: the stream and fps arguments, segments by timestamps, and clips at a fixed frame rate.

Words used here (see ``_read.times`` for a frame's *display time* and the frame *played at* a time):

* a sample's *times* count from its file's first frame, which is at 0 s,
  whatever timestamp the file gives it. A segment ``[start, end)`` holds the
  frames whose display times fall in it, by the file's timestamps.
* a clip at ``fps`` frames a second is the frames played at ``t0 + k / fps``
  for ``k`` in ``0 .. clip_len - 1``. So clips of 25-, 30-, 60-fps and
  variable-rate files last the same time. At 30 fps a 25-fps file repeats
  frames and a 60-fps one skips. ``t0`` is drawn in training and spread evenly
  in evaluation, as ``_samples.sampling`` draws a clip's first frame. So a
  clip's first and last frames are played ``(clip_len - 1) / fps`` seconds
  apart, and a sample must last longer than that (or be lengthened, see ``short_clips``).

Nothing here decodes: the file's index holds its timestamps. See :doc:`/video/datasets`.
"""

from __future__ import annotations

import math
import os

import numpy as np

from ..._core.checks import check_int
from .._base.errors import VideoDecodeError
from .._base.facts import VideoIndex
from .._media.streams import check_stream
from .._read.times import display_times
from .._samples.sampling import Sampling
from .short_clips import BLACK, ShortClips, lengthen

__all__ = ["check_timing", "segment_frames", "short_time_view", "time_views", "too_short"]

_SLACK = 1e-9  # seconds: a segment's bound written as 0.1 s holds the frame whose timestamp is 0.1 s


def check_timing(stream: object, fps: object, sampling: Sampling, stride: int) -> tuple[int | None, float | None]:
    """Check a dataset's ``stream`` and ``fps``, and return them normalised.

    Raises:
        TypeError: ``stream`` is not an int, or ``fps`` not a number.
        ValueError: ``stream`` is negative, or ``fps`` not positive and finite. Or
            ``fps`` is given with ``stride`` other than 1 or with ``sampling="segments"``.
    """
    check_stream(stream)
    chosen = None if stream is None else check_int("stream", stream, minimum=0)
    if fps is None:
        return chosen, None
    if isinstance(fps, bool) or not isinstance(fps, int | float | np.number):
        raise TypeError(f"fps must be a number of frames a second, got {type(fps).__name__} {fps!r}")
    if not (math.isfinite(fps) and fps > 0):
        raise ValueError(f"fps must be positive and finite, got {fps!r}")
    if sampling != "clip":
        raise ValueError(f"fps applies to sampling='clip' only, got sampling={sampling!r}")
    if stride != 1:
        raise ValueError(f"fps sets the step between a clip's frames: pass stride=1, got {stride}")
    return chosen, float(fps)


def segment_frames(
    index: VideoIndex, start: float | None, end: float | None, path: str | os.PathLike[str]
) -> tuple[int, int]:
    """The frames ``first`` to ``stop - 1`` whose display times, from the first frame's, are in ``[start, end)``.

    ``None`` for ``start`` or ``end`` is the file's start or end.

    Raises:
        VideoDecodeError: the index cannot place frames in time (see ``_read.times.display_times``).
    """
    times = display_times(index, path)[:-1]
    times = times - times[0]
    first = 0 if start is None else int(np.searchsorted(times, start - _SLACK, side="left"))
    stop = index.frames if end is None else int(np.searchsorted(times, end - _SLACK, side="left"))
    return first, max(first, stop)


def time_views(
    index: VideoIndex,
    first: int,
    stop: int,
    clip_len: int,
    fps: float,
    rng: np.random.Generator | None,
    num_views: int,
    path: str | os.PathLike[str],
) -> list[np.ndarray]:
    """The frame numbers of each view: ``clip_len`` frames at ``fps`` within frames ``first`` to ``stop - 1``.

    A view starts at ``t0``, between the first frame's display time and the
    last's end, less the clip's span. ``rng`` draws one ``t0`` (training);
    ``None`` spreads ``num_views`` of them evenly (evaluation).

    Raises:
        VideoDecodeError: the frames last too short a time for the clip, or the
            index cannot place frames in time.
    """
    times = display_times(index, path)
    problem = too_short(index, first, stop, clip_len, fps, path)
    if problem:
        raise VideoDecodeError(path, problem)
    begin, room = _room(times, first, min(stop, index.frames), clip_len, fps)
    if rng is not None:
        starts = [begin + room * float(rng.random())]
    else:
        starts = [begin + room * (2 * j + 1) / (2 * num_views) for j in range(num_views)]
    steps = np.arange(clip_len, dtype=np.float64) / fps
    return [np.searchsorted(times, t0 + steps, side="right").astype(np.int64) - 1 for t0 in starts]


def short_time_view(
    index: VideoIndex,
    first: int,
    stop: int,
    clip_len: int,
    fps: float,
    policy: ShortClips,
    path: str | os.PathLike[str],
) -> np.ndarray:
    """The frame numbers of a short clip at ``fps`` from frame ``first``, lengthened by ``policy``.

    The frames ``first`` to ``stop - 1`` must hold at least one frame. A
    ``BLACK`` frame number stands for a black frame (``"pad"``).

    Raises:
        VideoDecodeError: the index cannot place frames in time.
    """
    times = display_times(index, path)
    stop = min(stop, index.frames)
    begin = float(times[first])
    offsets, kept = lengthen(np.arange(clip_len, dtype=np.float64) / fps, float(times[stop]) - begin, policy)
    # The slack keeps a looped time that rounding put a hair early (1.8 s mod 1.6 s) on its frame.
    frames = np.searchsorted(times, begin + offsets + _SLACK, side="right").astype(np.int64) - 1
    return np.where(kept, np.clip(frames, first, stop - 1), BLACK)


def too_short(index: VideoIndex, first: int, stop: int, clip_len: int, fps: float, path: str | os.PathLike[str]) -> str:
    """Why frames ``first`` to ``stop - 1`` last too short a time for ``clip_len`` frames at ``fps``; "" if they do not.

    Raises:
        VideoDecodeError: the index cannot place frames in time.
    """
    stop = min(stop, index.frames)  # a damaged file's header may claim more frames than the index holds
    if stop <= first:
        return f"has no frame for a clip of {clip_len} frames at {fps:g} fps"
    times = display_times(index, path)
    begin, room = _room(times, first, stop, clip_len, fps)
    if room > 0:
        return ""
    return (
        f"frames {first} to {stop - 1} last {float(times[stop]) - begin:g} s, too short for {clip_len} frames "
        f"at {fps:g} fps (more than {(clip_len - 1) / fps:g} s)"
    )


def _room(times: np.ndarray, first: int, stop: int, clip_len: int, fps: float) -> tuple[float, float]:
    """The first frame's display time, and how far after it a clip may start and end before frame ``stop``."""
    begin = float(times[first])
    return begin, float(times[stop]) - begin - (clip_len - 1) / fps
