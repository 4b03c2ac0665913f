"""Exact seeking: per-file indexes, and clips that equal decoding every frame from the first, on every format."""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import threading
from dataclasses import replace
from pathlib import Path

import av
import numpy as np
import pytest

from parallel_loader.video import (
    IndexCache,
    VideoDecodeError,
    VideoIndex,
    default_index_cache,
    frame_count,
    probe,
    read_clip,
    set_default_index_cache,
)
from parallel_loader.video._base.facts import sorted_unique
from parallel_loader.video._base.keys import local_key
from parallel_loader.video._indexes import cache as index_module
from parallel_loader.video._indexes import packets as packet_index
from parallel_loader.video._indexes import scan as scan_module
from parallel_loader.video._indexes.store import FILE_NAME, IndexStore
from parallel_loader.video._media import clip as decode_module

from .test_video_store import damage_entry
from .video_files import FRAME_STEP, overstate_frame_count, pack_b_frames, truncate, write_encoded_video

N = 64  # frames per file: frame i has red 4 * i, so every frame's index shows in its pixels
GAPS = [i + (i >= 20) + 2 * (i >= 41) for i in range(N)]  # timestamps skip 1 after frame 19, 2 after frame 40
VARIABLE = [sum(k % 3 + 1 for k in range(i)) for i in range(N)]  # a variable frame rate: steps of 1, 2 and 3 ticks

# name -> (file name, writer arguments)
FORMATS = {
    "xvid": ("xvid.avi", dict(codec="mpeg4", codec_tag="XVID", gop=12)),
    "xvid_b_frames": ("xvid_b.avi", dict(codec="mpeg4", codec_tag="XVID", gop=12, b_frames=2)),
    "h264_long_gop": ("h264.mp4", dict(codec="libx264", gop=30, b_frames=3)),
    "mjpeg": ("mjpeg.avi", dict(codec="mjpeg")),
    "timestamp_gaps": ("gaps.avi", dict(codec="mpeg4", codec_tag="XVID", gop=12, timestamps=GAPS)),
    "variable_rate": ("vfr.mp4", dict(codec="libx264", gop=16, b_frames=2, timestamps=VARIABLE)),
    "no_timestamps": ("raw.h264", dict(codec="libx264", container="h264", gop=16, b_frames=2)),
    "h264_open_gop": ("open_gop.mp4", dict(codec="libx264", gop=16, b_frames=3, open_gop=True)),
    "h264_matroska": ("h264.mkv", dict(codec="libx264", gop=16, b_frames=2)),
    "xvid_packed_b_frames": ("packed.avi", dict(codec="mpeg4", codec_tag="XVID", gop=12, b_frames=1)),  # packed below
}


