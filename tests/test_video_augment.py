"""Augmentation of a VideoDataset: scale jitter, resized crops, transforms, mixing, labels and indices.

Every random choice comes from the dataset's seed, so each test recomputes the
choices from the documented keys and checks the pixels against ``read_clip``.
"""

from __future__ import annotations

import pickle

import numpy as np
import pytest

from parallel_loader import DataLoader
from parallel_loader.video import Augment, CutMix, Mixup, VideoDataset, read_clip
from parallel_loader.video._datasets.seeds import batch_rng, clip_rng, transform_rng
from parallel_loader.video._samples.sampling import temporal_views
from tests.helpers import resumed_rest
from tests.video_files import frame_indices, video_id, write_video

FRAMES, VIDEOS = 12, 4


@pytest.fixture(scope="module")
def rows(tmp_path_factory) -> list[tuple[str, int]]:
    """Four lossless 32x40 videos of 12 frames, two classes; pixels tell the video and the frame."""
    root = tmp_path_factory.mktemp("augment")
    return [(str(write_video(root / f"v{v}.avi", FRAMES, video_id=v)), v % 2) for v in range(VIDEOS)]


def dataset(rows, **kwargs) -> VideoDataset:
    options = {"batch_size": 2, "clip_len": 4, "size": (24, 24), "seed": 5, "dtype": "uint8", **kwargs}
    return VideoDataset(rows, **options)


def add_noise(clip: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """A transform at module level, so that a dataset using it pickles."""
    return clip + rng.integers(0, 3, dtype=np.uint8)


# Construction: bad arguments are named at once.


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"scale": (10,)}, TypeError, "scale must be a"),
        ({"scale": (40, 30)}, ValueError, "0 < min <= max"),
        ({"scale": (30, 40), "crop": "resized"}, ValueError, "scale is for crop='random'"),
        ({"crop": "centre"}, ValueError, "crop must be one of"),
        ({"area": (0.5, 1.5)}, ValueError, "area must be"),
        ({"ratio": (2, 1)}, ValueError, "ratio must be"),
        ({"flip": "yes"}, TypeError, "flip must be True or False"),
    ],
)
def test_augment_names_a_bad_argument(kwargs, error, match):
    with pytest.raises(error, match=match):
        Augment(**kwargs)


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"augment": Augment(scale=(20, 30))}, ValueError, "make scale's min at least 24"),
        ({"augment": {"scale": (30, 40)}}, TypeError, "augment must be an Augment"),
        ({"scale": (20, 30)}, ValueError, "make scale's min at least 24"),
        ({"scale": (30, 40), "augment": Augment()}, ValueError, "not both"),
        ({"labels": "onehot"}, ValueError, "labels must be one of"),
        ({"label_smoothing": 0.1}, ValueError, "label_smoothing needs one-hot labels"),
        ({"label_smoothing": 1.0, "labels": "one_hot"}, ValueError, r"in \[0, 1\)"),
        ({"batch_transform": Mixup(0.2)}, ValueError, r"Mixup\(alpha=0.2\) mixes one-hot labels"),
        ({"transform": "flip"}, TypeError, "transform must be callable"),
        ({"return_index": 1}, TypeError, "return_index must be True or False"),
    ],
)
def test_the_dataset_names_a_bad_augmentation_argument(rows, kwargs, error, match):
    with pytest.raises(error, match=match):
        dataset(rows, **kwargs)


def test_scale_is_short_for_an_augment_with_that_scale(rows):
    short, long = dataset(rows, scale=(26, 34)), dataset(rows, augment=Augment(scale=(26, 34)))
    assert short.augment == Augment(scale=(26, 34))
    for index in range(len(short)):
        for a, b in zip(short.get_batch(index, 1), long.get_batch(index, 1), strict=True):
            np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("alpha", [0, -1.0, "1", True])
def test_mixing_needs_a_positive_alpha(alpha):
    with pytest.raises((TypeError, ValueError), match="alpha must be a positive number"):
        CutMix(alpha)


# Plans: pure functions of the frame size and the generator.


