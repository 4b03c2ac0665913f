"""Decoding exact frames from video files: ``read_clip``, ``frame_count`` and ``probe``.

``read_clip`` returns exactly the frames asked for, the same pixels as decoding
every frame from the first, and decodes as few frames as the file allows: it
seeks to the keyframe at or before the clip's start and decodes forward,
skipping the frames no other frame refers to (B-frames and the like) unless
they are in the clip, and scaling each kept frame while converting it to RGB.
Which frame is which comes from the file's ``VideoIndex`` (see ``index``), made
once from the container's packets where they tell (a few milliseconds), else by
decoding the whole file once (and then the clip comes from that pass), never
from the container's frame count or frame rate. Files whose index says their
seeks are not exact are decoded from the first frame.

Clips are decoded with PyAV (FFmpeg): OpenCV's capture can neither seek to a
given keyframe (it backs off 16 frames and counts frames from timestamps) nor
skip frames nobody refers to, nor scale while converting. ``probe`` and the cheap
header count ``frame_count(exact=False)`` read the header through OpenCV.

Nothing here starts or knows of threads; every function may be called from
several threads at once (the index cache has its own lock).

Broken input never passes silently: a file that does not open, a damaged one
and a short one raise ``VideoDecodeError``, which names the file; a clip is never
returned short or padded.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass

import cv2
import numpy as np
from av.container import InputContainer
from av.video.frame import VideoFrame
from av.video.stream import VideoStream

from ..._core.checks import check_int
from .._base.errors import VideoDecodeError, require_file
from .._base.facts import PACKETS, VideoIndex
from .._bytes.source import is_url
from .._indexes.cache import IndexCache, default_index_cache
from .._media.frames import SeekMismatch, decode, frames_from, open_video, packets
from .._media.pixels import RGBFrames

__all__ = ["VideoDecodeError", "VideoInfo", "frame_count", "probe", "read_clip"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class VideoInfo:
    """What a video file's header says. ``frames`` may be wrong: see ``frame_count``."""

    frames: int
    fps: float
    width: int
    height: int


def probe(path: str | os.PathLike[str], *, rotate: bool = True) -> VideoInfo:
    """Read a video's header: frame count, frame rate and size, without decoding.

    ``width`` and ``height`` are those of the frames ``read_clip`` returns with
    the same ``rotate``: as displayed (swapped for a file shown at 90 or 270
    degrees) by default, as stored with ``rotate=False``.

    Raises:
        FileNotFoundError: there is no file at ``path``.
        VideoDecodeError: the file cannot be opened as a video.
    """
    if is_url(path):  # OpenCV reads no object store: the header through the byte source
        from .remote import probe_remote

        return probe_remote(str(path))
    capture = _open(path)
    try:
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
    finally:
        capture.release()


def frame_count(path: str | os.PathLike[str], exact: bool = True, *, index_cache: IndexCache | None = None) -> int:
    """Return the number of frames in a video.

    The header's count (``CAP_PROP_FRAME_COUNT``, from the container or from
    duration times frame rate) can be wrong: a truncated file keeps its full
    count, and some files claim several times the frames that decode. With
    ``exact=True`` (the default) the count is the file's index's: from its
    packets where they tell, else every frame decoded once, then kept in
    ``index_cache`` so that later calls and ``read_clip`` cost nothing more. It
    is the only count ``read_clip`` is sure to honour. ``exact=False`` returns
    the header's count, which is cheap.

    Args:
        path: the video file.
        exact: count decoded frames rather than read the header.
        index_cache: where indexes are kept; default: ``default_index_cache()``.

    Raises:
        FileNotFoundError: there is no file at ``path``.
        VideoDecodeError: the file cannot be opened as a video, or no frame decodes.
    """
    if exact or is_url(path):  # a URL's index comes from its header: as cheap as the header's count
        return (default_index_cache() if index_cache is None else index_cache).get(path).frames
    capture = _open(path)
    try:
        return max(0, int(capture.get(cv2.CAP_PROP_FRAME_COUNT)))
    finally:
        capture.release()


