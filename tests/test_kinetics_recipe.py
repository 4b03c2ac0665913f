"""examples/kinetics_recipe.py on a small sample set: it runs end to end, and its batches ignore the thread count."""

from __future__ import annotations

import math

import numpy as np
import pytest

from parallel_loader import DataLoader
from parallel_loader.sample_data import make_sample_data
from tests.helpers import load_example

# Small frames and few videos, so that the whole recipe runs in seconds.
SMALL = ["--scale", "36", "44", "--crop", "32", "--batch-size", "2", "--threads", "2"]


@pytest.fixture(scope="module")
def recipe():
    return load_example("kinetics_recipe")


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    """Two classes of two training videos and one validation video each."""
    root = tmp_path_factory.mktemp("kinetics")
    make_sample_data(root, classes=2, per_class=3, val_fraction=0.34)
    return root


def test_the_recipes_batches_are_the_same_whatever_the_thread_count(recipe, data):
    args = recipe.parse_args(["--data", str(data), *SMALL])
    runs = []
    for threads in (1, 3):
        train, _ = recipe.datasets(args)
        with DataLoader(train, num_threads=threads, seed=0, ordered=True, name=f"recipe{threads}") as loader:
            runs.append(list(loader))
    assert len(runs[0]) == 2
    for (clips, labels), (other_clips, other_labels) in zip(*runs, strict=True):
        assert clips.shape == (2, 16, 32, 32, 3) and labels.shape == (2, 2)
        np.testing.assert_array_equal(clips, other_clips)
        np.testing.assert_array_equal(labels, other_labels)
        np.testing.assert_allclose(labels.sum(axis=1), 1.0, rtol=1e-6)
    assert ((runs[0][0][1] > 0.05) & (runs[0][0][1] < 0.95)).any(), "mixup mixed the smoothed labels"


def test_the_recipe_trains_and_scores_each_video_from_its_nine_views(recipe, data, capsys):
    result = recipe.main(["--data", str(data), "--epochs", "1", *SMALL])
    assert result["videos"] == 2 and 0 <= result["accuracy"] <= 1
    assert math.isfinite(result["first_loss"]) and math.isfinite(result["last_loss"])
    assert "2 videos, 9 views each: video accuracy" in capsys.readouterr().out
