"""Reading one sample of a ``VideoDataset``: its frames, its header, and its clips into a batch.

A ``Video`` is one sample as a read needs it. A ``SampleReader`` holds what a
read needs to know: the clip's shape, the sampling and the output type. It
learns a sample's frames from its file's index and header at the first read.
It fits each frame to the output as ``resize`` says, and lengthens short clips
as ``short_clips`` says. ``SampleView`` is the dataset's ``samples``.
See :doc:`/video/datasets`.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from .._base.errors import VideoDecodeError
from .._base.facts import sorted_unique
from .._base.info import VideoInfo
from .._indexes.cache import IndexCache
from .._read.clips import probe, read_frames
from .._samples.augment import Augment, Plan, Resize, fitted
from .._samples.sample_list import SampleList
from .._samples.sampling import Sampling, crops, frames_needed, temporal_views
from .short_clips import BLACK, Lengthened, ShortClips, lengthen
from .timing import segment_frames, short_time_view, time_views, too_short

__all__ = ["EXACT_HINT", "SampleReader", "SampleView", "Video", "frame_range", "listed"]

# Headers read (a segment's frame rate, a damaged file's claimed count) kept per dataset, most recent last.
_HEADERS_KEPT = 4096

EXACT_HINT = "; exact_counts=True finds such files at construction (it counts every file's frames by decoding it)"


@dataclass(frozen=True)
class Video:
    """One sample, as a read needs it: its file, label, segment times (``None`` for an end) and where it was listed."""

    path: str
    label: int | tuple[int, ...]
    start: float | None
    end: float | None
    origin: str

    @classmethod
    def at(cls, samples: SampleList, i: int) -> Video:
        """Return sample ``i`` of ``samples``."""
        return cls(samples.path(i), samples.label(i), *samples.segment(i), samples.origin(i))

    @property
    def whole(self) -> bool:
        """Whether the sample is its whole file, not a segment of it."""
        return self.start is None and self.end is None

    @property
    def segment(self) -> str:
        """Its times, ``"[start, end) s"``, or "" for a whole file."""
        return "" if self.whole else _times(self.start, self.end)

    @property
    def key(self) -> str:
        """What the sample is listed under in ``skipped`` when it alone is bad: its file, or its segment of it."""
        return f"{self.path} {self.segment}" if self.segment else self.path


class SampleReader:
    """Reads the clips of one sample into a batch, and says why a sample gives none.

    Args:
        clip_len: frames per clip.
        stride: the step between a clip's frames (``sampling="clip"``).
        sampling: ``"clip"`` or ``"segments"``.
        size: ``(height, width)`` of the output frames.
        decode_size: ``(height, width)`` of the box a frame is fitted to by ``resize``, before the crop.
        dtype: ``"float32"`` (values in [0, 1]) or ``"uint8"``.
        seek: passed to ``read_clip``.
        exact_counts: trust the frames that decode over a damaged file's header.
        num_clips: clips per sample.
        num_crops: crops per clip.
        views: views per sample, or ``None`` for a batch without a views axis.
        train: draw the clips and crops at random; otherwise take the centre ones.
        augment: the spatial augmentation; ``None`` crops ``decode_size`` frames at random, and flips.
        stream: the stream read, by its number; None for FFmpeg's best video stream.
        fps: sample each clip at this many frames a second, by timestamps (see ``timing``); None: by frames.
        resize: how a frame fills ``decode_size``: ``"short_side"``, ``"stretch"`` or ``"pad"`` (``augment.fitted``).
        short_clips: how a sample too short for a clip is read (see ``short_clips``).

    Attributes:
        lengthened: the clips lengthened (``short_clips``), counted.
    """

    def __init__(
        self,
        *,
        clip_len: int,
        stride: int,
        sampling: Sampling,
        size: tuple[int, int],
        decode_size: tuple[int, int],
        dtype: str,
        seek: bool,
        exact_counts: bool,
        num_clips: int,
        num_crops: int,
        views: int | None,
        train: bool,
        augment: Augment | None = None,
        stream: int | None = None,
        fps: float | None = None,
        resize: Resize = "stretch",
        short_clips: ShortClips = "error",
    ) -> None:
        self.clip_len = clip_len
        self.stride = stride
        self.sampling = sampling
        # The fewest frames a sample needs; at ``fps``, a clip needs a time instead (see ``lacking``).
        self.span = 1 if fps is not None else frames_needed(sampling, clip_len, stride)
        self.stream, self.fps = stream, fps
        self.size = size
        self.decode_size = decode_size
        self.dtype = dtype
        self.seek = seek
        self.exact_counts = exact_counts
        self.num_clips = num_clips
        self.num_crops = num_crops
        self.views = views
        self.train = train
        self.augment = augment
        self.resize = resize
        self.short_clips = short_clips
        self.lengthened = Lengthened(short_clips)
        self._headers: dict[str, VideoInfo] = {}  # headers read, see header

    def __getstate__(self) -> dict[str, Any]:
        """Pickle the settings; the headers read are read again where the reader is unpickled."""
        return {**self.__dict__, "_headers": {}}

    def header(self, path: str) -> VideoInfo:
        """Return what ``path``'s header says (read once per dataset, for the last few thousand files asked)."""
        info = self._headers.get(path)
        if info is None:
            info = probe(path, stream=self.stream)
            if len(self._headers) >= _HEADERS_KEPT:
                self._headers.clear()  # a dict written by several threads: only whole-dict operations
            self._headers[path] = info
        return info

    def header_frames(self, video: Video) -> int:
        """Return the frames ``video``'s header claims for it, or 0 when the header cannot be read."""
        _, (first, stop) = self._claimed(video, (0, 0))
        return max(0, stop - first)

    def _claimed(self, video: Video, default: tuple[int, int]) -> tuple[VideoInfo | None, tuple[int, int]]:
        """Return ``video``'s header and the frames it claims for it; ``(None, default)`` if it cannot be read."""
        try:
            header = self.header(video.path)
        except (VideoDecodeError, OSError):
            return None, default
        return header, frame_range(video.start, video.end, header.frames, header.fps or 1.0)

    def range(self, video: Video, cache: IndexCache) -> tuple[int, int]:
        """Return the frames ``first`` to ``stop - 1`` that ``video``'s clips are drawn from.

        An intact file's frames are those its index says decode. A damaged file
        keeps its header's count, unless ``exact_counts``. A segment's times
        become frames by the index's timestamps (``timing.segment_frames``).
        Where those cannot place frames in time, or the count is the header's, at the header's frame rate.

        Raises:
            VideoDecodeError: the file does not open, or a segment's file gives no frame rate.
            OSError: the file cannot be read.
        """
        index = cache.get(video.path, stream=self.stream)
        frames = index.frames if index.intact or self.exact_counts else self.header(video.path).frames
        if video.whole:
            return 0, frames
        if index.timed and frames == index.frames:
            return segment_frames(index, video.start, video.end, video.path)
        fps = self.header(video.path).fps
        if not fps > 0:
            raise VideoDecodeError(video.path, "its header gives no frame rate, so a segment's times name no frames")
        return frame_range(video.start, video.end, frames, fps)

    def plan(self, video: Video, rng: np.random.Generator | None) -> Plan:
        """Return the size to decode ``video``'s frames at and the windows to cut, drawn from ``rng`` in training.

        Raises:
            VideoDecodeError: ``augment`` or ``resize`` needs the frame size and the header gives none.
            OSError: the header cannot be read.
        """
        if self.augment is None and self.resize == "stretch":  # no header needed
            return Plan(self.decode_size, crops(self.decode_size, self.size, rng, num_crops=self.num_crops))
        header = self.header(video.path)
        if not (header.height > 0 and header.width > 0):
            raise VideoDecodeError(
                video.path, f"its header gives no frame size, which resize={self.resize!r} and the augmentation need"
            )
        frame = (header.height, header.width)
        decode_size, letterbox = fitted(frame, self.decode_size, self.resize)
        box = self.decode_size if letterbox else None
        if self.augment is None:
            return Plan(decode_size, crops(box or decode_size, self.size, rng, num_crops=self.num_crops), box)
        return self.augment.plan(frame, self.size, decode_size, rng, self.num_crops, box)

    def lacking(self, video: Video, first: int, stop: int, cache: IndexCache) -> str:
        """Return why ``video``'s frames ``first`` to ``stop - 1`` give no clip, or "" when they give one.

        Raises:
            VideoDecodeError: with ``fps``, the file's timestamps cannot place frames in time.
        """
        lengthens = self.short_clips != "error"
        if self.fps is None or stop <= first:
            if stop - first >= self.span or (lengthens and stop > first):
                return ""
            return self.too_few(video, first, stop)
        index = cache.get(video.path, stream=self.stream)
        why = too_short(index, first, stop, self.clip_len, self.fps, video.path)
        return "" if lengthens and min(stop, index.frames) > first else why

    def needs(self) -> str:
        """Return what a sample needs, for a message: ``"a clip of 16 frames at stride 2 needs (31)"``."""
        if self.fps is not None:
            return f"a clip of {self.clip_len} frames at {self.fps:g} fps needs ({self.span})"
        if self.sampling == "clip":
            return f"a clip of {self.clip_len} frames at stride {self.stride} needs ({self.span})"
        return f"{self.clip_len} segments need ({self.span})"

    def too_few(self, video: Video, first: int, stop: int) -> str:
        """Return why a sample has too few frames for a clip: the frames that decode, or those its header claims."""
        frames = max(0, stop - first)
        header, claimed = self._claimed(video, (first, stop))
        what = f"segment {video.segment}" if video.segment else "the file"
        if claimed[1] - claimed[0] > frames:
            return (
                f"has {frames} frames that decode in {what} (its header claims more: it counts timestamp gaps "
                f"as frames, or is wrong), fewer than {self.needs()}"
            )
        if video.whole:
            return f"has {frames} frames, fewer than {self.needs()}"
        of = "" if header is None else f" (of {header.frames} at {header.fps:g} fps)"
        return f"segment {video.segment} has {frames} frames{of}, fewer than {self.needs()}"

    def decode_into(
        self,
        out: np.ndarray,
        rng: np.random.Generator,
        video: Video,
        first: int,
        stop: int,
        cache: IndexCache,
    ) -> None:
        """Decode the views of one sample's frames ``first`` to ``stop - 1`` into ``out``.

        Training takes one view, drawn from ``rng``; evaluation takes ``views``
        centred ones, without ``rng``.

        Raises:
            VideoDecodeError: a frame does not decode.
            OSError: the file cannot be read.
        """
        draw = rng if self.train else None
        views, short = self._views(video, first, stop, draw, cache)
        if short:
            self.lengthened.add(video.key, video.path, short)
        # Fitted by resize alone, the decode size comes from the first frame decoded: no header is read.
        fit = self.augment is None and self.resize != "stretch"
        if fit:
            size: Any = functools.partial(_fitted_size, self.decode_size, self.resize)
        else:
            size, windows, box = self.plan(video, draw)
        options: dict[str, Any] = dict(size=size, seek=self.seek, index_cache=cache, stream=self.stream)
        read = functools.partial(read_frames, video.path, **options)
        try:
            if self.fps is not None or short:  # frames played at evenly spaced times, or lengthened
                clips = [_read_listed(read, v) for v in views]
            elif self.sampling == "clip":
                clips = [read(v) for v in views]
            else:  # each frame read once (a read each), however many views share it
                wanted = sorted_unique(np.concatenate(views))[0]
                frames = np.concatenate([read(wanted[k : k + 1]) for k in range(len(wanted))])
                clips = [frames[np.searchsorted(wanted, v)] for v in views]
        except VideoDecodeError as exc:
            if self.exact_counts or "ends after" not in exc.reason:
                raise
            raise VideoDecodeError(video.path, exc.reason + EXACT_HINT) from exc
        if fit:  # the windows of the frames as decoded, drawn after the views as plan draws them
            box = self.decode_size if self.resize == "pad" else None
            windows = crops(box or clips[0].shape[1:3], self.size, draw, num_crops=self.num_crops)
        if box is not None:
            clips = [_letterboxed(clip, box) for clip in clips]
        targets = iter(out if self.views is not None else [out])
        height, width = self.size
        for clip in clips:
            for top, left, flip in windows:
                view = clip[:, top : top + height, left : left + width]
                if flip:
                    view = view[:, :, ::-1]
                target = next(targets)
                if self.dtype == "uint8":
                    target[...] = view
                else:
                    np.multiply(view, np.float32(1 / 255), out=target)

    def _views(
        self, video: Video, first: int, stop: int, draw: np.random.Generator | None, cache: IndexCache
    ) -> tuple[list[np.ndarray], str]:
        """Return the frames of each view (``BLACK`` for a black frame), and why the sample is short ("" if not).

        Raises:
            VideoDecodeError: with ``fps``, the frames last too short a time and
                ``short_clips`` is ``"error"``, or the index cannot place frames in time.
        """
        count = 1 if draw is not None else self.num_clips
        policy = self.short_clips
        if self.fps is not None:
            index = cache.get(video.path, stream=self.stream)
            short = "" if policy == "error" else too_short(index, first, stop, self.clip_len, self.fps, video.path)
            if short:
                return [short_time_view(index, first, stop, self.clip_len, self.fps, policy, video.path)] * count, short
            return time_views(index, first, stop, self.clip_len, self.fps, draw, self.num_clips, video.path), ""
        frames = stop - first
        if frames >= self.span or policy == "error":
            views = temporal_views(self.sampling, first, stop, self.clip_len, self.stride, draw, num_views=count)
            return views, ""
        step = self.stride if self.sampling == "clip" else 1
        offsets, kept = lengthen(step * np.arange(self.clip_len, dtype=np.int64), frames, policy)
        return [np.where(kept, first + offsets, BLACK)] * count, f"has {frames} frames, fewer than {self.needs()}"