def read_clip(
    path: str | os.PathLike[str],
    start: int,
    clip_len: int,
    stride: int = 1,
    size: tuple[int, int] | None = None,
    *,
    seek: bool = True,
    rotate: bool = True,
    index_cache: IndexCache | None = None,
) -> np.ndarray:
    """Decode frames ``start, start + stride, ..., start + (clip_len - 1) * stride`` of a video.

    Frame ``i`` is the ``i``-th frame decoding from the first gives, whatever the
    container's timestamps, frame rate or header say. With ``seek=True`` (the
    default) the read starts at the keyframe at or before ``start``, found in
    the file's index (made by ``index_cache`` the first time a file is read:
    from its packets where they tell, else by decoding the whole file once, and
    then the clip is taken from that pass), and skips decoding the frames before
    and between the kept ones that no other frame refers to. Files whose index
    says seeks are not exact (timestamps missing or out of order, damaged
    packets, seeks that land elsewhere; each such file is named once in a
    warning) and ``seek=False`` decode every frame from the first instead:
    slower, never different. A seek that goes wrong during a read is caught (the
    decoded frames' timestamps do not follow the index, or the keyframe does not
    decode as one) and the clip is decoded from the first frame: a file indexed
    from its packets is indexed again by decoding every frame (the clip taken
    from that pass), which settles what it holds; a file indexed by decoding is
    marked as not seekable. A read or decode error after a seek is no such
    evidence when the file decoded whole when it was indexed: it raises
    ``VideoDecodeError`` and leaves the index as it was, so that a one-off
    failure (network storage) does not slow the file's later reads; a file
    indexed from its packets is indexed again by decoding.

    Each kept frame is scaled (area averaging) and converted to RGB in one pass,
    from any pixel format and size FFmpeg decodes, then turned as players and
    FFmpeg's command line show it: a file whose display matrix (or rotate tag)
    says 90, 180 or 270 degrees, or a mirror image, gives frames turned so
    (``probe`` reports their size); ``rotate=False`` keeps them as stored.

    Args:
        path: the video file, or its URL (``s3://``, ``gs://``, ``az://``, ``http(s)://``, ``file://``; see ``ranged``).
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

    Returns:
        A ``uint8`` array of shape ``(clip_len, height, width, 3)``, channels in RGB order.

    Raises:
        ValueError: an argument is out of range.
        FileNotFoundError: there is no file at ``path``.
        VideoDecodeError: the file is not a video, it ends (truncated, corrupt
            or just short) before the last frame asked for, or it cannot be read
            or decoded after the seek. A clip is never returned short or padded.
    """
    _check_clip_args(start, clip_len, stride, size)
    if is_url(path):  # an object store or HTTP: one ranged read per clip (see ``ranged``)
        from .remote import read_clip as read_remote

        cache = default_index_cache() if index_cache is None else index_cache
        return read_remote(str(path), start, clip_len, stride, size, seek, cache)
    clip = _Clip(start, clip_len, stride, size, rotate)
    if seek:
        cache = default_index_cache() if index_cache is None else index_cache
        index = cache.get(path, on_frame=clip.offer, on_index=clip.read_opened)
        if not clip.offered and index.seekable and clip.last < index.frames:
            try:
                if isinstance(clip.early, VideoDecodeError):
                    raise clip.early
                problem = clip.early if clip.early is not None else _read_seeking(path, index, clip)
            except VideoDecodeError:
                if index.made_by != PACKETS:
                    raise
                problem = "a packet does not decode after a seek"
            if not problem:
                return clip.frames
            clip = _Clip(start, clip_len, stride, size, rotate)
            if index.made_by == PACKETS:
                # The packets misled (or said nothing of whether they decode): decoding every
                # frame once settles what the file holds, and gives the clip on the way.
                log.info("video %s: %s; indexing it by decoding", path, problem)
                index = cache.rescan(path, on_frame=clip.offer)
            else:
                cache.distrust(path, problem)
        if clip.offered:  # the index was made by decoding every frame, and the clip taken on the way
            if not clip.full:
                _raise_short(path, start, clip_len, stride, index.frames, index.intact)
            return clip.frames
        if clip.last >= index.frames:
            _raise_short(path, start, clip_len, stride, index.frames, index.intact)
    decoded = _read_in_order(path, clip)
    if not clip.full:
        _raise_short(path, start, clip_len, stride, decoded)
    return clip.frames


