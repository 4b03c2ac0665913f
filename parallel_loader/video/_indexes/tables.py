"""A video's index from its container's own tables, read as whole arrays: the first touch without demuxing.

Demuxing every packet to learn a file's index costs a Python call per packet,
under the GIL. A container that keeps its packet table in its header (MP4/MOV:
see ``mov_tables``) gives the same facts as a few numpy arrays. ``from_tables``
reads them and anchors them to FFmpeg. FFmpeg's own index must hold as many
packets, and agree at a few spread out (offset, size, decoding time, keyframe
flag). The first demuxed packet gives the constant between the tables' times
and FFmpeg's timestamps. Then the same checks as for demuxed packets apply
(``packets.index_of``), on the arrays.

Anything the tables cannot vouch for returns the reason, and the caller demuxes
the file as before. An index made here is checked on every read, as one made
from demuxed packets is. See :doc:`/video/first_touch`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import BinaryIO

import av.error
import numpy as np
from av.container import InputContainer
from av.video.stream import VideoStream

from .._base.facts import VideoIndex
from .mov_tables import read_moov, track_packets
from .packets import family_problem, index_of

__all__ = ["Refused", "TableIndex", "from_tables"]

_ANCHORS = 8  # packets of FFmpeg's index compared with the tables, spread over the file


@dataclass(frozen=True, eq=False)
class TableIndex:
    """A file's index, and its stream's packets (decoding order) as FFmpeg demuxes them."""

    index: VideoIndex
    pos: np.ndarray  # int64 byte offsets
    size: np.ndarray  # int64
    pts: np.ndarray  # int64, FFmpeg's presentation timestamps
    key: np.ndarray  # bool


@dataclass(frozen=True)
class Refused:
    """Why the tables cannot tell, and whether a packet was demuxed (then seek, or open the file again)."""

    reason: str
    demuxed: bool = False


def from_tables(container: InputContainer, stream: VideoStream, file: BinaryIO, file_size: int) -> TableIndex | Refused:
    """The index of ``stream`` from the container's tables, read from ``file``; or why they cannot tell.

    ``stream`` names the track: another stream of the file reads its own table.
    Demuxes at most one packet of ``container``: seek before reading frames from it.
    """
    family = container.format.name.split(",")[0]
    problem = family_problem(family, stream.codec_context.name, bytes_seen=False)
    if not problem and family != "mov":
        problem = f"{family} has no table reader"
    if problem:
        return Refused(problem)
    moov = read_moov(file, file_size)
    if isinstance(moov, str):
        return Refused(moov)
    packets = track_packets(moov, stream.id)
    if isinstance(packets, str):
        return Refused(packets)
    if packets.edits > 1:
        return Refused(f"an edit list of {packets.edits} edits")
    problem = _against_ffmpegs_index(stream, packets.pos, packets.size, packets.dts, packets.key)
    if problem:
        return Refused(problem)
    first = _first_packet(container, stream)
    if isinstance(first, str):
        return Refused(first, demuxed=True)
    pts0, dts0, pos0 = first
    shift = dts0 - int(packets.dts[0])
    if pos0 != int(packets.pos[0]) or pts0 - shift - int(packets.offset[0]) != int(packets.dts[0]):
        return Refused("the first packet is not where the tables put it", demuxed=True)
    pts = packets.dts + packets.offset + shift
    if (packets.size <= 0).any():
        return Refused("an empty packet", demuxed=True)
    if int((packets.pos + packets.size).max()) > file_size:
        return Refused("a packet reaches past the end of the file", demuxed=True)
    index = index_of(pts, pts[packets.key])
    if isinstance(index, str):
        return Refused(index, demuxed=True)
    return TableIndex(index, packets.pos, packets.size, pts, packets.key)


def _against_ffmpegs_index(
    stream: VideoStream, pos: np.ndarray, size: np.ndarray, dts: np.ndarray, key: np.ndarray
) -> str:
    """ "" when FFmpeg's index has as many packets as the tables and agrees at a few; else how it differs.

    PyAV 18.1's entries are views into FFmpeg's memory, good until demuxing starts: read them first.
    """
    entries = stream.index_entries
    count = len(pos)
    if len(entries) != count:
        return f"FFmpeg's index holds {len(entries)} packets, the tables {count}"
    if not count:
        return "no packet"
    shift = entries[0].timestamp - int(dts[0])
    picks = set(np.linspace(0, count - 1, _ANCHORS).astype(int).tolist())
    keyframes = np.flatnonzero(key)
    if len(keyframes):
        picks |= set(keyframes[np.linspace(0, len(keyframes) - 1, _ANCHORS).astype(int)].tolist())
    for i in sorted(picks):
        entry = entries[i]
        ours = (int(pos[i]), int(size[i]), int(dts[i]) + shift, bool(key[i]), False)
        if (entry.pos, entry.size, entry.timestamp, bool(entry.is_keyframe), bool(entry.is_discard)) != ours:
            return f"FFmpeg's index differs from the tables at packet {i}"
    return ""


def _first_packet(container: InputContainer, stream: VideoStream) -> tuple[int, int, int] | str:
    """The first packet's ``(pts, dts, pos)``, or why it cannot anchor the tables."""
    try:
        for packet in container.demux(stream):
            if packet.pts is None or packet.dts is None or packet.pos is None or packet.is_discard:
                return "the first packet has no timestamp or offset, or is to be discarded"
            return packet.pts, packet.dts, packet.pos
    except av.error.FFmpegError as exc:
        return f"the first packet cannot be read ({exc})"
    return "no packet"
