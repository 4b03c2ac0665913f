"""Two readers for ``video_cold``: the physical limit of one clip, and SPDL's time-window route.

``LimitReader`` decodes exactly the packets a clip needs, with PyAV: from the
keyframe before its first frame to the last packet its last frame needs, the
frames nobody refers to skipped unless the clip keeps them. Each kept frame is
scaled to RGB as ``read_clip`` scales it (FFmpeg's area filter). Everything a
reader would have to learn (each packet's offset, size, timestamp and keyframe
flag, and the decoder's parameters) is learnt before the timing, in ``prepare``:
it is the cost of a clip with perfect knowledge of the file, the limit the
other readers' CPU per clip is measured against.

``spdl_reader`` is SPDL's route for a clip (``spdl`` on PyPI): demux the time
window the clip spans, decode it through a trim and scale filter to RGB, and keep
every ``stride``-th frame.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path

import av
import numpy as np
from av.video.reformatter import VideoReformatter

__all__ = ["LimitReader", "spdl_environment", "spdl_in_order", "spdl_reader"]


@dataclass(frozen=True)
class _Packets:
    """A file's video packets in decoding order, and what a decoder needs to start."""

    codec: str
    extradata: bytes | None
    width: int
    height: int
    pos: np.ndarray
    size: np.ndarray
    pts: np.ndarray
    key: np.ndarray
    frames: np.ndarray  # the presentation timestamps, sorted: frame i is frames[i]


class LimitReader:
    """Clips decoded from exactly the packets they need (see the module docstring)."""

    def __init__(self, clip_len: int, stride: int, size: tuple[int, int]) -> None:
        self.clip_len, self.stride = clip_len, stride
        self.height, self.width = size
        self._files: dict[str, _Packets] = {}

    def prepare(self, paths: Sequence[str]) -> None:
        """Learn every file's packets (not timed)."""
        for path in paths:
            self._files[path] = _packets(path)

    def __call__(self, path: str, start: int) -> np.ndarray:
        table = self._files[path]
        wanted = {int(table.frames[start + k * self.stride]): k for k in range(self.clip_len)}
        last = int(table.frames[start + (self.clip_len - 1) * self.stride])
        before = table.key & (table.pts <= int(table.frames[start]))
        first = int(np.flatnonzero(before)[-1])
        stop = first + int(np.flatnonzero(table.pts[first:] <= last)[-1]) + 1
        begin, end = int(table.pos[first]), int((table.pos[first:stop] + table.size[first:stop]).max())
        with open(path, "rb") as file:
            file.seek(begin)
            data = file.read(end - begin)
        codec = av.CodecContext.create(table.codec, "r")
        codec.thread_count = 1
        if table.extradata:
            codec.extradata = table.extradata
        codec.width, codec.height = table.width, table.height
        clip = np.empty((self.clip_len, self.height, self.width, 3), np.uint8)
        reformatter, found, skipping = VideoReformatter(), 0, False
        for j in [*range(first, stop), None]:
            packet = None
            if j is not None:
                at, length = int(table.pos[j]) - begin, int(table.size[j])
                packet = av.Packet(length)
                memoryview(packet)[:] = data[at : at + length]
                packet.pts = int(table.pts[j])
                skip = j != first and packet.pts not in wanted
                if skip != skipping:
                    codec.skip_frame, skipping = ("NONREF" if skip else "DEFAULT"), skip
            for frame in codec.decode(packet):
                k = wanted.get(frame.pts)
                if k is not None:
                    rgb = reformatter.reformat(
                        frame, width=self.width, height=self.height, format="rgb24", interpolation="AREA", threads=1
                    )
                    clip[k] = rgb.to_ndarray()
                    found += 1
        if found != self.clip_len:
            raise RuntimeError(f"{path}: the limit reader decoded {found} of {self.clip_len} frames from {start}")
        return clip


