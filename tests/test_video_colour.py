"""Colours as FFmpeg's command line makes them: the ``scale`` filter's on deep formats, unchanged on 8-bit ones.

The reference is FFmpeg's own filter graph run in this process (buffer, then
``scale``, ``format=rgb24``, buffersink): the filter the ``ffmpeg`` command line
converts frames with. Its defaults hold at the frame's size; ``flags=area``
when scaling, since ``read_clip`` scales by area averaging. The files hold
saturated colour blocks, so that 4:2:0 and 4:2:2 chroma has edges.
"""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path

import av
import av.filter
import numpy as np
import pytest

from parallel_loader.video import IndexCache, read_clip
from parallel_loader.video._media.pixels import RGBFrames
from parallel_loader.video._read import remote as remote_reading

N = 3  # frames per file
HEIGHT, WIDTH = 48, 64
SCALED = (24, 40)  # (height, width) for size=
LEVELS = 4  # how far from FFmpeg's filter a deep format may be, per channel

COLOURS = np.array([(255, 0, 0), (0, 255, 0), (0, 0, 255), (255, 255, 0), (255, 0, 255), (0, 255, 255), (0, 0, 0)])

# name -> (codec, pixel format, encoder options)
DEEP = {
    "h264_420_10bit": ("libx264", "yuv420p10le", {"crf": "12"}),
    "h264_422_10bit": ("libx264", "yuv422p10le", {"crf": "12"}),
    "h264_444_10bit": ("libx264", "yuv444p10le", {"crf": "12"}),
    "hevc_420_10bit": ("libx265", "yuv420p10le", {"crf": "12", "x265-params": "log-level=error"}),
    "hevc_420_12bit": ("libx265", "yuv420p12le", {"crf": "12", "x265-params": "log-level=error"}),
}
EIGHT_BIT = {
    "h264_420": ("libx264", "yuv420p", {"crf": "12"}),
    "h264_422": ("libx264", "yuv422p", {"crf": "12"}),
}