class _Clip:
    """The frames a clip keeps, converted to RGB (scaled, turned) as they arrive, with one scaler per clip."""

    def __init__(
        self, start: int, clip_len: int, stride: int, size: tuple[int, int] | None, rotate: bool = True
    ) -> None:
        self.start, self.stride = start, stride
        self.last = start + (clip_len - 1) * stride
        self.frames = np.empty((clip_len, 0, 0, 3), dtype=np.uint8)  # sized by the first frame
        self.kept = 0
        self.offered = False  # whether a scan offered it frames (see ``offer``)
        # The outcome of the seeking read made in the container the index was made from
        # (see ``read_opened``): what went wrong ("" for nothing), an error, or None for no such read.
        self.early: str | VideoDecodeError | None = None
        self._rgb = RGBFrames(size, rotate)

    @property
    def full(self) -> bool:
        return self.kept == len(self.frames)

    def wants(self, i: int) -> bool:
        return self.start <= i <= self.last and (i - self.start) % self.stride == 0

    def offer(self, i: int, frame: VideoFrame) -> None:
        """Frame ``i`` counted from the first, from a scan that decodes every frame: kept if wanted."""
        self.offered = True
        if self.wants(i):
            self.keep(i, frame)

    def read_opened(self, container: InputContainer, stream: VideoStream, index: VideoIndex) -> None:
        """Read the clip in the container whose packets just made ``index`` (saves opening the file again)."""
        if index.seekable and self.last < index.frames:
            try:
                self.early = _fill_seeking(container, stream, index, self, seek_first=True)
            except VideoDecodeError as exc:
                self.early = exc

    def keep(self, i: int, frame: VideoFrame) -> None:
        """Convert frame ``i`` (one the clip wants, each once) into its place."""
        if self.kept == 0:
            height, width = self._rgb.shape(frame)
            self.frames = np.empty((len(self.frames), height, width, 3), dtype=np.uint8)
        self._rgb.convert(frame, self.frames[(i - self.start) // self.stride])
        self.kept += 1


def _read_seeking(path: str | os.PathLike[str], index: VideoIndex, clip: _Clip) -> str:
    """Fill ``clip`` from the keyframe before its start; return "" or what went wrong (then ``clip`` is partial)."""
    with open_video(path) as (container, stream):
        return _fill_seeking(container, stream, index, clip)


def _fill_seeking(
    container: InputContainer, stream: VideoStream, index: VideoIndex, clip: _Clip, seek_first: bool = False
) -> str:
    """``_read_seeking`` in an open container; ``seek_first``: seek even to frame 0 (the container has been read)."""
    key = index.keyframe_before(clip.start)
    try:
        for i, frame in frames_from(container, stream, index, key, keep=clip.wants, seek_first=seek_first):
            if clip.wants(i):
                clip.keep(i, frame)
                if clip.full:
                    return ""
    except SeekMismatch as exc:
        return str(exc)
    return f"after a seek to frame {key}, decoding stops before frame {clip.last}, which decodes from the first frame"


def _read_in_order(path: str | os.PathLike[str], clip: _Clip) -> int:
    """Fill ``clip`` decoding every frame from the first; return how many frames were decoded.

    A packet that fails to decode is passed over, as when the index was made.
    """
    decoded = 0
    with open_video(path) as (container, stream):
        for packet in packets(container, stream):
            frames = None if packet is None else decode(packet)
            for frame in frames or ():
                if clip.wants(decoded):
                    clip.keep(decoded, frame)
                    if clip.full:
                        return decoded + 1
                decoded += 1
    return decoded


def _open(path: str | os.PathLike[str]) -> cv2.VideoCapture:
    """Open an OpenCV capture (for its header) with one FFmpeg decoder thread."""
    require_file(path)
    capture = cv2.VideoCapture(os.fspath(path), cv2.CAP_FFMPEG, [cv2.CAP_PROP_N_THREADS, 1])
    if not capture.isOpened():
        capture.release()
        raise VideoDecodeError(path, "cannot be opened as a video (not a video, corrupt, or an unsupported format)")
    return capture


def _raise_short(
    path: str | os.PathLike[str], start: int, clip_len: int, stride: int, decoded: int, intact: bool = False
) -> None:
    """Raise the error for a clip past the last frame; ``intact``: the file's index says it was read whole."""
    last = start + (clip_len - 1) * stride
    try:
        header = probe(path).frames
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
        f"ends after {decoded} decoded frames, but the clip needs frames {start} to {last} "
        f"(stride {stride}); the header claims {header} frames, {verdict}",
    )


def _check_clip_args(start: object, clip_len: object, stride: object, size: object) -> None:
    if isinstance(start, bool) or not isinstance(start, int | np.integer) or start < 0:
        raise ValueError(f"start must be a non-negative int, got {start!r}")
    check_int("clip_len", clip_len, minimum=1)
    check_int("stride", stride, minimum=1)
    if isinstance(size, int | np.integer) and not isinstance(size, bool):
        raise TypeError(f"size must be a (height, width) pair, got the single number {size!r}: pass ({size}, {size})")
    if size is not None and (
        not isinstance(size, tuple | list)
        or len(size) != 2
        or not all(isinstance(s, int | np.integer) and not isinstance(s, bool) and s > 0 for s in size)
    ):
        raise ValueError(f"size must be (height, width) of positive ints, or None, got {size!r}")
