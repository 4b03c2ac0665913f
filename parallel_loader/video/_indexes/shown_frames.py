"""Which VP8, VP9 and AV1 packets show a frame, and which are keyframes: read from each packet's own headers.

A packet of these codecs may decode to no frame. A *hidden* frame (an
alternate reference) updates the decoder's references but is never shown.
VP9 packs a hidden frame with the next shown one in a *superframe*. That is one
packet, whose last bytes index its frames' sizes. An AV1 packet is a
temporal unit: its frame headers say which frames show, and a header may show
a frame decoded earlier (``show_existing_frame``). So decoding gives one frame
per packet that shows one, and none for the others.

``shown_frames`` reads those headers for every packet of a stream:

* VP8: the frame tag's ``key_frame`` and ``show_frame`` bits;
* VP9: each frame's ``show_existing_frame``, ``frame_type`` and ``show_frame``,
  found through the superframe index as FFmpeg's decoder splits it;
* AV1: the OBU headers, and each frame header's first bits.

A packet is a keyframe when its first frame is a key frame that is shown.
Decoding may start there and give the frames decoding from the first gives.
It refuses, with the reason, what it does not read as the decoder does:

* a packet showing two frames, an unknown frame marker or VP8 version;
* an AV1 OBU with layers, tile groups in OBUs of their own, or a still picture's header.

Nothing here decodes. See :doc:`/video/first_touch`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

__all__ = ["ShownFrames", "SHOWN_FRAME_CODECS", "shown_frames"]


@dataclass(frozen=True, eq=False)
class ShownFrames:
    """Per packet: whether it shows a frame (exactly one), and whether decoding may start there."""

    shown: np.ndarray  # bool
    key: np.ndarray  # bool: its first frame is a key frame, and shown


def shown_frames(codec: str, data: np.ndarray, pos: np.ndarray, size: np.ndarray) -> ShownFrames | str:
    """The frames ``codec``'s packets show, or why they cannot be read here.

    ``codec`` is FFmpeg's canonical name (``vp8``, ``vp9``, ``av1``). ``data``
    holds the bytes (uint8); packet ``k`` is ``data[pos[k]:pos[k] + size[k]]``.
    Raises nothing: a header that cannot be read gives its reason.
    """
    try:
        return _READERS[codec](data, pos, size)
    except IndexError:
        return f"a {codec} packet ends inside its headers"


def _vp8(data: np.ndarray, pos: np.ndarray, size: np.ndarray) -> ShownFrames | str:
    """The 3-byte frame tag: bit 0 is 0 for a key frame, bits 1-3 the version, bit 4 ``show_frame``."""
    if (size < 3).any():
        return "a VP8 packet shorter than its frame tag"
    tag = data[pos]
    if ((tag >> 1) & 7).max() > 3:
        return "a VP8 frame of an unknown version"
    key = (tag & 1) == 0
    starts = pos[key][:, None] + np.arange(3, 6)
    if (size[key] < 10).any() or (data[starts] != (0x9D, 0x01, 0x2A)).any():
        return "a VP8 key frame without its start code"
    shown = ((tag >> 4) & 1) == 1
    return ShownFrames(shown, key & shown)


_VP9_SUPERFRAME = 0xC0  # the top 3 bits of a superframe index's first and last byte


def _vp9(data: np.ndarray, pos: np.ndarray, size: np.ndarray) -> ShownFrames | str:
    """Each frame's first byte gives its marker, profile, ``show_existing_frame``, ``frame_type``, ``show_frame``."""
    if (size < 1).any():
        return "an empty VP9 packet"
    count = len(pos)
    owner, starts, leading = [], [], []  # for each frame of a superframe: its packet, offset, whether first
    for k in np.flatnonzero((data[pos + size - 1] & 0xE0) == _VP9_SUPERFRAME).tolist():  # those that may be one
        frames = _vp9_superframe(data, int(pos[k]), int(size[k]))
        if isinstance(frames, str):
            return frames
        for i, at in enumerate(frames or ()):
            owner.append(k)
            starts.append(at)
            leading.append(i == 0)
    single = np.ones(count, dtype=bool)
    single[owner] = False
    owner_all = np.concatenate((np.flatnonzero(single), np.asarray(owner, dtype=np.int64)))
    first_all = np.concatenate((single[single], np.asarray(leading, dtype=bool)))
    seen = _vp9_frames(data[np.concatenate((pos[single], np.asarray(starts, dtype=np.int64)))])
    if isinstance(seen, str):
        return seen
    shown = np.bincount(owner_all, weights=seen[0], minlength=count)
    if (shown > 1).any():
        return f"a VP9 packet shows {int(shown.max())} frames"
    key = np.zeros(count, dtype=bool)
    key[owner_all[first_all]] = seen[1][first_all]
    return ShownFrames(shown == 1, key)