@pytest.fixture(scope="session")
def videos(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("formats")
    made = {name: write_encoded_video(root / file, N, **kwargs) for name, (file, kwargs) in FORMATS.items()}
    packed = made["xvid_packed_b_frames"]
    made["xvid_packed_b_frames"] = pack_b_frames(packed.rename(packed.with_name("unpacked.avi")), packed)
    return made


def ground_truth(path: Path, size: tuple[int, int] | None = None) -> np.ndarray:
    """Every frame, decoded in order from the first (no index involved)."""
    return read_clip(path, 0, N, size=size, seek=False)


@pytest.mark.parametrize("name", list(FORMATS))
def test_every_clip_equals_the_frames_decoded_from_the_start(videos, name):
    path = videos[name]
    cache = IndexCache()
    truth = ground_truth(path)
    # The reference itself is right: below the block, frame i's red is 4 * i, give or take the
    # codecs' loss, which stays well under the step of 4 between frames.
    red = truth[:, 30:, :, 0].astype(float).mean(axis=(1, 2))
    assert np.abs(red - FRAME_STEP * np.arange(N)).max() < 0.75 * FRAME_STEP
    for clip_len, stride in [(1, 1), (4, 3), (8, 2)]:
        span = (clip_len - 1) * stride + 1
        for start in range(N - span + 1):
            clip = read_clip(path, start, clip_len, stride, index_cache=cache)
            np.testing.assert_array_equal(clip, truth[start : start + span : stride], err_msg=f"{name} {start}")


@pytest.mark.parametrize("name", ["xvid", "h264_long_gop", "no_timestamps"])
def test_resized_clips_equal_the_resized_frames_decoded_from_the_start(videos, name):
    path = videos[name]
    truth = ground_truth(path, size=(20, 30))
    for start in (0, 5, 31, 47):
        clip = read_clip(path, start, 6, 3, size=(20, 30), index_cache=IndexCache())
        assert clip.shape == (6, 20, 30, 3)
        np.testing.assert_array_equal(clip, truth[start : start + 16 : 3])


@pytest.mark.parametrize(
    ("name", "keyframes", "regular"),
    [
        ("xvid", list(range(0, N, 12)), True),
        ("xvid_b_frames", list(range(0, N, 12)), True),
        ("h264_long_gop", [0, 30, 60], True),
        ("mjpeg", list(range(N)), True),
        ("timestamp_gaps", list(range(0, N, 12)), False),
        ("variable_rate", [0, 16, 32, 48], False),
        ("h264_open_gop", [0, 16, 32, 48], True),
        ("h264_matroska", [0, 16, 32, 48], True),
    ],
)
def test_the_index_knows_frames_and_keyframes(videos, name, keyframes, regular):
    index = IndexCache().get(videos[name])
    assert index.seekable, index.reason
    assert index.made_by == "packets"  # none of these needed decoding
    assert index.frames == N
    assert list(index.keyframes) == keyframes
    assert (index.pts_table is None) == regular
    for i in range(N):
        assert index.frame_at(index.pts(i)) == i


def test_a_file_with_timestamp_gaps_counts_the_frames_that_decode_not_its_header(videos):
    path = videos["timestamp_gaps"]
    assert probe(path).frames > N  # the header counts the gaps as frames
    assert frame_count(path, index_cache=IndexCache()) == N


def test_seeking_decodes_from_the_keyframe_before_the_start_and_skips_frames_nobody_refers_to(videos, monkeypatch):
    path = videos["h264_long_gop"]
    cache = IndexCache(max_table_bytes=0)  # reads through FFmpeg (test_video_table_reads: from the packet table)
    index = cache.get(path)
    decoded: list[int] = []

    def seeking(*args, **kwargs):  # every frame the seeking read decodes at or after the keyframe
        for i, frame in frames_from(*args, **kwargs):
            decoded.append(i)
            yield i, frame

    def in_order(packet):  # every frame the in-order read decodes
        frames = decode(packet)
        decoded.extend(index.frame_at(f.pts) for f in frames or ())
        return frames

    frames_from, decode = decode_module.frames_from, decode_module.decode
    monkeypatch.setattr(decode_module, "frames_from", seeking)
    monkeypatch.setattr(decode_module, "decode", in_order)
    read_clip(path, 40, 4, 2, index_cache=cache)  # frames 40, 42, 44, 46; keyframe 30
    assert min(decoded) == 30
    assert {40, 42, 44, 46} <= set(decoded)
    assert len(decoded) < 46 - 30 + 1  # B-frames before and between the kept ones were not decoded
    decoded.clear()
    read_clip(path, 40, 4, 2, seek=False)
    assert decoded[:41] == list(range(41))  # the reference decodes every frame from the first


def test_a_file_without_timestamps_is_read_from_the_start_and_named_once(videos, caplog):
    path = videos["no_timestamps"]
    cache = IndexCache()
    truth = ground_truth(path)
    with caplog.at_level(logging.WARNING, logger="parallel_loader.video"):
        for start in (50, 3, 17):
            np.testing.assert_array_equal(read_clip(path, start, 4, 2, index_cache=cache), truth[start : start + 7 : 2])
    index = cache.get(path)
    assert not index.seekable
    assert "no timestamp" in index.reason
    named = [r for r in caplog.records if str(path) in r.getMessage()]
    assert len(named) == 1
    assert "not exact" in named[0].getMessage() and "from the first frame" in named[0].getMessage()


def test_a_seek_that_goes_wrong_during_a_read_is_caught_and_the_file_read_from_the_start(videos, caplog):
    """An index whose timestamp step is twice the file's: frames decoded after a seek do not match it."""
    path = videos["xvid"]
    cache = IndexCache()
    good = cache.get(path)
    key = os.path.abspath(path)
    wrong = VideoIndex(good.frames, good.keyframes, True, "", good.pts_start, 2 * good.pts_step)
    cache.put(local_key(path), wrong)  # as if a file's seeks had passed the checks
    truth = ground_truth(path)
    with caplog.at_level(logging.WARNING, logger="parallel_loader.video"):
        np.testing.assert_array_equal(read_clip(path, 30, 4, 2, index_cache=cache), truth[30:37:2])
        np.testing.assert_array_equal(read_clip(path, 50, 4, 2, index_cache=cache), truth[50:57:2])
    assert not cache.get(path).seekable
    assert "unknown to the index" in cache.get(path).reason
    assert len([r for r in caplog.records if key in r.getMessage()]) == 1


def test_the_index_is_kept_on_disk_and_rebuilt_when_the_file_changes(videos, tmp_path, monkeypatch):
    path = tmp_path / "clip.mp4"
    path.write_bytes(videos["h264_long_gop"].read_bytes())
    scans: list[str] = []
    original = index_module.make_index

    def counting(p, *args):
        scans.append(os.fspath(p))
        return original(p, *args)

    monkeypatch.setattr(index_module, "make_index", counting)
    first = IndexCache(tmp_path / "cache").get(path)
    assert len(scans) == 1
    assert (tmp_path / "cache" / FILE_NAME).is_file()
    again = IndexCache(tmp_path / "cache").get(path)  # a second run: read from disk
    assert len(scans) == 1
    assert (again.frames, again.keyframes, again.seekable) == (first.frames, first.keyframes, True)
    assert [again.pts(i) for i in range(N)] == [first.pts(i) for i in range(N)]

    stat = path.stat()
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))  # touched: scanned again
    IndexCache(tmp_path / "cache").get(path)
    assert len(scans) == 2
    path.write_bytes(videos["mjpeg"].read_bytes())  # replaced: scanned again, and the new facts kept
    assert list(IndexCache(tmp_path / "cache").get(path).keyframes) == list(range(N))
    assert len(scans) == 3
    damage_entry(tmp_path / "cache", str(path))  # a damaged entry is ignored and written again
    assert IndexCache(tmp_path / "cache").get(path).frames == N
    assert len(scans) == 4
    assert list(IndexCache(tmp_path / "cache").get(path).keyframes) == list(range(N))
    assert len(scans) == 4


