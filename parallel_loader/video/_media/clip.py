"""One clip being read: the frames it wants, each converted to RGB as it arrives, by seeking or in order."""

from __future__ import annotations

import os

import numpy as np
from av.container import InputContainer
from av.video.frame import VideoFrame
from av.video.stream import VideoStream

from .._base.errors import VideoDecodeError
from .._base.facts import VideoIndex
from .frames import SeekMismatch, decode, frames_from, open_video, packets
from .pixels import Orientation, RGBFrames

__all__ = ["Clip", "fill_seeking", "read_in_order", "read_seeking"]


class Clip:
    """The frames a clip keeps, converted to RGB (scaled, turned) as they arrive, with one scaler per clip."""

    def __init__(
        self,
        start: int,
        clip_len: int,
        stride: int,
        size: tuple[int, int] | None,
        rotate: bool = True,
        turn: Orientation | None = None,
    ) -> None:
        # ``turn``: the container's display matrix's, for frames decoded without it (see ``RGBFrames``).
        self.start, self.stride = start, stride
        self.last = start + (clip_len - 1) * stride
        self.frames = np.empty((clip_len, 0, 0, 3), dtype=np.uint8)  # sized by the first frame
        self.kept = 0
        self.offered = False  # whether a scan offered it frames (see ``offer``)
        # The outcome of the seeking read made in the container the index was made from
        # (see ``read_opened``): what went wrong ("" for nothing), an error, or None for no such read.
        self.early: str | VideoDecodeError | None = None
        self._rgb = RGBFrames(size, rotate, turn)

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
                self.early = fill_seeking(container, stream, index, self, seek_first=True)
            except VideoDecodeError as exc:
                self.early = exc

    def keep(self, i: int, frame: VideoFrame) -> None:
        """Convert frame ``i`` (one the clip wants, each once) into its place."""
        if self.kept == 0:
            height, width = self._rgb.shape(frame)
            self.frames = np.empty((len(self.frames), height, width, 3), dtype=np.uint8)
        self._rgb.convert(frame, self.frames[(i - self.start) // self.stride])
        self.kept += 1


def read_seeking(path: str | os.PathLike[str], index: VideoIndex, clip: Clip) -> str:
    """Fill ``clip`` from the keyframe before its start; return "" or what went wrong (then ``clip`` is partial)."""
    with open_video(path) as (container, stream):
        return fill_seeking(container, stream, index, clip)


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


def read_in_order(path: str | os.PathLike[str], clip: Clip) -> int:
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
