"""Small videos for tests, whose pixels say which video and which frame they are.

``write_video`` writes them with OpenCV, by default in the lossless FFV1 codec,
so values survive encoding exactly; ``write_encoded_video`` writes them with
PyAV in lossy codecs and odd containers (values then survive roughly). In
frame ``i`` of video ``v``, channel 0 (red) is ``FRAME_STEP * i`` everywhere,
channel 1 (green) is ``VIDEO_STEP * v + VIDEO_OFFSET`` everywhere, and channel 2
(blue) rises from left to right and from top to bottom, at different rates, so
that a horizontal flip shows and a crop's window (top and left) can be found.
``overstate_frame_count`` and ``truncate`` spoil written files as real ones come spoilt;
``pack_b_frames`` rewrites an MPEG-4 AVI as DivX 5 wrote them ("packed B-frames").
"""

from __future__ import annotations

import contextlib
import os
import struct
from collections.abc import Iterator
from fractions import Fraction
from pathlib import Path

import av
import cv2
import numpy as np

FRAME_STEP = 4  # up to 64 frames
VIDEO_STEP = 12  # up to 20 videos
VIDEO_OFFSET = 6
HEIGHT, WIDTH = 32, 40
X_RAMP, Y_RAMP = 150, 100  # blue's rise across the width and down the height; together at most 255


def write_video(
    path: Path,
    n_frames: int,
    video_id: int = 0,
    size: tuple[int, int] = (HEIGHT, WIDTH),
    fourcc: str = "FFV1",
    fps: float = 25.0,
) -> Path:
    """Write an indexed video (see the module docstring) with OpenCV and return its path."""
    height, width = size
    path.parent.mkdir(parents=True, exist_ok=True)
    writer = cv2.VideoWriter(str(path), cv2.VideoWriter_fourcc(*fourcc), fps, (width, height))
    assert writer.isOpened(), f"OpenCV cannot write {fourcc} here"
    for i in range(n_frames):
        writer.write(indexed_frame(i, video_id, size)[..., ::-1])  # OpenCV writes BGR
    writer.release()
    return path


def write_encoded_video(
    path: Path,
    n_frames: int,
    codec: str,
    *,
    container: str | None = None,
    gop: int = 12,
    b_frames: int = 0,
    timestamps: list[int] | None = None,
    codec_tag: str | None = None,
    size: tuple[int, int] = (48, 64),
    open_gop: bool = False,
    pix_fmt: str | None = None,
    options: dict[str, str] | None = None,
    container_options: dict[str, str] | None = None,
    audio_first: bool = False,
    video_id: int = 0,
) -> Path:
    """Write an indexed video with PyAV (any codec its FFmpeg encodes) and return its path.

    A block moves across the frame, so that predicted frames differ from their
    references. ``timestamps`` gives each frame's timestamp in units of 1/25 s
    (default ``0, 1, 2, ...``): gaps make a file whose timestamps skip frames.
    ``gop`` is the keyframe interval; ``b_frames`` how many B-frames may follow
    each other. With ``container`` ``"h264"`` the file is a raw H.264 stream,
    which has no timestamps at all. ``open_gop`` (libx264): keyframes after the
    first are open-GOP I-frames, followed in decoding order by B-frames that show
    before them and refer to the group before ("leading frames"). ``pix_fmt``
    is the stream's pixel format (default 4:2:0, 8 bits; ``pal8`` writes paletted frames).
    ``options`` go to the encoder, ``container_options`` to the muxer; ``audio_first``
    puts a silent audio stream before the video one. ``video_id`` is the video's number in its pixels.
    """
    with _scheduling_kept():
        return _write_encoded_video(**locals())


@contextlib.contextmanager
def _scheduling_kept() -> Iterator[None]:
    """Put back this thread's scheduling policy: SVT-AV1 run as root leaves the caller SCHED_FIFO at priority 99.

    A test process left so starved everything else on the machine, a second test process included.
    """
    policy, param = os.sched_getscheduler(0), os.sched_getparam(0)
    try:
        yield
    finally:
        if os.sched_getscheduler(0) != policy:
            os.sched_setscheduler(0, policy, param)