def test_scale_jitter_keeps_the_aspect_and_draws_every_short_side():
    augment = Augment(scale=(24, 28))
    shorts = set()
    for k in range(200):
        (height, width), [window], _ = augment.plan((30, 60), (24, 24), (0, 0), np.random.default_rng(k))
        shorts.add(height)
        assert width == 2 * height and 0 <= window.top <= height - 24 and 0 <= window.left <= width - 24
    assert shorts == set(range(24, 29))
    # Evaluation: the short side at scale's min, three windows along the long side, no flip.
    size, windows, _ = augment.plan((60, 30), (24, 24), (0, 0), None, num_crops=3)
    assert size == (48, 24) and [(w.top, w.flip) for w in windows] == [(0, False), (12, False), (24, False)]


def test_a_resized_crop_covers_its_share_of_the_frame_at_its_ratio():
    augment = Augment(crop="resized", area=(0.25, 0.5), ratio=(0.5, 2.0), flip=False)
    for k in range(100):
        (height, width), [window], _ = augment.plan((120, 160), (16, 16), (0, 0), np.random.default_rng(k))
        # The window is 16x16 in a frame scaled by 16 / (its size in the original frame).
        share = (16 / height) * (16 / width)
        assert 0.22 <= share <= 0.55 and 0.45 <= (160 / width) / (120 / height) <= 2.2  # rounding to pixels
        assert window.top + 16 <= height and window.left + 16 <= width and not window.flip


def test_without_flip_no_clip_is_flipped():
    plans = [Augment(flip=False).plan((30, 40), (24, 24), (28, 32), np.random.default_rng(k)) for k in range(50)]
    assert not any(p.windows[0].flip for p in plans)


# Batches: the pixels the documented draws name.


def expected_clip(path: str, seed: int, epoch: int, position: int, augment: Augment) -> np.ndarray:
    """The training clip at ``position``: recomputed from its generator, as the docs say it is drawn."""
    rng = clip_rng(seed, epoch, position, 0)
    [frames] = temporal_views("clip", 0, FRAMES, 4, 1, rng)
    decode, [window], _ = augment.plan((32, 40), (24, 24), (27, 27), rng)
    clip = read_clip(path, int(frames[0]), 4, size=decode)[:, window.top : window.top + 24, window.left :][:, :, :24]
    return clip[:, :, ::-1] if window.flip else clip


@pytest.mark.parametrize("augment", [Augment(scale=(24, 36)), Augment(crop="resized", area=(0.3, 1.0))])
def test_a_training_clip_is_the_window_its_generator_draws(rows, augment):
    data = dataset(rows, augment=augment, return_index=True)
    order = data._order(0)
    clips, labels, indices = data.get_batch(1, 0)
    for k, position in enumerate((2, 3)):
        assert indices[k] == order[position] and labels[k] == rows[indices[k]][1]
        expected = expected_clip(rows[indices[k]][0], 5, 0, position, augment)
        np.testing.assert_array_equal(clips[k], expected)


def test_transform_gets_the_generator_of_the_clips_place(rows):
    plain = dataset(rows)
    noisy = dataset(rows, transform=add_noise)
    clips, _ = plain.get_batch(0, 3)
    noisy_clips, _ = noisy.get_batch(0, 3)
    for position in range(2):
        noise = transform_rng(5, 3, position).integers(0, 3, dtype=np.uint8)
        np.testing.assert_array_equal(noisy_clips[position], clips[position] + noise)


def test_a_transform_that_changes_the_shape_is_named(rows):
    data = dataset(rows, transform=lambda clip, rng: clip[:, :8])
    with pytest.raises(ValueError, match=r"transform must return a clip of the shape it was given, \(4, 24, 24, 3\)"):
        data.get_batch(0, 0)


def test_a_transform_result_that_would_change_kind_is_refused(rows):
    data = dataset(rows, transform=lambda clip, rng: clip * 0.5)  # float64 into uint8 clips
    with pytest.raises(TypeError, match="same_kind"):
        data.get_batch(0, 0)


def test_a_batch_transform_must_return_clips_and_labels(rows):
    data = dataset(rows, batch_transform=lambda clips, labels, rng: clips)
    with pytest.raises(ValueError, match=r"batch_transform must return \(clips, labels\), got ndarray"):
        data.get_batch(0, 0)


def test_one_hot_labels_with_smoothing(rows):
    data = dataset(rows, train=False, labels="one_hot", label_smoothing=0.2, return_index=True)
    _, labels, indices = data.get_batch(1, 0)
    assert labels.dtype == np.float32 and labels.shape == (2, 2)
    np.testing.assert_allclose(labels, [[0.9, 0.1], [0.1, 0.9]])
    np.testing.assert_array_equal(indices, [2, 3])


