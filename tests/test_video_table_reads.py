"""Reads from a local file's kept packet table: the clip's packets read in one read, decoded without a container.

A file indexed from its container's tables keeps its packet table in the index
cache, apart from the index. A later read decodes the clip's packets from it and
never opens the file through FFmpeg. Every clip must still equal decoding from
the first frame; a table that misleads falls back to reading through FFmpeg.
"""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path
from types import SimpleNamespace

import av
import av.error
import numpy as np
import pytest

from parallel_loader.video import IndexCache, frame_count, read_clip
from parallel_loader.video._base.facts import put_varint
from parallel_loader.video._base.keys import local_key
from parallel_loader.video._indexes import mkv_tables
from parallel_loader.video._indexes import packet_table as packet_table_module
from parallel_loader.video._indexes.packet_table import PacketTable, kept_table
from parallel_loader.video._media import clip as clip_module
from parallel_loader.video._media import frames as frames_module
from parallel_loader.video._read import local as local_module
from parallel_loader.video._read import spans as spans_module
from parallel_loader.video._read.clips import read_frames

from .video_files import with_display_matrix, write_encoded_video

N = 30
GOP = 10
H264 = dict(codec="libx264", gop=GOP)

# name -> writer arguments: files indexed from their tables, one of each family and frame structure.
FILES = {
    "b_frames.mp4": dict(H264, b_frames=2),
    "pyramid.mp4": dict(H264, b_frames=3, options={"b-pyramid": "normal"}),
    "audio_first.mov": dict(H264, b_frames=2, audio_first=True),
    "xvid.avi": dict(codec="mpeg4", codec_tag="XVID", gop=GOP),
    "mjpeg.avi": dict(codec="mjpeg"),
    "ffv1.avi": dict(codec="ffv1", gop=GOP),
    "b_frames.mkv": dict(H264, b_frames=2),
    "clusters.mkv": dict(H264, b_frames=2, container_options={"cluster_time_limit": "100"}),
}
TURNED = {"rot90.mp4": (90, False), "rot270_hflip.mp4": (270, True)}


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("table_reads")
    made = {name: write_encoded_video(root / name, N, **kwargs) for name, kwargs in FILES.items()}
    for name, (degrees, hflip) in TURNED.items():
        made[name] = with_display_matrix(made["b_frames.mp4"], root / name, degrees, hflip)
    return made


@pytest.fixture
def no_container(monkeypatch):
    """Opening any file through FFmpeg fails the test."""

    def refuse(path, *args):
        raise AssertionError(f"{path} was opened through FFmpeg")

    monkeypatch.setattr(frames_module, "open_container", refuse)


def truth(path: Path, rotate: bool = True) -> np.ndarray:
    return read_clip(path, 0, frame_count(path, index_cache=IndexCache(None)), seek=False, rotate=rotate)


def indexed(path: Path, cache: IndexCache) -> PacketTable:
    """Index ``path`` in ``cache`` with a first read, and return the table kept with it."""
    read_clip(path, 0, 1, index_cache=cache)
    index, table = cache.get_with_table(path)
    assert index.made_by == "packets" and table is not None
    return table


@pytest.mark.parametrize("name", [*FILES, *TURNED])
def test_a_warm_read_decodes_from_the_table_without_opening_the_file_through_ffmpeg(files, name, request):
    path = files[name]
    expected = {rotate: truth(path, rotate) for rotate in (True, False)}
    cache = IndexCache(None)
    indexed(path, cache)
    request.getfixturevalue("no_container")
    for start, length, stride in ((0, 4, 1), (GOP - 1, 3, 2), (GOP, 5, 1), (13, 4, 3), (N - 3, 3, 1)):
        for rotate in (True, False):
            got = read_clip(path, start, length, stride, index_cache=cache, rotate=rotate)
            want = expected[rotate][start : start + length * stride : stride]
            np.testing.assert_array_equal(got, want, f"{name} from {start} (stride {stride}, rotate={rotate})")
    frames = np.array([N - 1, 3, 3, 17])  # any order, repeats: each frame decoded once
    np.testing.assert_array_equal(read_frames(path, frames, None, index_cache=cache), expected[True][frames])


def test_a_rotated_files_table_holds_the_display_matrix_its_frames_carry(files):
    for name in TURNED:
        table = indexed(files[name], IndexCache(None))
        assert table.display_matrix is not None and table.orientation.transpose
    assert indexed(files["b_frames.mp4"], IndexCache(None)).display_matrix is None


