"""Decoding exact frames from video files with OpenCV.

``read_clip`` decodes frames ``start, start + stride, ...`` of one file. Frames
between the kept ones are grabbed (decoded, not converted), which on short,
keyframe-sparse clips costs less than seeking. ``probe`` reads a file's header
and ``frame_count`` counts its frames.

Nothing here starts or knows of threads; every function may be called from
several threads at once.

OpenCV never raises on broken input: an unreadable file just fails to open, and
a truncated one ends early like a short one. So every open is checked and every
short read is an error, ``VideoDecodeError``, whose message names the file.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import cv2
import numpy as np

from .._checks import check_int

__all__ = ["VideoDecodeError", "VideoInfo", "frame_count", "probe", "read_clip"]


class VideoDecodeError(Exception):
    """A video could not be decoded as asked: not a video, truncated or corrupt, or too short for the clip.

    Attributes:
        path: the file, as given.
    """

    def __init__(self, path: str | os.PathLike[str], reason: str) -> None:
        self.path = os.fspath(path)
        self.reason = reason
        super().__init__(f"{self.path}: {reason}")


@dataclass(frozen=True)
class VideoInfo:
    """What a video file's header says. ``frames`` may be wrong: see ``frame_count``."""

    frames: int
    fps: float
    width: int
    height: int


def probe(path: str | os.PathLike[str]) -> VideoInfo:
    """Read a video's header: frame count, frame rate and size, without decoding.

    Raises:
        FileNotFoundError: there is no file at ``path``.
        VideoDecodeError: the file cannot be opened as a video.
    """
    capture = _open(path)
    try:
        return VideoInfo(
            frames=max(0, int(capture.get(cv2.CAP_PROP_FRAME_COUNT))),
            fps=float(capture.get(cv2.CAP_PROP_FPS)),
            width=int(capture.get(cv2.CAP_PROP_FRAME_WIDTH)),
            height=int(capture.get(cv2.CAP_PROP_FRAME_HEIGHT)),
        )
    finally:
        capture.release()


def frame_count(path: str | os.PathLike[str], exact: bool = True) -> int:
    """Return the number of frames in a video.

    ``CAP_PROP_FRAME_COUNT`` comes from the container's header, or from duration
    times frame rate, and can be wrong: a truncated file keeps its full count, and
    some files claim several times the frames that decode. With ``exact=True``
    (the default) the frames are counted by grabbing every one, which costs a
    decode of the whole file (thousands of frames per second at 320x240) but is
    the only count ``read_clip`` is sure to honour. ``exact=False`` returns the
    header's count, which is cheap.

    Raises:
        FileNotFoundError: there is no file at ``path``.
        VideoDecodeError: the file cannot be opened as a video, or no frame decodes.
    """
    capture = _open(path)
    try:
        if not exact:
            return max(0, int(capture.get(cv2.CAP_PROP_FRAME_COUNT)))
        count = 0
        while capture.grab():
            count += 1
    finally:
        capture.release()
    if count == 0:
        raise VideoDecodeError(path, "no frame decodes (empty, corrupt, or not a video)")
    return count


