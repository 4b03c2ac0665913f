"""read_clip, frame_count and VideoFolder on small lossless videos whose pixels encode their frame index."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import av
import cv2
import numpy as np
import pytest

from parallel_loader import DataLoader
from parallel_loader._faults.errors import ErrorBudgetExceeded
from parallel_loader._loader.epoch_plan import _SHUFFLE_KEY
from parallel_loader.video import (
    IndexCache,
    VideoDataset,
    VideoDecodeError,
    VideoFolder,
    default_index_cache,
    frame_count,
    probe,
    read_clip,
    set_default_index_cache,
)
from parallel_loader.video._datasets.seeds import CLIP_KEY as _CLIP_KEY
from parallel_loader.video._datasets.seeds import ORDER_KEY as _ORDER_KEY

from .video_files import (
    crop_window,
    frame_indices,
    is_flipped,
    overstate_frame_count,
    truncate,
    video_id,
    write_encoded_video,
    write_video,
)

N_FRAMES = 30


@pytest.fixture(scope="module")
def video(tmp_path_factory) -> Path:
    return write_video(tmp_path_factory.mktemp("video") / "clip.avi", N_FRAMES)


# read_clip


@pytest.mark.parametrize(("start", "clip_len", "stride"), [(0, 1, 1), (0, 5, 1), (7, 4, 3), (3, 6, 5), (29, 1, 1)])
def test_read_clip_returns_exactly_the_frames_asked_for(video, start, clip_len, stride):
    clip = read_clip(video, start, clip_len, stride)
    assert clip.shape == (clip_len, 32, 40, 3)
    assert clip.dtype == np.uint8
    assert frame_indices(clip) == list(range(start, start + clip_len * stride, stride))


@pytest.mark.parametrize("fourcc", ["FFV1", "MJPG", "XVID"])
def test_seeking_gives_the_same_frames_as_grabbing(tmp_path, fourcc):
    path = write_video(tmp_path / "s.avi", 60, size=(48, 64), fourcc=fourcc)
    for start, clip_len, stride in [(0, 3, 1), (13, 4, 2), (37, 5, 3), (59, 1, 1)]:
        grabbed = read_clip(path, start, clip_len, stride)
        np.testing.assert_array_equal(read_clip(path, start, clip_len, stride, seek=True), grabbed)
    with pytest.raises(VideoDecodeError, match=r"s\.avi"):
        read_clip(path, 58, 3, seek=True)


def test_a_seek_past_the_end_is_the_same_error_as_a_read_past_the_end(video):
    for seek in (True, False):
        with pytest.raises(VideoDecodeError, match=r"clip\.avi: ends after 30 decoded frames.*too short"):
            read_clip(video, 40, 2, seek=seek)


def test_read_clip_up_to_the_last_frame(video):
    clip = read_clip(video, N_FRAMES - 10, 5, 2)
    assert frame_indices(clip)[-1] == N_FRAMES - 2
    assert frame_indices(read_clip(video, N_FRAMES - 5, 5))[-1] == N_FRAMES - 1


def test_read_clip_resizes_to_height_width(video):
    clip = read_clip(video, 2, 3, size=(16, 24))
    assert clip.shape == (3, 16, 24, 3)
    assert frame_indices(clip) == [2, 3, 4]
    assert not is_flipped(clip)


def test_read_clip_gives_rgb_order(tmp_path):
    path = tmp_path / "red.avi"
    writer = cv2.VideoWriter(str(path), cv2.VideoWriter_fourcc(*"FFV1"), 25, (16, 8))
    for _ in range(3):
        writer.write(np.dstack([np.zeros((8, 16)), np.full((8, 16), 40), np.full((8, 16), 255)]).astype(np.uint8))
    writer.release()
    clip = read_clip(path, 0, 3)
    assert (clip[..., 0] == 255).all()  # red, written as OpenCV's BGR channel 2
    assert (clip[..., 1] == 40).all()
    assert (clip[..., 2] == 0).all()


def test_read_clip_decodes_xvid(tmp_path):
    path = write_video(tmp_path / "x.avi", 20, size=(48, 64), fourcc="XVID")
    clip = read_clip(path, 4, 4, 3)
    red = clip[..., 0].astype(float).mean(axis=(1, 2))
    np.testing.assert_allclose(red, [16, 28, 40, 52], atol=3)  # lossy, so roughly 4 * index


def test_clip_past_the_end_is_an_error_naming_the_file(video):
    with pytest.raises(VideoDecodeError, match=r"clip\.avi.*ends after 30 decoded frames.*too short") as info:
        read_clip(video, 25, 3, 3)
    assert info.value.path == str(video)
    with pytest.raises(VideoDecodeError, match=r"clip\.avi"):
        read_clip(video, N_FRAMES, 1)


def test_missing_file_is_file_not_found_naming_it(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"nothere\.avi"):
        read_clip(tmp_path / "nothere.avi", 0, 1)
    with pytest.raises(FileNotFoundError, match=r"nothere\.avi"):
        frame_count(tmp_path / "nothere.avi")


@pytest.mark.parametrize("content", [b"", b"this is not a video\n" * 50])
def test_not_a_video_is_a_decode_error(tmp_path, content):
    path = tmp_path / "fake.avi"
    path.write_bytes(content)
    with pytest.raises(VideoDecodeError, match=r"fake\.avi.*cannot be opened as a video"):
        read_clip(path, 0, 1)
    with pytest.raises(VideoDecodeError, match=r"fake\.avi"):
        probe(path)


def test_a_folder_is_not_a_video(tmp_path):
    with pytest.raises(VideoDecodeError, match="is not a file"):
        read_clip(tmp_path, 0, 1)


def test_truncated_file_is_a_decode_error_and_its_header_count_is_not_trusted(tmp_path):
    path = truncate(write_video(tmp_path / "cut.avi", N_FRAMES, fourcc="MJPG"), 0.5)
    header = frame_count(path, exact=False)
    exact = frame_count(path)
    assert header == N_FRAMES
    assert 0 < exact < N_FRAMES
    assert frame_indices(read_clip(path, 0, exact)) == list(range(exact))
    with pytest.raises(VideoDecodeError, match=r"cut\.avi.*header claims 30 frames.*truncated or corrupt"):
        read_clip(path, 0, N_FRAMES)


def test_frame_count_and_probe(video):
    assert frame_count(video) == N_FRAMES
    assert frame_count(video, exact=False) == N_FRAMES
    info = probe(video)
    assert (info.frames, info.width, info.height) == (N_FRAMES, 40, 32)
    assert info.fps == pytest.approx(25)


def test_read_clip_says_how_to_pass_a_square_size(video):
    with pytest.raises(
        TypeError, match=r"size must be a \(height, width\) pair, got the single number 112: pass \(112, 112\)"
    ):
        read_clip(video, 0, 2, 1, 112)


@pytest.mark.parametrize(
    "kwargs",
    [dict(start=-1), dict(clip_len=0), dict(stride=0), dict(size=(0, 10)), dict(size=(10,)), dict(start=1.5)],
)
def test_read_clip_rejects_bad_arguments(video, kwargs):
    args = dict(start=0, clip_len=2, stride=1, size=None) | kwargs
    with pytest.raises(ValueError, match=next(iter(kwargs))):
        read_clip(video, **args)


# VideoFolder

CLASSES = ["walk", "jump", "clap"]  # sorted: clap, jump, walk
PER_CLASS = 3
LENGTHS = [24, 30, 36]


@pytest.fixture(scope="module")
def tree(tmp_path_factory) -> Path:
    """root/<class>/<video>; video id v = 3 * class index in CLASSES + k; a stray text file too."""
    root = tmp_path_factory.mktemp("tree")
    for c, name in enumerate(CLASSES):
        for k in range(PER_CLASS):
            v = PER_CLASS * c + k
            write_video(root / name / f"v{v:02d}.avi", LENGTHS[k], video_id=v)
    (root / "walk" / "notes.txt").write_text("not a video, and not named like one")
    return root


def label_of_video(v: int) -> int:
    return sorted(CLASSES).index(CLASSES[v // PER_CLASS])


def folder(root, **kwargs) -> VideoFolder:
    args = dict(batch_size=4, clip_len=4, stride=2, size=(16, 20), seed=7) | kwargs
    return VideoFolder(root, **args)


def bad_folder(root, **kwargs) -> VideoFolder:
    """``folder`` with short videos as bad samples (``short_clips="error"``): short.avi is one of the bad files."""
    return folder(root, short_clips="error", **kwargs)


def crop_window_of(data: VideoFolder, clip: np.ndarray) -> tuple[int, int, bool]:
    """(top, left, flipped) of a uint8 clip of the tree, found in the uncropped decode of its frames."""
    path = next(p for p, _, _ in data.samples if Path(p).stem == f"v{video_id(clip):02d}")
    full = read_clip(path, frame_indices(clip)[0], data.clip_len, data.stride, data.decode_size)
    return crop_window(clip, full)


def test_labels_are_sorted_class_folders(tree):
    data = folder(tree, train=False)
    assert data.classes == ["clap", "jump", "walk"]
    assert len(data.samples) == 9
    for path, label, frames in data.samples:
        assert data.classes[label] == Path(path).parent.name
        assert frames in LENGTHS


def test_eval_batches_hold_every_video_once_with_its_centre_clip_and_label(tree):
    data = folder(tree, train=False, dtype="uint8")
    assert len(data) == 3  # 9 videos in batches of 4: 4, 4, 1
    seen = []
    for i in range(len(data)):
        clips, labels = data(i)
        assert clips.dtype == np.uint8 and labels.dtype == np.int64
        assert clips.shape[1:] == (4, 16, 20, 3)
        for clip, label in zip(clips, labels, strict=True):
            v = video_id(clip)
            seen.append(v)
            assert label == label_of_video(v)
            frames = LENGTHS[v % PER_CLASS]
            start = (frames - 7) // 2
            assert frame_indices(clip) == [start, start + 2, start + 4, start + 6]
            assert not is_flipped(clip)
            # Decoded at 18x23, so 2 spare rows and 3 spare columns: the centre crop starts at (1, 1).
            assert crop_window_of(data, clip) == (1, 1, False)
    assert [len(data(i)[1]) for i in range(3)] == [4, 4, 1]
    assert sorted(seen) == list(range(9))
    data.on_epoch_end(0)
    np.testing.assert_array_equal(data(1)[0], folder(tree, train=False, dtype="uint8")(1)[0])


def test_float32_clips_are_uint8_scaled_to_unit_range(tree):
    as_float = folder(tree, train=False)(0)[0]
    as_uint8 = folder(tree, train=False, dtype="uint8")(0)[0]
    assert as_float.dtype == np.float32
    assert as_float.min() >= 0 and as_float.max() <= 1
    np.testing.assert_allclose(as_float, as_uint8 / 255, atol=1e-6)


def epoch_batches(data: VideoFolder) -> list[tuple[np.ndarray, np.ndarray]]:
    return [data(i) for i in range(len(data))]


def test_train_batches_are_full_labelled_and_cover_every_video(tree):
    data = folder(tree, train=True, dtype="uint8")
    assert len(data) == 3
    seen = set()
    for clips, labels in epoch_batches(data):
        assert clips.shape == (4, 4, 16, 20, 3)
        for clip, label in zip(clips, labels, strict=True):
            v = video_id(clip)
            seen.add(v)
            assert label == label_of_video(v)
            first = frame_indices(clip)[0]
            assert frame_indices(clip) == [first, first + 2, first + 4, first + 6]
            assert first + 6 < LENGTHS[v % PER_CLASS]
    assert seen == set(range(9))


def test_train_augmentation_is_seeded_and_changes_per_epoch(tree):
    a, b = folder(tree), folder(tree)
    first = epoch_batches(a)
    for (x, y), (x2, y2) in zip(first, epoch_batches(b), strict=True):
        np.testing.assert_array_equal(x, x2)
        np.testing.assert_array_equal(y, y2)
    a.set_epoch(1)
    assert a.epoch == 1
    second = epoch_batches(a)
    assert not all(np.array_equal(x, x2) for (x, _), (x2, _) in zip(first, second, strict=True))
    other_seed = epoch_batches(folder(tree, seed=8))
    assert not all(np.array_equal(x, x2) for (x, _), (x2, _) in zip(first, other_seed, strict=True))
    b.set_epoch(1)
    for (x, _), (x2, _) in zip(second, epoch_batches(b), strict=True):
        np.testing.assert_array_equal(x, x2)


def test_train_augmentation_uses_offsets_crops_and_flips(tree):
    data = folder(tree, dtype="uint8")
    starts, tops, lefts, flips = set(), set(), set(), set()
    for epoch in range(4):
        data.set_epoch(epoch)
        for clips, _ in epoch_batches(data):
            for clip in clips:
                starts.add((video_id(clip), frame_indices(clip)[0]))
                top, left, flipped = crop_window_of(data, clip)
                tops.add(top)
                lefts.add(left)
                flips.add(flipped)
                assert is_flipped(clip) == flipped
    assert len(starts) > 9  # some video started at two different frames
    # Decoded at 18x23 and cropped to 16x20: every top in 0..2 and left in 0..3 occurs.
    assert tops == {0, 1, 2}
    assert lefts == {0, 1, 2, 3}
    assert flips == {False, True}


def run_loader(data: VideoFolder, num_threads: int, epochs: int) -> list[list[tuple[np.ndarray, np.ndarray]]]:
    with DataLoader(data, num_threads=num_threads, max_len=2, shuffle=True, seed=3, ordered=True) as loader:
        return [list(loader) for _ in range(epochs)]


def test_results_do_not_depend_on_the_number_of_loader_threads(tree):
    one = run_loader(folder(tree), 1, 2)
    three = run_loader(folder(tree), 3, 2)
    for epoch_one, epoch_three in zip(one, three, strict=True):
        assert len(epoch_one) == 3
        for (x, y), (x3, y3) in zip(epoch_one, epoch_three, strict=True):
            np.testing.assert_array_equal(x, x3)
            np.testing.assert_array_equal(y, y3)
    # The loader's on_epoch_begin moved the folder to the next epoch: new clips.
    assert not all(np.array_equal(a[0], b[0]) for a, b in zip(one[0], one[1], strict=True))


def test_an_epoch_abandoned_part_way_does_not_repeat_its_clips(tree):
    data = folder(tree, dtype="uint8")
    with DataLoader(data, num_threads=2, max_len=1, ordered=True) as loader:
        batches = iter(loader)
        abandoned = next(batches)
        batches.close()  # as a consumer that counts its steps leaves an epoch
        next_epoch = list(loader)
    assert data.epoch == 1
    assert not np.array_equal(abandoned[0], next_epoch[0][0])
    for x, _ in next_epoch:
        assert not any(np.array_equal(clip, other) for clip in x for other in abandoned[0])


def test_a_loader_starting_at_a_later_epoch_makes_that_epochs_batches(tree):
    from_zero = run_loader(folder(tree), 2, 4)[3]
    data = folder(tree)
    with DataLoader(data, num_threads=2, max_len=2, shuffle=True, seed=3, ordered=True, first_epoch=3) as loader:
        from_three = list(loader)
    assert data.epoch == 3
    for (x, y), (x3, y3) in zip(from_zero, from_three, strict=True):
        np.testing.assert_array_equal(x, x3)
        np.testing.assert_array_equal(y, y3)


def test_random_streams_have_fixed_length_keys_with_their_own_tags(tree):
    """Sample order from [seed, ORDER, epoch]; clip start from [seed, CLIP, epoch, position, attempt]."""
    assert len({_ORDER_KEY, _CLIP_KEY, _SHUFFLE_KEY}) == 3
    data = folder(tree, dtype="uint8")
    for clip, path, frames, rng in _clips_with_their_draws(data, epoch=2, seed=7):
        assert Path(path).stem == f"v{video_id(clip):02d}"
        assert frame_indices(clip)[0] == rng.integers(frames - data.span + 1)


def _clips_with_their_draws(data, epoch, seed):
    """Each clip of ``epoch``, with its sample's path and header frame count, and the generator of its first attempt.

    The sample order comes from ``[seed, ORDER, epoch]``, each clip's draws from
    ``[seed, CLIP, epoch, position, 0]``.
    """
    data.set_epoch(epoch)
    order = np.random.default_rng([seed, _ORDER_KEY, epoch]).permutation(len(data.samples))
    for index, (clips, _) in enumerate(epoch_batches(data)):
        for k, clip in enumerate(clips):
            position = index * data.batch_size + k
            path, _, frames = data.samples[order[position % len(order)]]
            yield clip, path, frames, np.random.default_rng([seed, _CLIP_KEY, epoch, position, 0])


# Bad input


@pytest.fixture
def bad_tree(tmp_path) -> Path:
    for k in range(3):
        write_video(tmp_path / "a" / f"good{k}.avi", 20, video_id=k)
        write_video(tmp_path / "b" / f"good{k}.avi", 20, video_id=3 + k)
    (tmp_path / "a" / "fake.avi").write_text("not a video")
    write_video(tmp_path / "b" / "short.avi", 3, video_id=9)
    truncate(write_video(tmp_path / "b" / "cut.avi", 20, video_id=10, fourcc="MJPG"), 0.6)
    return tmp_path


def test_bad_video_raises_at_its_first_read_naming_it(bad_tree):
    (bad_tree / "b" / "short.avi").unlink()
    (bad_tree / "b" / "cut.avi").unlink()
    data = bad_folder(bad_tree)  # construction opens no file
    with pytest.raises(VideoDecodeError, match=r"fake\.avi.*cannot be opened"):
        epoch_batches(data)
    (bad_tree / "a" / "fake.avi").unlink()
    write_video(bad_tree / "b" / "short.avi", 3, video_id=9)
    data = bad_folder(bad_tree)
    with pytest.raises(VideoDecodeError, match=r"short\.avi.*has 3 frames.*needs \(7\)"):
        epoch_batches(data)


def test_truncated_video_raises_from_the_call_naming_it(bad_tree):
    (bad_tree / "a" / "fake.avi").unlink()
    (bad_tree / "b" / "short.avi").unlink()
    data = bad_folder(bad_tree, train=False)  # the header of cut.avi claims all its frames
    with pytest.raises(VideoDecodeError, match=r"cut\.avi.*truncated or corrupt.*exact_counts=True"):
        epoch_batches(data)


def test_exact_counts_find_the_truncated_video_at_construction(bad_tree):
    (bad_tree / "a" / "fake.avi").unlink()
    (bad_tree / "b" / "short.avi").unlink()
    with pytest.raises(VideoDecodeError, match=r"cut\.avi.*has \d frames"):
        bad_folder(bad_tree, exact_counts=True)


def test_skip_replaces_bad_videos_and_reports_them(bad_tree, caplog):
    with caplog.at_level(logging.WARNING, logger="parallel_loader.video"):
        data = bad_folder(bad_tree, on_error="skip", dtype="uint8")
        assert not data.skipped and len(data.samples) == 9  # bad files are found at their first read
        for epoch in range(3):
            data.set_epoch(epoch)
            for clips, labels in epoch_batches(data):
                assert len(clips) == 4
                for clip, label in zip(clips, labels, strict=True):
                    v = video_id(clip)
                    assert v < 6, "a clip of a bad video was returned"
                    assert label == v // 3
    assert set(map(Path, data.skipped)) == {bad_tree / n for n in ("a/fake.avi", "b/short.avi", "b/cut.avi")}
    assert data.skipped[str(bad_tree / "a" / "fake.avi")].startswith("cannot be opened as a video")
    assert data.skipped[str(bad_tree / "b" / "short.avi")].startswith("has 3 frames")
    assert "truncated or corrupt" in data.skipped[str(bad_tree / "b" / "cut.avi")]
    assert data.replaced >= 1
    logged = " ".join(r.getMessage() for r in caplog.records)
    for name in ("fake.avi", "short.avi", "cut.avi"):
        assert name in logged


def test_empty_or_missing_root_is_a_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="missing"):
        folder(tmp_path / "missing")
    with pytest.raises(ValueError, match="no class folders"):
        folder(tmp_path)
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "readme.txt").write_text("hi")
    with pytest.raises(ValueError, match=r"a has no video files"):
        folder(tmp_path)


@pytest.fixture
def tree_losing_a_video(tmp_path) -> tuple[Path, Path]:
    """Nine good videos in two classes; the tree and the one that tests delete after construction."""
    for v in range(9):
        write_video(tmp_path / "ab"[v % 2] / f"v{v:02d}.avi", 20 + v, video_id=v)
    return tmp_path, tmp_path / "a" / "v04.avi"


def test_skipping_makes_the_same_batches_in_any_order_and_with_any_thread_count(tree_losing_a_video):
    root, lost = tree_losing_a_video
    folders = [folder(root, on_error="skip", dtype="uint8", batch_size=4) for _ in range(4)]
    lost.unlink()  # every attempt to decode it fails from now on
    forward = {(e, i): folders[0].set_epoch(e) or folders[0](i) for e in range(3) for i in range(3)}
    backward = {(e, i): folders[1].set_epoch(e) or folders[1](i) for e in (2, 1, 0) for i in (2, 0, 1)}
    one, three = run_loader(folders[2], 1, 3), run_loader(folders[3], 3, 3)
    for key, (x, y) in forward.items():
        assert 4 not in [video_id(clip) for clip in x]
        np.testing.assert_array_equal(x, backward[key][0])
        np.testing.assert_array_equal(y, backward[key][1])
    for epoch_one, epoch_three in zip(one, three, strict=True):  # in the loader's shuffled order
        for (x, y), (x3, y3) in zip(epoch_one, epoch_three, strict=True):
            np.testing.assert_array_equal(x, x3)
            np.testing.assert_array_equal(y, y3)
    for data in folders:
        assert list(data.skipped) == [str(lost)]
    assert folders[1].replaced == folders[0].replaced > 0
    # The loaders also made the first batches of a fourth epoch ahead, which may replace more.
    assert folders[2].replaced >= folders[0].replaced and folders[3].replaced >= folders[0].replaced


def test_every_video_bad_is_an_error_even_when_skipping(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "x.avi").write_text("nope")
    data = folder(tmp_path, on_error="skip")
    with pytest.raises(VideoDecodeError, match=r"x\.avi.*no video left.*every video failed"):
        data(0)


def test_hidden_files_are_not_videos(tmp_path):
    root = tmp_path / "hidden"
    write_video(root / "a" / "v00.avi", 20, video_id=0)
    (root / "a" / "._v00.avi").write_bytes(b"\x00\x05\x16\x07 resource fork")  # what macOS leaves on other disks
    data = folder(root, train=False)
    assert [Path(p).name for p, _, _ in data.samples] == ["v00.avi"]
    assert not data.skipped


def test_numpy_ints_are_accepted_as_ints(tree):
    args = dict(batch_size=4, clip_len=4, stride=2, size=(16, 20), seed=7)
    plain = VideoFolder(tree, **args, dtype="uint8")
    numpy = VideoFolder(
        tree,
        **{k: np.int64(v) if k != "size" else tuple(np.int32(s) for s in v) for k, v in args.items()},
        dtype="uint8",
    )
    assert type(numpy.batch_size) is int and type(numpy.seed) is int
    numpy.set_epoch(np.int64(1))
    plain.set_epoch(1)
    np.testing.assert_array_equal(plain(0)[0], numpy(0)[0])


def test_classes_argument_fixes_the_label_order(tree):
    data = folder(tree, train=False, classes=["walk", "clap"])
    assert data.classes == ["walk", "clap"]
    assert {(Path(p).parent.name, label) for p, label, _ in data.samples} == {("walk", 0), ("clap", 1)}
    with pytest.raises(FileNotFoundError, match="run"):
        folder(tree, classes=["run"])


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        (dict(batch_size=0), ValueError),
        (dict(clip_len=0), ValueError),
        (dict(on_error="ignore"), ValueError),
        (dict(dtype="float64"), ValueError),
        (dict(seed=-1), ValueError),
        (dict(seed=1.5), TypeError),
        (dict(stride=True), TypeError),
        (dict(classes="walk"), TypeError),  # a str would be read as the classes "w", "a", "l", "k"
        (dict(extensions=".avi"), TypeError),
        (dict(crop_fraction="x"), TypeError),
        (dict(crop_fraction=0), ValueError),
        (dict(train="no"), TypeError),  # a non-empty string would be read as True
        (dict(seek="False"), TypeError),
        (dict(exact_counts=1), TypeError),
        (dict(size=16), TypeError),
    ],
)
def test_video_folder_rejects_bad_arguments(tree, kwargs, error):
    with pytest.raises(error, match=next(iter(kwargs))):
        folder(tree, **kwargs)


def test_a_video_removed_after_construction_is_reported(tree, tmp_path):
    root = tmp_path / "copy"
    for k in range(2):
        write_video(root / "a" / f"v{k}.avi", 20, video_id=k)
    strict = folder(root, train=False, batch_size=2)
    skipping = folder(root, train=False, batch_size=2, on_error="skip", dtype="uint8")
    (root / "a" / "v1.avi").unlink()
    with pytest.raises(FileNotFoundError, match=r"v1\.avi"):
        strict(0)
    clips, labels = skipping(0)
    assert [video_id(c) for c in clips] == [0] and len(labels) == 1  # evaluation leaves it out: no duplicate
    assert list(skipping.skipped) == [str(root / "a" / "v1.avi")]
    assert skipping.replaced == 0


def test_video_folder_with_seek_makes_the_same_batches(tree):
    for train in (True, False):
        for (x, y), (x2, y2) in zip(
            epoch_batches(folder(tree, train=train)), epoch_batches(folder(tree, train=train, seek=True)), strict=True
        ):
            np.testing.assert_array_equal(x, x2)
            np.testing.assert_array_equal(y, y2)


def test_video_folder_root_must_be_a_path_and_one_level_too_high_gets_a_hint(tree, tmp_path):
    with pytest.raises(TypeError, match="root must be the path of a folder of class folders, got NoneType None"):
        folder(None)
    write_video(tmp_path / "data" / "train" / "a" / "v0.avi", 20, video_id=0)
    with pytest.raises(ValueError, match=r"holds class folders itself; did you mean root=.*data/train'\?"):
        folder(tmp_path / "data")


def test_files_skipped_in_a_loader_are_in_its_error_records_manifest_and_budget(bad_tree, tmp_path):
    manifest = tmp_path / "errors.jsonl"
    data = bad_folder(bad_tree, on_error="skip", dtype="uint8")  # cut.avi fails only when decoded
    with DataLoader(data, num_threads=2, on_error="skip", error_log=manifest) as loader:
        batches = list(loader)
    assert len(batches) == len(data)  # its clips were replaced, no batch was lost
    bad = {str(bad_tree / n) for n in ("a/fake.avi", "b/short.avi", "b/cut.avi")}  # found at their first read
    assert sorted(r.context["path"] for r in loader.errors) == sorted(bad)
    record = next(r for r in loader.errors if r.context["path"].endswith("cut.avi"))
    assert record.epoch == 0 and record.type == "VideoDecodeError" and 0 <= record.index < len(data)
    assert "truncated or corrupt" in record.context["reason"]
    assert sorted(json.loads(line)["context"]["path"] for line in manifest.read_text().splitlines()) == sorted(bad)

    data = bad_folder(bad_tree, on_error="skip", dtype="uint8")
    loader = DataLoader(data, num_threads=2, on_error="skip", max_errors=0)
    with loader, pytest.raises(ErrorBudgetExceeded, match=r"(cut|fake|short)\.avi"):
        list(loader)


def test_a_failed_call_records_the_files_of_its_batch(bad_tree):
    data = bad_folder(bad_tree, on_error="skip", dtype="uint8", train=False)
    assert data.error_context(0) == {"epoch": 0, "paths": [p for p, _, _ in data.samples[:4]]}


# Headers that claim more frames than decode

DECODED = 64  # the frames that decode from each file of the `overstated` tree
GAP_STAMPS = [i + 10 * (i >= 20) + 13 * (i >= 41) for i in range(DECODED)]  # 23 timestamps skipped


@pytest.fixture(scope="module")
def overstated(tmp_path_factory) -> Path:
    """Two whole XviD AVIs of 64 frames whose headers claim more: ``count/count.avi`` (90), ``gaps/gaps.avi`` (87).

    The header of ``gaps.avi`` counts its timestamp gaps as frames; ``count.avi``
    has none, but its header was made to claim 90.
    """
    root = tmp_path_factory.mktemp("overstated")
    write_encoded_video(root / "gaps" / "gaps.avi", DECODED, "mpeg4", codec_tag="XVID", timestamps=GAP_STAMPS)
    overstate_frame_count(write_encoded_video(root / "count" / "count.avi", DECODED, "mpeg4", codec_tag="XVID"), 90)
    return root


@pytest.fixture
def cold_index_cache():
    """A new, empty default index cache for the test; the old one back after it."""
    before = default_index_cache()
    set_default_index_cache(IndexCache())
    yield default_index_cache()
    set_default_index_cache(before)


def clip_start(clip: np.ndarray, truth: np.ndarray, stride: int) -> int:
    """The frame of ``truth`` (every frame of a video) that a whole-frame clip, flipped or not, starts at."""
    span = (len(clip) - 1) * stride + 1
    starts = [
        s
        for s in range(len(truth) - span + 1)
        if any(np.array_equal(clip, c) for c in (truth[s : s + span : stride], truth[s : s + span : stride, :, ::-1]))
    ]
    assert len(starts) == 1, f"the clip matches the frames from {starts}"
    return starts[0]


def test_clips_stay_within_the_frames_that_decode_when_the_header_claims_more(overstated, cold_index_cache):
    paths = [overstated / "count" / "count.avi", overstated / "gaps" / "gaps.avi"]  # labels 0 and 1
    assert [probe(p).frames for p in paths] == [90, 87]
    truths = [read_clip(p, 0, DECODED, seek=False) for p in paths]  # every frame, decoded from the first

    def make() -> VideoFolder:  # whole frames (crops cut nothing), so that clips compare with the frames
        args = dict(size=(48, 64), crop_fraction=1, dtype="uint8", seed=5)
        return VideoFolder(overstated, batch_size=2, clip_len=16, stride=2, **args)

    one = run_loader(make(), 1, 10)  # starting with no index: each file's first call makes it
    assert len(cold_index_cache) == 2
    three = run_loader(make(), 3, 10)  # every index made already
    set_default_index_cache(IndexCache())
    late = make()  # a call that meets no index, for an epoch far into the run
    late_batch = late.get_batch(0, 7)
    starts: list[int] = []
    for epoch, (epoch_one, epoch_three) in enumerate(zip(one, three, strict=True)):
        ((x, y),) = epoch_one
        ((x3, y3),) = epoch_three
        np.testing.assert_array_equal(x, x3)
        np.testing.assert_array_equal(y, y3)
        if epoch == 7:
            np.testing.assert_array_equal(x, late_batch[0])
        for clip, label in zip(x, y, strict=True):
            starts.append(clip_start(clip, truths[label], stride=2))  # frames that decode, in order
    assert len(starts) == 20 and len(set(starts)) > 8  # random starts, all within the 64 frames


def test_files_whose_header_is_right_give_the_clips_their_header_alone_would(tree, cold_index_cache):
    """The index is asked on each call, but for a file whose header is right the clips are those it always gave."""
    data = folder(tree, dtype="uint8")
    for clip, path, frames, rng in _clips_with_their_draws(data, epoch=2, seed=7):
        start = int(rng.integers(frames - data.span + 1))
        top, left, flip = int(rng.integers(3)), int(rng.integers(4)), bool(rng.integers(2))
        full = read_clip(path, start, data.clip_len, data.stride, data.decode_size, seek=False)
        view = full[:, top : top + 16, left : left + 20]
        np.testing.assert_array_equal(clip, view[:, :, ::-1] if flip else view)


def test_a_sample_too_long_for_the_frames_that_decode_is_a_clear_error(overstated):
    data = VideoFolder(overstated, batch_size=2, clip_len=40, stride=2, size=(48, 64), train=False, short_clips="error")
    assert [frames for _, _, frames in data.samples] == [90, 87]  # the headers' counts: long enough for 79
    with pytest.raises(
        VideoDecodeError,
        match=r"count\.avi: has 64 frames that decode in the file \(its header claims more.*\), "
        r"fewer than a clip of 40 frames at stride 2 needs \(79\)",
    ):
        data(0)


def test_a_segment_past_the_frames_that_decode_is_skipped_alone(overstated):
    gaps = overstated / "gaps" / "gaps.avi"
    truth = read_clip(gaps, 0, DECODED, seek=False)
    # Segments map to frames by timestamps: [2.0, 3.4) s holds frames 40-61 (a gap of 10 puts them later than
    # the header's rate says); [0.8, 1.2) s lies in that gap, where the header's rate counts 10 frames.
    rows = [(gaps, 0, 2.0, 3.4), (gaps, 0, 0.8, 1.2)]
    with av.open(str(gaps)) as container:
        times = [float(f.pts * f.time_base) for f in container.decode(video=0)]
    first = next(i for i, t in enumerate(times) if t >= 2.0 - 1e-9)
    assert first == 40 and not any(0.8 <= t < 1.2 for t in times)
    args = dict(batch_size=2, clip_len=4, stride=2, size=(48, 64), crop_fraction=1, dtype="uint8", seed=1)
    data = VideoDataset(rows, on_error="skip", **args)
    assert data.samples == [(str(gaps), 0, 35), (str(gaps), 0, 10)]  # as the header claims
    for epoch in range(5):
        data.set_epoch(epoch)
        for clip in data(0)[0]:
            assert first <= clip_start(clip, truth, stride=2) <= 62 - 7  # within frames 40-61
    assert list(data.skipped) == [f"{gaps} [0.8, 1.2) s"]  # the file's other segment is fine
    assert data.skipped[f"{gaps} [0.8, 1.2) s"].startswith("has 0 frames that decode in segment [0.8, 1.2) s")
    assert data.replaced >= 5
    with pytest.raises(VideoDecodeError, match=r"gaps\.avi: has 0 frames that decode in segment \[0\.8, 1\.2\) s"):
        VideoDataset(rows, train=False, **args)(0)


def test_a_truncated_file_still_fails_past_the_frames_that_decode(tmp_path):
    """A file cut short is not whole: its header may be right about what is missing, so a clip past the end fails."""
    path = truncate(write_encoded_video(tmp_path / "a" / "cut.avi", DECODED, "mpeg4", codec_tag="XVID"), 0.9)
    assert probe(path).frames == DECODED > frame_count(path) > DECODED - 16
    data = VideoFolder(tmp_path, batch_size=1, clip_len=16, stride=4, size=(48, 64), train=False)  # the centre: 1-61
    with pytest.raises(
        VideoDecodeError,
        match=r"cut\.avi: ends after \d+ decoded frames.*claims 64 frames, so the file is truncated or corrupt"
        r".*exact_counts=True",
    ):
        data(0)


def test_len_of_a_video_dataset_counts_batches_and_len_of_its_samples_counts_samples(tmp_path):
    rows = [(str(tmp_path / f"v{k}.avi"), 0) for k in range(10)]
    data = VideoDataset(rows, batch_size=4, clip_len=4, size=(16, 20), find_missing=False)
    assert (len(data), len(data.samples)) == (3, 10)
    with DataLoader(data, num_threads=1) as loader:
        assert len(loader) == 3