def _read_listed(read: Callable[[np.ndarray], np.ndarray], frames: np.ndarray) -> np.ndarray:
    """``read(frames)``: the frames in that order (repeats allowed), black where a frame is ``BLACK``."""
    kept = frames != BLACK
    if kept.all():
        return read(frames)
    got = read(frames[kept])  # a short clip keeps its first frame: never all black
    clip = np.zeros((len(frames), *got.shape[1:]), dtype=np.uint8)
    clip[kept] = got
    return clip


def _fitted_size(box: tuple[int, int], resize: Resize, height: int, width: int) -> tuple[int, int]:
    """The size to decode a frame of ``(height, width)`` at, to fill ``box`` as ``resize`` says."""
    return fitted((height, width), box, resize)[0]


def _letterboxed(clip: np.ndarray, box: tuple[int, int]) -> np.ndarray:
    """``clip``'s frames centred in a black box of ``box`` (height, width)."""
    boxed = np.zeros((len(clip), *box, 3), dtype=clip.dtype)
    top, left = (box[0] - clip.shape[1]) // 2, (box[1] - clip.shape[2]) // 2
    boxed[:, top : top + clip.shape[1], left : left + clip.shape[2]] = clip
    return boxed


class SampleView(Sequence[tuple[str, int, int]]):
    """``VideoDataset.samples``: ``(path, label, frames by the header)`` per sample, read on access.

    Args:
        reader: reads each sample's header.
        samples: the dataset's samples.
        owner: the dataset, named by ``repr``.
    """

    def __init__(self, reader: SampleReader, samples: SampleList, owner: object) -> None:
        self._reader = reader
        self._samples = samples
        self._owner = owner

    def __len__(self) -> int:
        return len(self._samples)

    def __getitem__(self, i):  # type: ignore[override]
        if isinstance(i, slice):
            return [self[k] for k in range(*i.indices(len(self)))]
        video = Video.at(self._samples, range(len(self))[i])
        return video.path, video.label, self._reader.header_frames(video)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Sequence) and list(self) == list(other)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"<samples of {self._owner!r}>"


def listed(origin: str) -> str:
    """Return `` (listed at <origin>)`` for a message, or nothing for a sample found by scanning."""
    return f" (listed at {origin})" if origin else ""


def frame_range(start: float | None, end: float | None, frames: int, fps: float) -> tuple[int, int]:
    """Return the frames ``first`` to ``stop - 1`` of a sample: all, or those whose times fall in its segment."""
    if start is None and end is None:
        return 0, frames
    # Frame i shows at i / fps: the segment holds the frames with start <= i / fps < end.
    # The slack keeps 0.1 s at 30 fps (3.0000000000000004 frames) at frame 3.
    first = 0 if start is None else math.ceil(start * fps - 1e-6)
    stop = frames if end is None else min(frames, math.ceil(end * fps - 1e-6))
    return min(first, frames), stop


def _times(start: float | None, end: float | None) -> str:
    end_text = "end" if end is None else f"{end:g}"
    return f"[{0 if start is None else start:g}, {end_text}) s"