def test_irregular_timestamps_survive_the_disk_cache(videos, tmp_path):
    path = videos["variable_rate"]
    first = IndexCache(tmp_path).get(path)
    again = IndexCache(tmp_path).get(path)
    assert again.pts_table is not None
    np.testing.assert_array_equal(again.pts_table, first.pts_table)


def test_an_unseekable_verdict_found_while_reading_is_kept_on_disk(videos, tmp_path):
    path = videos["xvid"]
    IndexCache(tmp_path).distrust(path, "a test says so")
    index = IndexCache(tmp_path).get(path)
    assert (index.seekable, index.reason, index.frames) == (False, "a test says so", N)


def test_the_cache_is_shared_by_threads_and_bounded(videos):
    one = IndexCache(None)
    one.get(videos["xvid"])
    cache = IndexCache(None, max_bytes=2 * one.memory + one.memory // 2)  # room for two entries
    names = ["xvid", "h264_long_gop", "mjpeg"]
    truth = {name: ground_truth(videos[name]) for name in names}
    barrier = threading.Barrier(4)
    failures: list[BaseException] = []

    def work(k: int) -> None:
        try:
            barrier.wait(timeout=10)
            for j in range(6):
                name = names[(k + j) % 3]
                start = 7 * k + 3 * j
                np.testing.assert_array_equal(
                    read_clip(videos[name], start, 3, 2, index_cache=cache), truth[name][start : start + 5 : 2]
                )
        except BaseException as exc:
            failures.append(exc)

    threads = [threading.Thread(target=work, args=(k,), name=f"reader-{k}") for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert not failures, failures
    assert len(cache) == 2


def test_the_default_cache_serves_read_clip_and_frame_count(videos):
    mine = IndexCache()
    before = default_index_cache()
    set_default_index_cache(mine)
    try:
        assert frame_count(videos["mjpeg"]) == N
        assert len(mine) == 1
        read_clip(videos["xvid"], 3, 2)
        assert len(mine) == 2
    finally:
        set_default_index_cache(before)
    with pytest.raises(TypeError, match="IndexCache"):
        set_default_index_cache("/tmp/cache")
    with pytest.raises(ValueError, match="max_bytes"):
        IndexCache(max_bytes=0)


def test_a_truncated_file_gives_exactly_the_frames_that_decode_and_an_error_past_them(videos, tmp_path):
    """An AVI cut short, as by an interrupted copy, loses its index (at the end of the file) and frames."""
    data = videos["xvid"].read_bytes()
    path = tmp_path / "cut.avi"
    path.write_bytes(data[: len(data) * 2 // 3])
    cache = IndexCache()
    frames = frame_count(path, index_cache=cache)
    assert 12 < frames < N
    truth = read_clip(path, 0, frames, seek=False)
    for start in range(frames - 2):
        np.testing.assert_array_equal(read_clip(path, start, 3, index_cache=cache), truth[start : start + 3])
    with pytest.raises(VideoDecodeError, match=rf"cut\.avi: ends after {frames} decoded frames.*truncated or corrupt"):
        read_clip(path, frames - 1, 2, index_cache=cache)


def test_the_index_says_whether_the_file_was_read_whole(videos, tmp_path):
    """A header may claim more frames than an intact file decodes; a truncated file is missing data."""
    assert all(IndexCache().get(path).intact for path in videos.values())
    overstated, cut = tmp_path / "count.avi", tmp_path / "cut.avi"
    for copy in (overstated, cut):
        copy.write_bytes(videos["xvid"].read_bytes())
    overstate_frame_count(overstated, 90)
    truncate(cut, 0.9)  # the file ends inside a packet
    cache = IndexCache(tmp_path / "cache")
    assert (probe(overstated).frames, cache.get(overstated).frames, cache.get(overstated).intact) == (90, N, True)
    assert probe(cut).frames == N and not cache.get(cut).intact
    assert IndexCache(tmp_path / "cache").get(cut).intact is False  # kept on disk
    cache.distrust(overstated, "a test says so")
    assert cache.get(overstated).intact
    with pytest.raises(VideoDecodeError, match=r"gaps\.avi: ends after 64.*claims 67 frames, more than decode"):
        read_clip(videos["timestamp_gaps"], 60, 2, 5, index_cache=cache)
    with pytest.raises(VideoDecodeError, match=r"cut\.avi: ends after \d+ decoded.*the file is truncated or corrupt"):
        read_clip(cut, N - 2, 2, index_cache=cache)


class FlakyReads:
    """``open_video`` whose containers fail as on network storage: ``failures`` says how, once each.

    ``"seek"``: the next seek fails; ``"read"``: the next read after a seek fails
    (its third packet). ``seeks`` lists the files sought in.
    """

    def __init__(self, open_video, failures: list[str]) -> None:
        self.open_video, self.failures, self.seeks = open_video, failures, []

    @contextlib.contextmanager
    def __call__(self, path, stream=None):
        with self.open_video(path, stream) as (container, stream):
            yield _FlakyContainer(container, self), stream

    def fail(self, kind: str) -> None:
        if self.failures and self.failures[0] == kind:
            self.failures.pop(0)
            raise av.error.FFmpegError(-errno.EIO, "Input/output error")


class _FlakyContainer:
    def __init__(self, container, reads: FlakyReads) -> None:
        self.container, self.reads, self.name, self.sought = container, reads, container.name, False
        self.format = container.format

    def seek(self, *args, **kwargs):
        self.reads.seeks.append(self.name)
        self.reads.fail("seek")
        self.sought = True
        return self.container.seek(*args, **kwargs)

    def demux(self, stream):
        for n, packet in enumerate(self.container.demux(stream)):
            if n == 2 and self.sought:
                self.reads.fail("read")
            yield packet


@pytest.mark.parametrize("failing", ["seek", "read"])
def test_a_read_error_after_a_seek_raises_and_the_file_stays_seekable(videos, tmp_path, monkeypatch, failing):
    """A file indexed by decoding decoded whole then: a read error now says nothing against its index."""
    path = videos["h264_long_gop"]
    cache = IndexCache(tmp_path)
    assert cache.rescan(path).seekable and cache.get(path).made_by == "decoding"
    failures = [failing]
    reads = FlakyReads(decode_module.open_video, failures)
    monkeypatch.setattr(decode_module, "open_video", reads)
    with pytest.raises(VideoDecodeError, match=r"h264\.mp4: cannot be read or decoded after a seek to frame 30") as e:
        read_clip(path, 40, 4, 2, index_cache=cache)  # keyframe 30
    assert e.value.path == str(path) and not failures
    assert cache.get(path).seekable and IndexCache(tmp_path).get(path).seekable  # in memory and on disk
    np.testing.assert_array_equal(read_clip(path, 40, 4, 2, index_cache=cache), ground_truth(path)[40:47:2])
    assert reads.seeks == [str(path)] * 2  # the second read sought again


@pytest.mark.parametrize("failing", ["seek", "read"])
def test_a_read_error_after_a_seek_in_a_file_indexed_from_packets_decodes_it(videos, tmp_path, monkeypatch, failing):
    """Packets say nothing of whether they decode (a damaged one is passed over from the first frame): decode it."""
    path = videos["h264_long_gop"]
    cache = IndexCache(tmp_path, max_table_bytes=0)  # reads through FFmpeg
    assert cache.get(path).made_by == "packets"
    failures = [failing]
    monkeypatch.setattr(decode_module, "open_video", FlakyReads(decode_module.open_video, failures))
    np.testing.assert_array_equal(read_clip(path, 40, 4, 2, index_cache=cache), ground_truth(path)[40:47:2])
    assert not failures
    index = IndexCache(tmp_path).get(path)  # on disk too
    assert index.made_by == "decoding" and index.seekable


def test_a_read_error_while_checking_seeks_is_raised_and_nothing_is_stored(videos, tmp_path, monkeypatch):
    path = videos["xvid"]
    cache = IndexCache(tmp_path)
    failures = ["read"]
    monkeypatch.setattr(scan_module, "open_video", FlakyReads(scan_module.open_video, failures))
    with pytest.raises(VideoDecodeError, match=r"xvid\.avi: cannot be read or decoded after a seek to frame \d+"):
        cache.rescan(path)
    assert not failures and len(cache) == 0 and IndexStore(tmp_path).names() == []
    assert cache.rescan(path).seekable  # the next try makes the index
    assert cache.flush(timeout=30) and IndexStore(tmp_path).names() == [str(path)]


# The packet index: made without decoding where the packets tell, checked on every read.


@pytest.mark.parametrize(
    "name", ["xvid", "xvid_b_frames", "h264_long_gop", "mjpeg", "timestamp_gaps", "h264_open_gop", "h264_matroska"]
)
def test_an_index_from_packets_says_what_decoding_every_frame_says(videos, name):
    path = videos[name]
    from_packets = IndexCache(None).get(path)
    decoded = scan_module.scan(path)
    assert (from_packets.made_by, decoded.made_by) == ("packets", "decoding")
    assert (from_packets.frames, from_packets.keyframes, from_packets.seekable, from_packets.intact) == (
        decoded.frames,
        decoded.keyframes,
        decoded.seekable,
        decoded.intact,
    )
    assert [from_packets.pts(i) for i in range(N)] == [decoded.pts(i) for i in range(N)]


def test_the_open_gop_file_has_leading_frames_and_seeks_past_them(videos):
    """Packets after an open-GOP keyframe in decoding order that show before it: a seek must pass over them."""
    path = videos["h264_open_gop"]
    with av.open(str(path)) as container:
        packets = [(p.pts, p.is_keyframe) for p in container.demux(container.streams.video[0]) if p.size]
    keys = [k for k, (_, key) in enumerate(packets) if key and k > 0]
    assert any(pts < packets[k][0] for k in keys for pts, _ in packets[k + 1 : k + 4])
    cache, truth = IndexCache(None), ground_truth(path)
    for start in (13, 14, 15, 16, 17, 29, 32, 45, 48):  # the leading frames of keyframes 16, 32, 48 and around
        np.testing.assert_array_equal(read_clip(path, start, 3, 2, index_cache=cache), truth[start : start + 5 : 2])
    assert cache.get(path).seekable


def test_packed_b_frames_are_found_in_the_packets_and_the_file_decoded(videos):
    path = videos["xvid_packed_b_frames"]
    with av.open(str(path)) as container:
        found = packet_index.from_packets(container, container.streams.video[0], path.stat().st_size)
    assert isinstance(found, str) and "packed B-frames" in found
    cache = IndexCache(None)
    truth = ground_truth(path)
    np.testing.assert_array_equal(read_clip(path, 20, 4, 3, index_cache=cache), truth[20:30:3])
    assert cache.get(path).made_by == "decoding"


def test_a_first_read_that_needs_a_full_decode_takes_its_clip_from_it(videos, monkeypatch):
    """Only decoding can tell a file without timestamps: the clip comes from that one pass, not a second."""
    path = videos["no_timestamps"]
    truth = ground_truth(path)
    opened: list[str] = []
    original = decode_module.open_video

    def counting(p, *args):
        opened.append(os.fspath(p))
        return original(p, *args)

    monkeypatch.setattr(decode_module, "open_video", counting)
    clip = read_clip(path, 40, 4, 3, index_cache=IndexCache(None))
    np.testing.assert_array_equal(clip, truth[40:50:3])
    assert opened == []  # no read after the scan


def test_a_keyframe_flag_the_decoder_does_not_agree_with_is_caught_on_read(videos, caplog):
    """An index (as from a container that marks a P-frame as a seek point) whose keyframe 5 is no keyframe.

    Made from packets, the file is then indexed by decoding; made by decoding, it is marked as not seekable.
    """
    path = videos["xvid"]
    truth = ground_truth(path)
    for made_by in ("packets", "decoding"):
        cache = IndexCache(None)
        good = cache.get(path)
        cache.put(local_key(path), replace(good, keyframes=tuple(sorted({*good.keyframes, 5})), made_by=made_by))
        with caplog.at_level(logging.WARNING, logger="parallel_loader.video"):
            np.testing.assert_array_equal(read_clip(path, 7, 3, index_cache=cache), truth[7:10])
        index = cache.get(path)
        if made_by == "packets":
            assert index.made_by == "decoding" and index.seekable and 5 not in index.keyframes
        else:
            assert not index.seekable and "does not decode as one" in index.reason


@pytest.mark.parametrize("name", ["xvid", "h264_long_gop", "h264_open_gop"])
def test_a_first_read_opens_the_file_once_and_reads_its_clip_where_its_packets_were_read(videos, monkeypatch, name):
    from parallel_loader.video._media import frames as frames_module

    path = videos[name]
    truth = ground_truth(path)
    opened: list[str] = []
    original = frames_module.open_container

    def counting(p, *args):
        opened.append(os.fspath(p))
        return original(p, *args)

    monkeypatch.setattr(frames_module, "open_container", counting)
    cache = IndexCache(None)
    for start in (0, 37):  # frame 0 too: the container, read to its end, is sought back to it
        opened.clear()
        clip = read_clip(path, start, 5, 2, index_cache=cache)
        np.testing.assert_array_equal(clip, truth[start : start + 9 : 2])
        assert len(opened) == 1
        cache.clear()
    assert cache.get(path).made_by == "packets"


@pytest.mark.parametrize(
    "values", [[7], [3, 3, 3], [5, 1, 4, 1, 5, 9, 2, 6, 5], [0, 2, 4, 6], [9, -2, 9, 0, -2]], ids=str
)
def test_sorted_unique_gives_what_np_unique_gives(values):
    array = np.asarray(values, dtype=np.int64)
    unique, inverse = sorted_unique(array)
    expected, expected_inverse = np.unique(array, return_inverse=True)
    np.testing.assert_array_equal(unique, expected)
    np.testing.assert_array_equal(inverse, expected_inverse)
    np.testing.assert_array_equal(unique[inverse], array)
