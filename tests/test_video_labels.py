"""Several labels a sample: rows of tuple labels, per-head label arrays, one-hot, smoothing and mixing per head.

A verb and a noun a sample is the case throughout: batches carry ``(clips, (verbs, nouns))``.
Every random choice comes from the dataset's seed, so the mixing tests recompute the draw.
"""

from __future__ import annotations

import numpy as np
import pytest

from parallel_loader import DataLoader
from parallel_loader.video import AnnotationError, CutMix, Mixup, VideoDataset, sample_list, table_samples
from parallel_loader.video._datasets.seeds import batch_rng
from tests.helpers import resumed_rest
from tests.video_files import video_id, write_video

FRAMES, VIDEOS = 8, 6
VERBS, NOUNS = ["cut", "open"], ["door", "knife", "pan"]


@pytest.fixture(scope="module")
def rows(tmp_path_factory) -> list[tuple[str, tuple[int, int]]]:
    """Six lossless 32x40 videos of 8 frames; video v has verb v % 2 and noun v % 3."""
    root = tmp_path_factory.mktemp("labels")
    return [(str(write_video(root / f"v{v}.avi", FRAMES, video_id=v)), (v % 2, v % 3)) for v in range(VIDEOS)]


def dataset(rows, **kwargs) -> VideoDataset:
    options = {"batch_size": 3, "clip_len": 2, "size": (16, 16), "seed": 5, "dtype": "uint8", **kwargs}
    return VideoDataset(rows, classes=(VERBS, NOUNS), **options)


def assert_batches_equal(one, other) -> None:
    """Batches, or lists of them (nested tuples of arrays), equal array by array."""
    assert type(one) is type(other)
    if isinstance(one, tuple | list):
        assert len(one) == len(other)
        for a, b in zip(one, other, strict=True):
            assert_batches_equal(a, b)
    else:
        np.testing.assert_array_equal(one, other)


def test_two_label_rows_give_a_label_array_a_head(rows):
    data = dataset(rows, train=False, return_index=True)
    assert data.heads == 2 and data.classes == (VERBS, NOUNS)
    clips, (verbs, nouns), indices = data.get_batch(1, 0)
    assert [video_id(clip) for clip in clips] == [3, 4, 5] and indices.tolist() == [3, 4, 5]
    assert verbs.dtype == nouns.dtype == np.int64 and verbs.shape == nouns.shape == (3,)
    assert verbs.tolist() == [1, 0, 1] and nouns.tolist() == [0, 1, 2]
    # In training, each clip's labels are its own video's, whatever the order drawn.
    clips, (verbs, nouns) = dataset(rows).get_batch(0, 3)
    assert [(v % 2, v % 3) for v in map(video_id, clips)] == list(zip(verbs.tolist(), nouns.tolist(), strict=True))


def test_names_a_head_label_as_rows_and_segments_name_them(rows):
    named = [(path, (VERBS[verb], NOUNS[noun]), 0.0, None) for path, (verb, noun) in rows]
    data = VideoDataset(named, 6, 2, size=(16, 16), train=False, dtype="uint8")
    assert data.classes == (sorted(VERBS), sorted(NOUNS))
    _, (verbs, nouns) = data.get_batch(0, 0)
    assert verbs.tolist() == [v % 2 for v in range(VIDEOS)] and nouns.tolist() == [v % 3 for v in range(VIDEOS)]


def test_one_label_rows_keep_one_label_array(rows):
    data = VideoDataset([(path, verb) for path, (verb, _) in rows], 3, 2, size=(16, 16), train=False)
    _, labels = data.get_batch(0, 0)
    assert data.heads == 1 and data.classes == ["0", "1"]
    assert isinstance(labels, np.ndarray) and labels.tolist() == [0, 1, 0]


