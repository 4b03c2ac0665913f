"""A video's index from its container's own tables, read as whole arrays: the first touch without demuxing.

Demuxing every packet to learn a file's index costs a Python call per packet,
under the GIL. A container that keeps its packet table (MP4/MOV: see
``mov_tables``; AVI: ``avi_tables``) gives the same facts as a few numpy arrays.
A Matroska file's block headers give them too (``mkv_tables``).
``from_tables`` reads them and anchors them to FFmpeg. FFmpeg's own index must
hold as many packets, and agree at a few spread out (offset, size, decoding
time, keyframe flag). For Matroska, every keyframe FFmpeg's index holds must
be one of the table's, in its cluster. The first demuxed packets must have the
offsets and timestamps the tables give, up to one constant. Then the same checks as for
demuxed packets apply on the arrays (``packets.index_of``, ``packets.array_check``).

Anything the tables cannot vouch for returns the reason, and the caller demuxes
the file as before. An index made here is checked on every read, as one made
from demuxed packets is. See :doc:`/video/first_touch`.
"""

from __future__ import annotations

import dataclasses
import itertools
import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, BinaryIO

import av.error
import numpy as np
from av.container import InputContainer
from av.video.stream import VideoStream

from .._base.facts import VideoIndex
from .avi_tables import stream_packets
from .mkv_tables import track_packets as mkv_track_packets
from .mov_tables import read_moov, track_matrix, track_packets
from .packets import array_check, family_problem, index_of, time_base_of
from .shown_frames import SHOWN_FRAME_CODECS, shown_frames
from .track_packets import TrackPackets, read_at

__all__ = ["Refused", "TableIndex", "from_tables"]

_ANCHORS = 8  # packets of FFmpeg's index compared with the tables, spread over the file
_FIRST = 3  # packets demuxed to anchor the tables' times to FFmpeg's timestamps
_CHECK_BYTES = 4 << 20  # a codec's check reads the packets' bytes about this many at a time: memory stays bounded


@dataclass(frozen=True, eq=False)
class TableIndex:
    """A file's index, and its stream's packets (decoding order) as FFmpeg demuxes them."""

    index: VideoIndex
    pos: np.ndarray  # int64 byte offsets of each packet's data
    size: np.ndarray  # int64
    pts: np.ndarray  # int64, FFmpeg's presentation timestamps
    key: np.ndarray  # bool
    display_matrix: bytes | None = None  # see ``TrackPackets``


@dataclass(frozen=True)
class Refused:
    """Why the tables cannot tell, and whether a packet was demuxed (then seek, or open the file again)."""

    reason: str
    demuxed: bool = False


def from_tables(container: InputContainer, stream: VideoStream, file: BinaryIO, file_size: int) -> TableIndex | Refused:
    """The index of ``stream`` from the container's tables, read from ``file``; or why they cannot tell.

    ``stream`` names the track: another stream of the file reads its own table.
    Demuxes at most a few packets of ``container``: seek before reading frames from it.
    """
    family = container.format.name.split(",")[0]
    codec = stream.codec_context.codec.canonical_name  # "av1" whichever decoder FFmpeg chose
    problem = family_problem(family, codec, bytes_seen=False)
    reader = _READERS.get(family)
    if not problem and reader is None:
        problem = f"{family} has no table reader"
    if problem:
        return Refused(problem)
    packets = reader(file, file_size, stream)
    if isinstance(packets, str):
        return Refused(packets)
    if packets.edits > 1:
        return Refused(f"an edit list of {packets.edits} edits")
    if (packets.size <= 0).any():
        return Refused("an empty packet")
    if int((packets.pos + packets.size).max()) > file_size:
        return Refused("a packet reaches past the end of the file")
    problem = _against_ffmpegs_index(stream, packets)
    if problem:
        return Refused(problem)
    shown = _shown(codec, file, packets)
    if isinstance(shown, str):
        return Refused(shown)
    first = _first_packets(container, stream, min(_FIRST, len(packets.pos)), packets.pts_only)
    if isinstance(first, str):
        return Refused(first, demuxed=True)
    shift = first[0][0] - int(packets.dts[0] + packets.offset[0])
    pts = packets.dts + packets.offset + shift
    for k, (pts_k, dts_k, pos_k) in enumerate(first):
        ours = (int(packets.pos[k]) - packets.packet_header, int(pts[k]), int(packets.dts[k]) + shift)
        if (pos_k, pts_k, dts_k) != (ours if not packets.pts_only else (*ours[:2], None)):
            return Refused(f"packet {k} is not where or when the tables put it", demuxed=True)
    index = index_of(pts[shown], pts[packets.key], time_base_of(stream))
    if isinstance(index, str):
        return Refused(index, demuxed=True)
    return TableIndex(index, packets.pos, packets.size, pts, packets.key, packets.display_matrix)


def _shown(codec: str, file: BinaryIO, packets: TrackPackets) -> np.ndarray | str:
    """Which packets show a frame (all, unless the codec may hide frames), after the codec's checks; or why not.

    Both read the packets' bytes: ``packets.array_check``'s, and for VP8, VP9
    and AV1 their frame headers (``shown_frames``), whose keyframes must be the container's.
    """
    check = array_check(codec)
    if check is not None:  # in runs of packets: the memory it takes is bounded
        problem = _checked_in_chunks(check, file, packets.pos, packets.size)
        if problem:
            return problem
    if codec not in SHOWN_FRAME_CODECS:
        return np.ones(len(packets.pos), dtype=bool)
    begin = int(packets.pos.min())
    data = np.frombuffer(read_at(file, begin, int((packets.pos + packets.size).max()) - begin), dtype=np.uint8)
    frames = shown_frames(codec, data, packets.pos - begin, packets.size)
    if isinstance(frames, str):
        return frames
    differ = np.flatnonzero(frames.key != packets.key)
    if differ.size:
        return f"packet {int(differ[0])}'s keyframe flag is not its frame header's"
    return frames.shown


