"""Temporal sampling (random clips, TSN-style segments), crops and multi-view evaluation."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from parallel_loader import DataLoader
from parallel_loader.video import VideoDataset, VideoDecodeError, VideoFolder, read_clip
from parallel_loader.video._samples.augment import fitted
from parallel_loader.video._samples.sampling import crops, frames_needed, temporal_views

from .video_files import HEIGHT, WIDTH, crop_window, frame_indices, video_id, write_video

# sampling.py alone


@pytest.mark.parametrize(
    ("first", "stop", "clip_len", "stride", "views"), [(0, 30, 4, 2, 3), (10, 61, 5, 3, 4), (7, 20, 3, 1, 2)]
)
def test_eval_clips_are_evenly_spread_over_the_frames(first, stop, clip_len, stride, views):
    clips = temporal_views("clip", first, stop, clip_len, stride, num_views=views)
    assert len(clips) == views
    for clip in clips:
        np.testing.assert_array_equal(np.diff(clip), stride)
    starts = [int(c[0]) for c in clips]
    room = stop - first - frames_needed("clip", clip_len, stride)  # the last start, counted from first
    gaps = np.diff(starts)
    assert gaps.min() >= 1 and gaps.max() - gaps.min() <= 1  # evenly spaced, to the frame
    # Centred: as much room before the first clip as after the last, to a frame.
    before, after = starts[0] - first, first + room - starts[-1]
    assert abs(before - after) <= 1
    assert starts[0] >= first and clips[-1][-1] < stop
    # One view is the centre clip.
    assert [int(c[0]) for c in temporal_views("clip", first, stop, clip_len, stride)] == [first + room // 2]


def test_random_clips_cover_every_start():
    starts = {int(temporal_views("clip", 5, 20, 4, 2, np.random.default_rng(k))[0][0]) for k in range(300)}
    assert starts == set(range(5, 20 - 7 + 1))


@pytest.mark.parametrize(("frames", "segments"), [(30, 4), (8, 8), (61, 7)])
def test_segments_take_one_frame_from_each_equal_part(frames, segments):
    first = 3
    bounds = [first + frames * i // segments for i in range(segments + 1)]
    seen: list[set[int]] = [set() for _ in range(segments)]
    for k in range(400):
        (indices,) = temporal_views("segments", first, first + frames, segments, rng=np.random.default_rng(k))
        assert len(indices) == segments
        for i, index in enumerate(indices):
            assert bounds[i] <= index < bounds[i + 1]
            seen[i].add(int(index))
    assert all(seen[i] == set(range(bounds[i], bounds[i + 1])) for i in range(segments))  # every frame can be drawn
    (centre,) = temporal_views("segments", first, first + frames, segments)
    for i, index in enumerate(centre):
        middle = first + frames * (i + 0.5) / segments
        assert middle - 1 < index <= middle


def test_segment_views_spread_inside_each_segment():
    views = temporal_views("segments", 0, 60, 5, num_views=3)  # segments of 12 frames
    np.testing.assert_array_equal(np.stack(views), [[2, 14, 26, 38, 50], [6, 18, 30, 42, 54], [10, 22, 34, 46, 58]])


def test_too_few_frames_for_the_sampling_is_an_error():
    assert frames_needed("clip", 4, 3) == 10 and frames_needed("segments", 4, 1) == 4
    with pytest.raises(ValueError, match="9 frames are too few"):
        temporal_views("clip", 0, 9, 4, 3)
    assert len(temporal_views("segments", 0, 4, 4)[0]) == 4
    with pytest.raises(ValueError, match="3 frames are too few"):
        temporal_views("segments", 0, 3, 4)


def test_three_crops_run_along_the_long_side():
    assert crops((18, 23), (16, 20), num_crops=3) == [(1, 0, False), (1, 1, False), (1, 3, False)]
    assert crops((23, 18), (20, 16), num_crops=3) == [(0, 1, False), (1, 1, False), (3, 1, False)]
    assert crops((18, 23), (16, 20)) == [(1, 1, False)]
    draws = {tuple(crops((18, 23), (16, 20), np.random.default_rng(k))[0]) for k in range(300)}
    assert draws == {(t, left, f) for t in range(3) for left in range(4) for f in (False, True)}
    with pytest.raises(ValueError, match="num_crops must be one of"):
        crops((18, 23), (16, 20), num_crops=2)


# Through the data sets

LENGTHS = [24, 40]


@pytest.fixture(scope="module")
def tree(tmp_path_factory) -> Path:
    """root/<class>/v<id>.avi: 2 classes of 2 videos, 24 and 40 frames."""
    root = tmp_path_factory.mktemp("sampling")
    for v in range(4):
        write_video(root / "ab"[v // 2] / f"v{v}.avi", LENGTHS[v % 2], video_id=v)
    return root


def folder(root, **kwargs) -> VideoFolder:
    args = dict(batch_size=3, clip_len=4, stride=2, size=(16, 20), seed=5, dtype="uint8") | kwargs
    return VideoFolder(root, **args)


def window(data: VideoFolder, clip: np.ndarray) -> tuple[int, int, bool]:
    """(top, left, flipped) of a uint8 clip, found in the uncropped decode of its frames."""
    path = data.root / "ab"[video_id(clip) // 2] / f"v{video_id(clip)}.avi"
    decode_size, _ = fitted((HEIGHT, WIDTH), data.decode_size, data.resize)  # as the dataset fits the frames
    full = np.concatenate([read_clip(path, i, 1, size=decode_size) for i in frame_indices(clip)])
    return crop_window(clip, full)


def test_multi_view_eval_gives_evenly_spaced_clips_times_three_crops(tree):
    data = folder(tree, train=False, num_clips=3, num_crops=3)
    assert data.views == 9 and len(data) == 2
    seen = []
    for index in range(len(data)):
        clips, labels = data(index)
        assert clips.shape == (len(labels), 9, 4, 16, 20, 3)
        assert labels.shape == (len(labels),) and labels.dtype == np.int64
        for views, label in zip(clips, labels, strict=True):
            v = video_id(views[0])
            seen.append(v)
            assert label == v // 2
            assert all(video_id(view) == v for view in views)
            room = LENGTHS[v % 2] - 7
            for j in range(3):
                start = room * (2 * j + 1) // 6
                for c, expected in enumerate([(1, 0, False), (1, 1, False), (1, 3, False)]):
                    view = views[3 * j + c]
                    assert frame_indices(view) == [start, start + 2, start + 4, start + 6]
                    assert window(data, view) == expected  # left, centre, right of the 18x23 decode
    assert seen == [0, 1, 2, 3]
    single = folder(tree, train=False)(0)[0]
    np.testing.assert_array_equal(folder(tree, train=False, num_clips=1, num_crops=1)(0)[0][:, 0], single)


def test_tall_frames_are_cropped_top_centre_bottom(tree):
    # Stretched: the wide frames are squashed to a tall box (the aspect kept, they stay wide).
    clips, _ = folder(tree, train=False, size=(20, 16), num_crops=3, resize="stretch")(0)
    assert clips.shape == (3, 3, 4, 20, 16, 3)
    data = folder(tree, train=False, size=(20, 16), resize="stretch")
    assert [window(data, view) for view in clips[0]] == [(0, 1, False), (1, 1, False), (3, 1, False)]


def test_segment_sampling_in_training_takes_a_frame_from_each_segment(tree):
    data = folder(tree, sampling="segments", stride=1, clip_len=5)
    assert data.span == 5
    draws: dict[int, set[tuple[int, ...]]] = {v: set() for v in range(4)}
    for epoch in range(3):
        data.set_epoch(epoch)
        for index in range(len(data)):
            clips, labels = data(index)
            assert clips.shape == (3, 5, 16, 20, 3)
            for clip, label in zip(clips, labels, strict=True):
                v = video_id(clip)
                assert label == v // 2
                frames, indices = LENGTHS[v % 2], frame_indices(clip)
                assert all(frames * i // 5 <= index < frames * (i + 1) // 5 for i, index in enumerate(indices))
                draws[v].add(tuple(indices))
                window(data, clip)  # a crop of the frames asked for, flipped or not
    assert sum(len(d) for d in draws.values()) > 4  # the frames change from epoch to epoch


def test_segment_sampling_in_evaluation_takes_segment_centres_and_views(tree):
    clips, _ = folder(tree, train=False, sampling="segments", stride=1, clip_len=4)(0)
    assert [frame_indices(c) for c in clips] == [[3, 9, 15, 21], [5, 15, 25, 35], [3, 9, 15, 21]]
    views, _ = folder(tree, train=False, sampling="segments", stride=1, clip_len=4, num_clips=2)(0)
    assert views.shape == (3, 2, 4, 16, 20, 3)
    assert [frame_indices(c) for c in views[1]] == [[2, 12, 22, 32], [7, 17, 27, 37]]


def test_segments_of_a_trimmed_sample_stay_inside_it(tmp_path):
    path = write_video(tmp_path / "long.avi", 60, fps=25)
    data = VideoDataset(
        [(path, 0, 0.4, 1.2)], batch_size=1, clip_len=4, size=(16, 20), sampling="segments", seed=1, dtype="uint8"
    )
    assert data.samples == [(str(path), 0, 20)]  # frames 10 to 29
    for epoch in range(5):
        data.set_epoch(epoch)
        indices = frame_indices(data(0)[0][0])
        assert all(10 + 5 * i <= index < 15 + 5 * i for i, index in enumerate(indices))


def run_loader(data, num_threads: int, epochs: int) -> list[list[tuple[np.ndarray, np.ndarray]]]:
    with DataLoader(data, num_threads=num_threads, max_len=2, ordered=True) as loader:
        return [list(loader) for _ in range(epochs)]


@pytest.mark.parametrize(
    "kwargs",
    [
        dict(sampling="segments", stride=1),
        dict(train=False, num_clips=2, num_crops=3),
        dict(train=False, sampling="segments", stride=1, num_clips=2, num_crops=3),
    ],
)
def test_batches_do_not_depend_on_thread_count_or_call_order(tree, kwargs):
    one = run_loader(folder(tree, **kwargs), 1, 2)
    three = run_loader(folder(tree, **kwargs), 3, 2)
    backward = folder(tree, **kwargs)
    backward.set_epoch(1)
    called = [backward(i) for i in (1, 0)][::-1]
    for epoch_one, epoch_three in zip(one, three, strict=True):
        assert len(epoch_one) == 2
        for (x, y), (x3, y3) in zip(epoch_one, epoch_three, strict=True):
            np.testing.assert_array_equal(x, x3)
            np.testing.assert_array_equal(y, y3)
    for (x, y), (x1, y1) in zip(one[1], called, strict=True):
        np.testing.assert_array_equal(x, x1)
        np.testing.assert_array_equal(y, y1)
    if kwargs.get("train", True):  # a new epoch, new draws
        assert not all(np.array_equal(a[0], b[0]) for a, b in zip(one[0], one[1], strict=True))


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        (dict(num_clips=3), "num_clips and num_crops are for evaluation"),
        (dict(train=False, num_crops=2), r"num_crops must be one of \(1, 3\)"),
        (dict(train=False, num_clips=0), "num_clips must be at least 1"),
        (dict(sampling="segments"), "stride applies to sampling='clip' only"),
        (dict(sampling="dense"), "sampling must be one of"),
    ],
)
def test_bad_sampling_arguments_are_errors(tree, kwargs, error):
    with pytest.raises(ValueError, match=error):
        folder(tree, **kwargs)


def test_segments_need_a_frame_per_segment(tree):
    with pytest.raises(VideoDecodeError, match=r"v\d\.avi: has 24 frames, fewer than 30 segments need \(30\)"):
        data = folder(tree, sampling="segments", stride=1, clip_len=30, short_clips="error")  # opens no file
        for i in range(len(data)):
            data(i)
