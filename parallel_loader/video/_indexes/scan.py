"""What a video file's frames are, learnt by decoding it once: the index of files whose packets cannot tell.

A container's header and timestamps can be wrong. Its frame count may not be
what decodes. Timestamps may have gaps or be missing, and seeks may land
elsewhere. So where the packets alone cannot be trusted (see ``packets``),
``scan`` makes the file's ``VideoIndex`` by decoding every frame once, in order.
It learns:

* the frame count, as decoding from the first frame counts;
* whether the file is intact: every packet read whole, to the end of the file,
  and decoded. A header may claim more frames than an intact file decodes. It
  counts timestamp gaps as frames, or is simply wrong. A file that is not
  intact (cut short by an interrupted copy, damaged) is missing data. Then the
  header may be right about what the file should hold;
* each frame's presentation timestamp, when every frame has one and no two
  share one. Then a timestamp names exactly one frame. Frame ``i`` is the
  ``i``-th decoded, whatever gaps or variable rate the timestamps have. AVI with
  B-frames gives frames their packets' timestamps, which do not rise;
* for MPEG-TS and PS, which have no index, how far before a keyframe's
  presentation timestamp a seek must aim. Then it lands before its packet
  (``VideoIndex.seek_back``);
* the keyframes a seek can start at: frames the container marks as seek points
  and the decoder decodes as keyframes;
* whether seeks are exact. A few keyframes are sought, and the first frames
  decoded after each are checked. They must have the timestamps and the pixels
  (a checksum) that decoding from the start gave them.

A file that fails any of these is indexed with ``seekable=False`` and a reason.
Its clips are decoded from the first frame, which is exact for every file. Only
evidence about the file counts against it. A read error during those seeks
(``VideoDecodeError``) is raised, and nothing is stored, since it may not happen again.
A reader that needs the scan takes its clip from it (``on_frame``) rather than
decoding the file twice. See :doc:`/video/decoding`.
"""

from __future__ import annotations

import os
from collections.abc import Callable

import av
import numpy as np

from .._base.errors import VideoDecodeError
from .._base.facts import DECODING, VideoIndex, regular_or_table
from .._media.frames import SeekMismatch, decode, frames_from, open_video, packets
from .._media.pixels import frame_checksum
from .._media.streams import StreamChoice
from .packets import time_base_of

__all__ = ["scan", "not_seekable_warning"]

# Container families without an index, whose seeks find a packet by its decoding timestamp (FFmpeg's
# search through the file): MPEG-TS and MPEG-PS. A seek for a keyframe aims at its decoding timestamp.
_SEEK_BY_DTS = frozenset({"mpegts", "mpeg"})
_SEEK_CHECKS = 3  # keyframes sought when a file is indexed
_CHECKED_FRAMES = 3  # frames compared after each of those seeks


def scan(
    path: str | os.PathLike[str],
    on_frame: Callable[[int, av.VideoFrame], None] | None = None,
    stream: StreamChoice = None,
) -> VideoIndex:
    """Decode every frame of a video once and learn its index (see the module docstring).

    ``on_frame(i, frame)``, when given, sees every frame as it is decoded. So a
    reader can take the clip it wants from the same pass. Frame ``i`` is counted
    from the first, so it is exact whatever the index then says.

    Raises:
        FileNotFoundError: there is no file at ``path``.
        VideoDecodeError: the file cannot be opened as a video, no frame decodes,
            or it cannot be read after one of the checking seeks.
    """
    with open_video(path, stream) as (container, video):
        time_base = time_base_of(video)
        seek_points: set[int] = set()  # timestamps of the packets the container marks as keyframes
        stamps: list[int | None] = []
        intra: list[int] = []  # frames the decoder calls keyframes
        checksums: dict[int, int] = {}  # frame -> checksum, for the first frames of each group
        problem = ""
        intact = True
        seek_back = 0  # how far a keyframe's decoding timestamp comes before its presentation one, at most
        by_dts = container.format.name.split(",")[0] in _SEEK_BY_DTS
        for packet in packets(container, video):
            frames = None if packet is None else decode(packet)
            if frames is None:
                problem = "a packet fails to decode, or the file cannot be read to its end"
                intact = False
                continue
            if packet.is_corrupt:  # FFmpeg's mark for a packet the file ends inside (cut short) or a damaged one
                intact = False
            if packet.is_keyframe and packet.pts is not None:
                seek_points.add(packet.pts)
                if by_dts and packet.dts is not None:
                    seek_back = max(seek_back, packet.pts - packet.dts)
            for frame in frames:
                i = len(stamps)
                stamps.append(frame.pts)
                if frame.key_frame:
                    intra.append(i)
                if intra and i - intra[-1] < _CHECKED_FRAMES:
                    checksums[i] = frame_checksum(frame)
                if on_frame is not None:
                    on_frame(i, frame)
    frames = len(stamps)
    if frames == 0:
        raise VideoDecodeError(path, "no frame decodes (empty, corrupt, or not a video)")
    if not problem:
        problem = _timestamp_problem(stamps)
    if problem:
        return VideoIndex(frames=frames, reason=problem, intact=intact)
    pts = np.asarray(stamps, dtype=np.int64)
    keyframes = tuple(sorted({0, *(i for i in intra if int(pts[i]) in seek_points)}))
    if by_dts and frames > 1:
        # One frame more: a seek landing inside the keyframe's packet (a frame spans many PS packs)
        # names it with the next frame's timestamp; landing in the frame before it, it is read whole.
        seek_back += int(np.diff(pts).max())
    index = regular_or_table(frames, keyframes, pts, intact, DECODING, seek_back, time_base)
    problem = _seek_problem(path, index, checksums, stream)
    if problem:  # the timestamps still name the frames: kept, to find frames by time
        return index.distrusted(problem)
    return index