def test_evaluation_views_carry_their_videos_index(rows):
    data = dataset(rows, train=False, num_clips=3, num_crops=3, augment=Augment(scale=(24, 30)), return_index=True)
    clips, labels, indices = data.get_batch(0, 0)
    assert clips.shape == (2, 9, 4, 24, 24, 3) and labels.tolist() == [0, 1]
    np.testing.assert_array_equal(indices, [0, 1])
    assert [video_id(clip) for clip in clips] == [0, 1]
    # Three clips spread over the 12 frames; three crops along the width of the 24x30 frame.
    assert [frame_indices(clips[0, j * 3])[0] for j in range(3)] == [1, 4, 6]
    full = read_clip(rows[0][0], 4, 4, size=(24, 30))
    np.testing.assert_array_equal(clips[0, 5], full[:, :, 6:])


def test_mixup_mixes_clips_and_labels_by_the_batchs_generator(rows):
    mixup = Mixup(0.4)
    plain = dataset(rows, labels="one_hot")
    mixed = dataset(rows, labels="one_hot", batch_transform=mixup)
    clips, labels = plain.get_batch(1, 2)
    mixed_clips, mixed_labels = mixed.get_batch(1, 2)
    rng = batch_rng(5, 2, 1)
    weight, partner = rng.beta(0.4, 0.4), rng.permutation(2)
    expected = np.rint(weight * clips.astype(np.float32) + np.float32(1 - weight) * clips[partner])
    np.testing.assert_array_equal(mixed_clips, expected.astype(np.uint8))
    np.testing.assert_allclose(mixed_labels, weight * labels + (1 - weight) * labels[partner], rtol=1e-6)
    np.testing.assert_allclose(mixed_labels.sum(axis=1), 1.0, rtol=1e-6)


def test_cutmix_pastes_one_box_and_weighs_labels_by_its_area():
    clips = np.zeros((4, 3, 20, 30, 3), np.float32)
    clips[:] = np.arange(4, dtype=np.float32)[:, None, None, None, None]
    labels = np.eye(4, dtype=np.float32)
    for k in range(20):
        mixed, mixed_labels = CutMix(1.0)(clips, labels, np.random.default_rng(k))
        assert (mixed == mixed[:, :1]).all(), "the same box in every frame"
        box = (mixed[:, 0, :, :, 0] != clips[:, 0, :, :, 0]).any(axis=0)
        rows_in, cols_in = box.any(axis=1), box.any(axis=0)
        assert box.sum() == rows_in.sum() * cols_in.sum(), "one rectangle"
        area = box.sum() / (20 * 30)
        for i in range(4):
            partner = int(mixed[i, 0][box][0, 0]) if area else i  # clip i holds the value i
            np.testing.assert_allclose(mixed_labels[i], (1 - area) * labels[i] + area * labels[partner], atol=1e-6)
    with pytest.raises(ValueError, match="pass labels='one_hot'"):
        CutMix(1.0)(clips, np.arange(4), np.random.default_rng(0))


def test_augmented_batches_are_the_same_whatever_the_thread_or_process_count(rows):
    data = dataset(
        rows,
        augment=Augment(scale=(24, 32)),
        transform=add_noise,
        batch_transform=CutMix(1.0),
        labels="one_hot",
        label_smoothing=0.1,
        return_index=True,
    )
    copy = pickle.loads(pickle.dumps(data))
    runs = []
    for threads, processes, source in ((1, {}, data), (3, {}, copy), (2, {"processes": 1}, data)):
        with DataLoader(source, num_threads=threads, seed=1, ordered=True, name=f"aug{threads}", **processes) as loader:
            runs.append([batch for _ in range(2) for batch in loader])
    assert len(runs[0]) == 4
    for run in runs[1:]:
        for one, other in zip(runs[0], run, strict=True):
            for a, b in zip(one, other, strict=True):
                np.testing.assert_array_equal(a, b)


def test_a_resumed_epoch_gives_the_augmented_batches_it_would_have(rows):
    data = dataset(rows, augment=Augment(crop="resized"), batch_transform=Mixup(0.4), labels="one_hot")
    with DataLoader(data, num_threads=2, seed=1, ordered=True, name="whole") as loader:
        whole = list(loader)
    rest = resumed_rest(data)
    assert len(whole) == 2 and len(rest) == 1
    for a, b in zip(whole[1], rest[0], strict=True):
        np.testing.assert_array_equal(a, b)
