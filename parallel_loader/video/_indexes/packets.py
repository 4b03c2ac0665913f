"""A video's index from its container's packets, without decoding: where that is safe, per container family.

Decoding a file from its first frame gives frame ``i``: the ``i``-th frame out
of the decoder. A packet index names the same frames without decoding when
every packet decodes to exactly one frame, whose timestamp is the packet's.
Then frame ``i`` is the packet with the ``i``-th smallest presentation
timestamp. A keyframe packet is then a frame a seek can start at. That holds
for the container families and codecs listed in ``_FAMILIES`` when the packets
give this cheap evidence:

* every packet read whole: none marked damaged or cut short, none past the end
  of the file. None but the last is empty, and none is to be discarded (edit lists);
* every packet has a presentation timestamp, and no two share one;
* the first packet is a keyframe and no packet shows before it. A decoder may
  drop open-GOP leading frames at the start. Later open-GOP keyframes are fine:
  their leading frames come before them, and a seek passes over them;
* what the codec's own check asks (``_CODEC_CHECKS``). MPEG-4 part 2 in AVI may
  pack a B-frame into the packet of the frame after it ("packed B-frames"). It
  then leaves a placeholder (an N-VOP, which decodes to nothing) in the next
  packet. So every packet must hold exactly one VOP, and none may be
  placeholder-sized.

Anything else returns the reason only decoding can tell, and the caller
decodes the file once (``scan``). An index made here is checked on every read.
``_media.frames.frames_from`` requires the frames decoded after a seek to carry
the index's timestamps, in order. They must start with the keyframe, decoded as
a keyframe. A read that fails this is redone from the first frame, and the file
is indexed again by decoding.

Nothing here decodes, stores or knows of threads. See :doc:`/video/decoding`.
"""

from __future__ import annotations

from collections.abc import Callable
from fractions import Fraction

import av.error
import numpy as np
from av.container import InputContainer
from av.video.stream import VideoStream

from .._base.facts import PACKETS, VideoIndex, regular_or_table, sorted_unique

__all__ = ["array_check", "family_problem", "from_packets", "index_of", "time_base_of"]

_VOP = b"\x00\x00\x01\xb6"  # MPEG-4 part 2's VOP start code
_MAX_NVOP_SIZE = 19  # FFmpeg's limit for a packet it takes as an N-VOP (libavcodec/h263dec.c)


def _mpeg4_problem(data: bytes) -> str:
    if len(data) <= _MAX_NVOP_SIZE:
        return f"a packet of {len(data)} bytes may be an N-VOP (a placeholder that decodes to no frame)"
    if data.count(_VOP) != 1:
        return f"a packet holds {data.count(_VOP)} VOPs (packed B-frames)"
    return ""


def _mpeg4_arrays_problem(data: np.ndarray, pos: np.ndarray, size: np.ndarray) -> str:
    """``_mpeg4_problem`` for every packet at once: ``data`` the bytes, packet k at ``pos[k]``, ``size[k]`` long."""
    if (size <= _MAX_NVOP_SIZE).any():
        return _mpeg4_problem(b"\0" * int(size.min()))
    last = np.flatnonzero(data[3:] == _VOP[3])  # where a start code may begin: its last byte is 0xb6
    codes = last[(data[last] == 0) & (data[last + 1] == 0) & (data[last + 2] == 1)]
    counts = np.searchsorted(codes, pos + size - 3) - np.searchsorted(codes, pos)
    wrong = np.flatnonzero(counts != 1)
    return f"a packet holds {int(counts[wrong[0]])} VOPs (packed B-frames)" if wrong.size else ""


# Codec name -> a check of one packet's bytes: "" or why packets may not map one to one to frames.
_CODEC_CHECKS: dict[str, Callable[[bytes], str]] = {"mpeg4": _mpeg4_problem}
# The same checks over every packet at once (see ``array_check``).
_ARRAY_CHECKS: dict[str, Callable[[np.ndarray, np.ndarray, np.ndarray], str]] = {"mpeg4": _mpeg4_arrays_problem}

# Container family (the first name FFmpeg gives its demuxer) -> the codecs whose packets are
# indexed there: those the tests cover. Others are indexed by decoding until a test covers them.
_FAMILIES: dict[str, frozenset[str]] = {
    "mov": frozenset({"h264"}),  # MP4, MOV
    "matroska": frozenset({"h264"}),  # MKV, WebM
    "avi": frozenset({"mpeg4", "mjpeg", "ffv1"}),
}
# Container family -> codecs indexed from its tables only, where each packet's frame headers are read
# (``shown_frames``): a packet may hold a hidden frame, which decodes to none, and demuxing cannot tell.
_TABLES_ONLY: dict[str, frozenset[str]] = {"matroska": frozenset({"vp8", "vp9", "av1"})}


