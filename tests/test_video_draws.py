"""Weighted and class-balanced draws of a VideoDataset: who is drawn, how often, and the same in any run."""

from __future__ import annotations

import logging
import pickle

import numpy as np
import pytest

from parallel_loader import DataLoader
from parallel_loader.video import VideoDataset, VideoFolder
from parallel_loader.video._datasets.draws import EpochDraws
from tests.helpers import resumed_rest
from tests.video_files import video_id, write_video

FRAMES = 4


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> list[str]:
    """Three lossless videos of 4 frames; their pixels say which video they are."""
    root = tmp_path_factory.mktemp("draws")
    return [str(write_video(root / f"v{v}.avi", FRAMES, video_id=v, size=(8, 8))) for v in range(3)]


@pytest.fixture(scope="module")
def nine_to_one(files) -> list[tuple[str, int]]:
    """A 9:1 list of two classes: 90 rows of video 0 (class 0) and 10 of video 1 (class 1)."""
    return [(files[0], 0)] * 90 + [(files[1], 1)] * 10


def dataset(rows, **kwargs) -> VideoDataset:
    options = {"batch_size": 50, "clip_len": 1, "size": (8, 8), "seed": 3, "dtype": "uint8", **kwargs}
    return VideoDataset(rows, **options)


def epoch(source, **loader) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One epoch's (videos read, labels, sample indices), in batch order, through a DataLoader."""
    with DataLoader(source, seed=1, ordered=True, name="draws", **loader) as data:
        batches = list(data)
    clips, labels, indices = (np.concatenate(part) for part in zip(*batches, strict=True))
    return np.array([video_id(clip) for clip in clips]), labels, indices


def test_balanced_draws_give_each_class_about_half_of_an_epoch(nine_to_one):
    data = dataset(nine_to_one, weights="balanced", samples_per_epoch=1000, return_index=True)
    assert len(data) == 20
    videos, labels, indices = epoch(data, num_threads=2)
    assert len(labels) == 1000
    share = np.mean(labels == 1)
    assert 0.4 <= share <= 0.6
    assert np.array_equal(videos, labels)  # each label is its clip's: video v is class v
    assert np.array_equal(labels, np.array(nine_to_one, dtype=object)[indices, 1].astype(np.int64))
    unweighted = dataset(nine_to_one, samples_per_epoch=1000, return_index=True)
    assert np.mean(epoch(unweighted, num_threads=2)[1] == 1) == pytest.approx(0.1)  # each row once a round


def test_weights_are_proportions_and_a_zero_weight_is_never_drawn(files):
    rows = [(files[0], 0), (files[1], 1), (files[2], 2)]
    data = dataset(rows, weights=np.array([3, 0, 1]), samples_per_epoch=400, batch_size=100)
    drawn = np.concatenate([data(i)[1] for i in range(len(data))])
    counts = np.bincount(drawn, minlength=3)
    assert np.any(np.diff(drawn) < 0) and np.any(np.diff(drawn) > 0)  # in no sorted order
    assert counts[1] == 0
    assert 0.65 <= counts[0] / 400 <= 0.85  # 3 of 4: 0.75, and 400 draws are within 0.1 of it here
    data.set_epoch(1)
    other = np.concatenate([data(i)[1] for i in range(len(data))])
    data.set_epoch(0)
    again = np.concatenate([data(i)[1] for i in range(len(data))])
    assert not np.array_equal(other, again) and counts.tolist() == np.bincount(again, minlength=3).tolist()


def test_the_same_seed_draws_the_same_with_one_or_three_threads_and_in_a_process(nine_to_one):
    data = dataset(nine_to_one, weights="balanced", samples_per_epoch=200, return_index=True)
    runs = [epoch(data, num_threads=1), epoch(pickle.loads(pickle.dumps(data)), num_threads=3)]
    runs.append(epoch(data, num_threads=1, processes=1))
    for run in runs[1:]:
        for a, b in zip(runs[0], run, strict=True):
            np.testing.assert_array_equal(a, b)
    other_seed = epoch(dataset(nine_to_one, weights="balanced", samples_per_epoch=200, return_index=True, seed=4))
    assert not np.array_equal(runs[0][2], other_seed[2])


def test_a_resumed_epoch_draws_the_rest_it_would_have(nine_to_one):
    data = dataset(nine_to_one, weights="balanced", samples_per_epoch=150, return_index=True)
    whole = epoch(data, num_threads=2)
    rest = resumed_rest(data, threads=3)
    assert len(rest) == 2
    np.testing.assert_array_equal(np.concatenate([b[2] for b in rest]), whole[2][50:])
    np.testing.assert_array_equal(np.concatenate([b[1] for b in rest]), whole[1][50:])


