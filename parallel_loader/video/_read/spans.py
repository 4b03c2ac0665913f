"""A clip decoded from its packets' bytes, as the file's packet table lists them: no container, no demuxer.

The *span* of a clip is its packets in decoding order (``PacketTable.span``).
It runs from the keyframe at or before its first frame to the last packet its frames need.
One read fetches their bytes, from a local file or a URL alike. A codec context
fed those packets gives the frames that seeking in the file gives. The same
checks as ``_media.frames.frames_from`` apply: each timestamp known to the index,
frames in order from the keyframe, decoded as a keyframe, none missing. Where one
fails, the caller reads the clip another way. Nothing here starts threads.
See :doc:`/video/first_touch`.
"""

from __future__ import annotations

from collections.abc import Callable

import av
import av.error

from .._base.facts import VideoIndex
from .._indexes.packet_table import PacketTable
from .._media.clip import Clip
from .._media.frames import CONTENT_ERRORS

__all__ = ["decode_span"]


def decode_span(table: PacketTable, index: VideoIndex, clip: Clip, read: Callable[[int, int], bytes]) -> str:
    """Fill ``clip`` from its span's packets; return "" or what did not follow the index (then ``clip`` is partial).

    ``read(begin, end)`` returns bytes ``begin`` to ``end - 1`` of the file, all of them.
    Frames nothing refers to are skipped unless the clip keeps them, as a seeking read skips them.
    """
    key = index.keyframe_before(clip.start)
    span = table.span(index, key, clip.last)
    if span is None:
        return f"no packet of the table holds keyframe {key}"
    first, stop = span
    begin, end = table.byte_range(first, stop)
    data = memoryview(read(begin, end))
    codec = av.CodecContext.create(table.codec, "r")
    codec.thread_count = 1
    if table.extradata:
        codec.extradata = table.extradata
    if table.codec_tag:
        codec.codec_tag = table.codec_tag
    codec.width, codec.height = table.width, table.height
    offsets = (table.pos[first:stop] - begin).tolist()
    rows = zip(offsets, table.size[first:stop].tolist(), table.pts[first:stop].tolist(), strict=True)
    previous = -1  # the last frame decoded
    skipping = False  # whether the decoder now skips frames nothing refers to
    unasked: set[int] = set()  # frames whose packets went to the decoder with skipping on: they may not come out
    try:
        for row in [*rows, None]:
            packet = None  # last: flush the frames the decoder holds back
            if row is not None:
                offset, size, pts = row
                packet = av.Packet(size)  # FFmpeg's zeroed padding after the data: decoders read past its end
                memoryview(packet)[:] = data[offset : offset + size]
                packet.pts = pts
                i = index.frame_at(pts)
                skip = not (i is None or i == key or clip.wants(i))
                if skip:
                    unasked.add(i)
                if skip != skipping:
                    codec.skip_frame, skipping = ("NONREF" if skip else "DEFAULT"), skip
            for frame in codec.decode(packet):
                i = index.frame_at(frame.pts)
                if i is None:
                    return f"timestamp {frame.pts} is unknown to the index"
                if i < key:
                    continue  # an open GOP's leading frame
                if i <= previous or (previous < 0 and i != key):
                    return f"frame {i} decodes after frame {max(previous, key)}"
                if previous >= 0 and not unasked.issuperset(range(previous + 1, i)):
                    return f"frame {i} follows frame {previous}: frames between are missing"
                if previous < 0 and key > 0 and not frame.key_frame:
                    return f"frame {key} does not decode as a keyframe"
                previous = i
                if clip.wants(i):
                    clip.keep(i, frame)
                    if clip.full:
                        return ""
    except CONTENT_ERRORS as exc:
        return f"a packet does not decode ({type(exc).__name__}: {exc})"
    return f"the packets of bytes {begin}-{end - 1} end before frame {clip.last}"