def test_the_table_is_kept_on_disk_for_the_next_process(files, tmp_path, no_container, monkeypatch):
    path = files["pyramid.mp4"]
    monkeypatch.undo()  # the first touch opens the file
    table = indexed(path, IndexCache(tmp_path))
    expected = truth(path)[7:19:3]
    monkeypatch.setattr(frames_module, "open_container", lambda p, *args: pytest.fail(f"{p} opened"))
    later = IndexCache(tmp_path)  # a later run: nothing in memory
    np.testing.assert_array_equal(read_clip(path, 7, 4, 3, index_cache=later), expected)
    found = later.get_with_table(path)[1]
    assert found is not None and later.table_memory > 0
    for column in ("pos", "size", "pts", "key"):
        np.testing.assert_array_equal(getattr(found, column), getattr(table, column))


def test_a_table_that_misleads_falls_back_to_ffmpeg_and_the_clip_stays_exact(files, caplog):
    """Timestamps the index does not know, or bytes that do not decode: the clip is read through FFmpeg."""
    path = files["b_frames.mp4"]
    expected = truth(path)
    for damage in (
        lambda t: dataclasses.replace(t, pts=t.pts + 1),
        lambda t: dataclasses.replace(t, pos=t.pos + 3),
        lambda t: dataclasses.replace(t, codec="mjpeg"),
    ):
        cache = IndexCache(None)
        table = indexed(path, cache)
        cache._keep([(local_key(path), cache.get(path), b"")], damage(table).encode())
        caplog.clear()
        with caplog.at_level(logging.INFO, logger="parallel_loader.video._read.local"):
            for start in (0, 11, N - 4):
                np.testing.assert_array_equal(read_clip(path, start, 4, index_cache=cache), expected[start : start + 4])
        assert caplog.text.count("in a read from its packet table; reading it through FFmpeg") == 1  # then dropped
        assert cache.get_with_table(path)[1] is None and cache.table_memory == 0


def test_an_index_made_by_decoding_or_distrusted_drops_the_table(files, tmp_path):
    path = files["xvid.avi"]
    cache = IndexCache(tmp_path)
    indexed(path, cache)
    cache.rescan(path)
    index, table = cache.get_with_table(path)
    assert (index.made_by, table) == ("decoding", None)
    assert IndexCache(tmp_path).get_with_table(path)[1] is None  # on disk too
    other = IndexCache(None)
    indexed(files["mjpeg.avi"], other)
    other.distrust(files["mjpeg.avi"], "a test says so")
    index, table = other.get_with_table(files["mjpeg.avi"])
    assert table is None and not index.seekable


