"""One clip being read: the frames it wants (any order, repeats allowed), each converted to RGB as it arrives."""

from __future__ import annotations

import os
from collections.abc import Sequence

import numpy as np
from av.container import InputContainer
from av.video.frame import VideoFrame
from av.video.stream import VideoStream

from .._base.errors import VideoDecodeError
from .._base.facts import VideoIndex, sorted_unique
from .frames import SeekMismatch, decode, frames_from, open_video, packets
from .pixels import FrameSize, Orientation, RGBFrames
from .streams import StreamChoice

__all__ = ["Clip", "fill_seeking", "read_in_order", "read_seeking"]


class Clip:
    """The frames a clip keeps, converted to RGB (scaled, turned) as they arrive, with one scaler per clip.

    Args:
        frames: the frame numbers returned, in order; any order, repeats allowed
            (each is decoded and converted once).
        size: ``(height, width)`` of the frames, None for their own size, or a function of it (see ``RGBFrames``).
        rotate: turn frames as the display matrix says.
        turn: the container's display matrix's turn, for frames decoded without it (see ``RGBFrames``).
    """

    def __init__(
        self,
        frames: Sequence[int] | np.ndarray,
        size: FrameSize,
        rotate: bool = True,
        turn: Orientation | None = None,
    ) -> None:
        order = np.asarray(frames, dtype=np.int64)
        self._expand: np.ndarray | None = None  # rising without repeats: the frames are the clip, in order
        unique = order
        if not bool((np.diff(order) > 0).all()):
            unique, self._expand = sorted_unique(order)
        self.wanted = order
        self.start, self.last = int(unique[0]), int(unique[-1])
        self._slots = {f: j for j, f in enumerate(unique.tolist())}
        self._unique = np.empty((unique.size, 0, 0, 3), dtype=np.uint8)  # sized by the first frame
        self.kept = 0
        self.offered = False  # whether a scan offered it frames (see ``offer``)
        # The outcome of the seeking read made in the container the index was made from
        # (see ``read_opened``): what went wrong ("" for nothing), an error, or None for no such read.
        self.early: str | VideoDecodeError | None = None
        self._rgb = RGBFrames(size, rotate, turn)

    @classmethod
    def strided(
        cls,
        start: int,
        clip_len: int,
        stride: int,
        size: FrameSize,
        rotate: bool = True,
        turn: Orientation | None = None,
    ) -> Clip:
        """The clip of frames ``start, start + stride, ...``: ``clip_len`` of them."""
        return cls(start + stride * np.arange(clip_len, dtype=np.int64), size, rotate, turn)

    @property
    def frames(self) -> np.ndarray:
        """The clip: ``(len(wanted), height, width, 3)``, in the order asked for."""
        return self._unique if self._expand is None else self._unique[self._expand]

    @property
    def full(self) -> bool:
        return self.kept == len(self._unique)

    def wants(self, i: int) -> bool:
        return i in self._slots

    def described(self) -> str:
        """The frames asked for, for a message: ``"frames 4 to 19 (stride 3)"``."""
        steps = np.diff(self.wanted)
        if steps.size and bool((steps == steps[0]).all()) and steps[0] > 0:
            return f"frames {self.start} to {self.last} (stride {int(steps[0])})"
        return f"frames {self.start} to {self.last} ({len(self._slots)} of them)"

    def offer(self, i: int, frame: VideoFrame) -> None:
        """Frame ``i`` counted from the first, from a scan that decodes every frame: kept if wanted."""
        self.offered = True
        if self.wants(i):
            self.keep(i, frame)

    def read_opened(self, container: InputContainer, stream: VideoStream, index: VideoIndex) -> None:
        """Read the clip in the container whose packets just made ``index`` (saves opening the file again)."""
        if index.seekable and self.last < index.frames:
            try:
                self.early = fill_seeking(container, stream, index, self, seek_first=True)
            except VideoDecodeError as exc:
                self.early = exc

    def keep(self, i: int, frame: VideoFrame) -> None:
        """Convert frame ``i`` (one the clip wants, each once) into its place."""
        if self.kept == 0:
            height, width = self._rgb.shape(frame)
            self._unique = np.empty((len(self._unique), height, width, 3), dtype=np.uint8)
        self._rgb.convert(frame, self._unique[self._slots[i]])
        self.kept += 1


def read_seeking(path: str | os.PathLike[str], index: VideoIndex, clip: Clip, stream: StreamChoice = None) -> str:
    """Fill ``clip`` from the keyframe before its start; return "" or what went wrong (then ``clip`` is partial)."""
    with open_video(path, stream) as (container, video):
        return fill_seeking(container, video, index, clip)


def fill_seeking(
    container: InputContainer, stream: VideoStream, index: VideoIndex, clip: Clip, seek_first: bool = False
) -> str:
    """``read_seeking`` in an open container; ``seek_first``: seek even to frame 0 (the container has been read)."""
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


def read_in_order(path: str | os.PathLike[str], clip: Clip, stream: StreamChoice = None) -> int:
    """Fill ``clip`` decoding every frame from the first; return how many frames were decoded.

    A packet that fails to decode is passed over, as when the index was made.
    """
    decoded = 0
    with open_video(path, stream) as (container, video):
        for packet in packets(container, video):
            frames = None if packet is None else decode(packet)
            for frame in frames or ():
                if clip.wants(decoded):
                    clip.keep(decoded, frame)
                    if clip.full:
                        return decoded + 1
                decoded += 1
    return decoded