def _packets(path: str) -> _Packets:
    with open(path, "rb") as file:
        data = file.read()
    rows = []
    with av.open(path) as container:
        stream = container.streams.video[0]
        for packet in container.demux(stream):
            if packet.size:
                payload = bytes(packet)
                found = data.find(payload, packet.pos, packet.pos + packet.size + 64)  # AVI may count a chunk header
                if found < 0:
                    raise RuntimeError(f"{path}: a packet is not where the container says")
                rows.append((found, packet.size, packet.pts, packet.is_keyframe))
        context = stream.codec_context
        extradata = bytes(context.extradata) if context.extradata else None
        codec, width, height = context.name, context.width, context.height
    pos, size, pts, key = (np.asarray(column) for column in zip(*rows, strict=True))
    return _Packets(codec, extradata, width, height, pos, size, pts, key.astype(bool), np.sort(pts))


def spdl_reader(clip_len: int, stride: int, size: tuple[int, int]) -> Callable[[str, int], np.ndarray]:
    """SPDL's clip: demux the window, decode through a trim and scale filter, keep every ``stride``-th frame."""
    import spdl.io

    height, width = size
    span = (clip_len - 1) * stride + 1
    rates: dict[str, Fraction] = {}

    def read(path: str, start: int) -> np.ndarray:
        rate = rates.get(path)
        if rate is None:
            rate = rates.setdefault(path, _frame_rate(path))
        # Half a frame either side: the window then holds exactly frames start .. start + span - 1.
        window = (float((start - Fraction(1, 2)) / rate), float((start + span - Fraction(1, 2)) / rate))
        if window[0] > 0:
            packets = spdl.io.demux_video(path, timestamp=window)
        else:  # SPDL cannot seek an AVI to 0 ("Operation not permitted"): the whole file, trimmed by the filter
            packets, window = spdl.io.demux_video(path), (0.0, window[1])
        desc = spdl.io.get_video_filter_desc(
            timestamp=window, scale_width=width, scale_height=height, scale_mode=None, scale_algo="area"
        )
        frames = spdl.io.decode_packets(packets, filter_desc=desc)
        clip = spdl.io.to_numpy(spdl.io.convert_frames(frames))[::stride][:clip_len]
        if len(clip) != clip_len:
            raise RuntimeError(f"{path}: spdl gave {len(clip)} of {clip_len} frames from {start}")
        return clip

    return read


def spdl_in_order(size: tuple[int, int]) -> Callable[[str, int], np.ndarray]:
    """SPDL's reference: frames 0 to ``last`` decoded in order, scaled by the same filter."""
    import spdl.io

    height, width = size

    def read(path: str, last: int) -> np.ndarray:
        desc = spdl.io.get_video_filter_desc(scale_width=width, scale_height=height, scale_mode=None, scale_algo="area")
        frames = spdl.io.decode_packets(spdl.io.demux_video(path), filter_desc=desc)
        return spdl.io.to_numpy(spdl.io.convert_frames(frames))[: last + 1]

    return read


def spdl_environment(links: Path) -> dict[str, str]:
    """The environment a process needs for SPDL to load the FFmpeg that PyAV's wheel bundles.

    SPDL's wheel has no FFmpeg of its own: it loads ``libavutil.so.N`` and the rest by name.
    PyAV's wheel holds them under renamed files; ``links`` gets links by the plain names,
    so both libraries decode with one FFmpeg. Empty when PyAV's wheel holds none.
    """
    bundled = Path(av.__file__).parent.parent / "av.libs"
    names = {}
    for library in bundled.glob("lib*-*.so.*"):
        plain = re.fullmatch(r"(lib(?:av\w+|sw\w+))-[0-9a-f]{8}\.so\.(\d+)(?:\.\d+)*", library.name)
        if plain:
            names[f"{plain[1]}.so.{plain[2]}"] = library
    if not names:
        return {}
    links.mkdir(parents=True, exist_ok=True)
    for name, library in names.items():
        if not (links / name).exists():
            (links / name).symlink_to(library)
    found = [str(links), str(bundled), *filter(None, [os.environ.get("LD_LIBRARY_PATH")])]
    return {"LD_LIBRARY_PATH": os.pathsep.join(found)}


def _frame_rate(path: str) -> Fraction:
    """The stream's average frame rate, from the header (SPDL's own, as a fraction)."""
    import spdl.io

    demuxer = spdl.io.Demuxer(path)
    codec = demuxer.video_codec
    return Fraction(*codec.frame_rate) if isinstance(codec.frame_rate, tuple) else Fraction(codec.frame_rate)