def test_packet_tables_are_held_within_max_table_bytes(files):
    one = IndexCache(None)
    indexed(files["b_frames.mp4"], one)
    size = one.table_memory
    cache = IndexCache(None, max_table_bytes=2 * size + size // 2)  # room for two of about that size
    names = ["b_frames.mp4", "pyramid.mp4", "b_frames.mkv", "clusters.mkv"]
    for name in names:
        read_clip(files[name], 0, 1, index_cache=cache)
    assert cache.table_memory <= cache.max_table_bytes and len(cache) == len(names)
    held = [cache.get_with_table(files[name])[1] is not None for name in names]
    assert held[-1] and not held[0]  # the least recently used left first
    expected = truth(files["b_frames.mp4"])[5:9]
    np.testing.assert_array_equal(read_clip(files["b_frames.mp4"], 5, 4, index_cache=cache), expected)  # via FFmpeg
    none = IndexCache(None, max_table_bytes=0)
    read_clip(files["xvid.avi"], 0, 1, index_cache=none)
    assert none.table_memory == 0 and none.get_with_table(files["xvid.avi"])[1] is None
    with pytest.raises(ValueError, match="max_table_bytes"):
        IndexCache(None, max_table_bytes=-1)


def test_the_table_encoding_round_trips_and_refuses_what_it_did_not_write():
    rng = np.random.default_rng(0)
    count = 1000
    size = rng.integers(1, 70_000, count)
    pos = (5 << 32) + np.cumsum(size) + rng.integers(0, 3, count) * (rng.random(count) < 0.1)
    pts = rng.permutation(count).astype(np.int64) * 1001 - 3003  # negative, out of order, past 16 bits
    key = rng.random(count) < 0.05
    matrix = np.array([0, 65536, 0, -65536, 0, 0, 0, 0, 1 << 30], "<i4").tobytes()
    for extradata, display in ((b"", None), (bytes(range(40)), matrix)):
        table = PacketTable("h264", "avc1", 1920, 1080, extradata, pos, size, pts, key, display)
        back = PacketTable.decode(table.encode())
        assert (back.codec, back.codec_tag, back.width, back.height) == ("h264", "avc1", 1920, 1080)
        assert (back.extradata, back.display_matrix) == (extradata, display)
        for column in ("pos", "size", "pts", "key"):
            np.testing.assert_array_equal(getattr(back, column), getattr(table, column))
    data = table.encode()
    for damaged in (data[:20], data[:-5], data[:-30] + bytes(30)):
        with pytest.raises(ValueError, match="cut short or damaged"):
            PacketTable.decode(damaged)
    previous = bytearray()  # the previous version's form starts with the codec name's length
    put_varint(previous, 4)
    previous += b"h264"
    with pytest.raises(ValueError, match="older version"):
        PacketTable.decode(bytes(previous))
    assert kept_table(bytes(previous)) is None and kept_table(b"") is None


def test_a_matroska_track_with_a_projection_is_read_through_ffmpeg():
    """FFmpeg turns such frames by the projection's pose; bare packets would not carry it."""

    def element(kind: int, body: bytes) -> bytes:
        width = (kind.bit_length() + 7) // 8
        return kind.to_bytes(width, "big") + bytes([0x80 | len(body)]) + body

    projection = element(0x7670, element(0x7671, b"\x00"))
    entry = element(0xAE, element(0xD7, b"\x01") + element(0xE0, element(0xB0, b"\x40") + projection))
    assert mkv_tables._track_number(entry, 0) == "a video projection"
    plain = element(0xAE, element(0xD7, b"\x01") + element(0xE0, element(0xB0, b"\x40")))
    assert mkv_tables._track_number(plain, 0) == 1


def test_a_table_read_decodes_from_the_keyframe_before_and_skips_frames_nobody_refers_to(files, monkeypatch):
    path = files["pyramid.mp4"]
    cache = IndexCache(None)
    indexed(path, cache)
    index = cache.get(path)
    decoded: list[int] = []

    class Counting:
        """A codec context that notes which frame each decoded frame is."""

        def __init__(self, inner) -> None:
            object.__setattr__(self, "_inner", inner)

        def __getattr__(self, name):
            return getattr(self._inner, name)

        def __setattr__(self, name, value) -> None:
            setattr(self._inner, name, value)

        def decode(self, packet):
            frames = self._inner.decode(packet)
            decoded.extend(index.frame_at(f.pts) for f in frames)
            return frames

    create = av.CodecContext.create
    codecs = SimpleNamespace(create=lambda *args: Counting(create(*args)))
    monkeypatch.setattr(spans_module, "av", SimpleNamespace(CodecContext=codecs, Packet=av.Packet, error=av.error))
    got = read_clip(path, 14, 3, 2, index_cache=cache)  # frames 14, 16, 18; keyframe 10
    np.testing.assert_array_equal(got, truth(path)[14:19:2])
    assert min(decoded) == 10 and {14, 16, 18} <= set(decoded)
    assert len(decoded) < 18 - 10 + 1  # B-frames nothing refers to were not decoded


def test_a_file_that_cannot_be_read_from_its_table_is_read_through_ffmpeg(files, monkeypatch, caplog):
    path = files["xvid.avi"]
    cache = IndexCache(None)
    indexed(path, cache)

    def failing(*args):
        raise OSError("Input/output error")

    monkeypatch.setattr(local_module, "_read_bytes", failing)
    with caplog.at_level(logging.INFO, logger="parallel_loader.video._read.local"):
        np.testing.assert_array_equal(read_clip(path, 12, 4, index_cache=cache), truth(path)[12:16])
    assert "the file cannot be read (Input/output error)" in caplog.text


@pytest.mark.parametrize("name", ["pyramid.mp4", "xvid.avi", "clusters.mkv", "rot90.mp4"])
def test_a_first_touch_reads_its_clip_from_the_new_table_not_through_the_open_container(files, name, monkeypatch):
    path = files[name]
    expected = truth(path)[11:20:2]

    def refuse(*args):
        raise AssertionError("the clip was read through the container")

    monkeypatch.setattr(clip_module.Clip, "read_opened", refuse)
    np.testing.assert_array_equal(read_clip(path, 11, 5, 2, index_cache=IndexCache(None)), expected)


def test_decoded_tables_are_kept_within_their_bytes(monkeypatch):
    """The last tables decoded are kept for the next reads, up to a bound on their arrays' bytes."""
    monkeypatch.setattr(packet_table_module, "_MAX_RECENT_BYTES", 60_000)
    monkeypatch.setattr(packet_table_module, "_recent", type(packet_table_module._recent)())
    monkeypatch.setattr(packet_table_module, "_recent_bytes", [0])
    count = 1000  # 25,000 bytes of arrays a table: two fit
    forms = []
    for k in range(4):
        pos, size = np.arange(count, dtype=np.int64) * 10 + k, np.full(count, 10, dtype=np.int64)
        pts, key = np.arange(count, dtype=np.int64), np.arange(count) % 10 == 0
        forms.append(PacketTable("h264", "", 64, 48, b"", pos, size, pts, key).encode())
    tables = [kept_table(form) for form in forms]
    assert packet_table_module._recent_bytes[0] <= 60_000 and len(packet_table_module._recent) == 2
    assert kept_table(forms[3]) is tables[3] and kept_table(forms[2]) is tables[2]  # kept
    again = kept_table(forms[0])  # decoded again, the same table
    assert again is not tables[0] and np.array_equal(again.pos, tables[0].pos)
