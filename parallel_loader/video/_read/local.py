"""Reading a clip of a local file (or of bytes in memory), exactly, and its header.

``read_local`` seeks to the keyframe at or before the clip's start, found in the
file's ``VideoIndex``, and decodes forward. Where the cache holds the file's
packet table, the clip's packets are read in one read and decoded without
opening the file through FFmpeg (``spans``). Files whose index says their seeks
are not exact are decoded from the first frame. A seek that goes wrong during a
read is caught, and the clip is decoded from the first frame. ``probe_local``
reads the header through OpenCV. See :doc:`/video/decoding`.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
from collections.abc import Iterator, Sequence

import cv2
import numpy as np

from .._base.errors import VideoDecodeError
from .._base.facts import PACKETS
from .._base.info import VideoInfo
from .._base.keys import Fetched
from .._bytes.source import open_bytes, opencv_source
from .._indexes.cache import IndexCache, default_index_cache
from .._indexes.track_packets import read_at
from .._media.clip import Clip, read_in_order, read_seeking
from .._media.frames import open_video
from .._media.pixels import FrameSize
from .._media.streams import StreamChoice, stream_info
from .spans import decode_span

__all__ = ["header_frames", "probe_local", "read_local"]

log = logging.getLogger(__name__)


def probe_local(path: str | os.PathLike[str], *, rotate: bool = True, stream: StreamChoice = None) -> VideoInfo:
    """``probe`` for a local file or a video in memory: its header, without decoding.

    OpenCV reads the header of a file with one video stream. With several, it
    reads the first one's, and counts frames by the longest stream's duration:
    then PyAV reads the chosen stream's header.
    """
    with open_video(path, stream) as (container, video):
        if len(container.streams.video) > 1:
            return stream_info(container, video, rotate)
    with _capture(path) as capture:
        width = int(capture.get(cv2.CAP_PROP_FRAME_WIDTH))
        height = int(capture.get(cv2.CAP_PROP_FRAME_HEIGHT))
        # OpenCV reports the size as displayed when it turns frames itself (CAP_PROP_ORIENTATION_AUTO).
        quarter_turn = int(capture.get(cv2.CAP_PROP_ORIENTATION_META)) % 180 == 90
        if quarter_turn and bool(capture.get(cv2.CAP_PROP_ORIENTATION_AUTO)) != rotate:
            width, height = height, width
        return VideoInfo(
            frames=max(0, int(capture.get(cv2.CAP_PROP_FRAME_COUNT))),
            fps=float(capture.get(cv2.CAP_PROP_FPS)),
            width=width,
            height=height,
        )


def header_frames(path: str | os.PathLike[str], stream: StreamChoice = None) -> int:
    """The frame count a local file's header claims for the stream (cheap, and can be wrong)."""
    return probe_local(path, rotate=False, stream=stream).frames


def read_local(
    path: str | os.PathLike[str],
    frames: Sequence[int] | np.ndarray,
    size: FrameSize = None,
    *,
    seek: bool = True,
    rotate: bool = True,
    index_cache: IndexCache | None = None,
    stream: StreamChoice = None,
) -> np.ndarray:
    """The ``frames`` of a local file or a video in memory (``Fetched``), in that order; arguments already checked."""
    clip = Clip(frames, size, rotate)
    if seek:
        cache = default_index_cache() if index_cache is None else index_cache
        index, table = cache.get_with_table(path, on_frame=clip.offer, on_index=clip.read_opened, stream=stream)
        unread = not clip.offered and clip.early is None  # not read while indexing
        if unread and table is not None and index.seekable and clip.last < index.frames:
            if table.orientation is not None:  # bare packets' frames lack the display matrix
                clip = Clip(frames, size, rotate, table.orientation)
            try:
                problem = decode_span(table, index, clip, functools.partial(_read_bytes, path))
            except OSError as exc:  # read through FFmpeg below, which meets it as every read does
                problem = f"the file cannot be read ({exc})"
            if not problem:
                return clip.frames
            log.info("video %s: %s in a read from its packet table; reading it through FFmpeg", _shown(path), problem)
            cache.forget_table(path, stream)  # once: later reads go through FFmpeg from the start
            clip = Clip(frames, size, rotate)
        if not clip.offered and index.seekable and clip.last < index.frames:
            try:
                if isinstance(clip.early, VideoDecodeError):
                    raise clip.early
                problem = clip.early if clip.early is not None else read_seeking(path, index, clip, stream)
            except VideoDecodeError:
                if index.made_by != PACKETS:
                    raise
                problem = "a packet does not decode after a seek"
            if not problem:
                return clip.frames
            clip = Clip(frames, size, rotate)
            if index.made_by == PACKETS:
                # The packets misled (or said nothing of whether they decode): decoding every
                # frame once settles what the file holds, and gives the clip on the way.
                log.info("video %s: %s; indexing it by decoding", path, problem)
                index = cache.rescan(path, on_frame=clip.offer, stream=stream)
            else:
                cache.distrust(path, problem, stream)
        if clip.offered:  # the index was made by decoding every frame, and the clip taken on the way
            if not clip.full:
                _raise_short(path, clip, index.frames, index.intact, stream)
            return clip.frames
        if clip.last >= index.frames:
            _raise_short(path, clip, index.frames, index.intact, stream)
    decoded = read_in_order(path, clip, stream)
    if not clip.full:
        _raise_short(path, clip, decoded, stream=stream)
    return clip.frames


def _read_bytes(path: str | os.PathLike[str] | Fetched, begin: int, end: int) -> bytes:
    """Bytes ``begin`` to ``end - 1`` of a file (or a ``Fetched``'s), all of them."""
    with open_bytes(path) as file:
        data = read_at(file, begin, end - begin)
    if len(data) != end - begin:
        raise OSError(f"the file ends before byte {end - 1}, which its packet table lists")
    return data


def _shown(path: str | os.PathLike[str] | Fetched) -> str | os.PathLike[str]:
    return path.key.name if isinstance(path, Fetched) else path


@contextlib.contextmanager
def _capture(path: str | os.PathLike[str]) -> Iterator[cv2.VideoCapture]:
    """An OpenCV capture (for its header) with one FFmpeg decoder thread, released on leaving."""
    source = opencv_source(path)  # a file object must outlive the capture: OpenCV holds no reference to it
    capture = cv2.VideoCapture(source, cv2.CAP_FFMPEG, [cv2.CAP_PROP_N_THREADS, 1])
    try:
        if not capture.isOpened():
            raise VideoDecodeError(path, "cannot be opened as a video (not a video, corrupt, or an unsupported format)")
        yield capture
    finally:
        capture.release()
        del source


def _raise_short(
    path: str | os.PathLike[str], clip: Clip, decoded: int, intact: bool = False, stream: StreamChoice = None
) -> None:
    """Raise the error for a clip past the last frame; ``intact``: the file's index says it was read whole."""
    try:
        header = probe_local(path, rotate=False, stream=stream).frames
    except (VideoDecodeError, OSError):
        header = 0
    if header <= decoded:
        verdict = "so the file is too short for this clip"
    elif intact:  # nothing is missing: the header counts timestamp gaps as frames, or is wrong
        verdict = "more than decode from the whole file, so the file is too short for this clip"
    else:
        verdict = "so the file is truncated or corrupt"
    raise VideoDecodeError(
        path,
        f"ends after {decoded} decoded frames, but the clip needs {clip.described()}; "
        f"the header claims {header} frames, {verdict}",
    )