def _vp9_frames(first: np.ndarray) -> tuple[np.ndarray, np.ndarray] | str:
    """``(shown, shown key frame)`` of VP9 frames from each one's first byte, or why not.

    The byte holds ``frame_marker`` (2 bits, always 2) and the profile (low bit, high bit).
    A reserved bit follows in profile 3. Then come ``show_existing_frame``,
    ``frame_type`` (0: key frame) and ``show_frame``.
    """
    first = first.astype(np.int64)
    if ((first >> 6) != 2).any():
        return "a VP9 frame without its frame marker"
    profile = ((first >> 5) & 1) | ((first >> 3) & 2)
    bits = first << (profile == 3)  # profile 3 has a reserved bit before show_existing_frame
    existing = ((bits >> 3) & 1) == 1
    key = ~existing & (((bits >> 2) & 1) == 0)
    shown = existing | (((bits >> 1) & 1) == 1)
    return shown, key & shown


def _vp9_superframe(data: np.ndarray, at: int, size: int) -> list[int] | str | None:
    """Where each frame of a superframe starts, as FFmpeg splits it; None if the packet is no superframe."""
    marker = int(data[at + size - 1])
    width, count = 1 + ((marker >> 3) & 3), 1 + (marker & 7)
    index = 2 + width * count
    if size < index or int(data[at + size - index]) != marker:
        return None
    fields = data[at + size - index + 1 : at + size - 1].tobytes()
    sizes = [int.from_bytes(fields[i : i + width], "little") for i in range(0, width * count, width)]
    if sum(sizes) != size - index or min(sizes) <= 0:
        return "a VP9 superframe whose index does not add up to its packet"
    starts = [at]
    for length in sizes[:-1]:
        starts.append(starts[-1] + length)
    return starts


# AV1 OBU types (the AV1 specification, 6.2.2).
_SEQUENCE_HEADER, _FRAME_HEADER, _TILE_GROUP, _FRAME, _TILE_LIST = 1, 3, 4, 6, 8


def _av1(data: np.ndarray, pos: np.ndarray, size: np.ndarray) -> ShownFrames | str:
    """Each temporal unit's OBUs: its frame headers say which frames show, and whether the first is a key frame."""
    shown = np.zeros(len(pos), dtype=bool)
    key = np.zeros(len(pos), dtype=bool)
    raw = data.tobytes()
    for k, (begin, length) in enumerate(zip(pos.tolist(), size.tolist(), strict=True)):
        found = _av1_unit(raw, begin, begin + length)
        if isinstance(found, str):
            return found
        shown[k], key[k] = found
    return ShownFrames(shown, key)


def _av1_unit(raw: bytes, at: int, end: int) -> tuple[bool, bool] | str:
    """``(shows a frame, starts with a shown key frame)`` for the temporal unit ``raw[at:end]``, or why not."""
    shown = 0
    key: bool | None = None  # decided by the first frame header
    while at < end:
        header = raw[at]
        kind, extension, sized = (header >> 3) & 15, header & 4, header & 2
        if header & 0x80:
            return "an AV1 OBU with its forbidden bit set"
        if extension:
            return "an AV1 OBU with an extension (scalable layers)"
        at += 1
        length = end - at
        if sized:
            length, at = _leb128(raw, at)
        body, at = at, at + length
        if at > end or (length == 0 and kind in (_SEQUENCE_HEADER, _FRAME_HEADER, _FRAME)):
            return "an AV1 OBU reaches past its packet"
        if kind == _SEQUENCE_HEADER and raw[body] & 0x08:
            return "an AV1 still picture's sequence header (reduced_still_picture_header)"
        if kind in (_TILE_GROUP, _TILE_LIST):
            return "AV1 tile groups in OBUs of their own"
        if kind in (_FRAME_HEADER, _FRAME):
            first = raw[body]
            existing = first >> 7
            if kind == _FRAME_HEADER and not existing:
                return "an AV1 frame header whose tiles are in OBUs of their own"
            frame_type, show = (first >> 5) & 3, (first >> 4) & 1
            shown += existing or show
            if key is None:
                key = not existing and frame_type == 0 and show == 1
    if shown > 1:
        return f"an AV1 temporal unit shows {shown} frames"
    return shown == 1, bool(key)


def _leb128(raw: bytes, at: int) -> tuple[int, int]:
    """The unsigned LEB128 number at ``at`` (at most 8 bytes), and the offset after it."""
    value = 0
    for i in range(8):
        byte = raw[at + i]
        value |= (byte & 0x7F) << (7 * i)
        if not byte & 0x80:
            return value, at + i + 1
    raise IndexError("a LEB128 number of more than 8 bytes")


_READERS: dict[str, Callable[[np.ndarray, np.ndarray, np.ndarray], ShownFrames | str]] = {
    "vp8": _vp8,
    "vp9": _vp9,
    "av1": _av1,
}
SHOWN_FRAME_CODECS = frozenset(_READERS)  # codecs whose packets ``shown_frames`` reads