def test_weights_follow_their_rows_when_files_are_left_out(files, tmp_path, caplog):
    gone = str(tmp_path / "gone.avi")
    rows = [(gone, 0), (files[0], 0), (files[1], 1), (files[2], 2)]
    with caplog.at_level(logging.WARNING, logger="parallel_loader"):
        data = dataset(rows, weights=[5, 0, 1, 0], on_error="skip", exclude=[files[2]], batch_size=20)
    assert len(data.samples) == 2  # the missing file and the excluded one are left out
    assert set(data(0)[1].tolist()) == {1}  # only the weight of row 2 is left
    with pytest.raises(ValueError, match="every sample of non-zero weight was left out"):
        dataset(rows, weights=[5, 0, 0, 1], on_error="skip", exclude=[files[2]])


def test_samples_per_epoch_without_weights_takes_every_sample_once_a_round(files):
    rows = [(files[v], v) for v in range(3)]
    data = dataset(rows, samples_per_epoch=7, batch_size=7)
    labels = data(0)[1]
    assert len(data) == 1 and len(labels) == 7
    assert [sorted(labels[i : i + 3].tolist()) for i in (0, 3)] == [[0, 1, 2], [0, 1, 2]]
    assert dataset(rows, samples_per_epoch=2, batch_size=1).__len__() == 2
    default = dataset(rows, batch_size=3)
    np.testing.assert_array_equal(dataset(rows, batch_size=3, weights=None)(0)[1], default(0)[1])


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"weights": [1, -1, 1]}, ValueError, r"finite and at least 0: 1 are not, the first at sample 1 \(-1.0\)"),
        ({"weights": [1, float("nan"), 1]}, ValueError, "finite and at least 0"),
        ({"weights": [1, float("inf"), 1]}, ValueError, "finite and at least 0"),
        ({"weights": [1, 1]}, ValueError, r"one number per sample: 3 samples, got shape \(2,\)"),
        ({"weights": [[1, 1, 1]]}, ValueError, "one number per sample"),
        ({"weights": [0, 0, 0]}, ValueError, "weights are all zero"),
        ({"weights": [1e308, 1e308, 1e308]}, ValueError, "weights sum to more than a float holds"),
        ({"weights": [[1], [1, 2], [1]]}, TypeError, "weights must be numbers"),
        ({"weights": "uniform"}, TypeError, "weights must be None, 'balanced' or one number per sample"),
        ({"weights": ["a", "b", "c"]}, TypeError, "weights must be numbers"),
        ({"weights": 3}, TypeError, "weights must be None"),
        ({"weights": {0: 1.0, 1: 1.0, 2: 1.0}}, TypeError, "weights must be None"),
        ({"samples_per_epoch": 0}, ValueError, "samples_per_epoch must be at least 1"),
        ({"samples_per_epoch": 2.5}, TypeError, "samples_per_epoch must be an int"),
        ({"weights": "balanced", "train": False}, ValueError, "weights and samples_per_epoch are for training"),
        ({"samples_per_epoch": 5, "train": False}, ValueError, "are for training"),
    ],
)
def test_bad_weights_fail_at_construction(files, kwargs, error, match):
    with pytest.raises(error, match=match):
        dataset([(files[v], v) for v in range(3)], find_missing=False, **kwargs)


def test_video_folder_takes_balanced_weights(tmp_path):
    for v in range(4):
        write_video(tmp_path / ("many" if v else "few") / f"v{v}.avi", FRAMES, video_id=v, size=(8, 8))
    data = VideoFolder(tmp_path, 100, 1, size=(8, 8), seed=1, weights="balanced", samples_per_epoch=200)
    assert data.classes == ["few", "many"] and len(data) == 2
    labels = np.concatenate([data(i)[1] for i in range(2)])
    assert 0.4 <= np.mean(labels == 0) <= 0.6
    # One weight per video found, in sorted order, the excluded one included: few/v0, many/v1, many/v2, many/v3.
    only = VideoFolder(tmp_path, 10, 1, size=(8, 8), weights=[0, 1, 0, 1], exclude=[tmp_path / "many" / "v3.avi"])
    assert len(only.samples) == 3 and set(only(0)[1].tolist()) == {1}


def test_balanced_draws_weigh_by_the_first_label_of_several():
    labels = np.array([[0, 5], [0, 6], [0, 5], [1, 5]])  # heads (verb, noun): verbs 3:1, nouns 3:1 the other way
    draws = EpochDraws.of("balanced", 4000, labels, np.arange(4))
    drawn = labels[draws.order(seed=0, epoch=0), 0]
    assert 0.45 <= np.mean(drawn == 1) <= 0.55  # verb 1's one sample is drawn as often as verb 0's three