def _mov(file: BinaryIO, file_size: int, stream: VideoStream) -> TrackPackets | str:
    moov = read_moov(file, file_size)
    if isinstance(moov, str):
        return moov
    packets = track_packets(moov, stream.id)
    if isinstance(packets, str):
        return packets
    try:
        return dataclasses.replace(packets, display_matrix=track_matrix(moov, stream.id))
    except (ValueError, struct.error) as exc:
        return f"the display matrix cannot be read ({exc})"


def _avi(file: BinaryIO, file_size: int, stream: VideoStream) -> TrackPackets | str:
    return stream_packets(file, file_size, stream.index)


def _mkv(file: BinaryIO, file_size: int, stream: VideoStream) -> TrackPackets | str:
    return mkv_track_packets(file, file_size, stream.index)


# Container family -> its table reader: ``reader(file, file_size, stream)`` gives the stream's packets or why not.
_READERS: dict[str, Callable[[BinaryIO, int, VideoStream], TrackPackets | str]] = {
    "mov": _mov,
    "avi": _avi,
    "matroska": _mkv,
}


def _against_ffmpegs_index(stream: VideoStream, packets: TrackPackets) -> str:
    """ "" when FFmpeg's index has as many packets as the tables and agrees at a few; else how it differs.

    PyAV 18.1's entries are views into FFmpeg's memory, good until demuxing starts: read them first.
    """
    entries = stream.index_entries
    if packets.index_pos is not None:
        return _against_keyframes_seen(entries, packets)
    pos, size, dts, key = packets.pos - packets.header, packets.size, packets.dts, packets.key
    count = len(pos)
    if len(entries) != count:
        return f"FFmpeg's index holds {len(entries)} packets, the tables {count}"
    if not count:
        return "no packet"
    shift = entries[0].timestamp - int(dts[0])
    picks = _spread(count)
    keyframes = np.flatnonzero(key)
    if len(keyframes):
        picks |= set(keyframes[sorted(_spread(len(keyframes)))].tolist())
    for i in sorted(picks):
        entry = entries[i]
        ours = (int(pos[i]), int(size[i]), int(dts[i]) + shift, bool(key[i]), False)
        if (entry.pos, entry.size, entry.timestamp, bool(entry.is_keyframe), bool(entry.is_discard)) != ours:
            return f"FFmpeg's index differs from the tables at packet {i}"
    return ""


def _spread(count: int) -> set[int]:
    """``_ANCHORS`` places spread evenly over ``range(count)``, the first and last among them."""
    return {k * (count - 1) // (_ANCHORS - 1) for k in range(_ANCHORS)}


def _against_keyframes_seen(entries: Sequence[Any], packets: TrackPackets) -> str:
    """ "" when each keyframe of FFmpeg's index is a keyframe of the tables, in its cluster; else the first that is not.

    Such an index (Matroska's) holds the keyframes FFmpeg has read so far, at their cluster's offset and time.
    """
    assert packets.index_pos is not None
    if not len(entries):
        return "FFmpeg's index holds no keyframe"
    keyframes = np.flatnonzero(packets.key)
    times, clusters = packets.dts[keyframes], packets.index_pos[keyframes]
    for i in range(min(len(entries), _ANCHORS)):
        entry = entries[i]
        if not entry.is_keyframe or not ((times == entry.timestamp) & (clusters == entry.pos)).any():
            return f"FFmpeg's index differs from the tables at keyframe {i}"
    return ""


def _checked_in_chunks(
    check: Callable[[np.ndarray, np.ndarray, np.ndarray], str], file: BinaryIO, pos: np.ndarray, size: np.ndarray
) -> str:
    """``check`` (see ``packets.array_check``) over every packet, in runs of packets about ``_CHECK_BYTES`` long.

    Each packet is checked on its own bytes, so runs give what one read of all of them gives.
    A run holds the packets that start in one ``_CHECK_BYTES`` window of the file, each whole.
    """
    order = np.argsort(pos, kind="stable")  # already sorted in files written in decoding order
    pos, size = pos[order], size[order]
    window = (pos - pos[0]) // _CHECK_BYTES
    bounds = [0, *(np.flatnonzero(np.diff(window)) + 1).tolist(), len(pos)]
    for first, stop in itertools.pairwise(bounds):
        begin, end = int(pos[first]), int((pos[first:stop] + size[first:stop]).max())
        data = np.frombuffer(read_at(file, begin, end - begin), dtype=np.uint8)
        if len(data) != end - begin:
            return "the file ends inside a packet"
        problem = check(data, pos[first:stop] - begin, size[first:stop])
        if problem:
            return problem
    return ""


def _first_packets(
    container: InputContainer, stream: VideoStream, count: int, pts_only: bool
) -> list[tuple[int, int | None, int]] | str:
    """The first ``count`` packets' ``(pts, dts, pos)``, or why they cannot anchor the tables.

    With ``pts_only`` a packet's ``dts`` is None (FFmpeg guesses them, late).
    """
    found: list[tuple[int, int | None, int]] = []
    try:
        for packet in container.demux(stream):
            if len(found) == count:
                break
            if packet.pts is None or (packet.dts is None and not pts_only) or packet.pos is None or packet.is_discard:
                return "a first packet has no timestamp or offset, or is to be discarded"
            found.append((packet.pts, None if pts_only else packet.dts, packet.pos))
    except av.error.FFmpegError as exc:
        return f"the first packets cannot be read ({exc})"
    return found if len(found) == count else "fewer packets than the tables hold"
