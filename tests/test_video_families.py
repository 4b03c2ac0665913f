"""Every kind of file real data sets ship: codecs, containers, pixel formats, odd sizes, rotation.

Each family is a small generated file; every clip read at the starts that test
seeking (0, each keyframe and the frame before it, the middle, the last) must
equal decoding every frame from the first, at full size and scaled.
"""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import pytest

from parallel_loader import DataLoader
from parallel_loader.video import (
    IndexCache,
    VideoDataset,
    VideoDecodeError,
    VideoIndex,
    frame_count,
    probe,
    read_clip,
)
from parallel_loader.video._base.keys import local_key
from parallel_loader.video._indexes import scan as scan_module
from parallel_loader.video._media.frames import SeekMismatch, frames_from, open_video
from parallel_loader.video._media.pixels import orientation

from .video_files import cut_with_edit_list, frame_indices, with_display_matrix, write_encoded_video

N = 30  # frames per file
GOP = 10
CLIP = 3

# name -> (file name, writer arguments, (height, width) of the frames)
FAMILIES: dict[str, tuple[str, dict, tuple[int, int]]] = {
    "vp9_427x240_webm": ("vp9.webm", dict(codec="libvpx-vp9", gop=GOP, size=(240, 427)), (240, 427)),
    "vp9_341x257_mkv": ("vp9.mkv", dict(codec="libvpx-vp9", gop=GOP, size=(257, 341)), (257, 341)),
    "vp8_webm": ("vp8.webm", dict(codec="libvpx", gop=GOP), (48, 64)),
    "av1_mp4": ("av1.mp4", dict(codec="libsvtav1", gop=GOP, size=(64, 64)), (64, 64)),
    "av1_webm": ("av1.webm", dict(codec="libsvtav1", gop=GOP, size=(64, 64)), (64, 64)),
    "hevc_10bit_mp4": ("hevc10.mp4", dict(codec="libx265", gop=GOP, pix_fmt="yuv420p10le"), (48, 64)),
    "h264_444_mkv": ("h264_444.mkv", dict(codec="libx264", gop=GOP, b_frames=2, pix_fmt="yuv444p"), (48, 64)),
    "h264_422_10bit_mp4": ("h264_422.mp4", dict(codec="libx264", gop=GOP, b_frames=2, pix_fmt="yuv422p10le"), (48, 64)),
    "ffv1_gray_mkv": ("gray.mkv", dict(codec="ffv1", gop=GOP, pix_fmt="gray"), (48, 64)),
    "ffv1_gray10_mkv": ("gray10.mkv", dict(codec="ffv1", gop=GOP, pix_fmt="gray10le"), (48, 64)),
    "gif": ("anim.gif", dict(codec="gif", container="gif", pix_fmt="rgb8", size=(41, 43)), (41, 43)),
    "png_palette_mov": ("palette.mov", dict(codec="png", pix_fmt="pal8", size=(41, 43)), (41, 43)),
    "mjpeg_341x257_avi": ("mjpeg.avi", dict(codec="mjpeg", size=(257, 341)), (257, 341)),
    "mpeg4_340x257_avi": ("mpeg4.avi", dict(codec="mpeg4", codec_tag="XVID", size=(257, 340)), (257, 340)),
    "wmv2_asf": ("wmv2.wmv", dict(codec="wmv2", gop=GOP), (48, 64)),
    "flv": ("flv.flv", dict(codec="flv", gop=GOP), (48, 64)),
    "h264_ts": ("h264.ts", dict(codec="libx264", gop=GOP, b_frames=2, container="mpegts"), (48, 64)),
    # Big enough that most frames start a pack of their own, as in real program streams.
    "mpeg2_ps": (
        "mpeg2.mpg",
        dict(codec="mpeg2video", gop=GOP, b_frames=2, container="vob", size=(144, 176)),
        (144, 176),
    ),
    "mpeg2_ts": ("mpeg2.ts", dict(codec="mpeg2video", gop=GOP, b_frames=2, container="mpegts"), (48, 64)),
    "h264_b_frames_avi": ("h264.avi", dict(codec="libx264", gop=GOP, b_frames=2), (48, 64)),
    "mpeg2_interlaced_ts": (
        "interlaced.ts",
        dict(codec="mpeg2video", gop=GOP, b_frames=2, container="mpegts", options={"flags": "+ilme+ildct"}),
        (48, 64),
    ),
    "h264_interlaced_ts": (
        "interlaced_h264.ts",
        dict(codec="libx264", gop=GOP, b_frames=2, container="mpegts", options={"x264-params": "interlaced=1"}),
        (48, 64),
    ),
    "hevc_b_frames_mkv": ("hevc_b.mkv", dict(codec="libx265", gop=GOP, b_frames=3), (48, 64)),
    "h264_b_pyramid_mp4": (
        "pyramid.mp4",
        dict(codec="libx264", gop=GOP, b_frames=3, options={"b-pyramid": "normal"}),
        (48, 64),
    ),
    "fragmented_mp4": (
        "fragmented.mp4",
        dict(codec="libx264", gop=GOP, b_frames=2, container_options={"movflags": "frag_keyframe+empty_moov"}),
        (48, 64),
    ),
    "audio_first_mp4": ("audio_first.mp4", dict(codec="libx264", gop=GOP, b_frames=2, audio_first=True), (48, 64)),
    "late_start_mkv": ("late.mkv", dict(codec="libx264", gop=GOP, timestamps=[i + 50 for i in range(N)]), (48, 64)),
}