def _write_encoded_video(
    path: Path,
    n_frames: int,
    codec: str,
    container: str | None,
    gop: int,
    b_frames: int,
    timestamps: list[int] | None,
    codec_tag: str | None,
    size: tuple[int, int],
    open_gop: bool,
    pix_fmt: str | None,
    options: dict[str, str] | None,
    container_options: dict[str, str] | None,
    audio_first: bool,
    video_id: int,
) -> Path:
    height, width = size
    path.parent.mkdir(parents=True, exist_ok=True)
    with av.open(str(path), "w", format=container, options=container_options or {}) as output:
        audio = output.add_stream("aac", rate=8000) if audio_first else None
        stream = output.add_stream(codec, rate=25)
        stream.width, stream.height = width, height
        stream.pix_fmt = pix_fmt or ("yuvj420p" if codec == "mjpeg" else "yuv420p")
        stream.gop_size = gop
        stream.max_b_frames = b_frames
        stream.time_base = Fraction(1, 25)
        if codec_tag:
            stream.codec_tag = codec_tag
        stream.bit_rate = 2_000_000  # high for such small frames, so that the pixels say which frame is which
        if codec == "libx264":  # fixed keyframe interval, no scene-cut keyframes, high quality
            stream.options = {"g": str(gop), "keyint_min": str(gop), "sc_threshold": "0", "bf": str(b_frames)}
            stream.options["crf"] = "12"
            if open_gop:
                stream.options["x264-params"] = "open-gop=1"
        if options:
            stream.options = {**stream.options, **options}
        for i in range(n_frames):
            pixels = indexed_frame(i, video_id, size)
            left = 3 * i % (width - 8)  # an 8x8 block, 3 pixels further right each frame
            pixels[height // 4 : height // 4 + 8, left : left + 8, 1] = 255
            frame = _palette_frame(pixels) if pix_fmt == "pal8" else av.VideoFrame.from_ndarray(pixels, format="rgb24")
            frame.pts = i if timestamps is None else timestamps[i]
            frame.time_base = Fraction(1, 25)
            output.mux(stream.encode(frame))
            if audio is not None:
                silence = av.AudioFrame.from_ndarray(np.zeros((1, 320), np.float32), format="fltp", layout="mono")
                silence.sample_rate, silence.pts = 8000, 320 * i
                output.mux(audio.encode(silence))
        output.mux(stream.encode())
        if audio is not None:
            output.mux(audio.encode())
    return path


def _palette_frame(pixels: np.ndarray) -> av.VideoFrame:
    """An RGB frame as a paletted (pal8) frame, blue cut to multiples of 8 so that the colours fit 256."""
    pixels = pixels & np.array([255, 255, 248], np.uint8)
    colors, inverse = np.unique(pixels.reshape(-1, 3), axis=0, return_inverse=True)
    assert len(colors) <= 256, f"{len(colors)} colours do not fit a palette"
    palette = np.zeros((256, 4), np.uint8)  # ARGB
    palette[: len(colors), 0] = 255
    palette[: len(colors), 1:] = colors
    image = inverse.reshape(pixels.shape[:2]).astype(np.uint8)
    return av.VideoFrame.from_ndarray((image, palette), format="pal8")


def indexed_frame(i: int, video_id: int, size: tuple[int, int]) -> np.ndarray:
    """Frame ``i`` of video ``video_id`` (see the module docstring), RGB."""
    height, width = size
    ys, xs = np.mgrid[0:height, 0:width]
    frame = np.empty((height, width, 3), np.uint8)
    frame[..., 0] = FRAME_STEP * i % 256
    frame[..., 1] = VIDEO_STEP * video_id + VIDEO_OFFSET
    frame[..., 2] = (X_RAMP * xs / max(1, width - 1) + Y_RAMP * ys / max(1, height - 1)).round()
    return frame


def frame_indices(clip: np.ndarray) -> list[int]:
    """The frame index each frame of an RGB clip (uint8 or float in [0, 1]) encodes."""
    red = _as_uint8(clip)[..., 0].mean(axis=(1, 2))
    return [round(float(v) / FRAME_STEP) for v in red]


def video_id(clip: np.ndarray) -> int:
    """The video id an RGB clip encodes."""
    green = _as_uint8(clip)[..., 1].mean()
    return round((float(green) - VIDEO_OFFSET) / VIDEO_STEP)


def is_flipped(clip: np.ndarray) -> bool:
    """Whether the blue ramp falls from left to right."""
    blue = _as_uint8(clip)[..., 2].astype(float)
    return bool(blue[:, :, 0].mean() > blue[:, :, -1].mean())


def crop_window(clip: np.ndarray, full: np.ndarray) -> tuple[int, int, bool]:
    """Where a uint8 clip was cut from ``full`` (the same frames, uncropped): ``(top, left, flipped)``.

    Fails unless exactly one window of ``full``, flipped or not, equals the clip.
    """
    height, width = clip.shape[1:3]
    matches = []
    for top in range(full.shape[1] - height + 1):
        for left in range(full.shape[2] - width + 1):
            window = full[:, top : top + height, left : left + width]
            for flipped in (False, True):
                if np.array_equal(window[:, :, ::-1] if flipped else window, clip):
                    matches.append((top, left, flipped))
    assert len(matches) == 1, f"the clip matches {len(matches)} windows of the frame: {matches}"
    return matches[0]


def overstate_frame_count(path: Path, frames: int) -> Path:
    """Make an AVI's header claim ``frames`` frames, whatever it holds, as some writers get it wrong.

    Sets the video stream's length (``strh`` ``dwLength``, which FFmpeg and so
    OpenCV read as the frame count) and the file's total (``avih``
    ``dwTotalFrames``); the frames, their timestamps and the file's index stay whole.
    """
    data = bytearray(path.read_bytes())
    main = data.find(b"avih")
    stream = data.find(b"strh")
    while stream >= 0 and data[stream + 8 : stream + 12] != b"vids":  # a chunk is its id, size, then data
        stream = data.find(b"strh", stream + 4)
    assert main >= 0 and stream >= 0, f"{path} is not an AVI with a video stream"
    struct.pack_into("<I", data, main + 8 + 16, frames)  # the 5th dword of the chunk's data
    struct.pack_into("<I", data, stream + 8 + 32, frames)  # the 9th
    path.write_bytes(data)
    return path


def truncate(path: Path, keep: float) -> Path:
    """Cut a file to ``keep`` of its bytes, as an interrupted copy would."""
    data = path.read_bytes()
    path.write_bytes(data[: int(len(data) * keep)])
    return path


def _as_uint8(clip: np.ndarray) -> np.ndarray:
    if clip.dtype == np.uint8:
        return clip
    return (clip * 255).round().astype(np.uint8)


_VOP = b"\x00\x00\x01\xb6"  # MPEG-4 part 2's VOP start code


def pack_b_frames(source: Path, path: Path) -> Path:
    """Rewrite an MPEG-4 part 2 AVI with B-frames (one in a row at most) as DivX 5 packed them; return ``path``.

    Each B-frame goes into the packet of the frame before it in decoding order
    (the P- or I-frame it follows), and an N-VOP (a placeholder VOP that is not
    coded, 6 bytes) takes its place; user data "DivX503b1393p" tells FFmpeg's
    decoder to unpack them. Timestamps count packets, as AVI's do.
    """
    with av.open(str(source)) as container:
        packets = [(bytes(p), p.is_keyframe) for p in container.demux(container.streams.video[0]) if p.size]
    # An N-VOP: P type (01), modulo time base 0, marker, a 5-bit time increment (the
    # encoder's resolution is 25), marker, vop_coded 0, then stuffing to a byte boundary.
    n_vop = _VOP + bytes([0b01010000, 0b01001111])
    chunks: list[tuple[bytes, bool]] = []
    k = 0
    while k < len(packets):
        data, key = packets[k]
        following = packets[k + 1][0] if k + 1 < len(packets) else b""
        if following and _vop_type(following) == 2 and _vop_type(data) != 2:  # a B-frame after this one
            chunks += [(data + following, key), (n_vop, False)]
            k += 2
        else:
            chunks.append((data, key))
            k += 1
    assert any(len(c) == len(n_vop) for c, _ in chunks), f"{source} has no B-frame to pack"
    first, key = chunks[0]
    vop = first.find(_VOP)
    chunks[0] = (first[:vop] + b"\x00\x00\x01\xb2DivX503b1393p" + first[vop:], key)
    with av.open(str(source)) as container, av.open(str(path), "w") as output:
        stream = output.add_stream_from_template(container.streams.video[0])
        for n, (data, key) in enumerate(chunks):
            packet = av.Packet(data)
            packet.pts = packet.dts = n
            packet.time_base = Fraction(1, 25)
            packet.stream = stream
            packet.is_keyframe = key
            output.mux(packet)
    return path


def _vop_type(data: bytes) -> int:
    """The coding type of a packet's first VOP: 0 I, 1 P, 2 B, 3 S."""
    return data[data.find(_VOP) + 4] >> 6


def with_display_matrix(source: Path, path: Path, degrees: int, hflip: bool = False, vflip: bool = False) -> Path:
    """Copy ``source``'s video packets into ``path`` with a display matrix (``degrees`` counterclockwise, then flips).

    The stream is the same bytes, as a phone records upright video stored turned
    (``ffmpeg -display_rotation D -i in.mp4 -c copy out.mp4``); returns ``path``.
    """
    with av.open(str(source)) as container, av.open(str(path), "w") as output:
        template = container.streams.video[0]
        stream = output.add_stream_from_template(template)
        stream.set_display_rotation(degrees, hflip=hflip, vflip=vflip)
        for packet in container.demux(template):
            if packet.size:
                packet.stream = stream
                output.mux(packet)
    return path


def cut_with_edit_list(source: Path, path: Path, cut: int, fps: int = 25) -> Path:
    """``source`` cut at frame ``cut`` without re-encoding (as ``ffmpeg -ss T -i in.mp4 -c copy``); returns ``path``.

    The packets from the keyframe before the cut on are copied, shifted so that
    frame ``cut`` shows at time 0; the MP4 muxer writes an edit list, so the
    frames before the cut decode (later frames refer to them) but are not shown.
    """
    with av.open(str(source)) as container, av.open(str(path), "w") as output:
        template = container.streams.video[0]
        stream = output.add_stream_from_template(template)
        tick = round(1 / (template.time_base * fps))  # timestamp units a frame
        packets = [p for p in container.demux(template) if p.size]
        first = max(k for k, p in enumerate(packets) if p.is_keyframe and p.pts <= cut * tick)
        for packet in packets[first:]:
            packet.pts -= cut * tick
            packet.dts -= cut * tick
            packet.stream = stream
            output.mux(packet)
    return path