def _timestamp_problem(stamps: list[int | None]) -> str:
    """Why the timestamps cannot name the frames, or "" when they can: each frame has one, and no two share one.

    They need not rise: AVI with B-frames gives frames their packets' timestamps, in decoding order.
    """
    missing = sum(s is None for s in stamps)
    if missing:
        return f"{missing} of {len(stamps)} frames have no timestamp"
    seen: dict[int | None, int] = {}
    for i, stamp in enumerate(stamps):
        if stamp in seen:
            return f"frames {seen[stamp]} and {i} have the same timestamp ({stamp})"
        seen[stamp] = i
    return ""


def _seek_problem(
    path: str | os.PathLike[str], index: VideoIndex, checksums: dict[int, int], stream: StreamChoice = None
) -> str:
    """Seek to a few keyframes; say what went wrong if the frames decoded there differ, "" if none did.

    Raises:
        VideoDecodeError: the file cannot be read or decoded after a seek: no
            verdict on its seeks, so the caller stores none.
    """
    later = index.keyframes[1:]
    if not later:
        return ""
    picks = sorted({later[0], later[len(later) // 2], later[-1]})[:_SEEK_CHECKS]
    with open_video(path, stream) as (container, video):
        for key in picks:
            expected = key
            try:
                for i, frame in frames_from(container, video, index, key):
                    if i != expected:
                        return f"a seek to frame {key} decodes frame {i}, not {expected}"
                    if i in checksums and checksums[i] != frame_checksum(frame):
                        return f"frame {i} decoded after a seek to frame {key} differs from frame {i} decoded in order"
                    expected += 1
                    if expected >= min(key + _CHECKED_FRAMES, index.frames):
                        break
                else:
                    if expected == key:
                        return f"a seek to frame {key} lands past the last frame: no frame at or after it decodes"
                    return (
                        f"after a seek to frame {key}, decoding stops at frame {expected - 1}, though "
                        f"{index.frames} frames decode from the first (the seek landed where the rest cannot be read)"
                    )
            except SeekMismatch as exc:
                return str(exc)
    return ""


def not_seekable_warning(name: str, index: VideoIndex) -> str:
    """The warning for a file whose seeks are not exact: why, what reading from the first frame costs, what fixes it."""
    cost = (
        f"its clips are decoded from the first frame: a clip ending at frame n decodes n + 1 frames "
        f"(up to all {index.frames} of this file for each clip at its end)"
    )
    if not index.intact:
        fix = "the file is cut short or damaged: re-encode it, or leave it out (python -m parallel_loader.video.check)"
    else:
        stem, ext = os.path.splitext(name)
        genpts = "-fflags +genpts " if ext.lower() == ".avi" else ""  # AVI stores no presentation timestamps
        fix = f"remuxing makes it seekable, e.g. ffmpeg {genpts}-i {name} -c copy {stem}.remuxed.mp4"
    return f"video {name}: seeking is not exact ({index.reason}); {cost}; {fix}"