# Rotated files: the same stream as "upright" with a display matrix; name -> (degrees counterclockwise, hflip).
UPRIGHT = dict(codec="libx264", gop=GOP, b_frames=2)
ROTATIONS = {"rot90.mp4": (90, False), "rot270.mov": (270, False), "rot180.mp4": (180, False), "hflip.mov": (0, True)}


@pytest.fixture(scope="session")
def families(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("families")
    return {name: write_encoded_video(root / file, N, **kwargs) for name, (file, kwargs, _) in FAMILIES.items()}


@pytest.fixture(scope="session")
def rotated(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("rotated")
    made = {"upright": write_encoded_video(root / "upright.mp4", N, **UPRIGHT)}
    for file, (degrees, hflip) in ROTATIONS.items():
        made[file] = with_display_matrix(made["upright"], root / file, degrees, hflip)
    return made


def starts(index_keyframes: tuple[int, ...]) -> list[int]:
    """The starts tried: 0, keyframes (the index's, every GOP-th) and the frame before each, middle, random, last."""
    keys = set(index_keyframes) | set(range(0, N, GOP))
    randoms = set(np.random.default_rng(len(index_keyframes)).integers(0, N - CLIP + 1, size=3).tolist())
    picks = {0, N // 2, N - CLIP} | keys | {k - 1 for k in keys if k > 0} | randoms
    return sorted(s for s in picks if s <= N - CLIP)


@pytest.mark.parametrize("size", [None, (112, 112)])
@pytest.mark.parametrize("name", list(FAMILIES))
def test_every_clip_equals_decoding_from_the_first_frame(families, name, size):
    path = families[name]
    truth = read_clip(path, 0, N, size=size, seek=False)
    assert truth.shape == (N, *(size or FAMILIES[name][2]), 3) and truth.dtype == np.uint8
    cache = IndexCache(None)
    assert frame_count(path, index_cache=cache) == N
    for start in starts(cache.get(path).keyframes):
        clip = read_clip(path, start, CLIP, size=size, index_cache=cache)
        np.testing.assert_array_equal(clip, truth[start : start + CLIP], err_msg=f"{name} from frame {start}")
    np.testing.assert_array_equal(read_clip(path, N - 1, 1, size=size, index_cache=cache), truth[-1:])
    info = probe(path)
    assert (info.height, info.width) == FAMILIES[name][2]


@pytest.mark.parametrize("name", ["vp9_427x240_webm", "av1_webm", "hevc_10bit_mp4", "png_palette_mov", "flv"])
def test_the_frames_are_the_frames_written(families, name):
    """Not just self-consistent: the red channel says which frame each is (4:2:0 colour is close enough)."""
    assert frame_indices(read_clip(families[name], 0, N)) == list(range(N))


@pytest.mark.parametrize("name", ["vp9_427x240_webm", "h264_ts", "mpeg2_ts", "mpeg2_ps", "h264_b_frames_avi"])
def test_odd_sizes_transport_and_program_streams_and_avi_with_b_frames_seek(families, name, tmp_path):
    index = IndexCache(None).get(families[name])
    assert index.seekable and len(index.keyframes) >= N // GOP - 1, index
    # What makes them seek survives the store: the aim before each keyframe, timestamps that do not rise.
    stored = IndexCache(tmp_path)
    stored.put(local_key(families[name]), index)
    again = IndexCache(tmp_path).get(families[name])
    assert (again.seek_back, again.keyframes, again.frames) == (index.seek_back, index.keyframes, index.frames)
    assert [again.frame_at(index.pts(i)) for i in range(N)] == list(range(N))
    if name in ("h264_ts", "mpeg2_ts", "mpeg2_ps"):
        assert index.seek_back > 0  # B-frames: a keyframe's packet comes before its presentation time


def test_a_file_that_cannot_seek_says_why_what_it_costs_and_how_to_fix_it(tmp_path, caplog):
    # Tiny frames share PS packs: FFmpeg names the keyframe after a seek by a timestamp no frame has.
    path = write_encoded_video(tmp_path / "tiny.mpg", N, codec="mpeg2video", gop=GOP, b_frames=2, container="vob")
    with caplog.at_level(logging.WARNING):
        index = IndexCache(None).get(path)
        truth = read_clip(path, 0, N, seek=False)
        np.testing.assert_array_equal(read_clip(path, N - CLIP, CLIP, index_cache=IndexCache(None)), truth[-CLIP:])
    assert not index.seekable
    (warning,) = {r.getMessage() for r in caplog.records if r.levelno == logging.WARNING}
    assert str(path) in warning and index.reason in warning
    assert f"up to all {N} of this file" in warning
    assert f"ffmpeg -i {path} -c copy {tmp_path / 'tiny.remuxed.mp4'}" in warning


def test_an_error_on_a_files_content_is_a_decode_error_naming_the_file(families, monkeypatch):
    """What PyAV raises on content it does not take (here: its odd-width assertion) reaches on_error as one error."""

    def refuse(frame):
        raise AssertionError("width has to be even for this format")

    monkeypatch.setattr(scan_module, "frame_checksum", refuse)
    path = families["flv"]  # indexed by decoding: the scan meets the (patched) conversion failure
    with pytest.raises(VideoDecodeError, match="width has to be even") as caught:
        frame_count(path, index_cache=IndexCache(None))
    assert caught.value.path == str(path)
    with pytest.raises(VideoDecodeError, match="AssertionError"):
        read_clip(path, 5, 2, index_cache=IndexCache(None))


def test_a_file_cut_without_re_encoding_starts_at_the_cut_and_every_clip_is_exact(tmp_path):
    """An MP4 cut with an edit list: the frames before the cut decode but are not shown."""
    source = write_encoded_video(tmp_path / "long.mp4", N, codec="libx264", gop=GOP, b_frames=2)
    path = cut_with_edit_list(source, tmp_path / "cut.mp4", cut=14)
    truth = read_clip(path, 0, N - 14, seek=False)
    assert frame_indices(truth) == list(range(14, N))
    cache = IndexCache(None)
    assert frame_count(path, index_cache=cache) == N - 14
    for start in range(N - 14 - CLIP + 1):
        np.testing.assert_array_equal(read_clip(path, start, CLIP, index_cache=cache), truth[start : start + CLIP])


@pytest.mark.parametrize("frames", [1, 2])
def test_very_short_files(tmp_path, frames):
    path = write_encoded_video(tmp_path / "short.mp4", frames, codec="libx264", gop=GOP, b_frames=2)
    truth = read_clip(path, 0, frames, seek=False)
    assert frame_indices(truth) == list(range(frames))
    cache = IndexCache(None)
    np.testing.assert_array_equal(read_clip(path, frames - 1, 1, index_cache=cache), truth[-1:])
    with pytest.raises(VideoDecodeError, match="too short"):
        read_clip(path, 0, frames + 1, index_cache=cache)


def test_a_file_pyav_cannot_convert_is_skipped_and_listed_by_a_skipping_dataset(families, monkeypatch):
    """The issue's symptom: a content error that escaped as AssertionError was neither skipped nor listed."""
    bad = families["flv"]  # indexed by decoding: the scan meets the (patched) conversion failure

    def refuse(frame):
        raise AssertionError("width has to be even for this format")

    monkeypatch.setattr(scan_module, "frame_checksum", refuse)
    good = families["h264_b_pyramid_mp4"]  # indexed from its packets: no scan, no checksum
    samples = [(str(bad), 0), (str(good), 1)]
    cache = IndexCache(None)
    data = VideoDataset(samples, batch_size=2, clip_len=4, size=(32, 32), seed=0, on_error="skip", index_cache=cache)
    clips, labels = data(0)
    assert clips.shape == (2, 4, 32, 32, 3) and labels.tolist() == [1, 1]
    (reason,) = [r for key, r in data.skipped.items() if str(bad) in key]
    assert "width has to be even" in reason


def test_a_frame_the_index_names_that_never_decodes_is_caught(families):
    """An index counting a packet with no frame of its own (an interlaced field, a hidden frame) shifts every
    later frame's number: the read sees the gap and says so, rather than return the frames one off."""
    path = families["h264_ts"]
    good = IndexCache(None).get(path)
    stamps = [good.pts(i) for i in range(N)]
    wrong = VideoIndex(N + 1, good.keyframes, True, pts_table=np.array([*stamps[:5], stamps[4] + 1, *stamps[5:]]))
    with open_video(path) as (container, stream), pytest.raises(SeekMismatch, match="frame 6 follows frame 4"):
        for _ in frames_from(container, stream, wrong, 0):
            pass


TURNS = {  # what each display matrix does to the upright frames (clip axes: frame, row, column, channel)
    "rot90.mp4": lambda a: np.rot90(a, 1, axes=(1, 2)),  # 90 degrees counterclockwise
    "rot270.mov": lambda a: np.rot90(a, -1, axes=(1, 2)),
    "rot180.mp4": lambda a: a[:, ::-1, ::-1],
    "hflip.mov": lambda a: a[:, :, ::-1],
}


@pytest.mark.parametrize("file", list(ROTATIONS))
def test_a_rotated_file_at_a_url_reads_and_probes_as_the_local_file(rotated, file, tmp_path):
    """``rotate`` means the same for a URL: both the ranged read and the probe follow it."""
    path = rotated[file]
    url = path.as_uri()
    cache = IndexCache(tmp_path)
    for rotate in (True, False):
        for start in (0, 10, N - CLIP):
            local = read_clip(path, start, CLIP, rotate=rotate, index_cache=IndexCache(None))
            np.testing.assert_array_equal(read_clip(url, start, CLIP, rotate=rotate, index_cache=cache), local)
            np.testing.assert_array_equal(read_clip(url, start, CLIP, seek=False, rotate=rotate), local)
        assert (probe(url, rotate=rotate).height, probe(url, rotate=rotate).width) == (
            probe(path, rotate=rotate).height,
            probe(path, rotate=rotate).width,
        )


@pytest.mark.parametrize("file", list(ROTATIONS))
def test_rotated_files_give_the_upright_frames_turned_and_probe_agrees(rotated, file):
    upright, path = rotated["upright"], rotated[file]
    turn = TURNS[file]
    cache = IndexCache(None)
    truth = read_clip(upright, 0, N, seek=False)
    for start in (0, 9, 10, 15, N - CLIP):
        clip = read_clip(path, start, CLIP, index_cache=cache)
        np.testing.assert_array_equal(clip, turn(truth[start : start + CLIP]))
        np.testing.assert_array_equal(read_clip(path, start, CLIP, seek=False), clip)
        kept = read_clip(path, start, CLIP, rotate=False, index_cache=cache)
        np.testing.assert_array_equal(kept, truth[start : start + CLIP])
    info, stored = probe(path), probe(path, rotate=False)
    assert (info.height, info.width) == turn(truth).shape[1:3]
    assert (stored.height, stored.width) == truth.shape[1:3]
    # A size is the displayed frames' size: the upright file read at the stored shape, turned.
    quarter = file in ("rot90.mp4", "rot270.mov")
    clip = read_clip(path, 12, CLIP, size=(40, 30), index_cache=cache)
    expected = turn(read_clip(upright, 12, CLIP, size=(30, 40) if quarter else (40, 30)))
    np.testing.assert_array_equal(clip, expected)


def test_orientation_follows_ffmpegs_command_line():
    def matrix(a, b, c, d):
        return np.array([a, b, 0, c, d, 0, 0, 0, 1 << 30], dtype="<i4").tobytes()

    one = 1 << 16
    assert orientation(None) == (False, False, False)
    assert orientation(matrix(one, 0, 0, one)) == (False, False, False)  # identity
    assert orientation(matrix(0, -one, one, 0)) == (True, True, False)  # 90 counterclockwise: transpose=cclock
    assert orientation(matrix(0, one, -one, 0)) == (True, False, True)  # 90 clockwise: transpose=clock
    assert orientation(matrix(-one, 0, 0, -one)) == (False, True, True)  # 180
    assert orientation(matrix(-one, 0, 0, one)) == (False, False, True)  # hflip
    assert orientation(matrix(one, 0, 0, -one)) == (False, True, False)  # vflip
    assert orientation(matrix(0, one, one, 0)) == (True, False, False)  # transpose=cclock_flip


def test_a_dataset_over_every_family_in_a_loader_makes_full_batches(families, rotated, caplog):
    paths = [*families.values(), *(rotated[file] for file in ROTATIONS)]
    samples = [(str(p), i % 3) for i, p in enumerate(paths)]
    data = VideoDataset(
        samples, batch_size=4, clip_len=4, stride=2, size=(32, 32), seed=0, index_cache=IndexCache(None)
    )
    with caplog.at_level(logging.ERROR), DataLoader(data, num_threads=2, max_len=2) as loader:
        batches = list(loader)
    assert len(batches) == len(data) == -(-len(samples) // 4)
    for clips, labels in batches:
        assert clips.shape == (4, 4, 32, 32, 3) and labels.shape == (4,)
    assert data.replaced == 0 and not data.skipped
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]