def test_one_hot_labels_are_smoothed_per_head(rows):
    data = dataset(rows, train=False, labels="one_hot", label_smoothing=0.3)
    _, (verbs, nouns) = data.get_batch(0, 0)
    assert verbs.dtype == nouns.dtype == np.float32 and verbs.shape == (3, 2) and nouns.shape == (3, 3)
    # Each head spreads 0.3 over its own classes: 0.15 a verb, 0.1 a noun.
    np.testing.assert_allclose(verbs, [[0.85, 0.15], [0.15, 0.85], [0.85, 0.15]], rtol=1e-6)
    np.testing.assert_allclose(nouns, [[0.8, 0.1, 0.1], [0.1, 0.8, 0.1], [0.1, 0.1, 0.8]], rtol=1e-6)


def test_mixup_mixes_each_head_with_one_draw_and_each_row_sums_to_1(rows):
    plain = dataset(rows, labels="one_hot")
    mixed = dataset(rows, labels="one_hot", batch_transform=Mixup(0.4))
    clips, (verbs, nouns) = plain.get_batch(1, 2)
    mixed_clips, (mixed_verbs, mixed_nouns) = mixed.get_batch(1, 2)
    rng = batch_rng(5, 2, 1)
    weight, partner = rng.beta(0.4, 0.4), rng.permutation(3)
    expected = np.rint(weight * clips.astype(np.float32) + np.float32(1 - weight) * clips[partner])
    np.testing.assert_array_equal(mixed_clips, expected.astype(np.uint8))
    np.testing.assert_allclose(mixed_verbs, weight * verbs + (1 - weight) * verbs[partner], rtol=1e-6)
    np.testing.assert_allclose(mixed_nouns, weight * nouns + (1 - weight) * nouns[partner], rtol=1e-6)
    for head in (mixed_verbs, mixed_nouns):
        np.testing.assert_allclose(head.sum(axis=1), 1.0, rtol=1e-6)


def test_cutmix_mixes_each_head_by_the_same_box(rows):
    clips = np.random.default_rng(0).integers(0, 255, (4, 2, 20, 30, 3), dtype=np.uint8)
    verbs, nouns = np.eye(4, 2, dtype=np.float32), np.eye(4, 3, k=-1, dtype=np.float32)
    nouns[0, 2] = 1  # every row one-hot
    for k in range(10):
        mixed, (mixed_verbs, mixed_nouns) = CutMix(1.0)(clips, (verbs, nouns), np.random.default_rng(k))
        alone, alone_verbs = CutMix(1.0)(clips, verbs, np.random.default_rng(k))
        _, alone_nouns = CutMix(1.0)(clips, nouns, np.random.default_rng(k))
        np.testing.assert_array_equal(mixed, alone)
        np.testing.assert_array_equal(mixed_verbs, alone_verbs)
        np.testing.assert_array_equal(mixed_nouns, alone_nouns)
    with pytest.raises(ValueError, match=r"CutMix mixes one-hot labels .* got shape \(4,\)"):
        CutMix(1.0)(clips, (verbs, np.arange(4)), np.random.default_rng(0))
    data = dataset(rows, labels="one_hot", label_smoothing=0.1, batch_transform=CutMix(1.0))
    for index in range(len(data)):
        _, heads = data.get_batch(index, 0)
        assert [head.shape for head in heads] == [(3, 2), (3, 3)]
        for head in heads:
            np.testing.assert_allclose(head.sum(axis=1), 1.0, rtol=1e-6)


def test_a_worker_process_and_a_resume_give_the_same_two_label_batches(rows):
    data = dataset(rows, labels="one_hot", batch_transform=Mixup(0.4), return_index=True)
    runs = []
    for processes in ({}, {"processes": 1}):
        with DataLoader(data, num_threads=2, seed=1, ordered=True, name="heads", **processes) as loader:
            runs.append(list(loader))
    assert len(runs[0]) == 2
    assert_batches_equal(runs[0], runs[1])
    rest = resumed_rest(data)
    assert len(rest) == 1
    assert_batches_equal(rest[0], runs[0][1])


