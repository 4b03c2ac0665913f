"""Frames out of a video file with PyAV: open it, its packets, decoding, and the frames after a seek.

Shared by the scan (which decodes a file once to learn it) and the readers.
Every file is decoded with one FFmpeg thread: the loader's threads give the
parallelism, and FFmpeg's calls release the GIL.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import av
import av.error
from av.container import InputContainer
from av.video.stream import VideoStream

from .._base.errors import VideoDecodeError
from .._base.facts import VideoIndex
from .._bytes.source import open_container
from .streams import StreamChoice, chosen_stream

__all__ = ["CONTENT_ERRORS", "SeekMismatch", "decode", "frames_from", "open_video", "packets"]


# Errors from decoding a file's content that PyAV and FFmpeg raise as other types than FFmpegError.
CONTENT_ERRORS = (av.error.FFmpegError, AssertionError, ValueError, TypeError, IndexError, ArithmeticError)


class SeekMismatch(Exception):
    """The frames decoded after a seek do not follow the index: the file's seeks are not exact."""


@contextmanager
def open_video(
    path: str | os.PathLike[str],
    stream: StreamChoice = None,
    header_only: bool = False,
    container_format: str | None = None,
) -> Iterator[tuple[InputContainer, VideoStream]]:
    """``with open_video(path) as (container, stream)``: a PyAV container and its video stream ``stream``.

    ``stream`` is a stream's number, or None for the one FFmpeg picks as best (see ``streams``).
    ``header_only``: FFmpeg learns the streams from the header alone (see ``open_container``).
    ``container_format`` names FFmpeg's demuxer for a file whose signature was read (see ``open_container``).

    The stream decodes with one thread: the loader's threads give the parallelism.
    An error the file's content causes in the ``with`` block (FFmpeg's, or
    PyAV's ``AssertionError``, ``ValueError``, ...) leaves it as a
    ``VideoDecodeError`` naming the file.

    Raises:
        FileNotFoundError: there is no file at ``path``.
        VideoDecodeError: ``path`` is not a file, cannot be opened as a video, or has no
            video stream. Or ``stream`` names no video stream of it. Or its content
            fails to decode in the ``with`` block.
    """
    container = open_container(path, header_only, container_format)
    try:
        chosen = chosen_stream(container, stream, path)
        chosen.codec_context.thread_count = 1
        yield container, chosen
    except CONTENT_ERRORS as exc:
        # What FFmpeg or PyAV raise on content they do not take (a frame numpy cannot hold, a
        # stream whose parameters make no sense) is about this file: named, so ``on_error`` handles it.
        raise VideoDecodeError(path, f"cannot be decoded ({type(exc).__name__}: {exc})") from exc
    finally:
        container.close()


def frames_from(
    container: InputContainer,
    stream: VideoStream,
    index: VideoIndex,
    key: int,
    keep: Callable[[int], bool] | None = None,
    seek_first: bool = False,
) -> Iterator[tuple[int, av.VideoFrame]]:
    """Seek to keyframe ``key`` and yield ``(i, frame i)`` for frame ``key`` and the frames decoded after it.

    Frames decoded from before the keyframe (where a seek may land) are passed
    over. With ``keep``, the frames no other frame refers to (B-frames and the
    like) are not decoded unless ``keep(i)`` says so; without it, every frame is.
    A container just opened is not sought for ``key`` 0; ``seek_first`` seeks
    anyway (for a container already read from).

    Raises:
        SeekMismatch: the frames decoded show that the file's seeks are not
            exact. The first frame at or after the keyframe's timestamp is not
            frame ``key``, or does not decode as a keyframe. Or frames come out
            of order, or one whose packet was not skipped is missing between
            two. Or a frame's timestamp is not in the index.
        VideoDecodeError: the file cannot be read or decoded after the seek (it
            names the file). For an index made by decoding, this is no evidence
            against the index. Every packet decoded when the file was indexed.
            So such an error is a read failing now (a network share, a file
            being replaced), which may not happen again.
    """
    codec = stream.codec_context
    previous = -1  # the last frame yielded
    skipping = False  # whether the decoder now skips frames nothing refers to
    unasked: set[int] = set()  # frames whose packets went to the decoder with skipping on: they may not come out
    try:
        if key > 0 or seek_first:
            container.seek(index.seek_target(key), stream=stream, backward=True)
        for packet in container.demux(stream):
            if keep is not None:
                # The keyframe is always decoded, since the check below needs it.
                i = index.frame_at(packet.pts)
                skip = not (i is None or i == key or keep(i))
                if skip:
                    unasked.add(i)
                if skip != skipping:
                    codec.skip_frame = "NONREF" if skip else "DEFAULT"
                    skipping = skip
            for frame in packet.decode():
                i = index.frame_at(frame.pts)
                if i is None:
                    raise SeekMismatch(f"after a seek to frame {key}, timestamp {frame.pts} is unknown to the index")
                if i < key:
                    continue
                if previous < 0 and i != key:
                    raise SeekMismatch(
                        f"a seek to frame {key} lands past it: the first frame decoded at or after it is frame {i}"
                    )
                if i <= previous:
                    raise SeekMismatch(f"after a seek to frame {key}, frame {i} is decoded after frame {previous}")
                if previous >= 0 and not unasked.issuperset(range(previous + 1, i)):
                    # A frame the index names never came out: its packet holds no frame of its own
                    # (a field of an interlaced pair, a hidden frame), so the index counts wrong.
                    raise SeekMismatch(
                        f"after a seek to frame {key}, frame {i} follows frame {previous}: frames between are missing"
                    )
                if previous < 0 and key > 0 and not frame.key_frame:
                    # A container may mark a packet as a seek point that the decoder does not
                    # decode as one (it refers to earlier frames): its pixels would differ.
                    raise SeekMismatch(f"frame {key}, marked as a keyframe, does not decode as one after a seek")
                previous = i
                yield i, frame
    except av.error.FFmpegError as exc:
        raise VideoDecodeError(
            container.name, f"cannot be read or decoded after a seek to frame {key} ({exc})"
        ) from exc


def packets(container: InputContainer, stream: VideoStream) -> Iterator[av.Packet | None]:
    """The packets of ``stream`` from where the container is; ``None`` last if the file cannot be read further.

    The last packet is empty: decoding it flushes the decoder's delayed frames.
    """
    demuxer = container.demux(stream)
    while True:
        try:
            packet = next(demuxer)
        except StopIteration:
            return
        except av.error.FFmpegError:
            yield None
            return
        yield packet


def decode(packet: av.Packet) -> list[av.VideoFrame] | None:
    """The frames decoding ``packet`` gives, or ``None`` if it fails to decode (a damaged packet)."""
    try:
        return packet.decode()
    except av.error.FFmpegError:
        return None
