"""Decoded frames to RGB arrays: any pixel format and size FFmpeg decodes, turned as players show them.

A decoder hands out frames in the stream's own pixel format: 8 or 10 bits,
4:2:0, 4:2:2 or 4:4:4 chroma, gray, a palette. They may have any width and
height, odd ones included (Something-Something v2 ships VP9 at 427x240).

``RGBFrames`` converts each to a ``uint8`` RGB array in one pass of FFmpeg's
scaler. It scales with area averaging when a size is asked for. Its colours are
those of FFmpeg's command line: bit-exact on 8-bit formats, and through FFmpeg's
``scale`` filter on deeper ones (see ``scalers``). Then it turns
the array as the file's display matrix says: 90, 180 or 270 degrees, and mirror
images. That is the MP4/MOV ``tkhd`` matrix, or a ``rotate`` tag, which FFmpeg
reads into the same matrix. The turn is the one FFmpeg's command line makes by
default. ``frame_checksum`` fingerprints a frame's pixels in whatever format it comes.

Nothing here opens files, seeks or knows of indexes or threads.
See :doc:`/video/decoding`.
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Callable
from typing import NamedTuple

import av
import numpy as np
from av.sidedata.sidedata import Type

from .scalers import Scaler, scaler_for

__all__ = ["FrameSize", "Orientation", "RGBFrames", "frame_checksum", "frame_orientation", "orientation"]

# The size frames are made at, as displayed: ``(height, width)``; a function of the first frame's
# ``(height, width)`` as displayed, for a size that depends on it; or None for the frame's own.
FrameSize = tuple[int, int] | Callable[[int, int], tuple[int, int]] | None


class Orientation(NamedTuple):
    """How a stored frame is turned for display: transposed first, then rows and/or columns reversed.

    The eight combinations are the eight ways to turn a rectangle by multiples
    of 90 degrees, mirrored or not. ``Orientation()`` leaves frames as stored.
    """

    transpose: bool = False
    flip_rows: bool = False  # upside down
    flip_cols: bool = False  # mirrored left to right

    def apply(self, image: np.ndarray) -> np.ndarray:
        """``image`` (height, width, channels) turned for display (a view: no copy)."""
        if self.transpose:
            image = image.transpose(1, 0, 2)
        if self.flip_rows:
            image = image[::-1]
        if self.flip_cols:
            image = image[:, ::-1]
        return image

    def stored_size(self, height: int, width: int) -> tuple[int, int]:
        """The ``(height, width)`` a stored frame has when it shows as ``(height, width)``."""
        return (width, height) if self.transpose else (height, width)


_UPRIGHT = Orientation()


def orientation(matrix: bytes | None) -> Orientation:
    """The turn FFmpeg's command line gives frames with display matrix ``matrix`` (36 bytes, or None).

    It makes the same decision as FFmpeg's ``ffmpeg`` tool (``fftools/ffmpeg_filter.c``).
    The matrix's rotation, to the nearest degree, picks ``transpose``, ``hflip``
    and ``vflip``. An angle that is not a multiple of 90 degrees is left as
    stored. The command line would rotate by it and fill the corners.
    """
    if matrix is None or len(matrix) < 36:
        return _UPRIGHT
    m = [v / 65536.0 for v in np.frombuffer(matrix[:36], dtype="<i4").tolist()]
    scale0, scale1 = math.hypot(m[0], m[3]), math.hypot(m[1], m[4])
    if scale0 == 0.0 or scale1 == 0.0:
        return _UPRIGHT
    # av_display_rotation_get, then fftools' get_rotation: the clockwise angle in [0, 360).
    theta = -round(-math.degrees(math.atan2(m[1] / scale1, m[0] / scale0)))
    theta -= 360 * math.floor(theta / 360 + 0.9 / 360)
    if abs(theta - 90) < 1:
        # transpose=cclock_flip (a plain transpose) or transpose=clock.
        return Orientation(True, False, False) if m[3] > 0 else Orientation(True, False, True)
    if abs(theta - 180) < 1:
        return Orientation(False, m[4] < 0, m[0] < 0)  # vflip, hflip
    if abs(theta - 270) < 1:
        # transpose=clock_flip or transpose=cclock.
        return Orientation(True, True, True) if m[3] < 0 else Orientation(True, True, False)
    if abs(theta) < 1:
        return Orientation(False, m[4] < 0, False)
    return _UPRIGHT


def frame_orientation(frame: av.VideoFrame) -> Orientation:
    """The turn for display of ``frame``, from its display matrix side data (upright without one)."""
    data = frame.side_data.get(Type.DISPLAYMATRIX)
    return _UPRIGHT if data is None else orientation(bytes(data))


class RGBFrames:
    """Frames of one stream to ``uint8`` RGB arrays of one size, turned for display (or not).

    One scaler for all the frames given (a clip's). The display matrix is read
    from the first frame and holds for the rest.

    Args:
        size: ``(height, width)`` of the frames returned, as displayed; ``None``
            keeps the frame's own size (turned: a 1920x1080 frame shown upright
            at 90 degrees comes out 1080 wide and 1920 high). A function of the
            first frame's ``(height, width)`` as displayed gives the size from it.
        rotate: turn frames as the display matrix says; ``False`` keeps them as stored.
        turn: the turn of the container's display matrix, used instead of the
            first frame's. Frames decoded without their container lack it. ``None``
            reads the first frame's.
    """

    def __init__(self, size: FrameSize = None, rotate: bool = True, turn: Orientation | None = None) -> None:
        self.size = size
        self.rotate = rotate
        self._orientation: Orientation | None = turn if rotate else None
        self._scaler: Scaler | None = None
        self._source: tuple[str, int, int] | None = None  # the format and size the scaler was made for

    def shape(self, frame: av.VideoFrame) -> tuple[int, int]:
        """``(height, width)`` of the arrays ``convert`` makes (the first frame fixes the orientation)."""
        turn = self._turn(frame)
        shown = turn.stored_size(frame.height, frame.width)
        if callable(self.size):
            self.size = self.size(*shown)  # fixed by the first frame, as the orientation is
        return shown if self.size is None else self.size

    def convert(self, frame: av.VideoFrame, out: np.ndarray | None = None) -> np.ndarray:
        """``frame`` as RGB, scaled and turned; written into ``out`` (height, width, 3) when given."""
        turn = self._turn(frame)
        source = (frame.format.name, frame.width, frame.height)
        if self._scaler is None or source != self._source:
            # Made again for a frame of another format or size, as swscale would be.
            height, width = turn.stored_size(*self.shape(frame))
            self._scaler, self._source = scaler_for(frame, width, height), source
        image = turn.apply(self._scaler.rgb(frame))
        if out is None:
            return np.ascontiguousarray(image)
        out[...] = image
        return out

    def _turn(self, frame: av.VideoFrame) -> Orientation:
        if self._orientation is None:
            self._orientation = frame_orientation(frame) if self.rotate else _UPRIGHT
        return self._orientation


def frame_checksum(frame: av.VideoFrame) -> int:
    """A checksum of a decoded frame's pixels, whatever its pixel format and size.

    In the frame's own format where numpy can hold it, else (formats
    ``to_ndarray`` does not take, odd sizes of subsampled formats) as RGB.
    """
    try:
        pixels = frame.to_ndarray()
    except (AssertionError, ValueError, TypeError, NotImplementedError):
        pixels = frame.reformat(format="rgb24").to_ndarray()
    checksum = 0
    for part in pixels if isinstance(pixels, tuple) else (pixels,):  # paletted formats give (image, palette)
        checksum = zlib.crc32(np.ascontiguousarray(part), checksum)
    return checksum