def read_clip(
    path: str | os.PathLike[str],
    start: int,
    clip_len: int,
    stride: int = 1,
    size: tuple[int, int] | None = None,
    *,
    seek: bool = False,
) -> np.ndarray:
    """Decode frames ``start, start + stride, ..., start + (clip_len - 1) * stride`` of a video.

    By default the frames before ``start`` are grabbed one by one from the first:
    exact for every file, and cheap for short clips. ``seek=True`` jumps to
    ``start`` instead (FFmpeg seeks to the keyframe before it and decodes
    forward), which is faster for late starts in files with frequent keyframes
    (1.5x at frame 55 of the sample set's XviD files) but relies on the file's
    timestamps: files with timestamp gaps can land a frame off. Use it for
    files you know, after checking it against ``seek=False``.

    Args:
        path: the video file.
        start: the index of the first frame, counted from 0.
        clip_len: how many frames to return.
        stride: the step between returned frames; the frames between are grabbed
            but not converted.
        size: ``(height, width)`` to resize each frame to; ``None`` keeps the video's size.
        seek: jump to ``start`` rather than grab the frames before it (see above).

    Returns:
        A ``uint8`` array of shape ``(clip_len, height, width, 3)``, channels in RGB order.

    Raises:
        ValueError: an argument is out of range.
        FileNotFoundError: there is no file at ``path``.
        VideoDecodeError: the file is not a video, or it ends (truncated, corrupt
            or just short) before the last frame asked for, or with ``seek=True``
            the seek to ``start`` fails. A clip is never returned short or padded.
    """
    _check_clip_args(start, clip_len, stride, size)
    capture = _open(path)
    try:
        clip: np.ndarray | None = None
        position = 0  # the index of the frame the next grab() decodes
        if seek and start > 0:
            # A seek past the end (or in a file FFmpeg cannot seek in) fails or lands
            # elsewhere without an exception: check where the capture says it is.
            moved = capture.set(cv2.CAP_PROP_POS_FRAMES, start)
            landed = capture.get(cv2.CAP_PROP_POS_FRAMES)
            if not moved or landed != start:
                header = max(0, int(capture.get(cv2.CAP_PROP_FRAME_COUNT)))
                raise VideoDecodeError(
                    path,
                    f"the seek to frame {start} failed (the capture is at frame {landed:g}; "
                    f"the header claims {header} frames)",
                )
            position = start
        for k in range(clip_len):
            target = start + k * stride
            while position < target:
                if not capture.grab():
                    _raise_short(path, capture, start, clip_len, stride, position)
                position += 1
            ok, frame = capture.read()
            if not ok:
                _raise_short(path, capture, start, clip_len, stride, position)
            position += 1
            if size is not None and frame.shape[:2] != size:
                # INTER_AREA averages when shrinking, which avoids aliasing; resizing
                # before the colour conversion makes the conversion cheaper.
                frame = cv2.resize(frame, (size[1], size[0]), interpolation=cv2.INTER_AREA)
            if clip is None:
                clip = np.empty((clip_len, *frame.shape[:2], 3), dtype=np.uint8)
            cv2.cvtColor(frame, cv2.COLOR_BGR2RGB, dst=clip[k])
    finally:
        capture.release()
    return clip


def _open(path: str | os.PathLike[str]) -> cv2.VideoCapture:
    """Open a capture with one FFmpeg decoder thread; the loader's threads give the parallelism."""
    if not os.path.isfile(path):
        if os.path.exists(path):
            raise VideoDecodeError(path, "is not a file")
        raise FileNotFoundError(2, "no such video file", os.fspath(path))
    capture = cv2.VideoCapture(os.fspath(path), cv2.CAP_FFMPEG, [cv2.CAP_PROP_N_THREADS, 1])
    if not capture.isOpened():
        capture.release()
        raise VideoDecodeError(path, "cannot be opened as a video (not a video, corrupt, or an unsupported format)")
    return capture


def _raise_short(path, capture: cv2.VideoCapture, start: int, clip_len: int, stride: int, decoded: int) -> None:
    last = start + (clip_len - 1) * stride
    header = max(0, int(capture.get(cv2.CAP_PROP_FRAME_COUNT)))
    raise VideoDecodeError(
        path,
        f"ends after {decoded} decoded frames, but the clip needs frames {start} to {last} "
        f"(stride {stride}); the header claims {header} frames, so the file is "
        f"{'truncated or corrupt' if header > decoded else 'too short for this clip'}",
    )


def _check_clip_args(start: object, clip_len: object, stride: object, size: object) -> None:
    if isinstance(start, bool) or not isinstance(start, int | np.integer) or start < 0:
        raise ValueError(f"start must be a non-negative int, got {start!r}")
    check_int("clip_len", clip_len, minimum=1)
    check_int("stride", stride, minimum=1)
    if size is not None and (
        len(size) != 2 or not all(isinstance(s, int | np.integer) and not isinstance(s, bool) and s > 0 for s in size)
    ):
        raise ValueError(f"size must be (height, width) of positive ints, or None, got {size!r}")