def blocks(i: int) -> np.ndarray:
    """Frame ``i``: 8x8 blocks of saturated colours, shifted by one block per frame."""
    rows, cols = np.indices((HEIGHT // 8, WIDTH // 8))
    image = COLOURS[(cols + 3 * rows + i) % len(COLOURS)].astype(np.uint8)
    return image.repeat(8, axis=0).repeat(8, axis=1)


def write_blocks(path: Path, codec: str, pix_fmt: str, options: dict[str, str]) -> Path:
    with av.open(str(path), "w") as output:
        stream = output.add_stream(codec, rate=25)
        stream.width, stream.height, stream.pix_fmt = WIDTH, HEIGHT, pix_fmt
        stream.options = options
        for i in range(N):
            output.mux(stream.encode(av.VideoFrame.from_ndarray(blocks(i), format="rgb24")))
        output.mux(stream.encode())
    return path


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("colour")
    return {
        name: write_blocks(root / f"{name}.mp4", codec, pix_fmt, options)
        for name, (codec, pix_fmt, options) in {**DEEP, **EIGHT_BIT}.items()
    }


def decoded(path: Path) -> list[av.VideoFrame]:
    with av.open(str(path)) as container:
        return list(container.decode(video=0))


def ffmpeg_rgb(frame: av.VideoFrame, size: tuple[int, int] | None = None) -> np.ndarray:
    """``frame`` as FFmpeg's ``scale`` filter makes it RGB: at its size with the defaults, else by area."""
    graph = av.filter.Graph()
    graph.threads = 1
    buffer = graph.add_buffer(width=frame.width, height=frame.height, format=frame.format, time_base=Fraction(1, 25))
    height, width = size or (frame.height, frame.width)
    scale = graph.add("scale", f"{width}:{height}" + (":flags=area" if size else ""))
    rgb = graph.add("format", "rgb24")
    sink = graph.add("buffersink")
    graph.link_nodes(buffer, scale, rgb, sink).configure()
    graph.push(frame)
    return graph.pull().to_ndarray()


def swscale_rgb(frame: av.VideoFrame, size: tuple[int, int] | None = None) -> np.ndarray:
    """``frame`` as swscale called directly with area averaging makes it RGB (what ``read_clip`` did before)."""
    height, width = size or (frame.height, frame.width)
    return frame.reformat(width=width, height=height, format="rgb24", interpolation="AREA").to_ndarray()


def largest_difference(a: np.ndarray, b: np.ndarray) -> int:
    return int(np.abs(a.astype(np.int16) - b.astype(np.int16)).max())


@pytest.mark.parametrize("size", [None, SCALED])
@pytest.mark.parametrize("name", list(DEEP))
def test_deep_formats_match_ffmpegs_scale_filter(files, name, size):
    frames = decoded(files[name])
    assert frames[0].format.name == DEEP[name][1]
    reference = np.stack([ffmpeg_rgb(frame, size) for frame in frames])
    clip = read_clip(files[name], 0, N, size=size)
    assert clip.shape == reference.shape and clip.dtype == np.uint8
    assert largest_difference(clip, reference) <= LEVELS, name
    # A clip that starts later, read by seeking from the keyframe before it: still FFmpeg's.
    assert largest_difference(read_clip(files[name], 1, N - 1, size=size), reference[1:]) <= LEVELS


@pytest.mark.parametrize("name", ["h264_420_10bit", "hevc_420_10bit"])
def test_deep_formats_read_at_a_url_match_ffmpegs_scale_filter(files, name, tmp_path, monkeypatch):
    """A URL's clips decode from ranged reads without the container; their colours are FFmpeg's all the same."""
    spans = []
    read_span = remote_reading._read_span
    monkeypatch.setattr(remote_reading, "_read_span", lambda *args: spans.append(args) or read_span(*args))
    cache = IndexCache(tmp_path)
    frames = decoded(files[name])
    for size in (None, SCALED, None):  # the first read makes the index; the others read a byte range
        clip = read_clip(files[name].as_uri(), 1, N - 1, size=size, index_cache=cache)
        assert largest_difference(clip, np.stack([ffmpeg_rgb(frame, size) for frame in frames[1:]])) <= LEVELS
    assert len(spans) == 2


def test_the_colour_edges_are_where_swscale_alone_differs(files):
    """The files test something: at their chroma edges, swscale called directly is far from the filter."""
    frame = decoded(files["h264_420_10bit"])[0]
    assert largest_difference(swscale_rgb(frame), ffmpeg_rgb(frame)) > 32
    # And FFmpeg's colours are those written, up to what 4:2:0 chroma and the codec lose at the edges.
    assert np.abs(ffmpeg_rgb(frame).astype(np.int16) - blocks(0)).mean() < 16


@pytest.mark.parametrize("size", [None, SCALED])
@pytest.mark.parametrize("name", list(EIGHT_BIT))
def test_eight_bit_frames_are_converted_as_before(files, name, size):
    frames = decoded(files[name])
    clip = read_clip(files[name], 0, N, size=size)
    np.testing.assert_array_equal(clip, np.stack([swscale_rgb(frame, size) for frame in frames]))
    if size is None:  # bit-exact with FFmpeg's command line at the file's size
        np.testing.assert_array_equal(clip, np.stack([ffmpeg_rgb(frame) for frame in frames]))


@pytest.mark.parametrize("pix_fmt", ["p010le", "yuv420p12le", "yuv444p12le", "gray10le", "rgb48le", "gbrp10le"])
def test_other_deep_formats_match_ffmpegs_scale_filter(files, pix_fmt):
    """Formats hardware decoders and other codecs give, made from a decoded frame."""
    frame = decoded(files["h264_420_10bit"])[0].reformat(format=pix_fmt)
    for size in (None, SCALED):
        assert largest_difference(RGBFrames(size).convert(frame), ffmpeg_rgb(frame, size)) <= LEVELS, (pix_fmt, size)


def test_a_frame_of_another_size_or_format_gets_its_own_scaler(files):
    deep = decoded(files["h264_420_10bit"])[0]
    smaller = deep.reformat(width=32, height=32)
    eight_bit = deep.reformat(format="yuv420p")
    rgb = RGBFrames(SCALED)
    for frame in (deep, smaller, eight_bit, deep):
        reference = swscale_rgb(frame, SCALED) if frame is eight_bit else ffmpeg_rgb(frame, SCALED)
        assert largest_difference(rgb.convert(frame), reference) <= LEVELS, (frame.format.name, frame.width)
