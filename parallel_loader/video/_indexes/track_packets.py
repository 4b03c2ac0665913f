"""A track's packets as a container's own tables give them: whole arrays, in decoding order.

Each table reader (``mov_tables``, ``avi_tables``, ``mkv_tables``) returns ``TrackPackets``.
``tables`` anchors them to FFmpeg and makes the index. See :doc:`/video/first_touch`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import BinaryIO

import numpy as np

__all__ = ["TrackPackets", "read_at"]


@dataclass(frozen=True, eq=False)
class TrackPackets:
    """A track's packets in decoding order: byte offset, size, decoding time, composition offset, sync flag.

    Times are in the track's time base, before any edit list: FFmpeg's differ by a constant.
    With ``pts_only`` (Matroska) the container stores presentation times only.
    ``dts`` then holds them, ``offset`` is zero, and FFmpeg guesses the decoding times.
    """

    pos: np.ndarray  # int64 offsets of each packet's data
    size: np.ndarray  # int64
    dts: np.ndarray  # int64
    offset: np.ndarray  # int64, composition offset: pts = dts + offset
    key: np.ndarray  # bool
    edits: int = 0  # entries of the edit list that show media (empty edits not counted)
    header: int = 0  # bytes of a chunk header FFmpeg's index counts before each packet's data (AVI: 8)
    pts_only: bool = False  # times are presentation times (see above)
    packet_header: int = 0  # bytes of a block header FFmpeg's packets count before their data (Matroska: 4)
    # Where FFmpeg's index puts each packet, when not at the packet (Matroska: its cluster). Then
    # FFmpeg's index holds only the keyframes it has seen, not every packet.
    index_pos: np.ndarray | None = None
    # The display matrix FFmpeg gives the frames (36 bytes), None for none: frames decoded from
    # bare packets lack it (see ``packet_table``). Only MP4/MOV keep one (AVI none, Matroska refused).
    display_matrix: bytes | None = None


def read_at(file: BinaryIO, start: int, count: int) -> bytes:
    """``count`` bytes of ``file`` from ``start``; fewer at its end."""
    file.seek(start)
    data = bytes(file.read(count))  # no copy of what is bytes already
    if len(data) >= count or not data:
        return data  # a local file's one read: no further copy (a whole file's packets can be megabytes)
    parts, got = [data], len(data)
    while got < count and (chunk := file.read(count - got)):
        parts.append(chunk)
        got += len(chunk)
    return b"".join(parts)