def from_packets(container: InputContainer, stream: VideoStream, file_size: int) -> VideoIndex | str:
    """The index of ``stream`` from its packets (demuxed from the start), or why only decoding can tell.

    ``file_size`` is the file's size in bytes, which no packet may reach past.
    Leaves ``container`` at the end of the file: seek before reading frames from it.
    """
    family = container.format.name.split(",")[0]
    codec = stream.codec_context.name
    problem = family_problem(family, codec)
    if problem:
        return problem
    check = _CODEC_CHECKS.get(codec)
    stamps: list[int] = []
    keys: list[int] = []  # timestamps of keyframe packets
    empty = False  # an empty packet seen: only the demuxer's last (a flush) may be
    try:
        for packet in container.demux(stream):
            if packet.size == 0:
                empty = True
                continue
            if empty:
                return "an empty packet before the end"
            if packet.is_corrupt or packet.is_discard:
                return "a packet is damaged, cut short or to be discarded"
            if packet.pos is not None and packet.pos >= 0 and packet.pos + packet.size > file_size:
                return "a packet reaches past the end of the file"
            pts = packet.pts
            if pts is None:
                return "a packet has no timestamp"
            if not stamps and not packet.is_keyframe:
                return "the first packet is not a keyframe"
            if check is not None:
                problem = check(bytes(packet))
                if problem:
                    return problem
            stamps.append(pts)
            if packet.is_keyframe:
                keys.append(pts)
    except av.error.FFmpegError as exc:
        return f"the packets cannot be read to the end ({exc})"
    return index_of(np.asarray(stamps, dtype=np.int64), np.asarray(keys, dtype=np.int64), time_base_of(stream))


def family_problem(family: str, codec: str, *, bytes_seen: bool = True) -> str:
    """Why ``codec`` in container ``family`` is indexed by decoding, or "" when its packets can tell.

    Without ``bytes_seen`` (a container's tables), a codec whose packets have a check but no ``array_check`` is refused.
    VP8, VP9 and AV1 in Matroska are accepted there only: their frame headers are read with the tables.
    """
    if not bytes_seen and codec in _TABLES_ONLY.get(family, ()):
        return ""
    if codec not in _FAMILIES.get(family, ()):
        return f"{codec} in {family} is indexed by decoding"
    if not bytes_seen and codec in _CODEC_CHECKS and codec not in _ARRAY_CHECKS:
        return f"{codec} packets are checked one by one"
    return ""


def array_check(codec: str) -> Callable[[np.ndarray, np.ndarray, np.ndarray], str] | None:
    """The codec's check of every packet at once, ``check(data, pos, size)``: "" or why not; None for no check.

    ``data`` holds the bytes (uint8) and packet ``k`` is ``data[pos[k]:pos[k] + size[k]]``.
    """
    return _ARRAY_CHECKS.get(codec)


def index_of(stamps: np.ndarray, keys: np.ndarray, time_base: Fraction | None) -> VideoIndex | str:
    """The index of packets with timestamps ``stamps`` (decoding order), ``keys`` those of keyframes; or why not.

    ``time_base`` is the unit of the timestamps, kept with the index (None: unknown).

    The first packet must be a keyframe (``keys[0] == stamps[0]``), none may show
    before it, and no two may share a timestamp.
    """
    if not stamps.size:
        return "no packet"
    if not keys.size or keys[0] != stamps[0]:
        return "the first packet is not a keyframe"
    if int(stamps.min()) < int(stamps[0]):
        return "frames show before the first keyframe (open-GOP leading frames at the start)"
    pts = np.sort(stamps)
    if pts.size > 1 and not (np.diff(pts) > 0).all():
        return "two packets share a timestamp"
    keyframes = tuple(sorted_unique(np.searchsorted(pts, keys))[0].tolist())
    return regular_or_table(len(pts), keyframes, pts, intact=True, made_by=PACKETS, time_base=time_base)


def time_base_of(stream: VideoStream) -> Fraction | None:
    """The stream's time base, or None when the container gives none."""
    base = stream.time_base
    return Fraction(base.numerator, base.denominator) if base else None