def test_a_table_of_two_label_columns_gives_two_label_arrays(rows, tmp_path):
    table = tmp_path / "t.csv"
    lines = ["path,verb,noun", *(f"{path},{VERBS[verb]},{NOUNS[noun]}" for path, (verb, noun) in rows)]
    table.write_text("\n".join(lines) + "\n")
    samples = table_samples(table, label=("verb", "noun"))
    data = VideoDataset(samples, 6, 2, size=(16, 16), train=False, labels="one_hot")
    _, (verbs, nouns) = data.get_batch(0, 0)
    assert data.classes == (VERBS, NOUNS) and verbs.shape == (6, 2) and nouns.shape == (6, 3)
    np.testing.assert_array_equal(verbs.argmax(axis=1), [v % 2 for v in range(VIDEOS)])
    np.testing.assert_array_equal(nouns.argmax(axis=1), [v % 3 for v in range(VIDEOS)])


def test_balanced_weights_balance_the_first_head(rows):
    # Verbs 9:1 (video 0 is the only "open"). Balanced by nouns instead (9 "door", 1 "knife"), "open" would get 6%.
    paths = [path for path, _ in rows]
    listed = [(paths[0], (1, 0))] + [(paths[k % 5 + 1], (0, int(k == 8))) for k in range(9)]
    data = dataset(listed, batch_size=50, clip_len=1, weights="balanced", samples_per_epoch=400)
    verbs = np.concatenate([data.get_batch(index, 0)[1][0] for index in range(len(data))])
    assert len(verbs) == 400 and 0.4 <= verbs.mean() <= 0.6


@pytest.mark.parametrize(
    ("labels", "classes", "error", "match"),
    [
        ([(0, 1), 1], None, AnnotationError, r"sample 1: expected a tuple of 2 labels as sample 0 has"),
        ([(0, 1), (0, 1, 2)], None, AnnotationError, r"sample 1: expected a tuple of 2 labels"),
        ([(0,), (1,)], None, AnnotationError, "a tuple of labels needs two or more"),
        ([(0, 1), (1, 0)], ["a", "b"], ValueError, "need classes as 2 lists of class names, one a head"),
        ([(0, "door"), (1, "pan")], (VERBS, ["door"]), AnnotationError, r"sample 1, head 1: unknown class 'pan'"),
        ([(0, "door"), (1, 2)], None, AnnotationError, "labels of head 1 must be all ints"),
    ],
)
def test_tuple_labels_must_agree_and_name_known_classes(labels, classes, error, match):
    with pytest.raises(error, match=match):
        sample_list([(f"v{i}.avi", label) for i, label in enumerate(labels)], classes)


def test_keras_fits_a_two_output_model_on_two_label_batches(rows):
    import keras

    from parallel_loader import as_tf_dataset

    keras.utils.set_random_seed(0)
    clips = keras.Input((2, 16, 16, 3))
    features = keras.layers.GlobalAveragePooling3D()(clips)
    outputs = [keras.layers.Dense(2, name="verb")(features), keras.layers.Dense(3, name="noun")(features)]
    model = keras.Model(clips, outputs)
    loss = keras.losses.CategoricalCrossentropy(from_logits=True)
    model.compile(keras.optimizers.Adam(0.01), loss=[loss, loss])
    data = dataset(rows, dtype="float32", labels="one_hot", batch_transform=Mixup(0.4))
    with as_tf_dataset(data, num_threads=2, name="two_heads") as tf_data:
        assert [spec.shape.as_list() for spec in tf_data.element_spec[1]] == [[None, 2], [None, 3]]
        history = model.fit(tf_data, epochs=2, verbose=0, shuffle=False)  # the loader shuffles
    assert len(history.history["loss"]) == 2 and np.isfinite(history.history["loss"]).all()
    assert {"verb_loss", "noun_loss"} <= history.history.keys()
