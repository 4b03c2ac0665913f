"""Which of a file's streams is read: the one asked for by its number, or the one FFmpeg picks as best.

A file may hold several video streams: a second camera angle, or a cover
picture stored as a one-frame stream (an *attached picture*). ``stream=None``
takes the stream FFmpeg's ``av_find_best_stream`` picks, as the ``ffmpeg``
command line does, but never an attached picture. A number names a stream as
FFmpeg numbers them all, audio and subtitles included. A number that names no
stream, or one that is not video, fails at once, naming the file and its streams.
Nothing here decodes. See :doc:`/video/decoding`.
"""

from __future__ import annotations

import os

import av
import av.error
from av.container import InputContainer
from av.video.stream import VideoStream

from ..._core.checks import check_int
from .._base.errors import VideoDecodeError
from .._base.info import VideoInfo
from .pixels import frame_orientation

__all__ = ["StreamChoice", "check_stream", "chosen_stream", "stream_info", "streams_described"]

StreamChoice = int | None  # a stream's number among all the file's streams, or None for the best video stream


def check_stream(stream: object) -> None:
    """Raise ``TypeError`` or ``ValueError`` unless ``stream`` is None or a non-negative int."""
    if stream is not None:
        check_int("stream", stream, minimum=0)


def chosen_stream(container: InputContainer, stream: StreamChoice, path: str | os.PathLike[str]) -> VideoStream:
    """The video stream of ``container`` that ``stream`` names (see the module docstring).

    Raises:
        VideoDecodeError: the file has no video stream, or ``stream`` names
            no stream of it, or names one that is not video. It names the file and lists its streams.
    """
    streams = container.streams
    if stream is None:
        best = streams.best("video")
        if best is not None and _attached_picture(best):
            best = next((s for s in streams.video if not _attached_picture(s)), None)
        if best is None:
            what = "has no video stream" if not streams.video else "has only attached pictures"
            raise VideoDecodeError(path, f"cannot be opened as a video (the file {what})")
        return best
    if stream >= len(streams):
        raise VideoDecodeError(path, f"has no stream {stream}: it has {streams_described(container)}")
    found = streams[stream]
    if found.type != "video":
        raise VideoDecodeError(
            path, f"stream {stream} is {found.type}, not video: the file has {streams_described(container)}"
        )
    return found


def streams_described(container: InputContainer) -> str:
    """The file's streams for a message: ``"stream 0 (video, h264, 64x48), stream 1 (audio, aac)"``."""
    parts = []
    for s in container.streams:
        what = [s.type, s.codec_context.name if s.codec_context is not None else "unknown codec"]
        if s.type == "video":
            what.append(f"{s.codec_context.width}x{s.codec_context.height}")
            if _attached_picture(s):
                what.append("attached picture")
        parts.append(f"stream {s.index} ({', '.join(what)})")
    return ", ".join(parts) or "no stream"


def stream_info(container: InputContainer, stream: VideoStream, rotate: bool = True) -> VideoInfo:
    """What the header says of ``stream``; with ``rotate``, its first frame is decoded for its display matrix.

    A quarter turn swaps width and height, as ``read_clip`` turns the frames.
    """
    rate = stream.average_rate or stream.base_rate or 0
    width, height = stream.codec_context.width, stream.codec_context.height
    if rotate and _first_frame_turned(container, stream):
        width, height = height, width
    return VideoInfo(frames=max(0, stream.frames), fps=float(rate), width=width, height=height)


def _first_frame_turned(container: InputContainer, stream: VideoStream) -> bool:
    """Whether the first frame's display matrix turns it a quarter (False when no frame decodes)."""
    try:
        frame = next(container.decode(stream), None)
    except av.error.FFmpegError:
        return False
    return frame is not None and frame_orientation(frame).transpose


def _attached_picture(stream: av.stream.Stream) -> bool:
    return bool(stream.disposition & av.stream.Disposition.attached_pic)
