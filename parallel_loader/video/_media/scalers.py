"""Two ways to make a decoded frame a ``uint8`` RGB array of a given size, chosen by the frame's bit depth.

Both run FFmpeg's scaler, swscale, once per frame. They differ in how they set
it up, which shows at colour edges of subsampled chroma:

- ``SwsScaler`` calls swscale itself, with area averaging. It is the fastest.
  On 8-bit frames at their own size it gives the colours of FFmpeg's command
  line, bit for bit (4:2:0 frames of odd height aside).
- ``FilterScaler`` runs FFmpeg's ``scale`` filter in a small graph, as the
  command line does. At the frame's own size it keeps the filter's default
  flags. Deeper formats (10 and 12 bits, ``p010le``) need it: swscale called
  directly differs there by over 100 levels at colour edges.

The difference is where chroma samples sit. swscale called directly follows
the frame's chroma location (left of the pixel pair for H.264 and HEVC). The
filter, fed frames as the command line feeds them, puts them in the middle.

``scaler_for`` picks one. Nothing here opens files or knows of orientation.
See :doc:`/video/decoding`.
"""

from __future__ import annotations

from fractions import Fraction
from typing import Protocol

import av
import av.filter
import numpy as np
from av.video.format import VideoFormat
from av.video.reformatter import Interpolation, VideoReformatter

__all__ = ["FilterScaler", "Scaler", "SwsScaler", "high_depth", "scaler_for"]

_RGB24 = VideoFormat("rgb24")
_AREA = Interpolation.AREA


class Scaler(Protocol):
    """Frames of one format and size (the first frame's) to RGB arrays of one size."""

    def rgb(self, frame: av.VideoFrame) -> np.ndarray:
        """``frame`` as a ``uint8`` array (height, width, 3) of the scaler's size."""
        ...


def high_depth(frame: av.VideoFrame) -> bool:
    """Whether any component of ``frame``'s pixel format has more than 8 bits."""
    return any(component.bits > 8 for component in frame.format.components)


def scaler_for(frame: av.VideoFrame, width: int, height: int) -> Scaler:
    """A scaler for frames like ``frame`` to ``width`` x ``height``: FFmpeg's filter for deep formats."""
    if high_depth(frame):
        return FilterScaler(frame, width, height)
    return SwsScaler(frame, width, height)


class SwsScaler:
    """swscale called directly, with area averaging: the command line's colours on 8-bit frames at their size.

    Args:
        frame: a frame of the format and size to come (unused: swscale sets itself up for each).
        width: width of the arrays made.
        height: height of the arrays made.
    """

    def __init__(self, frame: av.VideoFrame, width: int, height: int) -> None:
        self.width, self.height = width, height
        self._reformatter = VideoReformatter()

    def rgb(self, frame: av.VideoFrame) -> np.ndarray:
        """``frame`` as a ``uint8`` array (height, width, 3)."""
        # The format and interpolation as objects: PyAV parses strings on every call, holding the GIL.
        return self._reformatter.reformat(
            frame, width=self.width, height=self.height, format=_RGB24, interpolation=_AREA, threads=1
        ).to_ndarray()


class FilterScaler:
    """FFmpeg's ``scale`` filter then ``format=rgb24``, as the command line converts frames.

    At the frame's own size the filter keeps its defaults, as ``ffmpeg`` does.
    A different size scales with area averaging (``flags=area``). The graph runs
    in the calling thread: the loader's threads give the parallelism.

    Args:
        frame: a frame of the format and size to come; the graph takes only those.
        width: width of the arrays made.
        height: height of the arrays made.

    Raises:
        av.error.FFmpegError: FFmpeg cannot convert this format to RGB.
    """

    def __init__(self, frame: av.VideoFrame, width: int, height: int) -> None:
        self.width, self.height = width, height
        graph = av.filter.Graph()
        graph.threads = 1  # set before any filter is added
        # The time base is any: the filters here never read timestamps.
        buffer = graph.add_buffer(width=frame.width, height=frame.height, format=frame.format, time_base=Fraction(1))
        scaling = (width, height) != (frame.width, frame.height)
        scale = graph.add("scale", f"{width}:{height}" + (":flags=area" if scaling else ""))
        rgb = graph.add("format", "rgb24")
        sink = graph.add("buffersink")
        graph.link_nodes(buffer, scale, rgb, sink).configure()
        self._graph = graph

    def rgb(self, frame: av.VideoFrame) -> np.ndarray:
        """``frame`` as a ``uint8`` array (height, width, 3)."""
        self._graph.push(frame)
        return self._graph.pull().to_ndarray()
