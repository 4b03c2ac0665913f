"""Videos in memory: bytes, memoryviews and binary file objects read as their files are, and what is refused."""

from __future__ import annotations

import io
import os
from pathlib import Path

import numpy as np
import pytest

from parallel_loader.video import (
    IndexCache,
    VideoDecodeError,
    frame_count,
    probe,
    read_clip,
    read_frames_at,
)
from parallel_loader.video._bytes.memory import in_memory

from .video_files import frame_indices, truncate, write_encoded_video

pytestmark = pytest.mark.timeout(120)

# (file name, writer arguments): the codecs the other tests write, small.
CODECS = {
    "h264_mp4": ("h264.mp4", dict(codec="libx264", gop=10, b_frames=2)),
    "xvid_avi": ("xvid.avi", dict(codec="mpeg4", gop=10, b_frames=2, codec_tag="XVID")),
    "h264_mkv": ("h264.mkv", dict(codec="libx264", gop=10, b_frames=2)),
    "vp9_webm": ("vp9.webm", dict(codec="libvpx-vp9", gop=10)),
}
FRAMES = 40
CLIPS = [(0, 4, 1), (9, 3, 1), (10, 5, 2), (17, 6, 3), (FRAMES - 2, 2, 1)]


@pytest.fixture(scope="module")
def videos(tmp_path_factory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("memory_videos")
    return {name: write_encoded_video(folder / file, FRAMES, **args) for name, (file, args) in CODECS.items()}


def kinds(path: Path) -> dict[str, object]:
    """The same video as each kind of in-memory source."""
    data = path.read_bytes()
    return {
        "bytes": data,
        "bytearray": bytearray(data),
        "memoryview": memoryview(data),
        "BytesIO": io.BytesIO(data),
        "BufferedReader": io.BufferedReader(io.BytesIO(data)),
    }


@pytest.mark.parametrize("codec", CODECS)
def test_clips_from_memory_equal_the_files(videos, codec):
    path = videos[codec]
    cache = IndexCache(None)
    for start, clip_len, stride in CLIPS:
        expected = read_clip(path, start, clip_len, stride, index_cache=IndexCache(None))
        assert frame_indices(expected) == list(range(start, start + clip_len * stride, stride))
        for kind, source in kinds(path).items():
            clip = read_clip(source, start, clip_len, stride, index_cache=cache)
            assert np.array_equal(clip, expected), (codec, kind, start)
        scaled = read_clip(path.read_bytes(), start, clip_len, stride, size=(24, 32), index_cache=cache)
        assert np.array_equal(scaled, read_clip(path, start, clip_len, stride, size=(24, 32), index_cache=cache))
    unseeking = read_clip(path.read_bytes(), 9, 3, seek=False, index_cache=cache)
    assert np.array_equal(unseeking, read_clip(path, 9, 3, index_cache=cache))


@pytest.mark.parametrize("codec", CODECS)
def test_probe_frame_count_and_times_from_memory_equal_the_files(videos, codec):
    path = videos[codec]
    data = path.read_bytes()
    assert probe(data) == probe(path)
    assert probe(io.BytesIO(data), rotate=False) == probe(path, rotate=False)
    assert frame_count(data) == frame_count(path) == FRAMES
    assert frame_count(memoryview(data), exact=False) == frame_count(path, exact=False)
    times = [0.1, 0.5, 1.1, 0.5]
    assert np.array_equal(read_frames_at(data, times), read_frames_at(path, times))


def test_an_in_memory_video_is_indexed_once_and_keyed_by_its_content(videos, tmp_path):
    data = videos["h264_mp4"].read_bytes()
    cache = IndexCache(tmp_path / "store")
    read_clip(data, 3, 2, index_cache=cache)
    assert len(cache) == 1
    read_clip(io.BytesIO(data), 12, 2, index_cache=cache)  # another object, the same bytes: the same index
    read_clip(memoryview(bytearray(data)), 5, 2, index_cache=cache)
    assert len(cache) == 1
    key = in_memory(data).key
    assert key == in_memory(bytearray(data)).key
    assert cache.lookup(key) is not None
    assert (key.size, key.name.startswith("memory:sha256-")) == (len(data), True)
    other = videos["xvid_avi"].read_bytes()
    assert in_memory(other).key.name != key.name
    # Another run (a new cache on the same directory) finds the index kept on disk.
    assert IndexCache(tmp_path / "store").lookup(key) is not None


def test_a_buffer_changed_after_a_read_is_read_as_it_is_now(videos):
    h264, xvid = videos["h264_mp4"].read_bytes(), videos["xvid_avi"].read_bytes()
    buffer = bytearray(h264)
    cache = IndexCache(None)
    first = read_clip(buffer, 0, 2, index_cache=cache)
    buffer[:] = xvid  # the same object, other bytes: another key
    assert np.array_equal(read_clip(buffer, 0, 2, index_cache=cache), read_clip(xvid, 0, 2, index_cache=cache))
    assert not np.array_equal(first, read_clip(buffer, 0, 2, index_cache=cache))


def test_a_file_object_is_read_from_its_start_and_left_where_it_was(videos, tmp_path):
    path = videos["xvid_avi"]
    expected = read_clip(path, 4, 3, index_cache=IndexCache(None))
    with open(path, "rb") as file:
        file.seek(100)
        assert np.array_equal(read_clip(file, 4, 3, index_cache=IndexCache(None)), expected)
        assert file.tell() == 100
        assert probe(file) == probe(path)  # twice from one object: the whole video each time


def test_a_stream_that_cannot_seek_is_read_to_its_end(videos):
    path = videos["h264_mkv"]
    read, write = os.pipe()
    data = path.read_bytes()
    with open(read, "rb", buffering=0) as source:
        with open(write, "wb") as sink:
            sink.write(data)  # fits the pipe's buffer: a few tens of KB
        assert not source.seekable()
        clip = read_clip(source, 20, 4, index_cache=IndexCache(None))
    assert np.array_equal(clip, read_clip(path, 20, 4, index_cache=IndexCache(None)))


@pytest.mark.parametrize(
    ("source", "words"),
    [
        (3, "got int 3"),
        (None, "got NoneType"),
        (3.5, "got float"),
        ([b"\x00"], "got list"),
        ("tar://000001.mp4::ftp://host/shard-000.tar", "shards at ftp:// URLs cannot be read"),
        ("ftp://host/video.mp4", "scheme ftp:// cannot be read"),
    ],
)
def test_an_unsupported_kind_of_source_fails_naming_what_is_accepted(source, words):
    for call in (lambda: read_clip(source, 0, 1), lambda: probe(source), lambda: frame_count(source)):
        with pytest.raises(TypeError, match="video source is a path") as caught:
            call()
        assert words in str(caught.value)
        assert "bytes, bytearray, memoryview" in str(caught.value) and "s3://" in str(caught.value)


def test_a_text_mode_file_fails_saying_to_open_it_in_binary_mode(videos, tmp_path):
    binary = pytest.raises(TypeError, match=r"text-mode file .* open it in binary mode \('rb'\)")
    with open(videos["h264_mp4"], encoding="latin-1") as text, binary:
        read_clip(text, 0, 1)

    class StrReader:
        def read(self) -> str:
            return "not bytes"

    with pytest.raises(TypeError, match="its read\\(\\) gave str"):
        probe(StrReader())


def test_broken_bytes_fail_as_a_broken_file_does_naming_the_content(videos):
    with pytest.raises(VideoDecodeError, match=r"memory:sha256-[0-9a-f]{32}: cannot be opened as a video"):
        read_clip(b"not a video at all" * 100, 0, 1)
    with pytest.raises(VideoDecodeError, match=r"memory:sha256-"):
        probe(b"")


def test_truncated_bytes_fail_before_the_missing_frames(videos, tmp_path):
    path = tmp_path / "cut.avi"
    path.write_bytes(videos["xvid_avi"].read_bytes())
    truncate(path, 0.5)
    data = path.read_bytes()
    frames = frame_count(data)
    assert frames == frame_count(path) < FRAMES
    with pytest.raises(VideoDecodeError, match="ends after"):
        read_clip(data, frames - 1, 2)
    assert np.array_equal(read_clip(data, frames - 2, 2), read_clip(path, frames - 2, 2))
